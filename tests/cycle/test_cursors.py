"""Every view kept through the change log equals the same view worked out afresh, after every
burst of changes: one change (the one-row paths, and a cursor read a step stale), a few (the
log-slice answer), more than the cut-off (the vector answer), with undo among them.

Each view is checked against its own from-scratch counterpart: evaluations (predicates, fit,
scores and fit errors) against the direct rule, the shared free view and its device rooms
against a new build, nodeorder's columns, the GPU view cache, gpu-clustering's counts,
network-topology's totals and the gang ground against the session's arrays. Allocate's queue
verdicts and the failed-placement reuse keyed by the occupancy's fingerprint are checked by
the decisions they lead to, and a continued log by the evaluations carried into the next
cycle. ``tools/mutate_cursors.py`` runs these first.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import gangsched as gs
from gangsched.actions._gang_placement import _ground, place_job
from gangsched.placement import GreedyPlacer
from gangsched.plugins._gpu_common import ViewCache, _view
from gangsched.plugins.nodeorder import _Columns
from gangsched.scheduler import open_session, run_cycle
from gangsched.session.core import Session
from gangsched.session.evaluation import Evaluator
from gangsched.session.fit import FullView, device_free, node_free, resource_fit
from gangsched.session.statement import Statement
from gangsched.session.task_states import TaskState

#: Changes between two reads: one (stale by one step shows), a few, more than the cut-off (16).
BURSTS = (1, 1, 2, 1, 3, 20, 1, 5, 1, 1, 24, 1)

CONFIG = gs.Config.from_dict(
    {
        "actions": ["enqueue", "allocate", "backfill"],
        "tiers": [
            [{"name": "priority"}, {"name": "gang"}],
            [
                {"name": "predicates"},
                {"name": "nodeorder"},
                # weight 0: their scores read more than the node row (not what evaluations
                # refresh); their views are checked directly
                {"name": "gpu-clustering", "arguments": {"weight": 0}},
                {"name": "network-topology-aware", "arguments": {"weight": 0}},
            ],
        ],
    }
)


def _cluster(seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    nodes = []
    for i in range(12):
        node: dict[str, Any] = {
            "name": f"n{i}",
            "allocatable": {"cpu": int(rng.integers(8, 33)), "memory": "64Gi"},
        }
        if i % 4:
            node["gpus"] = {"count": int(rng.integers(2, 9)), "sharing": bool(i % 3 == 0)}
        nodes.append(node)
    jobs, tasks = [], []
    for j in range(14):
        jobs.append({"name": f"j{j}", "min_available": 1, "phase": "Inqueue"})
        for k in range(int(rng.integers(2, 6))):
            task: dict[str, Any] = {
                "name": f"j{j}-{k}",
                "job": f"j{j}",
                "request": {"cpu": int(rng.integers(1, 5)), "memory": "1Gi"},
            }
            if j % 2:
                milli = int(rng.choice([250, 500, 1000]))
                count = 1 if milli < 1000 else int(rng.integers(1, 3))
                task["gpu_request"] = {"count": count, "milli": milli}
            tasks.append(task)
    hypernodes = [
        {"name": f"r{r}", "tier": 1, "members": [f"n{i}" for i in range(4 * r, 4 * r + 4)]}
        for r in range(3)
    ]
    return {
        "nodes": nodes,
        "hypernodes": hypernodes,
        "queues": [{"name": "default"}],
        "jobs": jobs,
        "tasks": tasks,
    }


class _Changes:
    """Changes made through statements, at random: placements and reservations committed or
    discarded, evictions of what was placed."""

    def __init__(self, ssn: Session, seed: int) -> None:
        self.ssn = ssn
        self.rng = np.random.default_rng(seed)

    def burst(self, size: int) -> int:
        """About ``size`` log entries (fewer when nothing more can change); how many."""
        ssn = self.ssn
        start = ssn.changes.end
        while ssn.changes.end - start < size:
            if not self._one(size - (ssn.changes.end - start)):
                break
        return ssn.changes.end - start

    def _one(self, room: int) -> bool:
        ssn, rng = self.ssn, self.rng
        placed = np.flatnonzero(ssn.task_state == TaskState.ALLOCATED)
        if placed.size and rng.random() < 0.3:
            stmt = Statement(ssn)
            stmt.evict(int(rng.choice(placed)), "test")
            stmt.commit()
            return True
        pending = np.flatnonzero(ssn.task_state == TaskState.PENDING)
        rng.shuffle(pending)
        for t in pending.tolist():
            tmpl = ssn.templates[int(ssn.template_of[t])]
            node, pipelined = ssn.best_node(tmpl)
            if node < 0:
                continue
            stmt = Statement(ssn)
            gpus = ssn.choose_gpus(t, node, future=pipelined)
            (stmt.pipeline if pipelined else stmt.allocate)(t, node, gpus)
            if room >= 2 and rng.random() < 0.25:
                stmt.discard()  # two entries: the placement and its undo
            else:
                stmt.commit()
            return True
        return False


def _check_evaluations(ssn: Session) -> None:
    rows = np.arange(ssn.arrays.n_nodes, dtype=np.intp)
    fresh = Evaluator(ssn)
    for tmpl in ssn.templates:
        ev = ssn.evaluate(tmpl)
        ok = ssn.points.predicate_ok(tmpl, rows)
        fit_idle, fit_future = resource_fit(ssn, tmpl, rows)
        score = ssn.points.node_score(tmpl, rows)
        assert np.array_equal(ev.ok, ok), tmpl.index
        assert np.array_equal(ev.fit_idle, fit_idle), tmpl.index
        assert np.array_equal(ev.fit_future, fit_future), tmpl.index
        assert np.array_equal(ev.score, score), tmpl.index
        assert np.array_equal(ev.best_idle, np.where(ok & fit_idle, score, -np.inf))
        assert np.array_equal(ev.best_future, np.where(ok & fit_future, score, -np.inf))
        assert ssn.fit_error(tmpl) == fresh.fit_error(tmpl), tmpl.index


def _check_full_view(ssn: Session) -> None:
    kept = ssn.evaluator._view()
    new = FullView.build(ssn, ssn.changes)
    for name in ("free", "later"):
        assert np.array_equal(getattr(kept, name), getattr(new, name)), name
    for name in ("dev_free", "dev_later"):  # padding slots never count: they hold anything
        real = new.real
        assert np.array_equal(
            np.where(real, getattr(kept, name), 0), np.where(real, getattr(new, name), 0)
        )
    for milli in sorted({t.gpu_milli for t in ssn.templates if t.gpu_count}):
        for a, b in zip(kept.room(ssn.arrays, milli), new.room(ssn.arrays, milli), strict=True):
            assert np.array_equal(a, b), milli


def _check_plugins(ssn: Session, cache: ViewCache) -> None:
    order = ssn.plugin("nodeorder")
    assert order is not None
    cols = order._columns(ssn)
    new = _Columns.build(ssn)
    for name in ("use", "nz_use", "idle", "gpu_use"):
        assert np.array_equal(getattr(cols, name), getattr(new, name)), name
    clustering = ssn.plugin("gpu-clustering")
    assert clustering is not None
    counts = clustering.affinity(ssn).copy()
    recount = type(clustering)({})
    recount.on_session_open(ssn)
    assert np.array_equal(counts, recount.affinity(ssn))
    topology = ssn.plugin("network-topology-aware")
    assert topology is not None
    topology._totals(ssn)
    fresh_topology = type(topology)({})
    fresh_topology._totals(ssn)
    for a, b in zip(topology._used, fresh_topology._used, strict=True):
        assert np.array_equal(a, b)
    cache.sync_rows(ssn)
    everything = _view(ssn, np.arange(ssn.arrays.n_nodes, dtype=np.intp))
    assert cache._all is not None
    for name in ("free_cpu", "free_mem", "gpu_free"):
        assert np.array_equal(getattr(cache._all, name), getattr(everything, name)), name


def _check_ground(ssn: Session) -> None:
    for future in (False, True):
        free, _ = _ground(ssn, future)
        assert np.array_equal(free, node_free(ssn, future=future))
        padded = _ground(ssn, future)[1]
        devices = np.maximum(device_free(ssn, future=future), 0)
        assert sorted(padded[padded > 0].tolist()) == sorted(devices[devices > 0].tolist())


@pytest.mark.parametrize("seed", range(4))
def test_every_view_equals_a_fresh_one_after_each_burst(seed: int) -> None:
    ssn = open_session(gs.Snapshot.from_dict(_cluster(seed)), CONFIG)
    cache = ViewCache()
    changes = _Changes(ssn, seed)
    _check_evaluations(ssn)
    _check_full_view(ssn)
    _check_plugins(ssn, cache)
    _check_ground(ssn)
    done = []
    for size in BURSTS:
        done.append(changes.burst(size))
        _check_ground(ssn)
        _check_full_view(ssn)
        _check_plugins(ssn, cache)
        _check_evaluations(ssn)
    # the three kinds of answer were all exercised: one entry, a few, beyond the cut-off
    assert done.count(1) >= 4 and any(1 < k <= 16 for k in done) and max(done) > 16, done


@pytest.mark.parametrize("seed", range(3))
def test_evaluations_carried_into_the_next_cycle_equal_fresh_ones(seed: int) -> None:
    """The next cycle continues the log: evaluations keep their cursors, and the nodes whose
    occupancy or record moved in between are re-read."""
    data = _cluster(seed)
    config = gs.Config.from_dict(
        {
            "actions": ["enqueue", "allocate", "backfill"],
            "tiers": [[{"name": "priority"}, {"name": "gang"}], [{"name": "nodeorder"}]],
        }
    )
    first = open_session(gs.Snapshot.from_dict(data), config)
    changes = _Changes(first, seed)
    for size in (3, 1, 2):
        changes.burst(size)
        for tmpl in first.templates:
            first.evaluate(tmpl)
            first.fit_error(tmpl)
    # The next cycle: two tasks end up running where the first cycle had nothing, one node
    # gets more CPU; the rest is as the first cycle left it... or as it began.
    nxt = dict(data)
    tasks = [dict(t) for t in data["tasks"]]
    free = [i for i, t in enumerate(tasks) if "gpu_request" not in t][:2]
    for i, node in zip(free, ("n1", "n6"), strict=True):
        tasks[i].update(phase="Running", node=node)
    nodes = [dict(n) for n in data["nodes"]]
    nodes[4] = {**nodes[4], "allocatable": {**nodes[4]["allocatable"], "cpu": 64}}
    nxt.update(tasks=tasks, nodes=nodes)
    second = open_session(gs.Snapshot.from_dict(nxt), config, previous=first)
    assert second.evaluator.carried > 0
    assert second.changes.lineage is first.changes.lineage
    _check_evaluations(second)
    again = _Changes(second, seed + 1)
    for size in (1, 2, 1):
        again.burst(size)
        _check_evaluations(second)


def _queue_cluster(hierarchy: bool) -> tuple[gs.Snapshot, gs.Config]:
    """Twelve one-CPU tasks of three jobs in a queue capped at three CPUs (an odd cap: a
    verdict read a step stale would hold across the placement that fills the queue)."""
    queues: list[dict[str, Any]] = [{"name": "root"}] if hierarchy else []
    capped: dict[str, Any] = {"name": "capped", "capability": {"cpu": 3}}
    if hierarchy:
        capped["parent"] = "root"
    queues.append(capped)
    snap = gs.Snapshot.from_dict(
        {
            "nodes": [{"name": f"n{i}", "allocatable": {"cpu": 8}} for i in range(3)],
            "queues": queues,
            "jobs": [
                {"name": f"j{j}", "queue": "capped", "min_available": 1, "phase": "Inqueue"}
                for j in range(3)
            ],
            "tasks": [
                {"name": f"j{j}-{k}", "job": f"j{j}", "request": {"cpu": 1}}
                for j in range(3)
                for k in range(4)
            ],
        }
    )
    config = gs.Config.from_dict(
        {
            "actions": ["allocate"],
            "tiers": [
                [{"name": "priority"}, {"name": "gang"}],
                [{"name": "capacity", "enableHierarchy": hierarchy}, {"name": "predicates"}],
            ],
        }
    )
    return snap, config


@pytest.mark.parametrize("hierarchy", [False, True])
def test_a_queue_verdict_moves_with_the_queue_allocation(hierarchy: bool) -> None:
    """Three tasks fill the queue; the verdict "it takes a task of this request" must not
    outlive the placement that filled it: no task is proposed past the capability (the gate
    would refuse it) and every waiting task is told why by the queue."""
    snap, config = _queue_cluster(hierarchy)
    d, ssn = run_cycle(snap, config)
    assert len(d.binds) == 3
    assert ssn.refusals == []
    placed = {b.task for b in d.binds}
    waiting = [t for t in range(len(snap.tasks)) if snap.tasks[t].name not in placed]
    assert len(waiting) == 9
    assert all("queue 'capped' cannot take" in ssn.task_reasons[t] for t in waiting)


def test_a_failed_gang_is_tried_again_once_the_occupancy_moved() -> None:
    snap = gs.Snapshot.from_dict(
        {
            "nodes": [{"name": f"n{i}", "allocatable": {"cpu": 8}} for i in range(2)],
            "queues": [{"name": "default"}],
            "jobs": [
                {"name": "a", "min_available": 1, "phase": "Inqueue"},
                {"name": "b", "min_available": 2, "phase": "Inqueue"},
            ],
            "tasks": [
                {"name": "a-0", "job": "a", "request": {"cpu": 8}},
                {"name": "b-0", "job": "b", "request": {"cpu": 8}},
                {"name": "b-1", "job": "b", "request": {"cpu": 8}},
            ],
        }
    )
    ssn = open_session(snap)
    placer = GreedyPlacer()
    b = 1
    tasks = ssn.job_tasks(b).tolist()
    stmt = Statement(ssn)
    stmt.allocate(0, 0, ())
    assert isinstance(place_job(ssn, b, tasks, placer), str)  # one node left: no room
    stmt.discard()
    placed = place_job(ssn, b, tasks, placer)
    assert not isinstance(placed, str) and len(placed) == 2


def test_a_cursor_from_before_a_node_set_change_is_not_valid_for_the_nodes() -> None:
    """A log continued over a change of the node set keeps the jobs and queues going and the
    node rows its own; a log continuing that one still refuses node questions for a cursor
    taken before the renumbering, and still answers job questions for it."""
    from gangsched.session.changes import ChangeLog

    first = ChangeLog(3, 1, 2)
    first.note(1, 0, 0)
    before = first.end  # the cursor a view of the first session keeps
    first.note(2, 1, 0)
    renumbered = ChangeLog(4, 1, 2)
    assert renumbered.continue_over_rows(first, jobs=[0, -1], queues=[-1])
    lineage = first.lineage
    assert renumbered.lineage is lineage
    assert not renumbered.knows(lineage, before) and not renumbered.knows(lineage, first.end)
    assert renumbered.knows_jobs(lineage, before)
    assert renumbered.jobs_since(before).tolist() == [1]  # job 0 kept its position
    assert renumbered.nodes_since(first.end).tolist() == [0, 1, 2, 3]
    mark = renumbered.end
    renumbered.note(3, 0, 0)
    assert renumbered.knows(lineage, mark) and renumbered.nodes_since(mark).tolist() == [3]
    # the next session on the same nodes: the renumbering is still where it was
    after = ChangeLog(4, 1, 2)
    none = np.zeros(4, dtype=np.bool_)
    assert after.continue_from(renumbered, none, none, taints=False, jobs=[0, 1], queues=[0])
    assert not after.knows(lineage, before)
    assert after.knows(lineage, mark) and after.knows_jobs(lineage, before)
    assert after.nodes_since(mark).tolist() == [3]


DRF_CONFIG = gs.Config.from_dict(
    {
        "actions": ["enqueue", "allocate", "preempt", "backfill"],
        "tiers": [
            [{"name": "priority"}, {"name": "gang"}],
            [{"name": "drf"}, {"name": "predicates"}, {"name": "proportion"}],
        ],
    }
)


@pytest.mark.parametrize("seed", range(3))
def test_the_victim_keys_kept_across_searches_are_the_keys_read_afresh(seed: int) -> None:
    """The victim search keeps victim keys across searches (drf's key reads its job's share)
    and drops those of jobs and queues the log names since: after every burst, each key still
    kept is the key read afresh — one change (a cursor read a step stale misses it), a few,
    more than the cut-off."""
    from gangsched.actions.victims.search import _Charges

    cluster = _cluster(seed)
    cluster["queues"] = [{"name": f"q{q}"} for q in range(4)]
    for j, job in enumerate(cluster["jobs"]):
        job["queue"] = f"q{j % 4}"
    ssn = open_session(gs.Snapshot.from_dict(cluster), DRF_CONFIG)
    assert ssn.points.victim_order_by_job_and_queue()
    changes = _Changes(ssn, seed)
    changes.burst(30)
    charges = _Charges.of(ssn)
    checked = 0
    for size in BURSTS:
        keys = charges.victim_keys(ssn)
        for t in np.flatnonzero(ssn.task_state == TaskState.ALLOCATED).tolist():
            keys.setdefault(t, ssn.victim_key(t))  # what a search reads and keeps
        changes.burst(size)
        kept = charges.victim_keys(ssn)
        for t, key in kept.items():
            assert key == ssn.victim_key(t), (t, key, ssn.victim_key(t))
            checked += 1
    assert checked > 50


def test_a_victim_key_is_dropped_when_its_job_moved_though_its_queue_did_not() -> None:
    """One job's task evicted, then another job of the same queue placed with the same
    request: the queue's allocation is back where it was, so only the log's list of jobs tells
    that the first job's share (drf's victim key) moved — the first of the two entries."""
    from gangsched.actions.victims.search import _Charges

    def task(name: str, job: str, running: bool) -> dict[str, Any]:
        out: dict[str, Any] = {"name": name, "job": job, "request": {"cpu": 1, "memory": "1Gi"}}
        return out | ({"phase": "Running", "node": "n0"} if running else {})

    snap = gs.Snapshot.from_dict(
        {
            "nodes": [{"name": "n0", "allocatable": {"cpu": 16, "memory": "64Gi"}}],
            "queues": [{"name": "q0"}],
            "jobs": [
                {"name": "A", "queue": "q0", "min_available": 1, "phase": "Running"},
                {"name": "B", "queue": "q0", "min_available": 1, "phase": "Inqueue"},
            ],
            "tasks": [task("a0", "A", True), task("a1", "A", True), task("b0", "B", False)],
        }
    )
    ssn = open_session(snap, DRF_CONFIG)
    charges = _Charges.of(ssn)
    charges.victim_keys(ssn)[1] = ssn.victim_key(1)
    queue_before = ssn.queue_allocated.copy()
    stmt = Statement(ssn)
    stmt.evict(0, "test")
    stmt.allocate(2, 0, ())
    stmt.commit()
    assert np.array_equal(ssn.queue_allocated, queue_before)
    kept = charges.victim_keys(ssn)
    assert all(key == ssn.victim_key(t) for t, key in kept.items()), kept
