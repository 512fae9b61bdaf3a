"""drf: jobs by dominant share; hierarchical DRF between queues of a tree."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from gangsched.config import Config
from gangsched.model.snapshot import Snapshot
from gangsched.scheduler import open_session, schedule
from gangsched.session.statement import Statement

Obj = dict[str, object]


def cycle(hierarchy: bool) -> Config:
    return Config.from_dict(
        {
            "actions": ["allocate"],
            "tiers": [
                [{"name": "gang"}],
                [{"name": "drf", "enableHierarchy": hierarchy}, {"name": "predicates"}],
            ],
        }
    )


def rescaling(eng_weight: int) -> Snapshot:
    """sci asks cpu + memory, eng's dev cpu only and prod memory only; one 10-core / 10Gi
    node, ten 1-unit tasks each (elastic jobs: one task is a gang)."""
    queues: list[Obj] = [
        {"name": "sci"},
        {"name": "eng", "weight": eng_weight},
        {"name": "dev", "parent": "eng"},
        {"name": "prod", "parent": "eng"},
    ]
    shapes: dict[str, dict[str, object]] = {
        "sci": {"cpu": 1, "memory": "1Gi"},
        "dev": {"cpu": 1},
        "prod": {"memory": "1Gi"},
    }
    jobs: list[Obj] = [{"name": f"{q}-job", "queue": q} for q in shapes]
    tasks: list[Obj] = [
        {"name": f"{q}-{i}", "job": f"{q}-job", "request": req}
        for q, req in shapes.items()
        for i in range(10)
    ]
    return Snapshot.from_dict(
        {
            "nodes": [{"name": "n", "allocatable": {"cpu": 10, "memory": "10Gi"}}],
            "queues": queues,
            "jobs": jobs,
            "tasks": tasks,
        }
    )


def per_queue(snap: Snapshot, config: Config) -> Counter[str]:
    d = schedule(snap, config)
    return Counter(snap.job(snap.task(b.task).job).queue for b in d.binds)


def test_hdrf_equal_weights_rescales_the_inner_queue() -> None:
    # eng's share is the smaller of dev's and prod's (each scaled to the modest one), so sci
    # and eng grow alike: sci 5 cores + 5Gi, dev 5 cores, prod 5Gi fill the node exactly.
    assert per_queue(rescaling(1), cycle(True)) == {"sci": 5, "dev": 5, "prod": 5}


def test_hdrf_weights_divide_the_dominant_share() -> None:
    # eng weight 2: eng's share may be twice sci's. With sci at k tasks and dev = prod = 2k,
    # cores run out at k + 2k = 10: k = 3, and dev and prod take the cores / memory left.
    assert per_queue(rescaling(2), cycle(True)) == {"sci": 3, "dev": 7, "prod": 7}


def test_without_hierarchy_drf_does_not_order_queues() -> None:
    snap = rescaling(1)
    ssn = open_session(snap, cycle(False))
    drf = ssn.plugin("drf")
    assert drf is not None and drf.queue_order(ssn, 0) == ()
    assert drf.hdrf_share(0) is None


def _running(name: str, queue: str, req: dict[str, object], n: int) -> tuple[Obj, list[Obj]]:
    job: Obj = {"name": name, "queue": queue, "phase": "Running"}
    tasks: list[Obj] = [
        {"name": f"{name}-{i}", "job": name, "request": req, "phase": "Running", "node": "n"}
        for i in range(n)
    ]
    return job, tasks


def _tree_snapshot(extra_pending: int = 1) -> Snapshot:
    queues: list[Obj] = [
        {"name": "sci"},
        {"name": "eng"},
        {"name": "dev", "parent": "eng"},
        {"name": "prod", "parent": "eng"},
    ]
    jobs: list[Obj] = []
    tasks: list[Obj] = []
    running: list[tuple[str, str, dict[str, object], int]] = [
        ("sci-run", "sci", {"cpu": 1, "memory": "1Gi"}, 2),
        ("dev-run", "dev", {"cpu": 1}, 4),
        ("prod-run", "prod", {"memory": "1Gi"}, 1),
    ]
    for name, queue, req, n in running:
        j, ts = _running(name, queue, req, n)
        jobs.append(j)
        tasks += ts
    for q in ("sci", "dev", "prod"):
        jobs.append({"name": f"{q}-new", "queue": q})
        tasks += [
            {"name": f"{q}-new-{i}", "job": f"{q}-new", "request": {"cpu": 1}}
            for i in range(extra_pending)
        ]
    return Snapshot.from_dict(
        {
            "nodes": [{"name": "n", "allocatable": {"cpu": 10, "memory": "10Gi"}}],
            "queues": queues,
            "jobs": jobs,
            "tasks": tasks,
        }
    )


def test_hdrf_tree_shares_by_hand() -> None:
    snap = _tree_snapshot()
    ssn = open_session(snap, cycle(True))
    drf = ssn.plugin("drf")
    assert drf is not None
    q = snap.queue_index
    # dev holds 4 cores (0.4), prod 1Gi (0.1): eng scales both to mdr = 0.1 → 1 core + 1Gi
    eng = drf.hdrf_share(q["eng"])
    assert eng is not None and eng[0] == pytest.approx(0.1) and not eng[1]
    # the running jobs hold all they asked for: saturated
    assert drf.hdrf_share(q["dev"]) == (pytest.approx(0.4), False)
    assert drf.hdrf_share(q["sci"]) == (pytest.approx(0.2), False)
    keys = {name: ssn.queue_key(q[name]) for name in ("sci", "dev", "prod")}
    # level 1: eng 0.1 < sci 0.2; level 2: prod 0.1 < dev 0.4
    assert keys["prod"] < keys["dev"] < keys["sci"]


def test_saturated_jobs_and_queues_go_last() -> None:
    # every sci job holds all it asks (no pending task): sci is saturated and goes after eng
    # although its share is the lowest
    queues: list[Obj] = [{"name": "sci"}, {"name": "eng"}]
    sci, sci_tasks = _running("sci-run", "sci", {"cpu": 1}, 1)
    eng, eng_tasks = _running("eng-run", "eng", {"cpu": 1}, 5)
    jobs: list[Obj] = [sci, eng, {"name": "eng-new", "queue": "eng"}]
    tasks = [*sci_tasks, *eng_tasks, {"name": "eng-new-0", "job": "eng-new", "request": {}}]
    snap = Snapshot.from_dict(
        {
            "nodes": [{"name": "n", "allocatable": {"cpu": 10, "memory": "10Gi"}}],
            "queues": queues,
            "jobs": jobs,
            "tasks": tasks,
        }
    )
    ssn = open_session(snap, cycle(True))
    drf = ssn.plugin("drf")
    assert drf is not None
    sci_state = drf.hdrf_share(snap.queue_index["sci"])
    eng_state = drf.hdrf_share(snap.queue_index["eng"])
    assert sci_state == (pytest.approx(0.1), True)
    assert eng_state is not None and not eng_state[1]
    assert ssn.queue_key(snap.queue_index["eng"]) < ssn.queue_key(snap.queue_index["sci"])


def test_a_fully_allocated_resource_saturates_its_demanders() -> None:
    # every core is handed out: a job holding cores and asking for more is saturated
    queues: list[Obj] = [{"name": "a"}, {"name": "b"}]
    a, a_tasks = _running("a-run", "a", {"cpu": 5}, 1)
    b, b_tasks = _running("b-run", "b", {"cpu": 5}, 1)
    jobs: list[Obj] = [a, b]
    pending: list[Obj] = [{"name": "a-run-more", "job": "a-run", "request": {"cpu": 1}}]
    snap = Snapshot.from_dict(
        {
            "nodes": [{"name": "n", "allocatable": {"cpu": 10, "memory": "10Gi"}}],
            "queues": queues,
            "jobs": jobs,
            "tasks": [*a_tasks, *b_tasks, *pending],
        }
    )
    ssn = open_session(snap, cycle(True))
    drf = ssn.plugin("drf")
    assert drf is not None
    assert drf.hdrf_share(snap.queue_index["a"]) == (pytest.approx(0.5), True)


def test_hdrf_events_are_reversible() -> None:
    snap = _tree_snapshot(extra_pending=3)
    ssn = open_session(snap, cycle(True))
    drf = ssn.plugin("drf")
    assert drf is not None
    tree = drf._tree
    before = (tree.alloc.copy(), tree.share.copy(), tree.saturated.copy())
    keys_before = [ssn.queue_key(q) for q in range(len(snap.queues))]
    stmt = Statement(ssn)
    for t in np.flatnonzero(ssn.task_state == 0)[:5]:
        tmpl = ssn.templates[int(ssn.template_of[t])]
        node, pipelined = ssn.best_node(tmpl)
        if node >= 0:
            stmt.allocate(int(t), node, ssn.choose_gpus(int(t), node, future=pipelined))
    assert not np.array_equal(tree.alloc, before[0])
    stmt.discard()
    # canonical units are integers: the undo is exact
    assert np.array_equal(tree.alloc, before[0])
    assert np.array_equal(tree.share, before[1])
    assert np.array_equal(tree.saturated, before[2])
    assert [ssn.queue_key(q) for q in range(len(snap.queues))] == keys_before


def test_job_order_by_dominant_share_tracks_allocations() -> None:
    queues: list[Obj] = [{"name": "q"}]
    big, big_tasks = _running("big", "q", {"cpu": 6}, 1)
    small, small_tasks = _running("small", "q", {"memory": "1Gi"}, 1)
    big_tasks.append({"name": "big-more", "job": "big", "request": {"cpu": 1}})
    small_tasks += [
        {"name": f"small-more-{i}", "job": "small", "request": {"memory": "1Gi"}} for i in range(8)
    ]
    snap = Snapshot.from_dict(
        {
            "nodes": [{"name": "n", "allocatable": {"cpu": 10, "memory": "10Gi"}}],
            "queues": queues,
            "jobs": [big, small],
            "tasks": [*big_tasks, *small_tasks],
        }
    )
    ssn = open_session(snap, cycle(False))
    drf = ssn.plugin("drf")
    assert drf is not None
    j_big, j_small = snap.job_index["big"], snap.job_index["small"]
    assert drf.share(ssn, j_big) == pytest.approx(0.6)
    assert drf.share(ssn, j_small) == pytest.approx(0.1)
    assert ssn.job_key(j_small) < ssn.job_key(j_big)
    d = schedule(snap, cycle(False))
    # small grows until its memory share (0.1 per task) passes big's 0.6, then big gets a turn
    order = [snap.task(b.task).job for b in d.binds]
    assert order[:6] == ["small"] * 5 + ["big"]
