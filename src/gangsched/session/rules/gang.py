"""Gang arithmetic: what a job's minimum asks for, and how far its tasks are from it.

The rules, stated once (the gang plugin, the victim rules and the placement gate call these):

* a job is **ready** when its ready tasks (Allocated, Bound, Running, Succeeded: Volcano's
  ``ReadyTaskNum``) plus its pending best-effort tasks reach ``min_available``, and every role
  with a minimum has that many ready or pending best-effort tasks (Volcano's
  ``CheckTaskReady``: a best-effort task waits for no resource, so it counts for its role as it
  counts for the job);
* it is **pipelined** when the same holds counting reserved (Pipelined) tasks too;
* **role minimums** (``min_task_member``) count only when they fit inside the job's minimum
  (``min_available >= sum of the role minimums``); otherwise Volcano ignores them, and so does
  gangsched;
* the **deficit** is how many more tasks the job needs placed (or reserved) to reach its
  minimum, and its **claim** (:func:`needed_tasks`) the pending tasks that close it, short
  roles first;
* its **surplus** (:func:`spare_tasks`) is what may go while it keeps ``min_available`` ready
  tasks and every role its minimum; it **may go whole** (:func:`may_go_whole`) when the tasks
  are every task it runs and it holds nothing of this cycle.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from gangsched._types import BOOL, I64
from gangsched.model import Job
from gangsched.session.task_states import (
    PIPELINED_OR_READY,
    READY_STATES,
    RUNNING_STATES,
    TaskState,
)

if TYPE_CHECKING:
    from gangsched.session.core import Session

__all__ = [
    "FRESH_STATES",
    "RUNNING_STATES",
    "deficit",
    "is_pipelined",
    "is_ready",
    "may_go_whole",
    "needed_tasks",
    "role_minimums",
    "role_shortfall",
    "spare_tasks",
]

#: A task placed or reserved in this cycle.
FRESH_STATES = (TaskState.ALLOCATED, TaskState.PIPELINED)


def pending_tasks(ssn: Session) -> tuple[I64, BOOL]:
    """The pending tasks (task order) and which of them are best-effort (no request: backfill
    places them, and they count toward readiness while they wait), read from the session's
    column of the task records' flags (a template's flag is its tasks' own)."""
    pending = np.flatnonzero(ssn.task_state == TaskState.PENDING)
    best_effort: BOOL = ssn.columns.best_effort[pending]
    return pending, best_effort


def role_minimums(rec: Job) -> Mapping[str, int]:
    """The role minimums that count for ``rec`` (empty when it has none, or when they do not
    fit inside its ``min_available``)."""
    roles = rec.min_task_member
    if not roles or rec.min_available < sum(roles.values()):
        return {}
    return roles


def role_shortfall(
    ssn: Session, job: int, states: Sequence[int], *, best_effort: bool = False
) -> tuple[str, int, int] | None:
    """The first role (in the job's order) with fewer tasks in ``states`` than its minimum, as
    ``(role, have, need)``; None when every role has enough. With ``best_effort``, the role's
    pending best-effort tasks count too (readiness and pipelining count them)."""
    for role, need in role_minimums(ssn.snapshot.jobs[job]).items():
        have = ssn.count_states(job, states, role)
        if have < need and best_effort:
            have += pending_best_effort_of_role(ssn, job, role)
        if have < need:
            return role, have, need
    return None


def pending_best_effort_of_role(ssn: Session, job: int, role: str) -> int:
    """The job's pending best-effort tasks of ``role``."""
    if not ssn.pending_best_effort(job):
        return 0
    tasks = ssn.snapshot.tasks
    return sum(
        1
        for t in ssn.job_tasks(job).tolist()
        if ssn.task_state[t] == TaskState.PENDING and tasks[t].best_effort and tasks[t].role == role
    )


def deficit(ssn: Session, job: int) -> int:
    """Tasks the job still needs placed or reserved to reach ``min_available`` (≥ 0)."""
    have = ssn.count_states(job, PIPELINED_OR_READY) + ssn.pending_best_effort(job)
    return max(int(ssn.job_min[job]) - have, 0)


def is_ready(ssn: Session, job: int) -> bool:
    ready = ssn.count_states(job, READY_STATES) + ssn.pending_best_effort(job)
    return (
        ready >= ssn.job_min[job]
        and role_shortfall(ssn, job, READY_STATES, best_effort=True) is None
    )


def is_pipelined(ssn: Session, job: int) -> bool:
    have = ssn.count_states(job, PIPELINED_OR_READY) + ssn.pending_best_effort(job)
    return (
        have >= ssn.job_min[job]
        and role_shortfall(ssn, job, PIPELINED_OR_READY, best_effort=True) is None
    )


def needed_tasks(ssn: Session, job: int) -> list[int]:
    """The pending tasks that bring the job to its gang minimum (short roles first), in task
    order; empty when the minimum is met or cannot be reached from the pending tasks."""
    rec = ssn.snapshot.jobs[job]
    short_by = deficit(ssn, job)
    if short_by == 0:
        return []
    pending = [
        int(t)
        for t in ssn.job_tasks(job)
        if ssn.task_state[t] == TaskState.PENDING and not ssn.snapshot.tasks[int(t)].best_effort
    ]
    pending.sort(key=ssn.task_key)
    chosen: list[int] = []
    for role, need in sorted(role_minimums(rec).items()):
        short = (
            need
            - ssn.count_states(job, PIPELINED_OR_READY, role)
            - pending_best_effort_of_role(ssn, job, role)
        )
        of_role = [t for t in pending if ssn.snapshot.tasks[t].role == role]
        if short > len(of_role):
            return []
        chosen += of_role[: max(short, 0)]
    rest = [t for t in pending if t not in chosen]
    chosen += rest[: max(short_by - len(chosen), 0)]
    if len(chosen) < short_by:
        return []
    chosen.sort(key=ssn.task_key)
    return chosen


def spare_tasks(ssn: Session, job: int, tasks: list[int]) -> list[int]:
    """The gang surplus rule (its one owner): the tasks, taken in the given (victim) order,
    that may go while the job keeps ``min_available`` ready tasks and every role keeps its
    minimum.

    Ready means allocated, bound, running or succeeded — Volcano's ``ReadyTaskNum``: pending
    best-effort tasks do not count (they run nowhere yet), so a job running exactly its
    minimum loses nothing whatever best-effort tasks wait. The surplus is
    ``ready − min_available``, and per role ``ready(role) − min_task_member[role]``."""
    rec = ssn.snapshot.jobs[job]
    spare = ssn.count_states(job, READY_STATES) - int(ssn.job_min[job])
    limits = {
        role: ssn.count_states(job, READY_STATES, role) - need
        for role, need in role_minimums(rec).items()
    }
    taken: list[int] = []
    for t in tasks:
        if len(taken) >= spare:
            break
        role = ssn.snapshot.tasks[t].role
        if role in limits:
            if limits[role] <= 0:
                continue
            limits[role] -= 1
        taken.append(t)
    return taken


def may_go_whole(ssn: Session, job: int, tasks: Sequence[int]) -> bool:
    """The whole-job rule (its one owner): ``tasks`` (candidates of ``job``) are every task the
    job runs or has bound, and the job holds no reservation or allocation of this cycle."""
    return ssn.count_states(job, FRESH_STATES) == 0 and len(tasks) == ssn.count_states(
        job, RUNNING_STATES
    )
