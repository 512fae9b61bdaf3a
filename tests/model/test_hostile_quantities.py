"""Quantities at the int64 edges: bounded at input, summed exactly, never wrapped.

Every amount a record holds is at most ``MAX_QUANTITY`` (2**53, exact as a float64), every
per-resource sum over a snapshot at most ``MAX_TOTAL`` (2**60, so a few sums added together
stay inside int64); beyond that the snapshot is rejected with a :class:`SnapshotError` naming
the record and field. Within the bounds the queue plugins compute exactly.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from gangsched.config import Config
from gangsched.errors import SnapshotError
from gangsched.limits import MAX_QUANTITY, MAX_TOTAL, Limits
from gangsched.model import MAX_DEVICE_MILLI, MAX_GPUS_PER_NODE, GpuRequest, Gpus, Node, Task
from gangsched.model.snapshot import Snapshot
from gangsched.scheduler import open_session, schedule
from gangsched.testing.invariants import check_all

Obj = dict[str, Any]

BOUNDARIES = (0, 1, 2**53 - 1, 2**53, 2**62, 2**63 - 1)


@contextmanager
def _raises(kind: str, name: str, field: str, match: str = "") -> Iterator[None]:
    """Expect a SnapshotError about ``kind name: field`` whose message matches ``match``."""
    with pytest.raises(SnapshotError, match=match) as info:
        yield
    err = info.value
    assert (err.kind, err.name, err.field) == (kind, name, field), str(err)


def _snapshot(
    *,
    nodes: list[Obj] | None = None,
    queues: list[Obj] | None = None,
    jobs: list[Obj] | None = None,
    tasks: list[Obj] | None = None,
    limits: Limits | None = None,
) -> Snapshot:
    d = {
        "nodes": nodes if nodes is not None else [{"name": "n", "allocatable": {"cpu": 4}}],
        "queues": queues if queues is not None else [{"name": "q"}],
        "jobs": jobs if jobs is not None else [{"name": "j", "queue": "q"}],
        "tasks": tasks if tasks is not None else [{"name": "t", "job": "j"}],
    }
    if limits is None:
        return Snapshot.from_dict(d)
    return Snapshot.from_dict(d, limits=limits)


QUEUE_CONFIGS: dict[str, Config] = {
    "default": Config.default(),
    "proportion": Config.from_dict(
        {
            "actions": ["enqueue", "allocate", "reclaim", "preempt"],
            "tiers": [
                [{"name": "priority"}, {"name": "gang"}],
                [
                    {"name": "drf"},
                    {"name": "predicates"},
                    {"name": "proportion"},
                    {"name": "overcommit"},
                    {"name": "binpack"},
                ],
            ],
        }
    ),
    "hdrf": Config.from_dict(
        {
            "actions": ["enqueue", "allocate", "preempt"],
            "tiers": [
                [{"name": "priority"}, {"name": "gang"}],
                [
                    {"name": "drf", "enableHierarchy": True},
                    {"name": "predicates"},
                    {"name": "overcommit"},
                    {"name": "nodeorder"},
                ],
            ],
        }
    ),
    "capacity": Config.from_dict(
        {
            "actions": ["enqueue", "allocate", "reclaim", "preempt"],
            "tiers": [
                [{"name": "priority"}, {"name": "gang"}],
                [
                    {"name": "drf"},
                    {"name": "predicates"},
                    {"name": "capacity", "enableHierarchy": True},
                    {"name": "nodeorder"},
                ],
            ],
        }
    ),
    "capacity-flat": Config.from_dict(
        {
            "actions": ["enqueue", "allocate", "reclaim"],
            "tiers": [
                [{"name": "gang"}],
                [{"name": "drf"}, {"name": "predicates"}, {"name": "capacity"}],
            ],
        }
    ),
}


# ------------------------------------------------------------------------------------------
# Single fields beyond the bounds


def test_gpus_milli_2_62_is_a_snapshot_error() -> None:
    node = {"name": "n", "gpus": {"count": 1, "milli": 2**62}}
    with _raises("node", "n", "gpus.milli", "out of range"):
        _snapshot(nodes=[node])
    # Within 2**53 but a device so large that 1024 of them would pass 2**53 milli-GPU.
    node["gpus"] = {"count": 1, "milli": MAX_DEVICE_MILLI + 1}
    with _raises("node", "n", "gpus.milli", "beyond the supported 2\\*\\*43"):
        _snapshot(nodes=[node])
    assert Gpus(count=MAX_GPUS_PER_NODE, milli=MAX_DEVICE_MILLI).milli == 2**43


def test_gpu_request_count_10_16_is_a_snapshot_error() -> None:
    task = {"name": "t", "job": "j", "gpu_request": {"count": 10**16}}
    with _raises("task", "t", "gpu_request.count", "out of range"):
        _snapshot(tasks=[task])
    task["gpu_request"] = {"count": MAX_GPUS_PER_NODE + 1}
    with _raises("task", "t", "gpu_request.count", "sit on one node"):
        _snapshot(tasks=[task])
    task["gpu_request"] = {"count": 2, "milli": 2**53}
    with _raises("task", "t", "gpu_request.milli", "beyond the supported 2\\*\\*53"):
        _snapshot(tasks=[task])
    # The same bound through the manifest spelling (whole devices in the request).
    with _raises("task", "t", "request.nvidia.com/gpu", "sit on one node"):
        Task(name="t", job="j", request={"nvidia.com/gpu": 2000})
    with _raises("node", "n", "allocatable.nvidia.com/gpu", "beyond the supported 1024"):
        Node(name="n", allocatable={"nvidia.com/gpu": 2000})
    assert GpuRequest(count=MAX_GPUS_PER_NODE, milli=2**43).total_milli == MAX_QUANTITY


def test_two_4ei_nodes_are_rejected_not_wrapped() -> None:
    nodes = [{"name": f"n{i}", "allocatable": {"cpu": 4, "memory": "4Ei"}} for i in range(2)]
    with _raises("node", "n0", "allocatable.memory", "largest supported amount, 2\\*\\*53"):
        _snapshot(nodes=nodes)


def test_nodes_whose_memory_sums_past_2_60_are_rejected_at_the_crossing_node() -> None:
    big = {"cpu": 4, "memory": MAX_QUANTITY}
    nodes = [{"name": f"n{i}", "allocatable": big} for i in range(MAX_TOTAL // MAX_QUANTITY + 1)]
    with _raises("node", "n128", "allocatable.memory", "adds up past 2\\*\\*60"):
        _snapshot(nodes=nodes)


@pytest.mark.parametrize("config", sorted(QUEUE_CONFIGS))
def test_cluster_total_at_2_60_schedules_exactly(config: str) -> None:
    """128 nodes of 2**53 bytes hold exactly 2**60 bytes: the queue plugins see the exact
    total (no wrap to a negative total, no 'queue cannot take this task')."""
    big = {"cpu": 4, "memory": MAX_QUANTITY}
    nodes = [{"name": f"n{i:03}", "allocatable": big} for i in range(MAX_TOTAL // MAX_QUANTITY)]
    tasks = [{"name": "t", "job": "j", "request": {"cpu": 1, "memory": MAX_QUANTITY}}]
    jobs = [{"name": "j", "queue": "q", "min_resources": {"cpu": 1, "memory": MAX_QUANTITY}}]
    snap = _snapshot(nodes=nodes, jobs=jobs, tasks=tasks)
    decisions = schedule(snap, QUEUE_CONFIGS[config])
    assert [b.task for b in decisions.binds] == ["t"]
    check_all(snap, decisions)


def test_guarantee_of_int64_max_millicores_is_rejected() -> None:
    queue = {"name": "q", "guarantee": {"cpu": "9223372036854775807m"}}
    with _raises("queue", "q", "guarantee.cpu", "largest supported amount"):
        _snapshot(queues=[queue])


@pytest.mark.parametrize("config", ["proportion", "capacity-flat"])
def test_guarantee_at_2_53_gives_an_exact_deserved_amount(config: str) -> None:
    """A guarantee at the bound (far beyond the cluster) floors deserved exactly at it: the
    float64 deserved goes back to int64 without wrapping to -2**63."""
    snap = _snapshot(queues=[{"name": "q", "guarantee": {"cpu": f"{MAX_QUANTITY}m"}}])
    ssn = open_session(snap, QUEUE_CONFIGS[config])
    assert ssn.queue_deserved is not None
    assert int(ssn.queue_deserved[0, 0]) == MAX_QUANTITY
    assert bool((ssn.queue_deserved >= 0).all())
    decisions = schedule(snap, QUEUE_CONFIGS[config])
    assert decisions.queues["q"].deserved["cpu"] == MAX_QUANTITY
    check_all(snap, decisions)


@pytest.mark.parametrize(
    ("part", "field"),
    [("tasks", "request.memory"), ("queues", "guarantee.memory"), ("queues", "deserved.memory")],
)
def test_records_whose_amounts_sum_past_2_60_are_rejected(part: str, field: str) -> None:
    n = MAX_TOTAL // MAX_QUANTITY + 1
    amount = {"memory": MAX_QUANTITY}
    if part == "tasks":
        records: dict[str, Any] = {
            "tasks": [{"name": f"t{i}", "job": "j", "request": amount} for i in range(n)]
        }
        kind = "task"
    else:
        attr = field.split(".")[0]
        records = {
            "queues": [{"name": f"q{i}", attr: amount} for i in range(n)],
            "jobs": [],
            "tasks": [],
        }
        kind = "queue"
    with _raises(kind, f"{kind[0]}{n - 1}", field, "adds up past 2\\*\\*60"):
        _snapshot(**records)


def test_min_resources_and_weights_that_sum_past_2_60_are_rejected() -> None:
    n = MAX_TOTAL // MAX_QUANTITY + 1
    jobs = [
        {"name": f"j{i}", "queue": "q", "min_resources": {"cpu": f"{MAX_QUANTITY}m"}}
        for i in range(n)
    ]
    with _raises("job", f"j{n - 1}", "min_resources.cpu", "adds up past 2\\*\\*60"):
        _snapshot(jobs=jobs, tasks=[])
    queues = [{"name": f"q{i}", "weight": MAX_QUANTITY} for i in range(n)]
    with _raises("queue", f"q{n - 1}", "weight", "add up past 2\\*\\*60"):
        _snapshot(queues=queues, jobs=[], tasks=[])


def test_gpu_totals_count_devices_times_milli() -> None:
    n = MAX_TOTAL // MAX_QUANTITY + 1
    gpus = {"count": MAX_GPUS_PER_NODE, "milli": MAX_DEVICE_MILLI}
    nodes = [{"name": f"n{i}", "gpus": gpus} for i in range(n)]
    with _raises("node", f"n{n - 1}", "gpus", "GPUs add up past 2\\*\\*60"):
        _snapshot(nodes=nodes)
    ask = {"count": MAX_GPUS_PER_NODE, "milli": MAX_DEVICE_MILLI}
    tasks = [{"name": f"t{i}", "job": "j", "gpu_request": ask} for i in range(n)]
    with _raises("task", f"t{n - 1}", "gpu_request", "GPUs add up past 2\\*\\*60"):
        _snapshot(tasks=tasks)


@pytest.mark.parametrize(
    ("field", "value"),
    [("priority", 2**53 + 1), ("priority", -(2**62)), ("priority", 10**5000), ("creation", 2**63)],
    ids=["2**53+1", "-2**62", "10**5000", "2**63"],
)
def test_integer_fields_are_bounded_at_2_53(field: str, value: int) -> None:
    with _raises("job", "j", field, "out of range"):
        _snapshot(jobs=[{"name": "j", "queue": "q", field: value}])
    assert (
        _snapshot(jobs=[{"name": "j", "queue": "q", "priority": -MAX_QUANTITY}]).jobs[0].priority
        == -MAX_QUANTITY
    )


# ------------------------------------------------------------------------------------------
# Deep queue trees


@pytest.mark.parametrize("plugin", ["drf", "capacity"])
def test_hierarchical_queue_plugins_iterate_a_2000_deep_queue_chain(plugin: str) -> None:
    depth = 2000
    queues = [{"name": "q0"}] + [{"name": f"q{i}", "parent": f"q{i - 1}"} for i in range(1, depth)]
    snap = _snapshot(
        queues=queues,
        jobs=[{"name": "j", "queue": f"q{depth - 1}"}],
        tasks=[{"name": "t", "job": "j", "request": {"cpu": 1}}],
        limits=Limits(max_queue_depth=depth + 1),
    )
    config = Config.from_dict(
        {
            "actions": ["enqueue", "allocate"],
            "tiers": [
                [{"name": "gang"}],
                [{"name": plugin, "enableHierarchy": True}, {"name": "predicates"}],
            ],
        }
    )
    decisions = schedule(snap, config)
    assert [b.task for b in decisions.binds] == ["t"]
    check_all(snap, decisions)


# ------------------------------------------------------------------------------------------
# Property: boundary values are rejected with a SnapshotError or scheduled soundly

_EDGE = st.sampled_from(BOUNDARIES)

_FIELDS: tuple[tuple[str, ...], ...] = (
    ("nodes", "0", "allocatable", "cpu"),
    ("nodes", "0", "allocatable", "memory"),
    ("nodes", "1", "allocatable", "memory"),
    ("nodes", "0", "allocatable", "pods"),
    ("nodes", "1", "gpus", "count"),
    ("nodes", "1", "gpus", "milli"),
    ("tasks", "0", "request", "cpu"),
    ("tasks", "1", "request", "memory"),
    ("tasks", "2", "gpu_request", "count"),
    ("tasks", "2", "gpu_request", "milli"),
    ("tasks", "0", "priority"),
    ("queues", "0", "capability", "cpu"),
    ("queues", "0", "guarantee", "cpu"),
    ("queues", "1", "guarantee", "memory"),
    ("queues", "1", "deserved", "cpu"),
    ("queues", "0", "weight"),
    ("jobs", "0", "min_resources", "memory"),
    ("jobs", "1", "min_available"),
    ("jobs", "1", "priority"),
    ("tasks", "3", "request", "cpu"),
    ("tasks", "3", "request", "memory"),
    ("queues", "2", "guarantee", "cpu"),
    ("queues", "2", "deserved", "memory"),
    ("queues", "2", "capability", "memory"),
)


def _base() -> dict[str, list[Obj]]:
    return {
        "nodes": [
            {"name": "n0", "allocatable": {"cpu": 8, "memory": "16Gi", "pods": 110}},
            {"name": "n1", "allocatable": {"cpu": 8, "memory": "16Gi"}, "gpus": {"count": 2}},
        ],
        "queues": [
            {"name": "root"},
            {"name": "a", "parent": "root", "weight": 2},
            {"name": "b", "parent": "root"},
        ],
        "jobs": [
            {"name": "ja", "queue": "a", "priority": 10},
            {"name": "jb", "queue": "a", "min_available": 2},
            {"name": "jr", "queue": "b", "phase": "Running"},
        ],
        "tasks": [
            {"name": "a0", "job": "ja", "request": {"cpu": 1, "memory": "1Gi"}},
            {"name": "b0", "job": "jb", "request": {"cpu": 1}},
            {"name": "b1", "job": "jb", "gpu_request": {"count": 1}},
            {
                "name": "r0",
                "job": "jr",
                "request": {"cpu": 8, "memory": "8Gi"},
                "phase": "Running",
                "node": "n0",
            },
        ],
    }


def _set_field(d: dict[str, list[Obj]], path: tuple[str, ...], value: int) -> None:
    part, index, *keys = path
    rec: Obj = d[part][int(index)]
    for key in keys[:-1]:
        rec = rec.setdefault(key, {})
    # Canonical units: cpu given in millicores, so the drawn value is the canonical amount.
    rec[keys[-1]] = f"{value}m" if keys[-1] == "cpu" and keys[0] != "gpus" else value


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    st.dictionaries(st.sampled_from(_FIELDS), _EDGE, min_size=1, max_size=5),
    st.sampled_from(sorted(QUEUE_CONFIGS)),
)
def test_boundary_quantities_are_rejected_or_scheduled_soundly(
    values: dict[tuple[str, ...], int], config: str
) -> None:
    hierarchical = config in ("capacity", "hdrf")
    for path, value in values.items():
        if path[2] == "capability":
            # hdrf enforces no capability, and flat plugins read a zero cpu or memory
            # capability as unset (Volcano's rule); the invariant checker knows neither.
            assume(config != "hdrf" and (hierarchical or value != 0))
    d = _base()
    for path, value in values.items():
        _set_field(d, path, value)
    try:
        snap = Snapshot.from_dict(d)
    except SnapshotError as err:
        assert err.kind and err.name and err.field, str(err)
        assert len(str(err)) < 300
        return
    # Every amount the snapshot accepted is within the bound, and exact as a float64.
    for node in snap.nodes:
        assert all(0 <= v <= MAX_QUANTITY for v in node.allocatable.values())
    decisions = schedule(snap, QUEUE_CONFIGS[config])
    check_all(snap, decisions, hierarchical=hierarchical)
    assert schedule(snap, QUEUE_CONFIGS[config]) == decisions
    for status in decisions.queues.values():
        assert all(0 <= v <= MAX_TOTAL for v in status.deserved.values()), status.deserved
    ssn = open_session(snap, QUEUE_CONFIGS[config])
    if ssn.queue_deserved is not None:
        assert bool(np.all((ssn.queue_deserved >= 0) & (ssn.queue_deserved <= MAX_TOTAL)))
