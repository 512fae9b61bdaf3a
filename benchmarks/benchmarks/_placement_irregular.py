"""Seeded irregular placement problems: the clusters and gangs people actually run.

Nothing here shares a generator with ``_placement_data`` (regular racks and spines, identical
nodes, one-template gangs). Clusters (:func:`cluster`):

* an irregular tree: racks of 4–20 nodes (tier 1); about 65 % of them under spines of 2–10
  racks (tier 3 — tier 2 is a gap), the rest under no spine; about 5 % of the groups are
  spines listing their nodes directly (no rack); about 3 % of the nodes in no domain at all;
* heterogeneous nodes: 0, 1, 2, 4 or 8 GPUs, 16–128 cores; about 40 % of the nodes partly
  busy; about 15 % of the GPU nodes share their devices, with devices partly used (250–750
  milli taken);
* about 5 % of the nodes cordoned: every gang's mask leaves them out.

Gangs: :func:`multirole_problem` is one multi-role gang (1–8-GPU workers, a CPU launcher with
role minimum 1, two half-GPU evaluators with role minimum 0), hard up to the spine tier.
:func:`joint_mixed_problem` is 50 competing gangs of mixed shapes (1/2/4/8-GPU workers,
half-GPU gangs, worker + launcher), hard, soft or free, weights 1–3, with about 80 % of the
demand fitting (``masked=False``: the same without the cordoned nodes masked out);
:func:`joint_same_problem` is 50 gangs of one shape (1-GPU workers) with the
cordoned nodes masked out.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gangsched.model import HyperNode, Node, TopologyMode
from gangsched.model.snapshot import Snapshot
from gangsched.model.topology import Topology, build_topology
from gangsched.placement.problem import GangRequest, PlacementProblem

__all__ = ["cluster", "joint_mixed_problem", "joint_same_problem", "multirole_problem"]

GIB = 2**30
SPINE_TIER = 3
I64 = npt.NDArray[np.int64]
BOOL = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class Cluster:
    topology: Topology
    alloc: I64  # (n, 2) cpu milli, memory bytes
    free: I64
    gpu_free: I64  # (n, 8)
    gpu_capacity: I64
    gpu_count: I64
    gpu_sharing: BOOL
    cordoned: BOOL


@functools.lru_cache(maxsize=16)
def cluster(n: int, seed: int) -> Cluster:
    rng = np.random.default_rng(seed * 7919 + n)
    names = [f"n{i}" for i in range(n)]
    nodes = [Node(name=x, allocatable={"cpu": 1}) for x in names]
    perm = rng.permutation(n)
    loose = perm[: max(1, n * 3 // 100)]  # in no domain
    rest = perm[loose.size :]
    racks: list[list[int]] = []
    i = 0
    while i < rest.size:
        k = int(rng.integers(4, 21))
        racks.append(sorted(rest[i : i + k].tolist()))
        i += k
    hns = [
        HyperNode(name=f"rack{r}", tier=1, members=[names[x] for x in m])
        for r, m in enumerate(racks)
    ]
    order = rng.permutation(len(racks)).tolist()
    direct = order[: max(1, len(order) // 20)]  # these racks' nodes sit in a spine directly
    under = order[len(direct) : len(direct) + int(len(order) * 0.65)]
    s = 0
    for r in direct:
        hns[r] = HyperNode(name=f"spine{s}", tier=SPINE_TIER, members=hns[r].members)
        s += 1
    j = 0
    while j < len(under):
        k = int(rng.integers(2, 11))
        members = [f"rack{r}" for r in sorted(under[j : j + k])]
        hns.append(HyperNode(name=f"spine{s}", tier=SPINE_TIER, members=members))
        s += 1
        j += k
    topo = build_topology(Snapshot(nodes=nodes, hypernodes=hns))
    gcount = rng.choice([0, 1, 2, 4, 8], size=n, p=[0.1, 0.1, 0.15, 0.25, 0.4]).astype(np.int64)
    cores = rng.choice([16, 32, 64, 96, 128], size=n).astype(np.int64)
    alloc = np.column_stack([cores * 1000, cores * 8 * GIB]).astype(np.int64)
    busy_share = np.where(rng.random(n) < 0.4, rng.random(n), 0.0)
    free = np.floor(alloc * (1.0 - busy_share[:, None])).astype(np.int64)
    sharing = (rng.random(n) < 0.15) & (gcount > 0)
    dev = np.arange(8)[None, :] < gcount[:, None]
    busy_dev = dev & (rng.random((n, 8)) < busy_share[:, None])
    gpu_free = np.where(dev, 1000, 0).astype(np.int64)
    gpu_free[busy_dev] = 0
    part = dev & sharing[:, None] & (rng.random((n, 8)) < 0.5)
    gpu_free[part] = np.minimum(gpu_free[part], rng.choice([250, 500, 750], size=int(part.sum())))
    cordoned = rng.random(n) < 0.05
    return Cluster(
        topology=topo,
        alloc=alloc,
        free=free,
        gpu_free=gpu_free,
        gpu_capacity=np.where(gcount > 0, 1000, 0).astype(np.int64),
        gpu_count=gcount,
        gpu_sharing=sharing,
        cordoned=cordoned,
    )


def _problem(c: Cluster, gangs: tuple[GangRequest, ...], weights: I64 | None) -> PlacementProblem:
    return PlacementProblem(
        free=c.free,
        allocatable=c.alloc,
        gpu_free=c.gpu_free,
        gpu_capacity=c.gpu_capacity,
        gpu_count=c.gpu_count,
        gpu_sharing=c.gpu_sharing,
        topology=c.topology,
        gangs=gangs,
        weights=weights,
    )


def _gang(
    name: str,
    c: Cluster,
    roles: list[tuple[int, int, int, int, int]],  # (count, min, cpu milli, gpus, milli)
    *,
    mode: TopologyMode | None,
    tier: int | None,
    masked: bool = True,
) -> GangRequest:
    n = c.topology.n_nodes
    allowed = ~c.cordoned if masked else np.ones(n, dtype=np.bool_)
    mask = np.tile(allowed, (len(roles), 1))
    return GangRequest(
        name=name,
        request=np.array([[cpu, cpu * 4 * GIB // 1000] for _, _, cpu, _, _ in roles], np.int64),
        counts=np.array([r[0] for r in roles], dtype=np.int64),
        min_counts=np.array([r[1] for r in roles], dtype=np.int64),
        mask=mask.reshape(len(roles), n),
        gpu_count=np.array([r[3] for r in roles], dtype=np.int64),
        gpu_milli=np.array([r[4] for r in roles], dtype=np.int64),
        mode=mode,
        highest_tier=tier if mode is TopologyMode.HARD else None,
    )


def multirole_problem(n: int, gpus: int, seed: int) -> PlacementProblem:
    """One multi-role gang asking ``gpus`` worker GPUs on cluster ``(n, seed)``."""
    c = cluster(n, seed)
    rng = np.random.default_rng(seed + 31 * gpus)
    per = int(rng.choice([g for g in (1, 2, 4, 8) if g <= gpus]))
    workers = gpus // per
    roles = [
        (workers, 0, 4000, per, 1000),
        (1, 1, 2000, 0, 0),  # launcher
        (2, 0, 1000, 1, 500),  # evaluators
    ]
    gang = _gang("job", c, roles, mode=TopologyMode.HARD, tier=SPINE_TIER)
    return _problem(c, (gang,), None)


def joint_mixed_problem(
    n: int, seed: int, n_gangs: int = 50, *, masked: bool = True
) -> PlacementProblem:
    """``n_gangs`` gangs of mixed shapes; the demand is about 1.25× what fits. ``masked``:
    the cordoned nodes are masked out (else every gang may use every node)."""
    c = cluster(n, seed)
    rng = np.random.default_rng(seed + 1_000)
    gangs: list[GangRequest] = []
    for i in range(n_gangs):
        kind = int(rng.integers(0, 4))
        size = int(rng.choice([1, 2, 4, 8, 16]))
        if kind == 0:  # whole-GPU workers
            per = int(rng.choice([1, 2, 4, 8]))
            roles = [(size, 0, 4000, per, 1000)]
        elif kind == 1:  # half-GPU
            roles = [(size, 0, 2000, 1, 500)]
        elif kind == 2:  # worker + launcher
            per = int(rng.choice([1, 2, 4]))
            roles = [(size, 0, 4000, per, 1000), (1, 1, 2000, 0, 0)]
        else:  # CPU-only
            roles = [(size, 0, 8000, 0, 0)]
        mode = [TopologyMode.HARD, TopologyMode.SOFT, None][int(rng.integers(0, 3))]
        tier = int(rng.choice([1, SPINE_TIER]))
        gangs.append(_gang(f"g{i}", c, roles, mode=mode, tier=tier, masked=masked))
    return _scale_supply(c, tuple(gangs), rng, masked=masked)


def joint_same_problem(n: int, seed: int, n_gangs: int = 50) -> PlacementProblem:
    """``n_gangs`` gangs of 1-GPU workers (1–16 replicas, hard at the rack or the spine tier,
    or soft), the cordoned nodes masked out; the demand is about 1.25× what fits."""
    c = cluster(n, seed)
    rng = np.random.default_rng(seed + 2_000)
    gangs = []
    for i in range(n_gangs):
        size = int(rng.choice([1, 2, 4, 8, 16]))
        mode = [TopologyMode.HARD, TopologyMode.SOFT][int(rng.integers(0, 2))]
        tier = int(rng.choice([1, SPINE_TIER]))
        gangs.append(_gang(f"g{i}", c, [(size, 0, 4000, 1, 1000)], mode=mode, tier=tier))
    return _scale_supply(c, tuple(gangs), rng)


def _scale_supply(
    c: Cluster, gangs: tuple[GangRequest, ...], rng: np.random.Generator, masked: bool = True
) -> PlacementProblem:
    """Take GPUs away (whole nodes' devices) until the free GPUs are about 80 % of the GPU
    demand, so the gangs compete."""
    demand = 0.0
    for g in gangs:
        assert g.gpu_count is not None and g.gpu_milli is not None
        demand += float((g.counts * g.gpu_count * g.gpu_milli).sum()) / 1000
    ok = ~c.cordoned if masked else np.ones(c.topology.n_nodes, dtype=np.bool_)
    supply = float(c.gpu_free[ok].sum()) / 1000
    gpu_free = c.gpu_free
    if supply > 0.8 * demand > 0:
        keep = rng.random(c.topology.n_nodes) < 0.8 * demand / supply
        gpu_free = np.where(keep[:, None], gpu_free, 0)
    weights = rng.integers(1, 4, len(gangs)).astype(np.int64)
    return PlacementProblem(
        free=c.free,
        allocatable=c.alloc,
        gpu_free=gpu_free,
        gpu_capacity=c.gpu_capacity,
        gpu_count=c.gpu_count,
        gpu_sharing=c.gpu_sharing,
        topology=c.topology,
        gangs=gangs,
        weights=weights,
    )
