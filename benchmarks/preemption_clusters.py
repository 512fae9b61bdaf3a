"""A second seeded generator for preemption and reclaim: openb machines, openb pod shapes,
several tenants.

``python benchmarks/preemption_clusters.py 2000`` prints the size of one cluster.

:func:`openb_preemption_dict` builds a snapshot in the interchange format from the openb data
vendored in the package (``gangsched.io.openb``):

* **nodes**: ``n_nodes`` machines drawn with replacement from the 1,213-node openb list (their
  CPU, memory, GPU count and model; GPUs shareable), racks of 64;
* **tenants**: six queues of weights 1–4, two of them of queue priority 1;
* **running work**: gangs of 1–16 pods, each gang of one openb pod shape (CPU, memory, whole
  GPUs or one shared GPU of 50–1000 milli-GPU), placed until about ``fill`` of the GPUs are
  held, mostly by the first three tenants (so they hold more than their deserved share and
  reclaim has victims); ``min_available`` is drawn below the gang size, so gangs have a
  surplus to give, and job priorities are 0–2;
* **waiting work**: about ``pending_per_node`` pods per node in gangs of 1–32 of one openb
  shape each (``min_available`` the gang size, or less for elastic ones), job priorities 0–4,
  mostly in the last three tenants: some jobs outrank running work of their own queue
  (preempt), others belong to queues below their share (reclaim).

Nothing is tuned to the victim search: shapes, sizes and tenants are drawn from the seed.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from gangsched.config.volcano import VOLCANO_PREEMPTION_CONF
from gangsched.io.openb import load_nodes, load_pods

__all__ = ["GENERATORS", "TENANTS", "VOLCANO_PREEMPTION_YAML", "openb_preemption_dict"]

#: Volcano's default tiers with the preemption actions: the configuration the preemption rows of
#: ``benchmarks/report.py`` time against the default one.
VOLCANO_PREEMPTION_YAML = VOLCANO_PREEMPTION_CONF

#: (name, weight, queue priority) of the tenants' queues.
TENANTS = (
    ("team-a", 1, 0),
    ("team-b", 2, 0),
    ("team-c", 2, 1),
    ("team-d", 3, 0),
    ("team-e", 4, 1),
    ("team-f", 4, 0),
)
_RUNNING_TENANTS = (0.35, 0.25, 0.2, 0.1, 0.05, 0.05)
_WAITING_TENANTS = (0.05, 0.1, 0.15, 0.2, 0.25, 0.25)
_RUNNING_GANGS = ((1, 2, 4, 8, 16), (30, 25, 20, 15, 10))
_WAITING_GANGS = ((1, 2, 4, 8, 16, 32), (30, 22, 18, 14, 10, 6))
RACK = 64


def _p(weights: tuple[float, ...]) -> np.ndarray[Any, Any]:
    w: np.ndarray[Any, Any] = np.array(weights, dtype=np.float64)
    out: np.ndarray[Any, Any] = w / w.sum()
    return out


def _gpu_request(count: int, milli: int) -> dict[str, int]:
    return {"count": count, "milli": milli} if milli < 1000 else {"count": count}


def openb_preemption_dict(
    n_nodes: int, seed: int = 0, *, fill: float = 0.7, pending_per_node: int = 2
) -> dict[str, Any]:
    """A multi-tenant cluster of ``n_nodes`` openb machines with running gangs to preempt or
    reclaim and waiting gangs that want them (see the module docstring)."""
    rng = np.random.default_rng(seed)
    table = load_nodes()
    pods = load_pods()
    shapes = np.flatnonzero(pods.num_gpu <= 8)
    picked = rng.integers(0, len(table), size=n_nodes)
    cpu = table.cpu_milli[picked].copy()
    mem = table.memory_mib[picked].copy()
    n_gpus = table.gpu_count[picked]
    devices = [np.full(int(g), 1000, dtype=np.int64) for g in n_gpus]  # free milli per device
    nodes = [
        {
            "name": f"openb-{i:05d}",
            "allocatable": {"cpu": f"{int(cpu[i])}m", "memory": f"{int(mem[i])}Mi", "pods": 110},
            "labels": {"rack": f"rack-{i // RACK:04d}"},
            **(
                {"gpus": {"count": int(n_gpus[i]), "model": table.model_of(int(picked[i]))}}
                if n_gpus[i]
                else {}
            ),
        }
        for i in range(n_nodes)
    ]
    jobs: list[dict[str, Any]] = []
    tasks: list[dict[str, Any]] = []
    total_gpus = int(n_gpus.sum()) * 1000
    held = 0
    creation = 0
    while held < fill * total_gpus and creation < 20 * n_nodes:
        shape = int(shapes[rng.integers(0, shapes.size)])
        size = int(rng.choice(_RUNNING_GANGS[0], p=_p(_RUNNING_GANGS[1])))
        c, m = int(pods.cpu_milli[shape]), int(pods.memory_mib[shape])
        g, gm = int(pods.num_gpu[shape]), int(pods.gpu_milli[shape]) if pods.num_gpu[shape] else 0
        name = f"run-{creation:06d}"
        placed: list[dict[str, Any]] = []
        for k in range(size):
            for node in rng.integers(0, n_nodes, size=8).tolist():
                if cpu[node] < c or mem[node] < m:
                    continue
                free = devices[node]
                use = np.flatnonzero(free >= gm)[:g] if g else np.zeros(0, dtype=np.int64)
                if use.size < g:
                    continue
                cpu[node] -= c
                mem[node] -= m
                free[use] -= gm
                held += g * gm
                task: dict[str, Any] = {
                    "name": f"{name}-{k}",
                    "job": name,
                    "role": "worker",
                    "request": {"cpu": f"{c}m", "memory": f"{m}Mi"},
                    "phase": "Running",
                    "node": f"openb-{node:05d}",
                }
                if g:
                    task["gpu_request"] = _gpu_request(g, gm)
                    task["gpu_indices"] = use.tolist()
                placed.append(task)
                break
        creation += 1
        if not placed:
            continue
        jobs.append(
            {
                "name": name,
                "queue": TENANTS[int(rng.choice(len(TENANTS), p=_p(_RUNNING_TENANTS)))][0],
                "min_available": int(rng.integers(1, len(placed) + 1)),
                "priority": int(rng.integers(0, 3)),
                "phase": "Running",
                "creation": creation,
            }
        )
        tasks.extend(placed)
    left = pending_per_node * n_nodes
    j = 0
    while left > 0:
        shape = int(shapes[rng.integers(0, shapes.size)])
        size = min(int(rng.choice(_WAITING_GANGS[0], p=_p(_WAITING_GANGS[1]))), left)
        c, m = int(pods.cpu_milli[shape]), int(pods.memory_mib[shape])
        g = int(pods.num_gpu[shape])
        name = f"wait-{j:06d}"
        elastic = rng.random() < 0.25
        jobs.append(
            {
                "name": name,
                "queue": TENANTS[int(rng.choice(len(TENANTS), p=_p(_WAITING_TENANTS)))][0],
                "min_available": int(rng.integers(1, size + 1)) if elastic else size,
                "priority": int(rng.integers(0, 5)),
                "phase": "Inqueue",
                "creation": creation + 1 + j,
            }
        )
        for k in range(size):
            task = {
                "name": f"{name}-{k}",
                "job": name,
                "role": "worker",
                "request": {"cpu": f"{c}m", "memory": f"{m}Mi"},
            }
            if g:
                task["gpu_request"] = _gpu_request(g, int(pods.gpu_milli[shape]))
            tasks.append(task)
        left -= size
        j += 1
    return {
        "nodes": nodes,
        "queues": [{"name": name, "weight": w, "priority": prio} for name, w, prio in TENANTS],
        "jobs": jobs,
        "tasks": tasks,
    }


def _cluster(n_nodes: int) -> dict[str, Any]:
    # imported here: the benchmark suite's generators live in the asv package
    from benchmarks.common import cluster_dict

    return cluster_dict(n_nodes, 4 * n_nodes, seed=0)


def _openb(n_nodes: int) -> dict[str, Any]:
    return openb_preemption_dict(n_nodes, seed=0)


#: The generators the preemption rows run on, by name: the benchmark's ``cluster_dict`` (four
#: pending tasks per node) and :func:`openb_preemption_dict`.
GENERATORS: tuple[tuple[str, Callable[[int], dict[str, Any]]], ...] = (
    ("cluster_dict", _cluster),
    ("openb_preemption", _openb),
)


def main(argv: list[str] | None = None) -> None:
    n = int((argv if argv is not None else sys.argv[1:])[0])
    d = openb_preemption_dict(n)
    running = sum(1 for t in d["tasks"] if t.get("phase") == "Running")
    print(
        f"{len(d['nodes'])} nodes, {len(d['jobs'])} jobs, {running} running tasks, "
        f"{len(d['tasks']) - running} waiting tasks"
    )


if __name__ == "__main__":
    main()
