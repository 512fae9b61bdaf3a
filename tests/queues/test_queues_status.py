"""Queue status in ``Decisions.queues`` and its Prometheus text rendering."""

from __future__ import annotations

import json
import re

import pytest

from gangsched._frozen import FrozenDict
from gangsched.config import Config
from gangsched.decisions import Decisions, QueueStatus
from gangsched.metrics import to_prometheus_text
from gangsched.model.snapshot import Snapshot
from gangsched.scheduler import schedule

Obj = dict[str, object]
GPU = "nvidia.com/gpu"

SAMPLE = re.compile(
    r'^([a-zA-Z_:][a-zA-Z0-9_:]*)\{((?:[a-zA-Z_]\w*="(?:[^"\\]|\\.)*",?)*)\} (\S+)$'
)


def seed_snapshot() -> Snapshot:
    nodes: list[Obj] = [
        {"name": f"n{i}", "allocatable": {"cpu": 64, "memory": "256Gi"}, "gpus": {"count": 8}}
        for i in range(5)
    ]
    queues: list[Obj] = [
        {"name": "big", "weight": 4, "capability": {GPU: 32}},
        {"name": "small", "weight": 1, "capability": {GPU: 16}},
        {"name": "idle"},
    ]
    jobs: list[Obj] = []
    tasks: list[Obj] = []
    for q in ("big", "small"):
        for i in range(40):
            jobs.append({"name": f"{q}-{i}", "queue": q, "creation": i})
            tasks.append(
                {
                    "name": f"{q}-{i}-0",
                    "job": f"{q}-{i}",
                    "request": {"cpu": 1},
                    "gpu_request": {"count": 1},
                }
            )
    # an admitted job that waits (for GPUs of a model the cluster lacks) holding a
    # reservation of 2 GPUs
    jobs.append({"name": "held", "queue": "small", "phase": "Inqueue", "min_resources": {GPU: 2}})
    tasks.append({"name": "held-0", "job": "held", "gpu_request": {"count": 2, "models": ["H100"]}})
    return Snapshot.from_dict({"nodes": nodes, "queues": queues, "jobs": jobs, "tasks": tasks})


@pytest.fixture(scope="module")
def seed() -> Decisions:
    return schedule(seed_snapshot())


def test_queue_status_as_kubectl_and_volcano_show_it(seed: Decisions) -> None:
    small = seed.queues["small"]
    assert small.weight == 1
    assert small.capability == {GPU: 16_000}
    assert small.capability_gpu == 16.0
    assert small.deserved_gpu == 8.0 and small.allocated_gpu == 8.0
    # 33 jobs still waiting (32 admitted this cycle + the held one), 8 running
    assert (small.running, small.inqueue, small.pending) == (8, 33, 0)
    assert small.inqueue_resources == {GPU: 2_000}
    assert small.inqueue_gpu == 2.0
    assert small.pending_gpu == 34.0
    assert small.request[GPU] == 42_000
    idle = seed.queues["idle"]
    assert idle.capability_gpu is None and idle.real_capability[GPU] == 40_000
    assert (idle.running, idle.pending, idle.share, idle.overused) == (0, 0, 0.0, False)


def test_status_round_trips_through_json(seed: Decisions) -> None:
    text = json.dumps(seed.to_dict(), sort_keys=True)
    again = Decisions.from_dict(json.loads(text))
    assert again.queues == seed.queues
    assert json.dumps(again.to_dict(), sort_keys=True) == text


def test_prometheus_text_has_volcano_gauges(seed: Decisions) -> None:
    text = to_prometheus_text(seed)
    samples: dict[str, float] = {}
    families: list[str] = []
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            name, kind = line[7:].split(" ")
            assert kind == "gauge"
            families.append(name)
            continue
        if line.startswith("# HELP "):
            continue
        m = SAMPLE.match(line)
        assert m is not None, line
        assert m.group(1) in families
        samples[f"{m.group(1)}{{{m.group(2)}}}"] = float(m.group(3))
    assert len(families) == len(set(families))
    assert samples['volcano_queue_allocated_gpu{queue_name="big"}'] == 32
    assert samples['volcano_queue_pending_gpu{queue_name="small"}'] == 34
    assert samples['volcano_queue_inqueue_gpu{queue_name="small"}'] == 2
    assert samples['volcano_queue_deserved_gpu{queue_name="small"}'] == 8
    assert samples['volcano_queue_capacity_gpu{queue_name="big"}'] == 32
    assert 'volcano_queue_capacity_gpu{queue_name="idle"}' not in samples
    assert samples['volcano_queue_allocated_milli_cpu{queue_name="big"}'] == 32_000
    key = 'volcano_queue_deserved_scalar_resources{queue_name="big",resource="nvidia.com/gpu"}'
    assert samples[key] == 32_000
    assert samples['volcano_queue_weight{queue_name="big"}'] == 4
    assert samples['volcano_queue_pod_group_running_count{queue_name="big"}'] == 32
    assert samples['volcano_queue_pod_group_inqueue_count{queue_name="small"}'] == 33
    assert samples['volcano_queue_share{queue_name="small"}'] == 1
    assert samples['volcano_queue_overused{queue_name="idle"}'] == 0
    assert text == to_prometheus_text(schedule(seed_snapshot()))


def test_prometheus_label_values_are_escaped() -> None:
    decisions = Decisions(
        queues=FrozenDict(
            {'team "a"\\x': QueueStatus(share=0.25, allocated=FrozenDict({GPU: 500}))}
        )
    )
    text = to_prometheus_text(decisions, prefix="gs")
    assert 'gs_queue_share{queue_name="team \\"a\\"\\\\x"} 0.25' in text
    assert 'gs_queue_allocated_gpu{queue_name="team \\"a\\"\\\\x"} 0' in text
    for line in text.splitlines():
        assert line.startswith("#") or SAMPLE.match(line), line


def test_capacity_fills_the_status_too() -> None:
    snap = Snapshot.from_dict(
        {
            "nodes": [{"name": "n", "allocatable": {"cpu": 8}, "gpus": {"count": 8}}],
            "queues": [{"name": "a", "deserved": {GPU: 2}, "capability": {GPU: 6}}],
            "jobs": [{"name": f"j{i}", "queue": "a"} for i in range(8)],
            "tasks": [
                {"name": f"j{i}-0", "job": f"j{i}", "gpu_request": {"count": 1}} for i in range(8)
            ],
        }
    )
    cfg = Config.from_dict(
        {"actions": ["enqueue", "allocate"], "tiers": [[{"name": "gang"}, {"name": "capacity"}]]}
    )
    a = schedule(snap, cfg).queues["a"]
    assert (a.allocated_gpu, a.deserved_gpu) == (6.0, 2.0)
    assert a.real_capability[GPU] == 6_000
    assert a.share == pytest.approx(3.0) and a.overused
