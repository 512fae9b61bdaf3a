"""Seeded placement problems on the openb cluster: real machines, real occupancy, gangs with roles.

The third placement generator, next to ``_placement_data`` (regular racks of identical nodes,
one-template gangs) and ``_placement_irregular`` (irregular trees, synthetic heterogeneous
nodes). It shares no code with either. Its inputs are the node and pod lists of the Alibaba
GPU trace that ship with gangsched (``gangsched/data/openb``, read through
:mod:`gangsched.io.openb`); the gang sizes follow the Microsoft ITP job trace (ElasticFlow,
ASPLOS '23, MIT licence: jobs by GPUs asked 1: 57,682, 2: 1,483, 4: 2,371, 8: 7,009,
16: 381, 32: 354, 64: 71; the figures are quoted below, nothing else is taken from it).

Cluster (:func:`cluster`, cached per ``(n, seed)``):

* machines: the trace's 1,213 GPU nodes (8-GPU G2 / G3 / V100, 2-GPU T4 / P100, ...) with their
  cores, memory, GPU count and GPU model. ``n`` below 1,213 draws ``n`` of them; above, the list
  is repeated (each copy a new set of machines) until there are ``n``;
* topology: a datacenter's grouping of like machines: racks (tier 1) of 8–16 machines of one
  model, blocks (tier 2) of 4–8 consecutive racks, zones (tier 3) of 6–12 blocks;
* occupancy: the trace's pods, drawn in a seeded order and put where they fit (their
  ``gpu_spec`` honoured, fractional GPUs sharing a device) until 40–70 % of the GPUs are
  taken: a GPU pod goes to a machine with the fewest free GPUs that holds it 70 % of the time
  (a bin-packing scheduler), else to a random one; every machine shares its devices, as in
  the trace;
* about 2 % of the machines are cordoned: no gang may use them.

Gangs (:func:`gang`): a parameter-server / launcher role of CPU only (1–4 replicas, all of
them required) and a worker role of 1, 2, 4 or 8 whole GPUs each, restricted to a GPU-model
selector (one model or a family, the trace's ``gpu_spec`` habit, among those with twice the
workers' GPUs free), hard inside a block (tier 2)
or a zone (tier 3), or soft. :func:`single_problem` is one gang asking ``gpus`` worker GPUs;
:func:`joint_problem` 50 gangs drawn from the ITP sizes (multi-node ones over-represented:
8–64 GPUs), weights 1–3, the demand about 1.25× the free GPUs their selectors allow.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gangsched.io.openb import load_nodes, load_pods
from gangsched.model import HyperNode, Node, TopologyMode
from gangsched.model.fields import Resources
from gangsched.model.snapshot import Snapshot
from gangsched.model.topology import Topology, build_topology
from gangsched.placement.problem import GangRequest, PlacementProblem

__all__ = ["SELECTORS", "cluster", "gang", "joint_problem", "single_problem"]

MIB = 2**20
I64 = npt.NDArray[np.int64]
BOOL = npt.NDArray[np.bool_]
#: GPU-model selectors of the worker role (``None``: any model).
SELECTORS: tuple[tuple[str, ...] | None, ...] = (
    None,
    ("G2",),
    ("G2", "G3"),
    ("V100M16", "V100M32"),
    ("T4",),
    ("P100",),
)
#: Jobs by GPUs asked in the ITP trace (ElasticFlow's raw traces, all ten clusters).
ITP_GPUS = {1: 57_682, 2: 1_483, 4: 2_371, 8: 7_009, 16: 381, 32: 354, 64: 71}


@dataclass(frozen=True)
class Cluster:
    topology: Topology
    alloc: I64  # (n, 2) cpu milli, memory bytes
    free: I64
    gpu_free: I64  # (n, 8)
    gpu_count: I64
    model: tuple[str, ...]  # GPU model per node
    cordoned: BOOL


@functools.lru_cache(maxsize=16)
def cluster(n: int, seed: int) -> Cluster:
    rng = np.random.default_rng(seed * 104_729 + n)
    table = load_nodes()
    m = len(table)
    if n <= m:
        rows = np.sort(rng.choice(m, size=n, replace=False))
    else:
        rows = np.concatenate([np.arange(m)] * (n // m) + [np.sort(rng.choice(m, n % m, False))])
    models = np.array([table.model_of(int(r)) for r in rows])
    order = np.lexsort((rows, models))  # like machines side by side
    rows, models = rows[order], models[order]
    names = [f"m{i}" for i in range(n)]
    hns: list[HyperNode] = []
    racks: list[str] = []
    i = 0
    while i < n:
        k = int(rng.integers(8, 17))
        j = i + 1
        while j < n and j - i < k and models[j] == models[i]:
            j += 1
        racks.append(f"rack{len(racks)}")
        hns.append(HyperNode(name=racks[-1], tier=1, members=tuple(names[i:j])))
        i = j
    blocks: list[str] = []
    i = 0
    while i < len(racks):
        k = int(rng.integers(4, 9))
        blocks.append(f"block{len(blocks)}")
        hns.append(HyperNode(name=blocks[-1], tier=2, members=tuple(racks[i : i + k])))
        i += k
    i = z = 0
    while i < len(blocks):
        k = int(rng.integers(6, 13))
        hns.append(HyperNode(name=f"zone{z}", tier=3, members=tuple(blocks[i : i + k])))
        i, z = i + k, z + 1
    nodes = tuple(Node(name=x, allocatable=Resources({"cpu": 1})) for x in names)
    topo = build_topology(Snapshot(nodes=nodes, hypernodes=tuple(hns)))
    cpu = table.cpu_milli[rows].astype(np.int64)
    mem = table.memory_mib[rows].astype(np.int64) * MIB
    gcount = table.gpu_count[rows].astype(np.int64)
    alloc = np.column_stack([cpu, mem])
    free, gpu_free = _occupy(alloc, gcount, models, rng)
    return Cluster(
        topology=topo,
        alloc=alloc,
        free=free,
        gpu_free=gpu_free,
        gpu_count=gcount,
        model=tuple(models.tolist()),
        cordoned=rng.random(n) < 0.02,
    )


def _occupy(
    alloc: I64, gcount: I64, models: npt.NDArray[np.str_], rng: np.random.Generator
) -> tuple[I64, I64]:
    """Put the trace's pods on machines where they fit until 40–70 % of the GPUs are taken:
    the free resources and the free milli-GPU per device."""
    pods = load_pods()
    n = alloc.shape[0]
    free = alloc.copy()
    dev = np.where(np.arange(8)[None, :] < gcount[:, None], 1000, 0).astype(np.int64)
    target = float(rng.uniform(0.4, 0.7)) * float(dev.sum())
    allowed = {
        s: np.isin(models, pods.spec_models(s)) if pods.spec_models(s) else np.ones(n, np.bool_)
        for s in range(len(pods.specs))
    }
    taken = 0.0
    for p in rng.permutation(len(pods)):
        if taken >= target:
            break
        cpu, mem = int(pods.cpu_milli[p]), int(pods.memory_mib[p]) * MIB
        k, milli = int(pods.num_gpu[p]), int(pods.gpu_milli[p])
        ok = (free[:, 0] >= cpu) & (free[:, 1] >= mem)
        if k:
            ok &= allowed[int(pods.spec_idx[p])] & ((dev >= milli).sum(axis=1) >= k)
        cand = np.flatnonzero(ok)
        if cand.size == 0:
            continue
        if k and rng.random() < 0.7:  # a bin-packing scheduler: the fullest GPUs that fit
            left = dev[cand].sum(axis=1)
            cand = cand[left == left.min()]
        node = int(cand[rng.integers(cand.size)])
        free[node] -= (cpu, mem)
        if k:
            # the fullest devices that still hold the share (the trace's packing habit)
            fits = np.flatnonzero(dev[node] >= milli)
            pick = fits[np.argsort(dev[node, fits], kind="stable")[:k]]
            dev[node, pick] -= milli
            taken += k * milli
    return free, dev


def gang(
    name: str,
    c: Cluster,
    gpus: int,
    rng: np.random.Generator,
    *,
    mode: TopologyMode | None = TopologyMode.HARD,
    tier: int = 2,
) -> GangRequest:
    """A launcher / parameter-server role (CPU only, every replica required) and ``gpus``
    worker GPUs in workers of 1, 2, 4 or 8 GPUs, on a GPU-model selector whose free machines
    could take twice the workers (or on any model)."""
    per = int(rng.choice([g for g in (1, 2, 4, 8) if g <= gpus and gpus % g == 0]))
    model = np.array(c.model)
    # workers each free machine of the model could take now; a selector is asked for only
    # where twice the gang's workers are free (people ask for what they see free)
    room = np.where(c.cordoned, 0, (c.gpu_free >= 1000).sum(axis=1) // per)
    fit = [
        s for s in SELECTORS if s is None or int(room[np.isin(model, s)].sum()) >= 2 * (gpus // per)
    ]
    sel = fit[int(rng.integers(len(fit)))]
    ok = ~c.cordoned
    worker_ok = ok & (c.gpu_count >= per)
    if sel is not None:
        worker_ok &= np.isin(model, sel)
    ps = int(rng.integers(1, 5)) if gpus >= 8 else 1
    return GangRequest(
        name=name,
        request=np.array([[per * 6000, per * 48 * 1024 * MIB], [4000, 16 * 1024 * MIB]]),
        counts=np.array([gpus // per, ps]),
        min_counts=np.array([0, ps]),
        mask=np.stack([worker_ok, ok]),
        gpu_count=np.array([per, 0]),
        gpu_milli=np.array([1000, 0]),
        mode=mode,
        highest_tier=tier if mode is TopologyMode.HARD else None,
    )


def _problem(c: Cluster, gangs: tuple[GangRequest, ...], weights: I64 | None) -> PlacementProblem:
    return PlacementProblem(
        free=c.free,
        allocatable=c.alloc,
        gpu_free=c.gpu_free,
        gpu_capacity=np.where(c.gpu_count > 0, 1000, 0).astype(np.int64),
        gpu_count=c.gpu_count,
        gpu_sharing=c.gpu_count > 0,
        topology=c.topology,
        gangs=gangs,
        weights=weights,
    )


def single_problem(n: int, gpus: int, seed: int) -> PlacementProblem:
    """One gang asking ``gpus`` worker GPUs, hard inside a block (a zone above 64 GPUs)."""
    c = cluster(n, seed)
    rng = np.random.default_rng(seed + 17 * gpus)
    g = gang("job", c, gpus, rng, tier=2 if gpus <= 64 else 3)
    return _problem(c, (g,), None)


def joint_problem(n: int, seed: int, n_gangs: int = 50) -> PlacementProblem:
    """``n_gangs`` gangs with ITP sizes (multi-node sizes weighted up), hard in a block, hard
    in a zone or soft, weights 1–3; free GPUs cut to about 80 % of the demand."""
    c = cluster(n, seed)
    rng = np.random.default_rng(seed + 5_000)
    sizes = np.array(list(ITP_GPUS))
    p = np.array(list(ITP_GPUS.values()), dtype=np.float64)
    p[sizes >= 8] *= 8.0  # a placement problem is about the gangs that span nodes
    p /= p.sum()
    gangs: list[GangRequest] = []
    for i in range(n_gangs):
        gpus = int(rng.choice(sizes, p=p))
        kind = int(rng.integers(0, 3))
        mode = (TopologyMode.HARD, TopologyMode.HARD, TopologyMode.SOFT)[kind]
        gangs.append(gang(f"g{i}", c, gpus, rng, mode=mode, tier=2 + kind % 2))
    demand = sum(int((g.counts * np.asarray(g.gpu_count)).sum()) for g in gangs)
    gpu_free = c.gpu_free
    supply = int((gpu_free[~c.cordoned] >= 1000).sum())
    if supply > 0.8 * demand > 0:
        keep = rng.random(n) < 0.8 * demand / supply
        gpu_free = np.where(keep[:, None], gpu_free, 0)
    weights = rng.integers(1, 4, n_gangs).astype(np.int64)
    c2 = Cluster(
        topology=c.topology,
        alloc=c.alloc,
        free=c.free,
        gpu_free=gpu_free,
        gpu_count=c.gpu_count,
        model=c.model,
        cordoned=c.cordoned,
    )
    return _problem(c2, tuple(gangs), weights)
