"""proportion: weighted fair share of the cluster between queues (Volcano's proportion).

Theory of operation
-------------------
At open every queue gets ``deserved`` by weighted water-filling over the cluster total: each
round hands the remaining resources to the queues not yet satisfied in proportion to their
weights, capping each queue at its ``realCapability`` (capability, and what others'
guarantees leave) and at its request (allocated + pending), flooring it at its guarantee; a
queue whose request is met, or whose deserved stops moving, leaves the pool; resources it gave
back return to the pool. Rounds stop when nothing remains or nothing changes.

Then: queue order = higher priority, then lower share (share = max over dimensions of
allocated / deserved); a queue is *overused* when deserved ≤ allocated on every dimension;
a task is *allocatable* when allocated + request ≤ deserved on the dimensions the task asks
for (a GPU-only job is not blocked by exhausted cpu quota); a job is *enqueueable* when its
queue is Open and min_resources + allocated + inqueue − elastic ≤ realCapability on
min_resources' dimensions. Allocation inside the cycle updates ``allocated`` at once (the
session's queue aggregates), so shares stay current.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from ..arrays import TaskTemplate
from ..combine import Vote
from ..model import QueueState
from ..units import PODS

if TYPE_CHECKING:
    from ..session import Session

F64 = npt.NDArray[np.float64]
EPS = 0.1


def water_fill(total: F64, weights: F64, request: F64, guarantee: F64, real_capability: F64) -> F64:
    """Volcano's weighted water-filling. All arrays are ``(n_queues, n_resources)`` except
    ``total`` ``(n_resources,)`` and ``weights`` ``(n_queues,)``. Returns deserved."""
    n = weights.size
    deserved = np.zeros_like(request)
    meet = np.zeros(n, dtype=np.bool_)
    remaining = total.copy()
    for _ in range(4 * n + 8):
        active = ~meet
        w_total = weights[active].sum()
        if w_total == 0:
            break
        old = deserved.copy()
        share = np.outer(weights / w_total, remaining)
        new = np.where(active[:, None], old + share, old)
        new = np.minimum(new, real_capability)
        new = np.minimum(new, request)
        new = np.maximum(new, guarantee)
        new = np.where(active[:, None], new, old)
        satisfied = np.all(request <= new + EPS, axis=1)
        unchanged = np.all(np.abs(new - old) < EPS, axis=1)
        meet |= active & (satisfied | unchanged)
        diff = new - old
        increased = np.where(diff > 0, diff, 0).sum(axis=0)
        decreased = np.where(diff < 0, -diff, 0).sum(axis=0)
        deserved = new
        new_remaining = np.maximum(remaining + decreased - increased, 0.0)
        if np.all(new_remaining < EPS) or np.all(np.abs(new_remaining - remaining) < EPS):
            break
        remaining = new_remaining
    return deserved


class ProportionPlugin:
    name = "proportion"

    def __init__(self, arguments: Mapping[str, object]) -> None:
        self.arguments = arguments
        self.deserved = np.zeros((0, 0))
        self.real_capability = np.zeros((0, 0))
        self.inqueue = np.zeros((0, 0))
        self._pods = 0

    def on_session_open(self, ssn: Session) -> None:
        snap, a = ssn.snapshot, ssn.arrays
        n_q, n_r = len(snap.queues), len(a.spec)
        self._pods = a.spec.index(PODS)
        total = a.allocatable.sum(axis=0).astype(np.float64)
        total[self._pods] = 0.0
        request = ssn.queue_allocated.astype(np.float64)
        pending = np.flatnonzero(ssn.task_state == 0)
        np.add.at(request, ssn.job_queue[ssn.task_job[pending]], ssn.task_req[pending])
        request[:, self._pods] = 0.0
        guarantee = np.zeros((n_q, n_r))
        capability = np.full((n_q, n_r), np.inf)
        for q, queue in enumerate(snap.queues):
            if queue.guarantee is not None:
                guarantee[q] = ssn.vector(queue.guarantee)
            if queue.capability is not None:
                cap = ssn.vector(queue.capability).astype(np.float64)
                given = np.zeros(n_r, dtype=np.bool_)
                for res in queue.capability:
                    if res != PODS:
                        given[a.spec.index(res)] = True
                capability[q] = np.where(given, cap, np.inf)
        capability[:, self._pods] = np.inf
        real = np.maximum(total - guarantee.sum(axis=0), 0.0) + guarantee
        real = np.minimum(real, capability)
        weights = np.array([q.weight for q in snap.queues], dtype=np.float64)
        self.real_capability = real
        self.deserved = water_fill(total, weights, request, guarantee, real)
        ssn.queue_deserved = np.rint(self.deserved).astype(np.int64)
        self.inqueue = np.zeros((n_q, n_r))
        for j, job in enumerate(snap.jobs):
            if ssn.job_phase[j] == "Inqueue" and job.min_resources is not None:
                self.inqueue[ssn.job_queue[j]] += ssn.vector(job.min_resources)

    def share(self, ssn: Session, queue: int) -> float:
        d = self.deserved[queue]
        alloc = ssn.queue_allocated[queue]
        ratios = np.where(d > 0, alloc / np.where(d > 0, d, 1), np.where(alloc > 0, 1.0, 0.0))
        ratios[self._pods] = 0.0
        return float(ratios.max()) if ratios.size else 0.0

    def queue_order(self, ssn: Session, queue: int) -> tuple[Any, ...]:
        return (-ssn.snapshot.queues[queue].priority, self.share(ssn, queue))

    def overused(self, ssn: Session, queue: int) -> bool:
        d = self.deserved[queue]
        alloc = ssn.queue_allocated[queue]
        dims = np.arange(d.size) != self._pods
        return bool(np.all(d[dims] <= alloc[dims] + EPS))

    def allocatable(self, ssn: Session, queue: int, tmpl: TaskTemplate) -> bool:
        if ssn.snapshot.queues[queue].state is not QueueState.OPEN:
            return False
        dims = tmpl.request > 0
        dims[self._pods] = False
        after = ssn.queue_allocated[queue][dims] + tmpl.request[dims]
        return bool(np.all(after <= self.deserved[queue][dims] + EPS))

    def job_enqueueable(self, ssn: Session, job: int) -> Vote:
        rec = ssn.snapshot.jobs[job]
        q = int(ssn.job_queue[job])
        queue = ssn.snapshot.queues[q]
        if queue.state is not QueueState.OPEN:
            ssn.note_job(job, "NotEnqueued", f"queue {queue.name!r} is {queue.state.value}")
            return Vote.REJECT
        if rec.min_resources is None:
            return Vote.PERMIT
        need = ssn.vector(rec.min_resources).astype(np.float64)
        dims = need > 0
        alloc = ssn.queue_allocated[q].astype(np.float64)
        elastic = np.maximum(ssn.job_allocated[job] - need, 0)
        future = need + alloc + self.inqueue[q] - elastic
        if np.all(future[dims] <= self.real_capability[q][dims] + EPS):
            return Vote.PERMIT
        short = [
            ssn.arrays.spec.names[c]
            for c in np.flatnonzero(dims & (future > self.real_capability[q] + EPS))
        ]
        ssn.note_job(
            job, "NotEnqueued", f"queue {queue.name!r} capability exceeded on {', '.join(short)}"
        )
        return Vote.REJECT

    def job_enqueued(self, ssn: Session, job: int) -> None:
        rec = ssn.snapshot.jobs[job]
        if rec.min_resources is not None:
            self.inqueue[ssn.job_queue[job]] += ssn.vector(rec.min_resources)
