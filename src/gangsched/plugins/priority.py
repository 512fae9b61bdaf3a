"""priority: higher job priority first, higher task priority first (Volcano's priority).

As victims (``preemptable``) priority permits every candidate: the rule "only jobs of strictly
lower priority" has one owner, the preempt action's candidates (``actions/preempt.py``), which
applies it whatever the tiers say (the no-cycle argument rests on it); priority still answers
so that its tier decides, as in Volcano. ``victim_order``: lower job priority, then lower task
priority, evicted first.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from gangsched.session.core import PIPELINED_OR_READY

if TYPE_CHECKING:
    from gangsched.session.core import Session


class PriorityPlugin:
    name = "priority"
    known_arguments: tuple[str, ...] = ()

    def __init__(self, arguments: Mapping[str, object]) -> None:
        self.arguments = arguments

    def job_order(self, ssn: Session, job: int) -> tuple[Any, ...]:
        return (-ssn.snapshot.jobs[job].priority,)

    def task_order(self, ssn: Session, task: int) -> tuple[Any, ...]:
        return (-ssn.snapshot.tasks[task].priority,)

    def job_starving(self, ssn: Session, job: int) -> bool:
        """Starving while some task is neither ready nor pipelined."""
        return bool(ssn.count_states(job, PIPELINED_OR_READY) < len(ssn.job_tasks(job)))

    def preemptable(
        self, ssn: Session, preemptor: int, candidates: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.int64]:
        return candidates

    def victim_order(self, ssn: Session, task: int) -> tuple[Any, ...]:
        job = ssn.snapshot.jobs[int(ssn.task_job[task])]
        return (job.priority, ssn.snapshot.tasks[task].priority)
