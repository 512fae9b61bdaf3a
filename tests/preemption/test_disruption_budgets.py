"""Disruption budgets (PodDisruptionBudget): every evicting action counts against them;
preempt and reclaim take a victim set that keeps them when one exists, and say so when none
does."""

from __future__ import annotations

from typing import Any

import pytest

import gangsched as gs
from _preemption_helpers import (
    PREEMPT,
    RECLAIM,
    evicted,
    job,
    jobs_hit,
    node,
    pending,
    running,
)
from gangsched.model import DisruptionBudget
from gangsched.session.rules import disruption


def snap(
    jobs: list[dict[str, Any]],
    tasks: list[dict[str, Any]],
    budgets: list[dict[str, Any]],
    *,
    nodes: int = 2,
    queues: list[dict[str, Any]] | None = None,
) -> gs.Snapshot:
    return gs.Snapshot.from_dict(
        {
            "nodes": [node(f"n{i}") for i in range(nodes)],
            "queues": queues or [{"name": "default"}],
            "jobs": jobs,
            "tasks": tasks,
            "disruption_budgets": budgets,
        }
    )


def _two_low_gangs() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    # low2 is newer, so without budgets it is the victim (newest first among equals).
    jobs = [
        job("low1", 4, priority=1),
        job("low2", 4, priority=1, creation=1),
        job("high", 4, priority=10, phase="Inqueue"),
    ]
    tasks = (
        running("low1", [("n0", [i]) for i in range(4)])
        + running("low2", [("n1", [i]) for i in range(4)])
        + pending("high", 4)
    )
    return jobs, tasks


def test_without_budgets_the_newest_gang_is_the_victim() -> None:
    jobs, tasks = _two_low_gangs()
    s = snap(jobs, tasks, [])
    assert jobs_hit(s, gs.schedule(s, PREEMPT)) == {"low2"}


def test_a_min_available_budget_steers_preempt_to_a_set_that_keeps_it() -> None:
    jobs, tasks = _two_low_gangs()
    s = snap(jobs, tasks, [{"name": "pdb-low2", "jobs": ["low2"], "min_available": 4}])
    d = gs.schedule(s, PREEMPT)
    assert jobs_hit(s, d) == {"low1"}
    assert not any("disruption budget" in e.reason for e in d.evictions)


def test_a_budget_by_task_names_counts_too() -> None:
    jobs, tasks = _two_low_gangs()
    s = snap(jobs, tasks, [{"name": "pdb", "tasks": ["low2-0"], "min_available": 1}])
    assert jobs_hit(s, gs.schedule(s, PREEMPT)) == {"low1"}


def test_when_every_victim_set_breaks_a_budget_preempt_evicts_and_says_so() -> None:
    # Kubernetes' behaviour: a budget is respected when another victim set exists, not at
    # the price of starving the preemptor.
    jobs, tasks = _two_low_gangs()
    budgets = [{"name": "pdb-all", "jobs": ["low1", "low2"], "max_unavailable": 0}]
    s = snap(jobs, tasks, budgets)
    d = gs.schedule(s, PREEMPT)
    assert jobs_hit(s, d) == {"low2"}
    assert all(
        "breaks disruption budget(s) ['pdb-all']: no victim set keeps them" in e.reason
        for e in d.evictions
    )
    assert "pdb-all" in d.jobs["high"].message


def test_a_percentage_budget_allows_its_rounded_up_share() -> None:
    # 4 covered, max_unavailable 25% → one disruption allowed: a 1-GPU claim may take one
    # task of the covered job (its surplus) without breaking it.
    jobs = [job("low", 2, priority=1), job("high", 1, priority=10, phase="Inqueue")]
    tasks = running("low", [("n0", [i]) for i in range(4)]) + pending("high", 1)
    s = snap(jobs, tasks, [{"name": "b", "jobs": ["low"], "max_unavailable": "25%"}], nodes=1)
    d = gs.schedule(s, PREEMPT)
    assert len(d.evictions) == 1
    assert "disruption budget" not in d.evictions[0].reason


def test_evictions_earlier_in_the_cycle_count_against_the_budget() -> None:
    # Two 1-GPU preemptors; the budget over 'low' allows one disruption. The first takes a
    # task of 'low'; the second must take 'other' instead.
    jobs = [
        job("low", 1, priority=1),
        job("other", 1, priority=1),
        job("h1", 1, priority=10, phase="Inqueue"),
        job("h2", 1, priority=10, phase="Inqueue", creation=1),
    ]
    tasks = (
        running("low", [("n0", [i]) for i in range(3)])
        + running("other", [("n0", [3])])
        + pending("h1", 1)
        + pending("h2", 1)
    )
    s = snap(jobs, tasks, [{"name": "b", "jobs": ["low"], "max_unavailable": 1}], nodes=1)
    d = gs.schedule(s, PREEMPT)
    assert len(d.evictions) == 2
    assert jobs_hit(s, d) == {"low", "other"}
    assert not any("disruption budget" in e.reason for e in d.evictions)


def test_reclaim_keeps_a_budget_when_another_victim_set_exists() -> None:
    queues = [{"name": "a"}, {"name": "b"}]
    jobs = [
        job("b1", 4, queue="b"),
        job("b2", 4, queue="b", creation=1),
        job("a1", 4, queue="a", phase="Inqueue"),
    ]
    tasks = (
        running("b1", [("n0", [i]) for i in range(4)])
        + running("b2", [("n1", [i]) for i in range(4)])
        + pending("a1", 4)
    )
    plain = snap(jobs, tasks, [], queues=queues)
    assert jobs_hit(plain, gs.schedule(plain, RECLAIM)) == {"b2"}
    s = snap(jobs, tasks, [{"name": "p", "jobs": ["b2"], "min_available": "100%"}], queues=queues)
    d = gs.schedule(s, RECLAIM)
    assert evicted(d) == {f"b1-{i}" for i in range(4)}


@pytest.mark.parametrize(
    ("min_available", "max_unavailable", "expected", "desired"),
    [
        (3, None, 10, 3),
        ("50%", None, 5, 3),
        ("0%", None, 5, 0),
        (None, 2, 10, 8),
        (None, "30%", 10, 7),
        (None, "100%", 4, 0),
        (None, 9, 4, 0),
    ],
)
def test_desired_count_rounds_percentages_up(
    min_available: int | str | None, max_unavailable: int | str | None, expected: int, desired: int
) -> None:
    b = DisruptionBudget(name="b", min_available=min_available, max_unavailable=max_unavailable)
    assert disruption.desired_count(b, expected) == desired


def test_budgets_round_trip_and_are_left_out_when_absent() -> None:
    jobs, tasks = _two_low_gangs()
    budgets: list[dict[str, Any]] = [
        {"name": "a", "jobs": ["low1"], "min_available": "50%"},
        {"name": "b", "tasks": ["low2-0", "low2-1"], "max_unavailable": 1},
    ]
    s = snap(jobs, tasks, budgets)
    assert gs.Snapshot.from_dict(s.to_dict()) == s
    assert s.to_dict()["disruption_budgets"] == budgets
    assert "disruption_budgets" not in snap(jobs, tasks, []).to_dict()


@pytest.mark.parametrize(
    ("budget", "field", "words"),
    [
        ({"name": "b", "jobs": ["low1"]}, "min_available", "exactly one"),
        ({"name": "b", "min_available": 1, "max_unavailable": 1}, "min_available", "exactly"),
        ({"name": "b", "min_available": "150%"}, "min_available", "percentage"),
        ({"name": "b", "min_available": "5"}, "min_available", "percentage"),
        ({"name": "b", "max_unavailable": -1}, "max_unavailable", ">= 0"),
        ({"name": "b", "max_unavailable": True}, "max_unavailable", "integer"),
        ({"name": "b", "jobs": ["nope"], "min_available": 1}, "jobs[0]", "unknown job"),
        ({"name": "b", "tasks": ["low1-0", "x"], "min_available": 1}, "tasks[1]", "unknown"),
        ({"name": "b", "jobs": "low1", "min_available": 1}, "jobs", "list"),
        ({"name": "b", "selector": {}, "min_available": 1}, "selector", "unknown key"),
    ],
)
def test_bad_budgets_name_the_budget_and_field(
    budget: dict[str, Any], field: str, words: str
) -> None:
    jobs, tasks = _two_low_gangs()
    with pytest.raises(gs.SnapshotError) as err:
        snap(jobs, tasks, [budget])
    assert err.value.kind == "disruption_budget" and err.value.name == "b"
    assert err.value.field == field and words in str(err.value)
