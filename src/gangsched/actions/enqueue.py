"""enqueue: move Pending jobs to Inqueue when the plugins admit them.

Queues take turns in queue order, one job per turn (best job first by job order), so no queue
monopolises admission. A job with no ``min_resources`` is always admitted; otherwise the
``job_enqueueable`` vote decides, and on admission ``job_enqueued`` lets plugins reserve its
minimum as "inqueue". A job that is not admitted stays Pending, with the reason recorded.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..session import Session


class EnqueueAction:
    name = "enqueue"

    def __init__(self, arguments: Mapping[str, object]) -> None:
        self.arguments = arguments

    def execute(self, ssn: Session) -> None:
        per_queue: dict[int, list[tuple[Any, int]]] = {}
        for j in range(len(ssn.snapshot.jobs)):
            if ssn.job_phase[j] == "Pending":
                per_queue.setdefault(int(ssn.job_queue[j]), []).append((ssn.job_key(j), j))
        for heap in per_queue.values():
            heapq.heapify(heap)
        while per_queue:
            q = min(per_queue, key=ssn.queue_key)
            _, j = heapq.heappop(per_queue[q])
            if not per_queue[q]:
                del per_queue[q]
            rec = ssn.snapshot.jobs[j]
            if rec.min_resources is None or ssn.call("job_enqueueable", j):
                ssn.call("job_enqueued", j)
                ssn.job_phase[j] = "Inqueue"
            elif j not in ssn.job_reasons:
                ssn.note_job(j, "NotEnqueued", "a plugin rejected the job at enqueue")
