"""Gang-aware victim selection, shared by the ``preempt`` and ``reclaim`` actions.

Theory of operation
-------------------
A *preemptor* is an admitted, valid, starving job (the ``job_starving`` point) that still needs
pending tasks to reach its gang minimum. Its *claim* is exactly those tasks: the pending tasks
that bring ready + reserved up to ``min_available`` (every short role's minimum first), never
the elastic tasks beyond it.

The work is split in three modules, each the one owner of its part:

* :mod:`._victim_rules` — the rules a victim must pass (who may evict: ``preemption_policy:
  Never`` and ``preemption_delay``; ``preemptable`` on task and job; the priority rule of
  preempt; the gang surplus and whole-job rules), the claim and the preemptor order;
* :mod:`._victim_search` — the bundle search, its cost order, the disruption-budget passes,
  the all-or-nothing commit and the explanation when nothing is found;
* this module — the action loop (:func:`run`) and the binding of carried reservations
  (:func:`realise_reservations`), and the names the actions import.

A victim set never contains part of a gang below its minimum, whatever the plugin tiers say.
The chosen plan is replayed and committed only if the claim is pipelined; otherwise nothing is
evicted. The claimed tasks are always *pipelined* — reserved on future-idle resources — never
bound in the cycle that evicts for them; the caller carries them as ``Pipelined`` tasks (with
node and devices) and :func:`realise_reservations` binds them in a later cycle once their
resources are idle. The session never lets other tasks take resources under a reservation.

When no plan exists the job's entry in ``Decisions.preemption_reasons`` names the rule that
stopped it (one of the ``*`` reason codes of :mod:`._victim_rules`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import _ledger
from ..gate import Rule
from ..model import TaskPhase
from ..session import TaskState
from ..statement import OpKind, Statement
from ._gang_placement import hard_domain

# The rules and the search, re-exported: the actions import them from here.
from ._victim_rules import BEYOND_DESERVED as BEYOND_DESERVED
from ._victim_rules import DISRUPTION_BUDGET as DISRUPTION_BUDGET
from ._victim_rules import FRESH_STATES as FRESH_STATES
from ._victim_rules import GANG_WOULD_BREAK as GANG_WOULD_BREAK
from ._victim_rules import INSUFFICIENT as INSUFFICIENT
from ._victim_rules import MAX_DOMAINS as MAX_DOMAINS
from ._victim_rules import NO_FAIR_SHARE as NO_FAIR_SHARE
from ._victim_rules import NO_LOWER_PRIORITY as NO_LOWER_PRIORITY
from ._victim_rules import NO_VICTIMS as NO_VICTIMS
from ._victim_rules import NOT_PREEMPTABLE as NOT_PREEMPTABLE
from ._victim_rules import POLICY_NEVER as POLICY_NEVER
from ._victim_rules import PREEMPTION_DELAYED as PREEMPTION_DELAYED
from ._victim_rules import QUEUE_NOT_OPEN as QUEUE_NOT_OPEN
from ._victim_rules import QUEUE_NOT_OVER_DESERVED as QUEUE_NOT_OVER_DESERVED
from ._victim_rules import QUEUE_OVERUSED as QUEUE_OVERUSED
from ._victim_rules import RUNNING_STATES as RUNNING_STATES
from ._victim_rules import SHARE_GUARD as SHARE_GUARD
from ._victim_rules import TOPOLOGY as TOPOLOGY
from ._victim_rules import WHOLE_BUNDLE as WHOLE_BUNDLE
from ._victim_rules import WHOLE_GANG_ACTIONS as WHOLE_GANG_ACTIONS
from ._victim_rules import Refusal as Refusal
from ._victim_rules import Scope as Scope
from ._victim_rules import claimants as claimants
from ._victim_rules import current_claim as current_claim
from ._victim_rules import domains as domains
from ._victim_rules import evictable as evictable
from ._victim_rules import gang_allowed as gang_allowed
from ._victim_rules import may_go_whole as may_go_whole
from ._victim_rules import needed_tasks as needed_tasks
from ._victim_rules import no_baseline as no_baseline
from ._victim_rules import no_gate as no_gate
from ._victim_rules import no_rule as no_rule
from ._victim_rules import note_refusal as note_refusal
from ._victim_rules import policy_refusal as policy_refusal
from ._victim_rules import preempt_candidates as preempt_candidates
from ._victim_rules import preemptors as preemptors
from ._victim_rules import spare_tasks as spare_tasks
from ._victim_rules import whole_gangs as whole_gangs
from ._victim_search import PAIR_LIMIT as PAIR_LIMIT
from ._victim_search import preempt_job as preempt_job

if TYPE_CHECKING:
    from ..session import Session

__all__ = ["realise_reservations", "run"]

#: Earlier names of the shared helpers, still imported by the actions.
_preemptors = preemptors
_preempt_job = preempt_job
_domains = domains
_gang_allowed = gang_allowed


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
        if stmt.ops and ssn.points.job_ready(j):
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
