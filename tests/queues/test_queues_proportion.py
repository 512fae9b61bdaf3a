"""proportion: weighted water-filling of ``deserved``, shares, overuse and admission by quota."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest

from _builders import gpu_node
from gangsched.config import Config
from gangsched.model.snapshot import Snapshot
from gangsched.plugins.proportion import volcano_rounds, water_fill
from gangsched.scheduler import open_session, schedule
from gangsched.session.statement import Statement

INF = np.inf
Obj = dict[str, object]


def node(name: str, *, gpus: int = 8, cpu: int = 64, memory: str = "256Gi") -> Obj:
    return gpu_node(name, gpus=gpus, cpu=cpu, memory=memory)


def task(name: str, job: str, *, gpu: int = 0, cpu: int = 0, **extra: object) -> Obj:
    out: Obj = {"name": name, "job": job, "request": {"cpu": cpu} if cpu else {}, **extra}
    if gpu:
        out["gpu_request"] = {"count": gpu}
    return out


def flood(queue: str, n: int, *, gpu: int = 1, cpu: int = 1) -> tuple[list[Obj], list[Obj]]:
    """``n`` single-task jobs in ``queue``, each task asking ``gpu`` GPUs and ``cpu`` cores."""
    jobs: list[Obj] = [{"name": f"{queue}-{i}", "queue": queue, "creation": i} for i in range(n)]
    tasks = [task(f"{queue}-{i}-0", f"{queue}-{i}", gpu=gpu, cpu=cpu) for i in range(n)]
    return jobs, tasks


def build(nodes: list[Obj], queues: list[Obj], jobs: list[Obj], tasks: list[Obj]) -> Snapshot:
    return Snapshot.from_dict({"nodes": nodes, "queues": queues, "jobs": jobs, "tasks": tasks})


def nodes(n: int, **kw: Any) -> list[Obj]:
    return [node(f"n{i}", **kw) for i in range(n)]


SEED_QUEUES: list[Obj] = [
    {"name": "big", "weight": 4, "capability": {"nvidia.com/gpu": 32}},
    {"name": "small", "weight": 1, "capability": {"nvidia.com/gpu": 16}},
]


def test_seed_example_splits_forty_gpus_four_to_one() -> None:
    big_jobs, big_tasks = flood("big", 40)
    small_jobs, small_tasks = flood("small", 40)
    snap = build(nodes(5), SEED_QUEUES, big_jobs + small_jobs, big_tasks + small_tasks)
    decisions = schedule(snap)
    got = Counter(snap.job(snap.task(b.task).job).queue for b in decisions.binds)
    assert got == {"big": 32, "small": 8}
    big, small = decisions.queues["big"], decisions.queues["small"]
    assert (big.deserved_gpu, small.deserved_gpu) == (32.0, 8.0)
    assert (big.allocated_gpu, small.allocated_gpu) == (32.0, 8.0)
    assert (big.pending_gpu, small.pending_gpu) == (8.0, 32.0)
    assert big.share == pytest.approx(1.0) and small.share == pytest.approx(1.0)
    assert big.real_capability["nvidia.com/gpu"] == 32_000
    assert (big.running, big.inqueue, small.running, small.inqueue) == (32, 8, 8, 32)


def test_weight_one_queue_alone_gets_at_most_its_capability() -> None:
    jobs, tasks = flood("small", 40)
    decisions = schedule(build(nodes(5), SEED_QUEUES, jobs, tasks))
    assert len(decisions.binds) == 16
    assert decisions.queues["small"].deserved_gpu == 16.0
    # the idle queue holds no jobs, so it takes no part in the water-filling
    assert decisions.queues["big"].deserved == {}


def _fill(
    total: list[float],
    weights: list[float],
    request: list[list[float]],
    guarantee: list[list[float]] | None = None,
    capability: list[list[float]] | None = None,
) -> np.ndarray[Any, np.dtype[np.float64]]:
    t = np.array(total, dtype=np.float64)
    req = np.array(request, dtype=np.float64)
    g = np.zeros_like(req) if guarantee is None else np.array(guarantee, dtype=np.float64)
    cap = np.full_like(req, INF) if capability is None else np.array(capability, dtype=np.float64)
    real = np.minimum(np.maximum(t - g.sum(axis=0), 0.0) + g, cap)
    return water_fill(t, np.array(weights, dtype=np.float64), req, g, real)


def test_water_fill_three_queues_uneven_requests() -> None:
    # round 1 hands 12 out 1:2:3 → 2, 4, 6; the first asks for 1 only, its spare 1 goes 2:3.
    got = _fill([12], [1, 2, 3], [[1], [10], [10]])
    assert got[:, 0] == pytest.approx([1.0, 4.4, 6.6])


def test_water_fill_per_dimension() -> None:
    # cpu 100 / GPU 10 between a GPU-heavy and a cpu-heavy queue of equal weight. Round 1:
    # 50/5 each, capped at the requests → (10, 5) and (50, 1); round 2 hands out the 40 cpu
    # and 4 GPUs left → (10, 7), (70, 1); round 3 meets both requests.
    got = _fill([100, 10], [1, 1], [[10, 8], [80, 1]])
    assert got.tolist() == [[10.0, 8.0], [80.0, 1.0]]


def test_water_fill_guarantee_floor() -> None:
    # weights 1:3 on 10 GPUs give 2.5 / 7.5, but the first queue is guaranteed 6: it holds 6,
    # and the second's realCapability is 10 - 6 = 4.
    got = _fill([10], [1, 3], [[8], [10]], guarantee=[[6], [0]])
    assert got[:, 0] == pytest.approx([6.0, 4.0])


def test_water_fill_capability_below_weighted_share() -> None:
    # 4:1 on 10 would be 8 / 2; a capability of 6 caps the first, the second takes the rest.
    got = _fill([10], [4, 1], [[100], [100]], capability=[[6], [INF]])
    assert got[:, 0] == pytest.approx([6.0, 4.0])


def test_water_fill_guarantee_and_capability_together() -> None:
    # cpu 30 between a (w1, guarantee 10), b (w1, capability 8) and c (w2, asks 4).
    # round 1: grants 7.5 / 7.5 / 15 → a lifted to 10, b 7.5, c 4; 8.5 left.
    # round 2: 2.125 / 2.125 / 4.25 → a 12.125, b 8 (capability), c unchanged (met).
    # round 3: 2.9375 each → a 15.0625, b unchanged (met). round 4: a takes the rest → 18.
    # GPU 12: round 1 hands out everything, 3 / 3 / 6, and nothing is left to move.
    got = _fill(
        [30, 12],
        [1, 1, 2],
        [[40, 4], [40, 6], [4, 10]],
        guarantee=[[10, 0], [0, 0], [0, 0]],
        capability=[[INF, INF], [8, INF], [INF, INF]],
    )
    assert got[:, 0] == pytest.approx([18.0, 8.0, 4.0])
    assert got[:, 1] == pytest.approx([3.0, 3.0, 6.0])


def test_water_fill_never_overdraws_the_cluster() -> None:
    # Volcano's rounds: 10 split three ways is 3.33 each, the guaranteed queue is lifted to 5
    # and the overdrawn pool is clipped: 11.67 promised on a 10-GPU cluster.
    t = np.array([10.0])
    w = np.ones(3)
    req = np.full((3, 1), 100.0)
    g = np.array([[5.0], [0.0], [0.0]])
    real = np.maximum(t - g.sum(axis=0), 0.0) + g
    volcano = volcano_rounds(t, w, req, g, real, np.ones(3, dtype=np.bool_))
    assert float(volcano.sum()) == pytest.approx(35 / 3)
    # the exact water level instead: 5 + 2λ = 10
    got = water_fill(t, w, req, g, real)
    assert got[:, 0] == pytest.approx([5.0, 2.5, 2.5])


def test_queues_without_jobs_take_no_part() -> None:
    # an idle queue's guarantee still narrows the others' realCapability, but it does not
    # soak up a share of the pool
    queues: list[Obj] = [
        {"name": "busy"},
        {"name": "idle", "guarantee": {"nvidia.com/gpu": 2}},
    ]
    jobs, tasks = flood("busy", 10)
    d = schedule(build(nodes(1), queues, jobs, tasks))
    assert d.queues["busy"].deserved_gpu == 6.0
    assert d.queues["busy"].real_capability["nvidia.com/gpu"] == 6_000
    assert d.queues["idle"].deserved_gpu == 0.0
    assert len(d.binds) == 6


def test_deserved_per_dimension_through_a_cycle() -> None:
    # 32 cpu and 16 GPUs; a (w1) asks 10 cpu + 10 GPUs, b (w1, guarantee 12 cpu) 16 cpu,
    # c (w2, capability 4 GPUs) 10 GPUs.
    # cpu: 8 / 8→12 (floor) / 0; then 3 / 3 → a 10 (met), b 15; then b 16 (met).
    # GPU: 4 / 0 / 4 (capability); then a 6, c unchanged (met); then a 9; then a 10.
    queues: list[Obj] = [
        {"name": "a"},
        {"name": "b", "guarantee": {"cpu": 12}},
        {"name": "c", "weight": 2, "capability": {"nvidia.com/gpu": 4}},
    ]
    a_jobs, a_tasks = flood("a", 10)
    b_jobs, b_tasks = flood("b", 4, gpu=0, cpu=4)
    c_jobs, c_tasks = flood("c", 10, cpu=0)
    d = schedule(
        build(nodes(2, cpu=16), queues, a_jobs + b_jobs + c_jobs, a_tasks + b_tasks + c_tasks)
    )
    assert d.queues["a"].deserved == {"cpu": 10_000, "nvidia.com/gpu": 10_000}
    assert d.queues["b"].deserved == {"cpu": 16_000}
    assert d.queues["c"].deserved == {"nvidia.com/gpu": 4_000}
    assert d.queues["c"].real_capability["nvidia.com/gpu"] == 4_000
    assert d.queues["b"].real_capability["cpu"] == 32_000
    assert d.queues["a"].real_capability["cpu"] == 20_000


def test_gpu_only_task_is_not_blocked_by_exhausted_cpu_share() -> None:
    queues: list[Obj] = [{"name": "a"}, {"name": "b"}]
    jobs: list[Obj] = [
        {"name": "a-run", "queue": "a", "phase": "Running"},
        {"name": "a-gpu", "queue": "a"},
        {"name": "a-cpu", "queue": "a", "creation": 1},
        {"name": "b-load", "queue": "b"},
    ]
    tasks = [
        task("a-run-0", "a-run", cpu=4, phase="Running", node="n0"),
        task("a-gpu-0", "a-gpu", gpu=1),
        task("a-cpu-0", "a-cpu", gpu=1, cpu=1),
        *[task(f"b-load-{i}", "b-load", cpu=1) for i in range(8)],
    ]
    d = schedule(build([node("n0", cpu=8, memory="64Gi")], queues, jobs, tasks))
    bound = {b.task for b in d.binds}
    # a asks 5 cores, b 8: 4 / 4, and a's 4 are all held by its running task
    assert d.queues["a"].deserved["cpu"] == 4_000
    assert "a-gpu-0" in bound
    assert "a-cpu-0" not in bound
    assert "cannot take this task" in d.task_reasons["a-cpu-0"]


def test_enqueue_checks_real_capability_with_inqueue_reservations() -> None:
    queues: list[Obj] = [{"name": "q", "capability": {"nvidia.com/gpu": 8}}]
    jobs: list[Obj] = [
        {"name": f"j{i}", "queue": "q", "creation": i, "min_resources": {"nvidia.com/gpu": 6}}
        for i in range(2)
    ]
    tasks = [task(f"j{i}-0", f"j{i}", gpu=6) for i in range(2)]
    d = schedule(build(nodes(2), queues, jobs, tasks))
    assert d.jobs["j0"].phase == "Running"
    assert d.jobs["j1"].phase == "Pending"
    assert d.jobs["j1"].reason == "NotEnqueued"
    assert "quota insufficient: nvidia.com/gpu" in d.jobs["j1"].message


def test_elastic_resources_of_running_jobs_do_not_block_admission() -> None:
    # a running job holds 6 GPUs with min_resources 2: the 4 beyond its minimum are elastic
    # (reclaimable), so a job needing 6 more still fits under the capability of 8
    queues: list[Obj] = [{"name": "q", "capability": {"nvidia.com/gpu": 8}}]
    jobs: list[Obj] = [
        {"name": "run", "queue": "q", "phase": "Running", "min_resources": {"nvidia.com/gpu": 2}},
        {"name": "new", "queue": "q", "min_resources": {"nvidia.com/gpu": 6}},
    ]
    tasks = [
        *[
            task(f"run-{i}", "run", gpu=1, phase="Running", node="n0", gpu_indices=[i])
            for i in range(6)
        ],
        task("new-0", "new", gpu=6),
    ]
    config = Config.from_dict(
        {
            "actions": ["enqueue"],
            "tiers": [[{"name": "gang"}], [{"name": "proportion"}]],
        }
    )
    d = schedule(build(nodes(2), queues, jobs, tasks), config)
    assert d.jobs["new"].phase == "Inqueue"


def test_closed_and_closing_queues_admit_and_allocate_nothing_new() -> None:
    queues: list[Obj] = [
        {"name": "closing", "state": "Closing"},
        {"name": "closed", "state": "Closed"},
    ]
    jobs: list[Obj] = [
        {"name": "run", "queue": "closing", "phase": "Running"},
        {"name": "new", "queue": "closing"},
        {"name": "admitted", "queue": "closed", "phase": "Inqueue"},
    ]
    tasks = [
        task("run-0", "run", gpu=1, phase="Running", node="n0", gpu_indices=[0]),
        task("new-0", "new", gpu=1),
        task("admitted-0", "admitted", gpu=1),
    ]
    d = schedule(build(nodes(1), queues, jobs, tasks))
    assert d.binds == () and d.evictions == ()
    assert d.jobs["run"].phase == "Running"
    assert d.jobs["new"].phase == "Pending"
    assert d.jobs["new"].reason == "NotEnqueued" and "Closing" in d.jobs["new"].message
    assert d.jobs["admitted"].phase == "Inqueue"
    assert d.queues["closing"].state == "Closing"
    assert d.queues["closing"].allocated_gpu == 1.0


def test_event_handlers_keep_shares_current_and_reversible() -> None:
    a_jobs, a_tasks = flood("a", 4)
    b_jobs, b_tasks = flood("b", 4)
    snap = build(nodes(1), [{"name": "a"}, {"name": "b"}], a_jobs + b_jobs, a_tasks + b_tasks)
    ssn = open_session(snap)
    plugin = ssn.plugin("proportion")
    assert plugin is not None
    assert plugin.share(ssn, 0) == 0.0
    stmt = Statement(ssn)
    for t in (0, 1):
        tmpl = ssn.templates[int(ssn.template_of[t])]
        n, pipelined = ssn.best_node(tmpl)
        stmt.allocate(t, n, ssn.choose_gpus(t, n, future=pipelined))
    # deserved 4 GPUs and 4 cores each: 2 of 4 held → share 0.5
    assert plugin.share(ssn, 0) == pytest.approx(0.5)
    assert ssn.queue_key(1) < ssn.queue_key(0)
    stmt.discard()
    assert plugin.share(ssn, 0) == 0.0


def test_equal_queues_interleave_and_split_evenly() -> None:
    a_jobs, a_tasks = flood("a", 10)
    b_jobs, b_tasks = flood("b", 10)
    snap = build(nodes(1), [{"name": "a"}, {"name": "b"}], a_jobs + b_jobs, a_tasks + b_tasks)
    d = schedule(snap)
    order = [snap.job(snap.task(b.task).job).queue for b in d.binds]
    # shares move with every allocation, so the queues alternate
    assert order == ["a", "b"] * 4


def test_overused_queue_is_reported() -> None:
    # a queue already holding more than it deserves (its running work predates a busier
    # neighbour) is overused and gets nothing new
    queues: list[Obj] = [{"name": "a"}, {"name": "b"}]
    jobs: list[Obj] = [
        {"name": "a-run", "queue": "a", "phase": "Running"},
        {"name": "a-more", "queue": "a"},
        {"name": "b-new", "queue": "b"},
    ]
    tasks = [
        *[
            task(f"a-run-{i}", "a-run", gpu=1, phase="Running", node="n0", gpu_indices=[i])
            for i in range(6)
        ],
        task("a-more-0", "a-more", gpu=1),
        *[task(f"b-new-{i}", "b-new", gpu=1) for i in range(8)],
    ]
    d = schedule(build(nodes(1), queues, jobs, tasks))
    assert d.queues["a"].deserved_gpu == 4.0
    assert d.queues["a"].overused
    assert d.queues["a"].share == pytest.approx(1.5)
    assert "a-more-0" not in {b.task for b in d.binds}
