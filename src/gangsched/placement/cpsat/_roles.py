"""Multi-role gangs: bounds and a hint from the dominant role.

A gang of several templates usually has one *dominant* role (the workers) and a few small
ones (a launcher, some evaluators). Let ``W`` be the replicas of the dominant template ``t*``
every placement must contain (``max(min_counts[t*], size − Σ_{t≠t*} counts[t])``). Any
placement of the gang, restricted to ``W`` of its ``t*`` replicas, is a placement of a
one-template gang of size ``W`` on the same free state, and it uses a subset of the nodes
and groups the whole placement uses. The objective is monotone in that subset, so the exact
per-domain optimum of that one-template gang (:mod:`.._exact`, a tree knapsack in NumPy,
computed with the whole gang's emptiness) is a lexicographic lower bound on the whole gang's
objective in every domain, and a domain where it finds no placement holds none.

The hint starts from the knapsack's placement of the ``W`` workers and adds the other
replicas one at a time where they add the least to the objective (a node already used, in a
group already used, then the fullest node). When that placement reaches the bound it is
optimal in its domain, and the levels of the model are closed by the bound; otherwise it is
an incumbent for the search and the bounds still prune and order the domains. Nothing here
multiplies the model: the small roles are found room on the nodes the model has anyway.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from gangsched.placement import _exact
from gangsched.placement._common import (
    GangView,
    Replica,
    forced_counts,
    pack_node,
    replica_capacity,
)
from gangsched.placement._result import GangPlacement
from gangsched.placement.cpsat._vars import I64
from gangsched.placement.greedy import finish
from gangsched.placement.problem import GangRequest, PlacementProblem


def dominant(view: GangView) -> tuple[int, GangView] | None:
    """``(t*, one-template view of W replicas of t*)`` for a gang of several templates
    without slices, or ``None`` when out of scope (one template, slices, ``W = 0``)."""
    gang = view.gang
    if gang.n_templates < 2 or gang.slice_size:
        return None
    assert gang.min_counts is not None and gang.gpu_count is not None
    assert gang.gpu_milli is not None
    forced = forced_counts(gang)
    t = int(np.argmax(forced))
    w = int(forced[t])
    if w <= 0:
        return None
    sub = GangRequest(
        name=gang.name,
        request=gang.request[t : t + 1],
        counts=np.array([w], dtype=np.int64),
        mask=gang.mask[t : t + 1],
        gpu_count=gang.gpu_count[t : t + 1],
        gpu_milli=gang.gpu_milli[t : t + 1],
        mode=gang.mode,
        highest_tier=gang.highest_tier,
    )
    q = np.minimum(view.q[t : t + 1], w)
    return t, GangView(
        view.index,
        sub,
        view.mask[t : t + 1] & (q > 0),
        q,
        view.need[t : t + 1],
        view.whole[t : t + 1],
        view.allowed,
        view.cover,
        0,
    )


def lex_max(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """The larger of two lexicographic lower bounds (itself one)."""
    return a if a >= b else b


def role_hint(
    problem: PlacementProblem,
    view: GangView,
    t_dom: int,
    sub: GangView,
    tier: int,
    domain: int,
    free: I64,
    gpu_free: I64,
) -> GangPlacement | None:
    """The knapsack's placement of the dominant role in ``domain`` (of ``tier`` ≥ 1) with the
    other replicas added where they cost least; ``None`` when something does not fit."""
    per_node = _exact.exact_nodes(problem, sub, tier, domain)
    if per_node is None:
        return None
    gang = view.gang
    assert gang.min_counts is not None
    work_free = free.copy()
    work_gpu = gpu_free.copy()
    recs: list[Replica] = []
    n_t = gang.n_templates
    for node, k in sorted(per_node.items()):
        rem = np.zeros(n_t, dtype=np.int64)
        rem[t_dom] = k
        got, r = pack_node(problem, view, node, rem, work_free, work_gpu)
        if int(got[t_dom]) != k:
            return None
        recs.extend(r)
    w = sum(per_node.values())
    topo = problem.topology
    inside = topo.domain_of[tier - 1] == domain
    placed = np.zeros(n_t, dtype=np.int64)
    placed[t_dom] = w
    used = np.zeros(problem.n_nodes, dtype=np.bool_)
    used[list(per_node)] = True
    lower = [topo.nest_group(t) for t in range(tier - 1, 0, -1)]
    emp = problem.emptiness[view.index]
    # the minimums first, then the rest in template order (as split_target)
    want = gang.min_counts.copy()
    want[t_dom] = max(int(want[t_dom]), w)
    left = gang.size - int(want.sum())
    for t in range(n_t):
        extra = min(left, int(gang.counts[t] - want[t]))
        if extra > 0 and t != t_dom:
            want[t] += extra
            left -= extra
    if left > 0:  # only more of the dominant role would do: leave it to the search
        return None
    mask = view.mask & inside[None, :]
    for t in range(n_t):
        while placed[t] < want[t]:
            q = replica_capacity(problem, gang, work_free, work_gpu, mask)[t]
            cand = np.flatnonzero(q > 0)
            if cand.size == 0:
                return None
            node = int(cand[_cheapest(cand, used, lower, emp)])
            rem = np.zeros(n_t, dtype=np.int64)
            rem[t] = 1
            got, r = pack_node(problem, view, node, rem, work_free, work_gpu)
            if int(got[t]) != 1:
                return None
            recs.extend(r)
            placed[t] += 1
            used[node] = True
    return finish(problem, view.index, recs)


def _cheapest(
    cand: npt.NDArray[np.intp],
    used: npt.NDArray[np.bool_],
    lower: list[I64],
    emp: I64,
) -> int:
    """Index into ``cand`` of the node that adds the least to the objective: no new group
    (highest tier first), no new node, then the least emptiness and the lower index."""
    keys: list[npt.NDArray[np.int64]] = [cand.astype(np.int64)]
    new_node = ~used[cand]
    keys.append(np.where(new_node, emp[cand], 0).astype(np.int64))
    keys.append(new_node.astype(np.int64))
    for groups in reversed(lower):  # lowest tier first: lexsort's last key is the primary
        taken = np.unique(groups[used])
        keys.append((~np.isin(groups[cand], taken)).astype(np.int64))
    return int(np.lexsort(keys)[0])
