"""CP-SAT placer: hand-built cases, brute-force optimality, never worse than greedy, joint mode."""

from __future__ import annotations

from itertools import combinations

import numpy as np
import numpy.typing as npt
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from _placement_cases import GIB, fat_tree_snapshot, gpu_gang, problem_for
from _placement_oracle import best_weight
from gangsched.model import HyperNode, Node, TopologyMode
from gangsched.model.snapshot import Snapshot
from gangsched.model.topology import Topology, build_topology
from gangsched.placement import _exact
from gangsched.placement._common import gang_view
from gangsched.placement.cpsat import CpSatPlacer, JointCpSatPlacer
from gangsched.placement.greedy import GreedyPlacer
from gangsched.placement.problem import (
    GangRequest,
    PlacementProblem,
    PlacementResult,
    Status,
    placement_objective,
)
from gangsched.placement.validate import validate_placement

TOPO = build_topology(fat_tree_snapshot())
N = TOPO.n_nodes


def _cpsat(**kw: object) -> CpSatPlacer:
    params: dict[str, object] = {"time_limit_s": 10.0, "workers": 1, "seed": 0}
    params.update(kw)
    return CpSatPlacer(**params)  # type: ignore[arg-type]


def test_gangs_land_in_one_node_rack_and_spine() -> None:
    for replicas, per, tier, nodes in [(8, 1, 0, 1), (32, 1, 1, 4), (128, 1, 2, 16), (4, 8, 1, 4)]:
        problem = problem_for(TOPO, [gpu_gang("g", replicas, N, gpus_per_replica=per)])
        result = _cpsat().place(problem)
        validate_placement(problem, result)
        gp = result.gangs[0]
        assert result.status is Status.OPTIMAL and result.gap == 0.0 and not result.fallback
        assert gp.tier == tier and gp.objective[-2] == nodes


def test_cpsat_beats_greedy_where_greedy_fills_a_rack_whole() -> None:
    gpu_free = np.full((N, 8), 1000, dtype=np.int64)
    gpu_free[::8, :4] = 0  # first node of every rack half busy
    problem = problem_for(TOPO, [gpu_gang("g", 64, N)], gpu_free=gpu_free)
    greedy = GreedyPlacer().place(problem).gangs[0]
    result = _cpsat().place(problem)
    validate_placement(problem, result)
    gp = result.gangs[0]
    assert gp.tier == 2 and gp.objective[3] == 2  # two racks of one spine
    assert gp.objective[-2] == 8 < greedy.objective[-2]  # eight full nodes
    assert gp.objective < greedy.objective


def test_hard_unsatisfiable_is_proven_infeasible_with_reason() -> None:
    problem = problem_for(TOPO, [gpu_gang("big", 72, N, highest_tier=1)])
    result = _cpsat().place(problem)
    validate_placement(problem, result)
    assert result.status is Status.INFEASIBLE and not result.gangs[0].placed
    assert "tier <= 1" in result.gangs[0].reason
    soft = problem_for(TOPO, [gpu_gang("big", 72, N, mode=TopologyMode.SOFT)])
    gp = _cpsat().place(soft).gangs[0]
    assert gp.placed and gp.tier == 2 and gp.objective[3] == 2


def test_multi_template_gang_with_shared_devices() -> None:
    # a 2-template gang: 4 whole-GPU workers and 4 half-GPU helpers, on a 2-node rack
    nodes = [Node(name=f"n{i}", allocatable={"cpu": 8}) for i in range(4)]
    topo = build_topology(
        Snapshot(
            nodes=nodes,
            hypernodes=[
                HyperNode(name="a", tier=1, members=["n0", "n1"]),
                HyperNode(name="b", tier=1, members=["n2", "n3"]),
            ],
        )
    )
    gang = GangRequest(
        name="mix",
        request=np.array([[2000, GIB], [1000, GIB]], dtype=np.int64),
        counts=np.array([4, 4]),
        mask=np.ones((2, 4), dtype=np.bool_),
        gpu_count=np.array([1, 1]),
        gpu_milli=np.array([1000, 500]),
        mode=TopologyMode.HARD,
        highest_tier=1,
    )
    gpu_free = np.array(
        [[1000, 1000, 1000, 0], [1000, 500, 500, 1000], [1000, 1000, 1000, 1000], [0, 0, 0, 0]]
    )
    problem = problem_for(topo, [gang], gpu_free=gpu_free, gpus=4, cpu=8)
    result = _cpsat().place(problem)
    validate_placement(problem, result)
    gp = result.gangs[0]
    assert gp.placed and gp.tier == 1 and gp.domain == 0
    greedy = GreedyPlacer().place(problem)
    validate_placement(problem, greedy)
    assert not greedy.gangs[0].placed or greedy.gangs[0].objective >= gp.objective


def test_same_input_same_seed_gives_the_same_placement() -> None:
    rng = np.random.default_rng(3)
    gpu_free = np.where(rng.random((N, 8)) < 0.4, 0, 1000).astype(np.int64)
    problem = problem_for(TOPO, [gpu_gang("g", 40, N, highest_tier=2)], gpu_free=gpu_free)
    runs = [_cpsat(max_deterministic_time=5.0).place(problem).gangs[0] for _ in range(3)]
    assert runs[0].replicas == runs[1].replicas == runs[2].replicas
    assert runs[0].placed


def test_time_out_falls_back_to_greedy() -> None:
    problem = problem_for(TOPO, [gpu_gang("g", 64, N)])
    result = _cpsat(max_deterministic_time=0.0).place(problem)
    validate_placement(problem, result)
    if result.status is Status.TIMED_OUT:
        assert result.fallback
        assert result.gangs[0].replicas == GreedyPlacer().place(problem).gangs[0].replicas
    else:  # presolve alone may already prove optimality
        assert result.status is Status.OPTIMAL


# --------------------------------------------------------------------------- brute force


def _bf_capacity(problem: PlacementProblem, gang: GangRequest, node: int) -> int:
    """Replicas of the single template that fit on ``node`` (plain loops, whole GPUs)."""
    if not gang.mask[0, node]:
        return 0
    best = int(gang.counts[0])
    for r, req in enumerate(gang.request[0].tolist()):
        if req:
            best = min(best, int(problem.free[node, r]) // req)
    gc = int(gang.gpu_count[0])  # type: ignore[index]
    if gc:
        whole = sum(1 for v in problem.gpu_free[node].tolist() if v >= 1000)
        best = min(best, whole // gc)
    return best


def _brute_force(problem: PlacementProblem) -> tuple[int, ...] | None:
    gang = problem.gangs[0]
    topo = problem.topology
    caps = [_bf_capacity(problem, gang, n) for n in range(problem.n_nodes)]
    allowed = gang.allowed_tier(topo.top_tier)
    cover = topo.cover(allowed)
    best: tuple[int, ...] | None = None
    usable = [n for n in range(problem.n_nodes) if caps[n] > 0]
    for k in range(1, min(gang.size, len(usable)) + 1):
        for subset in combinations(usable, k):
            if sum(caps[n] for n in subset) < gang.size:
                continue
            if gang.mode is TopologyMode.HARD and (
                len({int(cover[n]) for n in subset}) != 1 or cover[subset[0]] < 0
            ):
                continue
            counts = np.zeros((1, problem.n_nodes), dtype=np.int64)
            left = gang.size
            for i, n in enumerate(subset):
                give = min(caps[n], left - (k - i - 1))
                counts[0, n] = give
                left -= give
            obj = placement_objective(problem, 0, counts)
            if best is None or obj < best:
                best = obj
    return best


def _check_objective_shape(problem: PlacementProblem, objective: tuple[int, ...]) -> None:
    """``(span, d[top], ..., d[1], nodes, waste)``: one group at every tier from the span up,
    never more groups at a higher tier, and the span is the lowest tier with one group."""
    top = problem.topology.top_tier
    span, ds, nodes = objective[0], objective[1 : top + 1], objective[top + 1]
    by_tier = [nodes, *reversed(ds)]  # index = tier, tier 0 = nodes
    assert all(by_tier[t] == 1 for t in range(span, top + 1))
    assert all(by_tier[t] >= by_tier[t + 1] for t in range(top))
    assert span == 0 or by_tier[span - 1] > 1


def _rack_without_spine_problem() -> PlacementProblem:
    """Rack r0 (n0-n3) sits under spine sp0, rack r1 (n4-n7) under no tier-2 domain. Two
    replicas of 1 cpu + 2 whole GPUs fit on n2, n3 (r0) or n4, n6 (r1); r1's nodes are fuller."""
    nodes = [Node(name=f"n{i}", allocatable={"cpu": 8}) for i in range(8)]
    topo = build_topology(
        Snapshot(
            nodes=nodes,
            hypernodes=[
                HyperNode(name="r0", tier=1, members=["n0", "n1", "n2", "n3"]),
                HyperNode(name="r1", tier=1, members=["n4", "n5", "n6", "n7"]),
                HyperNode(name="sp0", tier=2, members=["r0"]),
            ],
        )
    )
    cpu_free = [0, 0, 1, 2, 1, 0, 1, 0]
    gpus_free = [0, 0, 2, 2, 2, 0, 2, 0]
    free = np.array([[c * 1000, 64 * GIB] for c in cpu_free], dtype=np.int64)
    gpu_free = np.array([[1000] * g + [0] * (4 - g) for g in gpus_free], dtype=np.int64)
    gang = GangRequest(
        name="g",
        request=np.array([[1000, GIB]], dtype=np.int64),
        counts=np.array([2]),
        mask=np.array([[False, False, True, True, True, False, True, False]]),
        gpu_count=np.array([2]),
        gpu_milli=np.array([1000]),
        mode=TopologyMode.SOFT,
    )
    return problem_for(topo, [gang], free=free, gpu_free=gpu_free, gpus=4, cpu=8)


def test_rack_under_no_spine_counts_as_one_spine_level_group() -> None:
    problem = _rack_without_spine_problem()
    assert problem.topology.domain_of[1].tolist() == [0] * 4 + [-1] * 4

    def objective(*nodes: int) -> tuple[int, ...]:
        counts = np.zeros((1, problem.n_nodes), dtype=np.int64)
        counts[0, list(nodes)] = 1
        return placement_objective(problem, 0, counts)

    # both pairs are one rack, so one group at tier 2 and above; the fuller r1 pair wins on
    # waste (counting n4 and n6 as two spine-level domains made it (1, 1, 2, 1, 2, 50))
    assert objective(2, 3) == (1, 1, 1, 1, 2, 54)
    assert objective(4, 6) == (1, 1, 1, 1, 2, 50)
    assert objective(3, 6) == (3, 1, 2, 2, 2, 54)  # across racks: sp0 and r1 at tier 2
    assert _brute_force(problem) == (1, 1, 1, 1, 2, 50)
    result = _cpsat().place(problem)
    validate_placement(problem, result)
    gp = result.gangs[0]
    assert result.status is Status.OPTIMAL and gp.objective == (1, 1, 1, 1, 2, 50)
    assert sorted(n for _, n, _ in gp.replicas) == [4, 6] and gp.tier == 1 and gp.domain == 1
    greedy = GreedyPlacer().place(problem)
    validate_placement(problem, greedy)
    assert greedy.gangs[0].objective == (1, 1, 1, 1, 2, 50)


def test_cpsat_counts_racks_across_a_tier_gap() -> None:
    # three racks straight under a tier-3 switch; the gang needs two racks: fewest racks at
    # tier 2 (the racks stand in for the missing tier), then fewest nodes
    nodes = [Node(name=f"n{i}", allocatable={"cpu": 64}) for i in range(12)]
    racks = [
        HyperNode(name=f"r{r}", tier=1, members=[f"n{4 * r + i}" for i in range(4)])
        for r in range(3)
    ]
    top = HyperNode(name="top", tier=3, members=["r0", "r1", "r2"])
    topo = build_topology(Snapshot(nodes=nodes, hypernodes=[*racks, top]))
    gpu_free = np.full((12, 4), 1000, dtype=np.int64)
    gpu_free[np.arange(12) % 4 != 0, 2:] = 0
    problem = problem_for(topo, [gpu_gang("g", 12, 12, highest_tier=3)], gpu_free=gpu_free, gpus=4)
    result = _cpsat().place(problem)
    validate_placement(problem, result)
    gp = result.gangs[0]
    assert result.status is Status.OPTIMAL
    # by rank (tier 3 is rank 2): two racks, four nodes (4 + 2 + 4 + 2)
    assert gp.objective[:5] == (2, 1, 1, 2, 4) and gp.tier == 3
    assert len({n // 4 for _, n, _ in gp.replicas}) == 2
    greedy = GreedyPlacer().place(problem).gangs[0]
    assert greedy.objective >= gp.objective


@st.composite
def small_instances(draw: st.DrawFn, max_nodes: int = 12) -> PlacementProblem:
    n = draw(st.integers(2, max_nodes))
    nodes = [Node(name=f"n{i}", allocatable={"cpu": 8}) for i in range(n)]
    rack_size = draw(st.integers(1, 4))
    racks = [list(range(i, min(i + rack_size, n))) for i in range(0, n, rack_size)]
    covered = draw(st.integers(1, len(racks)))  # trailing racks may be left uncovered
    hns = [
        HyperNode(name=f"r{r}", tier=1, members=[f"n{i}" for i in rack])
        for r, rack in enumerate(racks[:covered])
    ]
    if covered >= 2 and draw(st.booleans()):
        hns.append(HyperNode(name="sp0", tier=2, members=[f"r{r}" for r in range(covered // 2)]))
    topo: Topology = build_topology(Snapshot(nodes=nodes, hypernodes=hns))
    cpu_free = draw(st.lists(st.integers(0, 8), min_size=n, max_size=n))
    gpus = draw(st.lists(st.integers(0, 4), min_size=n, max_size=n))
    free = np.array([[c * 1000, 64 * GIB] for c in cpu_free], dtype=np.int64)
    gpu_free = np.array([[1000] * g + [0] * (4 - g) for g in gpus], dtype=np.int64)
    mode = draw(st.sampled_from([TopologyMode.HARD, TopologyMode.SOFT, None]))
    gang = GangRequest(
        name="g",
        request=np.array([[draw(st.integers(1, 3)) * 1000, GIB]], dtype=np.int64),
        counts=np.array([draw(st.integers(2, 10))]),
        mask=np.array([draw(st.lists(st.integers(0, 4), min_size=n, max_size=n))]) > 0,
        gpu_count=np.array([draw(st.integers(0, 2))]),
        gpu_milli=np.array([1000]),
        mode=mode,
        highest_tier=draw(st.integers(1, 3)) if mode is TopologyMode.HARD else None,
    )
    return problem_for(topo, [gang], free=free, gpu_free=gpu_free, gpus=4, cpu=8)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_instances())
def test_cpsat_matches_brute_force_and_greedy_is_never_better(problem: PlacementProblem) -> None:
    best = _brute_force(problem)
    result = _cpsat().place(problem)
    validate_placement(problem, result)
    greedy = GreedyPlacer().place(problem)
    validate_placement(problem, greedy)
    gp, gg = result.gangs[0], greedy.gangs[0]
    if best is None:
        assert not gp.placed and not gg.placed and result.status is Status.INFEASIBLE
        assert gp.reason
        return
    assert gp.placed and gp.objective == best
    assert result.status is Status.OPTIMAL
    _check_objective_shape(problem, gp.objective)
    if gg.placed:
        assert gg.objective >= gp.objective
        _check_objective_shape(problem, gg.objective)


@st.composite
def mixed_instances(draw: st.DrawFn) -> PlacementProblem:
    base = draw(small_instances(max_nodes=10))
    n = base.n_nodes
    k = draw(st.integers(1, 3))
    gangs = []
    for gi in range(draw(st.integers(1, 3))):
        counts = np.array(draw(st.lists(st.integers(1, 4), min_size=k, max_size=k)))
        gangs.append(
            GangRequest(
                name=f"g{gi}",
                request=np.array(
                    [[draw(st.integers(0, 2)) * 1000, GIB] for _ in range(k)], dtype=np.int64
                ),
                counts=counts,
                size=draw(st.integers(1, int(counts.sum()))),
                mask=np.array(
                    draw(
                        st.lists(
                            st.lists(st.booleans(), min_size=n, max_size=n), min_size=k, max_size=k
                        )
                    )
                ),
                gpu_count=np.array(draw(st.lists(st.integers(0, 2), min_size=k, max_size=k))),
                gpu_milli=np.array(
                    draw(st.lists(st.sampled_from([250, 500, 1000]), min_size=k, max_size=k))
                ),
                mode=draw(st.sampled_from([TopologyMode.HARD, TopologyMode.SOFT])),
                highest_tier=1,
            )
        )
    gpu_free = np.where(base.gpu_free > 0, draw(st.sampled_from([500, 750, 1000])), 0)
    return PlacementProblem(
        free=base.free,
        allocatable=base.allocatable,
        gpu_free=gpu_free,
        gpu_capacity=base.gpu_capacity,
        gpu_sharing=base.gpu_sharing,
        topology=base.topology,
        gangs=tuple(gangs),
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mixed_instances())
def test_random_multi_template_cpsat_never_worse_than_greedy(problem: PlacementProblem) -> None:
    greedy = GreedyPlacer().place(problem)
    validate_placement(problem, greedy)
    result = _cpsat().place(problem)
    validate_placement(problem, result)
    if len(problem.gangs) == 1:
        gg, gp = greedy.gangs[0], result.gangs[0]
        if gg.placed:
            assert gp.placed and gp.objective <= gg.objective
    joint = JointCpSatPlacer(time_limit_s=10.0, workers=1, seed=0).place(problem)
    validate_placement(problem, joint)
    assert joint.placed_weight >= greedy.placed_weight


# --------------------------------------------------------------------------- joint


def _two_rack_case() -> PlacementProblem:
    nodes = [Node(name=f"n{i}", allocatable={"cpu": 64}) for i in range(4)]
    topo = build_topology(
        Snapshot(
            nodes=nodes,
            hypernodes=[
                HyperNode(name="a", tier=1, members=["n0", "n1"]),
                HyperNode(name="b", tier=1, members=["n2", "n3"]),
            ],
        )
    )
    gpu_free: npt.NDArray[np.int64] = np.array(
        [[1000] * 3 + [0] * 5, [1000] * 3 + [0] * 5, [1000] * 4 + [0] * 4, [1000] * 4 + [0] * 4],
        dtype=np.int64,
    )
    x = gpu_gang("x", 6, 4, highest_tier=1)  # no single node; rack a (tighter) or rack b
    only_a = np.array([[True, True, False, False]])
    y = GangRequest(
        name="y",
        request=x.request,
        counts=np.array([5]),
        mask=only_a,
        gpu_count=np.array([1]),
        gpu_milli=np.array([1000]),
        mode=TopologyMode.HARD,
        highest_tier=1,
    )
    return problem_for(topo, [x, y], gpu_free=gpu_free, weights=[2, 1])


def test_joint_places_both_gangs_where_greedy_blocks_one() -> None:
    problem = _two_rack_case()
    greedy = GreedyPlacer().place(problem)
    assert [g.placed for g in greedy.gangs] == [True, False]
    joint = JointCpSatPlacer(time_limit_s=10.0, workers=1, seed=0).place(problem)
    validate_placement(problem, joint)
    assert [g.placed for g in joint.gangs] == [True, True]
    assert joint.status is Status.OPTIMAL
    assert {n for _, n, _ in joint.gangs[0].replicas} <= {2, 3}


def test_joint_with_many_gangs_never_places_less_weight_than_greedy() -> None:
    rng = np.random.default_rng(7)
    gpu_free = np.where(rng.random((N, 8)) < 0.5, 0, 1000).astype(np.int64)
    gangs = [
        gpu_gang(f"g{i}", int(rng.integers(2, 24)), N, highest_tier=int(rng.integers(1, 3)))
        for i in range(12)
    ]
    problem = problem_for(TOPO, gangs, gpu_free=gpu_free, weights=rng.integers(1, 4, 12).tolist())
    greedy = GreedyPlacer().place(problem)
    joint = JointCpSatPlacer(time_limit_s=10.0, workers=1, seed=0).place(problem)
    validate_placement(problem, joint)
    w = problem.weights
    assert w is not None

    def weight(res: PlacementResult) -> int:
        return sum(int(w[i]) for i, g in enumerate(res.gangs) if g.placed)

    assert weight(joint) >= weight(greedy)


# --------------------------------------------------------------------------- knapsack bounds


@st.composite
def layered_instances(draw: st.DrawFn) -> PlacementProblem:
    """Up to 24 nodes in racks, spines and a tier-3 switch that may skip tier 2; trailing
    nodes, racks and spines may be left uncovered. One template, random free GPUs and cores."""
    n = draw(st.integers(4, 24))
    nodes = [Node(name=f"n{i}", allocatable={"cpu": 8}) for i in range(n)]
    rack_size = draw(st.integers(1, 5))
    racks = [list(range(i, min(i + rack_size, n))) for i in range(0, n, rack_size)]
    n_racks = draw(st.integers(1, len(racks)))
    hns = [
        HyperNode(name=f"r{r}", tier=1, members=[f"n{i}" for i in rack])
        for r, rack in enumerate(racks[:n_racks])
    ]
    per_spine = draw(st.integers(1, 3))
    spines = [list(range(r, min(r + per_spine, n_racks))) for r in range(0, n_racks, per_spine)]
    n_spines = draw(st.integers(0, len(spines)))
    hns += [
        HyperNode(name=f"s{s}", tier=2, members=[f"r{r}" for r in sp])
        for s, sp in enumerate(spines[:n_spines])
    ]
    if draw(st.booleans()):  # a tier-3 switch over the spines and the racks under none
        loose = [f"r{r}" for sp in spines[n_spines:] for r in sp]
        top = [f"s{s}" for s in range(n_spines)] + loose[: draw(st.integers(0, len(loose)))]
        if top:
            hns.append(HyperNode(name="top", tier=3, members=top))
    topo = build_topology(Snapshot(nodes=nodes, hypernodes=hns))
    gpus = draw(st.lists(st.integers(0, 4), min_size=n, max_size=n))
    cpu_free = draw(st.lists(st.integers(1, 8), min_size=n, max_size=n))
    free = np.array([[c * 1000, 64 * GIB] for c in cpu_free], dtype=np.int64)
    gpu_free = np.array([[1000] * g + [0] * (4 - g) for g in gpus], dtype=np.int64)
    mode = draw(st.sampled_from([TopologyMode.HARD, TopologyMode.SOFT, None]))
    size = draw(st.integers(1, 20))
    gang = GangRequest(
        name="g",
        request=np.array([[1000, GIB]], dtype=np.int64),
        counts=np.array([size]),
        mask=np.array([draw(st.lists(st.integers(0, 5), min_size=n, max_size=n))]) > 0,
        gpu_count=np.array([draw(st.integers(1, 2))]),
        gpu_milli=np.array([1000]),
        mode=mode,
        highest_tier=draw(st.integers(1, topo.top_tier)) if mode is TopologyMode.HARD else None,
    )
    return problem_for(topo, [gang], free=free, gpu_free=gpu_free, gpus=4, cpu=8)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layered_instances())
def test_knapsack_bounds_give_the_solver_alone_optimum(problem: PlacementProblem) -> None:
    plain = _cpsat(exact_bounds=False).place(problem)
    fast = _cpsat().place(problem)
    validate_placement(problem, plain)
    validate_placement(problem, fast)
    assert fast.status is plain.status
    assert fast.status in (Status.OPTIMAL, Status.INFEASIBLE)
    assert fast.gangs[0].placed == plain.gangs[0].placed
    assert fast.gangs[0].objective == plain.gangs[0].objective


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layered_instances())
def test_knapsack_optimum_per_domain_is_reached_by_its_placement(
    problem: PlacementProblem,
) -> None:
    view = gang_view(problem, 0)
    top = problem.topology.top_tier
    for tier in range(1, view.allowed + 1):
        doms = np.arange(problem.topology.n_domains(tier), dtype=np.intp)
        found = _exact.exact_bounds(problem, view, tier, doms)
        assert found is not None
        for d, obj in enumerate(found.objective):
            placed = _exact.exact_nodes(problem, view, tier, d)
            assert (obj is None) == (placed is None)
            if obj is None or placed is None:
                continue
            counts = np.zeros((1, problem.n_nodes), dtype=np.int64)
            for node, k in placed.items():
                assert 1 <= k <= view.q[0, node]
                assert problem.topology.domain_of[tier - 1][node] == d
                counts[0, node] = k
            assert counts.sum() == problem.gangs[0].size
            got = placement_objective(problem, 0, counts)
            # the tier is the domain's; the objective's span may be lower
            assert got[1:] == obj[1:] or (got[0] < tier and got[top + 1 :] <= obj[top + 1 :])
            assert len(obj) == top + 3


def _busy_spines(seed: int, spines: int = 5) -> PlacementProblem:
    """``spines`` spines of 8 racks of 16 eight-GPU nodes, about 60 % of them partly busy, and
    a 256-GPU gang bound to one spine."""
    topo = build_topology(fat_tree_snapshot(spines=spines, racks=8, nodes=16))
    n = topo.n_nodes
    rng = np.random.default_rng(seed)
    busy = np.where(rng.random(n) < 0.4, 0, rng.integers(1, 9, n))
    gpu_free = (np.arange(8)[None, :] >= busy[:, None]).astype(np.int64) * 1000
    return problem_for(topo, [gpu_gang("big", 256, n, highest_tier=2)], gpu_free=gpu_free)


def test_large_gang_over_several_spines_is_proven_within_a_small_budget() -> None:
    for seed in range(2):
        problem = _busy_spines(seed)
        fast = _cpsat(max_deterministic_time=0.5).place(problem)
        plain = _cpsat(exact_bounds=False, time_limit_s=30.0).place(problem)
        validate_placement(problem, fast)
        assert fast.status is Status.OPTIMAL and fast.gap == 0.0 and not fast.fallback
        assert plain.status is Status.OPTIMAL
        assert fast.gangs[0].objective == plain.gangs[0].objective
        assert fast.gangs[0].tier == 2
        greedy = GreedyPlacer().place(problem).gangs[0]
        assert greedy.objective >= fast.gangs[0].objective


# --------------------------------------------------------------------------- joint, aggregate


@st.composite
def joint_instances(draw: st.DrawFn) -> PlacementProblem:
    """Racks of 1–3 nodes under spines of 1–3 racks (trailing racks maybe under none), 2–5
    gangs of one shared template with mixed topology modes and weights; masks are full (the
    aggregate form applies) unless ``masked`` is drawn."""
    n = draw(st.integers(3, 12))
    nodes = [Node(name=f"n{i}", allocatable={"cpu": 8}) for i in range(n)]
    rack_size = draw(st.integers(1, 3))
    racks = [list(range(i, min(i + rack_size, n))) for i in range(0, n, rack_size)]
    hns = [
        HyperNode(name=f"r{r}", tier=1, members=[f"n{i}" for i in rack])
        for r, rack in enumerate(racks)
    ]
    per_spine = draw(st.integers(1, 3))
    spines = [
        list(range(r, min(r + per_spine, len(racks)))) for r in range(0, len(racks), per_spine)
    ]
    n_spines = draw(st.integers(0, len(spines)))
    hns += [
        HyperNode(name=f"s{s}", tier=2, members=[f"r{r}" for r in sp])
        for s, sp in enumerate(spines[:n_spines])
    ]
    topo = build_topology(Snapshot(nodes=nodes, hypernodes=hns))
    gpus = draw(st.lists(st.integers(0, 4), min_size=n, max_size=n))
    cpu_free = draw(st.lists(st.integers(1, 8), min_size=n, max_size=n))
    free = np.array([[c * 1000, 64 * GIB] for c in cpu_free], dtype=np.int64)
    gpu_free = np.array([[1000] * g + [0] * (4 - g) for g in gpus], dtype=np.int64)
    per = draw(st.integers(1, 2))
    masked = draw(st.booleans()) and draw(st.booleans())
    gangs = []
    for i in range(draw(st.integers(2, 5))):
        mode = draw(st.sampled_from([TopologyMode.HARD, TopologyMode.SOFT, None]))
        size = draw(st.integers(1, 8))
        mask = np.ones((1, n), dtype=np.bool_)
        if masked:
            mask = np.array([draw(st.lists(st.booleans(), min_size=n, max_size=n))])
        gangs.append(
            GangRequest(
                name=f"g{i}",
                request=np.array([[1000, GIB]], dtype=np.int64),
                counts=np.array([size]),
                mask=mask,
                gpu_count=np.array([per]),
                gpu_milli=np.array([1000]),
                mode=mode,
                highest_tier=draw(st.integers(1, topo.top_tier))
                if mode is TopologyMode.HARD
                else None,
            )
        )
    weights = draw(st.lists(st.integers(1, 3), min_size=len(gangs), max_size=len(gangs)))
    return problem_for(topo, gangs, free=free, gpu_free=gpu_free, gpus=4, cpu=8, weights=weights)


def _weight(problem: PlacementProblem, res: PlacementResult) -> int:
    w = problem.weights
    assert w is not None
    return sum(int(w[i]) for i, g in enumerate(res.gangs) if g.placed)


def _soft_gang_beside_a_one_node_rack() -> PlacementProblem:
    # rack r0 = {n0}, n1..n4 in no domain; one-GPU nodes n0 and n4. Greedy puts the soft gang
    # on n0, which the hard rack-bound gang needs; the soft gang may use n4 instead (weight
    # 2). A model confining the soft gang to the rack tier proved weight 1 "optimal".
    nodes = [Node(name=f"n{i}", allocatable={"cpu": 8}) for i in range(5)]
    topo = build_topology(
        Snapshot(nodes=nodes, hypernodes=[HyperNode(name="r0", tier=1, members=["n0"])])
    )
    gpu_free = np.zeros((5, 4), dtype=np.int64)
    gpu_free[[0, 4], 0] = 1000
    soft = gpu_gang("g0", 1, 5, mode=TopologyMode.SOFT)
    hard = gpu_gang("g1", 1, 5, highest_tier=1)
    return problem_for(topo, [soft, hard], gpu_free=gpu_free, gpus=4, cpu=8, weights=[1, 1])


def _soft_gang_in_the_rack_a_hard_gang_needs() -> PlacementProblem:
    # four one-GPU gangs on seven nodes: racks a (3 nodes), b and c (1 node each) under spine
    # s, one node in no domain; the soft gang fits in rack a, where the tier-1 gang of 3 alone
    # fits; the soft one and the free one go to b, c and the loose node (weight 4, not 3)
    nodes = [Node(name=f"n{i}", allocatable={"cpu": 8}) for i in range(7)]
    topo = build_topology(
        Snapshot(
            nodes=nodes,
            hypernodes=[
                HyperNode(name="a", tier=1, members=["n0", "n1", "n2"]),
                HyperNode(name="b", tier=1, members=["n3"]),
                HyperNode(name="c", tier=1, members=["n4"]),
                HyperNode(name="s", tier=2, members=["a", "b", "c"]),
            ],
        )
    )
    gpu_free = np.zeros((7, 4), dtype=np.int64)
    gpu_free[:6, 0] = 1000
    gangs = [
        gpu_gang("g0", 2, 7, mode=TopologyMode.SOFT),
        gpu_gang("g1", 3, 7, highest_tier=1),
        gpu_gang("g2", 1, 7, mode=None),
        gpu_gang("g3", 1, 7, highest_tier=2),
    ]
    return problem_for(topo, gangs, gpu_free=gpu_free, gpus=4, cpu=8, weights=[1, 1, 1, 1])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(joint_instances())
@example(_soft_gang_beside_a_one_node_rack())
@example(_soft_gang_in_the_rack_a_hard_gang_needs())
def test_joint_aggregate_matches_the_node_level_model(problem: PlacementProblem) -> None:
    greedy = GreedyPlacer().place(problem)
    fast = JointCpSatPlacer(time_limit_s=20.0, workers=1, seed=0).place(problem)
    slow = JointCpSatPlacer(
        time_limit_s=20.0, workers=1, seed=0, aggregate=False, max_domains=1000
    ).place(problem)
    validate_placement(problem, fast)
    validate_placement(problem, slow)
    assert _weight(problem, fast) >= _weight(problem, greedy)
    assert fast.status is Status.OPTIMAL and not fast.fallback
    # OPTIMAL is the most weight for the problem as posed (an independent MILP optimum), not
    # for a model that confines some gangs
    assert _weight(problem, fast) == best_weight(problem)
    if slow.status is Status.OPTIMAL:
        assert _weight(problem, fast) == _weight(problem, slow)


def test_joint_aggregate_beats_greedy_and_is_deterministic() -> None:
    # rack a holds 2 replicas, rack b 4 + 7; greedy puts the heavy 5-replica gang on the
    # 7-GPU node and the 1-replica gang next to it, so the 6-replica gang no longer fits
    nodes = [Node(name=f"n{i}", allocatable={"cpu": 64}) for i in range(4)]
    topo = build_topology(
        Snapshot(
            nodes=nodes,
            hypernodes=[
                HyperNode(name="a", tier=1, members=["n0", "n1"]),
                HyperNode(name="b", tier=1, members=["n2", "n3"]),
                HyperNode(name="s", tier=2, members=["a", "b"]),
            ],
        )
    )
    free_gpus = np.array([2, 0, 4, 7])
    gpu_free = (np.arange(8)[None, :] < free_gpus[:, None]).astype(np.int64) * 1000
    gangs = [gpu_gang(f"g{i}", s, 4, highest_tier=1) for i, s in enumerate([5, 1, 6])]
    problem = problem_for(topo, gangs, gpu_free=gpu_free, weights=[3, 3, 1])
    greedy = GreedyPlacer().place(problem)
    placer = JointCpSatPlacer(time_limit_s=10.0, workers=1, seed=0)
    joint = placer.place(problem)
    validate_placement(problem, joint)
    assert joint.status is Status.OPTIMAL and not joint.fallback
    assert _weight(problem, joint) == 7 > _weight(problem, greedy)
    assert {n for _, n, _ in joint.gangs[1].replicas} == {0}
    again = placer.place(problem)
    assert [g.replicas for g in again.gangs] == [g.replicas for g in joint.gangs]


def test_aggregate_upper_bound_is_the_knapsack_over_all_room() -> None:
    from gangsched.placement.cpsat import _aggregate as cpsat

    rng = np.random.default_rng(3)
    gpu_free = np.where(rng.random((N, 8)) < 0.7, 0, 1000).astype(np.int64)
    sizes = [3, 5, 7, 11, 13, 6]
    gangs = [gpu_gang(f"g{i}", s, N, highest_tier=2) for i, s in enumerate(sizes)]
    problem = problem_for(TOPO, gangs, gpu_free=gpu_free, weights=[1, 2, 3, 2, 1, 2])
    views = [gang_view(problem, gi) for gi in range(len(gangs))]
    doms = [view.cover for view in views]
    agg = cpsat._aggregate(problem, views, doms)
    assert agg is not None
    room = int((gpu_free > 0).sum())
    w = problem.weights
    assert w is not None
    best = 0
    for k in range(len(sizes) + 1):
        for pick in combinations(range(len(sizes)), k):
            fits_somewhere = all(any(agg.cap[d] >= sizes[i] for d in agg.cap) for i in pick)
            if sum(sizes[i] for i in pick) <= room and fits_somewhere:
                best = max(best, sum(int(w[i]) for i in pick))
    assert agg.upper_bound(problem) == best
    # a mask that leaves out a node with room: not aggregable
    masked = gpu_gang("m", 2, N, highest_tier=2)
    mask = np.ones((1, N), dtype=np.bool_)
    mask[0, int(np.flatnonzero(gpu_free.sum(axis=1))[0])] = False
    masked_gang = GangRequest(
        name="m",
        request=masked.request,
        counts=masked.counts,
        mask=mask,
        gpu_count=masked.gpu_count,
        gpu_milli=masked.gpu_milli,
        mode=TopologyMode.HARD,
        highest_tier=2,
    )
    p2 = problem_for(TOPO, [*gangs, masked_gang], gpu_free=gpu_free)
    v2 = [gang_view(p2, gi) for gi in range(len(p2.gangs))]
    assert cpsat._aggregate(p2, v2, [v.cover for v in v2]) is None
