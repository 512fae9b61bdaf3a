"""Property test: required pod affinity, anti-affinity and DoNotSchedule spread hold in every
decision of allocate, backfill and preempt, and of reclaim and consolidate on clusters of two
queues, on generated clusters of racks and zones.

Examples: ``GANGSCHED_EXAMPLES`` (default 150), derandomized by the default profile.
"""

from __future__ import annotations

import os
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gangsched as gs
from gangsched.config import Config
from gangsched.scheduler import schedule
from gangsched.testing.invariants import check_cycle, check_deterministic, check_pod_constraints

EXAMPLES = int(os.environ.get("GANGSCHED_EXAMPLES", "150"))

CONFIG = Config.from_dict(
    {
        "actions": ["enqueue", "allocate", "backfill", "preempt"],
        "tiers": [
            [{"name": "priority"}, {"name": "gang"}, {"name": "conformance"}],
            [{"name": "predicates"}, {"name": "proportion"}, {"name": "nodeorder"}],
        ],
    }
)

#: Every action that places a task, on two queues (reclaim moves work between them).
CONFIG_ALL = Config.from_dict(
    {
        "actions": ["enqueue", "allocate", "preempt", "reclaim", "consolidate", "backfill"],
        "tiers": [
            [{"name": "priority"}, {"name": "gang"}, {"name": "conformance"}],
            [
                {"name": "drf"},
                {"name": "predicates"},
                {"name": "proportion"},
                {"name": "nodeorder"},
            ],
        ],
    }
)

APPS = ("a", "b", "c")
KEYS = ("zone", "rack", "kubernetes.io/hostname")


@st.composite
def _term(draw: st.DrawFn) -> dict[str, Any]:
    app = draw(st.sampled_from(APPS))
    if draw(st.booleans()):
        selector: dict[str, Any] = {"match_labels": {"app": app}}
    else:
        op = draw(st.sampled_from(("In", "NotIn", "Exists")))
        expr: dict[str, Any] = {"key": "app", "operator": op}
        if op != "Exists":
            expr["values"] = [app]
        selector = {"match_expressions": [expr]}
    return {"topology_key": draw(st.sampled_from(KEYS)), "label_selector": selector}


@st.composite
def _constraints(draw: st.DrawFn, app: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    kind = draw(st.sampled_from(("none", "anti", "self-anti", "affinity", "spread", "mixed")))
    if kind in ("anti", "mixed"):
        out["pod_anti_affinity"] = {"required": [draw(_term())]}
    if kind == "self-anti":
        key = draw(st.sampled_from(KEYS))
        out["pod_anti_affinity"] = {
            "required": [{"topology_key": key, "label_selector": {"match_labels": {"app": app}}}]
        }
    if kind in ("affinity", "mixed"):
        out["pod_affinity"] = {"required": [draw(_term())]}
    if kind in ("spread", "mixed"):
        out["topology_spread"] = [
            {
                "max_skew": draw(st.integers(1, 2)),
                "topology_key": draw(st.sampled_from(("zone", "rack"))),
                "label_selector": {"match_labels": {"app": app}},
                **({"min_domains": 3} if draw(st.booleans()) else {}),
            }
        ]
    return out


@st.composite
def clusters(draw: st.DrawFn, queues: tuple[str, ...] = ("default",)) -> gs.Snapshot:
    n_nodes = draw(st.integers(2, 6))
    nodes = []
    for i in range(n_nodes):
        labels = {"rack": f"r{i // 2}"}
        if draw(st.integers(0, 5)):  # most nodes have a zone
            labels["zone"] = f"z{i % 2}"
        nodes.append(
            {
                "name": f"n{i}",
                "allocatable": {"cpu": draw(st.integers(2, 4)), "memory": "16Gi", "pods": 110},
                "labels": labels,
            }
        )
    jobs: list[dict[str, Any]] = []
    tasks: list[dict[str, Any]] = []
    for j in range(draw(st.integers(0, 3))):  # running jobs
        name = f"run{j}"
        app = draw(st.sampled_from(APPS))
        extra = draw(_constraints(app))
        extra.pop("topology_spread", None)
        queue = draw(st.sampled_from(queues)) if len(queues) > 1 else queues[0]
        jobs.append({"name": name, "queue": queue, "phase": "Running", "priority": 0})
        for k in range(draw(st.integers(1, 2))):
            tasks.append(
                {
                    "name": f"{name}-{k}",
                    "job": name,
                    "request": {"cpu": 1},
                    "phase": "Running",
                    "node": f"n{draw(st.integers(0, n_nodes - 1))}",
                    "labels": {"app": app},
                    "priority": 0,
                    **extra,
                }
            )
    for j in range(draw(st.integers(1, 4))):  # pending jobs
        name = f"job{j}"
        app = draw(st.sampled_from(APPS))
        n = draw(st.integers(1, 4))
        prio = draw(st.integers(0, 2))
        extra = draw(_constraints(app))
        queue = draw(st.sampled_from(queues)) if len(queues) > 1 else queues[0]
        jobs.append(
            {
                "name": name,
                "queue": queue,
                "phase": "Inqueue",
                "min_available": draw(st.integers(1, n)),
                "priority": prio,
            }
        )
        for k in range(n):
            tasks.append(
                {
                    "name": f"{name}-{k}",
                    "job": name,
                    "request": {"cpu": draw(st.integers(1, 2))},
                    "labels": {"app": app},
                    "priority": prio,
                    **extra,
                }
            )
    try:
        return gs.Snapshot.from_dict(
            {
                "nodes": nodes,
                "queues": [{"name": q} for q in queues],
                "jobs": jobs,
                "tasks": tasks,
            }
        )
    except gs.SnapshotError:  # running pods over a node's room: draw again
        from hypothesis import reject

        reject()


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(snapshot=clusters())
def test_pod_constraints_hold_in_every_decision(snapshot: gs.Snapshot) -> None:
    decisions = check_deterministic(lambda s: schedule(s, CONFIG), snapshot)
    check_cycle(snapshot, decisions, CONFIG)
    check_pod_constraints(snapshot, decisions)


@settings(
    max_examples=max(10, EXAMPLES // 3),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(snapshot=clusters(queues=("qa", "qb")))
def test_pod_constraints_hold_in_every_decision_of_every_action(snapshot: gs.Snapshot) -> None:
    decisions = check_deterministic(lambda s: schedule(s, CONFIG_ALL), snapshot)
    check_cycle(snapshot, decisions, CONFIG_ALL)
    check_pod_constraints(snapshot, decisions)


@settings(
    max_examples=max(10, EXAMPLES // 5),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(snapshot=clusters())
def test_cluster_state_cycles_match_fresh_cycles(snapshot: gs.Snapshot) -> None:
    # The sessions a ClusterState chains (templates, evaluations carried) decide as a fresh
    # cycle on the same snapshot does, pod constraints included.
    from gangsched.state import ClusterState

    state = ClusterState(snapshot)
    for _ in range(3):
        decisions = state.schedule(CONFIG)
        fresh = schedule(gs.Snapshot.from_dict(state.snapshot().to_dict()), CONFIG)
        assert decisions.to_dict() == fresh.to_dict()
        state.apply(decisions)
