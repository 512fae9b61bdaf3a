"""The typed state of one cycle: task state codes, the per-task / per-job columns a session
opens with, and the per-session caches of actions and plugins.

:class:`TaskState` codes live in an int8 array; the state sets below are the ones Volcano's
counters use. :func:`task_columns` and :func:`job_counters` build the columns once from a
snapshot; :class:`CycleCache` holds what actions and plugins compute once per session (typed
fields, never outputs: outputs are the session's own fields).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from operator import attrgetter

import numpy as np
import numpy.typing as npt

from gangsched._types import BOOL, I64
from gangsched.model import Job, TaskPhase
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
    the session works on copies of ``state``, ``node`` and ``gpus``)."""

    state: npt.NDArray[np.int8]
    node: I64
    job: I64
    #: (n_tasks, n_resources) what each task charges its job and queue: its request, pods = 1,
    #: the GPU column per :func:`~gangsched.model.gpu_charge.queue_gpu_charge`.
    req: I64
    gpus: list[tuple[int, ...]]
    #: Per task, the identity of its record (``id``; two records alive at once never share
    #: one): how the next cycle finds the records it shares with this one.
    ids: npt.NDArray[np.uint64]
    #: Per job, the identity of its record (as ``ids``).
    job_ids: npt.NDArray[np.uint64]
    #: Per task, its index in the earlier snapshot that holds the same record (-1: none).
    source: I64 | None = None


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


def _moved(
    old_ids: npt.NDArray[np.uint64],
    ids: npt.NDArray[np.uint64],
    old: Sequence[Job],
    index: Mapping[str, int],
) -> I64:
    """Per job of an earlier snapshot (records ``old``, identities ``old_ids``), its index
    among ``ids``: the same record's, else the one ``index`` names (-1: gone)."""
    to = same_records(ids, old_ids)
    for k in np.flatnonzero(to < 0).tolist():
        to[k] = index.get(old[k].name, -1)
    return to


def task_columns(
    snapshot: Snapshot,
    spec: ResourceSpec,
    previous: tuple[Snapshot, TaskColumns] | None = None,
) -> TaskColumns:
    """The per-task columns a session opens with. ``previous``: an earlier snapshot on the same
    resource columns and its opening columns; the rows of the task records it shares (the
    same record object, as a :class:`~gangsched.ClusterState` hands out) are copied from it
    (state, node and job carried over through the names of the nodes and jobs), not worked
    out again."""
    tasks = snapshot.tasks
    n_tasks = len(tasks)
    ids = _record_ids(tasks)
    job_ids = _record_ids(snapshot.jobs)
    state = np.zeros(n_tasks, dtype=np.int8)
    node = np.full(n_tasks, -1, dtype=np.int64)
    job = np.zeros(n_tasks, dtype=np.int64)
    req = np.zeros((n_tasks, len(spec)), dtype=np.int64)
    source: I64 | None = None
    todo: list[int] | range = range(n_tasks)
    if previous is not None:
        old_snap, old = previous
        source = same_records(old.ids, ids)
        have = np.flatnonzero(source >= 0)
        src = source[have]
        state[have] = old.state[src]
        req[have] = old.req[src]
        job[have] = _moved(old.job_ids, job_ids, old_snap.jobs, snapshot.job_index)[old.job[src]]
        old_node = old.node[src]
        placed = old_node >= 0
        nodes_to = _index_map(map(_NAME, old_snap.nodes), snapshot.node_index)
        node[have[placed]] = nodes_to[old_node[placed]]
        todo = np.flatnonzero(source < 0).tolist()
    node_index, job_index = snapshot.node_index, snapshot.job_index
    col = {name: i for i, name in enumerate(spec.names)}
    pods_col, gpu_col = col[PODS], spec.gpu_column
    for i in todo:
        task = tasks[i]
        state[i] = FROM_PHASE[task.phase]
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
    for column in (state, node, ids, job_ids):  # the session works on copies of state and node
        column.flags.writeable = False
    return TaskColumns(
        state=state,
        node=node,
        job=job,
        req=req,
        gpus=list(map(_GPUS, tasks)),
        ids=ids,
        job_ids=job_ids,
        source=source,
    )


_GPUS = attrgetter("gpu_indices")
_ROLE = attrgetter("role")


def job_counters(
    snapshot: Snapshot, cols: TaskColumns, job_queue: I64
) -> tuple[I64, dict[tuple[int, str], I64], I64, I64]:
    """``(job_count, role_count, job_allocated, queue_allocated)`` of the opening state."""
    n_jobs, n_res = len(snapshot.jobs), cols.req.shape[1]
    n_tasks = len(snapshot.tasks)
    states = cols.state.astype(np.int64)
    job_count = np.bincount(cols.job * N_STATES + states, minlength=n_jobs * N_STATES).reshape(
        n_jobs, N_STATES
    )
    # Per (job, role): the roles coded in order of appearance, one row per pair present.
    roles = list(map(_ROLE, snapshot.tasks))
    names = list(dict.fromkeys(roles))
    codes = {name: i for i, name in enumerate(names)}
    role = np.fromiter(map(codes.__getitem__, roles), dtype=np.int64, count=n_tasks)
    width = max(len(names), 1)
    pairs, row = np.unique(cols.job * width + role, return_inverse=True)
    per_pair = np.bincount(
        row.reshape(-1) * N_STATES + states, minlength=pairs.size * N_STATES
    ).reshape(pairs.size, N_STATES)
    keys = zip((pairs // width).tolist(), map(names.__getitem__, (pairs % width).tolist()))
    role_count: dict[tuple[int, str], I64] = dict(zip(keys, per_pair))
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
