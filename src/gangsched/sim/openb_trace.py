"""The openb trace as replay records, and the FGD protocol as one mode of the replay engine.

Theory of operation
-------------------
:func:`openb_nodes` turns a :class:`~gangsched.io.openb.NodeTable` into
:class:`~gangsched.model.Node` records (CPU in millicores, memory in bytes from MiB, devices of
1000 milli-GPU that may be shared, the GPU model), and :func:`openb_task` one pod row into a
pending :class:`~gangsched.model.Task` (a GPU spec becomes the task's allowed models).

The FGD study's fill experiment places the pods in their shuffled and tuned arrival order
(:func:`gangsched.sim.fgd.tuned_order`) one at a time on the empty cluster, never moving or
retrying one: a pod that fits nowhere is dropped. :func:`replay_fgd` runs it on an engine:

* ``engine="schedule"`` (the general engine): **one** :func:`gangsched.schedule` cycle of the
  configuration ``allocate`` + ``predicates`` + the policy's plugin
  (:mod:`gangsched.plugins.fgd_scores`, :func:`fgd_config`) over :func:`fgd_snapshot`, where
  every pod is pending as a one-task job created at its arrival rank. Allocate takes the jobs
  in that order (one queue, no job-order plugin: the order is creation, then name), places
  each on the best node where it fits now and leaves one that fits nowhere pending -- exactly
  the protocol. Every plugin of the configuration answers by the task's shape and the node
  alone, so a pod costs the rows that changed since its shape was last scored and an argmax.
  :func:`fgd_records` then rebuilds the protocol's records from the binds in arrival order.
* ``engine="replay"``: through :func:`gangsched.sim.replay.replay` with :func:`fgd_trace` (pod
  ``k`` arrives at ``k`` s as a job that never finishes; one cycle per arrival, a pod left
  unplaced is dropped) -- the same placements, one cycle per pod, far slower;
* ``engine="fast"``: through :func:`gangsched.sim.fgd.run_one`, the dedicated one-pod-at-a-time
  loop over the same kernels.

All return a :class:`~gangsched.sim.fgd.RunResult`, so :func:`~gangsched.sim.fgd.discrete_tables`
buckets any one per 1 % of arrived workload. For every policy but ``random`` the engines place
every pod on the same node and devices and record the same numbers; ``random`` draws from the
plugin's seeded hash in the general engines and from the protocol's generator in the fast one.

The reference's tie rule (equal scores go to the node renamed first, ``node_ranks``) is kept by
listing the cluster in that order: the scheduler's own rule (lower node index) then breaks ties
the same way, and placements are mapped back to the table's rows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Unpack

import numpy as np
import numpy.typing as npt

from gangsched.config import Config
from gangsched.errors import ConfigError
from gangsched.fragmentation import (
    MILLI,
    POLICIES,
    TypicalPods,
    fragment_terms,
    node_fragment_from_terms,
)
from gangsched.io.openb import NodeTable, PodTable
from gangsched.limits import MAX_QUANTITY
from gangsched.model import GpuRequest, Gpus, Job, Node, Queue, Resources, Task
from gangsched.model.enums import MAX_GPUS_PER_NODE
from gangsched.model.fields import trusted
from gangsched.model.snapshot import Snapshot
from gangsched.plugins.fgd_scores import typical_pods_argument
from gangsched.scheduler import schedule
from gangsched.sim.fgd import (
    RunOptions,
    RunResult,
    make_source,
    node_ranks,
    run_one,
    run_options,
    tuned_order,
)
from gangsched.sim.fgd.engine import workload_typical
from gangsched.sim.replay import JobState, ReplayOptions, ReplayResult, Trace, TraceJob, replay
from gangsched.units import CPU, MEMORY

__all__ = [
    "ENGINES",
    "MIB",
    "fgd_config",
    "fgd_records",
    "fgd_snapshot",
    "fgd_trace",
    "node_subset",
    "openb_nodes",
    "openb_task",
    "openb_typical",
    "replay_fgd",
]

MIB = 1 << 20
DEFAULT_QUEUE = "default"
#: The engines :func:`replay_fgd` runs the protocol on (module docstring).
ENGINES = ("schedule", "replay", "fast")


def node_subset(nodes: NodeTable, rows: Sequence[int] | npt.NDArray[np.int64]) -> NodeTable:
    """The node table restricted to ``rows`` (in that order); model names are kept."""
    idx = np.asarray(rows, dtype=np.int64)
    if idx.size and (idx.min() < 0 or idx.max() >= len(nodes)):
        raise ConfigError(
            f"row out of range 0..{len(nodes) - 1}", kind="node table", name=nodes.source
        )
    return NodeTable(
        source=nodes.source,
        names=tuple(nodes.names[int(i)] for i in idx),
        cpu_milli=nodes.cpu_milli[idx],
        memory_mib=nodes.memory_mib[idx],
        gpu_count=nodes.gpu_count[idx],
        model_idx=nodes.model_idx[idx],
        models=nodes.models,
    )


def openb_nodes(nodes: NodeTable) -> tuple[Node, ...]:
    """One :class:`Node` per row: CPU millicores, memory bytes, shareable 1000-milli devices."""
    out: list[Node] = []
    for i, name in enumerate(nodes.names):
        count = int(nodes.gpu_count[i])
        out.append(
            Node(
                name=name,
                allocatable=Resources(
                    {CPU: int(nodes.cpu_milli[i]), MEMORY: int(nodes.memory_mib[i]) * MIB}
                ),
                gpus=Gpus(count=count, model=nodes.model_of(i)) if count else None,
            )
        )
    return tuple(out)


def openb_task(pods: PodTable, row: int, *, name: str, job: str, role: str = "") -> Task:
    """Pod ``row`` as a pending task named ``name`` of job ``job``."""
    count = int(pods.num_gpu[row])
    gpu = None
    if count:
        gpu = GpuRequest(
            count=count,
            milli=int(pods.gpu_milli[row]),
            models=pods.spec_models(int(pods.spec_idx[row])),
        )
    return Task(
        name=name,
        job=job,
        role=role,
        request=Resources({CPU: int(pods.cpu_milli[row]), MEMORY: int(pods.memory_mib[row]) * MIB}),
        gpu_request=gpu,
    )


def openb_typical(pods: PodTable, nodes: NodeTable) -> tuple[TypicalPods, tuple[str, ...]]:
    """Typical pods of the whole pod list, with allowed columns over the GPU models present in
    ``nodes`` (sorted); returns them and those model names."""
    gpu_models = np.unique(np.asarray(nodes.model_idx)[np.asarray(nodes.gpu_count) > 0])
    present = sorted({nodes.models[m] for m in gpu_models.tolist()})
    columns = [nodes.models.index(m) for m in present]
    full = workload_typical(pods, nodes)
    typical = TypicalPods(
        cpu_milli=full.cpu_milli,
        num_gpu=full.num_gpu,
        gpu_milli=full.gpu_milli,
        allowed=np.ascontiguousarray(full.allowed[:, columns]),
        prob=full.prob,
    )
    return typical, tuple(present)


def _plain_pods(pods: PodTable, order: npt.NDArray[np.int64]) -> bool:
    """Whether the rows ``order`` hold what the task checks accept: amounts in [0, 2**53],
    at most a node's devices, a share of at least 1 milli-GPU."""
    if order.size == 0:
        return True
    cpu, mem = pods.cpu_milli[order], pods.memory_mib[order]
    count, milli = pods.num_gpu[order], pods.gpu_milli[order]
    gpu = count > 0
    return bool(
        (cpu >= 0).all()
        and (cpu <= MAX_QUANTITY).all()
        and (mem >= 0).all()
        and (mem <= MAX_QUANTITY // MIB).all()
        and (count >= 0).all()
        and (count <= MAX_GPUS_PER_NODE).all()
        and (milli[gpu] >= 1).all()
        and (count[gpu] * milli[gpu] <= MAX_QUANTITY).all()
    )


def _arrivals(pods: PodTable, order: npt.NDArray[np.int64]) -> list[tuple[Job, Task]]:
    """Pod ``order[k - 1]`` as the one-task job ``k`` (created at ``k``), in arrival order.

    The records are built as their constructors would leave them (non-empty names, plain
    ints, canonical resources, the pod table's model names) without running their checks:
    this loop is most of the cost of a snapshot of every pod; the snapshot still checks how
    the records fit together."""
    out: list[tuple[Job, Task]] = []
    names = pods.names
    if not _plain_pods(pods, order):  # a table the checks would refuse: let them word it
        for k, row in enumerate(order.tolist(), start=1):
            name = f"{k:06d}-{names[row]}"
            job = Job(name=name, queue=DEFAULT_QUEUE, min_available=1, creation=k)
            out.append((job, openb_task(pods, row, name=name, job=name)))
        return out
    cpu, memory = pods.cpu_milli.tolist(), pods.memory_mib.tolist()
    num_gpu, milli, spec = pods.num_gpu.tolist(), pods.gpu_milli.tolist(), pods.spec_idx.tolist()
    # Pods of one shape share their (immutable) request records.
    requests: dict[tuple[int, int], Resources] = {}
    gpus: dict[tuple[int, int, int], GpuRequest] = {}
    for k, row in enumerate(order.tolist(), start=1):
        name = f"{k:06d}-{names[row]}"
        job = trusted(Job, name=name, queue=DEFAULT_QUEUE, min_available=1, creation=k)
        gpu = None
        if num_gpu[row]:
            key = (num_gpu[row], milli[row], spec[row])
            gpu = gpus.get(key)
            if gpu is None:
                models = pods.spec_models(key[2])
                gpu = gpus[key] = trusted(GpuRequest, count=key[0], milli=key[1], models=models)
        amounts = (cpu[row], memory[row])
        request = requests.get(amounts)
        if request is None:
            request = requests[amounts] = Resources({CPU: amounts[0], MEMORY: amounts[1] * MIB})
        task = trusted(Task, name=name, job=name, request=request, gpu_request=gpu)
        out.append((job, task))
    return out


def fgd_trace(nodes: NodeTable, pods: PodTable, order: npt.NDArray[np.int64]) -> Trace:
    """Pods ``order[k]`` arrive at ``k + 1`` s as one-task jobs that never finish."""
    jobs = tuple(
        TraceJob(job=job, tasks=(task,), arrival=float(job.creation))
        for job, task in _arrivals(pods, order)
    )
    return Trace(nodes=openb_nodes(nodes), queues=(Queue(name=DEFAULT_QUEUE),), jobs=jobs)


def fgd_snapshot(nodes: NodeTable, pods: PodTable, order: npt.NDArray[np.int64]) -> Snapshot:
    """The empty cluster with every pod of ``order`` pending as the one-task job of its
    arrival rank (the jobs of :func:`fgd_trace`, all arrived)."""
    arrivals = _arrivals(pods, order)
    return Snapshot(
        nodes=openb_nodes(nodes),
        queues=(Queue(name=DEFAULT_QUEUE),),
        jobs=tuple(job for job, _ in arrivals),
        tasks=tuple(task for _, task in arrivals),
    )


def fgd_config(
    policy: str, *, seed: int = 0, typical: TypicalPods | None = None, models: Sequence[str] = ()
) -> Config:
    """``allocate`` with ``predicates`` and the policy's plugin alone (weight 1).

    ``fgd`` gets ``typical`` (columns ``models``) as its ``typical-pods`` argument, ``random``
    gets ``seed``.
    """
    if policy not in POLICIES:
        raise ConfigError(
            f"unknown policy; expected one of {', '.join(POLICIES)}", kind="policy", name=policy
        )
    arguments: dict[str, object] = {}
    if policy == "random":
        arguments["seed"] = seed
    if policy == "fgd" and typical is not None:
        arguments["typical-pods"] = typical_pods_argument(typical, models)
    return Config.from_dict(
        {
            "actions": ["allocate"],
            "tiers": [[{"name": "predicates"}, {"name": policy, "arguments": arguments}]],
        }
    )


def _as_run(
    result: ReplayResult,
    order: npt.NDArray[np.int64],
    *,
    workload: str,
    policy: str,
    tune: float,
    seed: int,
) -> RunResult:
    return RunResult(
        workload=workload,
        policy=policy,
        tune=tune,
        seed=seed,
        total_gpus=result.total_gpu // 1000,
        n_pods=int(order.size),
        failed=int((result.job_state == JobState.DROPPED).sum()),
        arrived=result.arrived_gpu.copy(),
        used=result.gpu_alloc.copy(),
        frag=result.frag.copy(),
        idle=result.idle.copy(),
        placement=result.task_node.copy(),
        order=order,
        max_gpu_used=result.max_device_used,
        cpu_overcommit=False,
    )


def fgd_records(
    nodes: NodeTable,
    pods: PodTable,
    order: npt.NDArray[np.int64],
    placement: npt.NDArray[np.int64],
    devices: npt.NDArray[np.int64],
    *,
    workload: str,
    policy: str,
    tune: float,
    seed: int,
) -> RunResult:
    """The protocol's records (:class:`~gangsched.sim.fgd.RunResult`) of pods ``order``
    placed, in that order, on node rows ``placement`` (-1: dropped) and devices ``devices``
    (bit ``i``: device ``i``), recorded as the fast path records them: the fragment of every
    node over the workload's typical pods, recomputed for the node each pod lands on (in one
    batch: a node's fragment is computed on its own row), summed after every pod."""
    n, k = len(nodes), int(order.size)
    typical = workload_typical(pods, nodes)
    width = max(nodes.max_gpus, 1)
    cpu = np.asarray(pods.cpu_milli, dtype=np.int64)[order]
    mem = np.asarray(pods.memory_mib, dtype=np.int64)[order]
    share = np.asarray(pods.gpu_milli, dtype=np.int64)[order]
    take = np.asarray(pods.num_gpu, dtype=np.int64)[order] * share
    free_cpu = np.array(nodes.cpu_milli, dtype=np.int64)
    free_mem = np.array(nodes.memory_mib, dtype=np.int64)
    model_idx = np.array(nodes.model_idx, dtype=np.int64)
    real = np.arange(width)[None, :] < np.asarray(nodes.gpu_count, dtype=np.int64)[:, None]
    cap = np.where(real, MILLI, 0).astype(np.int64)
    gpu_free = cap.copy()
    terms = fragment_terms(gpu_free, typical)
    frag = node_fragment_from_terms(free_cpu, model_idx, terms, typical)
    idle = terms.idle.copy()
    placed = np.flatnonzero(placement >= 0)
    rows = placement[placed]
    # The state of each pod's node right after it lands, pod by pod (in integers, as lists).
    cpu_left, mem_left, dev_left = free_cpu.tolist(), free_mem.tolist(), gpu_free.tolist()
    cpu_of, mem_of, share_of, bits_of = cpu.tolist(), mem.tolist(), share.tolist(), devices.tolist()
    cpu_after, gpu_after = [], []
    for step, node in zip(placed.tolist(), rows.tolist(), strict=True):
        cpu_left[node] -= cpu_of[step]
        mem_left[node] -= mem_of[step]
        row = dev_left[node]
        if bits_of[step]:
            row = dev_left[node] = [
                g - share_of[step] if bits_of[step] >> d & 1 else g for d, g in enumerate(row)
            ]
        cpu_after.append(cpu_left[node])
        gpu_after.append(row)
    free_cpu = np.array(cpu_left, dtype=np.int64)
    free_mem = np.array(mem_left, dtype=np.int64)
    gpu_free = np.array(dev_left, dtype=np.int64).reshape(n, width)
    part = fragment_terms(np.array(gpu_after, dtype=np.int64).reshape(-1, width), typical)
    frag_after = node_fragment_from_terms(
        np.array(cpu_after, dtype=np.int64), model_idx[rows], part, typical
    )
    frag_rec = np.zeros(k + 1, dtype=np.float64)
    idle_rec = np.zeros(k + 1, dtype=np.int64)
    frag_rec[0] = total = float(frag.sum())
    idle_rec[0] = idle_total = int(idle.sum())
    at = np.full(k, -1, dtype=np.int64)
    at[placed] = np.arange(placed.size)
    idle_of, idle_after, node_of = idle.tolist(), part.idle.tolist(), rows.tolist()
    for step, i in enumerate(at.tolist()):
        if i >= 0:  # a dropped pod changes nothing: the sum stays
            node = node_of[i]
            frag[node] = frag_after[i]
            idle_total += idle_after[i] - idle_of[node]
            idle_of[node] = idle_after[i]
            total = float(frag.sum())
        frag_rec[step + 1] = total
        idle_rec[step + 1] = idle_total
    arrived = np.zeros(k + 1, dtype=np.int64)
    used = np.zeros(k + 1, dtype=np.int64)
    arrived[1:] = np.cumsum(take)
    used[1:] = np.cumsum(np.where(placement >= 0, take, 0))
    return RunResult(
        workload=workload,
        policy=policy,
        tune=tune,
        seed=seed,
        total_gpus=nodes.total_gpus,
        n_pods=k,
        failed=int(k - placed.size),
        arrived=arrived,
        used=used,
        frag=frag_rec,
        idle=idle_rec,
        placement=placement,
        order=order,
        max_gpu_used=int((cap - gpu_free).max()) if n else 0,
        cpu_overcommit=bool((free_cpu < 0).any() or (free_mem < 0).any()),
        devices=devices,
    )


def _one_cycle(
    nodes: NodeTable, pods: PodTable, order: npt.NDArray[np.int64], config: Config
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Node row (-1: left pending) and device bits of each pod after one cycle of
    :func:`fgd_snapshot`."""
    snap = fgd_snapshot(nodes, pods, order)
    out = schedule(snap, config)
    placement = np.full(order.size, -1, dtype=np.int64)
    devices = np.zeros(order.size, dtype=np.int64)
    for b in out.binds:
        step = snap.task_index[b.task]
        placement[step] = snap.node_index[b.node]
        devices[step] = sum(1 << g for g in b.gpu_indices)
    return placement, devices


def replay_fgd(
    nodes: NodeTable,
    pods: PodTable,
    policy: str,
    seed: int,
    *,
    engine: str = "schedule",
    **options: Unpack[RunOptions],
) -> RunResult:
    """One (policy, seed) run of the FGD protocol on ``engine`` (module docstring); the
    ``options`` are :func:`gangsched.sim.fgd.run_one`'s (:class:`~gangsched.sim.fgd.RunOptions`).
    """
    opts = run_options(pods, options, caller="replay_fgd")
    if engine == "fast":
        return run_one(nodes, pods, policy, seed, **options)
    if engine not in ENGINES:
        raise ConfigError(
            f"expected one of {', '.join(ENGINES)}", kind="option", name="engine", field=engine
        )
    name, tune, limit = opts.workload, opts.tune, opts.limit
    source = make_source(opts.rng, seed)
    order = tuned_order(pods, nodes.total_gpus, tune, source)
    listed = np.argsort(node_ranks(nodes, source), kind="stable")
    if limit is not None:
        order = order[:limit]
    typical, models = openb_typical(pods, nodes)
    config = fgd_config(policy, seed=seed, typical=typical, models=models)
    if engine == "replay":
        replay_options = ReplayOptions(config=config, drop_unplaced=True, typical=typical)
        result = replay(fgd_trace(node_subset(nodes, listed), pods, order), replay_options)
        run = _as_run(result, order, workload=name, policy=policy, tune=tune, seed=seed)
        placement = np.where(run.placement >= 0, listed[np.maximum(run.placement, 0)], -1)
        return dataclasses.replace(run, placement=placement)
    at, devices = _one_cycle(node_subset(nodes, listed), pods, order, config)
    placement = np.where(at >= 0, listed[np.maximum(at, 0)], -1)
    return fgd_records(
        nodes,
        pods,
        order,
        placement,
        devices,
        workload=name,
        policy=policy,
        tune=tune,
        seed=seed,
    )
