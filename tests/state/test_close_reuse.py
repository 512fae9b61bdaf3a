"""The close step gives a job or queue the status it had in the last cycle only when the change
log names no change of it since then: every cycle of a long-lived state equals a fresh cycle,
and what did not change is the last cycle's record."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import gangsched as gs
from _carried import uncarried
from _state_cases import zoned_cluster
from gangsched.model import JobPhase, TaskPhase
from gangsched.session.close import JOB_STATUSES


def _canon(d: gs.Decisions) -> str:
    return json.dumps(d.to_dict(), sort_keys=True)


def _fresh(state: gs.ClusterState, config: gs.Config) -> str:
    return _canon(gs.schedule(gs.Snapshot.from_dict(state.snapshot().to_dict()), config))


def _as_fresh(d: gs.Decisions, state: gs.ClusterState, config: gs.Config) -> str:
    """``d`` with a carried job's words taken from a fresh cycle (they are the last attempt's,
    marked carried), as canonical text; compare with :func:`_fresh`."""
    fresh = gs.schedule(gs.Snapshot.from_dict(state.snapshot().to_dict()), config)
    return _canon(uncarried(d, fresh))


def _cluster() -> dict[str, Any]:
    queues = [{"name": "q0", "weight": 1}, {"name": "q1", "weight": 3}]
    return zoned_cluster(4, 12, queues=queues)


def _same(a: gs.Decisions, b: gs.Decisions) -> tuple[set[str], set[str]]:
    """The jobs and queues whose status in ``b`` is ``a``'s very record."""
    jobs = {n for n, s in b.jobs.items() if n in a.jobs and s is a.jobs[n]}
    queues = {n for n, s in b.queues.items() if n in a.queues and s is a.queues[n]}
    return jobs, queues


def test_each_cycle_equals_a_fresh_one_and_reuses_what_did_not_change() -> None:
    state = gs.ClusterState(gs.Snapshot.from_dict(_cluster()))
    config = gs.Config.default()
    first = state.schedule(config)
    assert _as_fresh(first, state, config) == _fresh(state, config)
    # Nothing changed in the records: a job the last cycle placed nothing for keeps its
    # record when its words are the same (a carried job's are not: "carried: "); one it
    # placed for starts this cycle without those placements (the binder did not act), a
    # change of its counts since the last cycle's end.
    second = state.schedule(config)
    assert _as_fresh(second, state, config) == _fresh(state, config)
    jobs, _ = _same(first, second)
    placed = {state.tasks[op.task].job for op in (*first.binds, *first.pipelined)}
    equal = {n for n, st in second.jobs.items() if st == first.jobs[n]}
    # (a job the log names, placed again the same way, keeps its record too)
    assert placed & jobs and jobs <= equal
    # The binds land: the placed jobs (and their queues) change, the waiting ones do not.
    state.apply(second)
    third = state.schedule(config)
    assert _as_fresh(third, state, config) == _fresh(state, config)
    placed = {state.tasks[b.task].job for b in second.binds}
    jobs, _ = _same(second, third)
    assert placed and not placed & jobs
    # Once more without a change: the jobs carried now keep their carried words and records.
    again = state.schedule(config)
    assert _as_fresh(again, state, config) == _fresh(state, config)
    carried = {n for n, st in third.jobs.items() if st.message.startswith("carried: ")}
    jobs, _ = _same(third, again)
    assert carried and carried <= jobs
    # A running task finishes: its job's counts change (a new record), so does its queue.
    done = next(t for t in state.tasks.values() if t.phase is TaskPhase.BOUND)
    state.set_task_phase(done.name, TaskPhase.SUCCEEDED)
    fourth = state.schedule(config)
    assert _as_fresh(fourth, state, config) == _fresh(state, config)
    assert fourth.jobs[done.job].succeeded == third.jobs[done.job].succeeded + 1
    # A job comes, and a queue's weight changes (every deserved share may move).
    state.add_job(
        gs.model.Job(name="late", queue="q0", min_available=1, phase=JobPhase.INQUEUE),
        [gs.model.Task(name="late-0", job="late", request=gs.model.Resources({"cpu": 1}))],
    )
    fifth = state.schedule(config)
    assert _as_fresh(fifth, state, config) == _fresh(state, config)
    q1 = state.queues["q1"]
    state.update_queue(dataclasses.replace(q1, weight=1))
    sixth = state.schedule(config)
    assert _as_fresh(sixth, state, config) == _fresh(state, config)
    assert sixth.queues["q1"] is not fifth.queues["q1"]


def test_a_job_placed_in_a_cycle_gets_a_new_status_though_its_records_did_not_change() -> None:
    # One 8-cpu node, a running 6-cpu job and a waiting 4-cpu one: the waiting job fits once
    # the running task finishes. Its record and its task records stay those of the first
    # cycle; its counts change inside the second (the change log's entry since the cursor).
    data = {
        "nodes": [{"name": "n0", "allocatable": {"cpu": 8, "pods": 10}}],
        "queues": [{"name": "default"}],
        "jobs": [
            {"name": "run", "min_available": 1, "phase": "Running"},
            {"name": "wait", "min_available": 1, "phase": "Inqueue"},
        ],
        "tasks": [
            {
                "name": "run-0",
                "job": "run",
                "request": {"cpu": 6},
                "node": "n0",
                "phase": "Running",
            },
            {"name": "wait-0", "job": "wait", "request": {"cpu": 4}},
        ],
    }
    state = gs.ClusterState(gs.Snapshot.from_dict(data))
    config = gs.Config.default()
    first = state.schedule(config)
    assert first.jobs["wait"].pending == 1 and not first.binds
    state.set_task_phase("run-0", TaskPhase.SUCCEEDED)
    second = state.schedule(config)
    assert second.jobs["wait"].allocated == 1
    assert second.jobs["wait"] is not first.jobs["wait"]
    assert _as_fresh(second, state, config) == _fresh(state, config)


def test_a_reservation_the_last_cycle_kept_is_a_change_of_its_job() -> None:
    # The last cycle kept an allocation for "wait" on resources being released; the
    # snapshot does not show it (the binder did not act), and this cycle the job is refused
    # by its queue before anything is tried: its counts at this opening differ from those at
    # the last cycle's end.
    data = {
        "nodes": [{"name": "n0", "allocatable": {"cpu": 8, "pods": 10}}],
        "queues": [{"name": "default"}],
        "jobs": [
            {"name": "old", "min_available": 1, "phase": "Running"},
            {"name": "wait", "min_available": 1, "phase": "Inqueue"},
        ],
        "tasks": [
            {
                "name": "old-0",
                "job": "old",
                "request": {"cpu": 6},
                "node": "n0",
                "phase": "Releasing",
            },
            {"name": "wait-0", "job": "wait", "request": {"cpu": 4}},
        ],
    }
    state = gs.ClusterState(gs.Snapshot.from_dict(data))
    config = gs.Config.default()
    first = state.schedule(config)
    assert first.jobs["wait"].pipelined == 1
    second = state.schedule(config)
    assert _as_fresh(second, state, config) == _fresh(state, config)
    assert second.jobs["wait"] == first.jobs["wait"]
    state.update_queue(
        dataclasses.replace(state.queues["default"], state=gs.model.QueueState.CLOSED)
    )
    third = state.schedule(config)
    assert third.jobs["wait"].pipelined == 0
    assert _as_fresh(third, state, config) == _fresh(state, config)


def test_statuses_continue_over_a_change_of_the_node_set() -> None:
    """A node added or removed renumbers the node rows, not the jobs: a job whose record,
    tasks and counts did not move keeps its last status, and every cycle equals a fresh one."""
    state = gs.ClusterState(gs.Snapshot.from_dict(_cluster()))
    config = gs.Config.default()
    state.schedule(config)
    first = state.schedule(config)  # the waiting jobs are carried from here on
    state.add_node(gs.model.Node(name="extra", allocatable=gs.model.Resources({"cpu": 1})))
    second = state.schedule(config)
    assert _as_fresh(second, state, config) == _fresh(state, config)
    jobs, _ = _same(first, second)
    assert jobs
    state.remove_node("extra")
    third = state.schedule(config)
    assert _as_fresh(third, state, config) == _fresh(state, config)
    assert _same(second, third)[0]


def test_a_state_that_does_not_continue_the_log_works_every_status_out_again() -> None:
    state = gs.ClusterState(gs.Snapshot.from_dict(_cluster()))
    config = gs.Config.default()
    first = state.schedule(config)
    # A node with a resource no node had: the resource columns changed, the log starts a
    # new lineage.
    extra = gs.model.Resources({"cpu": 64, "example.com/fpga": 2})
    state.add_node(gs.model.Node(name="extra", allocatable=extra))
    second = state.schedule(config)
    assert _as_fresh(second, state, config) == _fresh(state, config)
    jobs, queues = _same(first, second)
    assert not jobs and not queues


def test_the_close_step_keeps_its_statuses_with_the_logs_position() -> None:
    snap = gs.Snapshot.from_dict(_cluster())
    _, ssn = gs.scheduler.run_cycle(snap, gs.Config.default())
    lineage, cursor, made = ssn.records[JOB_STATUSES]
    assert lineage is ssn.changes.lineage and cursor == ssn.changes.end
    assert set(made) == {j.name for j in snap.jobs}


def _quiet_cluster() -> dict[str, Any]:
    """Two admitted jobs on one node: "run" with a task running and one waiting, "wait"
    with two waiting tasks; cycles of ``enqueue`` alone try neither, so their statuses
    move only with their records, their tasks and their counts."""
    return {
        "nodes": [{"name": "n0", "allocatable": {"cpu": 8, "pods": 10}}],
        "queues": [{"name": "q0"}, {"name": "q1"}],
        "jobs": [
            {"name": "run", "min_available": 2, "phase": "Inqueue", "queue": "q0"},
            {"name": "wait", "min_available": 2, "phase": "Inqueue", "queue": "q1"},
        ],
        "tasks": [
            {
                "name": "run-0",
                "job": "run",
                "request": {"cpu": 2},
                "node": "n0",
                "phase": "Running",
            },
            {"name": "run-1", "job": "run", "request": {"cpu": 2}},
            {"name": "wait-0", "job": "wait", "request": {"cpu": 2}},
            {"name": "wait-1", "job": "wait", "request": {"cpu": 2}},
        ],
    }


_ENQUEUE_ONLY = gs.Config.from_dict({"actions": "enqueue", "tiers": [{"plugins": [
    {"name": "priority"}, {"name": "gang"}]}, {"plugins": [{"name": "proportion"}]}]})  # fmt: skip


def test_a_changed_job_record_is_a_change_between_cycles() -> None:
    state = gs.ClusterState(gs.Snapshot.from_dict(_quiet_cluster()))
    first = state.schedule(_ENQUEUE_ONLY)
    assert not first.jobs["run"].ready
    state.update_job(dataclasses.replace(state.jobs["run"], min_available=1))
    second = state.schedule(_ENQUEUE_ONLY)
    assert second.jobs["run"].ready and second.jobs["run"].min_available == 1
    assert second.jobs["wait"] is first.jobs["wait"]
    assert _canon(second) == _fresh(state, _ENQUEUE_ONLY)


def test_a_task_turned_best_effort_is_a_change_of_its_job() -> None:
    # A pending best-effort task counts toward readiness: the job's counts per state do not
    # move, its task record does.
    state = gs.ClusterState(gs.Snapshot.from_dict(_quiet_cluster()))
    first = state.schedule(_ENQUEUE_ONLY)
    assert not first.jobs["run"].ready
    state.update_task(dataclasses.replace(state.tasks["run-1"], request=gs.model.Resources({})))
    second = state.schedule(_ENQUEUE_ONLY)
    assert second.jobs["run"].ready
    assert _canon(second) == _fresh(state, _ENQUEUE_ONLY)


def test_placements_of_the_last_cycle_the_snapshot_lacks_are_a_change_of_the_job() -> None:
    # A default cycle places "wait"; the binder does not act; a cycle of enqueue alone tries
    # nothing: the job's counts at its opening differ from those at the last cycle's end.
    state = gs.ClusterState(gs.Snapshot.from_dict(_quiet_cluster()))
    first = state.schedule(gs.Config.default())
    assert first.jobs["wait"].allocated == 2
    second = state.schedule(_ENQUEUE_ONLY)
    assert second.jobs["wait"].allocated == 0 and second.jobs["wait"].pending == 2
    assert _canon(second) == _fresh(state, _ENQUEUE_ONLY)


def test_a_closed_queue_whose_jobs_did_not_change_gets_a_new_status() -> None:
    state = gs.ClusterState(gs.Snapshot.from_dict(_quiet_cluster()))
    first = state.schedule(_ENQUEUE_ONLY)
    state.update_queue(dataclasses.replace(state.queues["q1"], state=gs.model.QueueState.CLOSED))
    second = state.schedule(_ENQUEUE_ONLY)
    assert second.queues["q1"].state == "Closed" and first.queues["q1"].state == "Open"
    assert second.queues["q0"] is first.queues["q0"]
    assert _canon(second) == _fresh(state, _ENQUEUE_ONLY)


def test_a_reservation_realised_last_cycle_is_a_change_of_its_job() -> None:
    # "res-0" is reserved (Pipelined) on n0, whose room is idle: a default cycle binds it.
    # The binder does not act, and a cycle of enqueue alone realises nothing: the job holds
    # the same resources at its opening as at the last cycle's end, in another state.
    data = _quiet_cluster()
    data["jobs"].append({"name": "res", "min_available": 1, "phase": "Inqueue", "queue": "q0"})
    data["tasks"].append(
        {
            "name": "res-0",
            "job": "res",
            "request": {"cpu": 1},
            "node": "n0",
            "phase": "Pipelined",
        }
    )
    state = gs.ClusterState(gs.Snapshot.from_dict(data))
    first = state.schedule(gs.Config.default())
    assert first.jobs["res"].allocated == 1 and first.jobs["res"].pipelined == 0
    second = state.schedule(_ENQUEUE_ONLY)
    assert second.jobs["res"].pipelined == 1 and second.jobs["res"].allocated == 0
    assert _canon(second) == _fresh(state, _ENQUEUE_ONLY)


_BACKFILL_ONLY = gs.Config.from_dict({"actions": "backfill", "tiers": [{"plugins": [
    {"name": "priority"}, {"name": "gang"}]}, {"plugins": [{"name": "proportion"}]}]})  # fmt: skip


def test_a_job_admitted_last_cycle_and_not_now_gets_a_new_status_and_so_does_its_queue() -> None:
    # enqueue admits "later" in the first cycle (the session's phase, not its record); the
    # second cycle runs no enqueue: the job is Pending again, with no entry in the log.
    data = _quiet_cluster()
    data["jobs"].append({"name": "later", "min_available": 1, "phase": "Pending", "queue": "q1"})
    data["tasks"].append({"name": "later-0", "job": "later", "request": {"cpu": 1}})
    state = gs.ClusterState(gs.Snapshot.from_dict(data))
    first = state.schedule(_ENQUEUE_ONLY)
    assert first.jobs["later"].phase == "Inqueue" and first.queues["q1"].inqueue == 2
    second = state.schedule(_BACKFILL_ONLY)
    assert second.jobs["later"].phase == "Pending" and second.queues["q1"].inqueue == 1
    assert _canon(second) == _fresh(state, _BACKFILL_ONLY)


def test_a_queue_whose_deserved_share_moved_gets_a_new_status() -> None:
    # q0 asks for more once a job arrives in it: q1's deserved share shrinks, though nothing
    # of q1 changed.
    data = _quiet_cluster()
    data["jobs"][1]["min_available"] = 1
    for task in data["tasks"][:2]:  # q0 asks for 2 cpu, q1 for 8: q1 deserves 6 of 8
        task["request"] = {"cpu": 1}
    data["tasks"] += [{"name": f"wait-{k}", "job": "wait", "request": {"cpu": 2}} for k in (2, 3)]
    state = gs.ClusterState(gs.Snapshot.from_dict(data))
    first = state.schedule(_ENQUEUE_ONLY)
    state.add_job(
        gs.model.Job(name="more", queue="q0", min_available=1, phase=JobPhase.INQUEUE),
        [gs.model.Task(name="more-0", job="more", request=gs.model.Resources({"cpu": 4}))],
    )
    second = state.schedule(_ENQUEUE_ONLY)
    assert second.queues["q1"].deserved != first.queues["q1"].deserved
    assert _canon(second) == _fresh(state, _ENQUEUE_ONLY)
