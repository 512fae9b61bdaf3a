"""A small zoned cluster of gangs, shared by the tests of cycle-after-cycle reuse."""

from __future__ import annotations

from typing import Any


def zoned_cluster(
    n_nodes: int,
    jobs: int,
    *,
    queues: list[dict[str, Any]] | None = None,
    selector_every: int = 0,
) -> dict[str, Any]:
    """``n_nodes`` nodes of 8, 12 or 16 cpu in two zones and ``jobs`` gangs of 1 to 4 tasks
    (2 to 6 cpu each), admitted. With several ``queues`` the jobs take them in turn (one queue:
    the default one); with ``selector_every`` k, every k-th job's tasks ask for zone z0."""
    queues = queues or [{"name": "default"}]
    nodes = [
        {
            "name": f"n{i}",
            "allocatable": {"cpu": 8 + 4 * (i % 3), "memory": "32Gi", "pods": 20},
            "labels": {"zone": f"z{i % 2}"},
        }
        for i in range(n_nodes)
    ]
    job_recs, tasks = [], []
    for j in range(jobs):
        size = 1 + j % 4
        job: dict[str, Any] = {"name": f"j{j}", "min_available": size, "phase": "Inqueue"}
        if len(queues) > 1:
            job["queue"] = queues[j % len(queues)]["name"]
        job_recs.append(job)
        for k in range(size):
            task: dict[str, Any] = {
                "name": f"j{j}-{k}",
                "job": f"j{j}",
                "request": {"cpu": 2 + j % 5},
            }
            if selector_every and j % selector_every == 0:
                task["node_selector"] = {"zone": "z0"}
            tasks.append(task)
    return {"nodes": nodes, "queues": queues, "jobs": job_recs, "tasks": tasks}
