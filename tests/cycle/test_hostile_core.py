"""Hostile inputs against the core: carried reservations, the one GPU rule, queue chains,
taints per node, per-device memory and the task cap.

Each test is named after the defect it guards; the cost tests bound wall time or memory of a
small input that used to be superlinear.
"""

from __future__ import annotations

import time
import tracemalloc
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _builders import gpu_node
from gangsched.decisions import Decisions
from gangsched.errors import SnapshotError
from gangsched.limits import Limits
from gangsched.model import Gpus, Job, Node, Queue, Taint, Task, Toleration
from gangsched.model.gpu_charge import device_take, exclusive
from gangsched.model.snapshot import Snapshot
from gangsched.scheduler import open_session, schedule
from gangsched.session.arrays import build_cluster_arrays
from gangsched.testing.invariants import check_all

GPU = "nvidia.com/gpu"


def _snap(nodes: list[dict[str, Any]], tasks: list[dict[str, Any]], **kw: Any) -> dict[str, Any]:
    jobs = sorted({t["job"] for t in tasks})
    return {
        "nodes": nodes,
        "queues": [{"name": "default"}],
        "jobs": [{"name": j, "queue": "default", "min_available": 1, **kw} for j in jobs],
        "tasks": tasks,
    }


def _rejects(d: dict[str, Any], kind: str, name: str, field: str, says: str = "") -> str:
    with pytest.raises(SnapshotError) as info:
        Snapshot.from_dict(d)
    msg = str(info.value)
    assert f"{kind} {name!r}" in msg and field in msg and says in msg, msg
    return msg


# ------------------------------------------------------------------------------------------
# Pipelined tasks are validated


def _gpu_node(name: str, count: int, **gpus: Any) -> dict[str, Any]:
    node = gpu_node(name, gpus=count, cpu=8, pods=4, model=None)
    del node["allocatable"]["memory"]
    node["gpus"].update(gpus)
    return node


def test_pipelined_task_on_a_missing_gpu_index_is_rejected() -> None:
    task = {
        "name": "t",
        "job": "j",
        "gpu_request": {"count": 1},
        "phase": "Pipelined",
        "node": "small",
        "gpu_indices": [3],
    }
    d = _snap([_gpu_node("small", 2), _gpu_node("big", 8)], [task])
    _rejects(d, "task", "t", "gpu_indices", says="out of range")
    # beyond every node's device count: a typed error, not an IndexError in the arrays
    task["gpu_indices"] = [40]
    _rejects(d, "task", "t", "gpu_indices", says="index 40 out of range")


def test_pipelined_tasks_are_checked_against_allocatable_plus_releasing() -> None:
    def task(name: str, phase: str, cpu: int) -> dict[str, Any]:
        return {"name": name, "job": "j", "request": {"cpu": cpu}, "phase": phase, "node": "n"}

    node = {"name": "n", "allocatable": {"cpu": 8}}
    ok = [task("a", "Running", 4), task("b", "Releasing", 4), task("c", "Pipelined", 4)]
    Snapshot.from_dict(_snap([node], ok))  # 4 stays + 4 reserved: fits once b is gone
    over = [*ok, task("d", "Pipelined", 1)]
    _rejects(_snap([node], over), "node", "n", "allocatable.cpu", says="9000")
    alone = [task("c", "Pipelined", 9)]
    _rejects(_snap([node], alone), "node", "n", "allocatable.cpu", says="9000")


def test_pipelined_tasks_count_toward_the_pod_limit() -> None:
    node = {"name": "n", "allocatable": {"cpu": 8, "pods": 2}}
    tasks = [{"name": f"r{i}", "job": "j", "phase": "Running", "node": "n"} for i in range(2)] + [
        {"name": "p", "job": "j", "phase": "Pipelined", "node": "n"}
    ]
    _rejects(_snap([node], tasks), "node", "n", "allocatable.pods", says="pod limit of 2")
    tasks[0]["phase"] = "Releasing"
    Snapshot.from_dict(_snap([node], tasks))


def test_pipelined_task_on_a_held_device_is_rejected_unless_it_is_releasing() -> None:
    def task(name: str, phase: str) -> dict[str, Any]:
        return {
            "name": name,
            "job": "j",
            "gpu_request": {"count": 1},
            "phase": phase,
            "node": "g",
            "gpu_indices": [0],
        }

    d = _snap([_gpu_node("g", 2)], [task("a", "Running"), task("b", "Pipelined")])
    _rejects(d, "task", "b", "gpu_indices", says="already held by task 'a'")
    d["tasks"][0]["phase"] = "Releasing"
    Snapshot.from_dict(d)
    d["tasks"].append(task("c", "Pipelined"))
    _rejects(d, "task", "c", "gpu_indices", says="already held by task 'b'")


def test_schedule_never_binds_a_device_that_does_not_exist() -> None:
    # A valid carried reservation is bound on its own, existing devices.
    task = {
        "name": "t",
        "job": "j",
        "gpu_request": {"count": 1},
        "phase": "Pipelined",
        "node": "small",
        "gpu_indices": [1],
    }
    snap = Snapshot.from_dict(_snap([_gpu_node("small", 2)], [task], phase="Running"))
    decisions = schedule(snap)
    check_all(snap, decisions)
    for b in decisions.binds:
        count = snap.node(b.node).gpus
        assert count is not None and all(0 <= g < count.count for g in b.gpu_indices)
    assert [(b.task, b.node, b.gpu_indices) for b in decisions.binds] == [("t", "small", (1,))]


# ------------------------------------------------------------------------------------------
# Whole GPU on a shared-size device: one rule


def test_whole_gpu_on_a_shared_size_device_validates_when_running() -> None:
    nodes = [_gpu_node("n", 2, milli=500)]
    pending = [{"name": "t", "job": "j", "gpu_request": {"count": 1}}]
    snap = Snapshot.from_dict(_snap(nodes, pending))
    decisions = schedule(snap)
    check_all(snap, decisions)
    assert len(decisions.binds) == 1
    # The next cycle sees the task running where it was bound: that snapshot is valid.
    _rerun(snap, decisions)
    # And the device is taken whole: a share cannot join it.
    b = decisions.binds[0]
    running: dict[str, Any] = {"name": "t", "job": "j", "gpu_request": {"count": 1}}
    running["phase"] = "Running"
    running |= {"node": b.node, "gpu_indices": list(b.gpu_indices)}
    share: dict[str, Any] = {"name": "s", "job": "j", "gpu_request": {"count": 1, "milli": 100}}
    share |= {"phase": "Running", "node": "n", "gpu_indices": list(b.gpu_indices)}
    _rejects(_snap(nodes, [running, share]), "task", "s", "gpu_indices", "already held")


@pytest.mark.parametrize(
    ("milli", "cap", "sharing", "take"),
    [
        (1000, 500, True, 500),  # a whole GPU takes the whole (small) device
        (1000, 2000, True, 2000),  # ... and the whole (large) device
        (1000, 1000, True, 1000),
        (300, 1000, True, 300),  # a share of a shared device
        (300, 1000, False, 1000),  # no sharing: whole devices only
        (700, 500, True, 500),  # a share at least the device: the whole device
        (500, 500, True, 500),
        (300, 0, True, 0),  # no device at all
    ],
)
def test_device_take_is_one_rule_for_scalars_and_arrays(
    milli: int, cap: int, sharing: bool, take: int
) -> None:
    assert device_take(milli, cap, sharing) == take
    arr = device_take(milli, np.array([cap, cap], dtype=np.int64), np.array([sharing, sharing]))
    assert arr.tolist() == [take, take]
    assert exclusive(milli, cap, sharing) == (take == cap)


def _rerun(snap: Snapshot, decisions: Decisions) -> Snapshot:
    """The snapshot of the next cycle: bound tasks Running where they were bound, reserved
    ones Pipelined, evicted ones gone."""
    binds = {b.task: b for b in decisions.binds}
    pipes = {p.task: p for p in decisions.pipelined}
    evicted = {e.task for e in decisions.evictions}
    tasks = []
    for t in snap.tasks:
        d = t.to_dict()
        if t.name in evicted:
            continue
        placed = binds.get(t.name) or pipes.get(t.name)
        if placed is not None:
            d["phase"] = "Running" if t.name in binds else "Pipelined"
            d["node"] = placed.node
            d["gpu_indices"] = list(placed.gpu_indices)
        tasks.append(d)
    doc = snap.to_dict()
    doc["tasks"] = tasks
    return Snapshot.from_dict(doc)


@st.composite
def _gpu_clusters(draw: st.DrawFn) -> Snapshot:
    n_nodes = draw(st.integers(1, 3))
    nodes = []
    for i in range(n_nodes):
        nodes.append(
            {
                "name": f"n{i}",
                "allocatable": {"cpu": 16, "memory": "64Gi"},
                "gpus": {
                    "count": draw(st.integers(1, 4)),
                    "milli": draw(st.sampled_from((250, 500, 1000, 2000))),
                    "sharing": draw(st.booleans()),
                },
            }
        )
    tasks = []
    for j in range(draw(st.integers(1, 4))):
        whole = draw(st.booleans())
        count = draw(st.integers(1, 2)) if whole else 1
        milli = 1000 if whole else draw(st.sampled_from((100, 250, 500, 700)))
        for r in range(draw(st.integers(1, 3))):
            tasks.append(
                {
                    "name": f"j{j}-{r}",
                    "job": f"j{j}",
                    "request": {"cpu": 1},
                    "gpu_request": {"count": count, "milli": milli},
                }
            )
    return Snapshot.from_dict(_snap(nodes, tasks))


@settings(max_examples=150)
@given(snap=_gpu_clusters())
def test_scheduling_output_refed_as_running_snapshot_validates(snap: Snapshot) -> None:
    decisions = schedule(snap)
    check_all(snap, decisions)
    nxt = _rerun(snap, decisions)  # raises SnapshotError if the rules disagree
    check_all(nxt, schedule(nxt))


# ------------------------------------------------------------------------------------------
# Queue chains


def _chain(n: int) -> list[Queue]:
    return [Queue(name="q0")] + [Queue(name=f"q{i}", parent=f"q{i - 1}") for i in range(1, n)]


def test_queue_parent_chain_validation_is_linear() -> None:
    limits = Limits(max_queue_depth=10**6)
    t0 = time.process_time()
    Snapshot(queues=_chain(1000), limits=limits)
    small = time.process_time() - t0
    t0 = time.process_time()
    Snapshot(queues=_chain(16000), limits=limits)
    large = time.process_time() - t0
    assert large < 1.0  # was ~7 s (quadratic walk per queue)
    assert large < 16 * 8 * max(small, 1e-3)


def test_queue_chain_deeper_than_the_limit_is_rejected() -> None:
    with pytest.raises(SnapshotError) as info:
        Snapshot(queues=_chain(300))
    msg = str(info.value)
    assert "queue 'q256'" in msg and "parent" in msg and "max_queue_depth" in msg
    Snapshot(queues=_chain(256))
    with pytest.raises(SnapshotError, match=r"queue 'q3'.*parent"):
        Snapshot(queues=_chain(10), limits=Limits(max_queue_depth=3))


def test_queue_cycle_is_still_reported() -> None:
    qs = [Queue(name="a", parent="c"), Queue(name="b", parent="a"), Queue(name="c", parent="b")]
    with pytest.raises(SnapshotError, match=r"queue 'a'.*parent.*cycle"):
        Snapshot(queues=qs)


# ------------------------------------------------------------------------------------------
# Tasks per snapshot


def test_tasks_beyond_max_tasks_are_rejected() -> None:
    d = _snap([], [{"name": f"t{i}", "job": "j"} for i in range(5)])
    with pytest.raises(SnapshotError, match=r"snapshot.*tasks.*max_tasks"):
        Snapshot.from_dict(d, limits=Limits(max_tasks=4))
    assert len(Snapshot.from_dict(d, limits=Limits(max_tasks=5)).tasks) == 5
    snap = Snapshot.from_dict(d, limits=Limits(max_tasks=5))
    with pytest.raises(SnapshotError, match="max_tasks"):
        snap.replace(tasks=[*snap.tasks, Task(name="t9", job="j")])


# ------------------------------------------------------------------------------------------
# Distinct taints per node


def _tainted(n: int) -> Snapshot:
    nodes = [
        Node(
            name=f"n{i}",
            allocatable={"cpu": 8, "memory": "32Gi"},
            taints=[Taint(key=f"k{i}", value="v", effect="NoSchedule")],
        )
        for i in range(n)
    ]
    tol = [
        Toleration(key=f"k{j}", operator="Equal", value="v", effect="NoSchedule") for j in range(n)
    ]
    tasks = [
        Task(name=f"t{j}", job=f"j{j}", request={"cpu": 1}, tolerations=(tol[j],)) for j in range(n)
    ]
    jobs = [Job(name=f"j{j}", queue="default", min_available=1) for j in range(n)]
    return Snapshot(nodes=nodes, queues=[Queue(name="default")], jobs=jobs, tasks=tasks)


def test_distinct_taints_per_node_cost_near_linear() -> None:
    snap = _tainted(600)
    a = build_cluster_arrays(snap)
    t0 = time.process_time()
    for j in range(600):
        a.untolerated_mask(snap.tasks[j].tolerations)
        a.soft_untolerated_count(snap.tasks[j].tolerations)
    assert time.process_time() - t0 < 1.0  # was a (nodes × taints) matrix per template
    decisions = schedule(snap)
    check_all(snap, decisions)
    assert {b.task: b.node for b in decisions.binds} == {f"t{j}": f"n{j}" for j in range(600)}


_TAINTS = [
    Taint(key=k, value=v, effect=e)
    for k in ("a", "b")
    for v in ("", "x")
    for e in ("NoSchedule", "NoExecute", "PreferNoSchedule")
]
_TOLS = st.builds(
    Toleration,
    key=st.sampled_from(("", "a", "b", "c")),
    operator=st.sampled_from(("Equal", "Exists")),
    value=st.sampled_from(("", "x")),
    effect=st.sampled_from(("", "NoSchedule", "NoExecute", "PreferNoSchedule")),
)


@settings(max_examples=200)
@given(
    node_taints=st.lists(st.lists(st.sampled_from(_TAINTS), max_size=4), min_size=1, max_size=6),
    tols=st.lists(_TOLS, max_size=3).map(tuple),
)
def test_taint_index_agrees_with_toleration_rule(
    node_taints: list[list[Taint]], tols: tuple[Toleration, ...]
) -> None:
    nodes = [Node(name=f"n{i}", taints=ts) for i, ts in enumerate(node_taints)]
    a = build_cluster_arrays(Snapshot(nodes=nodes))
    for i, node in enumerate(nodes):
        hard = {t for t in node.taints if t.effect != "PreferNoSchedule"}
        soft = {t for t in node.taints if t.effect == "PreferNoSchedule"}
        bad = [t for t in hard if not any(x.tolerates(t) for x in tols)]
        assert bool(a.untolerated_mask(tols)[i]) == bool(bad)
        n_soft = sum(1 for t in soft if not any(x.tolerates(t) for x in tols))
        assert int(a.soft_untolerated_count(tols)[i]) == n_soft


# ------------------------------------------------------------------------------------------
# Per-device memory


def test_one_large_gpu_node_does_not_pad_every_node() -> None:
    nodes = [Node(name="big", allocatable={"cpu": 64}, gpus=Gpus(count=1024))]
    nodes += [Node(name=f"n{i}", allocatable={"cpu": 64}, gpus=Gpus(count=8)) for i in range(1999)]
    snap = Snapshot(
        nodes=nodes,
        queues=[Queue(name="default")],
        jobs=[Job(name="j", queue="default", min_available=1)],
        tasks=[Task(name="t", job="j", request={GPU: 1})],
    )
    tracemalloc.start()
    try:
        ssn = open_session(snap)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # 2,000 × 1,024 int64 per device array would be 16 MB each (six of them, plus copies).
    assert peak < 12 * 2**20, peak
    assert ssn.arrays.n_devices == 1024 + 1999 * 8
