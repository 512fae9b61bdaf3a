"""The CP-SAT placers' public classes: settings, the budget of a call, gangs one by one."""

from __future__ import annotations

from gangsched.placement._common import check_solver_parameters
from gangsched.placement.cpsat._budget import _Budget, now
from gangsched.placement.cpsat._extract import _apply
from gangsched.placement.cpsat._joint import _Joint
from gangsched.placement.greedy import by_weight
from gangsched.placement.problem import GangPlacement, PlacementProblem, PlacementResult, Status

_STATUS_RANK = {Status.OPTIMAL: 0, Status.GREEDY: 1, Status.FEASIBLE: 1, Status.TIMED_OUT: 2}


class CpSatPlacer(_Joint):
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
        gang is interchangeable (default); ``False`` always takes the general path (the
        relaxation's bound, then the model on replica classes).
    polish:
        Joint mode: re-place each placed gang by greedy with the others fixed, keeping the
        placement of the better objective.
    max_joint_cells:
        Joint mode, gangs with slices: the largest node-level model (count variables) built
        when the bound of the relaxation is not reached by the guided placement; above it
        the answer is that placement, FEASIBLE with its gap to the bound.
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

    def place(self, problem: PlacementProblem) -> PlacementResult:
        start = now()
        deadline = None if self.time_limit_s is None else start + self.time_limit_s
        budget = _Budget(deadline=deadline, work=self.max_deterministic_time)
        if self.joint and len(problem.gangs) > 1:
            result = self._place_joint(problem, budget)
        else:
            result = self._place_sequential(problem, budget)
        elapsed = now() - start
        if deadline is not None and elapsed >= self.time_limit_s:  # type: ignore[operator]
            budget.limit = "wall"
        # a proven answer keeps the limit that cut a step it did not need (the joint
        # placement of each gang once the weight is proven, a bound reached anyway)
        return PlacementResult(
            gangs=result.gangs,
            status=result.status,
            gap=result.gap,
            fallback=result.fallback,
            solve_time=elapsed,
            limit=budget.limit,
            work=budget.spent,
        )

    def _place_sequential(self, problem: PlacementProblem, budget: _Budget) -> PlacementResult:
        free = problem.free.copy()
        gpu_free = problem.gpu_free.copy()
        out: dict[int, GangPlacement] = {}
        status = Status.OPTIMAL
        gap = 0.0
        fallback = False
        for gi in by_weight(problem):
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


class JointCpSatPlacer(CpSatPlacer):
    """:class:`CpSatPlacer` with ``joint=True``."""

    name = "cpsat-joint"

    def __init__(self, **kwargs: object) -> None:
        kwargs["joint"] = True
        super().__init__(**kwargs)  # type: ignore[arg-type]
