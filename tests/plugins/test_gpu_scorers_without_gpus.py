"""Every GPU node scorer on clusters without GPUs (and without nodes): a cluster of CPU
nodes, GPU tasks with nowhere to go, a mix with GPU-less nodes next to GPU nodes. Each
cycle must pass every invariant, be deterministic, place CPU tasks where they fit and leave
GPU tasks pending with a reason, under the scorer alone and in Volcano's default tiers."""

from __future__ import annotations

from typing import Any

import pytest

import gangsched as gs
from _builders import gpu_node
from gangsched.config import BUILTIN_PLUGINS, Config
from gangsched.fragmentation import POLICIES
from gangsched.testing.invariants import check_cycle

GPU = "nvidia.com/gpu"
SCORERS = sorted(set(POLICIES) & set(BUILTIN_PLUGINS))


def _cpu_node(name: str) -> dict[str, Any]:
    return gpu_node(name, gpus=None, cpu=8, memory="32Gi", pods=110)


def _gpu_node(name: str) -> dict[str, Any]:
    return gpu_node(name, gpus=2, cpu=8, memory="32Gi", pods=110)


def _job(name: str, request: dict[str, Any], n: int = 1) -> tuple[dict[str, Any], list[Any]]:
    job = {"name": name, "queue": "default", "min_available": n}
    tasks = [{"name": f"{name}-{i}", "job": name, "request": request} for i in range(n)]
    return job, tasks


def _snapshot(nodes: list[dict[str, Any]]) -> gs.Snapshot:
    jobs, tasks = [], []
    for job, ts in (
        _job("cpu", {"cpu": 2, "memory": "1Gi"}, 2),
        _job("gpu", {"cpu": 1, GPU: 1}),
        _job("two", {"cpu": 1, GPU: 2}),
    ):
        jobs.append(job)
        tasks.extend(ts)
    return gs.Snapshot.from_dict(
        {"nodes": nodes, "queues": [{"name": "default"}], "jobs": jobs, "tasks": tasks}
    )


CLUSTERS = {
    "no-nodes": [],
    "cpu-only": [_cpu_node("c0"), _cpu_node("c1")],
    "mixed": [_cpu_node("c0"), _gpu_node("g0")],
}


def _configs(scorer: str) -> dict[str, Config]:
    alone = {"actions": ["allocate"], "tiers": [[{"name": "predicates"}, {"name": scorer}]]}
    volcano = {
        "actions": ["enqueue", "allocate", "backfill"],
        "tiers": [
            [{"name": "priority"}, {"name": "gang"}, {"name": "conformance"}],
            [{"name": "drf"}, {"name": "predicates"}, {"name": "proportion"}, {"name": scorer}],
        ],
    }
    return {"alone": Config.from_dict(alone), "volcano": Config.from_dict(volcano)}


def test_every_gpu_scorer_is_covered() -> None:
    assert {"bestfit", "fgd", "dotprod", "gpu-packing", "gpu-clustering", "random"} <= set(SCORERS)


@pytest.mark.parametrize("cluster", sorted(CLUSTERS))
@pytest.mark.parametrize("scorer", SCORERS)
def test_a_gpu_scorer_on_a_cluster_without_gpus(scorer: str, cluster: str) -> None:
    nodes = CLUSTERS[cluster]
    snap = _snapshot(nodes)
    before = snap.to_dict()
    for label, cfg in _configs(scorer).items():
        d = gs.schedule(snap, cfg)
        check_cycle(snap, d, cfg)
        assert gs.schedule(snap, cfg).to_dict() == d.to_dict(), label
        assert snap.to_dict() == before
        placed = {b.task: b.node for b in d.binds} | {p.task: p.node for p in d.pipelined}
        gpu_nodes = {n["name"] for n in nodes if "gpus" in n}
        # GPU tasks only ever land on GPU nodes; with none, they wait, with a reason.
        for task in ("gpu-0", "two-0"):
            if gpu_nodes:
                assert placed.get(task, next(iter(gpu_nodes))) in gpu_nodes, (label, task)
            else:
                assert task not in placed, (label, task)
                assert d.task_reasons.get(task), (label, task)
        if nodes:
            assert {"cpu-0", "cpu-1"} <= set(placed), (label, d.task_reasons)
        else:
            assert not placed


def test_the_random_scorer_takes_a_name_no_utf8_text_holds() -> None:
    # A lone surrogate is a valid str and a valid record name; the seeded draw hashes the
    # name's bytes and must not raise on it (it did: UnicodeEncodeError).
    job, tasks = _job("j\ud800", {"cpu": 1})
    snap = gs.Snapshot.from_dict(
        {
            "nodes": [_cpu_node("c0"), _cpu_node("c1")],
            "queues": [{"name": "default"}],
            "jobs": [job],
            "tasks": tasks,
        }
    )
    cfg = _configs("random")["alone"]
    d = gs.schedule(snap, cfg)
    check_cycle(snap, d, cfg)
    assert [b.task for b in d.binds] == ["j\ud800-0"]
    assert gs.schedule(snap, cfg).to_dict() == d.to_dict()
