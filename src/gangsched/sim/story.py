"""Pod by pod against gangs and queues: one job trace replayed under three schedulers.

The same arrivals (a :class:`~gangsched.sim.jobtrace.JobTable`) on the same cluster go through
:func:`gangsched.sim.replay.replay` three times, each cycle a call to
:func:`gangsched.schedule` with one of :data:`SCHEDULERS`:

``kube-default``
    Kubernetes' default scheduler as a gangsched configuration: actions ``allocate,
    gangpreempt``;
    plugins ``priority`` then ``predicates, nodeorder`` (kube's LeastAllocated and
    BalancedAllocation scores, weight 1 each). One queue for everyone, jobs in priority then
    arrival order, no gang plugin: a job's pods are bound one by one as they fit, and a job
    whose pods are not all bound holds what it got. ``gangpreempt`` with ``priority``: a job
    with pods still pending evicts pods of strictly lower-priority jobs, with no gang to
    protect (kube's pod-priority preemption; Volcano's ``preempt`` would only take pods above
    a job's minimum).
``volcano``
    Volcano's default configuration (:meth:`gangsched.Config.default`: ``enqueue, allocate,
    backfill``; ``priority, gang, conformance`` then ``overcommit, drf, predicates,
    proportion, nodeorder``) with one queue per tenant, weighted.
``gangsched``
    Gangs with a soft topology (one node, else one rack, else anywhere), fair share with
    whole-gang preemption and reclaim: ``enqueue, allocate, gangpreempt, reclaim, backfill``
    (a high-priority gang may evict a lower-priority gang whole, which Volcano's ``preempt``
    never does; ``reclaim`` takes back what a queue borrowed beyond its share, a gang's
    surplus only); ``priority,
    gang, conformance`` then ``drf, predicates, capacity, network-topology-aware, binpack``
    (binpack and the hypernode scores weigh GPUs, so jobs fill nodes and racks and leave whole
    ones free for the next gang).

Every job of ``G`` GPUs is ``ceil(G / pod_gpus)`` pods (:func:`~gangsched.sim.jobtrace.pod_sizes`)
and runs for its trace duration once *all* its pods run (the replay's job start:
``min_available`` is the number of pods in every configuration; only the gang plugin makes the
scheduler place them together). Under ``kube-default`` the pods bound before the last one hold
their GPUs idle.

:func:`story_metrics` reads the replay's allocation log and gives, per scheduler, the figures
of :data:`METRIC_KEYS` (see :func:`story_metrics` for each definition).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from gangsched.config import Config, PluginOption, Tier
from gangsched.errors import ConfigError
from gangsched.model import (
    GpuRequest,
    Gpus,
    HyperNode,
    Job,
    NetworkTopology,
    Node,
    Queue,
    Resources,
    Task,
    TopologyMode,
)
from gangsched.sim.jobtrace import ClusterSpec, JobTable, pod_sizes
from gangsched.sim.replay import (
    ReplayOptions,
    ReplayProgress,
    ReplayResult,
    Trace,
    TraceJob,
    replay,
)
from gangsched.sim.replay.result import fair_share
from gangsched.units import CPU, MEMORY

__all__ = [
    "METRIC_KEYS",
    "SCHEDULERS",
    "StoryRun",
    "StorySettings",
    "build_story_trace",
    "format_table",
    "run_story",
    "scheduler_config",
    "story_metrics",
]

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]

SCHEDULERS = ("kube-default", "volcano", "gangsched")
METRIC_KEYS = (
    "jobs",
    "gpu_hours",
    "gpu_hours_held_idle",
    "partial_gangs_peak",
    "deadlock_hours",
    "wait_p50_s",
    "wait_p95_s",
    "jct_p50_s",
    "jct_p95_s",
    "utilization",
    "queue_share",
    "jain",
    "high_priority_wait_p95_s",
    "gang_in_one_node_pct",
    "gang_in_one_rack_pct",
    "makespan_s",
    "runtime_s",
)
GIB = 1 << 30
GPU = "nvidia.com/gpu"
#: Requests of a pod per GPU: CPU cores and memory (nodes have 8 cores and 64 GiB per GPU, so
#: GPUs are what runs out).
CPU_PER_GPU = 4
MEMORY_PER_GPU_GIB = 32
HIGH_PRIORITY = 100
#: Log kinds of ReplayResult.log_kind.
_ARRIVE, _HOLD, _FREE, _START, _RESTART, _END = range(6)


@dataclass(frozen=True, slots=True, kw_only=True)
class StorySettings:
    """How jobs become gangs and queues.

    ``pod_gpus``: GPUs per pod (``None``: a whole node's GPUs). ``queue_weights``:
    ``"proportional"`` (each queue's weight is its share of the trace's requested GPU-hours),
    ``"equal"``, or a mapping queue → weight. ``high_priority_pct``: the share of jobs, drawn
    with ``seed``, given a high priority when the trace has no priority column.
    ``period``: seconds between scheduling cycles (0: at every event)."""

    pod_gpus: int | None = 1
    queue_weights: str | Mapping[str, float] = "proportional"
    high_priority_pct: float = 0.0
    seed: int = 0
    period: float = 60.0

    def __post_init__(self) -> None:
        if self.pod_gpus is not None and self.pod_gpus < 1:
            raise ConfigError(
                f"must be >= 1, got {self.pod_gpus}", kind="option", name="--pod-gpus"
            )
        if not 0 <= self.high_priority_pct <= 100:
            raise ConfigError(
                f"must be in 0..100, got {self.high_priority_pct:g}",
                kind="option",
                name="--high-priority",
            )
        if isinstance(self.queue_weights, str) and self.queue_weights not in (
            "proportional",
            "equal",
        ):
            raise ConfigError(
                f"expected proportional, equal or a file, got {self.queue_weights!r}",
                kind="option",
                name="--queue-weights",
            )


@dataclass(frozen=True, slots=True, eq=False)
class StoryTrace:
    """The replayable trace of one scheduler and what the metrics need to read it."""

    trace: Trace
    job_tenant: I64  # (J,) tenant index of each replayed job
    tenants: tuple[str, ...]
    tenant_weight: F64  # (Q,)
    job_high: npt.NDArray[np.bool_]  # (J,) in the high-priority class
    job_pods: I64  # (J,)
    node_rack: I64  # (N,) rack index (a node in no rack is a rack of its own)
    skipped: int  # jobs left out: bigger than the cluster or a pod bigger than a node


def _weights(table: JobTable, tenants: Sequence[str], spec: str | Mapping[str, float]) -> F64:
    if isinstance(spec, str):
        if spec == "equal":
            return np.ones(len(tenants))
        hours = {t: 0.0 for t in tenants}
        for q, g, d in zip(table.queue, table.gpus.tolist(), table.duration.tolist(), strict=True):
            if q in hours:
                hours[q] += g * d / 3600.0
        total = sum(hours.values()) or 1.0
        return np.array([max(hours[t] / total, 1e-3) for t in tenants])
    missing = [t for t in tenants if t not in spec]
    if missing:
        raise ConfigError(
            f"no weight for queue {missing[0]!r} ({len(missing)} queues without one)",
            kind="option",
            name="--queue-weights",
        )
    return np.array([float(spec[t]) for t in tenants])


def _quotas(weight: F64, gpus: int) -> list[int]:
    """Whole GPUs per queue in proportion to ``weight``, summing to ``gpus`` (largest
    remainders first, then queue order)."""
    exact = gpus * weight / weight.sum()
    base = np.floor(exact).astype(np.int64)
    rest = gpus - int(base.sum())
    order = np.argsort(-(exact - base), kind="stable")[:rest]
    base[order] += 1
    return [int(x) for x in base]


def _high_class(table: JobTable, pct: float, seed: int) -> npt.NDArray[np.bool_]:
    prio = table.priority
    if prio.size and prio.max() > prio.min():
        out: npt.NDArray[np.bool_] = prio == prio.max()
        return out
    if pct <= 0:
        return np.zeros(len(table), dtype=np.bool_)
    rng = np.random.default_rng(seed)
    drawn: npt.NDArray[np.bool_] = rng.random(len(table)) < pct / 100.0
    return drawn


def build_story_trace(
    table: JobTable, cluster: ClusterSpec, scheduler: str, settings: StorySettings
) -> StoryTrace:
    """The trace ``scheduler`` replays (module docstring): ``kube-default`` gets one queue and
    no topology, ``volcano`` the tenants' queues, ``gangsched`` those and a soft topology on
    every gang of more than one pod."""
    if scheduler not in SCHEDULERS:
        raise ConfigError(
            f"unknown scheduler (known: {', '.join(SCHEDULERS)})", kind="scheduler", name=scheduler
        )
    per_node = cluster.gpus_per_node
    pod_gpus = settings.pod_gpus or per_node
    if pod_gpus > per_node:
        raise ConfigError(
            f"a pod of {pod_gpus} GPUs fits no node (at most {per_node})",
            kind="option",
            name="--pod-gpus",
        )
    nodes = tuple(
        Node(
            name=name,
            allocatable=Resources(
                {CPU: cpus * 1000, MEMORY: max(gpus, 1) * cluster.memory_per_gpu_gib * GIB}
            ),
            gpus=Gpus(count=gpus) if gpus else None,
        )
        for name, gpus, cpus in zip(cluster.names, cluster.gpus, cluster.cpus, strict=True)
    )
    rack_names: dict[str, int] = {}
    node_rack = np.zeros(len(nodes), dtype=np.int64)
    members: dict[str, list[str]] = {}
    for i, (name, rack) in enumerate(zip(cluster.names, cluster.racks, strict=True)):
        key = rack or f"<{name}>"
        node_rack[i] = rack_names.setdefault(key, len(rack_names))
        if rack:
            members.setdefault(rack, []).append(name)
    hypernodes = tuple(HyperNode(name=r, tier=1, members=tuple(m)) for r, m in members.items())

    tenants = tuple(dict.fromkeys(table.queue))
    weight = _weights(table, tenants, settings.queue_weights)
    tenant_index = {t: i for i, t in enumerate(tenants)}
    high = _high_class(table, settings.high_priority_pct, settings.seed)
    one_queue = scheduler == "kube-default"
    if one_queue:
        queues: tuple[Queue, ...] = (Queue(name="default"),)
    else:
        # Integer weights in proportion (proportion reads the ratios).
        scaled = np.maximum(np.rint(1000.0 * weight / weight.max()), 1).astype(np.int64)
        # gangsched's capacity plugin reads explicit quotas: each queue deserves its weight's
        # share of the GPUs (and borrows what the others leave idle, until reclaimed).
        quota = _quotas(weight, cluster.total_gpus) if scheduler == "gangsched" else None
        queues = tuple(
            Queue(
                name=t,
                weight=int(w),
                deserved=None if quota is None else Resources({GPU: quota[i] * 1000}),
            )
            for i, (t, w) in enumerate(zip(tenants, scaled.tolist(), strict=True))
        )
    soft = NetworkTopology(mode=TopologyMode.SOFT)
    jobs: list[TraceJob] = []
    job_tenant: list[int] = []
    job_high: list[bool] = []
    job_pods: list[int] = []
    skipped = 0
    total = cluster.total_gpus
    for k in range(len(table)):
        gpus = int(table.gpus[k])
        if table.pods[k] > 0:
            sizes = [int(table.gpus_per_pod[k])] * int(table.pods[k])
        else:
            sizes = pod_sizes(gpus, pod_gpus)
        if gpus > total or max(sizes) > per_node:
            skipped += 1
            continue
        name = f"job-{int(table.row[k]):06d}"
        tasks = tuple(
            Task(
                name=f"{name}-{i}",
                job=name,
                request=Resources(
                    {CPU: CPU_PER_GPU * 1000 * g, MEMORY: MEMORY_PER_GPU_GIB * GIB * g}
                ),
                gpu_request=GpuRequest(count=g),
            )
            for i, g in enumerate(sizes)
        )
        priority = HIGH_PRIORITY if high[k] else 0
        job = Job(
            name=name,
            queue="default" if one_queue else table.queue[k],
            min_available=len(tasks),
            priority=priority,
            network_topology=soft if scheduler == "gangsched" and len(tasks) > 1 else None,
        )
        jobs.append(
            TraceJob(
                job=job,
                tasks=tasks,
                arrival=float(table.arrival[k]),
                duration=float(table.duration[k]),
            )
        )
        job_tenant.append(tenant_index[table.queue[k]])
        job_high.append(bool(high[k]))
        job_pods.append(len(tasks))
    trace = Trace(nodes=nodes, queues=queues, jobs=tuple(jobs), hypernodes=hypernodes)
    return StoryTrace(
        trace=trace,
        job_tenant=np.asarray(job_tenant, dtype=np.int64),
        tenants=tenants,
        tenant_weight=weight,
        job_high=np.asarray(job_high, dtype=np.bool_),
        job_pods=np.asarray(job_pods, dtype=np.int64),
        node_rack=node_rack,
        skipped=skipped,
    )


def _tier(*plugins: PluginOption | str) -> Tier:
    return Tier(
        plugins=tuple(p if isinstance(p, PluginOption) else PluginOption(name=p) for p in plugins)
    )


def scheduler_config(scheduler: str, *, priorities: bool = True) -> Config:
    """The configuration of ``scheduler`` (module docstring). ``priorities=False`` (every job
    of the trace has the same priority) leaves out ``gangpreempt``, which could evict nothing:
    its victims must have a strictly lower priority than the job they make room for."""
    preempt = ("gangpreempt",) if priorities else ()
    if scheduler == "kube-default":
        return Config(
            actions=("allocate", *preempt),
            tiers=(_tier("priority"), _tier("predicates", "nodeorder")),
        )
    if scheduler == "volcano":
        return Config.default()
    if scheduler == "gangsched":
        gpu = GPU
        topology = PluginOption(
            name="network-topology-aware",
            arguments={
                "hypernode.binpack.resources": gpu,
                f"hypernode.binpack.resources.{gpu}": 10,
            },
        )
        binpack = PluginOption(
            name="binpack",
            arguments={"binpack.resources": gpu, f"binpack.resources.{gpu}": 10},
        )
        return Config(
            actions=("enqueue", "allocate", *preempt, "reclaim", "backfill"),
            tiers=(
                _tier("priority", "gang", "conformance"),
                _tier("drf", "predicates", "capacity", topology, binpack),
            ),
        )
    raise ConfigError(
        f"unknown scheduler (known: {', '.join(SCHEDULERS)})", kind="scheduler", name=scheduler
    )


# ------------------------------------------------------------------------------------ metrics


@dataclass(frozen=True, slots=True, eq=False)
class Series:
    """Step series for the plots: from ``time[k]`` to ``time[k + 1]`` the values of row k."""

    time: F64
    busy: F64  # GPUs of started jobs
    held_idle: F64  # GPUs held by pods of jobs not started
    tenant_used: F64  # (T, Q) GPUs of started jobs per tenant
    tenant_fair: F64  # (T, Q) deserved GPUs for the demand of the moment


def _pct(values: F64, q: float) -> float | None:
    return float(np.percentile(values, q)) if values.size else None


def story_metrics(
    result: ReplayResult, st: StoryTrace, runtime_s: float
) -> tuple[dict[str, object], Series]:
    """The figures of one replay (keys :data:`METRIC_KEYS`) and its series.

    * ``gpu_hours``: GPU-hours the jobs ran (GPUs x trace duration).
    * ``gpu_hours_held_idle``: GPU-hours held by pods of jobs that had not started (the job
      starts when all its pods run).
    * ``partial_gangs_peak``: most jobs at one time holding some but not all of their pods.
    * ``deadlock_hours``: time during which partly placed jobs hold GPUs and no waiting job
      could start on the free GPUs (each needs more GPUs than are free).
    * ``wait_*``: first start minus arrival; ``jct_*``: end minus arrival. A job that never
      started (or never ended) counts with the end of the replay instead: a lower bound.
    * ``utilization``: GPU-time of started jobs over the GPU-time offered, from the first
      arrival to the end of the replay.
    * ``queue_share``: per tenant, over the time it had demand (jobs arrived and not ended),
      the share of the cluster its started jobs used and the share it deserved (weighted
      max-min fair share of the GPUs for the demands of the moment).
    * ``jain``: Jain's index of used / deserved over the tenants with demand (1: in proportion).
    * ``high_priority_wait_p95_s``: ``wait_p95_s`` of the high-priority class (None without one).
    * ``gang_in_one_node_pct`` / ``gang_in_one_rack_pct``: jobs of more than one pod whose pods
      ran on one node / in one rack when they started (first start).
    * ``makespan_s``: the last job's end (None while some job never ends).
    """
    jobs = st.trace.jobs
    n_jobs = len(jobs)
    task_job = np.repeat(np.arange(n_jobs), [len(tj.tasks) for tj in jobs])
    job_gpu = (
        np.array(
            [sum(t.gpu_request.count for t in tj.tasks if t.gpu_request) for tj in jobs], np.int64
        )
        * 1000
    )
    q = len(st.tenants)
    tenant = st.job_tenant
    total = float(result.total_gpu)
    assert result.log_time is not None and result.log_kind is not None
    assert result.log_who is not None and result.log_node is not None
    assert result.log_milli is not None
    lt = result.log_time.tolist()
    lk = result.log_kind.tolist()
    lw = result.log_who.tolist()
    ln = result.log_node.tolist()
    lm = result.log_milli.tolist()
    end_time = float(result.time[-1]) if result.time.size else 0.0
    if lt:
        end_time = max(end_time, lt[-1])

    held = np.zeros(n_jobs, np.int64)
    started = np.zeros(n_jobs, dtype=np.bool_)
    live = np.zeros(n_jobs, dtype=np.bool_)
    first_started = np.zeros(n_jobs, dtype=np.bool_)
    task_node: dict[int, int] = {}
    job_open: dict[int, set[int]] = {}
    used = idle = 0
    partial = 0
    tenant_used = np.zeros(q, np.int64)
    tenant_demand = np.zeros(q, np.int64)
    in_node = in_rack = multi = 0
    peak = 0
    idle_acc = busy_acc = deadlock_acc = 0.0
    used_acc = np.zeros(q)
    fair_acc = np.zeros(q)
    cap_acc = np.zeros(q)
    weight = st.tenant_weight
    s_time: list[float] = []
    s_busy: list[float] = []
    s_idle: list[float] = []
    s_used: list[F64] = []
    s_fair: list[F64] = []
    fair_now = np.zeros(q)
    first_arrival = float(result.job_arrival.min()) if n_jobs else 0.0

    def snapshot_state(t: float) -> None:
        nonlocal fair_now
        fair_now = fair_share(tenant_demand.astype(np.float64), weight, total)
        s_time.append(t)
        s_busy.append(used / 1000.0)
        s_idle.append(idle / 1000.0)
        s_used.append(tenant_used / 1000.0)
        s_fair.append(fair_now / 1000.0)

    def deadlocked() -> bool:
        if partial == 0:
            return False
        free = total - used - idle
        waiting = live & ~started
        need = job_gpu[waiting] - held[waiting]
        return bool(need.size) and int(need.min()) > free

    snapshot_state(0.0)
    prev = 0.0
    dead = False
    i = 0
    n = len(lt)
    while i < n:
        t = lt[i]
        dt = t - prev
        if dt > 0:
            idle_acc += dt * idle
            busy_acc += dt * used
            if dead:
                deadlock_acc += dt
            has = tenant_demand > 0
            used_acc[has] += dt * tenant_used[has]
            fair_acc[has] += dt * fair_now[has]
            cap_acc[has] += dt * total
        while i < n and lt[i] == t:
            kind, who = lk[i], lw[i]
            if kind == _ARRIVE:
                live[who] = True
                tenant_demand[tenant[who]] += job_gpu[who]
            elif kind == _HOLD:
                j = int(task_job[who])
                milli = lm[i]
                if held[j] == 0 and not started[j]:
                    partial += 1
                held[j] += milli
                task_node[who] = ln[i]
                job_open.setdefault(j, set()).add(who)
                if started[j]:
                    used += milli
                    tenant_used[tenant[j]] += milli
                else:
                    idle += milli
            elif kind == _FREE:
                j = int(task_job[who])
                milli = lm[i]
                held[j] -= milli
                task_node.pop(who, None)
                job_open.get(j, set()).discard(who)
                if started[j]:
                    used -= milli
                    tenant_used[tenant[j]] -= milli
                else:
                    idle -= milli
                    if held[j] == 0:
                        partial -= 1
            elif kind == _START:
                j = who
                if held[j] > 0:
                    partial -= 1
                started[j] = True
                idle -= int(held[j])
                used += int(held[j])
                tenant_used[tenant[j]] += held[j]
                if not first_started[j]:
                    first_started[j] = True
                    if st.job_pods[j] > 1:
                        nodes = {task_node[x] for x in job_open.get(j, ())}
                        multi += 1
                        in_node += len(nodes) == 1
                        in_rack += len({int(st.node_rack[x]) for x in nodes}) == 1
            elif kind in (_RESTART, _END):
                j = who
                if started[j]:
                    started[j] = False
                    used -= int(held[j])
                    idle += int(held[j])
                    tenant_used[tenant[j]] -= held[j]
                    if held[j] > 0:
                        partial += 1
                if kind == _END and live[j]:
                    live[j] = False
                    tenant_demand[tenant[j]] -= job_gpu[j]
            i += 1
        peak = max(peak, partial)
        dead = deadlocked()
        snapshot_state(t)
        prev = t

    arrival = result.job_arrival
    start = np.where(np.isnan(result.job_start), end_time, result.job_start)
    wait = start - arrival
    done_at = np.where(np.isnan(result.job_end), end_time, result.job_end)
    jct = done_at - arrival
    high = st.job_high
    span = max(end_time - first_arrival, 1e-9)
    unfinished = bool(np.isnan(result.job_end).any())
    share: dict[str, dict[str, float]] = {}
    ratios: list[float] = []
    for k, name in enumerate(st.tenants):
        if cap_acc[k] <= 0:
            continue
        u, d = used_acc[k] / cap_acc[k], fair_acc[k] / cap_acc[k]
        share[name] = {"used": round(float(u), 4), "deserved": round(float(d), 4)}
        if d > 0:
            ratios.append(u / d)
    r = np.asarray(ratios)
    jain = float(r.sum() ** 2 / (r.size * (r**2).sum())) if r.size and (r**2).sum() > 0 else None
    requested = (
        float(sum((job_gpu[j] / 1000.0) * float(jobs[j].duration or 0.0) for j in range(n_jobs)))
        / 3600.0
    )
    metrics: dict[str, object] = {
        "jobs": n_jobs,
        "gpu_hours": round(requested, 1),
        "gpu_hours_held_idle": round(idle_acc / 1000.0 / 3600.0, 1),
        "partial_gangs_peak": int(peak),
        "deadlock_hours": round(deadlock_acc / 3600.0, 2),
        "wait_p50_s": _round(_pct(wait, 50)),
        "wait_p95_s": _round(_pct(wait, 95)),
        "jct_p50_s": _round(_pct(jct, 50)),
        "jct_p95_s": _round(_pct(jct, 95)),
        "utilization": round(busy_acc / (total * span), 4) if total > 0 else 0.0,
        "queue_share": share,
        "jain": None if jain is None else round(jain, 4),
        "high_priority_wait_p95_s": _round(_pct(wait[high], 95)) if high.any() else None,
        "gang_in_one_node_pct": round(100.0 * in_node / multi, 1) if multi else None,
        "gang_in_one_rack_pct": round(100.0 * in_rack / multi, 1) if multi else None,
        "makespan_s": None
        if unfinished
        else _round(float(np.nanmax(result.job_end)) if n_jobs else 0.0),
        "runtime_s": round(runtime_s, 1),
    }
    series = Series(
        time=np.asarray(s_time),
        busy=np.asarray(s_busy),
        held_idle=np.asarray(s_idle),
        tenant_used=np.asarray(s_used).reshape(len(s_time), q),
        tenant_fair=np.asarray(s_fair).reshape(len(s_time), q),
    )
    return metrics, series


def _round(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, 1)


# ------------------------------------------------------------------------------------ the runs


@dataclass(frozen=True, slots=True, eq=False)
class StoryRun:
    """One scheduler's replay and its figures."""

    scheduler: str
    metrics: dict[str, object]
    series: Series
    tenants: tuple[str, ...]
    unfinished: int  # jobs that never ended (stuck at the end of the replay)
    restarts: int  # evictions that sent a job back to the queue
    skipped: int
    total_gpus: int
    extra: dict[str, object] = field(default_factory=dict)


def run_one(
    table: JobTable,
    cluster: ClusterSpec,
    scheduler: str,
    settings: StorySettings,
    progress: Callable[[ReplayProgress], None] | None = None,
) -> StoryRun:
    """Replay ``table`` on ``cluster`` under ``scheduler`` and measure it."""
    st = build_story_trace(table, cluster, scheduler, settings)
    config = scheduler_config(scheduler, priorities=bool(st.job_high.any()))
    options = ReplayOptions(config=config, period=settings.period)
    began = time.perf_counter()
    result = replay(st.trace, options, progress=progress)
    runtime = time.perf_counter() - began
    metrics, series = story_metrics(result, st, runtime)
    return StoryRun(
        scheduler=scheduler,
        metrics=metrics,
        series=series,
        tenants=st.tenants,
        unfinished=int(np.isnan(result.job_end).sum()),
        restarts=int(result.job_restarts.sum()),
        skipped=st.skipped,
        total_gpus=result.total_gpu // 1000,
    )


def run_story(
    table: JobTable,
    cluster: ClusterSpec,
    settings: StorySettings,
    schedulers: Sequence[str] = SCHEDULERS,
    *,
    workers: int = 1,
    progress: Callable[[str, ReplayProgress], None] | None = None,
) -> tuple[StoryRun, ...]:
    """Every scheduler of ``schedulers`` on the same arrivals; ``workers`` > 1 replays them
    in that many processes (the results are the same)."""
    for s in schedulers:
        if s not in SCHEDULERS:
            raise ConfigError(
                f"unknown scheduler (known: {', '.join(SCHEDULERS)})", kind="scheduler", name=s
            )
    if workers <= 1 or len(schedulers) <= 1:
        runs = []
        for s in schedulers:
            report = None if progress is None else _bound(progress, s)
            runs.append(run_one(table, cluster, s, settings, report))
        return tuple(runs)
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=min(workers, len(schedulers))) as pool:
        futures = [pool.submit(run_one, table, cluster, s, settings) for s in schedulers]
        return tuple(f.result() for f in futures)


def _bound(
    progress: Callable[[str, ReplayProgress], None], scheduler: str
) -> Callable[[ReplayProgress], None]:
    def report(p: ReplayProgress) -> None:
        progress(scheduler, p)

    return report


# ------------------------------------------------------------------------------------ the table

#: Rows of the table: (label, how to show one run, which is better: -1 lower, 1 higher, 0 none).
_LOWER, _HIGHER, _NONE = -1, 1, 0


def _hours(seconds: object) -> str:
    if not isinstance(seconds, int | float):
        return "-"
    if seconds >= 86400 * 2:
        return f"{seconds / 86400:.1f} d"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"


def _worst_queue(m: Mapping[str, object]) -> float | None:
    share = m["queue_share"]
    assert isinstance(share, dict)
    ratios = [v["used"] / v["deserved"] for v in share.values() if v["deserved"] > 0]
    return min(ratios) if ratios else None


def _value(m: Mapping[str, object], key: str) -> float | None:
    v = _worst_queue(m) if key == "worst_queue" else m[key]
    return float(v) if isinstance(v, int | float) else None


_ROWS: tuple[tuple[str, str, int], ...] = (
    ("GPU-hours held idle by half-placed gangs", "gpu_hours_held_idle", _LOWER),
    ("half-placed gangs at once (peak)", "partial_gangs_peak", _LOWER),
    ("hours no waiting job could start, half-placed gangs holding GPUs", "deadlock_hours", _LOWER),
    ("wait p50", "wait_p50_s", _LOWER),
    ("wait p95", "wait_p95_s", _LOWER),
    ("job completion time p50", "jct_p50_s", _LOWER),
    ("job completion time p95", "jct_p95_s", _LOWER),
    ("GPU utilization (GPU-time of running jobs / offered)", "utilization", _HIGHER),
    ("fair share: Jain index of used/deserved over queues", "jain", _HIGHER),
    ("fair share: worst queue's used/deserved", "worst_queue", _HIGHER),
    ("high-priority jobs: wait p95", "high_priority_wait_p95_s", _LOWER),
    ("multi-pod gangs inside one node", "gang_in_one_node_pct", _HIGHER),
    ("multi-pod gangs inside one rack", "gang_in_one_rack_pct", _HIGHER),
    ("makespan (last job's end)", "makespan_s", _LOWER),
    ("replay runtime", "runtime_s", _NONE),
)


def _show(key: str, value: float | None, run: StoryRun) -> str:
    if value is None:
        if key == "makespan_s":
            return f"never ({run.unfinished} stuck)"
        if key == "high_priority_wait_p95_s":
            return "- (no class)"
        return "-"
    if key.endswith("_s") and key != "runtime_s":
        return _hours(value)
    if key == "runtime_s":
        return f"{value:.0f} s"
    if key == "utilization":
        return f"{100 * value:.1f} %"
    if key.endswith("_pct"):
        return f"{value:.1f} %"
    if key in ("jain", "worst_queue"):
        return f"{value:.3f}"
    if key == "partial_gangs_peak":
        return f"{value:.0f}"
    return f"{value:,.1f}"


def format_table(runs: Sequence[StoryRun], header: str = "") -> str:
    """The comparison as text: one row per problem, one column per scheduler; ``*`` marks the
    best figure of a row, and a last line says where pod-by-pod scheduling does best."""
    names = [r.scheduler for r in runs]
    first = runs[0].metrics
    lines: list[list[str]] = [
        ["problem", *names],
        [
            "jobs (GPU-hours requested)",
            *(f"{r.metrics['jobs']} ({r.metrics['gpu_hours']:,.0f})" for r in runs),
        ],
    ]
    kube_wins: list[str] = []
    for label, key, better in _ROWS:
        values = [_value(r.metrics, key) for r in runs]
        cells = [_show(key, v, r) for v, r in zip(values, runs, strict=True)]
        known = [v for v in values if v is not None]
        if better != _NONE and len(known) == len(values) and len(set(known)) > 1:
            best = min(known) if better == _LOWER else max(known)
            cells = [c + (" *" if v == best else "") for c, v in zip(cells, values, strict=True)]
            if "kube-default" in names and values[names.index("kube-default")] == best:
                kube_wins.append(label)
        lines.append([label, *cells])
    widths = [max(len(row[k]) for row in lines) for k in range(len(lines[0]))]
    out = [header] if header else []
    for n, row in enumerate(lines):
        out.append(
            "  ".join(
                cell.ljust(widths[k]) if k == 0 else cell.rjust(widths[k])
                for k, cell in enumerate(row)
            ).rstrip()
        )
        if n == 0:
            out.append("-" * len(out[-1]))
    out.append("* the best of the row.")
    if "kube-default" in names:
        out.append(
            "pod by pod does best on: " + "; ".join(kube_wins)
            if kube_wins
            else "pod by pod does best on none of these rows."
        )
    del first
    return "\n".join(out)
