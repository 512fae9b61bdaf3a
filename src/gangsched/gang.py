"""Gang arithmetic: what a job's minimum asks for, and how far its tasks are from it.

The rules, stated once (the gang plugin, the victim rules and the placement gate call these):

* a job is **ready** when its ready tasks (Allocated, Bound, Running, Succeeded: Volcano's
  ``ReadyTaskNum``) plus its pending best-effort tasks reach ``min_available``, and every role
  with a minimum has that many ready tasks;
* it is **pipelined** when the same holds counting reserved (Pipelined) tasks too;
* **role minimums** (``min_task_member``) count only when they fit inside the job's minimum
  (``min_available >= sum of the role minimums``); otherwise Volcano ignores them, and so does
  gangsched;
* the **deficit** is how many more tasks the job needs placed (or reserved) to reach its
  minimum.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from .cycle import PIPELINED_OR_READY, READY_STATES
from .model import Job

if TYPE_CHECKING:
    from .session import Session

__all__ = ["deficit", "is_pipelined", "is_ready", "role_minimums", "role_shortfall"]


def role_minimums(rec: Job) -> Mapping[str, int]:
    """The role minimums that count for ``rec`` (empty when it has none, or when they do not
    fit inside its ``min_available``)."""
    roles = rec.min_task_member
    if not roles or rec.min_available < sum(roles.values()):
        return {}
    return roles


def role_shortfall(ssn: Session, job: int, states: Sequence[int]) -> tuple[str, int, int] | None:
    """The first role (in the job's order) with fewer tasks in ``states`` than its minimum, as
    ``(role, have, need)``; None when every role has enough."""
    for role, need in role_minimums(ssn.snapshot.jobs[job]).items():
        have = ssn.count_states(job, states, role)
        if have < need:
            return role, have, need
    return None


def deficit(ssn: Session, job: int) -> int:
    """Tasks the job still needs placed or reserved to reach ``min_available`` (≥ 0)."""
    have = ssn.count_states(job, PIPELINED_OR_READY) + ssn.pending_best_effort(job)
    return max(int(ssn.job_min[job]) - have, 0)


def is_ready(ssn: Session, job: int) -> bool:
    ready = ssn.count_states(job, READY_STATES) + ssn.pending_best_effort(job)
    return ready >= ssn.job_min[job] and role_shortfall(ssn, job, READY_STATES) is None


def is_pipelined(ssn: Session, job: int) -> bool:
    have = ssn.count_states(job, PIPELINED_OR_READY) + ssn.pending_best_effort(job)
    return have >= ssn.job_min[job] and role_shortfall(ssn, job, PIPELINED_OR_READY) is None
