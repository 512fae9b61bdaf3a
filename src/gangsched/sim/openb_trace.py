"""The openb trace as replay records, and the FGD protocol as one mode of the replay engine.

Theory of operation
-------------------
:func:`openb_nodes` turns a :class:`~gangsched.io.openb.NodeTable` into
:class:`~gangsched.model.Node` records (CPU in millicores, memory in bytes from MiB, devices of
1000 milli-GPU that may be shared, the GPU model), and :func:`openb_task` one pod row into a
pending :class:`~gangsched.model.Task` (a GPU spec becomes the task's allowed models).

:func:`fgd_trace` is the FGD study's fill experiment written as a trace: the pods in their
shuffled and tuned arrival order (:func:`gangsched.sim.fgd.tuned_order`) arrive one per second
as one-task jobs that never finish, on the empty cluster. :func:`replay_fgd` replays it either

* ``engine="schedule"``: through the general engine, one :func:`gangsched.schedule` call per
  pod with the configuration ``allocate`` + ``predicates`` + the policy's plugin
  (:mod:`gangsched.plugins.fgd_scores`), dropping each pod the cycle did not place; or
* ``engine="fast"``: through :func:`gangsched.sim.fgd.run_one`, the dedicated one-pod-at-a-time
  loop over the same kernels.

Both return a :class:`~gangsched.sim.fgd.RunResult`, so :func:`~gangsched.sim.fgd.discrete_tables`
buckets either one per 1 % of arrived workload. For every policy but ``random`` the two engines
place every pod on the same node and record the same numbers; ``random`` draws from the
plugin's seeded hash in the general engine and from the protocol's generator in the fast one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from ..config import Config
from ..errors import ConfigError
from ..fragmentation import POLICIES, TypicalPods, typical_pods
from ..io.openb import NodeTable, PodTable
from ..model import GpuRequest, Gpus, Job, Node, Queue, Resources, Task
from ..plugins.fgd_scores import typical_pods_argument
from ..units import CPU, MEMORY
from .fgd import RunResult, make_source, node_ranks, run_one, tuned_order
from .replay import JobState, ReplayOptions, ReplayResult, Trace, TraceJob, replay

__all__ = [
    "MIB",
    "fgd_config",
    "fgd_trace",
    "node_subset",
    "openb_nodes",
    "openb_task",
    "openb_typical",
    "replay_fgd",
]

MIB = 1 << 20
DEFAULT_QUEUE = "default"


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
    present = sorted({nodes.model_of(i) for i in range(len(nodes)) if nodes.gpu_count[i] > 0})
    columns = [nodes.models.index(m) for m in present]
    full = typical_pods(
        np.asarray(pods.cpu_milli),
        np.asarray(pods.num_gpu),
        np.asarray(pods.gpu_milli),
        np.asarray(pods.spec_idx),
        pods.spec_allowed(nodes.models),
    )
    typical = TypicalPods(
        cpu_milli=full.cpu_milli,
        num_gpu=full.num_gpu,
        gpu_milli=full.gpu_milli,
        allowed=np.ascontiguousarray(full.allowed[:, columns]),
        prob=full.prob,
    )
    return typical, tuple(present)


def fgd_trace(nodes: NodeTable, pods: PodTable, order: npt.NDArray[np.int64]) -> Trace:
    """Pods ``order[k]`` arrive at ``k + 1`` s as one-task jobs that never finish."""
    jobs: list[TraceJob] = []
    for k, row in enumerate(order.tolist(), start=1):
        name = f"{k:06d}-{pods.names[row]}"
        jobs.append(
            TraceJob(
                job=Job(name=name, queue=DEFAULT_QUEUE, min_available=1, creation=k),
                tasks=(openb_task(pods, row, name=name, job=name),),
                arrival=float(k),
            )
        )
    return Trace(nodes=openb_nodes(nodes), queues=(Queue(name=DEFAULT_QUEUE),), jobs=tuple(jobs))


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


def replay_fgd(
    nodes: NodeTable,
    pods: PodTable,
    policy: str,
    seed: int,
    *,
    tune: float = 1.3,
    rng: str = "go",
    limit: int | None = None,
    engine: str = "schedule",
    workload: str | None = None,
) -> RunResult:
    """One (policy, seed) run of the FGD protocol through the replay engine (module docstring).

    ``limit`` keeps the first pods of the arrival order.
    """
    name = workload if workload is not None else Path(pods.source).stem
    if engine == "fast":
        return run_one(nodes, pods, policy, seed, tune=tune, rng=rng, limit=limit, workload=name)
    if engine != "schedule":
        raise ConfigError("expected 'schedule' or 'fast'", kind="option", name="engine")
    source = make_source(rng, seed)
    order = tuned_order(pods, nodes.total_gpus, tune, source)
    # The reference's tie rule (equal scores go to the node renamed first, ``node_ranks``):
    # the cluster is listed in that order, so the scheduler's own rule (lower node index)
    # breaks ties the same way; placements are mapped back to the table's rows.
    listed = np.argsort(node_ranks(nodes, source), kind="stable")
    if limit is not None:
        order = order[:limit]
    typical, models = openb_typical(pods, nodes)
    options = ReplayOptions(
        config=fgd_config(policy, seed=seed, typical=typical, models=models),
        drop_unplaced=True,
        typical=typical,
    )
    result = replay(fgd_trace(node_subset(nodes, listed), pods, order), options)
    run = _as_run(result, order, workload=name, policy=policy, tune=tune, seed=seed)
    placement = np.where(run.placement >= 0, listed[np.maximum(run.placement, 0)], -1)
    return dataclasses.replace(run, placement=placement)
