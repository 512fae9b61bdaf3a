"""reclaim: a queue below its deserved share takes resources back from queues above theirs.

Theory of operation
-------------------
Carried reservations are bound first. Then every admitted, valid, starving job, in queue order
and job order, whose queue is Open (a Closed or Closing queue reclaims nothing, as in Volcano)
and *not* overused (``overused`` point) claims the pending tasks that bring it to its gang
minimum; each claimed task must pass its queue's ``allocatable`` check as it is pipelined, so
the reclaiming queue never goes beyond what it deserves. Candidate victims are running or bound
tasks, ``preemptable`` on task and job (``_victims.evictable``), of jobs in *other* queues that
are ``reclaimable`` (this action owns that rule) and hold more than their deserved share on
some resource; the ``reclaimable`` plugin point narrows them. Bundles, search and the
all-or-nothing commit are shared with ``preempt``.

Fair-share measure: ``share(q) = max_r allocated_r / deserved_r`` over the resources (pods
excluded), ``deserved`` as the fair-share plugin (proportion or capacity) computed it at the
start of the cycle; a resource a queue holds but does not deserve counts as an infinite share.

The rule against preemption cycles
----------------------------------
A reclaim by queue R from queues V is admissible only if

1. every V is *above* its deserved share before the move: ``share(V) > 1``;
2. R stays *within* its deserved share after the move: ``share(R + claim) ≤ 1``;
3. the move helps the worse-off side: R's share rises, and every V ends with a share above
   what R had before: ``share(V − victims) > share(R)`` (a max-min improvement: the smaller
   of the two shares grows).

Why no cycle: for V (or any queue) to take back from R, rule 1 needs ``share(R) > 1``. Right
after the move ``share(R) ≤ 1`` (rule 2), and while conditions are unchanged (same deserved
shares: same queues, weights, nodes and jobs) nothing raises it above 1 again: allocate,
preempt and reclaim place a task only if ``allocated + request ≤ deserved`` on every resource
it asks for (proportion's ``allocatable``) and never add to the others. So a queue that
gained by reclaim is out of the victim pool, and the victim→reclaimer graph can close no loop
of any length. Rule 3 is not needed for that proof; it stops a reclaim that would take a
whole large gang to give a queue a sliver, leaving the victim queue worse off than the
reclaimer was (Kueue's fair-sharing strategies guard the same way). Rules 2 and 3 let two
equal-weight queues meet at exactly equal shares.

With the ``capacity`` plugin the proof needs one more condition: its ``allocatable`` admits
tasks up to a queue's real capability, so ``allocate`` may lift a queue that gained by reclaim
above its deserved share again by borrowing idle resources — and only so. Hence, with
capacity, no reclaim is reversed by reclaim alone; an edge back can only follow a borrow from
idle resources in between, and where no queue can borrow (capability at deserved on the
resources in play) the proof holds as written. Without a fair-share plugin there is no
deserved share, and reclaim does nothing (and says so).

The capacity plugin's guarantee floor and ``ancestorReclaimLevel`` act through its
``reclaimable`` answer, so only when it sits in the tier that decides (with ``gang``).
Not done: ``preemptionPolicy: Never``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from ..model import QueueState
from ..units import PODS
from . import _victims as v

if TYPE_CHECKING:
    from ..session import Session

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]


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


def _gate(ssn: Session, job: int) -> v.Refusal | None:
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
    if ssn.call("overused", q):
        return (v.QUEUE_OVERUSED, f"queue {name!r} already holds its deserved share")
    return None


def _candidates(ssn: Session, job: int) -> tuple[I64, v.Refusal | None]:
    snap = ssn.snapshot
    q = int(ssn.job_queue[job])
    running = np.isin(ssn.task_state, v.RUNNING_STATES)
    victim_q = ssn.job_queue[ssn.task_job]
    cands = np.flatnonzero(running & (victim_q != q)).astype(np.int64)
    if cands.size == 0:
        return cands, (v.NO_VICTIMS, "no running task in another queue")
    reclaimable = np.array([queue.reclaimable for queue in snap.queues], dtype=np.bool_)
    over = queue_shares(ssn) > 1.0 + SLACK
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


def _admissible(ssn: Session, job: int, victims: Sequence[int], before: F64) -> v.Refusal | None:
    if not victims:
        return None
    shares = queue_shares(ssn)
    q = int(ssn.job_queue[job])
    names = ssn.snapshot.queues
    if shares[q] > 1.0 + SLACK:
        return (
            v.SHARE_GUARD,
            f"after the move queue {names[q].name!r} would hold {shares[q]:.4g} of its "
            "deserved share; a reclaimer must stay within it (so it is never reclaimed back)",
        )
    if not shares[q] > before[q]:
        return (v.SHARE_GUARD, f"the move would not raise queue {names[q].name!r}'s share")
    for vq in sorted({int(ssn.job_queue[ssn.task_job[t]]) for t in victims}):
        if not shares[vq] > before[q]:
            return (
                v.SHARE_GUARD,
                f"after the move queue {names[vq].name!r} would hold share {shares[vq]:.4g}, "
                f"not above the {before[q]:.4g} queue {names[q].name!r} holds now",
            )
    return None


def _reason(ssn: Session, job: int, victim: int) -> str:
    snap = ssn.snapshot
    mine = snap.jobs[job]
    theirs = snap.queues[int(ssn.job_queue[ssn.task_job[victim]])].name
    return (
        f"reclaimed by queue {mine.queue!r} for job {mine.name!r}: queue {theirs!r} holds "
        "more than its deserved share"
    )


SCOPE = v.Scope(
    action="reclaim",
    point="reclaimable",
    gate=_gate,
    candidates=_candidates,
    baseline=queue_shares,
    admissible=_admissible,
    reason=_reason,
)


class ReclaimAction:
    name = "reclaim"
    #: Argument names this action reads or accepts (``*``: any text); others are refused.
    known_arguments: tuple[str, ...] = ("predicateErrorCacheEnable",)

    def __init__(self, arguments: Mapping[str, object]) -> None:
        self.arguments = arguments

    def execute(self, ssn: Session) -> None:
        v.run(ssn, SCOPE)


__all__ = ["SCOPE", "ReclaimAction", "queue_shares"]
