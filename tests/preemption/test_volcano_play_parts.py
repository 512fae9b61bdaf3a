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
