"""The victim loop shared by the ``preempt`` and ``reclaim`` actions (:func:`run`), and the
binding of carried reservations (:func:`realise_reservations`).

See :mod:`gangsched.actions.victims` for the theory of operation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gangsched.actions._gang_placement import hard_domain
from gangsched.actions.victims.rules import Scope, claimants, note_refusal
from gangsched.actions.victims.search import preempt_job
from gangsched.model import TaskPhase
from gangsched.session import ledger as _ledger
from gangsched.session.core import TaskState
from gangsched.session.gate import Rule
from gangsched.session.statement import OpKind, Statement

if TYPE_CHECKING:
    from gangsched.session.core import Session

__all__ = ["realise_reservations", "run"]


def run(ssn: Session, scope: Scope) -> None:
    """Preempt (or reclaim) for every starving job, in queue order then job order."""
    realise_reservations(ssn)
    for j, claim in claimants(ssn):
        note_refusal(ssn, j, scope.action, scope.gate(ssn, j) or preempt_job(ssn, scope, j, claim))


def realise_reservations(ssn: Session) -> None:
    """Bind carried reservations whose resources are idle now.

    A task the snapshot lists as ``Pipelined`` (with its node and devices) holds a reservation
    made in an earlier cycle. Per job, the reserved tasks whose node now has their resources
    idle — without eating into anyone else's reservation — are bound there, if that makes the
    job ready (together with what ``allocate`` placed for it in this cycle, which is then bound
    as well); the others keep their reservation. Runs once per session.
    """
    if ssn.reservations_realised:
        return
    ssn.reservations_realised = True
    carried: dict[int, list[int]] = {}
    for t, task in enumerate(ssn.snapshot.tasks):
        if task.phase is TaskPhase.PIPELINED and ssn.task_state[t] == TaskState.PIPELINED:
            carried.setdefault(int(ssn.task_job[t]), []).append(t)
    for j in sorted(carried):
        tasks = sorted(carried[j], key=ssn.task_key)
        # Asked while every reservation still holds its node: a hard gang whose reservations
        # and running tasks lie outside one allowed domain binds none of them.
        domain = hard_domain(ssn, j)
        if isinstance(domain, str):
            for t in tasks:
                ssn.task_reasons[t] = f"reservation not bound: {domain}"
            continue
        spots = {t: (int(ssn.task_node[t]), ssn.task_gpus[t]) for t in tasks}
        for t in tasks:
            _ledger.unplace(ssn, t)
        stmt = Statement(ssn)
        for t in tasks:
            node, gpus = spots[t]
            # The gate's own answer: a reservation whose node is not idle yet, or whose queue
            # is over its capability, is kept, not refused.
            why = stmt.attempt(t, node, gpus, pipelined=False)
            if why is not None and why.rule is Rule.CAPABILITY:
                ssn.task_reasons[t] = f"reservation not bound: {why}"
        kept = [t for t in tasks if ssn.task_state[t] == TaskState.PENDING]
        over = ssn.gate.over_with_kept([op.task for op in stmt.ops], kept)
        if over is not None:
            for t in tasks:
                ssn.task_reasons[t] = f"reservation not bound: {over}"
        if stmt.ops and over is None and ssn.points.job_ready(j):
            stmt.commit()
            # Allocations ``allocate`` kept for this job (not ready then) count toward its
            # readiness now: they become binds too, or the job would be bound in part.
            mine = [
                op for op in ssn.kept if op.kind is OpKind.ALLOCATE and ssn.task_job[op.task] == j
            ]
            if mine:
                ssn.kept[:] = [op for op in ssn.kept if op not in mine]
                ssn.committed.extend(mine)
        else:
            stmt.discard()
        for t in tasks:
            if ssn.task_state[t] == TaskState.PENDING:
                node, gpus = spots[t]
                _ledger.place(ssn, t, node, gpus, pipelined=True)
