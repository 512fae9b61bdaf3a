"""Volcano's network-topology-aware scores: hypernode order for topology gangs (the fuller
hypernode first, tier by tier) and the fading-weighted node score of normal pods.

Expected values are computed by hand below each scenario; the first scenarios are transcribed
from Volcano's own plugin tests (``network_topology_aware_test.go``: ``TestBatchNodeOrderFn``,
``TestHyperNodeOrderFn``), whose figures are quoted.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import gangsched as gs
from gangsched.actions._gang_placement import hypernode_order
from gangsched.config import Config
from gangsched.model.snapshot import Snapshot
from gangsched.model.topology import build_topology
from gangsched.placement import GreedyPlacer
from gangsched.placement.cpsat import CpSatPlacer
from gangsched.placement.problem import (
    GangRequest,
    HypernodeOrder,
    PlacementProblem,
    hypernode_scores,
)
from gangsched.placement.validate import validate_placement
from gangsched.plugins.network_topology import NetworkTopologyAwarePlugin, fading_weights
from gangsched.scheduler import open_session

PLACERS: list[Any] = [
    None,
    GreedyPlacer(),
    CpSatPlacer(workers=1, seed=0, max_deterministic_time=2.0),
]


# --------------------------------------------------------------------------- Volcano's cluster


def _volcano_cluster(
    pod: dict[str, Any], extra: dict[str, int] | None = None, hard: bool = False, n_pods: int = 1
) -> Snapshot:
    """Volcano's three-tier test cluster: s0 (tier 3) ⊃ s1, s2 (tier 2) ⊃ s3..s6 (tier 1),
    two nodes each: s3 (2 cpu, 4G), s4 (4, 4G), s5 (2, 8G), s6 (4, 8G)."""
    shapes = {"s3": ("2", "4G"), "s4": ("4", "4G"), "s5": ("2", "8G"), "s6": ("4", "8G")}
    nodes = []
    for rack, (cpu, mem) in shapes.items():
        for i in (1, 2):
            alloc: dict[str, Any] = {"cpu": cpu, "memory": mem, "pods": 10}
            if extra is not None:
                alloc["example.com/foo"] = extra[f"{rack}-n{i}"]
            nodes.append({"name": f"{rack}-n{i}", "allocatable": alloc})
    hns = [
        {"name": r, "tier": 1, "members": [f"{r}-n1", f"{r}-n2"]} for r in ("s3", "s4", "s5", "s6")
    ]
    hns += [
        {"name": "s1", "tier": 2, "members": ["s3", "s4"]},
        {"name": "s2", "tier": 2, "members": ["s5", "s6"]},
        {"name": "s0", "tier": 3, "members": ["s1", "s2"]},
    ]
    job: dict[str, Any] = {"name": "pg1", "queue": "q1", "min_available": n_pods}
    if hard:
        job["network_topology"] = {"mode": "hard", "highest_tier_allowed": 2}
    tasks = [{"name": f"p{i + 1}", "job": "pg1", "request": pod} for i in range(n_pods)]
    return Snapshot.from_dict(
        {
            "nodes": nodes,
            "hypernodes": hns,
            "queues": [{"name": "q1"}],
            "jobs": [job],
            "tasks": tasks,
        }
    )


def _node_scores(snap: Snapshot, arguments: dict[str, Any]) -> dict[str, float]:
    ssn = open_session(snap)
    plugin = NetworkTopologyAwarePlugin(arguments)
    rows = np.arange(len(snap.nodes), dtype=np.intp)
    score = plugin.node_score(ssn, ssn.templates[0], rows)
    return {n.name: float(s) for n, s in zip(snap.nodes, score, strict=True)}


def test_normal_pod_score_includes_the_cluster_top_tier() -> None:
    # Volcano TestBatchNodeOrderFn "score empty nodes ... default plugin arguments".
    # A (2 cpu, 4G) pod on s3-n1: tier 1 s3 (2/4 + 4/8)/2 = 0.5; tier 2 s1 (2/12 + 4/16)/2;
    # tier 3 s0 and the cluster top tier 4: (2/24 + 4/48)/2 each; fading 0.8:
    # (0.5 + 0.8·0.2083 + 0.64·0.0833 + 0.512·0.0833) / (1 + 0.8 + 0.64 + 0.512) = 0.2584.
    # Leaving the top tier out gives 0.72 / 2.44 = 0.295 (29.5).
    scores = _node_scores(_volcano_cluster({"cpu": 2, "memory": "4G"}), {})
    expected = {"s3": 25.8, "s4": 21.6, "s5": 19.9, "s6": 15.7}  # Volcano's figures
    for node, score in scores.items():
        assert score == pytest.approx(expected[node[:2]], abs=0.05), node
    exact = (0.5 + 0.8 * (2 / 12 + 4 / 16) / 2 + (0.64 + 0.512) * (2 / 24 + 4 / 48) / 2) / 2.952
    assert scores["s3-n1"] == pytest.approx(100 * exact)


def test_normal_pod_score_with_volcanos_customized_arguments() -> None:
    # Volcano's "score empty nodes ... customized plugin arguments": fading 0 keeps tier 1
    # only; weights cpu 1, memory 4, foo 3, weight 10. s3 (2+2 cpu, 4+4G, 8+8 foo) for a
    # (2, 4G, 8 foo) pod: (1·2/4 + 4·4/8 + 3·8/16)/8 = 0.5 → 500.
    racks = ["s3", "s4", "s5", "s6"]
    extra = {f"{r}-n{i}": (8 if r in ("s3", "s4") else 16) for r in racks for i in (1, 2)}
    snap = _volcano_cluster({"cpu": 2, "memory": "4G", "example.com/foo": 8}, extra)
    args = {
        "weight": 10,
        "hypernode.binpack.cpu": 1,
        "hypernode.binpack.memory": 4,
        "hypernode.binpack.resources": "nvidia.com/gpu, example.com/foo",
        "hypernode.binpack.resources.nvidia.com/gpu": 2,
        "hypernode.binpack.resources.example.com/foo": 3,
        "hypernode.binpack.normal-pod.fading": 0,
    }
    scores = _node_scores(snap, args)
    expected = {"s3": 500.0, "s4": 468.75, "s5": 281.25, "s6": 250.0}
    for node, score in scores.items():
        assert score == pytest.approx(expected[node[:2]]), node


def test_normal_pod_tier_without_hypernode_counts_as_full() -> None:
    # rack r0 (tier 1) = n0, n1; n2 under no hypernode; 4 cpu each, 2 cpu used on n0.
    # A 1-cpu pod, fading 0.8, tiers 1 and the cluster top (2):
    #   n0, n1: tier 1 r0 (2 + 1)/8, top (2 + 1)/12 → (0.375 + 0.8·0.25)/1.8
    #   n2: tier 1 none → full (1.0), top 0.25   → (1.0 + 0.8·0.25)/1.8
    nodes = [{"name": f"n{i}", "allocatable": {"cpu": 4}} for i in range(3)]
    snap = Snapshot.from_dict(
        {
            "nodes": nodes,
            "hypernodes": [{"name": "r0", "tier": 1, "members": ["n0", "n1"]}],
            "queues": [{"name": "q"}],
            "jobs": [
                {"name": "run", "queue": "q", "min_available": 1, "phase": "Running"},
                {"name": "p", "queue": "q", "min_available": 1},
            ],
            "tasks": [
                {
                    "name": "run-0",
                    "job": "run",
                    "request": {"cpu": 2},
                    "phase": "Running",
                    "node": "n0",
                },
                {"name": "p-0", "job": "p", "request": {"cpu": 1}},
            ],
        }
    )
    ssn = open_session(snap)
    tmpl = next(t for t in ssn.templates if snap.jobs[t.job].name == "p")
    score = NetworkTopologyAwarePlugin({}).node_score(ssn, tmpl, np.arange(3, dtype=np.intp))
    assert score[0] == pytest.approx(100 * (0.375 + 0.8 * 0.25) / 1.8)
    assert score[1] == pytest.approx(score[0])  # same rack, same domains
    assert score[2] == pytest.approx(100 * (1.0 + 0.8 * 0.25) / 1.8)


def test_normal_pod_tier_number_gap_counts_as_full() -> None:
    # tiers 1 and 3 (no tier-2 hypernode), top tier 4: Volcano sums over tiers 1, 2, 3, 4 and
    # tier 2, where no node has a hypernode, is full for every node.
    # n0 alone in r (tier 1) and z (tier 3), 4 cpu, a 1-cpu pod: binpack 1/4 at tiers 1, 3, 4.
    snap = Snapshot.from_dict(
        {
            "nodes": [{"name": "n0", "allocatable": {"cpu": 4}}],
            "hypernodes": [
                {"name": "r", "tier": 1, "members": ["n0"]},
                {"name": "z", "tier": 3, "members": ["r"]},
            ],
            "queues": [{"name": "q"}],
            "jobs": [{"name": "p", "queue": "q", "min_available": 1}],
            "tasks": [{"name": "p-0", "job": "p", "request": {"cpu": 1}}],
        }
    )
    score = _node_scores(snap, {})["n0"]
    w = [1.0, 0.8, 0.64, 0.512]
    assert score == pytest.approx(100 * (0.25 * (w[0] + w[2] + w[3]) + w[1]) / sum(w))
    present, gaps = fading_weights(0.8, (1, 3, 4))
    assert present == pytest.approx([1.0, 0.64, 0.512]) and gaps == pytest.approx(0.8)
    # huge tier numbers and gaps: closed form and finite; the gap run 2 .. 2**53 − 1 weighs
    # 0.8 / (1 − 0.8) = 4 times tier 1
    present, gaps = fading_weights(0.8, (1, 2**53))
    assert gaps / present[0] == pytest.approx(4.0) and max(present[0], gaps) == 1.0
    present, gaps = fading_weights(1.5, (1, 10**6, 10**6 + 1))
    assert max(present) <= 1.0 and np.isfinite(gaps)


# --------------------------------------------------------------------------- hypernode order


def _order_problem(snap: Snapshot, arguments: dict[str, Any]) -> PlacementProblem:
    plugin = {"name": "network-topology-aware", "arguments": arguments}
    config = Config.from_dict({"actions": ["allocate"], "tiers": [[plugin]]})
    ssn = open_session(snap, config)
    order = hypernode_order(ssn)
    assert order is not None
    tmpl = ssn.templates[0]
    request = tmpl.request.astype(np.int64)[None, :].copy()
    request[:, ssn.arrays.spec.gpu_column] = 0
    gang = GangRequest(
        name="pg1",
        request=request,
        counts=np.array([2]),
        mask=np.ones((1, len(snap.nodes)), dtype=bool),
        mode=gs.TopologyMode.HARD,
        highest_tier=2,
    )
    n = len(snap.nodes)
    return PlacementProblem(
        free=ssn.idle(),
        allocatable=ssn.arrays.allocatable,
        used=ssn.used,
        gpu_free=np.zeros((n, 1), dtype=np.int64),
        gpu_capacity=np.zeros(n, dtype=np.int64),
        gpu_sharing=np.zeros(n, dtype=bool),
        topology=build_topology(snap),
        gangs=(gang,),
        hypernode_order=order,
    )


def _scores_by_name(problem: PlacementProblem) -> dict[str, float]:
    topo = problem.topology
    out: dict[str, float] = {}
    for rank in range(1, topo.top_tier + 1):
        for i, s in enumerate(hypernode_scores(problem, 0, rank)):
            out[topo.name_of(rank, i)] = float(s)
    return out


def test_hypernode_order_scores_match_volcanos_default_arguments() -> None:
    # Volcano TestHyperNodeOrderFn, default arguments: two (4 cpu, 4G) pods = (8, 8G).
    # s4: 8/8, 8/8 → 100; s6: 8/8, 8/16 → 75; s1: (8/12 + 8/16)/2 = 58.3; s2: (8/12 + 8/32)/2
    # = 45.8; s0 and the cluster top: (8/24 + 8/48)/2 = 25; s3, s5 overflow cpu → 0.
    snap = _volcano_cluster({"cpu": 4, "memory": "4G"}, hard=True, n_pods=2)
    scores = _scores_by_name(_order_problem(snap, {}))
    expected = {"s0": 25.0, "s1": 58.3, "s2": 45.8, "s3": 0.0, "s4": 100.0, "s5": 0.0}
    expected |= {"s6": 75.0, "<cluster>": 25.0}
    assert scores == pytest.approx(expected, abs=0.05)


def test_hypernode_order_scores_match_volcanos_customized_arguments() -> None:
    # Volcano TestHyperNodeOrderFn, customized: weights cpu 3, memory 4, foo 3 (the listed
    # nvidia.com/gpu is not asked), weight 10; foo only on the -n1 nodes (8, 8, 16, 16).
    # s6: (3·8/8 + 4·8/16 + 3·16/16)/10 = 0.8 → 800; s1: (3·8/12 + 4·8/16 + 3·16/16)/10 = 0.7;
    # s4: foo 16 > 8 → 0.
    extra = {f"{r}-n{i}": 0 for r in ["s3", "s4", "s5", "s6"] for i in (1, 2)}
    extra |= {"s3-n1": 8, "s4-n1": 8, "s5-n1": 16, "s6-n1": 16}
    snap = _volcano_cluster(
        {"cpu": 4, "memory": "4G", "example.com/foo": 8}, extra, hard=True, n_pods=2
    )
    args = {
        "weight": 10,
        "hypernode.binpack.cpu": 3,
        "hypernode.binpack.memory": 4,
        "hypernode.binpack.resources": "nvidia.com/gpu, example.com/foo",
        "hypernode.binpack.resources.nvidia.com/gpu": 2,
        "hypernode.binpack.resources.example.com/foo": 3,
        "hypernode.binpack.normal-pod.enable": True,
        "hypernode.binpack.normal-pod.fading": 0,
    }
    scores = _scores_by_name(_order_problem(snap, args))
    expected = {"s0": 266.7, "s1": 700.0, "s2": 450.0, "s3": 0.0, "s4": 0.0, "s5": 0.0}
    expected |= {"s6": 800.0, "<cluster>": 266.7}
    assert scores == pytest.approx(expected, abs=0.05)


def _two_racks(jobs: list[dict[str, Any]], tasks: list[dict[str, Any]]) -> Snapshot:
    """Racks ra = a0, a1 and rb = b0, b1 (4 cpu, 16Gi each) under spine sp; 2 cpu of each
    node of ra already used."""
    nodes = [
        {"name": n, "allocatable": {"cpu": 4, "memory": "16Gi"}} for n in ("a0", "a1", "b0", "b1")
    ]
    hns = [
        {"name": "ra", "tier": 1, "members": ["a0", "a1"]},
        {"name": "rb", "tier": 1, "members": ["b0", "b1"]},
        {"name": "sp", "tier": 2, "members": ["ra", "rb"]},
    ]
    run = [
        {"name": f"run-{n}", "job": "run", "request": {"cpu": 2}, "phase": "Running", "node": n}
        for n in ("a0", "a1")
    ]
    return Snapshot.from_dict(
        {
            "nodes": nodes,
            "hypernodes": hns,
            "queues": [{"name": "q"}],
            "jobs": [{"name": "run", "queue": "q", "min_available": 1, "phase": "Running"}, *jobs],
            "tasks": run + tasks,
        }
    )


NTA = Config.from_dict(
    {
        "actions": ["enqueue", "allocate"],
        "tiers": [[{"name": "gang"}], [{"name": "network-topology-aware"}]],
    }
)


@pytest.mark.parametrize("mode", ["hard", "soft"])
@pytest.mark.parametrize("placer", PLACERS)
def test_gang_that_fits_in_two_racks_goes_to_the_fuller_one(placer: Any, mode: str) -> None:
    # A gang of two 2-cpu tasks fits in ra (exactly: 2 cpu free on each node) and in rb (one
    # empty node would do). Volcano scores the racks: ra (4 + 4)/8 = 1.0, rb (0 + 4)/8 = 0.5
    # (cpu; memory 0 asked), so the gang goes to ra. Before: one empty node of rb (tier 0).
    job = {
        "name": "g",
        "queue": "q",
        "min_available": 2,
        "phase": "Inqueue",
        "network_topology": {"mode": mode, "highest_tier_allowed": 1},
    }
    tasks = [{"name": f"g-{i}", "job": "g", "request": {"cpu": 2}} for i in range(2)]
    d = gs.schedule(_two_racks([job], tasks), NTA, placer=placer)
    assert sorted(b.node for b in d.binds) == ["a0", "a1"]


def test_without_the_plugin_the_tightest_single_node_is_kept() -> None:
    # the hypernode order is the plugin's: without it a placer keeps its own objective
    job = {
        "name": "g",
        "queue": "q",
        "min_available": 2,
        "phase": "Inqueue",
        "network_topology": {"mode": "hard", "highest_tier_allowed": 1},
    }
    tasks = [{"name": f"g-{i}", "job": "g", "request": {"cpu": 2}} for i in range(2)]
    plain = Config.from_dict({"actions": ["enqueue", "allocate"], "tiers": [[{"name": "gang"}]]})
    d = gs.schedule(_two_racks([job], tasks), plain)
    assert len({b.node for b in d.binds}) == 1


def _two_spines(running: list[tuple[str, int, str]]) -> dict[str, Any]:
    """Spines S0 = r00, r01 and S1 = r10, r11, two nodes a rack, 4 cpu / 16Gi each."""
    nodes = [
        {"name": f"{r}n{i}", "allocatable": {"cpu": 4, "memory": "16Gi"}}
        for r in ("r00", "r01", "r10", "r11")
        for i in range(2)
    ]
    hns = [
        {"name": r, "tier": 1, "members": [f"{r}n0", f"{r}n1"]}
        for r in ("r00", "r01", "r10", "r11")
    ]
    hns += [
        {"name": "S0", "tier": 2, "members": ["r00", "r01"]},
        {"name": "S1", "tier": 2, "members": ["r10", "r11"]},
    ]
    tasks = [
        {
            "name": f"run-{node}",
            "job": "run",
            "request": {"cpu": cpu, "memory": mem},
            "phase": "Running",
            "node": node,
        }
        for node, cpu, mem in running
    ]
    return {
        "nodes": nodes,
        "hypernodes": hns,
        "queues": [{"name": "q"}],
        "jobs": [{"name": "run", "queue": "q", "min_available": 1, "phase": "Running"}],
        "tasks": tasks,
    }


def _spine_gang(data: dict[str, Any], n: int) -> Snapshot:
    data = dict(data)
    data["jobs"] = [
        *data["jobs"],
        {
            "name": "g",
            "queue": "q",
            "min_available": n,
            "phase": "Inqueue",
            "network_topology": {"mode": "hard", "highest_tier_allowed": 2},
        },
    ]
    data["tasks"] = [
        *data["tasks"],
        *({"name": f"g-{i}", "job": "g", "request": {"cpu": 2, "memory": "2Gi"}} for i in range(n)),
    ]
    return Snapshot.from_dict(data)


def _nta(arguments: dict[str, Any]) -> Config:
    return Config.from_dict(
        {
            "actions": ["enqueue", "allocate"],
            "tiers": [
                [{"name": "gang"}],
                [{"name": "network-topology-aware", "arguments": arguments}],
            ],
        }
    )


@pytest.mark.parametrize("placer", PLACERS)
def test_tier_gradient_and_weights_when_a_gang_spans_tiers(placer: Any) -> None:
    # S0 holds a memory-heavy pod (1 cpu, 12Gi on r00n0), S1 a cpu-heavy one (2 cpu, 1Gi on
    # r10n0). A gang of five (2 cpu, 2Gi) tasks needs three nodes: no rack (two nodes) holds
    # it, so tier 2 decides. Demand 10 cpu, 10Gi; each spine has 16 cpu, 64Gi:
    #   memory only:  S0 (12 + 10)/64 = 0.34 > S1 (1 + 10)/64 = 0.17 → S0
    #   cpu only:     S0 (1 + 10)/16 = 0.69 < S1 (2 + 10)/16 = 0.75  → S1
    data = _two_spines([("r00n0", 1, "12Gi"), ("r10n0", 2, "1Gi")])
    for args, spine in (
        ({"hypernode.binpack.cpu": 0}, "r0"),
        ({"hypernode.binpack.memory": 0}, "r1"),
    ):
        d = gs.schedule(_spine_gang(data, 5), _nta(args), placer=placer)
        assert len(d.binds) == 5
        assert {b.node[:2] for b in d.binds} == {spine}, args
    # four tasks fit one rack: the lowest tier is tried first, whatever the spine scores
    # (racks: r01 and r11 are empty, (0 + 8)/8 = 1.0 each; r00 and r10 cannot hold four)
    d = gs.schedule(_spine_gang(data, 4), _nta({"hypernode.binpack.cpu": 0}), placer=placer)
    assert {b.node[:3] for b in d.binds} == {"r01"}


def test_placer_problem_follows_the_hypernode_order_and_validates() -> None:
    # the same preference straight through the placer API, each answer a valid placement
    snap = _volcano_cluster({"cpu": 4, "memory": "4G"}, hard=True, n_pods=2)
    problem = _order_problem(snap, {})
    for placer in (GreedyPlacer(), CpSatPlacer(workers=1, seed=0, max_deterministic_time=2.0)):
        res = placer.place(problem)
        validate_placement(problem, res)
        gp = res.gangs[0]
        assert gp.placed
        nodes = sorted(snap.nodes[n].name for _, n, _ in gp.replicas)
        assert nodes == ["s4-n1", "s4-n2"]  # s4 scores 100, s6 75 (s3, s5 cannot hold it)
    with pytest.raises(gs.PlacementError, match=r"hypernode_order\.weights"):
        PlacementProblem(
            free=problem.free,
            gpu_free=problem.gpu_free,
            gpu_capacity=problem.gpu_capacity,
            gpu_sharing=problem.gpu_sharing,
            topology=problem.topology,
            gangs=problem.gangs,
            hypernode_order=HypernodeOrder(weights=np.ones(1)),
        )
    with pytest.raises(gs.PlacementError, match=r"hypernode_order\.weights"):
        HypernodeOrder(weights=np.array([-1.0]))


def test_docs_hypernode_ordering_section_runs() -> None:
    # the python blocks of docs/topology.md's "Hypernode ordering" section run as written
    doc = (Path(__file__).resolve().parents[2] / "docs" / "topology.md").read_text()
    section = doc.split("## Hypernode ordering", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert blocks
    for block in blocks:
        exec(compile(block, "<docs/topology.md>", "exec"), {})
