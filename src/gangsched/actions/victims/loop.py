"""The victim loop shared by the ``preempt`` and ``reclaim`` actions (:func:`run`), and the
binding of carried reservations (:func:`realise_reservations`).

See :mod:`gangsched.actions.victims` for the theory of operation.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import numpy as np

from gangsched.actions._gang_placement import hard_domain
from gangsched.actions.victims.rules import Scope, claimants, note_refusal
from gangsched.actions.victims.search import preempt_job
from gangsched.model import TaskPhase
from gangsched.session.arrays import TaskTemplate, build_templates
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
    as well); the others keep their reservation. Runs once per session (the cycle's
    ``reservations`` message says whether it ran).

    One statement per job: its reservations are lifted off their nodes
    (:meth:`~gangsched.session.statement.Statement.lift`), each is bound where it was reserved
    if the node still passes the task's predicates (its labels, taints or devices may have
    changed since the reservation was made) and the gate admits it, and the statement is
    committed (binding the job's kept allocations too) or discarded; the reservations not
    bound go back either way. A reservation kept for any reason but room not yet idle says
    why in the task's reason.
    """
    if ssn.messages.reservations.done:
        return
    ssn.messages.reservations.mark()
    carried: dict[int, list[int]] = {}
    tasks_of = ssn.snapshot.tasks
    reserved = np.flatnonzero(ssn.task_state == TaskState.PIPELINED)
    for t, j in zip(reserved.tolist(), ssn.task_job[reserved].tolist(), strict=True):
        if tasks_of[t].phase is TaskPhase.PIPELINED:
            carried.setdefault(j, []).append(t)
    shapes = _carried_templates(ssn, [t for j in sorted(carried) for t in carried[j]])
    for j in sorted(carried):
        tasks = sorted(carried[j], key=ssn.task_key)
        # Asked while every reservation still holds its node: a hard gang whose reservations
        # and running tasks lie outside one allowed domain binds none of them.
        domain = hard_domain(ssn, j)
        if isinstance(domain, str):
            for t in tasks:
                ssn.task_reasons[t] = f"reservation not bound: {domain}"
            continue
        stmt = Statement(ssn)
        for t in tasks:
            stmt.lift(t)
        for op in list(stmt.ops):
            failed = _failed_predicates(ssn, shapes[op.task], op.node)
            if failed:
                name = ssn.snapshot.nodes[op.node].name
                ssn.task_reasons[op.task] = (
                    f"reservation not bound: node {name!r} no longer passes its predicates: "
                    + ", ".join(failed)
                )
                continue
            # The gate's own answer: a reservation whose node is not idle yet is kept quietly;
            # one kept by another rule (its queue over its capability, its node cordoned) says
            # why.
            why = stmt.attempt(op.task, op.node, op.gpus, pipelined=False)
            if why is not None and why.rule is not Rule.NODE_FIT:
                ssn.task_reasons[op.task] = f"reservation not bound: {why}"
        bound = [op.task for op in stmt.ops if op.kind is OpKind.ALLOCATE]
        kept = [t for t in tasks if ssn.task_state[t] == TaskState.PENDING]
        over = ssn.gate.over_with_kept(bound, kept)
        if over is not None:
            for t in tasks:
                ssn.task_reasons[t] = f"reservation not bound: {over}"
        if kept and bound and over is None:
            # Readiness reads the reservations not bound as what they stay (reserved), not as
            # the pending tasks they are while lifted: a best-effort one would count as ready.
            stmt.put_back()
        if bound and over is None and ssn.points.job_ready(j):
            # Allocations ``allocate`` kept for this job (not ready then) count toward its
            # readiness now: they become binds too, or the job would be bound in part.
            stmt.bind_kept(j)
            stmt.commit()
        else:
            stmt.discard()


def _carried_templates(ssn: Session, tasks: list[int]) -> dict[int, TaskTemplate]:
    """A template per carried reservation, for asking the predicates about its node. They are
    not the session's templates (the reserved tasks are not pending): their indices are
    negative so that nothing keyed by a session template's index can take them for one."""
    if not tasks:
        return {}
    templates, template_of = build_templates(ssn.snapshot, ssn.task_req, sorted(tasks))
    own = [dataclasses.replace(tmpl, index=-1 - tmpl.index) for tmpl in templates]
    return {t: own[int(template_of[t])] for t in tasks}


def _failed_predicates(ssn: Session, tmpl: TaskTemplate, node: int) -> list[str]:
    """The reasons the predicates refuse ``node`` for ``tmpl`` (empty: it passes)."""
    row = np.array([node], dtype=np.intp)
    return [reason for reject, reason in ssn.points.rejections(tmpl, row) if bool(reject[0])]
