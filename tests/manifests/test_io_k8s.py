"""Manifests in (gangsched.io.k8s) and Kubernetes / Volcano objects out (io.volcano_out)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _builders import node_manifest
from gangsched.config import Config
from gangsched.decisions import Bind, Decisions, Eviction, JobStatus
from gangsched.errors import ConfigError, SnapshotError
from gangsched.io.k8s import Cluster, load_objects, load_text, qualify, split_name
from gangsched.io.volcano_out import (
    bindings,
    dump_manifests,
    evictions,
    format_quantity,
    job_actions,
    job_environment,
    kubernetes_output,
    podgroup_statuses,
    queue_statuses,
    svc_configmaps,
)
from gangsched.model import JobPhase, JobPolicy, TaskPhase
from gangsched.model.snapshot import Snapshot
from gangsched.scheduler import schedule
from gangsched.testing.strategies import snapshots
from gangsched.units import parse_quantity

GiB = 2**30
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "volcano"

# ------------------------------------------------------------------------------------------
# Manifest builders


def node(
    name: str, gpus: int = 8, *, cpu: str = "64", labels: dict[str, str] | None = None
) -> dict[str, Any]:
    labels = {"nvidia.com/gpu.product": "A100", **(labels or {})}
    return node_manifest(name, cpu=cpu, gpus=gpus, labels=labels)


def container(cpu: str = "1", gpu: int | None = None, **extra: Any) -> dict[str, Any]:
    res: dict[str, Any] = {"requests": {"cpu": cpu, "memory": "1Gi"}}
    if gpu is not None:
        res["limits"] = {"nvidia.com/gpu": gpu}
    return {"name": "main", "image": "x", "resources": res, **extra}


def vcjob(
    name: str,
    tasks: list[dict[str, Any]] | None = None,
    *,
    namespace: str | None = None,
    **spec: Any,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    if tasks is None:
        tasks = [vctask("worker", 2)]
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": meta,
        "spec": {"schedulerName": "volcano", "tasks": tasks, **spec},
    }


def vctask(name: str, replicas: int, gpu: int | None = 1, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "replicas": replicas,
        "template": {"spec": {"containers": [container("2", gpu)]}},
        **extra,
    }


def pod(
    name: str,
    *,
    namespace: str = "default",
    node_name: str | None = None,
    phase: str = "Pending",
    scheduler: str = "volcano",
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    containers: list[dict[str, Any]] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    s: dict[str, Any] = {"schedulerName": scheduler, "containers": containers or [container()]}
    if node_name is not None:
        s["nodeName"] = node_name
    s.update(spec)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "annotations": annotations or {},
            "labels": labels or {},
        },
        "spec": s,
        "status": {"phase": phase},
    }


def queue(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": spec,
    }


def podgroup(name: str, min_member: int = 1, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"minMember": min_member, **spec},
    }


def priority_class(name: str, value: int, default: bool = False) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
        "globalDefault": default,
    }


# ------------------------------------------------------------------------------------------
# Volcano Job


def test_volcano_job_becomes_one_gang_with_volcano_pod_names() -> None:
    job = vcjob(
        "train",
        [vctask("master", 1), vctask("worker", 3, minAvailable=2)],
        queue="research",
        minAvailable=3,
        priorityClassName="high",
        networkTopology={"mode": "hard", "highestTierAllowed": 2},
        policies=[{"event": "PodEvicted", "action": "RestartJob"}],
    )
    job["spec"]["tasks"][1]["policies"] = [{"events": ["PodFailed"], "action": "RestartTask"}]
    job["metadata"]["creationTimestamp"] = "2025-01-02T03:04:05Z"
    c = load_objects([node("n0"), queue("research", weight=2), priority_class("high", 700), job])
    (j,) = c.snapshot.jobs
    assert j.name == "train" and j.queue == "research"
    assert j.min_available == 3
    assert dict(j.min_task_member) == {"master": 1, "worker": 2}
    assert j.priority == 700
    assert j.network_topology is not None and j.network_topology.highest_tier_allowed == 2
    assert j.policies == (JobPolicy(event="PodEvicted", action="RestartJob"),)
    assert dict(j.role_policies) == {
        "worker": (JobPolicy(event="PodFailed", action="RestartTask"),)
    }
    assert j.creation == 1735787045
    names = [t.name for t in c.snapshot.tasks]
    assert names == ["train-master-0", "train-worker-0", "train-worker-1", "train-worker-2"]
    assert [t.role for t in c.snapshot.tasks] == ["master", "worker", "worker", "worker"]
    t = c.snapshot.tasks[0]
    assert t.gpu_request is not None and t.gpu_request.count == 1  # from limits
    assert t.request["cpu"] == 2000 and t.request["memory"] == GiB
    assert t.priority == 700  # the job's class, copied onto pods without their own
    assert all(t.phase is TaskPhase.PENDING for t in c.snapshot.tasks)
    assert c.pods["train-worker-2"].index == 2 and not c.pods["train-worker-2"].created
    assert c.jobs["train"].framework == "volcano"


def test_min_available_defaults_to_the_sum_of_task_minimums() -> None:
    c = load_objects([node("n0"), vcjob("j", [vctask("a", 2), vctask("b", 3, minAvailable=1)])])
    assert c.snapshot.jobs[0].min_available == 3
    assert dict(c.snapshot.jobs[0].min_task_member) == {"a": 2, "b": 1}


def test_default_queue_is_created_only_when_a_job_needs_it() -> None:
    c = load_objects([node("n0"), vcjob("j")])
    assert [q.name for q in c.snapshot.queues] == ["default"]
    c = load_objects([node("n0"), queue("q"), vcjob("j", queue="q")])
    assert [q.name for q in c.snapshot.queues] == ["q"]


def test_preemptable_annotation_on_job_and_template() -> None:
    job = vcjob("urgent", [vctask("a", 1), vctask("b", 1)])
    job["metadata"]["annotations"] = {"volcano.sh/preemptable": "false"}
    job["spec"]["tasks"][1]["template"]["metadata"] = {"labels": {"volcano.sh/preemptable": "true"}}
    c = load_objects([node("n0"), job])
    assert c.snapshot.jobs[0].preemptable is False
    assert [t.preemptable for t in c.snapshot.tasks] == [False, True]


def test_namespaced_objects_get_qualified_names() -> None:
    c = load_objects([node("n0"), vcjob("j", namespace="team-a")])
    assert c.snapshot.jobs[0].name == "team-a/j"
    assert c.snapshot.tasks[0].name == "team-a/j-worker-0"
    assert c.pod_of("team-a/j-worker-0") == ("team-a", "j-worker-0")
    assert qualify("default", "x") == "x" and split_name("ns/x") == ("ns", "x")


def test_unknown_spec_fields_and_unmodelled_features_are_reported() -> None:
    job = vcjob("j", preemptable=False)
    term = {"topologyKey": "zone", "labelSelector": {}, "namespaceSelector": {}}
    job["spec"]["tasks"][0]["template"]["spec"]["affinity"] = {
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
    }
    job["spec"]["policies"] = [{"exitCode": 3, "action": "RestartJob"}]
    c = load_objects([node("n0"), job])
    fields = {i.field for i in c.ignored}
    assert "spec.preemptable" in fields
    assert (
        "spec.tasks[0].template.spec.affinity.podAntiAffinity."
        "requiredDuringSchedulingIgnoredDuringExecution[0].namespaceSelector"
    ) in fields
    assert "spec.policies[0].exitCode" in fields


def test_jobs_of_another_scheduler_are_skipped_and_reported() -> None:
    job = vcjob("j", schedulerName="kube-batch")
    c = load_objects([node("n0"), job])
    assert c.snapshot.jobs == ()
    assert "kube-batch" in str(c.ignored[0])


# ------------------------------------------------------------------------------------------
# Pods, PodGroups, nodes


def test_pod_requests_follow_kubernetes_rules() -> None:
    containers = [
        {"name": "a", "resources": {"requests": {"cpu": "1"}, "limits": {"memory": "2Gi"}}},
        {"name": "b", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
    ]
    init = [
        {"name": "i1", "resources": {"requests": {"cpu": "4"}}},
        {"name": "side", "restartPolicy": "Always", "resources": {"requests": {"memory": "1Gi"}}},
        {"name": "i2", "resources": {"requests": {"memory": "3Gi"}}},
    ]
    p = pod(
        "p",
        containers=containers,
        initContainers=init,
        overhead={"cpu": "100m"},
    )
    c = load_objects([node("n0"), p])
    t = c.snapshot.tasks[0]
    # containers: 1.5 cpu, 3Gi (2Gi limit → request); sidecar adds 1Gi → 4Gi;
    # init peak: cpu 4, memory sidecar 1Gi + 3Gi = 4Gi; overhead adds 100m cpu.
    assert t.request["cpu"] == 4100
    assert t.request["memory"] == 4 * GiB


@pytest.mark.parametrize(
    ("k8s_phase", "node_name", "deleting", "expected"),
    [
        ("Pending", None, False, TaskPhase.PENDING),
        ("Pending", "n0", False, TaskPhase.BOUND),
        ("Running", "n0", False, TaskPhase.RUNNING),
        ("Running", "n0", True, TaskPhase.RELEASING),
        ("Succeeded", "n0", False, TaskPhase.SUCCEEDED),
        ("Failed", "n0", False, TaskPhase.FAILED),
    ],
)
def test_pod_phase_mapping(
    k8s_phase: str, node_name: str | None, deleting: bool, expected: TaskPhase
) -> None:
    p = pod("p", node_name=node_name, phase=k8s_phase)
    if deleting:
        p["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    t = load_objects([node("n0"), p]).snapshot.tasks[0]
    assert t.phase is expected


def test_lone_pod_is_a_gang_of_one_in_its_annotated_queue() -> None:
    p = pod("nb", annotations={"scheduling.volcano.sh/queue-name": "q"}, namespace="ml")
    c = load_objects([node("n0"), queue("q"), p])
    (j,) = c.snapshot.jobs
    assert (j.name, j.queue, j.min_available) == ("ml/nb", "q", 1)
    assert c.jobs["ml/nb"].framework == "pod"


def test_podgroup_collects_its_pods() -> None:
    pg = podgroup("g", 2, queue="q", minTaskMember={"w": 2})
    pg["status"] = {"phase": "Inqueue"}
    pods = [
        pod(
            f"g-{i}",
            annotations={"scheduling.k8s.io/group-name": "g"},
            labels={"volcano.sh/task-spec": "w"},
        )
        for i in range(3)
    ]
    c = load_objects([node("n0"), queue("q"), pg, *pods])
    (j,) = c.snapshot.jobs
    assert j.phase is JobPhase.INQUEUE and j.min_available == 2
    assert [t.job for t in c.snapshot.tasks] == ["g"] * 3
    assert {t.role for t in c.snapshot.tasks} == {"w"}


def test_existing_pods_replace_replicas_and_podgroup_of_the_job_merges() -> None:
    job = vcjob("train", [vctask("worker", 3)])
    pg = podgroup("train-6b1c", 3)
    pg["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": "train"}
    ]
    pg["status"] = {"phase": "Running"}
    running = pod(
        "train-worker-1",
        node_name="n0",
        phase="Running",
        labels={"volcano.sh/job-name": "train", "volcano.sh/task-spec": "worker"},
        annotations={"scheduling.k8s.io/group-name": "train-6b1c"},
        containers=[container("2", 1)],
    )
    c = load_objects([node("n0"), job, pg, running])
    assert len(c.snapshot.jobs) == 1
    assert c.snapshot.jobs[0].phase is JobPhase.RUNNING
    assert c.jobs["train"].podgroup == "train-6b1c"
    phases = {t.name: t.phase for t in c.snapshot.tasks}
    assert phases == {
        "train-worker-0": TaskPhase.PENDING,
        "train-worker-1": TaskPhase.RUNNING,
        "train-worker-2": TaskPhase.PENDING,
    }
    assert c.pods["train-worker-1"].created and c.pods["train-worker-1"].index == 1


def test_pods_of_other_schedulers_take_capacity_or_are_reported() -> None:
    busy = pod(
        "sys",
        node_name="n0",
        phase="Running",
        scheduler="default-scheduler",
        containers=[container("10", 3)],
    )
    waiting = pod("web", scheduler="default-scheduler")
    c = load_objects([node("n0", cpu="64"), busy, waiting])
    (n,) = c.snapshot.nodes
    assert n.allocatable["cpu"] == 54000
    assert n.allocatable["pods"] == 109
    assert n.gpus is not None and n.gpus.count == 5
    assert c.snapshot.tasks == ()
    assert len(c.ignored) == 2 and "not by" in str(c.ignored[1])


def test_pods_of_other_schedulers_also_take_capacity_of_interchange_nodes() -> None:
    own = {"nodes": [{"name": "n9", "allocatable": {"cpu": 8, "pods": 10, "nvidia.com/gpu": 4}}]}
    busy = pod(
        "sys", node_name="n9", phase="Running", scheduler="other", containers=[container("3", 1)]
    )
    (n,) = load_objects([own, busy]).snapshot.nodes
    assert (n.allocatable["cpu"], n.allocatable["pods"]) == (5000, 9)
    assert n.gpus is not None and n.gpus.count == 3


def test_running_gpu_pods_get_device_indices() -> None:
    a = pod(
        "a",
        node_name="n0",
        phase="Running",
        containers=[container("1", 2)],
        annotations={"gangsched.io/gpu-indices": "0,3"},
    )
    b = pod("b", node_name="n0", phase="Running", containers=[container("1", 3)])
    c = load_objects([node("n0"), a, b])
    by = {t.name: t.gpu_indices for t in c.snapshot.tasks}
    assert by == {"a": (0, 3), "b": (1, 2, 4)}


def test_node_fields() -> None:
    n = node("n0", 4, labels={"nvidia.com/gpu.count": "2"})
    n["spec"] = {"taints": [{"key": "gpu", "value": "yes", "effect": "NoSchedule"}]}
    n["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    n["metadata"]["annotations"] = {"gangsched.io/gpu-sharing": "false"}
    (rec,) = load_objects([n]).snapshot.nodes
    assert rec.gpus is not None
    assert (rec.gpus.count, rec.gpus.model, rec.gpus.sharing) == (2, "A100", False)
    assert rec.taints[0].key == "gpu" and rec.unschedulable is True
    assert "nvidia.com/gpu" not in rec.allocatable


def test_hami_gpu_share_and_gpu_model_affinity() -> None:
    share = container("1")
    share["resources"]["limits"] = {"nvidia.com/gpu": 1, "nvidia.com/gpucores": 30}
    aff = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {
                                "key": "nvidia.com/gpu.product",
                                "operator": "In",
                                "values": ["A100", "H100"],
                            }
                        ]
                    }
                ]
            }
        }
    }
    c = load_objects([node("n0"), pod("p", containers=[share], affinity=aff)])
    g = c.snapshot.tasks[0].gpu_request
    assert g is not None and (g.count, g.milli, g.models) == (1, 300, ("A100", "H100"))
    assert c.ignored == ()


def test_hypernode_selectors() -> None:
    nodes = [node(f"n{i}", labels={"rack": "r1" if i >= 2 else "r0"}) for i in range(4)]

    def hn(name: str, tier: int, members: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "apiVersion": "topology.volcano.sh/v1alpha1",
            "kind": "HyperNode",
            "metadata": {"name": name},
            "spec": {"tier": tier, "members": members},
        }

    hns = [
        hn(
            "r0", 1, [{"type": "Node", "selector": {"labelMatch": {"matchLabels": {"rack": "r0"}}}}]
        ),
        hn("r1", 1, [{"type": "Node", "selector": {"regexMatch": {"pattern": "n[23]"}}}]),
        hn(
            "top",
            2,
            [
                {"type": "HyperNode", "selector": {"exactMatch": {"name": n}}}
                for n in ("r0", "r1", "gone")
            ],
        ),
    ]
    c = load_objects([*nodes, *hns])
    members = {h.name: h.members for h in c.snapshot.hypernodes}
    assert members == {"r0": ("n0", "n1"), "r1": ("n2", "n3"), "top": ("r0", "r1")}
    assert [i.field for i in c.ignored] == ["spec.members[2].selector"]


def test_pytorchjob() -> None:
    text = (EXAMPLES / "pytorchjob.yaml").read_text(encoding="utf-8")
    extra = [priority_class("low-priority", 1000), queue("low-priority")]
    c = load_text(text + "".join("\n---\n" + yaml.safe_dump(o) for o in extra))
    (j,) = c.snapshot.jobs
    assert (j.name, j.queue, j.min_available, j.priority) == ("mnist-ddp", "low-priority", 4, 1000)
    assert [t.name for t in c.snapshot.tasks] == [
        "mnist-ddp-master-0",
        "mnist-ddp-worker-0",
        "mnist-ddp-worker-1",
        "mnist-ddp-worker-2",
    ]
    assert c.jobs["mnist-ddp"].framework == "pytorchjob"


def test_unknown_kinds_and_versions_are_reported_not_dropped() -> None:
    objs = [
        node("n0"),
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}},
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "k8s-job"}},
        {
            "apiVersion": "scheduling.volcano.sh/v1alpha1",
            "kind": "Queue",
            "metadata": {"name": "q"},
        },
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "data": {"a": "b"}},
    ]
    c = load_objects(objs)
    reported = [(i.ref.kind, i.ref.name) for i in c.ignored]
    assert reported == [
        ("Deployment", "web"),
        ("Job", "k8s-job"),
        ("Queue", "q"),
        ("ConfigMap", "cm"),
    ]


def test_list_documents_and_interchange_snapshots_merge() -> None:
    lst = {"apiVersion": "v1", "kind": "List", "items": [node("n0"), node("n1")]}
    own = {
        "queues": [{"name": "q", "weight": 2}],
        "jobs": [{"name": "mine", "queue": "q", "min_available": 1}],
        "tasks": [{"name": "mine-0", "job": "mine", "request": {"cpu": 1}}],
    }
    c = load_objects([lst, own, vcjob("j", queue="q")])
    assert [n.name for n in c.snapshot.nodes] == ["n0", "n1"]
    assert [j.name for j in c.snapshot.jobs] == ["j", "mine"]
    assert c.pod_of("mine-0") == ("default", "mine-0")


def test_scheduler_configmap_is_the_config() -> None:
    text = 'actions: "enqueue, allocate"\ntiers:\n- plugins:\n  - name: gang\n'
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "volcano-scheduler-configmap", "namespace": "volcano-system"},
        "data": {"volcano-scheduler.conf": text},
    }
    c = load_objects([node("n0"), cm])
    assert c.config == Config.from_volcano_yaml(text)


def test_loading_is_deterministic() -> None:
    text = "\n---\n".join(
        (EXAMPLES / name).read_text(encoding="utf-8")
        for name in ("cluster.yaml", "queues.yaml", "running-pods.yaml", "partial-gang.yaml")
    )
    first, second = load_text(text), load_text(text)
    assert first.snapshot.to_dict() == second.snapshot.to_dict()
    assert first.pods == second.pods and first.jobs == second.jobs


# ------------------------------------------------------------------------------------------
# Errors: one test per class, each naming the manifest and the field path


def _base() -> list[dict[str, Any]]:
    return [node("n0"), priority_class("high", 10), queue("q"), vcjob("j", queue="q")]


def _mutated(path: list[Any], value: Any, index: int = 3) -> list[dict[str, Any]]:
    objs = copy.deepcopy(_base())
    target: Any = objs[index]
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return objs


CPU_PATH = ["spec", "tasks", 0, "template", "spec", "containers", 0, "resources", "requests", "cpu"]

ERROR_CASES: list[tuple[str, list[dict[str, Any]], str, str, str]] = [
    (
        "bad-quantity",
        _mutated(CPU_PATH, "lots"),
        "Job",
        "default/j",
        "spec.tasks[0].template.spec.containers[0].resources.requests.cpu",
    ),
    (
        "negative-quantity",
        _mutated(CPU_PATH, "-1"),
        "Job",
        "default/j",
        "spec.tasks[0].template.spec.containers[0].resources.requests.cpu",
    ),
    (
        "wrong-type",
        _mutated(["spec", "tasks", 0, "replicas"], "eight"),
        "Job",
        "default/j",
        "spec.tasks[0].replicas",
    ),
    (
        "unknown-priority-class",
        _mutated(["spec", "priorityClassName"], "urgent"),
        "Job",
        "default/j",
        "spec.priorityClassName",
    ),
    ("unknown-queue", _mutated(["spec", "queue"], "nope"), "Job", "default/j", "spec.queue"),
    (
        "bad-policy-event",
        _mutated(["spec", "policies"], [{"event": "PodExploded", "action": "RestartJob"}]),
        "Job",
        "default/j",
        "spec.policies[0].event",
    ),
    (
        "bad-policy-action",
        _mutated(["spec", "policies"], [{"event": "PodFailed", "action": "Reboot"}]),
        "Job",
        "default/j",
        "spec.policies[0].action",
    ),
    (
        "bad-topology-mode",
        _mutated(["spec", "networkTopology"], {"mode": "strict"}),
        "Job",
        "default/j",
        "spec.networkTopology.mode",
    ),
    (
        "min-over-replicas",
        _mutated(["spec", "minAvailable"], 5),
        "Job",
        "default/j",
        "spec.minAvailable",
    ),
    (
        "task-min-over-replicas",
        _mutated(["spec", "tasks", 0, "minAvailable"], 3),
        "Job",
        "default/j",
        "spec.tasks[0].minAvailable",
    ),
    (
        "duplicate-task",
        _mutated(["spec", "tasks"], [vctask("w", 1), vctask("w", 1)]),
        "Job",
        "default/j",
        "spec.tasks[1].name",
    ),
    ("no-tasks", _mutated(["spec", "tasks"], []), "Job", "default/j", "spec.tasks"),
    (
        "fractional-gpu",
        _mutated(
            ["spec", "tasks", 0, "template", "spec", "containers", 0, "resources", "limits"],
            {"nvidia.com/gpu": "0.5"},
        ),
        "Job",
        "default/j",
        "spec.tasks[0].template.spec.containers",
    ),
    (
        "bad-annotation",
        _mutated(["metadata", "annotations"], {"volcano.sh/preemptable": "maybe"}),
        "Job",
        "default/j",
        "metadata.annotations[volcano.sh/preemptable]",
    ),
    ("missing-name", _mutated(["metadata"], {}), "Job", "", "metadata.name"),
    ("duplicate-object", [*_base(), queue("q")], "Queue", "q", "metadata.name"),
    ("queue-weight", _mutated(["spec", "weight"], 0, 2), "Queue", "q", "spec.weight"),
    (
        "node-quantity",
        _mutated(["status", "allocatable", "memory"], "1.5.2Gi", 0),
        "Node",
        "n0",
        "status.allocatable.memory",
    ),
    (
        "pod-unknown-node",
        [*_base(), pod("p", node_name="ghost", phase="Running")],
        "Pod",
        "default/p",
        "spec.nodeName",
    ),
    (
        "pod-unknown-podgroup",
        [*_base(), pod("p", annotations={"scheduling.k8s.io/group-name": "nope"})],
        "Pod",
        "default/p",
        "metadata.annotations[scheduling.k8s.io/group-name]",
    ),
    (
        "node-overcommitted",
        [*_base(), pod("p", node_name="n0", phase="Running", containers=[container("100")])],
        "Node",
        "n0",
        "status.allocatable.cpu",
    ),
    ("pod-bad-phase", [*_base(), pod("p", phase="Exploded")], "Pod", "default/p", "status.phase"),
    (
        "podgroup-bad-phase",
        [*_base(), {**podgroup("g"), "status": {"phase": "Sleeping"}}],
        "PodGroup",
        "default/g",
        "status.phase",
    ),
    (
        "hypernode-bad-regex",
        [
            *_base(),
            {
                "apiVersion": "topology.volcano.sh/v1alpha1",
                "kind": "HyperNode",
                "metadata": {"name": "h"},
                "spec": {
                    "tier": 1,
                    "members": [{"type": "Node", "selector": {"regexMatch": {"pattern": "("}}}],
                },
            },
        ],
        "HyperNode",
        "h",
        "spec.members[0].selector.regexMatch.pattern",
    ),
    (
        "hypernode-no-tier",
        [
            *_base(),
            {
                "apiVersion": "topology.volcano.sh/v1alpha1",
                "kind": "HyperNode",
                "metadata": {"name": "h"},
                "spec": {"members": []},
            },
        ],
        "HyperNode",
        "h",
        "spec.tier",
    ),
    (
        "priorityclass-no-value",
        [
            *_base(),
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": "x"},
            },
        ],
        "PriorityClass",
        "x",
        "value",
    ),
    (
        "pytorchjob-no-replicas",
        [
            *_base(),
            {
                "apiVersion": "kubeflow.org/v1",
                "kind": "PyTorchJob",
                "metadata": {"name": "pt"},
                "spec": {},
            },
        ],
        "PyTorchJob",
        "default/pt",
        "spec.pytorchReplicaSpecs",
    ),
]


@pytest.mark.parametrize(
    ("objects", "kind", "name", "field"),
    [c[1:] for c in ERROR_CASES],
    ids=[c[0] for c in ERROR_CASES],
)
def test_invalid_manifest_names_object_and_field(
    objects: list[dict[str, Any]], kind: str, name: str, field: str
) -> None:
    sources = [f"in.yaml, document {i + 1}" for i in range(len(objects))]
    with pytest.raises(SnapshotError) as info:
        load_objects(objects, sources=sources)
    err = info.value
    assert (err.kind, err.name, err.field) == (kind, name, field)
    assert "in.yaml, document" in str(err)


def test_global_default_priority_class_applies_to_jobs_and_pods_without_one() -> None:
    c = load_objects([node("n0"), priority_class("normal", 42, default=True), vcjob("j")])
    assert c.snapshot.jobs[0].priority == 42
    assert {t.priority for t in c.snapshot.tasks} == {42}


def test_system_priority_classes_need_no_manifest() -> None:
    c = load_objects(_mutated(["spec", "priorityClassName"], "system-node-critical"))
    assert c.snapshot.jobs[0].priority == 2_000_001_000


def test_yaml_syntax_error_names_file_and_line() -> None:
    with pytest.raises(SnapshotError) as info:
        load_text("apiVersion: v1\nkind: Node\nmetadata: {name: [\n", source="bad.yaml")
    assert info.value.kind == "file" and info.value.name == "bad.yaml"
    assert "line" in str(info.value)


def test_document_that_is_neither_manifest_nor_snapshot() -> None:
    with pytest.raises(SnapshotError) as info:
        load_text("hello: world\n", source="x.yaml")
    assert info.value.field == "hello" and "x.yaml, document 1" in str(info.value)
    with pytest.raises(SnapshotError, match="expected a mapping"):
        load_text("- a\n- b\n")


def test_interchange_errors_keep_their_path_and_source() -> None:
    with pytest.raises(SnapshotError) as info:
        load_text("nodes:\n- {name: n0, allocatable: {cpu: -1}}\n", source="snap.yaml")
    assert (info.value.kind, info.value.name, info.value.field) == ("node", "n0", "allocatable.cpu")
    assert "snap.yaml" in str(info.value)


BAD_CONF = 'actions: "enqueue, allocate"\ntiers:\n- plugins:\n  - name: gangg\n'


def test_bad_scheduler_configmap_is_a_config_error_with_its_path() -> None:
    cm: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "volcano-scheduler-configmap", "namespace": "volcano-system"},
        "data": {"volcano-scheduler.conf": BAD_CONF},
    }
    with pytest.raises(ConfigError) as info:
        load_objects([cm])
    assert info.value.kind == "ConfigMap"
    assert info.value.name == "volcano-system/volcano-scheduler-configmap"
    assert info.value.field.startswith("data[volcano-scheduler.conf].tiers[0]")
    second = copy.deepcopy(cm)
    second["metadata"]["name"] = "other"
    second["data"]["volcano-scheduler.conf"] = "actions: allocate\n"
    first = copy.deepcopy(second)
    first["metadata"]["name"] = "first"
    with pytest.raises(SnapshotError, match="second scheduler configuration"):
        load_objects([first, second])


# ------------------------------------------------------------------------------------------
# Output


def _cycle(objs: list[dict[str, Any]]) -> tuple[Cluster, Decisions]:
    c = load_objects(objs)
    return c, schedule(c.snapshot, c.config)


def test_bindings_carry_namespace_node_and_gpu_indices() -> None:
    c, d = _cycle([node("n0"), vcjob("j", namespace="ml")])
    out = bindings(c, d)
    assert len(out) == 2
    for body, b in zip(out, d.binds, strict=True):
        assert body["apiVersion"] == "v1" and body["kind"] == "Binding"
        assert body["metadata"]["namespace"] == "ml"
        assert "ml/" + body["metadata"]["name"] == b.task
        assert body["target"] == {"apiVersion": "v1", "kind": "Node", "name": "n0"}
        assert body["metadata"]["annotations"]["gangsched.io/gpu-indices"] == str(b.gpu_indices[0])


def test_podgroup_status_explains_an_unschedulable_gang() -> None:
    c, d = _cycle([node("n0", 2), vcjob("big", [vctask("w", 4)])])
    (pg,) = podgroup_statuses(c, d)
    assert pg["metadata"] == {"name": "big", "namespace": "default"}
    (cond,) = pg["status"]["conditions"]
    assert cond["type"] == "Unschedulable" and cond["status"] == "True"
    assert cond["message"] == d.jobs["big"].message and cond["message"]
    c, d = _cycle([node("n0", 8), vcjob("ok", [vctask("w", 4)])])
    (pg,) = podgroup_statuses(c, d)
    assert pg["status"]["phase"] == "Running"
    assert pg["status"]["conditions"][0]["type"] == "Scheduled"


def test_queue_status_reports_allocation_as_quantities() -> None:
    c, d = _cycle([node("n0"), queue("q", weight=1), vcjob("j", queue="q")])
    (q,) = queue_statuses(c, d)
    assert q["metadata"] == {"name": "q"}
    assert q["status"]["allocated"]["nvidia.com/gpu"] == "2"
    assert q["status"]["allocated"]["cpu"] == "4"
    assert q["status"]["running"] == 1 and q["status"]["state"] == "Open"


def test_evictions_and_policy_actions() -> None:
    job = vcjob(
        "t",
        [vctask("ps", 1), vctask("worker", 2)],
        policies=[{"event": "PodEvicted", "action": "RestartJob"}],
    )
    job["spec"]["tasks"][1]["policies"] = [{"event": "PodEvicted", "action": "RestartTask"}]
    c = load_objects([node("n0"), job])
    d = Decisions(
        evictions=(
            Eviction(task="t-worker-1", reason="preempted", preemptor="urgent"),
            Eviction(task="t-ps-0", reason="preempted", preemptor="urgent"),
        ),
        jobs={"t": JobStatus(phase="Running")},
    )
    body = evictions(c, d)[0]
    assert body["apiVersion"] == "policy/v1" and body["kind"] == "Eviction"
    assert body["metadata"]["name"] == "t-worker-1"
    assert body["metadata"]["annotations"]["gangsched.io/preemptor"] == "urgent"
    acts = job_actions(c, d)
    # One job-wide action per job and cycle (the scheduler's policy engine): RestartJob covers
    # the worker's RestartTask.
    assert [(a.job, a.action) for a in acts] == [("t", "RestartJob")]
    assert acts[0].cause == "PodEvicted: task 't-ps-0' preempted"
    assert job_actions(c, Decisions()) == ()


def test_task_completed_and_pod_failed_policies() -> None:
    job = vcjob(
        "t",
        [vctask("a", 1), vctask("b", 1)],
        policies=[
            {"event": "TaskCompleted", "action": "CompleteJob"},
            {"event": "PodFailed", "action": "AbortJob"},
        ],
    )
    pods = [
        pod("t-a-0", node_name="n0", phase="Succeeded", labels={"volcano.sh/job-name": "t"}),
        pod("t-b-0", node_name="n0", phase="Failed", labels={"volcano.sh/job-name": "t"}),
    ]
    c = load_objects([node("n0"), job, *pods])
    acts = job_actions(c, Decisions())
    # Both fire; the most severe job-wide action is the one reported.
    assert [(a.action, a.cause) for a in acts] == [("AbortJob", "PodFailed: task 't-b-0' failed")]


def test_environment_of_env_svc_and_pytorch_plugins() -> None:
    job = vcjob(
        "pt",
        [vctask("master", 1), vctask("worker", 2)],
        plugins={"env": [], "svc": [], "pytorch": ["--port=2222"]},
    )
    c, d = _cycle([node("n0"), job])
    env = job_environment(c, d)
    assert env["pt-worker-1"] == {
        "MASTER_ADDR": "pt-master-0.pt",
        "MASTER_PORT": "2222",
        "RANK": "2",
        "VC_MASTER_HOSTS": "pt-master-0.pt",
        "VC_MASTER_NUM": "1",
        "VC_TASK_INDEX": "1",
        "VC_WORKER_HOSTS": "pt-worker-0.pt,pt-worker-1.pt",
        "VC_WORKER_NUM": "2",
        "VK_TASK_INDEX": "1",
        "WORLD_SIZE": "3",
    }
    assert env["pt-master-0"]["RANK"] == "0"
    (cm,) = svc_configmaps(c, d)
    assert cm["metadata"]["name"] == "pt-svc"
    assert cm["data"]["worker.host"] == "pt-worker-0.pt\npt-worker-1.pt"
    out = kubernetes_output(c, d)
    assert [o["kind"] for o in out["items"]].count("Binding") == 3


def test_jobs_without_plugins_get_no_environment() -> None:
    c, d = _cycle([node("n0"), vcjob("plain")])
    assert d.binds and job_environment(c, d) == {}


@given(
    st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "pods", "hugepages-2Mi", "example.com/x"]),
    st.integers(0, 2**53),  # MAX_QUANTITY
)
def test_format_quantity_round_trips(resource: str, amount: int) -> None:
    assert parse_quantity(format_quantity(resource, amount), resource) == amount


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots(max_nodes=4, max_jobs=3))
def test_dump_manifests_round_trips_snapshots(snapshot: Any) -> None:
    # Fields Volcano's objects have no place for are not written (docs/volcano.md): the
    # disruption budgets, queues' lending limits, jobs' ages and preemption delays are left out.
    doc = snapshot.to_dict()
    for q in doc["queues"]:
        q.pop("lending_limit", None)
    for j in doc["jobs"]:
        j.pop("preemption_delay", None)
        j.pop("age", None)
    snapshot = Snapshot.from_dict({**doc, "disruption_budgets": []})
    back = load_objects(dump_manifests(snapshot)).snapshot
    assert back == snapshot
    assert back.to_dict() == snapshot.to_dict()


def test_decisions_output_is_deterministic() -> None:
    objs = [node("n0"), node("n1"), vcjob("a", [vctask("w", 6)]), vcjob("b", [vctask("w", 6)])]
    first = kubernetes_output(*_cycle(objs))
    second = kubernetes_output(*_cycle(copy.deepcopy(objs)))
    assert yaml.safe_dump(first) == yaml.safe_dump(second)


def test_bind_of_interchange_task_uses_its_name() -> None:
    own = {
        "nodes": [{"name": "n0", "allocatable": {"cpu": 4}}],
        "queues": [{"name": "default"}],
        "jobs": [{"name": "j"}],
        "tasks": [{"name": "j-0", "job": "j", "request": {"cpu": 1}}],
    }
    c = load_objects([own])
    out = bindings(c, Decisions(binds=(Bind(task="j-0", node="n0"),)))
    assert out[0]["metadata"] == {"name": "j-0", "namespace": "default"}
