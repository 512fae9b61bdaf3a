"""Per-template evaluations kept across ``ClusterState`` cycles on the openb pending-jobs
generator's shapes (each job its own CPU, memory and GPU request, GPU model selectors, rack
selectors), after up to ten informer changes of every kind: nodes cordoned, removed and added
(the node set changes: evaluations are carried over a map of rows), jobs added and finished,
tasks bound and reported running.

Two things must hold after every cycle: the decisions equal a fresh ``schedule()`` on the same
snapshot read back from its interchange form, and every template's evaluation (predicates,
fit now and later, scores, the per-node reasons of ``fit_error``) equals one worked out afresh
in the same session. ``GANGSCHED_SOAK=1`` explores random examples (the soak profile)."""

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
from gangsched import (
    ClusterState,
    Config,
    Decisions,
    Job,
    Node,
    Snapshot,
    Task,
    TaskPhase,
    schedule,
)
from gangsched.errors import SnapshotError
from gangsched.model import Taint
from gangsched.session.core import Session
from gangsched.session.evaluation import Evaluator

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from benchmarks._openb_jobs import openb_jobs_cluster_dict

CONFIG = Config.default()
#: The opt-in soak (``GANGSCHED_SOAK=1``) draws many more examples, at random.
SOAK = os.environ.get("GANGSCHED_SOAK") == "1"
KINDS = ("cordon", "uncordon", "remove", "add", "add_job", "finish", "bind", "run")


def _canon(d: Any) -> str:
    return json.dumps(d.to_dict(), sort_keys=True)


def _fresh(state: ClusterState) -> Decisions:
    return schedule(Snapshot.from_dict(state.snapshot().to_dict()), CONFIG)


def _assert_fresh(out: Decisions, state: ClusterState) -> None:
    """``out`` decides as a fresh cycle on the state's snapshot (the words of jobs gang-aware
    retry carried aside: :func:`uncarried`)."""
    fresh = _fresh(state)
    assert _canon(uncarried(out, fresh)) == _canon(fresh)


def _last(state: ClusterState) -> Session:
    ssn: Session = state.__dict__["_last_session"]
    return ssn


def _state(n_nodes: int, n_jobs: int, seed: int) -> ClusterState:
    return ClusterState(Snapshot.from_dict(openb_jobs_cluster_dict(n_jobs, seed, n_nodes)))


def _assert_evaluations_fresh(ssn: Session) -> None:
    """Every template's kept evaluation, and its fit_error, equal a fresh evaluator's."""
    fresh = Evaluator(ssn)
    for tmpl in ssn.templates:
        kept, new = ssn.evaluator.evaluate(tmpl), fresh.evaluate(tmpl)
        for name in ("ok", "fit_idle", "fit_future", "score", "best_idle", "best_future"):
            assert np.array_equal(getattr(kept, name), getattr(new, name)), (tmpl.index, name)
        assert ssn.evaluator.fit_error(tmpl) == fresh.fit_error(tmpl), tmpl.index


def _change(state: ClusterState, kind: str, a: int, b: int, serial: int) -> None:
    """One informer change (a no-op when it does not apply to the state now)."""
    nodes = list(state.nodes.values())
    node = nodes[a % len(nodes)] if nodes else None
    if kind in ("cordon", "uncordon") and node is not None:
        state.cordon(node.name, kind == "cordon")
    elif kind == "remove" and node is not None and len(nodes) > 2:
        if not any(t.node == node.name for t in state.tasks.values()):
            state.remove_node(node.name)
    elif kind == "add" and node is not None:
        state.add_node(dataclasses.replace(node, name=f"extra-{serial}", unschedulable=False))
    elif kind == "add_job":
        d = openb_jobs_cluster_dict(1, b, n_nodes=len(nodes) or 1)
        job = next(j for j in d["jobs"] if j["phase"] == "Inqueue")
        name = f"new-{serial}"
        tasks = [
            Task.from_dict({**t, "name": f"{name}-{k}", "job": name})
            for k, t in enumerate(x for x in d["tasks"] if x["job"] == job["name"])
        ]
        state.add_job(Job.from_dict({**job, "name": name, "creation": 10_000 + serial}), tasks)
    elif kind == "finish":
        held = sorted({t.job for t in state.tasks.values() if t.node is not None})
        if held:
            state.remove_job(held[a % len(held)], with_tasks=True)
    elif kind == "bind" and node is not None:
        pending = [t for t in state.tasks.values() if t.phase is TaskPhase.PENDING]
        if pending:
            task = pending[b % len(pending)]
            gpus = task.gpu_request.count if task.gpu_request is not None else 0
            bound = dataclasses.replace(
                task, phase=TaskPhase.BOUND, node=node.name, gpu_indices=tuple(range(gpus))
            )
            with contextlib.suppress(SnapshotError):  # no room there: no binder binds it
                state.update_task(bound)
    elif kind == "run":
        ready = [t for t in state.tasks.values() if t.phase is TaskPhase.BOUND]
        if ready:
            state.update_task(dataclasses.replace(ready[a % len(ready)], phase=TaskPhase.RUNNING))


_CHANGES = st.lists(
    st.tuples(st.sampled_from(KINDS), st.integers(0, 63), st.integers(0, 63)), max_size=10
)


@settings(max_examples=300 if SOAK else 20, deadline=None)
@given(
    n_nodes=st.integers(6, 20),
    n_jobs=st.integers(4, 30),
    seed=st.integers(0, 2**16),
    apply_first=st.booleans(),
    rounds=st.lists(_CHANGES, min_size=1, max_size=3),
)
@example(
    n_nodes=12, n_jobs=20, seed=3, apply_first=True,
    rounds=[[("remove", 5, 0), ("add", 2, 0), ("add_job", 0, 7)], [("finish", 0, 0)]],
)  # fmt: skip
def test_a_cluster_state_cycle_decides_as_a_fresh_cycle_after_changes(
    n_nodes: int,
    n_jobs: int,
    seed: int,
    apply_first: bool,
    rounds: list[list[tuple[str, int, int]]],
) -> None:
    state = _state(n_nodes, n_jobs, seed)
    first = state.schedule(CONFIG)
    if apply_first:
        state.apply(first)
    serial = 0
    for changes in rounds:
        for kind, a, b in changes:
            serial += 1
            _change(state, kind, a, b, serial)
        out = state.schedule(CONFIG)
        _assert_fresh(out, state)
        _assert_evaluations_fresh(_last(state))
        state.apply(out)


def _busy_state() -> ClusterState:
    """A state whose first cycle placed tasks and left templates waiting (so evaluations read
    early in the cycle are behind its last placements)."""
    state = _state(16, 60, 5)
    state.apply(state.schedule(CONFIG))
    return state


def _drained(state: ClusterState, i: int = 7) -> Node:
    """Node ``i`` of the state, its tasks sent back to Pending (a drain before removal)."""
    node = list(state.nodes.values())[i]
    for task in [t for t in state.tasks.values() if t.node == node.name]:
        state.set_task_phase(task.name, TaskPhase.PENDING)
    return node


def test_a_removed_node_carries_the_evaluations_over_the_new_rows() -> None:
    state = _busy_state()
    state.remove_node(_drained(state, 3).name)
    out = state.schedule(CONFIG)
    ssn = _last(state)
    assert ssn.evaluator.carried > 0  # not rebuilt: taken over and settled
    _assert_fresh(out, state)
    _assert_evaluations_fresh(ssn)


def test_an_added_node_and_a_reordered_list_carry_and_decide_as_fresh() -> None:
    state = _busy_state()
    first = next(iter(state.nodes.values()))
    state.remove_node(_drained(state).name)
    state.add_node(dataclasses.replace(first, name="zz-new", unschedulable=False))
    out = state.schedule(CONFIG)
    ssn = _last(state)
    assert ssn.evaluator.carried > 0
    _assert_fresh(out, state)
    _assert_evaluations_fresh(ssn)
    # A second change of the node set before some carried evaluations were used.
    state.apply(out)
    state.remove_node(_drained(state, len(state.nodes) - 1).name)
    state.add_node(dataclasses.replace(first, name="zz-other"))
    out = state.schedule(CONFIG)
    _assert_fresh(out, state)
    _assert_evaluations_fresh(_last(state))


@pytest.mark.parametrize("seed", [5, 11, 23])
def test_what_a_cycle_left_unread_is_carried_over_node_set_changes(seed: int) -> None:
    """Cycles whose evaluations are not read back in full between node-set changes (only
    the carried jobs' proofs read them, without scores or per-node reasons): the scores left
    behind and the reasons never moved must still come out as fresh ones several cycles
    later."""
    state = _state(16, 60, seed)
    state.apply(state.schedule(CONFIG))
    serial = 0
    rounds = (("remove", "add_job"), ("add", "cordon"), ("add", "finish"), ("add",), ("remove",))
    for kinds in rounds:
        for k, kind in enumerate(kinds):
            serial += 1
            _change(state, kind, 3 * serial + k, serial, serial)
        out = state.schedule(CONFIG)
        state.apply(out)
    out = state.schedule(CONFIG)
    _assert_fresh(out, state)
    _assert_evaluations_fresh(_last(state))


def test_a_node_with_taints_coming_or_going_starts_afresh() -> None:
    """Taint scores are normalised over every node's taints: a tainted node added (or
    removed) may move every row, so nothing is carried."""
    state = _busy_state()
    node = list(state.nodes.values())[2]
    taint = Taint(key="k", value="v", effect="PreferNoSchedule")
    state.add_node(dataclasses.replace(node, name="tainted", taints=(taint,)))
    out = state.schedule(CONFIG)
    assert _last(state).evaluator.carried == 0
    _assert_fresh(out, state)
    state.apply(out)
    state.schedule(CONFIG)
    state.remove_node(_drained(state, len(state.nodes) - 1).name)
    out = state.schedule(CONFIG)
    assert _last(state).evaluator.carried == 0
    _assert_fresh(out, state)


def test_no_carry_over_a_node_set_change_when_a_template_prefers_by_label() -> None:
    """Preferred node affinity is normalised over every node's labels."""
    state = _busy_state()
    pending = next(t for t in state.tasks.values() if t.phase is TaskPhase.PENDING)
    job = state.jobs[pending.job]
    prefer = {
        "preferred": [
            {"weight": 5, "preference": {"match_expressions": [
                {"key": "rack", "operator": "In", "values": ["rack-000"]}
            ]}}
        ]
    }  # fmt: skip
    task = Task.from_dict({**pending.to_dict(), "name": "pref-0", "node_affinity": prefer})
    state.add_job(dataclasses.replace(job, name="pref"), [dataclasses.replace(task, job="pref")])
    state.apply(state.schedule(CONFIG))
    state.remove_node(_drained(state).name)
    out = state.schedule(CONFIG)
    assert _last(state).evaluator.carried == 0
    _assert_fresh(out, state)


def test_a_device_move_under_an_equal_node_total_is_refreshed_over_a_node_set_change() -> None:
    """A task moved to another device of its node leaves the node's totals as they were but
    frees a whole device: a template waiting for one must see it after the node set
    changed (the rows are compared device by device)."""
    gpus = {"count": 2, "milli": 1000, "model": "A", "sharing": True}
    data = {
        "nodes": [
            {"name": "g0", "allocatable": {"cpu": 16, "memory": "64Gi"}, "gpus": gpus},
            {"name": "c1", "allocatable": {"cpu": 16, "memory": "64Gi"}},
            {"name": "c2", "allocatable": {"cpu": 16, "memory": "64Gi"}},
        ],
        "queues": [{"name": "q", "weight": 1}],
        "jobs": [
            {"name": "run", "queue": "q", "min_available": 1, "phase": "Running"},
            {"name": "want", "queue": "q", "min_available": 1, "phase": "Inqueue"},
        ],
        "tasks": [
            {"name": "a", "job": "run", "phase": "Running", "node": "g0", "request": {"cpu": 1},
             "gpu_request": {"count": 1, "milli": 500}, "gpu_indices": [0]},
            {"name": "b", "job": "run", "phase": "Running", "node": "g0", "request": {"cpu": 1},
             "gpu_request": {"count": 1, "milli": 300}, "gpu_indices": [1]},
            {"name": "w", "job": "want", "request": {"cpu": 1},
             "gpu_request": {"count": 1, "milli": 1000}},
        ],
    }  # fmt: skip
    state = ClusterState(Snapshot.from_dict(data))
    assert not state.schedule(CONFIG).binds  # no whole device free yet
    state.update_task(dataclasses.replace(state.tasks["a"], gpu_indices=(1,)))
    state.remove_node("c2")
    out = state.schedule(CONFIG)
    assert _last(state).evaluator.carried > 0
    assert [(b.task, b.node) for b in out.binds] == [("w", "g0")]
    _assert_fresh(out, state)


def test_a_cluster_that_had_no_node_takes_its_first_nodes() -> None:
    """A state whose last cycle saw no node at all carries nothing over the new node set (no
    row to move) and decides as a fresh cycle."""
    snap = Snapshot.from_dict(
        {
            "nodes": [],
            "queues": [{"name": "default"}],
            "jobs": [{"name": "j", "min_available": 1}],
            "tasks": [{"name": "j-0", "job": "j", "request": {"cpu": 1}}],
        }
    )
    state = ClusterState(snap)
    assert not state.schedule(CONFIG).binds
    state.add_node(Node.from_dict({"name": "n0", "allocatable": {"cpu": 8, "memory": "8Gi"}}))
    out = state.schedule(CONFIG)
    assert [(b.task, b.node) for b in out.binds] == [("j-0", "n0")]
    _assert_fresh(out, state)
