"""Every GPU node scorer on a cluster where no node has a GPU device: a task asking for GPUs
(a share of one device, one whole device or several) is refused with the scheduler's reason,
never a crash, in a cycle and in explain."""

from __future__ import annotations

import pytest

from gangsched import Config, Snapshot, explain, schedule
from gangsched.plugins.fgd_scores import SCORE_PLUGINS


def _snapshot(count: int, milli: int) -> Snapshot:
    return Snapshot.from_dict(
        {
            "nodes": [
                {"name": "n0", "allocatable": {"cpu": 4, "memory": "16Gi"}},
                {"name": "n1", "allocatable": {"cpu": 8, "memory": "32Gi"}},
            ],
            "queues": [{"name": "default"}],
            "jobs": [{"name": "j", "queue": "default", "min_available": 1, "phase": "Inqueue"}],
            "tasks": [
                {
                    "name": "t",
                    "job": "j",
                    "request": {"cpu": 1},
                    "gpu_request": {"count": count, "milli": milli},
                    "phase": "Pending",
                },
                {"name": "c", "job": "j", "request": {"cpu": 1}, "phase": "Pending"},
            ],
        }
    )


@pytest.mark.parametrize("policy", sorted(SCORE_PLUGINS))
@pytest.mark.parametrize(("count", "milli"), [(1, 500), (1, 1000), (2, 1000)])
def test_a_gpu_task_on_a_cluster_without_devices_is_refused(
    policy: str, count: int, milli: int
) -> None:
    config = Config.from_dict({"actions": ["allocate"], "tiers": [[{"name": policy}]]})
    snap = _snapshot(count, milli)
    decisions = schedule(snap, config)
    assert [b.task for b in decisions.binds] == ["c"]  # the CPU task still binds
    assert decisions.task_reasons["t"] == (
        "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
    )
    shown = explain(snap, "t", config)
    assert shown.best is None
