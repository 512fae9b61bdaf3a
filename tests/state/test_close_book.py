"""The close step's book: the job statuses a cycle passes to the next, which looks again only at
the jobs the change log names and at those whose phase, words or being lost may have moved.
Every cycle of a long-lived state equals a fresh cycle on the same records, whatever moved."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import gangsched as gs
from _state_cases import zoned_cluster
from gangsched.model import JobPhase, TaskPhase
from gangsched.session.close import JOB_BOOK, JOB_STATUSES
from gangsched.testing._carried import uncarried

_ENQUEUE_ONLY = gs.Config.from_dict({"actions": "enqueue", "tiers": [{"plugins": [
    {"name": "priority"}, {"name": "gang"}]}, {"plugins": [{"name": "proportion"}]}]})  # fmt: skip
_BACKFILL_ONLY = gs.Config.from_dict({"actions": "backfill", "tiers": [{"plugins": [
    {"name": "priority"}, {"name": "gang"}]}, {"plugins": [{"name": "proportion"}]}]})  # fmt: skip


def _canon(d: gs.Decisions) -> str:
    return json.dumps(d.to_dict(), sort_keys=True)


def _check(d: gs.Decisions, state: gs.ClusterState, config: gs.Config) -> None:
    """``d`` (words of carried jobs aside) is the decisions of a fresh cycle on the state's
    records."""
    fresh = gs.schedule(gs.Snapshot.from_dict(state.snapshot().to_dict()), config)
    assert _canon(uncarried(d, fresh)) == _canon(fresh)


def _lone_node(jobs: list[dict[str, Any]], tasks: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "nodes": [{"name": "n0", "allocatable": {"cpu": 8, "pods": 10}}],
        "queues": [{"name": "q0"}, {"name": "q1"}],
        "jobs": jobs,
        "tasks": tasks,
    }


def _half_running() -> dict[str, Any]:
    """A gang of two with one task running and one that never fits: a cycle that tries it
    finds it lost (Unknown), a cycle that does not, Pending."""
    return _lone_node(
        [{"name": "big", "min_available": 2, "phase": "Running", "queue": "q0"}],
        [
            {
                "name": "big-0",
                "job": "big",
                "request": {"cpu": 4},
                "node": "n0",
                "phase": "Running",
            },
            {"name": "big-1", "job": "big", "request": {"cpu": 6}},
        ],
    )


def test_a_job_lost_then_not_tried_gets_a_new_status() -> None:
    # Nothing of "big" changes between the cycles (record, tasks, counts): only its being
    # unschedulable while it runs does.
    state = gs.ClusterState(gs.Snapshot.from_dict(_half_running()))
    first = state.schedule(gs.Config.default())
    assert first.jobs["big"].phase == "Unknown"
    second = state.schedule(_ENQUEUE_ONLY)
    assert second.jobs["big"].phase != "Unknown"
    _check(second, state, _ENQUEUE_ONLY)


def test_a_running_job_found_lost_gets_a_new_status() -> None:
    state = gs.ClusterState(gs.Snapshot.from_dict(_half_running()))
    first = state.schedule(_ENQUEUE_ONLY)
    assert first.jobs["big"].phase != "Unknown"
    for config in (gs.Config.default(), _ENQUEUE_ONLY, gs.Config.default()):
        d = state.schedule(config)
        _check(d, state, config)
        assert (d.jobs["big"].phase == "Unknown") is (config is not _ENQUEUE_ONLY)


def test_a_job_whose_words_alone_moved_gets_a_new_status() -> None:
    # "wide" never fits (12 cpu on an 8-cpu node): enqueue refuses it each cycle. Its queue
    # closes: the same job, the same counts, other words.
    data = _lone_node(
        [{"name": "wide", "min_available": 1, "phase": "Pending", "queue": "q1"}],
        [{"name": "wide-0", "job": "wide", "request": {"cpu": 12}}],
    )
    state = gs.ClusterState(gs.Snapshot.from_dict(data))
    first = state.schedule(_ENQUEUE_ONLY)
    again = state.schedule(_ENQUEUE_ONLY)
    assert again.jobs["wide"] is first.jobs["wide"]
    closed = dataclasses.replace(state.queues["q1"], state=gs.model.QueueState.CLOSED)
    state.update_queue(closed)
    second = state.schedule(_ENQUEUE_ONLY)
    assert second.jobs["wide"].message != first.jobs["wide"].message
    _check(second, state, _ENQUEUE_ONLY)
    state.update_queue(dataclasses.replace(closed, state=gs.model.QueueState.OPEN))
    third = state.schedule(_ENQUEUE_ONLY)
    assert third.jobs["wide"].message == first.jobs["wide"].message
    _check(third, state, _ENQUEUE_ONLY)


def test_a_job_admitted_and_then_left_pending_gets_a_new_status() -> None:
    # enqueue admits "later" (the session's phase, not its record); the next cycle runs no
    # enqueue, then one does again: its phase moves each time, its record never.
    data = _lone_node(
        [{"name": "later", "min_available": 1, "phase": "Pending", "queue": "q0"}],
        [{"name": "later-0", "job": "later", "request": {"cpu": 1}}],
    )
    state = gs.ClusterState(gs.Snapshot.from_dict(data))
    phases = []
    for config in (_ENQUEUE_ONLY, _BACKFILL_ONLY, _ENQUEUE_ONLY, _ENQUEUE_ONLY):
        d = state.schedule(config)
        _check(d, state, config)
        phases.append(d.jobs["later"].phase)
    assert phases == ["Inqueue", "Pending", "Inqueue", "Inqueue"]


def test_a_removed_job_leaves_the_statuses_and_its_queue() -> None:
    state = gs.ClusterState(gs.Snapshot.from_dict(zoned_cluster(3, 8)))
    config = gs.Config.default()
    state.schedule(config)
    state.schedule(config)
    state.remove_job("j5", with_tasks=True)
    d = state.schedule(config)
    assert "j5" not in d.jobs
    _check(d, state, config)
    # and a job of that name comes back, another one
    state.add_job(
        gs.model.Job(name="j5", min_available=1, phase=JobPhase.INQUEUE),
        [gs.model.Task(name="j5-x", job="j5", request=gs.model.Resources({"cpu": 1}))],
    )
    d = state.schedule(config)
    assert d.jobs["j5"].min_available == 1
    _check(d, state, config)


def test_inqueue_reservations_follow_the_admitted_jobs_with_a_minimum() -> None:
    # "res" asks for a minimum of 4 cpu and is admitted by a cycle of enqueue: its queue
    # reserves the minimum while the job holds less, then what it lacks once a task binds.
    data = _lone_node(
        [
            {
                "name": "res",
                "min_available": 2,
                "phase": "Pending",
                "queue": "q0",
                "min_resources": {"cpu": 4},
            },
            {"name": "other", "min_available": 1, "phase": "Inqueue", "queue": "q1"},
        ],
        [
            {"name": "res-0", "job": "res", "request": {"cpu": 2}},
            {"name": "res-1", "job": "res", "request": {"cpu": 2}},
            {"name": "other-0", "job": "other", "request": {"cpu": 1}},
        ],
    )
    state = gs.ClusterState(gs.Snapshot.from_dict(data))
    first = state.schedule(_ENQUEUE_ONLY)
    assert first.queues["q0"].inqueue_resources == {"cpu": 4000}
    _check(first, state, _ENQUEUE_ONLY)
    state.update_job(dataclasses.replace(state.jobs["res"], phase=JobPhase.INQUEUE))
    state.set_task_phase("res-0", TaskPhase.RUNNING, node="n0")
    second = state.schedule(_ENQUEUE_ONLY)
    assert second.queues["q0"].inqueue_resources == {"cpu": 2000}
    _check(second, state, _ENQUEUE_ONLY)
    third = state.schedule(_BACKFILL_ONLY)
    _check(third, state, _BACKFILL_ONLY)


def test_job_actions_follow_the_jobs_whose_records_name_policies() -> None:
    data = _half_running()
    data["jobs"][0]["policies"] = [{"event": "Unknown", "action": "RestartJob"}]
    state = gs.ClusterState(gs.Snapshot.from_dict(data))
    for config in (_ENQUEUE_ONLY, gs.Config.default(), gs.Config.default(), _ENQUEUE_ONLY):
        d = state.schedule(config)
        _check(d, state, config)
        assert bool(d.job_actions) is (config is not _ENQUEUE_ONLY)
    state.update_job(dataclasses.replace(state.jobs["big"], policies=()))
    d = state.schedule(gs.Config.default())
    assert not d.job_actions
    _check(d, state, gs.Config.default())


def test_a_busy_state_equals_a_fresh_one_every_cycle() -> None:
    """Jobs bind, finish, leave and come, a queue closes and opens, the actions change: each
    cycle is a fresh one."""
    queues = [{"name": "q0", "weight": 1}, {"name": "q1", "weight": 2}]
    state = gs.ClusterState(gs.Snapshot.from_dict(zoned_cluster(3, 14, queues=queues)))
    configs = [gs.Config.default(), _ENQUEUE_ONLY, gs.Config.default(), _BACKFILL_ONLY]
    for cycle in range(10):
        config = configs[cycle % len(configs)]
        d = state.schedule(config)
        _check(d, state, config)
        if cycle % 2 == 0:
            state.apply(d)
        running = sorted(t.name for t in state.tasks.values() if t.phase is TaskPhase.BOUND)
        if running and cycle % 3 == 1:
            state.set_task_phase(running[0], TaskPhase.SUCCEEDED)
        if cycle == 3:
            state.remove_job("j2", with_tasks=True)
        if cycle == 4:
            state.add_job(
                gs.model.Job(name="late", queue="q1", min_available=2, phase=JobPhase.PENDING),
                [
                    gs.model.Task(
                        name=f"late-{k}", job="late", request=gs.model.Resources({"cpu": 3})
                    )
                    for k in range(2)
                ],
            )
        if cycle in (5, 7):
            q = state.queues["q0"]
            flip = gs.model.QueueState.CLOSED if cycle == 5 else gs.model.QueueState.OPEN
            state.update_queue(dataclasses.replace(q, state=flip))


def test_the_book_passes_to_the_next_cycle_alone() -> None:
    """A cycle takes the last one's book: the finished session keeps it no more, so no other
    cycle updates the same book."""
    snap = gs.Snapshot.from_dict(_half_running())
    _, first = gs.scheduler.run_cycle(snap, gs.Config.default())
    assert JOB_BOOK in first.records and JOB_STATUSES in first.records
    _, second = gs.scheduler.run_cycle(snap, gs.Config.default(), previous=first)
    assert JOB_BOOK not in first.records and JOB_STATUSES not in first.records
    assert JOB_BOOK in second.records


class _Forsake:
    """An action that marks the jobs it names unschedulable and says nothing else: their
    being lost moves with no word and no change of theirs."""

    name = "forsake"

    def __init__(self, arguments: Any) -> None:
        self.jobs = tuple(str(j) for j in arguments.get("jobs", ()))

    def execute(self, ssn: Any) -> None:
        for name in self.jobs:
            ssn.unschedulable_jobs.add(ssn.snapshot.job_index[name])


def _forsaking(registry: gs.Registry, *jobs: str) -> gs.Config:
    return gs.Config.from_dict(
        {
            "actions": "forsake",
            "tiers": [[{"name": "priority"}, {"name": "gang"}]],
            "configurations": {"forsake": {"jobs": list(jobs)}},
        },
        actions=registry.actions,
    )


def test_a_job_lost_or_found_without_a_word_gets_a_new_status() -> None:
    reg = gs.default_registry()
    reg.register_action("forsake", _Forsake, arguments=("jobs",))
    state = gs.ClusterState(gs.Snapshot.from_dict(_half_running()))
    phases, words = [], set()
    for jobs in ((), ("big",), ("big",), (), ("big",)):
        config = _forsaking(reg, *jobs)
        d = state.schedule(config, registry=reg)
        fresh = gs.schedule(gs.Snapshot.from_dict(state.snapshot().to_dict()), config, registry=reg)
        assert _canon(d) == _canon(fresh)
        phases.append(d.jobs["big"].phase)
        words.add((d.jobs["big"].reason, d.jobs["big"].message))
    assert phases == ["Pending", "Unknown", "Unknown", "Pending", "Unknown"]
    assert len(words) == 1  # the same words all along: only its being lost moved
