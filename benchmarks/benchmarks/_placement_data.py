"""Seeded placement problems for the placement benchmarks (nothing read from disk).

Cluster: ``n`` nodes of 8 GPUs, 96 cores and 1 TiB; racks of 16 nodes (tier 1) under spines of
8 racks (tier 2). About 40 % of the nodes are idle; the others have 1–8 GPUs (and the matching
share of cores and memory) held by running work, so racks are partly used.

Gangs: ``size`` replicas of one GPU each (8 cores, 64 GiB), hard topology up to the spine tier;
for the joint problems, 50 gangs of 4–64 GPUs with weights 1–3, half of them rack-bound.
"""

from __future__ import annotations

import functools

import numpy as np
import numpy.typing as npt

from gangsched.model import Gpus, HyperNode, Node, TopologyMode
from gangsched.model.snapshot import Snapshot
from gangsched.model.topology import Topology, build_topology
from gangsched.placement.problem import GangRequest, PlacementProblem

__all__ = ["RACK", "SPINE", "gang", "joint_problem", "problem", "topology"]

RACK = 16
SPINE = 8
GIB = 2**30
CORES = 96
MEMORY = 1024 * GIB
I64 = npt.NDArray[np.int64]


@functools.lru_cache(maxsize=8)
def topology(n: int) -> Topology:
    """Racks of ``RACK`` nodes under spines of ``SPINE`` racks."""
    nodes = [Node(name=f"n{i}", allocatable={"cpu": CORES}, gpus=Gpus(count=8)) for i in range(n)]
    racks = [[f"n{i}" for i in range(r, min(r + RACK, n))] for r in range(0, n, RACK)]
    hns = [HyperNode(name=f"rack{r}", tier=1, members=m) for r, m in enumerate(racks)]
    spines = [list(range(s, min(s + SPINE, len(racks)))) for s in range(0, len(racks), SPINE)]
    hns += [
        HyperNode(name=f"spine{s}", tier=2, members=[f"rack{r}" for r in m])
        for s, m in enumerate(spines)
    ]
    return build_topology(Snapshot(nodes=nodes, hypernodes=hns))


def _occupancy(n: int, seed: int) -> tuple[I64, I64, I64]:
    rng = np.random.default_rng(seed)
    busy = np.where(rng.random(n) < 0.4, 0, rng.integers(1, 9, n))
    gpu_free = (np.arange(8)[None, :] >= busy[:, None]).astype(np.int64) * 1000
    alloc = np.tile(np.array([CORES * 1000, MEMORY], dtype=np.int64), (n, 1))
    free = alloc - np.column_stack([busy * 8000, busy * 64 * GIB]).astype(np.int64)
    return alloc, free, gpu_free


def gang(
    name: str, size: int, n: int, *, tier: int = 2, mask: npt.NDArray[np.bool_] | None = None
) -> GangRequest:
    return GangRequest(
        name=name,
        request=np.array([[8000, 64 * GIB]], dtype=np.int64),
        counts=np.array([size], dtype=np.int64),
        mask=np.ones((1, n), dtype=np.bool_) if mask is None else mask,
        gpu_count=np.array([1]),
        gpu_milli=np.array([1000]),
        mode=TopologyMode.HARD,
        highest_tier=tier,
    )


def problem(n: int, size: int, seed: int) -> PlacementProblem:
    """One gang of ``size`` one-GPU replicas on an ``n``-node cluster."""
    alloc, free, gpu_free = _occupancy(n, seed)
    return PlacementProblem(
        free=free,
        allocatable=alloc,
        gpu_free=gpu_free,
        gpu_capacity=np.full(n, 1000, dtype=np.int64),
        gpu_sharing=np.zeros(n, dtype=np.bool_),
        topology=topology(n),
        gangs=(gang("g", size, n),),
    )


def joint_problem(n: int, n_gangs: int, seed: int) -> PlacementProblem:
    """``n_gangs`` gangs of 4–64 GPUs (weights 1–3) competing for an ``n``-node cluster whose
    free GPUs fall short of the total demand."""
    rng = np.random.default_rng(seed + 10_000)
    alloc, free, gpu_free = _occupancy(n, seed)
    sizes = rng.choice([4, 8, 16, 32, 64], size=n_gangs, p=[0.3, 0.3, 0.2, 0.12, 0.08])
    gangs = tuple(
        gang(f"g{i}", int(s), n, tier=1 if i % 2 else 2) for i, s in enumerate(sizes.tolist())
    )
    # keep demand above supply: shrink the free GPUs to ~80 % of the demand
    demand = int(sizes.sum())
    supply = int((gpu_free > 0).sum())
    if supply > 0.8 * demand:
        keep = rng.random(n) < 0.8 * demand / supply
        gpu_free = np.where(keep[:, None], gpu_free, 0)
    return PlacementProblem(
        free=free,
        allocatable=alloc,
        gpu_free=gpu_free,
        gpu_capacity=np.full(n, 1000, dtype=np.int64),
        gpu_sharing=np.zeros(n, dtype=np.bool_),
        topology=topology(n),
        gangs=gangs,
        weights=rng.integers(1, 4, n_gangs).astype(np.int64),
    )
