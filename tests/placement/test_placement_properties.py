"""Placers against an independent optimum on small random problems: no invalid placement, no
wrong OPTIMAL and no wrong INFEASIBLE.

Problems have at most 12 nodes on random trees (racks, spines over racks or listing nodes
directly, tier gaps, nodes in no domain), heterogeneous nodes (0–4 GPUs, some shared with
partly used devices), gangs of 1–3 templates (whole-GPU, half-GPU, CPU-only; role minimums),
hard / soft / free topology, slices; joint sets of 2–5 gangs. The optimum comes from the
mixed-integer programmes of ``_placement_oracle`` (HiGHS), which share no code with the
placers.

The default run is derandomized and CI-sized; ``GANGSCHED_SOAK=1`` runs many more examples
(random seeds).
"""

from __future__ import annotations

import os

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _placement_oracle import best_objective, best_weight
from gangsched.model import HyperNode, Node, TopologyMode
from gangsched.model.snapshot import Snapshot
from gangsched.model.topology import build_topology
from gangsched.placement import (
    CpSatPlacer,
    GangRequest,
    GreedyPlacer,
    JointCpSatPlacer,
    PlacementProblem,
    Status,
    validate_placement,
)
from gangsched.placement.problem import PlacementResult

SOAK = os.environ.get("GANGSCHED_SOAK") == "1"
GIB = 2**30
EXAMPLES = 1500 if SOAK else 30

# (cpu milli, gpus per replica, milli per device)
SHAPES = [(1000, 1, 1000), (2000, 2, 1000), (1000, 1, 500), (3000, 0, 0), (500, 1, 250)]


def _more(draw: st.DrawFn) -> bool:
    go: bool = draw(st.booleans())
    return go


@st.composite
def clusters(draw: st.DrawFn) -> tuple[object, ...]:
    n = draw(st.integers(2, 12))
    names = [f"n{i}" for i in range(n)]
    nodes = [Node(name=x, allocatable={"cpu": 8}) for x in names]
    left = list(range(n))
    hns: list[HyperNode] = []
    racks: list[str] = []
    while left and _more(draw):
        k = draw(st.integers(1, min(4, len(left))))
        members, left = left[:k], left[k:]
        racks.append(f"r{len(racks)}")
        hns.append(HyperNode(name=racks[-1], tier=1, members=[names[i] for i in members]))
    spine_tier = draw(st.sampled_from([2, 3]))  # 3: a tier gap
    spines = 0
    while racks and _more(draw):
        k = draw(st.integers(1, len(racks)))
        members_r, racks = racks[:k], racks[k:]
        hns.append(HyperNode(name=f"s{spines}", tier=spine_tier, members=members_r))
        spines += 1
    if left and _more(draw):  # a spine listing nodes directly
        k = draw(st.integers(1, len(left)))
        members, left = left[:k], left[k:]
        hns.append(
            HyperNode(name=f"s{spines}", tier=spine_tier, members=[names[i] for i in members])
        )
    topo = build_topology(Snapshot(nodes=nodes, hypernodes=hns))
    gcount = np.array(draw(st.lists(st.integers(0, 4), min_size=n, max_size=n)), dtype=np.int64)
    sharing = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n))) & (gcount > 0)
    gpu_free = np.where(np.arange(4)[None, :] < gcount[:, None], 1000, 0).astype(np.int64)
    used = draw(
        st.lists(st.sampled_from([0, 0, 0, 250, 500, 1000]), min_size=4 * n, max_size=4 * n)
    )
    taken = np.array(used, dtype=np.int64).reshape(n, 4)
    taken = np.where(sharing[:, None] | (taken == 1000), taken, 0)
    gpu_free = np.clip(gpu_free - taken, 0, None) * (gpu_free > 0)
    cpu = np.array(draw(st.lists(st.integers(1, 8), min_size=n, max_size=n)), dtype=np.int64)
    alloc = np.tile(np.array([8000, 64 * GIB], dtype=np.int64), (n, 1))
    free = np.column_stack([cpu * 1000, np.full(n, 64 * GIB)]).astype(np.int64)
    return topo, alloc, free, gpu_free, gcount, sharing, spine_tier


@st.composite
def gangs(draw: st.DrawFn, n: int, top: int, name: str, cordon: int | None = None) -> GangRequest:
    """A random gang; with ``cordon`` set, one whole-GPU template and that node masked out
    (gangs of one shape: the aggregate joint form, masks folded into the capacities)."""
    k = 1 if cordon is not None else draw(st.integers(1, 3))
    shapes = (
        [SHAPES[0]]
        if cordon is not None
        else draw(st.lists(st.sampled_from(SHAPES), min_size=k, max_size=k, unique=True))
    )
    counts = np.array(draw(st.lists(st.integers(1, 4), min_size=k, max_size=k)), dtype=np.int64)
    mins = np.array([draw(st.integers(0, int(c))) for c in counts], dtype=np.int64)
    size = draw(st.integers(max(1, int(mins.sum())), int(counts.sum())))
    mode = draw(st.sampled_from([TopologyMode.HARD, TopologyMode.SOFT, None]))
    slice_size = 0
    slice_tier = 0
    if draw(st.integers(0, 3)) == 0:
        divisors = [d for d in (2, 3) if size % d == 0]
        if divisors:
            slice_size = draw(st.sampled_from(divisors))
            slice_tier = draw(st.integers(0, top))
    mask = np.ones((k, n), dtype=np.bool_)
    if cordon is not None:
        mask[:, cordon] = False
        slice_size = 0
    elif draw(st.booleans()):
        mask[:, draw(st.integers(0, n - 1))] = False  # a cordoned node
    return GangRequest(
        name=name,
        request=np.array([[c, c * GIB // 1000] for c, _, _ in shapes], dtype=np.int64),
        counts=counts,
        min_counts=mins,
        size=size,
        mask=mask,
        gpu_count=np.array([g for _, g, _ in shapes], dtype=np.int64),
        gpu_milli=np.array([m for _, _, m in shapes], dtype=np.int64),
        mode=mode,
        highest_tier=draw(st.integers(1, top)) if mode is TopologyMode.HARD else None,
        slice_size=slice_size,
        slice_tier=slice_tier,
    )


@st.composite
def problems(draw: st.DrawFn, n_gangs: tuple[int, int]) -> PlacementProblem:
    topo, alloc, free, gpu_free, gcount, sharing, _ = draw(clusters())
    n = topo.n_nodes  # type: ignore[attr-defined]
    k = draw(st.integers(*n_gangs))
    top = int(topo.tiers[-1])  # type: ignore[attr-defined]
    cordon = draw(st.one_of(st.none(), st.integers(0, n - 1))) if k > 1 else None
    gs = tuple(draw(gangs(n, top, f"g{i}", cordon)) for i in range(k))
    weights = draw(st.lists(st.integers(1, 3), min_size=k, max_size=k))
    return PlacementProblem(
        free=free,  # type: ignore[arg-type]
        allocatable=alloc,  # type: ignore[arg-type]
        gpu_free=gpu_free,  # type: ignore[arg-type]
        gpu_capacity=np.where(gcount > 0, 1000, 0).astype(np.int64),  # type: ignore[operator]
        gpu_count=gcount,  # type: ignore[arg-type]
        gpu_sharing=sharing,  # type: ignore[arg-type]
        topology=topo,  # type: ignore[arg-type]
        gangs=gs,
        weights=np.array(weights, dtype=np.int64),
    )


def _weight(problem: PlacementProblem, res: PlacementResult) -> int:
    w = problem.weights
    assert w is not None
    return sum(int(w[i]) for i, g in enumerate(res.gangs) if g.placed)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems((1, 1)))
def test_single_gang_claims_hold_against_the_milp_optimum(problem: PlacementProblem) -> None:
    best = best_objective(problem, 0)
    greedy = GreedyPlacer().place(problem)
    validate_placement(problem, greedy)
    res = CpSatPlacer().place(problem)
    validate_placement(problem, res)
    gp = res.gangs[0]
    if best is None:
        assert not gp.placed and not greedy.gangs[0].placed
    else:
        assert res.status is not Status.INFEASIBLE, "INFEASIBLE claimed, a placement exists"
        if gp.placed:
            assert gp.objective >= best
    if res.status is Status.OPTIMAL:
        assert gp.placed and gp.objective == best, (gp.objective, best)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems((2, 5)))
def test_joint_claims_hold_against_the_milp_optimum(problem: PlacementProblem) -> None:
    best = best_weight(problem)
    # the default; the general path (relaxation, model on replica classes) also where the
    # aggregate form answers; and, for sliced gangs, the relaxation's bound alone
    placers = (
        JointCpSatPlacer(),
        JointCpSatPlacer(aggregate=False),
        JointCpSatPlacer(max_joint_cells=0),
    )
    for placer in placers:
        res = placer.place(problem)
        validate_placement(problem, res)
        assert _weight(problem, res) <= best
        if res.status is Status.OPTIMAL:
            assert _weight(problem, res) == best, (_weight(problem, res), best)
        if res.status is Status.INFEASIBLE:
            assert best == 0
        if res.status is Status.FEASIBLE and best > _weight(problem, res):
            assert res.gap > 0
