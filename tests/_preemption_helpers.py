"""Builders shared by the preemption, reclaim, policy and starvation tests, and a minimal
"caller" that applies decisions to a snapshot the way a cluster would."""

from __future__ import annotations

from typing import Any

import gangsched as gs
from gangsched.config import Config

GPU = "nvidia.com/gpu"

#: Volcano's CI tiers, with every preemption-related plugin on.
TIERS: list[list[dict[str, Any]]] = [
    [{"name": "priority"}, {"name": "gang"}, {"name": "conformance"}],
    [{"name": "drf"}, {"name": "predicates"}, {"name": "proportion"}, {"name": "nodeorder"}],
]


def config(
    *actions: str, tiers: list[list[dict[str, Any]]] | None = None, whole: bool = True
) -> Config:
    """A configuration of ``actions`` (default: every Volcano action but allocate's variants)
    over ``tiers``. With ``whole`` (the default here), ``preempt`` and ``reclaim`` may evict a
    gang whole (``allowWholeBundle: true``, the bundle search these tests exercise); without
    it they take only tasks above a gang's minimum, as Volcano's do."""
    listed = list(actions or ("enqueue", "allocate", "preempt", "reclaim", "backfill"))
    whole_args = {a: {"allowWholeBundle": True} for a in ("preempt", "reclaim") if a in listed}
    return Config.from_dict(
        {
            "actions": listed,
            "tiers": tiers or TIERS,
            **({"configurations": whole_args} if whole and whole_args else {}),
        }
    )


PREEMPT = config("enqueue", "allocate", "preempt", "backfill")
RECLAIM = config("enqueue", "allocate", "reclaim", "backfill")
BOTH = config()


def node(name: str, gpus: int = 4, cpu: int = 32, **extra: Any) -> dict[str, Any]:
    d: dict[str, Any] = {
        "name": name,
        "allocatable": {"cpu": cpu, "memory": "256Gi", "pods": 110},
        **extra,
    }
    if gpus:
        d["gpus"] = {"count": gpus, "model": "A100"}
    return d


def job(name: str, min_available: int = 1, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "queue": "default",
        "min_available": min_available,
        "phase": "Running",
        **extra,
    }


def running(
    job_name: str, spots: list[tuple[str, list[int]]], gpus: int = 1, **extra: Any
) -> list[dict[str, Any]]:
    """Running tasks ``<job>-<i>``, one per ``(node, gpu_indices)``."""
    return [
        {
            "name": f"{job_name}-{i}",
            "job": job_name,
            "request": {"cpu": 1, GPU: gpus} if gpus else {"cpu": 1},
            "phase": "Running",
            "node": n,
            "gpu_indices": idx,
            **extra,
        }
        for i, (n, idx) in enumerate(spots)
    ]


def pending(
    job_name: str, n: int, gpus: int = 1, start: int = 0, **extra: Any
) -> list[dict[str, Any]]:
    return [
        {
            "name": f"{job_name}-{i}",
            "job": job_name,
            "request": {"cpu": 1, GPU: gpus} if gpus else {"cpu": 1},
            **extra,
        }
        for i in range(start, start + n)
    ]


def snap(
    nodes: list[dict[str, Any]],
    jobs: list[dict[str, Any]],
    tasks: list[dict[str, Any]],
    queues: list[dict[str, Any]] | None = None,
    hypernodes: list[dict[str, Any]] | None = None,
) -> gs.Snapshot:
    return gs.Snapshot.from_dict(
        {
            "nodes": nodes,
            "hypernodes": hypernodes or [],
            "queues": queues or [{"name": "default"}],
            "jobs": jobs,
            "tasks": tasks,
        }
    )


def evicted(d: gs.Decisions) -> set[str]:
    return {e.task for e in d.evictions}


def jobs_hit(s: gs.Snapshot, d: gs.Decisions) -> set[str]:
    return {s.task(e.task).job for e in d.evictions}


def apply(s: gs.Snapshot, d: gs.Decisions) -> gs.Snapshot:
    """The cluster after the decisions: evicted tasks are Releasing, bound tasks Running,
    reserved tasks Pipelined (carried to the next cycle), jobs in their new phase."""
    out: dict[str, Any] = s.to_dict()
    binds = {b.task: b for b in d.binds}
    pipes = {p.task: p for p in d.pipelined}
    gone = evicted(d)
    for t in out["tasks"]:
        if t["name"] in gone:
            t["phase"] = "Releasing"
        elif t["name"] in binds:
            b = binds[t["name"]]
            t.update(phase="Running", node=b.node, gpu_indices=list(b.gpu_indices))
        elif t["name"] in pipes:
            p = pipes[t["name"]]
            t.update(phase="Pipelined", node=p.node, gpu_indices=list(p.gpu_indices))
    for j in out["jobs"]:
        status = d.jobs.get(j["name"])
        if status is not None and status.phase != "Unknown":
            j["phase"] = status.phase
    return gs.Snapshot.from_dict(out)


def settle(s: gs.Snapshot) -> gs.Snapshot:
    """Releasing tasks have terminated; their pods come back Pending (the job controller
    recreates them)."""
    out: dict[str, Any] = s.to_dict()
    for t in out["tasks"]:
        if t["phase"] == "Releasing":
            t["phase"] = "Pending"
            t.pop("node", None)
            t.pop("gpu_indices", None)
    return gs.Snapshot.from_dict(out)
