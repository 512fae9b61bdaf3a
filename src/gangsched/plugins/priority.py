"""priority: higher job priority first, higher task priority first (Volcano's priority)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..session import PIPELINED_OR_READY

if TYPE_CHECKING:
    from ..session import Session


class PriorityPlugin:
    name = "priority"

    def __init__(self, arguments: Mapping[str, object]) -> None:
        self.arguments = arguments

    def job_order(self, ssn: Session, job: int) -> tuple[Any, ...]:
        return (-ssn.snapshot.jobs[job].priority,)

    def task_order(self, ssn: Session, task: int) -> tuple[Any, ...]:
        return (-ssn.snapshot.tasks[task].priority,)

    def job_starving(self, ssn: Session, job: int) -> bool:
        """Starving while some task is neither ready nor pipelined."""
        return bool(ssn.count_states(job, PIPELINED_OR_READY) < len(ssn.job_tasks(job)))
