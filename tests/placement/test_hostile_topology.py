"""Hostile topology and placer inputs: tier numbers, wide and deep hypernode trees, CP-SAT
determinism and placer parameters."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import gangsched as gs
from gangsched.config import Config
from gangsched.errors import ConfigError, SnapshotError
from gangsched.limits import DEFAULT_LIMITS
from gangsched.model import Gpus, HyperNode, Node, TopologyMode
from gangsched.model.snapshot import Snapshot
from gangsched.model.topology import build_topology
from gangsched.placement import CpSatPlacer, GreedyPlacer, JointCpSatPlacer
from gangsched.placement.problem import GangRequest, PlacementProblem, PlacementResult
from gangsched.placement.validate import validate_placement
from gangsched.plugins.network_topology import tier_fades

ROOT = Path(__file__).resolve().parents[2]


# --------------------------------------------------------------------------- tier numbers


def _two_rack_snapshot(tiers: tuple[int, int], highest: int | None) -> dict[str, Any]:
    """Two 2-node racks (tier ``tiers[0]``) under one spine (tier ``tiers[1]``); a 3-task
    hard gang (one node's worth each) fits no rack, only the spine."""
    nodes = [{"name": f"r{r}n{i}", "allocatable": {"cpu": 4}} for r in range(2) for i in range(2)]
    topo: dict[str, Any] = {"mode": "hard"}
    if highest is not None:
        topo["highest_tier_allowed"] = highest
    return {
        "nodes": nodes,
        "hypernodes": [
            {"name": "r0", "tier": tiers[0], "members": ["r0n0", "r0n1"]},
            {"name": "r1", "tier": tiers[0], "members": ["r1n0", "r1n1"]},
            {"name": "sp", "tier": tiers[1], "members": ["r0", "r1"]},
        ],
        "queues": [{"name": "q"}],
        "jobs": [{"name": "j", "queue": "q", "min_available": 3, "network_topology": topo}],
        "tasks": [{"name": f"t{i}", "job": "j", "request": {"cpu": 3}} for i in range(3)],
    }


@pytest.mark.parametrize("top", [2000, 5000, 10**8, 2**53 - 1])
def test_hypernode_tier_numbers_cost_follows_ranks(top: int) -> None:
    # a 300-byte snapshot with tier 2000 took 17 s, 5000 hung, 10**8 was a MemoryError
    start = time.process_time()
    snap = Snapshot.from_dict(_two_rack_snapshot((1, top), top))
    topo = build_topology(snap)
    assert topo.top_tier == 3 and topo.tiers == (1, top, top + 1)
    assert topo.domain_of.shape == (3, 4)
    d = gs.schedule(snap)
    small = gs.schedule(Snapshot.from_dict(_two_rack_snapshot((1, 2), 2)))
    assert time.process_time() - start < 5.0
    assert len(d.binds) == 3
    assert d.to_dict() == small.to_dict()  # only the order of tiers matters


def test_hypernode_tier_numbers_map_to_ranks_for_highest_tier_allowed() -> None:
    # tiers present {1, 2, 1000}: highest_tier_allowed 3 means "within a tier-2 domain"
    nodes = [Node(name=f"s{s}r{r}n{i}", allocatable={"cpu": 4}) for s in range(2)
             for r in range(2) for i in range(2)]  # fmt: skip
    hns = [HyperNode(name=f"s{s}r{r}", tier=1, members=[f"s{s}r{r}n{i}" for i in range(2)])
           for s in range(2) for r in range(2)]  # fmt: skip
    hns += [HyperNode(name=f"s{s}", tier=2, members=[f"s{s}r0", f"s{s}r1"]) for s in range(2)]
    hns.append(HyperNode(name="zone", tier=1000, members=["s0", "s1"]))
    topo = build_topology(Snapshot(nodes=nodes, hypernodes=hns))
    assert topo.tiers == (1, 2, 1000, 1001)
    assert [topo.rank_of(t) for t in (0, 1, 2, 3, 999, 1000, 1001, 10**9)] == [
        0,
        1,
        2,
        2,
        2,
        3,
        4,
        4,
    ]

    def run(highest: int, size: int) -> gs.Decisions:
        snap = Snapshot.from_dict(
            {
                "nodes": [n.to_dict() for n in nodes],
                "hypernodes": [h.to_dict() for h in hns],
                "queues": [{"name": "q"}],
                "jobs": [
                    {
                        "name": "j",
                        "queue": "q",
                        "min_available": size,
                        "network_topology": {"mode": "hard", "highest_tier_allowed": highest},
                    }
                ],
                "tasks": [
                    {"name": f"t{i}", "job": "j", "request": {"cpu": 3}} for i in range(size)
                ],
            }
        )
        return gs.schedule(snap)

    spine = run(3, 4)  # fits one spine (4 nodes)
    assert len(spine.binds) == 4 and len({b.node[:2] for b in spine.binds}) == 1
    assert run(3, 5).binds == ()  # five nodes need the zone, which tier 3 does not allow
    message = run(3, 5).jobs["j"].message
    assert "one domain of tier <= 3" in message and "tier-2 domain 's" in message
    assert len(run(1000, 5).binds) == 5


def test_hypernode_tier_numbers_in_reasons_and_slices_are_the_users() -> None:
    nodes = [Node(name=f"n{i}", allocatable={"cpu": 4}) for i in range(4)]
    hns = [
        HyperNode(name="a", tier=7, members=["n0", "n1"]),
        HyperNode(name="b", tier=7, members=["n2", "n3"]),
        HyperNode(name="top", tier=900, members=["a", "b"]),
    ]
    topo = build_topology(Snapshot(nodes=nodes, hypernodes=hns))
    free = np.full((4, 1), 4000, dtype=np.int64)

    def problem(**kw: Any) -> PlacementProblem:
        gang = GangRequest(
            name="g",
            request=np.array([[3000]]),
            counts=np.array([kw.pop("size", 3)]),
            mask=np.ones((1, 4), dtype=np.bool_),
            **kw,
        )
        return PlacementProblem(
            free=free,
            gpu_free=np.zeros((4, 0), dtype=np.int64),
            gpu_capacity=np.zeros(4, dtype=np.int64),
            gpu_sharing=np.zeros(4, dtype=np.bool_),
            topology=topo,
            gangs=(gang,),
        )

    p = problem(mode=TopologyMode.HARD, highest_tier=8)
    res = GreedyPlacer().place(p)
    assert not res.gangs[0].placed
    assert "one domain of tier <= 8" in res.gangs[0].reason
    assert "tier-7 domain" in res.gangs[0].reason
    ok = GreedyPlacer().place(problem(mode=TopologyMode.HARD, highest_tier=900)).gangs[0]
    assert ok.placed and ok.tier == 900
    # two slices of two per tier-7 domain; a tier with no domains (8) means per node
    sliced = problem(size=4, slice_size=2, slice_tier=7, required_tier=900)
    res = GreedyPlacer().place(sliced)
    validate_placement(sliced, res)
    assert res.gangs[0].placed
    with pytest.raises(Exception, match=r"slice_tier 902 outside 0\.\.901"):
        problem(size=2, slice_size=2, slice_tier=902)


def test_hypernode_tier_numbers_fading_weights_stay_finite() -> None:
    assert tier_fades(0.8, (1, 2, 3)) == [1.0, 0.8, 0.8**2]
    assert tier_fades(0.8, (5000,)) == [1.0]  # rescaled: only the ratios matter
    assert tier_fades(1.5, (1, 2**53)) == [0.0, 1.0]  # no OverflowError
    config = Config.from_dict(
        {
            "actions": ["allocate"],
            "tiers": [[{"name": "gang"}], [{"name": "network-topology-aware"}]],
        }
    )
    data = _two_rack_snapshot((5000, 2**53), None)
    del data["jobs"][0]["network_topology"]
    d = gs.schedule(Snapshot.from_dict(data), config)
    assert len(d.binds) == 3


def test_hypernode_tiers_beyond_the_limit_are_a_typed_error() -> None:
    limit = DEFAULT_LIMITS.max_tiers
    nodes = [Node(name="n0", allocatable={"cpu": 1})]
    chain = [HyperNode(name="h1", tier=1, members=["n0"])]
    for t in range(2, limit + 2):
        chain.append(HyperNode(name=f"h{t}", tier=t * 1000, members=[chain[-1].name]))
    with pytest.raises(SnapshotError, match=r"hypernode 'h\d+': tier: .*Limits.max_tiers"):
        build_topology(Snapshot(nodes=nodes, hypernodes=chain))


# --------------------------------------------------------------------------- wide and deep trees


def test_tier2_hypernode_listing_nodes_directly_is_near_linear() -> None:
    # the mixed-members check ran any() over the members once per member: ~n^2
    n = 20_000
    data = {
        "nodes": [{"name": f"n{i}", "allocatable": {"cpu": 4}} for i in range(n)],
        "hypernodes": [{"name": "h", "tier": 2, "members": [f"n{i}" for i in range(n)]}],
    }
    start = time.process_time()
    topo = build_topology(Snapshot.from_dict(data))
    assert time.process_time() - start < 5.0  # about 0.3 s; quadratic was about 10 s
    assert topo.tiers == (2, 3) and (topo.domain_of[0] == 0).all()


def test_deep_hypernode_tree_places_without_recursion() -> None:
    # a chain as deep as the limit allows; the greedy fill used to recurse once per tier
    depth = DEFAULT_LIMITS.max_tiers
    nodes = [Node(name=f"n{i}", allocatable={"cpu": 4}, gpus=Gpus(count=0)) for i in range(4)]
    hns = [HyperNode(name="h1a", tier=1, members=["n0", "n1"])]
    hns.append(HyperNode(name="h1b", tier=1, members=["n2", "n3"]))
    hns.append(HyperNode(name="h2", tier=2, members=["h1a", "h1b"]))
    for t in range(3, depth + 1):
        hns.append(HyperNode(name=f"h{t}", tier=t, members=[hns[-1].name]))
    snap = Snapshot(nodes=nodes, hypernodes=hns)
    topo = build_topology(snap)
    assert topo.top_tier == depth + 1
    gang = GangRequest(
        name="g",
        request=np.array([[3000]]),
        counts=np.array([3]),
        mask=np.ones((1, 4), dtype=np.bool_),
        mode=TopologyMode.SOFT,
    )
    problem = PlacementProblem(
        free=np.full((4, 1), 4000, dtype=np.int64),
        gpu_free=np.zeros((4, 0), dtype=np.int64),
        gpu_capacity=np.zeros(4, dtype=np.int64),
        gpu_sharing=np.zeros(4, dtype=np.bool_),
        topology=topo,
        gangs=(gang,),
    )
    old = sys.getrecursionlimit()
    frames = 0
    f = sys._getframe()
    while f is not None:
        frames += 1
        f = f.f_back  # type: ignore[assignment]
    sys.setrecursionlimit(frames + 40)  # far fewer frames than the tree is deep
    try:
        result = GreedyPlacer().place(problem)
    finally:
        sys.setrecursionlimit(old)
    validate_placement(problem, result)
    assert result.gangs[0].placed and result.gangs[0].tier == 2


def test_hypernode_partial_overlap_is_named_with_the_user_tier() -> None:
    nodes = [Node(name=f"n{i}", allocatable={"cpu": 1}) for i in range(3)]
    hns = [
        HyperNode(name="r0", tier=10, members=["n0", "n1"]),
        HyperNode(name="big", tier=5000, members=["n1", "n2"]),
    ]
    with pytest.raises(SnapshotError, match=r"r0.*partly overlaps a tier-5000 hypernode"):
        build_topology(Snapshot(nodes=nodes, hypernodes=hns))


# --------------------------------------------------------------------------- CP-SAT determinism

_PROBLEM_SRC = textwrap.dedent(
    """
    import numpy as np
    from gangsched.model import Gpus, HyperNode, Node, TopologyMode
    from gangsched.placement.problem import GangRequest, PlacementProblem
    from gangsched.model.snapshot import Snapshot
    from gangsched.model.topology import build_topology

    def problems():
        rng = np.random.default_rng(7)
        n = 96
        nodes = [Node(name=f"n{i}", allocatable={"cpu": 96}, gpus=Gpus(count=8)) for i in range(n)]
        racks = [[f"n{i}" for i in range(r, r + 8)] for r in range(0, n, 8)]
        hns = [HyperNode(name=f"r{k}", tier=1, members=m) for k, m in enumerate(racks)]
        hns += [HyperNode(name=f"s{k}", tier=2, members=[f"r{j}" for j in range(k, k + 4)])
                for k in range(0, len(racks), 4)]
        topo = build_topology(Snapshot(nodes=nodes, hypernodes=hns))
        held = np.where(rng.random(n) < 0.6, rng.integers(1, 8, n), 0)
        gpu_free = np.where(np.arange(8)[None, :] < (8 - held)[:, None], 1000, 0)
        free = np.stack([(96 - 8 * held) * 1000], axis=1).astype(np.int64)
        out = []
        for k in range(3):
            sizes = rng.integers(2, 24, 12)
            gangs = tuple(
                GangRequest(
                    name=f"g{k}_{i}", request=np.array([[8000]]), counts=np.array([int(s)]),
                    mask=np.ones((1, n), dtype=np.bool_), gpu_count=np.array([1]),
                    gpu_milli=np.array([1000]),
                    mode=TopologyMode.HARD if i % 2 else TopologyMode.SOFT,
                    highest_tier=2 if i % 2 else None,
                )
                for i, s in enumerate(sizes)
            )
            out.append(PlacementProblem(
                free=free, gpu_free=gpu_free.astype(np.int64),
                gpu_capacity=np.full(n, 1000), gpu_sharing=np.zeros(n, dtype=bool),
                topology=topo, gangs=gangs, weights=rng.integers(1, 4, len(gangs)),
            ))
        return out
    """
)

_DIGEST_SRC = textwrap.dedent(
    """
    import hashlib, json
    from gangsched.placement import CpSatPlacer, JointCpSatPlacer

    def digest(result):
        gangs = [(g.gang, g.placed, g.replicas, g.objective, g.tier, g.domain, g.reason)
                 for g in result.gangs]
        body = [gangs, result.status.value, result.gap, result.fallback]
        return hashlib.sha256(json.dumps(body).encode()).hexdigest()

    def run_all(problems):
        out = []
        for placer in (CpSatPlacer(), JointCpSatPlacer(), CpSatPlacer(exact_bounds=False)):
            out.extend(digest(placer.place(p)) for p in problems)
        return out
    """
)


def _namespace() -> dict[str, Any]:
    ns: dict[str, Any] = {}
    exec(_PROBLEM_SRC + _DIGEST_SRC, ns)  # the same source the children run
    return ns


def test_cpsat_default_is_deterministic_in_one_process() -> None:
    ns = _namespace()
    problems = ns["problems"]()
    runs = [ns["run_all"](problems) for _ in range(3)]
    assert runs[0] == runs[1] == runs[2]
    for p in problems:  # and the answers are valid ones
        res: PlacementResult = JointCpSatPlacer().place(p)
        validate_placement(p, res)
        assert any(g.placed for g in res.gangs)


def test_cpsat_default_is_deterministic_across_processes() -> None:
    script = _PROBLEM_SRC + _DIGEST_SRC + "\nprint(json.dumps(run_all(problems())))\n"
    env = dict(os.environ, PYTHONHASHSEED="random")
    outs = []
    for _ in range(3):
        proc = subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            timeout=600,
            env=env,
            cwd=ROOT,
            check=True,
        )
        outs.append(json.loads(proc.stdout))
    here = _namespace()
    assert outs[0] == outs[1] == outs[2] == here["run_all"](here["problems"]())
    assert len(outs[0]) == 9 and hashlib.sha256(b"").hexdigest() not in outs[0]


def test_cpsat_default_constructors_are_deterministic() -> None:
    for placer in (CpSatPlacer(), JointCpSatPlacer()):
        assert placer.workers == 1 and placer.time_limit_s is None
        assert placer.max_deterministic_time is not None and placer.max_deterministic_time > 0
        assert placer.seed == 0
    assert "not deterministic" in (CpSatPlacer.__doc__ or "")


# --------------------------------------------------------------------------- placer parameters


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"seed": 2**31}, "seed"),
        ({"seed": -1}, "seed"),
        ({"seed": 1.5}, "seed"),
        ({"workers": 2**63}, "workers"),
        ({"workers": -3}, "workers"),
        ({"workers": 0}, "workers"),
        ({"workers": True}, "workers"),
        ({"time_limit_s": float("nan")}, "time_limit_s"),
        ({"time_limit_s": -1.0}, "time_limit_s"),
        ({"max_deterministic_time": float("inf")}, "max_deterministic_time"),
        ({"max_deterministic_time": None}, "max_deterministic_time"),
        ({"max_domains": 0}, "max_domains"),
    ],
)
def test_placer_parameters_are_checked_by_the_constructors(
    kwargs: dict[str, Any], field: str
) -> None:
    for cls in (CpSatPlacer, JointCpSatPlacer):
        with pytest.raises(ConfigError) as info:
            cls(**kwargs)
        assert info.value.field == field and info.value.kind == "placer"
        assert info.value.name == cls.name


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("placer.seed", 2**31),
        ("placer.workers", 2**62),
        ("placer.workers", -3),
        ("placer.time-limit", -1),
        ("placer.deterministic-time", -1),
    ],
)
def test_placer_parameters_from_the_configuration_are_config_errors(key: str, value: int) -> None:
    config = Config.from_dict(
        {
            "actions": ["allocate"],
            "tiers": [[{"name": "gang"}]],
            "configurations": {"allocate": {"placer": "cpsat", key: value}},
        }
    )
    snap = Snapshot.from_dict(_two_rack_snapshot((1, 2), 2))
    with pytest.raises(ConfigError) as info:
        gs.schedule(snap, config)
    assert info.value.field == f"arguments.{key}" and info.value.name == "allocate"
    # the greedy placer ignores the solver arguments, but they are still checked
    config = Config.from_dict(
        {
            "actions": ["allocate"],
            "tiers": [[{"name": "gang"}]],
            "configurations": {"allocate": {key: value}},
        }
    )
    with pytest.raises(ConfigError):
        gs.schedule(snap, config)


def test_placer_workers_beyond_int64_is_a_config_error() -> None:
    snap = Snapshot.from_dict(_two_rack_snapshot((1, 2), 2))
    with pytest.raises(ConfigError, match=r"placer\.workers"):
        config = Config.from_dict(
            {
                "actions": ["allocate"],
                "tiers": [[{"name": "gang"}]],
                "configurations": {"allocate": {"placer": "cpsat", "placer.workers": 2**63}},
            }
        )
        gs.schedule(snap, config)


def test_placer_parameters_in_range_from_the_configuration_work() -> None:
    config = Config.from_dict(
        {
            "actions": ["allocate"],
            "tiers": [[{"name": "gang"}]],
            "configurations": {
                "allocate": {"placer": "cpsat", "placer.seed": 2**31 - 1, "placer.workers": 1}
            },
        }
    )
    snap = Snapshot.from_dict(_two_rack_snapshot((1, 2), 2))
    assert len(gs.schedule(snap, config).binds) == 3


def test_joint_aggregate_counts_a_domain_shared_by_two_families() -> None:
    # racks r6..r9 are candidates both of a soft gang (rack level) and of a hard tier-2 gang
    # (a rack under no spine is its own tier-2 domain); the aggregate model gave each rack to
    # one family only and placed weight 1 where 2 fit
    nodes = [Node(name=f"n{i}", allocatable={"cpu": 8}) for i in range(10)]
    hns = [HyperNode(name=f"r{i}", tier=1, members=[f"n{i}"]) for i in range(10)]
    hns.append(HyperNode(name="s0", tier=2, members=["r0"]))
    topo = build_topology(Snapshot(nodes=nodes, hypernodes=hns))
    gpu_free = np.zeros((10, 4), dtype=np.int64)
    gpu_free[6:, 0] = 1000

    def gang(name: str, size: int, mode: TopologyMode, highest: int | None = None) -> GangRequest:
        return GangRequest(
            name=name,
            request=np.array([[1000, 2**30]]),
            counts=np.array([size]),
            mask=np.ones((1, 10), dtype=np.bool_),
            gpu_count=np.array([1]),
            gpu_milli=np.array([1000]),
            mode=mode,
            highest_tier=highest,
        )

    problem = PlacementProblem(
        free=np.array([[1000, 64 * 2**30]] * 10, dtype=np.int64),
        gpu_free=gpu_free,
        gpu_capacity=np.full(10, 1000),
        gpu_sharing=np.ones(10, dtype=np.bool_),
        topology=topo,
        gangs=(
            gang("g0", 4, TopologyMode.SOFT),
            gang("g1", 1, TopologyMode.SOFT),
            gang("g2", 1, TopologyMode.HARD, 2),
        ),
        weights=np.array([1, 1, 1]),
    )
    fast = JointCpSatPlacer().place(problem)
    slow = JointCpSatPlacer(aggregate=False, max_domains=1000).place(problem)
    validate_placement(problem, fast)
    assert [g.placed for g in fast.gangs] == [g.placed for g in slow.gangs] == [False, True, True]
