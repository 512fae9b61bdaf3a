"""Volcano's nodegroup plugin: queues bound to node groups by the ``volcano.sh/nodegroup-name``
label. The cases are Volcano's own plugin tests (five nodes in groups 1..4 and one without
a group; queues with required, preferred, anti-required and anti-preferred groups), checked
node by node for the filter and the score, then end to end through manifests and cycles."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import gangsched as gs
from gangsched.config import Config
from gangsched.io.k8s import load_objects
from gangsched.io.volcano import dump_manifests
from gangsched.model import NodeGroupAffinity
from gangsched.testing import InvariantViolation, check_cycle, check_node_groups
from gangsched.testing.strategies import snapshots

LABEL = "volcano.sh/nodegroup-name"
GROUP_OF = {"n1": "group1", "n2": "group2", "n3": "group3", "n4": "group4", "n5": None}

Q1 = {
    "required": ["group1", "group3"],
    "preferred": ["group3"],
    "anti_required": ["group2", "group4"],
    "anti_preferred": ["group4"],
}
Q2 = {
    "required": ["group1"],
    "preferred": ["group3"],
    "anti_required": ["group2"],
    "anti_preferred": ["group4"],
}
Q3 = {"preferred": ["group1", "group3"]}


def _nodes() -> list[dict[str, Any]]:
    out = []
    for name, group in GROUP_OF.items():
        labels = {LABEL: group} if group else {}
        out.append({"name": name, "allocatable": {"cpu": 4, "memory": "16Gi"}, "labels": labels})
    return out


def _config(arguments: dict[str, Any] | None = None, hierarchy: bool = False) -> Config:
    entry: dict[str, Any] = {"name": "nodegroup", "arguments": arguments or {}}
    if hierarchy:
        entry["enableHierarchy"] = True
    return Config.from_dict(
        {"actions": ["enqueue", "allocate"], "tiers": [[{"name": "gang"}], [entry]]}
    )


def _snapshot(queues: list[dict[str, Any]], queue: str) -> gs.Snapshot:
    return gs.Snapshot.from_dict(
        {
            "nodes": _nodes(),
            "queues": queues,
            "jobs": [{"name": "pg", "queue": queue, "min_available": 1, "phase": "Inqueue"}],
            "tasks": [{"name": "pg-0", "job": "pg", "request": {"cpu": 2, "memory": "4Gi"}}],
        }
    )


def _per_node(snap: gs.Snapshot, config: Config) -> tuple[dict[str, bool], dict[str, float]]:
    ssn = gs.open_session(snap, config)
    rows = np.arange(len(snap.nodes), dtype=np.intp)
    tmpl = ssn.templates[0]
    ok = ssn.points.predicate_ok(tmpl, rows).tolist()
    score = ssn.points.node_scores(tmpl, rows)["nodegroup"].tolist()
    names = [n.name for n in snap.nodes]
    return dict(zip(names, ok, strict=True)), dict(zip(names, score, strict=True))


ALL_OUT = dict.fromkeys(GROUP_OF, False)
ZERO = dict.fromkeys(GROUP_OF, 0.0)


@pytest.mark.parametrize(
    ("queues", "queue", "config", "ok", "score"),
    [
        pytest.param(
            [{"name": "q1", "node_group_affinity": Q1}],
            "q1",
            _config(),
            {"n1": True, "n2": False, "n3": True, "n4": True, "n5": False},
            {"n1": 100.0, "n2": 0.0, "n3": 150.0, "n4": -1.0, "n5": 0.0},
            id="preferred-is-a-subset-of-required",
        ),
        pytest.param(
            [{"name": "q2", "node_group_affinity": Q2}],
            "q2",
            _config(),
            {"n1": True, "n2": False, "n3": True, "n4": True, "n5": False},
            {"n1": 100.0, "n2": 0.0, "n3": 50.0, "n4": -1.0, "n5": 0.0},
            id="preferred-outside-required",
        ),
        pytest.param(
            [{"name": "root-no-affinity"}],
            "root-no-affinity",
            _config({"strict": False}),
            {**ALL_OUT, "n5": True},
            ZERO,
            id="no-affinity-not-strict-only-unlabelled-nodes",
        ),
        pytest.param(
            [
                {"name": "root", "node_group_affinity": Q1},
                {"name": "q1", "node_group_affinity": Q1},
                {"name": "q1-child", "parent": "q1"},
            ],
            "q1-child",
            _config(hierarchy=True),
            {"n1": True, "n2": False, "n3": True, "n4": True, "n5": False},
            {"n1": 100.0, "n2": 0.0, "n3": 150.0, "n4": -1.0, "n5": 0.0},
            id="inherits-from-parent",
        ),
        pytest.param(
            [
                {"name": "root", "node_group_affinity": Q1},
                {"name": "q-no-affinity"},
                {"name": "q-no-affinity-child", "parent": "q-no-affinity"},
            ],
            "q-no-affinity-child",
            _config(hierarchy=True),
            {"n1": True, "n2": False, "n3": True, "n4": True, "n5": False},
            {"n1": 100.0, "n2": 0.0, "n3": 150.0, "n4": -1.0, "n5": 0.0},
            id="inherits-from-the-root-through-a-parent-without-one",
        ),
        pytest.param(
            [
                {"name": "root", "node_group_affinity": Q1},
                {"name": "q-no-affinity"},
                {"name": "q-no-affinity-child", "parent": "q-no-affinity"},
            ],
            "q-no-affinity-child",
            _config(),
            ALL_OUT,
            ZERO,
            id="no-inheritance-without-hierarchy",
        ),
        pytest.param(
            [{"name": "q-no-affinity"}],
            "q-no-affinity",
            _config(),
            ALL_OUT,
            ZERO,
            id="strict-queue-without-affinity-gets-nothing",
        ),
        pytest.param(
            [{"name": "q3", "node_group_affinity": Q3}],
            "q3",
            _config({"enablePreferredOrder": True}),
            {"n1": True, "n2": False, "n3": True, "n4": False, "n5": False},
            {"n1": 50.0, "n2": 0.0, "n3": 25.0, "n4": 0.0, "n5": 0.0},
            id="preferred-order",
        ),
        pytest.param(
            [{"name": "q3", "node_group_affinity": Q3}],
            "q3",
            _config(),
            {"n1": True, "n2": False, "n3": True, "n4": False, "n5": False},
            {"n1": 50.0, "n2": 0.0, "n3": 50.0, "n4": 0.0, "n5": 0.0},
            id="preferred-unordered",
        ),
    ],
)
def test_volcano_cases(
    queues: list[dict[str, Any]],
    queue: str,
    config: Config,
    ok: dict[str, bool],
    score: dict[str, float],
) -> None:
    got_ok, got_score = _per_node(_snapshot(queues, queue), config)
    assert got_ok == ok
    assert got_score == score


def test_a_cycle_places_on_the_best_group_and_explains_the_rest() -> None:
    snap = _snapshot([{"name": "q1", "node_group_affinity": Q1}], "q1")
    d = gs.schedule(snap, _config())
    assert [(b.task, b.node) for b in d.binds] == [("pg-0", "n3")]  # required + preferred
    q = gs.Snapshot.from_dict(
        {
            **snap.to_dict(),
            "queues": [{"name": "q-none"}],
            "jobs": [{"name": "pg", "queue": "q-none", "min_available": 1, "phase": "Inqueue"}],
        }
    )
    d = gs.schedule(q, _config())
    assert d.binds == ()
    msg = d.jobs["pg"].message
    assert "1 node group label not found" in msg
    assert "4 node group affinity not specified" in msg


def test_queue_manifest_affinity_round_trips() -> None:
    queue = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": "q1"},
        "spec": {
            "weight": 1,
            "affinity": {
                "nodeGroupAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": ["group1", "group3"],
                    "preferredDuringSchedulingIgnoredDuringExecution": ["group3"],
                },
                "nodeGroupAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": ["group2", "group4"],
                    "preferredDuringSchedulingIgnoredDuringExecution": ["group4"],
                },
            },
        },
    }
    cluster = load_objects([queue])
    (q,) = [q for q in cluster.snapshot.queues if q.name == "q1"]
    assert q.node_group_affinity == NodeGroupAffinity(
        required=("group1", "group3"),
        preferred=("group3",),
        anti_required=("group2", "group4"),
        anti_preferred=("group4",),
    )
    back = load_objects(dump_manifests(cluster.snapshot)).snapshot
    assert back.queues == cluster.snapshot.queues
    snap = cluster.snapshot
    assert gs.Snapshot.from_dict(snap.to_dict()).queues == snap.queues


def test_invalid_group_names_are_typed_errors() -> None:
    with pytest.raises(gs.SnapshotError) as info:
        gs.Queue.from_dict({"name": "q", "node_group_affinity": {"required": ["", "g"]}})
    assert (info.value.kind, info.value.name, info.value.field) == (
        "queue",
        "q",
        "node_group_affinity.required[0]",
    )
    with pytest.raises(gs.SnapshotError, match="unknown field"):
        gs.Queue.from_dict({"name": "q", "node_group_affinity": {"require": ["g"]}})


def test_unknown_argument_is_refused() -> None:
    with pytest.raises(gs.ConfigError, match="strict"):
        gs.schedule(_snapshot([{"name": "q"}], "q"), _config({"strickt": False}))


# ---------------------------------------------------------------------------------------------
# Every action's decisions keep the queues inside their groups

_GROUPS = ("group1", "group2", "group3")


@st.composite
def grouped_snapshots(draw: st.DrawFn) -> gs.Snapshot:
    base = draw(snapshots(max_nodes=5, max_jobs=4, max_tasks_per_job=3))
    doc = base.to_dict()
    for n in doc["nodes"]:
        group = draw(st.sampled_from((None, *_GROUPS)))
        if group is not None:
            n["labels"] = {**n.get("labels", {}), LABEL: group}
    for q in doc["queues"]:
        if draw(st.booleans()):
            lists = {
                k: draw(st.lists(st.sampled_from(_GROUPS), unique=True, max_size=2))
                for k in ("required", "preferred", "anti_required", "anti_preferred")
            }
            q["node_group_affinity"] = lists
    return gs.Snapshot.from_dict(doc)


@given(grouped_snapshots(), st.booleans(), st.booleans())
def test_every_action_keeps_queues_in_their_groups(
    snap: gs.Snapshot, strict: bool, hierarchy: bool
) -> None:
    entry: dict[str, Any] = {"name": "nodegroup", "arguments": {"strict": strict}}
    if hierarchy:
        entry["enableHierarchy"] = True
    config = Config.from_dict(
        {
            "actions": ["enqueue", "allocate", "preempt", "reclaim", "backfill"],
            "tiers": [
                [{"name": "priority"}, {"name": "gang"}, {"name": "conformance"}],
                [{"name": "drf"}, {"name": "predicates"}, {"name": "proportion"}, entry],
            ],
        }
    )
    d = gs.schedule(snap, config)
    check_node_groups(snap, d, config)
    check_cycle(snap, d, config)


def test_the_checker_catches_a_bind_outside_the_groups() -> None:
    snap = _snapshot([{"name": "q1", "node_group_affinity": Q1}], "q1")
    d = gs.schedule(snap, _config())
    moved = gs.Decisions.from_dict(
        {**d.to_dict(), "binds": [{**d.binds[0].to_dict(), "node": "n2"}]}
    )
    with pytest.raises(InvariantViolation, match="queue 'q1' may not use"):
        check_node_groups(snap, moved, _config())
