"""Lower bounds of the single-gang search: per candidate domain, the objective levels; how
many domains go into one solve."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from .._common import GangView, demand_floor
from ..problem import PlacementProblem
from ._vars import I64


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
    cap_node = view.q.sum(axis=0)  # replicas a node can take at most
    usable: npt.NDArray[np.bool_] = np.asarray(view.mask.any(axis=0))
    out: list[tuple[int, ...]] = []
    for d in order.tolist():
        nodes = topo.members(tier, int(d))
        nodes = nodes[usable[nodes]]
        caps = cap_node[nodes]
        lb = [tier]
        for t in range(topo.top_tier, 0, -1):
            groups = topo.nest_group(t)[nodes]
            _, inv = np.unique(groups, return_inverse=True)
            gcap = np.bincount(inv.reshape(-1), weights=caps).astype(np.int64)
            lb.append(_fewest_to_cover([(0, int(c)) for c in gcap], size))
        n_lb = max(_fewest_to_cover([(0, int(c)) for c in caps], size), min_nodes)
        waste = int(np.sort(emp[nodes])[:n_lb].sum())  # the emptiest-free n_lb nodes
        if n_lb == 2 and view.gang.n_templates > 1 and 2 <= nodes.size <= 64:
            n_lb, waste = _pair_bound(problem, view, nodes, free, gpu_free)
        lb.append(n_lb)
        lb.append(waste)
        out.append(tuple(lb))
    return out


def _pair_bound(
    problem: PlacementProblem,
    view: GangView,
    nodes: npt.NDArray[np.intp],
    free: I64,
    gpu_free: I64,
) -> tuple[int, int]:
    """For a domain whose placements use at least two nodes: ``(2, least emptiness of a pair
    of its nodes whose summed room covers the gang's demand floor)``, or ``(3, the three
    least emptiness values)`` when no pair covers it — lower bounds on the node count and the
    waste of any placement in the domain."""
    sel = np.zeros(problem.n_nodes, dtype=np.bool_)
    sel[nodes] = True
    res, gpu = demand_floor(view, np.zeros(problem.n_nodes, dtype=np.int64), 1, sel)
    cols = np.flatnonzero(res > 0)
    room = np.column_stack(
        [np.clip(free[nodes][:, cols], 0, None), np.clip(gpu_free[nodes], 0, None).sum(axis=1)]
    )
    need = np.append(res[cols], gpu[0])
    ok = ((room[:, None, :] + room[None, :, :]) >= need).all(axis=2)
    ok &= np.triu(np.ones((nodes.size, nodes.size), dtype=np.bool_), k=1)
    emp = problem.emptiness[view.index][nodes]
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
    more while their usable nodes × templates stay within :data:`CHUNK_CELLS`."""
    if tier == 0 or len(rank) <= max_domains:
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


def _fewest_to_cover(items: list[tuple[int, int]], size: int) -> int:
    """Given ``(domain, capacity)`` items, the fewest items of one domain whose capacities sum
    to ``size`` (minimum over domains; 0 if no domain reaches it). A valid lower bound on the
    items any placement inside one domain uses, since capacities are upper bounds."""
    by_dom: dict[int, list[int]] = {}
    for dom, cap in items:
        by_dom.setdefault(dom, []).append(cap)
    best = 0
    for caps in by_dom.values():
        cum = np.cumsum(sorted(caps, reverse=True))
        k = int(np.searchsorted(cum, size)) + 1
        if k <= len(caps) and (best == 0 or k < best):
            best = k
    return best
