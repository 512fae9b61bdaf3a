"""Scenario tests for the preempt action: gang-aware, minimal, all-or-nothing, deterministic,
explained. Each test names the failure it guards against, as peers' users reported it."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

import gangsched as gs
from _preemption_helpers import (
    BOTH,
    PREEMPT,
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
from gangsched.actions.victims import search as victim_search


def _two_gangs_per_node_pair() -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    # Four 2-GPU nodes; four running 2-task gangs, each spread over a pair of nodes.
    jobs = [
        job("j1", 2, priority=3),
        job("j2", 2, priority=1),
        job("j3", 2, priority=2),
        job("j4", 2, priority=1),
    ]
    tasks = (
        running("j1", [("n0", [0]), ("n1", [0])])
        + running("j2", [("n0", [1]), ("n1", [1])])
        + running("j3", [("n2", [0]), ("n3", [0])])
        + running("j4", [("n2", [1]), ("n3", [1])])
    )
    return jobs, tasks


# ---------------------------------------------------------------------------- item 1: preempt


def test_high_priority_gang_evicts_lower_priority_work_of_its_queue_and_is_pipelined() -> None:
    # volcano#2337 / #1720: "a high-priority gang does not preempt". Here it does, within its
    # queue, and only lower-priority jobs are touched.
    nodes = [node("n0"), node("n1")]
    jobs = [
        job("same", 4, priority=5),
        job("low", 4, priority=1),
        job("high", 4, priority=10, phase="Inqueue"),
    ]
    tasks = (
        running("same", [("n0", [i]) for i in range(4)])
        + running("low", [("n1", [i]) for i in range(4)])
        + pending("high", 4)
    )
    d = gs.schedule(snap(nodes, jobs, tasks), PREEMPT)
    assert evicted(d) == {f"low-{i}" for i in range(4)}
    assert {e.preemptor for e in d.evictions} == {"high"}
    assert all("priority 10 > 1" in e.reason for e in d.evictions)
    # Reserved on the freed node, never bound in the cycle that evicts.
    assert d.binds == ()
    assert {(p.task, p.node) for p in d.pipelined} == {(f"high-{i}", "n1") for i in range(4)}
    assert d.jobs["high"].pipelined == 4 and "high" not in d.preemption_reasons
    assert d.jobs["high"].reason == "Pipelined"
    assert d.jobs["high"].message == "preempt: 4 task(s) reserved, evicting 4 task(s) of ['low']"


def test_preempt_never_crosses_queues_and_never_takes_equal_priority() -> None:
    # Equal priority would allow A→B then B→A; another queue is reclaim's business.
    nodes = [node("n0"), node("n1")]
    jobs = [
        job("peer", 4, priority=10),
        job("other-q", 4, priority=1, queue="q2"),
        job("high", 4, priority=10, phase="Inqueue"),
    ]
    tasks = (
        running("peer", [("n0", [i]) for i in range(4)])
        + running("other-q", [("n1", [i]) for i in range(4)])
        + pending("high", 4)
    )
    s = snap(nodes, jobs, tasks, queues=[{"name": "default"}, {"name": "q2"}])
    d = gs.schedule(s, PREEMPT)
    assert d.evictions == () and d.pipelined == ()
    assert d.preemption_reasons["high"].startswith("preempt: NoLowerPriorityVictims")


@pytest.mark.parametrize("flag_on", ["job", "task"])
def test_preemptable_false_is_never_chosen(flag_on: str) -> None:
    # volcano#3332: the preemptable switch must be honoured for jobs and for single tasks.
    nodes = [node("n0"), node("n1")]
    protected_job = {"preemptable": False} if flag_on == "job" else {}
    protected_task = {"preemptable": False} if flag_on == "task" else {}
    jobs = [
        job("cheap", 4, priority=1, **protected_job),
        job("dearer", 4, priority=2),
        job("high", 4, priority=10, phase="Inqueue"),
    ]
    tasks = (
        running("cheap", [("n0", [i]) for i in range(4)], **protected_task)
        + running("dearer", [("n1", [i]) for i in range(4)])
        + pending("high", 4)
    )
    d = gs.schedule(snap(nodes, jobs, tasks), PREEMPT)
    # The cheaper victim is protected, so the dearer one goes.
    assert jobs_hit(snap(nodes, jobs, tasks), d) == {"dearer"}


def test_only_protected_victims_is_explained() -> None:
    # volcano#3332: "why not preempted" names the rule.
    nodes = [node("n0")]
    jobs = [job("low", 4, priority=1, preemptable=False), job("high", 2, priority=9)]
    tasks = running("low", [("n0", [i]) for i in range(4)]) + pending("high", 2)
    d = gs.schedule(snap(nodes, jobs, tasks), PREEMPT)
    assert d.evictions == ()
    reason = d.preemption_reasons["high"]
    assert reason.startswith("preempt: VictimsNotPreemptable") and "preemptable: false" in reason


def test_system_critical_tasks_are_protected_by_conformance() -> None:
    nodes = [node("n0")]
    jobs = [job("sys", 1, priority=1), job("high", 1, priority=9)]
    tasks = running("sys", [("n0", [0, 1, 2, 3])], gpus=4, priority=2_000_000_000)
    tasks += pending("high", 1, gpus=4)
    d = gs.schedule(snap(nodes, jobs, tasks), PREEMPT)
    assert d.evictions == ()
    assert d.preemption_reasons["high"].startswith("preempt: VictimsNotPreemptable")


def test_releasing_and_freshly_reserved_tasks_are_not_victims() -> None:
    # Only Running/Bound tasks are candidates: a Releasing task is already going.
    nodes = [node("n0")]
    jobs = [job("low", 1, priority=1), job("high", 1, priority=9)]
    tasks = running("low", [("n0", [0, 1, 2, 3])], gpus=4)
    tasks[0]["phase"] = "Releasing"
    tasks += pending("high", 1, gpus=4)
    d = gs.schedule(snap(nodes, jobs, tasks), PREEMPT)
    # The release is enough: the preemptor is pipelined onto it without a new eviction.
    assert d.evictions == () and [p.task for p in d.pipelined] == ["high-0"]


# ---------------------------------------------------------------------------- item 2: bundles


def test_victims_are_whole_gangs_fewest_and_cheapest() -> None:
    # volcano#4607: per-pod preemption "evicting one pod from each of 10 training jobs kills
    # all 10". The preemptor needs 4 GPUs; every running gang sits at its minimum, so each
    # victim job goes whole, as few as possible (2), the lowest priorities (1, 1).
    jobs, tasks = _two_gangs_per_node_pair()
    jobs.append(job("hi", 4, priority=10, phase="Inqueue"))
    tasks += pending("hi", 4)
    s = snap([node(f"n{i}", gpus=2) for i in range(4)], jobs, tasks)
    d = gs.schedule(s, PREEMPT)
    assert jobs_hit(s, d) == {"j2", "j4"}
    assert evicted(d) == {"j2-0", "j2-1", "j4-0", "j4-1"}
    assert len(d.pipelined) == 4


def test_no_gang_is_left_below_its_minimum() -> None:
    # volcano#4607 again: whatever is evicted, every victim job keeps ≥ min_available
    # running tasks or loses all of them.
    jobs, tasks = _two_gangs_per_node_pair()
    jobs.append(job("elastic", 1, priority=1))
    tasks += running("elastic", [("n4", [0]), ("n4", [1]), ("n5", [0])])
    jobs.append(job("hi", 3, priority=10, phase="Inqueue"))
    tasks += pending("hi", 3)
    s = snap([node(f"n{i}", gpus=2) for i in range(6)], jobs, tasks)
    d = gs.schedule(s, PREEMPT)
    gone = evicted(d)
    assert gone
    for rec in s.jobs:
        mine = [t.name for t in s.tasks_of(rec.name) if t.phase is gs.TaskPhase.RUNNING]
        left = len([t for t in mine if t not in gone])
        assert left == 0 or left >= rec.min_available, rec.name


def test_surplus_tasks_are_trimmed_before_a_gang_is_killed() -> None:
    # Trim before kill: an elastic job (min 1, 4 running) gives 2 of its surplus instead of a
    # 2-task gang at its minimum going whole, at equal priority.
    nodes = [node("n0"), node("n1", gpus=2)]
    jobs = [
        job("elastic", 1, priority=1),
        job("gang", 2, priority=1),
        job("hi", 2, priority=10, phase="Inqueue"),
    ]
    tasks = (
        running("elastic", [("n0", [i]) for i in range(4)])
        + running("gang", [("n1", [0]), ("n1", [1])])
        + pending("hi", 2)
    )
    s = snap(nodes, jobs, tasks)
    d = gs.schedule(s, PREEMPT)
    assert jobs_hit(s, d) == {"elastic"} and len(d.evictions) == 2


def test_preempt_only_for_the_gang_minimum() -> None:
    # volcano#2627: "preempt ignores the preemptor's minAvailable and evicts more than
    # needed". A job of 6 with min 2 evicts for 2 tasks only.
    nodes = [node("n0"), node("n1")]
    jobs = [job("low", 1, priority=1), job("hi", 2, priority=10, phase="Inqueue")]
    tasks = running("low", [("n0", [i]) for i in range(4)] + [("n1", [i]) for i in range(4)])
    tasks += pending("hi", 6)
    s = snap(nodes, jobs, tasks)
    d = gs.schedule(s, PREEMPT)
    assert len(d.evictions) == 2 and len(d.pipelined) == 2


def test_fewer_jobs_hit_beats_lower_priority() -> None:
    # Minimise (a) the number of jobs hit before (b) their priority: one priority-3 job that
    # frees 4 GPUs beats two priority-1 jobs of 2 GPUs each.
    nodes = [node("n0"), node("n1", gpus=2), node("n2", gpus=2)]
    jobs = [
        job("big", 4, priority=3),
        job("small-a", 2, priority=1),
        job("small-b", 2, priority=1),
        job("hi", 1, priority=10, phase="Inqueue"),
    ]
    tasks = (
        running("big", [("n0", [i]) for i in range(4)])
        + running("small-a", [("n1", [0]), ("n1", [1])])
        + running("small-b", [("n2", [0]), ("n2", [1])])
        + pending("hi", 1, gpus=4)
    )
    s = snap(nodes, jobs, tasks)
    d = gs.schedule(s, PREEMPT)
    assert jobs_hit(s, d) == {"big"}


def test_least_excess_among_equal_jobs() -> None:
    # (c) resources freed beyond need: a 2-GPU victim beats a 4-GPU victim of equal priority
    # for a 2-GPU claim.
    nodes = [node("n0"), node("n1", gpus=2)]
    jobs = [
        job("wide", 1, priority=1),
        job("narrow", 1, priority=1),
        job("hi", 1, priority=10, phase="Inqueue"),
    ]
    tasks = (
        running("wide", [("n0", [0, 1, 2, 3])], gpus=4)
        + running("narrow", [("n1", [0, 1])], gpus=2)
        + pending("hi", 1, gpus=2)
    )
    s = snap(nodes, jobs, tasks)
    d = gs.schedule(s, PREEMPT)
    assert evicted(d) == {"narrow-0"}


def test_irreducible_set_when_many_candidates() -> None:
    # More candidate jobs than the pair search covers: the greedy path still returns a set
    # from which no job can be spared, and never more than the claim needs.
    n = victim_search.PAIR_LIMIT + 4
    nodes = [node(f"n{i}", gpus=1) for i in range(n)]
    jobs = [job(f"v{i:02d}", 1, priority=1) for i in range(n)]
    tasks = [t for i in range(n) for t in running(f"v{i:02d}", [(f"n{i}", [0])])]
    jobs.append(job("hi", 3, priority=10, phase="Inqueue"))
    tasks += pending("hi", 3)
    s = snap(nodes, jobs, tasks)
    d = gs.schedule(s, PREEMPT)
    assert len(jobs_hit(s, d)) == 3 and len(d.pipelined) == 3


# ------------------------------------------------------------------------- item 3: all or nothing


def test_nothing_is_evicted_unless_the_whole_minimum_fits() -> None:
    # volcano#2627 / kueue#5243: evicting without admitting the preemptor is pure loss.
    nodes = [node("n0"), node("n1")]
    jobs = [job("low", 1, priority=1), job("keep", 4, priority=20), job("hi", 8, priority=10)]
    tasks = (
        running("low", [("n0", [i]) for i in range(4)])
        + running("keep", [("n1", [i]) for i in range(4)])
        + pending("hi", 8)
    )
    d = gs.schedule(snap(nodes, jobs, tasks), PREEMPT)
    assert d.evictions == () and d.pipelined == ()
    assert d.preemption_reasons["hi"].startswith("preempt: InsufficientResources")


def test_reservation_is_carried_and_bound_once_victims_are_gone() -> None:
    # kueue#13797: freed quota was taken by others before the preemptor got in. The claim is
    # reserved (Pipelined) across cycles: while victims terminate nobody takes it and nothing
    # more is evicted; once they are gone it binds, and a queued job cannot steal it.
    nodes = [node("n0")]
    jobs = [job("low", 4, priority=1), job("hi", 4, priority=10, phase="Inqueue")]
    tasks = running("low", [("n0", [i]) for i in range(4)]) + pending("hi", 4)
    s0 = snap(nodes, jobs, tasks)
    d0 = gs.schedule(s0, PREEMPT)
    assert len(d0.evictions) == 4 and len(d0.pipelined) == 4
    s1 = apply(s0, d0)
    # A newcomer arrives while the victims are still terminating.
    s1 = gs.Snapshot.from_dict(
        {
            **s1.to_dict(),
            "jobs": [*s1.to_dict()["jobs"], job("thief", 1, priority=50, phase="Inqueue")],
            "tasks": [*s1.to_dict()["tasks"], *pending("thief", 1)],
        }
    )
    d1 = gs.schedule(s1, PREEMPT)
    assert d1.evictions == () and d1.binds == ()  # no second round of victims
    assert d1.jobs["hi"].pipelined == 4
    # Victims gone (their pods come back Pending, and cannot take the room either).
    s2 = settle(apply(s1, d1))
    d2 = gs.schedule(s2, PREEMPT)
    assert {b.task for b in d2.binds} == {f"hi-{i}" for i in range(4)}
    assert d2.evictions == ()
    assert d2.jobs["hi"].ready


def test_topology_constrained_preemptor_gets_victims_in_one_domain() -> None:
    # kueue#5243: "preemption frees the wrong shape": an 8-GPU job preempting small jobs
    # spread over the cluster is admitted but never fits. The hard rack constraint is part of
    # the feasibility test: the two cheapest victims sit in different racks, so a whole rack
    # is freed instead.
    nodes = [node(f"n{i}", gpus=4) for i in range(4)]
    racks = [
        {"name": "rack-a", "tier": 1, "members": ["n0", "n1"]},
        {"name": "rack-b", "tier": 1, "members": ["n2", "n3"]},
    ]
    prio = {"s0": 1, "s1": 5, "s2": 1, "s3": 5}
    jobs = [job(name, 1, priority=p) for name, p in prio.items()]
    tasks = [
        t for i, name in enumerate(prio) for t in running(name, [(f"n{i}", [0, 1, 2, 3])], gpus=4)
    ]
    hard = {"mode": "hard", "highest_tier_allowed": 1}
    jobs.append(job("hi", 4, priority=10, phase="Inqueue", network_topology=hard))
    tasks += pending("hi", 4, gpus=2)
    s = snap(nodes, jobs, tasks, hypernodes=racks)
    d = gs.schedule(s, PREEMPT)
    placed = {p.node for p in d.pipelined}
    assert len(d.pipelined) == 4
    assert placed in ({"n0", "n1"}, {"n2", "n3"})
    assert {s.task(e.task).node for e in d.evictions} == placed
    # Without the constraint the two priority-1 jobs go, across racks.
    free = snap(nodes, [*jobs[:-1], job("hi", 4, priority=10, phase="Inqueue")], tasks)
    assert jobs_hit(free, gs.schedule(free, PREEMPT)) == {"s0", "s2"}


def test_topology_that_cannot_be_met_is_explained() -> None:
    nodes = [node(f"n{i}", gpus=2) for i in range(4)]
    racks = [
        {"name": "rack-a", "tier": 1, "members": ["n0", "n1"]},
        {"name": "rack-b", "tier": 1, "members": ["n2", "n3"]},
    ]
    jobs = [job("low", 1, priority=1)]
    tasks = running("low", [(f"n{i}", [0, 1]) for i in range(4)], gpus=2)
    jobs.append(
        job("hi", 3, priority=9, network_topology={"mode": "hard", "highest_tier_allowed": 1})
    )
    tasks += pending("hi", 3, gpus=2)
    d = gs.schedule(snap(nodes, jobs, tasks, hypernodes=racks), PREEMPT)
    assert d.evictions == ()
    assert d.preemption_reasons["hi"].startswith("preempt: TopologyUnsatisfiable")


# ---------------------------------------------------------------------------- item 5: determinism


def test_equal_candidates_are_broken_by_the_documented_order() -> None:
    # kueue#6763: ties broken by hash-set order re-ran differently each cycle and evicted
    # more than needed. Equal victims: newest (larger creation) first, then the name.
    nodes = [node("n0", gpus=2), node("n1", gpus=2), node("n2", gpus=2)]
    base = [
        job("b-old", 2, priority=1, creation=1),
        job("a-new", 2, priority=1, creation=5),
        job("c-new", 2, priority=1, creation=5),
    ]
    tasks = (
        running("b-old", [("n0", [0]), ("n0", [1])])
        + running("a-new", [("n1", [0]), ("n1", [1])])
        + running("c-new", [("n2", [0]), ("n2", [1])])
        + pending("hi", 2)
    )
    hi = job("hi", 2, priority=9, phase="Inqueue")
    seen = set()
    for order in itertools.permutations(range(3)):
        jobs = [base[i] for i in order] + [hi]
        s = snap(nodes[::-1] if order[0] else nodes, jobs, tasks[::-1] if order[1] else tasks)
        d = gs.schedule(s, PREEMPT)
        seen.add(frozenset(jobs_hit(s, d)))
    assert seen == {frozenset({"a-new"})}


def test_same_input_same_decisions_byte_for_byte() -> None:
    jobs, tasks = _two_gangs_per_node_pair()
    jobs.append(job("hi", 4, priority=10, phase="Inqueue"))
    tasks += pending("hi", 4)
    s = snap([node(f"n{i}", gpus=2) for i in range(4)], jobs, tasks)
    first = gs.schedule(s, BOTH).to_dict()
    for _ in range(3):
        assert gs.schedule(gs.Snapshot.from_dict(s.to_dict()), BOTH).to_dict() == first


# ---------------------------------------------------------------------------- item 8: explanations


def test_gang_would_break_is_explained() -> None:
    # The only lower-priority job runs at its minimum and one of its tasks is protected, so
    # it can neither be trimmed nor go whole.
    nodes = [node("n0"), node("n1")]
    jobs = [job("low", 8, priority=1), job("hi", 2, priority=9)]
    tasks = running("low", [("n0", [i]) for i in range(4)] + [("n1", [i]) for i in range(4)])
    tasks[0]["preemptable"] = False
    tasks += pending("hi", 2)
    d = gs.schedule(snap(nodes, jobs, tasks), PREEMPT)
    assert d.evictions == ()
    assert d.preemption_reasons["hi"].startswith("preempt: GangWouldBreak")


def test_no_victims_at_all_is_explained() -> None:
    d = gs.schedule(
        snap([node("n0", gpus=1)], [job("hi", 2, priority=9)], pending("hi", 2)), PREEMPT
    )
    assert d.preemption_reasons["hi"].startswith("preempt: NoVictims")


def test_preempt_and_reclaim_reasons_are_both_reported() -> None:
    nodes = [node("n0")]
    jobs = [job("peer", 4, priority=9), job("hi", 2, priority=9)]
    tasks = running("peer", [("n0", [i]) for i in range(4)]) + pending("hi", 2)
    d = gs.schedule(snap(nodes, jobs, tasks), BOTH)
    reason = d.preemption_reasons["hi"]
    assert "preempt: NoLowerPriorityVictims" in reason and "reclaim: " in reason


def test_preempt_without_a_starving_point_does_nothing() -> None:
    # Without gang/priority nothing declares a job starving (Volcano: no JobStarving
    # plugin, no preemptor), so preempt is inert rather than guessing.
    nodes = [node("n0")]
    jobs = [job("low", 4, priority=1), job("hi", 4, priority=9)]
    tasks = running("low", [("n0", [i]) for i in range(4)]) + pending("hi", 4)
    cfg = config("allocate", "preempt", tiers=[[{"name": "predicates"}]])
    d = gs.schedule(snap(nodes, jobs, tasks), cfg)
    assert d.evictions == () and d.preemption_reasons == {}


# ---------------------------------------------------------------------------- inside one job


def _mixed_job(
    min_available: int, **low: Any
) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    # One elastic job on a full 2-GPU node: two low-priority tasks run, a high-priority task of
    # the same job is pending.
    jobs = [job("mix", min_available, priority=5)]
    tasks = running("mix", [("n0", [0]), ("n0", [1])], priority=0, **low)
    tasks += pending("mix", 1, start=2, priority=10)
    return jobs, tasks


def test_high_priority_task_evicts_a_lower_priority_task_of_its_own_job() -> None:
    # Volcano's preempt step 3: with room only under its own job's tasks, the job's
    # high-priority pending task takes the place of one low-priority task; one victim only.
    jobs, tasks = _mixed_job(1)
    s = snap([node("n0", gpus=2)], jobs, tasks)
    d = gs.schedule(s, PREEMPT)
    assert evicted(d) == {"mix-0"}  # equal victims: by name
    (e,) = d.evictions
    assert e.preemptor == "mix"
    assert e.reason == "preempted by task 'mix-2' of the same job 'mix' (task priority 10 > 0)"
    assert [(p.task, p.node) for p in d.pipelined] == [("mix-2", "n0")]
    assert d.binds == () and "mix" not in d.preemption_reasons
    # The lower-priority task, back pending, never evicts the higher one: no cycle.
    s2 = settle(apply(s, d))
    d2 = gs.schedule(s2, PREEMPT)
    assert d2.evictions == ()
    assert {b.task for b in d2.binds} == {"mix-2"}
    assert d2.pipelined == ()


def test_within_job_preemption_picks_the_node_needing_fewest_victims() -> None:
    # A 2-GPU task of the job: n0 holds one low task (2 GPUs free after one eviction), n1
    # holds two 1-GPU low tasks. The node with one victim wins; lower task priority first.
    jobs = [job("mix", 1, priority=5)]
    tasks = running("mix", [("n0", [0, 1])], gpus=2, priority=3)
    tasks[0]["name"] = "mix-a"
    tasks += running("mix", [("n1", [0]), ("n1", [1])], priority=1)
    tasks += pending("mix", 1, gpus=2, start=7, priority=10)
    s = snap([node("n0", gpus=2), node("n1", gpus=2)], jobs, tasks)
    d = gs.schedule(s, PREEMPT)
    assert evicted(d) == {"mix-a"}
    assert [(p.task, p.node) for p in d.pipelined] == [("mix-7", "n0")]


def test_within_job_preemption_never_breaks_the_jobs_own_gang() -> None:
    # min_available 2 and exactly 2 running: evicting one would cut the gang. Refused, said.
    jobs, tasks = _mixed_job(2)
    d = gs.schedule(snap([node("n0", gpus=2)], jobs, tasks), PREEMPT)
    assert d.evictions == () and d.pipelined == ()
    reason = d.preemption_reasons["mix"]
    assert reason.startswith("preempt: GangWouldBreak") and "'mix-2'" in reason
    assert "min_available 2" in reason


def test_within_job_preemption_respects_role_minimums() -> None:
    # min 1 overall, but the 'ps' role needs its one task: only the worker may go.
    jobs = [job("mix", 2, priority=5, min_task_member={"ps": 1, "worker": 1})]
    tasks = running("mix", [("n0", [0])], priority=0, role="ps")
    tasks += [dict(t, name="mix-w0") for t in running("mix", [("n0", [1])], role="worker")]
    tasks += [dict(t, name="mix-w1") for t in running("mix", [("n0", [2])], role="worker")]
    tasks += [dict(t, name="mix-w2") for t in running("mix", [("n0", [3])], role="worker")]
    tasks += [dict(t, role="worker") for t in pending("mix", 1, start=9, priority=10)]
    for t in tasks:
        if t["name"] == "mix-w0":
            t["priority"] = 4
    d = gs.schedule(snap([node("n0")], jobs, tasks), PREEMPT)
    # ps (priority 0) is protected by its role minimum; the lowest worker goes.
    assert evicted(d) == {"mix-w1"}


@pytest.mark.parametrize("flag_on", ["job", "task"])
def test_within_job_preemption_respects_preemptable_false(flag_on: str) -> None:
    low = {"preemptable": False} if flag_on == "task" else {}
    jobs, tasks = _mixed_job(1, **low)
    if flag_on == "job":
        jobs[0]["preemptable"] = False
    d = gs.schedule(snap([node("n0", gpus=2)], jobs, tasks), PREEMPT)
    assert d.evictions == () and d.pipelined == ()
    reason = d.preemption_reasons["mix"]
    assert reason.startswith("preempt: VictimsNotPreemptable") and "preemptable: false" in reason


def test_equal_task_priorities_inside_a_job_change_nothing() -> None:
    # An ordinary elastic job with pending tasks: no victims of its own, no reason recorded.
    jobs = [job("mix", 1, priority=5)]
    tasks = running("mix", [("n0", [0]), ("n0", [1])]) + pending("mix", 1, start=2)
    d = gs.schedule(snap([node("n0", gpus=2)], jobs, tasks), PREEMPT)
    assert d.evictions == () and d.pipelined == () and d.preemption_reasons == {}


def test_within_job_preemption_is_not_done_when_the_task_does_not_fit_anyway() -> None:
    # A 4-GPU task on 2-GPU nodes: evicting its siblings cannot make room.
    jobs, tasks = _mixed_job(1)
    tasks[-1]["request"] = {"cpu": 1, "nvidia.com/gpu": 4}
    d = gs.schedule(snap([node("n0", gpus=2)], jobs, tasks), PREEMPT)
    assert d.evictions == ()
    assert d.preemption_reasons["mix"].startswith("preempt: InsufficientResources")
