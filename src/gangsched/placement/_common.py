"""Array kernels shared by the placers: replica capacity per node, node packing, device
choice, candidate domains and the words of an infeasibility reason.

Per-node replica capacity ``q[t, n]`` is the number of replicas of template ``t`` that fit on
node ``n`` *alone* (nothing else of the gang there). It is exact, devices included:

* resources: ``min_r floor(free[n, r] / request[t, r])``;
* whole devices: ``floor(whole_free[n] / gpu_count[t])``;
* shared devices: with ``s_d = floor(free_d / milli)`` replicas' worth of room on device ``d``,
  ``k`` replicas that each need ``g`` *distinct* devices fit iff ``Σ_d min(k, s_d) ≥ k·g``
  (a replica never takes a device twice). The largest such ``k`` is found by a vectorised
  bisection, and the packing in :func:`choose_devices` — each replica takes the ``g`` devices
  with the most room — always realises it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from gangsched.errors import ConfigError
from gangsched.model import TopologyMode
from gangsched.placement.problem import GangRequest, PlacementProblem, hypernode_scores, slice_rank

I64 = npt.NDArray[np.int64]
BOOL = npt.NDArray[np.bool_]
Replica = tuple[int, int, tuple[int, ...]]

_BIG = np.int64(2**40)


@dataclass(slots=True, eq=False)
class GangView:
    """One gang against a given free state: effective mask, capacities, device needs."""

    index: int
    gang: GangRequest
    mask: BOOL  # (n_templates, n_nodes) gang mask ∧ allowed topology ∧ q > 0
    q: I64  # (n_templates, n_nodes)
    need: I64  # (n_templates, n_nodes) milli-GPU per device
    whole: BOOL  # (n_templates, n_nodes)
    allowed: int  # highest tier rank the gang may span
    cover: I64  # (n_nodes,) cover id at the allowed rank (hard gangs), else zeros
    slice_rank: int  # rank of the slice groups (problem.slice_groups; 0: the nodes)


def topology_mask(problem: PlacementProblem, gang: GangRequest) -> tuple[BOOL, I64, int]:
    """Nodes a gang may use at all given its topology constraint, their cover ids at the
    allowed tier rank and that rank."""
    topo = problem.topology
    allowed = gang.allowed_rank(topo)
    if gang.mode is TopologyMode.HARD:
        cover = topo.cover(allowed)
        return np.asarray(cover >= 0), cover, allowed
    return np.ones(topo.n_nodes, dtype=np.bool_), np.zeros(topo.n_nodes, dtype=np.int64), allowed


def replica_capacity(
    problem: PlacementProblem,
    gang: GangRequest,
    free: I64,
    gpu_free: I64,
    mask: BOOL,
    *,
    clip: bool = True,
    device_need: tuple[I64, BOOL] | None = None,
) -> I64:
    """``(n_templates, n_nodes)`` replicas of each template that fit on each node alone
    (at most the template's count unless ``clip`` is false). ``device_need``: the problem's
    :meth:`~PlacementProblem.per_device_need` of ``gang``, when the caller has it."""
    req = gang.request
    # Only the asked resources bound the count (the others would give _BIG).
    cols = np.flatnonzero((req > 0).any(axis=0))
    if cols.size:
        r = req[:, cols]
        f = np.maximum(free[:, cols], 0)
        ratio = np.where(r[:, None, :] > 0, f[None, :, :] // np.maximum(r, 1)[:, None, :], _BIG)
        q: I64 = ratio.min(axis=2)
    else:
        q = np.full((req.shape[0], free.shape[0]), _BIG)
    need, whole = problem.per_device_need(gang) if device_need is None else device_need
    gc = gang.gpu_count
    assert gc is not None
    if (gc > 0).any():
        cap = problem.gpu_capacity
        g = np.maximum(gpu_free, 0)
        wfree = ((g >= cap[:, None]) & (cap[:, None] > 0)).sum(axis=1)
        for t in np.flatnonzero(gc > 0).tolist():
            k = int(gc[t])
            if whole[t].all():  # every node takes its devices whole: the shares never count
                q[t] = np.minimum(q[t], np.where(cap > 0, wfree // k, 0))
                continue
            nd = np.maximum(need[t], 1)
            slots = np.where(cap[:, None] > 0, g // nd[:, None], 0)
            if k == 1:
                frac = slots.sum(axis=1)
            else:
                lo = np.zeros(slots.shape[0], dtype=np.int64)
                hi = slots.sum(axis=1) // k
                while (lo < hi).any():
                    mid = (lo + hi + 1) // 2
                    ok = np.minimum(slots, mid[:, None]).sum(axis=1) >= mid * k
                    lo = np.where(ok, mid, lo)
                    hi = np.where(ok, hi, mid - 1)
                frac = lo
            gq = np.where(whole[t], wfree // k, frac)
            q[t] = np.minimum(q[t], np.where(cap > 0, gq, 0))
    if clip:
        q = np.minimum(q, gang.counts[:, None])
    out: I64 = np.where(mask, q, 0).astype(np.int64)
    return out


def gang_view(
    problem: PlacementProblem, index: int, free: I64 | None = None, gpu_free: I64 | None = None
) -> GangView:
    gang = problem.gangs[index]
    free = problem.free if free is None else free
    gpu_free = problem.gpu_free if gpu_free is None else gpu_free
    tmask, cover, allowed = topology_mask(problem, gang)
    mask = gang.mask & tmask[None, :]
    need, whole = problem.per_device_need(gang)
    q = replica_capacity(problem, gang, free, gpu_free, mask, device_need=(need, whole))
    s_rank = slice_rank(problem.topology, gang)
    return GangView(index, gang, np.asarray(mask & (q > 0)), q, need, whole, allowed, cover, s_rank)


def split_target(gang: GangRequest, capacity: I64) -> I64 | None:
    """Replicas per template to place given per-template ``capacity``: the minimums first,
    then the rest in template order. ``None`` when ``capacity`` cannot reach ``size``."""
    assert gang.min_counts is not None
    avail = np.minimum(capacity, gang.counts)
    if (avail < gang.min_counts).any() or int(avail.sum()) < gang.size:
        return None
    target = gang.min_counts.copy()
    left = gang.size - int(target.sum())
    for t in range(target.size):
        take = min(left, int(avail[t] - target[t]))
        target[t] += take
        left -= take
    return target


def choose_devices(
    row: I64, need: int, whole: bool, count: int, capacity: int
) -> tuple[int, ...] | None:
    """Device indices for one replica on a node whose per-device free milli is ``row``.

    Whole devices: the lowest-index completely free ones. Shares: for one device, the fullest
    device with room (best fit); for several, the devices with the most room (ties to the lower
    index), which is what keeps the capacity bound of :func:`replica_capacity` reachable.
    """
    if whole:
        ok = np.flatnonzero((row >= capacity) & (capacity > 0))
        return tuple(int(i) for i in ok[:count]) if ok.size >= count else None
    ok = np.flatnonzero(row >= need)
    if ok.size < count:
        return None
    order = ok[np.lexsort((ok, row[ok]))] if count == 1 else ok[np.lexsort((ok, -row[ok]))]
    return tuple(sorted(int(i) for i in order[:count]))


def pack_node(
    problem: PlacementProblem,
    view: GangView,
    node: int,
    rem: I64,
    free: I64,
    gpu_free: I64,
) -> tuple[I64, list[Replica]]:
    """Put as many of the ``rem`` replicas as fit on ``node`` (whole-device templates and
    larger device counts first), updating ``free`` / ``gpu_free`` in place."""
    gang = view.gang
    gc = gang.gpu_count
    assert gc is not None
    placed = np.zeros_like(rem)
    recs: list[Replica] = []
    order = sorted(
        range(rem.size),
        key=lambda t: (not view.whole[t, node], -int(gc[t]), -int(gang.request[t].sum()), t),
    )
    cap = int(problem.gpu_capacity[node])
    for t in order:
        if rem[t] == 0 or not view.mask[t, node]:
            continue
        req = gang.request[t]
        while placed[t] < rem[t]:
            if (req > free[node]).any():
                break
            devs: tuple[int, ...] = ()
            if gc[t] > 0:
                need = int(view.need[t, node])
                found = choose_devices(
                    gpu_free[node], need, bool(view.whole[t, node]), int(gc[t]), cap
                )
                if found is None:
                    break
                devs = found
                gpu_free[node, list(devs)] -= need
            free[node] -= req
            placed[t] += 1
            recs.append((t, node, devs))
    return placed, recs


def follows_hypernode_order(problem: PlacementProblem, gang: GangRequest) -> bool:
    """Whether ``gang`` is placed as Volcano places a topology gang: the problem has a
    hypernode order and the gang a topology constraint (hard or soft)."""
    return problem.hypernode_order is not None and gang.mode is not None


def first_rank(problem: PlacementProblem, gang: GangRequest) -> int:
    """The lowest tier rank a placer searches: 1 (the lowest hypernode tier, as Volcano's
    gradient) for a gang that follows the hypernode order, else 0 (a single node)."""
    return 1 if follows_hypernode_order(problem, gang) else 0


def group_sum(groups: npt.NDArray[np.int64], values: npt.NDArray[Any], n_groups: int) -> Any:
    """Per group the sum of the rows of ``values`` (``(n,)`` or ``(n, k)``; ``groups`` ``(n,)``
    in ``[0, n_groups)``): what ``np.add.at`` into zeros gives, without its slow unbuffered
    loop. Integers are summed exactly (a cumulative sum over the rows sorted by group); floats
    by one ``bincount`` per column, which adds in row order as ``np.add.at`` does."""
    flat = values.ndim == 1
    vals = values[:, None] if flat else values
    if np.issubdtype(vals.dtype, np.floating):
        out = np.empty((n_groups, vals.shape[1]), dtype=vals.dtype)
        for j in range(vals.shape[1]):
            out[:, j] = np.bincount(groups, weights=vals[:, j], minlength=n_groups)
    else:
        order = np.argsort(groups, kind="stable")
        cum = np.zeros((groups.size + 1, vals.shape[1]), dtype=vals.dtype)
        np.cumsum(vals[order], axis=0, out=cum[1:])
        ends = np.searchsorted(groups[order], np.arange(n_groups + 1))
        out = cum[ends[1:]] - cum[ends[:-1]]
    return out[:, 0] if flat else out


def domain_order(
    problem: PlacementProblem, view: GangView, tier: int, need: I64, free: I64, gpu_free: I64
) -> npt.NDArray[np.intp]:
    """Domains of rank ``tier`` (nodes for rank 0) whose summed per-node capacity can host the gang
    (the minimum of every template and ``size`` in total), tightest first for a demand of
    ``need`` replicas per template: Volcano's hypernode binpack score — the mean over the asked
    resources of (used + request) / allocatable — highest first, ties to the lower index.
    With the problem's :class:`~gangsched.placement.problem.HypernodeOrder` and a topology
    gang, the score is :func:`~gangsched.placement.problem.hypernode_scores` (weighted, 0 on
    overflow, the demand of all the gang's replicas)."""
    topo = problem.topology
    gang = view.gang
    usable = view.mask.any(axis=0)
    if tier == 0:
        groups = np.arange(topo.n_nodes, dtype=np.int64)
        n_groups = topo.n_nodes
    else:
        groups = topo.domain_of[tier - 1]
        n_groups = topo.n_domains(tier)
    sel = usable & (groups >= 0)
    qsum = group_sum(groups[sel], view.q[:, sel].T, n_groups)
    assert gang.min_counts is not None
    ok = (qsum >= gang.min_counts[None, :]).all(axis=1) & (
        np.minimum(qsum, gang.counts[None, :]).sum(axis=1) >= gang.size
    )
    if ok.any() and gang.n_templates > 1:  # one template: implied by its capacities
        ok &= _room_covers_demand(problem, view, groups, n_groups, sel, free, gpu_free)
    if not ok.any():
        return np.zeros(0, dtype=np.intp)
    idx = np.flatnonzero(ok)
    if follows_hypernode_order(problem, gang):
        vscore = hypernode_scores(problem, view.index, tier, free, gpu_free)
        return idx[np.lexsort((idx, -vscore[idx]))].astype(np.intp)
    alloc = problem.allocatable
    assert alloc is not None
    asked = gang.request.sum(axis=0) > 0
    a_cols = [alloc[:, asked]]
    f_cols = [np.maximum(free[:, asked], 0)]
    demand = [need @ gang.request[:, asked]]
    gc = gang.gpu_count
    assert gc is not None and problem.gpu_count is not None
    if (gc > 0).any():
        a_cols.append((problem.gpu_capacity * problem.gpu_count)[:, None])
        f_cols.append(np.maximum(gpu_free, 0).sum(axis=1)[:, None])
        assert gang.gpu_milli is not None
        demand.append(np.array([int((need * gc * gang.gpu_milli).sum())]))
    a_all = np.concatenate(a_cols, axis=1)
    f_all = np.concatenate(f_cols, axis=1)
    d_all = np.concatenate(demand)
    in_any = groups >= 0
    a_dom = group_sum(groups[in_any], a_all[in_any].astype(np.float64), n_groups)
    f_dom = group_sum(groups[in_any], f_all[in_any].astype(np.float64), n_groups)
    if a_dom.shape[1]:
        frac = np.where(a_dom > 0, (a_dom - f_dom + d_all) / np.maximum(a_dom, 1.0), 0.0)
        score = frac.mean(axis=1)
    else:
        score = np.zeros(n_groups)
    return idx[np.lexsort((idx, -score[idx]))].astype(np.intp)


def forced_counts(gang: GangRequest) -> I64:
    """``(n_templates,)`` replicas of each template every placement holds: its minimum, or
    what the other templates cannot make up for."""
    assert gang.min_counts is not None
    out: I64 = np.maximum(gang.min_counts, gang.size - (int(gang.counts.sum()) - gang.counts))
    return out


def demand_floor(view: GangView, groups: I64, n_groups: int, sel: BOOL) -> tuple[I64, I64]:
    """The least a placement of the gang inside each group takes, summed over its replicas:
    ``(n_resources,)`` per resource, and ``(n_groups,)`` milli-GPU of device capacity (the
    role minimums, then the remaining replicas at the cheapest template that may still grow;
    a replica takes at least ``gpu_count · need`` milli at the cheapest node of the group its
    mask allows)."""
    gang = view.gang
    assert gang.min_counts is not None and gang.gpu_count is not None
    base = forced_counts(gang)
    extra = gang.size - int(base.sum())
    req = gang.request
    res: I64 = base @ req
    grow = gang.counts > base
    if extra > 0 and grow.any():
        res = res + extra * req[grow].min(axis=0)
    big = np.int64(2**40)
    n_t = gang.n_templates
    need = np.full((n_groups, n_t), big, dtype=np.int64)
    cand = np.where(view.mask[:, sel], view.need[:, sel], big).T  # (n_sel, n_templates)
    np.minimum.at(need, groups[sel], cand)
    per = need * gang.gpu_count[None, :]  # (n_groups, n_templates) milli per replica
    per = np.where(gang.gpu_count[None, :] > 0, per, 0)
    gpu: I64 = (per * base[None, :]).sum(axis=1)
    if extra > 0 and grow.any():
        gpu = gpu + extra * per[:, grow].min(axis=1)
    return res.astype(np.int64), gpu.astype(np.int64)


def _room_covers_demand(
    problem: PlacementProblem,
    view: GangView,
    groups: I64,
    n_groups: int,
    sel: BOOL,
    free: I64,
    gpu_free: I64,
) -> BOOL:
    """``(n_groups,)`` whether each group's summed free room (usable nodes only) covers the
    gang's :func:`demand_floor` — a necessary condition over all templates together, which
    the per-template capacities miss (a node may host the workers or the evaluators, not
    both)."""
    del problem
    res, gpu = demand_floor(view, groups, n_groups, sel)
    cols = np.flatnonzero(res > 0)
    ok = np.ones(n_groups, dtype=np.bool_)
    if cols.size:
        room = group_sum(groups[sel], np.maximum(free[sel][:, cols], 0), n_groups)
        ok &= (room >= res[cols]).all(axis=1)
    if (gpu > 0).any():
        g_room = group_sum(groups[sel], np.maximum(gpu_free[sel], 0).sum(axis=1), n_groups)
        ok &= g_room >= gpu
    return ok


def infeasible_reason(problem: PlacementProblem, view: GangView) -> str:
    """Human words for "no placement": how many replicas the best allowed domain holds."""
    gang = view.gang
    topo = problem.topology
    usable = view.mask.any(axis=0)
    if not usable.any():
        return (
            f"gang {gang.name!r}: no node can host any replica (predicates, resources or topology)"
        )
    best = 0
    where = "the cluster"
    hard = gang.mode is TopologyMode.HARD
    groups = view.cover if hard else np.zeros(topo.n_nodes, dtype=np.int64)
    sel = usable & (groups >= 0)
    if sel.any():
        uniq, inv = np.unique(groups[sel], return_inverse=True)
        total = np.zeros(uniq.size, dtype=np.int64)
        np.add.at(total, inv, view.q[:, sel].sum(axis=0))
        k = int(np.argmax(total))
        best = int(total[k])
        if gang.mode is TopologyMode.HARD:
            rank, idx = topo.tier_of_global(int(uniq[k]))
            where = f"tier-{topo.tier_number(rank)} domain {topo.name_of(rank, idx)!r}"
    allowed = gang.allowed_tier(topo.tiers[-1])
    limit = f"one domain of tier <= {allowed}" if gang.mode is TopologyMode.HARD else "the cluster"
    return (
        f"gang {gang.name!r}: {gang.size} replicas must fit in {limit}; the best candidate "
        f"({where}) holds at most {min(best, gang.size)} of them one template at a time"
        + (f" (slices of {gang.slice_size} per tier-{gang.slice_tier})" if gang.slice_size else "")
    )


#: Most solver workers a placer may ask for (CP-SAT starts one thread per worker).
MAX_WORKERS = 256
#: Largest solver seed: CP-SAT's ``random_seed`` is a 32-bit signed integer.
MAX_SEED = 2**31 - 1
#: Largest ``max_domains`` (candidate domains handed to one solve).
MAX_DOMAINS = 1_000_000


def check_solver_parameters(
    *,
    time_limit_s: object,
    seed: object,
    workers: object,
    max_deterministic_time: object,
    max_domains: object = 4,
    kind: str,
    name: str,
    fields: dict[str, str] | None = None,
) -> tuple[float | None, float | None]:
    """Check a CP-SAT placer's parameters before any solver sees them; returns
    ``(time_limit_s, max_deterministic_time)`` as floats (``None`` kept).

    ``seed`` is an int in ``0 ..< 2**31``, ``workers`` an int in ``1 .. 256``, ``max_domains``
    an int ≥ 1, each limit ``None`` or a finite number ≥ 0 (a deterministic budget below
    1e-6, 0 included: answer at once with greedy's placement; not both ``None``). Raises
    :class:`~gangsched.errors.ConfigError` naming ``kind`` / ``name`` and the parameter
    (``fields`` maps a parameter to the name the caller knows it by, e.g. ``placer.seed``).
    Importing no solver, so configurations are checked without OR-Tools.
    """
    names = fields or {}

    def err(param: str, detail: str) -> ConfigError:
        return ConfigError(detail, kind=kind, name=name, field=names.get(param, param))

    def integer(param: str, value: object, lo: int, hi: int) -> None:
        if not isinstance(value, int | np.integer) or isinstance(value, bool | np.bool_):
            raise err(param, f"expected an integer, got {value!r}")
        if not lo <= int(value) <= hi:
            raise err(param, f"{int(value)} is outside {lo}..{hi}")

    def limit(param: str, value: object) -> float | None:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float | np.number):
            raise err(param, f"expected a number of seconds, got {value!r}")
        try:
            out = float(value)
        except OverflowError:
            out = math.inf
        if not math.isfinite(out) or out < 0:
            raise err(param, f"must be a finite number >= 0, got {value!r}")
        return out

    integer("seed", seed, 0, MAX_SEED)
    integer("workers", workers, 1, MAX_WORKERS)
    integer("max_domains", max_domains, 1, MAX_DOMAINS)
    wall = limit("time_limit_s", time_limit_s)
    work = limit("max_deterministic_time", max_deterministic_time)
    if wall is None and work is None:
        raise err(
            "max_deterministic_time",
            "give a deterministic-time budget or a wall-clock limit (both are off)",
        )
    return wall, work
