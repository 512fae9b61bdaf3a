"""The typed state of one cycle: task state codes, the per-task / per-job columns a session
opens with, and the per-session caches of actions and plugins.

:class:`TaskState` codes live in an int8 array; the state sets below are the ones Volcano's
counters use. :func:`task_columns` and :func:`job_counters` build the columns once from a
snapshot; :class:`CycleCache` holds what actions and plugins compute once per session (typed
fields, never outputs: outputs are the session's own fields).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from gangsched._types import BOOL, I64
from gangsched.model import Task, TaskPhase
from gangsched.model.gpu_charge import queue_gpu_charge
from gangsched.model.snapshot import Snapshot
from gangsched.session.fit import FullView
from gangsched.units import PODS, ResourceSpec

__all__ = [
    "HOLDING_STATES",
    "N_STATES",
    "PIPELINED_OR_READY",
    "READY_STATES",
    "RUNNING_STATES",
    "CycleCache",
    "TaskColumns",
    "TaskState",
    "in_states",
    "job_counters",
    "task_columns",
]


class TaskState:
    """Int codes of a task's state inside a session (stored in an int8 array). Plain class
    attributes, not an ``IntEnum``: they are read on every placement, and enum member access
    costs a metaclass lookup on Python 3.11."""

    PENDING = 0
    ALLOCATED = 1
    PIPELINED = 2
    BOUND = 3
    RUNNING = 4
    RELEASING = 5
    SUCCEEDED = 6
    FAILED = 7


N_STATES = 8

FROM_PHASE = {
    TaskPhase.PENDING: TaskState.PENDING,
    TaskPhase.PIPELINED: TaskState.PIPELINED,
    TaskPhase.BOUND: TaskState.BOUND,
    TaskPhase.RUNNING: TaskState.RUNNING,
    TaskPhase.RELEASING: TaskState.RELEASING,
    TaskPhase.SUCCEEDED: TaskState.SUCCEEDED,
    TaskPhase.FAILED: TaskState.FAILED,
}
#: States that count toward a gang being ready (Volcano's ReadyTaskNum).
READY_STATES = (TaskState.ALLOCATED, TaskState.BOUND, TaskState.RUNNING, TaskState.SUCCEEDED)
#: States whose resources count as the job's (and its queue's) allocation.
HOLDING_STATES = (TaskState.ALLOCATED, TaskState.PIPELINED, TaskState.BOUND, TaskState.RUNNING)
#: Ready or reserved.
PIPELINED_OR_READY = (*READY_STATES, TaskState.PIPELINED)
#: A task that runs (or is bound) from an earlier cycle: what preemption may take.
RUNNING_STATES = (TaskState.RUNNING, TaskState.BOUND)

#: Per set of states, its membership table over the codes (filled when first asked).
_TABLES: dict[tuple[int, ...], BOOL] = {}


def in_states(codes: npt.NDArray[np.int8], states: tuple[int, ...]) -> BOOL:
    """``np.isin(codes, states)`` for state codes, read from a table over the eight codes
    (``np.isin`` sorts both sides on every call: tens of microseconds on a hot path)."""
    table = _TABLES.get(states)
    if table is None:
        table = np.zeros(N_STATES, dtype=np.bool_)
        table[list(states)] = True
        table.flags.writeable = False
        _TABLES[states] = table
    out: BOOL = table[codes]
    return out


@dataclass(slots=True, eq=False)
class TaskColumns:
    state: npt.NDArray[np.int8]
    node: I64
    job: I64
    #: (n_tasks, n_resources) what each task charges its job and queue: its request, pods = 1,
    #: the GPU column per :func:`~gangsched.model.gpu_charge.queue_gpu_charge`.
    req: I64
    gpus: list[tuple[int, ...]]
    #: Per task, its index in the earlier snapshot that holds the same record (-1: none).
    source: I64 | None = None


def task_columns(
    snapshot: Snapshot, spec: ResourceSpec, previous: tuple[Snapshot, I64] | None = None
) -> TaskColumns:
    """The per-task columns a session opens with. ``previous``: an earlier snapshot on the same
    resource columns and its ``task_req``; rows of task records it shares (the same record
    object, as a :class:`~gangsched.ClusterState` hands out) are copied, not parsed again."""
    tasks = snapshot.tasks
    n_tasks = len(tasks)
    node_index, job_index = snapshot.node_index, snapshot.job_index
    cols = TaskColumns(
        state=np.fromiter((FROM_PHASE[t.phase] for t in tasks), dtype=np.int8, count=n_tasks),
        node=np.fromiter(
            (-1 if t.node is None else node_index[t.node] for t in tasks),
            dtype=np.int64,
            count=n_tasks,
        ),
        job=np.fromiter((job_index[t.job] for t in tasks), dtype=np.int64, count=n_tasks),
        req=np.zeros((n_tasks, len(spec)), dtype=np.int64),
        gpus=[t.gpu_indices for t in tasks],
    )
    todo: list[int] | range = range(n_tasks)
    if previous is not None:
        old, old_req = previous
        src = np.fromiter((_same_record(old, t) for t in tasks), dtype=np.int64, count=n_tasks)
        have = src >= 0
        cols.req[have] = old_req[src[have]]
        cols.source = src
        todo = np.flatnonzero(~have).tolist()
    col = {name: i for i, name in enumerate(spec.names)}
    pods_col, gpu_col = col[PODS], spec.gpu_column
    for i in todo:
        task = tasks[i]
        for res, amount in task.request.items():
            if res != PODS:
                cols.req[i, col[res]] = amount
        cols.req[i, pods_col] = 1
        if task.gpu_request is not None:
            g = task.gpu_request
            cols.req[i, gpu_col] = queue_gpu_charge(g.count, g.milli)
    return cols


def _same_record(old: Snapshot, task: Task) -> int:
    """``task``'s index in ``old`` when ``old`` holds this very record, else -1."""
    j = old.task_index.get(task.name, -1)
    return j if j >= 0 and old.tasks[j] is task else -1


def job_counters(
    snapshot: Snapshot, cols: TaskColumns, job_queue: I64
) -> tuple[I64, dict[tuple[int, str], I64], I64, I64]:
    """``(job_count, role_count, job_allocated, queue_allocated)`` of the opening state."""
    n_jobs, n_res = len(snapshot.jobs), cols.req.shape[1]
    job_count = np.zeros((n_jobs, N_STATES), dtype=np.int64)
    np.add.at(job_count, (cols.job, cols.state.astype(np.int64)), 1)
    # Per (job, role): the roles coded in order of appearance, one row per pair present.
    codes: dict[str, int] = {}
    role = np.fromiter(
        (codes.setdefault(t.role, len(codes)) for t in snapshot.tasks),
        dtype=np.int64,
        count=len(snapshot.tasks),
    )
    pairs, row = np.unique(cols.job * max(len(codes), 1) + role, return_inverse=True)
    per_pair = np.zeros((pairs.size, N_STATES), dtype=np.int64)
    np.add.at(per_pair, (row.reshape(-1), cols.state.astype(np.int64)), 1)
    names = list(codes)
    role_count: dict[tuple[int, str], I64] = {
        (p // len(names), names[p % len(names)]): per_pair[k] for k, p in enumerate(pairs.tolist())
    }
    holding = in_states(cols.state, HOLDING_STATES) & (cols.node >= 0)
    job_allocated = np.zeros((n_jobs, n_res), dtype=np.int64)
    np.add.at(job_allocated, cols.job[holding], cols.req[holding])
    queue_allocated = np.zeros((len(snapshot.queues), n_res), dtype=np.int64)
    np.add.at(queue_allocated, job_queue, job_allocated)
    return job_count, role_count, job_allocated, queue_allocated


_UNSET = object()


@dataclass(slots=True, eq=False)
class CycleCache:
    """What actions and plugins compute once per session. Each field has one owner (named)."""

    #: Session.job_tasks: each job's task indices.
    job_tasks: list[I64] | None = None
    #: Session.pending_best_effort: each job's best-effort task indices.
    best_effort: dict[int, I64] = field(default_factory=dict)
    #: gangsched.session.rules.disruption: the snapshot's disruption budgets, resolved
    #: (``Budgets``).
    disruption_budgets: object | None = None
    #: actions._gang_placement.hypernode_order: the hypernode order (unset until asked).
    hypernode_order: object = _UNSET
    #: actions.preempt: every task's priority.
    task_priority: I64 | None = None
    #: actions.victims: per-task and per-job preemptable flags.
    evictable: tuple[BOOL, BOOL] | None = None
    #: actions._gang_placement: per ``future``, ``(change log cursor, free rows, padded free
    #: device rows)`` of every node, read-only.
    gang_ground: dict[bool, tuple[int, I64, I64]] = field(default_factory=dict)
    #: gangsched.session.evaluation: every node's free rows for first evaluations
    #: (``fit.FullView``).
    fit_view: FullView | None = None
    #: actions.consolidate: template index of each moved task's shape.
    move_templates: dict[tuple[object, ...], int] = field(default_factory=dict)
    #: gangsched.session.pod_constraints.pod_rules: the session's pod rules (``PodRules``),
    #: False when no task carries a pod constraint (unset until asked).
    pod_rules: object = _UNSET
    #: actions.victims.search: what evicting each task gives back (``_Charges``).
    victim_rows: object | None = None

    @staticmethod
    def unset(value: object) -> bool:
        """Whether a field with an "unset" default was never filled."""
        return value is _UNSET
