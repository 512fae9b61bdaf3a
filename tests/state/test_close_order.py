"""The close step keeps the job statuses it passes from cycle to cycle in the order of the jobs'
names, so that a cycle's decisions copy them without a sort: whatever names come and go, every
cycle's mappings are in sorted order and equal, item for item and in order, a fresh cycle's."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

import gangsched as gs
import gangsched.session.close as close
from _carried import uncarried
from _preemption_helpers import TIERS, job, node, pending, running, snap
from _preemption_helpers import config as pconfig
from _state_cases import zoned_cluster
from gangsched.model import JobPhase, TaskPhase
from gangsched.session.close import JOB_BOOK
from gangsched.session.rules.gang import pending_tasks

_ENQUEUE_ONLY = gs.Config.from_dict({"actions": "enqueue", "tiers": [{"plugins": [
    {"name": "priority"}, {"name": "gang"}]}, {"plugins": [{"name": "proportion"}]}]})  # fmt: skip
_BACKFILL_ONLY = gs.Config.from_dict({"actions": "backfill", "tiers": [{"plugins": [
    {"name": "priority"}, {"name": "gang"}]}, {"plugins": [{"name": "proportion"}]}]})  # fmt: skip


def _in_order(d: gs.Decisions) -> list[tuple[str, list[str]]]:
    """Each mapping of ``d`` (and of its queue statuses) as its keys in its own order."""
    out = [(f, list(getattr(d, f))) for f in ("jobs", "queues", "task_reasons", "placements")]
    for name, status in d.queues.items():
        for f in ("allocated", "deserved", "request", "pending_resources", "real_capability"):
            out.append((f"{name}.{f}", list(getattr(status, f))))
    return out


def _check(d: gs.Decisions, state: gs.ClusterState, config: gs.Config) -> None:
    """Every mapping of ``d`` is in sorted order, and ``d`` (words of carried jobs aside) is a
    fresh cycle's decisions, item for item and in order."""
    for field, keys in _in_order(d):
        assert keys == sorted(keys), field
    fresh = gs.schedule(gs.Snapshot.from_dict(state.snapshot().to_dict()), config)
    same = uncarried(d, fresh)
    assert list(same.jobs.items()) == list(fresh.jobs.items())
    assert list(same.queues.items()) == list(fresh.queues.items())
    assert list(same.task_reasons.items()) == list(fresh.task_reasons.items())


def _job(name: str, size: int, queue: str = "q0") -> tuple[gs.model.Job, list[gs.model.Task]]:
    job = gs.model.Job(name=name, queue=queue, min_available=size, phase=JobPhase.PENDING)
    tasks = [
        gs.model.Task(name=f"{name}-{k}", job=name, request=gs.model.Resources({"cpu": 2}))
        for k in range(size)
    ]
    return job, tasks


def test_job_statuses_stay_in_name_order_as_jobs_come_and_go() -> None:
    queues = [{"name": "q0", "weight": 1}, {"name": "q1", "weight": 2}]
    state = gs.ClusterState(gs.Snapshot.from_dict(zoned_cluster(3, 9, queues=queues)))
    config = gs.Config.default()
    # Names that sort before every name there ("a..."), between two ("j15" after "j1"),
    # after every one ("z..."), and several in one cycle out of order with one another.
    arrivals: dict[int, list[str]] = {
        1: ["a-first"],
        2: ["z-last"],
        3: ["j15", "zz", "b-second"],
        5: ["j5"],  # (a name that left in cycle 4 comes back)
        6: ["zzz", "zzzz"],  # after every name, in order: no sort
    }
    for cycle in range(8):
        for name in arrivals.get(cycle, []):
            state.add_job(*_job(name, 1 + len(name) % 2, queue="q1" if cycle % 2 else "q0"))
        if cycle == 4:
            state.remove_job("j5", with_tasks=True)
            state.remove_job("a-first", with_tasks=True)
        d = state.schedule(config)
        _check(d, state, config)
        if cycle % 2 == 0:
            state.apply(d)
        running = sorted(t.name for t in state.tasks.values() if t.phase is TaskPhase.BOUND)
        if running and cycle % 3 == 1:
            state.set_task_phase(running[0], TaskPhase.SUCCEEDED)


def test_the_book_keeps_its_statuses_in_name_order() -> None:
    # The book a cycle passes on holds its statuses in sorted order (the next cycle copies
    # them into its decisions as they are), after a cycle whose new jobs came out of order.
    state = gs.ClusterState(gs.Snapshot.from_dict(zoned_cluster(2, 4)))
    config = gs.Config.default()
    state.schedule(config)
    state.add_job(*_job("a-first", 1, queue="default"))
    state.add_job(*_job("j0b", 2, queue="default"))
    d = state.schedule(config)
    _, ssn = gs.scheduler.run_cycle(state.snapshot(), config)
    book = ssn.records[JOB_BOOK][1]
    assert list(book.statuses) == sorted(book.statuses) == list(d.jobs)


def test_a_noted_job_keeps_its_place_in_the_order() -> None:
    # The sla plugin holds two nodes for "big" and notes it on its status (the decisions'
    # status, not the book's): the noted status takes the job's place among the names.
    sla = pconfig(
        "enqueue",
        "allocate",
        tiers=[[*TIERS[0], {"name": "sla", "arguments": {"sla-waiting-time": "10m"}}], TIERS[1]],
    )
    jobs = [job("s1", 1, walltime=100), job("s2", 1, walltime=300)]
    jobs += [job("big", 2, phase="Inqueue", age=1000), job("zz", 1, phase="Inqueue")]
    tasks = running("s1", [("n0", [0, 1])], gpus=2) + running("s2", [("n1", [0, 1])], gpus=2)
    tasks += pending("big", 2, gpus=4) + pending("zz", 1, gpus=4)
    state = gs.ClusterState(snap([node("n0"), node("n1")], jobs, tasks))
    for _ in range(2):
        d = state.schedule(sla)
        assert "held for it" in d.jobs["big"].message
        assert list(d.jobs) == ["big", "s1", "s2", "zz"]
        _check(d, state, sla)


def _book_of(ssn: Any) -> Any:
    return ssn.records[JOB_BOOK][1]


def test_the_book_a_cycle_passes_on_is_the_one_a_fresh_cycle_makes() -> None:
    """The book patched cycle after cycle (jobs bind, finish, leave, come, are admitted, get
    lost; a queue closes) holds what a fresh cycle's book holds: its sets of lost, running,
    unsettled, asking and reserving jobs, its jobs per queue and phase, the jobs with words."""
    queues = [{"name": "q0", "weight": 1}, {"name": "q1", "weight": 2}]
    data = zoned_cluster(3, 14, queues=queues)
    for k, rec in enumerate(data["jobs"]):
        if k % 3 == 0:
            rec["phase"] = "Pending"
        if k % 4 == 1:
            rec["min_resources"] = {"cpu": 2}
        if k % 5 == 2:
            rec["policies"] = [{"event": "PodEvicted", "action": "RestartJob"}]
    state = gs.ClusterState(gs.Snapshot.from_dict(data))
    configs = [gs.Config.default(), _ENQUEUE_ONLY, gs.Config.default(), _BACKFILL_ONLY]
    for cycle in range(12):
        config = configs[cycle % len(configs)]
        d = state.schedule(config)
        _check(d, state, config)
        kept = _book_of(state.__dict__["_last_session"])
        _, fresh_ssn = gs.scheduler.run_cycle(
            gs.Snapshot.from_dict(state.snapshot().to_dict()), config
        )
        fresh = _book_of(fresh_ssn)
        for part in ("lost", "running", "unsettled", "asking", "reserving", "phases_of"):
            got, want = getattr(kept, part), getattr(fresh, part)
            if part == "phases_of":  # (a queue left with no job keeps its zeros)
                got = {q: c for q, c in got.items() if any(c)}
                want = {q: c for q, c in want.items() if any(c)}
            assert got == want, (cycle, part)
        assert kept.words.keys() == fresh.words.keys()
        assert list(kept.statuses) == list(fresh.statuses)
        if cycle % 2 == 0:
            state.apply(d)
        running = sorted(t.name for t in state.tasks.values() if t.phase is TaskPhase.BOUND)
        if running and cycle % 3 == 1:
            state.set_task_phase(running[0], TaskPhase.SUCCEEDED)
        if cycle == 3:
            state.remove_job("j2", with_tasks=True)
        if cycle in (4, 8):
            state.add_job(*_job(f"a{cycle}", 2, queue="q1"))
        if cycle in (5, 7):
            q = state.queues["q0"]
            flip = gs.model.QueueState.CLOSED if cycle == 5 else gs.model.QueueState.OPEN
            state.update_queue(dataclasses.replace(q, state=flip))


def test_pending_best_effort_tasks_per_job_are_the_sessions() -> None:
    # best-effort tasks (no request) pending, placed and in jobs of their own
    data = zoned_cluster(2, 6)
    data["tasks"] += [
        {"name": f"be{j}-{k}", "job": f"j{j}", "request": {}} for j in (1, 4) for k in range(j)
    ]
    data["jobs"].append({"name": "only-be", "min_available": 2, "phase": "Inqueue"})
    data["tasks"] += [{"name": f"only-be-{k}", "job": "only-be", "request": {}} for k in range(3)]
    snap = gs.Snapshot.from_dict(data)
    for config in (gs.Config.default(), _ENQUEUE_ONLY):
        _, ssn = gs.scheduler.run_cycle(snap, config)
        got = close._pending_best_effort(ssn)
        assert got == [ssn.pending_best_effort(j) for j in range(len(snap.jobs))]
        pending, best_effort = pending_tasks(ssn)  # (by the templates)
        assert got == np.bincount(ssn.task_job[pending[best_effort]], minlength=len(got)).tolist()
    assert sum(got) == 3 + 1 + 4
    _, plain = gs.scheduler.run_cycle(gs.Snapshot.from_dict(zoned_cluster(2, 6)), _ENQUEUE_ONLY)
    assert close._pending_best_effort(plain) == [0] * 6


def test_statuses_kept_by_shape_are_those_a_cycle_makes(monkeypatch: pytest.MonkeyPatch) -> None:
    # A status kept by what it is made of serves any job of that shape in a later cycle; the
    # ones kept start over past the bound. Either way each cycle is a fresh one.
    made: list[str] = []
    job_status = close._job_status

    def counted(ssn: Any, j: int, count: Any, best_effort: int) -> Any:
        made.append(ssn.snapshot.jobs[j].name)
        return job_status(ssn, j, count, best_effort)

    monkeypatch.setattr(close, "_job_status", counted)
    for bound, fewer in ((close._SHAPES_KEPT, True), (0, False)):
        monkeypatch.setattr(close, "_SHAPES_KEPT", bound)
        state = gs.ClusterState(gs.Snapshot.from_dict(zoned_cluster(2, 6)))
        config = gs.Config.default()
        state.schedule(config)
        made.clear()
        for cycle in range(4):  # the same kind of job comes each cycle, under another name
            state.add_job(*_job(f"late{cycle}", 1, queue="default"))
            d = state.schedule(config)
            _check(d, state, config)
            shapes = _book_of(state.__dict__["_last_session"]).shapes
            assert len(shapes) <= max(bound, 10)
        # (kept: the later ones of the same shape take the status the first one made)
        late = [name for name in made if name.startswith("late")]
        assert (len(late) <= 1) if fewer else (len(late) == 4), late


def test_pending_tasks_words_follow_every_change() -> None:
    # Tasks too big for any node wait cycle after cycle. The mapping of their words is the
    # last cycle's while the waiting tasks and their words are; it follows a change of words
    # (the queue closes), of the tasks (one leaves as another with as many tasks comes) and
    # of the names' order (a name that sorts first).
    data = zoned_cluster(2, 3)
    data["jobs"] += [{"name": f"w{k}", "min_available": 1} for k in range(4)]
    data["tasks"] += [
        {"name": f"w{k}-0", "job": f"w{k}", "request": {"cpu": 64}} for k in (3, 1, 0, 2)
    ]
    state = gs.ClusterState(gs.Snapshot.from_dict(data))
    config = gs.Config.default()
    placed = state.schedule(config)
    _check(placed, state, config)
    state.apply(placed)
    _check(state.schedule(config), state, config)
    first = state.schedule(config)  # (the jobs not tried again carry their words from now)
    _check(first, state, config)
    again = state.schedule(config)
    _check(again, state, config)
    assert again.task_reasons is first.task_reasons
    default = state.queues["default"]
    state.update_queue(dataclasses.replace(default, state=gs.model.QueueState.CLOSED))
    closed = state.schedule(config)
    _check(closed, state, config)
    assert list(closed.task_reasons) == list(first.task_reasons)
    assert closed.task_reasons != first.task_reasons
    state.remove_job("w1", with_tasks=True)
    job, tasks = _job("v", 1, queue="default")
    state.add_job(job, [dataclasses.replace(tasks[0], request=gs.model.Resources({"cpu": 64000}))])
    swapped = state.schedule(config)
    _check(swapped, state, config)
    assert len(swapped.task_reasons) == len(closed.task_reasons)
    assert "v-0" in swapped.task_reasons and "w1-0" not in swapped.task_reasons
    state.add_job(*_job("a-first", 1, queue="default"))
    d = state.schedule(config)
    _check(d, state, config)
    assert next(iter(d.task_reasons)) == "a-first-0"
