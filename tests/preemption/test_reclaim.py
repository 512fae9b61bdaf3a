"""Scenario tests for the reclaim action: a queue below its deserved share takes resources
back from queues above theirs, gang-aware, never in a cycle, and says why when it cannot."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

import gangsched as gs
from _preemption_helpers import (
    RECLAIM,
    apply,
    config,
    evicted,
    job,
    jobs_hit,
    node,
    pending,
    running,
    settle,
    snap,
)
from gangsched.actions.reclaim import queue_shares
from gangsched.scheduler import open_session

QUEUES = [{"name": "a"}, {"name": "b"}]


def _b_holds_everything() -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    jobs = [
        job("b1", 4, queue="b", priority=5),
        job("b2", 4, queue="b", priority=5, creation=1),
        job("a1", 4, queue="a", priority=1, phase="Inqueue"),
    ]
    tasks = (
        running("b1", [("n0", [i]) for i in range(4)])
        + running("b2", [("n1", [i]) for i in range(4)])
        + pending("a1", 4)
    )
    return jobs, tasks


# ---------------------------------------------------------------------------- item 1: reclaim


def test_queue_below_deserved_takes_back_a_whole_gang_from_the_queue_above() -> None:
    # volcano#5805: a starving gang never heals without reclaim. Queue a deserves half of
    # the 8 GPUs; b holds all 8 in two 4-task gangs: one of them goes, whole, and a's gang is
    # reserved in its place. Priority does not matter across queues (a's job is lower).
    jobs, tasks = _b_holds_everything()
    s = snap([node("n0"), node("n1")], jobs, tasks, queues=QUEUES)
    d = gs.schedule(s, RECLAIM)
    assert jobs_hit(s, d) == {"b2"}  # newest first among equals
    assert evicted(d) == {f"b2-{i}" for i in range(4)}
    assert {p.node for p in d.pipelined} == {"n1"} and len(d.pipelined) == 4
    assert all(e.preemptor == "a1" and "queue 'b'" in e.reason for e in d.evictions)
    assert d.queues["a"].allocated == d.queues["a"].deserved


def test_nothing_is_taken_from_a_non_reclaimable_queue() -> None:
    jobs, tasks = _b_holds_everything()
    queues: list[dict[str, Any]] = [{"name": "a"}, {"name": "b", "reclaimable": False}]
    d = gs.schedule(snap([node("n0"), node("n1")], jobs, tasks, queues=queues), RECLAIM)
    assert d.evictions == ()
    reason = d.preemption_reasons["a1"]
    assert reason.startswith("reclaim: QueueNotOverDeserved") and "not reclaimable" in reason


def test_a_claim_beyond_the_reclaimers_deserved_share_is_refused() -> None:
    # Three equal queues: c deserves a third of the 8 GPUs; a 4-GPU claim is beyond it.
    jobs = [job("a0", 4, queue="a"), job("b0", 4, queue="b"), job("c1", 1, queue="c")]
    tasks = running("a0", [("n0", [i]) for i in range(4)])
    tasks += running("b0", [("n1", [i]) for i in range(4)]) + pending("c1", 1, gpus=4)
    queues = [{"name": "a"}, {"name": "b"}, {"name": "c"}]
    d = gs.schedule(snap([node("n0"), node("n1")], jobs, tasks, queues=queues), RECLAIM)
    assert d.evictions == ()
    assert d.preemption_reasons["c1"].startswith("reclaim: BeyondDeserved")


def test_nothing_is_taken_from_a_queue_within_its_share() -> None:
    jobs = [
        job("a0", 4, queue="a"),
        job("b0", 4, queue="b"),
        job("a1", 1, queue="a", phase="Inqueue"),
    ]
    tasks = running("a0", [("n0", [i]) for i in range(4)])
    tasks += running("b0", [("n1", [i]) for i in range(4)]) + pending("a1", 1)
    d = gs.schedule(snap([node("n0"), node("n1")], jobs, tasks, queues=QUEUES), RECLAIM)
    assert d.evictions == ()
    assert d.preemption_reasons["a1"].startswith("reclaim: QueueNotOverDeserved")


def test_a_queue_holding_its_deserved_share_does_not_reclaim() -> None:
    # a's capability caps its deserved share at what it holds: it is overused.
    jobs = [
        job("a0", 4, queue="a"),
        job("b0", 4, queue="b"),
        job("a1", 1, queue="a", phase="Inqueue"),
    ]
    tasks = running("a0", [("n0", [i]) for i in range(4)])
    tasks += running("b0", [("n1", [i]) for i in range(4)]) + pending("a1", 1)
    queues: list[dict[str, Any]] = [
        {"name": "a", "capability": {"cpu": 4, "nvidia.com/gpu": 4}},
        {"name": "b"},
    ]
    d = gs.schedule(snap([node("n0"), node("n1")], jobs, tasks, queues=queues), RECLAIM)
    assert d.evictions == ()
    assert d.preemption_reasons["a1"].startswith("reclaim: QueueAtDeserved")


def test_preemptable_false_is_never_reclaimed() -> None:
    jobs, tasks = _b_holds_everything()
    jobs[1]["preemptable"] = False  # b2
    s = snap([node("n0"), node("n1")], jobs, tasks, queues=QUEUES)
    d = gs.schedule(s, RECLAIM)
    assert jobs_hit(s, d) == {"b1"}


def test_reclaim_needs_a_fair_share_plugin() -> None:
    jobs, tasks = _b_holds_everything()
    cfg = config(
        "enqueue",
        "allocate",
        "reclaim",
        tiers=[[{"name": "priority"}, {"name": "gang"}], [{"name": "predicates"}]],
    )
    d = gs.schedule(snap([node("n0"), node("n1")], jobs, tasks, queues=QUEUES), cfg)
    assert d.evictions == ()
    assert d.preemption_reasons["a1"].startswith("reclaim: NoFairShare")


# ---------------------------------------------------------------------------- item 2: bundles


def test_reclaim_trims_surplus_and_leaves_gangs_whole() -> None:
    # volcano#4607 across queues: b runs a gang at its minimum and an elastic job; a's
    # one-task claim is served from the elastic job's surplus, the gang is untouched.
    jobs = [
        job("gang", 4, queue="b"),
        job("elastic", 1, queue="b"),
        job("a1", 1, queue="a", phase="Inqueue"),
    ]
    tasks = running("gang", [("n0", [i]) for i in range(4)])
    tasks += running("elastic", [("n1", [i]) for i in range(4)]) + pending("a1", 1)
    s = snap([node("n0"), node("n1")], jobs, tasks, queues=QUEUES)
    d = gs.schedule(s, RECLAIM)
    assert jobs_hit(s, d) == {"elastic"} and len(d.evictions) == 1


# ---------------------------------------------------------------------------- item 4: no cycles


def test_a_reclaim_that_leaves_the_victim_below_the_reclaimer_is_never_reversed() -> None:
    # kueue#3779 shape: b holds 5 of 8 GPUs in one gang at its minimum; a (at 3 of its 4)
    # needs 1 more GPU. Taking b's gang whole leaves b at share 0, below a's 1 — admitted (a
    # ends within its deserved share, so nothing can reclaim from it), and never reversed: b
    # stays short of its 5-GPU gang minimum instead of taking it back.
    jobs = [job("b0", 5, queue="b"), job("a0", 3, queue="a"), job("a1", 1, queue="a")]
    tasks = running("b0", [("n0", [0]), ("n0", [1]), ("n0", [2]), ("n0", [3]), ("n1", [0])])
    tasks += running("a0", [("n1", [1]), ("n1", [2]), ("n1", [3])]) + pending("a1", 1)
    s = snap([node("n0"), node("n1")], jobs, tasks, queues=QUEUES)
    edges: set[tuple[str, str]] = set()
    counts = []
    for _ in range(5):
        d = gs.schedule(s, RECLAIM)
        edges |= {(s.task(e.task).job, e.preemptor) for e in d.evictions}
        counts.append(len(d.evictions))
        s = settle(apply(s, d))
    assert edges == {("b0", "a1")} and counts[0] == 5 and sum(counts[1:]) == 0
    # The same claim costs one task when b's job is elastic (one surplus task suffices).
    elastic = [dict(j, min_available=1) if j["name"] == "b0" else j for j in jobs]
    s2 = snap([node("n0"), node("n1")], elastic, tasks, queues=QUEUES)
    assert len(gs.schedule(s2, RECLAIM).evictions) == 1


def test_no_reclaim_ping_pong_across_cycles() -> None:
    # kueue#3779, #14543: A evicts B, then B evicts A, for ever. Replay the cluster for a few
    # cycles (evictions terminate, pods come back Pending, reservations bind): the first
    # reclaim is never reversed and the cluster settles.
    jobs, tasks = _b_holds_everything()
    s = snap([node("n0"), node("n1")], jobs, tasks, queues=QUEUES)
    edges: set[tuple[str, str]] = set()
    evictions_per_cycle = []
    for _ in range(6):
        d = gs.schedule(s, RECLAIM)
        for e in d.evictions:
            edges.add((s.task(e.task).job, e.preemptor))
        evictions_per_cycle.append(len(d.evictions))
        s = settle(apply(s, d))
    assert edges == {("b2", "a1")}
    assert evictions_per_cycle[0] == 4 and sum(evictions_per_cycle[1:]) == 0
    assert not any((b, a) in edges for a, b in edges)


def test_rule_holds_after_every_admitted_reclaim() -> None:
    # The rule, checked on the session state after the move: the victim was above its share
    # before, the reclaimer is within its own after (its share rose, as it always does here).
    jobs, tasks = _b_holds_everything()
    s = snap([node("n0"), node("n1")], jobs, tasks, queues=QUEUES)
    before = queue_shares(open_session(s, RECLAIM))
    d = gs.schedule(s, RECLAIM)
    after_s = apply(s, d)
    ssn = open_session(after_s, RECLAIM)
    after = queue_shares(ssn)
    a, b = s.queue_index["a"], s.queue_index["b"]
    assert before[b] > 1.0  # the victim was above its deserved share
    assert after[a] <= 1.0 + 1e-9  # the reclaimer stays within its own
    assert after[a] > before[a]


# ---------------------------------------------------------------------------- item 5: determinism


def test_equal_victim_queues_are_chosen_in_a_stable_order() -> None:
    # kueue#6763: ties between equal queues broken by hash order. Two identical queues above
    # their share; the victim does not depend on the order of the input lists.
    queues = [{"name": "a"}, {"name": "b"}, {"name": "c"}]
    base = [
        job("b0", 1, queue="b", creation=3),
        job("c0", 1, queue="c", creation=3),
        job("a1", 1, queue="a", phase="Inqueue"),
    ]
    tasks = running("b0", [("n0", [i]) for i in range(4)])
    tasks += running("c0", [("n1", [i]) for i in range(4)]) + pending("a1", 1)
    nodes = [node("n0"), node("n1")]
    hit = set()
    for order in itertools.permutations(range(3)):
        s = snap(
            nodes[::-1] if order[0] == 1 else nodes,
            [base[i] for i in order],
            tasks[::-1] if order[2] == 0 else tasks,
            queues=[queues[i] for i in order],
        )
        hit.add(frozenset(jobs_hit(s, gs.schedule(s, RECLAIM))))
    # Equal in every key: the job name decides.
    assert hit == {frozenset({"b0"})}


# ---------------------------------------------------------------------------- capacity


def _capacity(hierarchy: bool = False, level: int | None = None) -> gs.Config:
    cap: dict[str, Any] = {"name": "capacity"}
    if hierarchy:
        cap["enableHierarchy"] = True
    if level is not None:
        cap["arguments"] = {"ancestorReclaimLevel": level}
    return config(
        "enqueue",
        "allocate",
        "reclaim",
        "backfill",
        # capacity answers ``reclaimable`` in the first tier, next to gang: a later tier's
        # answer is never asked once gang's tier has one (Volcano's combination rule).
        tiers=[
            [{"name": "priority"}, {"name": "gang"}, {"name": "conformance"}, cap],
            [{"name": "drf"}, {"name": "predicates"}, {"name": "nodeorder"}],
        ],
    )


def _quota(gpus: int, **extra: Any) -> dict[str, Any]:
    return {"cpu": gpus, "nvidia.com/gpu": gpus, **extra}


def test_capacity_queue_takes_back_what_another_queue_borrowed() -> None:
    # Flat capacity: each queue deserves 4 of the 8 GPUs; b borrowed a's half while a was
    # idle. a's gang reclaims it: one of b's gangs goes whole, a ends exactly at deserved.
    jobs, tasks = _b_holds_everything()
    queues = [{"name": "a", "deserved": _quota(4)}, {"name": "b", "deserved": _quota(4)}]
    s = snap([node("n0"), node("n1")], jobs, tasks, queues=queues)
    d = gs.schedule(s, _capacity())
    assert jobs_hit(s, d) == {"b2"} and len(d.evictions) == 4
    assert len(d.pipelined) == 4 and "a1" not in d.preemption_reasons
    assert d.queues["a"].allocated["nvidia.com/gpu"] == 4000


def _floor_case(guarantee: int) -> tuple[gs.Snapshot, gs.Decisions]:
    # b deserves 4 GPUs and holds 6: 'big' (4 GPUs, priority 1) and 'small' (2, priority 5).
    # a's 4-GPU task fits once either goes (n1 has 2 idle).
    jobs = [
        job("big", 1, queue="b", priority=1),
        job("small", 1, queue="b", priority=5),
        job("a1", 1, queue="a", phase="Inqueue"),
    ]
    tasks = running("big", [("n0", [0, 1, 2, 3])], gpus=4)
    tasks += running("small", [("n1", [0, 1])], gpus=2) + pending("a1", 1, gpus=4)
    b: dict[str, Any] = {"name": "b", "deserved": _quota(4)}
    if guarantee:
        b["guarantee"] = {"nvidia.com/gpu": guarantee}
    queues = [{"name": "a", "deserved": _quota(4)}, b]
    s = snap([node("n0"), node("n1")], jobs, tasks, queues=queues)
    return s, gs.schedule(s, _capacity())


def test_capacity_reclaim_keeps_the_victim_queue_at_its_guarantee() -> None:
    # Without a guarantee the cheapest victim (priority 1) goes; with b guaranteed 4 GPUs,
    # evicting 'big' would leave b at 2 < 4, so 'small' goes instead (b stays at 4).
    s, d = _floor_case(0)
    assert jobs_hit(s, d) == {"big"}
    s, d = _floor_case(4)
    assert jobs_hit(s, d) == {"small"}
    assert [p.task for p in d.pipelined] == ["a1-0"]
    assert d.queues["b"].allocated["nvidia.com/gpu"] == 4000


def test_capacity_guarantee_floor_refuses_when_every_victim_would_break_it() -> None:
    # b guaranteed 6 GPUs of the 6 it holds: nothing is reclaimable.
    jobs = [job("big", 1, queue="b"), job("a1", 1, queue="a", phase="Inqueue")]
    tasks = running("big", [("n0", [0, 1, 2, 3])], gpus=4)
    tasks += [dict(t, name="big-9") for t in running("big", [("n1", [0, 1])], gpus=2)]
    tasks += pending("a1", 1, gpus=4)
    queues = [
        {"name": "a", "deserved": _quota(2)},
        {"name": "b", "deserved": _quota(6), "guarantee": {"nvidia.com/gpu": 6}},
    ]
    # b at 6 = its deserved: within share, and its guarantee: doubly protected.
    d = gs.schedule(snap([node("n0"), node("n1")], jobs, tasks, queues=queues), _capacity())
    assert d.evictions == ()
    assert d.preemption_reasons["a1"].startswith("reclaim: ")


def _tree_case() -> gs.Snapshot:
    # root ─ dept1 ─ a            a deserves 8, holds 4, wants 4 more
    #      └ dept2 ─ b, c          dept2 deserves 8 = what c holds; c deserves 4 (borrows 4)
    queues = [
        {"name": "dept1", "deserved": _quota(8)},
        {"name": "dept2", "deserved": _quota(8)},
        {"name": "a", "parent": "dept1", "deserved": _quota(8)},
        {"name": "b", "parent": "dept2", "deserved": _quota(4)},
        {"name": "c", "parent": "dept2", "deserved": _quota(4)},
    ]
    jobs = [
        job("a0", 4, queue="a"),
        job("c0", 4, queue="c"),
        job("c1", 4, queue="c", creation=1),
        job("a1", 4, queue="a", phase="Inqueue"),
        job("b1", 4, queue="b", phase="Inqueue", priority=1),
    ]
    tasks = running("a0", [("n0", [i]) for i in range(4)])
    tasks += running("c0", [("n1", [i]) for i in range(4)])
    tasks += running("c1", [("n2", [i]) for i in range(4)])
    tasks += pending("a1", 4) + pending("b1", 4)
    return snap([node("n0"), node("n1"), node("n2")], jobs, tasks, queues=queues)


def test_hierarchical_capacity_reclaims_borrowed_resources() -> None:
    # Without ancestorReclaimLevel only c's own share counts: c is above its deserved, so its
    # newest gang goes. a goes first (dept1's share 0.5 is below dept2's 1); then c is at its
    # deserved and b gets nothing.
    s = _tree_case()
    d = gs.schedule(s, _capacity(hierarchy=True))
    assert jobs_hit(s, d) == {"c1"} and len(d.evictions) == 4
    assert {e.preemptor for e in d.evictions} == {"a1"}
    assert {p.task for p in d.pipelined} == {f"a1-{i}" for i in range(4)}


def test_ancestor_reclaim_level_protects_a_subtree_within_its_deserved() -> None:
    # With ancestorReclaimLevel 1, c's parent dept2 holds exactly its deserved: a (under
    # dept1) may not take from c, but b, c's sibling, may (the shared parent is not checked).
    s = _tree_case()
    d = gs.schedule(s, _capacity(hierarchy=True, level=1))
    assert jobs_hit(s, d) == {"c1"}
    assert {e.preemptor for e in d.evictions} == {"b1"}
    assert d.preemption_reasons["a1"].startswith("reclaim: VictimsNotPreemptable")
    # Only a in need: nothing is taken.
    only_a = gs.Snapshot.from_dict(
        {
            **s.to_dict(),
            "jobs": [j for j in s.to_dict()["jobs"] if j["name"] != "b1"],
            "tasks": [t for t in s.to_dict()["tasks"] if t["job"] != "b1"],
        }
    )
    d2 = gs.schedule(only_a, _capacity(hierarchy=True, level=1))
    assert d2.evictions == ()
    assert d2.preemption_reasons["a1"].startswith("reclaim: VictimsNotPreemptable")


def test_capacity_reclaim_never_ping_pongs() -> None:
    # Replay cycles under capacity: the first reclaim is never reversed, the cluster settles.
    jobs, tasks = _b_holds_everything()
    queues = [{"name": "a", "deserved": _quota(4)}, {"name": "b", "deserved": _quota(4)}]
    s = snap([node("n0"), node("n1")], jobs, tasks, queues=queues)
    cfg = _capacity()
    edges: set[tuple[str, str]] = set()
    counts = []
    for _ in range(5):
        d = gs.schedule(s, cfg)
        edges |= {(s.task(e.task).job, e.preemptor) for e in d.evictions}
        counts.append(len(d.evictions))
        s = settle(apply(s, d))
    assert edges == {("b2", "a1")} and counts[0] == 4 and sum(counts[1:]) == 0


def test_ancestor_reclaim_level_must_be_a_non_negative_integer() -> None:
    jobs, tasks = _b_holds_everything()
    s = snap([node("n0"), node("n1")], jobs, tasks, queues=QUEUES)
    with pytest.raises(gs.ConfigError, match="ancestorReclaimLevel"):
        gs.schedule(s, _capacity(hierarchy=True, level=-1))
