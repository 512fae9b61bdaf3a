"""A transaction over the session: allocate / pipeline / evict / admit with an undo log.

Every placement passes the gate (:mod:`gangsched.session.gate`): an operation that breaks a hard
rule
(node fit, devices, cordon, queue capability, hard topology) is not applied, and a statement
that would leave a gang partial is undone instead of committed.

A gang is tried inside one statement; ``commit()`` makes its operations decisions,
``discard()`` undoes them in reverse so every session array is restored exactly (resources are
int64, so undo is exact arithmetic, not approximate).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gangsched.model import JobPhase
from gangsched.session import ledger as _ledger
from gangsched.session.gate import Rule

if TYPE_CHECKING:
    from gangsched.session.core import Session
    from gangsched.session.gate import Refusal

__all__ = ["Op", "OpKind", "Statement"]


class OpKind(enum.StrEnum):
    """What an operation does."""

    ALLOCATE = enum.auto()
    PIPELINE = enum.auto()
    EVICT = enum.auto()


@dataclass(frozen=True, slots=True)
class Op:
    kind: OpKind
    task: int
    node: int
    gpus: tuple[int, ...]
    prev_state: int = 0
    reason: str = ""
    preemptor: str = ""


class Statement:
    """Operations recorded against ``ssn``; nothing is a decision until :meth:`commit`."""

    __slots__ = ("_done", "_phases", "ops", "relax", "ssn")

    def __init__(self, ssn: Session, *, relax: frozenset[Rule] = frozenset()) -> None:
        self.ssn = ssn
        self.ops: list[Op] = []
        #: ``(job, phase before)`` of every job this statement admitted, for undo.
        self._phases: list[tuple[int, JobPhase]] = []
        self._done = False
        #: Rules a what-if trial leaves out (``Rule.TOPOLOGY``: "would it fit anywhere?",
        #: asked to explain a refusal; ``Rule.CAPABILITY``: the enqueue shape check, which
        #: asks whether the gang fits the cluster at all). Such a statement can only be
        #: discarded, never committed or kept.
        self.relax = relax

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

    def restore(self, task: int) -> None:
        """Undo this statement's eviction of ``task`` alone (the others stay)."""
        self._check_open()
        for i in range(len(self.ops) - 1, -1, -1):
            op = self.ops[i]
            if op.kind is OpKind.EVICT and op.task == task:
                _ledger.unevict(self.ssn, task, op.prev_state)
                del self.ops[i]
                return
        raise RuntimeError(f"task {task} was not evicted by this statement")

    def admit(self, job: int) -> None:
        """Move a Pending ``job`` to Inqueue (admitted: its tasks may be placed)."""
        self._check_open()
        before = self.ssn.job_phase[job]
        if before is not JobPhase.PENDING:
            raise RuntimeError(f"job {self.ssn.snapshot.jobs[job].name!r} is not Pending")
        self._phases.append((job, before))
        self.ssn.job_phase[job] = JobPhase.INQUEUE

    def discard(self) -> None:
        """Undo every operation, newest first."""
        self._check_open()
        for job, before in reversed(self._phases):
            self.ssn.job_phase[job] = before
        self._phases.clear()
        for op in reversed(self.ops):
            if op.kind is OpKind.EVICT:
                _ledger.unevict(self.ssn, op.task, op.prev_state)
            else:
                _ledger.unplace(self.ssn, op.task)
        self.ops.clear()
        self._done = True

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
        self.ssn.record(self.ops, committed=binding)
        self._done = True
        return True
