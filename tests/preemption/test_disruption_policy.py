"""Who may disrupt, and when: ``preemption_policy: Never`` and ``preemption_delay``.

A Never task keeps its priority for ordering but makes neither preempt nor reclaim evict; a
job with a delay evicts only once its age reaches it, and says how long is left."""

from __future__ import annotations

from typing import Any

import pytest

import gangsched as gs
from _preemption_helpers import (
    PREEMPT,
    RECLAIM,
    evicted,
    job,
    node,
    pending,
    running,
    snap,
)
from gangsched.actions.victims import rules as victim_rules


def _low_fills_one_node(**high: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    jobs = [job("low", 4, priority=1), job("high", 4, priority=10, phase="Inqueue", **high)]
    tasks = running("low", [("n0", [i]) for i in range(4)])
    return jobs, tasks


def test_never_task_waits_without_evicting() -> None:
    jobs, tasks = _low_fills_one_node()
    tasks += pending("high", 4, preemption_policy="Never")
    d = gs.schedule(snap([node("n0")], jobs, tasks), PREEMPT)
    assert d.evictions == () and d.pipelined == ()
    why = d.preemption_reasons["high"]
    assert why.startswith(f"preempt: {victim_rules.POLICY_NEVER}:")
    assert "'high-0' has preemption_policy Never" in why


def test_the_same_job_without_never_evicts() -> None:
    # The control of the test above: only the policy held it.
    jobs, tasks = _low_fills_one_node()
    tasks += pending("high", 4)
    d = gs.schedule(snap([node("n0")], jobs, tasks), PREEMPT)
    assert evicted(d) == {f"low-{i}" for i in range(4)}


def test_one_never_task_in_the_claim_holds_the_whole_gang() -> None:
    jobs, tasks = _low_fills_one_node()
    tasks += pending("high", 3) + pending("high", 1, start=3, preemption_policy="Never")
    d = gs.schedule(snap([node("n0")], jobs, tasks), PREEMPT)
    assert d.evictions == ()
    assert "'high-3' has preemption_policy Never" in d.preemption_reasons["high"]


def test_never_task_is_still_placed_on_free_resources() -> None:
    # Never only stops evictions: a free node takes the gang as usual.
    jobs, tasks = _low_fills_one_node()
    tasks += pending("high", 4, preemption_policy="Never")
    d = gs.schedule(snap([node("n0"), node("n1")], jobs, tasks), PREEMPT)
    assert d.evictions == () and {b.node for b in d.binds} == {"n1"}


def test_never_task_does_not_reclaim() -> None:
    queues = [{"name": "a"}, {"name": "b"}]
    jobs = [
        job("b1", 4, queue="b", priority=5),
        job("b2", 4, queue="b", priority=5, creation=1),
        job("a1", 4, queue="a", phase="Inqueue"),
    ]
    tasks = (
        running("b1", [("n0", [i]) for i in range(4)])
        + running("b2", [("n1", [i]) for i in range(4)])
        + pending("a1", 4, preemption_policy="Never")
    )
    d = gs.schedule(snap([node("n0"), node("n1")], jobs, tasks, queues=queues), RECLAIM)
    assert d.evictions == ()
    assert d.preemption_reasons["a1"].startswith(f"reclaim: {victim_rules.POLICY_NEVER}:")


def test_never_task_does_not_evict_within_its_own_job() -> None:
    jobs = [job("j", 1)]
    tasks = running("j", [("n0", [i]) for i in range(4)], priority=1) + pending(
        "j", 1, start=4, priority=9, preemption_policy="Never"
    )
    d = gs.schedule(snap([node("n0")], jobs, tasks), PREEMPT)
    assert d.evictions == ()
    assert victim_rules.POLICY_NEVER in d.preemption_reasons["j"]


def test_a_never_task_keeps_its_priority_for_ordering() -> None:
    # Two pending jobs want the one free node: the higher-priority Never job goes first.
    jobs = [
        job("a", 4, priority=1, phase="Inqueue"),
        job("b", 4, priority=9, phase="Inqueue", creation=1),
    ]
    tasks = pending("a", 4) + pending("b", 4, preemption_policy="Never")
    d = gs.schedule(snap([node("n0")], jobs, tasks), PREEMPT)
    assert {b.task for b in d.binds} == {f"b-{i}" for i in range(4)}


@pytest.mark.parametrize(("age", "evicts"), [(0, False), (59, False), (60, True), (600, True)])
def test_delayed_job_evicts_only_after_its_delay(age: int, evicts: bool) -> None:
    jobs, tasks = _low_fills_one_node(age=age, preemption_delay=60)
    tasks += pending("high", 4)
    d = gs.schedule(snap([node("n0")], jobs, tasks), PREEMPT)
    assert bool(d.evictions) is evicts
    if not evicts:
        why = d.preemption_reasons["high"]
        assert why.startswith(f"preempt: {victim_rules.PREEMPTION_DELAYED}:")
        assert f"{60 - age}s left" in why


def test_delayed_job_does_not_reclaim_before_its_delay() -> None:
    queues = [{"name": "a"}, {"name": "b"}]
    jobs = [
        job("b1", 4, queue="b"),
        job("b2", 4, queue="b", creation=1),
        job("a1", 4, queue="a", phase="Inqueue", age=5, preemption_delay=30),
    ]
    tasks = (
        running("b1", [("n0", [i]) for i in range(4)])
        + running("b2", [("n1", [i]) for i in range(4)])
        + pending("a1", 4)
    )
    d = gs.schedule(snap([node("n0"), node("n1")], jobs, tasks, queues=queues), RECLAIM)
    assert d.evictions == ()
    assert "25s left" in d.preemption_reasons["a1"]


def test_preemption_fields_round_trip_and_default_away() -> None:
    s = snap(
        [node("n0")],
        [job("j", 1, preemption_delay=30)],
        pending("j", 1, preemption_policy="Never"),
    )
    assert gs.Snapshot.from_dict(s.to_dict()) == s
    assert s.to_dict()["tasks"][0]["preemption_policy"] == "Never"
    plain = snap([node("n0")], [job("j", 1)], pending("j", 1))
    assert "preemption_policy" not in plain.to_dict()["tasks"][0]
    assert "preemption_delay" not in plain.to_dict()["jobs"][0]


@pytest.mark.parametrize(
    ("where", "value", "field"),
    [
        ("task", "Sometimes", "preemption_policy"),
        ("task", 1, "preemption_policy"),
        ("job", -1, "preemption_delay"),
        ("job", "10s", "preemption_delay"),
        ("job", 2**60, "preemption_delay"),
    ],
)
def test_bad_preemption_fields_name_the_field(where: str, value: object, field: str) -> None:
    jobs = [job("j", 1)]
    tasks = pending("j", 1)
    (jobs if where == "job" else tasks)[0][field] = value
    with pytest.raises(gs.SnapshotError) as err:
        snap([node("n0")], jobs, tasks)
    assert err.value.kind == where and err.value.field == field
