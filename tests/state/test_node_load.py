"""The load a ClusterState keeps per node between task changes: it decides exactly as the
whole check of the node's tasks, and a load some other change made stale is never read."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from gangsched import ClusterState
from gangsched.decisions import Bind, Decisions
from gangsched.errors import SnapshotError
from gangsched.model import GpuRequest, Gpus, Job, Node, Queue, Task, TaskPhase
from gangsched.model.checks import check_node_tasks
from gangsched.state._core import NodeLoad


def _state(node: Node, tasks: int, **request: Any) -> ClusterState:
    state = ClusterState()
    state.add_queue(Queue(name="q"))
    state.add_node(node)
    state.add_job(
        Job(name="j", queue="q", min_available=1),
        [Task(name=f"t{k}", job="j", **request) for k in range(tasks)],
    )
    return state


def test_a_load_a_batch_of_decisions_moved_past_is_not_read() -> None:
    # The batch path (apply) places t1 without moving the kept load along: read as it was,
    # the load would let t2 over-fill the node.
    state = _state(Node(name="n", allocatable={"cpu": 4}), 3, request={"cpu": 2})
    state.set_task_phase("t0", TaskPhase.RUNNING, node="n")
    state.apply(Decisions(binds=(Bind(task="t1", node="n"),)))
    with pytest.raises(SnapshotError) as err:
        state.set_task_phase("t2", TaskPhase.RUNNING, node="n")
    assert (err.value.kind, err.value.name, err.value.field) == ("node", "n", "allocatable.cpu")


def test_a_load_of_the_node_record_before_is_not_read() -> None:
    # With sharing, t0 holds 500 milli of device 0; once the node shares no more it holds the
    # whole device, and t1 on the same device over-commits it.
    shared = Node(name="n", allocatable={"cpu": 8}, gpus=Gpus(count=2, model="T4", sharing=True))
    state = _state(shared, 2, request={"cpu": 1}, gpu_request=GpuRequest(count=1, milli=500))
    state.set_task_phase("t0", TaskPhase.RUNNING, node="n", gpu_indices=(0,))
    alone = Gpus(count=2, model="T4", sharing=False)
    state.update_node(Node(name="n", allocatable={"cpu": 8}, gpus=alone))
    with pytest.raises(SnapshotError) as err:
        state.set_task_phase("t1", TaskPhase.RUNNING, node="n", gpu_indices=(0,))
    assert (err.value.kind, err.value.name, err.value.field) == ("task", "t1", "gpu_indices")


def test_a_load_follows_a_task_leaving_and_a_node_removed_and_added_again() -> None:
    state = _state(Node(name="n", allocatable={"cpu": 4}), 3, request={"cpu": 2})
    state.set_task_phase("t0", TaskPhase.RUNNING, node="n")
    state.set_task_phase("t1", TaskPhase.RUNNING, node="n")
    state.set_task_phase("t0", TaskPhase.SUCCEEDED)  # leaves room for one
    state.set_task_phase("t2", TaskPhase.RUNNING, node="n")
    with pytest.raises(SnapshotError):
        state.set_task_phase("t0", TaskPhase.RUNNING, node="n")
    state.remove_task("t1")
    state.remove_task("t2")
    state.set_task_phase("t0", TaskPhase.PENDING)
    state.remove_node("n")
    state.add_node(Node(name="n", allocatable={"cpu": 2}))
    state.set_task_phase("t0", TaskPhase.RUNNING, node="n")
    state.add_task(Task(name="t3", job="j", request={"cpu": 1}))
    with pytest.raises(SnapshotError):
        state.set_task_phase("t3", TaskPhase.RUNNING, node="n")


_PHASES = [TaskPhase.RUNNING, TaskPhase.BOUND, TaskPhase.RELEASING, TaskPhase.PIPELINED]
_PHASES += [TaskPhase.SUCCEEDED]


@st.composite
def _tasks(draw: st.DrawFn) -> tuple[Node, list[Task], list[int]]:
    sharing = draw(st.booleans())
    node = Node(
        name="n",
        allocatable={"cpu": draw(st.integers(1, 6)), "pods": draw(st.integers(1, 5))},
        gpus=Gpus(count=draw(st.integers(1, 3)), model="T4", sharing=sharing),
    )
    tasks = []
    for k in range(draw(st.integers(0, 6))):
        gpu = draw(st.one_of(st.none(), st.integers(1, 1000)))
        indices: tuple[int, ...] = ()
        if gpu is not None:
            indices = (draw(st.integers(0, 3)),)
        tasks.append(
            Task(
                name=f"t{k}",
                job="j",
                request={"cpu": draw(st.integers(0, 3))},
                gpu_request=None if gpu is None else GpuRequest(count=1, milli=gpu),
                phase=draw(st.sampled_from(_PHASES)),
                node="n",
                gpu_indices=indices,
            )
        )
    return node, tasks, draw(st.permutations(range(len(tasks))))


def _passes(node: Node, tasks: list[Task]) -> bool:
    try:
        check_node_tasks(node, tasks)
    except SnapshotError:
        return False
    return True


@given(_tasks())
@example(
    (
        Node(name="n", allocatable={"cpu": 1}, gpus=Gpus(count=1, model="T4")),
        [
            Task(
                name="t0",
                job="j",
                gpu_request=GpuRequest(count=1, milli=1000),
                phase=TaskPhase.RUNNING,
                node="n",
                gpu_indices=(1,),
            )
        ],
        [0],
    ),
).via("a device index past the node's, then no task")
def test_a_load_fits_exactly_when_the_whole_check_passes(
    case: tuple[Node, list[Task], list[int]],
) -> None:
    node, tasks, order = case
    load = NodeLoad(node, 0, tasks)
    assert load.fits() == _passes(node, tasks)
    # taking the tasks away one by one, it decides as the check of those left
    gone: set[int] = set()
    for k in order:
        load.move(tasks[k], -1)
        gone.add(k)
        left = [t for i, t in enumerate(tasks) if i not in gone]
        assert load.fits() == _passes(node, left)
