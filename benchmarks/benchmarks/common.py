"""Seeded cluster generators shared by the benchmarks.

Must not be changed -- only appended. A benchmark's history is only comparable while its inputs
stay the same, so existing generators and constants keep their exact behaviour; add new ones
below instead.

Everything is built from a seed with ``np.random.default_rng``; nothing is read from disk
except the openb node list vendored inside the package (``gangsched.io.openb.load_nodes()``),
which gives the 1,213-node heterogeneous GPU cluster.

Shapes
------
* Synthetic GPU clusters: racks of 64 nodes (``rack`` label, 640 nodes = 10 racks × 64 as in
  Kueue's TAS scenario), 8 GPUs per node (5,000 nodes = 40,000 GPUs), node shapes and GPU
  models varying by rack, about a third of the nodes partly used by running tasks.
* Pending load: gangs of 1–256 tasks (sizes 1, 2, 4, …, 256, small ones more frequent), one
  request template per gang (whole GPUs 1/2/4/8, half a GPU, or CPU-only), spread over four
  queues of weights 1–4. Jobs are Inqueue with ``min_available`` = gang size.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from gangsched import Snapshot
from gangsched.io.openb import load_nodes

__all__ = [
    "GANG_SIZES",
    "OPENB_NODES",
    "QUEUES",
    "cluster",
    "cluster_dict",
    "node_dicts",
    "openb_node_dicts",
    "pending_dicts",
]

#: Gang sizes and their relative frequency (mean ≈ 14 tasks per gang).
GANG_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
GANG_WEIGHTS = (24, 14, 12, 10, 8, 6, 3, 2, 1)
#: (name, weight) of the queues the pending gangs are spread over.
QUEUES = (("q0", 1), ("q1", 2), ("q2", 3), ("q3", 4))
#: Number of nodes of the vendored openb GPU cluster.
OPENB_NODES = 1213
RACK = 64

_NODE_SHAPES = (  # (cores, memory GiB, GPU model, GPU sharing)
    (96, 1024, "A100", False),
    (128, 2048, "H100", False),
    (64, 512, "V100", True),
    (96, 768, "A100", True),
)
_TEMPLATES = (  # (GPU count, milli per GPU, cores, memory GiB) of one gang's tasks
    (1, 1000, 8, 64),
    (2, 1000, 16, 128),
    (4, 1000, 32, 256),
    (8, 1000, 64, 512),
    (1, 500, 4, 32),
    (0, 0, 8, 32),
)
_TEMPLATE_WEIGHTS = (30, 15, 15, 20, 10, 10)


def _p(weights: tuple[int, ...]) -> np.ndarray[Any, Any]:
    w = np.array(weights, dtype=np.float64)
    out: np.ndarray[Any, Any] = w / w.sum()
    return out


def node_dicts(n_nodes: int, seed: int = 0, *, busy: float = 0.35) -> tuple[list[Any], list[Any]]:
    """``n_nodes`` synthetic GPU nodes and the running tasks that partly fill them.

    Returns ``(nodes, running_tasks)`` in the interchange format; the running tasks belong to
    one Running job per rack (``run-<rack>``) in queue ``q0``.
    """
    rng = np.random.default_rng(seed)
    nodes: list[Any] = []
    running: list[Any] = []
    shapes = rng.integers(0, len(_NODE_SHAPES), size=(n_nodes + RACK - 1) // RACK)
    held = rng.integers(1, 8, size=n_nodes)
    is_busy = rng.random(n_nodes) < busy
    for i in range(n_nodes):
        rack = i // RACK
        cores, mem, model, sharing = _NODE_SHAPES[int(shapes[rack])]
        name = f"node-{i:05d}"
        nodes.append(
            {
                "name": name,
                "allocatable": {"cpu": cores, "memory": f"{mem}Gi", "pods": 110},
                "gpus": {"count": 8, "model": model, "sharing": sharing},
                "labels": {"rack": f"rack-{rack:04d}", "nvidia.com/gpu.product": model},
            }
        )
        if is_busy[i]:
            k = int(held[i])
            running.append(
                {
                    "name": f"run-{rack:04d}-{i:05d}",
                    "job": f"run-{rack:04d}",
                    "request": {"cpu": 8 * k, "memory": f"{64 * k}Gi"},
                    "gpu_request": {"count": k},
                    "phase": "Running",
                    "node": name,
                    "gpu_indices": list(range(k)),
                }
            )
    return nodes, running


@functools.cache
def _openb_rows() -> tuple[tuple[str, int, int, int, str], ...]:
    table = load_nodes()
    return tuple(
        (
            table.names[i],
            int(table.cpu_milli[i]),
            int(table.memory_mib[i]),
            int(table.gpu_count[i]),
            table.model_of(i),
        )
        for i in range(len(table))
    )


def openb_node_dicts() -> list[Any]:
    """The 1,213 GPU nodes of the vendored openb trace (heterogeneous shapes and models)."""
    out: list[Any] = []
    for name, cpu, mem, gpus, model in _openb_rows():
        node: dict[str, Any] = {
            "name": name,
            "allocatable": {"cpu": f"{cpu}m", "memory": f"{mem}Mi", "pods": 110},
            "labels": {"rack": f"rack-{len(out) // RACK:04d}"},
        }
        if gpus:
            node["gpus"] = {"count": gpus, "model": model}
        out.append(node)
    return out


def pending_dicts(
    n_tasks: int,
    seed: int = 0,
    *,
    max_gang: int = 256,
    phase: str = "Inqueue",
    best_effort: int = 0,
) -> tuple[list[Any], list[Any]]:
    """Exactly ``n_tasks`` pending tasks in gangs of 1..``max_gang`` (jobs in ``phase``), then
    ``best_effort`` single best-effort pods (no request) as jobs of their own; returns
    ``(jobs, tasks)``."""
    rng = np.random.default_rng(seed + 1)
    sizes = [s for s in GANG_SIZES if s <= max_gang]
    weights = _p(GANG_WEIGHTS[: len(sizes)])
    jobs: list[Any] = []
    tasks: list[Any] = []
    left, j = n_tasks, 0
    while left > 0:
        size = min(int(rng.choice(sizes, p=weights)), left)
        gpus, milli, cores, mem = _TEMPLATES[
            int(rng.choice(len(_TEMPLATES), p=_p(_TEMPLATE_WEIGHTS)))
        ]
        name = f"job-{j:06d}"
        jobs.append(
            {
                "name": name,
                "queue": QUEUES[int(rng.integers(0, len(QUEUES)))][0],
                "min_available": size,
                "priority": int(rng.integers(0, 3)),
                "phase": phase,
                "creation": j,
            }
        )
        for k in range(size):
            task: dict[str, Any] = {
                "name": f"{name}-{k}",
                "job": name,
                "role": "worker",
                "request": {"cpu": cores, "memory": f"{mem}Gi"},
            }
            if gpus:
                task["gpu_request"] = {"count": gpus, "milli": milli}
            tasks.append(task)
        left -= size
        j += 1
    for b in range(best_effort):
        name = f"be-{b:06d}"
        jobs.append({"name": name, "queue": QUEUES[b % len(QUEUES)][0], "phase": phase})
        tasks.append({"name": f"{name}-0", "job": name, "role": "sidecar"})
    return jobs, tasks


def cluster_dict(
    n_nodes: int,
    n_pending: int,
    seed: int = 0,
    *,
    phase: str = "Inqueue",
    best_effort: int = 0,
    max_gang: int = 256,
) -> dict[str, Any]:
    """A whole snapshot in the interchange format: ``n_nodes`` nodes (the openb cluster when
    ``n_nodes == OPENB_NODES``), running load and ``n_pending`` pending tasks in gangs (see
    :func:`pending_dicts` for ``phase`` and ``best_effort``)."""
    if n_nodes == OPENB_NODES:
        nodes, running = openb_node_dicts(), list[dict[str, Any]]()
    else:
        nodes, running = node_dicts(n_nodes, seed)
    run_jobs = sorted({t["job"] for t in running})
    jobs, tasks = pending_dicts(
        n_pending, seed, phase=phase, best_effort=best_effort, max_gang=max_gang
    )
    return {
        "nodes": nodes,
        "queues": [{"name": name, "weight": w} for name, w in QUEUES],
        "jobs": [
            {"name": name, "queue": "q0", "min_available": 1, "phase": "Running"}
            for name in run_jobs
        ]
        + jobs,
        "tasks": running + tasks,
    }


@functools.lru_cache(maxsize=2)
def cluster(
    n_nodes: int,
    n_pending: int,
    seed: int = 0,
    *,
    phase: str = "Inqueue",
    best_effort: int = 0,
    max_gang: int = 256,
) -> Snapshot:
    """:func:`cluster_dict` as a validated :class:`~gangsched.Snapshot` (cached per process)."""
    return Snapshot.from_dict(
        cluster_dict(
            n_nodes, n_pending, seed, phase=phase, best_effort=best_effort, max_gang=max_gang
        )
    )
