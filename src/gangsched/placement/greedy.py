"""The greedy placer: tightest domain at the lowest tier, then a hierarchical best fit inside.

Theory of operation
-------------------
For one gang, tiers are tried from the lowest (a single node, tier 0; the lowest hypernode tier
for a topology gang of a problem with a hypernode order, as Volcano's gradient) up to the
highest the gang may span. At each tier, the domains whose summed per-node replica capacity
covers the gang (a necessary condition; an exact one for a single template) are tried in the
order of Volcano's hypernode binpack score — the fullest domain first, ties to the lower index
(:func:`~gangsched.placement._common.domain_order`). The first domain in which the gang really
packs wins.

Inside a domain the fill is hierarchical: among the child groups one tier down (the
objective's groups, so a lower-tier domain stands in where a tier has a gap), if some child can
host everything that is left, the tightest such child gets it (fewest spare slots, then the
fullest nodes, then the lower index); otherwise the child with the most capacity is filled as
far as it goes and the loop continues. At the node level this is "largest node until the rest fits
in one, then the tightest node that fits", which uses the fewest nodes for a single template.
Slices (``slice_size`` per group of :func:`~gangsched.placement.problem.slice_groups`) are
honoured by only ever handing a child of the slice rank or above a multiple of the slice size,
rolling the child back otherwise.

Several gangs are placed one after the other by weight (then problem order), each on what the
previous ones left.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from gangsched._types import I64
from gangsched.placement._common import (
    GangView,
    Replica,
    domain_order,
    first_rank,
    gang_view,
    group_sum,
    infeasible_reason,
    pack_node,
    split_target,
)
from gangsched.placement.problem import (
    GangPlacement,
    PlacementProblem,
    PlacementResult,
    Status,
    placement_objective,
)

__all__ = ["GreedyPlacer", "by_weight", "greedy_gang", "greedy_sequence"]


class GreedyPlacer:
    """Deterministic heuristic placer (no optional dependencies)."""

    name = "greedy"

    def place(self, problem: PlacementProblem) -> PlacementResult:
        return greedy_sequence(problem)


def greedy_sequence(
    problem: PlacementProblem, stop: Callable[[], bool] | None = None
) -> PlacementResult:
    """The gangs one after the other by weight (:func:`by_weight`), each on what the ones
    before it left. ``stop``: asked before each gang; once it answers true, the gangs not yet
    tried are left out with the reason that the wall budget ran out (the CP-SAT placers pass
    their deadline)."""
    free = problem.free.copy()
    gpu_free = problem.gpu_free.copy()
    out: dict[int, GangPlacement] = {}
    for gi in by_weight(problem):
        if stop is not None and stop():
            name = problem.gangs[gi].name
            why = f"gang {name!r}: the wall budget ran out before it was tried"
            out[gi] = GangPlacement(gang=name, placed=False, reason=why)
        else:
            out[gi] = greedy_gang(problem, gi, free, gpu_free)
    return PlacementResult(
        gangs=tuple(out[i] for i in range(len(problem.gangs))), status=Status.GREEDY
    )


def by_weight(problem: PlacementProblem) -> list[int]:
    """The gangs' indices in placement order: heaviest first, then problem order."""
    weights = problem.weights
    assert weights is not None
    return sorted(range(len(problem.gangs)), key=lambda i: (-int(weights[i]), i))


def _trim(rem: I64, total: int) -> I64:
    """``rem`` reduced (from the last template backwards) to ``total`` replicas."""
    out = rem.copy()
    extra = int(out.sum()) - total
    for t in range(out.size - 1, -1, -1):
        if extra <= 0:
            break
        take = min(extra, int(out[t]))
        out[t] -= take
        extra -= take
    return out


_Fill = Generator[tuple[npt.NDArray[np.intp], int, I64], tuple[I64, list[Replica]], None]


class _Work(NamedTuple):
    """What one fill works on: the gang's view and the free state it updates in place."""

    problem: PlacementProblem
    view: GangView
    free: I64
    gpu_free: I64


def _fill(w: _Work, nodes: npt.NDArray[np.intp], tier: int, rem: I64) -> tuple[I64, list[Replica]]:
    """Place up to ``rem`` replicas on ``nodes`` (all inside one domain of rank ``tier``).

    The descent is iterative, however deep the tree: each level is a generator
    (:func:`_fill_level`) that yields the child it wants filled and receives what the child
    took; the generators of the open levels sit on an explicit stack.
    """
    if tier == 0:
        return pack_node(w.problem, w.view, int(nodes[0]), rem, w.free, w.gpu_free)
    result: tuple[I64, list[Replica]] = (np.zeros_like(rem), [])
    stack: list[tuple[_Fill, list[tuple[I64, list[Replica]]]]] = []
    box: list[tuple[I64, list[Replica]]] = []
    stack.append((_fill_level(w, nodes, tier, rem, box), box))
    answer: tuple[I64, list[Replica]] | None = None
    while stack:
        gen, out = stack[-1]
        try:
            members, child_tier, child = gen.send(answer) if answer is not None else next(gen)
        except StopIteration:
            stack.pop()
            answer = out[0]
            result = answer
            continue
        if child_tier == 0:
            answer = pack_node(w.problem, w.view, int(members[0]), child, w.free, w.gpu_free)
            continue
        answer = None
        box = []
        stack.append((_fill_level(w, members, child_tier, child, box), box))
    return result


def _fill_level(
    w: _Work, nodes: npt.NDArray[np.intp], tier: int, rem: I64, out: list[tuple[I64, list[Replica]]]
) -> _Fill:
    """One level of :func:`_fill` (``tier`` ≥ 1): yields ``(members, tier - 1, target)`` for
    each child to fill, is sent back ``(placed, replicas)``, and appends its own total to
    ``out`` when done."""
    problem, view, free, gpu_free = w
    gang = view.gang
    topo = problem.topology
    # children are the objective's groups one rank down (a rack under no spine is one child at
    # the spine level); the slice groups are the same grouping at the slice rank, and each
    # rank's groups refine the next one's, so handing every child at or above the slice rank
    # a multiple of the slice size keeps each slice group whole
    groups = topo.nest_group(tier - 1)[nodes]
    uniq, inv = np.unique(groups, return_inverse=True)
    inv = inv.reshape(-1)
    qsum = group_sum(inv, view.q[:, nodes].T, uniq.size)
    empt = group_sum(inv, problem.emptiness[view.index][nodes], uniq.size)
    slices = gang.slice_size if gang.slice_size and tier - 1 >= view.slice_rank else 0
    open_ = qsum.sum(axis=1) > 0
    placed = np.zeros_like(rem)
    recs: list[Replica] = []
    while rem.sum() > 0 and open_.any():
        idx = np.flatnonzero(open_)
        qs = qsum[idx]
        fits = (qs >= rem).all(axis=1)
        if fits.any():
            cand = idx[fits]
            pick = int(cand[np.lexsort((uniq[cand], empt[cand], qsum[cand].sum(axis=1)))[0]])
            child = rem.copy()
        else:
            capv = np.minimum(qs, rem).sum(axis=1)
            pick = int(idx[np.lexsort((uniq[idx], empt[idx], -capv))[0]])
            child = np.minimum(qsum[pick], rem)
        open_[pick] = False
        if slices:
            child = _trim(child, int(child.sum()) // slices * slices)
        if child.sum() == 0:
            continue
        members = nodes[inv == pick]
        saved = (free[members].copy(), gpu_free[members].copy()) if slices else None
        got, r = yield members, tier - 1, child
        if saved is not None and int(got.sum()) % slices:
            free[members], gpu_free[members] = saved
            continue
        placed += got
        rem = rem - got
        recs.extend(r)
    out.append((placed, recs))


def greedy_gang(problem: PlacementProblem, gi: int, free: I64, gpu_free: I64) -> GangPlacement:
    """Place gang ``gi`` on ``free`` / ``gpu_free`` (updated in place on success)."""
    view = gang_view(problem, gi, free, gpu_free)
    gang = view.gang
    topo = problem.topology
    if gang.size == 0:
        return GangPlacement(gang=gang.name, placed=True, tier=0, objective=())
    total = split_target(gang, view.q.sum(axis=1))
    if total is not None:
        for tier in range(first_rank(problem, gang), view.allowed + 1):
            for d in domain_order(problem, view, tier, total, free, gpu_free):
                nodes = topo.members(tier, int(d))
                nodes = nodes[view.mask[:, nodes].any(axis=0)]
                if nodes.size == 0:
                    continue
                target = split_target(gang, view.q[:, nodes].sum(axis=1))
                if target is None:
                    continue
                saved = (free[nodes].copy(), gpu_free[nodes].copy())
                work = _Work(problem, view, free, gpu_free)
                got, recs = _fill(work, nodes, tier, target.copy())
                if (got == target).all():
                    return finish(problem, gi, recs)
                free[nodes], gpu_free[nodes] = saved
    return GangPlacement(gang=gang.name, placed=False, reason=infeasible_reason(problem, view))


def finish(problem: PlacementProblem, gi: int, recs: list[Replica]) -> GangPlacement:
    """A placed :class:`GangPlacement` from replica records (sorted, objective computed)."""
    gang = problem.gangs[gi]
    replicas = tuple(sorted(recs))
    counts = np.zeros((gang.n_templates, problem.n_nodes), dtype=np.int64)
    for t, node, _ in replicas:
        counts[t, node] += 1
    obj = placement_objective(problem, gi, counts)
    topo = problem.topology
    rank = obj[0] if obj else 0
    used = np.flatnonzero(counts.sum(axis=0))
    domain = int(topo.group_of(rank)[used[0]]) if used.size else -1
    if rank > 0 and domain >= topo.n_domains(rank):
        domain = -1
    return GangPlacement(
        gang=gang.name,
        placed=True,
        replicas=replicas,
        tier=topo.tier_number(rank),
        domain=domain,
        objective=obj,
    )
