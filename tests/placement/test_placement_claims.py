"""Placer claims that hold: OPTIMAL only for the problem as posed, one rule for slices, results
that do not depend on the run, budgets that hold."""

from __future__ import annotations

import numpy as np
import pytest

from _placement_cases import fat_tree_snapshot, gpu_gang, problem_for
from gangsched.model import HyperNode, Node, TopologyMode
from gangsched.model.snapshot import Snapshot
from gangsched.model.topology import build_topology
from gangsched.placement import (
    CpSatPlacer,
    GreedyPlacer,
    JointCpSatPlacer,
    PlacementProblem,
    Status,
    validate_placement,
)
from gangsched.placement.problem import PlacementResult, slice_groups


def _weight(problem: PlacementProblem, res: PlacementResult) -> int:
    w = problem.weights
    assert w is not None
    return sum(int(w[i]) for i, g in enumerate(res.gangs) if g.placed)


def _racks_3_1_1() -> PlacementProblem:
    # rack a holds three one-GPU nodes, racks b and c one each; no spine
    nodes = [Node(name=f"n{i}", allocatable={"cpu": 64}) for i in range(5)]
    topo = build_topology(
        Snapshot(
            nodes=nodes,
            hypernodes=[
                HyperNode(name="a", tier=1, members=["n0", "n1", "n2"]),
                HyperNode(name="b", tier=1, members=["n3"]),
                HyperNode(name="c", tier=1, members=["n4"]),
            ],
        )
    )
    gpu_free = np.zeros((5, 8), dtype=np.int64)
    gpu_free[:, 0] = 1000
    soft = gpu_gang("s", 2, 5, mode=TopologyMode.SOFT)
    hard = gpu_gang("h", 3, 5, highest_tier=1)
    return problem_for(topo, [soft, hard], gpu_free=gpu_free, weights=[2, 2])


@pytest.mark.parametrize("aggregate", [True, False])
def test_joint_soft_gang_is_not_confined_to_the_rack_greedy_chose(aggregate: bool) -> None:
    # greedy packs the soft gang into rack a, where the hard gang alone fits; the soft gang
    # may go anywhere (racks b + c), so both fit: weight 4, not an "optimal" 2
    problem = _racks_3_1_1()
    greedy = GreedyPlacer().place(problem)
    assert _weight(problem, greedy) == 2
    res = JointCpSatPlacer(aggregate=aggregate).place(problem)
    validate_placement(problem, res)
    assert res.status is Status.OPTIMAL and res.gap == 0.0
    assert _weight(problem, res) == 4
    assert {n for _, n, _ in res.gangs[1].replicas} == {0, 1, 2}


def _sliced_rack_under_no_spine() -> PlacementProblem:
    # spine s holds rack a; rack b hangs under no tier-2 domain; slices of 3 at tier 2
    nodes = [Node(name=f"n{i}", allocatable={"cpu": 64}) for i in range(6)]
    topo = build_topology(
        Snapshot(
            nodes=nodes,
            hypernodes=[
                HyperNode(name="a", tier=1, members=["n0", "n1", "n2"]),
                HyperNode(name="b", tier=1, members=["n3", "n4", "n5"]),
                HyperNode(name="s", tier=2, members=["a"]),
            ],
        )
    )
    gpu_free = np.zeros((6, 8), dtype=np.int64)
    gpu_free[[0, 3, 4, 5], 0] = 1000  # rack a has one free GPU, rack b three
    gang = gpu_gang("g", 3, 6, mode=None, slice_size=3, slice_tier=2)
    return problem_for(topo, [gang], gpu_free=gpu_free)


def test_a_slice_in_a_rack_under_no_spine_is_valid_for_placers_and_validator() -> None:
    problem = _sliced_rack_under_no_spine()
    groups = slice_groups(problem.topology, problem.gangs[0])
    assert len(set(groups[3:].tolist())) == 1  # rack b is one slice group at tier 2
    assert groups[0] != groups[3]
    for placer in (GreedyPlacer(), CpSatPlacer()):
        res = placer.place(problem)
        validate_placement(problem, res)  # the rack holds the whole slice: accepted
        assert res.gangs[0].placed
        assert {n for _, n, _ in res.gangs[0].replicas} == {3, 4, 5}


_DETERMINISM_SCRIPT = """
import hashlib, pickle, sys
sys.path[:0] = [{here!r}, {tests!r}]
from test_placement_claims import determinism_digest
print(determinism_digest())
"""


def _multi_role_problem(racks: int = 2, nodes: int = 4, workers: int = 6) -> PlacementProblem:
    from _placement_cases import fat_tree_snapshot
    from gangsched.placement import GangRequest

    topo = build_topology(fat_tree_snapshot(spines=2, racks=racks, nodes=nodes))
    n = topo.n_nodes
    rng = np.random.default_rng(7)
    gpu_free = np.where(rng.random((n, 8)) < 0.6, 1000, 0).astype(np.int64)
    gang = GangRequest(
        name="job",
        request=np.array([[4000, 2**34], [2000, 2**33], [1000, 2**32]], dtype=np.int64),
        counts=np.array([workers, 1, 2]),
        min_counts=np.array([0, 1, 0]),
        mask=np.ones((3, n), dtype=np.bool_),
        gpu_count=np.array([2, 0, 1]),
        gpu_milli=np.array([1000, 0, 500]),
        required_tier=2,
    )
    return problem_for(topo, [gang], gpu_free=gpu_free)


def _fifty_mixed_gangs() -> PlacementProblem:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from benchmarks._placement_irregular import joint_mixed_problem

    return joint_mixed_problem(640, 0)


def determinism_digest() -> str:
    """Digest of what the placers built without arguments answer on a few problems."""
    import hashlib
    import pickle

    out = []
    for placer, problem in (
        (CpSatPlacer(), _multi_role_problem()),
        (JointCpSatPlacer(), _racks_3_1_1()),
        (JointCpSatPlacer(), _sliced_rack_under_no_spine()),
        (JointCpSatPlacer(), _mixed_joint_problem()),  # relaxation, repair and polish
        (JointCpSatPlacer(), _fifty_mixed_gangs()),  # the model on replica classes
    ):
        res = placer.place(problem)
        out.append(
            (res.status.name, res.gap, res.limit, [(g.placed, g.replicas) for g in res.gangs])
        )
    return hashlib.sha256(pickle.dumps(out)).hexdigest()


def test_placers_built_without_arguments_are_deterministic_across_processes() -> None:
    import subprocess
    import sys
    from pathlib import Path

    here = determinism_digest()
    assert determinism_digest() == here  # same process, again
    script = _DETERMINISM_SCRIPT.format(
        here=str(Path(__file__).parent), tests=str(Path(__file__).parents[1])
    )
    for _ in range(2):
        child = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
        )
        assert child.returncode == 0, child.stderr
        assert child.stdout.strip() == here


def test_a_wall_budget_covers_build_solve_and_extract() -> None:
    problem = _multi_role_problem(racks=4, nodes=8, workers=24)
    budget = 0.3
    res = CpSatPlacer(time_limit_s=budget, max_deterministic_time=None).place(problem)
    validate_placement(problem, res)
    assert res.solve_time <= 1.1 * budget + 0.1, res.solve_time
    if res.status not in (Status.OPTIMAL, Status.INFEASIBLE):
        assert res.limit == "wall" and (res.gap > 0 or res.fallback)


def _mixed_joint_problem() -> PlacementProblem:
    topo = build_topology(fat_tree_snapshot(spines=2, racks=4, nodes=8))
    n = topo.n_nodes
    gangs = [gpu_gang(f"g{i}", 2 + i % 5, n, gpus_per_replica=1 + i % 2) for i in range(12)]
    gpu_free = np.zeros((n, 8), dtype=np.int64)
    gpu_free[:, 0] = 1000
    gpu_free[::4, 1] = 1000  # scarce: the gangs compete
    return problem_for(topo, gangs, gpu_free=gpu_free, weights=[1 + i % 3 for i in range(12)])


def test_joint_wall_budget_of_zero_stops_before_the_greedy_pass() -> None:
    problem = _mixed_joint_problem()
    res = JointCpSatPlacer(time_limit_s=0.0, max_deterministic_time=None).place(problem)
    validate_placement(problem, res)
    assert res.status is Status.TIMED_OUT and res.fallback and res.limit == "wall"
    assert not any(g.placed for g in res.gangs)
    assert all("wall budget ran out" in g.reason for g in res.gangs)
