"""capacity: explicit deserved / guarantee / capability, flat and as a queue tree."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from _builders import gpu_nodes
from gangsched.config import Config
from gangsched.errors import ConfigError, SnapshotError
from gangsched.model.snapshot import Snapshot
from gangsched.scheduler import open_session, schedule

Obj = dict[str, object]
GPU = "nvidia.com/gpu"


def nodes(n: int, *, gpus: int = 8, cpu: int = 64) -> list[Obj]:
    return gpu_nodes(n, gpus=gpus, cpu=cpu)


def flood(queue: str, n: int, *, gpu: int = 1) -> tuple[list[Obj], list[Obj]]:
    jobs: list[Obj] = [{"name": f"{queue}-{i}", "queue": queue, "creation": i} for i in range(n)]
    tasks: list[Obj] = [
        {"name": f"{queue}-{i}-0", "job": f"{queue}-{i}", "gpu_request": {"count": gpu}}
        for i in range(n)
    ]
    return jobs, tasks


def build(
    node_list: list[Obj], queues: list[Obj], *floods: tuple[list[Obj], list[Obj]]
) -> Snapshot:
    jobs = [j for f in floods for j in f[0]]
    tasks = [t for f in floods for t in f[1]]
    return Snapshot.from_dict({"nodes": node_list, "queues": queues, "jobs": jobs, "tasks": tasks})


def config(*, hierarchy: bool) -> Config:
    return Config.from_dict(
        {
            "actions": ["enqueue", "allocate"],
            "tiers": [
                [{"name": "priority"}, {"name": "gang"}],
                [
                    {"name": "drf"},
                    {"name": "predicates"},
                    {"name": "capacity", "enableHierarchy": hierarchy},
                    {"name": "nodeorder"},
                ],
            ],
        }
    )


FLAT = config(hierarchy=False)
TREE = config(hierarchy=True)


def bound(snap: Snapshot, cfg: Config) -> Counter[str]:
    d = schedule(snap, cfg)
    return Counter(snap.job(snap.task(b.task).job).queue for b in d.binds)


# ---------------------------------------------------------------------------------- flat


def test_flat_queue_borrows_idle_resources_up_to_its_capability() -> None:
    queues: list[Obj] = [
        {"name": "a", "deserved": {GPU: 4}, "capability": {GPU: 12}},
        {"name": "b", "deserved": {GPU: 4}},
    ]
    snap = build(nodes(2), queues, flood("a", 20))
    d = schedule(snap, FLAT)
    assert len(d.binds) == 12
    a = d.queues["a"]
    assert a.deserved_gpu == 4.0
    assert a.share == pytest.approx(3.0)
    assert a.overused


def test_flat_guarantee_of_another_queue_is_not_borrowed() -> None:
    queues: list[Obj] = [
        {"name": "a", "deserved": {GPU: 4}},
        {"name": "b", "deserved": {GPU: 4}, "guarantee": {GPU: 6}},
    ]
    snap = build(nodes(2), queues, flood("a", 20))
    d = schedule(snap, FLAT)
    assert len(d.binds) == 10  # 16 − b's guarantee of 6
    assert d.queues["a"].real_capability[GPU] == 10_000
    # b holds nothing and asks nothing, yet its deserved is floored at its guarantee
    assert d.queues["b"].deserved_gpu == 6.0


def test_flat_queue_without_deserved_goes_last() -> None:
    queues: list[Obj] = [{"name": "a", "deserved": {GPU: 8}}, {"name": "best-effort"}]
    snap = build(nodes(1), queues, flood("a", 6), flood("best-effort", 6))
    ssn = open_session(snap, FLAT)
    a, be = snap.queue_index["a"], snap.queue_index["best-effort"]
    assert ssn.queue_key(a) < ssn.queue_key(be)
    plugin = ssn.plugin("capacity")
    assert plugin is not None and plugin.share(ssn, be) == 1.0
    got = bound(snap, FLAT)
    assert got == {"a": 6, "best-effort": 2}


# ---------------------------------------------------------------------------------- tree

ORG: list[Obj] = [
    {"name": "org", "capability": {GPU: 8}},
    {"name": "team-a", "parent": "org", "deserved": {GPU: 4}},
    {"name": "team-b", "parent": "org", "deserved": {GPU: 4}},
]


def test_child_cannot_exceed_parent_capability_while_siblings_idle() -> None:
    snap = build(nodes(4), ORG, flood("team-a", 20))
    # flat, the parent means nothing: team-a takes what it asks
    assert bound(snap, FLAT) == {"team-a": 20}
    # in the tree it borrows its idle sibling's share, but only up to the parent's 8
    assert bound(snap, TREE) == {"team-a": 8}


def test_sibling_guarantee_is_respected() -> None:
    queues = [dict(q) for q in ORG]
    queues[2]["guarantee"] = {GPU: 3}
    snap = build(nodes(4), queues, flood("team-a", 20))
    d = schedule(snap, TREE)
    assert len(d.binds) == 5
    assert d.queues["team-a"].real_capability[GPU] == 5_000
    assert d.queues["team-b"].real_capability[GPU] == 8_000


def test_borrowing_is_set_by_capability() -> None:
    # capability == deserved: no borrowing from the idle sibling
    queues = [dict(q) for q in ORG]
    queues[1]["capability"] = {GPU: 4}
    snap = build(nodes(4), queues, flood("team-a", 20))
    assert bound(snap, TREE) == {"team-a": 4}


def test_busy_siblings_split_the_parent_by_share() -> None:
    snap = build(nodes(4), ORG, flood("team-a", 20), flood("team-b", 20))
    assert bound(snap, TREE) == {"team-a": 4, "team-b": 4}


def test_capability_inherited_per_unset_dimension() -> None:
    queues: list[Obj] = [
        {"name": "org", "capability": {GPU: 8, "cpu": 10}},
        {"name": "team", "parent": "org", "capability": {"cpu": 20}},
        {"name": "other", "guarantee": {"cpu": 4}},
    ]
    snap = build(nodes(2), queues, flood("team", 1))
    ssn = open_session(snap, TREE)
    cap = ssn.plugin("capacity")
    assert cap is not None
    cpu, gpu = ssn.arrays.spec.index("cpu"), ssn.arrays.spec.gpu_column
    team, org = snap.queue_index["team"], snap.queue_index["org"]
    assert cap.capability[team, cpu] == 20_000
    assert cap.capability[team, gpu] == 8_000
    assert np.isinf(cap.capability[team, ssn.arrays.spec.index("memory")])
    # org's room is the root's (unlimited) less the top level's guarantees, within its own cap
    assert cap.real_capability[org, cpu] == 10_000
    assert cap.real_capability[team, cpu] == 10_000
    assert cap.real_capability[team, gpu] == 8_000


def test_allocatable_checked_on_every_ancestor() -> None:
    # team's own capability allows 20 cores, but org's allows 10
    queues: list[Obj] = [
        {"name": "org", "capability": {"cpu": 10}},
        {"name": "team", "parent": "org", "capability": {"cpu": 20}},
    ]
    jobs: list[Obj] = [{"name": f"j{i}", "queue": "team", "creation": i} for i in range(16)]
    tasks: list[Obj] = [
        {"name": f"j{i}-0", "job": f"j{i}", "request": {"cpu": 1}} for i in range(16)
    ]
    snap = build(nodes(1), queues, (jobs, tasks))
    assert len(schedule(snap, TREE).binds) == 10


def test_jobs_only_in_leaf_queues() -> None:
    jobs: list[Obj] = [
        {"name": "sized", "queue": "org", "min_resources": {GPU: 1}},
        {"name": "unsized", "queue": "org"},
    ]
    tasks: list[Obj] = [
        {"name": "sized-0", "job": "sized", "gpu_request": {"count": 1}},
        {"name": "unsized-0", "job": "unsized", "gpu_request": {"count": 1}},
    ]
    snap = build(nodes(1), ORG, (jobs, tasks))
    d = schedule(snap, TREE)
    assert d.binds == ()
    assert d.jobs["sized"].phase == "Pending"
    assert "only leaf queues hold jobs" in d.jobs["sized"].message
    # without min_resources enqueue does not ask the plugins (as Volcano); allocate refuses
    assert d.jobs["unsized"].phase == "Inqueue"
    assert "cannot take this task" in d.task_reasons["unsized-0"]


def test_sibling_order_at_lowest_common_ancestor() -> None:
    queues: list[Obj] = [
        {"name": "x", "deserved": {GPU: 4}},
        {"name": "x1", "parent": "x", "deserved": {GPU: 2}},
        {"name": "x2", "parent": "x", "deserved": {GPU: 2}},
        {"name": "y", "deserved": {GPU: 4}},
        {"name": "y1", "parent": "y", "deserved": {GPU: 4}},
    ]
    running: list[Obj] = [{"name": "x1-run", "queue": "x1", "phase": "Running"}]
    run_tasks: list[Obj] = [
        {
            "name": f"x1-run-{i}",
            "job": "x1-run",
            "gpu_request": {"count": 1},
            "phase": "Running",
            "node": "n0",
            "gpu_indices": [i],
        }
        for i in range(4)
    ]
    snap = build(nodes(2), queues, (running, run_tasks), flood("x2", 2), flood("y1", 2))
    ssn = open_session(snap, TREE)
    key = {q: ssn.queue_key(snap.queue_index[q]) for q in ("x1", "x2", "y1")}
    # x holds 4 of its 4 (share 1), y nothing: every leaf under y goes before every leaf
    # under x, though x2 itself holds nothing
    assert key["y1"] < key["x2"] < key["x1"]
    cap = ssn.plugin("capacity")
    assert cap is not None
    assert cap.share(ssn, snap.queue_index["x"]) == pytest.approx(1.0)
    assert cap.share(ssn, snap.queue_index["x1"]) == pytest.approx(2.0)


def test_explicit_root_queue_caps_everything() -> None:
    queues: list[Obj] = [
        {"name": "root", "capability": {GPU: 4}},
        {"name": "a", "parent": "root"},
        {"name": "b"},  # no parent: under the root as well
    ]
    snap = build(nodes(2), queues, flood("a", 10), flood("b", 10))
    assert sum(bound(snap, TREE).values()) == 4


def test_root_queue_with_a_parent_is_rejected() -> None:
    queues: list[Obj] = [{"name": "root", "parent": "top"}, {"name": "top"}]
    with pytest.raises(SnapshotError, match="queue 'root': parent"):
        open_session(build(nodes(1), queues, flood("top", 1)), TREE)


def test_hierarchy_with_an_incompatible_plugin_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="conflicts with proportion"):
        Config.from_dict(
            {
                "actions": ["allocate"],
                "tiers": [[{"name": "drf", "enableHierarchy": True}, {"name": "proportion"}]],
            }
        )


def test_tree_admission_checks_ancestors() -> None:
    queues = [dict(q) for q in ORG]
    jobs: list[Obj] = [
        {"name": f"j{i}", "queue": "team-a", "creation": i, "min_resources": {GPU: 6}}
        for i in range(2)
    ]
    tasks: list[Obj] = [
        {"name": f"j{i}-0", "job": f"j{i}", "gpu_request": {"count": 6}} for i in range(2)
    ]
    snap = build(nodes(4), queues, (jobs, tasks))
    cfg = Config.from_dict(
        {"actions": ["enqueue"], "tiers": [[{"name": "capacity", "enableHierarchy": True}]]}
    )
    d = schedule(snap, cfg)
    assert d.jobs["j0"].phase == "Inqueue"
    assert d.jobs["j1"].phase == "Pending"
    assert "quota insufficient" in d.jobs["j1"].message
