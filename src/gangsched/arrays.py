"""Columnar NumPy view of a snapshot, built once per cycle.

Theory of operation
-------------------
Every per-node quantity the scheduler compares lives in an ``(n_nodes, n_resources)`` int64
matrix whose columns follow a :class:`~gangsched.units.ResourceSpec` (cpu, memory,
nvidia.com/gpu, then the other resources sorted; ``pods`` is always a column). GPU devices are
tracked per index in ``(n_nodes, max_gpus)`` matrices of milli-GPU; padding slots of nodes with
fewer devices are marked invalid in ``gpu_valid``. Labels are coded per key as int arrays
(-1 = label absent), taints as a node × distinct-taint boolean matrix, so node selectors and
tolerations become a handful of vector comparisons.

Pending tasks are grouped into *templates*: identical pending tasks of one job (same role,
request, GPU request, selector, tolerations) share one template, so static masks and scores are
computed once per template, not once per replica.

Only :func:`build_cluster_arrays` reads the records, in one pass; everything else is NumPy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from .model import OCCUPYING_PHASES, Taint, Task, TaskPhase, Toleration
from .snapshot import Snapshot
from .units import CPU, GPU, MEMORY, PODS, ResourceSpec

__all__ = [
    "NO_LIMIT",
    "ClusterArrays",
    "TaskTemplate",
    "build_cluster_arrays",
    "build_templates",
    "request_vector",
]

#: Capacity used for a node's pod count when it declares no ``pods`` limit.
NO_LIMIT = np.int64(2**50)

I64 = npt.NDArray[np.int64]
BOOL = npt.NDArray[np.bool_]


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
    gpu_valid: BOOL  # (n_nodes, max_gpus)
    gpu_used: I64  # (n_nodes, max_gpus) milli-GPU held per device
    gpu_releasing: I64  # (n_nodes, max_gpus)
    gpu_pipelined: I64  # (n_nodes, max_gpus)
    gpu_sharing: BOOL  # (n_nodes,)
    gpu_model: I64  # (n_nodes,) index into gpu_models, -1 without GPUs
    gpu_models: tuple[str, ...]
    unschedulable: BOOL  # (n_nodes,)
    label_codes: Mapping[str, I64]  # key -> (n_nodes,) code of the value, -1 if absent
    label_values: Mapping[str, Mapping[str, int]]  # key -> value -> code
    taints: tuple[Taint, ...]  # distinct NoSchedule/NoExecute taints
    node_taints: BOOL  # (n_nodes, n_taints)
    soft_taints: tuple[Taint, ...]  # distinct PreferNoSchedule taints
    node_soft_taints: BOOL  # (n_nodes, n_soft_taints)

    @property
    def n_nodes(self) -> int:
        return len(self.node_names)

    @property
    def max_gpus(self) -> int:
        return int(self.gpu_valid.shape[1])

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
        if not self.taints:
            return np.zeros(self.n_nodes, dtype=np.bool_)
        tolerated = np.array(
            [any(t.tolerates(taint) for t in tolerations) for taint in self.taints],
            dtype=np.bool_,
        )
        return np.asarray(self.node_taints[:, ~tolerated].any(axis=1))

    def soft_untolerated_count(self, tolerations: tuple[Toleration, ...]) -> I64:
        """Number of PreferNoSchedule taints per node that ``tolerations`` do not tolerate."""
        if not self.soft_taints:
            return np.zeros(self.n_nodes, dtype=np.int64)
        tolerated = np.array(
            [any(t.tolerates(taint) for t in tolerations) for taint in self.soft_taints],
            dtype=np.bool_,
        )
        return np.asarray(self.node_soft_taints[:, ~tolerated].sum(axis=1), dtype=np.int64)

    def model_mask(self, models: tuple[str, ...]) -> BOOL:
        """Nodes whose GPU model is one of ``models`` (all GPU nodes when empty)."""
        if not models:
            return np.asarray(self.gpu_count > 0)
        codes = [i for i, m in enumerate(self.gpu_models) if m in models]
        return np.isin(self.gpu_model, np.array(codes, dtype=np.int64))


def resource_spec_of(snapshot: Snapshot) -> ResourceSpec:
    names: set[str] = {CPU, MEMORY, GPU, PODS}
    for node in snapshot.nodes:
        names.update(node.allocatable)
    for task in snapshot.tasks:
        names.update(task.request)
    for queue in snapshot.queues:
        for res in (queue.capability, queue.guarantee, queue.deserved):
            if res is not None:
                names.update(res)
    for job in snapshot.jobs:
        if job.min_resources is not None:
            names.update(job.min_resources)
    return ResourceSpec.from_names(names)


def request_vector(task: Task, spec: ResourceSpec, gpu_unit: int = 1000) -> I64:
    """The task's request as a row over ``spec`` (pods = 1, GPU column in milli-GPU)."""
    row = np.zeros(len(spec), dtype=np.int64)
    for res, amount in task.request.items():
        if res != PODS:
            row[spec.index(res)] = amount
    row[spec.index(PODS)] = 1
    if task.gpu_request is not None:
        g = task.gpu_request
        row[spec.gpu_column] = g.count * min(g.milli, gpu_unit)
    return row


def build_cluster_arrays(snapshot: Snapshot) -> ClusterArrays:
    """Build the static columns of ``snapshot`` (one pass over the records)."""
    spec = resource_spec_of(snapshot)
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
    hard: dict[Taint, int] = {}
    soft: dict[Taint, int] = {}
    hard_pairs: list[tuple[int, int]] = []
    soft_pairs: list[tuple[int, int]] = []
    for i, node in enumerate(snapshot.nodes):
        for res, amount in node.allocatable.items():
            allocatable[i, col[res]] = amount
        if PODS not in node.allocatable:
            allocatable[i, pods_col] = NO_LIMIT
        if node.gpus is not None:
            gpu_count[i] = node.gpus.count
            gpu_capacity[i] = node.gpus.milli
            gpu_sharing[i] = node.gpus.sharing
            gpu_model[i] = models.setdefault(node.gpus.model, len(models))
            allocatable[i, gpu_col] = node.gpus.count * node.gpus.milli
        unschedulable[i] = node.unschedulable
        for key, value in node.labels.items():
            label_lists.setdefault(key, []).append((i, value))
        for taint in node.taints:
            if taint.effect == "PreferNoSchedule":
                soft_pairs.append((i, soft.setdefault(taint, len(soft))))
            else:
                hard_pairs.append((i, hard.setdefault(taint, len(hard))))

    max_gpus = int(gpu_count.max()) if n else 0
    gpu_valid = np.arange(max_gpus)[None, :] < gpu_count[:, None]
    label_codes: dict[str, I64] = {}
    label_values: dict[str, dict[str, int]] = {}
    for key in sorted(label_lists):
        values: dict[str, int] = {}
        codes = np.full(n, -1, dtype=np.int64)
        for i, value in label_lists[key]:
            codes[i] = values.setdefault(value, len(values))
        label_codes[key] = codes
        label_values[key] = values
    node_taints = np.zeros((n, len(hard)), dtype=np.bool_)
    for i, j in hard_pairs:
        node_taints[i, j] = True
    node_soft = np.zeros((n, len(soft)), dtype=np.bool_)
    for i, j in soft_pairs:
        node_soft[i, j] = True

    used = np.zeros((n, n_res), dtype=np.int64)
    releasing = np.zeros((n, n_res), dtype=np.int64)
    pipelined = np.zeros((n, n_res), dtype=np.int64)
    gpu_used = np.zeros((n, max_gpus), dtype=np.int64)
    gpu_releasing = np.zeros((n, max_gpus), dtype=np.int64)
    gpu_pipelined = np.zeros((n, max_gpus), dtype=np.int64)
    node_index = snapshot.node_index
    for task in snapshot.tasks:
        if task.node is None or not (
            task.phase in OCCUPYING_PHASES or task.phase is TaskPhase.PIPELINED
        ):
            continue
        i = node_index[task.node]
        row = request_vector(task, spec, int(gpu_capacity[i]) or 1000)
        per_device = device_milli(task, int(gpu_capacity[i]), bool(gpu_sharing[i]))
        if task.gpu_request is not None:
            # Charged as held: whole devices on a node without GPU sharing (as Session.place).
            row[gpu_col] = task.gpu_request.count * per_device
        if task.phase is TaskPhase.PIPELINED:
            pipelined[i] += row
            for d in task.gpu_indices:
                gpu_pipelined[i, d] += per_device
            continue
        used[i] += row
        for d in task.gpu_indices:
            gpu_used[i, d] += per_device
        if task.phase is TaskPhase.RELEASING:
            releasing[i] += row
            for d in task.gpu_indices:
                gpu_releasing[i, d] += per_device

    return ClusterArrays(
        spec=spec,
        node_names=tuple(node.name for node in snapshot.nodes),
        allocatable=allocatable,
        used=used,
        releasing=releasing,
        pipelined=pipelined,
        gpu_capacity=gpu_capacity,
        gpu_count=gpu_count,
        gpu_valid=gpu_valid,
        gpu_used=gpu_used,
        gpu_releasing=gpu_releasing,
        gpu_pipelined=gpu_pipelined,
        gpu_sharing=gpu_sharing,
        gpu_model=gpu_model,
        gpu_models=tuple(models),
        unschedulable=unschedulable,
        label_codes=label_codes,
        label_values=label_values,
        taints=tuple(hard),
        node_taints=node_taints,
        soft_taints=tuple(soft),
        node_soft_taints=node_soft,
    )


def device_milli(task: Task, capacity: int, sharing: bool) -> int:
    """Milli-GPU the task holds on each of its devices on a node with these devices.

    A request at or above a device's capacity, or any request on a node without GPU sharing,
    holds whole devices.
    """
    g = task.gpu_request
    if g is None:
        return 0
    if not sharing or g.milli >= capacity:
        return capacity
    return g.milli


@dataclass(frozen=True, slots=True, eq=False)
class TaskTemplate:
    """Identical pending tasks of one job, placed from one set of masks and scores."""

    index: int
    job: int  # index into snapshot.jobs
    role: str
    tasks: tuple[int, ...]  # indices into snapshot.tasks, in task order
    request: I64  # (n_resources,) with pods = 1 and the GPU column in milli-GPU
    gpu_count: int
    gpu_milli: int
    gpu_models: tuple[str, ...]
    node_selector: Mapping[str, str]
    tolerations: tuple[Toleration, ...]
    best_effort: bool
    priority: int
    key: tuple[object, ...] = field(repr=False)
    #: What node feasibility and shape-only scores depend on: request, GPU request, selector
    #: and tolerations (not the job, role or priority). Equal shapes share one evaluation.
    shape: tuple[object, ...] = field(repr=False, default=())


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
    )


def build_templates(
    snapshot: Snapshot, spec: ResourceSpec, task_indices: list[int]
) -> tuple[list[TaskTemplate], I64]:
    """Group ``task_indices`` (already in task order) into templates.

    Returns the templates (ordered by first appearance) and, per snapshot task, its template
    index (-1 for tasks not given).
    """
    groups: dict[tuple[object, ...], list[int]] = {}
    for t in task_indices:
        groups.setdefault(template_key(snapshot.tasks[t]), []).append(t)
    template_of = np.full(len(snapshot.tasks), -1, dtype=np.int64)
    templates: list[TaskTemplate] = []
    for key, members in groups.items():
        first = snapshot.tasks[members[0]]
        g = first.gpu_request
        idx = len(templates)
        templates.append(
            TaskTemplate(
                index=idx,
                job=snapshot.job_index[first.job],
                role=first.role,
                tasks=tuple(members),
                request=request_vector(first, spec),
                gpu_count=g.count if g is not None else 0,
                gpu_milli=g.milli if g is not None else 0,
                gpu_models=g.models if g is not None else (),
                node_selector=first.node_selector,
                tolerations=first.tolerations,
                best_effort=first.best_effort,
                priority=first.priority,
                key=key,
                shape=key[2:6],
            )
        )
        template_of[list(members)] = idx
    return templates, template_of
