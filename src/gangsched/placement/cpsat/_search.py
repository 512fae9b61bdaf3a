"""The single-gang search: tiers lowest first, candidate domains in chunks, objective levels
solved one at a time (closed by a bound where the hint reaches it)."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
from ortools.sat.python import cp_model

from gangsched.errors import SolverError
from gangsched.placement import _exact
from gangsched.placement._common import (
    GangView,
    Replica,
    domain_order,
    follows_hypernode_order,
    gang_view,
    infeasible_reason,
    split_target,
)
from gangsched.placement.cpsat._bounds import _chunk_size, _domain_bounds, _level_bounds
from gangsched.placement.cpsat._budget import _Budget
from gangsched.placement.cpsat._extract import _extract
from gangsched.placement.cpsat._model import _build_single
from gangsched.placement.cpsat._roles import dominant, lex_max, role_hint
from gangsched.placement.cpsat._vars import (
    I64,
    _hint_values,
    _HintValues,
    _lex_objective,
    _log,
    _rehint,
    _Units,
    _Vars,
)
from gangsched.placement.greedy import finish, greedy_gang
from gangsched.placement.problem import GangPlacement, PlacementProblem, Status


def _out_of_time(name: str, greedy: GangPlacement) -> tuple[GangPlacement, Status, float, bool]:
    """A single-gang search that ran out of budget before any solution: greedy's placement
    (a fallback), or no placement when greedy found none."""
    if greedy.placed:
        return greedy, Status.TIMED_OUT, 0.0, True
    reason = f"gang {name!r}: solver timed out and greedy found no placement"
    return GangPlacement(gang=name, placed=False, reason=reason), Status.TIMED_OUT, 0.0, True


#: Status of a solved model whose solution did not extract (see ``_solve_model``).
_NO_EXTRACT = -1
#: What a search for the per-domain optima of one tier finds: the candidate domains (in
#: order), a lower bound per domain, a hint in the best domain (None: none) and whether that
#: hint is proven optimal at this tier.
_Optimum = tuple[npt.NDArray[np.intp], list[tuple[int, ...]], GangPlacement | None, bool]


def _greedy_or_infeasible(
    problem: PlacementProblem, view: GangView, greedy: GangPlacement | None
) -> tuple[GangPlacement, Status, float, bool]:
    """The end of a search that found nothing: greedy's placement as a fallback when it has
    one, else the proof that nothing fits (with the reason)."""
    if greedy is not None and greedy.placed:
        return greedy, Status.GREEDY, 0.0, True
    name = view.gang.name
    reason = infeasible_reason(problem, view)
    return GangPlacement(gang=name, placed=False, reason=reason), Status.INFEASIBLE, 0.0, False


def _size(model: cp_model.CpModel) -> int:
    """Variables and constraints of ``model`` (what a solve's overrun scales with)."""
    proto = model.proto
    return len(proto.variables) + len(proto.constraints)


class _Search:
    """Solving and the single-gang search of :class:`~gangsched.placement.cpsat.CpSatPlacer`
    (its settings are documented there)."""

    time_limit_s: float | None
    seed: int
    workers: int
    max_deterministic_time: float | None
    max_domains: int
    joint: bool
    sequential: bool
    exact_bounds: bool
    aggregate: bool
    polish: bool
    max_joint_cells: int
    log: bool

    def _solve(
        self,
        model: cp_model.CpModel,
        budget: _Budget,
        cap: float | None = None,
        linearization: int = 2,
        reserve: float = 0.0,
    ) -> tuple[cp_model.CpSolver, int]:
        """Solve ``model`` within what is left of ``budget`` (and at most ``cap`` of
        deterministic work, when given: a deterministic limit of its own). The solver's full
        linearization (``linearization_level`` 2) is the default: the LP of the counts,
        capacities and domain links closes most levels at the root. ``reserve``: wall seconds
        kept back from the solve for what must follow it (the extraction)."""
        solver = cp_model.CpSolver()
        if budget.past_deadline():  # the wall budget is spent: no solve at all
            return solver, int(cp_model.UNKNOWN)
        limit = budget.allowance(_size(model))
        own_cap = cap is not None and (limit is None or cap < limit)
        if own_cap:
            limit = cap
        if limit is not None and limit < 1e-6:  # the budget cannot afford it: no solve
            if not own_cap:
                budget.limit = budget.limit or "work"
            return solver, int(cp_model.UNKNOWN)
        prm = solver.parameters
        if budget.deadline is not None:
            prm.max_time_in_seconds = max(0.001, budget.remaining() - reserve)
        prm.num_workers = self.workers
        prm.random_seed = self.seed
        # placement models are many small solves: presolve probing and symmetry detection
        # cost more of the work budget than they save the search
        prm.cp_model_probing_level = 0
        prm.symmetry_level = 0
        prm.linearization_level = linearization
        if limit is not None:
            prm.max_deterministic_time = limit
        prm.log_search_progress = self.log
        if self.log:
            solver.log_callback = _log.info
        status = solver.solve(model)
        used = budget.charge(float(solver.response_proto.deterministic_time))
        if status in (cp_model.FEASIBLE, cp_model.UNKNOWN):
            # which limit stopped the solve: its deterministic limit when it reached it (no
            # cut of the call's budget when that was the solve's own cap), else the clock
            if limit is not None and used >= 0.99 * limit:
                if not own_cap and budget.limit != "wall":
                    budget.limit = "work"
            elif budget.deadline is not None:
                budget.limit = "wall"
            elif budget.limit != "wall":
                budget.limit = "work"
        if status == cp_model.MODEL_INVALID:
            raise SolverError(model.validate() or "model invalid", kind="placement", field="model")
        return solver, int(status)

    def _solve_levels(
        self,
        model: cp_model.CpModel,
        vs: _Vars,
        levels: list[tuple[cp_model.LinearExprT, int]],
        budget: _Budget,
    ) -> tuple[Any, int, float]:
        """Minimise ``levels`` lexicographically: one weighted objective with separating
        weights, or (``sequential``) one solve per level, each fixing the optimum of the
        previous one and hinted with its solution. Returns the solver holding the last
        solution, its status (OPTIMAL only if every level was proven) and the relative gap of
        the level that stopped short."""
        if not self.sequential:
            model.minimize(_lex_objective(levels))
            solver, st = self._solve(model, budget)
            gap = 0.0
            if st in (cp_model.OPTIMAL, cp_model.FEASIBLE):
                obj, bound = solver.objective_value, solver.best_objective_bound
                gap = abs(obj - bound) / max(1.0, abs(obj))
            return solver, st, gap
        best: tuple[Any, int, float] | None = None
        hint_ok: bool | None = None  # the hint verified as a solution of the model
        n_fixed: int | None = None  # the node level's optimum, once known
        # a lexicographic lower bound holds for a level while every level before it is at
        # the bound's value
        cond = vs.cond_lbs
        for i, (expr, _bound) in enumerate(levels):
            hint = _hint_values(model)
            terms = vs.level_terms[i] if i < len(vs.level_terms) else None
            lb = vs.level_lbs[i] if terms is not None else 0
            if i == len(levels) - 1 and vs.emp_sorted is not None and n_fixed is not None:
                lb = max(lb, int(vs.emp_sorted[:n_fixed].sum()))
            if cond is not None and terms is not None:
                lb = max(lb, cond[i])
            h: int | None = None
            if terms is not None and all(v.index in hint for v, _ in terms):
                h = sum(c * hint[v.index] for v, c in terms)
            last = i == len(levels) - 1
            if last and n_fixed is not None and vs.waste_lb is not None and (h is None or h > lb):
                # a knapsack bound, computed when needed (and only until it reaches the
                # hint, which then closes the level)
                w_lb = vs.waste_lb(n_fixed, h)
                if w_lb < 2**61:  # (no n_fixed nodes reaching the needs: cannot happen)
                    lb = max(lb, w_lb)
            if h is not None and h <= lb:
                # the hint reaches this level's lower bound: the level is closed by the
                # bound, no search (once the hint is known to be a solution)
                if hint_ok is None:
                    hint_ok = self._hint_is_solution(model, budget)
                if hint_ok:
                    model.add(expr <= h)
                    if i == len(levels) - 2:
                        n_fixed = h
                    if cond is not None and h != cond[i]:
                        cond = None
                    best = (_HintValues(hint), int(cp_model.OPTIMAL), 0.0)
                    continue
            if (cond is not None and cond[i] > 0) or (last and lb > 0):
                model.add(expr >= lb)  # valid: every earlier level is at its optimum
            model.minimize(expr)
            solver, st = self._solve(model, budget)
            if st == cp_model.OPTIMAL:
                val = round(solver.objective_value)
                model.add(expr <= val)
                if cond is not None and val != cond[i]:
                    cond = None
                if i == len(levels) - 2:
                    n_fixed = val
                _rehint(model, vs, solver)
                hint_ok = True
                best = (solver, int(cp_model.OPTIMAL), 0.0)
                continue
            if st == cp_model.FEASIBLE:
                obj, bound = solver.objective_value, solver.best_objective_bound
                return solver, int(cp_model.FEASIBLE), abs(obj - bound) / max(1.0, abs(obj))
            if st == cp_model.UNKNOWN and h is not None:
                # out of budget before the search met the hint: the hint is the incumbent
                if hint_ok is None:
                    hint_ok = self._hint_is_solution(model, budget)
                if hint_ok:
                    return _HintValues(hint), int(cp_model.FEASIBLE), (h - lb) / max(1.0, h)
            if best is not None:  # out of time on a later level: keep the last proven one
                return best[0], int(cp_model.FEASIBLE), 1.0
            return solver, st, 0.0
        assert best is not None
        return best

    def _hint_is_solution(self, model: cp_model.CpModel, budget: _Budget) -> bool:
        """Whether the model's hint (completed on the variables it leaves out) satisfies the
        model: one solve with the hinted variables fixed."""
        # everything is fixed and nothing presolved: the check loads the model and
        # propagates once, which the solver counts as (next to) no deterministic time, so
        # it needs no overrun margin
        limit = budget.work
        if budget.past_deadline() or (limit is not None and limit < 1e-3):
            return False  # no budget left even for this check: the hint stays unproven
        solver = cp_model.CpSolver()
        prm = solver.parameters
        prm.fix_variables_to_their_hinted_value = True
        prm.num_workers = 1
        prm.random_seed = self.seed
        prm.max_deterministic_time = 0.2 if limit is None else min(0.2, limit)
        prm.cp_model_presolve = False  # everything hinted is fixed: nothing to presolve
        if budget.deadline is not None:
            prm.max_time_in_seconds = budget.remaining()
        model.clear_objective()  # type: ignore[no-untyped-call]
        st = solver.solve(model)
        budget.charge(float(solver.response_proto.deterministic_time))
        return st in (cp_model.OPTIMAL, cp_model.FEASIBLE)

    def _solve_model(
        self,
        problem: PlacementProblem,
        gi: int,
        view: GangView,
        built: tuple[
            cp_model.CpModel,
            _Vars,
            list[_Units],
            set[int],
            list[tuple[cp_model.LinearExprT, int]],
        ],
        free: I64,
        gpu_free: I64,
        budget: _Budget,
    ) -> tuple[int, float, GangPlacement | None]:
        """Solve a single-gang model level by level and extract its placement: the status,
        the gap and the placement (``None`` unless solved; status :data:`_NO_EXTRACT` when
        the solution could not be turned into replicas, which cannot happen)."""
        model, vs, units, dev_nodes, levels = built
        solver, st, gap = self._solve_levels(model, vs, levels, budget)
        if st not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return st, gap, None
        recs = _extract(problem, [view], vs, units, solver, free, gpu_free, dev_nodes)
        if recs is None:
            return _NO_EXTRACT, gap, None
        return st, gap, finish(problem, gi, recs[0])

    def _place_one(
        self, problem: PlacementProblem, gi: int, free: I64, gpu_free: I64, budget: _Budget
    ) -> tuple[GangPlacement, Status, float, bool]:
        greedy = greedy_gang(problem, gi, free.copy(), gpu_free.copy())
        view = gang_view(problem, gi, free, gpu_free)
        gang = view.gang
        if gang.size == 0:
            return greedy, Status.OPTIMAL, 0.0, False
        total = split_target(gang, view.q.sum(axis=1))
        if total is None:
            return _greedy_or_infeasible(problem, view, None)
        if follows_hypernode_order(problem, gang):
            return self._place_one_preferred(
                problem, gi, view, greedy, total, free, gpu_free, budget
            )
        g_span = greedy.objective[0] if greedy.placed else None
        for tier in range(0, view.allowed + 1):
            if g_span is not None and tier > g_span:
                break
            if budget.past_deadline():  # no time left for this tier's bounds and models
                return _out_of_time(gang.name, greedy)
            order = domain_order(problem, view, tier, total, free, gpu_free)
            if order.size == 0:
                continue
            known = self._known_optimum(problem, view, gi, tier, order, free, gpu_free)
            bounds: list[tuple[int, ...]]
            exact_hint: GangPlacement | None
            alt: GangPlacement | None = None  # a hint better than greedy's, unproven
            if known is not None:
                order, bounds, exact_hint, proven = known
                if order.size == 0:
                    continue  # proven: nothing fits in one domain of this tier
                if not proven:
                    alt, exact_hint = exact_hint, None
                    if alt is not None and tier == g_span and greedy.objective <= alt.objective:
                        alt = None
            else:
                # past tier 0 no single node holds the gang: at least two nodes
                bounds = _domain_bounds(
                    problem,
                    view,
                    tier,
                    order,
                    gang.size,
                    min_nodes=2 if tier > 0 else 1,
                    free=free,
                    gpu_free=gpu_free,
                )
                exact_hint = None
            rank = sorted(range(order.size), key=lambda i: (bounds[i], i))
            if alt is not None:
                rank = sorted(rank, key=lambda i: int(order[i]) != alt.domain)
            elif exact_hint is None and tier == g_span and greedy.domain >= 0:
                rank = sorted(rank, key=lambda i: int(order[i]) != greedy.domain)
            best: GangPlacement | None = None
            best_st, best_gap = Status.OPTIMAL, 0.0
            first = True
            while rank:
                if budget.past_deadline():  # no time left to build another model
                    if best is not None:
                        best_st, best_gap = Status.FEASIBLE, 1.0
                        break
                    return _out_of_time(gang.name, greedy)
                lbs: list[int] | None = None
                hint: GangPlacement | None
                if exact_hint is not None and first:
                    # exact bounds: the first chunk holds only the domains that reach the
                    # optimum, whose levels are then known lower bounds
                    top = bounds[rank[0]]
                    tied = [i for i in rank[: self.max_domains] if bounds[i] == top]
                    rank = [i for i in rank if i not in tied]
                    chunk_idx = tied
                    lbs = _level_bounds(top, problem.topology.top_tier)
                    hint = exact_hint
                else:
                    take = _chunk_size(problem, view, tier, order, rank, self.max_domains)
                    chunk_idx, rank = rank[:take], rank[take:]
                    hint = greedy if (tier == g_span and first and exact_hint is None) else None
                    if alt is not None and first:
                        hint = alt
                chunk = order[chunk_idx]
                first = False
                model, vs, units, dev_nodes, levels = _build_single(
                    problem, view, tier, chunk, free, gpu_free, hint, lbs, 2 if tier > 0 else 1
                )
                if lbs is None and tier > 0 and len(levels) == tier + 1:
                    # the chunk's least bound: a lexicographic bound on its placements
                    low = min(bounds[i] for i in chunk_idx)
                    vs.cond_lbs = _level_bounds(low, problem.topology.top_tier)
                built = (model, vs, units, dev_nodes, levels)
                st, gap, gp = self._solve_model(problem, gi, view, built, free, gpu_free, budget)
                if st == _NO_EXTRACT:
                    return greedy, Status.GREEDY, 0.0, True
                if gp is not None:
                    if best is None or gp.objective < best.objective:
                        best = gp
                    if st != cp_model.OPTIMAL:
                        best_st, best_gap = Status.FEASIBLE, max(best_gap, gap)
                    # bound: only domains whose lower bound beats the incumbent remain
                    rank = [i for i in rank if bounds[i] < best.objective]
                    continue
                if st == cp_model.INFEASIBLE:
                    continue
                # UNKNOWN: out of time
                if best is not None:
                    best_st, best_gap = Status.FEASIBLE, 1.0
                    break
                return _out_of_time(gang.name, greedy)
            if best is not None:
                if greedy.placed and greedy.objective < best.objective:
                    best = greedy
                return best, best_st, best_gap, False
        # greedy placed it: cannot happen, greedy's domain is always solved
        return _greedy_or_infeasible(problem, view, greedy)

    def _place_one_preferred(
        self,
        problem: PlacementProblem,
        gi: int,
        view: GangView,
        greedy: GangPlacement,
        total: I64,
        free: I64,
        gpu_free: I64,
        budget: _Budget,
    ) -> tuple[GangPlacement, Status, float, bool]:
        """A topology gang under a hypernode order: Volcano's gradient and domain preference.
        Tiers from the lowest hypernode tier up; inside a tier the candidate domains in
        preference order (:func:`domain_order`), one solve each, and the first feasible one is
        the answer, its objective minimised. Greedy's domain ends the search at its tier;
        before it, at most ``max_domains`` domains per tier are tried (greedy could not pack
        them)."""
        topo = problem.topology
        gang = view.gang
        g_nodes = np.unique([n for _, n, _ in greedy.replicas]) if greedy.placed else None
        for tier in range(1, view.allowed + 1):
            order = domain_order(problem, view, tier, total, free, gpu_free)
            if order.size == 0:
                continue
            g_dom = -1
            if g_nodes is not None and g_nodes.size:
                ids = np.unique(topo.domain_of[tier - 1][g_nodes])
                if ids.size == 1 and ids[0] >= 0 and int(ids[0]) in order.tolist():
                    g_dom = int(ids[0])
            if g_dom >= 0:
                at = order.tolist().index(g_dom)
                cands = [*order[: min(at, self.max_domains)].tolist(), g_dom]
            else:
                cands = order[: self.max_domains].tolist()
            for d in cands:
                if budget.past_deadline():
                    return _out_of_time(gang.name, greedy)
                hint = greedy if d == g_dom else None
                built = _build_single(
                    problem, view, tier, np.array([d], dtype=np.intp), free, gpu_free, hint
                )
                st, gap, gp = self._solve_model(problem, gi, view, built, free, gpu_free, budget)
                if st == _NO_EXTRACT:
                    return greedy, Status.GREEDY, 0.0, True
                if gp is not None:
                    if d == g_dom and greedy.objective < gp.objective:
                        gp = greedy
                    if st == cp_model.OPTIMAL:
                        return gp, Status.OPTIMAL, 0.0, False
                    return gp, Status.FEASIBLE, gap, False
                if st == cp_model.INFEASIBLE:
                    continue
                return _out_of_time(gang.name, greedy)
            if g_dom >= 0:  # greedy's own domain proven infeasible: cannot happen
                return greedy, Status.GREEDY, 0.0, True
        return _greedy_or_infeasible(problem, view, greedy)

    def _known_optimum(
        self,
        problem: PlacementProblem,
        view: GangView,
        gi: int,
        tier: int,
        order: npt.NDArray[np.intp],
        free: I64,
        gpu_free: I64,
    ) -> _Optimum | None:
        """Exact per-domain optima by the tree knapsack (:mod:`._exact`) when the gang is in
        its scope: the domains that can hold the gang, their optima, and an optimal placement
        in the best one (the hint). ``None`` when out of scope, or if the reconstructed
        placement does not reach the computed optimum (then the plain bounds are used)."""
        if not self.exact_bounds:
            return None
        found = _exact.exact_bounds(problem, view, tier, order)
        if found is None:
            return self._role_optimum(problem, view, tier, order, free, gpu_free)
        keep = [i for i, o in enumerate(found.objective) if o is not None]
        bounds = [o for o in found.objective if o is not None]
        order = order[keep]
        if not keep:
            return order, [], GangPlacement(gang=view.gang.name, placed=False), True
        best = min(range(len(keep)), key=lambda i: (bounds[i], i))
        dom = int(order[best])
        per_node = (
            {dom: int(view.gang.size)}
            if tier == 0
            else _exact.exact_nodes(problem, view, tier, dom)
        )
        if per_node is None:
            return None
        recs: list[Replica] = [(0, n, ()) for n, k in sorted(per_node.items()) for _ in range(k)]
        hint = finish(problem, gi, recs)
        if hint.objective != bounds[best]:
            _log.warning("knapsack optimum %s not reached by %s", bounds[best], hint.objective)
            return None
        del free, gpu_free
        return order, bounds, hint, True

    def _role_optimum(
        self,
        problem: PlacementProblem,
        view: GangView,
        tier: int,
        order: npt.NDArray[np.intp],
        free: I64,
        gpu_free: I64,
    ) -> _Optimum | None:
        """For a multi-role gang (see :mod:`._roles`): the candidate domains that can hold
        the dominant role, a lower bound per domain (the dominant role's exact optimum, or the
        plain bound where that is higher), a hint in the best domain and whether the hint
        reaches that domain's bound (then it is optimal at this tier). ``None`` when out of
        scope."""
        dom = dominant(view)
        if dom is None or tier == 0:
            return None
        t_dom, sub = dom
        found = _exact.exact_bounds(problem, sub, tier, order)
        if found is None:
            return None
        keep = [i for i, o in enumerate(found.objective) if o is not None]
        order = order[keep]
        if not keep:  # proven: no domain of this tier holds even the dominant role
            return order, [], None, False
        plain = _domain_bounds(
            problem, view, tier, order, view.gang.size, 2, free=free, gpu_free=gpu_free
        )
        exact = [o for o in found.objective if o is not None]
        bounds = [lex_max(e, b) for e, b in zip(exact, plain, strict=True)]
        best = min(range(len(keep)), key=lambda i: (bounds[i], i))
        hint = role_hint(problem, view, t_dom, sub, tier, int(order[best]), free, gpu_free)
        if hint is None:
            return order, bounds, None, False
        if hint.objective < bounds[best]:
            _log.warning("role bound %s above the placement %s", bounds[best], hint.objective)
            return None
        return order, bounds, hint, hint.objective == bounds[best]
