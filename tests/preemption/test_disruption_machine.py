"""A cluster driven by hypothesis with ``consolidate`` and disruption budgets in the loop.

The library's :class:`~gangsched.testing.SchedulerMachine` (its rules: submit, finish, tick,
drop reservations, fail or add a node, change a weight, set a queue's state, run a cycle)
with the scheduler running ``enqueue, allocate, consolidate, preempt, reclaim, backfill``,
two more rules (add or remove a disruption budget over a job), and a start that is, half of
the time, a fragmented GPU cluster (8-GPU nodes with 3 to 6 GPUs used by 1- to 3-GPU tasks,
gangs waiting whose tasks fit on no node as it is packed) so that moves are needed.

Moves are applied as the consolidation docs say a caller does: the moved task is Releasing on
its old node until the next ``tick``, then Pipelined on its reserved node (Pending when that
room was taken meanwhile: the reservation is lost, which the machine counts).

Checked on every cycle: the checkers of :mod:`gangsched.testing.invariants` that the
configuration enforces (``check_cycle``), among them ``check_consolidation`` (every
consolidation eviction has a reservation for the moved task on another node, and breaks no
budget); and no task is moved twice in a row without a change in between (a submit, finish,
node or queue change, budget change or dropped reservation), so consolidation does not
thrash. Consolidation evictions are moves, not losses: they do not enter the victim →
preemptor graph.

Default run: ``CI_EXAMPLES`` examples × ``CI_STEPS`` steps. ``GANGSCHED_SOAK=1`` runs
``SOAK_EXAMPLES`` × ``SOAK_STEPS`` and prints the figures.
"""

from __future__ import annotations

import dataclasses
import os
from collections import Counter
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, precondition, rule

import gangsched as gs
from _preemption_helpers import config
from gangsched.actions.consolidate import CONSOLIDATION
from gangsched.decisions import Decisions
from gangsched.model import (
    DisruptionBudget,
    GpuRequest,
    Gpus,
    Job,
    JobPhase,
    Node,
    Queue,
    QueueState,
    Resources,
    Task,
    TaskPhase,
)
from gangsched.testing import InvariantViolation, SchedulerMachine
from gangsched.testing.invariants import check_cycle
from gangsched.testing.strategies import snapshots

CI_EXAMPLES, CI_STEPS = 25, 25
SOAK_EXAMPLES, SOAK_STEPS = 10_000, 25
SOAK = os.environ.get("GANGSCHED_SOAK") == "1"

CONFIG = config("enqueue", "allocate", "consolidate", "preempt", "reclaim", "backfill")

#: Figures over every example of the run (printed by the soak).
STATS: Counter[str] = Counter()

#: Rules that change the cluster from outside the scheduler.
_CHANGES = frozenset(
    {
        "submit",
        "finish",
        "fail_node",
        "add_node",
        "change_weight",
        "set_queue_state",
        "drop_reservations",
        "add_budget",
        "remove_budget",
    }
)


@st.composite
def fragmented(draw: st.DrawFn) -> gs.Snapshot:
    """2-3 nodes of 8 GPUs, each with 3 to 6 GPUs used by one to three single-task jobs, and
    one to three pending gangs whose tasks fit on no node as it is packed (more GPUs than any
    node has free); sometimes a budget that allows no disruption."""
    n_nodes = draw(st.integers(2, 3))
    nodes = [
        Node(
            name=f"n{i}",
            allocatable=Resources({"cpu": 32_000, "memory": 256 * 2**30, "pods": 110}),
            gpus=Gpus(count=8, model="A100"),
        )
        for i in range(n_nodes)
    ]
    jobs: list[Job] = []
    tasks: list[Task] = []
    used: list[int] = []
    for i in range(n_nodes):
        target = draw(st.integers(3, 6))
        sizes: list[int] = []
        while sum(sizes) < target:
            sizes.append(min(draw(st.integers(1, 3)), target - sum(sizes)))
        start = 0
        for k, size in enumerate(sizes):
            name = f"r{i}-{k}"
            jobs.append(
                Job(
                    name=name,
                    phase=JobPhase.RUNNING,
                    creation=len(jobs),
                    priority=draw(st.integers(0, 2)),
                )
            )
            tasks.append(
                Task(
                    name=f"{name}-0",
                    job=name,
                    request=Resources({"cpu": 1000}),
                    gpu_request=GpuRequest(count=size),
                    phase=TaskPhase.RUNNING,
                    node=f"n{i}",
                    gpu_indices=tuple(range(start, start + size)),
                    preemptable=draw(st.integers(0, 4)) != 4,
                )
            )
            start += size
        used.append(target)
    smallest = 8 - min(used) + 1  # more than any node has free
    for g in range(draw(st.integers(1, 3))):
        name = f"big-{g}"
        count = draw(st.integers(1, 2))
        jobs.append(Job(name=name, min_available=count, phase=JobPhase.INQUEUE, creation=len(jobs)))
        size = draw(st.integers(smallest, 8))
        tasks += [
            Task(
                name=f"{name}-{i}",
                job=name,
                request=Resources({"cpu": 1000}),
                gpu_request=GpuRequest(count=size),
            )
            for i in range(count)
        ]
    budgets: list[DisruptionBudget] = []
    running = [j.name for j in jobs if j.phase is JobPhase.RUNNING]
    if draw(st.booleans()):
        covered = draw(st.lists(st.sampled_from(running), min_size=1, max_size=3, unique=True))
        budgets.append(DisruptionBudget(name="pdb-0", jobs=tuple(covered), max_unavailable=0))
    return gs.Snapshot(
        nodes=tuple(nodes),
        queues=(Queue(name="default"),),
        jobs=tuple(jobs),
        tasks=tuple(tasks),
        disruption_budgets=tuple(budgets),
    )


def _check(snapshot: gs.Snapshot, decisions: Decisions) -> None:
    """Every invariant the configuration enforces (flat fair share: capability per queue)."""
    check_cycle(snapshot, decisions, CONFIG)


class DisruptionMachine(SchedulerMachine):
    checks = (_check,)
    max_nodes = 4
    max_initial_jobs = 3
    topology = True

    def __init__(self) -> None:
        super().__init__()
        #: moved task → (reserved node, its GPU indices), applied at the next tick.
        self.moving: dict[str, tuple[str, tuple[int, ...]]] = {}
        #: tasks moved since the last outside change.
        self.moved_since_change: set[str] = set()
        self._next_budget = 0

    def schedule(self, snapshot: gs.Snapshot) -> Decisions:
        return gs.schedule(snapshot, CONFIG)

    # ------------------------------------------------------------------ start

    @initialize(data=st.data())
    def start(self, data: st.DataObject) -> None:
        if data.draw(st.booleans(), label="fragmented GPU cluster"):
            self.load(data.draw(fragmented(), label="cluster"))
            STATS["fragmented starts"] += 1
        else:
            snap = data.draw(
                snapshots(max_nodes=self.max_nodes, max_jobs=self.max_initial_jobs),
                label="cluster",
            )
            queue_list = [dataclasses.replace(q, state=QueueState.OPEN) for q in snap.queues]
            self.load(snap.replace(queues=queue_list))
        STATS["examples"] += 1

    # ------------------------------------------------------------------ moves

    def _changed(self, rule_name: str) -> None:
        if rule_name in _CHANGES:
            self.moved_since_change.clear()

    def _reset_graph(self, rule_name: str) -> None:
        super()._reset_graph(rule_name)
        self._changed(rule_name)

    def apply_decisions(self, decisions: Decisions) -> None:
        moves = {e.task for e in decisions.evictions if e.reason.startswith(CONSOLIDATION)}
        again = sorted(moves & self.moved_since_change)
        if again:
            raise InvariantViolation(
                f"task {again[0]!r} moved twice by consolidation without a change in between"
            )
        reserved = {p.task: (p.node, tuple(p.gpu_indices)) for p in decisions.pipelined}
        if moves:
            # The old pods start terminating first: the reservations made on their room
            # hold once they are gone.
            self._set(
                tasks=[
                    dataclasses.replace(t, phase=TaskPhase.RELEASING) if t.name in moves else t
                    for t in self.snapshot.tasks
                ]
            )
            for name in moves:
                self.moving[name] = reserved[name]
            STATS["moves"] += len(moves)
            STATS["cycles with moves"] += 1
            self.moved_since_change |= moves
        super().apply_decisions(
            Decisions(
                binds=decisions.binds,
                evictions=tuple(e for e in decisions.evictions if e.task not in moves),
                pipelined=tuple(p for p in decisions.pipelined if p.task not in moves),
                jobs=decisions.jobs,
            )
        )

    def apply_finish(self, job: str) -> None:
        for name in sorted(self.moving):
            if self.snapshot.task(name).job == job:
                del self.moving[name]  # the job is done: nothing to re-create
                self._release_to[name] = TaskPhase.SUCCEEDED
        super().apply_finish(job)

    def apply_fail_node(self, node: str, *, restart: bool) -> None:
        super().apply_fail_node(node, restart=restart)
        ended = [n for n in self.moving if self.snapshot.task(n).phase is not TaskPhase.RELEASING]
        if ended:  # the old pod ended with its node: re-created Pending, its move forgotten
            out = [
                dataclasses.replace(t, phase=TaskPhase.PENDING, node=None, gpu_indices=())
                if t.name in ended
                else t
                for t in self.snapshot.tasks
            ]
            for name in ended:
                del self.moving[name]
            self._set(tasks=out)

    def apply_tick(self) -> None:
        moving, self.moving = self.moving, {}
        for name in moving:
            self._release_to.pop(name, None)
        super().apply_tick()
        # The old pods are gone: each moved task is listed Pipelined on its reserved node,
        # or Pending when that room was taken meanwhile (the reservation is lost).
        for name, (node, gpus) in sorted(moving.items()):
            tasks = list(self.snapshot.tasks)
            i = self.snapshot.task_index[name]
            if tasks[i].phase is not TaskPhase.SUCCEEDED:
                continue  # ended as Pending/terminal by the base tick: reserve it
            tasks[i] = dataclasses.replace(
                tasks[i], phase=TaskPhase.PIPELINED, node=node, gpu_indices=gpus
            )
            try:
                self.snapshot = self.snapshot.replace(tasks=tasks)
                STATS["moves carried"] += 1
            except gs.SnapshotError:
                tasks[i] = dataclasses.replace(
                    tasks[i], phase=TaskPhase.PENDING, node=None, gpu_indices=()
                )
                self._set(tasks=tasks)
                STATS["move reservations lost"] += 1

    def run_cycle(self) -> Decisions:
        d = super().run_cycle()
        STATS["cycles"] += 1
        STATS["evictions"] += len(d.evictions)
        STATS["binds"] += len(d.binds)
        return d

    # ------------------------------------------------------------------ budgets

    def _jobs_with_tasks(self) -> list[str]:
        return sorted({t.job for t in self.snapshot.tasks})

    @precondition(lambda self: bool(self._jobs_with_tasks()))
    @rule(data=st.data())
    def add_budget(self, data: st.DataObject) -> None:
        """A disruption budget over one or two jobs appears."""
        names = self._jobs_with_tasks()
        covered = data.draw(st.lists(st.sampled_from(names), min_size=1, max_size=2, unique=True))
        amounts: tuple[int | str, ...] = (0, 1, "50%", "100%")
        amount = data.draw(st.sampled_from(amounts), label="amount")
        by_min = data.draw(st.booleans(), label="min_available")
        taken = {b.name for b in self.snapshot.disruption_budgets}
        while f"pdb-{self._next_budget}" in taken:
            self._next_budget += 1
        budget = DisruptionBudget(
            name=f"pdb-{self._next_budget}",
            jobs=tuple(covered),
            min_available=amount if by_min else None,
            max_unavailable=None if by_min else amount,
        )
        self._set(disruption_budgets=(*self.snapshot.disruption_budgets, budget))
        self._changed("add_budget")

    @precondition(lambda self: bool(self.snapshot.disruption_budgets))
    @rule(data=st.data())
    def remove_budget(self, data: st.DataObject) -> None:
        """A disruption budget is deleted."""
        gone = data.draw(st.sampled_from(self.snapshot.disruption_budgets), label="budget")
        self._set(disruption_budgets=[b for b in self.snapshot.disruption_budgets if b is not gone])
        self._changed("remove_budget")

    @invariant()
    def moving_tasks_are_releasing(self) -> None:
        for name in self.moving:
            phase = self.snapshot.task(name).phase
            if phase is not TaskPhase.RELEASING:
                raise InvariantViolation(f"moved task {name!r} is {phase.value}, not Releasing")


DisruptionMachine.TestCase.settings = settings(
    max_examples=SOAK_EXAMPLES if SOAK else CI_EXAMPLES,
    stateful_step_count=SOAK_STEPS if SOAK else CI_STEPS,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestDisruptionMachine = DisruptionMachine.TestCase


def test_zz_report_figures(capsys: Any) -> None:
    """Print what the machine exercised (shown with ``-s``; the soak's figures)."""
    if STATS:
        with capsys.disabled():
            print("\ndisruption machine:", dict(sorted(STATS.items())))
    if STATS["examples"] >= 20:
        assert STATS["moves"] > 0, "the machine never exercised a consolidation move"
