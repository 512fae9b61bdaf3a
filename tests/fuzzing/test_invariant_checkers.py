"""Each invariant checker catches the violation it names, on a small hand-built case, and
passes the matching correct decisions."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

from gangsched.decisions import Bind, Decisions, Eviction, JobAction, JobStatus, Pipeline
from gangsched.model import (
    GpuRequest,
    Gpus,
    HyperNode,
    Job,
    JobPhase,
    NetworkTopology,
    Node,
    Queue,
    Task,
    TaskPhase,
)
from gangsched.model.snapshot import Snapshot
from gangsched.scheduler import schedule
from gangsched.testing import (
    InvariantViolation,
    check_all,
    check_capacity,
    check_deterministic,
    check_evictions,
    check_gang_atomicity,
    check_known_objects,
    check_queue_capability,
    check_reasons,
    check_schedulable_nodes,
    check_snapshot_unmutated,
    check_topology,
    find_cycle,
)


def _node(name: str, cpu: int = 4, gpus: int = 0, **kw: Any) -> Node:
    return Node(
        name=name,
        allocatable={"cpu": cpu, "memory": "16Gi", **kw.pop("extra", {})},
        gpus=Gpus(count=gpus) if gpus else None,
        **kw,
    )


def _task(name: str, job: str, cpu: int = 1, **kw: Any) -> Task:
    return Task(name=name, job=job, request={"cpu": cpu}, **kw)


def _snap(
    tasks: list[Task],
    jobs: list[Job] | None = None,
    nodes: list[Node] | None = None,
    **kw: Any,
) -> Snapshot:
    job_names = sorted({t.job for t in tasks})
    return Snapshot(
        nodes=tuple(nodes or [_node("n0"), _node("n1")]),
        queues=tuple(kw.pop("queues", [Queue(name="default")])),
        jobs=tuple(jobs or [Job(name=j, min_available=1) for j in job_names]),
        tasks=tuple(tasks),
        **kw,
    )


def _raises(check: Callable[[Snapshot, Decisions], None], snap: Snapshot, d: Decisions) -> str:
    with pytest.raises(InvariantViolation) as info:
        check(snap, d)
    return str(info.value)


# ------------------------------------------------------------------ known objects


def test_known_objects() -> None:
    snap = _snap([_task("a", "j"), _task("r", "j", phase="Running", node="n0")])
    check_known_objects(snap, Decisions(binds=(Bind(task="a", node="n1"),)))
    cases = {
        "unknown task 'x'": Decisions(binds=(Bind(task="x", node="n0"),)),
        "unknown node 'n9'": Decisions(binds=(Bind(task="a", node="n9"),)),
        "both bind and pipeline": Decisions(
            binds=(Bind(task="a", node="n0"),), pipelined=(Pipeline(task="a", node="n1"),)
        ),
        "bind of a Running task": Decisions(binds=(Bind(task="r", node="n1"),)),
        "evicted twice": Decisions(
            evictions=(Eviction(task="r", reason="x"), Eviction(task="r", reason="y"))
        ),
        "holds nothing": Decisions(evictions=(Eviction(task="a", reason="x"),)),
        "unknown job 'zz'": Decisions(jobs={"zz": JobStatus(phase="Pending")}),
        "unknown task 'ghost'": Decisions(task_reasons={"ghost": "why"}),
        "unknown job 'gone'": Decisions(
            job_actions=(JobAction(job="gone", action="RestartJob", cause="x"),)
        ),
    }
    for needle, d in cases.items():
        assert needle in _raises(check_known_objects, snap, d)


def test_repeated_gpu_index_in_one_bind() -> None:
    snap = _snap([_task("a", "j", gpu_request=GpuRequest(count=2))], nodes=[_node("n0", gpus=4)])
    d = Decisions(binds=(Bind(task="a", node="n0", gpu_indices=(1, 1)),))
    assert "repeats a GPU index" in _raises(check_known_objects, snap, d)


# ------------------------------------------------------------------ capacity


def test_capacity_resources_and_pods() -> None:
    snap = _snap(
        [_task("r", "j", cpu=3, phase="Running", node="n0"), _task("a", "k", cpu=2)],
        nodes=[_node("n0"), _node("n1", extra={"pods": 0})],
    )
    msg = _raises(check_capacity, snap, Decisions(binds=(Bind(task="a", node="n0"),)))
    assert "node 'n0': cpu over-committed: 5000 > 4000" in msg
    msg = _raises(check_capacity, snap, Decisions(binds=(Bind(task="a", node="n1"),)))
    assert "node 'n1': 1 pods over its limit 0" in msg


def test_capacity_gpu_devices() -> None:
    whole = GpuRequest(count=1)
    snap = _snap(
        [
            _task("r", "j", gpu_request=whole, phase="Running", node="n0", gpu_indices=(0,)),
            _task("a", "k", gpu_request=whole),
        ],
        nodes=[_node("n0", gpus=2)],
    )
    check_capacity(snap, Decisions(binds=(Bind(task="a", node="n0", gpu_indices=(1,)),)))
    msg = _raises(
        check_capacity, snap, Decisions(binds=(Bind(task="a", node="n0", gpu_indices=(0,)),))
    )
    assert "GPU 0 over-committed" in msg
    msg = _raises(
        check_capacity, snap, Decisions(binds=(Bind(task="a", node="n0", gpu_indices=(5,)),))
    )
    assert "GPU index 5 out of range" in msg
    msg = _raises(check_capacity, snap, Decisions(binds=(Bind(task="a", node="n0"),)))
    assert "0 GPU indices for a request of 1" in msg
    msg = _raises(check_capacity, snap, Decisions(pipelined=(Pipeline(task="a", node="n0"),)))
    assert "pipelined with 0 GPU indices" in msg


def test_capacity_counts_reservations_once_releases_finish() -> None:
    snap = _snap(
        [
            _task("leaving", "old", cpu=4, phase="Releasing", node="n0"),
            _task("victim", "low", cpu=4, phase="Running", node="n1"),
            _task("a", "new", cpu=4),
            _task("b", "new", cpu=4),
        ],
        jobs=[Job(name="old"), Job(name="low"), Job(name="new", min_available=2)],
    )
    # a reservation on resources being released, and one freed by an eviction: both fit later
    ok = Decisions(
        pipelined=(Pipeline(task="a", node="n0"), Pipeline(task="b", node="n1")),
        evictions=(Eviction(task="victim", reason="preempted", preemptor="new"),),
    )
    check_capacity(snap, ok)
    # without the eviction the second reservation does not fit even later
    no_room = Decisions(pipelined=ok.pipelined)
    assert "over-committed once releases finish" in _raises(check_capacity, snap, no_room)
    # binding onto resources still being released over-commits now
    now = Decisions(binds=(Bind(task="a", node="n0"),))
    assert "cpu over-committed: 8000 > 4000" in _raises(check_capacity, snap, now)


# ------------------------------------------------------------------ gang atomicity


def test_gang_atomicity() -> None:
    tasks = [_task(f"t{i}", "g") for i in range(3)]
    snap = _snap(tasks, jobs=[Job(name="g", min_available=3)])
    whole = Decisions(binds=tuple(Bind(task=f"t{i}", node="n0") for i in range(3)))
    check_gang_atomicity(snap, whole)
    part = Decisions(binds=whole.binds[:2])
    assert "job 'g': partial gang: 2 tasks ready, min_available 3" in _raises(
        check_gang_atomicity, snap, part
    )
    reserved = Decisions(pipelined=tuple(Pipeline(task=f"t{i}", node="n0") for i in range(3)))
    check_gang_atomicity(snap, reserved)
    # binding two tasks while the third only holds a reservation is a partial gang too
    mixed = Decisions(binds=whole.binds[:2], pipelined=(Pipeline(task="t2", node="n1"),))
    assert "2 tasks ready" in _raises(check_gang_atomicity, snap, mixed)


def test_gang_atomicity_per_role_and_best_effort() -> None:
    tasks = [
        _task("m", "g", role="master"),
        _task("w0", "g", role="worker"),
        _task("w1", "g", role="worker"),
        Task(name="sidecar", job="g", role="helper"),  # best effort: no request at all
    ]
    job = Job(name="g", min_available=3, min_task_member={"master": 1, "worker": 1})
    snap = _snap(tasks, jobs=[job])
    workers_only = Decisions(binds=(Bind(task="w0", node="n0"), Bind(task="w1", node="n0")))
    # min_available is met with the pending best-effort task, but the master role is not
    assert "role 'master' has 0 tasks ready" in _raises(check_gang_atomicity, snap, workers_only)
    check_gang_atomicity(
        snap, Decisions(binds=(Bind(task="m", node="n0"), Bind(task="w0", node="n0")))
    )


# ------------------------------------------------------------------ queues


def test_queue_capability_own_and_ancestors() -> None:
    queues = [
        Queue(name="root", capability={"cpu": 2}),
        Queue(name="default", parent="root", capability={"cpu": 4}),
    ]
    tasks = [_task("r", "j", cpu=1, phase="Running", node="n0"), _task("a", "k", cpu=2)]
    snap = _snap(tasks, queues=queues)
    d = Decisions(binds=(Bind(task="a", node="n1"),))
    assert "queue 'root': cpu 3000 over its capability 2000" in _raises(
        check_queue_capability, snap, d
    )
    check_queue_capability(snap, d, hierarchical=False)
    big = _snap([_task("r", "j", cpu=1, phase="Running", node="n0"), _task("a", "k", cpu=4)])
    check_queue_capability(big, Decisions(binds=(Bind(task="a", node="n1"),)))


def test_queue_capability_blames_only_resources_that_grew() -> None:
    queue = Queue(name="default", capability={"cpu": 100, "memory": "1Gi"})
    running = Task(
        name="r",
        job="j",
        request={"memory": "2Gi"},
        phase=TaskPhase.RUNNING,
        node="n0",
    )
    snap = _snap([running, _task("a", "k", cpu=1)], queues=[queue])
    check_queue_capability(snap, Decisions(binds=(Bind(task="a", node="n1"),)))


# ------------------------------------------------------------------ topology


def _topology_snapshot(tier: int | None, mode: str = "hard") -> Snapshot:
    nodes = [_node(f"n{i}") for i in range(4)]
    hypernodes = [
        HyperNode(name="rack-a", tier=1, members=("n0", "n1")),
        HyperNode(name="rack-b", tier=1, members=("n2", "n3")),
        HyperNode(name="spine", tier=2, members=("rack-a", "rack-b")),
    ]
    job = Job(
        name="g",
        min_available=2,
        network_topology=NetworkTopology(mode=mode, highest_tier_allowed=tier),  # type: ignore[arg-type]
    )
    tasks = [_task("t0", "g"), _task("t1", "g"), _task("t2", "g")]
    return _snap(tasks, jobs=[job], nodes=nodes, hypernodes=hypernodes)


def test_topology_hard_tier() -> None:
    split = Decisions(binds=(Bind(task="t0", node="n1"), Bind(task="t1", node="n2")))
    together = Decisions(binds=(Bind(task="t0", node="n2"), Bind(task="t1", node="n3")))
    snap = _topology_snapshot(1)
    msg = _raises(check_topology, snap, split)
    assert "job 'g': hard network topology broken: nodes ['n1', 'n2']" in msg
    assert "tier <= 1" in msg
    check_topology(snap, together)
    # tier 2 (the spine) spans both racks; tier 3 is the cluster; soft mode is a preference
    for relaxed in (_topology_snapshot(2), _topology_snapshot(3), _topology_snapshot(1, "soft")):
        check_topology(relaxed, split)
    check_topology(_topology_snapshot(None), split)


def test_topology_counts_tasks_already_placed() -> None:
    snap = _topology_snapshot(1)
    running = snap.replace(
        tasks=[
            _task("t0", "g", phase="Running", node="n0"),
            _task("t1", "g"),
            _task("t2", "g"),
        ]
    )
    msg = _raises(check_topology, running, Decisions(pipelined=(Pipeline(task="t1", node="n3"),)))
    assert "nodes ['n0', 'n3']" in msg
    check_topology(running, Decisions(pipelined=(Pipeline(task="t1", node="n1"),)))


def test_topology_unconstrained_without_hypernodes() -> None:
    job = Job(name="g", network_topology=NetworkTopology(highest_tier_allowed=1))
    snap = _snap([_task("a", "g"), _task("b", "g")], jobs=[job])
    check_topology(snap, Decisions(binds=(Bind(task="a", node="n0"), Bind(task="b", node="n1"))))


# ------------------------------------------------------------------ evictions, nodes, reasons


def test_evictions_need_a_pipelined_preemptor() -> None:
    tasks = [_task("v", "low", cpu=4, phase="Running", node="n0"), _task("p", "high", cpu=4)]
    snap = _snap(tasks)
    good = Decisions(
        evictions=(Eviction(task="v", reason="preempted", preemptor="high"),),
        pipelined=(Pipeline(task="p", node="n0"),),
    )
    check_evictions(snap, good)
    cases = {
        "evicted without a preemptor": Eviction(task="v", reason="x"),
        "evicted for unknown job 'nobody'": Eviction(task="v", reason="x", preemptor="nobody"),
        "evicted for job 'low', which got no pipelined tasks": Eviction(
            task="v", reason="x", preemptor="low"
        ),
    }
    for needle, eviction in cases.items():
        d = Decisions(evictions=(eviction,), pipelined=good.pipelined)
        msg = _raises(check_evictions, snap, d)
        assert needle in msg and "task 'v' (job 'low')" in msg
    nothing_pipelined = Decisions(evictions=good.evictions)
    assert "no pipelined tasks" in _raises(check_evictions, snap, nothing_pipelined)


def test_no_placement_on_unschedulable_nodes() -> None:
    snap = _snap([_task("a", "j")], nodes=[_node("n0", unschedulable=True), _node("n1")])
    check_schedulable_nodes(snap, Decisions(binds=(Bind(task="a", node="n1"),)))
    msg = _raises(check_schedulable_nodes, snap, Decisions(binds=(Bind(task="a", node="n0"),)))
    assert "task 'a': bound to unschedulable node 'n0'" in msg
    d = Decisions(pipelined=(Pipeline(task="a", node="n0"),))
    assert "pipelined to unschedulable" in _raises(check_schedulable_nodes, snap, d)


def test_every_unplaced_pending_task_has_a_reason() -> None:
    snap = _snap([_task("a", "j"), _task("b", "j")])
    check_reasons(snap, Decisions(binds=(Bind(task="a", node="n0"),), task_reasons={"b": "full"}))
    msg = _raises(check_reasons, snap, Decisions(binds=(Bind(task="a", node="n0"),)))
    assert "task 'b': left pending without a reason" in msg


# ------------------------------------------------------------------ whole-run checks


def test_deterministic_and_unmutated() -> None:
    snap = _snap([_task("a", "j")])
    assert check_deterministic(schedule, snap).binds
    calls = iter(range(10))

    def flaky(s: Snapshot) -> Decisions:
        return Decisions(task_reasons={"a": f"attempt {next(calls)}"})

    with pytest.raises(InvariantViolation, match="different decisions"):
        check_deterministic(flaky, snap)
    before = snap.to_dict()
    check_snapshot_unmutated(before, snap)
    other = _snap([_task("a", "j", cpu=2)]).to_dict()
    with pytest.raises(InvariantViolation, match=r"mutated its input snapshot \(tasks\)"):
        check_snapshot_unmutated(other, snap)


def test_find_cycle() -> None:
    assert find_cycle({}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "x": {"c"}}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"a"}}) == ["a", "a"]
    assert find_cycle({"z": {"y"}, "y": {"q", "z"}, "q": set()}) == ["y", "z", "y"]


def test_check_all_on_gangsched_output_and_its_interchange_form() -> None:
    snap = _snap(
        [_task(f"t{i}", "g", cpu=2) for i in range(3)] + [_task("x", "big", cpu=8)],
        jobs=[
            Job(name="g", min_available=3, phase=JobPhase.INQUEUE),
            Job(name="big", phase=JobPhase.INQUEUE),
        ],
    )
    d = schedule(snap)
    assert len(d.binds) == 3
    check_all(snap, d)
    check_all(snap, Decisions.from_dict(d.to_dict()))
    broken = Decisions.from_dict({**d.to_dict(), "binds": [b.to_dict() for b in d.binds[:2]]})
    with pytest.raises(InvariantViolation, match="partial gang"):
        check_all(snap, broken)


def test_checkers_import_without_hypothesis() -> None:
    code = (
        "import sys\n"
        "sys.modules['hypothesis'] = None\n"  # any import of hypothesis now fails
        "from gangsched.testing import check_all, InvariantViolation, ALL_CHECKS\n"
        "import gangsched.testing as t\n"
        "assert len(ALL_CHECKS) == 10 and callable(check_all)\n"
        "try:\n"
        "    t.SchedulerMachine\n"
        "except ImportError:\n"
        "    print('machine needs hypothesis')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "machine needs hypothesis"
