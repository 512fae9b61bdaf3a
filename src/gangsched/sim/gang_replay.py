"""A *derived* gang replay: the openb pod trace with gangs and fair-share queues layered on.

No public trace with gangs, queues, arrival and run times could be shipped with gangsched, so this
replay builds one from real parts and says so (every report is labelled "derived"):

* **Arrivals and run times** are openb's: a pod that ran in the trace (it has a
  ``scheduled_time``) arrives at ``creation_time / time_scale`` and runs
  ``deletion_time - scheduled_time`` seconds (capped at ``max_duration`` when given). Pods that
  never ran in the trace are left out. Compressing arrivals (``time_scale`` > 1) turns the
  lightly loaded original (about 14 GPUs busy on average over 149 days) into a contended one.
* **Single-node gangs.** A pod asking for k >= 2 GPUs becomes a gang of k one-GPU tasks
  (CPU and memory split evenly) with ``min_available = k`` and a hard network topology of tier 1,
  where every node is its own tier-1 hypernode: all k tasks must land on one node, together.
* **Multi-node gangs** (synthetic): ``n_gangs`` jobs of ``w`` workers (``w`` drawn from
  ``gang_workers``), each worker asking for ``worker_gpus`` whole GPUs, arriving uniformly over
  the compressed span, running for a duration drawn from the trace's multi-GPU pods.
* **Queues** are the virtual clusters of SenseTime's Venus cluster on one day of the Helios data
  (vendored in ``gangsched/data/helios``): every VC with GPUs becomes a queue whose weight is its
  GPU count. Jobs are assigned to queues at random with probability proportional to the weight.

Everything random comes from ``np.random.default_rng(seed)``. :func:`run_gang_replay` replays
the trace through :func:`gangsched.sim.replay.replay` (Volcano's default configuration unless
another is given; ``policy`` swaps ``nodeorder`` for one of the FGD-study scorers) and
:func:`summarize` reports, per queue and overall: jobs, jobs done, queueing delay and job
completion time (mean, median, p95), GPU-hours, mean allocated share against the weighted
max-min fair share, and the time-weighted mean absolute deviation between the two.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from gangsched.config import Config, PluginOption, Tier
from gangsched.errors import ConfigError, SnapshotError
from gangsched.fragmentation import POLICIES
from gangsched.io.openb import NodeTable, PodTable, read_vendored_text
from gangsched.model import (
    GpuRequest,
    HyperNode,
    Job,
    NetworkTopology,
    Queue,
    Resources,
    Task,
    TopologyMode,
)
from gangsched.placement import Placer
from gangsched.plugins.fgd_scores import typical_pods_argument
from gangsched.sim.openb_trace import MIB, openb_nodes, openb_task
from gangsched.sim.replay import (
    JobState,
    ReplayOptions,
    ReplayProgress,
    ReplayResult,
    Trace,
    TraceJob,
    derive_typical,
    replay,
    trace_models,
)
from gangsched.sim.replay.result import output_dir
from gangsched.units import CPU, MEMORY

__all__ = [
    "DerivedTrace",
    "GangReplaySettings",
    "GangReport",
    "QueueSummary",
    "build_gang_trace",
    "format_summary",
    "gang_config",
    "load_vc_gpus",
    "run_gang_replay",
    "summarize",
    "write_report",
]

VC_FILE = "cluster_gpu_number.csv"
GIB = 1 << 30
F64 = npt.NDArray[np.float64]


def load_vc_gpus(path: str | Path | None = None, *, date: str | None = None) -> dict[str, int]:
    """GPUs of every virtual cluster with GPUs on ``date`` (default: the last day), in the
    file's column order. ``path`` ``None`` reads the vendored Helios table."""
    if path is None:
        text, source = read_vendored_text("helios", VC_FILE), VC_FILE
    else:
        try:
            text, source = Path(path).read_text(encoding="utf-8"), str(path)
        except OSError as exc:
            raise SnapshotError(
                f"cannot read: {exc.strerror}", kind="file", name=str(path)
            ) from None
    rows = list(csv.reader(io.StringIO(text)))
    if len(rows) < 2 or not rows[0] or rows[0][0] != "date":
        raise SnapshotError("expected a header starting with 'date'", kind="file", name=source)
    header = rows[0]
    vcs = [(i, name) for i, name in enumerate(header) if i > 0 and name != "total"]
    body = [r for r in rows[1:] if r]
    if date is None:
        row = body[-1]
    else:
        found = [r for r in body if r[0] == date]
        if not found:
            raise SnapshotError(
                f"no row for date {date!r} ({body[0][0]} .. {body[-1][0]})",
                kind="file",
                name=source,
                field="date",
            )
        row = found[0]
    out: dict[str, int] = {}
    for i, name in vcs:
        try:
            gpus = int(row[i])
        except (ValueError, IndexError):
            raise SnapshotError(
                f"expected a GPU count, got {row[i] if i < len(row) else ''!r}",
                kind="file",
                name=source,
                field=f"date {row[0]}, column {name}",
            ) from None
        if gpus > 0:
            out[name] = gpus
    if not out:
        raise SnapshotError(f"no VC has GPUs on {row[0]}", kind="file", name=source)
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class GangReplaySettings:
    """How the derived trace is built (module docstring)."""

    time_scale: float = 200.0
    max_duration: float | None = None
    n_gangs: int = 100
    gang_workers: tuple[int, ...] = (2, 4)
    worker_gpus: int = 8
    worker_cpu: int = 32_000  # millicores
    worker_memory: int = 128 * GIB  # bytes
    seed: int = 0
    limit: int | None = None  # keep the first pods by arrival
    vc_date: str | None = None

    def __post_init__(self) -> None:
        def bad(field: str, detail: str) -> ConfigError:
            return ConfigError(detail, kind="gang replay", field=field)

        if not math.isfinite(self.time_scale) or self.time_scale <= 0:
            raise bad("time_scale", f"must be > 0, got {self.time_scale}")
        if self.max_duration is not None and not self.max_duration > 0:
            raise bad("max_duration", f"must be > 0, got {self.max_duration}")
        if self.n_gangs < 0:
            raise bad("n_gangs", f"must be >= 0, got {self.n_gangs}")
        if not self.gang_workers or min(self.gang_workers) < 2:
            raise bad("gang_workers", f"need worker counts >= 2, got {self.gang_workers}")
        if not 1 <= self.worker_gpus <= 64:
            raise bad("worker_gpus", f"must be in 1..64, got {self.worker_gpus}")
        if self.limit is not None and self.limit < 1:
            raise bad("limit", f"must be >= 1, got {self.limit}")


@dataclass(frozen=True, slots=True)
class DerivedTrace:
    """The replay trace and what went into it."""

    trace: Trace
    label: str
    pod_jobs: int  # pods replayed as one-task jobs
    node_gangs: int  # multi-GPU pods replayed as single-node gangs
    multi_node_gangs: int  # synthetic gangs
    skipped: int  # pods left out (never ran in the trace)


def _split(total: int, parts: int) -> list[int]:
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def build_gang_trace(
    nodes: NodeTable,
    pods: PodTable,
    settings: GangReplaySettings | None = None,
    *,
    vc_gpus: Mapping[str, int] | None = None,
) -> DerivedTrace:
    """The derived trace (module docstring). ``vc_gpus`` overrides the Helios queue sizes."""
    s = settings if settings is not None else GangReplaySettings()
    if not pods.has_times:
        raise ConfigError(
            "the pod list has no creation/deletion/scheduled times",
            kind="file",
            name=pods.source,
            field="header",
        )
    sizes = dict(vc_gpus) if vc_gpus is not None else load_vc_gpus(date=s.vc_date)
    if not sizes or min(sizes.values()) < 1:
        raise ConfigError("every queue needs at least one GPU", kind="gang replay", field="vc_gpus")
    queue_names = list(sizes)
    weights = np.array([sizes[q] for q in queue_names], dtype=np.float64)
    queues = tuple(Queue(name=q, weight=int(sizes[q])) for q in queue_names)
    rng = np.random.default_rng(s.seed)

    ran = np.flatnonzero(np.asarray(pods.scheduled_time) >= 0)
    order = ran[np.lexsort((ran, np.asarray(pods.creation_time)[ran]))]
    if s.limit is not None:
        order = order[: s.limit]
    creation = np.asarray(pods.creation_time, dtype=np.float64)
    run_time = np.asarray(pods.deletion_time - pods.scheduled_time, dtype=np.float64)
    if s.max_duration is not None:
        run_time = np.minimum(run_time, s.max_duration)

    hypernodes = tuple(
        HyperNode(name=f"host-{name}", tier=1, members=(name,)) for name in nodes.names
    )
    one_node = NetworkTopology(mode=TopologyMode.HARD, highest_tier_allowed=1)
    queue_of = rng.choice(len(queue_names), size=order.size + s.n_gangs, p=weights / weights.sum())
    jobs: list[TraceJob] = []
    n_node_gangs = 0
    for k, row in enumerate(order.tolist()):
        name = pods.names[row]
        queue = queue_names[int(queue_of[k])]
        arrival = float(creation[row] / s.time_scale)
        count = int(pods.num_gpu[row])
        if count < 2:
            task = openb_task(pods, row, name=name, job=name)
            job = Job(name=name, queue=queue, min_available=1)
            jobs.append(
                TraceJob(job=job, tasks=(task,), arrival=arrival, duration=float(run_time[row]))
            )
            continue
        n_node_gangs += 1
        cpu = _split(int(pods.cpu_milli[row]), count)
        mem = _split(int(pods.memory_mib[row]) * MIB, count)
        models = pods.spec_models(int(pods.spec_idx[row]))
        tasks = tuple(
            Task(
                name=f"{name}-{i}",
                job=name,
                role="worker",
                request=Resources({CPU: cpu[i], MEMORY: mem[i]}),
                gpu_request=GpuRequest(count=1, milli=1000, models=models),
            )
            for i in range(count)
        )
        job = Job(name=name, queue=queue, min_available=count, network_topology=one_node)
        jobs.append(TraceJob(job=job, tasks=tasks, arrival=arrival, duration=float(run_time[row])))

    span = float(creation[order].max() / s.time_scale) if order.size else 0.0
    multi = np.asarray([r for r in ran.tolist() if pods.num_gpu[r] >= 2], dtype=np.int64)
    pool = run_time[multi] if multi.size else run_time[ran]
    for g in range(s.n_gangs):
        name = f"gang-{g:04d}"
        workers = int(rng.choice(np.asarray(s.gang_workers)))
        arrival = float(rng.uniform(0.0, span)) if span > 0 else 0.0
        duration = float(pool[int(rng.integers(pool.size))]) if pool.size else 3600.0
        tasks = tuple(
            Task(
                name=f"{name}-{w}",
                job=name,
                role="worker",
                request=Resources({CPU: s.worker_cpu, MEMORY: s.worker_memory}),
                gpu_request=GpuRequest(count=s.worker_gpus),
            )
            for w in range(workers)
        )
        job = Job(
            name=name, queue=queue_names[int(queue_of[order.size + g])], min_available=workers
        )
        jobs.append(TraceJob(job=job, tasks=tasks, arrival=arrival, duration=duration))
    jobs.sort(key=lambda tj: (tj.arrival, tj.job.name))
    trace = Trace(nodes=openb_nodes(nodes), queues=queues, jobs=tuple(jobs), hypernodes=hypernodes)
    label = (
        f"derived: openb {Path(pods.source).name} arrivals / {s.time_scale:g}, "
        f"{order.size - n_node_gangs} pods, {n_node_gangs} single-node gangs, "
        f"{s.n_gangs} synthetic multi-node gangs, {len(queues)} Helios Venus VC queues"
    )
    return DerivedTrace(
        trace=trace,
        label=label,
        pod_jobs=int(order.size) - n_node_gangs,
        node_gangs=n_node_gangs,
        multi_node_gangs=s.n_gangs,
        skipped=len(pods) - int(ran.size),
    )


def gang_config(trace: Trace, policy: str | None = None) -> Config:
    """Volcano's default configuration; ``policy`` (an FGD-study scorer) replaces
    ``nodeorder``. ``fgd`` gets the trace's typical pods as its target workload."""
    base = Config.default()
    if policy is None:
        return base
    if policy not in POLICIES:
        raise ConfigError(
            f"unknown policy; expected one of {', '.join(POLICIES)}", kind="policy", name=policy
        )
    arguments: dict[str, object] = {}
    if policy == "fgd":
        arguments["typical-pods"] = typical_pods_argument(
            derive_typical(trace), trace_models(trace)
        )
    scorer = PluginOption(name=policy, arguments=arguments)
    tiers = tuple(
        Tier(plugins=tuple(scorer if p.name == "nodeorder" else p for p in tier.plugins))
        for tier in base.tiers
    )
    return Config(actions=base.actions, tiers=tiers, configurations=base.configurations)


# ------------------------------------------------------------------------------------ report


@dataclass(frozen=True, slots=True)
class QueueSummary:
    """One line of the summary (a queue, or ``all``)."""

    name: str
    weight: int
    jobs: int
    done: int
    waiting_at_end: int
    delay_mean: float  # seconds, over jobs that started
    delay_p50: float
    delay_p95: float
    jct_mean: float  # seconds, over jobs done
    jct_p50: float
    jct_p95: float
    gpu_hours: float
    share_mean: float  # time-weighted mean allocated share of all GPUs, %
    fair_mean: float  # time-weighted mean fair share, %
    share_dev: float  # time-weighted mean |allocated - fair|, % of all GPUs


@dataclass(frozen=True, slots=True)
class GangReport:
    label: str
    result: ReplayResult
    queues: tuple[QueueSummary, ...]
    overall: QueueSummary
    utilisation: float  # time-weighted GPU allocation over the whole replay, %
    utilisation_arrivals: float  # the same from the first to the last arrival, %
    frag_ratio: float  # time-weighted mean fragmentation ratio, %


def _stats(values: F64) -> tuple[float, float, float]:
    v = values[np.isfinite(values)]
    if v.size == 0:
        return math.nan, math.nan, math.nan
    return float(v.mean()), float(np.percentile(v, 50)), float(np.percentile(v, 95))


def _line(
    result: ReplayResult, name: str, weight: int, jobs: npt.NDArray[np.bool_], q: int | None
) -> QueueSummary:
    w = result.time_weights()
    span = float(w.sum())
    total = max(result.total_gpu, 1)
    if q is None:
        alloc = result.gpu_alloc.astype(np.float64)
        fair = result.queue_fair.sum(axis=1)
        dev = np.abs(result.queue_alloc - result.queue_fair).sum(axis=1)
    else:
        alloc = result.queue_alloc[:, q].astype(np.float64)
        fair = result.queue_fair[:, q]
        dev = np.abs(result.queue_alloc[:, q] - result.queue_fair[:, q])

    def mean(x: F64) -> float:
        return float((x * w).sum() / span) if span > 0 else float(x[-1])

    delay = _stats(result.queueing_delay[jobs])
    jct = _stats(result.jct[jobs])
    state = result.job_state[jobs]
    return QueueSummary(
        name=name,
        weight=weight,
        jobs=int(jobs.sum()),
        done=int((state == JobState.DONE).sum()),
        waiting_at_end=int((state == JobState.QUEUED).sum()),
        delay_mean=delay[0],
        delay_p50=delay[1],
        delay_p95=delay[2],
        jct_mean=jct[0],
        jct_p50=jct[1],
        jct_p95=jct[2],
        gpu_hours=float((alloc * w).sum()) / 1000.0 / 3600.0,
        share_mean=100.0 * mean(alloc) / total,
        fair_mean=100.0 * mean(fair) / total,
        share_dev=100.0 * mean(dev) / total,
    )


def summarize(result: ReplayResult, label: str = "") -> GangReport:
    """Per-queue and overall figures of a replay (see :class:`QueueSummary`)."""
    lines = tuple(
        _line(result, name, int(result.queue_weight[q]), result.job_queue == q, q)
        for q, name in enumerate(result.queue_names)
    )
    everyone = np.ones(result.job_queue.size, dtype=np.bool_)
    overall = _line(result, "all", int(result.queue_weight.sum()), everyone, None)
    w = result.time_weights()
    ratio = result.frag_ratio
    ok = np.isfinite(ratio) & (w > 0)
    frag = float((ratio[ok] * w[ok]).sum() / w[ok].sum()) if ok.any() else math.nan
    return GangReport(
        label=label,
        result=result,
        queues=lines,
        overall=overall,
        utilisation=result.utilisation(),
        utilisation_arrivals=result.utilisation(
            float(result.job_arrival.min()) if result.job_arrival.size else None,
            float(result.job_arrival.max()) if result.job_arrival.size else None,
        ),
        frag_ratio=frag,
    )


def run_gang_replay(
    derived: DerivedTrace,
    *,
    config: Config | None = None,
    policy: str | None = None,
    placer: Placer | None = None,
    period: float = 0.0,
    progress: Callable[[ReplayProgress], None] | None = None,
) -> GangReport:
    """Replay a derived trace and summarize it. ``config`` wins over ``policy``."""
    trace = derived.trace
    cfg = config if config is not None else gang_config(trace, policy)
    options = ReplayOptions(config=cfg, placer=placer, period=period)
    return summarize(replay(trace, options, progress=progress), derived.label)


def _fmt(value: float, scale: float = 1.0, digits: int = 0) -> str:
    return "-" if not math.isfinite(value) else f"{value / scale:.{digits}f}"


def format_summary(report: GangReport) -> str:
    """The summary as a fixed-width text table (times in minutes)."""
    head = (
        f"{'queue':<8} {'weight':>6} {'jobs':>6} {'done':>6} {'wait@end':>8} "
        f"{'delay mean':>10} {'p50':>6} {'p95':>7} {'JCT mean':>9} {'p50':>6} {'p95':>7} "
        f"{'GPU-h':>8} {'share%':>6} {'fair%':>6} {'|dev|%':>6}"
    )
    out = [report.label, "(times in minutes)", head, "-" * len(head)]
    for line in (*report.queues, report.overall):
        out.append(
            f"{line.name:<8} {line.weight:>6} {line.jobs:>6} {line.done:>6} "
            f"{line.waiting_at_end:>8} {_fmt(line.delay_mean, 60, 1):>10} "
            f"{_fmt(line.delay_p50, 60, 1):>6} {_fmt(line.delay_p95, 60, 1):>7} "
            f"{_fmt(line.jct_mean, 60, 1):>9} {_fmt(line.jct_p50, 60, 1):>6} "
            f"{_fmt(line.jct_p95, 60, 1):>7} {_fmt(line.gpu_hours, 1, 0):>8} "
            f"{_fmt(line.share_mean, 1, 2):>6} {_fmt(line.fair_mean, 1, 2):>6} "
            f"{_fmt(line.share_dev, 1, 2):>6}"
        )
    r = report.result
    out.append(
        f"GPU allocation (time-weighted): {report.utilisation_arrivals:.2f} % while jobs "
        f"arrive, {report.utilisation:.2f} % over the whole replay ({r.time[-1]:,.0f} s); mean "
        f"fragmentation ratio {_fmt(report.frag_ratio, 1, 2)} %"
    )
    out.append(
        f"{r.events} events, {r.cycles} scheduling cycles, {int(r.binds.sum())} binds, "
        f"{int(r.evictions.sum())} evictions, {int(r.job_restarts.sum())} restarts"
    )
    return "\n".join(out)


def write_report(report: GangReport, out_dir: str | Path) -> tuple[Path, Path, Path]:
    """``summary.csv``, ``queue_share.csv`` (per step: time, then allocated and fair share of
    all GPUs per queue, %) and ``jobs.csv`` (per job: queue, arrival, start, end, state)."""
    out = output_dir(out_dir)
    r = report.result
    fields = QueueSummary.__slots__
    summary = [",".join(fields)]
    for line in (*report.queues, report.overall):
        summary.append(",".join(_cell(getattr(line, f)) for f in fields))
    total = max(r.total_gpu, 1)
    share_head = (
        ["time"] + [f"alloc_{q}" for q in r.queue_names] + [f"fair_{q}" for q in r.queue_names]
    )
    share = [",".join(share_head)]
    alloc_pct = 100.0 * r.queue_alloc / total
    fair_pct = 100.0 * r.queue_fair / total
    for k in range(r.time.size):
        cells = [repr(float(r.time[k]))]
        cells += [f"{v:.4f}" for v in alloc_pct[k]] + [f"{v:.4f}" for v in fair_pct[k]]
        share.append(",".join(cells))
    jobs = ["job,queue,gpu_milli,arrival,start,end,state,restarts"]
    for j, name in enumerate(r.job_names):
        jobs.append(
            f"{name},{r.queue_names[int(r.job_queue[j])]},{int(r.job_gpu[j])},"
            f"{_cell(float(r.job_arrival[j]))},{_cell(float(r.job_start[j]))},"
            f"{_cell(float(r.job_end[j]))},{JobState.NAMES[int(r.job_state[j])]},"
            f"{int(r.job_restarts[j])}"
        )
    paths = (out / "summary.csv", out / "queue_share.csv", out / "jobs.csv")
    for path, lines in zip(paths, (summary, share, jobs), strict=True):
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return paths


def _cell(value: object) -> str:
    if isinstance(value, float):
        return "" if not math.isfinite(value) else repr(value)
    return str(value)
