"""``ClusterState`` refuses what it must with typed errors, changes nothing when it refuses,
and applies every decision a cycle on its own snapshot makes.

One test per way the state broke a promise of ``docs/embedding.md``: an untyped error from a
wrong argument type, a refused ``sync`` that changed the state, a node a rebuilding ``sync``
removed missing from ``removed_nodes``, a consolidation's moves refused by ``apply``, a
reservation moving while another task takes its room refused by ``apply``, and ``apply``'s
cost growing with the square of the tasks of a node.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import pytest

import gangsched as gs
from gangsched.decisions import Bind, Decisions, Eviction, JobStatus, Pipeline
from gangsched.errors import DecisionError, GangschedError, PlacementError, SnapshotError
from gangsched.limits import Limits
from gangsched.model import TaskPhase


def _form(state: gs.ClusterState) -> str:
    return json.dumps(state.to_dict(), sort_keys=True)


def _small() -> gs.ClusterState:
    state = gs.ClusterState()
    state.add_queue(gs.Queue(name="default"))
    for i in range(2):
        state.add_node(gs.Node(name=f"n{i}", allocatable={"cpu": 4}, gpus=gs.Gpus(count=2)))
    state.add_job(
        gs.Job(name="j", min_available=1),
        [gs.Task(name="t", job="j", request={"cpu": 1}, gpu_request=gs.GpuRequest(count=1))],
    )
    return state


# --------------------------------------------------------------------------------------------
# Wrong argument types: a SnapshotError (or ConfigError / DecisionError) naming the argument


JUNK: dict[str, Callable[[gs.ClusterState], Any]] = {
    "cordon-mapping": lambda s: s.cordon({}),  # type: ignore[arg-type]
    "cordon-list": lambda s: s.cordon(["n0"]),  # type: ignore[arg-type]
    "cordon-flag": lambda s: s.cordon("n0", unschedulable="yes"),  # type: ignore[arg-type]
    "changed-nodes-text": lambda s: s.changed_nodes("3"),  # type: ignore[arg-type]
    "changed-nodes-float": lambda s: s.changed_nodes(1.5),  # type: ignore[arg-type]
    "add-job-int": lambda s: s.add_job(gs.Job(name="k"), 5),  # type: ignore[arg-type]
    "add-job-none": lambda s: s.add_job(gs.Job(name="k"), None),  # type: ignore[arg-type]
    "add-job-not-a-task": lambda s: s.add_job(gs.Job(name="k"), [gs.Job(name="x")]),  # type: ignore[list-item]
    "add-tasks-int": lambda s: s.add_tasks(5),  # type: ignore[arg-type]
    "add-tasks-none": lambda s: s.add_tasks(None),  # type: ignore[arg-type]
    "add-tasks-mapping": lambda s: s.add_tasks({"t2": 1}),  # type: ignore[dict-item]
    "phase-gpu-indices-int": lambda s: s.set_task_phase("t", "Running", node="n0", gpu_indices=5),  # type: ignore[arg-type]
    "phase-gpu-indices-text": lambda s: s.set_task_phase(
        "t",
        "Running",
        node="n0",
        gpu_indices=["0"],  # type: ignore[list-item]
    ),
    "phase-node-int": lambda s: s.set_task_phase("t", "Running", node=3),  # type: ignore[arg-type]
    "phase-name-list": lambda s: s.set_task_phase(["t"], "Running"),  # type: ignore[arg-type]
    "remove-node-list": lambda s: s.remove_node(["n0"]),  # type: ignore[arg-type]
    "remove-task-mapping": lambda s: s.remove_task({"t": 1}),  # type: ignore[arg-type]
    "remove-job-flag": lambda s: s.remove_job("j", with_tasks="yes"),  # type: ignore[arg-type]
    "node-generation-list": lambda s: s.node_generation([]),  # type: ignore[arg-type]
    "tasks-of-mapping": lambda s: s.tasks_of({}),  # type: ignore[arg-type]
    "tasks-on-int": lambda s: s.tasks_on(0),  # type: ignore[arg-type]
    "apply-junk-bind": lambda s: s.apply(Decisions(binds=(1,))),  # type: ignore[arg-type]
    "apply-junk-status": lambda s: s.apply(Decisions(jobs={"j": 1})),  # type: ignore[dict-item]
    "schedule-junk-config": lambda s: s.schedule({"actions": []}),
}


@pytest.mark.parametrize("call", JUNK.values(), ids=list(JUNK))
def test_wrong_argument_types_raise_typed_errors_and_change_nothing(
    call: Callable[[gs.ClusterState], Any],
) -> None:
    state = _small()
    before, gen = _form(state), state.generation
    with pytest.raises(GangschedError) as info:
        call(state)
    assert not isinstance(info.value, KeyError | TypeError | ValueError)
    assert info.value.field  # names the argument
    assert _form(state) == before and state.generation == gen


# --------------------------------------------------------------------------------------------
# sync


def test_a_sync_refused_by_the_states_limits_changes_nothing() -> None:
    """The snapshot is valid under its own limits, not under the state's: the first steps
    (a removal, a cordon) must not be made before the task count refuses it."""
    state = gs.ClusterState(limits=Limits(max_tasks=2))
    state.add_queue(gs.Queue(name="default"))
    for i in range(3):
        state.add_node(gs.Node(name=f"n{i}", allocatable={"cpu": 4}))
    state.add_job(gs.Job(name="j"), [gs.Task(name="t0", job="j", request={"cpu": 1})])
    doc = state.to_dict()
    doc["nodes"] = [dict(n, unschedulable=True) for n in doc["nodes"][1:]]
    doc["tasks"] += [{"name": f"x{i}", "job": "j", "request": {"cpu": 1}} for i in range(3)]
    target = gs.Snapshot.from_dict(doc)  # default limits: 4 tasks are fine
    before, removed = _form(state), state.removed_nodes()
    with pytest.raises(SnapshotError) as info:
        state.sync(target)
    assert "task" in str(info.value)
    assert _form(state) == before
    assert state.removed_nodes() == removed and "n0" in state.nodes


def test_a_rebuilding_sync_reports_every_removed_node() -> None:
    """Task ``b`` moves onto ``n1`` before ``a`` leaves it (records in their order): the
    one-at-a-time sync fails half way and rebuilds; ``n0``, removed by its first steps, and
    ``n3``, removed before the sync, are still reported."""
    state = gs.ClusterState()
    state.add_queue(gs.Queue(name="default"))
    for i in range(4):
        state.add_node(gs.Node(name=f"n{i}", allocatable={"cpu": 4}))
    state.add_job(
        gs.Job(name="j"),
        [
            gs.Task(name="b", job="j", request={"cpu": 4}),
            gs.Task(name="a", job="j", request={"cpu": 4}, node="n1", phase="Running"),
        ],
    )
    state.mark_cycle()
    state.remove_node("n3")
    doc = state.to_dict()
    doc["nodes"] = [n for n in doc["nodes"] if n["name"] != "n0"]
    by_name = {t["name"]: t for t in doc["tasks"]}
    by_name["b"].update(node="n1", phase="Running")
    by_name["a"].update(node="n2")
    target = gs.Snapshot.from_dict(doc)
    state.sync(target)
    assert _form(state) == json.dumps(target.to_dict(), sort_keys=True)
    assert state.removed_nodes() == ("n0", "n3")
    assert set(state.changed_nodes()) == {"n1", "n2"}


# --------------------------------------------------------------------------------------------
# apply


def _node(name: str, gpus: int = 8) -> dict[str, Any]:
    return {
        "name": name,
        "allocatable": {"cpu": 32, "memory": "256Gi", "pods": 110},
        "gpus": {"count": gpus, "model": "A100"},
    }


def test_a_consolidation_cycles_moves_apply_to_the_state_that_made_them() -> None:
    """Two 4-GPU jobs on two 8-GPU nodes, an 8-GPU gang waits: ``consolidate`` moves one
    task (evicted and reserved elsewhere) and reserves the gang where it was."""
    tiers = [
        [{"name": "priority"}, {"name": "gang"}, {"name": "conformance"}],
        [{"name": "drf"}, {"name": "predicates"}, {"name": "proportion"}, {"name": "nodeorder"}],
    ]
    config = gs.Config.from_dict(
        {"actions": ["enqueue", "allocate", "consolidate", "backfill"], "tiers": tiers}
    )
    tasks = [
        {
            "name": f"{j}-0",
            "job": j,
            "phase": "Running",
            "node": n,
            "gpu_indices": [0, 1, 2, 3],
            "gpu_request": {"count": 4},
        }
        for j, n in (("a", "n0"), ("b", "n1"))
    ]
    tasks.append({"name": "big-0", "job": "big", "gpu_request": {"count": 8}})
    state = gs.ClusterState(
        gs.Snapshot.from_dict(
            {
                "nodes": [_node("n0"), _node("n1")],
                "queues": [{"name": "default"}],
                "jobs": [
                    {"name": "a", "min_available": 1, "phase": "Running"},
                    {"name": "b", "min_available": 1, "phase": "Running", "creation": 1},
                    {"name": "big", "min_available": 1, "phase": "Inqueue"},
                ],
                "tasks": tasks,
            }
        )
    )
    decisions = state.schedule(config)
    assert len(decisions.evictions) == 1
    moved = decisions.evictions[0].task
    assert moved in {p.task for p in decisions.pipelined}
    state.apply(decisions)
    where = {p.task: p.node for p in decisions.pipelined}
    assert state.tasks[moved].phase is TaskPhase.PIPELINED
    assert state.tasks[moved].node == where[moved]
    assert state.tasks["big-0"].phase is TaskPhase.PIPELINED
    assert state.snapshot() == gs.Snapshot.from_dict(state.to_dict())


def _two_nodes_a_reservation() -> gs.ClusterState:
    return gs.ClusterState(
        gs.Snapshot.from_dict(
            {
                "nodes": [
                    {"name": "n0", "allocatable": {"cpu": 4}},
                    {"name": "n1", "allocatable": {"cpu": 4}},
                ],
                "queues": [{"name": "default"}],
                "jobs": [{"name": "p", "phase": "Inqueue"}, {"name": "q", "phase": "Inqueue"}],
                "tasks": [
                    {"name": "p-0", "job": "p", "request": {"cpu": 4}, "node": "n0",
                     "phase": "Pipelined"},
                    {"name": "q-0", "job": "q", "request": {"cpu": 4}},
                ],
            }
        )
    )  # fmt: skip


def test_a_reservation_may_move_while_another_task_takes_its_room() -> None:
    state = _two_nodes_a_reservation()
    decisions = Decisions(
        binds=(Bind(task="q-0", node="n0"),), pipelined=(Pipeline(task="p-0", node="n1"),)
    )
    state.apply(decisions)
    assert (state.tasks["q-0"].node, state.tasks["q-0"].phase) == ("n0", TaskPhase.BOUND)
    assert (state.tasks["p-0"].node, state.tasks["p-0"].phase) == ("n1", TaskPhase.PIPELINED)
    assert state.snapshot() == gs.Snapshot.from_dict(state.to_dict())


STALE: dict[str, Decisions] = {
    "placed-twice": Decisions(
        binds=(Bind(task="q-0", node="n1"),), pipelined=(Pipeline(task="q-0", node="n1"),)
    ),
    "bind-of-unknown": Decisions(binds=(Bind(task="zz", node="n1"),)),
    "evict-pending": Decisions(evictions=(Eviction(task="q-0", reason="x"),)),
    "evict-reserved": Decisions(evictions=(Eviction(task="p-0", reason="x"),)),
    "bind-on-unknown-node": Decisions(binds=(Bind(task="q-0", node="n9"),)),
    "no-room": Decisions(binds=(Bind(task="q-0", node="n0"),)),
    "no-room-after-a-good-one": Decisions(
        binds=(Bind(task="q-0", node="n1"),),
        pipelined=(Pipeline(task="p-0", node="n1"),),
        jobs={"q": JobStatus(phase="Running")},
    ),
}


@pytest.mark.parametrize("decisions", STALE.values(), ids=list(STALE))
def test_stale_decisions_are_refused_whole(decisions: Decisions) -> None:
    state = _two_nodes_a_reservation()
    before, gen = _form(state), state.generation
    with pytest.raises((PlacementError, SnapshotError)):
        state.apply(decisions)
    assert _form(state) == before and state.generation == gen


def test_a_decision_record_of_the_wrong_type_is_a_decision_error() -> None:
    state = _two_nodes_a_reservation()
    with pytest.raises(DecisionError) as info:
        state.apply(Decisions(pipelined=(Bind(task="q-0", node="n1"),)))  # type: ignore[arg-type]
    assert info.value.field == "pipelined[0]"


def _one_node_gang(n: int) -> tuple[gs.ClusterState, Decisions]:
    state = gs.ClusterState()
    state.add_queue(gs.Queue(name="default"))
    state.add_node(gs.Node(name="n0", allocatable={"cpu": n, "pods": n}))
    state.add_job(
        gs.Job(name="g", min_available=n, phase="Inqueue"),
        [gs.Task(name=f"g-{i}", job="g", request={"cpu": 1}) for i in range(n)],
    )
    decisions = Decisions(binds=tuple(Bind(task=f"g-{i}", node="n0") for i in range(n)))
    return state, decisions


def test_apply_of_a_gang_on_one_node_costs_what_it_touches(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """1,900 binds to one node: the node is checked once with its final tasks, so the work is
    the node's tasks read once (binds re-checking the node's tasks so far read 1.8 M task
    records, about 2 s). Counted, not timed: the count is what the cost follows."""
    from gangsched.state import _batch

    read: list[int] = []
    original = _batch.check_node_tasks  # type: ignore[attr-defined]

    def counting(node: object, tasks: Sequence[object]) -> None:
        read.append(len(tasks))
        original(node, tasks)  # type: ignore[arg-type]

    monkeypatch.setattr(_batch, "check_node_tasks", counting)
    for n in (475, 1900):
        read.clear()
        state, decisions = _one_node_gang(n)
        state.apply(decisions)
        assert len(state.tasks_on("n0")) == n
        assert read == [n], (n, len(read), sum(read))


# --------------------------------------------------------------------------------------------
# A capability lowered under reservations


@pytest.mark.parametrize(("capability", "binds"), [(2, 0), (3, 0), (8, 2)])
def test_reservations_kept_over_a_lowered_capability_are_not_bound_past_it(
    capability: int, binds: int
) -> None:
    """Two reservations of 2 cpu each, held while the queue's capability was 8; it is
    lowered. Binding one while the other stays reserved leaves the queue where it was, over
    its capability: none is bound until the queue is back within it."""
    from gangsched.testing.invariants import check_cycle

    state = gs.ClusterState(
        gs.Snapshot.from_dict(
            {
                "nodes": [{"name": "n0", "allocatable": {"cpu": 8}}],
                "queues": [{"name": "default"}, {"name": "q", "capability": {"cpu": 8}}],
                "jobs": [{"name": "a", "queue": "q", "min_available": 1, "phase": "Inqueue"}],
                "tasks": [
                    {"name": f"a-{i}", "job": "a", "request": {"cpu": 2}, "node": "n0",
                     "phase": "Pipelined"}
                    for i in range(2)
                ],
            }
        )
    )  # fmt: skip
    state.update_queue(gs.Queue(name="q", capability={"cpu": capability}))
    config = gs.Config.default()
    decisions = state.schedule(config)
    check_cycle(state.snapshot(), decisions, config)
    assert len(decisions.binds) == binds
    state.apply(decisions)
