"""A ``ClusterState`` lets each finished session go once the next cycle has taken over what it
lends: the session's dispatcher, gate and evaluator point back at it, so without
:meth:`Session.release` every cycle would leave a web of reference cycles (the session, its
templates, statuses and plugins) for the cyclic garbage collector."""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator
from typing import cast
from pathlib import Path

import pytest

from gangsched import ClusterState, Config, Snapshot, TaskPhase, schedule
from gangsched.session.core import Session

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from benchmarks.common import cluster_dict

CONFIG = Config.default()


@pytest.fixture
def no_collector() -> Iterator[None]:
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
        gc.collect()


def _sessions() -> list[Session]:
    return [o for o in gc.get_objects() if type(o) is Session]


def _cycle(state: ClusterState) -> None:
    """One cycle whose decisions are applied (the cluster moves between cycles)."""
    state.apply(state.schedule(CONFIG), bound=TaskPhase.RUNNING)


def test_only_the_last_session_outlives_its_cycle(no_collector: None) -> None:
    state = ClusterState(Snapshot.from_dict(cluster_dict(12, 60, seed=3)))
    before = len(_sessions())
    for _ in range(4):
        _cycle(state)
    # Without release, each of the four cycles' sessions stays in a reference cycle until the
    # collector runs (here: never).
    assert len(_sessions()) - before == 1
    last = state.__dict__["_last_session"]
    assert hasattr(last, "evaluator") and hasattr(last, "points")


def test_a_released_session_lent_what_the_next_cycle_needs() -> None:
    """Releasing the previous session changes no decision: each cycle equals a fresh one."""
    state = ClusterState(Snapshot.from_dict(cluster_dict(12, 60, seed=5)))
    binds = 0
    for _ in range(4):
        fresh = schedule(Snapshot.from_dict(state.snapshot().to_dict()), CONFIG)
        out = state.schedule(CONFIG)
        assert out.binds == fresh.binds
        assert out.pipelined == fresh.pipelined
        assert {n: s.phase for n, s in out.jobs.items()} == {
            n: s.phase for n, s in fresh.jobs.items()
        }
        binds += len(out.binds)
        state.apply(out, bound=TaskPhase.RUNNING)
    assert binds  # the cluster moved


def test_release_drops_the_references_back_to_the_session() -> None:
    state = ClusterState(Snapshot.from_dict(cluster_dict(6, 12, seed=1)))
    state.schedule(CONFIG)
    first = state.__dict__["_last_session"]
    assert first.evaluator is not None
    state.schedule(CONFIG)
    assert state.__dict__["_last_session"] is not first
    for name in ("points", "gate", "evaluator"):
        assert not hasattr(first, name)


def test_a_released_session_handed_as_previous_is_a_typed_error() -> None:
    from gangsched.errors import ConfigError
    from gangsched.scheduler import run_cycle

    snap = Snapshot.from_dict(cluster_dict(4, 8, seed=2))
    _, ssn = run_cycle(snap, CONFIG)
    assert not ssn.released
    ssn.release()
    assert ssn.released
    with pytest.raises(ConfigError, match="released") as err:
        run_cycle(snap, CONFIG, previous=ssn)
    assert err.value.field == "previous"
    with pytest.raises(ConfigError, match="Session or None"):
        run_cycle(snap, CONFIG, previous=cast(Session, "last"))
