"""A long-lived ``ClusterState``: a snapshot after a few changes, against building one from
records, and what the state holds next to its snapshot.

Reference point: 5,000 nodes (40,000 GPUs) and 20,000 pending tasks (``common.cluster``).
Each timed call makes :data:`CHANGES` informer-style changes (cordons and task updates,
toggled so that repeats stay valid) and takes the snapshot; ``time_from_dict`` is the same
snapshot built from the interchange format from scratch.
"""

from __future__ import annotations

import dataclasses
import gc
import tracemalloc
from typing import Any

from gangsched import ClusterState, Config, Snapshot, TaskPhase, schedule

from .common import cluster, cluster_dict

#: Objects changed before each snapshot.
CHANGES = 10
SIZES = [(5000, 20_000)]


class Changes:
    """``CHANGES`` toggling changes on ``state``: cordons of a few nodes and priority updates
    of a few pending tasks. Each call flips them, so the state stays valid forever."""

    def __init__(self, state: ClusterState, count: int = CHANGES) -> None:
        self.state = state
        nodes = list(state.nodes.values())[: count // 2]
        pending = [t for t in state.tasks.values() if t.phase is TaskPhase.PENDING]
        tasks = pending[: count - len(nodes)]
        self.nodes = [(n, dataclasses.replace(n, unschedulable=not n.unschedulable)) for n in nodes]
        self.tasks = [(t, dataclasses.replace(t, priority=t.priority + 1)) for t in tasks]
        self.flip = 0

    def apply(self) -> None:
        k = self.flip
        for pair in self.nodes:
            self.state.update_node(pair[1 - k])
        for task_pair in self.tasks:
            self.state.update_task(task_pair[1 - k])
        self.flip = 1 - k


def held_bytes(build: Any) -> tuple[int, Any]:
    """Traced bytes still held by what ``build()`` returns."""
    gc.collect()
    tracemalloc.start()
    try:
        out = build()
        return tracemalloc.get_traced_memory()[0], out
    finally:
        tracemalloc.stop()


def memory_ratio(nodes: int, pending: int) -> tuple[int, int, float]:
    """(bytes of the snapshot, bytes of a state built from it on top, state / snapshot): the
    state holds the snapshot's records (shared) plus its own dicts and reverse references."""
    data = cluster_dict(nodes, pending)
    snap_bytes, snap = held_bytes(lambda: Snapshot.from_dict(data))
    extra, state = held_bytes(lambda: ClusterState(snap))
    del state
    return snap_bytes, extra, (snap_bytes + extra) / snap_bytes


class StateSnapshot:
    params = SIZES
    param_names = ("size",)
    timeout = 900

    def setup(self, size: tuple[int, int]) -> None:
        self.data = cluster_dict(*size)
        self.state = ClusterState(cluster(*size))
        self.changes = Changes(self.state)
        self.config = Config.default()

    def time_snapshot_after_changes(self, size: tuple[int, int]) -> None:
        self.changes.apply()
        self.state.snapshot()

    def time_from_dict(self, size: tuple[int, int]) -> None:
        Snapshot.from_dict(self.data)

    def time_cycle_after_changes(self, size: tuple[int, int]) -> None:
        self.changes.apply()
        self.state.schedule(self.config)

    def time_cycle_after_changes_applied(self, size: tuple[int, int]) -> None:
        # The embedding loop: each cycle's decisions are applied before the next changes.
        if not hasattr(self, "applied"):
            self.applied = ClusterState(cluster(*size))
            self.applied.apply(self.applied.schedule(self.config))
            self.applied_changes = Changes(self.applied)
        self.applied_changes.apply()
        self.applied.apply(self.applied.schedule(self.config))

    def time_cycle_from_scratch(self, size: tuple[int, int]) -> None:
        schedule(Snapshot.from_dict(self.data), self.config)

    def track_memory_ratio(self, size: tuple[int, int]) -> float:
        return memory_ratio(*size)[2]

    track_memory_ratio.unit = "state / snapshot"  # type: ignore[attr-defined]
