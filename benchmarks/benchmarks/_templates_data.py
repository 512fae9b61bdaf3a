"""A heterogeneous cluster where almost every job has a shape of its own.

Seeded generator (``np.random.default_rng``), never changed once released -- only appended:

* ``n_nodes`` nodes of mixed shapes: 1 to 8 GPUs (each count equally likely), one of three
  GPU models, 8 / 12 / 16 cores and 64 / 96 / 128 GiB per GPU, racks of 64 nodes; about a
  quarter of the nodes hold a running task (half of their GPUs and cores).
* ``n_jobs`` pending gangs of 1 to 64 tasks (sizes 1, 2, 4, ..., 64, small ones more frequent),
  each with its own request: cores in millicores, memory in MiB, and 0, 1, 2, 4 or 8 whole
  GPUs or a fraction of one; the (cores, memory, GPUs) triples are drawn until distinct, so
  the cluster has ``n_jobs`` distinct pending task templates. Jobs are Inqueue over four
  queues of weights 1 to 4, with ``min_available`` = gang size.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from gangsched import Snapshot

__all__ = ["TEMPLATE_GANGS", "templates_cluster", "templates_cluster_dict"]

#: Gang sizes and their relative frequency (mean ≈ 9 tasks per gang).
TEMPLATE_GANGS = ((1, 2, 4, 8, 16, 32, 64), (30, 20, 16, 14, 10, 6, 4))
_MODELS = ("A100", "H100", "L40")
_QUEUES = (("q0", 1), ("q1", 2), ("q2", 3), ("q3", 4))


def _nodes(rng: np.random.Generator, n_nodes: int) -> tuple[list[Any], list[Any], list[Any]]:
    nodes: list[Any] = []
    jobs: list[Any] = []
    tasks: list[Any] = []
    for i in range(n_nodes):
        gpus = int(rng.integers(1, 9))
        cores = gpus * int(rng.choice((8, 12, 16)))
        mem = gpus * int(rng.choice((64, 96, 128)))
        name = f"node-{i:05d}"
        nodes.append(
            {
                "name": name,
                "allocatable": {"cpu": cores, "memory": f"{mem}Gi", "pods": 110},
                "labels": {"rack": f"rack-{i // 64:03d}"},
                "gpus": {"count": gpus, "model": _MODELS[int(rng.integers(0, len(_MODELS)))]},
            }
        )
        if rng.random() < 0.25:
            job = f"run-{i:05d}"
            jobs.append({"name": job, "queue": "q0", "min_available": 1, "phase": "Running"})
            held = max(gpus // 2, 1)
            tasks.append(
                {
                    "name": f"{job}-0",
                    "job": job,
                    "phase": "Running",
                    "node": name,
                    "request": {"cpu": cores // 2, "memory": f"{mem // 2}Gi"},
                    "gpu_request": {"count": held, "milli": 1000},
                    "gpu_indices": list(range(held)),
                }
            )
    return nodes, jobs, tasks


def templates_cluster_dict(
    n_nodes: int = 5_000, n_jobs: int = 1_200, seed: int = 0
) -> dict[str, Any]:
    """The interchange form of the cluster (module docstring)."""
    rng = np.random.default_rng(seed)
    nodes, jobs, tasks = _nodes(rng, n_nodes)
    sizes, weights = TEMPLATE_GANGS
    p = np.array(weights, dtype=np.float64) / sum(weights)
    seen: set[tuple[int, int, int, int]] = set()
    for j in range(n_jobs):
        size = int(rng.choice(sizes, p=p))
        while True:
            count = int(rng.choice((0, 1, 1, 1, 2, 4, 8)))
            milli = int(rng.choice((250, 500, 1000))) if count == 1 else (1000 if count else 0)
            cpu = int(rng.integers(500, 8_000 * max(count, 1)))
            mem = int(rng.integers(1_024, 65_536 * max(count, 1)))
            key = (cpu, mem, count, milli)
            if key not in seen:
                seen.add(key)
                break
        name = f"job-{j:05d}"
        jobs.append(
            {
                "name": name,
                "queue": _QUEUES[int(rng.integers(0, len(_QUEUES)))][0],
                "min_available": size,
                "priority": int(rng.integers(0, 3)),
                "phase": "Inqueue",
                "creation": j,
            }
        )
        for k in range(size):
            task: dict[str, Any] = {
                "name": f"{name}-{k}",
                "job": name,
                "role": "worker",
                "request": {"cpu": f"{cpu}m", "memory": f"{mem}Mi"},
            }
            if count:
                task["gpu_request"] = {"count": count, "milli": milli}
            tasks.append(task)
    return {
        "nodes": nodes,
        "queues": [{"name": q, "weight": w} for q, w in _QUEUES],
        "jobs": jobs,
        "tasks": tasks,
    }


@functools.lru_cache(maxsize=2)
def templates_cluster(n_nodes: int = 5_000, n_jobs: int = 1_200, seed: int = 0) -> Snapshot:
    """:func:`templates_cluster_dict` as a validated snapshot (cached per process)."""
    return Snapshot.from_dict(templates_cluster_dict(n_nodes, n_jobs, seed))
