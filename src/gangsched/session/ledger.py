"""The session's bookkeeping of one placement, eviction or state change, and its exact undo.

Only :class:`~gangsched.session.statement.Statement` calls these (its operations and their
undo): every other module reads the session. Each operation keeps the
node rows, the device rows, the job and queue allocations and the per-state counters
consistent, logs itself in the session's change log (:mod:`gangsched.session.changes`: the node,
job and queue it touched; this module is the log's only writer, so every incremental view
refreshes what it touched), and tells the plugins through the ``on_allocate`` /
``on_deallocate`` events. Resources are int64, so undo is exact arithmetic.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gangsched.errors import PlacementError
from gangsched.session.task_states import TaskState

if TYPE_CHECKING:
    from gangsched.session.core import Session

__all__ = ["evict", "place", "set_state", "unevict", "unmove", "unplace"]


def place(ssn: Session, task: int, node: int, gpus: tuple[int, ...], *, pipelined: bool) -> None:
    row = ssn.row_on(task, node)
    per_device = ssn.device_milli(task, node)
    dev = _device_index(ssn, task, node, gpus)
    if pipelined:
        ssn.pipelined[node] += row
        if dev:
            ssn.gpu_pipelined[dev] += per_device
        _set_state(ssn, task, TaskState.PIPELINED)
    else:
        ssn.used[node] += row
        if dev:
            ssn.gpu_used[dev] += per_device
        _set_state(ssn, task, TaskState.ALLOCATED)
    ssn.task_node[task] = node
    ssn.task_gpus[task] = gpus
    _charge(ssn, task, 1, node)
    ssn.points.on_allocate(task)


def unplace(ssn: Session, task: int) -> None:
    node = int(ssn.task_node[task])
    gpus = ssn.task_gpus[task]
    row = ssn.row_on(task, node)
    per_device = ssn.device_milli(task, node)
    dev = ssn.arrays.device_index(node, gpus)
    if ssn.task_state[task] == TaskState.PIPELINED:
        ssn.pipelined[node] -= row
        ssn.gpu_pipelined[dev] -= per_device
    else:
        ssn.used[node] -= row
        ssn.gpu_used[dev] -= per_device
    _set_state(ssn, task, TaskState.PENDING)
    ssn.task_node[task] = -1
    ssn.task_gpus[task] = ()
    _charge(ssn, task, -1, node)
    ssn.points.on_deallocate(task)


def unmove(ssn: Session, task: int, node: int, gpus: tuple[int, ...]) -> None:
    """Take back the reservation of a moved task: it is ``Releasing`` on ``node`` (devices
    ``gpus``), where its eviction left it, again. The reservation's removal is logged; the
    state move back is its job's change, logged with it."""
    unplace(ssn, task)
    ssn.task_node[task] = node
    ssn.task_gpus[task] = gpus
    _set_state(ssn, task, TaskState.RELEASING)


def evict(ssn: Session, task: int) -> None:
    node = int(ssn.task_node[task])
    row = ssn.row_on(task, node)
    per_device = ssn.device_milli(task, node)
    ssn.releasing[node] += row
    ssn.gpu_releasing[ssn.arrays.device_index(node, ssn.task_gpus[task])] += per_device
    _set_state(ssn, task, TaskState.RELEASING)
    _charge(ssn, task, -1, node)
    ssn.points.on_deallocate(task)


def unevict(ssn: Session, task: int, prev_state: int) -> None:
    node = int(ssn.task_node[task])
    row = ssn.row_on(task, node)
    per_device = ssn.device_milli(task, node)
    ssn.releasing[node] -= row
    ssn.gpu_releasing[ssn.arrays.device_index(node, ssn.task_gpus[task])] -= per_device
    _set_state(ssn, task, prev_state)
    _charge(ssn, task, 1, node)
    ssn.points.on_allocate(task)


def set_state(ssn: Session, task: int, state: int) -> None:
    """Move ``task`` to ``state``, keeping the job and role counters (a change of its job
    alone: no node, no queue allocation moves)."""
    _set_state(ssn, task, state)
    ssn.changes.note(-1, int(ssn.task_job[task]), -1)


def _set_state(ssn: Session, task: int, state: int) -> None:
    old = int(ssn.task_state[task])
    j = int(ssn.task_job[task])
    ssn.job_count[j, old] -= 1
    ssn.job_count[j, state] += 1
    roles = ssn.role_count[(j, ssn.snapshot.tasks[task].role)]
    roles[old] -= 1
    roles[state] += 1
    ssn.task_state[task] = state


def _charge(ssn: Session, task: int, sign: int, node: int) -> None:
    """Add (``sign`` 1) or take back (-1) what ``task`` charges its job and queue, and log
    the operation: ``node``, the job and the queue changed."""
    j = int(ssn.task_job[task])
    q = int(ssn.job_queue[j])
    ssn.changes.note(node, j, q)
    if sign > 0:
        ssn.job_allocated[j] += ssn.task_req[task]
        ssn.queue_allocated[q] += ssn.task_req[task]
    else:
        ssn.job_allocated[j] -= ssn.task_req[task]
        ssn.queue_allocated[q] -= ssn.task_req[task]


def _device_index(ssn: Session, task: int, node: int, gpus: tuple[int, ...]) -> list[int]:
    """Flat indices of ``gpus`` on ``node``; a device the node lacks, a repeated device or a
    count that is not the task's is a :class:`PlacementError` (never a wrong device)."""
    count = int(ssn.arrays.gpu_count[node])
    g = ssn.snapshot.tasks[task].gpu_request
    wanted = g.count if g is not None else 0
    if len(gpus) != wanted or len(set(gpus)) != len(gpus) or any(not 0 <= d < count for d in gpus):
        raise PlacementError(
            f"GPU devices {list(gpus)} on node {ssn.arrays.node_names[node]!r} "
            f"({count} devices) for a request of {wanted}",
            kind="task",
            name=ssn.snapshot.tasks[task].name,
            field="gpu_indices",
        )
    return ssn.arrays.device_index(node, gpus)
