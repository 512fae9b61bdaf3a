"""Hostile inputs for the extension-point dispatcher and for evaluations carried across cycles.

Part 1: third-party plugins whose members have odd but acceptable signatures (served), wrong
ones (refused at open), flags of odd types, and answers of the wrong form (a ConfigError naming
the plugin and the point, never a bare error deep inside the cycle); whatever a plugin answers,
the decisions pass the invariant checkers.

Part 2: sequences of ClusterState operations, config and registry changes between cycles: a
cycle carried from the previous session decides byte for byte as a fresh cycle of the same
snapshot.

Default run: derandomized, a few dozen examples. ``GANGSCHED_SOAK=1`` runs many more.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import random
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gangsched as gs
from _carried import uncarried
from _helpers_plugins import FarNodesFirst
from gangsched.scheduler import open_session, run_cycle
from gangsched.testing import invariants as inv

SOAK = os.environ.get("GANGSCHED_SOAK") == "1"
EXAMPLES = 400 if SOAK else 30
HOSTILE = "hostile"


# ---------------------------------------------------------------------------- part 1: dispatch


def _gpu_nodes(count: int, cpu: int) -> list[dict[str, Any]]:
    """Nodes n0, n1, ... with ``cpu`` cores, 8Gi, 10 pods and 2 GPUs each."""
    return [
        {
            "name": f"n{i}",
            "allocatable": {"cpu": cpu, "memory": "8Gi", "pods": 10, "nvidia.com/gpu": 2},
        }
        for i in range(count)
    ]


def _snap_preempt() -> gs.Snapshot:
    """Two GPU nodes full of low-priority work and a high-priority gang that must preempt."""
    return gs.Snapshot.from_dict(
        {
            "nodes": _gpu_nodes(2, cpu=8),
            "queues": [{"name": "default"}],
            "jobs": [
                {"name": "r", "min_available": 1, "phase": "Running", "priority": 0},
                {"name": "hi", "min_available": 2, "phase": "Inqueue", "priority": 10},
            ],
            "tasks": [
                *[
                    {
                        "name": f"r-{i}",
                        "job": "r",
                        "request": {"cpu": 4, "nvidia.com/gpu": 1},
                        "phase": "Running",
                        "node": f"n{i % 2}",
                        "gpu_indices": [i // 2],
                    }
                    for i in range(4)
                ],
                *[
                    {"name": f"hi-{i}", "job": "hi", "request": {"cpu": 4, "nvidia.com/gpu": 1}}
                    for i in range(2)
                ],
            ],
        }
    )


def _snap_free() -> gs.Snapshot:
    """Three free nodes and a two-task gang plus a single task: allocate has work to do."""
    return gs.Snapshot.from_dict(
        {
            "nodes": _gpu_nodes(3, cpu=4),
            "queues": [{"name": "default"}],
            "jobs": [
                {"name": "j", "min_available": 2, "phase": "Inqueue"},
                {"name": "k", "min_available": 1, "phase": "Pending"},
            ],
            "tasks": [
                {"name": "j-0", "job": "j", "request": {"cpu": 1, "nvidia.com/gpu": 1}},
                {"name": "j-1", "job": "j", "request": {"cpu": 2}},
                {"name": "k-0", "job": "k", "request": {"cpu": 3}},
            ],
        }
    )


def _snap_queues() -> gs.Snapshot:
    """Queue a holds the cluster, queue b waits: reclaim asks the fair-share provider."""
    return gs.Snapshot.from_dict(
        {
            "nodes": [
                {"name": f"n{i}", "allocatable": {"cpu": 8, "memory": "8Gi", "pods": 10}}
                for i in range(2)
            ],
            "queues": [{"name": "a", "weight": 1}, {"name": "b", "weight": 1}],
            "jobs": [
                {"name": "r", "queue": "a", "min_available": 1, "phase": "Running"},
                {"name": "w", "queue": "b", "min_available": 1, "phase": "Inqueue"},
            ],
            "tasks": [
                *[
                    {
                        "name": f"r-{i}",
                        "job": "r",
                        "request": {"cpu": 4},
                        "phase": "Running",
                        "node": f"n{i % 2}",
                    }
                    for i in range(4)
                ],
                {"name": "w-0", "job": "w", "request": {"cpu": 4}},
            ],
        }
    )


SNAPS: dict[str, Callable[[], gs.Snapshot]] = {
    "preempt": _snap_preempt,
    "free": _snap_free,
    "queues": _snap_queues,
}
ACTIONS = ["enqueue", "allocate", "preempt", "reclaim", "backfill"]


def _plugin(label: str = "Hostile", **members: Any) -> type:
    ns: dict[str, Any] = {"name": HOSTILE, "__init__": lambda self, arguments: None}
    ns.update(members)
    return type(label, (), ns)


def _setup(cls: type) -> tuple[gs.Registry, gs.Config]:
    reg = gs.default_registry()
    reg.register_plugin(HOSTILE, cls)
    config = gs.Config.from_dict(
        {
            "actions": ACTIONS,
            "tiers": [
                [{"name": "priority"}, {"name": "gang"}, {"name": HOSTILE}],
                [{"name": "predicates"}, {"name": "proportion"}, {"name": "nodeorder"}],
            ],
        },
        plugins=reg.plugins,
    )
    return reg, config


def _schedule(cls: type, snap: str = "preempt") -> gs.Decisions:
    """Schedule with the hostile plugin; the decisions must pass every invariant."""
    reg, config = _setup(cls)
    snapshot = SNAPS[snap]()
    d = gs.schedule(snapshot, config, registry=reg)
    inv.check_cycle(snapshot, d, config)
    return d


def _refused(cls: type, member: str, snap: str = "preempt") -> str:
    with pytest.raises(gs.ConfigError) as err:
        _schedule(cls, snap)
    text = str(err.value)
    assert HOSTILE in text and member in text, text
    return text


def _zeros(self: Any, ssn: Any, tmpl: Any, rows: Any) -> Any:
    return np.zeros(rows.size)


class _CallableScore:
    def __call__(self, ssn: Any, tmpl: Any, rows: Any) -> Any:
        return np.zeros(rows.size)


ACCEPTED: dict[str, dict[str, Any]] = {
    "staticmethod": {"node_score": staticmethod(lambda ssn, tmpl, rows: np.zeros(rows.size))},
    "classmethod": {"node_score": classmethod(lambda cls, ssn, tmpl, rows: np.zeros(rows.size))},
    "property giving a function": {
        "node_score": property(lambda self: lambda ssn, tmpl, rows: np.zeros(rows.size))
    },
    "callable instance": {"node_score": _CallableScore()},
    "functools.partial": {
        "node_score": functools.partial(lambda extra, ssn, tmpl, rows: np.zeros(rows.size), 1)
    },
    "builtin event": {"on_allocate": print},
    "*args/**kwargs": {"node_score": lambda *a, **k: np.zeros(a[-1].size)},
    "extra defaulted parameter": {
        "node_score": lambda self, ssn, tmpl, rows, extra=1: np.zeros(rows.size)
    },
    "gpu_choice future positional-or-keyword": {
        "gpu_choice": lambda self, ssn, task, node, future: None
    },
    "numpy bool flags": {
        "shape_only": np.bool_(True),
        "queue_order_global": np.bool_(False),
        "node_score": _zeros,
    },
    "a member that is None": {"node_score": None},
    "a score list": {"node_score": lambda self, ssn, tmpl, rows: [0.0] * rows.size},
    "a scalar score": {"node_score": lambda self, ssn, tmpl, rows: 1.0},
    "unsorted duplicate victims": {
        "preemptable": lambda self, ssn, p, c: np.concatenate([c[::-1], c])
    },
    "victims as a list": {"preemptable": lambda self, ssn, p, c: list(c)},
    "an int vote": {"job_pipelined": lambda self, ssn, j: 1},
}


@pytest.mark.parametrize("label", sorted(ACCEPTED))
def test_acceptable_member_forms_are_served(label: str) -> None:
    for snap in SNAPS:
        _schedule(_plugin(**ACCEPTED[label]), snap)


def test_a_plugin_without_a_name_is_named_by_its_type() -> None:
    cls = type("Nameless", (), {"__init__": lambda self, a: None, "node_score": _zeros})
    _schedule(cls)


REFUSED_AT_OPEN: dict[str, tuple[dict[str, Any], str]] = {
    "staticmethod without ssn": (
        {"node_score": staticmethod(lambda tmpl, rows: np.zeros(rows.size))},
        "node_score",
    ),
    "builtin of the wrong arity": ({"job_ready": len}, "job_ready"),
    "an extra required parameter": (
        {"node_score": lambda self, ssn, tmpl, rows, extra: None},
        "node_score",
    ),
    "rows keyword-only": ({"node_score": lambda self, ssn, tmpl, *, rows: None}, "node_score"),
    "gpu_choice without future": ({"gpu_choice": lambda self, ssn, t, n: None}, "gpu_choice"),
    "gpu_choice with another keyword": (
        {"gpu_choice": lambda self, ssn, t, n, *, future, other: None},
        "gpu_choice",
    ),
    "a property giving a number": ({"node_score": property(lambda self: 3)}, "node_score"),
    "an int flag": ({"shape_only": 1, "node_score": _zeros}, "shape_only"),
    "an int global flag": ({"queue_order_global": 0}, "queue_order_global"),
}


@pytest.mark.parametrize("label", sorted(REFUSED_AT_OPEN))
def test_wrong_members_are_refused_at_open(label: str) -> None:
    members, member = REFUSED_AT_OPEN[label]
    _refused(_plugin(**members), member)


def test_a_flag_property_that_raises_is_a_config_error() -> None:
    """Before: the property's RuntimeError escaped from the session's open."""

    def boom(self: Any) -> bool:
        raise RuntimeError("boom")

    _refused(_plugin(shape_only=property(boom)), "shape_only")


def test_a_plugin_answering_every_name_is_refused_not_crashing() -> None:
    class Everything:
        name = HOSTILE

        def __init__(self, arguments: Any) -> None:
            pass

        def __getattr__(self, item: str) -> Any:
            return lambda *a, **k: None

    _refused(Everything, "shape_only")


def test_a_numpy_true_shape_only_flag_declares_shape_only() -> None:
    """Before: ``np.True_`` was accepted as a flag but the session's shape_only flag was False
    (it tested ``is True``), so equal shapes never shared an evaluation."""
    reg, config = _setup(_plugin(shape_only=np.bool_(True), node_score=_zeros))
    ssn = open_session(_snap_free(), config, registry=reg)
    assert ssn.points.shape_only is True  # every row plugin (predicates, nodeorder, it) says so


def test_the_signature_check_is_per_instance_for_members_an_instance_sets() -> None:
    """Before: the signature check was cached per plugin type, so a second instance of the same
    class with a wrong member set in ``__init__`` was served and raised a TypeError mid-cycle."""

    class PerInstance:
        name = HOSTILE

        def __init__(self, arguments: Any) -> None:
            self.node_score: Callable[..., Any]
            if arguments.get("broken"):
                self.node_score = lambda tmpl: None  # wrong arity
            else:
                self.node_score = lambda ssn, tmpl, rows: np.zeros(rows.size)

    reg = gs.default_registry()
    reg.register_plugin(HOSTILE, PerInstance)

    def config(broken: bool) -> gs.Config:
        plugin = {"name": HOSTILE, "arguments": {"broken": broken}}
        return gs.Config.from_dict(
            {"actions": ["enqueue", "allocate"], "tiers": [[{"name": "gang"}, plugin]]},
            plugins=reg.plugins,
        )

    gs.schedule(_snap_free(), config(False), registry=reg)
    with pytest.raises(gs.ConfigError, match="node_score"):
        gs.schedule(_snap_free(), config(True), registry=reg)


def _mask(size: int) -> Any:
    return np.zeros(size, dtype=bool)


WRONG_ANSWERS: dict[str, tuple[dict[str, Any], str, str]] = {
    "predicate mask too short": (
        {"predicate": lambda s, ssn, t, rows: [(_mask(rows.size - 1), "r")]},
        "predicate",
        "free",
    ),
    "predicate mask too long": (
        {"predicate": lambda s, ssn, t, rows: [(_mask(rows.size + 1), "r")]},
        "predicate",
        "free",
    ),
    "predicate int mask": (
        {"predicate": lambda s, ssn, t, rows: [(np.zeros(rows.size, int), "r")]},
        "predicate",
        "free",
    ),
    "predicate None": ({"predicate": lambda s, ssn, t, rows: None}, "predicate", "free"),
    "predicate reason not a string": (
        {"predicate": lambda s, ssn, t, rows: [(np.ones(rows.size, bool), 5)]},
        "predicate",
        "free",
    ),
    "NaN score": (
        {"node_score": lambda s, ssn, t, rows: np.full(rows.size, np.nan)},
        "node_score",
        "free",
    ),
    "inf score": (
        {"node_score": lambda s, ssn, t, rows: np.full(rows.size, np.inf)},
        "node_score",
        "free",
    ),
    "-inf score": (
        {"node_score": lambda s, ssn, t, rows: np.full(rows.size, -np.inf)},
        "node_score",
        "free",
    ),
    "score too short": (
        {"node_score": lambda s, ssn, t, rows: np.zeros(rows.size - 1)},
        "node_score",
        "free",
    ),
    "score None": ({"node_score": lambda s, ssn, t, rows: None}, "node_score", "free"),
    "complex score": (
        {"node_score": lambda s, ssn, t, rows: np.ones(rows.size, complex)},
        "node_score",
        "free",
    ),
    "job_order int": ({"job_order": lambda s, ssn, j: j}, "job_order", "free"),
    "job_order list": ({"job_order": lambda s, ssn, j: [j]}, "job_order", "free"),
    "task_order None": ({"task_order": lambda s, ssn, t: None}, "task_order", "free"),
    "queue_order int": ({"queue_order": lambda s, ssn, q: q}, "queue_order", "free"),
    "victims not candidates": (
        {"preemptable": lambda s, ssn, p, c: np.array([999], np.int64)},
        "preemptable",
        "preempt",
    ),
    "victim -1": (
        {"preemptable": lambda s, ssn, p, c: np.array([-1], np.int64)},
        "preemptable",
        "preempt",
    ),
    "float victims": (
        {"preemptable": lambda s, ssn, p, c: c.astype(float)},
        "preemptable",
        "preempt",
    ),
    "bool victims": ({"preemptable": lambda s, ssn, p, c: True}, "preemptable", "preempt"),
    "gpu device out of range": (
        {"gpu_choice": lambda s, ssn, t, n, *, future: (99,)},
        "gpu_choice",
        "free",
    ),
    "gpu device -1": ({"gpu_choice": lambda s, ssn, t, n, *, future: (-1,)}, "gpu_choice", "free"),
    "gpu float device": (
        {"gpu_choice": lambda s, ssn, t, n, *, future: (0.5,)},
        "gpu_choice",
        "free",
    ),
    "gpu int not a tuple": (
        {"gpu_choice": lambda s, ssn, t, n, *, future: 0},
        "gpu_choice",
        "free",
    ),
    "job_ready None": ({"job_ready": lambda s, ssn, j: None}, "job_ready", "free"),
    "job_ready array": ({"job_ready": lambda s, ssn, j: np.array([1, 0])}, "job_ready", "free"),
    "job_valid int": ({"job_valid": lambda s, ssn, j: 3}, "job_valid", "free"),
    "reason_notes list": ({"reason_notes": lambda s, ssn: [1]}, "reason_notes", "free"),
    "reason_notes job out of range": (
        {"reason_notes": lambda s, ssn: {99: "x"}},
        "reason_notes",
        "free",
    ),
    "on_session_open raises": (
        {"on_session_open": lambda s, ssn: 1 / 0},
        "on_session_open",
        "free",
    ),
    "on_allocate raises": ({"on_allocate": lambda s, ssn, t: [][1]}, "on_allocate", "free"),
    "allocatable None": ({"allocatable": lambda s, ssn, q, t: None}, "allocatable", "free"),
    "overused array": ({"overused": lambda s, ssn, q: np.array([1, 2])}, "overused", "free"),
    "job_starving string": ({"job_starving": lambda s, ssn, j: "no"}, "job_starving", "preempt"),
}


@pytest.mark.parametrize("label", sorted(WRONG_ANSWERS))
def test_a_wrong_answer_is_a_config_error_naming_the_plugin_and_point(label: str) -> None:
    """Before: a bare ValueError / TypeError / IndexError from inside the combiners or the
    actions (or, for NaN and -inf scores, every node silently treated as infeasible; for
    out-of-range devices, the task silently left pending)."""
    members, member, snap = WRONG_ANSWERS[label]
    _refused(_plugin(**members), member, snap)


def _fair(**over: Any) -> type:
    members: dict[str, Any] = {
        "queue_deserved": lambda s, ssn: np.full(ssn.queue_allocated.shape, 4000, np.int64),
        "queue_share": lambda s, ssn, q: 0.5,
        "queue_overused": lambda s, ssn, q: False,
        "queue_real_capability": lambda s, ssn, q: None,
        "queue_subtree_sum": lambda s, ssn, per_queue: per_queue,
    }
    members.update(over)
    return _plugin("HostileFairShare", **members)


def _fair_setup(cls: type) -> tuple[gs.Registry, gs.Config]:
    reg = gs.default_registry()
    reg.register_plugin(HOSTILE, cls)
    config = gs.Config.from_dict(
        {
            "actions": ACTIONS,
            "tiers": [[{"name": "priority"}, {"name": "gang"}, {"name": HOSTILE}]],
        },
        plugins=reg.plugins,
    )
    return reg, config


def test_a_third_party_fair_share_provider_is_read() -> None:
    reg, config = _fair_setup(_fair())
    snapshot = _snap_queues()
    d = gs.schedule(snapshot, config, registry=reg)
    inv.check_cycle(snapshot, d, config)


FAIR_WRONG: dict[str, tuple[str, Any]] = {
    "deserved 1-D": ("queue_deserved", lambda s, ssn: np.zeros(3, np.int64)),
    "deserved negative": (
        "queue_deserved",
        lambda s, ssn: np.full(ssn.queue_allocated.shape, -5, np.int64),
    ),
    "deserved None": ("queue_deserved", lambda s, ssn: None),
    "deserved nested list": ("queue_deserved", lambda s, ssn: [[1]]),
    "share NaN": ("queue_share", lambda s, ssn, q: float("nan")),
    "share string": ("queue_share", lambda s, ssn, q: "x"),
    "overused array": ("queue_overused", lambda s, ssn, q: np.array([1, 2])),
    "capability too short": ("queue_real_capability", lambda s, ssn, q: np.zeros(1)),
    "capability negative": (
        "queue_real_capability",
        lambda s, ssn, q: np.full(ssn.queue_allocated.shape[1], -1.0),
    ),
    "subtree sum too short": ("queue_subtree_sum", lambda s, ssn, pq: pq[:1]),
    "subtree sum None": ("queue_subtree_sum", lambda s, ssn, pq: None),
    "subtree sum negative": ("queue_subtree_sum", lambda s, ssn, pq: -pq - 1),
}


@pytest.mark.parametrize("label", sorted(FAIR_WRONG))
def test_a_fair_share_provider_s_wrong_answer_is_a_config_error(label: str) -> None:
    """Before: IndexError / TypeError / ValueError from reclaim or the queue status, or a
    DecisionError about the queue status that did not name the plugin."""
    member, fn = FAIR_WRONG[label]
    reg, config = _fair_setup(_fair(**{member: fn}))
    with pytest.raises(gs.ConfigError) as err:
        gs.schedule(_snap_queues(), config, registry=reg)
    assert HOSTILE in str(err.value) and member in str(err.value), str(err.value)


# Random answers, some of the right form and some not: either the cycle decides and passes every
# invariant, or it is a ConfigError naming the plugin.

_floats = st.floats(allow_nan=True, allow_infinity=True, width=64)


@st.composite
def _hostile_plugin(draw: st.DrawFn) -> type:
    seed = draw(st.integers(0, 2**31 - 1))
    members: dict[str, Any] = {}
    mode = draw(st.sampled_from(["ok", "len", "values"]))
    if draw(st.booleans()):
        values = draw(st.lists(_floats, min_size=1, max_size=4))

        def node_score(self: Any, ssn: Any, tmpl: Any, rows: Any) -> Any:
            n = rows.size + (1 if mode == "len" else 0)
            out = np.resize(np.array(values), n)
            return out if mode == "values" else np.nan_to_num(out, nan=0, posinf=9, neginf=-9)

        members["node_score"] = node_score
    if draw(st.booleans()):

        def predicate(self: Any, ssn: Any, tmpl: Any, rows: Any) -> Any:
            rng = np.random.default_rng(seed + int(rows.sum()))
            n = rows.size - (1 if mode == "len" else 0)
            return [(rng.random(max(n, 0)) < 0.3, "hostile says no")]

        members["predicate"] = predicate
    if draw(st.booleans()):
        pick = draw(st.sampled_from(["subset", "reversed", "all", "outside", "none", "empty"]))

        def preemptable(self: Any, ssn: Any, preemptor: int, cands: Any) -> Any:
            rng = np.random.default_rng(seed + preemptor)
            if pick == "subset":
                return cands[rng.random(cands.size) < 0.5]
            if pick == "reversed":
                return np.concatenate([cands[::-1], cands[:1]])
            if pick == "outside":
                return np.array([int(ssn.task_job.size) + 3], np.int64)
            return {"all": cands, "none": None, "empty": cands[:0]}[pick]

        members["preemptable"] = preemptable
        members["reclaimable"] = preemptable
    if draw(st.booleans()):
        devices = draw(st.lists(st.integers(-2, 4), max_size=3).map(tuple) | st.none())
        members["gpu_choice"] = lambda s, ssn, task, node, *, future: devices
    if draw(st.booleans()):
        keys = draw(st.sampled_from(["tuple", "int", "reversed", "mixed", "none"]))
        table: dict[str, Callable[[int], Any]] = {
            "tuple": lambda j: (j,),
            "int": lambda j: j,
            "reversed": lambda j: (-j,),
            "mixed": lambda j: ("a",) if j % 2 else (j, 0.5),
            "none": lambda j: (None,) if j % 2 else (j,),
        }
        members["job_order"] = lambda s, ssn, j: table[keys](j)
        members["victim_order"] = members["job_order"]
    if draw(st.booleans()):
        vote = draw(st.sampled_from([gs.Vote.PERMIT, gs.Vote.REJECT, 0, 2, None, True]))
        members["job_enqueueable"] = lambda s, ssn, j: vote
        members["job_pipelined"] = lambda s, ssn, j: vote
    if draw(st.booleans()):
        fail = draw(st.sampled_from(["on_session_open", "on_allocate", "on_deallocate"]))

        def boom(self: Any, *args: Any) -> None:
            raise KeyError("hostile")

        members[fail] = boom
    if draw(st.booleans()):
        members["shape_only"] = draw(
            st.sampled_from([True, False, np.bool_(True), np.bool_(False)])
        )
    return _plugin(**members)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cls=_hostile_plugin(), snap=st.sampled_from(sorted(SNAPS)))
def test_hostile_plugins_either_decide_within_the_gate_or_are_refused(cls: type, snap: str) -> None:
    reg, config = _setup(cls)
    snapshot = SNAPS[snap]()
    try:
        d = gs.schedule(snapshot, config, registry=reg)
    except gs.ConfigError as err:
        assert HOSTILE in str(err), str(err)
        return
    inv.check_cycle(snapshot, d, config)
    again = gs.schedule(SNAPS[snap](), config, registry=reg)
    assert json.dumps(d.to_dict(), sort_keys=True) == json.dumps(again.to_dict(), sort_keys=True)


# ---------------------------------------------------------------------------- part 2: carry


def _canon(d: gs.Decisions) -> str:
    return json.dumps(d.to_dict(), sort_keys=True)


def _carry_cluster(n_nodes: int = 6) -> dict[str, Any]:
    nodes = [
        {
            "name": f"n{i}",
            "allocatable": {"cpu": 8 + 4 * (i % 3), "memory": "32Gi", "pods": 20},
            "labels": {"zone": f"z{i % 2}"},
        }
        for i in range(n_nodes)
    ]
    jobs = [{"name": f"j{j}", "min_available": 1 + j % 2, "phase": "Inqueue"} for j in range(6)]
    tasks = [
        {"name": f"j{j}-{k}", "job": f"j{j}", "request": {"cpu": 1 + j % 3}}
        for j in range(6)
        for k in range(1 + j % 2)
    ]
    return {"nodes": nodes, "queues": [{"name": "default"}], "jobs": jobs, "tasks": tasks}


def test_no_carry_when_the_registry_s_plugins_are_replaced_in_place() -> None:
    """Before: the carry compared the registry *object*; replacing a factory in its
    ``plugins`` dict between cycles kept the old plugin's scores, and the carried cycle bound
    tasks elsewhere than a fresh cycle."""
    config = gs.Config.from_dict(
        {
            "actions": ["enqueue", "allocate"],
            "tiers": [[{"name": "gang"}], [{"name": "predicates"}, {"name": "binpack"}]],
        }
    )
    reg = gs.default_registry()
    snap = gs.Snapshot.from_dict(_carry_cluster())
    _, ssn = run_cycle(snap, config, registry=reg)
    reg.plugins["binpack"] = FarNodesFirst
    carried, ssn2 = run_cycle(snap, config, registry=reg, previous=ssn)
    assert ssn2.evaluator.carried == 0
    assert _canon(carried) == _canon(gs.schedule(snap, config, registry=reg))


def test_an_equal_registry_object_still_carries() -> None:
    config = gs.Config.default()
    snap = gs.Snapshot.from_dict(_carry_cluster())
    _, ssn = run_cycle(snap, config, registry=gs.default_registry())
    d2, ssn2 = run_cycle(snap, config, registry=gs.default_registry(), previous=ssn)
    assert ssn2.evaluator.carried > 0
    assert _canon(d2) == _canon(gs.schedule(snap, config))


def test_the_same_previous_session_twice_decides_as_fresh() -> None:
    config = gs.Config.default()
    snap = gs.Snapshot.from_dict(_carry_cluster())
    fresh = _canon(gs.schedule(snap, config))
    _, ssn = run_cycle(snap, config)
    d2, ssn2 = run_cycle(snap, config, previous=ssn)
    d3, ssn3 = run_cycle(snap, config, previous=ssn)  # its evaluations were moved to ssn2
    assert (ssn2.evaluator.carried > 0, ssn3.evaluator.carried) == (True, 0)
    assert _canon(d2) == _canon(d3) == fresh


def _node(i: int, rng: random.Random) -> dict[str, Any]:
    n: dict[str, Any] = {
        "name": f"n{i}",
        "allocatable": {"cpu": rng.choice([4, 8, 16]), "memory": "32Gi", "pods": 20},
        "labels": {"zone": f"z{i % 2}"},
    }
    if rng.random() < 0.5:
        n["gpus"] = {"count": rng.choice([1, 2, 4]), "milli": 1000, "sharing": rng.random() < 0.5}
    if rng.random() < 0.15:
        effect = rng.choice(["NoSchedule", "PreferNoSchedule"])
        n["taints"] = [{"key": "k", "value": "v", "effect": effect}]
    return n


def _hostile_cluster(rng: random.Random, n_nodes: int = 6, n_jobs: int = 8) -> dict[str, Any]:
    """Nodes with whole and shared GPUs and taints, two racks of hypernodes, a queue hierarchy
    with a capability, gangs with selectors, tolerations, fractional GPUs and hard topology."""
    queues = [
        {"name": "org", "weight": 1},
        {"name": "a", "parent": "org", "weight": 2},
        {"name": "b", "parent": "org", "weight": 1, "capability": {"cpu": 20}},
    ]
    jobs, tasks = [], []
    for j in range(n_jobs):
        size = rng.randint(1, 3)
        job: dict[str, Any] = {
            "name": f"j{j}",
            "queue": rng.choice(["a", "b"]),
            "min_available": rng.randint(1, size),
            "phase": "Inqueue",
            "priority": rng.choice([0, 0, 5, 10]),
        }
        if rng.random() < 0.25:
            job["network_topology"] = {"mode": "hard", "highest_tier_allowed": 1}
        jobs.append(job)
        for k in range(size):
            t: dict[str, Any] = {
                "name": f"j{j}-{k}",
                "job": f"j{j}",
                "request": {"cpu": rng.choice([1, 2, 3])},
            }
            r = rng.random()
            if r < 0.2:
                t["gpu_request"] = {"count": 1, "milli": rng.choice([250, 500])}
            elif r < 0.35:
                t["gpu_request"] = {"count": rng.choice([1, 2])}
            if rng.random() < 0.2:
                t["node_selector"] = {"zone": "z0"}
            if rng.random() < 0.2:
                t["tolerations"] = [{"key": "k", "operator": "Exists"}]
            tasks.append(t)
    half = n_nodes // 2
    hypernodes = [
        {"name": "r0", "tier": 1, "members": [f"n{i}" for i in range(half)]},
        {"name": "r1", "tier": 1, "members": [f"n{i}" for i in range(half, n_nodes)]},
    ]
    return {
        "nodes": [_node(i, rng) for i in range(n_nodes)],
        "hypernodes": hypernodes,
        "queues": queues,
        "jobs": jobs,
        "tasks": tasks,
    }


class _CapacityScore:
    """A third-party shape-only node score (a numpy-bool flag): it reads only the node."""

    name = "by-capacity"
    shape_only = np.bool_(True)

    def __init__(self, arguments: Any) -> None:
        pass

    def node_score(self, ssn: Any, tmpl: Any, rows: Any) -> Any:
        return ssn.arrays.allocatable[rows, 0] / 1000.0


_REGISTRY = gs.default_registry()
_REGISTRY.register_plugin(_CapacityScore.name, _CapacityScore)
_T1 = [{"name": "priority"}, {"name": "gang"}, {"name": "conformance"}]
_ALL = ["enqueue", "allocate", "preempt", "reclaim", "backfill"]
_CARRY_CONFIGS = {
    "basic": (
        ["enqueue", "allocate", "backfill"],
        ["predicates", "proportion", "nodeorder", "binpack"],
    ),
    "preempt": (_ALL, ["drf", "predicates", "proportion", "nodeorder"]),
    "capacity": (_ALL, ["predicates", "capacity", "nodeorder", "network-topology-aware"]),
    "third-party": (
        ["enqueue", "allocate", "backfill"],
        ["predicates", "proportion", "nodeorder", "by-capacity"],
    ),
}
CARRY_CONFIGS = {
    name: gs.Config.from_dict(
        {"actions": actions, "tiers": [_T1, [{"name": n} for n in second]]},
        plugins=_REGISTRY.plugins,
    )
    for name, (actions, second) in _CARRY_CONFIGS.items()
}
OPS = [
    "finish",
    "run",
    "evict",
    "cordon",
    "relabel",
    "capacity",
    "taint",
    "gpu",
    "add-node",
    "remove-node",
    "add-job",
    "remove-job",
    "reorder",
    "hypernode",
    "queue",
    "none",
]


def _operate(state: gs.ClusterState, what: str, rng: random.Random) -> None:
    names = sorted(state.nodes)
    rec = state.nodes[rng.choice(names)] if names else None
    if what in ("finish", "run", "evict"):
        placed = sorted(t.name for t in state.snapshot().tasks if t.node is not None)
        phase = {"finish": "Succeeded", "run": "Running", "evict": "Releasing"}[what]
        if placed:
            state.set_task_phase(rng.choice(placed), gs.TaskPhase(phase))
    elif what == "cordon" and rec is not None:
        state.cordon(rec.name, not rec.unschedulable)
    elif what in ("relabel", "capacity", "taint", "gpu") and rec is not None:
        d: dict[str, Any] = dict(rec.to_dict())
        if what == "relabel":
            d["labels"] = {"zone": rng.choice(["z0", "z1"])}
        elif what == "capacity":
            d["allocatable"] = {**d["allocatable"], "cpu": rng.choice([4, 8, 16])}
        elif what == "taint":
            soft = [{"key": "k", "value": "v", "effect": "PreferNoSchedule"}]
            d["taints"] = [] if d.get("taints") else soft
        else:
            count = rng.choice([0, 1, 2, 4])
            d.pop("gpus", None)
            if count:
                d["gpus"] = {"count": count, "milli": 1000, "sharing": rng.random() < 0.5}
        state.update_node(gs.Node.from_dict(d))
    elif what == "add-node":
        i = 100 + rng.randint(0, 50)
        if f"n{i}" not in state.nodes:
            state.add_node(gs.Node.from_dict(_node(i, rng)))
    elif what == "remove-node" and len(names) > 1:
        state.remove_node(rng.choice(names))
    elif what == "add-job":
        j = f"x{rng.randint(0, 100)}"
        if j not in state.jobs:
            job = {"name": j, "queue": "a", "min_available": 1, "phase": "Inqueue", "priority": 10}
            task = {"name": f"{j}-0", "job": j, "request": {"cpu": rng.choice([2, 8])}}
            state.add_job(gs.Job.from_dict(job), [gs.Task.from_dict(task)])
    elif what == "remove-job" and state.jobs:
        state.remove_job(rng.choice(sorted(state.jobs)), with_tasks=True)
    elif what == "reorder":
        doc = state.snapshot().to_dict()
        rng.shuffle(doc["nodes"])
        state.sync(gs.Snapshot.from_dict(doc))
    elif what == "hypernode" and state.hypernodes:
        d = state.hypernodes[sorted(state.hypernodes)[0]].to_dict()
        d["members"] = sorted(rng.sample(names, k=min(len(names), rng.randint(1, 3))))
        state.update_hypernode(gs.HyperNode.from_dict(d))
    elif what == "queue":
        d = state.queues["b"].to_dict()
        d["capability"] = {"cpu": rng.choice([4, 20, 100])}
        state.update_queue(gs.Queue.from_dict(d))


def _carry_trial(seed: int, ops: list[str], configs: list[str]) -> int:
    """Cycle, apply, operate; each carried cycle decides as a fresh one. Returns how many
    evaluations were carried in all."""
    rng = random.Random(seed)
    state = gs.ClusterState(gs.Snapshot.from_dict(_hostile_cluster(rng)))
    carried = 0
    for what, cname in zip(ops, configs, strict=True):
        config = CARRY_CONFIGS[cname]
        snap = state.snapshot()
        fresh = gs.schedule(gs.Snapshot.from_dict(snap.to_dict()), config, registry=_REGISTRY)
        d = state.schedule(config, registry=_REGISTRY)
        assert _canon(uncarried(d, fresh)) == _canon(fresh), (seed, what, cname)
        inv.check_cycle(snap, d, config)
        carried += state.__dict__["_last_session"].evaluator.carried
        state.apply(d)
        with contextlib.suppress(gs.GangschedError):  # an operation the state refuses
            _operate(state, what, rng)
    return carried


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**16),
    steps=st.lists(
        st.tuples(st.sampled_from(OPS), st.sampled_from(sorted(CARRY_CONFIGS))),
        min_size=2,
        max_size=10 if SOAK else 6,
    ),
)
def test_carried_cycles_under_hostile_state_changes_match_fresh_cycles(
    seed: int, steps: list[tuple[str, str]]
) -> None:
    _carry_trial(seed, [w for w, _ in steps], [c for _, c in steps])


def test_the_hostile_sequences_do_carry() -> None:
    """The property above is not vacuous: the same config cycle after cycle carries."""
    assert _carry_trial(7, ["finish", "none", "relabel", "run"], ["basic"] * 4) > 0
    assert _carry_trial(8, ["none", "cordon", "evict"], ["third-party"] * 3) > 0


@pytest.mark.parametrize("config", sorted(CARRY_CONFIGS))
def test_a_previous_session_of_another_cluster_decides_as_fresh(config: str) -> None:
    """Same node names, other records, tasks and queues: nothing stale is kept."""
    cfg = CARRY_CONFIGS[config]
    for seed in range(4 if not SOAK else 40):
        a = gs.Snapshot.from_dict(_hostile_cluster(random.Random(seed)))
        b = gs.Snapshot.from_dict(_hostile_cluster(random.Random(seed + 1000)))
        _, ssn = run_cycle(a, cfg, registry=_REGISTRY)
        d, _ = run_cycle(b, cfg, registry=_REGISTRY, previous=ssn)
        assert _canon(d) == _canon(gs.schedule(b, cfg, registry=_REGISTRY)), seed


def _snap_topology() -> gs.Snapshot:
    return gs.Snapshot.from_dict(
        {
            "nodes": [
                {"name": f"n{i}", "allocatable": {"cpu": 4, "memory": "8Gi", "pods": 10}}
                for i in range(4)
            ],
            "hypernodes": [
                {"name": "r0", "tier": 1, "members": ["n0", "n1"]},
                {"name": "r1", "tier": 1, "members": ["n2", "n3"]},
            ],
            "queues": [{"name": "default"}],
            "jobs": [
                {
                    "name": "t",
                    "min_available": 2,
                    "phase": "Inqueue",
                    "network_topology": {"mode": "hard", "highest_tier_allowed": 1},
                }
            ],
            "tasks": [{"name": f"t-{i}", "job": "t", "request": {"cpu": 2}} for i in range(2)],
        }
    )


@pytest.mark.parametrize("answer", [5, "r0", [1.0, 2.0]])
def test_a_hypernode_score_that_is_not_a_hypernode_order_is_a_config_error(answer: Any) -> None:
    """Before: a bare AssertionError when a topology gang was placed."""
    SNAPS["topology"] = _snap_topology
    try:
        _refused(_plugin(hypernode_score=lambda s, ssn: answer), "hypernode_score", "topology")
    finally:
        del SNAPS["topology"]


@pytest.mark.parametrize("snap", ["preempt", "free"])
def test_a_gpu_choice_naming_a_busy_device_is_passed_over(snap: str) -> None:
    """Before: a third-party gpu_choice always naming device 0 (a device in range, but held by a
    running task) made preempt propose a pipelined placement the placement gate refused ("does
    not fit node once releases finish"); now a pick that does not fit falls back to the
    session's own device choice, and the gang is placed as without the plugin."""
    d = _schedule(_plugin(gpu_choice=lambda s, ssn, task, node, *, future: (0,)), snap)
    without = _schedule(_plugin(), snap)
    assert len(d.binds) + len(d.pipelined) + len(d.evictions) == len(without.binds) + len(
        without.pipelined
    ) + len(without.evictions)


def _snap_many_jobs() -> gs.Snapshot:
    return gs.Snapshot.from_dict(
        {
            "nodes": [
                {"name": f"n{i}", "allocatable": {"cpu": 8, "memory": "8Gi", "pods": 10}}
                for i in range(2)
            ],
            "queues": [{"name": "default"}, {"name": "q2"}],
            "jobs": [
                {"name": f"j{j}", "min_available": 1, "phase": "Inqueue", "queue": q}
                for j, q in enumerate(["default", "q2", "default", "q2"])
            ],
            "tasks": [
                {"name": f"j{j}-{k}", "job": f"j{j}", "request": {"cpu": 2}}
                for j in range(4)
                for k in range(2)
            ],
        }
    )


@pytest.mark.parametrize(
    ("member", "key"),
    [
        ("job_order", lambda j: (None,) if j % 2 else (1,)),
        ("job_order", lambda j: (np.array([j, 1]),)),
        ("job_order", lambda j: (float("nan"),)),
        ("task_order", lambda t: (None,) if t % 2 else (1,)),
        ("queue_order", lambda q: (None,) if q % 2 else (1,)),
    ],
)
def test_an_unorderable_sort_key_is_a_config_error(member: str, key: Any) -> None:
    """Before: a bare TypeError / ValueError from the actions' sort (None against an int, an
    array's truth value)."""
    SNAPS["many-jobs"] = _snap_many_jobs
    try:
        _refused(_plugin("Hostile", **{member: lambda s, ssn, i: key(i)}), member, "many-jobs")
    finally:
        del SNAPS["many-jobs"]


def test_sort_keys_of_other_lengths_and_types_still_order() -> None:
    """Numbers before strings, a shorter key before its extensions; the job keyed smallest
    goes first."""
    keys = {0: ("b",), 1: (2, 1), 2: (2,), 3: (1.5, "x")}
    SNAPS["many-jobs"] = _snap_many_jobs
    try:
        d = _schedule(_plugin(job_order=lambda s, ssn, j: keys[j]), "many-jobs")
    finally:
        del SNAPS["many-jobs"]
    assert len(d.binds) == 8  # everything fits; the cycle orders without error
    reg, config = _setup(_plugin(job_order=lambda s, ssn, j: keys[j]))
    ssn = open_session(_snap_many_jobs(), config, registry=reg)
    order = sorted(range(4), key=lambda j: ssn.points.job_order(j))
    assert order == [3, 2, 1, 0]
