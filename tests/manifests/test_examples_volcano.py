"""The manifests in examples/volcano/ load, round-trip and schedule with the expected decisions;
examples/k8s_scheduler.py translates recorded API objects into the right API calls."""

from __future__ import annotations

import copy
import importlib.util
import json
import sys
from dataclasses import replace as gs_replace
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from _recorded_api import Forbidden, Recorded
from gangsched.config import Config
from gangsched.decisions import Decisions, Eviction
from gangsched.io.k8s import Cluster, load_files, load_objects
from gangsched.io.volcano_out import (
    bindings,
    dump_manifests,
    job_actions,
    job_environment,
    podgroup_statuses,
)
from gangsched.model.snapshot import Snapshot
from gangsched.scheduler import schedule

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "volcano"
BASE = ["cluster.yaml", "queues.yaml", "scheduler-configmap.yaml", "hypernodes.yaml"]
WORKLOADS = [
    "pytorch-job.yaml",
    "distributed-training.yaml",
    "partial-gang.yaml",
    "urgent-job.yaml",
    "pytorchjob.yaml",
    "topology-job.yaml",
    "running-pods.yaml",
]


def load(*files: str, extra: list[dict[str, Any]] | None = None) -> Cluster:
    objects: list[Any] = []
    for name in [*BASE, *files]:
        objects += [d for d in yaml.safe_load_all((EXAMPLES / name).read_text()) if d]
    return load_objects(objects + (extra or []))


def cycle(*files: str, extra: list[dict[str, Any]] | None = None) -> tuple[Cluster, Decisions]:
    c = load(*files, extra=extra)
    assert c.config is not None  # the example ConfigMap is picked up
    return c, schedule(c.snapshot, c.config)


def binds_of(d: Decisions, job: str) -> dict[str, tuple[str, tuple[int, ...]]]:
    return {b.task: (b.node, b.gpu_indices) for b in d.binds if b.task.startswith(job + "-")}


def running_pod(name: str, node: str, gpus: int) -> dict[str, Any]:
    """A pod of another scheduler holding ``gpus`` GPUs on ``node`` (as kubectl shows it)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "serving"},
        "spec": {
            "schedulerName": "default-scheduler",
            "nodeName": node,
            "containers": [
                {"name": "m", "resources": {"limits": {"nvidia.com/gpu": gpus, "cpu": "8"}}}
            ],
        },
        "status": {"phase": "Running"},
    }


# ------------------------------------------------------------------------------------------
# Loading and round trips


def test_examples_directory_is_covered() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("*.yaml")) == sorted(BASE + WORKLOADS)


@pytest.mark.parametrize("workload", WORKLOADS)
def test_example_round_trips_through_the_loader(workload: str) -> None:
    c = load(workload)
    assert c.ignored == ()
    snap = c.snapshot
    assert Snapshot.from_dict(snap.to_dict()) == snap
    again = load_objects(dump_manifests(snap)).snapshot
    assert again == snap
    # and once more from YAML text, as a user would save it
    text = yaml.safe_dump_all(dump_manifests(snap))
    assert load_objects(list(yaml.safe_load_all(text))).snapshot == snap


def test_cluster_examples() -> None:
    c = load()
    assert [n.name for n in c.snapshot.nodes] == [f"gpu-node-{i}" for i in range(4)]
    assert all(n.gpus is not None and n.gpus.count == 8 for n in c.snapshot.nodes)
    assert {n.gpus.model for n in c.snapshot.nodes if n.gpus} == {"NVIDIA-A100-SXM4-80GB"}
    queues = {q.name: q for q in c.snapshot.queues}
    assert queues["high-priority"].weight == 4 and queues["low-priority"].weight == 1
    cap_high, cap_low = queues["high-priority"].capability, queues["low-priority"].capability
    assert cap_high is not None and cap_high["nvidia.com/gpu"] == 32_000
    assert cap_low is not None and cap_low["nvidia.com/gpu"] == 16_000
    tree = {h.name: (h.tier, h.members) for h in c.snapshot.hypernodes}
    assert tree == {
        "rack-0": (1, ("gpu-node-0", "gpu-node-1")),
        "rack-1": (1, ("gpu-node-2", "gpu-node-3")),
        "spine-0": (2, ("rack-0", "rack-1")),
    }
    assert c.config is not None and c.config.plugin("binpack") is not None
    gang = c.config.plugin("gang")
    assert gang is not None and not gang.enabled("preemptable")


# ------------------------------------------------------------------------------------------
# Decisions


def test_pytorch_8gpu_job_binds_all_eight_with_torchrun_environment() -> None:
    c, d = cycle("pytorch-job.yaml")
    binds = binds_of(d, "pytorch-8gpu")
    assert len(binds) == 8
    assert d.jobs["pytorch-8gpu"].phase == "Running" and d.jobs["pytorch-8gpu"].ready
    # binpack: the gang fills one node, one device each
    assert {node for node, _ in binds.values()} == {"gpu-node-0"}
    assert sorted(i for _, idx in binds.values() for i in idx) == list(range(8))
    env = job_environment(c, d)
    assert set(env) == set(binds)
    ranks = sorted(int(e["RANK"]) for e in env.values())
    assert ranks == list(range(8))
    assert {e["MASTER_ADDR"] for e in env.values()} == {"pytorch-8gpu-master-0.pytorch-8gpu"}
    assert env["pytorch-8gpu-worker-3"]["RANK"] == "4"
    assert env["pytorch-8gpu-worker-3"]["VC_TASK_INDEX"] == "3"
    assert env["pytorch-8gpu-worker-3"]["WORLD_SIZE"] == "8"
    assert env["pytorch-8gpu-master-0"]["VC_WORKER_NUM"] == "7"


def test_pytorch_8gpu_job_waits_whole_when_only_six_gpus_are_free() -> None:
    c, d = cycle("pytorch-job.yaml", "running-pods.yaml")
    assert binds_of(d, "pytorch-8gpu") == {}
    st = d.jobs["pytorch-8gpu"]
    assert not st.ready and st.pending == 8
    pg = next(p for p in podgroup_statuses(c, d) if p["metadata"]["name"] == "pytorch-8gpu")
    (cond,) = pg["status"]["conditions"]
    assert cond["type"] == "Unschedulable" and "nvidia.com/gpu" in cond["message"]
    assert d.jobs["background"].phase == "Running"


def test_partial_gang_starts_with_six_of_eight() -> None:
    c, d = cycle("partial-gang.yaml", "running-pods.yaml")
    binds = binds_of(d, "partial-gang")
    assert len(binds) == 6
    assert {node for node, _ in binds.values()} == {"gpu-node-3"}
    # devices 6 and 7 are held by background-3 (its gangsched.io/gpu-indices annotation)
    assert sorted(i for _, idx in binds.values() for i in idx) == [0, 1, 2, 3, 4, 5]
    st = d.jobs["partial-gang"]
    assert st.phase == "Running" and st.ready and st.pending == 2
    waiting = sorted(set(c.pods) - set(binds) - {t for t in c.pods if t.startswith("background")})
    assert waiting == ["partial-gang-worker-6", "partial-gang-worker-7"]
    assert all(d.task_reasons[t] for t in waiting)


def test_urgent_job_goes_first_and_is_not_preemptable() -> None:
    c, d = cycle("urgent-job.yaml", "partial-gang.yaml", "running-pods.yaml")
    urgent = c.snapshot.job("urgent-job")
    assert urgent.priority == 1_000_000 and urgent.preemptable is False
    assert all(not t.preemptable for t in c.snapshot.tasks_of("urgent-job"))
    assert len(binds_of(d, "urgent-job")) == 4
    # 6 GPUs were free: after the urgent 4, the 6-of-8 gang cannot start
    assert binds_of(d, "partial-gang") == {}
    assert d.jobs["urgent-job"].phase == "Running"
    assert not d.jobs["partial-gang"].ready


def test_queue_capability_holds_low_priority_to_sixteen_gpus() -> None:
    second = next(
        d for d in yaml.safe_load_all((EXAMPLES / "distributed-training.yaml").read_text())
    )
    second = copy.deepcopy(second)
    second["metadata"]["name"] = "dist-train-2"
    _, d = cycle("distributed-training.yaml", "pytorchjob.yaml", "pytorch-job.yaml", extra=[second])
    assert d.jobs["dist-train"].ready and d.jobs["dist-train-2"].ready
    assert not d.jobs["mnist-ddp"].ready  # 8 + 8 GPUs used: the 16-GPU cap is reached
    assert "low-priority" in d.jobs["mnist-ddp"].message
    assert d.jobs["pytorch-8gpu"].ready  # the other queue is not affected
    assert d.queues["low-priority"].allocated["nvidia.com/gpu"] == 16_000
    assert d.queues["high-priority"].allocated["nvidia.com/gpu"] == 8_000


def test_distributed_training_restarts_when_a_pod_is_evicted() -> None:
    c, d = cycle("distributed-training.yaml")
    binds = binds_of(d, "dist-train")
    assert len(binds) == 4 and all(len(idx) == 2 for _, idx in binds.values())
    job = c.snapshot.job("dist-train")
    assert [(p.event, p.action) for p in job.policies] == [
        ("PodEvicted", "RestartJob"),
        ("TaskCompleted", "CompleteJob"),
    ]
    # Next cycle: the pods run where they were bound; one of them is evicted.
    pods = []
    for body in bindings(c, d):
        pods.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": body["metadata"]["name"],
                    "annotations": body["metadata"]["annotations"],
                    "labels": {
                        "volcano.sh/job-name": "dist-train",
                        "volcano.sh/task-spec": "worker",
                    },
                },
                "spec": {
                    "schedulerName": "volcano",
                    "nodeName": body["target"]["name"],
                    "containers": [{"name": "t", "resources": {"limits": {"nvidia.com/gpu": 2}}}],
                },
                "status": {"phase": "Running"},
            }
        )
    running = load("distributed-training.yaml", extra=pods)
    assert all(t.phase.value == "Running" for t in running.snapshot.tasks)
    evicted = Decisions(evictions=(Eviction(task="dist-train-worker-2", reason="reclaimed"),))
    (action,) = job_actions(running, evicted)
    assert (action.job, action.action) == ("dist-train", "RestartJob")
    assert action.cause == "PodEvicted: task 'dist-train-worker-2' reclaimed"


def test_kubeflow_pytorchjob_gets_master_addr_and_ranks() -> None:
    c, d = cycle("pytorchjob.yaml")
    assert len(binds_of(d, "mnist-ddp")) == 4
    env = job_environment(c, d)
    assert {e["MASTER_ADDR"] for e in env.values()} == {"mnist-ddp-master-0"}
    assert {e["WORLD_SIZE"] for e in env.values()} == {"4"}
    assert {t: e["RANK"] for t, e in env.items()} == {
        "mnist-ddp-master-0": "0",
        "mnist-ddp-worker-0": "1",
        "mnist-ddp-worker-1": "2",
        "mnist-ddp-worker-2": "3",
    }


def test_rack_local_job_lands_inside_one_rack() -> None:
    busy = [running_pod("busy-0", "gpu-node-0", 8), running_pod("busy-1", "gpu-node-1", 8)]
    c, d = cycle("topology-job.yaml", extra=busy)
    topo = c.snapshot.job("rack-local").network_topology
    assert topo is not None and topo.mode.value == "hard" and topo.highest_tier_allowed == 1
    binds = binds_of(d, "rack-local")
    assert len(binds) == 8
    rack1 = set(next(h for h in c.snapshot.hypernodes if h.name == "rack-1").members)
    assert {node for node, _ in binds.values()} <= rack1


def test_interchange_snapshot_example() -> None:
    c = load_files([ROOT / "examples" / "snapshot.yaml"])
    d = schedule(c.snapshot)
    assert sorted(b.task for b in d.binds) == ["llm-finetune-0", "llm-finetune-1"]
    assert d.jobs["llm-finetune"].ready and not d.jobs["huge-pretrain"].ready


# ------------------------------------------------------------------------------------------
# examples/k8s_scheduler.py against recorded API objects


def _example_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gangsched_example_k8s_scheduler", ROOT / "examples" / "k8s_scheduler.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def recorded() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(
        (ROOT / "tests" / "data" / "k8s_api_objects.json").read_text()
    )
    return data


def test_example_scheduler_collects_plans_and_posts(recorded: dict[str, Any]) -> None:
    mod = _example_module()
    api = Recorded(recorded)
    objects = mod.collect(api, api, api, lambda item: item)
    assert {o["kind"] for o in objects} == {"Node", "Pod", "PriorityClass", "Queue", "PodGroup"}
    assert all(o["apiVersion"] for o in objects)
    plan = mod.plan(objects)
    # the gang of four 3-GPU pods and the notebook are placed; nothing else is ours
    placed = {b["metadata"]["namespace"] + "/" + b["metadata"]["name"]: b for b in plan.bindings}
    assert sorted(placed) == [
        "ml/notebook-alice",
        "ml/train-worker-0",
        "ml/train-worker-1",
        "ml/train-worker-2",
        "ml/train-worker-3",
    ]
    # gpu-b lost 2 GPUs to the inference pod of the default scheduler; the control plane is
    # tainted; every 3-GPU pod gets three distinct devices on its node
    used: dict[str, list[int]] = {}
    for b in plan.bindings:
        node = b["target"]["name"]
        assert node in ("gpu-a", "gpu-b")
        used.setdefault(node, []).extend(
            int(i) for i in b["metadata"]["annotations"]["gangsched.io/gpu-indices"].split(",")
        )
    assert len(used.get("gpu-b", [])) <= 6
    assert all(len(set(v)) == len(v) for v in used.values())
    assert [pg["metadata"] for pg in plan.podgroups] == [{"name": "train", "namespace": "ml"}]
    assert plan.podgroups[0]["status"]["phase"] == "Running"
    train = plan.cluster.snapshot.job("ml/train")
    assert train.priority == 5000 and train.min_available == 4
    notebook = plan.cluster.snapshot.job("ml/notebook-alice")
    assert notebook.queue == "interactive"

    log = mod.apply(plan, api, api)
    kinds = [name for name, _, _ in api.calls]
    assert kinds == ["create_namespaced_binding"] * 5 + ["patch_namespaced_custom_object_status"]
    _, args, kwargs = api.calls[0]
    assert args[0] == "ml" and args[1]["kind"] == "Binding"
    assert kwargs == {"_preload_content": False}
    status_call = api.calls[-1]
    assert status_call[1][:5] == ("scheduling.volcano.sh", "v1beta1", "ml", "podgroups", "train")
    assert status_call[1][5]["status"]["phase"] == "Running"
    assert len(log) == 6 and log[0].startswith("bind ml/")


def test_example_scheduler_dry_run_and_api_errors(recorded: dict[str, Any]) -> None:
    mod = _example_module()
    api = Recorded(recorded)
    plan = mod.plan(mod.collect(api, api, api, lambda item: item))
    log = mod.apply(plan, api, api, dry_run=True)
    assert api.calls == [] and len(log) == 6
    forbidden = Recorded(recorded, missing=Forbidden)
    with pytest.raises(Forbidden):
        mod.collect(forbidden, forbidden, forbidden, lambda item: item)


def test_example_scheduler_binds_only_pods_that_exist(recorded: dict[str, Any]) -> None:
    mod = _example_module()
    api = Recorded(recorded)
    objects = mod.collect(api, api, api, lambda item: item)
    vcjob = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "later", "namespace": "ml"},
        "spec": {
            "schedulerName": "gangsched",
            "tasks": [
                {
                    "name": "w",
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]
                        }
                    },
                }
            ],
        },
    }
    plan = mod.plan([*objects, vcjob])
    assert plan.decisions.jobs["ml/later"].ready  # placed in the cycle's reasoning...
    assert all(b["metadata"]["name"] != "later-w-0" for b in plan.bindings)  # ...not posted


def test_rack_local_job_stays_in_one_rack_where_spreading_would_cross_racks() -> None:
    # On the empty cluster Volcano's default node order (least-requested) spreads replicas
    # over the least-used nodes, which crosses racks; the hard tier-1 constraint keeps the 8
    # GPUs inside one rack. (The example ConfigMap binpacks, which would hide the difference.)
    c = load("topology-job.yaml")
    d = schedule(c.snapshot, Config.default())
    racks = {h.name: set(h.members) for h in c.snapshot.hypernodes if h.tier == 1}
    nodes = {node for node, _ in binds_of(d, "rack-local").values()}
    assert len(binds_of(d, "rack-local")) == 8
    assert any(nodes <= members for members in racks.values())
    # The same job without its topology constraint spreads across both racks.
    job = c.snapshot.job("rack-local")
    free = c.snapshot.replace(
        jobs=[
            gs_replace(j, network_topology=None) if j.name == job.name else j
            for j in c.snapshot.jobs
        ]
    )
    spread = {
        b.node for b in schedule(free, Config.default()).binds if b.task.startswith("rack-local-")
    }
    assert not any(spread <= members for members in racks.values())
