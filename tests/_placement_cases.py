"""Cluster and problem builders shared by the placement tests."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from gangsched.model import Gpus, HyperNode, Node, TopologyMode
from gangsched.model.snapshot import Snapshot
from gangsched.model.topology import Topology
from gangsched.placement.problem import GangRequest, PlacementProblem

GIB = 2**30


def fat_tree_snapshot(
    spines: int = 2, racks: int = 4, nodes: int = 8, gpus: int = 8, cpu: int = 64
) -> Snapshot:
    """``spines`` × ``racks`` × ``nodes`` machines of ``gpus`` GPUs; racks tier 1, spines 2."""
    ns: list[Node] = []
    hns: list[HyperNode] = []
    for s in range(spines):
        rack_names = []
        for r in range(racks):
            names = [f"s{s}r{r}n{i}" for i in range(nodes)]
            ns.extend(
                Node(
                    name=n,
                    allocatable={"cpu": cpu, "memory": "512Gi", "pods": 110},
                    gpus=Gpus(count=gpus, model="H100"),
                )
                for n in names
            )
            hns.append(HyperNode(name=f"s{s}r{r}", tier=1, members=names))
            rack_names.append(f"s{s}r{r}")
        hns.append(HyperNode(name=f"s{s}", tier=2, members=rack_names))
    return Snapshot(nodes=ns, hypernodes=hns)


def problem_for(
    topo: Topology,
    gangs: Sequence[GangRequest],
    *,
    free: npt.NDArray[np.int64] | None = None,
    gpu_free: npt.NDArray[np.int64] | None = None,
    gpus: int = 8,
    cpu: int = 64,
    weights: Sequence[int] | None = None,
    sharing: bool = True,
) -> PlacementProblem:
    n = topo.n_nodes
    alloc = np.tile(np.array([cpu * 1000, 512 * GIB], dtype=np.int64), (n, 1))
    return PlacementProblem(
        free=alloc.copy() if free is None else free,
        allocatable=alloc,
        gpu_free=np.full((n, gpus), 1000, dtype=np.int64) if gpu_free is None else gpu_free,
        gpu_capacity=np.full(n, 1000 if gpus else 0, dtype=np.int64),
        gpu_sharing=np.full(n, sharing),
        topology=topo,
        gangs=tuple(gangs),
        weights=None if weights is None else np.array(weights, dtype=np.int64),
    )


def gpu_gang(
    name: str,
    replicas: int,
    n_nodes: int,
    *,
    gpus_per_replica: int = 1,
    milli: int = 1000,
    cpu_m: int = 1000,
    mode: TopologyMode | None = TopologyMode.HARD,
    highest_tier: int | None = 2,
    **extra: Any,
) -> GangRequest:
    return GangRequest(
        name=name,
        request=np.array([[cpu_m, GIB]], dtype=np.int64),
        counts=np.array([replicas], dtype=np.int64),
        mask=np.ones((1, n_nodes), dtype=np.bool_),
        gpu_count=np.array([gpus_per_replica], dtype=np.int64),
        gpu_milli=np.array([milli], dtype=np.int64),
        mode=mode,
        highest_tier=highest_tier if mode is TopologyMode.HARD else None,
        **extra,
    )
