"""How good can a placement of one arrival sequence be? An upper bound and offline packings.

Theory of operation
-------------------
The FGD study (:mod:`gangsched.sim.fgd`) places pods one at a time, in arrival order, and never
moves them. To judge a policy's unallocated GPU we need to know what *any* placement of the same
arrived pods could allocate. This module gives two numbers for a prefix of one arrival sequence:

**An upper bound** (:func:`gpu_bound`). Every placement of the arrived pods, online or not, and
whichever pods it rejects, allocates at most this many milli-GPU. It is the optimum of a
relaxation, solved with HiGHS through :func:`scipy.optimize.milp`:

* CPU-only pods are left out: they allocate no GPU, so dropping them from a placement keeps it
  valid and keeps its GPU allocation.
* GPU pods are grouped into *shapes* (CPU, memory, GPU count, GPU share, allowed models) and nodes
  into *classes* of identical nodes (CPU, memory, GPU count, model). The trace has about 15 node
  classes and 100-450 GPU shapes, so the model is small.
* ``x[s, c]`` counts the pods of shape ``s`` placed on class ``c`` (only where one pod fits one
  node of the class). Per shape, ``sum_c x[s, c]`` is at most the number of arrived pods of that
  shape. Per class, the summed CPU, memory and milli-GPU fit the class's total.
* Cuts that hold for every real placement and tighten the aggregate, from dual-feasible
  functions ``u_k`` (Fekete and Schepers; k = 1, 2, 3): whatever packs into one bin of size 1
  has ``u_k`` values summing to at most 1. Per class, whole-GPU pods plus ``u_k`` of each shared
  pod's share are at most the device count (so, for k = 1, one pod above half a GPU per device),
  and ``u_k`` of each pod's part of a node's CPU, memory or devices sums to at most the node
  count (one pod above half of the CPU per node, ...).
* The integer program over these counts is solved within a time budget; the solver's proven dual
  bound is reported (a valid bound even when the budget ends first), together with the plain LP
  relaxation.

The bound says nothing about *which* placement reaches it, and it can be loose: it treats a class
of nodes as one large node apart from the cuts above, so it ignores how pods split between nodes.

**Offline packings** (:func:`offline_packing`). Feasible placements of the same arrived GPU pods
that know the whole prefix in advance: the CPU-only pods are left out, the GPU pods are taken in
arrival order or largest first (GPU, then CPU) and placed with the study's own policies (FGD,
BestFit), rejecting those that fit nowhere; the best is kept. Every packing is checked by
:func:`validate_packing`, an independent recount of CPU, memory and per-device GPU use. A
packing's allocation is a lower bound on the best placement, so the true optimum lies between
the packing and the bound.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from gangsched._types import I64
from gangsched.errors import ConfigError
from gangsched.fragmentation import MILLI
from gangsched.io.openb import NodeTable, PodTable, shapes_fit_classes
from gangsched.limits import check_seconds

if TYPE_CHECKING:
    from gangsched.sim.fgd.limit import ConfigLimit

__all__ = [
    "ARRANGEMENTS",
    "MAX_BOUND_SECONDS",
    "GpuBound",
    "LimitFigure",
    "OfflinePacking",
    "arrived_prefix",
    "gpu_bound",
    "limit_figures",
    "offline_packing",
    "validate_packing",
]


#: Largest time budget one bound's integer program may be given, in seconds.
MAX_BOUND_SECONDS = 600.0
#: Budget of the integer program when the LP already reaches min(arrived, capacity).
TRIVIAL_SECONDS = 1.0


def arrived_prefix(pods: PodTable, order: I64, total_gpus: int, pct: int) -> int:
    """How many pods of ``order`` have arrived when the arrived GPU request, as a whole % of the
    GPU capacity (rounded half to even, as the tables bucket it), last reads ``pct``."""
    if not isinstance(pct, int) or not 0 <= pct <= 1000:
        raise ConfigError(f"arrived % must be an integer in [0, 1000], got {pct!r}", kind="bound")
    if total_gpus <= 0:
        raise ConfigError("the cluster has no GPU", kind="bound", field="total_gpus")
    req = (pods.num_gpu * pods.gpu_milli)[np.asarray(order, dtype=np.int64)]
    arrived = np.cumsum(req).astype(np.float64)
    bucket = np.round(arrived / float(total_gpus) / 10.0)
    return int(np.count_nonzero(bucket <= pct))


def _capacity_pct(milli: float, capacity_milli: int) -> float:
    """``milli`` as % of the cluster's GPU capacity ``capacity_milli`` (0 without GPUs)."""
    return 100.0 * milli / capacity_milli if capacity_milli else 0.0


@dataclass(frozen=True, slots=True)
class GpuBound:
    """Upper bound on the milli-GPU any placement of one prefix of arrivals can allocate."""

    arrived_pods: int  # pods in the prefix (CPU-only ones included)
    arrived_milli: int  # GPU they request
    capacity_milli: int  # GPU of the cluster
    lp_milli: float  # LP relaxation optimum
    bound_milli: float  # best proven bound (integer program's dual bound, or the LP)
    # "optimal", "time limit", "lp only", or "trivial": the LP reaches min(arrived, capacity) and
    # the integer program, given TRIVIAL_SECONDS, did not prove less
    status: str
    n_shapes: int
    n_classes: int
    seconds: float

    @property
    def bound_alloc_pct(self) -> float:
        """The bound as % of the cluster's GPU capacity."""
        return _capacity_pct(self.bound_milli, self.capacity_milli)

    @property
    def bound_unallocated_pct(self) -> float:
        """The least unallocated GPU % any placement can leave."""
        return 100.0 - self.bound_alloc_pct


#: Orders k of the dual-feasible functions whose cuts tighten the bound.
DFF_ORDERS = (1, 2, 3)


def _dff(size: I64, cap: I64, k: int) -> npt.NDArray[np.float64]:
    """Fekete and Schepers' dual-feasible function u_k of ``size / cap`` (elementwise).

    ``u_k(x) = x`` when ``(k + 1) x`` is an integer, else ``floor((k + 1) x) / k``. Items packed
    into one bin have sizes summing to at most 1, and their ``u_k`` values then sum to at most 1
    too, so a per-bin count weighted by ``u_k`` is a valid cut. Computed exactly on integers.
    """
    num = (k + 1) * np.asarray(size, dtype=np.int64)
    cap = np.asarray(cap, dtype=np.int64)
    exact = num % cap == 0
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(exact, size / cap, (num // cap) / k)
    return np.asarray(np.where(cap > 0, out, 0.0), dtype=np.float64)


def gpu_bound(
    nodes: NodeTable,
    pods: PodTable,
    arrived: I64,
    *,
    time_limit: float = 10.0,
    integral: bool = True,
) -> GpuBound:
    """Upper bound on the GPU any placement of the pods ``arrived`` (indices into ``pods``,
    repeats allowed) can allocate on ``nodes``; see the module docstring for the model.

    ``time_limit`` bounds the integer program (the LP is solved first and always); with
    ``integral=False`` only the LP is solved.
    """
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_matrix

    check_seconds(
        time_limit, MAX_BOUND_SECONDS, what="time limit", kind="bound", field="time_limit"
    )
    start = time.perf_counter()
    arrived = pods.indices(arrived, kind="bound", field="arrived")
    capacity = int(nodes.total_gpus) * MILLI
    arrived_milli = int((pods.num_gpu * pods.gpu_milli)[arrived].sum()) if arrived.size else 0
    _, cls, cinv = nodes.gpu_classes()
    _, shp, sinv = pods.gpu_shapes(arrived)
    n_nodes = np.bincount(cinv, minlength=cls.shape[0]).astype(np.int64)
    n_pods = np.bincount(sinv, minlength=shp.shape[0]).astype(np.int64)

    def done(lp: float, best: float, status: str) -> GpuBound:
        return GpuBound(
            arrived_pods=int(arrived.size),
            arrived_milli=arrived_milli,
            capacity_milli=capacity,
            lp_milli=lp,
            bound_milli=best,
            status=status,
            n_shapes=int(shp.shape[0]),
            n_classes=int(cls.shape[0]),
            seconds=time.perf_counter() - start,
        )

    if shp.shape[0] == 0 or cls.shape[0] == 0:
        return done(0.0, 0.0, "optimal")

    s_cpu, s_mem, s_num, s_milli, _ = (shp[:, j] for j in range(5))
    c_cpu, c_mem, c_gpu, _ = (cls[:, j] for j in range(4))
    fits = shapes_fit_classes(pods, nodes, shp, cls)
    ps, pc = np.nonzero(fits)  # one variable per (shape, class) pair that fits
    n_var = int(ps.size)
    if n_var == 0:
        return done(0.0, 0.0, "optimal")
    gpu_req = (s_num * s_milli).astype(np.float64)
    whole = s_milli == MILLI

    rows: list[I64] = []
    cols: list[I64] = []
    vals: list[npt.NDArray[np.float64]] = []
    upper: list[npt.NDArray[np.float64]] = []
    var = np.arange(n_var, dtype=np.int64)
    base = 0

    def block(row_of_var: I64, coef: npt.NDArray[np.float64], rhs: npt.NDArray[np.float64]) -> None:
        nonlocal base
        keep = coef != 0
        rows.append(base + row_of_var[keep])
        cols.append(var[keep])
        vals.append(coef[keep])
        upper.append(rhs)
        base += int(rhs.size)

    ones = np.ones(n_var)
    block(ps, ones, n_pods.astype(np.float64))  # at most the arrived pods of each shape
    block(pc, s_cpu[ps].astype(np.float64), (n_nodes * c_cpu).astype(np.float64))
    block(pc, s_mem[ps].astype(np.float64), (n_nodes * c_mem).astype(np.float64))
    block(pc, gpu_req[ps], (n_nodes * c_gpu * MILLI).astype(np.float64))
    n_rhs = n_nodes.astype(np.float64)
    devices = (n_nodes * c_gpu).astype(np.float64)
    whole_num = np.where(whole, s_num, 0)[ps]
    share_milli = np.where(whole, 0, s_milli)[ps]
    for k in DFF_ORDERS:
        # per device: whole GPUs count 1 each, a shared pod f_k(share); per node: f_k of the
        # pod's part of the node's CPU, memory and devices
        block(pc, whole_num + _dff(share_milli, np.full(n_var, MILLI), k), devices)
        block(pc, _dff(s_cpu[ps], c_cpu[pc], k), n_rhs)
        block(pc, _dff(s_mem[ps], c_mem[pc], k), n_rhs)
        block(pc, _dff(whole_num, c_gpu[pc], k), n_rhs)
    a = coo_matrix(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(base, n_var)
    ).tocsr()
    cons = LinearConstraint(a, -np.inf, np.concatenate(upper))
    obj = -gpu_req[ps]
    bounds = Bounds(np.zeros(n_var), n_pods[ps].astype(np.float64))
    lp = milp(obj, constraints=cons, bounds=bounds, integrality=np.zeros(n_var))
    if lp.x is None:  # pragma: no cover - the model is always feasible (x = 0)
        raise ConfigError(f"LP relaxation failed: {lp.message}", kind="bound")
    lp_val = float(-lp.fun)
    if not integral:
        return done(lp_val, lp_val, "lp only")
    remaining = max(time_limit - (time.perf_counter() - start), 0.05)
    trivial = lp_val >= min(capacity, arrived_milli) - 0.5
    if trivial:
        # The LP already meets the trivial bound (all arrived GPU, or the whole cluster): the
        # integer program can only lower it by proving that no exact fill exists, which HiGHS
        # settles at once on small models and not within any practical budget on the trace.
        remaining = min(remaining, TRIVIAL_SECONDS)
    res = milp(
        obj,
        constraints=cons,
        bounds=bounds,
        integrality=np.ones(n_var),
        options={"time_limit": remaining, "mip_rel_gap": 1e-9, "disp": False},
    )
    dual = getattr(res, "mip_dual_bound", None)
    if res.status == 0 and res.fun is not None:
        best = float(-res.fun)
        if dual is not None and math.isfinite(float(dual)):
            best = max(best, float(-dual))  # the proven bound, never below the incumbent
        return done(lp_val, min(best, lp_val), "optimal")
    status = "trivial" if trivial else "time limit"
    if dual is not None and math.isfinite(float(dual)):
        return done(lp_val, min(float(-dual), lp_val), status)
    return done(lp_val, lp_val, status)


def validate_packing(
    nodes: NodeTable,
    pods: PodTable,
    order: I64,
    placement: I64,
    devices: I64,
) -> list[str]:
    """Independent check of a placement: problems found, empty when it is valid.

    ``order[i]`` is the pod (index into ``pods``) of arrival ``i``, ``placement[i]`` its node (-1:
    rejected) and ``devices[i]`` a bit mask of the devices it uses. Checked: node and device
    indices, the GPU model, the device count of each pod, whole devices for whole-GPU pods, and
    per node CPU and memory, per device milli-GPU, against the capacities.
    """
    order = np.asarray(order, dtype=np.int64)
    placement = np.asarray(placement, dtype=np.int64)
    devices = np.asarray(devices, dtype=np.int64)
    problems: list[str] = []
    if not order.shape == placement.shape == devices.shape:
        return ["order, placement and devices differ in length"]
    n = len(nodes)
    on = placement >= 0
    if (placement >= n).any():
        return ["a pod is placed on a node index that does not exist"]
    pod = order[on]
    node = placement[on]
    mask = devices[on]
    if (devices[~on] != 0).any():
        problems.append("a rejected pod holds devices")
    cpu = np.bincount(node, weights=pods.cpu_milli[pod], minlength=n)
    mem = np.bincount(node, weights=pods.memory_mib[pod], minlength=n)
    if (cpu > nodes.cpu_milli).any():
        problems.append(f"CPU over capacity on {int((cpu > nodes.cpu_milli).sum())} node(s)")
    if (mem > nodes.memory_mib).any():
        problems.append(f"memory over capacity on {int((mem > nodes.memory_mib).sum())} node(s)")
    width = max(int(nodes.gpu_count.max()) if n else 0, 1)
    bits = (mask[:, None] >> np.arange(width)[None, :]) & 1  # (k, width)
    if (mask >> width).any():
        problems.append("a device bit beyond the widest node")
    count = bits.sum(axis=1)
    if (count != pods.num_gpu[pod]).any():
        problems.append("a pod holds a number of devices other than its GPU count")
    beyond = bits.astype(bool) & (np.arange(width)[None, :] >= nodes.gpu_count[node][:, None])
    if beyond.any():
        problems.append("a pod uses a device its node does not have")
    use = np.zeros((n, width), dtype=np.int64)
    np.add.at(use, node, bits * pods.gpu_milli[pod][:, None])
    if (use > MILLI).any():
        problems.append(f"GPU over capacity on {int((use > MILLI).sum())} device(s)")
    allowed = pods.spec_allowed(nodes.models)
    gpu_pod = pods.num_gpu[pod] > 0
    ok_model = allowed[pods.spec_idx[pod], nodes.model_idx[node]]
    if (gpu_pod & ~ok_model).any():
        problems.append("a GPU pod on a node of a model it does not accept")
    whole = gpu_pod & (pods.gpu_milli[pod] == MILLI)
    if whole.any():
        # a whole-GPU pod's device must hold nothing else
        holders = np.zeros((n, width), dtype=np.int64)
        np.add.at(holders, node, bits)
        mine = bits[whole].astype(bool)
        crowded = holders[node[whole]] > 1
        if (mine & crowded).any():
            problems.append("a whole GPU shared with another pod")
    return problems


@dataclass(frozen=True, slots=True)
class OfflinePacking:
    """A feasible placement of one prefix's GPU pods, arranged with the whole prefix known."""

    policy: str  # the policy that placed the pods
    arrangement: str  # "arrival" (GPU pods in arrival order) or "largest" (largest first)
    order: I64  # pods placed, in placement order
    placement: I64
    devices: I64
    used_milli: int
    capacity_milli: int
    problems: tuple[str, ...]  # validate_packing's findings (empty: valid)

    @property
    def alloc_pct(self) -> float:
        return _capacity_pct(self.used_milli, self.capacity_milli)

    @property
    def unallocated_pct(self) -> float:
        return 100.0 - self.alloc_pct


#: Pod arrangements an offline packing tries.
ARRANGEMENTS = ("arrival", "largest")


def _arrange(pods: PodTable, gpu: I64, arrangement: str) -> I64:
    if arrangement == "arrival":
        return gpu
    if arrangement == "largest":
        key = (
            -(pods.num_gpu * pods.gpu_milli)[gpu],
            -pods.cpu_milli[gpu],
            -pods.memory_mib[gpu],
            np.arange(gpu.size),
        )
        return gpu[np.lexsort(key[::-1])]
    raise ConfigError(
        f"unknown arrangement; expected one of {', '.join(ARRANGEMENTS)}",
        kind="offline packing",
        name=arrangement,
    )


def offline_packing(
    nodes: NodeTable,
    pods: PodTable,
    arrived: I64,
    *,
    policies: Sequence[str] = ("fgd", "bestfit"),
    arrangements: Sequence[str] = ARRANGEMENTS,
) -> OfflinePacking:
    """Best valid placement of the arrived GPU pods over ``arrangements`` x ``policies``.

    CPU-only pods are left out (they allocate no GPU and only take CPU from GPU nodes); the GPU
    pods are placed one at a time by the policy, in arrival order (``"arrival"``) or largest
    first (``"largest"``: GPU, then CPU, then memory). Every candidate is checked with
    :func:`validate_packing`; the valid one allocating the most GPU is returned.
    """
    from gangsched.sim.fgd import run_one

    if not policies or not arrangements:
        raise ConfigError("nothing to pack with", kind="offline packing", field="policies")
    arrived = np.asarray(arrived, dtype=np.int64)
    gpu = arrived[pods.num_gpu[arrived] > 0]
    found: list[OfflinePacking] = []
    for arrangement in arrangements:
        seq = _arrange(pods, gpu, arrangement)
        for policy in policies:
            run = run_one(nodes, pods, policy, 42, order=seq)
            devices = run.devices if run.devices is not None else np.zeros(0, dtype=np.int64)
            found.append(
                OfflinePacking(
                    policy=policy,
                    arrangement=arrangement,
                    order=seq,
                    placement=run.placement,
                    devices=devices,
                    used_milli=int(run.used[-1]),
                    capacity_milli=int(nodes.total_gpus) * MILLI,
                    problems=tuple(validate_packing(nodes, pods, seq, run.placement, devices)),
                )
            )
    valid = [c for c in found if not c.problems]
    return max(valid, key=lambda c: c.used_milli) if valid else found[0]


@dataclass(frozen=True, slots=True)
class LimitFigure:
    """The limit of one seed's arrival sequence at one arrived %: the aggregate bound, the greedy
    offline packing and, when computed, the per-node configuration bound and MILP packing of
    :mod:`gangsched.sim.fgd.limit`."""

    seed: int
    arrived_pct: int
    bound: GpuBound
    offline: OfflinePacking | None
    config: ConfigLimit | None = None

    @property
    def bound_unallocated_pct(self) -> float:
        """The tightest bound: the least unallocated GPU % any placement can leave."""
        agg = self.bound.bound_unallocated_pct
        return agg if self.config is None else max(agg, self.config.bound_unallocated_pct)

    @property
    def offline_unallocated_pct(self) -> float:
        """The best valid offline packing found (NaN when none was computed)."""
        found = [] if self.offline is None else [self.offline.unallocated_pct]
        if self.config is not None:
            found.append(self.config.packing_unallocated_pct)
        return min(found) if found else math.nan


def limit_figures(
    nodes: NodeTable,
    pods: PodTable,
    seeds: Sequence[int],
    arrived_pct: int,
    *,
    tune: float = 1.3,
    rng: str = "go",
    time_limit: float = 10.0,
    offline_policies: Sequence[str] = ("fgd", "bestfit"),
    config_seconds: float | None = 60.0,
) -> list[LimitFigure]:
    """Bound and offline packing for each seed's arrivals (the study's shuffled, tuned sequence)
    up to ``arrived_pct`` % of the GPU capacity; no offline packing when ``offline_policies`` is
    empty. ``config_seconds`` is the budget of the per-node configuration bound and MILP
    packing (:func:`gangsched.sim.fgd.limit.config_limit`); ``None`` skips them."""
    from gangsched.sim.fgd import make_source, tuned_order
    from gangsched.sim.fgd.limit import config_limit

    out: list[LimitFigure] = []
    for seed in seeds:
        order = tuned_order(pods, nodes.total_gpus, tune, make_source(rng, seed))
        k = arrived_prefix(pods, order, nodes.total_gpus, arrived_pct)
        prefix = order[:k]
        bound = gpu_bound(nodes, pods, prefix, time_limit=time_limit)
        offline = (
            offline_packing(nodes, pods, prefix, policies=offline_policies)
            if offline_policies
            else None
        )
        config = (
            config_limit(nodes, pods, prefix, seconds=config_seconds)
            if config_seconds is not None
            else None
        )
        out.append(
            LimitFigure(
                seed=seed, arrived_pct=arrived_pct, bound=bound, offline=offline, config=config
            )
        )
    return out
