"""Session glue: a job's pending tasks placed as one gang through a placer."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from _builders import gpu_node
from gangsched.actions._gang_placement import place_job, session_topology
from gangsched.errors import ConfigError
from gangsched.model.snapshot import Snapshot
from gangsched.placement.cpsat import CpSatPlacer
from gangsched.placement.greedy import GreedyPlacer
from gangsched.plugins.network_topology import NetworkTopologyAwarePlugin
from gangsched.scheduler import open_session
from gangsched.session.core import Session, TaskState
from gangsched.session.statement import Statement

PLACERS: list[GreedyPlacer | CpSatPlacer] = [
    GreedyPlacer(),
    CpSatPlacer(time_limit_s=5.0, workers=1, seed=0),
]


def _cluster(
    jobs: list[dict[str, Any]], tasks: list[dict[str, Any]], racks: int = 4, per_rack: int = 4
) -> Snapshot:
    nodes = [
        gpu_node(f"r{r}n{i}", cpu=32, pods=110, model="H100")
        for r in range(racks)
        for i in range(per_rack)
    ]
    hns = [
        {"name": f"r{r}", "tier": 1, "members": [f"r{r}n{i}" for i in range(per_rack)]}
        for r in range(racks)
    ]
    hns.append({"name": "spine", "tier": 2, "members": [f"r{r}" for r in range(racks)]})
    return Snapshot.from_dict(
        {"nodes": nodes, "hypernodes": hns, "queues": [{"name": "q"}], "jobs": jobs, "tasks": tasks}
    )


def _job(name: str, n: int, gpus: int, topo: dict[str, Any] | None, **task: Any) -> Any:
    job: dict[str, Any] = {"name": name, "queue": "q", "min_available": n, "phase": "Inqueue"}
    if topo is not None:
        job["network_topology"] = topo
    tasks = [
        {"name": f"{name}-{i}", "job": name, "request": {"cpu": 1, "nvidia.com/gpu": gpus}, **task}
        for i in range(n)
    ]
    return job, tasks


def _pending(ssn: Session, job: int) -> list[int]:
    return [int(t) for t in ssn.job_tasks(job) if ssn.task_state[t] == TaskState.PENDING]


@pytest.mark.parametrize("placer", PLACERS, ids=["greedy", "cpsat"])
def test_hard_tier1_gang_lands_in_one_rack_and_applies_cleanly(placer: Any) -> None:
    job, tasks = _job("train", 16, 2, {"mode": "hard", "highest_tier_allowed": 1})
    ssn = open_session(_cluster([job], tasks))
    out = place_job(ssn, 0, _pending(ssn, 0), placer)
    assert isinstance(out, list) and len(out) == 16
    topo = session_topology(ssn)
    racks = {int(topo.domain_of[0][node]) for _, node, _, _ in out}
    assert len(racks) == 1
    assert len({node for _, node, _, _ in out}) == 4  # 32 GPUs on four full 8-GPU nodes
    assert not any(p for *_, p in out)
    stmt = Statement(ssn)
    for task, node, gpus, _ in out:
        assert len(gpus) == 2
        stmt.allocate(task, node, gpus)
    assert ssn.gpu_used.shape == ssn.arrays.gpu_node.shape  # one entry per device
    assert (ssn.gpu_used <= ssn.arrays.gpu_capacity[ssn.arrays.gpu_node]).all()
    assert int(ssn.gpu_used.sum()) == 16 * 2 * 1000
    assert (ssn.used <= ssn.arrays.allocatable).all()
    assert ssn.points.job_ready(0)


@pytest.mark.parametrize("placer", PLACERS, ids=["greedy", "cpsat"])
def test_hard_gang_too_big_for_a_rack_gets_a_reason(placer: Any) -> None:
    job, tasks = _job("huge", 5, 8, {"mode": "hard", "highest_tier_allowed": 1})
    ssn = open_session(_cluster([job], tasks))
    out = place_job(ssn, 0, _pending(ssn, 0), placer)
    assert isinstance(out, str)
    assert "huge" in out and "tier <= 1" in out


@pytest.mark.parametrize("placer", PLACERS, ids=["greedy", "cpsat"])
def test_soft_gang_widens_and_plain_gang_is_unconstrained(placer: Any) -> None:
    soft, soft_tasks = _job("soft", 5, 8, {"mode": "soft"})
    plain, plain_tasks = _job("plain", 3, 8, None)
    ssn = open_session(_cluster([soft, plain], soft_tasks + plain_tasks))
    out = place_job(ssn, 0, _pending(ssn, 0), placer)
    assert isinstance(out, list) and len(out) == 5
    racks = {int(session_topology(ssn).domain_of[0][n]) for _, n, _, _ in out}
    assert len(racks) == 2
    out2 = place_job(ssn, 1, _pending(ssn, 1), placer)
    assert isinstance(out2, list) and len(out2) == 3


def test_running_tasks_pin_the_rack_and_releasing_ones_pipeline() -> None:
    job, tasks = _job("elastic", 6, 8, {"mode": "hard", "highest_tier_allowed": 1})
    job["min_available"] = 2
    # two tasks already run in rack r2 (nodes r2n0, r2n1), a stranger is releasing r2n2
    tasks[0].update(phase="Running", node="r2n0", gpu_indices=list(range(8)))
    tasks[1].update(phase="Running", node="r2n1", gpu_indices=list(range(8)))
    other, other_tasks = _job("other", 2, 8, None)
    other_tasks[0].update(phase="Releasing", node="r2n2", gpu_indices=list(range(8)))
    other_tasks[1].update(phase="Running", node="r2n3", gpu_indices=list(range(8)))
    ssn = open_session(_cluster([job, other], tasks + other_tasks))
    pending = _pending(ssn, 0)
    # one more task fits only on r2n2's releasing GPUs → pipelined there
    out = place_job(ssn, 0, pending[:1], GreedyPlacer())
    assert isinstance(out, list) and len(out) == 1
    _, node, gpus, pipelined = out[0]
    assert ssn.arrays.node_names[node] == "r2n2" and pipelined and gpus == tuple(range(8))
    # four more cannot fit in rack r2 at all
    out = place_job(ssn, 0, pending, GreedyPlacer())
    assert isinstance(out, str) and "elastic" in out


def test_identical_sessions_give_identical_cpsat_assignments() -> None:
    job, tasks = _job("train", 12, 2, {"mode": "hard", "highest_tier_allowed": 2})
    snap = _cluster([job], tasks)
    outs = []
    for _ in range(2):
        ssn = open_session(snap)
        outs.append(place_job(ssn, 0, _pending(ssn, 0), PLACERS[1]))
    assert outs[0] == outs[1] and isinstance(outs[0], list)
    nodes = np.unique([n for _, n, _, _ in outs[0]])
    assert nodes.size == 3  # 12 × 2 GPUs on 8-GPU nodes


def test_network_topology_plugin_packs_normal_pods_into_used_racks() -> None:
    # rack r1 already holds a 4-core task; a normal 2-core pod scores higher there
    nodes = [
        {"name": f"r{r}n{i}", "allocatable": {"cpu": 8, "memory": "32Gi", "pods": 10}}
        for r in range(2)
        for i in range(2)
    ]
    hns = [
        {"name": "r0", "tier": 1, "members": ["r0n0", "r0n1"]},
        {"name": "r1", "tier": 1, "members": ["r1n0", "r1n1"]},
        {"name": "all", "tier": 2, "members": ["r0", "r1"]},
    ]
    jobs = [
        {"name": "run", "queue": "q", "min_available": 1, "phase": "Running"},
        {"name": "new", "queue": "q", "min_available": 1, "phase": "Inqueue"},
        {
            "name": "topo",
            "queue": "q",
            "min_available": 1,
            "phase": "Inqueue",
            "network_topology": {"mode": "hard", "highest_tier_allowed": 1},
        },
    ]
    tasks = [
        {"name": "run-0", "job": "run", "request": {"cpu": 4}, "phase": "Running", "node": "r1n0"},
        {"name": "new-0", "job": "new", "request": {"cpu": 2}},
        {"name": "topo-0", "job": "topo", "request": {"cpu": 2}},
    ]
    snap = Snapshot.from_dict(
        {"nodes": nodes, "hypernodes": hns, "queues": [{"name": "q"}], "jobs": jobs, "tasks": tasks}
    )
    ssn = open_session(snap)
    rows = np.arange(4, dtype=np.intp)
    plugin = NetworkTopologyAwarePlugin({"hypernode.binpack.normal-pod.fading": 0.5})
    score = plugin.node_score(ssn, ssn.templates[0], rows)
    # tier 1: r0 → 2/16, r1 → 6/16; tier 2 and the cluster-wide top tier 3: 6/32 for all;
    # weights 1, 0.5 and 0.25
    expect_r0 = (1.0 * 2 / 16 + 0.75 * 6 / 32) / 1.75 * 100
    expect_r1 = (1.0 * 6 / 16 + 0.75 * 6 / 32) / 1.75 * 100
    assert np.allclose(score, [expect_r0, expect_r0, expect_r1, expect_r1])
    assert (plugin.node_score(ssn, ssn.templates[1], rows) == 0).all()  # topology pod
    off = NetworkTopologyAwarePlugin({"hypernode.binpack.normal-pod.enable": "false"})
    assert (off.node_score(ssn, ssn.templates[0], rows) == 0).all()
    with pytest.raises(ConfigError, match="network-topology-aware"):
        NetworkTopologyAwarePlugin({"hypernode.binpack.normal-pod.fading": "x"})
