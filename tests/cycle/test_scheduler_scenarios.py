"""Scenario tests: gangsched reproduces Volcano's documented behaviour, one case at a time."""

from __future__ import annotations

from typing import Any

import pytest

import gangsched as gs
from _builders import gpu_node
from gangsched.config import Config
from gangsched.scheduler import explain, schedule


def node(
    name: str, cpu: Any = 8, memory: Any = "32Gi", gpus: int = 0, **extra: Any
) -> dict[str, Any]:
    model = extra.pop("model", "A100")
    return gpu_node(name, gpus=gpus or None, cpu=cpu, memory=memory, pods=110, model=model, **extra)


def gang(
    name: str,
    n: int,
    min_available: int,
    *,
    queue: str = "default",
    role: str = "",
    request: dict[str, Any] | None = None,
    phase: str = "Inqueue",
    **task_extra: Any,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    job = {"name": name, "queue": queue, "min_available": min_available, "phase": phase}
    tasks = [
        {
            "name": f"{name}-{i}",
            "job": name,
            "role": role,
            "request": dict(request or {"cpu": 1}),
            **task_extra,
        }
        for i in range(n)
    ]
    return job, tasks


def snap(
    nodes: list[dict[str, Any]],
    jobs: list[dict[str, Any]],
    tasks: list[dict[str, Any]],
    queues: list[dict[str, Any]] | None = None,
) -> gs.Snapshot:
    return gs.Snapshot.from_dict(
        {"nodes": nodes, "queues": queues or [{"name": "default"}], "jobs": jobs, "tasks": tasks}
    )


GANG_ONLY = Config.from_dict(
    {
        "actions": ["enqueue", "allocate", "backfill"],
        "tiers": [
            [{"name": "priority"}, {"name": "gang"}],
            [{"name": "predicates"}, {"name": "nodeorder"}],
        ],
    }
)


def test_gang_all_or_nothing_places_nothing_when_only_five_of_eight_fit() -> None:
    # 8 one-GPU replicas with min_available 8; five single-GPU nodes: Kubernetes would bind 5
    # and leave them holding GPUs; a gang scheduler binds none and says why.
    job, tasks = gang("train", 8, 8, request={"cpu": 1, "nvidia.com/gpu": 1})
    s = snap([node(f"n{i}", gpus=1) for i in range(5)], [job], tasks)
    for config in (None, GANG_ONLY):
        d = schedule(s, config)
        assert d.binds == () and d.pipelined == ()
        status = d.jobs["train"]
        assert status.phase == "Inqueue" and not status.ready
        assert status.reason == "Unschedulable"
        assert status.message.startswith("8/8 tasks in gang unschedulable")
        assert set(d.task_reasons) == {f"train-{i}" for i in range(8)}
    d = schedule(s, GANG_ONLY)
    assert "0/5 nodes are available: 5 Insufficient nvidia.com/gpu." in d.jobs["train"].message


def test_gang_places_all_eight_when_room() -> None:
    job, tasks = gang("train", 8, 8, request={"cpu": 1, "nvidia.com/gpu": 1})
    d = schedule(snap([node(f"n{i}", gpus=2) for i in range(4)], [job], tasks))
    assert len(d.binds) == 8
    assert d.jobs["train"].phase == "Running" and d.jobs["train"].ready
    per_node: dict[str, int] = {}
    for b in d.binds:
        per_node[b.node] = per_node.get(b.node, 0) + 1
        assert len(b.gpu_indices) == 1
    assert all(v == 2 for v in per_node.values())
    assert not d.task_reasons


def test_partial_gang_min_six_of_eight_places_what_fits() -> None:
    # room for 7: the gang minimum (6) is met, the 7th elastic replica is placed too, the 8th
    # gets a reason.
    job, tasks = gang("train", 8, 6, request={"cpu": 4})
    d = schedule(snap([node(f"n{i}", cpu=4) for i in range(7)], [job], tasks), GANG_ONLY)
    assert len(d.binds) == 7
    assert d.jobs["train"].ready and d.jobs["train"].phase == "Running"
    assert list(d.task_reasons) == ["train-7"]
    assert "Insufficient cpu" in d.task_reasons["train-7"]


def test_partial_gang_below_minimum_places_nothing() -> None:
    job, tasks = gang("train", 8, 6, request={"cpu": 4})
    d = schedule(snap([node(f"n{i}", cpu=4) for i in range(5)], [job], tasks), GANG_ONLY)
    assert d.binds == ()
    assert d.jobs["train"].reason == "Unschedulable"


def test_per_role_minimums_are_required() -> None:
    # 1 ps + 4 workers, min_available 3 but min_task_member ps=1, worker=2: the ps (needs a big
    # node) cannot fit, so even though 3 workers fit the job is not placed.
    job = {
        "name": "tf",
        "queue": "default",
        "min_available": 3,
        "phase": "Inqueue",
        "min_task_member": {"ps": 1, "worker": 2},
    }
    tasks = [{"name": "tf-ps-0", "job": "tf", "role": "ps", "request": {"cpu": 16}}]
    tasks += [
        {"name": f"tf-worker-{i}", "job": "tf", "role": "worker", "request": {"cpu": 2}}
        for i in range(4)
    ]
    s = snap([node("n0", cpu=8), node("n1", cpu=8)], [job], tasks)
    d = schedule(s, GANG_ONLY)
    assert d.binds == ()
    assert d.jobs["tf"].reason == "Unschedulable"
    # With a node big enough for the ps, everything fits.
    d2 = schedule(snap([node("n0", cpu=8), node("n1", cpu=16)], [job], tasks), GANG_ONLY)
    assert {b.task for b in d2.binds} >= {"tf-ps-0"}
    assert d2.jobs["tf"].ready


def test_pipelining_onto_releasing_resources() -> None:
    # n0 is full with a task being released; the new 1-task gang fits only once it is gone:
    # it is pipelined (reserved), not bound, and the reservation is reported.
    old_job = {"name": "old", "queue": "default", "min_available": 1, "phase": "Running"}
    old = {"name": "old-0", "job": "old", "request": {"cpu": 8}, "phase": "Releasing", "node": "n0"}
    job, tasks = gang("new", 1, 1, request={"cpu": 6})
    d = schedule(snap([node("n0", cpu=8)], [old_job, job], [old, *tasks]), GANG_ONLY)
    assert d.binds == ()
    assert [(p.task, p.node) for p in d.pipelined] == [("new-0", "n0")]
    assert d.jobs["new"].reason == "Pipelined"


def test_backfill_places_best_effort_tasks() -> None:
    # Best-effort tasks (no request) are left to backfill, which binds them directly; they
    # still respect the node's pod limit.
    job = {"name": "be", "queue": "default", "min_available": 1, "phase": "Inqueue"}
    tasks = [{"name": f"be-{i}", "job": "be", "request": {}} for i in range(3)]
    n = node("n0")
    n["allocatable"]["pods"] = 2
    d = schedule(snap([n], [job], tasks))
    assert [b.task for b in d.binds] == ["be-0", "be-1"]
    assert "Too many pods" in d.task_reasons["be-2"]


BINPACK = Config.from_dict(
    {
        "actions": ["allocate"],
        "tiers": [[{"name": "gang"}], [{"name": "predicates"}, {"name": "binpack"}]],
    }
)


def _score_cluster() -> gs.Snapshot:
    busy = {"name": "busy", "queue": "default", "min_available": 1, "phase": "Running"}
    busy_t = {
        "name": "busy-0",
        "job": "busy",
        "request": {"cpu": 2},
        "phase": "Running",
        "node": "n0",
    }
    job, tasks = gang("web", 1, 1, request={"cpu": 1, "memory": "1Gi"})
    return snap(
        [node("n0", cpu=4, memory="8Gi"), node("n1", cpu=4, memory="8Gi")],
        [busy, job],
        [busy_t, *tasks],
    )


def test_binpack_prefers_the_fuller_node_with_hand_computed_scores() -> None:
    s = _score_cluster()
    # n0: cpu (2+1)/4 = .75, memory 1/8 = .125 → (.75 + .125)/2 · 100 = 43.75
    # n1: cpu 1/4 = .25, memory .125         → (.25 + .125)/2 · 100 = 18.75
    ex = explain(s, "web-0", BINPACK)
    scores = {n.node: n.scores["binpack"] for n in ex.nodes}
    assert scores == pytest.approx({"n0": 43.75, "n1": 18.75})
    assert ex.best == "n0"
    assert [(b.task, b.node) for b in schedule(s, BINPACK).binds] == [("web-0", "n0")]


def test_least_requested_prefers_the_emptier_node_with_hand_computed_scores() -> None:
    s = _score_cluster()
    # least requested: n0 cpu (4000-3000)·100//4000 = 25, mem (8192-1024-200)·100//8192 = 85
    #                  (busy-0 asks no memory: kube counts it at 200Mi) → (25+85)//2 = 55
    #                  n1 cpu 75, mem 87 → 81
    # balanced: n0 fractions .75/.125 → std .3125 → ⌊68.75⌋ = 68; n1 .25/.125 → std .0625 →
    # ⌊93.75⌋ = 93 (kube truncates the score to a whole number)
    ex = explain(s, "web-0", GANG_ONLY)
    by = {n.node: n for n in ex.nodes}
    assert by["n0"].scores["nodeorder"] == 55 + 68
    assert by["n1"].scores["nodeorder"] == 81 + 93
    assert ex.best == "n1"
    assert [(b.task, b.node) for b in schedule(s, GANG_ONLY).binds] == [("web-0", "n1")]


def test_binpack_arguments_from_volcano_yaml() -> None:
    text = """
actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
- plugins:
  - name: predicates
  - name: binpack
    arguments:
      binpack.weight: 10
      binpack.cpu: 2
      binpack.memory: 3
"""
    config = Config.from_volcano_yaml(text)
    # Volcano's own example: node 2 cpu / 4Gi with 1 cpu / 1Gi used, task 1 cpu / 1Gi:
    # (2·2/2 + 3·2/4) / 5 · 100 · 10 = 700.
    busy = {"name": "busy", "queue": "default", "min_available": 1, "phase": "Running"}
    busy_t = {
        "name": "busy-0",
        "job": "busy",
        "request": {"cpu": 1, "memory": "1Gi"},
        "phase": "Running",
        "node": "n0",
    }
    job, tasks = gang("web", 1, 1, request={"cpu": 1, "memory": "1Gi"})
    s = snap([node("n0", cpu=2, memory="4Gi")], [busy, job], [busy_t, *tasks])
    ex = explain(s, "web-0", config)
    assert ex.nodes[0].scores["binpack"] == pytest.approx(700.0)
    assert [b.node for b in schedule(s, config).binds] == ["n0"]


def test_node_selector_and_taints_filter_nodes() -> None:
    nodes = [
        node("plain"),
        node("labelled", labels={"zone": "a"}),
        node(
            "tainted",
            labels={"zone": "a"},
            taints=[{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}],
        ),
        node("cordoned", labels={"zone": "a"}, unschedulable=True),
    ]
    job, tasks = gang("sel", 1, 1, node_selector={"zone": "a"})
    d = schedule(snap(nodes, [job], tasks), GANG_ONLY)
    assert [b.node for b in d.binds] == ["labelled"]

    # Only the tainted node matches and the task does not tolerate it: unschedulable, with the
    # reasons aggregated over nodes.
    job2, tasks2 = gang("sel2", 1, 1, node_selector={"zone": "a"})
    d2 = schedule(snap([nodes[0], nodes[2], nodes[3]], [job2], tasks2), GANG_ONLY)
    assert d2.binds == ()
    msg = d2.task_reasons["sel2-0"]
    assert "0/3 nodes are available" in msg
    assert "1 node(s) had untolerated taint" in msg
    assert "1 node(s) didn't match Pod's node affinity/selector" in msg
    assert "1 node(s) were unschedulable" in msg

    tol = [{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}]
    job3, tasks3 = gang("sel3", 1, 1, node_selector={"zone": "a"}, tolerations=tol)
    d3 = schedule(snap([nodes[0], nodes[2], nodes[3]], [job3], tasks3), GANG_ONLY)
    assert [b.node for b in d3.binds] == ["tainted"]


def test_gpu_model_filtering() -> None:
    nodes = [node("t4", gpus=4, model="T4"), node("a100", gpus=4, model="A100")]
    job, tasks = gang("m", 2, 2, request={"cpu": 1}, gpu_request={"count": 1, "models": ["A100"]})
    d = schedule(snap(nodes, [job], tasks), GANG_ONLY)
    assert {b.node for b in d.binds} == {"a100"}
    assert sorted(b.gpu_indices for b in d.binds) == [(0,), (1,)]
    job2, tasks2 = gang("m2", 1, 1, gpu_request={"count": 1, "models": ["H100"]})
    d2 = schedule(snap(nodes, [job2], tasks2), GANG_ONLY)
    assert d2.binds == ()
    assert "2 node(s) didn't have the requested GPU model" in d2.task_reasons["m2-0"]


def test_fractional_gpus_share_a_device_only_when_sharing_is_allowed() -> None:
    job, tasks = gang("frac", 4, 1, request={"cpu": 1}, gpu_request={"count": 1, "milli": 500})
    shared = node("shared", gpus=2)
    d = schedule(snap([shared], [job], tasks), GANG_ONLY)
    # four halves on two devices: best-fit puts the second half on the device already in use
    assert [b.gpu_indices for b in d.binds] == [(0,), (0,), (1,), (1,)]

    exclusive = node("exclusive", gpus=2)
    exclusive["gpus"]["sharing"] = False
    d2 = schedule(snap([exclusive], [job], tasks), GANG_ONLY)
    # without sharing each half takes a whole device: only two fit
    assert [b.gpu_indices for b in d2.binds] == [(0,), (1,)]
    assert "Insufficient nvidia.com/gpu" in d2.task_reasons["frac-2"]


def test_default_config_end_to_end_with_enqueue_and_queues() -> None:
    # Two queues, jobs start Pending: enqueue admits them, allocate places them, statuses and
    # queue counters come out.
    queues = [{"name": "a", "weight": 1}, {"name": "b", "weight": 1}]
    ja, ta = gang("ja", 2, 2, queue="a", phase="Pending", request={"cpu": 2})
    jb, tb = gang("jb", 2, 2, queue="b", phase="Pending", request={"cpu": 2})
    s = snap([node("n0", cpu=8), node("n1", cpu=8)], [ja, jb], ta + tb, queues)
    d = schedule(s)
    assert len(d.binds) == 4
    assert d.jobs["ja"].phase == "Running" and d.jobs["jb"].phase == "Running"
    assert d.queues["a"].running == 1 and d.queues["b"].running == 1
    assert d.queues["a"].allocated["cpu"] == 4000


def test_enqueue_rejects_job_whose_minimum_exceeds_the_overcommitted_cluster() -> None:
    job = {
        "name": "huge",
        "queue": "default",
        "min_available": 1,
        "phase": "Pending",
        "min_resources": {"cpu": 100},
    }
    tasks = [{"name": "huge-0", "job": "huge", "request": {"cpu": 100}}]
    d = schedule(snap([node("n0", cpu=8)], [job], tasks))
    assert d.binds == ()
    assert d.jobs["huge"].phase == "Pending"
    assert d.jobs["huge"].reason == "NotEnqueued"
    assert "overcommit" in d.jobs["huge"].message
    assert "huge-0" in d.task_reasons


def test_running_gang_keeps_phase_and_elastic_tasks_interleave() -> None:
    # A running gang at its minimum gets its elastic tasks one at a time, interleaved with a
    # second job by drf share: both end with the same number of tasks on the 4 free slots.
    ja, ta = gang("ja", 4, 1, request={"cpu": 1})
    jb, tb = gang("jb", 4, 1, request={"cpu": 1})
    cfg = Config.from_dict(
        {
            "actions": ["allocate"],
            "tiers": [[{"name": "gang"}], [{"name": "drf"}, {"name": "predicates"}]],
        }
    )
    d = schedule(snap([node("n0", cpu=4)], [ja, jb], ta + tb), cfg)
    got = [b.task.split("-")[0] for b in d.binds]
    assert sorted(got) == ["ja", "ja", "jb", "jb"]


def test_closed_queue_places_nothing_new() -> None:
    job, tasks = gang("j", 1, 1)
    s = snap([node("n0")], [job], tasks, [{"name": "default", "state": "Closed"}])
    d = schedule(s)
    assert d.binds == ()
    assert d.task_reasons["j-0"]


def test_plugin_missing_from_the_registry_is_a_config_error() -> None:
    # The config names a valid built-in, but the registry handed to schedule() lacks it.
    reg = gs.Registry(actions=dict(gs.default_registry().actions))
    cfg = Config.from_dict({"actions": ["allocate"], "tiers": [[{"name": "gang"}]]})
    job, tasks = gang("j", 1, 1)
    with pytest.raises(gs.ConfigError, match="gang"):
        schedule(snap([node("n0")], [job], tasks), cfg, registry=reg)


def test_best_effort_tasks_of_a_gang_that_is_not_ready_are_not_bound() -> None:
    # min_available 3: one best-effort task and two tasks too big for the node. The gang is not
    # ready, so backfill must not bind the best-effort task on its own (a partial gang).
    job = {"name": "mix", "queue": "default", "min_available": 3, "phase": "Inqueue"}
    tasks = [{"name": "mix-be", "job": "mix", "request": {}}]
    tasks += [{"name": f"mix-{i}", "job": "mix", "request": {"cpu": 64}} for i in range(2)]
    d = schedule(snap([node("n0", cpu=8)], [job], tasks))
    assert d.binds == ()
    assert "mix-be" in d.task_reasons


def test_a_node_with_absurdly_many_gpus_is_rejected_at_input() -> None:
    with pytest.raises(gs.SnapshotError, match=r"gpus.*count"):
        gs.Snapshot.from_dict({"nodes": [{"name": "n", "gpus": {"count": 2**40}}]})
