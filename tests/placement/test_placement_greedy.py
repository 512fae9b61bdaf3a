"""Greedy placer on hand-built topologies, and the validator's must-fail cases."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from _placement_cases import fat_tree_snapshot, gpu_gang, problem_for
from gangsched.errors import PlacementError
from gangsched.model import HyperNode, Node, TopologyMode
from gangsched.model.snapshot import Snapshot
from gangsched.model.topology import Topology, build_topology
from gangsched.placement.greedy import GreedyPlacer
from gangsched.placement.problem import (
    GangPlacement,
    GangRequest,
    PlacementProblem,
    PlacementResult,
    Status,
)
from gangsched.placement.validate import validate_placement

TOPO = build_topology(fat_tree_snapshot())  # 2 spines × 4 racks × 8 nodes × 8 GPUs
N = TOPO.n_nodes


def _place(gang: GangRequest, **kw: object) -> GangPlacement:
    problem = problem_for(TOPO, [gang], **kw)  # type: ignore[arg-type]
    result = GreedyPlacer().place(problem)
    validate_placement(problem, result)
    assert result.status is Status.GREEDY
    return result.gangs[0]


@pytest.mark.parametrize(
    ("replicas", "per_replica", "tier", "nodes"),
    [
        (8, 1, 0, 1),  # 8 GPUs: one node
        (32, 1, 1, 4),  # 32 GPUs: one rack, four full nodes
        (64, 1, 1, 8),  # 64 GPUs: a whole rack
        (128, 1, 2, 16),  # 128 GPUs: one spine
        (1, 8, 0, 1),  # one 8-GPU task
        (4, 8, 1, 4),  # four 8-GPU tasks in one rack
        (16, 8, 2, 16),  # sixteen 8-GPU tasks: a spine
    ],
)
def test_gangs_land_in_the_smallest_domain(
    replicas: int, per_replica: int, tier: int, nodes: int
) -> None:
    gp = _place(gpu_gang("g", replicas, N, gpus_per_replica=per_replica))
    assert gp.placed and gp.tier == tier
    assert gp.objective[0] == tier and gp.objective[-2] == nodes
    used = {node for _, node, _ in gp.replicas}
    assert len(used) == nodes


def test_partly_used_rack_is_preferred_by_binpack() -> None:
    gpu_free = np.full((N, 8), 1000, dtype=np.int64)
    gpu_free[8:12] = 0  # rack s0r1 has 4 busy nodes: it is the fullest rack that still fits
    gp = _place(gpu_gang("g", 32, N), gpu_free=gpu_free)
    assert gp.tier == 1 and gp.domain == 1
    assert sorted({n for _, n, _ in gp.replicas}) == [12, 13, 14, 15]


def test_64_gpus_spill_to_a_spine_when_every_rack_is_partly_used() -> None:
    gpu_free = np.full((N, 8), 1000, dtype=np.int64)
    gpu_free[::8, :4] = 0  # first node of every rack has half its GPUs busy
    gp = _place(gpu_gang("g", 64, N), gpu_free=gpu_free)
    assert gp.placed and gp.tier == 2
    # the fewest racks (2); greedy fills the first rack whole, so it uses 9 nodes where 8
    # full ones would do (the CP-SAT test checks the 8)
    assert gp.objective[2:4] == (1, 2) and gp.objective[-2] == 9


def test_hard_constraint_unsatisfiable_gives_a_reason() -> None:
    gp = _place(gpu_gang("big", 72, N, highest_tier=1))  # 72 GPUs > one rack of 64
    assert not gp.placed and gp.replicas == ()
    assert "big" in gp.reason and "tier <= 1" in gp.reason and "at most 64" in gp.reason


def test_soft_constraint_widens_to_the_cluster() -> None:
    gp = _place(gpu_gang("big", 300, N, mode=TopologyMode.SOFT))  # > a spine of 256
    assert gp.placed and gp.tier == 3
    assert gp.objective[1:4] == (1, 2, 5)  # one cluster, two spines, five racks


def test_kueue_aliases_and_slices() -> None:
    hard = gpu_gang("r", 72, N, mode=None, required_tier=1)
    assert hard.mode is TopologyMode.HARD and not _place(hard).placed
    soft = gpu_gang("p", 72, N, mode=None, preferred_tier=1)
    assert soft.mode is TopologyMode.SOFT and _place(soft).tier == 2
    # slices of 12 GPUs per rack: 24 GPUs must be 12 + 12 or 24 in one rack
    gpu_free = np.full((N, 8), 1000, dtype=np.int64)
    gpu_free[:, :] = 0
    gpu_free[0:2, :] = 1000  # rack 0: 16 free GPUs
    gpu_free[8:10, :] = 1000  # rack 1: 16 free GPUs
    sliced = gpu_gang("s", 24, N, slice_size=12, slice_tier=1)
    gp = _place(sliced, gpu_free=gpu_free)
    assert gp.placed
    per_rack = np.bincount(TOPO.domain_of[0][[n for _, n, _ in gp.replicas]], minlength=8)
    assert sorted(per_rack.tolist())[-2:] == [12, 12]


def test_fractional_gpus_share_devices_across_replicas() -> None:
    gpu_free = np.zeros((N, 8), dtype=np.int64)
    gpu_free[5, :2] = 1000  # node 5: two free devices → four half-GPU replicas
    gp = _place(gpu_gang("f", 4, N, milli=500), gpu_free=gpu_free)
    assert gp.placed and {n for _, n, _ in gp.replicas} == {5}
    assert sorted(d for _, _, (d,) in gp.replicas) == [0, 0, 1, 1]
    two = gpu_gang("f2", 2, N, milli=500, gpus_per_replica=2)
    gp = _place(two, gpu_free=gpu_free)
    assert gp.placed and all(devs == (0, 1) for _, _, devs in gp.replicas)
    gp = _place(gpu_gang("f3", 5, N, milli=500), gpu_free=gpu_free)
    assert not gp.placed


def test_several_gangs_go_by_weight_then_order() -> None:
    gangs = [gpu_gang(f"g{i}", 64, N, highest_tier=1) for i in range(10)]
    problem = problem_for(TOPO, gangs, weights=[1] * 8 + [5, 5])
    result = GreedyPlacer().place(problem)
    validate_placement(problem, result)
    placed = [g.placed for g in result.gangs]
    assert placed == [True] * 6 + [False, False, True, True]


# --------------------------------------------------------------------------- validator


def _valid() -> tuple[PlacementProblem, PlacementResult]:
    problem = problem_for(TOPO, [gpu_gang("g", 16, N, highest_tier=1)])
    return problem, GreedyPlacer().place(problem)


def test_validator_rejects_each_broken_family() -> None:
    problem, result = _valid()
    validate_placement(problem, result)
    gp = result.gangs[0]
    reps = list(gp.replicas)

    def check(replicas: list[tuple[int, int, tuple[int, ...]]], match: str) -> None:
        bad = PlacementResult(gangs=(replace(gp, replicas=tuple(replicas)),), status=result.status)
        with pytest.raises(PlacementError, match=match):
            validate_placement(problem, bad)

    check(reps[:-1], "gang 'g'.*15 replicas placed")
    check([*reps[:-1], (0, 63, (0,))], "gang 'g'.*topology")
    check([*reps[:-1], (0, reps[0][1], reps[0][2])], "device")
    check([*reps[:-1], (0, reps[-1][1], (0, 1))], "need 1 distinct")
    check([*reps[:-1], (0, reps[-1][1], (9,))], "has no device")
    masked = replace(problem.gangs[0], mask=np.zeros((1, N), dtype=np.bool_))
    with pytest.raises(PlacementError, match="mask forbids"):
        validate_placement(replace(problem, gangs=(masked,)), result)
    free = problem.free.copy()
    free[reps[0][1], 0] = 500
    with pytest.raises(PlacementError, match="over-committed"):
        validate_placement(replace(problem, free=free), result)


def test_bad_problem_inputs_raise_placement_errors() -> None:
    with pytest.raises(PlacementError, match="gang 'x': counts"):
        GangRequest(
            name="x", request=np.array([[1]]), counts=np.array([1, 2]), mask=np.array([[True]])
        )
    with pytest.raises(PlacementError, match="gang 'x': size"):
        GangRequest(
            name="x", request=np.array([[1]]), counts=np.array([1]), mask=np.array([[True]]), size=3
        )
    with pytest.raises(PlacementError, match="slice_size"):
        GangRequest(
            name="x",
            request=np.array([[1]]),
            counts=np.array([3]),
            mask=np.array([[True]]),
            slice_size=2,
        )
    with pytest.raises(PlacementError, match="gang 'x': mask"):
        problem_for(
            TOPO,
            [
                GangRequest(
                    name="x",
                    request=np.array([[1, 1]]),
                    counts=np.array([1]),
                    mask=np.array([[True]]),
                )
            ],
        )


# --------------------------------------------------------------------------- tier gaps


def gap_tier_problem() -> tuple[Topology, PlacementProblem]:
    """Three 4-node racks (tier 1) directly under one tier-3 switch (no tier 2): the first node
    of every rack has 4 free GPUs, the others 2; a 12-replica gang needs two racks."""
    nodes = [Node(name=f"n{i}", allocatable={"cpu": 64}) for i in range(12)]
    racks = [
        HyperNode(name=f"r{r}", tier=1, members=[f"n{4 * r + i}" for i in range(4)])
        for r in range(3)
    ]
    top = HyperNode(name="top", tier=3, members=["r0", "r1", "r2"])
    topo = build_topology(Snapshot(nodes=nodes, hypernodes=[*racks, top]))
    gpu_free = np.full((12, 4), 1000, dtype=np.int64)
    gpu_free[np.arange(12) % 4 != 0, 2:] = 0
    gang = gpu_gang("g", 12, 12, highest_tier=3)
    return topo, problem_for(topo, [gang], gpu_free=gpu_free, gpus=4)


def test_nest_group_falls_back_to_the_lower_tier_domain() -> None:
    topo, _ = gap_tier_problem()
    # no tier-2 domain: singletons, and "within tier 2" is within a rack (rank 1)
    assert topo.group_of(topo.own_rank(2)).tolist() == list(range(12))
    assert topo.rank_of(2) == 1 and topo.rank_of(3) == 2
    # within tier 2 every node counts with its rack (global ids 0..2); at tier 3 (rank 2) all
    # share the switch
    assert topo.nest_group(topo.rank_of(2)).tolist() == [0] * 4 + [1] * 4 + [2] * 4
    assert topo.nest_group(2).tolist() == [topo.global_id(2, 0)] * 12
    assert topo.nest_group(0).tolist() == list(range(12))
    # a node outside every domain of tier <= t is a group of its own, after all domain ids
    lone = build_topology(
        Snapshot(
            nodes=[Node(name=f"m{i}", allocatable={"cpu": 1}) for i in range(3)],
            hypernodes=[HyperNode(name="r", tier=1, members=["m0", "m1"])],
        )
    )
    assert lone.nest_group(1).tolist() == [0, 0, lone.n_total + 2]


def test_greedy_fills_whole_racks_across_a_tier_gap() -> None:
    _, problem = gap_tier_problem()
    result = GreedyPlacer().place(problem)
    validate_placement(problem, result)
    gp = result.gangs[0]
    racks = {n // 4 for _, n, _ in gp.replicas}
    # filling node by node (largest first) would take n0, n4, n8: three racks
    assert gp.placed and gp.tier == 3 and len(racks) == 2
    # by rank (tier 3 is rank 2): span, d[top], d[tier 3], d[tier 1] = racks, nodes
    assert gp.objective[:5] == (2, 1, 1, 2, 5)
