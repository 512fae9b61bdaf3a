"""The cluster arrays of a ``ClusterState``'s snapshot when its node set changed (nodes
added, removed, added back elsewhere in the order, their devices changed) are built from the
last built arrays: the node columns from the records, the occupancy rows of the nodes kept
moved to their new rows (per node and per GPU device), the nodes whose tasks changed booked
again. Whatever the steps, they equal the arrays a build from scratch gives on the same
records, field by field (label codes, model and taint ids included); and a cycle on them
decides as a fresh one. ``GANGSCHED_SOAK=1`` explores random examples (the soak profile)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from _carried import uncarried
from gangsched import ClusterState, Config, Decisions, Node, Snapshot, TaskPhase, schedule
from gangsched._frozen import FrozenDict
from gangsched.errors import SnapshotError
from gangsched.model import Gpus, Taint
from gangsched.session import arrays as arrays_module
from gangsched.session.arrays import (
    ArraysBase,
    ClusterArrays,
    TaintIndex,
    build_cluster_arrays,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from benchmarks._openb_jobs import openb_jobs_cluster_dict

CONFIG = Config.default()
SOAK = os.environ.get("GANGSCHED_SOAK") == "1"
KINDS = (
    "remove", "add", "add_back", "devices", "relabel", "cordon", "place", "release", "finish"
)  # fmt: skip
#: Phases a task is placed in by a ``place`` step (what each books: used, used and
#: releasing, pipelined).
PLACED = (TaskPhase.BOUND, TaskPhase.RUNNING, TaskPhase.RELEASING, TaskPhase.PIPELINED)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, TaintIndex):
        return all(
            _same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(TaintIndex)
        )
    if isinstance(a, dict | FrozenDict) or hasattr(a, "keys"):
        return list(a.keys()) == list(b.keys()) and all(_same(a[k], b[k]) for k in a)
    return bool(a == b)


def _assert_as_scratch(arrays: ClusterArrays, records: Snapshot) -> None:
    """Every field of ``arrays`` equals a build from scratch on ``records``."""
    fresh = build_cluster_arrays(Snapshot.from_dict(records.to_dict()))
    for f in dataclasses.fields(ClusterArrays):
        if f.compare:  # not the derived layouts worked out on demand
            assert _same(getattr(arrays, f.name), getattr(fresh, f.name)), f.name


def _state(n_nodes: int, n_jobs: int, seed: int) -> ClusterState:
    """A state on the openb pending-jobs generator whose last snapshot keeps its arrays (the
    base the next arrays start from: a snapshot the state took itself, unlike the one it was
    built from)."""
    state = ClusterState(Snapshot.from_dict(openb_jobs_cluster_dict(n_jobs, seed, n_nodes)))
    first = next(iter(state.nodes))
    state.cordon(first)
    state.cordon(first, False)
    snap = state.snapshot()
    build_cluster_arrays(snap)
    assert isinstance(snap._arrays, ClusterArrays)
    return state


def _drain(state: ClusterState, name: str) -> None:
    for task in [t for t in state.tasks.values() if t.node == name]:
        state.set_task_phase(task.name, TaskPhase.PENDING)


def _step(state: ClusterState, kind: str, a: int, b: int, gone: list[Node], serial: int) -> None:
    """One informer change (a no-op when it does not apply to the state now)."""
    nodes = list(state.nodes.values())
    node = nodes[a % len(nodes)] if nodes else None
    if kind == "remove" and node is not None and len(nodes) > 2:
        _drain(state, node.name)
        state.remove_node(node.name)
        gone.append(node)
    elif kind == "add" and node is not None:
        state.add_node(dataclasses.replace(node, name=f"extra-{serial}", unschedulable=False))
    elif kind == "add_back" and gone:
        state.add_node(gone.pop(a % len(gone)))
    elif kind == "devices" and node is not None:
        # Other devices (count and sharing) on a node: drained first, its tasks may not fit.
        _drain(state, node.name)
        model = node.gpus.model if node.gpus is not None else "A100"
        devices = Gpus(count=1 + b % 4, model=model, sharing=bool(b % 2))
        state.update_node(dataclasses.replace(node, gpus=devices))
    elif kind == "relabel" and node is not None:
        # Another label value and a taint of its own: its tasks stay (a taint binds no one
        # already placed).
        labels = FrozenDict({**node.labels, "rack": f"rack-{b % 3}"})
        taint = Taint(
            key="dedicated", value=f"v{b % 2}", effect=("NoSchedule", "PreferNoSchedule")[a % 2]
        )
        state.update_node(dataclasses.replace(node, labels=labels, taints=(*node.taints, taint)))
    elif kind == "cordon" and node is not None:
        state.cordon(node.name, not node.unschedulable)
    elif kind == "place" and node is not None:
        pending = [t for t in state.tasks.values() if t.phase is TaskPhase.PENDING]
        if pending:
            task = pending[b % len(pending)]
            count = task.gpu_request.count if task.gpu_request is not None else 0
            have = node.gpus.count if node.gpus is not None else 0
            first = (a + b) % max(have - count + 1, 1)
            placed = dataclasses.replace(
                task,
                phase=PLACED[b % len(PLACED)],
                node=node.name,
                gpu_indices=tuple(range(first, first + count)),
            )
            with contextlib.suppress(SnapshotError):  # no room there: no binder places it
                state.update_task(placed)
    elif kind == "release":
        held = [t for t in state.tasks.values() if t.phase is TaskPhase.RUNNING]
        if held:
            state.set_task_phase(held[b % len(held)].name, TaskPhase.RELEASING)
    elif kind == "finish":
        held = [t for t in state.tasks.values() if t.node is not None]
        if held:
            state.remove_task(held[b % len(held)].name)


_STEPS = st.lists(
    st.tuples(st.sampled_from(KINDS), st.integers(0, 63), st.integers(0, 63)),
    min_size=1,
    max_size=8,
)


@settings(max_examples=300 if SOAK else 30, deadline=None)
@given(
    n_nodes=st.integers(4, 16),
    seed=st.integers(0, 2**16),
    rounds=st.lists(st.tuples(_STEPS, st.sampled_from(("build", "snapshot", "none"))),
                    min_size=1, max_size=4),
)  # fmt: skip
@example(
    n_nodes=8, seed=1,
    rounds=[([("place", 1, 3), ("remove", 2, 0)], "build"),
            ([("add_back", 0, 0), ("place", 5, 1)], "none"),
            ([("remove", 0, 0), ("add", 3, 0), ("devices", 4, 3)], "build")],
)  # fmt: skip
@example(n_nodes=6, seed=1, rounds=[([("release", 0, 0)], "build")])  # a task holding devices
def test_arrays_after_node_set_changes_equal_a_build_from_scratch(
    n_nodes: int, seed: int, rounds: list[tuple[list[tuple[str, int, int]], str]]
) -> None:
    """After each round of changes the snapshot's arrays are built (``build``), only its
    snapshot taken (``snapshot``: the next arrays start from the last built ones), or
    nothing; the arrays built at the end of every ``build`` round equal a build from
    scratch."""
    state = _state(n_nodes, 12, seed)
    gone: list[Node] = []
    serial = 0
    for steps, then in rounds:
        for kind, a, b in steps:
            serial += 1
            _step(state, kind, a, b, gone, serial)
        if then == "build":
            snap = state.snapshot()
            _assert_as_scratch(build_cluster_arrays(snap), snap)
        elif then == "snapshot":
            state.snapshot()
    snap = state.snapshot()
    _assert_as_scratch(build_cluster_arrays(snap), snap)


def _count_builds(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Counts of builds from scratch of a state's snapshot arrays, and of node-set moves,
    from here on."""
    calls = {"scratch": 0, "moved": 0}
    build, moved = arrays_module._build, arrays_module._node_set_moved

    def counted_build(*args: Any) -> ClusterArrays:
        if isinstance(args[0]._arrays, ArraysBase):  # a state's snapshot
            calls["scratch"] += 1
        return build(*args)

    def counted_moved(*args: Any) -> ClusterArrays:
        calls["moved"] += 1
        return moved(*args)

    monkeypatch.setattr(arrays_module, "_build", counted_build)
    monkeypatch.setattr(arrays_module, "_node_set_moved", counted_moved)
    return calls


def _cycle_as_fresh(state: ClusterState) -> Decisions:
    """A cycle of ``state``, whose arrays equal a build from scratch and whose decisions
    equal a fresh cycle's."""
    out = state.schedule(CONFIG)
    snap = state.snapshot()
    _assert_as_scratch(build_cluster_arrays(snap), snap)
    fresh = schedule(Snapshot.from_dict(snap.to_dict()), CONFIG)
    canon = json.dumps(uncarried(out, fresh).to_dict(), sort_keys=True)
    assert canon == json.dumps(fresh.to_dict(), sort_keys=True)
    return out


def test_a_node_removed_then_added_back_moves_rows_and_devices(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A node of the middle removed (every later row moves up one, devices with it), then
    added back last (its tasks booked again): no build from scratch, the same arrays, and a
    cycle that decides as a fresh one."""
    state = _state(12, 30, 3)
    state.apply(state.schedule(CONFIG))
    calls = _count_builds(monkeypatch)
    names = list(state.nodes)
    middle = state.nodes[names[5]]
    held = [t for t in state.tasks.values() if t.node is not None and t.gpu_indices]
    below = [t for t in held if t.node is not None and names.index(t.node) > 5]
    assert below  # devices below the gap, whose rows move
    _drain(state, middle.name)
    state.remove_node(middle.name)
    state.apply(_cycle_as_fresh(state))
    state.add_node(middle)
    placed = next(
        t
        for t in state.tasks.values()
        if t.phase is TaskPhase.PENDING and t.gpu_request is not None and t.gpu_request.count == 1
    )
    state.update_task(
        dataclasses.replace(placed, phase=TaskPhase.RUNNING, node=middle.name, gpu_indices=(1,))
    )
    _cycle_as_fresh(state)
    assert calls == {"scratch": 0, "moved": 2}


def _tiny(nodes: list[dict[str, Any]], tasks: list[dict[str, Any]]) -> Snapshot:
    return Snapshot.from_dict(
        {
            "nodes": nodes,
            "queues": [{"name": "q"}],
            "jobs": [{"name": "j", "queue": "q", "min_available": 1, "phase": "Running"}],
            "tasks": [{"job": "j", "phase": "Running", "request": {"cpu": 1}, **t} for t in tasks],
        }
    )


def _node(name: str, gpus: int) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "allocatable": {"cpu": 8, "memory": "8Gi"}}
    if gpus:
        out["gpus"] = {"count": gpus, "model": "A"}
    return out


def _one_gpu(name: str, node: str, device: int) -> dict[str, Any]:
    return {
        "name": name,
        "node": node,
        "gpu_request": {"count": 1, "milli": 1000},
        "gpu_indices": [device],
    }


@pytest.mark.parametrize("what", ["new node", "other devices"])
def test_a_node_the_hint_does_not_list_is_built_from_its_records(what: str) -> None:
    """A hint that lists no tasks for a new node, or for a kept node whose devices differ,
    cannot move rows: the arrays are built from the records (never rows booked from
    nothing, never devices copied over another layout)."""
    before = _tiny(
        [_node("a", 2), _node("b", 2), _node("c", 2)],
        [_one_gpu("t0", "a", 1), _one_gpu("t1", "b", 0), _one_gpu("t2", "c", 1)],
    )
    base = build_cluster_arrays(before)
    if what == "new node":
        nodes = [_node("b", 2), _node("c", 2), _node("d", 2)]
        tasks = [_one_gpu("t1", "b", 0), _one_gpu("t2", "c", 1), _one_gpu("t3", "d", 1)]
    else:
        nodes = [_node("b", 4), _node("c", 2)]
        tasks = [_one_gpu("t1", "b", 3), _one_gpu("t2", "c", 1)]
    after = _tiny(nodes, tasks)
    object.__setattr__(before, "_arrays", base)
    hint = ArraysBase(
        previous=before,
        since=0,
        resource_names=frozenset(after.resource_names()),
        changed=FrozenDict(),
    )
    object.__setattr__(after, "_arrays", hint)
    _assert_as_scratch(build_cluster_arrays(after), after)


def test_the_slot_layout_is_worked_out_once_per_arrays_and_matches_the_padding() -> None:
    snap = Snapshot.from_dict(
        {
            "nodes": [
                {"name": "a", "allocatable": {"cpu": 8, "nvidia.com/gpu": 2}},
                {"name": "b", "allocatable": {"cpu": 8}},
                {"name": "c", "allocatable": {"cpu": 8, "nvidia.com/gpu": 4}},
            ],
            "queues": [{"name": "default"}],
        }
    )
    arrays = build_cluster_arrays(snap)
    layout = arrays.slot_layout()
    assert layout is arrays.slot_layout()
    assert layout.tolist() == [[1, 2, 0, 0], [0, 0, 0, 0], [3, 4, 5, 6]]
    assert build_cluster_arrays(snap).slot_layout() is not layout  # per arrays, not global
