"""``SchedulerMachine`` drives gangsched and the reference scheduler through cluster life.

Each run starts from a generated cluster (up to 4 nodes, 3 queues, 3 running or pending gangs)
and takes up to ``STEPS`` steps of submit / finish / tick / drop_reservations / fail_node /
add_node / change_weight / set_queue_state / cycle, checking every invariant after every step.

Schedulers driven: gangsched with Volcano's default configuration; gangsched with ``preempt``
and ``reclaim`` added (evictions, reservations carried across cycles, the preemption-cycle
graph); the reference scheduler. Budget: ``EXAMPLES`` × ``STEPS`` = 60 × 25 for each of the
three by default (about 15 s in all); ``GANGSCHED_SOAK=1`` runs 1,000 × 50 each.
``GANGSCHED_MACHINE_EXAMPLES`` and ``GANGSCHED_MACHINE_STEPS`` override either.

All checkers run, with queue capability checked per queue (proportion's fair share is flat, it
does not cap a queue by its parents'). The reference scheduler does not model network topology
and forgets reservations between cycles as Volcano does, so its clusters have no hypernodes and
its reservations lapse at every tick. Straight-line tests below pin the machine's own
bookkeeping: how decisions are applied, job policies, the preemption-cycle detector,
determinism and output-format checks.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from _preemption_helpers import BOTH
from gangsched.decisions import Bind, Decisions, Eviction, JobStatus, Pipeline
from gangsched.errors import DecisionError
from gangsched.model import Job, JobPhase, JobPolicy, Node, Queue, Task, TaskPhase
from gangsched.model.snapshot import Snapshot
from gangsched.scheduler import schedule
from gangsched.testing import (
    ALL_CHECKS,
    Check,
    InvariantViolation,
    SchedulerMachine,
    check_queue_capability,
    reference,
)

SOAK = os.environ.get("GANGSCHED_SOAK") == "1"
EXAMPLES = int(os.environ.get("GANGSCHED_MACHINE_EXAMPLES", "1000" if SOAK else "60"))
STEPS = int(os.environ.get("GANGSCHED_MACHINE_STEPS", "50" if SOAK else "25"))


def check_flat_queue_capability(snapshot: Snapshot, decisions: Decisions) -> None:
    check_queue_capability(snapshot, decisions, hierarchical=False)


CHECKS: tuple[Check, ...] = tuple(
    check_flat_queue_capability if c is check_queue_capability else c for c in ALL_CHECKS
)
PREEMPTING = BOTH  # Volcano's CI tiers, every preemption-related action on


def _preempting(snapshot: Snapshot) -> Decisions:
    return schedule(snapshot, PREEMPTING)


def _drive(scheduler: Callable[[Snapshot], Decisions], **options: Any) -> dict[str, int]:
    totals = {"runs": 0, "cycles": 0, "binds": 0, "evictions": 0}
    base = SchedulerMachine.for_scheduler(scheduler, checks=CHECKS, **options)

    class Counted(base):  # type: ignore[misc,valid-type]
        def teardown(self) -> None:
            totals["runs"] += 1
            totals["cycles"] += self.cycles
            totals["binds"] += self.binds
            totals["evictions"] += self.evictions

    run_state_machine_as_test(
        Counted,
        settings=settings(
            max_examples=EXAMPLES,
            stateful_step_count=STEPS,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        ),
    )
    return totals


@pytest.mark.parametrize(
    ("scheduler", "options"),
    [
        (schedule, {}),
        (_preempting, {}),
        (reference.schedule, {"topology": False, "keep_reservations": False}),
    ],
    ids=["gangsched", "gangsched-preempt-reclaim", "reference"],
)
def test_scheduler_keeps_every_invariant_through_cluster_life(
    scheduler: Callable[[Snapshot], Decisions], options: dict[str, Any]
) -> None:
    totals = _drive(scheduler, **options)
    print(f"{scheduler.__module__}.{scheduler.__name__}: {totals}")
    assert totals["runs"] >= EXAMPLES
    # the runs did real work: cycles ran and gangs were placed
    assert totals["cycles"] >= EXAMPLES
    assert totals["binds"] >= 5


# ------------------------------------------------------------------ straight-line tests


def _cluster(tasks: list[Task], jobs: list[Job], cpu: int = 4) -> Snapshot:
    return Snapshot(
        nodes=(Node(name="n0", allocatable={"cpu": cpu, "memory": "16Gi"}),),
        queues=(Queue(name="default"),),
        jobs=tuple(jobs),
        tasks=tuple(tasks),
    )


def _task(name: str, job: str, cpu: int = 4, **kw: Any) -> Task:
    return Task(name=name, job=job, request={"cpu": cpu}, **kw)


def _machine(scheduler: Callable[[Snapshot], Any], snapshot: Snapshot) -> SchedulerMachine:
    machine = SchedulerMachine.for_scheduler(scheduler)()
    machine.load(snapshot)
    return machine


def _phases(machine: SchedulerMachine) -> dict[str, tuple[str, str | None]]:
    return {t.name: (t.phase.value, t.node) for t in machine.snapshot.tasks}


def ping_pong(snapshot: Snapshot) -> Decisions:
    """Binds what fits; otherwise evicts a running task of another job and reserves its place
    for the waiting one. Pending tasks are taken in reverse name order."""
    free = {n.name: n.allocatable["cpu"] for n in snapshot.nodes}
    for t in snapshot.tasks:
        if t.phase is TaskPhase.RUNNING and t.node is not None:
            free[t.node] -= t.request["cpu"]
    binds, evictions, pipelined, reasons = [], [], [], {}
    victims = [t for t in snapshot.tasks if t.phase is TaskPhase.RUNNING]
    pending = [t for t in snapshot.tasks if t.phase is TaskPhase.PENDING]
    for t in sorted(pending, key=lambda t: t.name, reverse=True):
        need = t.request["cpu"]
        node = next((n for n, cpu in free.items() if cpu >= need), None)
        if node is not None:
            free[node] -= need
            binds.append(Bind(task=t.name, node=node))
            continue
        victim = next((v for v in victims if v.job != t.job), None)
        if victim is None or victim.node is None:
            reasons[t.name] = "nothing to preempt"
            continue
        victims.remove(victim)
        evictions.append(Eviction(task=victim.name, reason="preempted", preemptor=t.job))
        pipelined.append(Pipeline(task=t.name, node=victim.node))
    return Decisions(
        binds=tuple(binds),
        evictions=tuple(evictions),
        pipelined=tuple(pipelined),
        task_reasons=reasons,
    )


def test_machine_applies_decisions_and_catches_a_preemption_cycle() -> None:
    snap = _cluster(
        [_task("a-0", "a", phase=TaskPhase.RUNNING, node="n0"), _task("b-0", "b")],
        [Job(name="a"), Job(name="b")],
    )
    m = SchedulerMachine.for_scheduler(ping_pong, keep_reservations=False)()
    m.load(snap)
    m.run_cycle()  # b preempts a
    assert _phases(m) == {"a-0": ("Releasing", "n0"), "b-0": ("Pipelined", "n0")}
    assert m.preemptions == {"a": {"b"}}
    m.no_preemption_cycle()
    m.apply_tick()  # the victim is gone and restarts; the reservation lapses
    assert _phases(m) == {"a-0": ("Pending", None), "b-0": ("Pending", None)}
    m.run_cycle()  # b binds first
    assert _phases(m) == {"a-0": ("Pending", None), "b-0": ("Running", "n0")}
    m.run_cycle()  # ... and now a preempts b
    assert m.preemptions == {"a": {"b"}, "b": {"a"}}
    with pytest.raises(InvariantViolation, match="preemption cycle: 'a' evicted for 'b'"):
        m.no_preemption_cycle()
    # a weight change legitimately moves entitlements: the graph starts afresh
    m.apply_weight("default", 3)
    assert m.preemptions == {}
    m.no_preemption_cycle()
    assert m.snapshot.queue("default").weight == 3
    assert (m.cycles, m.binds, m.evictions) == (3, 1, 2)


@pytest.mark.parametrize(
    ("action", "end"),
    [
        (None, {"v-0": "Pending", "v-1": "Running"}),
        ("RestartJob", {"v-0": "Pending", "v-1": "Pending"}),
        ("AbortJob", {"v-0": "Failed", "v-1": "Failed"}),
        ("CompleteJob", {"v-0": "Succeeded", "v-1": "Succeeded"}),
    ],
)
def test_eviction_follows_the_job_policy(action: str | None, end: dict[str, str]) -> None:
    policies = (JobPolicy(event="PodEvicted", action=action),) if action else ()
    snap = _cluster(
        [
            _task("v-0", "v", cpu=2, phase=TaskPhase.RUNNING, node="n0"),
            _task("v-1", "v", cpu=2, phase=TaskPhase.RUNNING, node="n0"),
            _task("p-0", "p", cpu=2),
        ],
        [Job(name="v", policies=policies), Job(name="p")],
    )

    def evict_one(s: Snapshot) -> Decisions:
        return Decisions(
            evictions=(Eviction(task="v-0", reason="preempted", preemptor="p"),),
            pipelined=(Pipeline(task="p-0", node="n0"),),
        )

    m = _machine(evict_one, snap)
    m.run_cycle()
    m.apply_tick()
    assert {n: p for n, (p, _) in _phases(m).items() if n != "p-0"} == end


def test_finish_fail_and_add_node() -> None:
    snap = _cluster(
        [
            _task("a-0", "a", cpu=1, phase=TaskPhase.RUNNING, node="n0"),
            _task("a-1", "a", cpu=1),
            _task("b-0", "b", cpu=1, phase=TaskPhase.RUNNING, node="n0"),
            _task("c-0", "c", cpu=1, phase=TaskPhase.RUNNING, node="n0"),
        ],
        [Job(name="a"), Job(name="b"), Job(name="c")],
    )
    m = _machine(schedule, snap)
    m.apply_finish("a")  # the running task releases, the pending one is deleted
    assert _phases(m)["a-0"] == ("Releasing", "n0") and "a-1" not in _phases(m)
    m.apply_tick()
    assert _phases(m)["a-0"] == ("Succeeded", "n0")
    m.apply_fail_node("n0", restart=False)
    assert m.snapshot.node("n0").unschedulable
    assert _phases(m)["b-0"] == ("Failed", "n0")
    m.apply_add_node(Node(name="n1", allocatable={"cpu": 4}))
    m.apply_submit(Job(name="d", phase=JobPhase.INQUEUE), [_task("d-0", "d", cpu=1)])
    decisions = m.run_cycle()  # nothing lands on the cordoned node
    assert [(b.task, b.node) for b in decisions.binds] == [("d-0", "n1")]
    assert _phases(m)["d-0"] == ("Running", "n1")
    assert m.snapshot.job("d").phase is JobPhase.RUNNING  # the reported status is applied


def test_machine_rejects_nondeterministic_or_malformed_schedulers() -> None:
    snap = _cluster([_task("a-0", "a")], [Job(name="a")])
    calls = iter(range(100))

    def moody(s: Snapshot) -> Decisions:
        return Decisions(task_reasons={"a-0": f"try {next(calls)}"})

    with pytest.raises(InvariantViolation, match="different decisions"):
        _machine(moody, snap).run_cycle()
    with pytest.raises(InvariantViolation, match="output is malformed"):
        _machine(lambda s: {"binds": [{"node": "n0"}]}, snap).run_cycle()
    with pytest.raises(InvariantViolation, match="returned a list"):
        _machine(lambda s: [], snap).run_cycle()
    # An unknown phase cannot even be built as a record; in the interchange form it is
    # malformed output.
    with pytest.raises(DecisionError, match="got 'Sleeping'"):
        JobStatus(phase="Sleeping")
    with pytest.raises(InvariantViolation, match=r"malformed.*'Sleeping'"):
        _machine(
            lambda s: {"jobs": {"a": {"phase": "Sleeping"}}, "task_reasons": {"a-0": "resting"}},
            snap,
        ).run_cycle()
    with pytest.raises(TypeError, match="no attribute 'max_nodez'"):
        SchedulerMachine.for_scheduler(schedule, max_nodez=3)


def test_machine_accepts_the_interchange_form_and_adapters() -> None:
    snap = _cluster([_task("a-0", "a")], [Job(name="a", phase=JobPhase.INQUEUE)])
    m = _machine(lambda s: schedule(s).to_dict(), snap)
    assert [b.task for b in m.run_cycle().binds] == ["a-0"]

    class Adapter:
        def schedule(self, snapshot: Snapshot) -> Decisions:
            return reference.schedule(snapshot)

    m = SchedulerMachine.for_scheduler(Adapter())()
    m.load(snap)
    assert [b.task for b in m.run_cycle().binds] == ["a-0"]


def test_a_machine_without_a_scheduler_says_so() -> None:
    m = SchedulerMachine()
    m.load(_cluster([], []))
    with pytest.raises(TypeError, match="set `adapter` or override `schedule`"):
        m.run_cycle()
