"""Multi-role gangs at scale (the dominant role's bound and hint, the covering and emptiness
bounds) and the joint repair search."""

from __future__ import annotations

from itertools import combinations

import numpy as np
from hypothesis import HealthCheck, given, settings
from test_placement_properties import problems

from _placement_cases import GIB, fat_tree_snapshot, gpu_gang, problem_for
from _placement_oracle import best_objective
from gangsched.model import TopologyMode
from gangsched.model.topology import build_topology
from gangsched.placement import (
    CpSatPlacer,
    GangRequest,
    GreedyPlacer,
    PlacementProblem,
    PlacementResult,
    Status,
    _exact,
    validate_placement,
)
from gangsched.placement._common import domain_order, gang_view, split_target
from gangsched.placement.cpsat._bounds import _domain_bounds, node_rows, waste_bound
from gangsched.placement.cpsat._budget import _Budget
from gangsched.placement.cpsat._repair import repair
from gangsched.placement.cpsat._roles import dominant, lex_max, role_hint
from gangsched.placement.problem import GangPlacement


def multirole(name: str, n: int, workers: int, per: int, tier: int = 2) -> GangRequest:
    """Workers of ``per`` whole GPUs, a CPU launcher (minimum 1), two half-GPU evaluators."""
    return GangRequest(
        name=name,
        request=np.array([[4000, 16 * GIB], [2000, 8 * GIB], [1000, 4 * GIB]], dtype=np.int64),
        counts=np.array([workers, 1, 2], dtype=np.int64),
        min_counts=np.array([0, 1, 0], dtype=np.int64),
        mask=np.ones((3, n), dtype=np.bool_),
        gpu_count=np.array([per, 0, 1], dtype=np.int64),
        gpu_milli=np.array([1000, 0, 500], dtype=np.int64),
        mode=TopologyMode.HARD,
        highest_tier=tier,
    )


def _busy_fat_tree(seed: int) -> tuple[PlacementProblem, GangRequest]:
    topo = build_topology(fat_tree_snapshot(spines=4, racks=8, nodes=16))
    n = topo.n_nodes
    rng = np.random.default_rng(seed)
    gpu_free = np.full((n, 8), 1000, dtype=np.int64)
    gpu_free[rng.random((n, 8)) < 0.3] = 0  # devices in use
    gang = multirole("job", n, workers=24, per=4)
    return problem_for(topo, [gang], gpu_free=gpu_free, sharing=False), gang


def test_multirole_gang_on_a_busy_fat_tree_is_proven_within_the_allocate_budget() -> None:
    for seed in range(3):
        problem, _ = _busy_fat_tree(seed)
        placer = CpSatPlacer(workers=1, seed=0, max_deterministic_time=1.0)
        res = placer.place(problem)
        validate_placement(problem, res)
        assert res.status is Status.OPTIMAL and not res.fallback, (seed, res.status)
        greedy = GreedyPlacer().place(problem)
        assert res.gangs[0].objective <= greedy.gangs[0].objective
        again = placer.place(problem)  # deterministic
        assert [g.replicas for g in again.gangs] == [g.replicas for g in res.gangs]


def test_waste_bound_is_below_every_set_of_n_items_reaching_the_needs() -> None:
    rng = np.random.default_rng(7)
    for _ in range(60):
        k = int(rng.integers(2, 8))
        caps = rng.integers(0, 5, size=(2, k)).astype(np.int64)
        emp = rng.integers(0, 101, size=k).astype(np.int64)
        needs = [int(rng.integers(1, 8)), int(rng.integers(1, 8))]
        n = int(rng.integers(1, k + 1))
        feasible = [
            int(emp[list(s)].sum())
            for s in combinations(range(k), n)
            if all(caps[r, list(s)].sum() >= needs[r] for r in range(2))
        ]
        lb = waste_bound(caps, needs, emp, n)
        if feasible:
            assert lb <= min(feasible)
        # one row alone: the dynamic programme is exact
        single = [
            int(emp[list(s)].sum())
            for s in combinations(range(k), n)
            if caps[0, list(s)].sum() >= needs[0]
        ]
        assert waste_bound(caps[:1], needs[:1], emp, n) == (min(single) if single else 2**62)


def test_waste_bound_is_exact_on_like_items_and_stops_only_at_or_above_stop() -> None:
    # many like items (few values, few emptiness levels): the bound takes them in pieces of
    # 1, 2, 4, ... and must still be the exact single-row optimum
    rng = np.random.default_rng(11)
    for _ in range(60):
        k = int(rng.integers(3, 11))
        caps = rng.choice([0, 1, 2], size=(2, k)).astype(np.int64)
        emp = rng.choice([0, 50], size=k).astype(np.int64)
        needs = [int(rng.integers(1, 2 * k)), int(rng.integers(1, 2 * k))]
        n = int(rng.integers(1, k + 1))
        single = [
            int(emp[list(s)].sum())
            for s in combinations(range(k), n)
            if caps[0, list(s)].sum() >= needs[0]
        ]
        assert waste_bound(caps[:1], needs[:1], emp, n) == (min(single) if single else 2**62)
        full = waste_bound(caps, needs, emp, n)
        for stop in (0, 25, 50, 100, 2**62):
            cut = waste_bound(caps, needs, emp, n, stop)
            assert cut <= full
            assert cut == full if full < stop else cut >= stop


def test_waste_bound_scales_large_needs_down_and_stays_below() -> None:
    caps = np.array([[8000, 8000, 8000, 7000]], dtype=np.int64)
    emp = np.array([10, 20, 30, 5], dtype=np.int64)
    # 3 of them must reach 23,001 milli: only the three 8,000 ones do
    assert waste_bound(caps, [23_001], emp, 3) <= 60
    assert waste_bound(caps, [23_000], emp, 3) <= 35


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems((1, 1)))
def test_every_placement_reaches_the_covering_rows(problem: PlacementProblem) -> None:
    greedy = GreedyPlacer().place(problem).gangs[0]
    if not greedy.placed or not greedy.replicas:
        return
    view = gang_view(problem, 0)
    used = np.unique([node for _, node, _ in greedy.replicas]).astype(np.intp)
    caps, needs = node_rows(problem, view, used, problem.free, problem.gpu_free, view.gang.size)
    assert (caps.sum(axis=1) >= np.array(needs)).all()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems((1, 1)))
def test_dominant_role_bound_is_below_the_milp_optimum_and_the_hint_is_valid(
    problem: PlacementProblem,
) -> None:
    view = gang_view(problem, 0)
    dom = dominant(view)
    total = split_target(view.gang, view.q.sum(axis=1))
    if dom is None or total is None:
        return
    t_dom, sub = dom
    best = best_objective(problem, 0)
    free, gpu_free = problem.free, problem.gpu_free
    for tier in range(1, view.allowed + 1):
        order = domain_order(problem, view, tier, total, free, gpu_free)
        found = _exact.exact_bounds(problem, sub, tier, order)
        if found is None or order.size == 0:
            continue
        plain = _domain_bounds(problem, view, tier, order, view.gang.size, 2, free, gpu_free)
        for i, d in enumerate(order.tolist()):
            exact = found.objective[i]
            if exact is None:
                continue
            bound = lex_max(exact, plain[i])
            hint = role_hint(problem, view, t_dom, sub, tier, d, free, gpu_free)
            if hint is not None:
                validate_placement(problem, PlacementResult(gangs=(hint,), status=Status.FEASIBLE))
                # the bound counts placements spanning the tier (the search reaches a tier
                # only when nothing spans a lower one)
                assert hint.objective[0] < tier or hint.objective >= bound
        if best is not None and best[0] == tier:
            # per domain a lexicographic bound of its placements: the least over the domains
            # of the tier the optimum spans is below the optimum
            bounds = [
                lex_max(e, b) for e, b in zip(found.objective, plain, strict=True) if e is not None
            ]
            assert bounds and min(bounds) <= best


def _two_racks() -> PlacementProblem:
    from gangsched.model import HyperNode, Node
    from gangsched.model.snapshot import Snapshot

    nodes = [Node(name=f"n{i}", allocatable={"cpu": 64}) for i in range(2)]
    topo = build_topology(
        Snapshot(
            nodes=nodes,
            hypernodes=[
                HyperNode(name="a", tier=1, members=["n0"]),
                HyperNode(name="b", tier=1, members=["n1"]),
            ],
        )
    )
    gpu_free = np.zeros((2, 8), dtype=np.int64)
    gpu_free[:, 0] = 1000  # one GPU a node
    heavy = gpu_gang("heavy", 1, 2, mode=None)
    mask = np.array([[True, False]])
    heavy = GangRequest(
        name="heavy",
        request=heavy.request,
        counts=heavy.counts,
        mask=mask,  # only n0
        gpu_count=heavy.gpu_count,
        gpu_milli=heavy.gpu_milli,
    )
    light = gpu_gang("light", 1, 2, mode=None)
    return problem_for(topo, [heavy, light], gpu_free=gpu_free, weights=[2, 1])


def test_repair_moves_a_lighter_gang_to_make_room_for_a_heavier_one() -> None:
    problem = _two_racks()
    views = [gang_view(problem, gi) for gi in range(2)]
    incumbent = [
        GangPlacement(gang="heavy", placed=False, reason="left out"),
        GangPlacement(gang="light", placed=True, replicas=((0, 0, (0,)),)),
    ]
    out = repair(problem, views, [True, True], incumbent, 3, _Budget(None, None))
    assert out[0].placed and out[1].placed
    assert {n for _, n, _ in out[0].replicas} == {0}
    assert {n for _, n, _ in out[1].replicas} == {1}
    validate_placement(problem, PlacementResult(gangs=tuple(out), status=Status.FEASIBLE))


def test_repair_places_a_left_out_gang_that_fits_and_stops_at_the_bound() -> None:
    problem = _two_racks()
    views = [gang_view(problem, gi) for gi in range(2)]
    incumbent = [
        GangPlacement(gang="heavy", placed=True, replicas=((0, 0, (0,)),)),
        GangPlacement(gang="light", placed=False, reason="left out"),
    ]
    out = repair(problem, views, [True, True], incumbent, 3, _Budget(None, None))
    assert out[1].placed and {n for _, n, _ in out[1].replicas} == {1}
    # already at the bound: nothing is tried
    same = repair(problem, views, [True, True], incumbent, 2, _Budget(None, None))
    assert same == incumbent
