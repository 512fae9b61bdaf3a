"""The node-level joint model (one ``placed`` per gang, counts over the union of candidate
domains) and its greedy hint; a joint gang's domains."""

from __future__ import annotations

import numpy as np
from ortools.sat.python import cp_model

from gangsched.model import TopologyMode
from gangsched.placement._common import GangView, split_target
from gangsched.placement.cpsat._model import _capacity_constraints
from gangsched.placement.cpsat._vars import I64, _Cell, _Units, _Vars
from gangsched.placement.problem import (
    GangPlacement,
    PlacementProblem,
    PlacementResult,
    slice_groups,
)


def _joint_domains(problem: PlacementProblem, view: GangView, gp: GangPlacement) -> I64:
    """``(n_nodes,)`` per node the global id of the domain a joint gang may choose (-1 where
    it may not go): the cover of its allowed tier for a hard gang; for a soft gang or one
    without a topology constraint the cluster-wide top domain, since such a gang may be
    placed anywhere (confining it to one lower domain would restrict the problem, and a
    proof over the restricted model would not be a proof for the problem as posed)."""
    del gp
    topo = problem.topology
    if view.gang.mode is TopologyMode.HARD:
        return view.cover
    return topo.cover(topo.top_tier)


def _greedy_domain(gp: GangPlacement, dom_ids: I64) -> int:
    """The joint domain (global id) holding greedy's placement of a gang, -1 if unplaced."""
    if not gp.placed or not gp.replicas:
        return -1
    return int(dom_ids[gp.replicas[0][1]])


def _left_out(name: str, greedy: GangPlacement) -> GangPlacement:
    why = greedy.reason or f"gang {name!r}: left out to place more weight of other gangs"
    return GangPlacement(gang=name, placed=False, reason=why)


def _build_joint(
    problem: PlacementProblem,
    views: list[GangView],
    doms: list[I64],
    greedy: PlacementResult,
    max_domains: int,
) -> tuple[cp_model.CpModel, _Vars, list[_Units], set[int], bool]:
    """The node-level joint model over each gang's first ``max_domains`` candidate domains;
    the last item says whether that left out a domain some gang could use (the model is then
    a restriction of the problem, and its proof not a proof for the problem)."""
    topo = problem.topology
    model = cp_model.CpModel()
    vs = _Vars()
    units_all: list[_Units] = []
    weights = problem.weights
    assert weights is not None
    restricted = False
    for gi, view in enumerate(views):
        gang = view.gang
        placed = model.new_bool_var(f"placed_{gi}")
        vs.placed[gi] = placed
        gp = greedy.gangs[gi]
        g_nodes = np.unique([n for _, n, _ in gp.replicas]).astype(np.intp)
        total = split_target(gang, view.q.sum(axis=1))
        dom_ids = doms[gi]
        usable = view.mask.any(axis=0) & (dom_ids >= 0)
        cand: list[int] = []
        if gp.placed and g_nodes.size:
            cand.append(int(dom_ids[g_nodes[0]]))
        if total is not None:
            # candidate domains: rank the gang's cover domains by summed capacity
            ids = dom_ids[usable]
            uniq, inv = np.unique(ids, return_inverse=True)
            qsum = np.zeros((uniq.size, gang.n_templates), dtype=np.int64)
            np.add.at(qsum, inv, view.q[:, usable].T)
            assert gang.min_counts is not None
            ok = (qsum >= gang.min_counts).all(axis=1) & (
                np.minimum(qsum, gang.counts).sum(axis=1) >= gang.size
            )
            order = np.flatnonzero(ok)
            order = order[np.lexsort((uniq[order], qsum[order].sum(axis=1)))]
            for k in order.tolist():
                if int(uniq[k]) in cand:
                    continue
                if len(cand) >= max_domains:
                    restricted = True  # a domain that could hold the gang is left out
                    break
                cand.append(int(uniq[k]))
        nodes = np.flatnonzero(usable & np.isin(dom_ids, cand)) if cand else np.zeros(0, np.intp)
        units = _Units(rep=nodes, members=[nodes[i : i + 1] for i in range(nodes.size)])
        units_all.append(units)
        if not cand or total is None:
            model.add(placed == 0)
            continue
        for d in cand:
            vs.choice[(gi, d)] = model.new_bool_var(f"y_{gi}_{d}")
        model.add(sum(vs.choice[(gi, d)] for d in cand) == placed)
        per_t: list[list[cp_model.IntVar]] = [[] for _ in range(gang.n_templates)]
        everything = []
        for u in range(units.size):
            n = int(units.rep[u])
            y = vs.choice[(gi, int(dom_ids[n]))]
            m = model.new_bool_var(f"m_{gi}_{u}")
            vs.used[(gi, u)] = m
            model.add(m <= y)
            cs = []
            for t in range(gang.n_templates):
                q = int(view.q[t, n])
                if q <= 0:
                    continue
                c = model.new_int_var(0, q, f"c_{gi}_{t}_{u}")
                vs.cells.append(_Cell(gi, t, u, c, q))
                model.add(c <= q * m)
                cs.append(c)
                per_t[t].append(c)
            model.add(sum(cs) >= m)
            everything.extend(cs)
        assert gang.min_counts is not None
        for t in range(gang.n_templates):
            s = sum(per_t[t])
            model.add(s <= int(gang.counts[t]))
            model.add(s >= int(gang.min_counts[t]) * placed)
        model.add(sum(everything) == gang.size * placed)
        if gang.slice_size:
            groups = slice_groups(topo, gang)
            members: dict[int, list[cp_model.IntVar]] = {}
            for cell in vs.cells:
                if cell.g == gi:
                    members.setdefault(int(groups[units.rep[cell.u]]), []).append(cell.var)
            for gid, cvars in sorted(members.items()):
                k_e = model.new_int_var(0, gang.size // gang.slice_size, f"sl_{gi}_{gid}")
                model.add(sum(cvars) == gang.slice_size * k_e)
    # shared node capacity: cells of every gang on the same node
    merged = _merge_units(problem, units_all, vs)
    dev_nodes = _capacity_constraints(
        model, problem, views, merged, vs, problem.free, problem.gpu_free
    )
    model.maximize(sum(int(weights[g]) * p for g, p in vs.placed.items()))
    _hint_joint(model, problem, views, vs, units_all, greedy)
    return model, vs, units_all, dev_nodes, restricted


def _merge_units(problem: PlacementProblem, units_all: list[_Units], vs: _Vars) -> list[_Units]:
    """Per-gang units are single nodes; node identity is what capacity constraints need."""
    del problem, vs
    return units_all


def _hint_joint(
    model: cp_model.CpModel,
    problem: PlacementProblem,
    views: list[GangView],
    vs: _Vars,
    units_all: list[_Units],
    greedy: PlacementResult,
) -> None:
    cnt: dict[tuple[int, int, int], int] = {}
    for gi, gp in enumerate(greedy.gangs):
        for t, node, _ in gp.replicas:
            cnt[(gi, t, node)] = cnt.get((gi, t, node), 0) + 1
    for cell in vs.cells:
        node = int(units_all[cell.g].rep[cell.u])
        model.add_hint(cell.var, cnt.get((cell.g, cell.t, node), 0))
    for (gi, u), m in vs.used.items():
        node = int(units_all[gi].rep[u])
        used = any(cnt.get((gi, t, node), 0) for t in range(views[gi].gang.n_templates))
        model.add_hint(m, int(used))
    for gi, p in vs.placed.items():
        model.add_hint(p, int(greedy.gangs[gi].placed))
    for (gi, d), y in vs.choice.items():
        gp = greedy.gangs[gi]
        hit = False
        if gp.placed and gp.replicas:
            node = gp.replicas[0][1]
            gang = views[gi].gang
            if gang.mode is TopologyMode.HARD:
                hit = int(views[gi].cover[node]) == d
            else:
                topo = problem.topology
                hit = int(topo.cover(topo.top_tier)[node]) == d
        model.add_hint(y, int(hit))
    dev: dict[tuple[int, int, int, int], int] = {}
    taken: set[tuple[int, int]] = set()
    for gi, gp in enumerate(greedy.gangs):
        for t, node, devs in gp.replicas:
            if views[gi].whole[t, node]:
                taken.update((node, d) for d in devs)
            else:
                for d in devs:
                    dev[(gi, t, node, d)] = dev.get((gi, t, node, d), 0) + 1
    for key, x in vs.shares.items():
        model.add_hint(x, dev.get(key, 0))
    for node_dev, w in vs.whole.items():
        model.add_hint(w, int(node_dev in taken))
