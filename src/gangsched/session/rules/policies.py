"""Job lifecycle policies: ``policies: [{event, action}]`` evaluated into job actions.

Theory of operation
-------------------
The library owns no pods, so it cannot restart or abort anything; it says what a job
controller should do. After a cycle, :func:`job_actions` raises events from the snapshot's task
phases and from the cycle's own decisions, and maps each event through the job's policies:

===================  ================================================================
event                raised when
===================  ================================================================
``PodEvicted``       a task of the job is evicted in this cycle (preempt / reclaim)
``PodFailed``        a task of the job is ``Failed`` in the snapshot
``TaskCompleted``    every task of a role is ``Succeeded``
``TaskFailed``       every task of a role has ended (``Succeeded`` or ``Failed``) and at
                     least one failed
``Unknown``          the job's phase after the cycle is ``Unknown`` (some tasks run while
                     the rest of the gang cannot be placed)
===================  ================================================================

``PodPending`` and ``PodRunning`` are accepted in policies but never raised here: they are
pod lifecycle signals of the controller, not outcomes of a scheduling cycle.

Lookup: an event raised by a task of role ``r`` uses the first of ``role_policies[r]`` whose
event matches (the event itself or ``*``), and only if none does, the first matching policy
of the job (Volcano: task-level policies override job-level ones). ``Unknown`` is a job event:
job policies only.

One job gets at most one job-wide action per cycle, the most severe that fired —
``TerminateJob`` > ``AbortJob`` > ``RestartJob`` > ``CompleteJob`` > ``ResumeJob`` — with the
first event that asked for it as the cause. When no job-wide action fires, ``RestartTask`` and
``RestartPod`` are reported once per role. Events are stateless: a condition that persists
(a ``Failed`` task still in the snapshot) raises its event again next cycle, so controllers
must apply actions idempotently.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from operator import attrgetter

from gangsched.decisions import JobAction
from gangsched.model import Job, JobPolicy, TaskPhase
from gangsched.model.snapshot import Snapshot

__all__ = ["JOB_WIDE", "job_actions"]

#: Job-wide actions, most severe first.
JOB_WIDE = ("TerminateJob", "AbortJob", "RestartJob", "CompleteJob", "ResumeJob")

_ENDED = (TaskPhase.SUCCEEDED, TaskPhase.FAILED)


def _match(policies: Iterable[JobPolicy], event: str) -> str | None:
    for p in policies:
        if p.event == event or p.event == "*":
            return p.action
    return None


#: A job's policies (a tuple) and role policies as the plain dict its FrozenDict holds (their
#: truth is read in C; the mapping's own ``__len__`` is a Python call per job).
_POLICIES = attrgetter("policies")
_ROLE_POLICIES = attrgetter("role_policies._data")


def _lookup(job: Job, event: str, role: str | None) -> str | None:
    if role is not None and role in job.role_policies:
        found = _match(job.role_policies[role], event)
        if found is not None:
            return found
    return _match(job.policies, event)


def job_actions(
    snapshot: Snapshot, evicted: Mapping[str, str], phases: Mapping[str, str]
) -> tuple[JobAction, ...]:
    """The job actions the policies ask for after one cycle.

    Parameters
    ----------
    snapshot:
        The cycle's input.
    evicted:
        Task name → eviction reason, for the tasks evicted in this cycle.
    phases:
        Job name → phase after the cycle (``Decisions.jobs[name].phase``).

    Returns
    -------
    tuple of JobAction
        In snapshot job order; see the module docstring for which events and actions.
    """
    jobs = snapshot.jobs
    if not any(map(_POLICIES, jobs)) and not any(map(_ROLE_POLICIES, jobs)):
        return ()
    asking = {job.name for job in jobs if job.policies or job.role_policies}
    by_job: dict[str, list[tuple[str, str | None, str]]] = {}
    roles: dict[str, dict[str, list[TaskPhase]]] = {}
    for task in snapshot.tasks:
        if task.job not in asking:
            continue
        events = by_job.setdefault(task.job, [])
        roles.setdefault(task.job, {}).setdefault(task.role, []).append(task.phase)
        if task.name in evicted:
            events.append(("PodEvicted", task.role, f"task {task.name!r} {evicted[task.name]}"))
        if task.phase is TaskPhase.FAILED:
            events.append(("PodFailed", task.role, f"task {task.name!r} failed"))
    out: list[JobAction] = []
    for job in snapshot.jobs:
        if not job.policies and not job.role_policies:
            continue
        events = list(by_job.get(job.name, []))
        for role, seen in sorted(roles.get(job.name, {}).items()):
            if all(p is TaskPhase.SUCCEEDED for p in seen):
                events.append(("TaskCompleted", role, f"every task of role {role!r} succeeded"))
            elif all(p in _ENDED for p in seen):
                events.append(("TaskFailed", role, f"role {role!r} ended with failed tasks"))
        if phases.get(job.name) == "Unknown":
            events.append(("Unknown", None, "some tasks run while the gang cannot be placed"))
        wide: dict[str, str] = {}
        per_role: dict[tuple[str, str], str] = {}
        for event, source, detail in events:
            action = _lookup(job, event, source)
            if action is None:
                continue
            cause = f"{event}: {detail}"
            if action in JOB_WIDE:
                wide.setdefault(action, cause)
            else:
                per_role.setdefault((action, source or ""), cause)
        if wide:
            worst = next(a for a in JOB_WIDE if a in wide)
            out.append(JobAction(job=job.name, action=worst, cause=wide[worst]))
        else:
            for (action, _role), cause in sorted(per_role.items()):
                out.append(JobAction(job=job.name, action=action, cause=cause))
    return tuple(out)
