"""The records one at a time: normalisation, defaults, record-level validation, dict forms."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gangsched._frozen import FrozenDict
from gangsched.errors import SnapshotError
from gangsched.model import (
    GpuRequest,
    Gpus,
    HyperNode,
    Job,
    JobPhase,
    JobPolicy,
    NetworkTopology,
    Node,
    Queue,
    QueueState,
    Resources,
    Taint,
    Task,
    TaskPhase,
    Toleration,
    TopologyMode,
)
from gangsched.testing.strategies import gangs, jobs, nodes, queues, tasks

GPU = "nvidia.com/gpu"


def _raises(kind: str, name: str, field: str) -> Any:
    """Context manager: a SnapshotError about ``kind name`` at ``field``, said in the message."""

    class _Check:
        def __enter__(self) -> None:
            return None

        def __exit__(
            self, typ: type[BaseException] | None, exc: BaseException | None, _tb: object
        ) -> bool:
            assert typ is not None, f"expected a SnapshotError about {kind} {name!r} {field}"
            assert isinstance(exc, SnapshotError), f"got {typ.__name__}: {exc}"
            assert (exc.kind, exc.name, exc.field) == (kind, name, field), str(exc)
            message = str(exc)
            assert (f"{kind} {name!r}" if name else kind) in message
            assert field in message
            return True

    return _Check()


# ------------------------------------------------------------------------------------------
# FrozenDict / Resources


def test_frozen_dict_is_sorted_immutable_hashable() -> None:
    d = FrozenDict({"b": 2, "a": 1})
    assert list(d) == ["a", "b"]
    assert d == {"a": 1, "b": 2}
    assert hash(d) == hash(FrozenDict({"a": 1, "b": 2}))
    assert len(d) == 2 and d["a"] == 1
    with pytest.raises(AttributeError):
        d.x = 1
    with pytest.raises(TypeError):
        d["c"] = 3  # type: ignore[index]
    assert repr(d) == "FrozenDict({'a': 1, 'b': 2})"
    assert FrozenDict() == {} and FrozenDict(None) == FrozenDict({})
    assert (FrozenDict({"a": 1}) == 5) is False


def test_frozen_dict_copies_its_input() -> None:
    source = {"a": 1}
    d = FrozenDict(source)
    source["b"] = 2
    assert d == {"a": 1}


def test_frozen_dict_with_unorderable_keys_keeps_insertion_order() -> None:
    d: FrozenDict[object, int] = FrozenDict({1: 1, "a": 2})
    assert list(d) == [1, "a"]


def test_resources_parse_quantities_but_trust_canonical() -> None:
    parsed = Resources.parse({"cpu": 2, "memory": "1Gi"}, kind="node", name="n", field="f")
    assert parsed == {"cpu": 2000, "memory": 2**30}
    assert Resources.parse(parsed, kind="node", name="n", field="f") is parsed
    assert parsed.to_dict() == {"cpu": 2, "memory": 2**30}


@pytest.mark.parametrize("amount", [-1, 2**63, 1.5, True, "1"], ids=repr)
def test_canonical_resources_are_still_checked(amount: object) -> None:
    bad = Resources({"cpu": amount})  # type: ignore[dict-item]
    with _raises("node", "n1", "allocatable.cpu"):
        Node(name="n1", allocatable=bad)


# ------------------------------------------------------------------------------------------
# Node


def test_node_normalises_quantities_and_collections() -> None:
    node = Node(
        name="n1",
        allocatable={"memory": "4Gi", "cpu": "1500m", "pods": 10},
        labels={"zone": "a"},
        taints=[Taint(key="k", value="v")],
    )
    assert node.allocatable == {"cpu": 1500, "memory": 4 * 2**30, "pods": 10}
    assert isinstance(node.allocatable, Resources)
    assert isinstance(node.labels, FrozenDict)
    assert node.taints == (Taint(key="k", value="v", effect="NoSchedule"),)
    assert node.pod_limit == 10
    assert Node(name="n2").pod_limit is None
    hash(node)


def test_node_gpus_from_allocatable_take_the_model_label() -> None:
    node = Node(
        name="n1",
        allocatable={"cpu": 8, GPU: 4},
        labels={"nvidia.com/gpu.product": "A100"},
    )
    assert node.gpus == Gpus(count=4, model="A100")
    assert GPU not in node.allocatable


def test_node_gpus_and_allocatable_must_agree() -> None:
    ok = Node(name="n1", allocatable={GPU: "2"}, gpus=Gpus(count=2))
    assert ok.gpus == Gpus(count=2)
    with _raises("node", "n1", f"allocatable.{GPU}"):
        Node(name="n1", allocatable={GPU: 4}, gpus=Gpus(count=2))
    with _raises("node", "n1", f"allocatable.{GPU}"):
        Node(name="n1", allocatable={GPU: "1500m"})


def test_node_with_zero_gpus_has_none() -> None:
    assert Node(name="n1", gpus=Gpus(count=0)).gpus is None
    assert Node(name="n1", allocatable={GPU: 0}).gpus is None


def test_node_record_level_rules() -> None:
    with _raises("node", "n1", "labels"):
        Node(name="n1", labels={"a": 1})  # type: ignore[dict-item]
    with _raises("node", "n1", "taints[0]"):
        Node(name="n1", taints=("k",))  # type: ignore[arg-type]
    with _raises("node", "n1", "taints[0].effect"):
        Node(name="n1", taints=(Taint(key="k", effect="Sometimes"),))
    with _raises("node", "n1", "taints[0].key"):
        Node(name="n1", taints=(Taint(key=""),))
    with _raises("node", "n1", "unschedulable"):
        Node(name="n1", unschedulable="no")  # type: ignore[arg-type]
    with _raises("node", "n1", "gpus"):
        Node(name="n1", gpus={"count": 1})  # type: ignore[arg-type]
    with _raises("node", "", "name"):
        Node(name="")


def test_gpus_rules() -> None:
    assert Gpus(count=2.0).count == 2  # type: ignore[arg-type]
    assert type(Gpus(count=2.0).count) is int  # type: ignore[arg-type]
    with _raises("gpus", "A100", "count"):
        Gpus(count=-1, model="A100")
    with _raises("gpus", "A100", "milli"):
        Gpus(count=1, model="A100", milli=0)
    with _raises("gpus", "", "sharing"):
        Gpus(count=1, sharing=1)  # type: ignore[arg-type]


def test_node_dict_form() -> None:
    d = {
        "name": "n1",
        "allocatable": {"cpu": "500m", "memory": "1Gi"},
        "gpus": {"count": 2, "model": "H100", "sharing": False},
        "labels": {"zone": "a"},
        "taints": [{"key": "dedicated", "value": "gpu", "effect": "NoExecute"}],
        "unschedulable": True,
    }
    node = Node.from_dict(d)
    assert node.gpus == Gpus(count=2, model="H100", sharing=False)
    assert node.taints[0].effect == "NoExecute"
    out = node.to_dict()
    assert out["allocatable"] == {"cpu": "500m", "memory": 2**30}
    assert out["gpus"] == {"count": 2, "model": "H100", "milli": 1000, "sharing": False}
    assert Node.from_dict(out) == node
    assert Node.from_dict({"name": "bare"}) == Node(name="bare")


# ------------------------------------------------------------------------------------------
# Taints and tolerations


@pytest.mark.parametrize(
    ("toleration", "taint", "expected"),
    [
        (Toleration(key="k", value="v"), Taint(key="k", value="v"), True),
        (Toleration(key="k", value="w"), Taint(key="k", value="v"), False),
        (Toleration(key="k", operator="Exists"), Taint(key="k", value="v"), True),
        (Toleration(key="j", operator="Exists"), Taint(key="k", value="v"), False),
        (Toleration(operator="Exists"), Taint(key="anything", effect="NoExecute"), True),
        (
            Toleration(key="k", value="v", effect="NoExecute"),
            Taint(key="k", value="v", effect="NoSchedule"),
            False,
        ),
        (
            Toleration(key="k", value="v", effect="NoSchedule"),
            Taint(key="k", value="v", effect="NoSchedule"),
            True,
        ),
    ],
)
def test_toleration_matching(toleration: Toleration, taint: Taint, expected: bool) -> None:
    assert toleration.tolerates(taint) is expected


def test_toleration_rules() -> None:
    with _raises("task", "t", "tolerations[0].operator"):
        Task(name="t", job="j", tolerations=(Toleration(key="k", operator="In"),))
    with _raises("task", "t", "tolerations[0].effect"):
        Task(name="t", job="j", tolerations=(Toleration(key="k", effect="Never"),))
    with _raises("task", "t", "tolerations[0]"):
        Task(name="t", job="j", tolerations=({"key": "k"},))  # type: ignore[arg-type]
    with _raises("task", "t", "tolerations[0].key"):
        Task(name="t", job="j", tolerations=(Toleration(key=3),))  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------
# HyperNode, Queue


def test_hypernode_rules() -> None:
    hn = HyperNode(name="s1", tier=1, members=["a", "b"])
    assert hn.members == ("a", "b")
    assert HyperNode.from_dict(hn.to_dict()) == hn
    with _raises("hypernode", "s1", "tier"):
        HyperNode(name="s1", tier=0, members=())
    with _raises("hypernode", "s1", "members"):
        HyperNode(name="s1", tier=1, members="ab")
    with _raises("hypernode", "s1", "members[1]"):
        HyperNode(name="s1", tier=1, members=("a", ""))
    with _raises("hypernode", "s1", "members"):
        HyperNode(name="s1", tier=1, members=("a", "b", "a"))


def test_queue_defaults_and_dict_form() -> None:
    q = Queue(name="q")
    assert (q.weight, q.state, q.reclaimable, q.parent, q.capability) == (
        1,
        QueueState.OPEN,
        True,
        None,
        None,
    )
    full = Queue.from_dict(
        {
            "name": "q",
            "weight": 3,
            "capability": {"cpu": 8, GPU: 2},
            "guarantee": {"cpu": "1"},
            "deserved": {"memory": "1Gi"},
            "parent": "root",
            "state": "Closing",
            "reclaimable": False,
            "priority": 2,
        }
    )
    assert full.capability == {"cpu": 8000, GPU: 2000}
    assert full.state is QueueState.CLOSING
    assert Queue.from_dict(full.to_dict()) == full
    assert full.to_dict()["capability"] == {"cpu": 8, GPU: 2}


def test_queue_record_rules() -> None:
    with _raises("queue", "q", "weight"):
        Queue(name="q", weight=0)
    with _raises("queue", "q", "weight"):
        Queue(name="q", weight="2")  # type: ignore[arg-type]
    with _raises("queue", "q", "parent"):
        Queue(name="q", parent="q")
    with _raises("queue", "q", "state"):
        Queue(name="q", state="Paused")
    with _raises("queue", "q", "capability.cpu"):
        Queue(name="q", capability={"cpu": "-1"})
    with _raises("queue", "q", "reclaimable"):
        Queue(name="q", reclaimable=None)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------
# Job


def test_job_min_available_may_exceed_task_count_but_not_go_negative() -> None:
    # Volcano lets minMember exceed the pods that exist yet: not an input error.
    assert Job(name="j", min_available=100).min_available == 100
    assert Job(name="j", min_available=0).min_available == 0
    with _raises("job", "j", "min_available"):
        Job(name="j", min_available=-1)


def test_job_normalises_numbers() -> None:
    job = Job(name="j", min_available=2.0, priority=3.0, min_task_member={"w": 1.0})  # type: ignore[arg-type, dict-item]
    assert type(job.min_available) is int and job.min_available == 2
    assert type(job.priority) is int
    assert type(job.min_task_member["w"]) is int
    assert json.dumps(job.to_dict()) == json.dumps(
        Job(name="j", min_available=2, priority=3, min_task_member={"w": 1}).to_dict()
    )


def test_job_record_rules() -> None:
    with _raises("job", "j", "min_available"):
        Job(name="j", min_available=True)
    with _raises("job", "j", "min_available"):
        Job(name="j", min_available=1.5)  # type: ignore[arg-type]
    with _raises("job", "j", "min_task_member"):
        Job(name="j", min_task_member=["w"])  # type: ignore[arg-type]
    with _raises("job", "j", "min_task_member.w"):
        Job(name="j", min_task_member={"w": -1})
    with _raises("job", "j", "phase"):
        Job(name="j", phase="Done")
    with _raises("job", "j", "priority"):
        Job(name="j", priority=2**70)
    with _raises("job", "j", "network_topology"):
        Job(name="j", network_topology={"mode": "hard"})  # type: ignore[arg-type]
    with _raises("job", "j", "policies[0].event"):
        Job(name="j", policies=(JobPolicy(event="PodLost", action="RestartJob"),))
    with _raises("job", "j", "policies[0].action"):
        Job(name="j", policies=(JobPolicy(event="PodEvicted", action="Retry"),))
    with _raises("job", "j", "policies[0]"):
        Job(name="j", policies=("RestartJob",))  # type: ignore[arg-type]
    with _raises("job", "j", "creation"):
        Job(name="j", creation=-1)
    with _raises("network_topology", "", "mode"):
        NetworkTopology(mode="strict")  # type: ignore[arg-type]
    with _raises("network_topology", "", "highest_tier_allowed"):
        NetworkTopology(highest_tier_allowed=0)


def test_job_dict_form() -> None:
    d = {
        "name": "j",
        "queue": "q",
        "min_available": 3,
        "min_task_member": {"worker": 2, "ps": 1},
        "priority": 5,
        "phase": "Inqueue",
        "min_resources": {"cpu": 3, GPU: "0.5"},
        "preemptable": False,
        "network_topology": {"mode": "soft", "highest_tier_allowed": 2},
        "policies": [{"event": "PodEvicted", "action": "RestartJob"}],
        "creation": 7,
    }
    job = Job.from_dict(d)
    assert job.phase is JobPhase.INQUEUE
    assert job.min_resources == {"cpu": 3000, GPU: 500}
    assert job.network_topology == NetworkTopology(mode=TopologyMode.SOFT, highest_tier_allowed=2)
    assert job.policies == (JobPolicy(event="PodEvicted", action="RestartJob"),)
    assert Job.from_dict(job.to_dict()) == job
    assert Job.from_dict({"name": "j"}) == Job(name="j")


# ------------------------------------------------------------------------------------------
# Task and GpuRequest


def test_task_gpu_in_request_becomes_a_gpu_request() -> None:
    t = Task(name="t", job="j", request={"cpu": 1, GPU: 2})
    assert t.gpu_request == GpuRequest(count=2, milli=1000)
    assert GPU not in t.request
    assert Task(name="t", job="j", gpu_request=GpuRequest(count=0)).gpu_request is None


def test_task_gpu_request_rules() -> None:
    with _raises("task", "t", f"request.{GPU}"):
        Task(name="t", job="j", request={GPU: "0.5"})
    with _raises("task", "t", f"request.{GPU}"):
        Task(name="t", job="j", request={GPU: 2}, gpu_request=GpuRequest(count=1))
    with _raises("task", "t", "gpu_request"):
        Task(name="t", job="j", gpu_request={"count": 1})  # type: ignore[arg-type]
    with _raises("gpu_request", "", "milli"):
        GpuRequest(count=1, milli=0)
    with _raises("gpu_request", "", "count"):
        GpuRequest(count=-2)
    with _raises("gpu_request", "", "models[0]"):
        GpuRequest(count=1, models=("",))


def test_gpu_request_properties() -> None:
    share = GpuRequest(count=2, milli=250, models=["A100"])  # type: ignore[arg-type]
    assert share.models == ("A100",)
    assert share.total_milli == 500 and share.fractional
    assert not GpuRequest(count=1).fractional


def test_task_placement_fields() -> None:
    running = Task(
        name="t",
        job="j",
        phase="Running",
        node="n1",
        gpu_request=GpuRequest(count=2),
        gpu_indices=[3.0, 1],  # type: ignore[list-item]
    )
    assert running.phase is TaskPhase.RUNNING
    assert running.gpu_indices == (3, 1)
    assert all(type(i) is int for i in running.gpu_indices)
    with _raises("task", "t", "node"):
        Task(name="t", job="j", phase=TaskPhase.BOUND)
    with _raises("task", "t", "node"):
        Task(name="t", job="j", phase=TaskPhase.PIPELINED)
    with _raises("task", "t", "gpu_indices"):
        Task(name="t", job="j", phase=TaskPhase.RUNNING, node="n", gpu_request=GpuRequest(count=2))
    with _raises("task", "t", "gpu_indices"):
        Task(name="t", job="j", phase=TaskPhase.RUNNING, node="n", gpu_indices=(0,))
    with _raises("task", "t", "gpu_indices"):
        Task(name="t", job="j", gpu_request=GpuRequest(count=2), gpu_indices=(1, 1))
    with _raises("task", "t", "gpu_indices[0]"):
        Task(name="t", job="j", gpu_request=GpuRequest(count=1), gpu_indices=(-1,))
    with _raises("task", "t", "gpu_indices"):
        Task(name="t", job="j", gpu_indices=5)  # type: ignore[arg-type]
    # A finished task may keep its last node; it holds nothing.
    done = Task(name="t", job="j", phase=TaskPhase.SUCCEEDED, node="n1")
    assert done.node == "n1"


def test_task_record_rules() -> None:
    with _raises("task", "t", "phase"):
        Task(name="t", job="j", phase="Sleeping")
    with _raises("task", "t", "job"):
        Task(name="t", job=None)  # type: ignore[arg-type]
    with _raises("task", "t", "node_selector"):
        Task(name="t", job="j", node_selector=[("a", "b")])  # type: ignore[arg-type]
    with _raises("task", "t", "preemptable"):
        Task(name="t", job="j", preemptable="yes")  # type: ignore[arg-type]
    with _raises("task", "t", "request.cpu"):
        Task(name="t", job="j", request={"cpu": "fast"})
    with _raises("task", "t", "role"):
        Task(name="t", job="j", role=1)  # type: ignore[arg-type]


def test_task_best_effort() -> None:
    assert Task(name="t", job="j").best_effort
    assert Task(name="t", job="j", request={"pods": 1}).best_effort
    assert not Task(name="t", job="j", request={"cpu": "1m"}).best_effort
    assert not Task(name="t", job="j", gpu_request=GpuRequest(count=1, milli=1)).best_effort


def test_task_dict_form() -> None:
    d = {
        "name": "t",
        "job": "j",
        "role": "worker",
        "request": {"cpu": "250m", "memory": "512Mi"},
        "gpu_request": {"count": 1, "milli": 500, "models": ["A100", "H100"]},
        "phase": "Releasing",
        "node": "n1",
        "gpu_indices": [2],
        "priority": 4,
        "preemptable": False,
        "node_selector": {"zone": "a"},
        "tolerations": [{"key": "dedicated", "operator": "Exists"}],
    }
    task = Task.from_dict(d)
    assert task.gpu_request == GpuRequest(count=1, milli=500, models=("A100", "H100"))
    assert task.tolerations == (Toleration(key="dedicated", operator="Exists"),)
    out = task.to_dict()
    assert out["request"] == {"cpu": "250m", "memory": 512 * 2**20}
    assert Task.from_dict(out) == task
    # A gpu_request written without a count means one device.
    assert Task.from_dict({"name": "t", "job": "j", "gpu_request": {"milli": 300}}).gpu_request == (
        GpuRequest(count=1, milli=300)
    )


# ------------------------------------------------------------------------------------------
# Records are frozen; replacing a field re-validates


def test_records_are_frozen_and_replace_revalidates() -> None:
    task = Task(name="t", job="j")
    with pytest.raises(dataclasses.FrozenInstanceError):
        task.name = "u"  # type: ignore[misc]
    moved = dataclasses.replace(task, phase=TaskPhase.RUNNING, node="n1")
    assert moved.phase is TaskPhase.RUNNING
    with _raises("task", "t", "node"):
        dataclasses.replace(task, phase=TaskPhase.RUNNING)
    with pytest.raises(TypeError):
        Task("t", "j")  # type: ignore[call-arg]


# ------------------------------------------------------------------------------------------
# Strategies produce valid records that round-trip one by one


@settings(max_examples=80, deadline=None)
@given(nodes())
def test_generated_nodes_round_trip(node: Node) -> None:
    assert Node.from_dict(json.loads(json.dumps(node.to_dict()))) == node


@settings(max_examples=60, deadline=None)
@given(queues())
def test_generated_queues_round_trip(qs: tuple[Queue, ...]) -> None:
    for q in qs:
        assert Queue.from_dict(json.loads(json.dumps(q.to_dict()))) == q
    names = [q.name for q in qs]
    assert len(set(names)) == len(names) and names[0] == "default"


@settings(max_examples=60, deadline=None)
@given(gangs(("default", "q1"), max_tasks=5))
def test_generated_gangs_are_consistent(gang: tuple[Job, tuple[Task, ...]]) -> None:
    job, members = gang
    assert 1 <= job.min_available <= len(members) <= 5
    assert sum(job.min_task_member.values()) <= job.min_available
    assert all(t.job == job.name and t.phase is TaskPhase.PENDING for t in members)
    assert len({t.name for t in members}) == len(members)
    assert Job.from_dict(job.to_dict()) == job
    for t in members:
        assert Task.from_dict(json.loads(json.dumps(t.to_dict()))) == t


@settings(max_examples=30, deadline=None)
@given(jobs(("a", "b"), max_tier=2), tasks(max_tasks=3))
def test_generated_jobs_and_tasks_are_valid(job: Job, members: tuple[Task, ...]) -> None:
    assert job.queue in ("a", "b")
    if job.network_topology is not None and job.network_topology.highest_tier_allowed:
        assert job.network_topology.highest_tier_allowed <= 2
    assert 1 <= len(members) <= 3


@settings(max_examples=40, deadline=None)
@given(st.text(min_size=1, max_size=8))
def test_any_non_empty_name_round_trips(name: str) -> None:
    node = Node(name=name, labels={name: name})
    assert Node.from_dict(json.loads(json.dumps(node.to_dict()))) == node


def test_frozen_dict_of_a_frozen_dict_shares_its_sorted_data() -> None:
    d = FrozenDict({"b": 2, "a": 1})
    again = FrozenDict(d)
    assert again == d and list(again) == ["a", "b"] and hash(again) == hash(d)
    assert again._data is d._data  # immutable: nothing to copy


def test_frozen_dict_of_any_mapping_is_sorted_by_its_keys() -> None:
    from types import MappingProxyType

    d = FrozenDict(MappingProxyType({"b": (2,), "a": (1,)}))
    assert list(d.items()) == [("a", (1,)), ("b", (2,))]
    mixed = {1: 1, "a": 2}
    kept: FrozenDict[object, int] = FrozenDict(mixed)
    mixed["z"] = 3  # the unorderable case copies its input too
    assert dict(kept) == {1: 1, "a": 2}
