"""Topology-aware gangs through the full scheduling cycle (allocate + placers)."""

from __future__ import annotations

from typing import Any

import pytest

import gangsched as gs
from _builders import gpu_node
from gangsched.config import Config
from gangsched.placement import CpSatPlacer, GreedyPlacer
from gangsched.testing.invariants import check_capacity, check_gang_atomicity


def cluster(
    jobs: list[dict[str, Any]],
    tasks: list[dict[str, Any]],
    running: list[dict[str, Any]] | None = None,
) -> gs.Snapshot:
    """2 spines x 4 racks x 8 nodes x 8 GPUs."""
    nodes = [
        gpu_node(f"s{s}r{r}n{n}", memory="512Gi", model="H100")
        for s in range(2)
        for r in range(4)
        for n in range(8)
    ]
    racks = [
        {"name": f"s{s}r{r}", "tier": 1, "members": [f"s{s}r{r}n{n}" for n in range(8)]}
        for s in range(2)
        for r in range(4)
    ]
    spines = [
        {"name": f"s{s}", "tier": 2, "members": [f"s{s}r{r}" for r in range(4)]} for s in range(2)
    ]
    return gs.Snapshot.from_dict(
        {
            "nodes": nodes,
            "hypernodes": racks + spines,
            "queues": [{"name": "default"}],
            "jobs": jobs,
            "tasks": (running or []) + tasks,
        }
    )


def gang(
    name: str, n: int, gpus: int, tier: int | None, mode: str = "hard"
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    job: dict[str, Any] = {"name": name, "min_available": n, "phase": "Inqueue"}
    if tier is not None:
        job["network_topology"] = {"mode": mode, "highest_tier_allowed": tier}
    tasks = [
        {"name": f"{name}-{i}", "job": name, "request": {"cpu": 1}, "gpu_request": {"count": gpus}}
        for i in range(n)
    ]
    return job, tasks


def racks_of(d: gs.Decisions) -> set[str]:
    return {b.node.split("n")[0] for b in d.binds}


def spines_of(d: gs.Decisions) -> set[str]:
    return {b.node.split("r")[0] for b in d.binds}


@pytest.mark.parametrize(
    "placer", [None, GreedyPlacer(), CpSatPlacer(workers=1, seed=0, max_deterministic_time=2.0)]
)
def test_gangs_of_8_64_and_256_gpus_land_in_node_rack_spine(placer: Any) -> None:
    for n, gpus, tier, expect_racks, expect_nodes in (
        (1, 8, 1, 1, 1),  # one 8-GPU task: one node
        (8, 8, 1, 1, 8),  # 64 GPUs: one rack
        (32, 8, 2, 4, 32),  # 256 GPUs: one spine
    ):
        job, tasks = gang("g", n, gpus, tier)
        s = cluster([job], tasks)
        d = gs.schedule(s, placer=placer)
        assert len(d.binds) == n
        assert len({b.node for b in d.binds}) == expect_nodes
        assert len(racks_of(d)) == expect_racks
        assert len(spines_of(d)) == 1
        check_capacity(s, d)
        check_gang_atomicity(s, d)


def test_small_gang_of_one_gpu_tasks_stays_in_one_node() -> None:
    job, tasks = gang("g", 8, 1, 1)
    d = gs.schedule(cluster([job], tasks))
    assert len({b.node for b in d.binds}) == 1


def test_hard_constraint_that_cannot_hold_leaves_gang_pending_with_reason() -> None:
    # 72 GPUs do not fit one rack (64): hard tier 1 → unschedulable
    job, tasks = gang("big", 9, 8, 1)
    d = gs.schedule(cluster([job], tasks))
    assert d.binds == ()
    assert d.jobs["big"].reason == "Unschedulable"
    assert d.task_reasons["big-0"]
    assert "big" in d.jobs["big"].message or "tier" in d.jobs["big"].message


def test_soft_constraint_widens_to_the_next_tier() -> None:
    job, tasks = gang("big", 9, 8, 1, mode="soft")
    d = gs.schedule(cluster([job], tasks))
    assert len(d.binds) == 9
    assert len(racks_of(d)) == 2 and len(spines_of(d)) == 1


def test_hard_gang_avoids_a_partly_used_rack() -> None:
    # rack s0r0 has one busy node: a 64-GPU hard tier-1 gang goes to a free rack whole
    busy = {"name": "busy", "min_available": 1, "phase": "Running"}
    run = [
        {
            "name": "busy-0",
            "job": "busy",
            "request": {"cpu": 1},
            "gpu_request": {"count": 8},
            "phase": "Running",
            "node": "s0r0n0",
            "gpu_indices": list(range(8)),
        }
    ]
    job, tasks = gang("g", 8, 8, 1)
    d = gs.schedule(cluster([busy, job], tasks, run))
    assert len(d.binds) == 8 and len(racks_of(d)) == 1
    assert "s0r0" not in racks_of(d)


@pytest.mark.parametrize("name", ["cpsat", "cpsat-joint"])
def test_cpsat_placers_from_the_allocate_configuration(name: str) -> None:
    config = Config.from_dict(
        {
            "actions": ["allocate"],
            "tiers": [
                [{"name": "priority"}, {"name": "gang"}],
                [{"name": "predicates"}, {"name": "binpack"}],
            ],
            "configurations": {"allocate": {"placer": name, "placer.deterministic-time": 2.0}},
        }
    )
    jobs, tasks = [], []
    for k in range(3):
        job, ts = gang(f"j{k}", 4, 8, 1)
        jobs.append(job)
        tasks += ts
    s = cluster(jobs, tasks)
    d1 = gs.schedule(s, config)
    d2 = gs.schedule(s, config)
    assert d1.to_dict() == d2.to_dict()
    assert len(d1.binds) == 12
    for k in range(3):
        assert len({b.node.split("n")[0] for b in d1.binds if b.task.startswith(f"j{k}-")}) == 1
    check_capacity(s, d1)


def test_unknown_placer_is_a_config_error() -> None:
    config = Config.from_dict(
        {
            "actions": ["allocate"],
            "tiers": [[{"name": "gang"}]],
            "configurations": {"allocate": {"placer": "magic"}},
        }
    )
    job, tasks = gang("g", 1, 1, None)
    with pytest.raises(gs.ConfigError, match="placer"):
        gs.schedule(cluster([job], tasks), config)


def test_a_gang_after_another_in_one_cycle_sees_what_the_first_took() -> None:
    # Gang a takes half of one node's GPUs; gang b needs a whole node. Both are topology gangs
    # (placed by the placer, not task by task), tried one after the other in one cycle. The
    # half-used node still passes b's one-replica fit, so only the placer's view of the free
    # devices keeps b off it: a view from before a's placement would put b there, the gate
    # would refuse, and b would wait although the other node is empty.
    nodes = [
        {"name": f"n{i}", "allocatable": {"cpu": 64, "memory": "256Gi"}, "gpus": {"count": 8}}
        for i in range(2)
    ]
    hard = {"mode": "hard", "highest_tier_allowed": 1}
    snap = gs.Snapshot.from_dict(
        {
            "nodes": nodes,
            "hypernodes": [{"name": f"h{i}", "tier": 1, "members": [f"n{i}"]} for i in range(2)],
            "queues": [{"name": "default"}],
            "jobs": [
                {"name": "a", "min_available": 2, "network_topology": hard},
                {"name": "b", "min_available": 4, "network_topology": hard},
            ],
            "tasks": [
                {"name": f"{j}-{k}", "job": j, "request": {"cpu": 4}, "gpu_request": {"count": 2}}
                for j, n in (("a", 2), ("b", 4))
                for k in range(n)
            ],
        }
    )
    d = gs.schedule(snap, Config.default())
    where = {b.task: b.node for b in d.binds}
    assert len(where) == 6, d.jobs["b"].reason
    assert {where["a-0"], where["a-1"]} == {"n0"}
    assert {where[f"b-{k}"] for k in range(4)} == {"n1"}
    check_capacity(snap, d)
    check_gang_atomicity(snap, d)


def test_a_gang_tried_again_in_one_cycle_is_worded_for_the_occupancy_it_met() -> None:
    # Two allocate passes in one cycle: gang g fails in the first (the best node holds 3 of its
    # 4 replicas), job p then takes two GPUs there, and g fails again in the second pass, where
    # the best node holds 2. A failed greedy placement is kept for the same job on the same
    # occupancy; p's placement changed the occupancy, so the second failure is worded anew.
    nodes = [
        {"name": f"n{i}", "allocatable": {"cpu": 64, "memory": "256Gi"}, "gpus": {"count": 8}}
        for i in range(2)
    ]
    held = [
        {
            "name": f"r{i}",
            "job": "r",
            "request": {"cpu": 1},
            "gpu_request": {"count": count},
            "phase": "Running",
            "node": f"n{i}",
            "gpu_indices": list(range(count)),
        }
        for i, count in ((0, 4), (1, 2))
    ]
    snap = gs.Snapshot.from_dict(
        {
            "nodes": nodes,
            "hypernodes": [{"name": f"h{i}", "tier": 1, "members": [f"n{i}"]} for i in range(2)],
            "queues": [{"name": "default"}],
            "jobs": [
                {"name": "r", "min_available": 1, "phase": "Running"},
                {
                    "name": "g",
                    "min_available": 4,
                    "priority": 10,
                    "network_topology": {"mode": "hard", "highest_tier_allowed": 1},
                },
                {"name": "p", "min_available": 1, "priority": 1},
            ],
            "tasks": held
            + [
                {"name": f"g-{k}", "job": "g", "request": {"cpu": 1}, "gpu_request": {"count": 2}}
                for k in range(4)
            ]
            + [{"name": "p-0", "job": "p", "request": {"cpu": 1}, "gpu_request": {"count": 2}}],
        }
    )
    tiers = [
        [{"name": "priority"}, {"name": "gang"}],
        [{"name": "predicates"}, {"name": "nodeorder"}],
    ]
    once = Config.from_dict({"actions": ["enqueue", "allocate"], "tiers": tiers})
    # retry: always — gang-aware retry would carry g's first words into the second pass
    # (p's placement only took room), marked as carried
    twice = Config.from_dict(
        {
            "actions": ["enqueue", "allocate", "allocate"],
            "tiers": tiers,
            "configurations": {"allocate": {"retry": "always"}},
        }
    )
    first = gs.schedule(snap, once)
    assert [(b.task, b.node) for b in first.binds] == [("p-0", "n1")]
    assert "domain 'h1') holds at most 3 of them" in first.jobs["g"].message
    again = gs.schedule(snap, twice)
    assert [(b.task, b.node) for b in again.binds] == [("p-0", "n1")]
    assert "holds at most 2 of them" in again.jobs["g"].message, again.jobs["g"].message
    carried = gs.schedule(
        snap, Config.from_dict({"actions": ["enqueue", "allocate", "allocate"], "tiers": tiers})
    )
    assert carried.binds == again.binds
    assert carried.jobs["g"].message == "carried: " + first.jobs["g"].message
