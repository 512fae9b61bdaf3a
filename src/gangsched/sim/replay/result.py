"""What a replay records: :class:`ReplayResult` and the fair-share reference."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from gangsched.errors import ConfigError
from gangsched.fragmentation import MILLI
from gangsched.sim.replay.trace import JobState

if TYPE_CHECKING:
    from gangsched.sim.replay.engine import Engine

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]


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
    # The allocation log, one entry per thing that happened, in the order it happened:
    # ``log_kind`` 0 a job arrived, 1 a task was bound (holds ``log_milli`` milli-GPU on node
    # ``log_node``), 2 a task freed what it held, 3 a job started, 4 a job goes back to the
    # queue (restart), 5 a job left (done, failed or dropped); ``log_who`` is the job's index
    # (in trace order) or the task's (the trace's tasks in job order).
    log_time: F64 | None = None
    log_kind: I64 | None = None
    log_who: I64 | None = None
    log_node: I64 | None = None
    log_milli: I64 | None = None

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


def fair_shares(demand: F64, weight: F64, capacity: float) -> F64:
    """:func:`fair_share` of every row of ``demand`` (T, Q) at once, each row the same
    figures, bit for bit, as :func:`fair_share` gives it alone: the same NumPy operations,
    each over a row as it is over the row alone (sums and running sums along a row, a stable
    sort of a row); the rows cut at the same place by where they cut take the same slice. A
    row whose cut the sorted search alone gives (its running figures not in order, or every
    queue below the level) goes through :func:`fair_share` itself."""
    d = np.maximum(np.asarray(demand, dtype=np.float64), 0.0)
    w = np.asarray(weight, dtype=np.float64)
    out: F64 = d.copy()
    if d.ndim != 2 or d.shape[0] == 0 or d.shape[1] == 0:
        for k in range(d.shape[0]):
            out[k] = fair_share(d[k], w, capacity)
        return out
    over = np.flatnonzero(d.sum(axis=1) > capacity)
    if over.size == 0:
        return out
    dv = d[over]
    ratio = dv / w
    order = np.argsort(ratio, axis=1, kind="stable")
    r = np.take_along_axis(ratio, order, axis=1)
    ds = np.take_along_axis(dv, order, axis=1)
    ws = w[order]
    given = np.cumsum(ds, axis=1) + r * (ws.sum(axis=1)[:, None] - np.cumsum(ws, axis=1))
    # (in order along its row, a row's sorted search is the count of the figures below)
    cut = (given < capacity).sum(axis=1)
    alone = ~(np.diff(given, axis=1) >= 0).all(axis=1) | (cut == d.shape[1])
    for i in np.flatnonzero(alone).tolist():
        out[over[i]] = fair_share(d[over[i]], w, capacity)
    for k in np.unique(cut[~alone]).tolist():
        rows = np.flatnonzero((cut == k) & ~alone)
        below = np.ascontiguousarray(ds[rows, :k]).sum(axis=1)
        rest = np.ascontiguousarray(ws[rows, k:]).sum(axis=1)
        level = (capacity - below) / rest
        out[over[rows]] = np.minimum(dv[rows], level[:, None] * w)
    return out


def collect(self: Engine) -> ReplayResult:
    """The result of a finished run of ``self`` (its recorded rows and per-job arrays)."""
    r = self.rows
    q = len(self.trace.queues)
    weight = np.array([queue.weight for queue in self.trace.queues], np.int64)
    steps = len(r["time"])
    demand = np.asarray(r["queue_demand"], dtype=np.int64).reshape(steps, q)
    w = np.maximum(weight, 1).astype(np.float64)
    fair = fair_shares(demand.astype(np.float64), w, float(self.total_gpu))
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
        **_log_arrays(self.log),
    )


def _log_arrays(log: list[tuple[float, int, int, int, int]]) -> dict[str, npt.NDArray[Any]]:
    """The engine's allocation log as the ``log_*`` arrays of :class:`ReplayResult`."""
    if not log:
        return {
            "log_time": np.zeros(0),
            **{k: np.zeros(0, np.int64) for k in ("log_kind", "log_who", "log_node", "log_milli")},
        }
    time, kind, who, node, milli = zip(*log, strict=True)
    return {
        "log_time": np.asarray(time, dtype=np.float64),
        "log_kind": np.asarray(kind, dtype=np.int64),
        "log_who": np.asarray(who, dtype=np.int64),
        "log_node": np.asarray(node, dtype=np.int64),
        "log_milli": np.asarray(milli, dtype=np.int64),
    }


def output_dir(path: str | Path) -> Path:
    """The directory a study writes its tables to, created if missing; a directory that cannot
    be created is a :class:`~gangsched.errors.ConfigError` naming it."""
    out = Path(path)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"cannot create: {exc.strerror}", kind="directory", name=str(out)
        ) from None
    return out
