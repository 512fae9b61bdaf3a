"""Discrete-event replay of a trace through :func:`gangsched.schedule`.

Theory of operation
-------------------
A :class:`Trace` is a cluster (nodes, optional hypernodes, queues), jobs that arrive at given
times with their tasks and a run time, and node failures. :func:`replay` keeps one event heap
ordered by ``(time, kind, seq)``; at equal times, kinds run in this order:

====  ==========  ===========================================================================
0     ``END``     a job's run time is over: its tasks succeed and free their resources
1     ``RELEASE`` an evicted task has left its node (``eviction_grace`` after the eviction);
                  its job restarts: every task it still holds is freed, it queues again
2     ``FAIL``    a failure window of a node opens: the node turns unschedulable; jobs with
                  a task on it restart (``on_node_failure="requeue"``) or fail (``"fail"``)
3     ``RECOVER`` a failure window closes; the node is schedulable again once none of its
                  windows is open (windows of one node may overlap; a failure without
                  ``until`` keeps the node down for good)
4     ``ARRIVE``  a job's tasks become pending
5     ``CYCLE``   a scheduling tick (only with ``period > 0``)
====  ==========  ===========================================================================

``seq`` is the order in which events were created, so ties never depend on anything else.
After all events of one time are applied, a scheduling cycle runs if something changed since
the last one (an arrival, freed resources, a node coming or going) and a job is waiting. With
``period = 0`` (the default) that is at the event's time; with ``period > 0`` at the next
multiple of ``period``. The engine keeps a :class:`~gangsched.state.ClusterState` of the live
jobs (arrived, not finished) current event by event; a cycle takes its snapshot (which shares
whatever did not change since the last cycle), calls :func:`~gangsched.scheduler.schedule`
with the configured ``config``, ``placer`` and ``registry``, and applies the decisions:

* a **bind** makes the task Running on its node and devices. The engine keeps its own books of
  CPU, memory and per-device milli-GPU and raises :class:`~gangsched.errors.PlacementError` on a
  bind that overfills a node or lands on a failed node: the replay checks the scheduler.
* a job *starts* when ``min_available`` of its tasks run; it ends ``duration`` later (never when
  ``duration`` is ``None``). Tasks bound after the start run until the job ends.
* an **eviction** marks the task Releasing; it leaves ``eviction_grace`` seconds later and its
  job restarts from scratch (gang semantics: the whole job queues again).
* **pipelined** tasks are counted, not carried over: as in Volcano, a reservation lives for
  one cycle and the next cycle decides again.
* a job the enqueue action admitted is Inqueue in the next snapshot.
* with ``drop_unplaced`` (the FGD protocol), a job still waiting after the cycle that follows
  its arrival is dropped and counted as failed.

After every time step the engine records one row of metrics; the first row is the empty
cluster before any event. Jobs that never started by the end are *queued*.

Metrics (all NumPy arrays, see :class:`ReplayResult`): allocated milli-GPU and millicores,
the FGD fragment of every node over a target workload of typical pods (given, or derived from
all tasks of the trace) and the idle milli-GPU, the GPU demand that has arrived, waiting and
running job counts, binds / evictions / pipelined tasks per step, and per queue the allocated
GPU, the demand (allocated + waiting) and the weighted max-min fair share of the cluster's GPUs
for that demand. Per job: arrival, first start, end, final state and restarts.

The engine is deterministic: no clock, no unseeded randomness; the same trace and options give
identical arrays.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ..config import Config
from ..decisions import Decisions
from ..errors import ConfigError, PlacementError
from ..feasibility import queue_gpu_charge
from ..fragmentation import (
    MILLI,
    TypicalPods,
    fragment_terms,
    node_fragment_from_terms,
    typical_pods,
)
from ..limits import MAX_REPLAY_TIME, MIN_REPLAY_PERIOD
from ..model import HyperNode, Job, JobPhase, Node, Queue, Task, TaskPhase
from ..placement import Placer
from ..registry import Registry
from ..scheduler import schedule
from ..snapshot import Snapshot
from ..state import ClusterState
from ..units import CPU, MEMORY

__all__ = [
    "JobState",
    "NodeFailure",
    "ReplayOptions",
    "ReplayProgress",
    "ReplayResult",
    "Trace",
    "TraceJob",
    "derive_typical",
    "fair_share",
    "replay",
    "trace_models",
]

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]

END, RELEASE, FAIL, RECOVER, ARRIVE, CYCLE = range(6)

# Task states inside the engine.
_WAITING, _PENDING, _RUNNING, _RELEASING, _GONE = range(5)


class JobState:
    """Final state codes of a job in :attr:`ReplayResult.job_state`."""

    QUEUED = 0  # arrived, never started (or waiting again after a restart) at the end
    RUNNING = 1  # still running at the end (e.g. ``duration=None``)
    DONE = 2  # ran for its duration
    FAILED = 3  # a node under it failed with ``on_node_failure="fail"``
    DROPPED = 4  # not placed in the cycle after its arrival (``drop_unplaced``)
    NOT_ARRIVED = 5  # the replay stopped (``until``) before it arrived

    NAMES = ("queued", "running", "done", "failed", "dropped", "not arrived")


# ------------------------------------------------------------------------------------ input


def _short(value: object) -> str:
    """``repr(value)``, cut to 40 characters (a 5,000-digit number stays readable)."""
    text = repr(value) if not isinstance(value, int) or abs(value) < 10**40 else "a huge integer"
    return text if len(text) <= 40 else text[:37] + "..."


def _check_time(value: object, *, kind: str, name: str, field: str, optional: bool = False) -> None:
    """A time or duration: a finite number in ``[0, MAX_REPLAY_TIME]`` (or ``None`` when
    ``optional``)."""
    if value is None and optional:
        return
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or (isinstance(value, float) and not math.isfinite(value))
    ):
        raise ConfigError(
            f"expected a finite number, got {_short(value)}", kind=kind, name=name, field=field
        )
    if value < 0:
        raise ConfigError(f"must be >= 0, got {_short(value)}", kind=kind, name=name, field=field)
    if value > MAX_REPLAY_TIME:
        raise ConfigError(
            f"must be at most {MAX_REPLAY_TIME:g} seconds, got {_short(value)}",
            kind=kind,
            name=name,
            field=field,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class TraceJob:
    """A job as submitted: its record (phase Pending), its pending tasks, when it arrives and
    how long it runs once started (``None``: until the end of the replay)."""

    job: Job
    tasks: tuple[Task, ...]
    arrival: float
    duration: float | None = None

    def __post_init__(self) -> None:
        name = self.job.name
        object.__setattr__(self, "tasks", tuple(self.tasks))
        _check_time(self.arrival, kind="job", name=name, field="arrival")
        _check_time(self.duration, kind="job", name=name, field="duration", optional=True)
        if not self.tasks:
            raise ConfigError("a job needs at least one task", kind="job", name=name, field="tasks")
        for task in self.tasks:
            if task.job != name:
                raise ConfigError(
                    f"task {task.name!r} belongs to job {task.job!r}",
                    kind="job",
                    name=name,
                    field="tasks",
                )
            if task.phase is not TaskPhase.PENDING or task.node is not None:
                raise ConfigError(
                    f"task {task.name!r} must be Pending without a node",
                    kind="job",
                    name=name,
                    field="tasks",
                )
        if self.job.phase not in (JobPhase.PENDING, JobPhase.INQUEUE):
            raise ConfigError(
                f"a submitted job is Pending or Inqueue, not {self.job.phase.value}",
                kind="job",
                name=name,
                field="phase",
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeFailure:
    """Node ``node`` fails at ``at`` and comes back at ``until`` (never when ``None``)."""

    node: str
    at: float
    until: float | None = None

    def __post_init__(self) -> None:
        _check_time(self.at, kind="failure", name=self.node, field="at")
        _check_time(self.until, kind="failure", name=self.node, field="until", optional=True)
        if self.until is not None and self.until <= self.at:
            raise ConfigError(
                f"recovery {self.until} is not after the failure {self.at}",
                kind="failure",
                name=self.node,
                field="until",
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class Trace:
    """A cluster and what happens to it. Validated on construction."""

    nodes: tuple[Node, ...]
    queues: tuple[Queue, ...]
    jobs: tuple[TraceJob, ...]
    hypernodes: tuple[HyperNode, ...] = ()
    failures: tuple[NodeFailure, ...] = ()

    def __post_init__(self) -> None:
        for attr in ("nodes", "queues", "jobs", "hypernodes", "failures"):
            object.__setattr__(self, attr, tuple(getattr(self, attr)))
        # The static part must form a valid snapshot on its own.
        Snapshot(nodes=self.nodes, hypernodes=self.hypernodes, queues=self.queues)
        queues = {q.name for q in self.queues}
        nodes = {n.name for n in self.nodes}
        jobs: set[str] = set()
        tasks: set[str] = set()
        for tj in self.jobs:
            name = tj.job.name
            if name in jobs:
                raise ConfigError("duplicate job name", kind="job", name=name, field="name")
            jobs.add(name)
            if tj.job.queue not in queues:
                raise ConfigError(
                    f"unknown queue {tj.job.queue!r}", kind="job", name=name, field="queue"
                )
            for task in tj.tasks:
                if task.name in tasks:
                    raise ConfigError("duplicate task name", kind="task", name=task.name)
                tasks.add(task.name)
        for f in self.failures:
            if f.node not in nodes:
                raise ConfigError("unknown node", kind="failure", name=f.node, field="node")

    @property
    def n_tasks(self) -> int:
        return sum(len(j.tasks) for j in self.jobs)


def trace_models(trace: Trace) -> tuple[str, ...]:
    """Sorted distinct GPU models of the trace's nodes: the columns of a typical-pods table."""
    return tuple(sorted({n.gpus.model for n in trace.nodes if n.gpus is not None}))


def derive_typical(trace: Trace, *, threshold_pct: float = 95.0) -> TypicalPods:
    """Typical pods of every task of the trace (columns: :func:`trace_models`)."""
    models = trace_models(trace)
    cpu, num, milli, spec_names = [], [], [], []
    for tj in trace.jobs:
        for task in tj.tasks:
            g = task.gpu_request
            count = 0 if g is None else g.count
            share = 0 if g is None else min(g.milli, MILLI)
            if count > 1 and share < MILLI:
                continue
            cpu.append(task.request.get(CPU, 0))
            num.append(count)
            milli.append(share)
            spec_names.append("|".join(g.models) if g is not None else "")
    if not cpu:
        cpu, num, milli, spec_names = [0], [1], [MILLI], [""]
    specs = sorted(set(spec_names) | {""})
    index = {s: i for i, s in enumerate(specs)}
    allowed = np.zeros((len(specs), len(models)), dtype=np.bool_)
    for i, s in enumerate(specs):
        wanted = [p for p in s.split("|") if p]
        allowed[i] = [not wanted or m in wanted for m in models]
    return typical_pods(
        np.array(cpu, dtype=np.int64),
        np.array(num, dtype=np.int64),
        np.array(milli, dtype=np.int64),
        np.array([index[s] for s in spec_names], dtype=np.int64),
        allowed,
        threshold_pct=threshold_pct,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplayOptions:
    """How to replay: the scheduler to call and the engine's rules (module docstring)."""

    config: Config
    placer: Placer | None = None
    registry: Registry | None = None
    period: float = 0.0
    drop_unplaced: bool = False
    on_node_failure: str = "requeue"
    eviction_grace: float = 1.0
    until: float | None = None
    typical: TypicalPods | None = None  # columns: trace_models(trace)

    def __post_init__(self) -> None:
        if not isinstance(self.config, Config):
            raise ConfigError("expected a Config", kind="replay", field="config")
        _check_time(self.period, kind="replay", name="", field="period")
        if 0 < self.period < MIN_REPLAY_PERIOD:
            raise ConfigError(
                f"must be 0 (schedule at every event) or at least {MIN_REPLAY_PERIOD:g} "
                f"seconds, got {self.period:g}",
                kind="replay",
                field="period",
            )
        _check_time(self.until, kind="replay", name="", field="until", optional=True)
        _check_time(self.eviction_grace, kind="replay", name="", field="eviction_grace")
        if self.eviction_grace <= 0:
            raise ConfigError(
                "must be > 0 (an eviction takes effect after the cycle that made it)",
                kind="replay",
                field="eviction_grace",
            )
        if self.on_node_failure not in ("requeue", "fail"):
            raise ConfigError(
                f"expected 'requeue' or 'fail', got {self.on_node_failure!r}",
                kind="replay",
                field="on_node_failure",
            )


@dataclass(frozen=True, slots=True)
class ReplayProgress:
    """Where a replay is, handed to the progress callback after every time step."""

    time: float
    events: int
    cycles: int
    arrived: int
    n_jobs: int
    running: int
    waiting: int
    finished: int


# ------------------------------------------------------------------------------------ output


@dataclass(frozen=True, slots=True, eq=False)
class ReplayResult:
    """What a replay recorded. Time series have one entry per time step (T,), the first being
    the cluster before any event; per-queue series are (T, n_queues); per-job arrays (n_jobs,)
    follow the trace's job order."""

    time: F64  # (T,) seconds
    gpu_alloc: I64  # (T,) allocated milli-GPU
    cpu_alloc: I64  # (T,) allocated millicores
    frag: F64  # (T,) cluster fragment, milli-GPU
    idle: I64  # (T,) idle milli-GPU
    arrived_gpu: I64  # (T,) milli-GPU requested by the jobs arrived so far (failed ones too)
    waiting: I64  # (T,) jobs arrived and not started
    running: I64  # (T,) jobs started and not finished
    binds: I64  # (T,) binds applied in the step
    evictions: I64  # (T,)
    pipelined: I64  # (T,)
    queue_alloc: I64  # (T, Q) allocated milli-GPU per queue
    queue_demand: I64  # (T, Q) allocated + waiting milli-GPU per queue
    queue_fair: F64  # (T, Q) weighted max-min fair share of the GPUs for that demand
    queue_names: tuple[str, ...]
    queue_weight: I64  # (Q,)
    job_names: tuple[str, ...]
    job_queue: I64  # (J,) index into queue_names
    job_gpu: I64  # (J,) milli-GPU the job's tasks request
    job_arrival: F64  # (J,)
    job_start: F64  # (J,) first start, NaN if never started
    job_end: F64  # (J,) NaN if not finished
    job_state: I64  # (J,) JobState code
    job_restarts: I64  # (J,)
    task_names: tuple[str, ...]
    task_node: I64  # (N,) node of the task's first bind, -1 if never bound
    node_names: tuple[str, ...]
    total_gpu: int  # milli-GPU of all devices
    total_cpu: int  # millicores of all nodes
    max_device_used: int  # largest milli-GPU held on one device at any step
    events: int
    cycles: int

    @property
    def queueing_delay(self) -> F64:
        """(J,) first start minus arrival; NaN for jobs that never started."""
        out: F64 = self.job_start - self.job_arrival
        return out

    @property
    def jct(self) -> F64:
        """(J,) job completion time: end minus arrival; NaN for unfinished jobs."""
        done = self.job_state == JobState.DONE
        out: F64 = np.where(done, self.job_end - self.job_arrival, np.nan)
        return out

    @property
    def alloc_ratio(self) -> F64:
        """(T,) allocated over all GPUs, in %."""
        out: F64 = 100.0 * self.gpu_alloc / max(self.total_gpu, 1)
        return out

    @property
    def unallocated_gpus(self) -> F64:
        """(T,) GPUs not allocated (whole-GPU units)."""
        out: F64 = (self.total_gpu - self.gpu_alloc) / MILLI
        return out

    @property
    def frag_ratio(self) -> F64:
        """(T,) fragment over idle GPU, in % (NaN when nothing is idle)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            out: F64 = np.where(self.idle > 0, 100.0 * self.frag / self.idle, np.nan)
        return out

    @property
    def share_deviation(self) -> F64:
        """(T, Q) allocated minus fair share, as a fraction of all GPUs."""
        out: F64 = (self.queue_alloc - self.queue_fair) / max(self.total_gpu, 1)
        return out

    def time_weights(self) -> F64:
        """(T,) how long each recorded state lasted (the last one: 0)."""
        w: F64 = np.zeros(self.time.size)
        if self.time.size > 1:
            w[:-1] = np.diff(self.time)
        return w

    def utilisation(self, start: float | None = None, end: float | None = None) -> float:
        """Time-weighted mean GPU allocation ratio (%) over ``[start, end]`` (default: from the
        first to the last step); each recorded state lasts until the next step."""
        if self.time.size == 0:
            return 0.0
        t = self.time
        lo = float(t[0]) if start is None else start
        hi = float(t[-1]) if end is None else end
        following = np.append(t[1:], max(float(t[-1]), hi))
        w = np.clip(np.minimum(following, hi) - np.maximum(t, lo), 0.0, None)
        total = float(w.sum())
        if total <= 0:
            return float(self.alloc_ratio[-1])
        return float((self.alloc_ratio * w).sum() / total)

    def mean_abs_share_deviation(self) -> F64:
        """(Q,) time-weighted mean of ``|share_deviation|`` per queue."""
        w = self.time_weights()
        total = float(w.sum())
        dev = np.abs(self.share_deviation)
        if total <= 0:
            return np.asarray(dev[-1] if self.time.size else np.zeros(len(self.queue_names)))
        out: F64 = (dev * w[:, None]).sum(axis=0) / total
        return out


def fair_share(demand: F64, weight: F64, capacity: float) -> F64:
    """Weighted max-min fair share: ``min(demand_q, level * weight_q)`` with the level that
    hands out ``min(capacity, sum(demand))``. Shapes ``(Q,)``; weights must be positive."""
    d = np.maximum(np.asarray(demand, dtype=np.float64), 0.0)
    w = np.asarray(weight, dtype=np.float64)
    total = float(d.sum())
    if total <= capacity:
        return d.copy()
    ratio = d / w  # level at which each queue is satisfied
    order = np.argsort(ratio, kind="stable")
    r, ds, ws = ratio[order], d[order], w[order]
    # Giving level r[k] hands out sum(d[:k+1]) + r[k] * sum(w[k+1:]).
    given = np.cumsum(ds) + r * (ws.sum() - np.cumsum(ws))
    k = int(np.searchsorted(given, capacity, side="left"))
    below = float(ds[:k].sum())
    level = (capacity - below) / float(ws[k:].sum())
    out: F64 = np.minimum(d, level * w)
    return out


# ------------------------------------------------------------------------------------ engine


class _Engine:
    """The replay's mutable state. One instance per :func:`replay` call."""

    def __init__(
        self, trace: Trace, opts: ReplayOptions, progress: Callable[[ReplayProgress], None] | None
    ) -> None:
        self.trace, self.opts, self.progress = trace, opts, progress
        nodes = trace.nodes
        n = len(nodes)
        self.node_index = {node.name: i for i, node in enumerate(nodes)}
        counts = np.array([0 if nd.gpus is None else nd.gpus.count for nd in nodes], np.int64)
        width = int(counts.max()) if n else 0
        self.cap_cpu = np.array([nd.allocatable.get(CPU, 0) for nd in nodes], np.int64)
        self.cap_mem = np.array([nd.allocatable.get(MEMORY, 0) for nd in nodes], np.int64)
        self.dev_cap = np.array([0 if nd.gpus is None else nd.gpus.milli for nd in nodes], np.int64)
        self.sharing = np.array([nd.gpus is not None and nd.gpus.sharing for nd in nodes], bool)
        self.dev_valid = np.arange(width)[None, :] < counts[:, None]  # (n, width)
        models = trace_models(trace)
        midx = {m: i for i, m in enumerate(models)}
        self.model_idx = np.array(
            [len(models) if nd.gpus is None else midx[nd.gpus.model] for nd in nodes], np.int64
        )
        self.total_gpu = int((self.dev_cap[:, None] * self.dev_valid).sum())

        # Tasks, flattened in job order.
        self.task_base: list[Task] = [task for tj in trace.jobs for task in tj.tasks]
        self.job_tasks: list[range] = []
        first = 0
        for tj in trace.jobs:
            self.job_tasks.append(range(first, first + len(tj.tasks)))
            first += len(tj.tasks)
        base = self.task_base
        self.task_index = {task.name: i for i, task in enumerate(base)}
        self.task_job = np.repeat(np.arange(len(trace.jobs)), [len(tj.tasks) for tj in trace.jobs])
        self.task_cpu = np.array([t.request.get(CPU, 0) for t in base], np.int64)
        self.task_mem = np.array([t.request.get(MEMORY, 0) for t in base], np.int64)
        gpu = [t.gpu_request for t in base]
        self.task_gpu_count = np.array([0 if g is None else g.count for g in gpu], np.int64)
        self.task_gpu_milli = np.array([0 if g is None else g.milli for g in gpu], np.int64)
        self.task_nominal = queue_gpu_charge(self.task_gpu_count, self.task_gpu_milli)
        n_tasks, n_jobs = len(base), len(trace.jobs)
        self.job_gpu = np.zeros(n_jobs, np.int64)
        np.add.at(self.job_gpu, self.task_job, self.task_nominal)
        qidx = {q.name: i for i, q in enumerate(trace.queues)}
        self.job_queue = np.array([qidx[tj.job.queue] for tj in trace.jobs], np.int64)
        self.job_min = np.array([tj.job.min_available for tj in trace.jobs], np.int64)

        # Dynamic state.
        self.task_state = np.full(n_tasks, _WAITING, np.int8)
        self.task_node = np.full(n_tasks, -1, np.int64)
        self.task_first_node = np.full(n_tasks, -1, np.int64)
        self.task_gpus: list[tuple[int, ...]] = [()] * n_tasks
        self.task_record: list[Task | None] = [None] * n_tasks
        self.used_cpu = np.zeros(n, np.int64)
        self.used_mem = np.zeros(n, np.int64)
        self.dev_used = np.zeros((n, width), np.int64)
        self.failed = np.zeros(n, dtype=bool)
        self.open_failures = np.zeros(n, np.int64)  # failure windows open on each node
        # The scheduler's view: live jobs in trace order, their tasks in job order.
        self.state = ClusterState(
            Snapshot(nodes=nodes, hypernodes=trace.hypernodes, queues=trace.queues)
        )
        self.live_order: list[int] = []  # live jobs in the state's order (ascending)
        self.job_state = np.full(n_jobs, JobState.NOT_ARRIVED, np.int64)
        self.job_started = np.zeros(n_jobs, dtype=bool)
        self.job_phase = [tj.job.phase for tj in trace.jobs]
        self.job_epoch = np.zeros(n_jobs, np.int64)
        self.job_start = np.full(n_jobs, np.nan)
        self.job_end = np.full(n_jobs, np.nan)
        self.job_restarts = np.zeros(n_jobs, np.int64)
        self.job_running_tasks = np.zeros(n_jobs, np.int64)
        self.job_records: dict[tuple[int, JobPhase], Job] = {}
        self.live: set[int] = set()  # arrived and not finished
        self.n_started = 0  # live jobs that have started
        self.n_arrived = 0
        self.queue_alloc = np.zeros(len(trace.queues), np.int64)
        self.queue_wait = np.zeros(len(trace.queues), np.int64)
        self.arrived_gpu = 0
        self.max_device = 0
        self.n_events = self.n_cycles = 0
        self.step_binds = self.step_evictions = self.step_pipelined = 0
        self.dirty = False
        self.dirty_nodes: set[int] = set()
        self.next_tick = -1.0
        self.heap: list[tuple[float, int, int, int, int]] = []
        self.seq = 0
        for j, tj in enumerate(trace.jobs):
            self.push(float(tj.arrival), ARRIVE, j)
        for k, f in enumerate(trace.failures):
            self.push(float(f.at), FAIL, k)
            if f.until is not None:
                self.push(float(f.until), RECOVER, k)

        # Fragmentation over the typical pods; one extra model column for nodes without GPUs.
        typical = opts.typical if opts.typical is not None else derive_typical(trace)
        if typical.allowed.shape[1] != len(models):
            raise ConfigError(
                f"typical pods have {typical.allowed.shape[1]} model columns, the trace has "
                f"{len(models)} GPU models",
                kind="replay",
                field="typical",
            )
        no_gpu = np.zeros((len(typical), 1), dtype=bool)
        self.typical = dataclasses.replace(
            typical, allowed=np.concatenate([typical.allowed, no_gpu], axis=1)
        )
        every = np.arange(n, dtype=np.intp)
        self.terms = fragment_terms(self._gpu_free(every), self.typical)
        self.node_frag = node_fragment_from_terms(
            self.cap_cpu.copy(), self.model_idx, self.terms, self.typical
        )
        self.rows: dict[str, list[object]] = {key: [] for key in _ROW_KEYS}

    def push(self, time: float, kind: int, payload: int, epoch: int = 0) -> None:
        heapq.heappush(self.heap, (time, kind, self.seq, payload, epoch))
        self.seq += 1

    @property
    def n_waiting(self) -> int:
        return len(self.live) - self.n_started

    # -------------------------------------------------------------------------- resources

    def _gpu_free(self, rows: npt.NDArray[np.intp]) -> I64:
        """(k, width) free milli-GPU per device, scaled to 1000 per device, padding 0."""
        cap = self.dev_cap[rows][:, None]
        free = np.where(self.dev_valid[rows], cap - self.dev_used[rows], 0)
        out: I64 = np.where(cap == MILLI, free, free * MILLI // np.maximum(cap, 1))
        return out

    def _charge(self, t: int, node: int) -> int:
        """Milli-GPU task ``t`` holds on each of its devices on ``node`` (as the session does)."""
        cap = int(self.dev_cap[node])
        milli = int(self.task_gpu_milli[t])
        return cap if not self.sharing[node] or milli >= cap else milli

    def _hold(self, t: int, node: int, gpus: tuple[int, ...]) -> None:
        """Book task ``t`` on ``node`` and ``gpus``; a bind that does not fit is an error."""
        name = self.task_base[t].name
        where = f"node {self.trace.nodes[node].name!r}"

        def fail(detail: str, field: str) -> PlacementError:
            return PlacementError(
                f"bound to {where}: {detail}", kind="task", name=name, field=field
            )

        if self.failed[node]:
            raise fail("the node has failed (configure the 'predicates' plugin)", "node")
        count = int(self.task_gpu_count[t])
        if len(gpus) != count or len(set(gpus)) != len(gpus):
            raise fail(f"devices {list(gpus)} for a request of {count}", "gpu_indices")
        charge = self._charge(t, node) if gpus else 0
        width = self.dev_valid.shape[1]
        for g in gpus:
            if not 0 <= g < width or not self.dev_valid[node, g]:
                raise fail(f"device {g} does not exist", "gpu_indices")
            held = int(self.dev_used[node, g]) + charge
            if held > self.dev_cap[node]:
                raise fail(f"device {g} would hold {held} of {self.dev_cap[node]}", "gpu_indices")
        cpu, mem = int(self.task_cpu[t]), int(self.task_mem[t])
        if self.used_cpu[node] + cpu > self.cap_cpu[node]:
            raise fail("not enough cpu", "request.cpu")
        if self.used_mem[node] + mem > self.cap_mem[node]:
            raise fail("not enough memory", "request.memory")
        self.used_cpu[node] += cpu
        self.used_mem[node] += mem
        for g in gpus:
            self.dev_used[node, g] += charge
            self.max_device = max(self.max_device, int(self.dev_used[node, g]))
        self.task_node[t] = node
        self.task_gpus[t] = gpus
        if self.task_first_node[t] < 0:
            self.task_first_node[t] = node
        self.queue_alloc[self.job_queue[self.task_job[t]]] += charge * len(gpus)
        self.dirty_nodes.add(node)

    def _free(self, t: int) -> None:
        node = int(self.task_node[t])
        gpus = self.task_gpus[t]
        charge = self._charge(t, node) if gpus else 0
        self.used_cpu[node] -= int(self.task_cpu[t])
        self.used_mem[node] -= int(self.task_mem[t])
        for g in gpus:
            self.dev_used[node, g] -= charge
        self.queue_alloc[self.job_queue[self.task_job[t]]] -= charge * len(gpus)
        self.task_node[t] = -1
        self.task_gpus[t] = ()
        self.task_record[t] = None
        self.dirty_nodes.add(node)
        self.dirty = True

    # -------------------------------------------------------------------------- job moves

    def _arrive(self, j: int) -> None:
        q = int(self.job_queue[j])
        for t in self.job_tasks[j]:
            self.task_state[t] = _PENDING
            self.queue_wait[q] += int(self.task_nominal[t])
        self.job_state[j] = JobState.QUEUED
        self.live.add(j)
        # Keep the state's jobs in trace order: jobs after j (a trace not sorted by arrival)
        # leave and come back after it, as they are.
        order = self.live_order
        k = len(order)
        while k and order[k - 1] > j:
            k -= 1
        later = order[k:]
        moved = [(self.state.jobs[self._name(i)], self._tasks_now(i)) for i in later]
        for i in later:
            self.state.remove_job(self._name(i), with_tasks=True)
        self.state.add_job(self._job_record(j), [self.task_base[t] for t in self.job_tasks[j]])
        for job, tasks in moved:
            self.state.add_job(job, tasks)
        order.insert(k, j)
        self.n_arrived += 1
        self.arrived_gpu += int(self.job_gpu[j])
        self.dirty = True

    def _name(self, j: int) -> str:
        return self.trace.jobs[j].job.name

    def _tasks_now(self, j: int) -> list[Task]:
        tasks = self.state.tasks
        return [tasks[self.task_base[t].name] for t in self.job_tasks[j]]

    def _sync_job(self, j: int) -> None:
        """The state's record of live job ``j`` follows its phase."""
        rec = self._job_record(j)
        if self.state.jobs[rec.name] is not rec:
            self.state.update_job(rec)

    def _sync_task(self, t: int) -> None:
        """The state's record of task ``t`` (of a live job) follows its engine state."""
        rec = self._task_record(t)
        if self.state.tasks[rec.name] is not rec:
            self.state.update_task(rec)

    def _start(self, j: int, time: float) -> None:
        self.job_started[j] = True
        self.n_started += 1
        self.job_state[j] = JobState.RUNNING
        self._sync_job(j)
        if math.isnan(self.job_start[j]):
            self.job_start[j] = time
        duration = self.trace.jobs[j].duration
        if duration is not None:
            self.push(time + float(duration), END, j, int(self.job_epoch[j]))

    def _finish(self, j: int, state: int, time: float) -> None:
        """End job ``j`` in ``state``: free what it holds, forget what it waits for."""
        q = int(self.job_queue[j])
        for t in self.job_tasks[j]:
            st = self.task_state[t]
            if st in (_RUNNING, _RELEASING):
                self._free(t)
            elif st == _PENDING:
                self.queue_wait[q] -= int(self.task_nominal[t])
            self.task_state[t] = _GONE
        if self.job_started[j]:
            self.n_started -= 1
            self.job_started[j] = False
        self.job_state[j] = state
        self.job_end[j] = time
        self.job_running_tasks[j] = 0
        self.job_epoch[j] += 1
        if j in self.live:
            self.live.discard(j)
            self.live_order.remove(j)
            self.state.remove_job(self._name(j), with_tasks=True)

    def _restart(self, j: int) -> None:
        """Job ``j`` queues again from scratch: every task it holds is freed and pending."""
        q = int(self.job_queue[j])
        for t in self.job_tasks[j]:
            if self.task_state[t] in (_RUNNING, _RELEASING):
                self._free(t)
            if self.task_state[t] != _PENDING:
                self.queue_wait[q] += int(self.task_nominal[t])
            self.task_state[t] = _PENDING
        if self.job_started[j]:
            self.n_started -= 1
            self.job_started[j] = False
        self.job_state[j] = JobState.QUEUED
        self.job_running_tasks[j] = 0
        self.job_phase[j] = self.trace.jobs[j].job.phase
        self.job_restarts[j] += 1
        self.job_epoch[j] += 1
        self.dirty = True
        for t in self.job_tasks[j]:
            self._sync_task(t)
        self._sync_job(j)

    def _set_failed(self, node: int, down: bool) -> None:
        if bool(self.failed[node]) == down:
            return
        self.failed[node] = down
        record = self.trace.nodes[node]
        self.state.update_node(dataclasses.replace(record, unschedulable=True) if down else record)
        self.dirty = True

    # -------------------------------------------------------------------------- events

    def apply_event(self, time: float, kind: int, payload: int, epoch: int) -> None:
        self.n_events += 1
        if kind == ARRIVE:
            self._arrive(payload)
        elif kind == END:
            if epoch == self.job_epoch[payload] and self.job_started[payload]:
                self._finish(payload, JobState.DONE, time)
        elif kind == RELEASE:
            j = int(self.task_job[payload])
            if epoch == self.job_epoch[j] and self.task_state[payload] == _RELEASING:
                self._restart(j)
        elif kind == FAIL:
            node = self.node_index[self.trace.failures[payload].node]
            self.open_failures[node] += 1
            self._set_failed(node, True)
            on_node = np.flatnonzero(self.task_node == node)
            for j in np.unique(self.task_job[on_node]).tolist():
                if self.opts.on_node_failure == "fail":
                    self._finish(j, JobState.FAILED, time)
                else:
                    self._restart(j)
        elif kind == RECOVER:
            node = self.node_index[self.trace.failures[payload].node]
            self.open_failures[node] -= 1
            if self.open_failures[node] == 0:  # down while any of its windows is open
                self._set_failed(node, False)

    # -------------------------------------------------------------------------- cycles

    def _job_record(self, j: int) -> Job:
        phase = JobPhase.RUNNING if self.job_started[j] else self.job_phase[j]
        rec = self.job_records.get((j, phase))
        if rec is None:
            rec = dataclasses.replace(self.trace.jobs[j].job, phase=phase, creation=j)
            self.job_records[(j, phase)] = rec
        return rec

    def _task_record(self, t: int) -> Task:
        st = self.task_state[t]
        if st == _PENDING:
            return self.task_base[t]
        phase = TaskPhase.RUNNING if st == _RUNNING else TaskPhase.RELEASING
        rec = self.task_record[t]
        if rec is None or rec.phase is not phase:
            rec = dataclasses.replace(
                self.task_base[t],
                phase=phase,
                node=self.trace.nodes[int(self.task_node[t])].name,
                gpu_indices=self.task_gpus[t],
            )
            self.task_record[t] = rec
        return rec

    def snapshot(self) -> Snapshot:
        """The cluster as the scheduler sees it now: live jobs and their tasks."""
        return self.state.snapshot()

    def cycle(self, time: float) -> None:
        self.n_cycles += 1
        self.dirty = False
        out = schedule(
            self.snapshot(), self.opts.config, placer=self.opts.placer, registry=self.opts.registry
        )
        self.apply(out, time)

    def apply(self, out: Decisions, time: float) -> None:
        """Apply one cycle's decisions (module docstring)."""
        touched: set[int] = set()
        for b in out.binds:
            t = self.task_index.get(b.task)
            node = self.node_index.get(b.node)
            if t is None or node is None or self.task_state[t] != _PENDING:
                raise PlacementError(
                    f"bind to {b.node!r} of a task that is not waiting", kind="task", name=b.task
                )
            self._hold(t, node, tuple(b.gpu_indices))
            self.task_state[t] = _RUNNING
            self._sync_task(t)
            j = int(self.task_job[t])
            self.queue_wait[self.job_queue[j]] -= int(self.task_nominal[t])
            self.job_running_tasks[j] += 1
            touched.add(j)
        self.step_binds += len(out.binds)
        for j in sorted(touched):
            if not self.job_started[j] and self.job_running_tasks[j] >= self.job_min[j]:
                self._start(j, time)
        for e in out.evictions:
            t = self.task_index.get(e.task)
            if t is None or self.task_state[t] != _RUNNING:
                raise PlacementError(
                    "eviction of a task that is not running", kind="task", name=e.task
                )
            self.task_state[t] = _RELEASING
            self.task_record[t] = None
            self._sync_task(t)
            j = int(self.task_job[t])
            self.push(time + self.opts.eviction_grace, RELEASE, t, int(self.job_epoch[j]))
        self.step_evictions += len(out.evictions)
        self.step_pipelined += len(out.pipelined)
        waiting = [j for j in sorted(self.live) if not self.job_started[j]]
        for j in waiting:
            status = out.jobs.get(self.trace.jobs[j].job.name)
            if status is not None and status.phase in ("Pending", "Inqueue"):
                self.job_phase[j] = JobPhase(status.phase)
                self._sync_job(j)
        if self.opts.drop_unplaced:
            for j in waiting:
                if self.job_running_tasks[j] == 0:
                    self._finish(j, JobState.DROPPED, time)

    # -------------------------------------------------------------------------- recording

    def record(self, time: float) -> None:
        if self.dirty_nodes:
            rows = np.array(sorted(self.dirty_nodes), dtype=np.intp)
            part = fragment_terms(self._gpu_free(rows), self.typical)
            self.terms.fits_count[rows] = part.fits_count
            self.terms.small_sum[rows] = part.small_sum
            self.terms.idle[rows] = part.idle
            self.node_frag[rows] = node_fragment_from_terms(
                self.cap_cpu[rows] - self.used_cpu[rows], self.model_idx[rows], part, self.typical
            )
            self.dirty_nodes.clear()
        r = self.rows
        r["time"].append(time)
        r["gpu_alloc"].append(int(self.queue_alloc.sum()))
        r["cpu_alloc"].append(int(self.used_cpu.sum()))
        r["frag"].append(float(self.node_frag.sum()))
        r["idle"].append(int(self.terms.idle.sum()))
        r["arrived_gpu"].append(self.arrived_gpu)
        r["waiting"].append(self.n_waiting)
        r["running"].append(self.n_started)
        r["binds"].append(self.step_binds)
        r["evictions"].append(self.step_evictions)
        r["pipelined"].append(self.step_pipelined)
        r["queue_alloc"].append(self.queue_alloc.copy())
        r["queue_demand"].append(self.queue_alloc + self.queue_wait)
        self.step_binds = self.step_evictions = self.step_pipelined = 0

    # -------------------------------------------------------------------------- main loop

    def run(self) -> ReplayResult:
        self.record(0.0)
        until, period = self.opts.until, self.opts.period
        while self.heap:
            now = self.heap[0][0]
            if until is not None and now > until:
                break
            ticked = False
            while self.heap and self.heap[0][0] == now:
                _, kind, _, payload, epoch = heapq.heappop(self.heap)
                if kind == CYCLE:
                    ticked = True
                    self.n_events += 1
                else:
                    self.apply_event(now, kind, payload, epoch)
            if self.dirty and self.n_waiting > 0:
                if period == 0 or ticked or (now / period).is_integer():
                    self.cycle(now)
                elif self.next_tick <= now:
                    tick = math.ceil(now / period) * period
                    if tick <= now:  # rounding put the next multiple at now: it is a tick
                        self.cycle(now)
                    else:
                        self.next_tick = tick
                        self.push(tick, CYCLE, 0)
            self.record(now)
            if self.progress is not None:
                self.progress(
                    ReplayProgress(
                        time=now,
                        events=self.n_events,
                        cycles=self.n_cycles,
                        arrived=self.n_arrived,
                        n_jobs=len(self.trace.jobs),
                        running=self.n_started,
                        waiting=self.n_waiting,
                        finished=self.n_arrived - len(self.live),
                    )
                )
        return self.result()

    def result(self) -> ReplayResult:
        r = self.rows
        q = len(self.trace.queues)
        weight = np.array([queue.weight for queue in self.trace.queues], np.int64)
        steps = len(r["time"])
        demand = np.asarray(r["queue_demand"], dtype=np.int64).reshape(steps, q)
        w = np.maximum(weight, 1).astype(np.float64)
        fair = np.zeros(demand.shape, dtype=np.float64)
        for k in range(demand.shape[0]):
            fair[k] = fair_share(demand[k].astype(np.float64), w, float(self.total_gpu))
        return ReplayResult(
            time=np.asarray(r["time"], dtype=np.float64),
            gpu_alloc=np.asarray(r["gpu_alloc"], dtype=np.int64),
            cpu_alloc=np.asarray(r["cpu_alloc"], dtype=np.int64),
            frag=np.asarray(r["frag"], dtype=np.float64),
            idle=np.asarray(r["idle"], dtype=np.int64),
            arrived_gpu=np.asarray(r["arrived_gpu"], dtype=np.int64),
            waiting=np.asarray(r["waiting"], dtype=np.int64),
            running=np.asarray(r["running"], dtype=np.int64),
            binds=np.asarray(r["binds"], dtype=np.int64),
            evictions=np.asarray(r["evictions"], dtype=np.int64),
            pipelined=np.asarray(r["pipelined"], dtype=np.int64),
            queue_alloc=np.asarray(r["queue_alloc"], dtype=np.int64).reshape(steps, q),
            queue_demand=demand,
            queue_fair=fair,
            queue_names=tuple(queue.name for queue in self.trace.queues),
            queue_weight=weight,
            job_names=tuple(tj.job.name for tj in self.trace.jobs),
            job_queue=self.job_queue.copy(),
            job_gpu=self.job_gpu.copy(),
            job_arrival=np.array([float(tj.arrival) for tj in self.trace.jobs], dtype=np.float64),
            job_start=self.job_start.copy(),
            job_end=self.job_end.copy(),
            job_state=self.job_state.copy(),
            job_restarts=self.job_restarts.copy(),
            task_names=tuple(task.name for task in self.task_base),
            task_node=self.task_first_node.copy(),
            node_names=tuple(node.name for node in self.trace.nodes),
            total_gpu=self.total_gpu,
            total_cpu=int(self.cap_cpu.sum()),
            max_device_used=self.max_device,
            events=self.n_events,
            cycles=self.n_cycles,
        )


_ROW_KEYS = (
    "time",
    "gpu_alloc",
    "cpu_alloc",
    "frag",
    "idle",
    "arrived_gpu",
    "waiting",
    "running",
    "binds",
    "evictions",
    "pipelined",
    "queue_alloc",
    "queue_demand",
)


def replay(
    trace: Trace,
    options: ReplayOptions,
    *,
    progress: Callable[[ReplayProgress], None] | None = None,
) -> ReplayResult:
    """Replay ``trace`` under ``options`` (see the module docstring).

    Parameters
    ----------
    trace:
        The cluster, the jobs with arrival times and run times, the node failures.
    options:
        The scheduler configuration (and placer, registry) and the engine's rules.
    progress:
        Called after every time step with a :class:`ReplayProgress`.

    Returns
    -------
    ReplayResult
        Metrics over time and per job.

    Raises
    ------
    PlacementError
        A decision over-allocates a node or device, binds onto a failed node, or names a task
        that is not waiting.
    """
    if not isinstance(trace, Trace):
        raise ConfigError(
            f"expected a Trace, got {type(trace).__name__}", kind="replay", field="trace"
        )
    if not isinstance(options, ReplayOptions):
        raise ConfigError(
            f"expected ReplayOptions, got {type(options).__name__}", kind="replay", field="options"
        )
    return _Engine(trace, options, progress).run()
