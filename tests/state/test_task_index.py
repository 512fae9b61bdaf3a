"""The tasks' name index of a ClusterState's snapshot is made when first read: it is the
index of that snapshot's tasks, whatever the state did since."""

from __future__ import annotations

import pytest

from gangsched import ClusterState, Snapshot
from gangsched.model import Job, Node, Queue, Task, TaskPhase


def _state() -> ClusterState:
    state = ClusterState()
    state.add_queue(Queue(name="q"))
    state.add_node(Node(name="n", allocatable={"cpu": 8}))
    for j in range(3):
        state.add_job(
            Job(name=f"j{j}", queue="q", min_available=1),
            [Task(name=f"j{j}-t{k}", job=f"j{j}", request={"cpu": 1}) for k in range(2)],
        )
    return state


def test_a_snapshot_s_task_index_is_its_own_tasks_read_after_the_state_moved() -> None:
    state = _state()
    first = state.snapshot()
    state.remove_job("j0", with_tasks=True)
    state.set_task_phase("j1-t1", TaskPhase.RUNNING, node="n")
    second = state.snapshot()
    # read only now, after the state moved on: each is its own snapshot's
    assert dict(first.task_index) == {t.name: i for i, t in enumerate(first.tasks)}
    assert dict(second.task_index) == {t.name: i for i, t in enumerate(second.tasks)}
    assert list(second.task_index) == ["j1-t0", "j1-t1", "j2-t0", "j2-t1"]
    assert second.task("j1-t1").phase is TaskPhase.RUNNING
    assert "j0-t0" in first.task_index and "j0-t0" not in second.task_index
    assert second.task_index.get("j0-t0") is None and len(second.task_index) == 4
    with pytest.raises(KeyError):
        second.task_index["j0-t0"]
    assert second == Snapshot.from_dict(state.to_dict())
