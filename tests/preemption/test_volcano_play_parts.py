"""The short ways Volcano's preempt loop takes, each against the plain computation it stands
for, on the clusters of the room tests (random whole-GPU ones and openb ones with shared
GPUs): a node's validation in plain numbers, one sort of one key for the grouping by job,
node and victim order, a pool task's victim rank read when first asked, and each job's
nodes from one sort."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import gangsched as gs
from _volcano_clusters import CONFIG, clusters
from gangsched.actions.victims import search
from gangsched.actions.victims import volcano_play as vp
from gangsched.scheduler import open_session
from gangsched.session.core import TaskState

CLUSTERS = clusters()
IDS = [name for name, _ in CLUSTERS]
#: A cluster's name, a session opened on it and the loop's pool over it.
Opened = tuple[str, Any, Any]


@pytest.fixture(params=CLUSTERS, ids=IDS)
def opened(request: pytest.FixtureRequest) -> Opened:
    """A cluster's name, a session opened on it with the preemption configuration, and the
    loop's pool over it."""
    name, data = request.param
    ssn = open_session(gs.Snapshot.from_dict(data), CONFIG)
    return name, ssn, vp._Pool(ssn)


def _plays(ssn: Any, pool: Any, limit: int = 12) -> list[Any]:
    pending = np.flatnonzero(ssn.task_state == TaskState.PENDING).tolist()[:limit]
    return [
        vp._TaskPlay(ssn, "preempt", int(ssn.task_job[t]), t, pool, own_job=False) for t in pending
    ]


def test_one_nodes_validation_is_the_validation_of_every_node(opened: Opened) -> None:
    # _covers_one (plain numbers) answers as _covers (every node at once), for what every
    # candidate gives back, for nothing, for twice that, and for less than no room
    _, ssn, pool = opened
    nodes = np.arange(ssn.arrays.n_nodes, dtype=np.int64)
    answers = set()
    plays = _plays(ssn, pool)
    for play in plays:
        cands = play.candidates_on(nodes)
        every = play._freed(nodes, cands)
        later = play._room().later(nodes)
        for freed in (every, np.zeros_like(every), 2 * every, -later - 1):
            want = play._covers(nodes, freed, later)
            got = [play._covers_one(n, freed[n], later[n]) for n in range(nodes.size)]
            assert got == want.tolist()
            answers.update(got)
    assert answers == {True, False} or not plays  # (some clusters have no pending task)


def test_the_grouping_by_job_node_and_rank_is_the_three_key_sort(opened: Opened) -> None:
    name, ssn, pool = opened
    rng = np.random.default_rng(len(name))
    grouped = 0
    for _ in range(20):
        cands = np.sort(rng.choice(pool.tasks, size=min(pool.tasks.size, 30), replace=False))
        rank = pool.ranks(cands)
        c, j, place, at = vp._by_job_and_node(ssn, cands, rank)
        order = np.lexsort((rank[cands], ssn.task_node[cands], ssn.task_job[cands]))
        assert at.tolist() == order.tolist()
        assert c.tolist() == cands[order].tolist()
        assert j.tolist() == ssn.task_job[cands][order].tolist()
        key = list(zip(ssn.task_job[c].tolist(), ssn.task_node[c].tolist(), strict=True))
        want = [0 if i == 0 or key[i] != key[i - 1] else -1 for i in range(len(key))]
        for i, w in enumerate(want):  # each one's place: after the group's start
            want[i] = 0 if w == 0 else want[i - 1] + 1
        assert place.tolist() == want
        grouped += bool(max(want, default=0))
    assert grouped or not name.startswith("openb")  # openb jobs run several tasks a node


def test_a_victim_rank_read_when_first_asked_is_the_rank_read_for_all(opened: Opened) -> None:
    _, ssn, pool = opened
    assert pool._ranks is not None  # the package's own victim order
    rng = np.random.default_rng(3)
    for _ in range(5):
        some = np.sort(rng.choice(pool.tasks, size=pool.tasks.size // 3, replace=False))
        pool.ranks(some)
    got = pool.ranks(pool.tasks)[pool.tasks]
    want = search.job_ranks(ssn, pool.tasks)
    assert got.tolist() == want.tolist()


def test_each_jobs_nodes_are_the_nodes_of_its_pool_tasks(opened: Opened) -> None:
    _, ssn, pool = opened
    jobs = ssn.task_job[pool.tasks]
    for j in range(len(ssn.snapshot.jobs)):
        want = np.unique(ssn.task_node[pool.tasks[jobs == j]])
        assert pool.job_nodes(j).tolist() == want.tolist()


@pytest.mark.parametrize(("name", "data"), CLUSTERS, ids=IDS)
def test_scores_left_lagging_decide_as_scores_kept_current(
    name: str, data: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The loop reads a task's evaluation with its scores lagging on rows changed since and
    # scores them only when it reads one: the cycle decides as with every row scored.
    snap = gs.Snapshot.from_dict(data)
    lagging = gs.schedule(snap, CONFIG).to_dict()
    built = vp._Pool.__init__

    def current(self: Any, ssn: Any) -> None:
        built(self, ssn)
        self.scores_may_lag = False

    monkeypatch.setattr(vp._Pool, "__init__", current)
    assert gs.schedule(snap, CONFIG).to_dict() == lagging


class _JobProgressScore:
    """A scorer from elsewhere that reads the task's job: 1,000 × the node's row, the sign
    flipped while the job has an odd number of reserved tasks (a gang's progress)."""

    name = "job-progress"

    def __init__(self, arguments: Any) -> None:
        pass

    def node_score(self, ssn: Any, tmpl: Any, rows: Any) -> Any:
        reserved = int(ssn.job_count[int(tmpl.job), TaskState.PIPELINED])
        return (1000.0 if reserved % 2 == 0 else -1000.0) * np.asarray(rows, dtype=np.float64)


#: Rows n2 and n4 change (K and K2 evict and reserve there) before J's tasks are played, and J
#: reserves a task in between: the scorer answers for n2 otherwise once J has one reserved task.
def _job(name: str, priority: int, phase: str) -> dict[str, Any]:
    return {"name": name, "queue": "q0", "priority": priority, "phase": phase, "min_available": 1}


def _task(name: str, cpu: int, priority: int, node: str | None = None) -> dict[str, Any]:
    placed = {"phase": "Running", "node": node} if node else {}
    return {
        "name": name,
        "job": name.split("-")[0],
        "request": {"cpu": cpu, "memory": "1Gi"},
        "priority": priority,
        **placed,
    }


_PROGRESS_CLUSTER: dict[str, Any] = {
    "nodes": [
        {"name": "n0", "allocatable": {"cpu": 4, "memory": "64Gi"}},
        {"name": "n1", "allocatable": {"cpu": 4, "memory": "64Gi"}},
        {"name": "n2", "allocatable": {"cpu": 6, "memory": "64Gi"}},
        {"name": "n3", "allocatable": {"cpu": 4, "memory": "64Gi"}},
        {"name": "n4", "allocatable": {"cpu": 4, "memory": "64Gi"}},
        {"name": "n5", "allocatable": {"cpu": 4, "memory": "64Gi"}},
        {"name": "n6", "allocatable": {"cpu": 2, "memory": "64Gi"}},
    ],
    "queues": [{"name": "q0"}],
    "jobs": [
        _job("M", 10, "Running"),
        _job("L", 0, "Running"),
        _job("L3", 0, "Running"),
        _job("L4", 0, "Running"),
        _job("J", 6, "Running"),
        _job("K", 9, "Inqueue"),
        _job("K2", 8, "Inqueue"),
        _job("K3", 3, "Inqueue"),
        _job("L5", 0, "Running"),
    ],
    "tasks": [
        _task("M-0", 2, 0, node="n0"),
        _task("M-1", 2, 0, node="n0"),
        _task("J-r1", 2, 0, node="n1"),
        _task("M-2", 2, 0, node="n1"),
        _task("L-0", 2, 0, node="n2"),
        _task("L-1", 2, 0, node="n2"),
        _task("J-r0", 2, 0, node="n2"),
        _task("M-3", 2, 0, node="n3"),
        _task("M-4", 2, 0, node="n3"),
        _task("L3-0", 2, 0, node="n4"),
        _task("L3-1", 2, 0, node="n4"),
        _task("L4-0", 1, 0, node="n5"),
        _task("M-5", 3, 0, node="n5"),
        _task("K-0", 4, 0),
        _task("K2-0", 4, 0),
        _task("J-p0", 2, 3),
        _task("K3-0", 1, 0),
        _task("L5-0", 2, 0, node="n6"),
        _task("J-p1", 2, 3),
    ],
}


def test_a_scorer_from_elsewhere_is_asked_when_the_loop_reaches_the_task() -> None:
    # Scores lag only under the package's own scorers that read the node's row and the task's
    # shape alone: with this one, J-p1 goes where its score at its own play puts it (n2), as
    # when every row is scored at each task's start.
    registry = gs.default_registry()
    registry.register_plugin("job-progress", _JobProgressScore)
    yaml = """actions: "enqueue, allocate, preempt"
tiers:
- plugins:
  - name: priority
- plugins:
  - name: predicates
  - name: job-progress
"""
    config = gs.Config.from_volcano_yaml(yaml, plugins=registry.plugins)
    snap = gs.Snapshot.from_dict(_PROGRESS_CLUSTER)
    assert not vp._Pool(open_session(snap, config, registry=registry)).scores_may_lag
    assert vp._Pool(open_session(snap, CONFIG)).scores_may_lag
    d = gs.schedule(snap, config, registry=registry)
    assert ("J-p1", "n2") in {(p.task, p.node) for p in d.pipelined}
    assert sorted(e.task for e in d.evictions) == [
        "J-r0",
        "L-0",
        "L-1",
        "L3-0",
        "L3-1",
        "L4-0",
        "L5-0",
    ]


def test_scores_may_lag_only_under_the_packages_own_scorers_of_a_row_and_a_shape() -> None:
    # The flag both the preempt loop and the victim search read before leaving scores to lag.
    snap = gs.Snapshot.from_dict(_PROGRESS_CLUSTER)
    registry = gs.default_registry()
    registry.register_plugin("job-progress", _JobProgressScore)
    tiers = 'actions: "enqueue, allocate, preempt"\ntiers:\n- plugins:\n  - name: priority\n'

    def flag(*scorers: str) -> bool:
        yaml = tiers + "- plugins:\n" + "".join(f"  - name: {n}\n" for n in scorers)
        config = gs.Config.from_volcano_yaml(yaml, plugins=registry.plugins)
        return bool(open_session(snap, config, registry=registry).points.scores_may_lag)

    assert flag("predicates", "nodeorder", "binpack")
    assert not flag("predicates", "job-progress")
    assert not flag("predicates", "nodeorder", "network-topology-aware")  # reads more than a row
