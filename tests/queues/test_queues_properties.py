"""Invariants of the queue plugins on random queues and loads.

* water-filling never promises more than the cluster has (when the guarantees fit in it),
  never less than a guarantee, never more than realCapability or the request;
* no queue gains allocations beyond its capability — with hierarchy, at any ancestor;
* a guaranteed queue that asks for its guarantee gets it on a cluster with room;
* the deserved amounts a cycle reports add up to at most the cluster.

Examples per property: ``GANGSCHED_EXAMPLES`` (default 40); more with ``GANGSCHED_SOAK=1``.
"""

from __future__ import annotations

import os

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangsched.config import Config
from gangsched.model.snapshot import Snapshot
from gangsched.plugins.proportion import water_fill
from gangsched.scheduler import schedule
from gangsched.testing.invariants import check_capacity, check_queue_capability

Obj = dict[str, object]
GPU = "nvidia.com/gpu"
EXAMPLES = int(
    os.environ.get("GANGSCHED_EXAMPLES", "400" if os.environ.get("GANGSCHED_SOAK") else "40")
)
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# ------------------------------------------------------------------------- water-filling


@st.composite
def fill_inputs(draw: st.DrawFn) -> tuple[np.ndarray, ...]:
    n_q = draw(st.integers(1, 6))
    n_r = draw(st.integers(1, 3))
    total = np.array([draw(st.integers(0, 64)) * 1000 for _ in range(n_r)], dtype=np.float64)
    weights = np.array([draw(st.integers(1, 10)) for _ in range(n_q)], dtype=np.float64)
    request = np.array(
        [[draw(st.integers(0, 80)) * 1000 for _ in range(n_r)] for _ in range(n_q)],
        dtype=np.float64,
    )
    guarantee = np.zeros((n_q, n_r))
    for r in range(n_r):
        budget = int(total[r])
        for q in range(n_q):
            if draw(st.booleans()):
                g = draw(st.integers(0, budget // 1000)) * 1000
                guarantee[q, r] = g
                budget -= g
    capability = np.array(
        [
            [
                draw(st.sampled_from([np.inf, *(k * 1000.0 for k in range(0, 40, 4))]))
                for _ in range(n_r)
            ]
            for _ in range(n_q)
        ]
    )
    part = np.array([draw(st.booleans()) for _ in range(n_q)], dtype=np.bool_)
    return total, weights, request, guarantee, capability, part


@SETTINGS
@given(fill_inputs())
def test_water_fill_bounds(args: tuple[np.ndarray, ...]) -> None:
    total, weights, request, guarantee, capability, part = args
    real = np.minimum(np.maximum(total - guarantee.sum(axis=0), 0.0) + guarantee, capability)
    got = water_fill(total, weights, request, guarantee, real, participating=part)
    assert np.all(got[~part] == 0)
    mine = got[part]
    assert np.all(mine.sum(axis=0) <= total + 0.2)
    assert np.all(mine >= guarantee[part] - 1e-9)
    assert np.all(mine <= np.maximum(np.minimum(real, request), guarantee)[part] + 1e-6)


# ------------------------------------------------------------------------- clusters


def _nodes(draw: st.DrawFn) -> list[Obj]:
    return [
        {
            "name": f"n{i}",
            "allocatable": {"cpu": draw(st.sampled_from([8, 16, 32])), "memory": "64Gi"},
            "gpus": {"count": draw(st.sampled_from([2, 4, 8]))},
        }
        for i in range(draw(st.integers(1, 4)))
    ]


def _load(draw: st.DrawFn, queues: list[str], leaves: list[str]) -> tuple[list[Obj], list[Obj]]:
    """Running work (possibly over a queue's share) and pending gangs of 1-4 GPUs."""
    jobs: list[Obj] = []
    tasks: list[Obj] = []
    for k in range(draw(st.integers(1, 10))):
        q = draw(st.sampled_from(leaves))
        size = draw(st.integers(1, 3))
        gpus = draw(st.integers(0, 4))
        cpu = draw(st.integers(0 if gpus else 1, 4))
        name = f"j{k}"
        jobs.append({"name": name, "queue": q, "min_available": size, "creation": k})
        for i in range(size + draw(st.integers(0, 2))):
            t: Obj = {"name": f"{name}-{i}", "job": name, "request": {"cpu": cpu} if cpu else {}}
            if gpus:
                t["gpu_request"] = {"count": gpus}
            tasks.append(t)
    del queues
    return jobs, tasks


def _cap(draw: st.DrawFn) -> Obj | None:
    if not draw(st.booleans()):
        return None
    out: Obj = {GPU: draw(st.integers(0, 12))}
    if draw(st.booleans()):
        out["cpu"] = draw(st.integers(1, 40))
    return out


@st.composite
def flat_clusters(draw: st.DrawFn) -> Snapshot:
    names = [f"q{i}" for i in range(draw(st.integers(1, 4)))]
    queues: list[Obj] = []
    for name in names:
        q: Obj = {"name": name, "weight": draw(st.integers(1, 4))}
        cap = _cap(draw)
        if cap is not None:
            q["capability"] = cap
        if draw(st.booleans()):
            q["deserved"] = {GPU: draw(st.integers(0, 8))}
        queues.append(q)
    jobs, tasks = _load(draw, names, names)
    return Snapshot.from_dict(
        {"nodes": _nodes(draw), "queues": queues, "jobs": jobs, "tasks": tasks}
    )


@st.composite
def queue_trees(draw: st.DrawFn) -> Snapshot:
    n = draw(st.integers(2, 7))
    names = [f"q{i}" for i in range(n)]
    queues: list[Obj] = []
    for i, name in enumerate(names):
        q: Obj = {"name": name}
        if i and draw(st.booleans()):
            q["parent"] = names[draw(st.integers(0, i - 1))]
        cap = _cap(draw)
        if cap is not None:
            q["capability"] = cap
        if draw(st.booleans()):
            q["deserved"] = {GPU: draw(st.integers(0, 6))}
        if draw(st.integers(0, 3)) == 0:
            q["guarantee"] = {GPU: draw(st.integers(0, 2))}
        queues.append(q)
    parents = {q.get("parent") for q in queues}
    leaves = [q for q in names if q not in parents]
    jobs, tasks = _load(draw, names, leaves)
    return Snapshot.from_dict(
        {"nodes": _nodes(draw), "queues": queues, "jobs": jobs, "tasks": tasks}
    )


def _config(plugin: str, hierarchy: bool = False) -> Config:
    return Config.from_dict(
        {
            "actions": ["enqueue", "allocate", "backfill"],
            "tiers": [
                [{"name": "priority"}, {"name": "gang"}, {"name": "conformance"}],
                [
                    {"name": "drf"},
                    {"name": "predicates"},
                    {"name": plugin, "enableHierarchy": hierarchy},
                    {"name": "nodeorder"},
                ],
            ],
        }
    )


PROPORTION = _config("proportion")
CAPACITY = _config("capacity")
TREE = _config("capacity", hierarchy=True)


@SETTINGS
@given(flat_clusters())
def test_no_queue_exceeds_its_capability_flat(snapshot: Snapshot) -> None:
    for cfg in (PROPORTION, CAPACITY):
        d = schedule(snapshot, cfg)
        check_capacity(snapshot, d)
        check_queue_capability(snapshot, d, hierarchical=False)


@SETTINGS
@given(queue_trees())
def test_no_queue_exceeds_capability_at_any_ancestor(snapshot: Snapshot) -> None:
    d = schedule(snapshot, TREE)
    check_capacity(snapshot, d)
    check_queue_capability(snapshot, d, hierarchical=True)


@st.composite
def guaranteed(draw: st.DrawFn) -> tuple[Snapshot, dict[str, int]]:
    n_nodes = draw(st.integers(1, 3))
    total = 8 * n_nodes
    names = [f"q{i}" for i in range(draw(st.integers(2, 4)))]
    budget = total
    guarantees: dict[str, int] = {}
    queues: list[Obj] = []
    jobs: list[Obj] = []
    tasks: list[Obj] = []
    for i, name in enumerate(names):
        g = draw(st.integers(0, budget))
        budget -= g
        guarantees[name] = g
        q: Obj = {"name": name, "weight": draw(st.integers(1, 8)), "guarantee": {GPU: g}}
        queues.append(q)
        for k in range(g + draw(st.integers(0, 6))):  # asks at least its guarantee
            jobs.append({"name": f"{name}-{k}", "queue": name, "creation": k + i})
            tasks.append(
                {"name": f"{name}-{k}-0", "job": f"{name}-{k}", "gpu_request": {"count": 1}}
            )
    nodes: list[Obj] = [
        {"name": f"n{i}", "allocatable": {"cpu": 8, "memory": "32Gi"}, "gpus": {"count": 8}}
        for i in range(n_nodes)
    ]
    snap = Snapshot.from_dict({"nodes": nodes, "queues": queues, "jobs": jobs, "tasks": tasks})
    return snap, guarantees


@SETTINGS
@given(guaranteed())
def test_guarantee_is_available_to_a_queue_that_asks(case: tuple[Snapshot, dict[str, int]]) -> None:
    snapshot, guarantees = case
    d = schedule(snapshot, PROPORTION)
    for name, g in guarantees.items():
        assert d.queues[name].allocated_gpu >= g, (name, d.queues[name])
    total = sum(8 for _ in snapshot.nodes)
    assert sum(q.deserved_gpu for q in d.queues.values()) <= total + 0.001 * len(d.queues)


@SETTINGS
@given(flat_clusters())
def test_reported_deserved_fits_in_the_cluster(snapshot: Snapshot) -> None:
    d = schedule(snapshot, PROPORTION)
    total_gpu = sum(n.gpus.count for n in snapshot.nodes if n.gpus is not None)
    total_cpu = sum(n.allocatable.get("cpu", 0) for n in snapshot.nodes)
    slack = len(d.queues)  # each queue's amount is rounded to the canonical unit
    assert sum(q.deserved.get(GPU, 0) for q in d.queues.values()) <= total_gpu * 1000 + slack
    assert sum(q.deserved.get("cpu", 0) for q in d.queues.values()) <= total_cpu + slack
