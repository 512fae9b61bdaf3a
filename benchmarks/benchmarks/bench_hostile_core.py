"""Cost guards for snapshot validation and the core cycle on hostile shapes.

* ``QueueChain`` — n queues in one parent chain. Validation walked every queue's chain anew
  (n², 8,000 queues: 3.3 s); it is one memoised pass now, and chains past
  ``Limits.max_queue_depth`` are refused in it. Timed with the depth limit raised to n, so the
  whole chain is validated.
* ``QueueForest`` — n queues in chains of 100 under one root, a job in the deepest queue, one
  cycle with hierarchical DRF (which recursed per queue level).
* ``DistinctTaints`` — n nodes each with its own NoSchedule taint and n tasks each tolerating
  one of them: the node × taint matrix made this about n^2.7 (2,000 nodes: 12 s).
* ``WideGpuNode`` — one 1,024-GPU node among n 8-GPU nodes: per-device arrays padded every node
  to 1,024 devices (8,000 nodes: 387 MB held by a session); peak memory of one cycle.

Inputs are generated here; nothing is read from disk.
"""

from __future__ import annotations

from typing import Any

from gangsched import Config, Snapshot, schedule
from gangsched.limits import Limits


def _node(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "allocatable": {"cpu": 8, "memory": "32Gi", "pods": 110}, **extra}


def _chain(n: int) -> dict[str, Any]:
    queues = [{"name": "q0"}] + [{"name": f"q{i}", "parent": f"q{i - 1}"} for i in range(1, n)]
    return {"nodes": [_node("n0")], "queues": queues}


class QueueChain:
    params = ([1_000, 4_000, 16_000],)
    param_names = ("queues",)

    def setup(self, n: int) -> None:
        self.doc = _chain(n)
        self.limits = Limits(max_queue_depth=n)

    def time_validate(self, n: int) -> None:
        Snapshot.from_dict(self.doc, limits=self.limits)


class QueueForest:
    params = ([1_000, 4_000],)
    param_names = ("queues",)

    def setup(self, n: int) -> None:
        queues: list[dict[str, Any]] = [{"name": "root"}]
        for i in range(1, n):
            queues.append({"name": f"q{i}", "parent": "root" if i % 100 == 1 else f"q{i - 1}"})
        self.snap = Snapshot.from_dict(
            {
                "nodes": [_node("n0")],
                "queues": queues,
                "jobs": [{"name": "j", "queue": f"q{n - 1}", "phase": "Inqueue"}],
                "tasks": [{"name": "t", "job": "j", "request": {"cpu": 1}}],
            }
        )
        self.config = Config.from_dict(
            {
                "actions": ["enqueue", "allocate"],
                "tiers": [
                    [{"name": "gang"}],
                    [{"name": "drf", "enableHierarchy": True}],
                ],
            }
        )

    def time_cycle(self, n: int) -> None:
        schedule(self.snap, self.config)


class DistinctTaints:
    params = ([250, 1_000, 2_000],)
    param_names = ("nodes",)
    timeout = 300

    def setup(self, n: int) -> None:
        self.snap = Snapshot.from_dict(
            {
                "nodes": [
                    _node(f"n{i}", taints=[{"key": f"k{i}", "value": "v", "effect": "NoSchedule"}])
                    for i in range(n)
                ],
                "queues": [{"name": "default"}],
                "jobs": [{"name": "j", "queue": "default", "phase": "Inqueue"}],
                "tasks": [
                    {
                        "name": f"t{i}",
                        "job": "j",
                        "request": {"cpu": 1},
                        "tolerations": [{"key": f"k{i}", "operator": "Exists"}],
                    }
                    for i in range(n)
                ],
            }
        )

    def time_cycle(self, n: int) -> None:
        schedule(self.snap)


class WideGpuNode:
    params = ([1_000, 8_000],)
    param_names = ("nodes",)
    timeout = 300

    def setup(self, n: int) -> None:
        nodes = [_node(f"n{i}", gpus={"count": 8}) for i in range(n - 1)]
        nodes.append(_node("wide", gpus={"count": 1024}))
        self.snap = Snapshot.from_dict(
            {
                "nodes": nodes,
                "queues": [{"name": "default"}],
                "jobs": [{"name": "j", "queue": "default", "phase": "Inqueue"}],
                "tasks": [
                    {"name": f"t{i}", "job": "j", "request": {"cpu": 1, "nvidia.com/gpu": 1}}
                    for i in range(64)
                ],
            }
        )

    def peakmem_cycle(self, n: int) -> None:
        schedule(self.snap)

    def time_cycle(self, n: int) -> None:
        schedule(self.snap)
