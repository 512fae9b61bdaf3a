"""Queue figures the fair-share plugins share (proportion, capacity) and queue status reads:
what each queue requests, what its jobs wait for and what they hold beyond their minimum.

One owner per figure: :func:`demand_mask` decides which tasks a request counts, and
:func:`job_figures` counts them per queue as Volcano's queue plugins do at session open.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from gangsched.framework.combine import Vote
from gangsched.model import JobPhase, QueueState
from gangsched.session.core import TaskState
from gangsched.units import PODS

if TYPE_CHECKING:
    from gangsched.session.core import Session

__all__ = ["QueueShares", "demand_mask", "enqueue_need", "job_figures"]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
BOOL = npt.NDArray[np.bool_]


class QueueShares:
    """The fair-share provider's members
    (:class:`gangsched.framework.extension_points.FairSharePlugin`) for a
    plugin that keeps per-queue ``shares``, ``real_capability`` and ``deserved_amounts`` (the
    canonical deserved amounts, set at open). A plugin with a queue hierarchy overrides
    :meth:`queue_subtree_sum`.

    Its constructor owns the per-queue arrays both fair-share plugins fill at session open
    (empty until then): a row per queue, a column per resource of the session's spec."""

    def __init__(self, arguments: Mapping[str, object]) -> None:
        self.arguments = arguments
        self.deserved: F64 = np.zeros((0, 0))
        self.real_capability: F64 = np.zeros((0, 0))
        self.request: F64 = np.zeros((0, 0))
        self.inqueue: F64 = np.zeros((0, 0))
        self.elastic: F64 = np.zeros((0, 0))
        self.shares: F64 = np.zeros(0)
        self._inv: F64 = np.zeros((0, 0))
        self.deserved_amounts: I64 = np.zeros((0, 0), dtype=np.int64)
        self._pods = 0

    def share(self, ssn: Session, queue: int) -> float:
        return float(self.shares[queue])

    def queue_deserved(self, ssn: Session) -> I64:
        return self.deserved_amounts

    def queue_share(self, ssn: Session, queue: int) -> float:
        return float(self.shares[queue])

    def queue_real_capability(self, ssn: Session, queue: int) -> F64 | None:
        out: F64 = self.real_capability[queue]
        return out

    def queue_subtree_sum(self, ssn: Session, per_queue: I64) -> I64:
        return per_queue


# Running holding states — Volcano's AllocatedStatus.
_ALLOCATED_STATES = (TaskState.ALLOCATED, TaskState.BOUND, TaskState.RUNNING)


def demand_mask(ssn: Session, state: npt.NDArray[Any]) -> BOOL:
    """The tasks a queue's request counts beyond what it holds: Pending tasks, and Releasing
    tasks of jobs that have not completed.

    An evicted pod comes back (it is recreated), so its demand stays while it terminates: a
    queue's share must not drop for the length of a termination and be taken by the queue
    that evicted it, which would then be over its share and lose it back (a ping-pong)."""
    out: BOOL = state == TaskState.PENDING
    releasing_mask = state == TaskState.RELEASING
    if releasing_mask.any():  # (the phases read for the jobs of releasing tasks alone)
        releasing = np.flatnonzero(releasing_mask)
        phases = ssn.job_phase
        jobs = ssn.task_job[releasing].tolist()
        live = [phases[j] is not JobPhase.COMPLETED for j in jobs]
        out[releasing[np.array(live, dtype=np.bool_)]] = True
    return out


def job_figures(ssn: Session) -> tuple[F64, F64, F64, BOOL]:
    """Per queue ``(request, inqueue, elastic)`` as Volcano's queue plugins count them at open,
    and the mask of queues holding jobs.

    * request — allocated plus the requests of :func:`demand_mask`'s tasks;
    * inqueue — for Inqueue jobs (and Running jobs with at least ``min_available`` allocated
      tasks) the part of ``min_resources`` not allocated yet;
    * elastic — what each job holds beyond its ``min_resources``.
    """
    snap, a = ssn.snapshot, ssn.arrays
    n_q, n_r = len(snap.queues), len(a.spec)
    pods = a.spec.index(PODS)
    wanted = np.flatnonzero(demand_mask(ssn, ssn.task_state))
    request = _sum_rows(
        ssn.job_queue[ssn.task_job[wanted]], ssn.task_req[wanted], n_q, ssn.queue_allocated
    )
    inqueue = np.zeros((n_q, n_r))
    with_minimum = np.flatnonzero(ssn.columns.job_minimums).tolist()  # jobs with a minimum
    held = ssn.job_allocated
    if not with_minimum and held.min(initial=0) >= 0:
        # No minimum: what each job holds is elastic, and its queue's sum of them is the
        # queue's allocation (the session keeps that so); summed exactly as below unless the
        # magnitudes reach 2**52 (np.add.at's order then).
        allocated = ssn.queue_allocated
        if np.all(allocated.sum(axis=0, dtype=np.float64) < _EXACT):
            elastic = allocated.astype(np.float64)
        else:
            elastic = _sum_rows(ssn.job_queue, held.astype(np.float64), n_q)
    else:
        job_min = np.zeros((len(snap.jobs), n_r))
        jobs = snap.jobs
        for j in with_minimum:
            job = jobs[j]
            need = ssn.vector(job.min_resources).astype(np.float64)
            job_min[j] = need
            phase = ssn.job_phase[j]
            running_enough = (
                phase is JobPhase.RUNNING
                and ssn.count_states(j, _ALLOCATED_STATES) >= ssn.job_min[j]
            )
            if phase is JobPhase.INQUEUE or running_enough:
                dims = need > 0
                short = np.where(dims, np.maximum(need - ssn.job_allocated[j], 0.0), 0.0)
                inqueue[ssn.job_queue[j]] += short
        elastic = _sum_rows(ssn.job_queue, np.maximum(held - job_min, 0.0), n_q)
    for m in (request, inqueue, elastic):
        m[:, pods] = 0.0
    has_jobs = np.zeros(n_q, dtype=np.bool_)
    has_jobs[ssn.job_queue] = True
    return request, inqueue, elastic, has_jobs


def _sum_rows(group: I64, rows: npt.NDArray[Any], n_groups: int, start: I64 | None = None) -> F64:
    """Per group, ``start``'s row (zeros without) plus the ``rows`` of the group (``group``:
    each row's), in float64, as ``np.add.at`` adds them one by one into the floats of
    ``start``. The rows are whole amounts, summed per column by ``np.bincount``: while the
    magnitudes of them all add up to less than 2**52, every float along the way is a whole
    number held exactly, so the order does not matter (``np.add.at`` otherwise)."""
    out: F64 = np.zeros((n_groups, rows.shape[1])) if start is None else start.astype(np.float64)
    if not group.size:
        return out
    # (first a bound over every column at once: the largest magnitude times the number of
    # rows; the sums per column only when that bound does not settle it)
    if float(np.abs(rows).max(initial=0)) * rows.shape[0] + float(np.abs(out).sum()) >= _EXACT:
        bound = np.abs(rows).sum(axis=0, dtype=np.float64) + np.abs(out).sum(axis=0)
        if not np.all(bound < _EXACT):
            np.add.at(out, group, rows)
            return out
    # one bincount over (group, column) cells: each cell adds its rows in their order
    r = rows.shape[1]
    cells = (group[:, None] * r + np.arange(r)).ravel()
    out += np.bincount(cells, weights=rows.ravel(), minlength=n_groups * r).reshape(n_groups, r)
    return out


#: Whole numbers whose magnitudes add up to less than this add exactly in float64.
_EXACT = float(2**52)


def enqueue_need(ssn: Session, job: int, pods: int) -> Vote | tuple[F64, BOOL, I64]:
    """The start of a queue plugin's ``job_enqueueable``: a job whose queue is not Open is
    rejected (and noted), one without ``min_resources`` is permitted; otherwise ``(need, dims,
    freed)``: its minimum as a row, the resources that minimum asks for (pods left out) and
    what it could free by preemption inside its queue (:meth:`Session.preemptable_for`)."""
    rec = ssn.snapshot.jobs[job]
    queue = ssn.snapshot.queues[int(ssn.job_queue[job])]
    if queue.state is not QueueState.OPEN:
        ssn.note_job(job, "NotEnqueued", f"queue {queue.name!r} is {queue.state.value}")
        return Vote.REJECT
    if rec.min_resources is None:
        return Vote.PERMIT
    need = ssn.vector(rec.min_resources).astype(np.float64)
    dims = need > 0
    dims[pods] = False
    return need, dims, ssn.preemptable_for(job, quota=True)
