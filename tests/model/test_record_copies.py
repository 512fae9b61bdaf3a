"""``Task.placed`` and ``Job.in_phase`` make the records ``dataclasses.replace`` makes, field by
field, and refuse what it refuses with the same error: they copy a checked record and check
again only the fields they change."""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gangsched import Snapshot
from gangsched.errors import SnapshotError
from gangsched.model import Job, JobPhase, Task, TaskPhase
from gangsched.testing.strategies import snapshots

#: Phases, with spellings and values the constructor refuses.
PHASES: list[Any] = [*TaskPhase, "Running", "Bound", "Nope", 3, None]
JOB_PHASES: list[Any] = [*JobPhase, "Inqueue", "Running", "Whatever", 1.5]


def _made(make: Any, *args: Any, **kwargs: Any) -> tuple[str, Any]:
    try:
        return "ok", make(*args, **kwargs)
    except SnapshotError as exc:
        return "error", str(exc)


def _same(a: tuple[str, Any], b: tuple[str, Any]) -> None:
    assert a[0] == b[0], (a, b)
    if a[0] == "ok":
        x, y = a[1], b[1]
        assert type(x) is type(y)
        for f in dataclasses.fields(x):
            assert getattr(x, f.name) == getattr(y, f.name), f.name
            assert type(getattr(x, f.name)) is type(getattr(y, f.name)), f.name
        assert x == y and hash(x) == hash(y)
    else:
        assert a[1] == b[1]


@settings(max_examples=60)
@given(snap=snapshots(max_jobs=3), data=st.data())
def test_a_placed_task_is_the_replaced_record(snap: Snapshot, data: st.DataObject) -> None:
    node_names = [n.name for n in snap.nodes]
    for task in snap.tasks:
        phase = data.draw(st.sampled_from(PHASES))
        node = data.draw(st.sampled_from([None, *node_names, 7]))
        count = task.gpu_request.count if task.gpu_request is not None else 0
        devices = data.draw(st.permutations(range(count + 1)))
        indices: Any = data.draw(
            st.sampled_from([list(devices[:count]), list(devices), [0, 0], [-1], "0"])
        )
        _same(
            _made(task.placed, phase, node, indices),
            _made(dataclasses.replace, task, phase=phase, node=node, gpu_indices=indices),
        )


@settings(max_examples=60)
@given(snap=snapshots(max_jobs=4), data=st.data())
def test_a_job_in_another_phase_is_the_replaced_record(snap: Snapshot, data: st.DataObject) -> None:
    for job in snap.jobs:
        phase = data.draw(st.sampled_from(JOB_PHASES))
        creation = data.draw(st.sampled_from([None, 0, 5, -1, "3", True]))
        changes: dict[str, Any] = {"phase": phase}
        if creation is not None:
            changes["creation"] = creation
        _same(
            _made(job.in_phase, phase, creation=creation),
            _made(dataclasses.replace, job, **changes),
        )


def test_the_copies_are_new_records_and_leave_the_original() -> None:
    task = Task(name="t", job="j")
    moved = task.placed(TaskPhase.RUNNING, "n1")
    assert moved is not task and task.phase is TaskPhase.PENDING and task.node is None
    job = Job(name="j")
    later = job.in_phase("Running", creation=4)
    assert later.phase is JobPhase.RUNNING and later.creation == 4
    assert job.phase is JobPhase.PENDING and job.creation == 0
