"""Columnar NumPy view of a snapshot, built once per cycle.

Theory of operation
-------------------
Every per-node quantity the scheduler compares lives in an ``(n_nodes, n_resources)`` int64
matrix whose columns follow a :class:`~gangsched.units.ResourceSpec` (cpu, memory,
nvidia.com/gpu, then the other resources sorted; ``pods`` is always a column). GPU devices are
tracked per device in flat ``(n_devices,)`` arrays of milli-GPU: node ``i`` owns devices
``gpu_offset[i]:gpu_offset[i + 1]`` and ``gpu_node`` names each device's node, so memory follows
the devices that exist (one 1,024-GPU node among thousands of 8-GPU nodes costs 1,024 slots,
not 1,024 per node). Per-node device counts are ``bincount`` reductions over ``gpu_node``;
:meth:`ClusterArrays.padded` builds a ``(rows, width)`` view for the few consumers that want one.
Labels are coded per key as int arrays
(-1 = label absent), taints as a sparse :class:`TaintIndex` (nodes grouped by their distinct
taint set), so node selectors and tolerations become a handful of vector operations whose cost
follows the labels and taints that exist.

Pending tasks are grouped into *templates*: identical pending tasks of one job (same role,
request, GPU request, selector, tolerations) share one template, so static masks and scores are
computed once per template, not once per replica.

Only :func:`build_cluster_arrays` reads the records, in one pass; everything else is NumPy.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import numpy as np
import numpy.typing as npt

from gangsched._codegen import define
from gangsched._types import BOOL, I64
from gangsched.model import (
    OCCUPYING_PHASES,
    Node,
    NodeAffinity,
    Taint,
    Task,
    TaskPhase,
    Toleration,
)
from gangsched.model.gpu_charge import device_take, queue_gpu_charge
from gangsched.model.snapshot import Snapshot
from gangsched.units import CPU, GPU, MEMORY, PODS, ResourceSpec

__all__ = [
    "NO_LIMIT",
    "ClusterArrays",
    "TaintIndex",
    "TaskTemplate",
    "build_cluster_arrays",
    "build_templates",
    "request_vector",
]

#: Capacity used for a node's pod count when it declares no ``pods`` limit.
NO_LIMIT = np.int64(2**50)


@dataclass(frozen=True, slots=True, eq=False)
class TaintIndex:
    """Which taints each node carries, stored sparsely so cost follows the taints that exist.

    Nodes are grouped by their distinct set of taints (``node_set``); the sets are a CSR list
    of taint ids (``set_ptr`` / ``set_taints``). Asking which nodes a toleration list leaves
    untolerated tests each toleration only against the taints of its key, then counts per
    distinct set: O(tolerations + taint entries + nodes), never nodes × taints.
    """

    taints: tuple[Taint, ...]
    by_key: Mapping[str, I64]  # taint key -> ids of the taints with that key
    by_key_value: Mapping[tuple[str, str], I64]  # (key, value) -> ids of those taints
    effects: tuple[str, ...]  # distinct effects
    effect: I64  # (n_taints,) index into effects
    node_set: I64  # (n_nodes,) index of the node's taint set
    set_ptr: I64  # (n_sets + 1,) start of each set in set_taints
    set_taints: I64  # (n_entries,) taint ids, set by set

    @classmethod
    def build(cls, n_nodes: int, per_node: Mapping[int, list[Taint]]) -> TaintIndex:
        """Index the taints of ``per_node`` (node index → its taints of this kind)."""
        ids: dict[Taint, int] = {}
        sets: dict[tuple[int, ...], int] = {(): 0}
        node_set = np.zeros(n_nodes, dtype=np.int64)
        for i, taints in per_node.items():
            key = tuple(sorted({ids.setdefault(t, len(ids)) for t in taints}))
            node_set[i] = sets.setdefault(key, len(sets))
        lengths = np.array([len(k) for k in sets], dtype=np.int64)
        set_ptr = np.zeros(len(sets) + 1, dtype=np.int64)
        np.cumsum(lengths, out=set_ptr[1:])
        flat = [t for k in sets for t in k]
        by_key: dict[str, list[int]] = {}
        by_kv: dict[tuple[str, str], list[int]] = {}
        effects: dict[str, int] = {}
        effect = np.zeros(len(ids), dtype=np.int64)
        for taint, j in ids.items():
            by_key.setdefault(taint.key, []).append(j)
            by_kv.setdefault((taint.key, taint.value), []).append(j)
            effect[j] = effects.setdefault(taint.effect, len(effects))
        return cls(
            taints=tuple(ids),
            by_key={k: np.array(v, dtype=np.int64) for k, v in by_key.items()},
            by_key_value={k: np.array(v, dtype=np.int64) for k, v in by_kv.items()},
            effects=tuple(effects),
            effect=effect,
            node_set=node_set,
            set_ptr=set_ptr,
            set_taints=np.array(flat, dtype=np.int64),
        )

    def tolerated(self, tolerations: tuple[Toleration, ...]) -> BOOL:
        """``(n_taints,)``: whether some toleration tolerates each taint.

        The rule of :meth:`Toleration.tolerates`, looked up by key (Exists) or by key and value
        (Equal) instead of tested against every taint; an empty key with Exists matches all.
        """
        n = len(self.taints)
        out = np.zeros(n, dtype=np.bool_)
        none = np.zeros(0, dtype=np.int64)
        for tol in tolerations:
            if tol.operator == "Exists":
                cand = np.arange(n, dtype=np.int64) if not tol.key else self.by_key.get(tol.key)
            else:
                cand = self.by_key_value.get((tol.key, tol.value))
            cand = none if cand is None else cand
            if tol.effect:
                code = self.effects.index(tol.effect) if tol.effect in self.effects else -1
                cand = cand[self.effect[cand] == code]
            out[cand] = True
        return out

    def untolerated_count(self, tolerations: tuple[Toleration, ...]) -> I64:
        """``(n_nodes,)``: taints of each node that none of ``tolerations`` tolerates."""
        n_sets = self.set_ptr.size - 1
        per_set = np.diff(self.set_ptr)
        if tolerations and self.taints:
            tol = self.tolerated(tolerations)[self.set_taints]
            owner = np.repeat(np.arange(n_sets, dtype=np.int64), per_set)
            per_set = per_set - np.bincount(owner[tol], minlength=n_sets)
        out: I64 = per_set[self.node_set].astype(np.int64)
        return out


@dataclass(frozen=True, slots=True, eq=False)
class ClusterArrays:
    """Static per-cycle columns of a snapshot (never mutated; the session copies what moves)."""

    spec: ResourceSpec
    node_names: tuple[str, ...]
    allocatable: I64  # (n_nodes, n_resources)
    used: I64  # (n_nodes, n_resources) held by Bound/Running/Releasing tasks
    releasing: I64  # (n_nodes, n_resources) held by Releasing tasks
    pipelined: I64  # (n_nodes, n_resources) reserved by Pipelined tasks
    gpu_capacity: I64  # (n_nodes,) milli-GPU per device, 0 without GPUs
    gpu_count: I64  # (n_nodes,)
    gpu_offset: I64  # (n_nodes + 1,) node i owns devices gpu_offset[i]:gpu_offset[i + 1]
    gpu_node: I64  # (n_devices,) the node of each device
    gpu_used: I64  # (n_devices,) milli-GPU held per device
    gpu_releasing: I64  # (n_devices,)
    gpu_pipelined: I64  # (n_devices,)
    gpu_sharing: BOOL  # (n_nodes,)
    gpu_model: I64  # (n_nodes,) index into gpu_models, -1 without GPUs
    gpu_models: tuple[str, ...]
    unschedulable: BOOL  # (n_nodes,)
    label_codes: Mapping[str, I64]  # key -> (n_nodes,) code of the value, -1 if absent
    label_values: Mapping[str, Mapping[str, int]]  # key -> value -> code
    hard_taint_index: TaintIndex  # distinct NoSchedule/NoExecute taints per node
    soft_taint_index: TaintIndex  # distinct PreferNoSchedule taints per node
    #: Layouts derived from these columns alone, worked out once (see :meth:`slot_layout`).
    _derived: dict[str, npt.NDArray[np.intp]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def slot_layout(self) -> npt.NDArray[np.intp]:
        """``(n_nodes, width)`` 1 + the flat device index of each slot of :meth:`padded`
        (0 for padding): the layout of padded per-device rows, worked out once per arrays."""
        layout = self._derived.get("slots")
        if layout is None:
            where = self.padded(np.arange(1, self.n_devices + 1, dtype=np.int64), fill=0)
            layout = self._derived["slots"] = where.astype(np.intp)
        return layout

    @property
    def taints(self) -> tuple[Taint, ...]:
        """Distinct NoSchedule/NoExecute taints."""
        return self.hard_taint_index.taints

    @property
    def soft_taints(self) -> tuple[Taint, ...]:
        """Distinct PreferNoSchedule taints."""
        return self.soft_taint_index.taints

    @property
    def n_nodes(self) -> int:
        return len(self.node_names)

    @property
    def max_gpus(self) -> int:
        return int(self.gpu_count.max()) if self.gpu_count.size else 0

    @property
    def n_devices(self) -> int:
        return int(self.gpu_node.size)

    def devices(self, node: int) -> slice:
        """The flat range of ``node``'s devices."""
        return slice(int(self.gpu_offset[node]), int(self.gpu_offset[node + 1]))

    def device_index(self, node: int, gpus: tuple[int, ...]) -> list[int]:
        """Flat indices of device numbers ``gpus`` of ``node`` (numbers already checked)."""
        base = int(self.gpu_offset[node])
        return [base + g for g in gpus]

    def devices_of(self, rows: npt.NDArray[np.intp]) -> tuple[I64, I64]:
        """Flat indices of the devices of nodes ``rows`` (row by row) and, for each device,
        its position in ``rows``. Reduce per row with ``np.bincount(seg, ..., minlength)``."""
        if rows.size == self.n_nodes and (rows.size == 0 or bool((rows == self.node_range).all())):
            return self.device_range, self.gpu_node
        counts = self.gpu_count[rows]
        seg: I64 = np.repeat(np.arange(rows.size, dtype=np.int64), counts)
        first = np.cumsum(counts) - counts
        idx: I64 = self.gpu_offset[rows][seg] + (np.arange(seg.size, dtype=np.int64) - first[seg])
        return idx, seg

    @property
    def node_range(self) -> I64:
        return np.arange(self.n_nodes, dtype=np.int64)

    @property
    def device_range(self) -> I64:
        return np.arange(self.n_devices, dtype=np.int64)

    def count_per_row(self, seg: I64, ok: BOOL, n_rows: int) -> I64:
        """Devices per row where ``ok`` holds (``seg`` from :meth:`devices_of`)."""
        out: I64 = np.bincount(seg[ok], minlength=n_rows).astype(np.int64)
        return out

    def padded(self, flat: I64, rows: npt.NDArray[np.intp] | None = None, fill: int = 0) -> I64:
        """``(len(rows), width)`` view of per-device ``flat`` (device number = column; slots
        beyond a node's devices hold ``fill``; width = the most devices among ``rows``, at
        least 1 when the cluster has GPUs)."""
        rows_ = self.node_range if rows is None else np.asarray(rows, dtype=np.intp)
        idx, _ = self.devices_of(rows_)
        return self.pad_rows(flat[idx], rows_, fill)

    def pad_rows(self, values: I64, rows: npt.NDArray[np.intp], fill: int = 0) -> I64:
        """:meth:`padded` of ``values`` given for the devices of :meth:`devices_of` ``(rows)``,
        in that order."""
        counts = self.gpu_count[rows]
        width = max(int(counts.max()) if counts.size else 0, 1 if self.n_devices else 0)
        out: I64 = np.full((rows.size, width), fill, dtype=np.int64)
        idx, seg = self.devices_of(rows)
        out[seg, idx - self.gpu_offset[rows][seg]] = values
        return out

    def selector_mask(self, selector: Mapping[str, str]) -> BOOL:
        """Nodes whose labels match every ``key: value`` of ``selector``. Shape (n_nodes,)."""
        mask = np.ones(self.n_nodes, dtype=np.bool_)
        for key, value in selector.items():
            codes = self.label_codes.get(key)
            code = self.label_values.get(key, {}).get(value)
            if codes is None or code is None:
                return np.zeros(self.n_nodes, dtype=np.bool_)
            mask &= codes == code
        return mask

    def untolerated_mask(self, tolerations: tuple[Toleration, ...]) -> BOOL:
        """Nodes carrying a NoSchedule/NoExecute taint none of ``tolerations`` tolerates."""
        out: BOOL = self.hard_taint_index.untolerated_count(tolerations) > 0
        return out

    def soft_untolerated_count(self, tolerations: tuple[Toleration, ...]) -> I64:
        """Number of PreferNoSchedule taints per node that ``tolerations`` do not tolerate."""
        return self.soft_taint_index.untolerated_count(tolerations)

    def model_mask(self, models: tuple[str, ...]) -> BOOL:
        """Nodes whose GPU model is one of ``models`` (all GPU nodes when empty)."""
        if not models:
            return np.asarray(self.gpu_count > 0)
        codes = [i for i, m in enumerate(self.gpu_models) if m in models]
        return np.isin(self.gpu_model, np.array(codes, dtype=np.int64))


def resource_spec_of(snapshot: Snapshot) -> ResourceSpec:
    return ResourceSpec.from_names(snapshot.resource_names())


def request_vector(task: Task, spec: ResourceSpec) -> I64:
    """The task's request as a row over ``spec``: pods = 1 and the GPU column what the request
    charges its queue (:func:`~gangsched.model.gpu_charge.queue_gpu_charge`, whatever the node)."""
    row = np.zeros(len(spec), dtype=np.int64)
    for res, amount in task.request.items():
        if res != PODS:
            row[spec.index(res)] = amount
    row[spec.index(PODS)] = 1
    if task.gpu_request is not None:
        g = task.gpu_request
        row[spec.gpu_column] = queue_gpu_charge(g.count, g.milli)
    return row


@dataclass(frozen=True, slots=True, eq=False)
class ArraysBase:
    """What a :class:`~gangsched.state.ClusterState` hands its next snapshot's arrays: the
    previous snapshot (its arrays, once built, are reused), the resource names of the records
    now, and, per node whose tasks changed since, the tasks that name it now."""

    previous: Snapshot | None  # its arrays are built; None: build from scratch
    since: int  # the state's generation when ``previous`` was taken
    resource_names: frozenset[str]
    changed: Mapping[str, tuple[Task, ...]]


def build_cluster_arrays(snapshot: Snapshot) -> ClusterArrays:
    """Build the static columns of ``snapshot`` (one pass over the records).

    A snapshot of a :class:`~gangsched.state.ClusterState` keeps its arrays, and builds them
    from the previous snapshot's when the nodes and the resource names did not change: the
    occupancy rows of the nodes whose tasks changed are recomputed, everything else is shared
    or copied (the same values as a build from scratch).
    """
    hint = snapshot._arrays
    if isinstance(hint, ClusterArrays):
        return hint
    if isinstance(hint, ArraysBase):
        arrays = _from_previous(snapshot, hint)
        object.__setattr__(snapshot, "_arrays", arrays)
        return arrays
    return _build(snapshot, resource_spec_of(snapshot))


def _from_previous(snapshot: Snapshot, hint: ArraysBase) -> ClusterArrays:
    previous = hint.previous
    base = previous._arrays if previous is not None else None
    spec = ResourceSpec.from_names(set(hint.resource_names) | {CPU, MEMORY, GPU, PODS})
    if previous is None or not isinstance(base, ClusterArrays) or base.spec != spec:
        return _build(snapshot, spec)
    allocatable, unschedulable = base.allocatable, base.unschedulable
    if previous.nodes is not snapshot.nodes:
        moved = _node_rows_moved(previous.nodes, snapshot.nodes)
        if moved is None:
            return _node_set_moved(snapshot, hint, previous, base, spec)
        if moved:
            allocatable, unschedulable = allocatable.copy(), unschedulable.copy()
            col = {name: c for c, name in enumerate(spec.names)}
            for row in moved:
                node = snapshot.nodes[row]
                allocatable[row] = 0
                _fill_allocatable(allocatable[row], node, col, col[PODS], spec.gpu_column)
                unschedulable[row] = node.unschedulable
    books = (
        base.used.copy(),
        base.releasing.copy(),
        base.pipelined.copy(),
        base.gpu_used.copy(),
        base.gpu_releasing.copy(),
        base.gpu_pipelined.copy(),
    )
    rows = [
        (i, tasks)
        for name, tasks in hint.changed.items()
        if (i := snapshot.node_index.get(name)) is not None
    ]
    _rebook(base, rows, books)
    return _with_books(base, books, allocatable=allocatable, unschedulable=unschedulable)


def _node_set_moved(
    snapshot: Snapshot,
    hint: ArraysBase,
    previous: Snapshot,
    base: ClusterArrays,
    spec: ResourceSpec,
) -> ClusterArrays:
    """The arrays when the node set changed (nodes added, removed, renamed or reordered): the
    node columns are built from the records (label codes, models and taint ids in the order a
    build from scratch gives them), the occupancy rows of the nodes kept are moved from
    ``base`` to their new rows (and their devices' entries with them), and the nodes whose
    tasks changed since ``previous`` -- every node added among them -- are booked again from
    those tasks. A build from scratch when a node that is new, or whose devices differ, has
    no task list in ``hint``."""
    fresh = _node_columns(snapshot, spec)
    old_index = previous.node_index
    changed = hint.changed
    new_rows: list[int] = []
    old_rows: list[int] = []
    rebook: list[tuple[int, tuple[Task, ...]]] = []
    for i, name in enumerate(fresh.node_names):
        tasks = changed.get(name)
        if tasks is not None:
            rebook.append((i, tasks))
            continue
        j = old_index.get(name)
        if j is None:
            return _build(snapshot, spec)  # a new node whose tasks are not known
        new_rows.append(i)
        old_rows.append(j)
    new = np.array(new_rows, dtype=np.intp)
    old = np.array(old_rows, dtype=np.intp)
    if not (
        np.array_equal(fresh.gpu_count[new], base.gpu_count[old])
        and np.array_equal(fresh.gpu_capacity[new], base.gpu_capacity[old])
        and np.array_equal(fresh.gpu_sharing[new], base.gpu_sharing[old])
    ):
        return _build(snapshot, spec)  # a node's devices changed with no task list in hint
    books = _empty_books(fresh)
    used, releasing, pipelined, gpu_used, gpu_releasing, gpu_pipelined = books
    used[new], releasing[new], pipelined[new] = (
        base.used[old],
        base.releasing[old],
        base.pipelined[old],
    )
    to, _ = fresh.devices_of(new)
    src, _ = base.devices_of(old)
    gpu_used[to], gpu_releasing[to] = base.gpu_used[src], base.gpu_releasing[src]
    gpu_pipelined[to] = base.gpu_pipelined[src]
    _rebook(fresh, rebook, books)
    return _with_books(fresh, books)


def _empty_books(arrays: ClusterArrays) -> tuple[I64, I64, I64, I64, I64, I64]:
    shape = arrays.allocatable.shape
    n_dev = arrays.n_devices
    return (
        np.zeros(shape, dtype=np.int64),
        np.zeros(shape, dtype=np.int64),
        np.zeros(shape, dtype=np.int64),
        np.zeros(n_dev, dtype=np.int64),
        np.zeros(n_dev, dtype=np.int64),
        np.zeros(n_dev, dtype=np.int64),
    )


def _rebook(
    arrays: ClusterArrays,
    rows: Sequence[tuple[int, tuple[Task, ...]]],
    books: tuple[I64, I64, I64, I64, I64, I64],
) -> None:
    """Zero the occupancy of each row of ``rows`` in ``books`` and book its tasks there (as
    :func:`_book` does, each row summed in plain integers and written once)."""
    used, releasing, pipelined, gpu_used, gpu_releasing, gpu_pipelined = books
    spec = arrays.spec
    n_res = len(spec)
    col = {name: c for c, name in enumerate(spec.names)}
    pods_col, gpu_col = col[PODS], spec.gpu_column
    capacity, sharing = arrays.gpu_capacity.tolist(), arrays.gpu_sharing.tolist()
    offset = arrays.gpu_offset.tolist()
    pipelined_phase, releasing_phase = TaskPhase.PIPELINED, TaskPhase.RELEASING
    # Within this call: each request mapping's row (pods = 1, by the mapping's identity: the
    # tasks keep them alive) and each GPU take, worked out once.
    request_rows: dict[int, list[int]] = {}
    takes_of: dict[tuple[int, int, bool], int] = {}
    for i, tasks in rows:
        # per book (used, releasing, pipelined): the row's sums and the devices' takes
        sums = ([0] * n_res, [0] * n_res, [0] * n_res)
        takes: tuple[dict[int, int], dict[int, int], dict[int, int]] = ({}, {}, {})
        first = offset[i]
        for task in tasks:
            phase = task.phase
            if task.node is None or not (phase in OCCUPYING_PHASES or phase is pipelined_phase):
                continue
            request = task.request
            row = request_rows.get(id(request))
            if row is None:
                row = [0] * n_res
                for res, amount in request.items():
                    if res != PODS:
                        row[col[res]] = amount
                row[pods_col] = 1
                request_rows[id(request)] = row
            g = task.gpu_request
            per_device = 0
            if g is not None:
                asked = (g.milli, capacity[i], sharing[i])
                per_device = takes_of.get(asked, -1)
                if per_device < 0:
                    per_device = takes_of[asked] = device_take(*asked)
                row = row.copy()
                row[gpu_col] = g.count * per_device
            if phase is pipelined_phase:
                books_of: tuple[int, ...] = (2,)
            elif phase is releasing_phase:
                books_of = (0, 1)
            else:
                books_of = (0,)
            for k in books_of:
                total = sums[k]
                for c in range(n_res):
                    total[c] += row[c]
                took = takes[k]
                for d in task.gpu_indices:
                    took[first + d] = took.get(first + d, 0) + per_device
        used[i], releasing[i], pipelined[i] = sums
        devices = arrays.devices(i)
        gpu_used[devices] = gpu_releasing[devices] = gpu_pipelined[devices] = 0
        for book, took in zip((gpu_used, gpu_releasing, gpu_pipelined), takes, strict=True):
            for flat, amount in took.items():
                book[flat] = amount


def _with_books(
    arrays: ClusterArrays, books: tuple[I64, I64, I64, I64, I64, I64], **changes: Any
) -> ClusterArrays:
    """``arrays`` with the occupancy ``books`` (and ``changes``), in one copy."""
    used, releasing, pipelined, gpu_used, gpu_releasing, gpu_pipelined = books
    return dataclasses.replace(
        arrays,
        **changes,
        used=used,
        releasing=releasing,
        pipelined=pipelined,
        gpu_used=gpu_used,
        gpu_releasing=gpu_releasing,
        gpu_pipelined=gpu_pipelined,
    )


def _node_rows_moved(before: Sequence[Node], after: Sequence[Node]) -> list[int] | None:
    """Indices of the nodes whose record is another object, when every such change touches
    only what :func:`_from_previous` patches (allocatable amounts and cordon); None when a
    build from scratch is needed (nodes added, removed, renamed or reordered, or a change to
    devices, labels or taints)."""
    if len(before) != len(after):
        return None
    moved = [i for i, (a, b) in enumerate(zip(before, after, strict=True)) if a is not b]
    for i in moved:
        a, b = before[i], after[i]
        if a.name != b.name or a.gpus != b.gpus or a.labels != b.labels or a.taints != b.taints:
            return None
    return moved


def _fill_allocatable(
    row: I64, node: Node, col: Mapping[str, int], pods_col: int, gpu_col: int
) -> None:
    """Write ``node``'s allocatable amounts into its (zeroed) row: no pod limit when it names
    none, the GPU column from its devices."""
    for res, amount in node.allocatable.items():
        row[col[res]] = amount
    if PODS not in node.allocatable:
        row[pods_col] = NO_LIMIT
    if node.gpus is not None:
        row[gpu_col] = node.gpus.count * node.gpus.milli


def _book(
    task: Task,
    i: int,
    spec: ResourceSpec,
    gpu_capacity: I64,
    gpu_sharing: BOOL,
    gpu_offset: I64,
    books: tuple[I64, I64, I64, I64, I64, I64],
) -> None:
    """Add what ``task`` holds (or reserves) to node ``i``'s occupancy rows."""
    if task.node is None or not (
        task.phase in OCCUPYING_PHASES or task.phase is TaskPhase.PIPELINED
    ):
        return
    used, releasing, pipelined, gpu_used, gpu_releasing, gpu_pipelined = books
    row = request_vector(task, spec)
    per_device = device_milli(task, int(gpu_capacity[i]), bool(gpu_sharing[i]))
    if task.gpu_request is not None:
        # A node is charged what the devices hold (as Session.place), not the queue charge.
        row[spec.gpu_column] = task.gpu_request.count * per_device
    if task.phase is TaskPhase.PIPELINED:
        pipelined[i] += row
        for d in task.gpu_indices:
            gpu_pipelined[gpu_offset[i] + d] += per_device
        return
    used[i] += row
    for d in task.gpu_indices:
        gpu_used[gpu_offset[i] + d] += per_device
    if task.phase is TaskPhase.RELEASING:
        releasing[i] += row
        for d in task.gpu_indices:
            gpu_releasing[gpu_offset[i] + d] += per_device


def _build(snapshot: Snapshot, spec: ResourceSpec) -> ClusterArrays:
    fresh = _node_columns(snapshot, spec)
    books = _empty_books(fresh)
    node_index = snapshot.node_index
    for task in snapshot.tasks:
        if task.node is not None:
            i = node_index[task.node]
            _book(task, i, spec, fresh.gpu_capacity, fresh.gpu_sharing, fresh.gpu_offset, books)
    arrays = _with_books(fresh, books)
    if isinstance(snapshot._arrays, ArraysBase):  # a state's snapshot keeps its arrays
        object.__setattr__(snapshot, "_arrays", arrays)
    return arrays


def _node_columns(snapshot: Snapshot, spec: ResourceSpec) -> ClusterArrays:
    """The node columns of ``snapshot`` (one pass over the node records), nothing booked."""
    n = len(snapshot.nodes)
    n_res = len(spec)
    col = {name: i for i, name in enumerate(spec.names)}
    pods_col = col[PODS]
    gpu_col = spec.gpu_column

    allocatable = np.zeros((n, n_res), dtype=np.int64)
    gpu_capacity = np.zeros(n, dtype=np.int64)
    gpu_count = np.zeros(n, dtype=np.int64)
    gpu_sharing = np.zeros(n, dtype=np.bool_)
    gpu_model = np.full(n, -1, dtype=np.int64)
    unschedulable = np.zeros(n, dtype=np.bool_)
    models: dict[str, int] = {}
    label_lists: dict[str, list[tuple[int, str]]] = {}
    hard: dict[int, list[Taint]] = {}
    soft: dict[int, list[Taint]] = {}
    for i, node in enumerate(snapshot.nodes):
        _fill_allocatable(allocatable[i], node, col, pods_col, gpu_col)
        if node.gpus is not None:
            gpu_count[i] = node.gpus.count
            gpu_capacity[i] = node.gpus.milli
            gpu_sharing[i] = node.gpus.sharing
            gpu_model[i] = models.setdefault(node.gpus.model, len(models))
        unschedulable[i] = node.unschedulable
        for key, value in node.labels.items():
            label_lists.setdefault(key, []).append((i, value))
        for taint in node.taints:
            (soft if taint.effect == "PreferNoSchedule" else hard).setdefault(i, []).append(taint)

    gpu_offset = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(gpu_count, out=gpu_offset[1:])
    gpu_node = np.repeat(np.arange(n, dtype=np.int64), gpu_count)
    label_codes: dict[str, I64] = {}
    label_values: dict[str, dict[str, int]] = {}
    for key in sorted(label_lists):
        values: dict[str, int] = {}
        codes = np.full(n, -1, dtype=np.int64)
        for i, value in label_lists[key]:
            codes[i] = values.setdefault(value, len(values))
        label_codes[key] = codes
        label_values[key] = values

    none = np.zeros((0, n_res), dtype=np.int64)
    no_devices = np.zeros(0, dtype=np.int64)
    return ClusterArrays(
        spec=spec,
        node_names=tuple(node.name for node in snapshot.nodes),
        allocatable=allocatable,
        used=none,
        releasing=none,
        pipelined=none,
        gpu_capacity=gpu_capacity,
        gpu_count=gpu_count,
        gpu_offset=gpu_offset,
        gpu_node=gpu_node,
        gpu_used=no_devices,
        gpu_releasing=no_devices,
        gpu_pipelined=no_devices,
        gpu_sharing=gpu_sharing,
        gpu_model=gpu_model,
        gpu_models=tuple(models),
        unschedulable=unschedulable,
        label_codes=label_codes,
        label_values=label_values,
        hard_taint_index=TaintIndex.build(n, hard),
        soft_taint_index=TaintIndex.build(n, soft),
    )


def device_milli(task: Task, capacity: int, sharing: bool) -> int:
    """Milli-GPU the task holds on each of its devices on a node with these devices
    (:func:`~gangsched.model.gpu_charge.device_take`; 0 without a GPU request)."""
    g = task.gpu_request
    if g is None:
        return 0
    return device_take(g.milli, capacity, sharing)


@dataclass(frozen=True, slots=True, eq=False)
class TaskTemplate:
    """Identical pending tasks of one job, placed from one set of masks and scores."""

    index: int
    job: int  # index into snapshot.jobs
    role: str
    tasks: tuple[int, ...]  # indices into snapshot.tasks, in task order
    # (n_resources,) pods = 1; the GPU column is the queue charge (queue_gpu_charge), a
    # node's charge is per its devices (Session._gpu_need)
    request: I64
    gpu_count: int
    gpu_milli: int
    gpu_models: tuple[str, ...]
    node_selector: Mapping[str, str]
    tolerations: tuple[Toleration, ...]
    best_effort: bool
    priority: int
    key: tuple[object, ...] = field(repr=False)
    #: What node feasibility and shape-only scores depend on: request, GPU request, selector,
    #: tolerations and node affinity (not the job, role or priority). Equal shapes share one
    #: evaluation.
    shape: tuple[object, ...] = field(repr=False, default=())
    #: The tasks' node affinity (None: none).
    node_affinity: NodeAffinity | None = None


def template_key(task: Task) -> tuple[object, ...]:
    g = task.gpu_request
    return (
        task.job,
        task.role,
        tuple(task.request.items()),
        (g.count, g.milli, g.models) if g is not None else None,
        tuple(task.node_selector.items()),
        task.tolerations,
        task.priority,
        task.preemptable,
        task.node_affinity,
    )


def pod_label_keys(snapshot: Snapshot) -> tuple[str, ...] | None:
    """The pod label keys some pod affinity, anti-affinity or spread selector of the snapshot
    reads (sorted), or None when no task carries such a constraint."""
    keys: set[str] = set()
    found = False
    for t in snapshot.tasks:
        if not t.pod_constrained:
            continue
        found = True
        terms = [
            term
            for group in (t.pod_affinity, t.pod_anti_affinity)
            if group is not None
            for term in (*group.required, *(w.term for w in group.preferred))
        ]
        selectors = [term.label_selector for term in terms]
        selectors += [c.label_selector for c in t.topology_spread]
        for sel in selectors:
            if sel is not None:
                keys.update(sel.match_labels)
                keys.update(r.key for r in sel.match_expressions)
    return tuple(sorted(keys)) if found else None


def pod_key(task: Task, read: tuple[str, ...]) -> tuple[object, ...]:
    """What pod constraints see of ``task``: its namespace, its values of the label keys
    selectors read (``read``), and its own constraints. Tasks that differ here get their own
    template, as the pod-constraint mask is worked out per template."""
    labels = task.pod_labels
    return (
        task.namespace,
        tuple(labels.get(k) for k in read),
        task.pod_affinity,
        task.pod_anti_affinity,
        task.topology_spread,
    )


#: One tuple per distinct template shape made: a template made with a shape equal to an
#: earlier one's shares its tuple (and a carried template keeps its earlier one's), so
#: the cycle's templates hold few distinct shape objects and what looks them up by value
#: hashes each once (:meth:`~gangsched.session.evaluation.Evaluator.carry`). An equal
#: value is all it ever hands out; emptied when it holds ``_SHAPES_KEPT``.
_SHAPES: dict[tuple[object, ...], tuple[object, ...]] = {}
_SHAPES_KEPT = 4096


def _shared_shape(shape: tuple[object, ...]) -> tuple[object, ...]:
    """The tuple of :data:`_SHAPES` equal to ``shape`` (``shape`` itself when new)."""
    got = _SHAPES.get(shape)
    if got is None:
        if len(_SHAPES) >= _SHAPES_KEPT:
            _SHAPES.clear()
        got = _SHAPES[shape] = shape
    return got


#: ``read`` of :func:`build_templates` left to it: the snapshot's pod label keys are looked up.
_LOOK_UP: tuple[str, ...] = ("",)


def build_templates(
    snapshot: Snapshot,
    requests: I64,
    task_indices: list[int],
    carried: tuple[Sequence[TaskTemplate], I64, Mapping[str, int]] | None = None,
    split: Mapping[int, int] | None = None,
    *,
    read: tuple[str, ...] | None = _LOOK_UP,
    jobs: I64 | None = None,
) -> tuple[list[TaskTemplate], I64]:
    """Group ``task_indices`` (already in task order) into templates. ``requests``: every
    snapshot task's :func:`request_vector` (a session's ``task_req``); a template's request is
    its first task's row.

    ``carried``: the templates of an earlier cycle, per snapshot task the index of the one
    among them its record was a task of (-1: none), and that cycle's job index (by name);
    such a task joins the template of that one's key, whose attributes are taken over (the
    same key: the same attributes), and only the other tasks' keys are made (each compared
    with the earlier keys of its job alone: a key starts with its job's name). ``read``: the
    snapshot's :func:`pod_label_keys` when the caller knows them; ``jobs``: every snapshot
    task's job index, when the caller knows them (a session's ``task_job``). ``split``: per task, a
    group its template keeps apart from
    otherwise identical tasks of the job (the task-topology buckets; such a task's key is
    always made).

    Returns the templates (ordered by first appearance) and, per snapshot task, its template
    index (-1 for tasks not given).
    """
    tasks = snapshot.tasks
    if read is _LOOK_UP:
        read = pod_label_keys(snapshot)
    if read is not None:
        carried = None  # keys of an earlier cycle may lack the pod part
    pending = np.asarray(task_indices, dtype=np.int64)
    n_pending = pending.size
    old: Sequence[TaskTemplate] = ()
    old_jobs: Mapping[str, int] = {}
    if carried is not None:
        old, old_of, old_jobs = carried
        label = old_of[pending].copy()
        if split is not None:
            label[[i for i, t in enumerate(task_indices) if t in split]] = -1
    else:
        label = np.full(n_pending, -1, dtype=np.int64)
    # The tasks without a carried template: their keys, each an earlier template's or new.
    made: dict[tuple[object, ...], int] = {}
    old_by_job: dict[int, list[TaskTemplate]] | None = None
    n_old = len(old)
    for i in np.flatnonzero(label < 0).tolist():
        t = task_indices[i]
        task = tasks[t]
        key = template_key(task)
        if split is not None and t in split:
            key = (*key, ("bucket", split[t]))
        if read is not None:
            key = (*key, pod_key(task, read))
        if n_old:
            if old_by_job is None:
                old_by_job = {}
                for tmpl in old:
                    old_by_job.setdefault(tmpl.job, []).append(tmpl)
            same = [o for o in old_by_job.get(old_jobs.get(task.job, -1), ()) if o.key == key]
            if same:
                label[i] = same[0].index
                continue
        label[i] = n_old + made.setdefault(key, len(made))
    new_keys = list(made)
    # Groups in order of first appearance; members in task order.
    found, first, inverse = np.unique(label, return_index=True, return_inverse=True)
    by_first = np.argsort(first, kind="stable")
    rank = np.empty(found.size, dtype=np.int64)
    rank[by_first] = np.arange(found.size, dtype=np.int64)
    group = rank[inverse.reshape(-1)]
    members = pending[np.argsort(group, kind="stable")].tolist()
    bounds = np.zeros(found.size + 1, dtype=np.int64)
    np.cumsum(np.bincount(group, minlength=found.size), out=bounds[1:])
    template_of = np.full(len(tasks), -1, dtype=np.int64)
    template_of[pending] = group
    firsts = pending[first[by_first]]
    # The first members' rows in one gather (read-only: a template's row is a view of it).
    gathered = requests[firsts]
    gathered.flags.writeable = False
    rows = list(gathered)
    job_index = snapshot.job_index
    labels = found[by_first].tolist()
    firsts_at = firsts.tolist()
    job_of = (
        jobs[firsts].tolist() if jobs is not None else [job_index[tasks[f].job] for f in firsts_at]
    )
    b = bounds.tolist()
    spans = [tuple(members[start:end]) for start, end in pairwise(b)]
    # The carried templates in one pass (a carried template's attributes are its earlier
    # one's); a new template's place holds a stand-in until it is made below.
    stand_in = old[0] if n_old else None
    templates: list[TaskTemplate] = (
        list(
            map(
                _made_like,
                [old[lab] if lab < n_old else stand_in for lab in labels],
                range(len(labels)),
                job_of,
                spans,
                rows,
            )
        )
        if n_old
        else [None] * len(labels)  # type: ignore[list-item]  # every place is made below
    )
    for idx, lab in enumerate(labels):
        if lab < n_old:
            continue
        key = new_keys[lab - n_old]
        first_task = tasks[firsts_at[idx]]
        g = first_task.gpu_request
        templates[idx] = _made(
            idx,
            job_of[idx],
            first_task.role,
            spans[idx],
            rows[idx],
            g.count if g is not None else 0,
            g.milli if g is not None else 0,
            g.models if g is not None else (),
            first_task.node_selector,
            first_task.tolerations,
            first_task.best_effort,
            first_task.priority,
            key,
            _shared_shape((*key[2:6], key[8])),
            first_task.node_affinity,
        )
    return templates, template_of


def _maker() -> tuple[Callable[..., TaskTemplate], Callable[..., TaskTemplate]]:
    """Two functions making a :class:`TaskTemplate` (a cycle makes a template per waiting
    job, and the dataclass's own constructor costs three times as much): ``made`` from its
    fields in order, ``made_like`` from an earlier template whose fields it takes but the
    four that follow the snapshot's order (``index``, ``job``, ``tasks``, ``request``).

    The record is frozen: its ``__setattr__`` refuses every write. The makers fill a
    private twin class instead -- the same slots, in the same order, and no ``__setattr__``
    of its own, so each field is one plain slot store -- and then make the object a
    :class:`TaskTemplate` (``__class__``: allowed between classes of the same layout, which
    the twin has by construction). Nothing else ever holds the twin."""
    names = [f.name for f in dataclasses.fields(TaskTemplate)]
    slots = TaskTemplate.__slots__
    assert tuple(slots) == tuple(names)  # the layout the twin copies
    twin = type("_TaskTemplateFilling", (), {"__slots__": slots})
    space: dict[str, Any] = {"_new": object.__new__, "_twin": twin, "_cls": TaskTemplate}
    end = "    made.__class__ = _cls\n    return made\n"
    own = ("index", "job", "tasks", "request")
    taken = "".join(f"    made.{n} = {n if n in own else 'was.' + n}\n" for n in names)
    source = (
        f"def made({', '.join(names)}):\n    made = _new(_twin)\n"
        + "".join(f"    made.{n} = {n}\n" for n in names)
        + end
        + f"\n\ndef made_like(was, {', '.join(own)}):\n    made = _new(_twin)\n{taken}{end}"
    )
    found = define(source, space, "task template maker")
    return found["made"], found["made_like"]


_made, _made_like = _maker()
