"""Joint placement on replica classes: one count per (class, node), exact for the weight.

Theory of operation
-------------------
Two replicas are of one *class* when they ask the same resources and the same devices and may
use the same nodes (the template's request row, ``gpu_count``, ``gpu_milli`` and mask row): on
a node, replicas of one class are interchangeable whatever gang they belong to. The model
counts ``c[k, n]`` replicas of class ``k`` on node ``n`` under the exact per-node capacity
constraints (resources, whole devices, the per-device model where shares meet other device
requests), and per gang ``placed[g]``, a domain choice ``x[g, D]`` over its candidate domains
(the relaxation's: a necessary condition, so no placement is left out) and its replicas per
template. Gangs are then matched to the counted replicas: for every class ``k`` and every
domain ``E`` of the (laminar) family of candidate domains,

    Σ_{g, t of class k, D ⊆ E} replicas of (g, t) in D ≤ Σ_{n ∈ E} c[k, n]

and over the whole cluster the counts are exactly the replicas placed. By Hall's theorem on a
laminar family these conditions are also sufficient: the gangs, innermost domains first, each
take their replicas from the counted ones inside their domain. So the model is exact for the
joint weight (it restricts nothing), its OPTIMAL is a proof, and its size is classes × nodes
count variables, not gangs × templates × nodes. Gangs with slices are not modelled here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from gangsched.errors import PlacementError
from gangsched.placement._common import GangView, Replica, gang_view
from gangsched.placement._relax import Relaxation
from gangsched.placement.cpsat._extract import _records
from gangsched.placement.cpsat._model import _capacity_constraints
from gangsched.placement.cpsat._vars import I64, _Cell, _log, _Units, _Vars
from gangsched.placement.greedy import finish
from gangsched.placement.problem import (
    GangPlacement,
    GangRequest,
    PlacementProblem,
    PlacementResult,
    Status,
)
from gangsched.placement.validate import validate_placement


@dataclass(slots=True, eq=False)
class _Classes:
    """The replica classes of a joint problem, as a problem of one-template gangs."""

    problem: PlacementProblem  # one gang per class (its counts: every replica of the class)
    views: list[GangView]
    of: dict[tuple[int, int], int]  # (gang, template) -> class


def replica_classes(problem: PlacementProblem) -> _Classes | None:
    """The classes of ``problem``'s replicas, or ``None`` when a gang has slices."""
    gangs = problem.gangs
    if any(g.slice_size for g in gangs):
        return None
    keys: dict[tuple[bytes, int, int, bytes], int] = {}
    rows: list[tuple[int, int]] = []  # per class, a (gang, template) holding it
    total: list[int] = []
    of: dict[tuple[int, int], int] = {}
    for gi, g in enumerate(gangs):
        assert g.gpu_count is not None and g.gpu_milli is not None
        for t in range(g.n_templates):
            if int(g.counts[t]) == 0:
                continue
            key = (
                g.request[t].tobytes(),
                int(g.gpu_count[t]),
                int(g.gpu_milli[t]),
                np.packbits(g.mask[t]).tobytes(),
            )
            k = keys.setdefault(key, len(rows))
            if k == len(rows):
                rows.append((gi, t))
                total.append(0)
            total[k] += int(g.counts[t])
            of[(gi, t)] = k
    reqs = []
    for k, (gi, t) in enumerate(rows):
        g = gangs[gi]
        assert g.gpu_count is not None and g.gpu_milli is not None
        reqs.append(
            GangRequest(
                name=f"class {k}",
                request=g.request[t : t + 1],
                counts=np.array([total[k]], dtype=np.int64),
                mask=g.mask[t : t + 1],
                size=0,
                gpu_count=g.gpu_count[t : t + 1],
                gpu_milli=g.gpu_milli[t : t + 1],
            )
        )
    # The same cluster with the classes as its gangs (unweighted, default hypernode order).
    cproblem = dataclasses.replace(
        problem, gangs=tuple(reqs), weights=None, used=None, hypernode_order=None
    )
    views = [gang_view(cproblem, k) for k in range(len(reqs))]
    return _Classes(problem=cproblem, views=views, of=of)


@dataclass(slots=True, eq=False)
class ClassJob:
    """What the class model of a joint problem is built from."""

    problem: PlacementProblem
    views: list[GangView]
    doms: list[I64]  # per gang, its domain id per node
    rel: Relaxation  # its candidate domains and their nesting
    cls: _Classes


@dataclass(slots=True, eq=False)
class _ClassModel:
    model: cp_model.CpModel
    vs: _Vars  # cells over (class, node); ``placed`` per gang
    units: list[_Units]
    dev_nodes: set[int]
    choice: dict[tuple[int, int], cp_model.IntVar]  # (gang, domain)
    reps: dict[tuple[int, int], cp_model.LinearExprT]  # (gang, template) replicas placed
    objective: cp_model.LinearExprT  # the placed weight


def _domain_nodes(doms: list[I64], rel: Relaxation) -> dict[int, I64]:
    out: dict[int, I64] = {}
    for gi, cands in enumerate(rel.cand):
        for d in cands:
            if d not in out:
                out[d] = np.flatnonzero(doms[gi] == d)
    return out


def build_class_model(job: ClassJob, incumbent: list[GangPlacement], upper: int) -> _ClassModel:
    """The model of the module docstring, its objective between the incumbent's weight and
    the valid bound ``upper``, hinted with the incumbent."""
    problem, views, doms, rel, cls = job.problem, job.views, job.doms, job.rel, job.cls
    weights = problem.weights
    assert weights is not None
    model = cp_model.CpModel()
    vs = _Vars()
    units: list[_Units] = []
    cell_of: list[dict[int, cp_model.IntVar]] = []
    for k, cv in enumerate(cls.views):
        nodes = np.flatnonzero(cv.mask[0]).astype(np.intp)
        units.append(_Units(rep=nodes, members=[nodes[i : i + 1] for i in range(nodes.size)]))
        row: dict[int, cp_model.IntVar] = {}
        for u, n in enumerate(nodes.tolist()):
            q = int(cv.q[0, n])
            c = model.new_int_var(0, q, f"c_{k}_{n}")
            vs.cells.append(_Cell(k, 0, u, c, q))
            row[n] = c
        cell_of.append(row)
    dev_nodes = _capacity_constraints(
        model, cls.problem, cls.views, units, vs, problem.free, problem.gpu_free
    )
    choice: dict[tuple[int, int], cp_model.IntVar] = {}
    reps: dict[tuple[int, int], cp_model.LinearExprT] = {}
    # per class, per domain: the replicas gangs of that domain take from it
    demand: list[dict[int, list[cp_model.LinearExprT]]] = [{} for _ in cls.views]
    placed_total: list[list[cp_model.LinearExprT]] = [[] for _ in cls.views]
    for gi, view in enumerate(views):
        gang = view.gang
        placed = model.new_bool_var(f"placed_{gi}")
        vs.placed[gi] = placed
        cands = rel.cand[gi]
        if not cands:
            model.add(placed == 0)
            continue
        for d in cands:
            choice[(gi, d)] = model.new_bool_var(f"x_{gi}_{d}")
        model.add(sum(choice[(gi, d)] for d in cands) == placed)
        assert gang.min_counts is not None
        fixed = gang.size == int(gang.counts.sum())
        n_vars: list[cp_model.LinearExprT] = []
        for t in range(gang.n_templates):
            hi = int(gang.counts[t])
            if hi == 0:
                n_vars.append(0)
                continue
            if fixed:
                n_t: cp_model.LinearExprT = hi * placed
            else:
                v = model.new_int_var(0, hi, f"n_{gi}_{t}")
                model.add(v <= hi * placed)
                model.add(v >= int(gang.min_counts[t]) * placed)
                n_t = v
            n_vars.append(n_t)
            reps[(gi, t)] = n_t
            k = cls.of[(gi, t)]
            placed_total[k].append(n_t)
            for d in cands:
                if len(cands) == 1:
                    z: cp_model.LinearExprT = n_t
                elif fixed:
                    z = hi * choice[(gi, d)]
                else:
                    zv = model.new_int_var(0, hi, f"z_{gi}_{t}_{d}")
                    model.add(zv <= hi * choice[(gi, d)])
                    z = zv
                demand[k].setdefault(d, []).append(z)
            if len(cands) > 1 and not fixed:
                zs = [demand[k][d][-1] for d in cands]
                model.add(sum(zs) == n_t)
        if not fixed:
            model.add(sum(n_vars) == gang.size * placed)
    nodes_of = _domain_nodes(doms, rel)
    for k in range(len(cls.views)):
        row_k = cell_of[k]
        model.add(sum(row_k.values()) == sum(placed_total[k]))
        for big in sorted(rel.inside):
            terms = [z for d in rel.inside[big] for z in demand[k].get(d, [])]
            if not terms:
                continue
            supply = [row_k[n] for n in nodes_of[big].tolist() if n in row_k]
            model.add(sum(terms) <= sum(supply))
    objective = sum(int(weights[gi]) * p for gi, p in vs.placed.items())
    model.add(objective <= upper)
    got = sum(int(weights[gi]) for gi, gp in enumerate(incumbent) if gp.placed)
    model.add(objective >= got)
    model.maximize(objective)
    _hint(model, problem, views, doms, cls, vs, cell_of, choice, incumbent)
    return _ClassModel(model, vs, units, dev_nodes, choice, reps, objective)


def _hint(
    model: cp_model.CpModel,
    problem: PlacementProblem,
    views: list[GangView],
    doms: list[I64],
    cls: _Classes,
    vs: _Vars,
    cell_of: list[dict[int, cp_model.IntVar]],
    choice: dict[tuple[int, int], cp_model.IntVar],
    incumbent: list[GangPlacement],
) -> None:
    """Hint every variable with the incumbent's value."""
    cnt: dict[tuple[int, int], int] = {}
    shares: dict[tuple[int, int, int], int] = {}
    taken: set[tuple[int, int]] = set()
    per_t: dict[tuple[int, int], int] = {}
    for gi, gp in enumerate(incumbent):
        model.add_hint(vs.placed[gi], int(gp.placed))
        if not gp.placed:
            continue
        for t, node, devs in gp.replicas:
            k = cls.of[(gi, t)]
            cnt[(k, node)] = cnt.get((k, node), 0) + 1
            per_t[(gi, t)] = per_t.get((gi, t), 0) + 1
            if views[gi].whole[t, node]:
                taken.update((node, d) for d in devs)
            else:
                for d in devs:
                    shares[(k, node, d)] = shares.get((k, node, d), 0) + 1
    for k, row in enumerate(cell_of):
        for n, c in row.items():
            model.add_hint(c, cnt.get((k, n), 0))
    for (gi, d), x in choice.items():
        gp = incumbent[gi]
        hit = gp.placed and bool(gp.replicas) and int(doms[gi][gp.replicas[0][1]]) == d
        model.add_hint(x, int(hit))
    for (k, _, node, d), x in vs.shares.items():
        model.add_hint(x, shares.get((k, node, d), 0))
    for node_dev, w in vs.whole.items():
        model.add_hint(w, int(node_dev in taken))
    del problem, per_t


def extract_classes(
    job: ClassJob, cm: _ClassModel, solver: cp_model.CpSolver, fallback: list[GangPlacement]
) -> list[GangPlacement] | None:
    """The gangs' placements from a solution: per class the counted replicas (devices
    assigned), handed to the gangs innermost domain first; ``None`` if they do not add up
    (never expected) or the result fails the validator."""
    problem, views, doms, rel, cls = job.problem, job.views, job.doms, job.rel, job.cls
    n = problem.n_nodes
    counts = [np.zeros((1, n), dtype=np.int64) for _ in cls.views]
    for cell in cm.vs.cells:
        val = int(solver.value(cell.var))
        if val:
            counts[cell.g][0, int(cm.units[cell.g].rep[cell.u])] += val
    recs = _records(
        cls.problem,
        cls.views,
        cm.vs,
        counts,
        solver,
        problem.free,
        problem.gpu_free,
        cm.dev_nodes,
    )
    if recs is None:
        return None
    pool: list[dict[int, list[Replica]]] = []
    for k_recs in recs:
        by_node: dict[int, list[Replica]] = {}
        for r in sorted(k_recs):
            by_node.setdefault(r[1], []).append(r)
        pool.append(by_node)
    chosen: dict[int, int] = {}
    for (gi, d), x in cm.choice.items():
        if solver.value(x):
            chosen[gi] = d
    order = sorted(chosen, key=lambda gi: (rel.n_nodes[chosen[gi]], chosen[gi], gi))
    nodes_of = _domain_nodes(doms, rel)
    out: list[GangPlacement] = list(fallback)
    for gi in range(len(views)):
        if gi not in chosen:
            name = problem.gangs[gi].name
            why = (
                fallback[gi].reason
                or f"gang {name!r}: left out to place more weight of other gangs"
            )
            out[gi] = GangPlacement(gang=name, placed=False, reason=why)
    # per class and node, the incumbent replicas of the gangs not handed theirs yet: a gang
    # takes such nodes last, so that the gangs the solution did not move keep their places
    pending: list[dict[int, int]] = [{} for _ in cls.views]
    for gi in order:
        for t, nd, _ in fallback[gi].replicas:
            row = pending[cls.of[(gi, t)]]
            row[nd] = row.get(nd, 0) + 1
    for gi in order:
        gang = views[gi].gang
        for t, nd, _ in fallback[gi].replicas:
            pending[cls.of[(gi, t)]][nd] -= 1
        in_domain = set(nodes_of[chosen[gi]].tolist())
        mine: list[Replica] = []
        for t in range(gang.n_templates):
            if (gi, t) not in cm.reps:
                continue
            want = int(solver.value(cm.reps[(gi, t)]))
            by_node = pool[cls.of[(gi, t)]]
            # the incumbent's nodes first, the other gangs' last (any order of the domain's
            # nodes is valid: see the module docstring)
            before = {nd for tt, nd, _ in fallback[gi].replicas if tt == t and nd in in_domain}
            left = pending[cls.of[(gi, t)]]
            nodes = sorted(
                (nd for nd in in_domain if by_node.get(nd)),
                key=lambda nd: (nd not in before, left.get(nd, 0) > 0, nd),
            )
            for node in nodes:
                if want == 0:
                    break
                have = by_node.get(node)
                if not have:
                    continue
                take, by_node[node] = have[:want], have[want:]
                mine.extend((t, nd, devs) for _, nd, devs in take)
                want -= len(take)
            if want:
                _log.warning("class model: gang %s lacks %d replicas", gang.name, want)
                return None
        out[gi] = finish(problem, gi, mine)
    try:
        validate_placement(problem, PlacementResult(gangs=tuple(out), status=Status.FEASIBLE))
    except PlacementError as exc:  # never expected: the model is exact
        _log.warning("class model placement rejected: %s", exc)
        return None
    return out
