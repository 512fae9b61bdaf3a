"""The snapshot: one named test per validation rule, the interchange round trip, immutability.

Every rejection test asserts the error type (SnapshotError, never a bare KeyError/ValueError)
and that the message names the object (kind and name) and the field.
"""

from __future__ import annotations

import copy
import json
import pickle
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangsched.errors import SnapshotError
from gangsched.model import GpuRequest, Gpus, Job, Node, Queue, Resources, Task, TaskPhase
from gangsched.model.snapshot import Snapshot
from gangsched.testing.strategies import snapshots

GPU = "nvidia.com/gpu"


# ------------------------------------------------------------------------------------------
# Helpers


def base() -> dict[str, Any]:
    """A small valid snapshot in the interchange format: two nodes (one with 4 GPUs),
    a two-tier topology, two queues, one running gang and one pending gang."""
    return {
        "nodes": [
            {"name": "n1", "allocatable": {"cpu": 8, "memory": "32Gi", "pods": 3}},
            {
                "name": "n2",
                "allocatable": {"cpu": "16", "memory": "64Gi"},
                "gpus": {"count": 4, "model": "A100"},
            },
        ],
        "hypernodes": [
            {"name": "s1", "tier": 1, "members": ["n1"]},
            {"name": "s2", "tier": 1, "members": ["n2"]},
            {"name": "spine", "tier": 2, "members": ["s1", "s2"]},
        ],
        "queues": [{"name": "default"}, {"name": "team", "parent": "default", "weight": 2}],
        "jobs": [
            {"name": "train", "queue": "team", "min_available": 2, "phase": "Running"},
            {"name": "infer", "queue": "default", "min_available": 1},
        ],
        "tasks": [
            {
                "name": "train-0",
                "job": "train",
                "request": {"cpu": 2, "memory": "8Gi"},
                "gpu_request": {"count": 2},
                "phase": "Running",
                "node": "n2",
                "gpu_indices": [0, 1],
            },
            {
                "name": "train-1",
                "job": "train",
                "request": {"cpu": 2, "memory": "8Gi"},
                "phase": "Running",
                "node": "n1",
            },
            {"name": "infer-0", "job": "infer", "request": {"cpu": "500m"}},
        ],
    }


@contextmanager
def rejects(kind: str, name: str, field: str, *, says: str = "") -> Iterator[None]:
    """Expect a SnapshotError about ``kind name`` at ``field``, all named in the message."""
    with pytest.raises(SnapshotError) as info:
        yield
    err = info.value
    message = str(err)
    assert err.kind == kind, message
    assert err.name == name, message
    assert err.field == field, message
    assert (f"{kind} {name!r}" if name else kind) in message
    assert field in message
    if says:
        assert says in message, message


def running(name: str, node: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "job": "train", "phase": "Running", "node": node, **extra}


def test_base_is_valid() -> None:
    s = Snapshot.from_dict(base())
    assert [n.name for n in s.nodes] == ["n1", "n2"]
    assert s.node("n2").gpus == Gpus(count=4, model="A100")
    assert s.job("train").min_available == 2
    assert s.queue("team").parent == "default"
    assert s.task("infer-0").request == {"cpu": 500}
    assert [t.name for t in s.tasks_of("train")] == ["train-0", "train-1"]
    assert s.node_index == {"n1": 0, "n2": 1}


# ------------------------------------------------------------------------------------------
# Duplicate names


@pytest.mark.parametrize(
    ("section", "kind", "name"),
    [
        ("nodes", "node", "n1"),
        ("hypernodes", "hypernode", "s1"),
        ("queues", "queue", "default"),
        ("jobs", "job", "train"),
        ("tasks", "task", "train-0"),
    ],
)
def test_rejects_duplicate_names(section: str, kind: str, name: str) -> None:
    d = base()
    d[section].append(copy.deepcopy(d[section][0]))
    with rejects(kind, name, "name", says="duplicate"):
        Snapshot.from_dict(d)


def test_rejects_duplicate_node_name() -> None:
    d = base()
    d["nodes"].append({"name": "n2"})
    with rejects("node", "n2", "name", says="duplicate"):
        Snapshot.from_dict(d)


def test_rejects_duplicate_task_name() -> None:
    d = base()
    d["tasks"].append({"name": "infer-0", "job": "train"})
    with rejects("task", "infer-0", "name", says="duplicate"):
        Snapshot.from_dict(d)


def test_rejects_hypernode_named_like_a_node() -> None:
    d = base()
    d["hypernodes"].append({"name": "n1", "tier": 3, "members": ["spine"]})
    with rejects("hypernode", "n1", "name"):
        Snapshot.from_dict(d)


# ------------------------------------------------------------------------------------------
# References


def test_rejects_task_of_unknown_job() -> None:
    d = base()
    d["tasks"][2]["job"] = "nope"
    with rejects("task", "infer-0", "job", says="'nope'"):
        Snapshot.from_dict(d)


def test_rejects_job_in_unknown_queue() -> None:
    d = base()
    d["jobs"][1]["queue"] = "nope"
    with rejects("job", "infer", "queue", says="'nope'"):
        Snapshot.from_dict(d)


def test_rejects_job_without_queue_when_no_default_queue() -> None:
    d = base()
    del d["jobs"][1]["queue"]
    d["queues"] = [{"name": "team"}]
    with rejects("job", "infer", "queue", says="'default'"):
        Snapshot.from_dict(d)


def test_rejects_queue_with_unknown_parent() -> None:
    d = base()
    d["queues"][1]["parent"] = "nope"
    with rejects("queue", "team", "parent", says="'nope'"):
        Snapshot.from_dict(d)


def test_rejects_queue_parent_cycle() -> None:
    d = base()
    d["queues"] = [
        {"name": "default"},
        {"name": "a", "parent": "b"},
        {"name": "b", "parent": "c"},
        {"name": "c", "parent": "a"},
    ]
    with rejects("queue", "a", "parent", says="cycle"):
        Snapshot.from_dict(d)


def test_rejects_queue_that_is_its_own_parent() -> None:
    d = base()
    d["queues"][1]["parent"] = "team"
    with rejects("queue", "team", "parent"):
        Snapshot.from_dict(d)


def test_rejects_running_task_on_unknown_node() -> None:
    d = base()
    d["tasks"][1]["node"] = "ghost"
    with rejects("task", "train-1", "node", says="'ghost'"):
        Snapshot.from_dict(d)


def test_rejects_finished_task_on_unknown_node() -> None:
    d = base()
    d["tasks"].append({"name": "old", "job": "infer", "phase": "Succeeded", "node": "ghost"})
    with rejects("task", "old", "node", says="'ghost'"):
        Snapshot.from_dict(d)


def test_rejects_running_task_without_node() -> None:
    d = base()
    del d["tasks"][1]["node"]
    with rejects("task", "train-1", "node", says="must name its node"):
        Snapshot.from_dict(d)


@pytest.mark.parametrize("phase", ["Bound", "Releasing", "Pipelined"])
def test_rejects_placed_phases_without_node(phase: str) -> None:
    d = base()
    d["tasks"][2].update(phase=phase)
    with rejects("task", "infer-0", "node"):
        Snapshot.from_dict(d)


# ------------------------------------------------------------------------------------------
# Topology


def test_rejects_hypernode_unknown_member() -> None:
    d = base()
    d["hypernodes"][0]["members"] = ["n1", "n9"]
    with rejects("hypernode", "s1", "members", says="'n9'"):
        Snapshot.from_dict(d)


def test_rejects_member_in_two_hypernodes_of_the_same_tier() -> None:
    d = base()
    d["hypernodes"][1]["members"] = ["n2", "n1"]
    with rejects("hypernode", "s2", "members", says="already belongs"):
        Snapshot.from_dict(d)


def test_rejects_hypernode_in_two_parents_of_the_same_tier() -> None:
    d = base()
    d["hypernodes"].append({"name": "spine-b", "tier": 2, "members": ["s2"]})
    with rejects("hypernode", "spine-b", "members", says="'spine'"):
        Snapshot.from_dict(d)


def test_rejects_hypernode_cycle() -> None:
    d = base()
    d["hypernodes"] = [
        {"name": "a", "tier": 2, "members": ["b"]},
        {"name": "b", "tier": 2, "members": ["a"]},
    ]
    with rejects("hypernode", "a", "members", says="not below"):
        Snapshot.from_dict(d)


def test_rejects_hypernode_listing_itself() -> None:
    d = base()
    d["hypernodes"][2]["members"] = ["s1", "spine"]
    with rejects("hypernode", "spine", "members", says="not below"):
        Snapshot.from_dict(d)


def test_rejects_hypernode_tier_inversion() -> None:
    d = base()
    d["hypernodes"][2]["tier"] = 1
    with rejects("hypernode", "spine", "members", says="tier 1"):
        Snapshot.from_dict(d)


def test_rejects_tier_one_hypernode_with_hypernode_members() -> None:
    d = base()
    d["hypernodes"][0]["members"] = ["s2"]
    with rejects("hypernode", "s1", "members"):
        Snapshot.from_dict(d)


def test_rejects_hypernode_mixing_nodes_and_hypernodes() -> None:
    d = base()
    d["hypernodes"][2]["members"] = ["s1", "n2"]
    with rejects("hypernode", "spine", "members", says="mixes"):
        Snapshot.from_dict(d)


def test_rejects_hypernode_member_listed_twice() -> None:
    d = base()
    d["hypernodes"][0]["members"] = ["n1", "n1"]
    with rejects("hypernode", "s1", "members", says="twice"):
        Snapshot.from_dict(d)


def test_rejects_hypernode_tier_below_one() -> None:
    d = base()
    d["hypernodes"][0]["tier"] = 0
    with rejects("hypernode", "s1", "tier"):
        Snapshot.from_dict(d)


# ------------------------------------------------------------------------------------------
# Node occupancy


@pytest.mark.parametrize(
    ("resource", "amount", "says"),
    [
        ("cpu", 7, "use 9000 of cpu but only 8000"),
        ("memory", "30Gi", f"use {38 * 2**30} of memory but only {32 * 2**30}"),
        ("example.com/nic", 1, "use 1 of example.com/nic but only 0"),
    ],
)
def test_rejects_running_tasks_overcommitting_a_node(
    resource: str, amount: object, says: str
) -> None:
    d = base()
    d["tasks"].append(running("train-2", "n1", request={resource: amount}))
    with rejects("node", "n1", f"allocatable.{resource}", says=says):
        Snapshot.from_dict(d)


def test_releasing_and_bound_tasks_occupy_but_pipelined_and_finished_do_not() -> None:
    d = base()
    big = {"cpu": 6}
    d["tasks"].append(running("train-2", "n1", request=big, phase="Pipelined"))
    d["tasks"].append(running("train-3", "n1", request=big, phase="Succeeded"))
    d["tasks"].append(running("train-4", "n1", request=big, phase="Failed"))
    Snapshot.from_dict(d)  # 2 + 6 pipelined/finished: nothing occupied beyond 2 cores
    for phase in ("Bound", "Releasing"):
        d2 = base()
        d2["tasks"].append(running("train-2", "n1", request=big, phase=phase))
        d2["tasks"].append(running("train-3", "n1", request={"cpu": 1}, phase=phase))
        with rejects("node", "n1", "allocatable.cpu", says="9000"):
            Snapshot.from_dict(d2)


def test_rejects_pod_limit_exceeded() -> None:
    d = base()
    d["tasks"] += [running(f"train-{i}", "n1") for i in range(2, 5)]
    with rejects("node", "n1", "allocatable.pods", says="4 tasks on a node with a pod limit of 3"):
        Snapshot.from_dict(d)


def test_pod_limit_reached_exactly_is_fine() -> None:
    d = base()
    d["tasks"] += [running(f"train-{i}", "n1") for i in range(2, 4)]
    Snapshot.from_dict(d)


def test_rejects_gpu_index_out_of_range() -> None:
    d = base()
    d["tasks"][0]["gpu_indices"] = [0, 4]
    with rejects("task", "train-0", "gpu_indices", says="index 4 out of range"):
        Snapshot.from_dict(d)


def test_rejects_gpu_task_on_node_without_gpus() -> None:
    d = base()
    d["tasks"][0]["node"] = "n1"
    with rejects("task", "train-0", "gpu_indices", says="has 0 GPUs"):
        Snapshot.from_dict(d)


def test_rejects_whole_gpu_double_booked() -> None:
    d = base()
    d["tasks"].append(running("train-2", "n2", gpu_request={"count": 1}, gpu_indices=[1]))
    with rejects("task", "train-2", "gpu_indices", says="already held by task 'train-0'"):
        Snapshot.from_dict(d)


def test_rejects_whole_gpu_on_a_shared_device() -> None:
    d = base()
    d["tasks"].append(running("a", "n2", gpu_request={"count": 1, "milli": 300}, gpu_indices=[3]))
    d["tasks"].append(running("b", "n2", gpu_request={"count": 1}, gpu_indices=[3]))
    with rejects("task", "b", "gpu_indices", says="already held by task 'a'"):
        Snapshot.from_dict(d)


def test_rejects_share_on_a_wholly_held_device() -> None:
    d = base()
    d["tasks"].append(running("a", "n2", gpu_request={"count": 1, "milli": 300}, gpu_indices=[0]))
    with rejects("task", "a", "gpu_indices", says="already held by task 'train-0'"):
        Snapshot.from_dict(d)


def test_rejects_fractional_shares_exceeding_1000_milli() -> None:
    d = base()
    for name, milli in (("a", 500), ("b", 300), ("c", 300)):
        d["tasks"].append(
            running(name, "n2", gpu_request={"count": 1, "milli": milli}, gpu_indices=[2])
        )
    with rejects("task", "c", "gpu_indices", says="1100 of 1000 milli-GPU"):
        Snapshot.from_dict(d)


def test_fractional_shares_up_to_1000_milli_fit() -> None:
    d = base()
    for name, milli in (("a", 500), ("b", 250), ("c", 250)):
        d["tasks"].append(
            running(name, "n2", gpu_request={"count": 1, "milli": milli}, gpu_indices=[2])
        )
    assert len(Snapshot.from_dict(d).tasks) == 6


def test_rejects_shares_on_a_node_without_gpu_sharing() -> None:
    d = base()
    d["nodes"][1]["gpus"]["sharing"] = False
    for name in ("a", "b"):
        d["tasks"].append(
            running(name, "n2", gpu_request={"count": 1, "milli": 250}, gpu_indices=[3])
        )
    with rejects("task", "b", "gpu_indices", says="already held by task 'a'"):
        Snapshot.from_dict(d)


def test_rejects_gpu_indices_count_mismatch() -> None:
    d = base()
    d["tasks"][0]["gpu_indices"] = [0]
    with rejects("task", "train-0", "gpu_indices", says="1 GPU indices for a request of 2"):
        Snapshot.from_dict(d)


def test_rejects_repeated_gpu_index() -> None:
    d = base()
    d["tasks"][0]["gpu_indices"] = [1, 1]
    with rejects("task", "train-0", "gpu_indices", says="repeated"):
        Snapshot.from_dict(d)


def test_rejects_gpu_indices_without_gpu_request() -> None:
    d = base()
    d["tasks"][1]["gpu_indices"] = [0]
    with rejects("task", "train-1", "gpu_indices"):
        Snapshot.from_dict(d)


# ------------------------------------------------------------------------------------------
# Unknown enum strings


def test_rejects_unknown_task_phase() -> None:
    d = base()
    d["tasks"][2]["phase"] = "Sleeping"
    with rejects("task", "infer-0", "phase", says="'Sleeping'"):
        Snapshot.from_dict(d)


def test_rejects_unknown_job_phase() -> None:
    d = base()
    d["jobs"][1]["phase"] = "running"
    with rejects("job", "infer", "phase", says="'running'"):
        Snapshot.from_dict(d)


def test_rejects_unknown_queue_state() -> None:
    d = base()
    d["queues"][0]["state"] = "Paused"
    with rejects("queue", "default", "state", says="'Paused'"):
        Snapshot.from_dict(d)


@pytest.mark.parametrize(
    ("section", "index", "key", "value", "kind", "name", "field"),
    [
        ("jobs", 1, "network_topology", {"mode": "strict"}, "job", "infer",
         "network_topology.mode"),
        ("jobs", 1, "policies", [{"event": "Boom", "action": "RestartJob"}], "job", "infer",
         "policies[0].event"),
        ("jobs", 1, "policies", [{"event": "PodEvicted", "action": "Retry"}], "job", "infer",
         "policies[0].action"),
        ("nodes", 0, "taints", [{"key": "k", "effect": "Sometimes"}], "node", "n1",
         "taints[0].effect"),
        ("tasks", 2, "tolerations", [{"key": "k", "operator": "In"}], "task", "infer-0",
         "tolerations[0].operator"),
        ("tasks", 2, "tolerations", [{"key": "k", "effect": "Never"}], "task", "infer-0",
         "tolerations[0].effect"),
    ],
)  # fmt: skip
def test_rejects_unknown_enum_strings(
    section: str, index: int, key: str, value: object, kind: str, name: str, field: str
) -> None:
    d = base()
    d[section][index][key] = value
    with rejects(kind, name, field):
        Snapshot.from_dict(d)


# ------------------------------------------------------------------------------------------
# Wrong types


WRONG_TYPES = [
    # (section, index, key, value, kind, name, field)
    ("nodes", 0, "allocatable", "8", "node", "n1", "allocatable"),
    ("nodes", 0, "allocatable", ["cpu"], "node", "n1", "allocatable"),
    ("nodes", 0, "allocatable", {"cpu": [1]}, "node", "n1", "allocatable.cpu"),
    ("nodes", 0, "allocatable", {"cpu": True}, "node", "n1", "allocatable.cpu"),
    ("nodes", 0, "labels", [], "node", "n1", "labels"),
    ("nodes", 0, "labels", "zone=a", "node", "n1", "labels"),
    ("nodes", 0, "labels", {"zone": 1}, "node", "n1", "labels"),
    ("nodes", 0, "taints", {}, "node", "n1", "taints"),
    ("nodes", 0, "taints", "dedicated", "node", "n1", "taints"),
    ("nodes", 0, "taints", ["dedicated"], "node", "n1", "taints[0]"),
    ("nodes", 0, "unschedulable", "yes", "node", "n1", "unschedulable"),
    ("nodes", 0, "gpus", 4, "node", "n1", "gpus"),
    ("nodes", 0, "gpus", {"count": "4"}, "node", "n1", "gpus.count"),
    ("nodes", 0, "gpus", {"count": 4, "sharing": "no"}, "node", "n1", "gpus.sharing"),
    ("hypernodes", 0, "members", "n1", "hypernode", "s1", "members"),
    ("hypernodes", 0, "members", {"n1": 1}, "hypernode", "s1", "members"),
    ("hypernodes", 0, "members", [1], "hypernode", "s1", "members[0]"),
    ("hypernodes", 0, "tier", "1", "hypernode", "s1", "tier"),
    ("queues", 0, "weight", "2", "queue", "default", "weight"),
    ("queues", 0, "weight", 1.5, "queue", "default", "weight"),
    ("queues", 0, "capability", "8", "queue", "default", "capability"),
    ("queues", 0, "reclaimable", "false", "queue", "default", "reclaimable"),
    ("queues", 1, "parent", 3, "queue", "team", "parent"),
    ("jobs", 1, "min_available", True, "job", "infer", "min_available"),
    ("jobs", 1, "min_available", "2", "job", "infer", "min_available"),
    ("jobs", 1, "min_task_member", [], "job", "infer", "min_task_member"),
    ("jobs", 1, "min_task_member", {"w": "1"}, "job", "infer", "min_task_member.w"),
    ("jobs", 1, "priority", None, "job", "infer", "priority"),
    ("jobs", 1, "queue", ["default"], "job", "infer", "queue"),
    ("jobs", 1, "network_topology", "hard", "job", "infer", "network_topology"),
    ("jobs", 1, "policies", {"event": "PodEvicted"}, "job", "infer", "policies"),
    ("jobs", 1, "policies", ["RestartJob"], "job", "infer", "policies[0]"),
    ("jobs", 1, "min_resources", 3, "job", "infer", "min_resources"),
    ("tasks", 2, "job", 1, "task", "infer-0", "job"),
    ("tasks", 2, "request", "500m", "task", "infer-0", "request"),
    ("tasks", 2, "gpu_request", 1, "task", "infer-0", "gpu_request"),
    ("tasks", 2, "gpu_request", {"count": 1, "models": "A100"}, "task", "infer-0",
     "gpu_request.models"),
    ("tasks", 2, "gpu_indices", 0, "task", "infer-0", "gpu_indices"),
    ("tasks", 2, "gpu_indices", ["0"], "task", "infer-0", "gpu_indices[0]"),
    ("tasks", 2, "node_selector", [], "task", "infer-0", "node_selector"),
    ("tasks", 2, "node_selector", "zone=a", "task", "infer-0", "node_selector"),
    ("tasks", 2, "tolerations", {"key": "k"}, "task", "infer-0", "tolerations"),
    ("tasks", 2, "tolerations", ["k"], "task", "infer-0", "tolerations[0]"),
    ("tasks", 2, "preemptable", 0, "task", "infer-0", "preemptable"),
    ("tasks", 2, "node", 5, "task", "infer-0", "node"),
    ("tasks", 2, "priority", 1.5, "task", "infer-0", "priority"),
    ("tasks", 2, "priority", 2**70, "task", "infer-0", "priority"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("section", "index", "key", "value", "kind", "name", "field"),
    WRONG_TYPES,
    ids=[f"{w[0]}.{w[2]}={w[3]!r}" for w in WRONG_TYPES],
)
def test_rejects_wrong_types(
    section: str, index: int, key: str, value: object, kind: str, name: str, field: str
) -> None:
    d = base()
    d[section][index][key] = value
    with rejects(kind, name, field):
        Snapshot.from_dict(d)


@pytest.mark.parametrize("name", [5, "", None, ["n"]], ids=repr)
def test_rejects_non_string_or_empty_names(name: object) -> None:
    d = base()
    d["nodes"][1]["name"] = name
    with rejects("node", "#1", "name"):
        Snapshot.from_dict(d)


@pytest.mark.parametrize("value", [[], "nodes", 3, (), b"x"], ids=repr)
def test_rejects_snapshot_that_is_not_a_mapping(value: object) -> None:
    with pytest.raises(SnapshotError) as info:
        Snapshot.from_dict(value)
    assert info.value.kind == "snapshot"
    assert "expected a mapping" in str(info.value)


@pytest.mark.parametrize("value", [{}, "n1", 3, {"name": "n1"}, True], ids=repr)
def test_rejects_record_list_that_is_not_a_list(value: object) -> None:
    d = base()
    d["nodes"] = value
    with rejects("snapshot", "", "nodes", says="expected a list"):
        Snapshot.from_dict(d)


@pytest.mark.parametrize("value", ["n1", ["n1"], 3, None], ids=repr)
def test_rejects_record_that_is_not_a_mapping(value: object) -> None:
    d = base()
    d["tasks"][1] = value
    with rejects("snapshot", "", "tasks[1]", says="expected a mapping"):
        Snapshot.from_dict(d)


def test_rejects_wrong_record_types_in_the_constructor() -> None:
    node = Node(name="n1")
    with rejects("snapshot", "", "queues[0]", says="expected Queue"):
        Snapshot(nodes=(node,), queues=(node,))  # type: ignore[arg-type]
    with rejects("snapshot", "", "nodes"):
        Snapshot(nodes="n1")  # type: ignore[arg-type]
    with rejects("snapshot", "", "jobs"):
        Snapshot(jobs={"j": Job(name="j")})  # type: ignore[dict-item]


# ------------------------------------------------------------------------------------------
# Unknown and missing keys


def test_rejects_unknown_top_level_key() -> None:
    d = base()
    d["pods"] = []
    with rejects("snapshot", "", "pods", says="unknown key"):
        Snapshot.from_dict(d)


@pytest.mark.parametrize(
    ("section", "index", "kind", "name"),
    [
        ("nodes", 0, "node", "n1"),
        ("hypernodes", 0, "hypernode", "s1"),
        ("queues", 0, "queue", "default"),
        ("jobs", 0, "job", "train"),
        ("tasks", 0, "task", "train-0"),
    ],
)
def test_rejects_unknown_record_key(section: str, index: int, kind: str, name: str) -> None:
    d = base()
    d[section][index]["colour"] = "blue"
    with rejects(kind, name, "colour", says="unknown key"):
        Snapshot.from_dict(d)


@pytest.mark.parametrize(
    ("section", "index", "key", "value", "kind", "name", "field"),
    [
        ("nodes", 1, "gpus", {"count": 4, "modle": "A100"}, "node", "n2", "gpus.modle"),
        ("nodes", 0, "taints", [{"key": "k", "efect": "NoSchedule"}], "node", "n1",
         "taints[0].efect"),
        ("jobs", 1, "network_topology", {"mode": "hard", "tier": 1}, "job", "infer",
         "network_topology.tier"),
        ("jobs", 1, "policies", [{"event": "PodEvicted", "action": "RestartJob", "x": 1}],
         "job", "infer", "policies[0].x"),
        ("tasks", 2, "gpu_request", {"count": 1, "memory": 1}, "task", "infer-0",
         "gpu_request.memory"),
        ("tasks", 2, "tolerations", [{"key": "k", "operator": "Exists", "seconds": 5}], "task",
         "infer-0", "tolerations[0].seconds"),
    ],
)  # fmt: skip
def test_rejects_unknown_nested_key(
    section: str, index: int, key: str, value: object, kind: str, name: str, field: str
) -> None:
    d = base()
    d[section][index][key] = value
    with rejects(kind, name, field, says="unknown key"):
        Snapshot.from_dict(d)


@pytest.mark.parametrize(
    ("section", "kind"),
    [("nodes", "node"), ("hypernodes", "hypernode"), ("queues", "queue"), ("jobs", "job"),
     ("tasks", "task")],
)  # fmt: skip
def test_rejects_missing_name(section: str, kind: str) -> None:
    d = base()
    del d[section][1]["name"]
    with rejects(kind, "#1", "name", says="missing"):
        Snapshot.from_dict(d)


def test_rejects_task_without_job() -> None:
    d = base()
    del d["tasks"][2]["job"]
    with rejects("task", "infer-0", "job", says="missing"):
        Snapshot.from_dict(d)


def test_rejects_hypernode_without_tier() -> None:
    d = base()
    del d["hypernodes"][0]["tier"]
    with rejects("hypernode", "s1", "tier", says="missing"):
        Snapshot.from_dict(d)


def test_rejects_gpus_without_count() -> None:
    d = base()
    del d["nodes"][1]["gpus"]["count"]
    with rejects("node", "n2", "gpus.count", says="missing"):
        Snapshot.from_dict(d)


def test_optional_keys_may_be_absent_or_null() -> None:
    d = {"nodes": None, "queues": [{"name": "default", "capability": None, "parent": None}]}
    s = Snapshot.from_dict(d)
    assert s.nodes == () and s.queue("default").capability is None
    assert Snapshot.from_dict({}) == Snapshot()
    t = Task.from_dict({"name": "t", "job": "j", "node_selector": None, "tolerations": None})
    assert t.node_selector == {} and t.tolerations == ()


# ------------------------------------------------------------------------------------------
# Quantities and GPUs inside records


@pytest.mark.parametrize(
    ("section", "index", "key", "value", "kind", "name", "field"),
    [
        ("nodes", 0, "allocatable", {"cpu": "-1"}, "node", "n1", "allocatable.cpu"),
        ("nodes", 0, "allocatable", {"memory": float("nan")}, "node", "n1", "allocatable.memory"),
        ("nodes", 0, "allocatable", {"memory": "8Ei"}, "node", "n1", "allocatable.memory"),
        ("nodes", 0, "allocatable", {"pods": "1.5"}, "node", "n1", "allocatable.pods"),
        ("nodes", 0, "allocatable", {GPU: "0.5"}, "node", "n1", f"allocatable.{GPU}"),
        ("nodes", 1, "allocatable", {GPU: 2}, "node", "n2", f"allocatable.{GPU}"),
        ("queues", 0, "guarantee", {"cpu": "lots"}, "queue", "default", "guarantee.cpu"),
        ("jobs", 1, "min_resources", {"memory": "1Xi"}, "job", "infer", "min_resources.memory"),
        ("tasks", 2, "request", {"cpu": float("inf")}, "task", "infer-0", "request.cpu"),
        ("tasks", 2, "request", {GPU: "0.5"}, "task", "infer-0", f"request.{GPU}"),
        ("tasks", 2, "gpu_request", {"count": 1, "milli": 0}, "task", "infer-0",
         "gpu_request.milli"),
    ],
)  # fmt: skip
def test_rejects_bad_quantities_in_records(
    section: str, index: int, key: str, value: object, kind: str, name: str, field: str
) -> None:
    d = base()
    d[section][index][key] = value
    with rejects(kind, name, field):
        Snapshot.from_dict(d)


# ------------------------------------------------------------------------------------------
# min_available (Volcano semantics)


def test_min_available_greater_than_task_count_is_allowed() -> None:
    # The gang simply cannot become valid yet (Volcano creates pods later); not an input error.
    d = base()
    d["jobs"][1]["min_available"] = 10
    s = Snapshot.from_dict(d)
    assert s.job("infer").min_available == 10
    assert len(s.tasks_of("infer")) == 1


def test_job_without_tasks_is_allowed() -> None:
    d = base()
    d["jobs"].append({"name": "later", "min_available": 4})
    assert Snapshot.from_dict(d).tasks_of("later") == ()


def test_rejects_negative_min_available() -> None:
    d = base()
    d["jobs"][1]["min_available"] = -1
    with rejects("job", "infer", "min_available", says=">= 0"):
        Snapshot.from_dict(d)


# ------------------------------------------------------------------------------------------
# Lookups and replace


def test_lookups_of_unknown_names_are_snapshot_errors() -> None:
    s = Snapshot.from_dict(base())
    for lookup, kind in ((s.node, "node"), (s.queue, "queue"), (s.job, "job"), (s.task, "task")):
        with pytest.raises(SnapshotError) as info:
            lookup("ghost")
        assert (info.value.kind, info.value.name) == (kind, "ghost")


def test_replace_revalidates() -> None:
    s = Snapshot.from_dict(base())
    smaller = s.replace(tasks=s.tasks[:1])
    assert len(smaller.tasks) == 1 and smaller.nodes == s.nodes
    with rejects("task", "train-0", "node"):
        s.replace(nodes=s.nodes[:1], hypernodes=())
    with rejects("snapshot", "", "pods"):
        s.replace(pods=())


# ------------------------------------------------------------------------------------------
# Round trip, canonical form, no mutation (hypothesis)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots())
def test_round_trip(s: Snapshot) -> None:
    d = s.to_dict()
    back = Snapshot.from_dict(d)
    assert back == s
    assert hash(back) == hash(s)
    # Through JSON text too: the format is JSON-able.
    assert Snapshot.from_dict(json.loads(json.dumps(d))) == s


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots())
def test_to_dict_is_canonical_and_stable(s: Snapshot) -> None:
    text = json.dumps(s.to_dict(), sort_keys=True)
    again = Snapshot.from_dict(json.loads(text))
    assert json.dumps(again.to_dict(), sort_keys=True) == text
    assert json.dumps(s.to_dict(), sort_keys=True) == text  # repeated calls agree
    # Record order is preserved; quantities are in canonical spelling.
    assert [n["name"] for n in s.to_dict()["nodes"]] == [n.name for n in s.nodes]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots())
def test_from_dict_never_mutates_its_input(s: Snapshot) -> None:
    d = s.to_dict()
    pristine = copy.deepcopy(d)
    Snapshot.from_dict(d)
    assert d == pristine


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots())
def test_constructor_never_mutates_its_inputs(s: Snapshot) -> None:
    lists = {
        attr: list(getattr(s, attr))
        for attr in ("nodes", "hypernodes", "queues", "jobs", "tasks", "disruption_budgets")
    }
    before = copy.deepcopy(lists)
    rebuilt = Snapshot(**lists)  # type: ignore[arg-type]
    assert lists == before
    assert rebuilt == s
    assert isinstance(rebuilt.nodes, tuple)


def test_constructor_copies_mutable_record_fields() -> None:
    labels = {"zone": "a"}
    allocatable: dict[str, Any] = {"cpu": 4}
    node = Node(name="n1", labels=labels, allocatable=allocatable)
    labels["zone"] = "b"
    allocatable["cpu"] = 1
    assert node.labels == {"zone": "a"} and node.allocatable == {"cpu": 4000}
    assert labels == {"zone": "b"} and allocatable == {"cpu": 1}


def test_different_spellings_give_the_same_snapshot() -> None:
    a = base()
    b = base()
    b["nodes"][0]["allocatable"] = {"cpu": "8000m", "memory": 32 * 2**30, "pods": "3"}
    b["tasks"][2]["request"] = {"cpu": 0.5}
    b["nodes"][1]["allocatable"][GPU] = "4"
    assert Snapshot.from_dict(a) == Snapshot.from_dict(b)
    assert json.dumps(Snapshot.from_dict(a).to_dict(), sort_keys=True) == json.dumps(
        Snapshot.from_dict(b).to_dict(), sort_keys=True
    )


# ------------------------------------------------------------------------------------------
# Bad input never crashes: mutate one spot of a valid document


_JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6),
    st.lists(st.integers(0, 3), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(0, 3), max_size=2),
    st.sampled_from(["Running", "n1", "node-0", "default", "job-0", "500m", "4Gi", "hard"]),
)


def _paths(value: object, prefix: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*prefix, i))
    return out


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots(max_nodes=3, max_jobs=3), st.data())
def test_corrupted_documents_raise_snapshot_error_or_load(s: Snapshot, data: st.DataObject) -> None:
    doc: Any = s.to_dict()
    path = data.draw(st.sampled_from(_paths(doc)[1:]))
    action = data.draw(st.sampled_from(["replace", "delete", "add-key"]))
    parent = doc
    for step in path[:-1]:
        parent = parent[step]
    last = path[-1]
    if action == "replace":
        parent[last] = data.draw(_JUNK)
    elif action == "delete":
        del parent[last]
    else:
        target = parent[last]
        if isinstance(target, dict):
            target[data.draw(st.text(max_size=4))] = data.draw(_JUNK)
        else:
            parent[last] = data.draw(_JUNK)
    try:
        loaded = Snapshot.from_dict(doc)
    except SnapshotError as err:
        assert err.kind, str(err)
        assert str(err)
    else:
        # Whatever loaded is itself consistent and round-trips.
        assert Snapshot.from_dict(loaded.to_dict()) == loaded


# ------------------------------------------------------------------------------------------
# Strategy contract: what the scheduler's invariant tests rely on


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots())
def test_generated_snapshots_have_valid_gangs_and_fitting_running_tasks(s: Snapshot) -> None:
    assert 1 <= len(s.nodes) <= 4 and 1 <= len(s.jobs) <= 4
    for job in s.jobs:
        members = s.tasks_of(job.name)
        assert 1 <= job.min_available <= len(members)
        placed = [t for t in members if t.phase is not TaskPhase.PENDING]
        if placed:
            assert len(placed) >= job.min_available
        for t in placed:
            node = s.node(t.node or "")
            assert all(node.labels.get(k) == v for k, v in t.node_selector.items())
            if t.gpu_request is not None:
                assert node.gpus is not None
                assert not t.gpu_request.models or node.gpus.model in t.gpu_request.models


def test_generated_snapshots_show_contention_and_running_work() -> None:
    """Over a fixed sample, many snapshots have pending demand beyond free capacity, and many
    have running tasks (so preemption and reclaim have something to do)."""
    stats = {"contention": 0, "running": 0, "gpu": 0, "total": 0}

    @settings(max_examples=120, deadline=None, database=None, derandomize=True)
    @given(snapshots())
    def sample(s: Snapshot) -> None:
        stats["total"] += 1
        free: dict[str, int] = {}
        for n in s.nodes:
            for r, v in n.allocatable.items():
                free[r] = free.get(r, 0) + v
            if n.gpus is not None:
                free[GPU] = free.get(GPU, 0) + n.gpus.count * n.gpus.milli
        demand: dict[str, int] = {}
        for t in s.tasks:
            table = demand if t.phase is TaskPhase.PENDING else free
            sign = 1 if t.phase is TaskPhase.PENDING else -1
            for r, v in t.request.items():
                table[r] = table.get(r, 0) + sign * v
            if t.gpu_request is not None:
                table[GPU] = table.get(GPU, 0) + sign * t.gpu_request.total_milli
        if any(v > free.get(r, 0) for r, v in demand.items()):
            stats["contention"] += 1
        if any(t.node is not None for t in s.tasks):
            stats["running"] += 1
        if any(t.gpu_indices for t in s.tasks):
            stats["gpu"] += 1

    sample()
    assert stats["contention"] >= stats["total"] // 4, stats
    assert stats["running"] >= stats["total"] // 5, stats
    assert stats["gpu"] >= stats["total"] // 10, stats


@settings(max_examples=40, deadline=None)
@given(snapshots(running=False, topology=False, max_jobs=2))
def test_snapshot_options_are_honoured(s: Snapshot) -> None:
    assert s.hypernodes == ()
    assert all(t.phase is TaskPhase.PENDING and t.node is None for t in s.tasks)
    assert len(s.jobs) <= 2


def test_equal_snapshots_are_interchangeable_as_keys() -> None:
    a = Snapshot.from_dict(base())
    b = Snapshot.from_dict(base())
    assert {a: 1}[b] == 1
    assert a != Snapshot.from_dict({**base(), "tasks": base()["tasks"][:2]})
    assert Queue(name="q") != Job(name="q")  # type: ignore[comparison-overlap]
    assert GpuRequest(count=1) == GpuRequest(count=1, milli=1000, models=())


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots())
def test_snapshots_pickle_and_deepcopy(s: Snapshot) -> None:
    for clone in (pickle.loads(pickle.dumps(s)), copy.deepcopy(s)):
        assert clone == s
        assert clone.node_index == s.node_index
        assert isinstance(clone.nodes[0].allocatable, Resources)
