"""preempt: a starving job takes resources from lower-priority jobs of its own queue.

Theory of operation
-------------------
Carried reservations are bound first (see ``_victims.realise_reservations``). Then every
admitted, valid, starving job, in queue order and job order, claims the pending tasks that
bring it to its gang minimum. Candidate victims are the running or bound tasks of *other* jobs
of the *same* queue whose job priority is strictly lower than the preemptor's, with
``preemptable`` set on the task and on its job; the ``preemptable`` plugin point narrows them
(tier by tier, the first tier with an answer decides). Victims are chosen as whole-job or
surplus bundles by the shared gang-aware search, and evicted only if the whole claim is then
pipelined; the claim is reserved, never bound in this cycle.

No preemption cycle: every eviction goes from a job to one of strictly higher priority, and
priorities do not change, so the victim→preemptor graph of ``preempt`` follows a strict order
and cannot close a loop. The rule is the action's own, not a plugin's, so it holds whatever
the tiers say.

Not done: preemption inside one job (a job's higher-priority pending task evicting its own
lower-priority task), ``preemptionPolicy: Never``, and elastic tasks beyond ``min_available``
(they never preempt).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from . import _victims as v

if TYPE_CHECKING:
    from ..session import Session

I64 = npt.NDArray[np.int64]


def _candidates(ssn: Session, job: int) -> tuple[I64, v.Refusal | None]:
    snap = ssn.snapshot
    q = int(ssn.job_queue[job])
    queue = snap.queues[q].name
    running = np.isin(ssn.task_state, v.RUNNING_STATES) & (ssn.task_job != job)
    same = running & (ssn.job_queue[ssn.task_job] == q)
    cands = np.flatnonzero(same).astype(np.int64)
    if cands.size == 0:
        return cands, (v.NO_VICTIMS, f"no running task of another job in queue {queue!r}")
    prio = snap.jobs[job].priority
    job_prio = np.array([j.priority for j in snap.jobs], dtype=np.int64)
    lower = cands[job_prio[ssn.task_job[cands]] < prio]
    if lower.size == 0:
        return lower, (
            v.NO_LOWER_PRIORITY,
            f"no running job in queue {queue!r} has a priority below {prio}",
        )
    flags = np.array(
        [
            snap.tasks[t].preemptable and snap.jobs[int(ssn.task_job[t])].preemptable
            for t in lower.tolist()
        ],
        dtype=np.bool_,
    )
    ok = lower[flags]
    if ok.size == 0:
        return ok, (
            v.NOT_PREEMPTABLE,
            f"the {lower.size} lower-priority task(s) are marked preemptable: false",
        )
    return ok, None


def _reason(ssn: Session, job: int, victim: int) -> str:
    jobs = ssn.snapshot.jobs
    mine = jobs[job]
    theirs = jobs[int(ssn.task_job[victim])]
    return (
        f"preempted by job {mine.name!r} (priority {mine.priority} > {theirs.priority}) "
        f"in queue {mine.queue!r}"
    )


SCOPE = v.Scope(
    action="preempt",
    point="preemptable",
    gate=v.no_gate,
    candidates=_candidates,
    baseline=v.no_baseline,
    admissible=v.no_rule,
    reason=_reason,
)


class PreemptAction:
    name = "preempt"

    def __init__(self, arguments: Mapping[str, object]) -> None:
        self.arguments = arguments

    def execute(self, ssn: Session) -> None:
        v.run(ssn, SCOPE)


__all__ = ["SCOPE", "PreemptAction"]
