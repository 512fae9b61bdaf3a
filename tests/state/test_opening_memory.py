"""What a session's opening works out lazily or takes from the last cycle, checked against
the same figures worked out afresh.

* The per-(job, role) state counts are made per pair when first asked, from the opening
  columns: after statements move tasks, every row still equals the count of the session's
  task states, and iterating gives every pair in the order an eager build gives them.
* Each job's task list is sliced when first asked: the same indices as a scan of the task
  column, for every job.
* Templates are made through a twin class of the same slots: what comes out is a frozen
  :class:`~gangsched.session.arrays.TaskTemplate`.
* Equal template shapes share one tuple, and the evaluations taken over from the last
  session are matched by value: shapes that are other objects (the table of shared shapes
  emptied in between) take them over all the same.
* What the opening carries from the last cycle is found by record identity: a job or task
  record replaced under the same name is read afresh (its phase, its state).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

import gangsched as gs
from _sessions import sessions_opened
from gangsched.plugins.proportion import ProportionPlugin
from gangsched.scheduler import open_session
from gangsched.session import arrays as session_arrays
from gangsched.session.arrays import TaskTemplate
from gangsched.session.core import Session
from gangsched.session.statement import Statement
from gangsched.session.task_states import N_STATES, JobTasks, TaskState


def _node(name: str, cpu: int = 8) -> dict[str, Any]:
    return {"name": name, "allocatable": {"cpu": cpu, "memory": "32Gi"}}


def _task(name: str, job: str, role: str, cpu: int = 1, **extra: Any) -> dict[str, Any]:
    return {"name": name, "job": job, "role": role, "request": {"cpu": cpu}, **extra}


def _snapshot(**changes: Any) -> gs.Snapshot:
    """Three jobs, two of them with two roles (roles first seen in another job's tasks),
    one running task; ``changes`` replace whole record lists."""
    d: dict[str, Any] = {
        "nodes": [_node("n1"), _node("n2"), _node("n3", cpu=4)],
        "queues": [{"name": "default"}],
        "jobs": [
            {"name": "a", "min_available": 1, "phase": "Inqueue"},
            {"name": "b", "min_available": 2, "phase": "Inqueue"},
            {"name": "c", "min_available": 1, "phase": "Running"},
        ],
        "tasks": [
            _task("b-ps-0", "b", "ps"),
            _task("a-w-0", "a", "worker"),
            _task("a-w-1", "a", "worker", cpu=2),
            _task("b-w-0", "b", "worker"),
            _task("a-ps-0", "a", "ps"),
            _task("b-w-1", "b", "worker"),
            _task("c-w-0", "c", "worker", phase="Running", node="n3"),
        ],
    }
    d.update(changes)
    return gs.Snapshot.from_dict(d)


def _counted(ssn: Session, job: int, role: str) -> list[int]:
    """The job's tasks of ``role`` per state, counted from the session's task states."""
    tasks = ssn.snapshot.tasks
    mine = [t for t in range(len(tasks)) if ssn.task_job[t] == job and tasks[t].role == role]
    counts: list[int] = np.bincount(ssn.task_state[mine], minlength=N_STATES).tolist()
    return counts


def _eager_order(ssn: Session) -> list[tuple[int, str]]:
    """The pairs present, by job, then by each role's first appearance among the tasks."""
    tasks = ssn.snapshot.tasks
    first = list(dict.fromkeys(t.role for t in tasks))
    pairs = {(int(ssn.task_job[t]), tasks[t].role) for t in range(len(tasks))}
    return sorted(pairs, key=lambda p: (p[0], first.index(p[1])))


def test_role_rows_first_asked_after_moves_count_the_session_states() -> None:
    ssn = open_session(_snapshot())
    pending = [int(t) for t in np.flatnonzero(ssn.task_state == TaskState.PENDING)]
    stmt = Statement(ssn)
    for t in pending[:3]:  # no role row asked before: the ledger asks each first
        tmpl = ssn.templates[int(ssn.template_of[t])]
        node, pipelined = ssn.best_node(tmpl)
        assert node >= 0
        gpus = ssn.choose_gpus(t, node, future=pipelined)
        (stmt.pipeline if pipelined else stmt.allocate)(t, node, gpus)
    moved = {int(s) for s in ssn.task_state[pending[:3]]}
    assert moved and TaskState.PENDING not in moved
    index = ssn.snapshot.job_index
    for name, role in (("a", "worker"), ("a", "ps"), ("b", "ps"), ("b", "worker")):
        j = index[name]
        assert ssn.role_count[j, role].tolist() == _counted(ssn, j, role), (name, role)
        assert ssn.count_states(j, (TaskState.PENDING,), role) == _counted(ssn, j, role)[0]
    assert ssn.count_states(index["c"], (TaskState.RUNNING,), "ps") == 0  # no such pair
    with pytest.raises(KeyError):
        ssn.role_count[index["c"], "ps"]
    stmt.discard()
    for j, role in _eager_order(ssn):
        assert ssn.role_count[j, role].tolist() == _counted(ssn, j, role)


def test_iterating_the_role_counts_gives_every_pair_in_the_eager_order() -> None:
    ssn = open_session(_snapshot())
    index = ssn.snapshot.job_index
    asked = ssn.role_count[index["b"], "worker"]  # one row asked before iterating
    assert list(ssn.role_count) == _eager_order(ssn)
    assert len(ssn.role_count) == len(_eager_order(ssn))
    assert ssn.role_count[index["b"], "worker"] is asked  # (the ledger may have moved it)
    for j, role in ssn.role_count:
        assert ssn.role_count[j, role].tolist() == _counted(ssn, j, role)


def test_each_job_task_list_is_the_scan_of_the_task_column() -> None:
    ssn = open_session(_snapshot())
    n_jobs = len(ssn.snapshot.jobs)
    for j in (2, 0, 1, 0):  # any order, asked again
        assert ssn.job_tasks(j).tolist() == np.flatnonzero(ssn.task_job == j).tolist()
    assert ssn.job_tasks(-1).tolist() == ssn.job_tasks(n_jobs - 1).tolist()
    with pytest.raises(IndexError):
        ssn.job_tasks(n_jobs)
    empty = JobTasks(np.array([0, 2, 0], dtype=np.int64), 3)
    assert [empty.of(j).tolist() for j in range(3)] == [[0, 2], [], [1]]


def test_templates_made_are_frozen_task_templates() -> None:
    ssn = open_session(_snapshot())
    assert ssn.templates
    for tmpl in ssn.templates:
        assert type(tmpl) is TaskTemplate
        with pytest.raises(dataclasses.FrozenInstanceError):
            tmpl.index = 99  # type: ignore[misc]
        again = dataclasses.replace(tmpl, index=7)
        assert again.index == 7 and again.shape == tmpl.shape and again.tasks == tmpl.tasks
    # the next cycle's templates, made from these, are frozen task templates too
    nxt = open_session(ssn.snapshot, previous=ssn)
    assert [type(t) for t in nxt.templates] == [TaskTemplate] * len(nxt.templates)
    assert [t.tasks for t in nxt.templates] == [t.tasks for t in ssn.templates]


def test_equal_shapes_share_one_tuple() -> None:
    ssn = open_session(_snapshot())
    by_shape: dict[tuple[object, ...], set[int]] = {}
    for tmpl in ssn.templates:
        by_shape.setdefault(tmpl.shape, set()).add(id(tmpl.shape))
    assert any(len(t.tasks) for t in ssn.templates)
    assert all(len(ids) == 1 for ids in by_shape.values())
    # a and b each have a 1-cpu worker template: one shape, two jobs
    tasks = ssn.snapshot.tasks
    small = [t for t in ssn.templates if tasks[t.tasks[0]].name in ("a-w-0", "b-w-0")]
    assert len({t.job for t in small}) == 2 and small[0].shape is small[1].shape


def test_evaluations_are_taken_over_by_shape_value_not_by_object(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first = open_session(_snapshot())
    for tmpl in first.templates:
        first.evaluate(tmpl)
    shapes = {t.shape for t in first.templates}
    # The same cluster again, its jobs renamed (no template key of the last cycle: every
    # template made anew), and the table of shared shapes emptied: this session's shapes
    # are equal tuples, other objects.
    monkeypatch.setattr(session_arrays, "_SHAPES", {})
    d = first.snapshot.to_dict()
    for job in d["jobs"]:
        job["name"] = f"{job['name']}-again"
    for task in d["tasks"]:
        task["job"] = f"{task['job']}-again"
    again = gs.Snapshot.from_dict(d)
    second = open_session(again, previous=first)
    assert {t.shape for t in second.templates} == shapes
    assert not {id(t.shape) for t in second.templates} & {id(s) for s in shapes}
    assert second.evaluator.same_ground
    assert second.evaluator.carried == len(shapes)
    afresh = open_session(_read_back(again))  # the same records, in the same order
    for tmpl in second.templates:  # and what they hold is what a fresh evaluation finds
        fresh = afresh.evaluate(afresh.templates[tmpl.index])
        got = second.evaluate(tmpl)
        assert np.array_equal(got.ok, fresh.ok) and np.array_equal(got.score, fresh.score)


def _read_back(snapshot: gs.Snapshot) -> gs.Snapshot:
    """``snapshot`` read back from its interchange form: equal records, other objects."""
    return gs.Snapshot.from_dict(snapshot.to_dict())


def test_a_job_record_replaced_under_its_name_is_read_afresh() -> None:
    first = open_session(_snapshot())
    snap = first.snapshot
    b = snap.job_index["b"]
    replaced = dataclasses.replace(snap.jobs[b], phase=gs.JobPhase.RUNNING, min_available=1)
    jobs = tuple(replaced if k == b else rec for k, rec in enumerate(snap.jobs))
    second = open_session(dataclasses.replace(snap, jobs=jobs), previous=first)
    assert second.columns.job_source is not None
    assert second.columns.job_source.tolist() == [0, -1, 2]  # the same records, by identity
    assert second.job_phase[b] is gs.JobPhase.RUNNING
    assert int(second.job_min[b]) == 1
    assert second.job_phase[snap.job_index["a"]] is gs.JobPhase.INQUEUE


def test_a_task_record_replaced_under_its_name_is_read_afresh() -> None:
    first = open_session(_snapshot())
    snap = first.snapshot
    t = next(k for k, rec in enumerate(snap.tasks) if rec.name == "a-w-1")
    bound = dataclasses.replace(snap.tasks[t], phase=gs.TaskPhase.BOUND, node="n1")
    tasks = tuple(bound if k == t else rec for k, rec in enumerate(snap.tasks))
    second = open_session(dataclasses.replace(snap, tasks=tasks), previous=first)
    assert second.columns.source is not None and second.columns.source[t] == -1
    assert second.task_state[t] == TaskState.BOUND
    assert second.task_node[t] == snap.node_index["n1"]
    a = snap.job_index["a"]
    assert second.role_count[a, "worker"].tolist() == _counted(second, a, "worker")
    assert int(second.template_of[t]) == -1  # no longer pending: in no template
    assert all(t not in tmpl.tasks for tmpl in second.templates)


def test_best_effort_flags_follow_the_records_across_cycles() -> None:
    """Whether a task is best-effort is carried with its record: a task made best-effort by a
    replaced record (no request any more) counts as a pending best-effort task of its job in
    the next cycle, and one given a request again stops counting, as a scan of the records
    says."""

    def scan(ssn: Session, job: int) -> int:
        tasks = ssn.snapshot.tasks
        return sum(
            1
            for t in range(len(tasks))
            if ssn.task_job[t] == job
            and tasks[t].best_effort
            and ssn.task_state[t] == TaskState.PENDING
        )

    ssn = open_session(_snapshot())
    snap = ssn.snapshot
    t = next(k for k, rec in enumerate(snap.tasks) if rec.name == "b-w-1")
    for request in ({}, {"cpu": 1000}, {}):
        tasks = tuple(
            dataclasses.replace(rec, request=gs.Resources(request)) if k == t else rec
            for k, rec in enumerate(snap.tasks)
        )
        ssn = open_session(dataclasses.replace(snap, tasks=tasks), previous=ssn)
        assert bool(ssn.columns.best_effort[t]) is (not request)
        for job in range(len(snap.jobs)):
            assert ssn.pending_best_effort(job) == scan(ssn, job)
        assert ssn.pending_best_effort(snap.job_index["b"]) == (0 if request else 1)
    # the same records again: the flag is carried, not read afresh
    again = open_session(ssn.snapshot, previous=ssn)
    assert again.columns.source is not None and again.columns.source[t] == t
    assert again.pending_best_effort(snap.job_index["b"]) == 1


def test_queue_figures_are_taken_over_only_from_the_same_queue_records(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """proportion's figures read from the queues and the nodes alone (total, guarantee,
    realCapability, weights) pass from one opening to the next while the queue records and
    the allocatable array are the same objects, and are read again once a queue changes."""
    opened = sessions_opened(monkeypatch)
    queues = [
        {"name": "default", "weight": 1},
        {"name": "other", "weight": 3, "capability": {"cpu": 6}, "guarantee": {"cpu": 2}},
    ]
    jobs = [{"name": "d", "min_available": 1, "queue": "other", "phase": "Inqueue"}]
    base = _snapshot(queues=queues).to_dict()
    state = gs.ClusterState(
        gs.Snapshot.from_dict(
            {
                **base,
                "jobs": [*base["jobs"], *jobs],
                "tasks": [*base["tasks"], _task("d-w-0", "d", "worker", cpu=3)],
            }
        )
    )
    config = gs.Config.default()
    for _ in range(3):  # (the first cycle's arrays are built afresh by the second)
        state.apply(state.schedule(config))
    first, second = (_proportion(ssn) for ssn in opened[-2:])
    assert second.real_capability is first.real_capability  # the same records: taken over
    assert not second.real_capability.flags.writeable
    state.update_queue(dataclasses.replace(state.queues["other"], weight=1, capability=None))
    state.apply(state.schedule(config))
    third = opened[-1]
    fresh = open_session(_read_back(third.snapshot))
    now, afresh = _proportion(third), _proportion(fresh)
    assert now.real_capability is not second.real_capability
    for name in ("real_capability", "deserved", "_limit"):
        assert getattr(now, name).tolist() == getattr(afresh, name).tolist(), name
    assert now.real_capability.tolist() != second.real_capability.tolist()


def _proportion(ssn: Session) -> ProportionPlugin:
    plugin = ssn.plugin("proportion")
    assert isinstance(plugin, ProportionPlugin)
    return plugin
