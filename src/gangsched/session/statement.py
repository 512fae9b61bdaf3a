"""A transaction over the session: allocate / pipeline / evict / move / lift / admit with an
undo log.

The statement is the only writer of placements, evictions and reservations: every change of
a task's place or state in a cycle is one of its operations, and its undo is the statement's
own (:mod:`gangsched.session.ledger` does the bookkeeping of each; nothing else calls it).

Every placement passes the gate (:mod:`gangsched.session.gate`): an operation that breaks a hard
rule
(node fit, devices, cordon, queue capability, hard topology) is not applied, and a statement
that would leave a gang partial is undone instead of committed.

A gang is tried inside one statement; ``commit()`` makes its operations decisions,
``discard()`` undoes them in reverse so every session array is restored exactly (resources are
int64, so undo is exact arithmetic, not approximate). Two operations serve the actions that
change what is already placed: :meth:`Statement.move` reserves a task this statement evicted
on another node (consolidation), and :meth:`Statement.lift` takes a carried reservation off
its node while its gang is tried for binding there (the realisation of reservations); a lifted
task not placed again goes back to its reservation when the statement ends.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gangsched.model import JobPhase, TaskPhase
from gangsched.session import ledger as _ledger
from gangsched.session.gate import Rule
from gangsched.session.task_states import TaskState

if TYPE_CHECKING:
    from gangsched.session.core import Session
    from gangsched.session.gate import Refusal

__all__ = ["Op", "OpKind", "Statement"]


class OpKind(enum.StrEnum):
    """What an operation does."""

    ALLOCATE = enum.auto()
    PIPELINE = enum.auto()
    EVICT = enum.auto()
    #: A carried reservation taken off its node while the statement is open: never a
    #: decision (:meth:`Statement.lift`).
    LIFT = enum.auto()


@dataclass(frozen=True, slots=True)
class Op:
    kind: OpKind
    task: int
    node: int
    gpus: tuple[int, ...]
    prev_state: int = 0
    reason: str = ""
    preemptor: str = ""
    #: For the reservation of a moved task (:meth:`Statement.move`): its eviction, whose node
    #: and devices the undo puts it back on.
    origin: Op | None = None


class Statement:
    """Operations recorded against ``ssn``; nothing is a decision until :meth:`commit`."""

    __slots__ = ("_bind_kept", "_done", "_lifted", "_phases", "ops", "relax", "ssn")

    def __init__(self, ssn: Session, *, relax: frozenset[Rule] = frozenset()) -> None:
        self.ssn = ssn
        self.ops: list[Op] = []
        #: ``(job, phase before)`` of every job this statement admitted, for undo.
        self._phases: list[tuple[int, JobPhase]] = []
        #: Jobs whose kept allocations this statement's commit binds too (:meth:`bind_kept`).
        self._bind_kept: list[int] = []
        #: The lift operations among ``ops``, in the order lifted (:meth:`lift`).
        self._lifted: list[Op] = []
        self._done = False
        #: Rules a what-if trial leaves out (``Rule.TOPOLOGY``: "would it fit anywhere?",
        #: asked to explain a refusal; ``Rule.CAPABILITY``: the enqueue shape check, which
        #: asks whether the gang fits the cluster at all). Such a statement can only be
        #: discarded, never committed or kept.
        self.relax = relax

    @property
    def finished(self) -> bool:
        """Whether the statement was committed, kept or discarded (it takes no more
        operations then)."""
        return self._done

    def _check_open(self) -> None:
        if self._done:
            raise RuntimeError("statement already committed or discarded")

    def allocate(self, task: int, node: int, gpus: tuple[int, ...]) -> bool:
        """Bind ``task`` to ``node`` on devices ``gpus`` if the gate admits it. Returns
        whether it did."""
        return self._place(task, node, gpus, pipelined=False)

    def pipeline(self, task: int, node: int, gpus: tuple[int, ...]) -> bool:
        """Reserve ``node`` for ``task`` if the gate admits it. Returns whether it did."""
        return self._place(task, node, gpus, pipelined=True)

    def attempt(
        self, task: int, node: int, gpus: tuple[int, ...], *, pipelined: bool
    ) -> Refusal | None:
        """Bind (or, with ``pipelined``, reserve) ``task`` on ``node`` if the gate admits it;
        else return the gate's refusal without recording it: for an action whose question
        *is* whether a placement passes the gate (a carried reservation waiting for room, a
        consolidation trial), a refusal is an answer, not a broken proposal."""
        self._check_open()
        why = self.ssn.gate.refuse(task, node, gpus, pipelined=pipelined, relax=self.relax)
        if why is None:
            _ledger.place(self.ssn, task, node, gpus, pipelined=pipelined)
            kind = OpKind.PIPELINE if pipelined else OpKind.ALLOCATE
            self.ops.append(Op(kind, task, node, gpus))
        return why

    def _place(self, task: int, node: int, gpus: tuple[int, ...], *, pipelined: bool) -> bool:
        why = self.attempt(task, node, gpus, pipelined=pipelined)
        if why is not None:
            self.ssn.refusals.append(why)
        return why is None

    def evict(self, task: int, reason: str, preemptor: str = "") -> None:
        self._check_open()
        prev = int(self.ssn.task_state[task])
        node = int(self.ssn.task_node[task])
        gpus = self.ssn.task_gpus[task]
        _ledger.evict(self.ssn, task)
        self.ops.append(Op(OpKind.EVICT, task, node, gpus, prev, reason, preemptor))

    def _last_op(self, task: int) -> int:
        """The index of this statement's newest operation on ``task``, or -1."""
        for i in range(len(self.ops) - 1, -1, -1):
            if self.ops[i].task == task:
                return i
        return -1

    def _eviction(self, task: int) -> int:
        """The index of this statement's eviction of ``task``, which must be its newest
        operation on the task (a moved task cannot be moved or restored again)."""
        i = self._last_op(task)
        if i < 0 or self.ops[i].kind is not OpKind.EVICT:
            name = self.ssn.snapshot.tasks[task].name
            what = "was not evicted" if i < 0 else "was placed again since its eviction"
            raise RuntimeError(f"task {name!r} {what} by this statement")
        return i

    def restore(self, task: int) -> None:
        """Undo this statement's eviction of ``task`` alone (the others stay)."""
        self._check_open()
        i = self._eviction(task)
        _ledger.unevict(self.ssn, task, self.ops[i].prev_state)
        del self.ops[i]

    def move(self, task: int, node: int, gpus: tuple[int, ...]) -> bool:
        """Reserve ``task``, which this statement evicted, on ``node`` (devices ``gpus``): a
        move, two decisions about one task (its eviction, and a reservation elsewhere for the
        pod that replaces it). The reservation passes the gate as any reservation of a pending
        task would (off its node for good, the task is judged as the pending pod it becomes);
        a refused move changes nothing. Undone, the task is back ``Releasing`` on its node.
        Returns whether it moved."""
        self._check_open()
        origin = self.ops[self._eviction(task)]
        ssn = self.ssn
        _ledger.set_state(ssn, task, TaskState.PENDING)
        why = ssn.gate.refuse(task, node, gpus, pipelined=True, relax=self.relax)
        if why is not None:
            _ledger.set_state(ssn, task, TaskState.RELEASING)
            return False
        _ledger.place(ssn, task, node, gpus, pipelined=True)
        self.ops.append(Op(OpKind.PIPELINE, task, node, gpus, origin=origin))
        return True

    def lift(self, task: int) -> None:
        """Take ``task``'s reservation (a ``Pipelined`` task carried from an earlier cycle,
        with its node and devices) off its node while this statement is open, so that binding
        it, or another task of its gang, there does not find the room taken by the
        reservation. Meanwhile the task is pending: :meth:`allocate` or :meth:`attempt` may
        place it. When the statement ends — committed, kept or discarded — each lifted task
        it has not placed goes back to its reservation, in the order lifted. A lift is never
        a decision."""
        self._check_open()
        ssn = self.ssn
        if (
            ssn.task_state[task] != TaskState.PIPELINED
            or ssn.snapshot.tasks[task].phase is not TaskPhase.PIPELINED
        ):
            name = ssn.snapshot.tasks[task].name
            raise RuntimeError(f"task {name!r} holds no reservation carried into this cycle")
        node = int(ssn.task_node[task])
        gpus = ssn.task_gpus[task]
        _ledger.unplace(ssn, task)
        op = Op(OpKind.LIFT, task, node, gpus)
        self.ops.append(op)
        self._lifted.append(op)

    def bind_kept(self, job: int) -> None:
        """Have :meth:`commit` bind as well the allocations an earlier statement kept for
        ``job`` (not ready then; with this statement's binds it is): they become decisions of
        this commit, recorded after its own operations, and are no longer kept. Without a
        commit nothing changes."""
        self._check_open()
        self._bind_kept.append(job)

    def admit(self, job: int) -> None:
        """Move a Pending ``job`` to Inqueue (admitted: its tasks may be placed)."""
        self._check_open()
        before = self.ssn.job_phase[job]
        if before is not JobPhase.PENDING:
            raise RuntimeError(f"job {self.ssn.snapshot.jobs[job].name!r} is not Pending")
        self._phases.append((job, before))
        self.ssn.job_phase[job] = JobPhase.INQUEUE

    def mark(self) -> tuple[int, int]:
        """A point of this statement to go back to with :meth:`undo_to`."""
        return len(self.ops), len(self._phases)

    def undo_to(self, mark: tuple[int, int]) -> None:
        """Undo the operations recorded since ``mark``, newest first; the earlier ones stay."""
        self._check_open()
        ops, phases = mark
        for job, before in reversed(self._phases[phases:]):
            self.ssn.job_phase[job] = before
        del self._phases[phases:]
        for op in reversed(self.ops[ops:]):
            self._undo(op)
        del self.ops[ops:]

    def discard(self) -> None:
        """Undo every operation, newest first; then the lifted reservations go back."""
        self.undo_to((0, 0))
        self._end()

    def _undo(self, op: Op) -> None:
        """The exact undo of one operation (a lift is undone by :meth:`_end`)."""
        ssn = self.ssn
        if op.kind is OpKind.EVICT:
            _ledger.unevict(ssn, op.task, op.prev_state)
        elif op.kind is OpKind.LIFT:
            pass
        elif op.origin is not None:
            _ledger.unmove(ssn, op.task, op.origin.node, op.origin.gpus)
        else:
            _ledger.unplace(ssn, op.task)

    def put_back(self) -> None:
        """Put every lifted task not placed again back on its reservation now, as the
        statement's end would (in the order lifted): what is asked next (a job's readiness)
        then reads those tasks reserved, not pending."""
        self._check_open()
        self._return_lifted()

    def _end(self) -> None:
        """Close the statement: every lifted task not placed again goes back to its
        reservation, in the order lifted."""
        self._return_lifted()
        self._done = True

    def _return_lifted(self) -> None:
        ssn = self.ssn
        for op in self._lifted:
            if ssn.task_state[op.task] == TaskState.PENDING:
                _ledger.place(ssn, op.task, op.node, op.gpus, pipelined=True)

    def _gang_refusal(self, *, binding: bool) -> Refusal | None:
        if self.relax:
            raise RuntimeError("a what-if statement that leaves rules out cannot be applied")
        task_job = self.ssn.task_job
        placed = {int(task_job[op.task]) for op in self.ops if op.kind is OpKind.ALLOCATE}
        reserved = {int(task_job[op.task]) for op in self.ops if op.kind is OpKind.PIPELINE}
        if not binding:  # kept allocations are claims, not binds: pipelined is enough
            placed, reserved = set(), placed | reserved
        return self.ssn.gate.refuse_end(placed, reserved)

    def commit(self) -> bool:
        """Turn the operations into decisions — unless that would leave a gang partial: then
        undo them all (recorded in ``Session.refusals``). Returns whether it committed."""
        return self._finish(binding=True)

    def keep(self) -> bool:
        """Leave the operations applied as reservations without committing them (a gang that
        is pipelined but not ready keeps its claim on the resources for this cycle) — unless
        the gang would be held below its minimum: then undo them. Returns whether it kept."""
        return self._finish(binding=False)

    def _finish(self, *, binding: bool) -> bool:
        # commit (binding) and keep share one ending: the gang check, then record or undo.
        self._check_open()
        why = self._gang_refusal(binding=binding)
        if why is not None:
            self.ssn.refusals.append(why)
            self.discard()
            return False
        ssn = self.ssn
        decided = (
            [op for op in self.ops if op.kind is not OpKind.LIFT] if self._lifted else self.ops
        )
        promoted: list[Op] = []
        if binding and self._bind_kept:
            jobs = set(self._bind_kept)
            promoted = [
                op
                for op in ssn.kept
                if op.kind is OpKind.ALLOCATE and int(ssn.task_job[op.task]) in jobs
            ]
        ssn.record(decided, committed=binding, promoted=promoted)
        self._end()
        return True
