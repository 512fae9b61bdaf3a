"""Joint placement: the relaxation's signatures and the exact model on replica classes."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from _placement_cases import GIB, gpu_gang, problem_for
from _placement_oracle import best_weight
from gangsched.model import HyperNode, Node, TopologyMode
from gangsched.model.snapshot import Snapshot
from gangsched.model.topology import build_topology
from gangsched.placement import (
    GreedyPlacer,
    JointCpSatPlacer,
    PlacementProblem,
    Status,
    validate_placement,
)
from gangsched.placement._common import gang_view
from gangsched.placement._relax import build_relaxation
from gangsched.placement.cpsat._budget import _Budget
from gangsched.placement.cpsat._joint_model import _joint_domains
from gangsched.placement.greedy import greedy_sequence
from gangsched.placement.problem import PlacementResult

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))


def _weight(problem: PlacementProblem, res: PlacementResult) -> int:
    w = problem.weights
    assert w is not None
    return sum(int(w[i]) for i, g in enumerate(res.gangs) if g.placed)


def _relaxation_bound(problem: PlacementProblem) -> int:
    greedy = GreedyPlacer().place(problem)
    views = [gang_view(problem, gi) for gi in range(len(problem.gangs))]
    doms = [_joint_domains(problem, views[gi], greedy.gangs[gi]) for gi in range(len(views))]
    rel = build_relaxation(problem, views, doms)
    upper, _ = JointCpSatPlacer()._solve_relaxation(
        problem, rel, doms, greedy, _Budget(deadline=None, work=1.0)
    )
    return upper


def _check_optimal(problem: PlacementProblem, weight: int) -> None:
    res = JointCpSatPlacer().place(problem)
    validate_placement(problem, res)
    assert res.status is Status.OPTIMAL and res.limit == ""
    assert _weight(problem, res) == weight == best_weight(problem)


def test_relaxation_gives_no_gpu_of_a_node_whose_cores_run_out() -> None:
    # n0: 8 free GPUs but 4 cores; n1: 1 GPU and 64 cores. A replica takes a GPU and 2
    # cores, so the two nodes hold 3 replicas, not 9: two gangs of 2 do not fit together
    nodes = [Node(name=f"n{i}", allocatable={"cpu": 64}) for i in range(2)]
    topo = build_topology(Snapshot(nodes=nodes, hypernodes=()))
    free = np.array([[4000, 512 * GIB], [64_000, 512 * GIB]], dtype=np.int64)
    gpu_free = np.zeros((2, 8), dtype=np.int64)
    gpu_free[0, :] = 1000
    gpu_free[1, 0] = 1000
    gangs = [gpu_gang(f"g{i}", 2, 2, cpu_m=2000, mode=TopologyMode.SOFT) for i in range(2)]
    problem = problem_for(topo, gangs, free=free, gpu_free=gpu_free, sharing=False)
    assert _relaxation_bound(problem) == 1
    _check_optimal(problem, 1)


def test_relaxation_meets_gangs_whose_usable_nodes_differ() -> None:
    # rack r = {n0, n2}; n1 and n3 in no domain; two free GPUs on each of n0..n2, four on n3
    # which every gang's mask leaves out. The hard gang (2 × 2 GPUs in one rack) takes all of
    # n0 and n2; the soft gang (3 × 1 GPU, not on n2) then has only n1's two. Neither gang's
    # usable nodes lie among the other's: only their union counts both
    nodes = [Node(name=f"n{i}", allocatable={"cpu": 64}) for i in range(4)]
    topo = build_topology(
        Snapshot(nodes=nodes, hypernodes=[HyperNode(name="r", tier=1, members=["n0", "n2"])])
    )
    gpu_free = np.zeros((4, 4), dtype=np.int64)
    gpu_free[:3, :2] = 1000
    gpu_free[3, :] = 1000
    hard = gpu_gang("h", 2, 4, gpus_per_replica=2, cpu_m=2000, highest_tier=1)
    soft = gpu_gang("f", 3, 4, mode=TopologyMode.SOFT)
    mask_h = np.array([[True, True, True, False]])
    mask_f = np.array([[True, True, False, False]])
    gangs = [replace(hard, mask=mask_h), replace(soft, mask=mask_f)]
    problem = problem_for(topo, gangs, gpu_free=gpu_free, gpus=4, sharing=False)
    assert _relaxation_bound(problem) == 1
    _check_optimal(problem, 1)


def test_class_model_proves_the_joint_optimum_of_fifty_mixed_gangs() -> None:
    # 50 gangs of mixed shapes on 640 irregular nodes: the guided placement reaches 83 of
    # the relaxation's bound of 87; the model on replica classes places 87 and proves it (an
    # independent node-level model with a 60 s budget finds the same optimum)
    from benchmarks._placement_irregular import joint_mixed_problem

    problem = joint_mixed_problem(640, 0)
    a = JointCpSatPlacer().place(problem)
    b = JointCpSatPlacer().place(problem)
    validate_placement(problem, a)
    assert a.status is Status.OPTIMAL and a.limit == "" and not a.fallback
    assert _weight(problem, a) == 87
    assert [g.replicas for g in a.gangs] == [g.replicas for g in b.gangs]


def test_greedy_sequence_with_a_stop_leaves_the_untried_gangs_out() -> None:
    nodes = [Node(name=f"n{i}", allocatable={"cpu": 64}) for i in range(2)]
    topo = build_topology(Snapshot(nodes=nodes, hypernodes=()))
    gangs = [gpu_gang(f"g{i}", 2, 2, mode=None) for i in range(3)]
    problem = problem_for(topo, gangs, weights=[1, 3, 2])
    plain = greedy_sequence(problem)
    assert [g.replicas for g in plain.gangs] == [
        g.replicas for g in GreedyPlacer().place(problem).gangs
    ]
    asked: list[int] = []

    def stop() -> bool:
        asked.append(1)
        return len(asked) > 1  # the heaviest gang is tried, the others are not

    cut = greedy_sequence(problem, stop)
    assert [g.placed for g in cut.gangs] == [False, True, False]
    assert all("wall budget ran out" in cut.gangs[i].reason for i in (0, 2))


def test_a_solves_work_is_charged_and_judged_rounded_to_a_billionth() -> None:
    # CP-SAT's reported deterministic time can differ in its last bit between runs of the
    # same model: every figure the placer decides by is the rounded one.
    budget = _Budget(None, 1.0)
    a = budget.charge(0.1 + 3e-17)
    b = _Budget(None, 1.0).charge(0.1 - 3e-17)
    assert a == b == round(0.1, 9)
    assert budget.work == 1.0 - a and budget.spent == a
    assert budget.charge(2.5e-10) == 0.0
