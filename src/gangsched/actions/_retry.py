"""Gang-aware retry: which waiting jobs ``allocate`` need not try again this cycle.

Theory of operation
-------------------
A job whose attempt failed is remembered (:class:`Failure`): its records, the cycle's
context, the change-log cursor taken just before the attempt and the free room of every node
then (now and once releases finish, per resource and per GPU device: the placement ground of
:mod:`gangsched.actions._gang_placement`), and the words the attempt left. The memory lives
in the session's ``records`` and reaches the next cycle through ``prior_records`` (a
:class:`~gangsched.state.ClusterState` opens each cycle with the last session).

At the start of a later ``allocate`` run, a job is *carried* — not tried, and given its last
words back, prefixed with :data:`CARRIED` — when all of these hold:

* the session may skip at all (:func:`skipping_allowed`): predicates and node scores answer by
  a task's shape (``shape_only``), the ``allocatable``, ``job_ready``, ``job_pipelined`` and
  ``job_valid`` points are served by the package's own plugins (readiness by ``gang`` alone),
  gangs go through the greedy placer, not the joint one;
* the job's pending tasks share one template and none of its tasks runs;
* its records (job, every task), its tasks' states, the node, hypernode and queue records,
  the configuration and the resource names are those of the failed attempt, and the change
  log still knows the attempt's cursor;
* and either its queue refuses the template now, or the attempt failed for room alone (the
  queue took every task the attempt asked it for) and no node gained room since the cursor
  in a column the template asks for (or in one where the node was short), nor in a GPU device
  when the template asks for GPUs.

Why that is exact (the contract in ``docs/scheduling.md``): inside one ``allocate`` run room
only shrinks (a placement takes, a discarded attempt gives back exactly what it took) and a
queue's holdings only grow, so a job that fails on the room and holdings of the run's start
fails at its turn too; a failing attempt changes nothing another job reads. With one template,
how many of the job's tasks fit is the sum over nodes of how many copies fit each node, which
no node's smaller room can raise; the built-in queue verdicts (``alloc + request <= limit``)
only refuse more as holdings grow. So the attempt would fail, and leaving it out changes no
bind, eviction, reservation or phase.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from gangsched._types import BOOL, I64
from gangsched.decisions import PlacementInfo
from gangsched.model import Job, Task
from gangsched.placement import GreedyPlacer
from gangsched.session.core import TaskState

if TYPE_CHECKING:
    from gangsched.session.core import Session

__all__ = ["CARRIED", "MEMORY_KEY", "Failure", "Ground", "context_of", "skipping_allowed"]

#: What every carried word starts with (a job's message, its tasks' reasons).
CARRIED = "carried: "

#: Where the memory sits in ``Session.records`` (a job name -> :class:`Failure` dict).
MEMORY_KEY: tuple[object, ...] = ("allocate", "failed attempts")

#: The free room of every node: now, once releases finish, then the same per GPU device slot.
Ground = tuple[I64, I64, I64, I64]

_RUNS = (TaskState.RUNNING, TaskState.BOUND)


@dataclass(slots=True, eq=False)
class Failure:
    """One failed attempt of a job, and what it left (see the module docstring)."""

    job: Job
    tasks: tuple[Task, ...]
    states: bytes
    context: tuple[object, ...]
    lineage: object
    cursor: int
    #: Whether the queue took every task the attempt asked it for (the attempt failed for
    #: room alone).
    capacity: bool
    ground: Ground
    #: The template's request per resource column, and whether it asks for GPUs.
    request: I64
    gpu: bool
    #: The attempt's words, already marked carried: the job's, then its tasks' (by place in
    #: the job), and what the placer said.
    reason: tuple[str, str] | None
    task_words: tuple[tuple[int, str], ...]
    placement: PlacementInfo | None


def context_of(ssn: Session) -> tuple[object, ...]:
    """What every remembered attempt of a session shares: the configuration, the node,
    hypernode and queue records, the resource names."""
    snap = ssn.snapshot
    return (ssn.config, snap.nodes, snap.hypernodes, snap.queues, ssn.arrays.spec.names)


def same_context(a: tuple[object, ...], b: tuple[object, ...]) -> bool:
    """Whether two contexts are the same records (by identity: a long-lived state shares the
    records that did not change), the resource names equal."""
    return all(x is y for x, y in zip(a[:-1], b[:-1], strict=True)) and a[-1] == b[-1]


def skipping_allowed(ssn: Session, placer: object, joint: bool) -> bool:
    """Whether a failed attempt may be carried in this session (see the module docstring)."""
    points = ssn.points
    if joint or type(placer) is not GreedyPlacer or not points.shape_only:
        return False
    if not all(points.built_in(p) for p in ("allocatable", "job_valid", "job_ready")):
        return False
    ready = points.serving("job_ready") + points.serving("job_pipelined")
    return all(getattr(p, "name", None) == "gang" for p in ready)


def runs_nothing(ssn: Session, job: int) -> bool:
    """Whether none of ``job``'s tasks runs (a running job's phase reads its failures)."""
    return ssn.count_states(job, _RUNS) == 0


def gained(then: Ground, now: Ground, rows: np.ndarray, request: I64, gpu: bool) -> bool:
    """Whether a node of ``rows`` has more room ``now`` than ``then`` where it matters to a
    task asking for ``request``: a column it asks for, a column where the node was short
    (a fit reads every column), a GPU device when it asks for GPUs."""
    if rows.size == 0:
        return False
    asks: BOOL = request > 0
    for k in (0, 1):
        before, after = then[k][rows], now[k][rows]
        if ((after > before) & (asks | (before < 0))).any():
            return True
    if gpu:
        for k in (2, 3):
            if (now[k][rows] > then[k][rows]).any():
                return True
    return False
