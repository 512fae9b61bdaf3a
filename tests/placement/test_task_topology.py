"""Volcano's task-topology plugin: roles of one job kept together or apart through buckets.

The bucket rules are Volcano's (a task joins the bucket it is most drawn to, the lighter one
on a tie, and opens a new one when every bucket repels it); the placements follow from its
node score (tasks of the bucket already on the node, anti-affine tasks there, the rest of the
bucket fitting beside it)."""

from __future__ import annotations

import copy
import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import gangsched as gs
from gangsched.config import Config
from gangsched.io.k8s import load_objects
from gangsched.io.volcano import dump_manifests
from gangsched.model import TaskTopology
from gangsched.session.statement import Statement
from gangsched.session.task_topology import build_buckets
from gangsched.testing import check_cycle
from gangsched.testing.strategies import snapshots

PS_WORKER = {"affinity": [["ps", "worker"]], "anti_affinity": [["ps"]]}


def _config(weight: float | None = 10, scorer: str = "nodeorder") -> Config:
    second: list[dict[str, Any]] = [{"name": "predicates"}, {"name": scorer}]
    if weight is not None:
        second.append({"name": "task-topology", "arguments": {"task-topology.weight": weight}})
    return Config.from_dict(
        {
            "actions": ["enqueue", "allocate"],
            "tiers": [[{"name": "priority"}, {"name": "gang"}], second],
        }
    )


def _snapshot(
    roles: dict[str, int], topology: dict[str, Any] | None, *, nodes: int = 2, cpu: int = 6
) -> gs.Snapshot:
    tasks = [
        {"name": f"tf-{role}-{i}", "job": "tf", "role": role, "request": {"cpu": 2}}
        for role, n in roles.items()
        for i in range(n)
    ]
    job: dict[str, Any] = {"name": "tf", "min_available": len(tasks), "phase": "Inqueue"}
    if topology is not None:
        job["task_topology"] = topology
    return gs.Snapshot.from_dict(
        {
            "nodes": [
                {"name": f"n{i}", "allocatable": {"cpu": cpu, "memory": "32Gi"}}
                for i in range(nodes)
            ],
            "queues": [{"name": "default"}],
            "jobs": [job],
            "tasks": tasks,
        }
    )


def _by_node(d: gs.Decisions) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for b in sorted(d.binds, key=lambda b: b.task):
        out.setdefault(b.node, []).append(b.task)
    return out


def _names(snap: gs.Snapshot) -> list[list[str]]:
    (jb,) = build_buckets(snap).values()
    return [[snap.tasks[t].name for t in b.pending] for b in jb.buckets]


def test_buckets_follow_volcanos_rules() -> None:
    snap = _snapshot({"ps": 2, "worker": 4}, PS_WORKER)
    # ps repels ps (self-anti-affinity): each ps opens a bucket; workers are drawn to ps
    # equally and go to the lighter bucket, the first on a tie.
    assert _names(snap) == [
        ["tf-ps-0", "tf-worker-0", "tf-worker-2"],
        ["tf-ps-1", "tf-worker-1", "tf-worker-3"],
    ]


def test_task_order_decides_who_opens_the_buckets() -> None:
    topo = {**PS_WORKER, "task_order": ["worker", "ps"]}
    snap = _snapshot({"ps": 2, "worker": 2}, topo)
    # workers first: the first opens a bucket, the second joins it (no relation: pull 0);
    # each ps is drawn to both workers there (+2), which outweighs the other ps (-1): the
    # self-anti-affinity of ps loses against its affinity to the workers, as in Volcano.
    assert _names(snap) == [["tf-worker-0", "tf-worker-1", "tf-ps-0", "tf-ps-1"]]


def test_roles_outside_the_topology_are_not_bucketed() -> None:
    snap = _snapshot({"ps": 1, "worker": 1, "evaluator": 1}, {"affinity": [["ps", "worker"]]})
    assert _names(snap) == [["tf-ps-0", "tf-worker-0"]]


def test_a_topology_naming_a_missing_role_is_ignored() -> None:
    snap = _snapshot({"ps": 1, "worker": 1}, {"affinity": [["ps", "chief"]]})
    assert build_buckets(snap) == {}


def test_buckets_land_together() -> None:
    snap = _snapshot({"ps": 2, "worker": 4}, PS_WORKER)
    with_plugin = _by_node(gs.schedule(snap, _config()))
    assert with_plugin == {
        "n0": ["tf-ps-0", "tf-worker-0", "tf-worker-2"],
        "n1": ["tf-ps-1", "tf-worker-1", "tf-worker-3"],
    }
    # nodeorder alone puts both parameter servers on one node
    assert _by_node(gs.schedule(snap, _config(None))) != with_plugin


def test_self_anti_affinity_spreads_replicas_against_a_packing_score() -> None:
    snap = _snapshot({"ps": 3}, {"anti_affinity": [["ps"]]}, nodes=3, cpu=16)
    packed = _by_node(gs.schedule(snap, _config(None, scorer="binpack")))
    assert len(packed) == 1  # binpack alone packs them onto one node
    spread = _by_node(gs.schedule(snap, _config(1000, scorer="binpack")))
    assert sorted(len(v) for v in spread.values()) == [1, 1, 1]


def test_bucketed_tasks_are_ordered_first_and_by_role() -> None:
    topo = {**PS_WORKER, "task_order": ["worker", "ps"]}
    snap = _snapshot({"evaluator": 1, "ps": 2, "worker": 2}, topo)
    ssn = gs.open_session(snap, _config())
    order = sorted(range(len(snap.tasks)), key=ssn.task_key)
    assert [snap.tasks[t].name for t in order] == [
        "tf-worker-0",
        "tf-worker-1",
        "tf-ps-0",
        "tf-ps-1",
        "tf-evaluator-0",
    ]


def test_a_discarded_statement_restores_the_buckets() -> None:
    snap = _snapshot({"ps": 2, "worker": 4}, PS_WORKER)
    ssn = gs.open_session(snap, _config())
    plugin = ssn.plugin("task-topology")
    assert plugin is not None
    before = copy.deepcopy(plugin.jobs)
    rows = np.arange(2, dtype=np.intp)
    tmpl = ssn.templates[int(ssn.template_of[2])]  # a worker of bucket 0
    first = ssn.points.node_score(tmpl, rows).tolist()
    stmt = Statement(ssn)
    assert stmt.allocate(0, 1, ())  # ps-0 on n1
    moved = ssn.points.node_score(tmpl, rows).tolist()
    assert moved[1] > moved[0]  # the worker is drawn to its ps
    stmt.discard()
    assert plugin.jobs == before
    assert ssn.points.node_score(tmpl, rows).tolist() == first


def test_topology_validation_names_the_field() -> None:
    with pytest.raises(gs.SnapshotError) as info:
        _snapshot({"ps": 1}, {"affinity": [["ps", "ps"]]})
    assert (info.value.kind, info.value.field) == ("job", "task_topology.affinity[0][1]")
    with pytest.raises(gs.SnapshotError, match="non-empty list of roles"):
        _snapshot({"ps": 1}, {"anti_affinity": [[]]})


def _k8s_node(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "status": {"allocatable": {"cpu": "6", "memory": "32Gi", "pods": "110"}},
    }


def _vcjob(annotations: dict[str, str]) -> dict[str, Any]:
    def task(name: str, n: int) -> dict[str, Any]:
        spec = {
            "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "2"}}}]
        }
        return {"name": name, "replicas": n, "template": {"spec": spec}}

    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "tf", "namespace": "default", "annotations": annotations},
        "spec": {"schedulerName": "volcano", "tasks": [task("ps", 2), task("worker", 4)]},
    }


ANNOTATIONS = {
    "volcano.sh/task-topology-affinity": "ps,worker",
    "volcano.sh/task-topology-anti-affinity": "ps",
    "volcano.sh/task-topology-task-order": "ps,worker",
}


def test_manifest_annotations_carry_the_topology_and_dump_writes_them_back() -> None:
    cluster = load_objects([_k8s_node("n0"), _k8s_node("n1"), _vcjob(ANNOTATIONS)])
    (job,) = cluster.snapshot.jobs
    assert job.task_topology == TaskTopology(
        affinity=(("ps", "worker"),), anti_affinity=(("ps",),), task_order=("ps", "worker")
    )
    back = load_objects(dump_manifests(cluster.snapshot)).snapshot
    assert back.jobs == cluster.snapshot.jobs
    d = gs.schedule(cluster.snapshot, _config())
    nodes = {b.task.split("/")[-1]: b.node for b in d.binds}
    assert nodes["tf-ps-0"] != nodes["tf-ps-1"]
    assert (
        gs.Snapshot.from_dict(json.loads(json.dumps(cluster.snapshot.to_dict())))
        == cluster.snapshot
    )


def test_an_invalid_annotation_names_it() -> None:
    bad = {"volcano.sh/task-topology-affinity": "ps,ps"}
    with pytest.raises(gs.SnapshotError) as info:
        load_objects([_k8s_node("n0"), _vcjob(bad)])
    assert info.value.field == "metadata.annotations[volcano.sh/task-topology-affinity]"


# ---------------------------------------------------------------------------------------------
# Every action, with the plugin and random topologies: the invariants and determinism


@st.composite
def topology_snapshots(draw: st.DrawFn) -> gs.Snapshot:
    base = draw(snapshots(max_nodes=4, max_jobs=3, max_tasks_per_job=4))
    doc = base.to_dict()
    roles = ("a", "b")
    for t in doc["tasks"]:
        t["role"] = draw(st.sampled_from(roles))
    for job in doc["jobs"]:
        if draw(st.booleans()):
            groups = st.lists(
                st.lists(st.sampled_from(roles), min_size=1, max_size=2, unique=True), max_size=2
            )
            job["task_topology"] = {
                "affinity": draw(groups),
                "anti_affinity": draw(groups),
                "task_order": draw(st.lists(st.sampled_from(roles), unique=True)),
            }
    return gs.Snapshot.from_dict(doc)


_ALL = Config.from_dict(
    {
        "actions": ["enqueue", "allocate", "preempt", "reclaim", "backfill"],
        "tiers": [
            [{"name": "priority"}, {"name": "gang"}, {"name": "conformance"}],
            [
                {"name": "drf"},
                {"name": "predicates"},
                {"name": "proportion"},
                {"name": "nodeorder"},
                {"name": "task-topology", "arguments": {"task-topology.weight": 5}},
            ],
        ],
    }
)


@given(topology_snapshots())
def test_every_action_holds_the_invariants_deterministically(snap: gs.Snapshot) -> None:
    d = gs.schedule(snap, _ALL)
    check_cycle(snap, d, _ALL)
    again = gs.schedule(snap, _ALL)
    assert json.dumps(again.to_dict(), sort_keys=True) == json.dumps(d.to_dict(), sort_keys=True)
