"""Joint placement: the weight of the gangs placed together, bounded and proven."""

from __future__ import annotations

import numpy as np
from ortools.sat.python import cp_model

from gangsched.placement._common import GangView, gang_view, split_target
from gangsched.placement._relax import Relaxation, build_relaxation
from gangsched.placement.cpsat._aggregate import _Aggregate, _aggregate, _build_aggregate
from gangsched.placement.cpsat._budget import _Budget, now
from gangsched.placement.cpsat._classes import (
    ClassJob,
    build_class_model,
    extract_classes,
    replica_classes,
)
from gangsched.placement.cpsat._extract import _apply, _extract
from gangsched.placement.cpsat._joint_model import (
    _build_joint,
    _greedy_domain,
    _joint_domains,
    _left_out,
)
from gangsched.placement.cpsat._repair import repair
from gangsched.placement.cpsat._search import _Search
from gangsched.placement.cpsat._vars import I64, _log
from gangsched.placement.greedy import by_weight, finish, greedy_gang, greedy_sequence
from gangsched.placement.problem import GangPlacement, PlacementProblem, PlacementResult, Status

#: Deterministic work the bounding programme of the relaxation may take (of the call's budget):
#: its bound is valid whether or not it is proven, and the class model closes what it leaves.
RELAX_WORK = 0.1


def _weight(
    problem: PlacementProblem, gangs: tuple[GangPlacement, ...] | list[GangPlacement]
) -> int:
    w = problem.weights
    assert w is not None
    return sum(int(w[i]) for i, g in enumerate(gangs) if g.placed)


def _nodes(gp: GangPlacement) -> list[tuple[int, int]]:
    """A placement's (template, node) per replica, in order (its devices left out)."""
    return sorted((t, n) for t, n, _ in gp.replicas)


def _with_gap(problem: PlacementProblem, result: PlacementResult, bound: float) -> PlacementResult:
    """``result`` as FEASIBLE with its gap to ``bound`` (OPTIMAL when it reaches it)."""
    obj = float(_weight(problem, result.gangs))
    if obj >= bound:
        return PlacementResult(gangs=result.gangs, status=Status.OPTIMAL)
    gap = (bound - obj) / max(1.0, obj)
    return PlacementResult(gangs=result.gangs, status=Status.FEASIBLE, gap=gap)


def _joint_cells(views: list[GangView], doms: list[I64], rel: Relaxation) -> int:
    """Count variables the node-level joint model would have (an estimate of its size)."""
    total = 0
    for gi, view in enumerate(views):
        if not rel.cand[gi]:
            continue
        inside = np.isin(doms[gi], rel.cand[gi])
        total += int((view.mask & inside[None, :]).sum())
    return total


def _place_guided(
    problem: PlacementProblem,
    views: list[GangView],
    doms: list[I64],
    rel: Relaxation,
    guide: list[int],
) -> list[GangPlacement]:
    """Place the gangs the bounding programme chose, each by greedy inside its chosen domain
    (innermost domains first, larger gangs first), then try the others anywhere they may go,
    by weight."""
    free = problem.free.copy()
    gpu_free = problem.gpu_free.copy()
    out: list[GangPlacement | None] = [None] * len(views)
    order = sorted(
        (gi for gi in range(len(views)) if guide[gi] >= 0),
        key=lambda gi: (rel.n_nodes[guide[gi]], guide[gi], -views[gi].gang.size, gi),
    )
    for gi in order:
        inside = doms[gi] == guide[gi]
        r_free = np.where(inside[:, None], free, 0)
        r_gpu = np.where(inside[:, None], gpu_free, 0)
        gp = greedy_gang(problem, gi, r_free, r_gpu)
        if gp.placed:
            _apply(problem, gi, gp.replicas, free, gpu_free)
            out[gi] = gp
    for gi in by_weight(problem):
        if out[gi] is None and rel.cand[gi]:
            gp = greedy_gang(problem, gi, free, gpu_free)
            if gp.placed:
                out[gi] = gp
    return [
        gp
        if gp is not None
        else _left_out(views[gi].gang.name, GangPlacement(gang=views[gi].gang.name, placed=False))
        for gi, gp in enumerate(out)
    ]


def _alone_bound(problem: PlacementProblem, views: list[GangView]) -> int:
    """A valid upper bound on the weight of any joint placement: the summed weight of the
    gangs whose capacity on the empty cluster reaches their size."""
    w = problem.weights
    assert w is not None
    return sum(
        int(w[gi])
        for gi, v in enumerate(views)
        if split_target(v.gang, v.q.sum(axis=1)) is not None
    )


class _Joint(_Search):
    """Joint placement of :class:`~gangsched.placement.cpsat.CpSatPlacer`."""

    def _place_joint(self, problem: PlacementProblem, budget: _Budget) -> PlacementResult:
        started = now()
        greedy = greedy_sequence(problem, budget.past_deadline)
        if budget.limit == "wall":  # greedy's answer, cut short
            return PlacementResult(gangs=greedy.gangs, status=Status.TIMED_OUT, fallback=True)
        # one greedy pass over the gangs: what the later greedy steps are judged to cost
        # against the wall budget (no effect without one)
        budget.pass_time = now() - started
        views = [gang_view(problem, gi) for gi in range(len(problem.gangs))]
        doms = [_joint_domains(problem, views[gi], greedy.gangs[gi]) for gi in range(len(views))]
        agg = _aggregate(problem, views, doms) if self.aggregate else None
        if agg is not None:
            return self._place_aggregate(problem, views, doms, agg, greedy, budget)
        # a valid upper bound on the weight, and a placement guided by the bound's choice
        # (building the bound's data costs about half a greedy pass)
        if not budget.room_for(budget.pass_time / 2):  # greedy's answer, unproven
            return PlacementResult(gangs=greedy.gangs, status=Status.TIMED_OUT, fallback=True)
        rel = build_relaxation(problem, views, doms)
        if budget.past_deadline():  # greedy's answer, unproven
            return PlacementResult(gangs=greedy.gangs, status=Status.TIMED_OUT, fallback=True)
        upper, guide = self._solve_relaxation(problem, rel, doms, greedy, budget)
        upper = min(upper, _alone_bound(problem, views))
        incumbent = list(greedy.gangs)
        if guide is not None and budget.room_for(budget.pass_time):
            guided = _place_guided(problem, views, doms, rel, guide)
            if _weight(problem, guided) > _weight(problem, incumbent):
                incumbent = guided
        # without slices the exact model on replica classes searches from here; otherwise
        # a repair search raises the incumbent first
        cls = replica_classes(problem) if _weight(problem, incumbent) < upper else None
        if cls is None and _weight(problem, incumbent) < upper and not budget.past_deadline():
            may = [bool(c) for c in rel.cand]
            incumbent = repair(problem, views, may, incumbent, upper, budget)
        if _weight(problem, incumbent) >= upper:  # the bound is reached: proven
            if self.polish:
                self._polish(problem, incumbent, budget)
            return PlacementResult(gangs=tuple(incumbent), status=Status.OPTIMAL)
        if cls is not None:
            job = ClassJob(problem, views, doms, rel, cls)
            return self._place_classes(job, incumbent, upper, budget)
        best = PlacementResult(gangs=tuple(incumbent), status=Status.FEASIBLE)
        if _joint_cells(views, doms, rel) > self.max_joint_cells or budget.exhausted():
            return _with_gap(problem, best, upper)
        model, vs, units, dev_nodes, restricted = _build_joint(
            problem, views, doms, best, self.max_domains
        )
        solver, st = self._solve(model, budget)
        if st not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return _with_gap(problem, best, upper)
        recs = _extract(
            problem, views, vs, units, solver, problem.free, problem.gpu_free, dev_nodes
        )
        if recs is None:
            return _with_gap(problem, best, upper)
        gangs: list[GangPlacement] = []
        for gi, gang in enumerate(problem.gangs):
            if solver.value(vs.placed[gi]) and recs[gi]:
                gangs.append(finish(problem, gi, recs[gi]))
            else:
                gangs.append(_left_out(gang.name, greedy.gangs[gi]))
        if _weight(problem, gangs) < _weight(problem, incumbent):
            return _with_gap(problem, best, upper)
        if self.polish:
            self._polish(problem, gangs, budget)
        if st == cp_model.OPTIMAL and not restricted:
            return PlacementResult(gangs=tuple(gangs), status=Status.OPTIMAL)
        # the solver's bound holds for the problem unless the model left domains out
        bound = float(upper) if restricted else min(float(upper), solver.best_objective_bound)
        return _with_gap(
            problem, PlacementResult(gangs=tuple(gangs), status=Status.FEASIBLE), bound
        )

    def _solve_relaxation(
        self,
        problem: PlacementProblem,
        rel: Relaxation,
        doms: list[I64],
        greedy: PlacementResult,
        budget: _Budget,
    ) -> tuple[int, list[int] | None]:
        """Solve the bounding programme of :mod:`._relax`: its valid upper bound on the joint
        weight, and (when it found a solution) the chosen domain per gang (-1: none)."""
        weights = problem.weights
        assert weights is not None
        model = cp_model.CpModel()
        x: dict[tuple[int, int], cp_model.IntVar] = {}
        for gi, cands in enumerate(rel.cand):
            g_dom = _greedy_domain(greedy.gangs[gi], doms[gi])
            row = []
            for d in cands:
                v = model.new_bool_var(f"x_{gi}_{d}")
                x[(gi, d)] = v
                model.add_hint(v, int(d == g_dom))
                row.append(v)
            if len(row) > 1:
                model.add_at_most_one(row)
        by_dom: dict[int, list[tuple[int, cp_model.IntVar]]] = {}
        for (gi, d), v in x.items():
            by_dom.setdefault(d, []).append((gi, v))
        alone = sum(int(weights[gi]) for gi, c in enumerate(rel.cand) if c)
        for big, inner in rel.inside.items():
            if budget.past_deadline():  # no time left to finish the bounding model
                return alone, None
            terms = [(rel.floor[(gi, d)], v) for d in inner for gi, v in by_dom.get(d, [])]
            if not terms:
                continue
            room = rel.room[big]
            for dim in range(room.size):
                if sum(int(f[dim]) for f, _ in terms) > int(room[dim]):
                    model.add(sum(int(f[dim]) * v for f, v in terms if f[dim]) <= int(room[dim]))
            for si, members in enumerate(rel.sig_gangs):
                keep = set(members)
                s_terms = [
                    (rel.floor[(gi, d)], v)
                    for d in inner
                    for gi, v in by_dom.get(d, [])
                    if gi in keep
                ]
                s_room = rel.sig_room[(big, si)]
                for dim in range(s_room.size):
                    if sum(int(f[dim]) for f, _ in s_terms) > int(s_room[dim]):
                        model.add(
                            sum(int(f[dim]) * v for f, v in s_terms if f[dim]) <= int(s_room[dim])
                        )
        model.maximize(sum(int(weights[gi]) * v for (gi, _), v in x.items()))
        solver, st = self._solve(model, budget, cap=RELAX_WORK, linearization=1)
        if st == cp_model.OPTIMAL:
            upper = round(solver.objective_value)
        elif st == cp_model.FEASIBLE:
            upper = int(np.floor(solver.best_objective_bound + 1e-6))
        else:
            return alone, None
        guide = [-1] * len(rel.cand)
        for (gi, d), v in x.items():
            if solver.value(v):
                guide[gi] = d
        return min(upper, alone), guide

    def _place_classes(
        self, job: ClassJob, incumbent: list[GangPlacement], upper: int, budget: _Budget
    ) -> PlacementResult:
        """The joint weight on replica classes (:mod:`._classes`, exact): OPTIMAL when solved,
        else the best placement with its gap to the least valid bound."""
        problem, views, rel = job.problem, job.views, job.rel
        # building the model costs about a greedy pass
        if budget.exhausted() or not budget.room_for(budget.pass_time):
            return _with_gap(
                problem, PlacementResult(gangs=tuple(incumbent), status=Status.FEASIBLE), upper
            )
        cm = build_class_model(job, incumbent, upper)
        keep = budget.pass_time / 2  # the extraction and its check, after the solve
        solver, st = self._solve(cm.model, budget, reserve=keep)
        gangs = incumbent
        bound = float(upper)
        if st in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            # the model is exact and its objective lies between the incumbent and ``upper``
            # (both valid), so its bound is a bound for the problem
            bound = min(bound, float(np.floor(solver.best_objective_bound + 1e-6)))
            if round(solver.value(cm.objective)) > _weight(problem, incumbent):
                got = extract_classes(job, cm, solver, incumbent)
                if got is not None:
                    gangs = got
        if _weight(problem, gangs) < bound and not budget.past_deadline():
            # unproven: the repair search may still raise the weight
            gangs = repair(problem, views, [bool(c) for c in rel.cand], gangs, int(bound), budget)
        if self.polish:
            # the model's gangs took replicas in node order: those are worth re-placing
            # (the others are greedy's placements already)
            fresh = {gi for gi, gp in enumerate(gangs) if _nodes(gp) != _nodes(incumbent[gi])}
            self._polish(problem, gangs, budget, fresh)
        return _with_gap(
            problem, PlacementResult(gangs=tuple(gangs), status=Status.FEASIBLE), bound
        )

    def _place_aggregate(
        self,
        problem: PlacementProblem,
        views: list[GangView],
        doms: list[I64],
        agg: _Aggregate,
        greedy: PlacementResult,
        budget: _Budget,
    ) -> PlacementResult:
        """Joint placement when every replica of every gang is interchangeable: phase 1 picks
        each gang's domain on aggregate capacities (exact, see ``_Aggregate``), phase 2
        places the chosen gangs one at a time inside their domains, innermost domains first,
        each by the exact single-gang search."""
        g_dom = [_greedy_domain(greedy.gangs[gi], doms[gi]) for gi in range(len(views))]
        g_weight = _weight(problem, greedy.gangs)
        status, gap, fallback = Status.OPTIMAL, 0.0, False
        chosen = g_dom
        if g_weight < agg.upper_bound(problem):
            model, n_vars = _build_aggregate(problem, agg, g_dom)
            solver, st = self._solve(model, budget)
            if st in (cp_model.OPTIMAL, cp_model.FEASIBLE):
                obj, bound = solver.objective_value, solver.best_objective_bound
                if round(obj) > g_weight or st == cp_model.OPTIMAL:
                    counts = {key: int(solver.value(v)) for key, v in n_vars.items()}
                    if round(obj) > g_weight:
                        chosen = agg.assign(counts, g_dom)
                if st != cp_model.OPTIMAL:
                    status, gap = Status.FEASIBLE, abs(obj - bound) / max(1.0, abs(obj))
            elif st == cp_model.UNKNOWN:  # out of time: greedy's domains
                status, fallback = Status.TIMED_OUT, True
        free = problem.free.copy()
        gpu_free = problem.gpu_free.copy()
        out: list[GangPlacement | None] = [None] * len(views)
        order = sorted(
            (gi for gi in range(len(views)) if chosen[gi] >= 0),
            key=lambda gi: (
                agg.n_nodes[chosen[gi]],
                chosen[gi],
                -views[gi].gang.size,
                gi,
            ),
        )
        for gi in order:
            inside = doms[gi] == chosen[gi]
            r_free = np.where(inside[:, None], free, 0)
            r_gpu = np.where(inside[:, None], gpu_free, 0)
            gp, _, _, _ = self._place_one(problem, gi, r_free, r_gpu, budget)
            if not gp.placed:  # cannot happen: the domain's aggregate capacity holds it
                _log.warning("aggregate joint placement failed for %s", views[gi].gang.name)
                return PlacementResult(gangs=greedy.gangs, status=Status.GREEDY, fallback=True)
            _apply(problem, gi, gp.replicas, free, gpu_free)
            out[gi] = gp
        gangs = [
            gp if gp is not None else _left_out(views[gi].gang.name, greedy.gangs[gi])
            for gi, gp in enumerate(out)
        ]
        if _weight(problem, gangs) < g_weight:  # cannot happen either
            return PlacementResult(gangs=greedy.gangs, status=Status.GREEDY)
        return PlacementResult(gangs=tuple(gangs), status=status, gap=gap, fallback=fallback)

    def _polish(
        self,
        problem: PlacementProblem,
        gangs: list[GangPlacement],
        budget: _Budget,
        only: set[int] | None = None,
    ) -> None:
        """Second phase of joint placement: with every other gang fixed, re-place each placed
        gang (of ``only``, when given) by the greedy placer (lowest tier, tightest domain,
        fewest nodes) and keep the better of the two placements by the gang's objective."""
        free = problem.free.copy()
        gpu_free = problem.gpu_free.copy()
        for gi, gp in enumerate(gangs):
            if gp.placed:
                _apply(problem, gi, gp.replicas, free, gpu_free)
        longest = budget.pass_time / max(1, len(gangs))  # the longest re-placement (s)
        for gi in range(len(gangs)):
            if not gangs[gi].placed or (only is not None and gi not in only):
                continue
            if not budget.room_for(longest):
                continue
            started = now()
            _apply(problem, gi, gangs[gi].replicas, free, gpu_free, sign=-1)
            better = greedy_gang(problem, gi, free.copy(), gpu_free.copy())
            if better.placed and better.objective < gangs[gi].objective:
                gangs[gi] = better
            _apply(problem, gi, gangs[gi].replicas, free, gpu_free)
            longest = max(longest, now() - started)
