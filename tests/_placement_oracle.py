"""An independent optimum for small placement problems: mixed-integer programmes on SciPy's
HiGHS (``scipy.optimize.milp``), written from the problem's definition alone (they share no
code with the placers).

* :func:`best_weight` — the most weight of gangs placed together (joint placement);
* :func:`best_objective` — the lexicographically least objective tuple of one gang
  (``None`` when the gang cannot be placed).

The device model is exact: a replica asking ``g`` devices takes ``g`` distinct ones; a
whole-device replica takes completely free devices that nobody else uses; shares of ``k``
replicas of one template spread over the devices as ``x_d`` with ``x_d ≤ k`` and
``Σ_d x_d = g·k`` (which is exactly when they split into ``k`` sets of distinct devices).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import lil_matrix

from gangsched.model import TopologyMode
from gangsched.model.gpu_charge import device_take, exclusive
from gangsched.placement.problem import PlacementProblem, slice_groups

__all__ = ["best_objective", "best_weight"]


@dataclass
class _Lp:
    lo: list[float] = field(default_factory=list)
    hi: list[float] = field(default_factory=list)
    rows: list[tuple[dict[int, float], float, float]] = field(default_factory=list)

    def var(self, lo: float, hi: float) -> int:
        self.lo.append(lo)
        self.hi.append(hi)
        return len(self.lo) - 1

    def add(self, terms: dict[int, float], lo: float, hi: float) -> None:
        self.rows.append((terms, lo, hi))

    def solve(self, c: dict[int, float], maximize: bool = False) -> tuple[float, np.ndarray] | None:
        n = len(self.lo)
        cost = np.zeros(n)
        for i, v in c.items():
            cost[i] = -v if maximize else v
        a = lil_matrix((max(len(self.rows), 1), n))
        lo = np.full(max(len(self.rows), 1), -np.inf)
        hi = np.full(max(len(self.rows), 1), np.inf)
        for r, (terms, rl, rh) in enumerate(self.rows):
            for i, v in terms.items():
                a[r, i] += v
            lo[r], hi[r] = rl, rh

        def run(presolve: bool) -> Any:
            return milp(
                cost,
                integrality=np.ones(n),
                bounds=Bounds(np.array(self.lo), np.array(self.hi)),
                constraints=[LinearConstraint(a.tocsr(), lo, hi)] if self.rows else [],
                options={"time_limit": 120, "mip_rel_gap": 0.0, "presolve": presolve},
            )

        res = run(True)
        if res.status == 2:  # infeasible: confirm without presolve (HiGHS's presolve has
            res = run(False)  # been seen to misjudge these small models)
        if res.status == 2:
            return None
        assert res.status == 0, res.message
        val = float(res.fun)
        return (-val if maximize else val), np.rint(res.x)


def _build(
    problem: PlacementProblem, gangs: list[int], lp: _Lp
) -> tuple[dict[int, int], dict[tuple[int, int, int], int]]:
    """Variables and constraints of placing ``gangs`` together: ``placed[g]`` and counts
    ``c[g, t, n]``. Returns both maps."""
    topo = problem.topology
    n_nodes = problem.n_nodes
    cap = problem.gpu_capacity
    placed: dict[int, int] = {}
    cells: dict[tuple[int, int, int], int] = {}
    node_terms: dict[int, list[tuple[int, np.ndarray]]] = {}
    shares: dict[tuple[int, int], list[tuple[int, int]]] = {}  # (n, d) -> [(var, milli)]
    wholes: dict[tuple[int, int], list[int]] = {}
    for g in gangs:
        gang = problem.gangs[g]
        p = lp.var(0, 1)
        placed[g] = p
        assert gang.gpu_count is not None and gang.gpu_milli is not None
        assert gang.min_counts is not None
        size_terms: dict[int, float] = {p: -float(gang.size)}
        hard = gang.mode is TopologyMode.HARD
        cover = topo.cover(gang.allowed_rank(topo)) if hard else np.zeros(n_nodes, np.int64)
        ys: dict[int, int] = {}
        if hard:
            for d in sorted(set(cover[cover >= 0].tolist())):
                ys[d] = lp.var(0, 1)
            lp.add({**{y: 1.0 for y in ys.values()}, p: -1.0}, 0, 0)
        for t in range(gang.n_templates):
            t_terms: dict[int, float] = {}
            gc = int(gang.gpu_count[t])
            for n in range(n_nodes):
                if not gang.mask[t, n] or (hard and cover[n] < 0):
                    continue
                ub = int(gang.counts[t])
                c = lp.var(0, ub)
                cells[(g, t, n)] = c
                t_terms[c] = 1.0
                size_terms[c] = 1.0
                if hard:
                    lp.add({c: 1.0, ys[int(cover[n])]: -float(ub)}, -np.inf, 0)
                node_terms.setdefault(n, []).append((c, gang.request[t]))
                if gc == 0:
                    continue
                milli = int(gang.gpu_milli[t])
                sharing = bool(problem.gpu_sharing[n])
                whole = bool(exclusive(milli, int(cap[n]), sharing))
                need = int(device_take(milli, int(cap[n]), sharing))
                per_dev: dict[int, float] = {c: -float(gc)}
                for d in range(int(problem.gpu_count[n])):  # type: ignore[index]
                    if whole:
                        w = lp.var(0, 1)
                        wholes.setdefault((n, d), []).append(w)
                        per_dev[w] = 1.0
                    else:
                        x = lp.var(0, ub)
                        lp.add({x: 1.0, c: -1.0}, -np.inf, 0)
                        shares.setdefault((n, d), []).append((x, need))
                        per_dev[x] = 1.0
                lp.add(per_dev, 0, 0)
            lp.add({**t_terms, p: -float(gang.min_counts[t])}, 0, np.inf)
            lp.add({**t_terms, p: -float(gang.counts[t])}, -np.inf, 0)
        lp.add(size_terms, 0, 0)
        if gang.slice_size:
            groups = slice_groups(topo, gang)
            for gid in sorted(set(groups.tolist())):
                terms = {v: 1.0 for (gg, _, n), v in cells.items() if gg == g and groups[n] == gid}
                if terms:
                    k = lp.var(0, gang.size // gang.slice_size)
                    lp.add({**terms, k: -float(gang.slice_size)}, 0, 0)
    for n, on_node in node_terms.items():
        for r in range(problem.free.shape[1]):
            coefs = {c: int(req[r]) for c, req in on_node if req[r]}
            if coefs:
                # exact rescaling (memory is in bytes): Σ a·x ≤ b ⇔ Σ (a/g)·x ≤ ⌊b/g⌋
                g = math.gcd(*coefs.values())
                rhs = max(int(problem.free[n, r]), 0) // g
                lp.add({c: float(a // g) for c, a in coefs.items()}, -np.inf, float(rhs))
    for n in range(n_nodes):
        for d in range(problem.gpu_free.shape[1]):
            key = (n, d)
            if key not in shares and key not in wholes:
                continue
            free_d = int(problem.gpu_free[n, d])
            ws = wholes.get(key, [])
            if ws and free_d < int(cap[n]):
                for w in ws:
                    lp.add({w: 1.0}, 0, 0)
                ws = []
            if ws:
                lp.add(dict.fromkeys(ws, 1.0), -np.inf, 1)
            row = {x: float(m) for x, m in shares.get(key, [])}
            for w in ws:
                row[w] = float(cap[n])
            if row:
                lp.add(row, -np.inf, float(max(free_d, 0)))
    return placed, cells


def best_weight(problem: PlacementProblem) -> int:
    """The most summed weight of gangs that can be placed together."""
    lp = _Lp()
    placed, _ = _build(problem, list(range(len(problem.gangs))), lp)
    w = problem.weights
    assert w is not None
    out = lp.solve({p: float(w[g]) for g, p in placed.items()}, maximize=True)
    assert out is not None
    return round(out[0])


def best_objective(problem: PlacementProblem, g: int) -> tuple[int, ...] | None:
    """The least objective tuple ``(span, d[top], …, d[1], nodes, waste)`` of gang ``g``
    alone on the problem's free capacity (see :func:`placement_objective`)."""
    topo = problem.topology
    n_nodes = problem.n_nodes
    gang = problem.gangs[g]
    if gang.size == 0:
        return ()
    for span in range(0, topo.top_tier + 1):
        grp = np.arange(n_nodes) if span == 0 else topo.group_of(span)
        lp = _Lp()
        placed, cells = _build(problem, [g], lp)
        lp.add({placed[g]: 1.0}, 1, 1)
        used = {n: lp.var(0, 1) for n in range(n_nodes)}
        for (_, _, n), c in cells.items():
            lp.add({c: 1.0, used[n]: -float(gang.size)}, -np.inf, 0)
        for n, u in used.items():  # used only if something is there
            terms = {c: -1.0 for (_, _, m), c in cells.items() if m == n}
            lp.add({u: 1.0, **terms}, -np.inf, 0)
        ys = {gid: lp.var(0, 1) for gid in sorted(set(grp.tolist()))}
        lp.add(dict.fromkeys(ys.values(), 1.0), 1, 1)
        for n, u in used.items():
            lp.add({u: 1.0, ys[int(grp[n])]: -1.0}, -np.inf, 0)
        if lp.solve({}) is None:
            continue
        levels: list[dict[int, float]] = []
        for t in range(topo.top_tier, 0, -1):
            ng = topo.nest_group(t)
            zs = {gid: lp.var(0, 1) for gid in sorted(set(ng.tolist()))}
            for n, u in used.items():
                lp.add({u: 1.0, zs[int(ng[n])]: -1.0}, -np.inf, 0)
            levels.append(dict.fromkeys(zs.values(), 1.0))
        levels.append(dict.fromkeys(used.values(), 1.0))
        emp = problem.emptiness[g]
        levels.append({u: float(emp[n]) for n, u in used.items()})
        out: list[int] = [span]
        for obj in levels:
            res = lp.solve(obj)
            assert res is not None
            val = round(res[0])
            out.append(val)
            lp.add(obj, -np.inf, val + 0.5)  # integer levels: half a unit of tolerance
        return tuple(out)
    return None
