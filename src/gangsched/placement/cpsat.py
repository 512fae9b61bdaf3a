"""CP-SAT placers: exact single-gang placement and joint multi-gang placement.

This is the only module that imports OR-Tools.

Theory of operation
-------------------
**Single gang.** Tiers are tried from the lowest (one node, tier 0) to the highest the gang may
span, as Volcano's gradients do. (A topology gang of a problem with a hypernode order follows
Volcano's preference instead: from the lowest hypernode tier, the candidate domains one at a
time in hypernode-score order, the first feasible one winning; see ``_place_one_preferred``.)
At a tier, the candidate domains are those whose summed
per-node replica capacity covers the gang (:func:`~gangsched.placement._common.domain_order`,
a necessary condition), tightest first; they are handed to the solver in chunks of
``max_domains`` — a 5,000-node cluster is never given whole. The first chunk with a solution
ends the search, so the lowest tier is always found; the rest of the objective is minimised
inside the chunk (with the default chunk every candidate domain of a small cluster is in it).
The greedy answer is computed first: it is the hint, the time-out fallback, and its domain is
always in the first chunk of its tier, so the solver never answers worse than greedy.

For a one-template gang without slices, :mod:`._exact` computes every candidate domain's exact
optimum first (a tree knapsack in NumPy). The first chunk is then only the domains that reach
the best optimum, each objective level gets that optimum as a lower bound, and the knapsack's
placement is the hint: every level is proven as soon as the hint is accepted, and every other
domain is pruned by its (exact) bound.

The model over a chunk (style: counts, not per-task booleans):

* ``c[t, u]`` replicas of template ``t`` on unit ``u`` — only where the mask and the capacity
  allow (``0 ≤ c ≤ q[t, u]·m[u]``);
* units are nodes, or, for a one-template gang, *classes* of nodes with identical capacity,
  emptiness and domains (a class of ``k`` nodes gets ``m[u] ∈ [0, k]`` nodes used and
  ``c ≤ q·m``: exact because one template's per-node capacity is a single number ``q``;
  classes are expanded to nodes in index order);
* per node and resource ``Σ_t req[t, r]·c[t, n] ≤ free[n, r]`` (left out when implied);
* GPUs: whole-device replicas ``Σ_t g_t·c[t, n] ≤ whole_free[n]``; when a node may host a
  shared-device template together with another GPU template, the node gets a per-device model
  (``x[t, n, d]`` shares of ``t`` on device ``d``, ``Σ_d x = g_t·c``, ``x ≤ c``, ``w[n, d]``
  for a whole device, ``Σ_t milli_t·x + cap·w ≤ free_d``), which is exact — shares of one
  replica land on distinct devices because ``x ≤ c``. A lone shared template is exact through
  ``q`` already;
* all or nothing: ``Σ c = size`` (each template between its minimum and its count);
* one domain of the tier: ``Σ_d y[d] = 1``, ``m[u] ≤ k·y[dom(u)]``; one ``z`` per group of
  each lower tier, ``m[u] ≤ k·z[grp_t(u)]``, where the groups are the objective's
  (:meth:`~gangsched.topology.Topology.nest_group`: a node uncovered at a tier counts with its
  lower-tier domain); slices: ``Σ_{u ∈ e} c = slice·s_e``;
* objective (lexicographic, as one weighted sum whose weights provably separate the levels:
  each weight exceeds the largest possible value of everything below it): fewest domains of
  tier ``s−1``, …, of tier 1, then fewest nodes, then the least node emptiness (binpack).
  Tiers ``≥ s`` need no term: every placement inside one tier-``s`` domain counts one group
  there.

**Joint.** Phase 1 maximises the weight of the gangs placed, phase 2 places them compactly.
Each gang chooses one domain: of its highest allowed tier (hard gangs), else the cluster-wide
top domain (soft gangs and gangs without a constraint may go anywhere; confining them would
restrict the problem). When all replicas of all gangs are interchangeable (one shared
template; masks that leave out only nodes no gang may use; see :class:`_Aggregate`), phase 1
is a model on aggregate domain capacities with one count per (gang kind, domain), exact by
Hall's condition over the laminar family of domains, and skipped when greedy reaches the
knapsack bound on the summed room; phase 2 places the chosen gangs one at a time inside their
domains, innermost first, by the exact single-gang search. Otherwise the relaxation of
:mod:`._relax` (domain rooms per resource, device capacity, node signature and device
granularity) gives a valid upper bound on the weight and a domain per gang; a placement guided
by it (greedy inside each chosen domain) that reaches the bound is OPTIMAL. If it falls short,
one node-level model — ``placed[g]`` with ``Σ c[g] = size_g·placed[g]`` over the union of the
gangs' first ``max_domains`` candidate domains, maximising Σ weight·placed — runs when it has
at most ``max_joint_cells`` count variables; its OPTIMAL counts only when no candidate domain
was left out. The best placement found is returned with its gap to the bound, then polished
(each gang re-placed exactly with the others fixed).

Status: OPTIMAL means optimal for the problem as posed; FEASIBLE gives a placement and the gap
to a valid bound; INFEASIBLE is a proof that nothing fits (with the reason); TIMED_OUT means
the budget ran out before any solution and greedy's answer is returned with ``fallback=True``;
MODEL_INVALID raises :class:`~gangsched.errors.SolverError`. ``PlacementResult.limit`` names
the budget that cut the search. The wall-clock budget is checked before every model is built
and every solve starts (see ``docs/placement.md``, the budget rule).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
from ortools.sat.python import cp_model

from ..errors import SolverError
from ..model import TopologyMode
from . import _exact
from ._common import (
    GangView,
    Replica,
    check_solver_parameters,
    demand_floor,
    domain_order,
    follows_hypernode_order,
    gang_view,
    infeasible_reason,
    pack_node,
    replica_capacity,
    split_target,
)
from ._relax import Relaxation, build_relaxation
from .greedy import finish, greedy_gang
from .problem import GangPlacement, PlacementProblem, PlacementResult, Status, slice_groups

__all__ = ["CpSatPlacer", "JointCpSatPlacer"]

I64 = npt.NDArray[np.int64]
_log = logging.getLogger(__name__)

_STATUS_RANK = {Status.OPTIMAL: 0, Status.GREEDY: 1, Status.FEASIBLE: 1, Status.TIMED_OUT: 2}


@dataclass(slots=True)
class _Budget:
    """What is left of one ``place`` call's limits: deterministic work (``None``: none) and
    the wall-clock deadline (``None``: none)."""

    deadline: float | None
    work: float | None
    limit: str = ""  # the limit that cut the search short: "work", "wall" or ""

    def exhausted(self) -> bool:
        if self.work is not None and self.work <= 0:
            return True
        return self.past_deadline()

    def past_deadline(self) -> bool:
        """Whether the wall-clock deadline has passed (and then records that it cut the
        search)."""
        if self.deadline is not None and time.perf_counter() >= self.deadline:
            self.limit = "wall"
            return True
        return False


@dataclass(slots=True)
class _Cell:
    """One count variable: replicas of template ``t`` of gang ``g`` on unit ``u``."""

    g: int
    t: int
    u: int
    var: cp_model.IntVar
    ub: int


@dataclass(slots=True)
class _Vars:
    """Variable containers of one model."""

    cells: list[_Cell] = field(default_factory=list)
    used: dict[tuple[int, int], cp_model.IntVar] = field(default_factory=dict)  # (g, u)
    placed: dict[int, cp_model.IntVar] = field(default_factory=dict)
    choice: dict[tuple[int, int], cp_model.IntVar] = field(default_factory=dict)  # (g, dom)
    lower: dict[tuple[int, int, int], cp_model.IntVar] = field(default_factory=dict)
    shares: dict[tuple[int, int, int, int], cp_model.IntVar] = field(default_factory=dict)
    whole: dict[tuple[int, int], cp_model.IntVar] = field(default_factory=dict)  # (node, d)
    # per objective level: its terms (variable, coefficient) and a valid lower bound; for the
    # last level (the emptiness), ``emp_sorted`` (each used node's emptiness, ascending) gives
    # a bound once the node count is fixed
    level_terms: list[list[tuple[cp_model.IntVar, int]]] = field(default_factory=list)
    level_lbs: list[int] = field(default_factory=list)
    emp_sorted: I64 | None = None


class _HintValues:
    """A model's solution hint read as a solution (``value`` like a solved ``CpSolver``)."""

    def __init__(self, values: dict[int, int]) -> None:
        self.values = values

    def value(self, var: cp_model.IntVar) -> int:
        return self.values[var.index]


def _hint_values(model: cp_model.CpModel) -> dict[int, int]:
    hint = model.proto.solution_hint
    return dict(zip(hint.vars, hint.values, strict=True))


@dataclass(slots=True)
class _Units:
    """Units of a model: ``rep[u]`` a representative node, ``members[u]`` its nodes."""

    rep: npt.NDArray[np.intp]
    members: list[npt.NDArray[np.intp]]

    @property
    def size(self) -> int:
        return int(self.rep.size)

    def mult(self, u: int) -> int:
        return int(self.members[u].size)


def _collapse(keys: I64, nodes: npt.NDArray[np.intp]) -> _Units:
    """Classes of ``nodes`` with identical rows of ``keys`` ``(n, k)`` (first seen order)."""
    _, first, inv = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    cls = rank[inv.reshape(-1)]
    members = [nodes[cls == k] for k in range(order.size)]
    return _Units(rep=np.array([m[0] for m in members], dtype=np.intp), members=members)


class CpSatPlacer:
    """Exact placer on OR-Tools CP-SAT.

    Parameters
    ----------
    max_deterministic_time:
        Deterministic-time budget of one ``place`` call, all solves together (CP-SAT's
        machine-independent work measure, roughly seconds; default 5.0). With the other
        defaults the answer depends only on the problem: the same problem gives the same
        placement, byte for byte, in any process on any machine running the same OR-Tools.
    seed:
        ``random_seed`` of the solver, ``0 ≤ seed < 2**31``.
    workers:
        ``num_workers`` of the solver, 1 to 256. The default 1 is deterministic. **More than
        one worker is not deterministic**: the parallel workers race, so two runs on the same
        problem may return different (equally valid) placements.
    time_limit_s:
        Optional wall-clock budget of one ``place`` call (all solves together), on top of the
        deterministic budget. **Not deterministic** when it is the limit that stops a solve
        (a loaded machine gets less done in the same seconds); ``None`` (default) sets none.
    max_domains:
        Candidate domains handed to one solve (at least: smaller domains are grouped into one
        solve up to :data:`CHUNK_CELLS` count variables).
    joint:
        Place several gangs in one model (see the module docstring); otherwise gangs are
        placed one after the other by weight.
    aggregate:
        Joint mode: solve phase 1 on aggregate domain capacities when every replica of every
        gang is interchangeable (default); ``False`` always builds the node-level model.
    polish:
        Joint mode: re-place each placed gang exactly with the others fixed.
    max_joint_cells:
        Joint mode: the largest node-level model (count variables) built when the bound of
        the relaxation is not reached by the guided placement; above it the answer is that
        placement, FEASIBLE with its gap to the bound.
    sequential:
        Minimise the objective levels one solve at a time (default), or all at once as one
        weighted sum with separating weights.
    exact_bounds:
        For one-template gangs without slices, compute every candidate domain's optimum with
        the tree knapsack of :mod:`gangsched.placement._exact` first; the solver then gets
        only the domains that reach it, those optima as level bounds and the knapsack's
        placement as its hint (default). ``False`` solves with the plain bounds.
    log:
        Route the solver's search log to the ``logging`` module.
    """

    name = "cpsat"

    def __init__(
        self,
        *,
        time_limit_s: float | None = None,
        seed: int = 0,
        workers: int = 1,
        max_deterministic_time: float | None = 5.0,
        max_domains: int = 4,
        joint: bool = False,
        sequential: bool = True,
        exact_bounds: bool = True,
        aggregate: bool = True,
        polish: bool = True,
        max_joint_cells: int = 4_000,
        log: bool = False,
    ) -> None:
        limits = check_solver_parameters(
            time_limit_s=time_limit_s,
            seed=seed,
            workers=workers,
            max_deterministic_time=max_deterministic_time,
            max_domains=max_domains,
            kind="placer",
            name=self.name,
        )
        self.time_limit_s: float | None = limits[0]
        self.seed: int = seed
        self.workers: int = workers
        self.max_deterministic_time: float | None = limits[1]
        self.max_domains = max_domains
        self.joint = joint
        self.sequential = sequential
        self.exact_bounds = exact_bounds
        self.aggregate = aggregate
        self.polish = polish
        self.max_joint_cells = int(max_joint_cells)
        self.log = log

    # ------------------------------------------------------------------ solving

    def _solve(self, model: cp_model.CpModel, budget: _Budget) -> tuple[cp_model.CpSolver, int]:
        solver = cp_model.CpSolver()
        if budget.past_deadline():  # the wall budget is spent: no solve at all
            return solver, int(cp_model.UNKNOWN)
        if budget.work is not None and budget.work < 1e-6:  # no work left: answer at once
            budget.limit = budget.limit or "work"
            return solver, int(cp_model.UNKNOWN)
        prm = solver.parameters
        if budget.deadline is not None:
            prm.max_time_in_seconds = max(0.001, budget.deadline - time.perf_counter())
        prm.num_workers = self.workers
        prm.random_seed = self.seed
        # placement models are many small solves: presolve probing and symmetry detection
        # cost more of the work budget than they save the search
        prm.cp_model_probing_level = 0
        prm.symmetry_level = 0
        if budget.work is not None:
            prm.max_deterministic_time = budget.work
        prm.log_search_progress = self.log
        if self.log:
            solver.log_callback = _log.info
        status = solver.solve(model)
        if budget.work is not None:
            budget.work -= float(solver.response_proto.deterministic_time)
        if status in (cp_model.FEASIBLE, cp_model.UNKNOWN):
            # which limit stopped the solve: the work budget if it is spent, else the clock
            spent = budget.work is not None and budget.work <= 1e-9
            if not spent and budget.deadline is not None:
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
        for i, (expr, _bound) in enumerate(levels):
            hint = _hint_values(model)
            terms = vs.level_terms[i] if i < len(vs.level_terms) else None
            lb = vs.level_lbs[i] if terms is not None else 0
            if i == len(levels) - 1 and vs.emp_sorted is not None and n_fixed is not None:
                lb = max(lb, int(vs.emp_sorted[:n_fixed].sum()))
            h: int | None = None
            if terms is not None and all(v.index in hint for v, _ in terms):
                h = sum(c * hint[v.index] for v, c in terms)
            if h is not None and h <= lb:
                # the hint reaches this level's lower bound: the level is closed by the
                # bound, no search (once the hint is known to be a solution)
                if hint_ok is None:
                    hint_ok = self._hint_is_solution(model, budget)
                if hint_ok:
                    model.add(expr <= h)
                    if i == len(levels) - 2:
                        n_fixed = h
                    best = (_HintValues(hint), int(cp_model.OPTIMAL), 0.0)
                    continue
            model.minimize(expr)
            solver, st = self._solve(model, budget)
            if st == cp_model.OPTIMAL:
                val = round(solver.objective_value)
                model.add(expr <= val)
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
        if budget.past_deadline() or (budget.work is not None and budget.work < 1e-3):
            return False  # no budget left even for this check: the hint stays unproven
        solver = cp_model.CpSolver()
        prm = solver.parameters
        prm.fix_variables_to_their_hinted_value = True
        prm.num_workers = 1
        prm.random_seed = self.seed
        prm.max_deterministic_time = (
            0.2 if budget.work is None else min(0.2, max(budget.work, 1e-6))
        )
        prm.cp_model_presolve = False  # everything hinted is fixed: nothing to presolve
        if budget.deadline is not None:
            prm.max_time_in_seconds = max(0.001, budget.deadline - time.perf_counter())
        model.clear_objective()  # type: ignore[no-untyped-call]
        st = solver.solve(model)
        if budget.work is not None:
            budget.work -= float(solver.response_proto.deterministic_time)
        return st in (cp_model.OPTIMAL, cp_model.FEASIBLE)

    def place(self, problem: PlacementProblem) -> PlacementResult:
        start = time.perf_counter()
        deadline = None if self.time_limit_s is None else start + self.time_limit_s
        budget = _Budget(deadline=deadline, work=self.max_deterministic_time)
        if self.joint and len(problem.gangs) > 1:
            result = self._place_joint(problem, budget)
        else:
            result = self._place_sequential(problem, budget)
        elapsed = time.perf_counter() - start
        if deadline is not None and elapsed >= self.time_limit_s:  # type: ignore[operator]
            budget.limit = "wall"
        proven = result.status in (Status.OPTIMAL, Status.INFEASIBLE)
        return PlacementResult(
            gangs=result.gangs,
            status=result.status,
            gap=result.gap,
            fallback=result.fallback,
            solve_time=elapsed,
            limit="" if proven and budget.limit != "wall" else budget.limit,
        )

    def _place_sequential(self, problem: PlacementProblem, budget: _Budget) -> PlacementResult:
        free = problem.free.copy()
        gpu_free = problem.gpu_free.copy()
        weights = problem.weights
        assert weights is not None
        order = sorted(range(len(problem.gangs)), key=lambda i: (-int(weights[i]), i))
        out: dict[int, GangPlacement] = {}
        status = Status.OPTIMAL
        gap = 0.0
        fallback = False
        for gi in order:
            gp, st, g_gap, fb = self._place_one(problem, gi, free, gpu_free, budget)
            out[gi] = gp
            if gp.placed:
                _apply(problem, gi, gp.replicas, free, gpu_free)
            gap = max(gap, g_gap)
            fallback |= fb
            if (st is Status.INFEASIBLE and len(problem.gangs) == 1) or _STATUS_RANK.get(
                st, 0
            ) > _STATUS_RANK.get(status, 0):
                status = st
        return PlacementResult(
            gangs=tuple(out[i] for i in range(len(problem.gangs))),
            status=status,
            gap=gap,
            fallback=fallback,
        )

    # ------------------------------------------------------------------ single gang

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
            return (
                GangPlacement(
                    gang=gang.name, placed=False, reason=infeasible_reason(problem, view)
                ),
                Status.INFEASIBLE,
                0.0,
                False,
            )
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
            if known is not None:
                order, bounds, exact_hint = known
                if order.size == 0:
                    continue  # proven: nothing fits in one domain of this tier
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
            if exact_hint is None and tier == g_span and greedy.domain >= 0:
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
                chunk = order[chunk_idx]
                first = False
                model, vs, units, dev_nodes, levels = _build_single(
                    problem, view, tier, chunk, free, gpu_free, hint, lbs, 2 if tier > 0 else 1
                )
                solver, st, gap = self._solve_levels(model, vs, levels, budget)
                if st in (cp_model.OPTIMAL, cp_model.FEASIBLE):
                    recs = _extract(problem, [view], vs, units, solver, free, gpu_free, dev_nodes)
                    if recs is None:
                        return greedy, Status.GREEDY, 0.0, True
                    gp = finish(problem, gi, recs[0])
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
        if greedy.placed:  # cannot happen: greedy's domain is always solved
            return greedy, Status.GREEDY, 0.0, True
        return (
            GangPlacement(gang=gang.name, placed=False, reason=infeasible_reason(problem, view)),
            Status.INFEASIBLE,
            0.0,
            False,
        )

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
                model, vs, units, dev_nodes, levels = _build_single(
                    problem, view, tier, np.array([d], dtype=np.intp), free, gpu_free, hint
                )
                solver, st, gap = self._solve_levels(model, vs, levels, budget)
                if st in (cp_model.OPTIMAL, cp_model.FEASIBLE):
                    recs = _extract(problem, [view], vs, units, solver, free, gpu_free, dev_nodes)
                    if recs is None:
                        return greedy, Status.GREEDY, 0.0, True
                    gp = finish(problem, gi, recs[0])
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
        if greedy.placed:
            return greedy, Status.GREEDY, 0.0, True
        return (
            GangPlacement(gang=gang.name, placed=False, reason=infeasible_reason(problem, view)),
            Status.INFEASIBLE,
            0.0,
            False,
        )

    def _known_optimum(
        self,
        problem: PlacementProblem,
        view: GangView,
        gi: int,
        tier: int,
        order: npt.NDArray[np.intp],
        free: I64,
        gpu_free: I64,
    ) -> tuple[npt.NDArray[np.intp], list[tuple[int, ...]], GangPlacement] | None:
        """Exact per-domain optima by the tree knapsack (:mod:`._exact`) when the gang is in
        its scope: the domains that can hold the gang, their optima, and an optimal placement
        in the best one (the hint). ``None`` when out of scope, or if the reconstructed
        placement does not reach the computed optimum (then the plain bounds are used)."""
        if not self.exact_bounds:
            return None
        found = _exact.exact_bounds(problem, view, tier, order)
        if found is None:
            return None
        keep = [i for i, o in enumerate(found.objective) if o is not None]
        bounds = [o for o in found.objective if o is not None]
        order = order[keep]
        if not keep:
            return order, [], GangPlacement(gang=view.gang.name, placed=False)
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
        return order, bounds, hint

    # ------------------------------------------------------------------ joint

    def _place_joint(self, problem: PlacementProblem, budget: _Budget) -> PlacementResult:
        greedy = _greedy_sequence(problem)
        views = [gang_view(problem, gi) for gi in range(len(problem.gangs))]
        doms = [_joint_domains(problem, views[gi], greedy.gangs[gi]) for gi in range(len(views))]
        agg = _aggregate(problem, views, doms) if self.aggregate else None
        if agg is not None:
            return self._place_aggregate(problem, views, doms, agg, greedy, budget)
        # a valid upper bound on the weight, and a placement guided by the bound's choice
        rel = build_relaxation(problem, views, doms)
        if budget.past_deadline():  # greedy's answer, unproven
            return PlacementResult(gangs=greedy.gangs, status=Status.TIMED_OUT, fallback=True)
        upper, guide = self._solve_relaxation(problem, rel, doms, greedy, budget)
        upper = min(upper, _alone_bound(problem, views))
        incumbent = list(greedy.gangs)
        if guide is not None and not budget.past_deadline():
            guided = _place_guided(problem, views, doms, rel, guide)
            if _weight(problem, guided) > _weight(problem, incumbent):
                incumbent = guided
        if _weight(problem, incumbent) >= upper:  # the bound is reached: proven
            if self.polish:
                self._polish(problem, incumbent, budget)
            return PlacementResult(gangs=tuple(incumbent), status=Status.OPTIMAL)
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
        solver, st = self._solve(model, budget)
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
        self, problem: PlacementProblem, gangs: list[GangPlacement], budget: _Budget
    ) -> None:
        """Second phase of joint placement: with every other gang fixed, re-place each placed
        gang exactly (single-gang model) and keep the better of the two placements."""
        for gi in range(len(gangs)):
            if not gangs[gi].placed or budget.exhausted():
                continue
            free = problem.free.copy()
            gpu_free = problem.gpu_free.copy()
            for other, gp in enumerate(gangs):
                if other != gi and gp.placed:
                    _apply(problem, other, gp.replicas, free, gpu_free)
            better, _, _, _ = self._place_one(problem, gi, free, gpu_free, budget)
            if better.placed and better.objective < gangs[gi].objective:
                gangs[gi] = better


class JointCpSatPlacer(CpSatPlacer):
    """:class:`CpSatPlacer` with ``joint=True``."""

    name = "cpsat-joint"

    def __init__(self, **kwargs: object) -> None:
        kwargs["joint"] = True
        super().__init__(**kwargs)  # type: ignore[arg-type]


# ---------------------------------------------------------------------- helpers


def _weight(
    problem: PlacementProblem, gangs: tuple[GangPlacement, ...] | list[GangPlacement]
) -> int:
    w = problem.weights
    assert w is not None
    return sum(int(w[i]) for i, g in enumerate(gangs) if g.placed)


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
    weights = problem.weights
    assert weights is not None
    for gi in sorted(range(len(views)), key=lambda i: (-int(weights[i]), i)):
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


def _greedy_sequence(problem: PlacementProblem) -> PlacementResult:
    from .greedy import GreedyPlacer

    return GreedyPlacer().place(problem)


def _apply(
    problem: PlacementProblem, gi: int, replicas: tuple[Replica, ...], free: I64, gpu_free: I64
) -> None:
    gang = problem.gangs[gi]
    need, _ = problem.per_device_need(gang)
    for t, node, devs in replicas:
        free[node] -= gang.request[t]
        if devs:
            gpu_free[node, list(devs)] -= need[t, node]


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


def _lex_objective(levels: list[tuple[cp_model.LinearExprT, int]]) -> cp_model.LinearExprT:
    """One weighted sum that orders solutions lexicographically by ``levels``
    (each ``(expression, upper bound)``; the first level is the most important)."""
    terms: list[cp_model.LinearExprT] = []
    weight = 1
    for expr, bound in reversed(levels):
        terms.append(weight * expr)
        weight *= int(bound) + 1
    return cp_model.LinearExpr.sum(terms)


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
        caps = {gid: sum(c.ub for c in cells) for gid, cells in per_group.items()}
        lb = _fewest_to_cover(
            [
                (int(dom_of[units.rep[vs_cells[0].u]]), cap)
                for gid, cap in caps.items()
                for vs_cells in [per_group[gid]]
            ],
            gang.size,
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
    n_bound = int(min(gang.size, sum(units.mult(u) for u in range(units.size))))
    node_caps: list[tuple[int, int]] = []
    for u in range(units.size):
        per_node = sum(int(view.q[t, units.rep[u]]) for t in range(n_t))
        node_caps.extend([(int(dom_of[units.rep[u]]), per_node)] * units.mult(u))
    lb_nodes = _fewest_to_cover(node_caps, gang.size)
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
    vs.emp_sorted = np.sort(
        np.repeat(emp[units.rep], [units.mult(u) for u in range(units.size)])
    ).astype(np.int64)
    if level_lbs is not None:  # exact optima of the chunk's domains (see ``_exact``)
        for i, ((expr, _), lb) in enumerate(zip(levels, level_lbs, strict=True)):
            if lb > 0:
                model.add(expr >= lb)
                vs.level_lbs[i] = max(vs.level_lbs[i], lb)
    if hint is not None and hint.placed:
        _hint_single(model, problem, view, vs, units, hint, dom_of, tier)
    return model, vs, [units], dev_nodes, levels


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


def _rehint(model: cp_model.CpModel, vs: _Vars, solver: cp_model.CpSolver) -> None:
    """Hint every container variable with its value in ``solver``'s solution."""
    model.clear_hints()  # type: ignore[no-untyped-call]
    groups: list[list[cp_model.IntVar]] = [
        [c.var for c in vs.cells],
        list(vs.used.values()),
        list(vs.choice.values()),
        list(vs.lower.values()),
        list(vs.shares.values()),
        list(vs.whole.values()),
    ]
    for group in groups:
        for var in group:
            model.add_hint(var, int(solver.value(var)))


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


def _out_of_time(name: str, greedy: GangPlacement) -> tuple[GangPlacement, Status, float, bool]:
    """A single-gang search that ran out of budget before any solution: greedy's placement
    (a fallback), or no placement when greedy found none."""
    if greedy.placed:
        return greedy, Status.TIMED_OUT, 0.0, True
    reason = f"gang {name!r}: solver timed out and greedy found no placement"
    return GangPlacement(gang=name, placed=False, reason=reason), Status.TIMED_OUT, 0.0, True


def _left_out(name: str, greedy: GangPlacement) -> GangPlacement:
    why = greedy.reason or f"gang {name!r}: left out to place more weight of other gangs"
    return GangPlacement(gang=name, placed=False, reason=why)


@dataclass(slots=True, eq=False)
class _Aggregate:
    """Joint problem on aggregate capacities, for gangs whose replicas are interchangeable.

    When every gang has one template with the same request and device need, and each gang
    may use every node of its domains that has room, a node holds any mix of ``cap[n]``
    replicas whatever gangs they belong to. Gangs assigned to domains of a laminar family
    (domains nest or are disjoint) then fit iff, for every domain ``D`` in use, the sizes of
    the gangs assigned to domains inside ``D`` sum to at most ``cap(D) = Σ_{n ∈ D} cap[n]``
    (Hall's condition; for a laminar family the unions of domains split into their maximal
    members, so the domains themselves are the only sets to check). Gangs are grouped into
    *kinds* (same domain family, size and weight), which are interchangeable, so the model
    has one count per (kind, domain).
    """

    kinds: list[tuple[int, int, int]]  # (family, size, weight)
    members: list[list[int]]  # per kind, its gangs in index order
    cand: list[list[int]]  # per kind, the domains (global ids) that can hold one gang
    cap: dict[int, int]  # per candidate domain, its replica capacity
    n_nodes: dict[int, int]  # per candidate domain, its node count
    inside: dict[int, list[int]]  # per candidate domain, the candidate domains inside it
    node_cap: I64  # (n_nodes,) replicas a node holds
    covered: I64  # (n_nodes,) 1 where some candidate domain covers the node

    def upper_bound(self, problem: PlacementProblem) -> int:
        """Most weight that fits into the summed capacity of all candidate domains (a 0/1
        knapsack over the gangs that fit into some domain; NumPy dynamic programme)."""
        del problem
        room = int((self.node_cap * self.covered).sum())
        best = np.zeros(room + 1, dtype=np.int64)
        for k, (_, size, weight) in enumerate(self.kinds):
            if not self.cand[k] or size > room:
                continue
            for _ in self.members[k]:
                best[size:] = np.maximum(best[size:], best[:-size] + weight)
        return int(best[-1])

    def assign(self, counts: dict[tuple[int, int], int], g_dom: list[int]) -> list[int]:
        """Per gang a chosen domain (-1: not placed) from the counts per (kind, domain):
        gangs keep greedy's domain where the counts allow it, the rest go in index order."""
        out = [-1] * len(g_dom)
        for k, gangs in enumerate(self.members):
            left = {d: counts.get((k, d), 0) for d in self.cand[k]}
            rest: list[int] = []
            for gi in gangs:
                d = g_dom[gi]
                if d >= 0 and left.get(d, 0) > 0:
                    out[gi] = d
                    left[d] -= 1
                else:
                    rest.append(gi)
            slots = [d for d in sorted(left) for _ in range(left[d])]
            for gi, d in zip(rest, slots, strict=False):
                out[gi] = d
        return out


def _aggregate(
    problem: PlacementProblem, views: list[GangView], doms: list[I64]
) -> _Aggregate | None:
    """The aggregate form of a joint problem, or ``None`` when its replicas are not all
    interchangeable (templates, requests or device needs differ, slices, or a gang's mask
    leaves out a node of its domains that has room)."""
    first = views[0].gang
    for view in views:
        g = view.gang
        if (
            g.n_templates != 1
            or g.slice_size
            or not np.array_equal(g.request, first.request)
            or not np.array_equal(g.gpu_count, first.gpu_count)  # type: ignore[arg-type]
            or not np.array_equal(g.gpu_milli, first.gpu_milli)  # type: ignore[arg-type]
        ):
            return None
    total = sum(v.gang.size for v in views)
    everywhere = np.ones((1, problem.n_nodes), dtype=np.bool_)
    node_cap = replica_capacity(
        problem, first, problem.free, problem.gpu_free, everywhere, clip=False
    )[0]
    node_cap = np.minimum(node_cap, total)
    # masks folded into the capacities: a node no gang may use (cordoned, or left out by
    # every gang's selectors) holds nothing; only masks that differ between gangs (or leave
    # out a node some gang's domain needs) rule the aggregate form out
    anyone = np.zeros(problem.n_nodes, dtype=np.bool_)
    for view in views:
        anyone |= view.gang.mask[0]
    node_cap = np.where(anyone, node_cap, 0)
    room = node_cap > 0
    families: dict[bytes, int] = {}
    fam_arrays: list[I64] = []
    kinds: dict[tuple[int, int, int], list[int]] = {}
    weights = problem.weights
    assert weights is not None
    for gi, view in enumerate(views):
        ids = doms[gi]
        if (room & (ids >= 0) & ~view.gang.mask[0]).any():
            return None
        key = ids.tobytes()
        if key not in families:
            families[key] = len(fam_arrays)
            fam_arrays.append(ids)
        if view.gang.size == 0:
            return None
        kinds.setdefault((families[key], view.gang.size, int(weights[gi])), []).append(gi)
    cap: dict[int, int] = {}
    n_nodes: dict[int, int] = {}
    rep: dict[int, int] = {}
    # a domain id names the same nodes in every family it appears in (laminarity), so each
    # family lists all of its domains, shared or not
    fam_doms: list[set[int]] = [set() for _ in fam_arrays]
    covered = np.zeros(problem.n_nodes, dtype=np.int64)
    for f, ids in enumerate(fam_arrays):
        sel = ids >= 0
        covered[sel] = 1
        uniq, first_at, inv = np.unique(ids[sel], return_index=True, return_inverse=True)
        caps = np.bincount(inv.reshape(-1), weights=node_cap[sel], minlength=uniq.size)
        cnts = np.bincount(inv.reshape(-1), minlength=uniq.size)
        nodes = np.flatnonzero(sel)
        for i, d in enumerate(uniq.tolist()):
            cap[d] = int(caps[i])
            n_nodes[d] = int(cnts[i])
            rep[d] = int(nodes[first_at[i]])
            fam_doms[f].add(d)
    kind_list = sorted(kinds)
    cand = [
        [d for d in sorted(cap) if d in fam_doms[f] and cap[d] >= size] for f, size, _ in kind_list
    ]
    cand_fams: dict[int, int] = {}
    for k, (f, _, _) in enumerate(kind_list):
        for d in cand[k]:
            cand_fams[d] = f
    used = sorted(cand_fams)
    inside: dict[int, list[int]] = {}
    for big in used:
        arr = fam_arrays[cand_fams[big]]
        inside[big] = [d for d in used if n_nodes[d] <= n_nodes[big] and int(arr[rep[d]]) == big]
    return _Aggregate(
        kinds=kind_list,
        members=[kinds[k] for k in kind_list],
        cand=cand,
        cap=cap,
        n_nodes=n_nodes,
        inside=inside,
        node_cap=node_cap,
        covered=covered,
    )


def _build_aggregate(
    problem: PlacementProblem, agg: _Aggregate, g_dom: list[int]
) -> tuple[cp_model.CpModel, dict[tuple[int, int], cp_model.IntVar]]:
    """``n[k, d]`` gangs of kind ``k`` in domain ``d``; Σ_d n[k, d] ≤ |kind|; per domain
    ``D``: Σ over domains inside ``D`` of size·n ≤ cap(D); maximise Σ weight·n. Hinted with
    greedy's domains."""
    del problem
    model = cp_model.CpModel()
    n_vars: dict[tuple[int, int], cp_model.IntVar] = {}
    by_dom: dict[int, list[tuple[int, int, cp_model.IntVar]]] = {}
    objective: list[cp_model.LinearExprT] = []
    hint: dict[tuple[int, int], int] = {}
    for k, gangs in enumerate(agg.members):
        for gi in gangs:
            if g_dom[gi] >= 0:
                hint[(k, g_dom[gi])] = hint.get((k, g_dom[gi]), 0) + 1
    for k, (_, size, weight) in enumerate(agg.kinds):
        row = []
        for d in agg.cand[k]:
            ub = min(len(agg.members[k]), agg.cap[d] // size)
            v = model.new_int_var(0, ub, f"n_{k}_{d}")
            n_vars[(k, d)] = v
            by_dom.setdefault(d, []).append((size, ub, v))
            row.append(v)
            model.add_hint(v, hint.get((k, d), 0))
        if row:
            model.add(sum(row) <= len(agg.members[k]))
            objective.append(weight * sum(row))
    for big, inner in sorted(agg.inside.items()):
        terms = [t for d in inner for t in by_dom.get(d, [])]
        if sum(s * ub for s, ub, _ in terms) > agg.cap[big]:
            model.add(sum(s * v for s, _, v in terms) <= agg.cap[big])
    model.maximize(sum(objective))
    return model, n_vars


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


def _extract(
    problem: PlacementProblem,
    views: list[GangView],
    vs: _Vars,
    units_all: list[_Units],
    solver: cp_model.CpSolver,
    free: I64,
    gpu_free: I64,
    dev_nodes: set[int],
) -> list[list[Replica]] | None:
    """Per gang, replica records from a solution: counts per node (classes expanded in node
    order), then devices — from the per-device variables where the node has them, else by the
    deterministic packing of :func:`pack_node`, which is exact on such nodes."""
    n_g = len(views)
    counts = [np.zeros((v.gang.n_templates, problem.n_nodes), dtype=np.int64) for v in views]
    cell_val: dict[tuple[int, int, int], int] = {}
    for cell in vs.cells:
        val = int(solver.value(cell.var))
        if val:
            cell_val[(cell.g, cell.t, cell.u)] = val
    for (g, u), m in vs.used.items():
        n_used = int(solver.value(m))
        if n_used == 0:
            continue
        mem = units_all[g].members[u]
        for t in range(views[g].gang.n_templates):
            left = cell_val.get((g, t, u), 0)
            if not left:
                continue
            q = int(views[g].q[t, mem[0]])
            for i in range(n_used):
                give = min(q, left - (n_used - i - 1))
                counts[g][t, mem[i]] += give
                left -= give
    work_free = free.copy()
    work_gpu = gpu_free.copy()
    recs: list[list[Replica]] = [[] for _ in range(n_g)]
    # per-device nodes first, from the solver's shares
    cap = problem.gpu_capacity
    for node in sorted(dev_nodes):
        whole_devs = [d for (n, d), w in vs.whole.items() if n == node and solver.value(w)]
        for g in range(n_g):
            gang = views[g].gang
            for t in range(gang.n_templates):
                k = int(counts[g][t, node])
                if not k:
                    continue
                gc = int(gang.gpu_count[t])  # type: ignore[index]
                work_free[node] -= gang.request[t] * k
                if gc == 0:
                    recs[g].extend((t, node, ()) for _ in range(k))
                elif views[g].whole[t, node]:
                    for _ in range(k):
                        devs = tuple(sorted(whole_devs[:gc]))
                        whole_devs = whole_devs[gc:]
                        work_gpu[node, list(devs)] -= int(cap[node])
                        recs[g].append((t, node, devs))
                else:
                    flat: list[int] = []
                    for d in range(problem.gpu_free.shape[1]):
                        x = vs.shares.get((g, t, node, d))
                        if x is not None:
                            flat.extend([d] * int(solver.value(x)))
                    per = [sorted(flat[i::k]) for i in range(k)]
                    need = int(views[g].need[t, node])
                    for devs_l in per:
                        work_gpu[node, devs_l] -= need
                        recs[g].append((t, node, tuple(devs_l)))
                counts[g][t, node] = 0
    for g in range(n_g):
        for node in np.flatnonzero(counts[g].sum(axis=0)).tolist():
            rem = counts[g][:, node].copy()
            got, r = pack_node(problem, views[g], node, rem, work_free, work_gpu)
            if not (got == rem).all():
                return None
            recs[g].extend(r)
    return recs
