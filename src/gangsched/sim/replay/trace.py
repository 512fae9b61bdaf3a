"""What a replay reads: the trace (cluster, jobs, failures) and the options."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gangsched.config import Config
from gangsched.errors import ConfigError
from gangsched.fragmentation import TypicalPods, typical_pods_of_tasks
from gangsched.framework.registry import Registry
from gangsched.limits import MAX_REPLAY_TIME, MIN_REPLAY_PERIOD
from gangsched.model import HyperNode, Job, JobPhase, Node, Queue, Task, TaskPhase
from gangsched.model.snapshot import Snapshot
from gangsched.placement import Placer

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]


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
    tasks = (task for tj in trace.jobs for task in tj.tasks)
    return typical_pods_of_tasks(tasks, trace_models(trace), threshold_pct=threshold_pct)


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
