"""ClusterState: sharing, change counts, refusals, decisions, resync, the example scheduler."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

import gangsched as gs
from gangsched import ClusterState, Snapshot
from gangsched.decisions import Bind, Decisions, Eviction
from gangsched.errors import PlacementError, SnapshotError
from gangsched.limits import Limits
from gangsched.model import Job, Node, Queue, Task, TaskPhase

ROOT = Path(__file__).resolve().parents[2]


def _cluster(nodes: int = 3, jobs: int = 2) -> ClusterState:
    state = ClusterState()
    state.add_queue(Queue(name="default"))
    for i in range(nodes):
        state.add_node(Node(name=f"n{i}", allocatable={"cpu": 4, "memory": "8Gi"}))
    for j in range(jobs):
        state.add_job(
            Job(name=f"j{j}", min_available=1),
            [Task(name=f"j{j}-t{k}", job=f"j{j}", request={"cpu": 1}) for k in range(2)],
        )
    return state


def test_snapshot_shares_the_record_lists_that_did_not_change() -> None:
    state = _cluster()
    first = state.snapshot()
    assert state.snapshot() is first
    state.set_task_phase("j0-t0", TaskPhase.BOUND, node="n1")
    second = state.snapshot()
    assert second is not first
    assert second.nodes is first.nodes and second.node_index is first.node_index
    assert second.jobs is first.jobs and second.queues is first.queues
    assert second.tasks is not first.tasks
    assert second == Snapshot.from_dict(state.to_dict())
    assert first.task("j0-t0").phase is TaskPhase.PENDING  # the old snapshot is untouched


def test_node_generations_name_what_changed_since_the_cycle() -> None:
    state = _cluster()
    state.mark_cycle()
    assert state.changed_nodes() == ()
    gen = state.generation
    state.set_task_phase("j0-t0", TaskPhase.BOUND, node="n2")
    state.cordon("n0")
    assert state.changed_nodes() == ("n0", "n2")
    assert state.node_generation("n2") > gen >= state.node_generation("n1")
    state.add_node(Node(name="n9", allocatable={"cpu": 1}))
    state.remove_node("n9")
    assert state.removed_nodes() == ("n9",)
    state.schedule(gs.Config.default())
    assert state.changed_nodes() == () and state.removed_nodes() == ()


def test_refused_bind_names_the_node_and_field_and_changes_nothing() -> None:
    state = _cluster(nodes=1, jobs=3)
    for k in range(4):
        name = f"j{k // 2}-t{k % 2}"
        state.set_task_phase(name, TaskPhase.RUNNING, node="n0")
    before = state.to_dict()
    with pytest.raises(SnapshotError) as err:
        state.set_task_phase("j2-t0", TaskPhase.RUNNING, node="n0")
    assert (err.value.kind, err.value.name, err.value.field) == ("node", "n0", "allocatable.cpu")
    assert state.to_dict() == before


def test_removing_what_is_still_referenced_is_refused_like_a_snapshot() -> None:
    state = _cluster()
    state.set_task_phase("j0-t0", TaskPhase.RUNNING, node="n0")
    with pytest.raises(SnapshotError) as err:
        state.remove_node("n0")
    assert (err.value.kind, err.value.name, err.value.field) == ("task", "j0-t0", "node")
    with pytest.raises(SnapshotError) as err:
        state.remove_queue("default")
    assert (err.value.kind, err.value.field) == ("job", "queue")
    with pytest.raises(SnapshotError) as err:
        state.remove_job("j1")
    assert (err.value.kind, err.value.name, err.value.field) == ("task", "j1-t0", "job")
    state.remove_job("j1", with_tasks=True)
    assert "j1-t0" not in state.tasks and "j1" not in state.jobs
    with pytest.raises(SnapshotError, match="unknown job 'ghost'"):
        state.add_task(Task(name="x", job="ghost"))


def test_task_limit_is_checked_on_add() -> None:
    state = ClusterState(limits=Limits(max_tasks=3))
    state.add_queue(Queue(name="default"))
    state.add_job(Job(name="j"), [Task(name=f"t{k}", job="j") for k in range(3)])
    with pytest.raises(SnapshotError, match=r"Limits\.max_tasks"):
        state.add_task(Task(name="t3", job="j"))
    assert len(state.tasks) == 3


def test_apply_binds_bound_and_evictions_releasing_all_or_nothing() -> None:
    state = _cluster()
    out = state.schedule(gs.Config.default())
    assert out.binds
    state.apply(out)
    for b in out.binds:
        assert state.tasks[b.task].phase is TaskPhase.BOUND and state.tasks[b.task].node == b.node
    victim = out.binds[0].task
    before = state.to_dict()
    bad = Decisions(
        evictions=(Eviction(task=victim, reason="test"),),
        binds=(Bind(task=out.binds[1].task, node="n0"),),  # already Bound: refused
    )
    with pytest.raises(PlacementError) as err:
        state.apply(bad)
    assert err.value.name == out.binds[1].task
    assert state.to_dict() == before
    state.apply(Decisions(evictions=(Eviction(task=victim, reason="test"),)))
    assert state.tasks[victim].phase is TaskPhase.RELEASING


def test_schedule_on_the_state_equals_schedule_from_records() -> None:
    state = _cluster(nodes=4, jobs=4)
    config = gs.Config.default()
    for _ in range(3):
        fresh = Snapshot.from_dict(state.snapshot().to_dict())
        want = json.dumps(gs.schedule(fresh, config).to_dict(), sort_keys=True)
        out = state.schedule(config)
        assert json.dumps(out.to_dict(), sort_keys=True) == want
        state.apply(out, bound=TaskPhase.RUNNING)
        state.add_job(Job(name=f"late{state.generation}"), [])


def test_sync_touches_only_the_records_that_differ() -> None:
    state = _cluster()
    target = state.snapshot()
    assert state.sync(target) == 0
    tasks = list(target.tasks)
    tasks[0] = dataclasses.replace(tasks[0], phase=TaskPhase.RUNNING, node="n0")
    nodes = list(target.nodes)
    nodes[2] = dataclasses.replace(nodes[2], unschedulable=True)
    changed = target.replace(nodes=nodes, tasks=tasks[:-1])
    state.mark_cycle()
    assert state.sync(changed) == 3
    assert state.snapshot() == changed
    assert state.changed_nodes() == ("n0", "n2")


def test_sync_rebuilds_when_changes_cannot_be_made_one_at_a_time() -> None:
    """A task moves onto the room another task frees later in the order."""
    state = ClusterState()
    state.add_queue(Queue(name="default"))
    for i in range(2):
        state.add_node(Node(name=f"n{i}", allocatable={"cpu": 1}))
    state.add_job(
        Job(name="j"), [Task(name=f"t{k}", job="j", request={"cpu": 1}) for k in range(2)]
    )
    state.set_task_phase("t0", TaskPhase.RUNNING, node="n0")
    state.set_task_phase("t1", TaskPhase.RUNNING, node="n1")
    snap = state.snapshot()
    swapped = snap.replace(
        tasks=[
            dataclasses.replace(snap.task("t0"), node="n1"),
            dataclasses.replace(snap.task("t1"), node="n0"),
        ]
    )
    state.sync(swapped)
    assert state.snapshot() == swapped
    assert state.tasks["t0"].node == "n1"


def test_sync_removes_a_queue_whose_child_moves_to_another_parent() -> None:
    """The re-list drops queue ``a`` and hangs its child ``b`` under ``c``: removed one at a
    time, ``a`` still has ``b`` below it (the soak found a bare StopIteration here)."""
    state = ClusterState()
    for q in (Queue(name="a"), Queue(name="b", parent="a"), Queue(name="c")):
        state.add_queue(q)
    state.add_job(Job(name="j", queue="b"), [Task(name="t", job="j", request={"cpu": 1})])
    snap = state.snapshot()
    target = snap.replace(queues=[Queue(name="c"), Queue(name="b", parent="c")])
    state.sync(target)
    assert sorted(state.queues) == ["b", "c"]
    assert state.queues["b"].parent == "c"
    assert state.snapshot() == Snapshot.from_dict(target.to_dict())
    assert state.sync(target) == 0


def _example() -> Any:
    spec = importlib.util.spec_from_file_location(
        "gangsched_example_k8s_scheduler_state", ROOT / "examples" / "k8s_scheduler.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_example_scheduler_keeps_one_state_across_cycles() -> None:
    from _recorded_api import Recorded  # the recorded API objects' fake client

    mod = _example()
    data = json.loads((ROOT / "tests" / "data" / "k8s_api_objects.json").read_text())
    api = Recorded(data)
    objects = mod.collect(api, api, api, lambda item: item)
    fresh = mod.plan(objects)
    state = ClusterState()
    first = mod.plan(objects, state=state)
    assert first.decisions.to_dict() == fresh.decisions.to_dict()
    assert state.snapshot() == fresh.cluster.snapshot
    gen = state.generation
    again = mod.plan(objects, state=state)  # nothing changed: nothing touched
    assert again.decisions.to_dict() == fresh.decisions.to_dict()
    assert state.generation == gen


def test_arrays_of_the_next_snapshot_reuse_the_previous_ones() -> None:
    from test_cluster_state_machine import assert_same_arrays

    from gangsched.session.arrays import build_cluster_arrays

    state = _cluster(nodes=4, jobs=3)
    config = gs.Config.default()
    out = state.schedule(config)  # builds the first snapshot's arrays
    first = build_cluster_arrays(state.snapshot())
    state.apply(out)
    state.set_task_phase(out.binds[0].task, TaskPhase.RELEASING)
    snap = state.snapshot()
    arrays = build_cluster_arrays(snap)
    assert arrays.allocatable is first.allocatable  # the node columns are shared
    assert arrays.used is not first.used
    assert build_cluster_arrays(snap) is arrays
    assert_same_arrays(arrays, build_cluster_arrays(Snapshot.from_dict(snap.to_dict())))
    state.cordon("n0")  # a node changed: built from scratch
    assert build_cluster_arrays(state.snapshot()).allocatable is not first.allocatable


def test_state_built_from_another_states_snapshot_builds_right_arrays() -> None:
    """The other state's reuse plan (its generations) must not leak into this one's."""
    from test_cluster_state_machine import assert_same_arrays

    from gangsched.session.arrays import build_cluster_arrays

    a = _cluster(nodes=3, jobs=2)
    a.schedule(gs.Config.default())
    a.set_task_phase("j0-t0", TaskPhase.RUNNING, node="n1")
    handed = a.snapshot()  # arrays not built: carries a's plan
    b = ClusterState(handed)
    b.set_task_phase("j1-t0", TaskPhase.RUNNING, node="n2")
    snap = b.snapshot()
    fresh = Snapshot.from_dict(snap.to_dict())
    assert_same_arrays(build_cluster_arrays(snap), build_cluster_arrays(fresh))


def test_record_views_iterate_live_and_read_only() -> None:
    """``nodes`` / ``tasks`` / ... give their keys, values and items in the state's order,
    follow later changes, and offer no way to change the state through them."""
    state = _cluster(nodes=2, jobs=1)
    tasks = state.tasks
    values, items, keys = tasks.values(), tasks.items(), tasks.keys()
    assert list(keys) == ["j0-t0", "j0-t1"]
    assert [t.name for t in values] == list(keys)
    assert [(name, t.name) for name, t in items] == [(k, k) for k in keys]
    state.add_task(Task.from_dict({"name": "j0-t2", "job": "j0", "request": {"cpu": 1}}))
    assert list(keys) == ["j0-t0", "j0-t1", "j0-t2"]
    assert values.mapping["j0-t2"] is state.tasks["j0-t2"]  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        values.mapping["j0-t3"] = state.tasks["j0-t2"]  # type: ignore[attr-defined]
    for view in (values, items, keys):
        assert not hasattr(view, "pop") and not hasattr(view, "clear")
    assert dict(state.nodes.items()) == {name: state.nodes[name] for name in state.nodes}
