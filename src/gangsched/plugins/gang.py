"""gang: all-or-nothing jobs (Volcano's gang plugin).

A job is *valid* when enough of its tasks exist to ever reach ``min_available`` (and every
role's minimum); *ready* when at least ``min_available`` tasks are allocated, bound, running or
succeeded (pending best-effort tasks count, since backfill places them); *pipelined* when ready
plus reserved tasks reach it; *starving* while ready plus pipelined is below it. Per-role
minimums are enforced unless ``min_available`` is below their sum, as in Volcano.

As victims (``preemptable`` / ``reclaimable``) gang permits every candidate. The gang rule on
victims — a job loses at most its surplus (ready tasks beyond ``min_available``, every role
kept at its minimum) or goes whole — has one owner, the preempt and reclaim actions' bundles
(``actions/victims/``: ``spare_tasks``, ``may_go_whole``), which apply it whatever the tiers
say; gang still answers so that its tier decides, as Volcano's gang does.
``victim_order``: jobs with a surplus (ready beyond ``min_available``) first.

``job_order``: within a priority, a gang *restoring its minimum* first, then the other gangs
that are not ready, then ready ones. A gang restores its minimum when it was running (phase
Running or Unknown), still holds bound or running tasks, and is below ``min_available`` (a
node failed under some of its pods): the resources it holds are useless until it is whole, so
it goes ahead of jobs that hold nothing, whatever drf says of its share. Only gangs that lost
tasks qualify, and only until they are whole again, so no new job can use the rule to jump the
queue. Such a gang's status says ``RestoringMinimum``: ``restoring its minimum (k of m
running)`` until a later word replaces it (allocate's explanation when it still cannot fit).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from gangsched.framework.combine import Vote
from gangsched.model import JobPhase
from gangsched.session.core import READY_STATES, TaskState
from gangsched.session.rules.gang import is_pipelined, is_ready, role_shortfall

if TYPE_CHECKING:
    from gangsched.session.core import Session

VALID_STATES = (
    TaskState.PENDING,
    TaskState.ALLOCATED,
    TaskState.PIPELINED,
    TaskState.BOUND,
    TaskState.RUNNING,
    TaskState.SUCCEEDED,
)
PIPELINED_STATES = (*READY_STATES, TaskState.PIPELINED)
#: States in which a task holds resources on a node from an earlier cycle.
HELD_STATES = (TaskState.BOUND, TaskState.RUNNING)
#: Job phases of a gang that was running (Volcano marks a gang below its minimum Unknown).
RUNNING_PHASES = (JobPhase.RUNNING, JobPhase.UNKNOWN)

# The job order's keys, lowest first: a gang restoring its minimum, a job that waits, a
# job ready already.
_READY: tuple[Any, ...] = (1,)
_RESTORING: tuple[Any, ...] = (-1,)
_WAITING: tuple[Any, ...] = (0,)


def _in_states(counts: npt.NDArray[np.int64], states: tuple[int, ...]) -> npt.NDArray[np.int64]:
    """Per job, its tasks in ``states`` (``counts``: tasks per job and state), a column at a
    time."""
    out = counts[:, states[0]].copy()
    for s in states[1:]:
        out += counts[:, s]
    return out


class GangPlugin:
    name = "gang"
    known_arguments: tuple[str, ...] = ()

    def __init__(self, arguments: Mapping[str, object]) -> None:
        self.arguments = arguments

    def on_session_open(self, ssn: Session) -> None:
        # Vectorised pre-filter (holds something, fewer ready than its minimum); the exact
        # rule (phase, best-effort tasks, roles) runs only for the few jobs it leaves, the
        # phase read first.
        held = _in_states(ssn.job_count, HELD_STATES)
        ready = _in_states(ssn.job_count, READY_STATES)
        # (a role below its minimum makes a job not ready whatever its total count)
        maybe = (held > 0) & ((ready < ssn.job_min) | ssn.columns.job_roles)
        phases = ssn.job_phase
        for j in np.flatnonzero(maybe).tolist():
            if phases[j] not in RUNNING_PHASES:  # (a gang restoring its minimum was running)
                continue
            if self.restoring(ssn, j):
                have = ssn.count_states(j, READY_STATES)
                ssn.note_job(
                    j,
                    "RestoringMinimum",
                    f"restoring its minimum ({have} of {int(ssn.job_min[j])} running)",
                )

    def job_valid(self, ssn: Session, job: int) -> str | None:
        need = int(ssn.job_min[job])
        valid = ssn.count_states(job, VALID_STATES)
        if valid < need:
            return f"not enough valid tasks: {valid} < min_available {need}"
        short = role_shortfall(ssn, job, VALID_STATES)
        if short is None:
            return None
        role, have, need = short
        return f"not enough valid tasks for role {role!r}: {have} < {need}"

    def is_ready(self, ssn: Session, job: int) -> bool:
        return is_ready(ssn, job)

    def job_ready(self, ssn: Session, job: int) -> bool:
        return self.is_ready(ssn, job)

    @staticmethod
    def _was_running(ssn: Session, job: int) -> bool:
        return ssn.job_phase[job] in RUNNING_PHASES and ssn.count_states(job, HELD_STATES) > 0

    def restoring(self, ssn: Session, job: int) -> bool:
        """Whether the job is a running gang below its minimum that still holds tasks."""
        return self._was_running(ssn, job) and not self.is_ready(ssn, job)

    def job_order(self, ssn: Session, job: int) -> tuple[Any, ...]:
        # Ready by count first: ready and pending best-effort tasks at least
        # ``min_available``, per-role minimums not read (Volcano's gang ``JobOrderFn`` asks
        # ``JobInfo.IsReady``, a count; the roles are for ``job_ready`` and
        # ``job_pipelined``); then whether it was running. One read of the job's counters, as
        # plain ints: every job a cycle orders asks. (_was_running reads the phase first:
        # a job that waits pays no count.)
        counts = ssn.job_count[job].tolist()
        have = 0
        for s in READY_STATES:
            have += counts[s]
        if have + ssn.pending_best_effort(job) >= int(ssn.job_min[job]):
            return _READY
        return _RESTORING if self._was_running(ssn, job) else _WAITING

    def job_pipelined(self, ssn: Session, job: int) -> Vote:
        return Vote.PERMIT if is_pipelined(ssn, job) else Vote.REJECT

    def job_starving(self, ssn: Session, job: int) -> bool:
        return bool(ssn.count_states(job, PIPELINED_STATES) < ssn.job_min[job])

    def preemptable(
        self, ssn: Session, preemptor: int, candidates: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.int64]:
        return candidates

    def reclaimable(
        self, ssn: Session, preemptor: int, candidates: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.int64]:
        return candidates

    def victim_order(self, ssn: Session, task: int) -> tuple[Any, ...]:
        j = int(ssn.task_job[task])
        return (0 if ssn.count_states(j, READY_STATES) > ssn.job_min[j] else 1,)
