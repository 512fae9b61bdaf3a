"""allocate: place gangs, all or nothing (Volcano's allocate action).

Theory of operation
-------------------
Queues are popped in queue order, re-evaluated after every job (shares move as jobs get
resources); an overused queue is dropped for the rest of the cycle. From the queue, the best job
by job order is tried inside one :class:`~gangsched.statement.Statement`: its pending tasks, in
task order, each go to the best node where the task fits now (allocate) or, failing that, where
it fits once releasing resources are gone (pipeline). As soon as the job is ready it is pushed
back so its remaining elastic tasks interleave with other jobs. The statement is committed if
the job is ready, kept as a reservation if it is only pipelined, and discarded otherwise — the
gang's tasks then get the reason.

A task template that found no node is not retried for the job (Volcano's predicate error cache);
when every task is needed for the minimum, the first such failure ends the attempt.

Jobs still Pending are skipped when ``enqueue`` is configured; otherwise they are treated as
admitted. Best-effort tasks are left to ``backfill``.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..session import TaskState
from ..statement import Statement

if TYPE_CHECKING:
    from ..session import Session


class AllocateAction:
    name = "allocate"

    def __init__(self, arguments: Mapping[str, object]) -> None:
        self.arguments = arguments

    def execute(self, ssn: Session) -> None:
        enqueue_on = "enqueue" in ssn.config.actions
        per_queue: dict[int, list[tuple[Any, int]]] = {}
        worklist: dict[int, deque[int]] = {}
        for j in range(len(ssn.snapshot.jobs)):
            if ssn.job_phase[j] == "Pending":
                if enqueue_on:
                    continue
                ssn.job_phase[j] = "Inqueue"
            tasks = [
                int(t)
                for t in ssn.job_tasks(j)
                if ssn.task_state[t] == TaskState.PENDING
                and not ssn.snapshot.tasks[int(t)].best_effort
            ]
            if not tasks:
                continue
            invalid = ssn.call("job_valid", j)
            if invalid is not None:
                ssn.note_job(j, "NotEnoughTasks", invalid)
                continue
            tasks.sort(key=ssn.task_key)
            worklist[j] = deque(tasks)
            per_queue.setdefault(int(ssn.job_queue[j]), []).append((ssn.job_key(j), j))
        for heap in per_queue.values():
            heapq.heapify(heap)
        failed: dict[int, set[int]] = {}
        while per_queue:
            q = min(per_queue, key=ssn.queue_key)
            if ssn.call("overused", q):
                for _, j in per_queue.pop(q):
                    ssn.note_job(
                        j, "QueueOverused", f"queue {ssn.snapshot.queues[q].name!r} is overused"
                    )
                continue
            _, j = heapq.heappop(per_queue[q])
            if not per_queue[q]:
                del per_queue[q]
            stmt = Statement(ssn)
            again = self._allocate_job(ssn, stmt, j, q, worklist[j], failed.setdefault(j, set()))
            if ssn.call("job_ready", j):
                stmt.commit()
            elif ssn.call("job_pipelined", j):
                stmt.keep()
            else:
                tried = [op.task for op in stmt.ops]
                stmt.discard()
                self._explain_discard(ssn, j, tried)
            if again:
                heapq.heappush(per_queue.setdefault(q, []), (ssn.job_key(j), j))

    def _allocate_job(
        self, ssn: Session, stmt: Statement, j: int, q: int, tasks: deque[int], failed: set[int]
    ) -> bool:
        need_all = int(ssn.job_min[j]) >= len(ssn.job_tasks(j))
        while tasks:
            t = tasks.popleft()
            if ssn.task_state[t] != TaskState.PENDING:
                continue
            tmpl = ssn.templates[int(ssn.template_of[t])]
            if tmpl.index in failed:
                ssn.task_reasons.setdefault(t, ssn.task_reasons.get(tmpl.tasks[0], ""))
                continue
            if not ssn.call("allocatable", q, tmpl):
                queue = ssn.snapshot.queues[q]
                ssn.task_reasons[t] = (
                    f"queue {queue.name!r} cannot take this task now "
                    f"(deserved share or state {queue.state.value})"
                )
                continue
            node, pipelined = ssn.best_node(tmpl)
            if node < 0:
                failed.add(tmpl.index)
                ssn.task_reasons[t] = ssn.fit_error(tmpl)
                if need_all:
                    break
                continue
            gpus = ssn.choose_gpus(t, node, future=pipelined)
            if pipelined:
                stmt.pipeline(t, node, gpus)
            else:
                stmt.allocate(t, node, gpus)
            ssn.task_reasons.pop(t, None)
            if tasks and ssn.call("job_ready", j):
                return True
        return False

    @staticmethod
    def _explain_discard(ssn: Session, j: int, tried: list[int]) -> None:
        total = len(ssn.job_tasks(j))
        pending = [int(t) for t in ssn.job_tasks(j) if ssn.task_state[t] == TaskState.PENDING]
        why = next((ssn.task_reasons[t] for t in pending if ssn.task_reasons.get(t)), "")
        message = f"{len(pending)}/{total} tasks in gang unschedulable: {why}".rstrip(": ")
        ssn.note_job(j, "Unschedulable", message)
        ssn.unschedulable_jobs.add(j)
        for t in tried:
            ssn.task_reasons[t] = (
                f"gang {ssn.snapshot.jobs[j].name!r} not ready "
                f"(min_available {int(ssn.job_min[j])}): {why}"
            )
