"""Node builders the tests share: snapshot node records and Kubernetes Node manifests.

Each test file used to write its own; the defaults differ per file (a queue test's nodes are
64-cpu A100 machines, a consolidation test's 32-cpu ones with a pod limit), so a file binds its
defaults once and the record's shape is written here only.
"""

from __future__ import annotations

from typing import Any


def gpu_node(
    name: str,
    *,
    gpus: int | None = 8,
    cpu: Any = 64,
    memory: Any = "256Gi",
    pods: int | None = None,
    model: str | None = "A100",
    **extra: Any,
) -> dict[str, Any]:
    """A node record of the snapshot interchange format: ``gpus=None`` leaves the GPU block
    out, ``pods=None`` the pod limit, ``model=None`` the GPU model; ``extra`` adds fields
    (labels, taints, unschedulable)."""
    allocatable: dict[str, Any] = {"cpu": cpu, "memory": memory}
    if pods is not None:
        allocatable["pods"] = pods
    out: dict[str, Any] = {"name": name, "allocatable": allocatable}
    if gpus is not None:
        out["gpus"] = {"count": gpus} if model is None else {"count": gpus, "model": model}
    out.update(extra)
    return out


def gpu_nodes(n: int, **kw: Any) -> list[dict[str, Any]]:
    """``n`` nodes ``n0`` … ``n{n-1}`` built by :func:`gpu_node` with the same arguments."""
    return [gpu_node(f"n{i}", **kw) for i in range(n)]


def node_manifest(
    name: str = "n0",
    *,
    cpu: str = "64",
    memory: str = "512Gi",
    gpus: int = 0,
    labels: dict[str, str] | None = None,
    **metadata: Any,
) -> dict[str, Any]:
    """A Kubernetes ``v1 Node`` as the API returns it: allocatable cpu, memory and 110 pods,
    ``nvidia.com/gpu`` when ``gpus``; ``labels`` and further ``metadata`` fields as given."""
    allocatable = {"cpu": cpu, "memory": memory, "pods": "110"}
    if gpus:
        allocatable["nvidia.com/gpu"] = str(gpus)
    meta: dict[str, Any] = {"name": name, **metadata}
    if labels is not None:
        meta["labels"] = labels
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": meta,
        "status": {"allocatable": allocatable},
    }
