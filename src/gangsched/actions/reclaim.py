"""reclaim: a queue below its deserved share takes resources back from queues above theirs.

Theory of operation
-------------------
Carried reservations are bound first. Then every admitted, valid, starving job, in queue order
and job order, whose queue is Open (a Closed or Closing queue reclaims nothing, as in Volcano),
*not* overused (``overused`` point) and *preemptive* for its claim (the ``preemptive`` answer
of every plugin that has one, all must agree: capacity's per-dimension rule, see
``plugins/capacity.py``) claims the pending tasks that bring it to its gang minimum; each
claimed task must pass its queue's ``allocatable`` check as it is pipelined. Candidate victims
are running or bound tasks, ``preemptable`` on task and job (``victims.rules.evictable``), of jobs
in *other* queues that are ``reclaimable`` (this action owns that rule) and hold more than
their deserved share on some resource; the ``reclaimable`` plugin point narrows them
(proportion: the queue is above deserved on some resource; capacity: per dimension of the
victim). Bundles, search and the all-or-nothing commit are shared with ``preempt``.

Queue priority decides which queue loses first: victims are first sought in the
lowest-priority queues above their share alone, and a queue of higher priority loses tasks
only when no admissible victim set exists among the queues of lower or equal priority.

Fair-share measure: ``share(q) = max_r allocated_r / deserved_r`` over the resources (pods
excluded), ``deserved`` as the fair-share plugin (proportion or capacity) computed it at the
start of the cycle; a resource a queue holds but does not deserve counts as an infinite share.

The rule against preemption cycles
----------------------------------
Call a running task *exposed* when the fair-share plugin's victim rule could select it for
some reclaimer: under ``proportion`` every task of a queue above its deserved amount on any
resource; under ``capacity`` a task whose queue (and, with ``ancestorReclaimLevel``, the
ancestors that rule checks) is above deserved on one of the task's resources it deserves, or
deserves none of them. A reclaim by queue R is admissible only if

1. every victim is exposed before the move (the candidate filter and ``reclaimable``);
2. no claimed task is exposed after the move (:func:`exposed_claim`): under ``proportion``
   ``share(R + claim) ≤ 1``; under ``capacity`` R is at or below deserved on each resource a
   claimed task asks for that R deserves, deserves at least one of them, and the ancestor
   checks protect it where R deserves none.

Why no cycle (the full argument is in ``docs/preemption.md``): a task that is not exposed stays
so while conditions are unchanged and no queue borrows, because allocate, preempt and reclaim
never add to a queue beyond its deserved amount on the resources they add (proportion's
``allocatable``); so the reclaimer's new tasks never become victims, its job — at its
minimum, so evictable only whole — can never be taken, and every victim→reclaimer edge points
to a job that has left the victim pool for good: no loop of any length. Rule 2 is the weakest
condition on the reclaimer alone: a claimed task left exposed can be taken back at once by the
queue that lost it (Volcano's ``preemptive`` admits such pairs, and they ping-pong).

With ``capacity``, whose ``allocatable`` admits tasks up to the real capability, ``allocate``
can lift a queue above deserved again by **borrowing** idle resources; then the guarantee is
that no reclaim is reversed by reclaim alone (a reversal must follow a borrow). Without a
fair-share plugin there is no deserved share, and reclaim does nothing (and says so).

Who may evict (``preemption_policy: Never``, ``preemption_delay``) and the disruption budgets
are applied by the shared search (``victims.rules.policy_refusal``,
:mod:`gangsched.session.rules.disruption`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from gangsched._types import F64, I64
from gangsched.actions._base import PREDICATE_ERROR_CACHE, ConfiguredAction
from gangsched.actions.victims import loop, search
from gangsched.actions.victims import rules as v
from gangsched.config import arg_bool
from gangsched.model import QueueState
from gangsched.session.core import TaskState
from gangsched.session.task_states import in_states
from gangsched.units import PODS

if TYPE_CHECKING:
    from gangsched.session.core import Session


def queue_shares(ssn: Session) -> F64:
    """Every queue's share ``max_r allocated_r / deserved_r`` now. Shape (n_queues,)."""
    deserved = ssn.queue_deserved
    alloc = ssn.queue_allocated
    if deserved is None:
        return np.zeros(alloc.shape[0])
    dims = np.arange(alloc.shape[1]) != ssn.arrays.spec.index(PODS)
    d = deserved[:, dims].astype(np.float64)
    a = alloc[:, dims].astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(d > 0, a / np.where(d > 0, d, 1.0), np.where(a > 0, np.inf, 0.0))
    out: F64 = ratio.max(axis=1, initial=0.0)
    return out


#: Slack on "share ≤ 1" for the rounding of deserved amounts to canonical units.
SLACK = 1e-9


def _gate(ssn: Session, job: int) -> v.VictimRefusal | None:
    """The reclaimer's eligibility: its queue is Open and below its deserved share."""
    q = int(ssn.job_queue[job])
    queue = ssn.snapshot.queues[q]
    name = queue.name
    if queue.state is not QueueState.OPEN:
        # Volcano: only an Open queue reclaims (proportion's ``preemptive``), whether or not a
        # plugin's ``allocatable`` would later refuse the claim.
        return (
            v.QUEUE_NOT_OPEN,
            f"queue {name!r} is {queue.state.value}: only an Open queue reclaims",
        )
    if ssn.queue_deserved is None:
        return (
            v.NO_FAIR_SHARE,
            "no fair-share plugin (proportion or capacity) gives queues a deserved share",
        )
    if ssn.points.overused(q):
        return (v.QUEUE_OVERUSED, f"queue {name!r} already holds its deserved share")
    return None


def _preemptive(ssn: Session, job: int, claim: Sequence[int]) -> v.VictimRefusal | None:
    """Volcano's ``preemptive`` point on the claim: every plugin that answers must agree."""
    refused = ssn.points.preemptive(int(ssn.job_queue[job]), list(claim))
    if refused is not None:
        return (v.QUEUE_OVERUSED, f"{refused[0]}: {refused[1]}")
    return None


def _over_queues(ssn: Session) -> npt.NDArray[np.bool_]:
    return queue_shares(ssn) > 1.0 + SLACK


def _candidates(
    ssn: Session, job: int, ceiling: int | None = None, *, walk: bool = False
) -> tuple[I64, v.VictimRefusal | None]:
    """Victims allowed by the action's hard rules; with ``ceiling``, only from queues of that
    priority or lower. With ``walk`` (Volcano's tier walk) a victim queue need not be above its
    deserved share: that is proportion's answer in the walk."""
    snap = ssn.snapshot
    q = int(ssn.job_queue[job])
    running = in_states(ssn.task_state, v.RUNNING_STATES)
    victim_q = ssn.job_queue[ssn.task_job]
    cands = np.flatnonzero(running & (victim_q != q)).astype(np.int64)
    if cands.size == 0:
        return cands, (v.NO_VICTIMS, "no running task in another queue")
    reclaimable = np.array([queue.reclaimable for queue in snap.queues], dtype=np.bool_)
    over = np.ones(len(snap.queues), dtype=np.bool_) if walk else _over_queues(ssn)
    if ceiling is not None:
        prio = np.array([queue.priority for queue in snap.queues], dtype=np.int64)
        over = over & (prio <= ceiling)
    cq = victim_q[cands]
    open_ = cands[reclaimable[cq] & over[cq]]
    if open_.size == 0:
        closed = sorted({snap.queues[int(x)].name for x in cq[over[cq] & ~reclaimable[cq]]})
        if closed:
            why = f"the queues above their deserved share are not reclaimable: {closed}"
        else:
            why = "no other queue holds more than its deserved share"
        return open_, (v.QUEUE_NOT_OVER_DESERVED, why)
    ok = open_[v.evictable(ssn, open_)]
    if ok.size == 0:
        return ok, (
            v.NOT_PREEMPTABLE,
            f"the {open_.size} task(s) of queues above their share are marked preemptable: false",
        )
    return ok, None


def _priority_levels(ssn: Session, job: int) -> list[int | None]:
    """Victim-queue priority ceilings to try in turn, lowest first; ``None`` (every queue)
    last. One pass when the queues above their share all have the same priority."""
    q = int(ssn.job_queue[job])
    over = _over_queues(ssn)
    over[q] = False
    levels = sorted({ssn.snapshot.queues[int(x)].priority for x in np.flatnonzero(over)})
    return [*levels[:-1], None]


def exposed_claim(ssn: Session, job: int) -> str | None:
    """Rule 2: why a claimed (pipelined) task of ``job`` could be reclaimed back now, or None.

    Every tier of ``reclaimable`` plugins may be the one that decides, so each is asked: a
    tier with a plugin whose victim rule is per task answers through that plugin's
    ``exposed`` method (capacity); a tier without one leaves the action's queue-level rule,
    under which the reclaimer's share must be at most 1."""
    tasks = [int(t) for t in ssn.job_tasks(job) if ssn.task_state[t] == TaskState.PIPELINED]
    why, queue_level = ssn.points.exposed(tasks)
    if why is not None:
        return why
    q = int(ssn.job_queue[job])
    share = float(queue_shares(ssn)[q])
    if queue_level and share > 1.0 + SLACK:
        name = ssn.snapshot.queues[q].name
        return (
            f"after the move queue {name!r} would hold {share:.4g} of its deserved share; a "
            "reclaimer must stay within it (so it is never reclaimed back)"
        )
    return None


#: The argument that switches rule 2 (the reclaimer's claim must not be exposed after the move)
#: off: a gangsched extension, on by default and off in a configuration read from Volcano's
#: YAML, whose ``preemptive`` admits a reclaimer within its deserved share on one requested
#: resource whatever the others.
SHARE_GUARD_ARG = "fairShareGuard"


def _admissible(
    ssn: Session, job: int, victims: Sequence[int], before: Any
) -> v.VictimRefusal | None:
    if not victims:
        return None
    why = exposed_claim(ssn, job)
    return None if why is None else (v.SHARE_GUARD, why)


def _reason(ssn: Session, job: int, victim: int) -> str:
    snap = ssn.snapshot
    mine = snap.jobs[job]
    vq = int(ssn.job_queue[ssn.task_job[victim]])
    theirs = snap.queues[vq].name
    if not _over_queues(ssn)[vq]:  # only under Volcano's tier walk
        return (
            f"reclaimed by queue {mine.queue!r} for job {mine.name!r} from queue {theirs!r} "
            "(the first tier of reclaimable plugins chose it: Volcano's tier walk)"
        )
    return (
        f"reclaimed by queue {mine.queue!r} for job {mine.name!r}: queue {theirs!r} holds "
        "more than its deserved share"
    )


SCOPE = v.Scope(
    action="reclaim",
    point="reclaimable",
    gate=_gate,
    candidates=_candidates,
    baseline=v.no_baseline,
    admissible=_admissible,
    reason=_reason,
)


def run(ssn: Session, action: str = "reclaim") -> None:
    """Reclaim for every starving job, in queue order then job order (``victims.loop.run``, with
    the ``preemptive`` check and the victim queues tried by priority, lowest first), as
    ``action`` (``reclaim`` or ``gangreclaim``: whether a victim gang may go whole,
    :func:`~gangsched.actions.victims.rules.whole_gangs`)."""
    base = replace(SCOPE, action=action, whole=v.whole_gangs(ssn, action))
    if not arg_bool(ssn.config.action_arguments(action), SHARE_GUARD_ARG, True, plugin=action):
        base = replace(base, admissible=v.no_rule)
    loop.realise_reservations(ssn)
    walk = v.tier_walk(ssn, action)
    if walk:
        base = replace(base, candidates=_capped(None, walk=True))
    for j, claim in v.claimants(ssn):
        refusal = _gate(ssn, j) or _preemptive(ssn, j, claim)
        if refusal is None:
            for ceiling in [None] if walk else _priority_levels(ssn, j):
                scope = base if ceiling is None else replace(base, candidates=_capped(ceiling))
                refusal = search.preempt_job(ssn, scope, j, claim)
                if refusal is None:
                    break
        v.note_refusal(ssn, j, base.action, refusal)


def _capped(ceiling: int | None, *, walk: bool = False) -> Any:
    def candidates(ssn: Session, job: int) -> tuple[I64, v.VictimRefusal | None]:
        return _candidates(ssn, job, ceiling, walk=walk)

    return candidates


class ReclaimAction(ConfiguredAction):
    name = "reclaim"
    known_arguments: tuple[str, ...] = (
        PREDICATE_ERROR_CACHE,
        v.WHOLE_BUNDLE,
        SHARE_GUARD_ARG,
        v.ALL_VICTIM_RULES,
    )

    def execute(self, ssn: Session) -> None:
        run(ssn, self.name)


class GangReclaimAction(ReclaimAction):
    """``gangreclaim`` (Volcano v1.15's gang-aware reclaim): ``reclaim`` whose victims may be
    whole gangs unless ``allowWholeBundle`` is set false; the rest is reclaim's (``maxDomains``
    accepted and not read, as for ``gangpreempt``)."""

    name = "gangreclaim"
    known_arguments: tuple[str, ...] = (
        *(a for a in ReclaimAction.known_arguments if a != v.ALL_VICTIM_RULES),
        v.MAX_DOMAINS,
    )


__all__ = ["SCOPE", "GangReclaimAction", "ReclaimAction", "exposed_claim", "queue_shares", "run"]
