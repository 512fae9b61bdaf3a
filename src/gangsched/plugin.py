"""Extension points: one small Protocol per point, each taking whole arrays.

A plugin is any object with a ``name`` and the methods of the points it serves; the session
finds them once, at open, from the methods the object has (and the per-plugin switches of the
config), so the hot path walks ready lists. Row-based points (``predicate``, ``node_score``)
receive the template and the node rows to evaluate, and answer for exactly those rows, so the
session can re-evaluate only the rows an allocation touched.

Contracts
---------
* ``job_order`` / ``queue_order`` / ``task_order`` return a sort key (smaller first); keys of
  all plugins are concatenated in tier order, so the first plugin that distinguishes two
  objects decides, as Volcano's "first non-zero comparator".
* ``predicate`` returns ``(reject_mask, reason)`` pairs over ``rows``; a node passes when no
  pair rejects it. The first rejecting pair names the node's reason.
* ``node_score`` returns float scores over ``rows``; every plugin applies its own weight and
  scores are summed.
* ``job_pipelined`` / ``job_enqueueable`` vote (:class:`~gangsched.combine.Vote`).
* ``preemptable`` / ``reclaimable`` return the subset of ``candidates`` they allow as victims
  (sorted task indices), or ``None`` to abstain.
* ``on_allocate`` / ``on_deallocate`` are called for every allocate / pipeline / evict and for
  their undo, and must keep plugin state exactly reversible.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import numpy.typing as npt

from .arrays import TaskTemplate
from .combine import Vote

if TYPE_CHECKING:
    from .session import Session

__all__ = [
    "AllocatablePlugin",
    "JobEnqueueablePlugin",
    "JobEnqueuedPlugin",
    "JobOrderPlugin",
    "JobPipelinedPlugin",
    "JobReadyPlugin",
    "JobStarvingPlugin",
    "JobValidPlugin",
    "NodeScorePlugin",
    "OverusedPlugin",
    "Plugin",
    "PredicatePlugin",
    "PreemptablePlugin",
    "QueueOrderPlugin",
    "ReclaimablePlugin",
    "Rejections",
    "TaskOrderPlugin",
]

Rows = npt.NDArray[np.intp]
Rejections = Sequence[tuple[npt.NDArray[np.bool_], str]]


class Plugin(Protocol):
    name: str

    def on_session_open(self, ssn: Session) -> None: ...


class JobOrderPlugin(Protocol):
    def job_order(self, ssn: Session, job: int) -> tuple[Any, ...]: ...


class QueueOrderPlugin(Protocol):
    def queue_order(self, ssn: Session, queue: int) -> tuple[Any, ...]: ...


class TaskOrderPlugin(Protocol):
    def task_order(self, ssn: Session, task: int) -> tuple[Any, ...]: ...


class PredicatePlugin(Protocol):
    def predicate(self, ssn: Session, tmpl: TaskTemplate, rows: Rows) -> Rejections: ...


class NodeScorePlugin(Protocol):
    def node_score(
        self, ssn: Session, tmpl: TaskTemplate, rows: Rows
    ) -> npt.NDArray[np.float64]: ...


class JobValidPlugin(Protocol):
    def job_valid(self, ssn: Session, job: int) -> str | None: ...


class JobReadyPlugin(Protocol):
    def job_ready(self, ssn: Session, job: int) -> bool: ...


class JobPipelinedPlugin(Protocol):
    def job_pipelined(self, ssn: Session, job: int) -> Vote: ...


class JobEnqueueablePlugin(Protocol):
    def job_enqueueable(self, ssn: Session, job: int) -> Vote: ...


class JobEnqueuedPlugin(Protocol):
    def job_enqueued(self, ssn: Session, job: int) -> None: ...


class JobStarvingPlugin(Protocol):
    def job_starving(self, ssn: Session, job: int) -> bool: ...


class OverusedPlugin(Protocol):
    def overused(self, ssn: Session, queue: int) -> bool: ...


class AllocatablePlugin(Protocol):
    def allocatable(self, ssn: Session, queue: int, tmpl: TaskTemplate) -> bool: ...


class PreemptablePlugin(Protocol):
    def preemptable(
        self, ssn: Session, preemptor: int, candidates: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.int64] | None: ...


class ReclaimablePlugin(Protocol):
    def reclaimable(
        self, ssn: Session, preemptor: int, candidates: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.int64] | None: ...
