"""One deterministic budget per CP-SAT ``place`` call: every solve of the call (bounding
programme, class or aggregate model, each objective level, hint checks) draws on it, so the
deterministic time the solver reports over the call never exceeds it; the answer under a budget
is the same on every run; a search the budget cut is not reported OPTIMAL unless a valid bound
proves it anyway."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ortools.sat.python import cp_model
from test_placement_claims import _mixed_joint_problem
from test_placement_properties import problems

from gangsched.placement import (
    CpSatPlacer,
    JointCpSatPlacer,
    PlacementProblem,
    PlacementResult,
    Status,
    validate_placement,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from benchmarks._placement_irregular import (
    joint_mixed_problem,
    multirole_problem,
)


@contextmanager
def solver_work() -> Iterator[list[float]]:
    """The deterministic time of every solve started inside the block, as the solver reports
    it (counted here, independently of the placer's own bookkeeping)."""
    seen: list[float] = []
    original = cp_model.CpSolver.solve

    def counting(self: cp_model.CpSolver, *args: object, **kwargs: object) -> object:
        status = original(self, *args, **kwargs)  # type: ignore[arg-type]
        seen.append(float(self.response_proto.deterministic_time))
        return status

    cp_model.CpSolver.solve = counting  # type: ignore[method-assign, assignment]
    try:
        yield seen
    finally:
        cp_model.CpSolver.solve = original  # type: ignore[method-assign]


def _place(placer: CpSatPlacer, problem: PlacementProblem) -> tuple[PlacementResult, float]:
    with solver_work() as seen:
        res = placer.place(problem)
    validate_placement(problem, res)
    return res, sum(seen)


def _same(a: PlacementResult, b: PlacementResult) -> bool:
    return (a.status, a.gap, a.limit, a.work, a.fallback) == (
        b.status,
        b.gap,
        b.limit,
        b.work,
        b.fallback,
    ) and [(g.placed, g.replicas, g.objective) for g in a.gangs] == [
        (g.placed, g.replicas, g.objective) for g in b.gangs
    ]


# (name, problem, joint): each proven OPTIMAL with solver work at the full budget
CASES: list[tuple[str, Callable[[], PlacementProblem], bool]] = [
    ("multi-role gang, 300 nodes", lambda: multirole_problem(300, 64, 0), False),
    ("12 competing gangs, 64 nodes", _mixed_joint_problem, True),
    ("50 mixed gangs, 160 nodes", lambda: joint_mixed_problem(160, 0), True),
]


@pytest.mark.parametrize("name, make, joint", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("share", [0.02, 0.3, 0.7])
def test_a_call_never_reports_more_work_than_its_budget(
    name: str, make: Callable[[], PlacementProblem], joint: bool, share: float
) -> None:
    problem = make()
    cls = JointCpSatPlacer if joint else CpSatPlacer
    full, full_work = _place(cls(max_deterministic_time=1.0), problem)
    assert full.status is Status.OPTIMAL and full_work > 0
    assert full.work == pytest.approx(full_work, abs=1e-8)
    budget = share * full_work
    res, work = _place(cls(max_deterministic_time=budget), problem)
    assert res.work == pytest.approx(work, abs=1e-8)
    assert work <= budget * (1 + 1e-9) + 1e-8, (work, budget)
    assert res.limit == "work"  # below what the proof took: something was cut
    again, _ = _place(cls(max_deterministic_time=budget), problem)
    assert _same(res, again)


@pytest.mark.parametrize("share", [0.02, 0.5, 0.9])
def test_a_cut_single_gang_search_is_not_reported_optimal(share: float) -> None:
    problem = multirole_problem(300, 64, 0)
    full, full_work = _place(CpSatPlacer(max_deterministic_time=1.0), problem)
    assert full.status is Status.OPTIMAL
    res, _ = _place(CpSatPlacer(max_deterministic_time=share * full_work), problem)
    assert res.status in (Status.FEASIBLE, Status.TIMED_OUT), res.status
    assert res.limit == "work"
    assert res.gangs[0].placed  # an unproven placement (or greedy's), never nothing
    assert res.gangs[0].objective >= full.gangs[0].objective


@pytest.mark.parametrize("share", [0.05, 0.25, 0.5, 0.9])
def test_a_cut_joint_search_claims_optimal_only_when_it_is(share: float) -> None:
    problem = joint_mixed_problem(160, 1)
    w = problem.weights
    assert w is not None
    full, full_work = _place(JointCpSatPlacer(max_deterministic_time=1.0), problem)
    best = sum(int(w[i]) for i, g in enumerate(full.gangs) if g.placed)
    assert full.status is Status.OPTIMAL
    res, work = _place(JointCpSatPlacer(max_deterministic_time=share * full_work), problem)
    assert work <= share * full_work * (1 + 1e-9) + 1e-8
    got = sum(int(w[i]) for i, g in enumerate(res.gangs) if g.placed)
    if res.status is Status.OPTIMAL:
        assert got == best  # proven by a valid bound although a solve was cut
    else:
        assert res.status is Status.FEASIBLE and res.limit == "work"
        assert got <= best and (got == best or res.gap > 0)


@settings(max_examples=20)
@given(
    problem=problems((1, 4)),
    budget=st.sampled_from([1e-5, 1e-4, 1e-3, 0.01]),
    joint=st.booleans(),
)
def test_work_stays_inside_any_budget_on_random_problems(
    problem: PlacementProblem, budget: float, joint: bool
) -> None:
    cls = JointCpSatPlacer if joint else CpSatPlacer
    res, work = _place(cls(max_deterministic_time=budget), problem)
    assert work <= budget * (1 + 1e-9) + 1e-8
    assert res.work == pytest.approx(work, abs=1e-8)
    again, _ = _place(cls(max_deterministic_time=budget), problem)
    assert _same(res, again)
    if res.limit == "work" and len(problem.gangs) == 1 and not joint:
        assert res.status is not Status.OPTIMAL


@settings(max_examples=40)
@given(
    groups=st.lists(st.integers(0, 6), max_size=40),
    data=st.data(),
    floats=st.booleans(),
)
def test_group_sum_equals_add_at(groups: list[int], data: st.DataObject, floats: bool) -> None:
    from gangsched.placement._common import group_sum

    n, k = len(groups), data.draw(st.integers(1, 3))
    big = st.integers(0, 2**40)
    rows = data.draw(st.lists(st.lists(big, min_size=k, max_size=k), min_size=n, max_size=n))
    vals = np.array(rows, dtype=np.float64 if floats else np.int64).reshape(n, k)
    g = np.array(groups, dtype=np.int64)
    for v in (vals, vals[:, 0]):
        want = np.zeros((7, *v.shape[1:]), dtype=v.dtype)
        np.add.at(want, g, v)
        got = group_sum(g, v, 7)
        assert got.dtype == want.dtype and np.array_equal(got, want)
