"""The single-gang model (counts over node classes, one domain of the span tier, lower-tier
groups, slices, per-node capacity and GPU devices) and its hint."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from ortools.sat.python import cp_model

from gangsched.placement._common import GangView
from gangsched.placement.cpsat._bounds import (
    _fewest_in_domains,
    _group_sums,
    node_rows,
    waste_bound,
)
from gangsched.placement.cpsat._vars import I64, _Cell, _collapse, _Units, _Vars
from gangsched.placement.problem import GangPlacement, PlacementProblem, slice_groups


def _capacity_constraints(
    model: cp_model.CpModel,
    problem: PlacementProblem,
    views: list[GangView],
    units: list[_Units],
    vs: _Vars,
    free: I64,
    gpu_free: I64,
) -> set[int]:
    """Per-node resource and GPU constraints over cells on single-node units; returns the
    nodes that got a per-device model."""
    by_node: dict[int, list[_Cell]] = {}
    for cell in vs.cells:
        if units[cell.g].mult(cell.u) == 1:
            by_node.setdefault(int(units[cell.g].rep[cell.u]), []).append(cell)
    cap = problem.gpu_capacity
    wfree = ((gpu_free >= cap[:, None]) & (cap[:, None] > 0)).sum(axis=1)
    dev_nodes: set[int] = set()
    for node, cells in sorted(by_node.items()):
        reqs = np.stack([views[c.g].gang.request[c.t] for c in cells])
        ubs = np.array([c.ub for c in cells], dtype=np.int64)
        peak = (reqs * ubs[:, None]).sum(axis=0)
        for r in np.flatnonzero(peak > free[node]).tolist():
            model.add(
                sum(int(reqs[k, r]) * c.var for k, c in enumerate(cells) if reqs[k, r])
                <= int(max(free[node, r], 0))
            )
        gpu_cells = [c for c in cells if int(views[c.g].gang.gpu_count[c.t]) > 0]  # type: ignore[index]
        if not gpu_cells:
            continue
        frac = [c for c in gpu_cells if not views[c.g].whole[c.t, node]]
        whole = [c for c in gpu_cells if views[c.g].whole[c.t, node]]
        gcs = {id(c): int(views[c.g].gang.gpu_count[c.t]) for c in gpu_cells}  # type: ignore[index]
        if frac and len(gpu_cells) >= 2:
            dev_nodes.add(node)
            row = gpu_free[node]
            c_node = int(cap[node])
            w_vars = {}
            for d in range(row.size):
                if c_node > 0 and row[d] >= c_node and whole:
                    w_vars[d] = model.new_bool_var(f"w_{node}_{d}")
                    vs.whole[(node, d)] = w_vars[d]
            if whole:
                model.add(sum(w_vars.values()) == sum(gcs[id(c)] * c.var for c in whole))
            per_dev: dict[int, list[tuple[int, cp_model.IntVar]]] = {}
            for c in frac:
                need = int(views[c.g].need[c.t, node])
                xs = []
                for d in np.flatnonzero(row >= need).tolist():
                    x = model.new_int_var(0, c.ub, f"x_{c.g}_{c.t}_{node}_{d}")
                    vs.shares[(c.g, c.t, node, d)] = x
                    model.add(x <= c.var)
                    xs.append(x)
                    per_dev.setdefault(d, []).append((need, x))
                model.add(sum(xs) == gcs[id(c)] * c.var)
            for d in sorted(set(per_dev) | set(w_vars)):
                terms = [n * x for n, x in per_dev.get(d, [])]
                if d in w_vars:
                    terms.append(c_node * w_vars[d])
                model.add(sum(terms) <= int(row[d]))
        elif whole and sum(gcs[id(c)] * c.ub for c in whole) > int(wfree[node]):
            model.add(sum(gcs[id(c)] * c.var for c in whole) <= int(wfree[node]))
    return dev_nodes


def _build_single(
    problem: PlacementProblem,
    view: GangView,
    tier: int,
    domains: npt.NDArray[np.intp],
    free: I64,
    gpu_free: I64,
    hint: GangPlacement | None,
    level_lbs: list[int] | None = None,
    min_nodes: int = 1,
) -> tuple[cp_model.CpModel, _Vars, list[_Units], set[int], list[tuple[cp_model.LinearExprT, int]]]:
    topo = problem.topology
    gang = view.gang
    n_t = gang.n_templates
    if tier == 0:
        nodes = np.sort(domains.astype(np.intp))
        dom_of = np.arange(problem.n_nodes, dtype=np.int64)
    else:
        sel = np.isin(topo.domain_of[tier - 1], domains) & view.mask.any(axis=0)
        nodes = np.flatnonzero(sel)
        dom_of = topo.domain_of[tier - 1]
    lower = list(range(tier - 1, 0, -1))
    collapse = n_t == 1 and tier > 0 and not (gang.slice_size and view.slice_rank == 0)
    if collapse:
        keys = np.column_stack(
            [
                *(topo.group_of(t)[nodes] for t in range(1, topo.top_tier + 1)),
                view.q[0, nodes],
                problem.emptiness[view.index][nodes],
            ]
        ).astype(np.int64)
        units = _collapse(keys, nodes)
    else:
        units = _Units(rep=nodes, members=[nodes[i : i + 1] for i in range(nodes.size)])
    # what every placement must cover, per candidate domain (see ``node_rows``)
    all_nodes = np.concatenate(units.members) if units.size else np.zeros(0, dtype=np.intp)
    m_dom = dom_of[all_nodes]
    rows_of = {
        d: (
            all_nodes[m_dom == d],
            *node_rows(problem, view, all_nodes[m_dom == d], free, gpu_free, gang.size),
        )
        for d in np.unique(m_dom).tolist()
    }
    model = cp_model.CpModel()
    vs = _Vars()
    # domain choice at the span tier
    doms = sorted({int(dom_of[n]) for n in units.rep})
    for d in doms:
        vs.choice[(0, d)] = model.new_bool_var(f"y_{d}")
    model.add_exactly_one(vs.choice.values())
    emp = problem.emptiness[view.index]
    per_t: list[list[cp_model.IntVar]] = [[] for _ in range(n_t)]
    everything = []
    for u in range(units.size):
        n = int(units.rep[u])
        k = units.mult(u)
        m = model.new_int_var(0, k, f"m_{u}") if k > 1 else model.new_bool_var(f"m_{u}")
        vs.used[(0, u)] = m
        model.add(m <= k * vs.choice[(0, int(dom_of[n]))])
        cs = []
        for t in range(n_t):
            q = int(view.q[t, n])
            if q <= 0 or not view.mask[t, n]:
                continue
            ub = int(min(q * k, gang.counts[t]))
            c = model.new_int_var(0, ub, f"c_{t}_{u}")
            vs.cells.append(_Cell(0, t, u, c, ub))
            model.add(c <= q * m)
            cs.append(c)
            per_t[t].append(c)
        if cs:
            model.add(sum(cs) >= m)
        else:
            model.add(m == 0)
        everything.extend(cs)
    assert gang.min_counts is not None
    for t in range(n_t):
        s = sum(per_t[t])
        model.add(s <= int(gang.counts[t]))
        model.add(s >= int(gang.min_counts[t]))
    model.add(sum(everything) == gang.size)
    # lower-tier domains used
    levels: list[tuple[cp_model.LinearExprT, int]] = []
    for t in lower:
        groups = topo.nest_group(t)  # the objective's tier-t groups (placement_objective)
        zs: dict[int, cp_model.IntVar] = {}
        for u in range(units.size):
            gid = int(groups[units.rep[u]])
            if gid not in zs:
                zs[gid] = model.new_bool_var(f"z_{t}_{gid}")
                vs.lower[(0, t, gid)] = zs[gid]
            model.add(vs.used[(0, u)] <= units.mult(u) * zs[gid])
        # aggregated link (redundant, tightens the relaxation): a domain's replicas ≤ its
        # capacity × z
        per_group: dict[int, list[_Cell]] = {}
        for cell in vs.cells:
            per_group.setdefault(int(groups[units.rep[cell.u]]), []).append(cell)
        for gid, cells in per_group.items():
            model.add(sum(c.var for c in cells) <= sum(c.ub for c in cells) * zs[gid])
        # redundant lower bound: inside any one candidate domain, the fewest tier-t domains
        # whose summed capacity reaches the gang size
        # (and every row of ``node_rows`` summed per group)
        lb = _fewest_in_domains(
            [(_group_sums(caps, groups[nd]), needs) for nd, caps, needs in rows_of.values()]
        )
        if lb > 0:
            model.add(sum(zs.values()) >= lb)
        levels.append((sum(zs.values()), len(zs)))
        vs.level_terms.append([(z, 1) for z in zs.values()])
        vs.level_lbs.append(lb)
    # slices
    if gang.slice_size and view.slice_rank < tier:
        groups = slice_groups(topo, gang)
        members: dict[int, list[cp_model.IntVar]] = {}
        for cell in vs.cells:
            members.setdefault(int(groups[units.rep[cell.u]]), []).append(cell.var)
        for gid, cvars in sorted(members.items()):
            k_e = model.new_int_var(0, gang.size // gang.slice_size, f"slice_{gid}")
            model.add(sum(cvars) == gang.slice_size * k_e)
    dev_nodes = _capacity_constraints(model, problem, [view], [units], vs, free, gpu_free)
    mults = np.array([units.mult(u) for u in range(units.size)], dtype=np.intp)
    n_bound = min(gang.size, int(mults.sum()))
    lb_nodes = _fewest_in_domains([(caps, needs) for _, caps, needs in rows_of.values()])
    if lb_nodes > 0 and tier > 0:
        lb_nodes = max(lb_nodes, min_nodes)
    if lb_nodes > 0:
        model.add(sum(vs.used.values()) >= lb_nodes)
    used_sum = sum(vs.used.values())
    waste = sum(int(emp[units.rep[u]]) * vs.used[(0, u)] for u in range(units.size))
    levels.append((used_sum, n_bound))
    levels.append((waste, 100 * n_bound))
    vs.level_terms.append([(m, 1) for m in vs.used.values()])
    vs.level_lbs.append(max(lb_nodes, 0))
    vs.level_terms.append([(vs.used[(0, u)], int(emp[units.rep[u]])) for u in range(units.size)])
    vs.level_lbs.append(0)
    if n_t > 1:

        def waste_lb(n: int, stop: int | None = None) -> int:
            # each domain's bound may stop at ``stop``: the least of them is exact below it
            return min(
                waste_bound(caps, needs, emp[nd], n, stop) for nd, caps, needs in rows_of.values()
            )

        vs.waste_lb = waste_lb
    # the emptiness of the nodes that can take a replica (a unit without cells stays unused)
    hosts = np.zeros(units.size, dtype=np.bool_)
    hosts[[c.u for c in vs.cells]] = True
    vs.emp_sorted = np.sort(np.repeat(emp[units.rep][hosts], mults[hosts])).astype(np.int64)
    if level_lbs is not None:  # exact optima of the chunk's domains (see ``_exact``)
        for i, ((expr, _), lb) in enumerate(zip(levels, level_lbs, strict=True)):
            if lb > 0:
                model.add(expr >= lb)
                vs.level_lbs[i] = max(vs.level_lbs[i], lb)
    if hint is not None and hint.placed:
        _hint_single(model, problem, view, vs, units, hint, dom_of, tier)
    return model, vs, [units], dev_nodes, levels


def _hint_single(
    model: cp_model.CpModel,
    problem: PlacementProblem,
    view: GangView,
    vs: _Vars,
    units: _Units,
    hint: GangPlacement,
    dom_of: I64,
    tier: int,
) -> None:
    unit_of = np.full(problem.n_nodes, -1, dtype=np.int64)
    for u, mem in enumerate(units.members):
        unit_of[mem] = u
    counts = np.zeros((view.gang.n_templates, max(units.size, 1)), dtype=np.int64)
    used_nodes: dict[int, set[int]] = {}
    for t, node, _ in hint.replicas:
        u = int(unit_of[node])
        if u < 0:
            return  # greedy used a node outside this model: no hint
        counts[t, u] += 1
        used_nodes.setdefault(u, set()).add(node)
    for cell in vs.cells:
        model.add_hint(cell.var, int(counts[cell.t, cell.u]))
    for (_, u), m in vs.used.items():
        model.add_hint(m, len(used_nodes.get(u, ())))
    chosen = {int(dom_of[next(iter(n))]) for n in used_nodes.values()}
    for (_, d), y in vs.choice.items():
        model.add_hint(y, int(d in chosen))
    topo = problem.topology
    for (_, t, gid), z in vs.lower.items():
        groups = topo.nest_group(t)
        model.add_hint(z, int(any(int(groups[n]) == gid for s in used_nodes.values() for n in s)))
    # per-device variables: the hint's own devices, so that the hint is a complete solution
    dev: dict[tuple[int, int, int, int], int] = {}
    taken: set[tuple[int, int]] = set()
    for t, node, devs in hint.replicas:
        if view.whole[t, node]:
            taken.update((node, d) for d in devs)
        else:
            for d in devs:
                dev[(0, t, node, d)] = dev.get((0, t, node, d), 0) + 1
    for key, x in vs.shares.items():
        model.add_hint(x, dev.get(key, 0))
    for node_dev, w in vs.whole.items():
        model.add_hint(w, int(node_dev in taken))
    del tier
