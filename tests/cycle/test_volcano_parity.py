"""Decisions that must match Volcano's on small clusters where gangsched once differed: role
minimums met by best-effort tasks, the exact deserved boundary, gang-safe victims in preempt
and reclaim (whole gangs only under gangpreempt / gangreclaim or the documented option), the
enqueue shape check of a configuration read from Volcano's YAML, and capacity's per-dimension
reclaim."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np

import gangsched as gs
from gangsched.config import Config
from gangsched.plugins._exact_shares import exact_water_fill

GI = 2**30

TIERS: list[list[dict[str, Any]]] = [
    [{"name": "priority"}, {"name": "gang"}, {"name": "conformance"}],
    [{"name": "drf"}, {"name": "predicates"}, {"name": "proportion"}, {"name": "nodeorder"}],
]


def config(*actions: str, **configurations: dict[str, object]) -> Config:
    return Config.from_dict(
        {
            "actions": list(actions),
            "tiers": TIERS,
            **({"configurations": configurations} if configurations else {}),
        }
    )


def snap(**parts: Any) -> gs.Snapshot:
    return gs.Snapshot.from_dict({"hypernodes": [], "queues": [{"name": "default"}], **parts})


# -- best-effort tasks count for their role ----------------------------------------------------


def test_role_minimum_met_by_a_pending_best_effort_task_binds_it() -> None:
    # Volcano's CheckTaskReady counts a pending task with an empty request for its role.
    s = snap(
        nodes=[{"name": "n0", "allocatable": {"cpu": 4, "memory": "8Gi", "pods": 110}}],
        jobs=[
            {
                "name": "j",
                "queue": "default",
                "min_available": 1,
                "min_task_member": {"master": 0, "worker": 1},
                "phase": "Inqueue",
            }
        ],
        tasks=[{"name": "j-w0", "job": "j", "role": "worker", "request": {}}],
    )
    d = gs.schedule(s, config("enqueue", "allocate", "backfill"))
    assert [(b.task, b.node) for b in d.binds] == [("j-w0", "n0")]
    assert d.jobs["j"].phase == "Running"


def test_best_effort_task_of_another_role_does_not_meet_a_role_minimum() -> None:
    s = snap(
        nodes=[{"name": "n0", "allocatable": {"cpu": 4, "memory": "8Gi", "pods": 110}}],
        jobs=[
            {
                "name": "j",
                "queue": "default",
                "min_available": 1,
                "min_task_member": {"worker": 1},
                "phase": "Inqueue",
            }
        ],
        tasks=[{"name": "j-m0", "job": "j", "role": "master", "request": {}}],
    )
    d = gs.schedule(s, config("enqueue", "allocate", "backfill"))
    assert d.binds == ()


# -- the deserved boundary ---------------------------------------------------------------------


def test_deserved_amounts_are_exact_for_whole_inputs() -> None:
    # 36Gi between weights 2, 5, 1, 3 asking 8, 6, 20, 16Gi: the third deserves exactly 6Gi.
    d = exact_water_fill(
        np.array([36.0 * GI]),
        np.array([2.0, 5.0, 1.0, 3.0]),
        np.array([[8.0 * GI], [6.0 * GI], [20.0 * GI], [16.0 * GI]]),
        np.zeros((4, 1)),
        np.full((4, 1), np.inf),
        np.ones(4, dtype=np.bool_),
    )
    assert d[2][0] == Fraction(6 * GI)
    assert sum(row[0] for row in d) <= 36 * GI


def test_a_task_that_brings_its_queue_exactly_to_deserved_is_admitted() -> None:
    def job(name: str, queue: str, phase: str = "Running") -> dict[str, Any]:
        return {"name": name, "queue": queue, "min_available": 1, "phase": phase}

    def task(name: str, gi: int, node: str | None = None) -> dict[str, Any]:
        t: dict[str, Any] = {"name": f"{name}-0", "job": name, "request": {"memory": f"{gi}Gi"}}
        if node:
            t.update(phase="Running", node=node)
        return t

    s = snap(
        nodes=[{"name": "n0", "allocatable": {"cpu": 64, "memory": "36Gi", "pods": 110}}],
        queues=[
            {"name": "a", "weight": 2},
            {"name": "b", "weight": 5},
            {"name": "c", "weight": 1},
            {"name": "d", "weight": 3},
        ],
        jobs=[
            job("a1", "a"),
            job("b1", "b"),
            job("c1", "c"),
            job("d1", "d"),
            job("c2", "c", "Inqueue"),
            job("c3", "c", "Inqueue"),
        ],
        tasks=[
            task("a1", 8, "n0"),
            task("b1", 6, "n0"),
            task("c1", 5, "n0"),
            task("d1", 16, "n0"),
            task("c2", 1),
            task("c3", 14),
        ],
    )
    d = gs.schedule(s, config("enqueue", "allocate", "backfill"))
    assert [b.task for b in d.binds] == ["c2-0"]
    assert d.queues["c"].deserved["memory"] == 6 * GI


# -- gang-safe victims in preempt and reclaim; whole gangs under gangpreempt / gangreclaim ---

GPU = "nvidia.com/gpu"


def _gpu_node(name: str = "n0", gpus: int = 4) -> dict[str, Any]:
    return {
        "name": name,
        "allocatable": {"cpu": 32, "memory": "256Gi", "pods": 110},
        "gpus": {"count": gpus, "model": "A100"},
    }


def _gang_at_minimum(low_min: int = 2, queue_high: str = "default", high: int = 2) -> gs.Snapshot:
    """A gang 'low' (priority 1) running 2 GPU tasks on a 4-GPU node with ``min_available``
    ``low_min``; a gang 'high' (priority 10, ``queue_high``) waits for ``high`` × 2 GPUs."""
    queues = [{"name": "default"}] + ([{"name": queue_high}] if queue_high != "default" else [])
    return snap(
        nodes=[_gpu_node()],
        queues=queues,
        jobs=[
            {
                "name": "low",
                "queue": "default",
                "min_available": low_min,
                "priority": 1,
                "phase": "Running",
            },
            {
                "name": "high",
                "queue": queue_high,
                "min_available": high,
                "priority": 10,
                "phase": "Inqueue",
            },
        ],
        tasks=[
            {
                "name": f"low-{i}",
                "job": "low",
                "request": {"cpu": 1, GPU: 2},
                "phase": "Running",
                "node": "n0",
                "gpu_indices": [2 * i, 2 * i + 1],
            }
            for i in range(2)
        ]
        + [
            {"name": f"high-{i}", "job": "high", "request": {"cpu": 1, GPU: 2}} for i in range(high)
        ],
    )


def _evicted(d: gs.Decisions) -> list[str]:
    return sorted(e.task for e in d.evictions)


def test_preempt_leaves_a_gang_running_at_its_minimum() -> None:
    # Volcano's gang plugin lets preempt take only tasks above minAvailable.
    d = gs.schedule(_gang_at_minimum(), config("enqueue", "allocate", "preempt", "backfill"))
    assert d.evictions == () and d.pipelined == ()
    assert d.preemption_reasons["high"].startswith("preempt:")


def test_preempt_takes_a_gangs_surplus() -> None:
    # min_available 0 would be no gang; with min 1 the low job has one task of surplus only,
    # which frees 2 of the 4 GPUs the claim needs: nothing goes.
    d = gs.schedule(_gang_at_minimum(1), config("enqueue", "allocate", "preempt", "backfill"))
    assert d.evictions == ()


def test_gangpreempt_evicts_a_gang_at_its_minimum_whole() -> None:
    d = gs.schedule(_gang_at_minimum(), config("enqueue", "allocate", "gangpreempt", "backfill"))
    assert _evicted(d) == ["low-0", "low-1"]
    assert sorted(p.task for p in d.pipelined) == ["high-0", "high-1"]
    assert d.jobs["high"].message.startswith("gangpreempt:")


def test_allow_whole_bundle_switches_whole_gangs_on_for_preempt_and_off_for_gangpreempt() -> None:
    s = _gang_at_minimum()
    on = config("enqueue", "allocate", "preempt", "backfill", preempt={"allowWholeBundle": True})
    off = config(
        "enqueue", "allocate", "gangpreempt", "backfill", gangpreempt={"allowWholeBundle": False}
    )
    assert _evicted(gs.schedule(s, on)) == ["low-0", "low-1"]
    assert gs.schedule(s, off).evictions == ()


def test_reclaim_leaves_a_gang_at_its_minimum_and_gangreclaim_takes_it_whole() -> None:
    # 'other' deserves half the GPUs; its one 2-GPU task is within that
    s = _gang_at_minimum(queue_high="other", high=1)
    assert gs.schedule(s, config("enqueue", "allocate", "reclaim", "backfill")).evictions == ()
    d = gs.schedule(s, config("enqueue", "allocate", "gangreclaim", "backfill"))
    assert _evicted(d) == ["low-0", "low-1"]
    assert [p.task for p in d.pipelined] == ["high-0"]


def test_preempt_takes_surplus_only_on_the_node_the_claim_goes_to() -> None:
    # 'low' (min 1) runs one task on each of two nodes; the claim fits on either node once
    # that node's task goes. Volcano evicts on one node only; so does preempt.
    s = snap(
        nodes=[_gpu_node("n0", 2), _gpu_node("n1", 2)],
        jobs=[
            {
                "name": "low",
                "queue": "default",
                "min_available": 1,
                "priority": 1,
                "phase": "Running",
            },
            {
                "name": "high",
                "queue": "default",
                "min_available": 1,
                "priority": 10,
                "phase": "Inqueue",
            },
        ],
        tasks=[
            {
                "name": "low-0",
                "job": "low",
                "request": {"cpu": 1, GPU: 2},
                "phase": "Running",
                "node": "n0",
                "gpu_indices": [0, 1],
            },
            {
                "name": "low-1",
                "job": "low",
                "request": {"cpu": 1, GPU: 2},
                "phase": "Running",
                "node": "n1",
                "gpu_indices": [0, 1],
            },
            {"name": "high-0", "job": "high", "request": {"cpu": 1, GPU: 2}},
        ],
    )
    d = gs.schedule(s, config("enqueue", "allocate", "preempt", "backfill"))
    assert len(d.evictions) == 1 and len(d.pipelined) == 1
    assert s.task(d.evictions[0].task).node == d.pipelined[0].node


# -- the enqueue shape check of a configuration read from Volcano's YAML -----------------------

VOLCANO_DEFAULT = """actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
  - name: conformance
- plugins:
  - name: overcommit
  - name: drf
  - name: predicates
  - name: proportion
  - name: nodeorder
"""


def _two_podgroups_no_nodes() -> gs.Snapshot:
    # Volcano's enqueue test: two podgroups without minResources and no nodes both go Inqueue.
    return snap(
        nodes=[],
        jobs=[
            {"name": "pg1", "queue": "default", "min_available": 1},
            {"name": "pg2", "queue": "default", "min_available": 1},
        ],
        tasks=[
            {"name": "pg1-0", "job": "pg1", "request": {"cpu": 1}},
            {"name": "pg2-0", "job": "pg2", "request": {"cpu": 1}},
        ],
    )


def test_volcano_yaml_admits_jobs_without_min_resources_whatever_their_shape() -> None:
    d = gs.schedule(_two_podgroups_no_nodes(), Config.from_volcano_yaml(VOLCANO_DEFAULT))
    assert {name: s.phase for name, s in d.jobs.items()} == {"pg1": "Inqueue", "pg2": "Inqueue"}


def test_the_shape_check_is_gangscheds_default_and_a_volcano_yaml_may_opt_in() -> None:
    opt_in = VOLCANO_DEFAULT + (
        "configurations:\n- name: enqueue\n  arguments:\n    shapeCheckEnable: true\n"
    )
    for cfg in (Config.default(), Config.from_volcano_yaml(opt_in)):
        d = gs.schedule(_two_podgroups_no_nodes(), cfg)
        assert {s.phase for s in d.jobs.values()} == {"Pending"}
    assert Config.from_volcano_yaml(opt_in) == Config.default()


# -- capacity's per-dimension reclaim ----------------------------------------------------------

CAPACITY_RECLAIM = """actions: "enqueue, allocate, reclaim, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
  - name: conformance
  - name: capacity
- plugins:
  - name: drf
  - name: predicates
  - name: nodeorder
"""


def _task(name: str, request: dict[str, Any], node: str | None = None, **extra: Any) -> Any:
    t: dict[str, Any] = {"name": name, "job": name.rsplit("-", 1)[0], "request": request}
    if node is not None:
        t.update(phase="Running", node=node, **extra)
    return t


def _job(name: str, queue: str, phase: str = "Running") -> dict[str, Any]:
    return {"name": name, "queue": queue, "min_available": 1, "phase": phase}


def test_capacity_reclaims_within_deserved_on_one_requested_resource() -> None:
    # r holds 3 of its deserved 4 cpu and 8 of its deserved 4Gi; its pod asks 1 cpu and 1Gi:
    # cpu comes exactly to deserved, memory stays above. Volcano's preemptive admits it on
    # cpu, and v (above its deserved cpu, one pod of surplus and more) loses one pod.
    quota = {"cpu": 4, "memory": "4Gi"}
    s = snap(
        nodes=[{"name": "n0", "allocatable": {"cpu": 8, "memory": "16Gi", "pods": 110}}],
        queues=[{"name": "r", "deserved": quota}, {"name": "v", "deserved": quota}],
        jobs=[_job("rmem", "r"), _job("v", "v"), _job("r1", "r", "Inqueue")],
        tasks=[_task("rmem-0", {"cpu": 3, "memory": "8Gi"}, "n0")]
        + [_task(f"v-{i}", {"cpu": 1, "memory": "512Mi"}, "n0") for i in range(5)]
        + [_task("r1-0", {"cpu": 1, "memory": "1Gi"})],
    )
    d = gs.schedule(s, Config.from_volcano_yaml(CAPACITY_RECLAIM))
    assert len(d.evictions) == 1 and s.task(d.evictions[0].task).job == "v"
    assert [p.task for p in d.pipelined] == ["r1-0"]
    # gangsched's own default keeps its guard: v could reclaim the pod straight back
    guarded = Config.from_dict(
        {
            "actions": ["enqueue", "allocate", "reclaim", "backfill"],
            "tiers": Config.from_volcano_yaml(CAPACITY_RECLAIM).to_dict()["tiers"],
        }
    )
    d = gs.schedule(s, guarded)
    assert d.evictions == ()
    assert d.preemption_reasons["r1"].startswith("reclaim: FairShareGuard")


def test_capacity_reclaim_evicts_exactly_the_pod_holding_the_missing_gpu() -> None:
    # r lacks only a GPU (n0 has a cpu idle). v is above its deserved memory because of a pod
    # on n1; its GPU pod on n0 is the one that makes room: it goes, and r1 is reserved on n0.
    quota = {"cpu": 8, "memory": "16Gi", GPU: 1}
    s = snap(
        nodes=[
            {
                "name": "n0",
                "allocatable": {"cpu": 8, "memory": "32Gi", "pods": 110},
                "gpus": {"count": 1, "model": "A100"},
            },
            {"name": "n1", "allocatable": {"cpu": 8, "memory": "32Gi", "pods": 110}},
        ],
        queues=[{"name": "r", "deserved": quota}, {"name": "v", "deserved": quota}],
        jobs=[_job("v", "v"), _job("r0", "r"), _job("r1", "r", "Inqueue")],
        tasks=[
            _task("v-0", {"cpu": 1, "memory": "1Gi"}, "n1", gpu_indices=[]),
            _task("v-1", {"cpu": 1, "memory": "20Gi"}, "n1", gpu_indices=[]),
            _task("v-2", {"cpu": 6, "memory": "1Gi", GPU: 1}, "n0", gpu_indices=[0]),
            _task("r0-0", {"cpu": 1, "memory": "1Gi"}, "n0", gpu_indices=[]),
            _task("r1-0", {"cpu": 1, "memory": "1Gi", GPU: 1}),
        ],
    )
    d = gs.schedule(s, Config.from_volcano_yaml(CAPACITY_RECLAIM))
    assert [e.task for e in d.evictions] == ["v-2"]
    assert [(p.task, p.node) for p in d.pipelined] == [("r1-0", "n0")]


# -- pinned: later Volcano where this library follows it -----------------------------------


def test_reclaim_counts_the_nodes_idle_room_and_evicts_only_what_the_claim_needs() -> None:
    # Volcano before v1.14 evicted reclaim victims one by one until they alone covered the
    # request, ignoring what the node had idle (and kept the evictions when the reclaimer
    # still did not fit). Since v1.14 (and here) the node's idle room counts: 2 cpu are idle,
    # the claim asks 3, one 2-cpu victim is enough.
    s = snap(
        nodes=[{"name": "n0", "allocatable": {"cpu": 8, "memory": "32Gi", "pods": 110}}],
        queues=[{"name": "r"}, {"name": "v"}],
        jobs=[_job("v", "v"), _job("r1", "r", "Inqueue")],
        tasks=[_task(f"v-{i}", {"cpu": 2, "memory": "1Gi"}, "n0") for i in range(3)]
        + [_task("r1-0", {"cpu": 3, "memory": "1Gi"})],
    )
    d = gs.schedule(s, config("enqueue", "allocate", "reclaim", "backfill"))
    assert len(d.evictions) == 1 and [p.task for p in d.pipelined] == ["r1-0"]


def test_a_gang_at_its_minimum_is_no_victim_even_when_the_gang_tier_gives_none() -> None:
    # The priority plugin offers low's tasks, the gang plugin none (low is at its minimum).
    # Volcano's 2023 build then intersects the next tier's answer with nothing and evicts
    # nothing; since 7976b63e2 (v1.11) a tier whose plugin returned none hands over to the
    # next tier, which chooses alone (drf would take low's tasks). gangsched keeps the gang
    # rule whatever tier answers: a stricter extension (docs/volcano.md).
    d = gs.schedule(_gang_at_minimum(), config("enqueue", "allocate", "preempt", "backfill"))
    assert d.evictions == ()


def test_preempt_evicts_until_the_queue_may_take_the_claim() -> None:
    # Volcano before v1.9 reserved a preemptor once it fitted the node, without asking its
    # queue (only "not overused"); since af5c56308 (v1.9) the queue's allocatable must pass
    # too, as here: q holds 6 cpu against a capability of 4, so the 2-cpu claim needs 4 cpu of
    # lower-priority work gone although the node has room for it already.
    s = snap(
        nodes=[{"name": "n0", "allocatable": {"cpu": 16, "memory": "32Gi", "pods": 110}}],
        queues=[{"name": "q", "capability": {"cpu": 4}}],
        jobs=[
            {"name": "low", "queue": "q", "min_available": 1, "priority": 0, "phase": "Running"},
            {"name": "high", "queue": "q", "min_available": 1, "priority": 5, "phase": "Inqueue"},
        ],
        tasks=[_task(f"low-{i}", {"cpu": 2, "memory": "1Gi"}, "n0") for i in range(3)]
        + [_task("high-0", {"cpu": 2, "memory": "1Gi"})],
    )
    d = gs.schedule(s, config("enqueue", "allocate", "preempt", "backfill"))
    assert len(d.evictions) == 2 and [p.task for p in d.pipelined] == ["high-0"]


def test_preempt_reserves_on_the_node_whose_victims_make_the_queue_room() -> None:
    # The claim fits the empty n0 already; what it lacks is room in its queue (q holds 6 cpu
    # against a capability of 4), and the lower-priority work that can go runs on n1. Volcano
    # (af5c56308, v1.9) walks the nodes in score order: n0 offers no victim, on n1 it evicts
    # until the queue may take the preemptor and reserves it there. The reservation must go
    # where the victims were, not to the best-scored node (campaign cluster 687).
    s = snap(
        nodes=[
            {"name": "n0", "allocatable": {"cpu": 16, "memory": "32Gi", "pods": 110}},
            {"name": "n1", "allocatable": {"cpu": 8, "memory": "32Gi", "pods": 110}},
        ],
        queues=[{"name": "q", "capability": {"cpu": 4}}],
        jobs=[
            {"name": "low", "queue": "q", "min_available": 1, "priority": 0, "phase": "Running"},
            {"name": "high", "queue": "q", "min_available": 1, "priority": 5, "phase": "Inqueue"},
        ],
        tasks=[_task(f"low-{i}", {"cpu": 2, "memory": "1Gi"}, "n1") for i in range(3)]
        + [_task("high-0", {"cpu": 2, "memory": "1Gi"})],
    )
    d = gs.schedule(s, config("enqueue", "allocate", "preempt", "backfill"))
    assert len(d.evictions) == 2
    assert [(p.task, p.node) for p in d.pipelined] == [("high-0", "n1")]


def test_the_gang_job_order_counts_tasks_and_leaves_role_minimums_to_readiness() -> None:
    # Volcano's gang job order (this 2023 build and today's) asks whether a job has as many
    # ready or best-effort pending tasks as its minMember, without its per-role minimums. Both
    # jobs count as ready here (b's two best-effort workers make its minimum of 2 although its
    # master role is short), so the order falls to creation and a takes the only room;
    # gangsched once ordered b first as "not ready" (campaign cluster 340, node affinity).
    s = snap(
        nodes=[{"name": "n0", "allocatable": {"cpu": 4, "memory": "8Gi", "pods": 110}}],
        jobs=[
            {"name": "a", "queue": "default", "min_available": 1, "phase": "Inqueue"},
            {
                "name": "b",
                "queue": "default",
                "min_available": 2,
                "creation": 1,
                "phase": "Inqueue",
                "min_task_member": {"master": 1, "worker": 1},
            },
        ],
        tasks=[
            _task("a-0", {"cpu": 4, "memory": "1Gi"}),
            _task("a-1", {}),
            {**_task("b-0", {"cpu": 4, "memory": "1Gi"}), "role": "master"},
            {**_task("b-1", {}), "role": "worker"},
            {**_task("b-2", {}), "role": "worker"},
        ],
    )
    d = gs.schedule(s, config("enqueue", "allocate", "backfill"))
    bound = {b.task for b in d.binds}
    assert "a-0" in bound and "b-0" not in bound


# -- nodeorder counts best-effort pods as kube does ---------------------------------------------


def _best_effort_on_n0(pending: dict[str, Any]) -> gs.Snapshot:
    """Two equal nodes; n0 runs ten pods that request nothing."""
    nodes = [
        {"name": f"n{i}", "allocatable": {"cpu": 8, "memory": "32Gi", "pods": 110}}
        for i in range(2)
    ]
    return snap(
        nodes=nodes,
        jobs=[_job("be", "default"), _job("p", "default", "Inqueue")],
        tasks=[_task(f"be-{i}", {}, "n0") for i in range(10)] + [_task("p-0", pending)],
    )


def test_least_requested_counts_the_nodes_best_effort_pods_at_kubes_defaults() -> None:
    # kube's LeastAllocated reads the node's NonZeroRequested: each pod there that requests no
    # cpu (memory) counts as 100m (200Mi); Volcano's nodeorder scores through it, so ten
    # best-effort pods make n0 the fuller node: cpu (8000-1000-2000)·100//8000 = 62, memory
    # (32768-2000-2048)·100//32768 = 87 → 74, against n1's 75 and 93 → 84. BalancedAllocation
    # reads plain requests: .25 / .0625 on both → 90. (Counted as nothing, the nodes tie and
    # the first is taken: the divergence from Volcano that this pins.)
    s = _best_effort_on_n0({"cpu": 2, "memory": "2Gi"})
    ex = gs.explain(s, "p-0", config("enqueue", "allocate", "backfill"))
    scores = {n.node: n.scores["nodeorder"] for n in ex.nodes}
    assert scores == {"n0": 74 + 90, "n1": 84 + 90}
    d = gs.schedule(s, config("enqueue", "allocate", "backfill"))
    assert [(b.task, b.node) for b in d.binds] == [("p-0", "n1")]


def test_balanced_resource_reads_a_best_effort_tasks_plain_request() -> None:
    # kube's BalancedAllocation uses the plain requests (useRequested): a task that requests
    # nothing leaves the node's balance as it is. n1 holds 4 cpu and 4Gi: fractions .5 and
    # .125, std .1875 → 81 (with the defaults added it would be ⌊80.9⌋ = 80).
    s = snap(
        nodes=[{"name": "n0", "allocatable": {"cpu": 8, "memory": "32Gi", "pods": 110}}],
        jobs=[_job("r", "default"), _job("p", "default", "Inqueue")],
        tasks=[_task("r-0", {"cpu": 4, "memory": "4Gi"}, "n0"), _task("p-0", {})],
    )
    weights = {"leastrequested.weight": 0, "balancedresource.weight": 1}
    cfg = Config.from_dict(
        {"actions": ["allocate"], "tiers": [[{"name": "nodeorder", "arguments": weights}]]}
    )
    ex = gs.explain(s, "p-0", cfg)
    assert [n.scores["nodeorder"] for n in ex.nodes] == [81]


# -- allocate's queue order after a job's allocation --------------------------------------------


def test_a_queue_goes_back_in_line_with_the_share_its_job_just_took() -> None:
    # Volcano before v1.10 pushed a queue back into allocate's queue order *before* allocating
    # its job, with the share of before; once the elastic job e was ready (2 of 3 tasks), its
    # queue q1 came again and e took the last 2-cpu slot. Since a684cd848 (v1.10.0), and here,
    # the queue goes back after the allocation: q1 (4 of 6 cpu deserved) now comes after q0
    # (1 of 3), so q0's gang g takes the slot.
    nodes = [
        {"name": f"n{i}", "allocatable": {"cpu": 3, "memory": "12Gi", "pods": 110}}
        for i in range(3)
    ]
    s = snap(
        nodes=nodes,
        queues=[{"name": "q0"}, {"name": "q1"}],
        jobs=[
            _job("r", "q0"),
            {"name": "e", "queue": "q1", "min_available": 2, "phase": "Inqueue"},
            _job("g", "q0", "Inqueue"),
        ],
        tasks=[_task("r-0", {"cpu": 1, "memory": "1Gi"}, "n2")]
        + [_task(f"e-{i}", {"cpu": 2, "memory": "1Gi"}) for i in range(3)]
        + [_task("g-0", {"cpu": 2, "memory": "1Gi"})],
    )
    d = gs.schedule(s, config("enqueue", "allocate", "backfill"))
    assert sorted(b.task for b in d.binds) == ["e-0", "e-1", "g-0"]


#: Volcano's tiers with reclaim, read from its YAML (so reclaim walks the tiers as Volcano).
WALK_RECLAIM = (
    'actions: "enqueue, allocate, reclaim, backfill"\n'
    "tiers:\n- plugins:\n  - name: priority\n  - name: gang\n  - name: conformance\n"
    "- plugins:\n  - name: drf\n  - name: predicates\n  - name: proportion\n"
)


def queue_holding_less_than_the_claim() -> gs.Snapshot:
    """Queue v runs gang v (3 tasks of 2 cpu and 1Gi, at its minimum, above v's deserved cpu,
    3Gi in all); r's pending task asks 4 cpu and 8Gi, more memory than v holds."""
    return snap(
        nodes=[{"name": "n0", "allocatable": {"cpu": 8, "memory": "32Gi", "pods": 110}}],
        queues=[{"name": "r"}, {"name": "v"}],
        jobs=[{**_job("v", "v"), "min_available": 3}, _job("r1", "r", "Inqueue")],
        tasks=[_task(f"v-{i}", {"cpu": 2, "memory": "1Gi"}, "n0") for i in range(3)]
        + [_task("r1-0", {"cpu": 4, "memory": "8Gi"})],
    )


def test_reclaim_takes_from_a_queue_that_holds_less_than_the_claim() -> None:
    # Volcano's tier walk: gang offers nothing of v (at its minimum), so proportion chooses
    # alone. Its 2023 build offered no task of a queue holding less than the reclaimer's
    # request in cpu, memory or a scalar it holds (Resource.LessPartly), however far above
    # its deserved share; 975277f55 (v1.12) removed that check, and here as there v gives
    # one task (2 cpu idle and 2 released make room for the 4-cpu claim).
    d = gs.schedule(queue_holding_less_than_the_claim(), Config.from_volcano_yaml(WALK_RECLAIM))
    assert len(d.evictions) == 1 and d.evictions[0].task.startswith("v-")
    assert [(p.task, p.node) for p in d.pipelined] == [("r1-0", "n0")]


def test_reclaim_goes_on_with_the_queues_next_job_when_one_is_refused() -> None:
    # Queue r's first job in job order (priority 3) asks more than r's deserved share and is
    # refused; r's next job (1 cpu) still reclaims from v, which holds the whole node above
    # its deserved share. The 2023 build dropped r from its loop at the first refusal; since
    # 305771369 (v1.14) reclaim goes on with the queue's other jobs, as here.
    s = snap(
        nodes=[{"name": "n0", "allocatable": {"cpu": 8, "memory": "32Gi", "pods": 110}}],
        queues=[{"name": "r", "weight": 4}, {"name": "v", "weight": 1}],
        jobs=[
            {**_job("big", "r", "Inqueue"), "priority": 3},
            {**_job("small", "r", "Inqueue"), "priority": 0},
            _job("v", "v"),
        ],
        tasks=[
            _task("big-0", {"cpu": 8, "memory": "2Gi"}),
            _task("small-0", {"cpu": 1, "memory": "1Gi"}),
            _task("v-0", {"cpu": 8, "memory": "8Gi"}, "n0"),
        ],
    )
    d = gs.schedule(s, Config.from_volcano_yaml(WALK_RECLAIM))
    assert [e.task for e in d.evictions] == ["v-0"]
    assert [(p.task, p.node) for p in d.pipelined] == [("small-0", "n0")]


def test_a_job_whose_tasks_are_being_evicted_stays_running() -> None:
    # v's only task is evicted (releasing): it still holds its node until it ends, and the
    # job counts it as scheduled, so its phase stays Running, as Volcano's since d725ce4db
    # (after v1.16.0-alpha.0); the 2023 build reported Pending.
    s = snap(
        nodes=[{"name": "n0", "allocatable": {"cpu": 8, "memory": "32Gi", "pods": 110}}],
        queues=[{"name": "r", "weight": 4}, {"name": "v", "weight": 1}],
        jobs=[_job("r1", "r", "Inqueue"), _job("v", "v")],
        tasks=[_task("r1-0", {"cpu": 4, "memory": "1Gi"}), _task("v-0", {"cpu": 8}, "n0")],
    )
    d = gs.schedule(s, Config.from_volcano_yaml(WALK_RECLAIM))
    assert [e.task for e in d.evictions] == ["v-0"]
    assert d.jobs["v"].phase == "Running"
