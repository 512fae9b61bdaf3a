"""Pod affinity, anti-affinity and topology spread in manifests: read from Pods, Volcano Job
templates and PyTorchJob templates, scheduled, and written back by ``dump_manifests``."""

from __future__ import annotations

from typing import Any

import pytest

import gangsched as gs
from gangsched.errors import SnapshotError
from gangsched.io.k8s import load_objects
from gangsched.io.volcano import dump_manifests
from gangsched.testing.invariants import check_pod_constraints

ANTI = {
    "requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "rack"}
    ]
}
PREFER = {
    "preferredDuringSchedulingIgnoredDuringExecution": [
        {
            "weight": 50,
            "podAffinityTerm": {
                "labelSelector": {
                    "matchExpressions": [{"key": "app", "operator": "In", "values": ["db"]}]
                },
                "topologyKey": "zone",
                "namespaces": ["data"],
            },
        }
    ]
}
SPREAD = [
    {
        "maxSkew": 1,
        "topologyKey": "zone",
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "web"}},
        "minDomains": 2,
    }
]


def node(name: str, rack: str, zone: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"rack": rack, "zone": zone}},
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}},
    }


NODES = [node("n0", "r0", "a"), node("n1", "r1", "a"), node("n2", "r2", "b"), node("n3", "r3", "b")]


def template(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"labels": {"app": "web"}},
        "spec": {
            "schedulerName": "volcano",
            "containers": [{"name": "m", "image": "x", "resources": {"requests": {"cpu": "1"}}}],
            **spec,
        },
    }


AFFINITY = {"podAntiAffinity": ANTI, "podAffinity": PREFER}


def vcjob() -> dict[str, Any]:
    tmpl = template(affinity=AFFINITY, topologySpreadConstraints=SPREAD)
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "web"},
        "spec": {
            "schedulerName": "volcano",
            "minAvailable": 4,
            "tasks": [{"name": "server", "replicas": 4, "template": tmpl}],
        },
    }


def pytorchjob() -> dict[str, Any]:
    tmpl = template(affinity=AFFINITY, topologySpreadConstraints=SPREAD)
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "web"},
        "spec": {
            "runPolicy": {"schedulingPolicy": {"minAvailable": 3}},
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": tmpl},
                "Worker": {"replicas": 2, "template": tmpl},
            },
        },
    }


def plain_pod() -> dict[str, Any]:
    tmpl = template(affinity=AFFINITY, topologySpreadConstraints=SPREAD)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web-0", **tmpl["metadata"]},
        "spec": tmpl["spec"],
        "status": {"phase": "Pending"},
    }


@pytest.mark.parametrize("workload", [vcjob, pytorchjob, plain_pod])
def test_pod_constraints_are_read_scheduled_and_written_back(workload: Any) -> None:
    c = load_objects([*NODES, workload()])
    snap = c.snapshot
    assert c.ignored == ()
    for t in snap.tasks:
        assert t.labels["app"] == "web"
        assert t.pod_anti_affinity is not None
        term = t.pod_anti_affinity.required[0]
        assert term.label_selector is not None
        assert term.topology_key == "rack"
        assert dict(term.label_selector.match_labels) == {"app": "web"}
        assert t.pod_affinity is not None
        pref = t.pod_affinity.preferred[0]
        assert (pref.weight, pref.term.namespaces) == (50, ("data",))
        (spread,) = t.topology_spread
        assert (spread.max_skew, spread.topology_key, spread.min_domains) == (1, "zone", 2)
    # one pod per rack, zones within one of each other
    d = gs.schedule(snap)
    check_pod_constraints(snap, d)
    racks = [b.node for b in d.binds]
    assert len(racks) == len(snap.tasks) and len(set(racks)) == len(racks)
    # written back and read again: the same snapshot
    again = load_objects(dump_manifests(snap)).snapshot
    assert again == snap


def test_a_role_is_the_pods_task_spec_label_for_selectors() -> None:
    # Volcano's controller labels a task's pods volcano.sh/task-spec=<task>: a selector on it
    # sees the task's role.
    anti = {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {
                "labelSelector": {"matchLabels": {"volcano.sh/task-spec": "server"}},
                "topologyKey": "rack",
            }
        ]
    }
    job = vcjob()
    job["spec"]["tasks"][0]["template"] = template(affinity={"podAntiAffinity": anti})
    job["spec"]["tasks"][0]["replicas"] = 5
    job["spec"]["minAvailable"] = 5
    snap = load_objects([*NODES, job]).snapshot
    assert "volcano.sh/task-spec" not in snap.tasks[0].labels
    assert snap.tasks[0].pod_labels["volcano.sh/task-spec"] == "server"
    d = gs.schedule(snap)
    assert d.binds == ()  # five replicas, four racks
    assert "anti-affinity with pod" in d.jobs["web"].message


@pytest.mark.parametrize(
    ("change", "path"),
    [
        (
            {
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": {}}]
                }
            },
            "spec.tasks[0].template.spec.affinity.podAntiAffinity."
            "requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey",
        ),
        (
            {
                "podAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "topologyKey": "zone",
                            "labelSelector": {
                                "matchExpressions": [
                                    {"key": "a", "operator": "Gt", "values": ["1"]}
                                ]
                            },
                        }
                    ]
                }
            },
            "spec.tasks[0].template.spec.affinity.podAffinity."
            "requiredDuringSchedulingIgnoredDuringExecution[0].labelSelector.matchExpressions[0].operator",
        ),
    ],
)
def test_malformed_pod_affinity_is_refused_with_the_manifest_path(
    change: dict[str, Any], path: str
) -> None:
    job = vcjob()
    job["spec"]["tasks"][0]["template"]["spec"]["affinity"] = change
    with pytest.raises(SnapshotError) as err:
        load_objects([*NODES, job])
    assert path in str(err.value)


def test_malformed_spread_is_refused_with_the_manifest_path() -> None:
    job = vcjob()
    job["spec"]["tasks"][0]["template"]["spec"]["topologySpreadConstraints"] = [
        {**SPREAD[0], "maxSkew": 0}
    ]
    with pytest.raises(SnapshotError) as err:
        load_objects([*NODES, job])
    assert "spec.tasks[0].template.spec.topologySpreadConstraints[0].maxSkew" in str(err.value)
