"""The typed state of one cycle: task state codes, the per-task / per-job columns a session
opens with, and the per-session caches of actions and plugins.

:class:`TaskState` codes live in an int8 array; the state sets below are the ones Volcano's
counters use. :func:`task_columns` and :func:`job_counters` build the columns once from a
snapshot; :class:`CycleCache` holds what actions and plugins compute once per session (typed
fields, never outputs: outputs are the session's own fields).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from operator import attrgetter

import numpy as np
import numpy.typing as npt

from gangsched._types import BOOL, I64
from gangsched.model import JobPhase, TaskPhase
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
    "JobTasks",
    "RoleCounts",
    "TaskColumns",
    "TaskState",
    "in_states",
    "job_counters",
    "same_records",
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
    """The per-task columns of a snapshot as a session opens with them (never changed after:
    the session works on copies of ``state``, ``node`` and ``devices``)."""

    state: npt.NDArray[np.int8]
    node: I64
    job: I64
    #: (n_tasks, n_resources) what each task charges its job and queue: its request, pods = 1,
    #: the GPU column per :func:`~gangsched.model.gpu_charge.queue_gpu_charge`.
    req: I64
    #: Per task, its role (objects: the record's strings).
    roles: npt.NDArray[np.object_]
    #: Per task, its GPU devices (objects: the record's tuples).
    devices: npt.NDArray[np.object_]
    #: Per task, the identity of its record (``id``; two records alive at once never share
    #: one): how the next cycle finds the records it shares with this one.
    ids: npt.NDArray[np.uint64]
    #: Per job, the identity of its record (as ``ids``).
    job_ids: npt.NDArray[np.uint64]
    #: Per job: its queue's index, its ``min_available`` and its phase as the cycle opened.
    job_queue: I64
    job_min: I64
    job_phase: tuple[JobPhase, ...]
    #: ``job_phase`` as an object array (how the next cycle gathers the rows it carries).
    phases: npt.NDArray[np.object_]
    #: Per job: whether its record sets role minimums (``min_task_member``) and a minimum of
    #: resources (``min_resources``).
    job_roles: BOOL
    job_minimums: BOOL
    #: Per task, whether its record is best-effort (no request: :attr:`Task.best_effort`),
    #: and per job whether one of its tasks is.
    best_effort: BOOL
    job_best_effort: BOOL
    #: Per task, its index in the earlier snapshot that holds the same record (-1: none).
    source: I64 | None = None
    #: Per job, its index in the earlier snapshot that holds the same record (-1: none).
    job_source: I64 | None = None


def _record_ids(records: Sequence[object]) -> npt.NDArray[np.uint64]:
    return np.fromiter(map(id, records), dtype=np.uint64, count=len(records))


def same_records(old_ids: npt.NDArray[np.uint64], ids: npt.NDArray[np.uint64]) -> I64:
    """Per record of ``ids``, the index in ``old_ids`` of the very same record (-1: none);
    both sets of records alive (so an identity names one record)."""
    out = np.full(ids.size, -1, dtype=np.int64)
    if not old_ids.size or not ids.size:
        return out
    order = np.argsort(old_ids, kind="stable")
    ranked = old_ids[order]
    pos = np.minimum(np.searchsorted(ranked, ids), ranked.size - 1)
    hit = ranked[pos] == ids
    out[hit] = order[pos[hit]]
    return out


def _index_map(old_names: Iterable[str], index: Mapping[str, int]) -> I64:
    """Per name of ``old_names``, its index in ``index`` (-1: absent)."""
    return np.fromiter(map(index.get, old_names, repeat(-1)), dtype=np.int64)


_NAME = attrgetter("name")


def task_columns(
    snapshot: Snapshot,
    spec: ResourceSpec,
    previous: tuple[Snapshot, TaskColumns] | None = None,
) -> TaskColumns:
    """The per-task and per-job columns a session opens with. ``previous``: an earlier
    snapshot on the same resource columns and its opening columns; the rows of the task and
    job records it shares (the same record object, as a :class:`~gangsched.ClusterState`
    hands out) are copied from it (nodes, jobs and queues carried over through their names),
    not worked out again."""
    tasks, jobs = snapshot.tasks, snapshot.jobs
    n_tasks, n_jobs = len(tasks), len(jobs)
    ids = _record_ids(tasks)
    job_ids = _record_ids(jobs)
    state = np.zeros(n_tasks, dtype=np.int8)
    node = np.full(n_tasks, -1, dtype=np.int64)
    job = np.zeros(n_tasks, dtype=np.int64)
    req = np.zeros((n_tasks, len(spec)), dtype=np.int64)
    roles = np.empty(n_tasks, dtype=object)
    devices = np.empty(n_tasks, dtype=object)
    best_effort = np.zeros(n_tasks, dtype=np.bool_)
    job_queue = np.zeros(n_jobs, dtype=np.int64)
    job_min = np.zeros(n_jobs, dtype=np.int64)
    job_roles = np.zeros(n_jobs, dtype=np.bool_)
    job_minimums = np.zeros(n_jobs, dtype=np.bool_)
    phases = np.empty(n_jobs, dtype=object)
    source: I64 | None = None
    job_source: I64 | None = None
    todo: list[int] | range = range(n_tasks)
    new_jobs: list[int] | range = range(n_jobs)
    if previous is not None:
        old_snap, old = previous
        # the jobs first: each carried job's row, and where each earlier job is now
        job_source = same_records(old.job_ids, job_ids)
        kept = np.flatnonzero(job_source >= 0)
        was = job_source[kept]
        if old_snap.queues is snapshot.queues:  # the same queue records: the same rows
            job_queue[kept] = old.job_queue[was]
        else:
            queues_to = _index_map(map(_NAME, old_snap.queues), snapshot.queue_index)
            job_queue[kept] = queues_to[old.job_queue[was]]
        job_min[kept] = old.job_min[was]
        job_roles[kept] = old.job_roles[was]
        job_minimums[kept] = old.job_minimums[was]
        phases[kept] = old.phases[was]
        new_jobs = np.flatnonzero(job_source < 0).tolist()
        jobs_to = np.full(len(old_snap.jobs), -1, dtype=np.int64)
        jobs_to[was] = kept
        for k in np.flatnonzero(jobs_to < 0).tolist():  # a record replaced, or gone
            jobs_to[k] = snapshot.job_index.get(old_snap.jobs[k].name, -1)
        # then the tasks
        source = same_records(old.ids, ids)
        have = np.flatnonzero(source >= 0)
        src = source[have]
        state[have] = old.state[src]
        req[have] = old.req[src]
        roles[have] = old.roles[src]
        devices[have] = old.devices[src]
        best_effort[have] = old.best_effort[src]
        job[have] = jobs_to[old.job[src]]
        old_node = old.node[src]
        if old_snap.nodes is snapshot.nodes:  # the same node records: the same rows
            node[have] = old_node
        else:
            placed = old_node >= 0
            nodes_to = _index_map(map(_NAME, old_snap.nodes), snapshot.node_index)
            node[have[placed]] = nodes_to[old_node[placed]]
        todo = np.flatnonzero(source < 0).tolist()
    queue_index = snapshot.queue_index
    for k in new_jobs:
        rec = jobs[k]
        job_queue[k] = queue_index[rec.queue]
        job_min[k] = rec.min_available
        job_roles[k] = bool(rec.min_task_member)
        job_minimums[k] = rec.min_resources is not None
        phases[k] = rec.phase
    node_index, job_index = snapshot.node_index, snapshot.job_index
    col = {name: i for i, name in enumerate(spec.names)}
    pods_col, gpu_col = col[PODS], spec.gpu_column
    for i in todo:
        task = tasks[i]
        state[i] = FROM_PHASE[task.phase]
        roles[i] = task.role
        devices[i] = task.gpu_indices
        best_effort[i] = task.best_effort
        if task.node is not None:
            node[i] = node_index[task.node]
        job[i] = job_index[task.job]
        row = req[i]
        for res, amount in task.request.items():
            if res != PODS:
                row[col[res]] = amount
        row[pods_col] = 1
        if task.gpu_request is not None:
            g = task.gpu_request
            row[gpu_col] = queue_gpu_charge(g.count, g.milli)
    # Read-only: the next cycle copies rows from them (the session works on copies of the
    # state and node columns, and of the job phases).
    for column in (state, node, job, req, roles, devices, ids, job_ids, job_queue, job_min, phases):
        column.flags.writeable = False
    job_best_effort = np.bincount(job[best_effort], minlength=n_jobs) > 0
    for flags in (job_roles, job_minimums, best_effort, job_best_effort):
        flags.flags.writeable = False
    return TaskColumns(
        state=state,
        node=node,
        job=job,
        req=req,
        roles=roles,
        devices=devices,
        ids=ids,
        job_ids=job_ids,
        job_queue=job_queue,
        job_min=job_min,
        job_phase=tuple(phases.tolist()),
        phases=phases,
        job_roles=job_roles,
        job_minimums=job_minimums,
        best_effort=best_effort,
        job_best_effort=job_best_effort,
        source=source,
        job_source=job_source,
    )


class JobTasks:
    """Each job's task indices (snapshot order) over a per-task column of job indices that
    does not change: grouped once, when first asked, and each job's indices sliced the
    first time that job is asked (a cycle asks for few of its jobs). ``made[job]``: the
    job's indices once sliced (None before), for a caller on a hot path."""

    __slots__ = ("_bounds", "_job", "_order", "made")

    def __init__(self, task_job: I64, n_jobs: int) -> None:
        self._job = task_job
        self._order: I64 | None = None
        self._bounds: list[int] = []
        self.made: list[I64 | None] = [None] * n_jobs

    def of(self, job: int) -> I64:
        """The indices of ``job``'s tasks, in snapshot order (read-only)."""
        got = self.made[job]  # (an index out of range is refused here, as by a list)
        if got is not None:
            return got
        order = self._order
        if order is None:
            order = np.argsort(self._job, kind="stable")
            order.flags.writeable = False
            self._bounds = np.searchsorted(self._job[order], np.arange(len(self.made) + 1)).tolist()
            self._order = order
        j = job % len(self.made)
        b = self._bounds
        got = self.made[j] = order[b[j] : b[j + 1]]
        return got


class RoleCounts(Mapping[tuple[int, str], I64]):
    """Per ``(job, role)`` pair present, the pair's tasks per state: a ``(N_STATES,)`` row the
    session's ledger keeps current. A pair's row is worked out from the opening columns the
    first time it is asked (every change of a task's state reads its pair's row first, so a
    row made later still starts from the opening); iterating works every row out, pairs
    ordered by job, then by each role's first appearance among the snapshot's tasks."""

    __slots__ = ("_all", "_cols", "_rows", "_tasks")

    def __init__(self, cols: TaskColumns, tasks: JobTasks) -> None:
        self._cols = cols
        self._tasks = tasks
        self._rows: dict[tuple[int, str], I64] = {}
        self._all = False

    def __getitem__(self, key: tuple[int, str]) -> I64:
        row = self._rows.get(key)
        if row is None:
            if self._all:
                raise KeyError(key)
            job, role = key
            mine = self._tasks.of(job)
            mine = mine[self._cols.roles[mine] == role]
            if not mine.size:
                raise KeyError(key)
            row = np.bincount(self._cols.state[mine], minlength=N_STATES).astype(np.int64)
            self._rows[key] = row
        return row

    def _complete(self) -> dict[tuple[int, str], I64]:
        """Every pair's row, in the order of the class docstring (the rows already asked for
        kept: the ledger may have moved them)."""
        if not self._all:
            made = self._rows
            self._rows = {key: made.get(key, row) for key, row in _role_rows(self._cols)}
            self._all = True
        return self._rows

    def __iter__(self) -> Iterator[tuple[int, str]]:
        return iter(self._complete())

    def __len__(self) -> int:
        return len(self._complete())


def _role_rows(cols: TaskColumns) -> list[tuple[tuple[int, str], I64]]:
    """Per ``(job, role)`` pair present in ``cols``, its tasks per state at the opening, pairs
    ordered by job, then by each role's first appearance."""
    n_tasks = cols.job.size
    states = cols.state.astype(np.int64)
    roles = cols.roles.tolist()
    names = list(dict.fromkeys(roles))
    codes = {name: i for i, name in enumerate(names)}
    role = np.fromiter(map(codes.__getitem__, roles), dtype=np.int64, count=n_tasks)
    width = max(len(names), 1)
    pairs, row = np.unique(cols.job * width + role, return_inverse=True)
    per_pair = np.bincount(
        row.reshape(-1) * N_STATES + states, minlength=pairs.size * N_STATES
    ).reshape(pairs.size, N_STATES)
    keys = zip(
        (pairs // width).tolist(), map(names.__getitem__, (pairs % width).tolist()), strict=True
    )
    return list(zip(keys, per_pair, strict=True))


def job_counters(
    snapshot: Snapshot, cols: TaskColumns, job_queue: I64, tasks: JobTasks
) -> tuple[I64, RoleCounts, I64, I64]:
    """``(job_count, role_count, job_allocated, queue_allocated)`` of the opening state
    (``tasks``: the grouping of ``cols``' tasks by job the role counts read)."""
    n_jobs, n_res = len(snapshot.jobs), cols.req.shape[1]
    states = cols.state.astype(np.int64)
    job_count = np.bincount(cols.job * N_STATES + states, minlength=n_jobs * N_STATES).reshape(
        n_jobs, N_STATES
    )
    holding = in_states(cols.state, HOLDING_STATES) & (cols.node >= 0)
    job_allocated = np.zeros((n_jobs, n_res), dtype=np.int64)
    np.add.at(job_allocated, cols.job[holding], cols.req[holding])
    queue_allocated = np.zeros((len(snapshot.queues), n_res), dtype=np.int64)
    np.add.at(queue_allocated, job_queue, job_allocated)
    return job_count, RoleCounts(cols, tasks), job_allocated, queue_allocated


_UNSET = object()


@dataclass(slots=True, eq=False)
class CycleCache:
    """What actions and plugins compute once per session. Each field has one owner (named)."""

    #: Session.job_tasks: each job's task indices.
    job_tasks: JobTasks | None = None
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
