"""Exact per-domain optimum of a one-template gang by a tree knapsack (NumPy, no solver).

For a gang with one template and no slices, a node ``n`` takes at most ``q[n]`` replicas and
nothing else couples the nodes, so the best placement inside one domain of the span tier is a
covering knapsack over the domain's tree: choose nodes whose capacities sum to at least
``size``, paying per used node ``W_node + emptiness`` and per used group of every lower tier
``W_t``. The weights separate the objective's levels (each exceeds the largest possible value
of everything below it), so the minimum cost decodes into the exact lexicographic optimum
``(span, d[top], ..., d[1], nodes, waste)`` of
:func:`~gangsched.placement.problem.placement_objective`.

The recursion runs bottom-up over the objective's groups (:meth:`Topology.nest_group`):

* a tier-1 group's cost function ``F[c]`` (least cost to hold at least ``c`` replicas,
  ``c ≤ size``) is a 0/1 knapsack over its nodes;
* a tier-``t`` group combines its children's functions by a (min, +) convolution capped at
  ``size``, then adds ``W_t`` to every ``c > 0``;
* a domain of the span tier combines its tier-``s−1`` groups without a charge of its own.

Every step is vectorised over all candidate domains at once (one NumPy operation per child
*slot*, the k-th child of every parent together). The CP-SAT placer uses the values as tight
per-level lower bounds and the reconstructed placement as its hint, so a solve only has to
confirm a known optimum.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gangsched.placement._common import GangView
from gangsched.placement.problem import PlacementProblem

__all__ = ["ExactBounds", "exact_bounds", "exact_nodes"]

I64 = npt.NDArray[np.int64]
_INF = np.int64(2**61)
_LIMIT = 2**59  # largest real cost the weights may reach (sums of two stay below _INF)


@dataclass(slots=True, eq=False)
class ExactBounds:
    """Exact objective per candidate domain (``None`` where the gang does not fit)."""

    objective: list[tuple[int, ...] | None]


@dataclass(slots=True, eq=False)
class _Level:
    """One knapsack level: children (nodes or groups) merged into parents."""

    parent: npt.NDArray[np.intp]  # (n_children,) parent index
    n_parents: int
    weight: int  # charge of a used parent (0 at the domain level)
    steps: list[tuple[npt.NDArray[np.intp], I64]]  # (children of a slot, parents' F before)
    after: I64  # (n_parents, size + 1) parents' F after the level


def _applicable(view: GangView) -> bool:
    gang = view.gang
    return gang.n_templates == 1 and not gang.slice_size


def _slots(parent: npt.NDArray[np.intp]) -> list[npt.NDArray[np.intp]]:
    """Children grouped by their rank inside their parent: slot k holds the k-th child of
    every parent that has one (children in index order)."""
    if parent.size == 0:
        return []
    order = np.argsort(parent, kind="stable")
    par = parent[order]
    rank = np.arange(par.size) - np.searchsorted(par, par, side="left")
    return [order[rank == k].astype(np.intp) for k in range(int(rank.max()) + 1)]


def _node_level(
    parent: npt.NDArray[np.intp], n_parents: int, q: I64, cost: I64, size: int, record: bool
) -> _Level:
    """0/1 covering knapsack of nodes into their parents."""
    f = np.full((n_parents, size + 1), _INF, dtype=np.int64)
    f[:, 0] = 0
    cols = np.arange(size + 1, dtype=np.int64)
    steps: list[tuple[npt.NDArray[np.intp], I64]] = []
    for sel in _slots(parent):
        p = parent[sel]
        before = f[p]
        idx = np.maximum(cols[None, :] - q[sel][:, None], 0)
        take = np.minimum(np.take_along_axis(before, idx, axis=1) + cost[sel][:, None], _INF)
        if record:
            steps.append((sel, before.copy()))
        f[p] = np.minimum(before, take)
    return _Level(parent, n_parents, 0, steps, f)


def _group_level(
    parent: npt.NDArray[np.intp], n_parents: int, child: I64, size: int, record: bool
) -> _Level:
    """(min, +) convolution of the children's functions into their parents, capped at
    ``size``: ``F_p[c] = min_j F_p[max(c - j, 0)] + F_child[j]``."""
    f = np.full((n_parents, size + 1), _INF, dtype=np.int64)
    f[:, 0] = 0
    steps: list[tuple[npt.NDArray[np.intp], I64]] = []
    for sel in _slots(parent):
        p = parent[sel]
        before = f[p]
        fc = child[sel]  # (m, size + 1)
        out = before.copy()
        finite = np.flatnonzero((fc < _INF).any(axis=0))
        jmax = int(finite.max()) if finite.size else 0
        for j in range(1, jmax + 1):
            fj = fc[:, j : j + 1]
            # c < j: the child alone covers c (before[:, 0] == 0)
            out[:, :j] = np.minimum(out[:, :j], fj)
            out[:, j:] = np.minimum(out[:, j:], np.minimum(before[:, : size + 1 - j] + fj, _INF))
        if record:
            steps.append((sel, before.copy()))
        f[p] = out
    return _Level(parent, n_parents, 0, steps, f)


def _tree(
    problem: PlacementProblem,
    view: GangView,
    tier: int,
    domains: npt.NDArray[np.intp],
    size: int,
    record: bool,
) -> tuple[list[_Level], npt.NDArray[np.intp], I64, I64, list[int]] | None:
    """Run the knapsack over ``domains`` of ``tier`` (≥ 1). Returns the levels (bottom-up),
    the nodes, their capacities and costs, and the weights ``[W_node, W_1, ..., W_{tier-1}]``,
    or ``None`` when the weights would overflow."""
    topo = problem.topology
    usable = view.mask[0]
    dom_of = topo.domain_of[tier - 1]
    pos = np.full(topo.n_domains(tier), -1, dtype=np.int64)
    pos[domains] = np.arange(domains.size)
    sel = usable & (dom_of >= 0)
    sel[sel] = pos[dom_of[sel]] >= 0
    nodes = np.flatnonzero(sel).astype(np.intp)
    q = np.minimum(view.q[0, nodes], size).astype(np.int64)
    emp = np.clip(problem.emptiness[view.index][nodes], 0, None).astype(np.int64)
    n_max = int(min(size, nodes.size))
    w_node = int(emp.max(initial=0)) * n_max + 1
    weights = [w_node]
    for _ in range(1, tier):
        weights.append(weights[-1] * (n_max + 1))
    if weights[-1] * (n_max + 1) > _LIMIT:
        return None
    if nodes.size == 0:
        empty = np.zeros(0, dtype=np.intp)
        return [_node_level(empty, domains.size, q, emp, size, record)], nodes, q, emp, weights
    dpos = pos[dom_of[nodes]]
    # group ids of every level, made unique per domain
    keys: list[npt.NDArray[np.intp]] = []
    for t in range(1, tier):
        _, inv = np.unique(
            np.column_stack([dpos, topo.nest_group(t)[nodes]]), axis=0, return_inverse=True
        )
        keys.append(inv.reshape(-1).astype(np.intp))
    keys.append(dpos.astype(np.intp))  # the domains themselves
    levels: list[_Level] = []
    # nodes into their tier-1 groups (or straight into the domains at tier 1)
    n_par = domains.size if tier == 1 else int(keys[0].max()) + 1
    lvl = _node_level(keys[0], n_par, q, w_node + emp, size, record)
    for k in range(1, len(keys)):
        w_t = weights[k]  # the level just built is tier k
        lvl.weight = w_t
        lvl.after[:, 1:] = np.minimum(lvl.after[:, 1:] + w_t, _INF)
        levels.append(lvl)
        # parent of each child group: the next level's key of any member node
        parent = np.zeros(lvl.n_parents, dtype=np.intp)
        parent[keys[k - 1]] = keys[k]
        n_par = domains.size if k == len(keys) - 1 else int(keys[k].max()) + 1
        lvl = _group_level(parent, n_par, lvl.after, size, record)
    levels.append(lvl)
    return levels, nodes, q, w_node + emp, weights


def exact_bounds(
    problem: PlacementProblem, view: GangView, tier: int, domains: npt.NDArray[np.intp]
) -> ExactBounds | None:
    """Exact objective tuple of the best placement inside each of ``domains`` (of ``tier``),
    or ``None`` when the gang is outside the method's scope (several templates, slices)."""
    if not _applicable(view):
        return None
    topo = problem.topology
    size = int(view.gang.size)
    top = topo.top_tier
    if tier == 0:
        emp = problem.emptiness[view.index]
        return ExactBounds(
            [
                (0, *([1] * top), 1, int(emp[d])) if int(view.q[0, d]) >= size else None
                for d in domains.tolist()
            ]
        )
    run = _tree(problem, view, tier, domains, size, record=False)
    if run is None:
        return None
    levels, _, _, _, weights = run
    cost = levels[-1].after[:, size]
    out: list[tuple[int, ...] | None] = []
    for c in cost.tolist():
        if c >= _INF:
            out.append(None)
            continue
        parts: list[int] = []
        rest = int(c)
        for w in reversed(weights[1:]):  # tiers tier-1 .. 1
            parts.append(rest // w)
            rest %= w
        out.append((tier, *([1] * (top - tier + 1)), *parts, rest // weights[0], rest % weights[0]))
    return ExactBounds(out)


def exact_nodes(
    problem: PlacementProblem, view: GangView, tier: int, domain: int
) -> dict[int, int] | None:
    """Replicas per node of an optimal placement inside ``domain`` of ``tier`` (``≥ 1``), as
    the knapsack reconstructs it (every used node gets at least one replica, lower node
    indices first); ``None`` when out of scope or infeasible."""
    if not _applicable(view) or tier < 1:
        return None
    size = int(view.gang.size)
    run = _tree(problem, view, tier, np.array([domain], dtype=np.intp), size, record=True)
    if run is None:
        return None
    levels, nodes, q, cost, _ = run
    total = int(levels[-1].after[0, size])
    if total >= _INF:
        return None
    # (requirement, value) per parent of the current level, walking the levels top-down
    want: dict[int, tuple[int, int]] = {0: (size, total)}
    for li in range(len(levels) - 1, -1, -1):
        lvl = levels[li]
        below = levels[li - 1] if li > 0 else None
        got: dict[int, tuple[int, int]] = {}
        for sel, before in reversed(lvl.steps):
            for row, ch in enumerate(sel.tolist()):
                p = int(lvl.parent[ch])
                if p not in want:
                    continue
                c, v = want[p]
                if c == 0 or int(before[row, c]) == v:
                    continue  # the child is not used
                if below is None:  # a node
                    j = int(q[ch])
                    got[ch] = (j, 0)
                    c_left = max(c - j, 0)
                    want[p] = (c_left, v - int(cost[ch]))
                    continue
                fc = below.after[ch]
                for j in range(1, c + 1):
                    if int(fc[j]) < _INF and int(before[row, c - j]) + int(fc[j]) == v:
                        break
                else:
                    return None
                got[ch] = (j, int(fc[j]) - below.weight)
                want[p] = (c - j, v - int(fc[j]))
        want = got
    chosen = sorted(want)
    left = size
    out: dict[int, int] = {}
    for i, k in enumerate(chosen):
        give = min(int(q[k]), left - (len(chosen) - i - 1))
        out[int(nodes[k])] = give
        left -= give
    if left != 0 or any(v <= 0 for v in out.values()):
        return None
    return out
