"""The scheduling core: snapshot construction, arrays, one full cycle and each action.

Sizes: 640 nodes (10 racks × 64), the 1,213-node openb cluster, 5,000 nodes (40,000 GPUs) and
50,000 nodes; 10,000 to 100,000 pending tasks in gangs of 1–256 (see ``common.py``). Only the
combinations in ``SIZES`` run; the others are skipped so ``asv run --quick`` stays short.
Quality is tracked beside speed: the GPU allocation ratio after one cycle and the number of
gangs that became ready.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from asv_runner.benchmarks import mark  # type: ignore[import-untyped]

from gangsched import Snapshot, schedule
from gangsched.actions.allocate import AllocateAction
from gangsched.actions.backfill import BackfillAction
from gangsched.actions.enqueue import EnqueueAction
from gangsched.decisions import Decisions
from gangsched.scheduler import open_session
from gangsched.session.arrays import build_cluster_arrays
from gangsched.session.core import Session

from .common import cluster, cluster_dict

NODES = [640, 1213, 5000, 50000]
PENDING = [10_000, 20_000, 100_000]
#: The (nodes, pending) pairs that run; 5,000 nodes × 20,000 tasks is the reference point.
SIZES = {(640, 10_000), (1213, 10_000), (5000, 20_000), (5000, 100_000), (50000, 20_000)}
_Bench = TypeVar("_Bench", bound=Callable[..., Any])


def skip_for_params(params: list[tuple[Any, ...]]) -> Callable[[_Bench], _Bench]:
    """asv's ``skip_for_params`` with its type (asv_runner ships no annotations)."""
    decorate: Callable[[_Bench], _Bench] = mark.skip_for_params(params)
    return decorate


SKIP = [(n, p) for n in NODES for p in PENDING if (n, p) not in SIZES]
BEST_EFFORT = 500
OCCUPYING = ("Bound", "Running", "Releasing")


class _Sized:
    params = (NODES, PENDING)
    param_names = ("nodes", "pending")
    timeout = 900


class SnapshotBuild(_Sized):
    """``Snapshot.from_dict``: parsing quantities and validating every record."""

    def setup(self, nodes: int, pending: int) -> None:
        self.data = cluster_dict(nodes, pending)

    @skip_for_params(SKIP)
    def time_from_dict(self, nodes: int, pending: int) -> None:
        Snapshot.from_dict(self.data)

    @skip_for_params(SKIP)
    def peakmem_from_dict(self, nodes: int, pending: int) -> None:
        Snapshot.from_dict(self.data)


class ArraysBuild(_Sized):
    """The columnar view of a snapshot, and a whole session opening (arrays, templates,
    plugin state)."""

    def setup(self, nodes: int, pending: int) -> None:
        self.snapshot = cluster(nodes, pending)

    @skip_for_params(SKIP)
    def time_build_cluster_arrays(self, nodes: int, pending: int) -> None:
        build_cluster_arrays(self.snapshot)

    @skip_for_params(SKIP)
    def peakmem_build_cluster_arrays(self, nodes: int, pending: int) -> None:
        build_cluster_arrays(self.snapshot)

    @skip_for_params(SKIP)
    def time_open_session(self, nodes: int, pending: int) -> None:
        open_session(self.snapshot)


def _gpu_ratio(snapshot: Snapshot, decisions: Decisions) -> float:
    """Per cent of GPU capacity held after the cycle: tasks already on nodes plus new binds."""
    devices = {n.name: n.gpus for n in snapshot.nodes}
    capacity = sum(g.count * g.milli for g in devices.values() if g is not None)
    where = {t.name: t.node for t in snapshot.tasks if t.phase.value in OCCUPYING}
    where.update((b.task, b.node) for b in decisions.binds)
    held = 0
    for task in snapshot.tasks:
        g, node = task.gpu_request, where.get(task.name)
        dev = devices[node] if node is not None else None
        if g is not None and dev is not None:
            held += g.count * (g.milli if dev.sharing and g.milli < dev.milli else dev.milli)
    return 100.0 * held / capacity if capacity else 0.0


class Cycle(_Sized):
    """One full cycle (enqueue, allocate, backfill) with Volcano's default configuration."""

    def setup(self, nodes: int, pending: int) -> None:
        self.snapshot = cluster(nodes, pending)

    @skip_for_params(SKIP)
    def time_schedule(self, nodes: int, pending: int) -> None:
        schedule(self.snapshot)

    @skip_for_params(SKIP)
    def peakmem_schedule(self, nodes: int, pending: int) -> None:
        schedule(self.snapshot)

    @skip_for_params(SKIP)
    def track_gpu_allocation_ratio(self, nodes: int, pending: int) -> float:
        return _gpu_ratio(self.snapshot, schedule(self.snapshot))

    track_gpu_allocation_ratio.unit = "%"  # type: ignore[attr-defined]

    @skip_for_params(SKIP)
    def track_gangs_placed(self, nodes: int, pending: int) -> int:
        d = schedule(self.snapshot)
        started = {j.name for j in self.snapshot.jobs if j.phase.value == "Running"}
        return sum(1 for name, s in d.jobs.items() if s.ready and name not in started)

    track_gangs_placed.unit = "gangs"  # type: ignore[attr-defined]


class CycleSmallGangs:
    """One full cycle, default configuration, 10,000 pending tasks in gangs of 1–64."""

    params = ([1000, 5000],)
    param_names = ("nodes",)
    timeout = 300

    def setup(self, nodes: int) -> None:
        self.snapshot = cluster(nodes, 10_000, max_gang=64)

    def time_schedule(self, nodes: int) -> None:
        schedule(self.snapshot)

    def track_tasks_placed(self, nodes: int) -> int:
        d = schedule(self.snapshot)
        return len(d.binds) + len(d.pipelined)

    track_tasks_placed.unit = "tasks"  # type: ignore[attr-defined]


class _Action(_Sized):
    """One action alone, on a session that ran the actions before it. Jobs start Pending and
    ``BEST_EFFORT`` best-effort pods are added so every action has work. One call per sample
    (``number = 1``, no warm-up): the action changes the session, so setup builds a fresh one."""

    number = 1
    repeat = (1, 5, 60.0)
    warmup_time = 0.0
    before: tuple[type[Any], ...] = ()

    def setup(self, nodes: int, pending: int) -> None:
        if (nodes, pending) not in SIZES:
            raise NotImplementedError
        snapshot = cluster(nodes, pending, phase="Pending", best_effort=BEST_EFFORT)
        self.ssn: Session = open_session(snapshot)
        for action in self.before:
            action({}).execute(self.ssn)


class Enqueue(_Action):
    @skip_for_params(SKIP)
    def time_enqueue(self, nodes: int, pending: int) -> None:
        EnqueueAction({}).execute(self.ssn)


class Allocate(_Action):
    before = (EnqueueAction,)

    @skip_for_params(SKIP)
    def time_allocate(self, nodes: int, pending: int) -> None:
        AllocateAction({}).execute(self.ssn)

    @skip_for_params(SKIP)
    def peakmem_allocate(self, nodes: int, pending: int) -> None:
        AllocateAction({}).execute(self.ssn)


class Backfill(_Action):
    before = (EnqueueAction, AllocateAction)

    @skip_for_params(SKIP)
    def time_backfill(self, nodes: int, pending: int) -> None:
        BackfillAction({}).execute(self.ssn)
