"""Placement problems and results: frozen records over NumPy arrays.

Theory of operation
-------------------
A :class:`GangRequest` describes one gang as *templates* (groups of interchangeable replicas:
same request, same GPU need, same feasible nodes) with how many replicas of each may be placed
(``counts``), how many must be (``size`` in total, ``min_counts`` per template) and a topology
constraint. A :class:`PlacementProblem` puts one or many gangs over the free capacity of a
cluster and its :class:`~gangsched.model.topology.Topology`.

Resources are rows over the cluster's resource columns in canonical int64 units. GPUs are
*devices*: the request rows carry no GPU amount (a GPU column, if present, must be 0); a
template instead asks for ``gpu_count`` distinct devices with ``gpu_milli`` milli-GPU each. On a
node whose devices do not allow sharing, or whose device capacity is at most ``gpu_milli``, each
such device is taken whole (it must be completely free); otherwise the request is a share and
lands on devices with at least ``gpu_milli`` free.

Topology constraint of a gang (Volcano's ``networkTopology``):

* ``mode=None``: anywhere.
* ``HARD`` with ``highest_tier``: all replicas inside one domain of tier ≤ ``highest_tier``
  (nodes outside every such domain cannot be used).
* ``SOFT``: anywhere, but lower tiers are preferred (the objective ranks them first).

``required_tier`` / ``preferred_tier`` are Kueue's spellings of hard / soft. ``slice_size`` with
``slice_tier`` (Kueue's ``podset-slice-size`` / ``podset-slice-required-topology``) further
demands that every slice of ``slice_size`` replicas lies inside one domain of tier ≤
``slice_tier``, counted by the node's largest such domain: :func:`slice_groups` gives those
groups (the objective's grouping, :meth:`~gangsched.model.topology.Topology.nest_group`, at the
rank of ``slice_tier``), and each must host a multiple of ``slice_size`` replicas. A rack that
hangs under no tier-2 domain is thus one group for ``slice_tier=2``; a node that no domain of
tier ≤ ``slice_tier`` covers is a group of its own. Placers and the validator share this one
function.

Tier numbers in a gang (``highest_tier``, ``slice_tier``) and in a placement
(:attr:`GangPlacement.tier`) are the user's; the objective counts by tier *rank* (the tiers
present in the topology, in order, see :mod:`gangsched.model.topology`), so a tier number of 5,000
costs no more than a tier number of 2.

The objective of a placed gang is the tuple (lower is better, compared lexicographically)::

    (span, d[top_tier], ..., d[1], nodes, waste)

``span`` is the lowest rank whose one domain holds every replica (0 = a single node); ``d[t]``
the number of distinct rank-``t`` groups used, where a node's rank-``t`` group is its largest
enclosing domain of rank ≤ ``t`` (:meth:`~gangsched.model.topology.Topology.nest_group`): a node
that
no rank-``t`` domain covers counts with its lower-rank domain (a rack under no spine is one
spine-level group), and as a group of its own only when nothing of rank ≤ ``t`` covers it. So
``d[t] = 1`` for every ``t ≥ span``, ``d`` never grows with the rank, and ``span`` is the lowest
rank with ``d = 1``; ``nodes`` the number of nodes used; ``waste`` the sum of the used nodes'
emptiness (0–100, the mean free share of the resources the gang asks for, before placement):
preferring full nodes is Volcano's binpack. :func:`placement_objective` computes it from
counts, for every placer alike.

Hypernode order (Volcano's ``HyperNodeOrder``): a problem may carry a :class:`HypernodeOrder`
(the ``network-topology-aware`` plugin's bin-packing weights). Then a gang with a topology
constraint (hard or soft) is searched as Volcano's gradient does — from the lowest hypernode
tier up, never a lone node first — and, inside a tier, its candidate domains are tried by
:func:`hypernode_scores`, the fullest first (ties to the lower index)::

    score(D) = scale · Σ_r w_r · (used_r(D) + demand_r) / alloc_r(D) / Σ_r w_r

over the resources the gang asks for that have a weight (0 when one of them would overflow,
or when no asked resource has a weight); ``demand`` is the request of all the gang's
replicas (``counts``), ``used`` the problem's :attr:`PlacementProblem.used` plus what earlier
gangs of the same problem took. The first domain in that order where the gang packs wins; the
objective above is then minimised inside it. Without a hypernode order, the lowest tier
(a single node) is tried first and domains are ordered by the unweighted mean of the same
ratio over every asked resource.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from gangsched.errors import PlacementError
from gangsched.model import TopologyMode
from gangsched.model.gpu_charge import device_take, exclusive
from gangsched.model.topology import Topology
from gangsched.placement._result import (
    GangPlacement,
    PlacementResult,
    Status,
    placement_objective,
    slice_groups,
)
from gangsched.placement._result import slice_rank as slice_rank

__all__ = [
    "GangPlacement",
    "GangRequest",
    "HypernodeOrder",
    "PlacementProblem",
    "PlacementResult",
    "Status",
    "hypernode_scores",
    "node_emptiness",
    "placement_objective",
    "slice_groups",
]

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
BOOL = npt.NDArray[np.bool_]


def _arr(value: object, dtype: type, *, name: str, fld: str) -> npt.NDArray[Any]:
    try:
        out: npt.NDArray[Any] = np.array(value, dtype=dtype)
    except (TypeError, ValueError) as exc:
        raise PlacementError(
            f"not an array of {dtype.__name__}: {exc}", kind="gang", name=name, field=fld
        ) from None
    out.setflags(write=False)
    return out


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class GangRequest:
    """One gang to place.

    Parameters
    ----------
    name:
        The gang (job) name, used in messages.
    request:
        ``(n_templates, n_resources)`` int64 per-replica request (no GPU amount).
    counts:
        ``(n_templates,)`` int64 replicas available per template.
    mask:
        ``(n_templates, n_nodes)`` bool: nodes where a replica of the template may go.
    size:
        Replicas to place in total (the gang minimum still missing); defaults to Σ counts.
    min_counts:
        ``(n_templates,)`` int64 per-template minimum (role minimums); defaults to zeros.
    gpu_count, gpu_milli:
        ``(n_templates,)`` int64 devices per replica and milli-GPU per device.
    mode, highest_tier:
        Topology constraint (see the module docstring); ``highest_tier=None`` with HARD means
        the top tier.
    required_tier, preferred_tier:
        Kueue aliases: ``required_tier=t`` is HARD with ``highest_tier=t``, ``preferred_tier``
        is SOFT. At most one of ``mode``, ``required_tier``, ``preferred_tier``.
    slice_size, slice_tier:
        Each domain of ``slice_tier`` must host a multiple of ``slice_size`` replicas.
    """

    name: str
    request: I64
    counts: I64
    mask: BOOL
    size: int = -1
    min_counts: I64 | None = None
    gpu_count: I64 | None = None
    gpu_milli: I64 | None = None
    mode: TopologyMode | None = None
    highest_tier: int | None = None
    required_tier: int | None = None
    preferred_tier: int | None = None
    slice_size: int = 0
    slice_tier: int = 0

    def __post_init__(self) -> None:
        name = self.name
        req = _arr(self.request, np.int64, name=name, fld="request")
        if req.ndim != 2:
            raise PlacementError(
                "must be 2-D (templates × resources)", kind="gang", name=name, field="request"
            )
        k = req.shape[0]
        counts = _arr(self.counts, np.int64, name=name, fld="counts")
        mask = _arr(self.mask, np.bool_, name=name, fld="mask")
        if counts.shape != (k,):
            raise PlacementError(
                f"shape {counts.shape}, expected ({k},)", kind="gang", name=name, field="counts"
            )
        if mask.ndim != 2 or mask.shape[0] != k:
            raise PlacementError(
                f"shape {mask.shape}, expected ({k}, n_nodes)", kind="gang", name=name, field="mask"
            )
        zeros = np.zeros(k, dtype=np.int64)
        fields = {
            "min_counts": self.min_counts,
            "gpu_count": self.gpu_count,
            "gpu_milli": self.gpu_milli,
        }
        for fld, value in fields.items():
            arr = _arr(zeros if value is None else value, np.int64, name=name, fld=fld)
            if arr.shape != (k,):
                raise PlacementError(
                    f"shape {arr.shape}, expected ({k},)", kind="gang", name=name, field=fld
                )
            if (arr < 0).any():
                raise PlacementError("negative entry", kind="gang", name=name, field=fld)
            object.__setattr__(self, fld, arr)
        if (req < 0).any() or (counts < 0).any():
            raise PlacementError(
                "negative request or count", kind="gang", name=name, field="request"
            )
        object.__setattr__(self, "request", req)
        object.__setattr__(self, "counts", counts)
        object.__setattr__(self, "mask", mask)
        size = int(counts.sum()) if self.size < 0 else int(self.size)
        object.__setattr__(self, "size", size)
        mins = self.min_counts
        assert mins is not None
        if (mins > counts).any() or size > int(counts.sum()) or int(mins.sum()) > size:
            raise PlacementError(
                f"inconsistent sizes: size {size}, counts {counts.tolist()}, "
                f"min_counts {mins.tolist()}",
                kind="gang",
                name=name,
                field="size",
            )
        aliases = [
            self.mode is not None,
            self.required_tier is not None,
            self.preferred_tier is not None,
        ]
        if sum(aliases) > 1:
            raise PlacementError(
                "give only one of mode, required_tier, preferred_tier",
                kind="gang",
                name=name,
                field="mode",
            )
        if self.required_tier is not None:
            object.__setattr__(self, "mode", TopologyMode.HARD)
            object.__setattr__(self, "highest_tier", int(self.required_tier))
        elif self.preferred_tier is not None:
            object.__setattr__(self, "mode", TopologyMode.SOFT)
        if self.highest_tier is not None and self.highest_tier < 1:
            raise PlacementError("must be >= 1", kind="gang", name=name, field="highest_tier")
        if self.slice_size < 0 or (self.slice_size > 0 and self.slice_tier < 0):
            raise PlacementError(
                "slice_size and slice_tier must be >= 0", kind="gang", name=name, field="slice_size"
            )
        if self.slice_size > 0 and size % self.slice_size:
            raise PlacementError(
                f"size {size} is not a multiple of slice_size {self.slice_size}",
                kind="gang",
                name=name,
                field="slice_size",
            )

    @property
    def n_templates(self) -> int:
        return int(self.request.shape[0])

    def allowed_tier(self, top_tier: int) -> int:
        """Highest tier number a placement of this gang may span, given the top tier number
        (``topology.tiers[-1]``)."""
        if self.mode is TopologyMode.HARD:
            return min(self.highest_tier or top_tier, top_tier)
        return top_tier

    def allowed_rank(self, topology: Topology) -> int:
        """Highest tier *rank* of ``topology`` a placement of this gang may span (0 when a
        hard gang's ``highest_tier`` is below every tier present: no domain allows it)."""
        if self.mode is TopologyMode.HARD and self.highest_tier is not None:
            return topology.rank_of(self.highest_tier)
        return topology.top_tier


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class HypernodeOrder:
    """How domains of one tier are ranked for a topology gang (Volcano's hypernode binpack).

    Parameters
    ----------
    weights:
        ``(n_resources,)`` weight of each resource column (≥ 0; 0 for a resource that does not
        count). The GPU column of the request rows is 0 (GPUs are devices): GPUs count through
        ``gpu_weight``.
    gpu_weight:
        Weight of the GPU devices (milli-GPU asked by the gang against the devices' capacity).
    scale:
        Factor of the score (the plugin's ``100 · weight``); a positive one does not change
        the order, 0 makes all domains tie (lower index first), a negative one reverses it.
    """

    weights: F64
    gpu_weight: float = 0.0
    scale: float = 100.0

    def __post_init__(self) -> None:
        w = _arr(self.weights, np.float64, name="", fld="hypernode_order.weights")
        if w.ndim != 1 or not np.isfinite(w).all() or (w < 0).any():
            raise PlacementError(
                "expected a 1-D array of finite weights >= 0",
                kind="problem",
                field="hypernode_order.weights",
            )
        for fld in ("gpu_weight", "scale"):
            v = getattr(self, fld)
            if isinstance(v, bool) or not isinstance(v, int | float | np.number):
                raise PlacementError(
                    f"expected a number, got {v!r}", kind="problem", field=f"hypernode_order.{fld}"
                )
            if not math.isfinite(float(v)) or (fld == "gpu_weight" and float(v) < 0):
                raise PlacementError(
                    f"must be finite{' and >= 0' if fld == 'gpu_weight' else ''}, got {v!r}",
                    kind="problem",
                    field=f"hypernode_order.{fld}",
                )
            object.__setattr__(self, fld, float(v))
        object.__setattr__(self, "weights", w)


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class PlacementProblem:
    """Gangs over the free capacity of a cluster.

    Parameters
    ----------
    free:
        ``(n_nodes, n_resources)`` int64 free capacity (idle, or future idle).
    allocatable:
        ``(n_nodes, n_resources)`` int64 capacity (for binpack scores); defaults to ``free``.
    gpu_free:
        ``(n_nodes, max_gpus)`` int64 free milli-GPU per device (0 on missing devices).
    gpu_capacity:
        ``(n_nodes,)`` int64 milli-GPU of one device (0 without GPUs).
    gpu_count:
        ``(n_nodes,)`` int64 devices per node; defaults to ``max_gpus`` on nodes with GPUs.
    gpu_sharing:
        ``(n_nodes,)`` bool: devices may be shared by fractional requests.
    topology:
        The cluster's topology tree.
    gangs:
        One or many gangs.
    weights:
        ``(n_gangs,)`` int64 priority weights (joint placement maximises Σ weight of placed
        gangs); defaults to ones.
    used:
        ``(n_nodes, n_resources)`` int64 resources in use, for the hypernode order; defaults to
        ``allocatable − free``.
    hypernode_order:
        Rank the domains of a tier for topology gangs as Volcano does (see the module
        docstring); ``None``: lowest tier first, tightest domain first.
    """

    free: I64
    gpu_free: I64
    gpu_capacity: I64
    gpu_sharing: BOOL
    topology: Topology
    gangs: tuple[GangRequest, ...]
    allocatable: I64 | None = None
    gpu_count: I64 | None = None
    weights: I64 | None = None
    used: I64 | None = None
    hypernode_order: HypernodeOrder | None = None
    _emptiness: I64 | None = field(init=False, repr=False, default=None)

    def __post_init__(self) -> None:
        free = _arr(self.free, np.int64, name="", fld="free")
        n = self.topology.n_nodes
        if free.ndim != 2 or free.shape[0] != n:
            raise PlacementError(
                f"shape {free.shape}, expected ({n}, n_resources)", kind="problem", field="free"
            )
        alloc = _arr(
            free if self.allocatable is None else self.allocatable,
            np.int64,
            name="",
            fld="allocatable",
        )
        if alloc.shape != free.shape:
            raise PlacementError(
                f"shape {alloc.shape}, expected {free.shape}", kind="problem", field="allocatable"
            )
        used = _arr(alloc - free if self.used is None else self.used, np.int64, name="", fld="used")
        if used.shape != free.shape:
            raise PlacementError(
                f"shape {used.shape}, expected {free.shape}", kind="problem", field="used"
            )
        order = self.hypernode_order
        if order is not None:
            if not isinstance(order, HypernodeOrder):
                raise PlacementError(
                    "expected a HypernodeOrder", kind="problem", field="hypernode_order"
                )
            if order.weights.shape != (free.shape[1],):
                raise PlacementError(
                    f"{order.weights.shape[0]} weights, the cluster has {free.shape[1]} "
                    "resource columns",
                    kind="problem",
                    field="hypernode_order.weights",
                )
        gfree = _arr(self.gpu_free, np.int64, name="", fld="gpu_free")
        if gfree.ndim != 2 or gfree.shape[0] != n:
            raise PlacementError(
                f"shape {gfree.shape}, expected ({n}, max_gpus)", kind="problem", field="gpu_free"
            )
        cap = _arr(self.gpu_capacity, np.int64, name="", fld="gpu_capacity")
        share = _arr(self.gpu_sharing, np.bool_, name="", fld="gpu_sharing")
        count = _arr(
            np.where(cap > 0, gfree.shape[1], 0) if self.gpu_count is None else self.gpu_count,
            np.int64,
            name="",
            fld="gpu_count",
        )
        for fld, arr in (("gpu_capacity", cap), ("gpu_sharing", share), ("gpu_count", count)):
            if arr.shape != (n,):
                raise PlacementError(
                    f"shape {arr.shape}, expected ({n},)", kind="problem", field=fld
                )
        gangs = tuple(self.gangs)
        names = [g.name for g in gangs]
        for g in gangs:
            if not isinstance(g, GangRequest):
                raise PlacementError("expected a GangRequest", kind="problem", field="gangs")
            if g.request.shape[1] != free.shape[1]:
                raise PlacementError(
                    f"{g.request.shape[1]} resource columns, the cluster has {free.shape[1]}",
                    kind="gang",
                    name=g.name,
                    field="request",
                )
            if g.mask.shape[1] != n:
                raise PlacementError(
                    f"mask over {g.mask.shape[1]} nodes, the cluster has {n}",
                    kind="gang",
                    name=g.name,
                    field="mask",
                )
            if g.slice_size and not 0 <= g.slice_tier <= self.topology.tiers[-1]:
                raise PlacementError(
                    f"slice_tier {g.slice_tier} outside 0..{self.topology.tiers[-1]}",
                    kind="gang",
                    name=g.name,
                    field="slice_tier",
                )
        if len(set(names)) != len(names):
            raise PlacementError("duplicate gang name", kind="problem", field="gangs")
        weights = _arr(
            np.ones(len(gangs), dtype=np.int64) if self.weights is None else self.weights,
            np.int64,
            name="",
            fld="weights",
        )
        if weights.shape != (len(gangs),) or (weights < 0).any():
            raise PlacementError(
                f"expected {len(gangs)} non-negative weights", kind="problem", field="weights"
            )
        object.__setattr__(self, "free", free)
        object.__setattr__(self, "allocatable", alloc)
        object.__setattr__(self, "used", used)
        object.__setattr__(self, "gpu_free", gfree)
        object.__setattr__(self, "gpu_capacity", cap)
        object.__setattr__(self, "gpu_sharing", share)
        object.__setattr__(self, "gpu_count", count)
        object.__setattr__(self, "gangs", gangs)
        object.__setattr__(self, "weights", weights)

    @property
    def emptiness(self) -> I64:
        """``(n_gangs, n_nodes)`` :func:`node_emptiness` of every gang (read-only), worked out
        when first asked for: a placement that fails before it compares nodes never needs it."""
        emp = self._emptiness
        if emp is None:
            emp = (
                np.stack([node_emptiness(self, g) for g in self.gangs])
                if self.gangs
                else np.zeros((0, self.n_nodes), dtype=np.int64)
            )
            emp.setflags(write=False)
            object.__setattr__(self, "_emptiness", emp)
        return emp

    @property
    def n_nodes(self) -> int:
        return self.topology.n_nodes

    def whole_free(self) -> I64:
        """``(n_nodes,)`` number of completely free devices per node."""
        cap = self.gpu_capacity[:, None]
        out: I64 = ((self.gpu_free >= cap) & (cap > 0)).sum(axis=1).astype(np.int64)
        return out

    def per_device_need(self, gang: GangRequest) -> tuple[I64, BOOL]:
        """``(n_templates, n_nodes)`` milli-GPU taken on each device by one replica, and
        whether the device is taken whole (it must then be completely free)."""
        cap = self.gpu_capacity[None, :]
        milli = gang.gpu_milli[:, None]  # type: ignore[index]
        whole = exclusive(milli, cap, self.gpu_sharing[None, :])
        need: I64 = device_take(milli, cap, self.gpu_sharing[None, :])
        return need, np.asarray(whole)


def hypernode_scores(
    problem: PlacementProblem,
    gang_index: int,
    rank: int,
    free: I64 | None = None,
    gpu_free: I64 | None = None,
) -> F64:
    """``(n_domains(rank),)`` Volcano's hypernode bin-packing score of every domain of tier
    rank ``rank`` (the nodes for rank 0) for gang ``gang_index`` (see the module docstring),
    with the problem's :class:`HypernodeOrder` (weight 1 for every resource and the GPUs when
    it has none). ``free`` / ``gpu_free``: the current free state (default: the problem's);
    what it lacks against the problem's ``free`` counts as used."""
    topo = problem.topology
    gang = problem.gangs[gang_index]
    order = problem.hypernode_order
    n_res = problem.free.shape[1]
    if order is None:
        order = HypernodeOrder(weights=np.ones(n_res), gpu_weight=1.0)
    free = problem.free if free is None else free
    gpu_free = problem.gpu_free if gpu_free is None else gpu_free
    alloc = problem.allocatable
    base = problem.used
    assert alloc is not None and base is not None and problem.gpu_count is not None
    used = base + (problem.free - free)
    demand = (gang.counts @ gang.request).astype(np.float64)
    assert gang.gpu_count is not None and gang.gpu_milli is not None
    gpu_demand = float((gang.counts * gang.gpu_count * gang.gpu_milli).sum())
    cols = np.flatnonzero((demand > 0) & (order.weights > 0))
    w = order.weights[cols]
    a_cols = [alloc[:, cols].astype(np.float64)]
    u_cols = [used[:, cols].astype(np.float64)]
    d_cols = [demand[cols]]
    if gpu_demand > 0 and order.gpu_weight > 0:
        g_alloc = (problem.gpu_capacity * problem.gpu_count).astype(np.float64)
        g_free = np.clip(gpu_free, 0, None).sum(axis=1).astype(np.float64)
        a_cols.append(g_alloc[:, None])
        u_cols.append((g_alloc - np.minimum(g_free, g_alloc))[:, None])
        d_cols.append(np.array([gpu_demand]))
        w = np.append(w, order.gpu_weight)
    a_node = np.concatenate(a_cols, axis=1)
    u_node = np.concatenate(u_cols, axis=1)
    d_all = np.concatenate(d_cols)
    if rank <= 0:
        a_dom, u_dom = a_node, u_node
    else:
        groups = topo.domain_of[rank - 1]
        inside = groups >= 0
        a_dom = np.zeros((topo.n_domains(rank), a_node.shape[1]))
        u_dom = np.zeros_like(a_dom)
        np.add.at(a_dom, groups[inside], a_node[inside])
        np.add.at(u_dom, groups[inside], u_node[inside])
    after = u_dom + d_all
    total_w = float(w.sum())
    if total_w <= 0 or order.scale == 0:
        return np.zeros(a_dom.shape[0])
    ratio = np.where(a_dom > 0, after / np.maximum(a_dom, 1.0), 0.0)
    score = (ratio * w).sum(axis=1) / total_w
    overflow = (after > a_dom).any(axis=1)
    out: F64 = np.where(overflow, 0.0, score) * order.scale
    return out


def node_emptiness(problem: PlacementProblem, gang: GangRequest) -> I64:
    """``(n_nodes,)`` int64 in 0..100: mean free share of the resources ``gang`` asks for."""
    alloc = problem.allocatable
    assert alloc is not None
    asked = gang.request.sum(axis=0) > 0
    cols: list[npt.NDArray[np.float64]] = []
    if asked.any():
        a = alloc[:, asked].astype(np.float64)
        f = np.clip(problem.free[:, asked], 0, None).astype(np.float64)
        cols.extend(np.where(a > 0, f / np.maximum(a, 1.0), 0.0).T)
    if gang.gpu_count is not None and (gang.gpu_count > 0).any():
        assert problem.gpu_count is not None
        total = (problem.gpu_capacity * problem.gpu_count).astype(np.float64)
        gfree = np.clip(problem.gpu_free, 0, None).sum(axis=1).astype(np.float64)
        if total.size and total.max() > 0:
            cols.append(np.where(total > 0, gfree / np.maximum(total, 1.0), 0.0))
    if not cols:
        return np.zeros(problem.n_nodes, dtype=np.int64)
    out: I64 = np.rint(100.0 * np.mean(np.stack(cols), axis=0)).astype(np.int64)
    return out
