"""The hostile fuzzer's event streams (``gangsched.testing.hostile.streams``) find nothing.

Each stream feeds a :class:`~gangsched.ClusterState` operations drawn against it: references
out of order, removals under live references, phase changes in every order, stale, foreign
and made-up decisions, wrong argument types, syncs back in time, small limits; and cycles
under one of five configurations. A refused operation must raise a typed error and leave
``to_dict()`` and the generation as they were; an accepted one keeps the snapshot equal to the
interchange form and the change counts complete; a cycle equals a cycle from records, passes
the invariants, and its decisions apply; the same stream gives the same trace.

Default run: ``GANGSCHED_HOSTILE_STREAMS`` seeded streams (60) of ``GANGSCHED_HOSTILE_STEPS``
operations (50), and a derandomized hypothesis run whose draws shrink a failure. The soak
(``GANGSCHED_SOAK=1``, marker ``soak``) runs ``GANGSCHED_HOSTILE_SOAK_STREAMS`` (2,000) streams
of 60 operations: 120,000 operations.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangsched.state import ClusterState
from gangsched.testing.hostile import DrawChooser, RandomChooser
from gangsched.testing.hostile.streams import (
    STREAM_CONFIGS,
    VOLCANO_PREEMPT,
    replay,
    run_stream,
    run_streams,
)

SOAK = os.environ.get("GANGSCHED_SOAK") == "1"
STREAMS = int(os.environ.get("GANGSCHED_HOSTILE_STREAMS", "60"))
STEPS = int(os.environ.get("GANGSCHED_HOSTILE_STEPS", "50"))


def test_seeded_event_streams_break_no_promise() -> None:
    summary = run_streams(streams=STREAMS, steps=STEPS, seed=0)
    assert not summary.failures, summary.table()
    assert summary.operations == STREAMS * STEPS
    # The streams do reach both sides and the cycles.
    assert summary.accepted > summary.operations // 4, summary.table()
    assert summary.refused > summary.operations // 10, summary.table()
    assert summary.cycles > STREAMS, summary.table()


@settings(max_examples=25, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data(), config=st.sampled_from(STREAM_CONFIGS))
def test_drawn_event_streams_break_no_promise(data: st.DataObject, config: str) -> None:
    """For any operation that raises, ``state.to_dict()`` before == after (and the other
    promises), on streams hypothesis draws and shrinks."""
    summary, _ = run_stream(DrawChooser(data.draw), steps=30, config_name=config)
    assert not summary.failures, summary.table()


def test_a_stream_replays_to_the_same_trace() -> None:
    one = run_stream(RandomChooser("7:3"), steps=60, config_name="preempt")
    two = run_stream(RandomChooser("7:3"), steps=60, config_name="preempt")
    assert one[1] == two[1] and len(one[1]) > 60
    assert replay(7, 3, 60).operations == 60


@pytest.mark.parametrize("index", [15, 78, 183, 246, 591])
def test_streams_with_carried_jobs_compare_their_words_as_carried(index: int) -> None:
    """Streams of the soak (seed 1) where the state's cycle carries a waiting job's words
    (``carried: ...``, the retry contract) and a cycle from records words it afresh: the
    decisions are the same, the words are compared as the fresh cycle's."""
    summary = replay(1, index, 60)
    assert not summary.failures, summary.table()
    assert summary.cycles > 0


def test_the_streams_catch_carried_words_on_a_decision(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the words may be carried: a carried job whose phase is another is caught."""
    import gangsched.testing._carried as carried_module

    real = carried_module.uncarried

    def lenient(d: Any, fresh: Any) -> Any:
        out = real(d, fresh)
        jobs = {name: dataclasses.replace(s, phase="Pending") for name, s in out.jobs.items()}
        return dataclasses.replace(out, jobs=jobs)

    monkeypatch.setattr(carried_module, "uncarried", lenient)
    summary = replay(1, 15, 60)
    assert {f.category for f in summary.failures} == {"equivalence"}, summary.table()


def test_the_streams_catch_a_lost_removal(monkeypatch: pytest.MonkeyPatch) -> None:
    """A state that forgets its removed nodes is caught (the checks can fail)."""
    monkeypatch.setattr(ClusterState, "removed_nodes", lambda self: ())
    summary = run_streams(streams=15, steps=50, seed=0, determinism_every=0)
    assert {f.category for f in summary.failures} == {"change-count"}, summary.table()


def test_the_streams_catch_a_half_applied_refusal(monkeypatch: pytest.MonkeyPatch) -> None:
    """A state that cordons a node before it checks whether the node may go is caught."""
    real = ClusterState.remove_node

    def remove_node(self: ClusterState, name: str) -> None:
        if isinstance(name, str) and name in self.nodes:
            self.cordon(name, not self.nodes[name].unschedulable)
        real(self, name)

    monkeypatch.setattr(ClusterState, "remove_node", remove_node)
    summary = run_streams(streams=15, steps=50, seed=0, determinism_every=0)
    assert "half-applied" in {f.category for f in summary.failures}, summary.table()


@pytest.mark.skipif(not SOAK, reason="soak: GANGSCHED_SOAK=1")
@pytest.mark.soak
def test_soak_event_streams() -> None:
    streams = int(os.environ.get("GANGSCHED_HOSTILE_SOAK_STREAMS", "2000"))
    seed = int(os.environ.get("GANGSCHED_HOSTILE_SOAK_SEED", "1"))
    summary = run_streams(streams=streams, steps=60, seed=seed)
    print(summary.table())
    assert not summary.failures, summary.table()


def test_streams_under_volcanos_preemption_configuration() -> None:
    """Volcano's preemption configuration read from its YAML (the Volcano walk, reclaim, the
    tier walk as Volcano's): each cycle on the state equals a cycle from records."""
    summary = run_streams(streams=12, steps=60, seed=2, configs=(VOLCANO_PREEMPT,))
    assert summary.cycles >= 100, summary.table()
    assert not summary.failures, summary.table()


@pytest.mark.skipif(not SOAK, reason="soak: GANGSCHED_SOAK=1")
@pytest.mark.soak
def test_soak_event_streams_under_volcanos_preemption_configuration() -> None:
    streams = int(os.environ.get("GANGSCHED_VOLCANO_SOAK_STREAMS", "1000"))
    summary = run_streams(streams=streams, steps=60, seed=91, configs=(VOLCANO_PREEMPT,))
    print(summary.table())
    assert not summary.failures, summary.table()
