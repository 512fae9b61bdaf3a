"""Decisions of a long-lived state against a fresh cycle, under gang-aware retry.

A :class:`~gangsched.ClusterState` cycle carries the words of a job it did not try again
(``allocate``'s ``retry: on-change``, ``docs/scheduling.md`` "Retrying waiting jobs"): the
job's reason and message, its tasks' reasons and its placement entry are those of its last
attempt, marked ``carried: ``. Every decision is a fresh cycle's. :func:`uncarried` puts the
fresh cycle's words in place of the carried ones, so that everything else can be compared
byte for byte.
"""

from __future__ import annotations

import dataclasses

from gangsched import Decisions
from gangsched.actions._retry import CARRIED


def uncarried(d: Decisions, fresh: Decisions) -> Decisions:
    """``d`` with the words of its carried jobs (and their tasks) taken from ``fresh``."""
    jobs = dict(d.jobs)
    carried = {name for name, s in jobs.items() if s.message.startswith(CARRIED)}
    for name in carried:
        other = fresh.jobs.get(name)
        if other is not None:
            jobs[name] = dataclasses.replace(jobs[name], reason=other.reason, message=other.message)
    reasons = dict(d.task_reasons)
    for task, text in d.task_reasons.items():
        if text.startswith(CARRIED) and task in fresh.task_reasons:
            reasons[task] = fresh.task_reasons[task]
    placements = dict(d.placements)
    for name in carried:
        if name in fresh.placements:
            placements[name] = fresh.placements[name]
        else:
            placements.pop(name, None)
    return dataclasses.replace(d, jobs=jobs, task_reasons=reasons, placements=placements)
