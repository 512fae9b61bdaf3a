"""Lower bounds of the single-gang search: per candidate domain, the objective levels; how
many domains go into one solve."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from gangsched.placement._common import GangView, demand_floor, forced_counts
from gangsched.placement.cpsat._vars import I64
from gangsched.placement.problem import PlacementProblem


def _domain_bounds(
    problem: PlacementProblem,
    view: GangView,
    tier: int,
    order: npt.NDArray[np.intp],
    size: int,
    min_nodes: int = 1,
    free: I64 | None = None,
    gpu_free: I64 | None = None,
) -> list[tuple[int, ...]]:
    """Per candidate domain, a lower bound on the objective tuple of any placement inside it:
    for every tier, the fewest of its domains (inside the candidate) whose summed capacity
    reaches ``size``; the same for nodes; for the waste, the sum of the smallest node
    emptiness values over that many nodes."""
    topo = problem.topology
    free = problem.free if free is None else free
    gpu_free = problem.gpu_free if gpu_free is None else gpu_free
    emp = problem.emptiness[view.index]
    usable: npt.NDArray[np.bool_] = np.asarray(view.mask.any(axis=0))
    out: list[tuple[int, ...]] = []
    for d in order.tolist():
        nodes = topo.members(tier, int(d))
        nodes = nodes[usable[nodes]]
        caps, needs = node_rows(problem, view, nodes, free, gpu_free, size)
        lb = [tier]
        for t in range(topo.top_tier, 0, -1):
            lb.append(_fewest_rows(_group_sums(caps, topo.nest_group(t)[nodes]), needs))
        n_lb = max(_fewest_rows(caps, needs), min_nodes)
        waste = int(np.sort(emp[nodes])[:n_lb].sum())  # the emptiest-free n_lb nodes
        if n_lb == 2 and view.gang.n_templates > 1 and 2 <= nodes.size <= 64:
            n_lb, waste = _pair_bound(emp[nodes], caps, needs)
        lb.append(n_lb)
        lb.append(waste)
        out.append(tuple(lb))
    return out


def node_rows(
    problem: PlacementProblem,
    view: GangView,
    nodes: npt.NDArray[np.intp],
    free: I64,
    gpu_free: I64,
    size: int,
) -> tuple[I64, list[int]]:
    """What every placement of the gang on (a subset of) ``nodes`` must cover, as rows
    over the nodes with the amount each row needs: the replicas a node can take (``size``),
    each template with a forced count alone (that count), and each resource and the GPU
    devices with the gang's demand floor (:func:`demand_floor`). Any set of nodes holding a
    placement reaches every row's need."""
    forced = forced_counts(view.gang)
    f_t = np.flatnonzero(forced > 0).tolist()
    q = np.where(view.mask[:, nodes], view.q[:, nodes], 0)
    rows = [q.sum(axis=0), *(q[t] for t in f_t)]
    needs = [size, *(int(forced[t]) for t in f_t)]
    if view.gang.n_templates > 1 and nodes.size:
        sel = np.zeros(problem.n_nodes, dtype=np.bool_)
        sel[nodes] = True
        res, gpu = demand_floor(view, np.zeros(problem.n_nodes, dtype=np.int64), 1, sel)
        for r in np.flatnonzero(res > 0).tolist():
            rows.append(np.clip(free[nodes, r], 0, None))
            needs.append(int(res[r]))
        if int(gpu[0]) > 0:
            rows.append(np.clip(gpu_free[nodes], 0, None).sum(axis=1))
            needs.append(int(gpu[0]))
    return np.stack(rows).astype(np.int64), needs


def _group_sums(caps: I64, groups: I64) -> I64:
    """``(rows, groups)`` sums of the columns of ``caps`` per group id (``groups``, one per
    column)."""
    _, inv = np.unique(groups, return_inverse=True)
    inv = inv.reshape(-1)
    out = np.zeros((caps.shape[0], int(inv.max(initial=-1)) + 1), dtype=np.int64)
    np.add.at(out.T, inv, caps.T)
    return out


def _fewest_rows(caps: I64, needs: list[int]) -> int:
    """The most, over the rows of ``caps`` ``(rows, items)``, of the fewest items whose row
    values reach that row's need — a lower bound on the items a placement uses (0 when
    some row cannot reach its need)."""
    best = 0
    for row, need in zip(caps, needs, strict=True):
        cum = np.cumsum(np.sort(row)[::-1])  # the largest items first
        k = int(np.searchsorted(cum, need)) + 1
        if k > row.size:
            return 0
        best = max(best, k)
    return best


def _fewest_in_domains(per_domain: list[tuple[I64, list[int]]]) -> int:
    """The least, over domains given as ``(caps, needs)``, of :func:`_fewest_rows`: a lower
    bound on the items a placement inside one of them uses (0 when no domain reaches its
    needs)."""
    best = 0
    for caps, needs in per_domain:
        k = _fewest_rows(caps, needs)
        if k and (best == 0 or k < best):
            best = k
    return best


#: Largest need a row of :func:`waste_bound` is solved at (larger ones are scaled down).
WASTE_SCALE = 1024


def waste_bound(caps: I64, needs: list[int], emp: I64, n: int, stop: int | None = None) -> int:
    """A lower bound on the summed emptiness of exactly ``n`` of the items (nodes) when they
    must reach every row's need (``caps`` ``(rows, items)``, see :func:`node_rows`): per row
    the least emptiness of ``n`` items whose values reach the need (a knapsack with a
    cardinality, by dynamic programming over the items), the most over the rows. A row with
    a large need is solved on values divided by their common divisor, or by a larger unit
    (values rounded up, the need down: a relaxation). ``2**62`` when no ``n`` items reach
    some row. With ``stop``, the rows are worked through cheapest first and the search ends
    once the bound reaches ``stop``: the answer is then at least ``stop`` (and still a lower
    bound); below ``stop`` it is the full bound."""
    inf = np.int64(2**62)
    if n <= 0 or n > caps.shape[1]:
        return int(inf) if n > caps.shape[1] else 0
    best = 0
    scaled: list[tuple[int, I64]] = []
    for row, need in zip(caps, needs, strict=True):
        cap = np.clip(row, 0, None)
        unit = math.gcd(need, *cap.tolist()) or 1  # exact when the values share a unit
        if need // unit > WASTE_SCALE:
            unit = need // WASTE_SCALE
        scaled.append((need // unit, -(-cap // unit)))
    if stop is not None:
        scaled.sort(key=lambda r: r[0])  # the cheapest tables first
    for want, cap in scaled:
        if stop is not None and best >= stop:
            break
        f = np.full((n + 1, want + 1), inf, dtype=np.int64)
        f[0, 0] = 0
        cols = np.arange(want + 1)
        # like items (same value, same emptiness) are taken as pieces of 1, 2, 4, … of them:
        # every count up to the items there are (at most n) is a sum of distinct pieces, so
        # the table is the one item by item, at a fraction of the steps on like nodes
        kinds, times = np.unique(np.stack([cap, emp]), axis=1, return_counts=True)
        for (a, e), c in zip(kinds.T.tolist(), np.minimum(times, n).tolist(), strict=True):
            k = 1
            while c > 0:
                k = min(k, c)
                prev = f[:-k, np.maximum(cols - k * a, 0)]
                f[k:] = np.minimum(f[k:], np.minimum(prev + k * e, inf))
                c -= k
                k *= 2
        best = max(best, int(f[n, want]))
    return best


def _pair_bound(emp: I64, caps: I64, needs: list[int]) -> tuple[int, int]:
    """For a domain whose placements use at least two nodes (``emp`` their emptiness,
    ``caps`` / ``needs`` their rows of :func:`node_rows`): ``(2, least emptiness of a pair of
    nodes whose summed rows reach every need)``, or ``(3, the three least emptiness values)``
    when no pair does — lower bounds on the node count and the waste of any placement in the
    domain."""
    k = emp.size
    ok = np.triu(np.ones((k, k), dtype=np.bool_), k=1)
    for row, need in zip(caps, needs, strict=True):
        ok &= (row[:, None] + row[None, :]) >= need
    if ok.any():
        pair = emp[:, None] + emp[None, :]
        return 2, int(pair[ok].min())
    return 3, int(np.sort(emp)[:3].sum())


#: Count variables (usable nodes × templates) a chunk of domains may grow to past
#: ``max_domains`` when the domains are small: fewer, larger solves.
CHUNK_CELLS = 2_000


def _chunk_size(
    problem: PlacementProblem,
    view: GangView,
    tier: int,
    order: npt.NDArray[np.intp],
    rank: list[int],
    max_domains: int,
) -> int:
    """How many of the ranked domains go into the next solve: at least ``max_domains``, and
    for a one-template gang more while their usable nodes stay within :data:`CHUNK_CELLS`."""
    if tier == 0 or len(rank) <= max_domains or view.gang.n_templates > 1:
        # several templates: small solves, so that the bounds prune the domains between them
        return min(max_domains, len(rank))
    groups = problem.topology.domain_of[tier - 1]
    usable = view.mask.any(axis=0) & (groups >= 0)
    per_dom = np.bincount(groups[usable], minlength=problem.topology.n_domains(tier))
    cells = np.cumsum(per_dom[order[rank]] * view.gang.n_templates)
    return max(min(max_domains, len(rank)), int(np.searchsorted(cells, CHUNK_CELLS, "right")))


def _level_bounds(objective: tuple[int, ...], top: int) -> list[int]:
    """The model's levels (groups of tiers ``span−1 … 1``, nodes, waste) of an objective
    tuple ``(span, d[top], …, d[1], nodes, waste)``."""
    span = objective[0]
    groups = [objective[1 + top - t] for t in range(span - 1, 0, -1)]
    return [*groups, objective[-2], objective[-1]]
