"""A hypothesis state machine that drives any scheduler through the life of a cluster.

Theory of operation
-------------------
The machine's model of the cluster is one :class:`~gangsched.model.snapshot.Snapshot`, replaced
(never
mutated) by every rule. The rules are what happens to a real cluster around its scheduler:

``submit``
    A new gang arrives: a job and its pending tasks, sometimes with a ``PodEvicted`` job policy.
``finish``
    A running job completes: its placed tasks start releasing (Releasing, still holding their
    node until the next ``tick``); its unplaced tasks are deleted.
``tick``
    Time passes. Releasing tasks terminate: Succeeded when their job finished, back to Pending
    off their node when they were evicted (or whatever the job's ``PodEvicted`` policy says:
    ``RestartJob`` restarts the whole job, ``AbortJob`` / ``TerminateJob`` fail it,
    ``CompleteJob`` completes it). With ``keep_reservations`` off, reservations (Pipelined
    tasks) lapse back to Pending too, as Volcano forgets pipelining between sessions.
``drop_reservations``
    A job's reservations are given up (its Pipelined tasks go back to Pending).
``fail_node``
    A node goes bad: it becomes unschedulable, its tasks either fail or are recreated (Pending),
    reservations on it are dropped.
``add_node``
    A node joins, sometimes into an existing tier-1 hypernode.
``change_weight``
    A queue's weight changes.
``set_queue_state``
    An operator closes or drains (Closing) an open queue, or reopens a closed one. (Queues
    start open.)
``cycle``
    The scheduler under test runs on the current snapshot. Its output is checked, then applied:
    binds become Running tasks on their node and GPU devices, reservations become Pipelined
    tasks (carried into the next snapshots, as gangsched expects; a later bind turns them into
    Running tasks), evicted tasks start releasing, and job phases follow the statuses it
    reported.

On every ``cycle`` the machine checks that the scheduler left its input unmutated, that it
answers the same on a copy of the snapshot rebuilt from its interchange form
(``check_determinism``), and that its decisions break none of ``checks`` (by default every
checker of :mod:`gangsched.testing.invariants`). Each eviction adds an edge *victim job →
preemptor job* to a graph kept across steps, and after every step the graph must stay
acyclic: A evicting B and later B evicting A is the preemption ping-pong peers have shipped.
Fair-share entitlements legitimately move when queues, weights, nodes or jobs change, so the
rules that change them (``graph_reset_rules``) start the graph afresh by default: a cycle is
then a loop closed by the scheduler alone, over cycles and ticks. A scheduler that preempts by
fixed priorities only can promise more: set ``graph_reset_rules = frozenset()`` and no loop
may ever close.

Use
---
Wrap the scheduler in anything with ``schedule(snapshot)`` returning
:class:`~gangsched.decisions.Decisions` or its ``to_dict()`` form (or pass a plain function),
make a machine class and run it::

    from hypothesis import settings
    from hypothesis.stateful import run_state_machine_as_test
    from gangsched.testing import SchedulerMachine

    Machine = SchedulerMachine.for_scheduler(my_schedule)
    run_state_machine_as_test(Machine, settings=settings(max_examples=50, deadline=None))

or subclass :class:`SchedulerMachine` and override :meth:`SchedulerMachine.schedule`. Class
attributes (``checks``, ``max_nodes``, ``topology`` …) tune what is generated and checked.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, cast

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from gangsched.decisions import Decisions
from gangsched.errors import GangschedError
from gangsched.model import (
    OCCUPYING_PHASES,
    HyperNode,
    Job,
    JobPhase,
    JobPolicy,
    Node,
    QueueState,
    Task,
    TaskPhase,
)
from gangsched.model.snapshot import Snapshot
from gangsched.testing.invariants import (
    ALL_CHECKS,
    Check,
    InvariantViolation,
    check_snapshot_unmutated,
    find_cycle,
)
from gangsched.testing.strategies import gangs, nodes, snapshots

__all__ = ["SchedulerAdapter", "SchedulerMachine"]

Output = Decisions | Mapping[str, Any]


class SchedulerAdapter(Protocol):
    """What the machine drives: one scheduling cycle on a snapshot. The answer is
    :class:`~gangsched.decisions.Decisions` or a mapping in its ``to_dict()`` form."""

    def schedule(self, snapshot: Snapshot) -> Output: ...


@dataclass(frozen=True, slots=True)
class _FunctionAdapter:
    fn: Callable[[Snapshot], Output]

    def schedule(self, snapshot: Snapshot) -> Output:
        return self.fn(snapshot)


#: Job-policy actions for ``PodEvicted`` → (what the job's releasing tasks end as, whether the
#: action covers every task of the job rather than just the evicted one).
_POLICY_END: dict[str, tuple[TaskPhase, bool]] = {
    "RestartTask": (TaskPhase.PENDING, False),
    "RestartPod": (TaskPhase.PENDING, False),
    "RestartJob": (TaskPhase.PENDING, True),
    "AbortJob": (TaskPhase.FAILED, True),
    "TerminateJob": (TaskPhase.FAILED, True),
    "CompleteJob": (TaskPhase.SUCCEEDED, True),
}
_POLICY_CHOICES: tuple[str | None, ...] = (None, None, "RestartJob", "AbortJob", "RestartTask")
_JOB_PHASES = {p.value: p for p in JobPhase}


def _moved(task: Task, phase: TaskPhase, node: str | None, gpus: Sequence[int]) -> Task:
    return dataclasses.replace(task, phase=phase, node=node, gpu_indices=tuple(gpus))


def _ended(task: Task, phase: TaskPhase) -> Task:
    """``task`` in its end phase: back to Pending off its node, or terminal where it was."""
    if phase is TaskPhase.PENDING:
        return _moved(task, TaskPhase.PENDING, None, ())
    return dataclasses.replace(task, phase=phase)


class SchedulerMachine(RuleBasedStateMachine):
    """Drive a scheduler through submissions, completions, node failures, new nodes, queue
    changes and scheduling cycles; check every invariant after every step.

    Configure a subclass with class attributes, or build one with :meth:`for_scheduler`.
    """

    #: The scheduler under test (used by the default :meth:`schedule`).
    adapter: ClassVar[SchedulerAdapter | None] = None
    #: Checkers run on every cycle's (snapshot, decisions).
    checks: ClassVar[tuple[Check, ...]] = ALL_CHECKS
    #: Run every cycle twice (the second time on a rebuilt copy) and compare the JSON.
    check_determinism: ClassVar[bool] = True
    #: Size of the generated clusters and gangs.
    max_nodes: ClassVar[int] = 4
    max_initial_jobs: ClassVar[int] = 3
    max_tasks_per_job: ClassVar[int] = 4
    max_queues: ClassVar[int] = 3
    #: Generate hypernode trees and jobs with network-topology constraints.
    topology: ClassVar[bool] = True
    #: Keep Pipelined tasks across ticks (the scheduler binds them later); when false, every
    #: tick drops them back to Pending.
    keep_reservations: ClassVar[bool] = True
    #: Rules after which the victim → preemptor graph starts afresh.
    graph_reset_rules: ClassVar[frozenset[str]] = frozenset(
        {"submit", "finish", "fail_node", "add_node", "change_weight", "set_queue_state"}
    )

    def __init__(self) -> None:
        super().__init__()
        self.snapshot = Snapshot()
        #: Decisions of the latest cycle (``None`` before the first).
        self.last_decisions: Decisions | None = None
        #: Cycles run, evictions applied and tasks bound so far.
        self.cycles = 0
        self.evictions = 0
        self.binds = 0
        #: victim job → jobs it was evicted for (since the last reset).
        self.preemptions: dict[str, set[str]] = {}
        self._release_to: dict[str, TaskPhase] = {}
        self._next_job = 0
        self._next_node = 0

    # ------------------------------------------------------------------ construction

    @classmethod
    def for_scheduler(
        cls,
        scheduler: SchedulerAdapter | Callable[[Snapshot], Output],
        *,
        name: str = "Machine",
        **attributes: Any,
    ) -> type[SchedulerMachine]:
        """A subclass driving ``scheduler`` (an adapter or a plain ``snapshot -> decisions``
        function), with any class attribute overridden (``checks=...``, ``max_nodes=...``)."""
        unknown = sorted(a for a in attributes if not hasattr(SchedulerMachine, a))
        if unknown:
            raise TypeError(f"SchedulerMachine has no attribute {unknown[0]!r}")
        adapter = scheduler if hasattr(scheduler, "schedule") else None
        if adapter is None:
            adapter = _FunctionAdapter(cast(Callable[[Snapshot], Output], scheduler))
        attributes["adapter"] = adapter
        if "checks" in attributes:
            attributes["checks"] = tuple(attributes["checks"])
        return cast(type[SchedulerMachine], type(name, (cls,), attributes))

    def schedule(self, snapshot: Snapshot) -> Output:
        """Run the scheduler under test once. Override, or set :attr:`adapter`."""
        if self.adapter is None:
            raise TypeError(
                f"{type(self).__name__}: set `adapter` or override `schedule` "
                "(see SchedulerMachine.for_scheduler)"
            )
        return self.adapter.schedule(snapshot)

    # ------------------------------------------------------------------ helpers

    def _decide(self, snapshot: Snapshot) -> Decisions:
        out = self.schedule(snapshot)
        if isinstance(out, Decisions):
            return out
        if isinstance(out, Mapping):
            try:
                return Decisions.from_dict(out)
            except GangschedError as exc:
                raise InvariantViolation(f"the scheduler's output is malformed: {exc}") from None
        raise InvariantViolation(
            f"the scheduler returned a {type(out).__name__}, not Decisions or a mapping"
        )

    def _set(self, **changes: Sequence[Any]) -> None:
        try:
            self.snapshot = self.snapshot.replace(**changes)
        except GangschedError as exc:
            raise InvariantViolation(f"the cluster became inconsistent: {exc}") from None

    def _reset_graph(self, rule_name: str) -> None:
        if rule_name in self.graph_reset_rules:
            self.preemptions.clear()

    def _running_jobs(self) -> list[str]:
        holding = (TaskPhase.BOUND, TaskPhase.RUNNING)
        return sorted({t.job for t in self.snapshot.tasks if t.phase in holding})

    @staticmethod
    def _fresh(prefix: str, counter: int, *taken: Mapping[str, int]) -> tuple[str, int]:
        """The first ``<prefix>-<n>`` with n ≥ ``counter`` that no mapping in ``taken`` holds."""
        while any(f"{prefix}-{counter}" in names for names in taken):
            counter += 1
        return f"{prefix}-{counter}", counter

    def _reserving_jobs(self) -> list[str]:
        return sorted({t.job for t in self.snapshot.tasks if t.phase is TaskPhase.PIPELINED})

    def _schedulable_nodes(self) -> list[str]:
        return [n.name for n in self.snapshot.nodes if not n.unschedulable]

    # ------------------------------------------------------------------ model operations
    #
    # Each rule draws its arguments and calls one of these; a shrunk failure can be replayed
    # as a straight-line test by calling them by hand.

    def load(self, snapshot: Snapshot) -> None:
        """Start from ``snapshot`` (tasks already Releasing will end Succeeded)."""
        self.snapshot = snapshot
        self._next_job = len(snapshot.jobs)
        self._next_node = len(snapshot.nodes)
        self._release_to = {
            t.name: TaskPhase.SUCCEEDED for t in snapshot.tasks if t.phase is TaskPhase.RELEASING
        }

    def apply_submit(self, job: Job, tasks: Sequence[Task]) -> None:
        """Add a job and its tasks."""
        snap = self.snapshot
        self._next_job += 1
        self._set(jobs=(*snap.jobs, job), tasks=(*snap.tasks, *tasks))
        self._reset_graph("submit")

    def apply_finish(self, job: str) -> None:
        """``job`` completes: its placed tasks start releasing, its unplaced ones go away."""
        out: list[Task] = []
        for t in self.snapshot.tasks:
            if t.job == job and t.phase in (TaskPhase.PENDING, TaskPhase.PIPELINED):
                continue
            if t.job == job and t.phase in (TaskPhase.BOUND, TaskPhase.RUNNING):
                t = dataclasses.replace(t, phase=TaskPhase.RELEASING)
                self._release_to[t.name] = TaskPhase.SUCCEEDED
            out.append(t)
        self._set(tasks=out)
        self._reset_graph("finish")

    def apply_tick(self) -> None:
        """Releasing tasks terminate (and, without ``keep_reservations``, reservations lapse
        back to Pending)."""
        out: list[Task] = []
        for t in self.snapshot.tasks:
            if t.phase is TaskPhase.RELEASING:
                t = _ended(t, self._release_to.pop(t.name, TaskPhase.SUCCEEDED))
            elif t.phase is TaskPhase.PIPELINED and not self.keep_reservations:
                t = _moved(t, TaskPhase.PENDING, None, ())
            out.append(t)
        self._set(tasks=out)

    def apply_drop_reservations(self, job: str) -> None:
        """``job``'s Pipelined tasks go back to Pending."""
        out = [
            _moved(t, TaskPhase.PENDING, None, ())
            if t.job == job and t.phase is TaskPhase.PIPELINED
            else t
            for t in self.snapshot.tasks
        ]
        self._set(tasks=out)
        self._reset_graph("drop_reservations")

    def apply_fail_node(self, node: str, *, restart: bool) -> None:
        """``node`` goes bad: it is cordoned; its tasks are recreated (``restart``, Pending) or
        fail; releasing tasks on it end at once; reservations on it lapse."""
        snap = self.snapshot
        node_list = [
            dataclasses.replace(n, unschedulable=True) if n.name == node else n for n in snap.nodes
        ]
        out: list[Task] = []
        for t in snap.tasks:
            if t.node == node:
                if t.phase is TaskPhase.RELEASING:
                    t = _ended(t, self._release_to.pop(t.name, TaskPhase.SUCCEEDED))
                elif t.phase in OCCUPYING_PHASES:
                    t = _ended(t, TaskPhase.PENDING if restart else TaskPhase.FAILED)
                elif t.phase is TaskPhase.PIPELINED:
                    t = _moved(t, TaskPhase.PENDING, None, ())
            out.append(t)
        self._set(nodes=node_list, tasks=out)
        self._reset_graph("fail_node")

    def apply_add_node(self, node: Node, *, hypernode: str | None = None) -> None:
        """``node`` joins the cluster, as a member of tier-1 ``hypernode`` if given."""
        snap = self.snapshot
        hypernode_list = [
            HyperNode(name=h.name, tier=h.tier, members=(*h.members, node.name))
            if h.name == hypernode
            else h
            for h in snap.hypernodes
        ]
        self._next_node += 1
        self._set(nodes=(*snap.nodes, node), hypernodes=hypernode_list)
        self._reset_graph("add_node")

    def apply_weight(self, queue: str, weight: int) -> None:
        """``queue`` gets a new weight."""
        self._change_queue(queue, "change_weight", weight=weight)

    def apply_queue_state(self, queue: str, state: QueueState) -> None:
        """``queue`` is opened, closed or set Closing."""
        self._change_queue(queue, "set_queue_state", state=state)

    def _change_queue(self, queue: str, step: str, **changes: Any) -> None:
        """Queue ``queue`` takes ``changes``; the step is named ``step``."""
        queue_list = [
            dataclasses.replace(q, **changes) if q.name == queue else q
            for q in self.snapshot.queues
        ]
        self._set(queues=queue_list)
        self._reset_graph(step)

    def run_cycle(self) -> Decisions:
        """Run the scheduler on the current snapshot, check its decisions, apply them."""
        snap = self.snapshot
        before = snap.to_dict()
        decisions = self._decide(snap)
        check_snapshot_unmutated(before, snap)
        if self.check_determinism:
            again = self._decide(Snapshot.from_dict(before))
            first_text = json.dumps(decisions.to_dict(), sort_keys=True)
            if json.dumps(again.to_dict(), sort_keys=True) != first_text:
                raise InvariantViolation(
                    "same snapshot (rebuilt from its interchange form), different decisions"
                )
        for check in self.checks:
            check(snap, decisions)
        self.last_decisions = decisions
        self.cycles += 1
        self.apply_decisions(decisions)
        return decisions

    def apply_decisions(self, decisions: Decisions) -> None:
        """Binds become Running tasks, reservations Pipelined ones, evicted tasks start
        releasing (ending as their job's ``PodEvicted`` policy says), job phases follow the
        reported statuses. Records the victim → preemptor edges."""
        snap = self.snapshot
        tasks: dict[str, Task] = {t.name: t for t in snap.tasks}
        named = {b.task for b in decisions.binds} | {p.task for p in decisions.pipelined}
        unknown = sorted((named | {e.task for e in decisions.evictions}) - tasks.keys())
        if unknown:
            raise InvariantViolation(f"decision about unknown task {unknown[0]!r}")
        for b in decisions.binds:
            tasks[b.task] = _moved(tasks[b.task], TaskPhase.RUNNING, b.node, b.gpu_indices)
        for p in decisions.pipelined:
            tasks[p.task] = _moved(tasks[p.task], TaskPhase.PIPELINED, p.node, p.gpu_indices)
        self.binds += len(decisions.binds)
        for e in decisions.evictions:
            victim = tasks[e.task]
            self.evictions += 1
            if e.preemptor and e.preemptor != victim.job:
                self.preemptions.setdefault(victim.job, set()).add(e.preemptor)
            end, whole_job = TaskPhase.PENDING, False
            for policy in snap.job(victim.job).policies:
                if policy.event in ("PodEvicted", "*") and policy.action in _POLICY_END:
                    end, whole_job = _POLICY_END[policy.action]
                    break
            names = [t.name for t in snap.tasks_of(victim.job)] if whole_job else [e.task]
            for name in names:
                t = tasks[name]
                if t.phase in OCCUPYING_PHASES or name == e.task:
                    tasks[name] = dataclasses.replace(t, phase=TaskPhase.RELEASING)
                    self._release_to[name] = end
                elif t.phase in (TaskPhase.PENDING, TaskPhase.PIPELINED):
                    tasks[name] = _ended(_moved(t, TaskPhase.PENDING, None, ()), end)
        job_list: list[Job] = []
        for job in snap.jobs:
            status = decisions.jobs.get(job.name)
            if status is not None:
                phase = _JOB_PHASES.get(status.phase)
                if phase is None:
                    raise InvariantViolation(
                        f"job {job.name!r}: status reports unknown phase {status.phase!r}"
                    )
                if phase is not job.phase:
                    job = dataclasses.replace(job, phase=phase)
            job_list.append(job)
        self._set(jobs=job_list, tasks=list(tasks.values()))

    # ------------------------------------------------------------------ rules

    @initialize(data=st.data())
    def start(self, data: st.DataObject) -> None:
        snap = data.draw(
            snapshots(
                max_nodes=self.max_nodes,
                max_jobs=self.max_initial_jobs,
                max_tasks_per_job=self.max_tasks_per_job,
                max_queues=self.max_queues,
                topology=self.topology,
            ),
            label="cluster",
        )
        # Open queues, so that cycles have work to do; set_queue_state closes and reopens them.
        queue_list = [dataclasses.replace(q, state=QueueState.OPEN) for q in snap.queues]
        self.load(snap.replace(queues=queue_list))

    @rule(data=st.data())
    def submit(self, data: st.DataObject) -> None:
        """A new gang arrives."""
        snap = self.snapshot
        max_tier = max((h.tier for h in snap.hypernodes), default=0) if self.topology else 0
        name, self._next_job = self._fresh("job", self._next_job, snap.job_index)
        job, members = data.draw(
            gangs(
                [q.name for q in snap.queues],
                name=name,
                max_tasks=self.max_tasks_per_job,
                max_tier=max_tier,
                creation=self._next_job,
            ),
            label="gang",
        )
        action = data.draw(st.sampled_from(_POLICY_CHOICES), label="PodEvicted policy")
        if action is not None:
            job = dataclasses.replace(job, policies=(JobPolicy(event="PodEvicted", action=action),))
        self.apply_submit(job, members)

    @precondition(lambda self: bool(self._running_jobs()))
    @rule(data=st.data())
    def finish(self, data: st.DataObject) -> None:
        """A running job completes."""
        self.apply_finish(data.draw(st.sampled_from(self._running_jobs()), label="job"))

    @rule()
    def tick(self) -> None:
        """Releasing tasks terminate."""
        self.apply_tick()

    @precondition(lambda self: bool(self._reserving_jobs()))
    @rule(data=st.data())
    def drop_reservations(self, data: st.DataObject) -> None:
        """A job's reservations are given up."""
        self.apply_drop_reservations(
            data.draw(st.sampled_from(self._reserving_jobs()), label="job")
        )

    @precondition(lambda self: bool(self._schedulable_nodes()))
    @rule(data=st.data())
    def fail_node(self, data: st.DataObject) -> None:
        """A node goes bad."""
        name = data.draw(st.sampled_from(self._schedulable_nodes()), label="node")
        self.apply_fail_node(name, restart=data.draw(st.booleans(), label="recreate its tasks"))

    @rule(data=st.data())
    def add_node(self, data: st.DataObject) -> None:
        """A node joins, sometimes into an existing tier-1 hypernode."""
        snap = self.snapshot
        name, self._next_node = self._fresh(
            "node", self._next_node, snap.node_index, snap.hypernode_index
        )
        node = data.draw(nodes(name), label="node")
        leaves = sorted(h.name for h in self.snapshot.hypernodes if h.tier == 1)
        into: str | None = None
        if self.topology and leaves and data.draw(st.booleans(), label="into a hypernode"):
            into = data.draw(st.sampled_from(leaves), label="hypernode")
        self.apply_add_node(node, hypernode=into)

    @rule(data=st.data())
    def change_weight(self, data: st.DataObject) -> None:
        """A queue's weight changes."""
        name = data.draw(st.sampled_from([q.name for q in self.snapshot.queues]), label="queue")
        self.apply_weight(name, data.draw(st.integers(1, 8), label="weight"))

    @rule(data=st.data())
    def set_queue_state(self, data: st.DataObject) -> None:
        """An operator closes or drains (Closing) an open queue, or reopens a closed one."""
        queue = data.draw(st.sampled_from(self.snapshot.queues), label="queue")
        state = QueueState.OPEN
        if queue.state is QueueState.OPEN:
            state = data.draw(st.sampled_from((QueueState.CLOSING, QueueState.CLOSED)), label="to")
        self.apply_queue_state(queue.name, state)

    @rule()
    def cycle(self) -> None:
        """Run the scheduler, check its decisions, apply them."""
        self.run_cycle()

    # ------------------------------------------------------------------ invariants

    @invariant()
    def no_preemption_cycle(self) -> None:
        """The victim → preemptor graph stays acyclic."""
        found = find_cycle(self.preemptions)
        if found is not None:
            raise InvariantViolation(
                "preemption cycle: " + " evicted for ".join(repr(j) for j in found)
            )
