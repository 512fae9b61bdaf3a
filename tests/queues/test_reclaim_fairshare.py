"""Reclaim's fair-share rule: the weakest guard that rules out cycles, and the capacity
plugin's per-dimension reclaim rules as Volcano has them.

The rule (``actions/reclaim.py``, ``docs/preemption.md``): every victim is exposed (its queue
above deserved, per the plugin's victim rule) before the move, and no claimed task is exposed
after it. Nothing compares the victim's share after the move with the reclaimer's before.
"""

from __future__ import annotations

from typing import Any

import gangsched as gs
from _preemption_helpers import GPU, RECLAIM, apply, config, job, jobs_hit, node, settle, snap

A100 = "example.com/a100"


def _task(name: str, request: dict[str, Any], node_name: str | None = None, **extra: Any) -> Any:
    t: dict[str, Any] = {"name": name, "job": name.rsplit("-", 1)[0], "request": request}
    if node_name is None:
        t["phase"] = "Pending"
    else:
        t.update(phase="Running", node=node_name, gpu_indices=extra.pop("gpus", []))
    return {**t, **extra}


def _capacity(hierarchy: bool = False, level: int | None = None) -> gs.Config:
    cap: dict[str, Any] = {"name": "capacity"}
    if hierarchy:
        cap["enableHierarchy"] = True
    if level is not None:
        cap["arguments"] = {"ancestorReclaimLevel": level}
    return config(
        "enqueue",
        "allocate",
        "reclaim",
        "backfill",
        tiers=[
            [{"name": "priority"}, {"name": "gang"}, {"name": "conformance"}, cap],
            [{"name": "drf"}, {"name": "predicates"}, {"name": "nodeorder"}],
        ],
    )


def _replay(s: gs.Snapshot, cfg: gs.Config, cycles: int = 4) -> set[tuple[str, str]]:
    edges: set[tuple[str, str]] = set()
    for _ in range(cycles):
        d = gs.schedule(s, cfg)
        edges |= {(s.task(e.task).job, e.preemptor) for e in d.evictions}
        s = settle(apply(s, d))
    return edges


def _reason(d: gs.Decisions, job_name: str) -> str:
    return d.preemption_reasons.get(job_name, "")


# --------------------------------------------------------------------- the weakest rule


def _weight3(priority_a: int = 0, priority_b: int = 0) -> gs.Snapshot:
    # 2 Gi of memory; 'big' (weight 3) holds nothing and asks 2 × 1 G; a and b (weight 1)
    # hold 1 G each. Deserved: big ≈ 1.29 G, a and b ≈ 0.43 G each.
    nodes = [{"name": "n0", "allocatable": {"cpu": 8, "memory": "2Gi", "pods": 110}}]
    queues = [
        {"name": "big", "weight": 3},
        {"name": "a", "weight": 1, "priority": priority_a},
        {"name": "b", "weight": 1, "priority": priority_b},
    ]
    jobs = [
        job("a0", 1, queue="a"),
        job("b0", 1, queue="b"),
        job("big1", 1, queue="big", phase="Inqueue"),
        job("big2", 1, queue="big", phase="Inqueue", creation=1),
    ]
    gig = {"cpu": 1, "memory": "1G"}
    tasks = [_task("a0-0", gig, "n0"), _task("b0-0", gig, "n0")]
    tasks += [_task("big1-0", gig), _task("big2-0", gig)]
    return snap(nodes, jobs, tasks, queues=queues)


def test_reclaim_that_leaves_the_victim_below_the_reclaimers_old_share_is_admitted() -> None:
    # Evicting one 1 G pod leaves big at 1 G ≤ its deserved 1.29 G (nothing can reclaim from
    # it) and the victim queue at 0 — below big's share before the move, which the old rule
    # refused. One pod goes, big's first job is reserved; its second would take big beyond
    # its deserved share and waits. Replayed, the move is never reversed.
    s = _weight3()
    d = gs.schedule(s, RECLAIM)
    assert jobs_hit(s, d) == {"a0"} and [p.task for p in d.pipelined] == ["big1-0"]
    assert d.queues["big"].deserved["memory"] > d.queues["big"].allocated["memory"]
    assert _reason(d, "big2").startswith("reclaim: BeyondDeserved")
    assert _replay(s, RECLAIM) == {("a0", "big1")}


def test_the_lower_priority_queue_above_its_share_loses_first() -> None:
    # The same cluster with a of higher priority than b: b's pod goes (by name a's would).
    s = _weight3(priority_a=1)
    assert jobs_hit(s, gs.schedule(s, RECLAIM)) == {"b0"}
    s = _weight3(priority_b=1)
    assert jobs_hit(s, gs.schedule(s, RECLAIM)) == {"a0"}


# --------------------------------------------------------------------- capacity, per dimension


def _two_queues(
    r: dict[str, Any], v: dict[str, Any], tasks: list[Any], nodes: list[Any] | None = None
) -> gs.Snapshot:
    names = {t["job"] for t in tasks}
    jobs = [
        job(n, 1, queue=n[0], phase="Inqueue" if n.startswith("r1") else "Running")
        for n in sorted(names)
    ]
    queues = [{"name": "r", **r}, {"name": "v", **v}]
    return snap(nodes or [node("n0", gpus=4, cpu=16)], jobs, tasks, queues=queues)


def test_capacity_reclaims_when_within_deserved_on_the_requested_resources() -> None:
    # (a) r is above its deserved memory (8 of 4 Gi, borrowed) but asks for cpu and a GPU,
    # on which it stays within deserved (and within its real capability): it reclaims v's
    # GPU pod (v is above deserved on GPUs). The all-resources guard refused this.
    quota = {"cpu": 4, GPU: 2, "memory": "4Gi"}
    tasks = [
        _task("rmem-0", {"cpu": 1, "memory": "8Gi"}, "n0"),
        _task("vg-0", {"cpu": 1, GPU: 4}, "n0", gpus=[0, 1, 2, 3]),
        _task("r1-0", {"cpu": 1, GPU: 1}),
    ]
    s = _two_queues({"deserved": quota}, {"deserved": quota}, tasks)
    d = gs.schedule(s, _capacity())
    assert jobs_hit(s, d) == {"vg"} and [p.task for p in d.pipelined] == ["r1-0"]
    # Beyond its real capability on a requested resource: refused (Volcano's preemptive).
    capped = _two_queues({"deserved": quota, "capability": {GPU: 0.5}}, {"deserved": quota}, tasks)
    d = gs.schedule(capped, _capacity())
    assert d.evictions == ()
    assert "exceed its real capability on nvidia.com/gpu" in _reason(d, "r1")
    # Within on only some requested resources: Volcano's preemptive admits it, but the claimed
    # pod would hold cpu where r is above deserved (5 of 4), so v — within on cpu once its
    # pod is gone — could take it straight back (a ping-pong in Volcano). Refused.
    hog = [dict(tasks[0], request={"cpu": 4}), *tasks[1:]]
    d = gs.schedule(_two_queues({"deserved": quota}, {"deserved": quota}, hog), _capacity())
    assert d.evictions == ()
    assert _reason(d, "r1").startswith("reclaim: FairShareGuard")
    assert "above its deserved amount on cpu" in _reason(d, "r1")


def test_capacity_scalar_only_pod_reclaims_although_its_queue_is_above_on_cpu() -> None:
    # (b) r holds 6 cpu against a deserved 4 but none of its A100s; its pod asks for one
    # A100 only. v holds 2 A100s against a deserved 1: one goes.
    nodes = [
        {"name": "n0", "allocatable": {"cpu": 16, "memory": "64Gi", "pods": 110, A100: 2}},
    ]
    quota = {"cpu": 4, A100: 1}
    tasks = [
        _task("rcpu-0", {"cpu": 6}, "n0"),
        _task("va-0", {"cpu": 1, A100: 1}, "n0"),
        _task("vb-0", {"cpu": 1, A100: 1}, "n0"),
        _task("r1-0", {A100: 1}),
    ]
    s = _two_queues({"deserved": quota}, {"deserved": quota}, tasks, nodes)
    d = gs.schedule(s, _capacity())
    assert len(d.evictions) == 1 and jobs_hit(s, d) <= {"va", "vb"}
    assert [p.task for p in d.pipelined] == ["r1-0"]
    assert _replay(s, _capacity()) == {(s.task(d.evictions[0].task).job, "r1")}


def test_capacity_evicts_exactly_the_pod_holding_the_missing_gpu() -> None:
    # (c) r lacks a GPU only (it is above deserved on cpu); v is above deserved on cpu, and
    # its cpu-only pod is the cheaper victim (lower priority) — but the reclaimer asks for no
    # cpu, so the victim is chosen on the GPU: exactly v's GPU pod goes.
    quota = {"cpu": 4, GPU: 4}
    tasks = [
        _task("rcpu-0", {"cpu": 6}, "n0"),
        _task("vcpu-0", {"cpu": 6}, "n0"),
        _task("vgpu-0", {"cpu": 1, GPU: 4}, "n0", gpus=[0, 1, 2, 3]),
        _task("r1-0", {GPU: 1}),
    ]
    s = _two_queues({"deserved": quota}, {"deserved": quota}, tasks)
    raw = s.to_dict()
    for j in raw["jobs"]:
        j["priority"] = {"vcpu": 0, "vgpu": 5}.get(j["name"], 1)
    s = gs.Snapshot.from_dict(raw)
    d = gs.schedule(s, _capacity())
    assert [e.task for e in d.evictions] == ["vgpu-0"]
    assert [p.task for p in d.pipelined] == ["r1-0"]


def test_capacity_queue_with_deserved_gpus_only_reclaims_gpus() -> None:
    # (d) r deserves GPUs only and holds nothing; its pod asks for cpu and a GPU. The cpu it
    # would hold is not an infinite share: r deserves no cpu, and the GPU is within deserved.
    tasks = [
        _task("vg-0", {"cpu": 1, GPU: 4}, "n0", gpus=[0, 1, 2, 3]),
        _task("r1-0", {"cpu": 1, GPU: 1}),
    ]
    s = _two_queues({"deserved": {GPU: 2}}, {"deserved": {"cpu": 4, GPU: 2}}, tasks)
    d = gs.schedule(s, _capacity())
    assert jobs_hit(s, d) == {"vg"} and [p.task for p in d.pipelined] == ["r1-0"]
    assert _replay(s, _capacity()) == {("vg", "r1")}


def _leaf_without_deserved() -> gs.Snapshot:
    # root ─ p (deserves 4 GPUs) ─ x (no deserved)      x asks 4 GPUs
    #      └ q (deserves 4 GPUs) ─ w (deserves 4 GPUs)  w borrowed all 8
    queues: list[dict[str, Any]] = [
        {"name": "p", "deserved": {"cpu": 4, GPU: 4}},
        {"name": "q", "deserved": {"cpu": 4, GPU: 4}},
        {"name": "x", "parent": "p"},
        {"name": "w", "parent": "q", "deserved": {"cpu": 4, GPU: 4}},
    ]
    jobs = [
        job("w0", 4, queue="w"),
        job("w1", 4, queue="w", creation=1),
        job("x1", 4, queue="x", phase="Inqueue"),
    ]
    one = {"cpu": 1, GPU: 1}
    tasks = [_task(f"w0-{i}", one, "n0", gpus=[i]) for i in range(4)]
    tasks += [_task(f"w1-{i}", one, "n1", gpus=[i]) for i in range(4)]
    tasks += [_task(f"x1-{i}", one) for i in range(4)]
    return snap([node("n0"), node("n1")], jobs, tasks, queues=queues)


def test_leaf_without_deserved_reclaims_when_its_parent_is_within_its_share() -> None:
    # (e) With ancestorReclaimLevel 1, x (no deserved) may reclaim since its parent p stays
    # within p's deserved with the claim added; w's newest gang goes (q is above its share).
    s = _leaf_without_deserved()
    cfg = _capacity(hierarchy=True, level=1)
    d = gs.schedule(s, cfg)
    assert jobs_hit(s, d) == {"w1"} and len(d.pipelined) == 4
    assert _replay(s, cfg) == {("w1", "x1")}
    # Without the ancestor level, x's own (empty) deserved share decides: no reclaim.
    d = gs.schedule(s, _capacity(hierarchy=True))
    assert d.evictions == ()
    assert _reason(d, "x1").startswith("reclaim: QueueAtDeserved")


# ----------------------------------------------- the termination window (found by the soak)


def _window() -> gs.Snapshot:
    # Three 4-GPU nodes schedulable, a fourth cordoned; q0 weight 3, q1 weight 2. j5 (q0,
    # 3 × 4 GPUs, min 2) has just reclaimed j4 (q1, 4 × 2 GPUs, min 3): j4's pods are still
    # terminating, j5 holds its two reservations and one task waits.
    nodes = [node(f"n{i}", gpus=4, cpu=16) for i in range(4)]
    nodes[0]["unschedulable"] = True
    queues: list[dict[str, Any]] = [
        {"name": "q0", "weight": 3},
        {"name": "q1", "weight": 2},
        {"name": "q2"},
    ]
    jobs = [
        job("j4", 3, queue="q1", phase="Running", creation=4),
        job("j5", 2, queue="q0", phase="Inqueue", creation=5),
    ]
    two, four = {"cpu": 1, GPU: 2}, {"cpu": 1, GPU: 4}
    tasks = [
        _task("j4-0", two, "n1", gpus=[0, 1], phase="Releasing"),
        _task("j4-1", two, "n2", gpus=[0, 1], phase="Releasing"),
        _task("j4-2", two, "n3", gpus=[0, 1], phase="Releasing"),
        _task("j4-3", two, "n1", gpus=[2, 3], phase="Releasing"),
        _task("j5-0", four, "n2", gpus=[0, 1, 2, 3], phase="Pipelined"),
        _task("j5-1", four, "n3", gpus=[0, 1, 2, 3], phase="Pipelined"),
        _task("j5-2", four),
    ]
    return snap(nodes, jobs, tasks, queues=queues)


def test_terminating_tasks_of_a_live_job_stay_in_their_queues_request() -> None:
    """The victim queue's demand does not vanish while its evicted pods terminate, so the
    reclaimer cannot grow past its deserved share into the window (and lose it back)."""
    d = gs.schedule(_window(), config("enqueue", "allocate", "reclaim", "backfill"))
    assert d.queues["q1"].request.get(GPU) == 8000
    assert d.queues["q0"].deserved.get(GPU) == 9600
    assert "j5-2" not in {p.task for p in d.pipelined} | {b.task for b in d.binds}


def test_no_reclaim_ping_pong_across_the_termination_window() -> None:
    """The stateful soak's counterexample, step by step: j5 reclaims j4 whole; j4's pods
    terminate and come back; j4 must not reclaim j5 in return."""
    from test_stateful_cluster import ClusterMachine

    m = ClusterMachine()
    m.setup()
    m.weights.update(q0=3, q1=2)
    m.nodes[0]["unschedulable"] = True

    def submit(name: str, queue: str, size: int, gpus: int, minimum: int) -> None:
        m.jobs[name] = job(name, minimum, queue=queue, priority=0, preemptable=True)
        for i in range(size):
            m.tasks[f"{name}-{i}"] = _task(f"{name}-{i}", {"cpu": 1, GPU: gpus})

    submit("j4", "q1", 4, 2, 3)
    m.cycle()
    submit("j5", "q0", 3, 4, 2)
    for _ in range(6):
        m.cycle()
    assert ("j4", "j5") in m.edges
    assert ("j5", "j4") not in m.edges, sorted(m.edges)
