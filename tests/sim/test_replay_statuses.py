"""The replay engine looks at the job statuses it has not seen yet: a status seen before moves
nothing, unless the job's phase or waiting moved since it was seen."""

from __future__ import annotations

from test_sim_replay import SIMPLE, job, trace

from gangsched._frozen import FrozenDict
from gangsched.decisions import Decisions, JobStatus
from gangsched.model import JobPhase
from gangsched.sim.replay import ReplayOptions
from gangsched.sim.replay.engine import ARRIVE, Engine


def _phase(engine: Engine, name: str) -> JobPhase:
    return engine.state.jobs[name].phase


def _said(statuses: dict[str, JobStatus]) -> Decisions:
    return Decisions(jobs=FrozenDict(statuses))


def test_a_status_seen_before_a_restart_admits_the_job_again() -> None:
    engine = Engine(trace([job("A", 0, 10), job("B", 0, 10)]), ReplayOptions(config=SIMPLE), None)
    engine.apply_event(0.0, ARRIVE, 0, 0)
    engine.apply_event(0.0, ARRIVE, 1, 0)
    admitted, waiting = JobStatus(phase="Inqueue"), JobStatus(phase="Pending")
    engine.apply(_said({"A": admitted, "B": waiting}), 0.0)
    assert _phase(engine, "A") is JobPhase.INQUEUE
    assert _phase(engine, "B") is JobPhase.PENDING
    # The same status objects again: nothing to move.
    engine.apply(_said({"A": admitted, "B": waiting}), 1.0)
    assert _phase(engine, "A") is JobPhase.INQUEUE
    # A restart puts A back to its trace phase (Pending); the very status object it had
    # before, seen again, admits it again.
    engine._restart(0)
    assert _phase(engine, "A") is JobPhase.PENDING
    engine.apply(_said({"A": admitted, "B": waiting}), 2.0)
    assert _phase(engine, "A") is JobPhase.INQUEUE


def test_a_new_status_of_a_seen_job_is_looked_at() -> None:
    engine = Engine(trace([job("A", 0, 10)]), ReplayOptions(config=SIMPLE), None)
    engine.apply_event(0.0, ARRIVE, 0, 0)
    engine.apply(_said({"A": JobStatus(phase="Pending")}), 0.0)
    assert _phase(engine, "A") is JobPhase.PENDING
    engine.apply(_said({"A": JobStatus(phase="Inqueue")}), 1.0)
    assert _phase(engine, "A") is JobPhase.INQUEUE
    engine.apply(_said({"A": JobStatus(phase="Pending")}), 2.0)
    assert _phase(engine, "A") is JobPhase.PENDING
