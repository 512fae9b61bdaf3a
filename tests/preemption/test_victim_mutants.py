"""The victim rules, pinned one boundary at a time, so that every mutant of them fails here.

``tools/mutate_victims.py`` flips each comparison of each victim rule, removes each guard and
each rule, and runs these tests (first) with the rest of the preemption tests; every test here
kills at least one mutant the scenario tests let live. Most ask the rule function itself on
an open session (exact answers, no search in between); the rest run a cycle where the rule is
an action's own.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import gangsched as gs
from _preemption_helpers import PREEMPT, RECLAIM, config, job, node, pending, running
from gangsched.actions.preempt import within_job_jobs
from gangsched.actions.victims import rules
from gangsched.actions.victims import search as victim_search
from gangsched.config import Config
from gangsched.model import DisruptionBudget
from gangsched.scheduler import open_session
from gangsched.session.core import Session, TaskState
from gangsched.session.rules import disruption


def _session(
    jobs: list[dict[str, Any]],
    tasks: list[dict[str, Any]],
    *,
    nodes: int = 1,
    queues: list[dict[str, Any]] | None = None,
    budgets: list[dict[str, Any]] | None = None,
    cfg: Config = PREEMPT,
) -> Session:
    raw: dict[str, Any] = {
        "nodes": [node(f"n{i}") for i in range(nodes)],
        "queues": queues or [{"name": "default"}],
        "jobs": jobs,
        "tasks": tasks,
    }
    if budgets:
        raw["disruption_budgets"] = budgets
    return open_session(gs.Snapshot.from_dict(raw), cfg)


def _j(ssn: Session, name: str) -> int:
    return ssn.snapshot.job_index[name]


def _t(ssn: Session, *names: str) -> list[int]:
    return [ssn.snapshot.task_index[n] for n in names]


def _names(ssn: Session, tasks: Any) -> list[str]:
    return [ssn.snapshot.tasks[int(t)].name for t in tasks]


def _preempt_default(
    nodes: list[dict[str, Any]], jobs: list[dict[str, Any]], tasks: list[dict[str, Any]]
) -> gs.Decisions:
    """One preempting cycle of ``nodes``, ``jobs`` and ``tasks`` in the default queue."""
    raw = {"nodes": nodes, "queues": [{"name": "default"}], "jobs": jobs, "tasks": tasks}
    return gs.schedule(gs.Snapshot.from_dict(raw), PREEMPT)


def _tier1_preemptor(min_available: int, priority: int) -> dict[str, Any]:
    """Job "p", waiting in the queue, whose gang must sit within one tier-1 domain."""
    return job(
        "p",
        min_available,
        priority=priority,
        phase="Inqueue",
        network_topology={"mode": "hard", "highest_tier_allowed": 1},
    )


def _two_domains(jobs: list[dict[str, Any]], tasks: list[dict[str, Any]]) -> gs.Snapshot:
    """Nodes n0 and n1, each alone in its tier-1 domain, with ``jobs`` in the default queue."""
    return gs.Snapshot.from_dict(
        {
            "nodes": [node("n0"), node("n1")],
            "hypernodes": [
                {"name": "s0", "tier": 1, "members": ["n0"]},
                {"name": "s1", "tier": 1, "members": ["n1"]},
            ],
            "queues": [{"name": "default"}],
            "jobs": jobs,
            "tasks": tasks,
        }
    )


def _roles(name: str, spec: str, phase: str = "Pending") -> list[dict[str, Any]]:
    """Tasks ``<name>-<role>-<i>`` from ``"a2 b1"``: two of role a, one of role b (1 GPU each;
    running ones on n0 with distinct devices, n1 once n0 is full)."""
    out: list[dict[str, Any]] = []
    for part in spec.split():
        role, count = part[0], int(part[1:])
        for i in range(count):
            t: dict[str, Any] = {
                "name": f"{name}-{role}-{i}",
                "job": name,
                "role": role,
                "request": {"cpu": 1, "nvidia.com/gpu": 1},
                "phase": phase,
            }
            out.append(t)
    if phase != "Pending":
        for k, t in enumerate(out):
            t.update(node=f"n{k // 4}", gpu_indices=[k % 4])
    return out


# ------------------------------------------------------------------------------ the claim


def test_the_claim_is_the_first_pending_tasks_up_to_the_minimum() -> None:
    ssn = _session(
        [job("j", 3, phase="Running")], running("j", [("n0", [0])]) + pending("j", 4, start=1)
    )
    assert _names(ssn, rules.needed_tasks(ssn, _j(ssn, "j"))) == ["j-1", "j-2"]


def test_no_claim_when_the_pending_tasks_cannot_reach_the_minimum() -> None:
    ssn = _session(
        [job("j", 4, phase="Running")], running("j", [("n0", [0])]) + pending("j", 2, start=1)
    )
    assert rules.needed_tasks(ssn, _j(ssn, "j")) == []


def test_pending_best_effort_tasks_count_toward_the_minimum_but_are_never_claimed() -> None:
    best_effort = {"name": "j-9", "job": "j", "request": {}}
    ssn = _session(
        [job("j", 3, phase="Running")],
        [*running("j", [("n0", [0])]), best_effort, *pending("j", 2, start=1)],
    )
    # ready 1 + pending best-effort 1 → one more task is needed, and it is not the best-effort
    assert _names(ssn, rules.needed_tasks(ssn, _j(ssn, "j"))) == ["j-1"]


def test_a_minimum_met_with_best_effort_tasks_claims_nothing_even_for_a_short_role() -> None:
    best_effort = {"name": "j-a-9", "job": "j", "role": "a", "request": {}}
    ssn = _session(
        [job("j", 2, phase="Running", min_task_member={"a": 1, "b": 1})],
        [*_roles("j", "a1", "Running"), best_effort, *_roles("j", "b1")],
    )
    assert rules.needed_tasks(ssn, _j(ssn, "j")) == []


def test_role_minimums_choose_the_claim_when_they_add_up_to_the_minimum() -> None:
    ssn = _session(
        [job("j", 3, min_task_member={"a": 1, "b": 2}, phase="Inqueue")], _roles("j", "a2 b3")
    )
    assert _names(ssn, rules.needed_tasks(ssn, _j(ssn, "j"))) == ["j-a-0", "j-b-0", "j-b-1"]


def test_role_minimums_above_the_job_minimum_are_ignored_by_the_claim() -> None:
    ssn = _session(
        [job("j", 1, min_task_member={"a": 1, "b": 1}, phase="Inqueue")], _roles("j", "a1 b1")
    )
    assert _names(ssn, rules.needed_tasks(ssn, _j(ssn, "j"))) == ["j-a-0"]


def test_a_role_with_exactly_enough_pending_tasks_is_claimed_whole() -> None:
    ssn = _session(
        [job("j", 3, min_task_member={"a": 1, "b": 2}, phase="Inqueue")], _roles("j", "a1 b2")
    )
    assert _names(ssn, rules.needed_tasks(ssn, _j(ssn, "j"))) == ["j-a-0", "j-b-0", "j-b-1"]


def test_a_role_short_of_pending_tasks_leaves_no_claim() -> None:
    ssn = _session(
        [job("j", 3, min_task_member={"a": 1, "b": 2}, phase="Inqueue")], _roles("j", "a2 b1")
    )
    assert rules.needed_tasks(ssn, _j(ssn, "j")) == []


# ------------------------------------------------------------------------------ preemptable


def test_evictable_needs_preemptable_on_the_task_and_on_its_job() -> None:
    tasks = running("a", [("n0", [0]), ("n0", [1])]) + running("b", [("n0", [2])])
    tasks[1]["preemptable"] = False
    ssn = _session([job("a", 1), job("b", 1, preemptable=False)], tasks)
    got = rules.evictable(ssn, np.array(_t(ssn, "a-0", "a-1", "b-0"), dtype=np.int64))
    assert got.tolist() == [True, False, False]


# ------------------------------------------------------------------------------ who may evict


def test_a_job_whose_age_equals_its_delay_may_evict() -> None:
    ssn = _session([job("j", 1, phase="Inqueue", age=30, preemption_delay=30)], pending("j", 1))
    assert rules.policy_refusal(ssn, _j(ssn, "j")) is None


def test_a_job_younger_than_its_delay_may_not_evict() -> None:
    ssn = _session([job("j", 1, phase="Inqueue", age=29, preemption_delay=30)], pending("j", 1))
    why = rules.policy_refusal(ssn, _j(ssn, "j"))
    assert why is not None and why[0] == rules.PREEMPTION_DELAYED and "1s left" in why[1]


def test_only_a_never_task_inside_the_claim_stops_eviction() -> None:
    tasks = pending("j", 2)
    tasks[0]["preemption_policy"] = "Never"
    ssn = _session([job("j", 1, phase="Inqueue")], tasks)
    j = _j(ssn, "j")
    # the default claim is j-0 (Never); a claim of j-1 alone may evict
    why = rules.policy_refusal(ssn, j)
    assert why is not None and why[0] == rules.POLICY_NEVER
    assert rules.policy_refusal(ssn, j, _t(ssn, "j-1")) is None


# ------------------------------------------------------------------------------ priority


def _priority_case(**preemptor: Any) -> Session:
    queues = [{"name": "default"}, {"name": "other"}]
    jobs = [
        job("p", 2, priority=5, **preemptor),
        job("lower", 1, priority=4),
        job("equal", 1, priority=5),
        job("foreign", 1, priority=1, queue="other"),
        job("guarded", 1, priority=1, preemptable=False),
        job("leaving", 1, priority=1),
    ]
    tasks = (
        running("p", [("n0", [0])])
        + pending("p", 1, start=1)
        + running("lower", [("n0", [1])])
        + running("equal", [("n0", [2])])
        + running("foreign", [("n0", [3])])
        + running("guarded", [("n1", [0])])
        + running("leaving", [("n1", [1])], phase="Releasing")
    )
    return _session(jobs, tasks, nodes=2, queues=queues)


def test_preempt_candidates_are_lower_priority_tasks_of_other_jobs_of_the_same_queue() -> None:
    ssn = _priority_case()
    cands, why = rules.preempt_candidates(ssn, _j(ssn, "p"))
    assert (_names(ssn, cands), why) == (["lower-0"], None)


def test_preempt_candidates_of_a_delayed_job_are_none() -> None:
    ssn = _priority_case(age=0, preemption_delay=10)
    cands, why = rules.preempt_candidates(ssn, _j(ssn, "p"))
    assert cands.size == 0 and why is not None and why[0] == rules.PREEMPTION_DELAYED


def test_preempt_candidates_say_which_rule_left_none() -> None:
    def refusal(jobs: list[dict[str, Any]], tasks: list[dict[str, Any]]) -> str:
        ssn = _session([job("p", 1, priority=5, phase="Inqueue"), *jobs], tasks + pending("p", 1))
        cands, why = rules.preempt_candidates(ssn, _j(ssn, "p"))
        assert cands.size == 0 and why is not None
        return why[0]

    assert refusal([], []) == rules.NO_VICTIMS
    assert refusal([job("e", 1, priority=5)], running("e", [("n0", [0])])) == (
        rules.NO_LOWER_PRIORITY
    )
    guarded = [job("g", 1, priority=1, preemptable=False)]
    assert refusal(guarded, running("g", [("n0", [0])])) == rules.NOT_PREEMPTABLE


def test_the_preemptors_own_running_tasks_are_no_candidates() -> None:
    # its own tasks have its priority, but the refusal names the missing other jobs
    ssn = _session(
        [job("p", 2, priority=5, phase="Running")],
        running("p", [("n0", [0])]) + pending("p", 1, start=1),
    )
    cands, why = rules.preempt_candidates(ssn, _j(ssn, "p"))
    assert cands.size == 0 and why is not None and why[0] == rules.NO_VICTIMS


# ------------------------------------------------------------------------------ gang surplus


def test_surplus_is_taken_in_the_given_order_up_to_ready_minus_minimum() -> None:
    ssn = _session([job("j", 2)], running("j", [("n0", [i]) for i in range(4)]))
    order = _t(ssn, "j-3", "j-1", "j-0", "j-2")
    assert _names(ssn, rules.spare_tasks(ssn, _j(ssn, "j"), order)) == ["j-3", "j-1"]


def test_surplus_skips_a_role_at_its_minimum() -> None:
    ssn = _session([job("j", 3, min_task_member={"a": 1, "b": 2})], _roles("j", "a2 b2", "Running"))
    order = _t(ssn, "j-b-0", "j-a-0", "j-a-1")
    assert _names(ssn, rules.spare_tasks(ssn, _j(ssn, "j"), order)) == ["j-a-0"]


def test_surplus_ignores_role_minimums_above_the_job_minimum() -> None:
    ssn = _session([job("j", 1, min_task_member={"a": 1, "b": 1})], _roles("j", "a1 b1", "Running"))
    order = _t(ssn, "j-b-0", "j-a-0")
    assert _names(ssn, rules.spare_tasks(ssn, _j(ssn, "j"), order)) == ["j-b-0"]


# ------------------------------------------------------------------------------ whole job


def test_a_job_goes_whole_only_with_every_running_task_and_nothing_fresh() -> None:
    ssn = _session([job("j", 2)], running("j", [("n0", [0]), ("n0", [1])]))
    j = _j(ssn, "j")
    assert rules.may_go_whole(ssn, j, _t(ssn, "j-0", "j-1"))
    assert not rules.may_go_whole(ssn, j, _t(ssn, "j-0"))


def test_a_job_holding_a_reservation_never_goes_whole() -> None:
    tasks = running("j", [("n0", [0]), ("n0", [1])]) + running("j", [("n0", [2])])
    tasks[2].update(name="j-2", phase="Pipelined")
    ssn = _session([job("j", 2)], tasks)
    assert not rules.may_go_whole(ssn, _j(ssn, "j"), _t(ssn, "j-0", "j-1"))


def test_gang_allowed_keeps_jobs_with_a_surplus_or_that_may_go_whole() -> None:
    jobs = [job("spare", 1), job("at-min", 2), job("whole", 2)]
    tasks = (
        running("spare", [("n0", [0]), ("n0", [1])])
        + running("at-min", [("n0", [2]), ("n0", [3])])
        + running("whole", [("n1", [0]), ("n1", [1])])
    )
    ssn = _session(jobs, tasks, nodes=2)
    cands = np.array(_t(ssn, "spare-0", "at-min-0", "whole-0", "whole-1"), dtype=np.int64)
    assert _names(ssn, rules.gang_allowed(ssn, cands)) == ["spare-0", "whole-0", "whole-1"]


# ------------------------------------------------------------------------------ preemptors


def _preemptor_case(cfg: Config) -> Session:
    queues = [{"name": "default"}, {"name": "second"}]
    jobs = [
        job("pending-phase", 1, phase="Pending"),
        job("low", 1, phase="Inqueue", priority=1),
        job("high", 1, phase="Inqueue", priority=9),
        job("later-queue", 1, phase="Inqueue", priority=9, queue="second"),
        job("fed", 1),
        job("nothing-pending", 2),
        job("invalid", 5, phase="Inqueue"),
    ]
    tasks = (
        pending("pending-phase", 1)
        + pending("low", 1)
        + pending("high", 1)
        + pending("later-queue", 1)
        + running("fed", [("n0", [0])])
        + pending("fed", 1, start=1)
        + running("nothing-pending", [("n0", [1])])
        + pending("invalid", 1)
    )
    return _session(jobs, tasks, queues=queues, cfg=cfg)


def test_preemptors_are_starving_valid_jobs_with_pending_tasks_in_queue_then_job_order() -> None:
    ssn = _preemptor_case(PREEMPT)
    got = [ssn.snapshot.jobs[j].name for j in rules.preemptors(ssn)]
    # queue "second" holds nothing, so it comes first; then priority within a queue
    assert got == ["later-queue", "high", "low"]


def test_without_enqueue_a_pending_job_is_a_preemptor_too() -> None:
    ssn = _preemptor_case(config("allocate", "preempt"))
    got = [ssn.snapshot.jobs[j].name for j in rules.preemptors(ssn)]
    assert got == ["later-queue", "high", "low", "pending-phase"]


# ------------------------------------------------------------------------------ budgets


def test_desired_counts_of_budgets_round_percentages_up() -> None:
    def desired(**fields: Any) -> int:
        return disruption.desired_count(DisruptionBudget(name="b", jobs=("j",), **fields), 3)

    assert desired(min_available=2) == 2
    assert desired(min_available="50%") == 2  # 1.5 → 2
    assert desired(max_unavailable=1) == 2
    assert desired(max_unavailable="50%") == 1  # 3 − ⌈1.5⌉
    assert desired(max_unavailable=5) == 0


def _budget_case(max_unavailable: int | None) -> Session:
    budgets = (
        None
        if max_unavailable is None
        else [{"name": "pdb", "jobs": ["j"], "max_unavailable": max_unavailable}]
    )
    return _session(
        [job("j", 1)], running("j", [("n0", [0]), ("n0", [1]), ("n0", [2])]), budgets=budgets
    )


def test_a_budget_breaks_only_past_the_disruptions_it_allows() -> None:
    ssn = _budget_case(1)
    assert disruption.would_break(ssn, _t(ssn, "j-0")) == []
    assert disruption.would_break(ssn, _t(ssn, "j-0", "j-1")) == ["pdb"]
    assert disruption.would_break(ssn, []) == []


def test_without_budgets_nothing_breaks_and_nothing_is_exhausted() -> None:
    ssn = _budget_case(None)
    tasks = np.array(_t(ssn, "j-0", "j-1"), dtype=np.int64)
    assert disruption.would_break(ssn, tasks.tolist()) == []
    assert disruption.exhausted(ssn, tasks).tolist() == [False, False]
    assert disruption.allowed(ssn).size == 0


def test_a_budget_allowing_no_disruption_exhausts_its_tasks() -> None:
    for max_unavailable, protected in ((0, True), (1, False)):
        ssn = _budget_case(max_unavailable)
        tasks = np.array(_t(ssn, "j-0", "j-1"), dtype=np.int64)
        assert disruption.exhausted(ssn, tasks).tolist() == [protected, protected]
        assert disruption.allowed(ssn).tolist() == [max_unavailable]


# ------------------------------------------------------------------------------ the search


def _domains_case(second: str) -> gs.Snapshot:
    """Two tier-1 domains of one node each, both full; the preemptor's hard topology allows
    one domain. ``second`` is the priority-1 twin of ``low-a`` on n1, or a job of priority 9."""
    jobs = [
        job("low-a", 4, priority=1),
        job(second, 4, priority=1 if second == "low-b" else 9),
        _tier1_preemptor(4, priority=5),
    ]
    tasks = (
        running("low-a", [("n0", [i]) for i in range(4)])
        + running(second, [("n1", [i]) for i in range(4)])
        + pending("p", 4)
    )
    return _two_domains(jobs, tasks)


def test_equal_plans_in_two_domains_go_to_the_first_domain() -> None:
    d = gs.schedule(_domains_case("low-b"), PREEMPT)
    assert {e.task for e in d.evictions} == {f"low-a-{i}" for i in range(4)}
    assert {p.node for p in d.pipelined} == {"n0"}


def test_a_domain_without_a_plan_keeps_the_plan_of_an_earlier_one() -> None:
    d = gs.schedule(_domains_case("high"), PREEMPT)
    assert {e.task for e in d.evictions} == {f"low-a-{i}" for i in range(4)}


def test_a_task_its_budget_protects_is_left_out_when_another_victim_will_do() -> None:
    # low-0 comes first in victim order, but its budget allows no disruption: the search
    # takes low-1 instead, and breaks no budget
    raw = {
        "nodes": [node("n0")],
        "queues": [{"name": "default"}],
        "jobs": [job("low", 1, priority=1), job("p", 1, priority=5, phase="Inqueue")],
        "tasks": running("low", [("n0", [i]) for i in range(4)]) + pending("p", 1),
        "disruption_budgets": [{"name": "pdb", "tasks": ["low-0"], "max_unavailable": 0}],
    }
    d = gs.schedule(gs.Snapshot.from_dict(raw), PREEMPT)
    assert [e.task for e in d.evictions] == ["low-1"]
    assert "disruption budget" not in d.evictions[0].reason


def test_a_set_breaking_a_budget_that_still_allows_one_disruption_is_not_taken() -> None:
    # low1 (newer) would be the victim; its budget allows one disruption, the claim needs two
    # of its tasks: the search takes two of low2's instead
    raw = {
        "nodes": [node("n0"), node("n1")],
        "queues": [{"name": "default"}],
        "jobs": [
            job("low1", 1, priority=1, creation=1),
            job("low2", 1, priority=1),
            job("p", 2, priority=5, phase="Inqueue"),
        ],
        "tasks": running("low1", [("n0", [i]) for i in range(4)])
        + running("low2", [("n1", [i]) for i in range(4)])
        + pending("p", 2),
        "disruption_budgets": [{"name": "pdb", "jobs": ["low1"], "max_unavailable": 1}],
    }
    d = gs.schedule(gs.Snapshot.from_dict(raw), PREEMPT)
    assert {s.split("-")[0] for s in (e.task for e in d.evictions)} == {"low2"}
    assert len(d.evictions) == 2
    assert not any("disruption budget" in e.reason for e in d.evictions)


def test_candidates_all_refused_by_a_plugin_at_their_gang_minimum_are_explained_as_gang() -> None:
    # low-0 is system-critical (conformance refuses it; no later tier answers), low-1 is not
    # preemptable: the only candidate belongs to a job at its minimum that cannot go whole
    tasks = running("low", [("n0", [0]), ("n0", [1])]) + pending("p", 1)
    tasks[0]["priority"] = 2_000_000_000
    tasks[1]["preemptable"] = False
    ssn_snap = gs.Snapshot.from_dict(
        {
            "nodes": [node("n0", gpus=2)],
            "queues": [{"name": "default"}],
            "jobs": [job("low", 2, priority=1), job("p", 1, priority=5, phase="Inqueue")],
            "tasks": tasks,
        }
    )
    tiers = [
        [{"name": "priority"}, {"name": "gang"}, {"name": "conformance"}],
        [{"name": "predicates"}, {"name": "proportion"}, {"name": "nodeorder"}],
    ]
    d = gs.schedule(ssn_snap, config("enqueue", "allocate", "preempt", tiers=tiers))
    assert d.evictions == ()
    assert d.preemption_reasons["p"].startswith(f"preempt: {rules.GANG_WOULD_BREAK}: every")


@pytest.mark.parametrize("bystander", ["on-a-node-the-claim-cannot-use", "at-its-minimum"])
def test_a_job_that_cannot_help_does_not_count_against_the_pair_limit(bystander: str) -> None:
    # Twelve one-task victim jobs, two per full node: one job frees half a node, the 4-GPU
    # claim needs a whole one, so only a pair on one node works. With at most PAIR_LIMIT jobs
    # that can help, every pair is tried and the cheapest wins: the pair holding the newest
    # job (rank 0). The greedy fallback would stop at the first node it frees instead.
    assert victim_search.PAIR_LIMIT == 12
    creation = [12, 1, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2]
    jobs = [job(f"v{k}", 1, priority=1, creation=c) for k, c in enumerate(creation)]
    tasks = [
        t
        for k in range(12)
        for t in running(f"v{k}", [(f"n{k // 2}", [2 * (k % 2), 2 * (k % 2) + 1])], gpus=2)
    ]
    nodes = [node(f"n{i}", labels={"pool": "main"}) for i in range(6)]
    if bystander == "at-its-minimum":
        nodes.append(node("n6", labels={"pool": "main"}))
        jobs.append(job("u", 2, priority=1, creation=20))
        tasks += running("u", [("n6", [0, 1]), ("n6", [2, 3])], gpus=2)
        tasks[-1]["preemptable"] = False
    else:
        nodes.append(node("n6", gpus=2))
        jobs.append(job("u", 1, priority=1, creation=20))
        tasks += running("u", [("n6", [0, 1])], gpus=2)
    jobs.append(job("p", 1, priority=5, phase="Inqueue"))
    tasks += pending("p", 1, gpus=4, node_selector={"pool": "main"})
    raw = {"nodes": nodes, "queues": [{"name": "default"}], "jobs": jobs, "tasks": tasks}
    d = gs.schedule(gs.Snapshot.from_dict(raw), PREEMPT)
    assert {e.task for e in d.evictions} == {"v0-0", "v1-0"}


def _two_node_pairs(prios: tuple[int, int, int, int]) -> gs.Snapshot:
    """Two full nodes of two 2-GPU victim jobs each (priorities ``prios``, n0 first); the
    4-GPU claim needs one whole node, so only a pair on one node makes room."""
    jobs = [job(f"v{k}", 1, priority=p, creation=k) for k, p in enumerate(prios)]
    tasks = [
        t
        for k in range(4)
        for t in running(f"v{k}", [(f"n{k // 2}", [2 * (k % 2), 2 * (k % 2) + 1])], gpus=2)
    ]
    jobs.append(job("p", 1, priority=9, phase="Inqueue"))
    tasks += pending("p", 1, gpus=4)
    return gs.Snapshot.from_dict(
        {
            "nodes": [node("n0"), node("n1")],
            "queues": [{"name": "default"}],
            "jobs": jobs,
            "tasks": tasks,
        }
    )


def test_of_two_pairs_the_one_whose_highest_priority_is_lower_is_hit() -> None:
    # n0 holds priorities 1 and 4, n1 holds 2 and 3: the pair on n1 (highest 3 < 4) goes
    d = gs.schedule(_two_node_pairs((1, 4, 2, 3)), PREEMPT)
    assert {e.task for e in d.evictions} == {"v2-0", "v3-0"}


def test_one_job_of_higher_priority_is_hit_before_two_of_lower_priority() -> None:
    # the hard topology allows either node; n0 needs two priority-1 jobs to go, n1 one job of
    # priority 3: fewer jobs hit comes first
    jobs = [
        job("a", 1, priority=1),
        job("b", 1, priority=1, creation=1),
        job("c", 1, priority=3),
        _tier1_preemptor(1, priority=9),
    ]
    tasks = (
        running("a", [("n0", [0, 1])], gpus=2)
        + running("b", [("n0", [2, 3])], gpus=2)
        + running("c", [("n1", [0, 1, 2, 3])], gpus=4)
        + pending("p", 1, gpus=4)
    )
    d = gs.schedule(_two_domains(jobs, tasks), PREEMPT)
    assert {e.task for e in d.evictions} == {"c-0"}


def test_trimming_a_job_comes_before_evicting_one_whole_even_when_it_frees_more() -> None:
    # a goes whole and frees exactly the claim; b gives one surplus 4-GPU task (2 GPUs more
    # than needed): trim before kill
    jobs = [
        job("a", 1, priority=1),
        job("b", 1, priority=1),
        job("p", 1, priority=9, phase="Inqueue"),
    ]
    tasks = (
        running("a", [("n0", [0, 1])], gpus=2)
        + running("b", [("n1", [0, 1, 2, 3]), ("n1", [4, 5, 6, 7])], gpus=4)
        + pending("p", 1, gpus=2)
    )
    d = _preempt_default([node("n0", gpus=2), node("n1", gpus=8)], jobs, tasks)
    assert [e.task for e in d.evictions] == ["b-0"]


# ------------------------------------------------------------------------------ consolidate


def test_only_running_tasks_of_other_jobs_move() -> None:
    # the preemptor's own running task and another job's terminating task are not movable,
    # and the only other running task is not preemptable: nothing may move
    tasks = (
        running("p", [("n0", [0, 1])], gpus=2)
        + pending("p", 1, gpus=4, start=1)
        + running("r", [("n0", [2, 3])], gpus=2, phase="Releasing")
        + running("w", [("n1", [0, 1, 2, 3])], gpus=4, preemptable=False)
    )
    raw = {
        "nodes": [node("n0"), node("n1")],
        "queues": [{"name": "default"}],
        "jobs": [job("p", 2, phase="Running"), job("r", 1), job("w", 1)],
        "tasks": tasks,
    }
    d = gs.schedule(gs.Snapshot.from_dict(raw), config("enqueue", "allocate", "consolidate"))
    assert d.evictions == ()
    assert d.preemption_reasons["p"].startswith("consolidate: NoMovableTasks:")


@pytest.mark.parametrize(("mode", "moves"), [("hard", False), ("soft", True)])
def test_tasks_of_hard_topology_jobs_never_move(mode: str, moves: bool) -> None:
    # 2 nodes × 8 GPUs, each running one 4-GPU job; an 8-GPU gang waits
    topo = {"mode": mode, "highest_tier_allowed": 1}
    raw = {
        "nodes": [node("n0", gpus=8), node("n1", gpus=8)],
        "hypernodes": [{"name": "s0", "tier": 1, "members": ["n0", "n1"]}],
        "queues": [{"name": "default"}],
        "jobs": [
            job("a", 1, network_topology=topo),
            job("b", 1, creation=1, network_topology=topo),
            job("big", 1, phase="Inqueue"),
        ],
        "tasks": running("a", [("n0", [0, 1, 2, 3])], gpus=4)
        + running("b", [("n1", [0, 1, 2, 3])], gpus=4)
        + pending("big", 1, gpus=8),
    }
    d = gs.schedule(gs.Snapshot.from_dict(raw), config("enqueue", "allocate", "consolidate"))
    assert len(d.evictions) == (1 if moves else 0)
    if not moves:
        assert d.preemption_reasons["big"].startswith("consolidate: NoMovableTasks:")


@pytest.mark.parametrize(("guarantee", "moves"), [(8, False), (4, True)])
def test_a_move_never_takes_a_queue_below_its_guarantee(guarantee: int, moves: bool) -> None:
    # moving a 4-GPU task leaves the queue's running tasks 4 GPUs: at a guarantee of 4, not 8
    raw = {
        "nodes": [node("n0", gpus=8), node("n1", gpus=8)],
        "queues": [{"name": "default", "guarantee": {"nvidia.com/gpu": guarantee}}],
        "jobs": [job("a", 1), job("b", 1, creation=1), job("big", 1, phase="Inqueue")],
        "tasks": running("a", [("n0", [0, 1, 2, 3])], gpus=4)
        + running("b", [("n1", [0, 1, 2, 3])], gpus=4)
        + pending("big", 1, gpus=8),
    }
    d = gs.schedule(gs.Snapshot.from_dict(raw), config("enqueue", "allocate", "consolidate"))
    assert len(d.evictions) == (1 if moves else 0)


@pytest.mark.parametrize(
    ("guarantee", "moves"),
    [({"nvidia.com/gpu": 4}, False), ({"memory": "100Gi"}, True)],
    ids=["own-queue-gpus", "a-resource-the-task-does-not-hold"],
)
def test_the_guarantee_counts_the_moved_tasks_queue_on_the_resources_it_holds(
    guarantee: dict[str, Any], moves: bool
) -> None:
    # only a (queue g) may move; g runs nothing else, so moving a takes its GPUs to 0 — below
    # a GPU guarantee, whatever queue o runs; a memory guarantee a's task holds none of is
    # no obstacle
    raw = {
        "nodes": [node("n0", gpus=8), node("n1", gpus=8)],
        "queues": [{"name": "g", "guarantee": guarantee}, {"name": "o"}],
        "jobs": [
            job("a", 1, queue="g"),
            job("b", 1, queue="o", creation=1, preemptable=False),
            job("big", 1, queue="o", phase="Inqueue"),
        ],
        "tasks": running("a", [("n0", [0, 1, 2, 3])], gpus=4)
        + running("b", [("n1", [0, 1, 2, 3])], gpus=4)
        + pending("big", 1, gpus=8),
    }
    d = gs.schedule(gs.Snapshot.from_dict(raw), config("enqueue", "allocate", "consolidate"))
    assert [e.task for e in d.evictions] == (["a-0"] if moves else [])


# ------------------------------------------------------------------------------ inside a job


def test_within_job_candidates_are_jobs_whose_pending_task_outranks_a_running_one() -> None:
    devices = iter(range(8))

    def task(job_name: str, i: int, prio: int, phase: str = "Pending", **extra: Any) -> Any:
        t: dict[str, Any] = {
            "name": f"{job_name}-{i}",
            "job": job_name,
            "request": {"cpu": 1, "nvidia.com/gpu": 1},
            "priority": prio,
            "phase": phase,
            **extra,
        }
        if phase != "Pending":
            t.update(node="n0", gpu_indices=[next(devices)])
        return t

    jobs = [
        job("outranks", 1),
        job("equal", 1),
        job("running-only", 1),
        job("best-effort", 1),
        job("not-admitted", 1, phase="Pending"),
    ]
    tasks = [
        task("outranks", 0, 1, "Running"),
        task("outranks", 1, 2),
        task("equal", 0, 2, "Running"),
        task("equal", 1, 2),
        task("running-only", 0, 1, "Running"),
        task("running-only", 1, 3, "Running"),
        task("best-effort", 0, 1, "Running"),
        {"name": "best-effort-1", "job": "best-effort", "request": {}, "priority": 9},
        task("not-admitted", 0, 1, "Running"),
        task("not-admitted", 1, 2),
    ]
    raw = {
        "nodes": [node("n0", gpus=8)],
        "queues": [{"name": "default"}],
        "jobs": jobs,
        "tasks": tasks,
    }
    ssn = open_session(gs.Snapshot.from_dict(raw), PREEMPT)
    assert [ssn.snapshot.jobs[j].name for j in within_job_jobs(ssn)] == ["outranks"]
    ssn = open_session(gs.Snapshot.from_dict(raw), config("allocate", "preempt"))
    got = {ssn.snapshot.jobs[j].name for j in within_job_jobs(ssn)}
    assert got == {"outranks", "not-admitted"}


def test_a_pending_best_effort_task_takes_no_part_in_within_job_preemption() -> None:
    # j-1 outranks j-0 but the job is at its minimum; the best-effort j-9 (priority 9) is
    # backfill's, never reserved by preempt
    tasks = [
        *running("j", [("n0", [0, 1, 2, 3])], gpus=4, priority=1),
        *pending("j", 1, start=1, priority=2),
        {"name": "j-9", "job": "j", "request": {}, "priority": 9},
    ]
    d = _preempt_default([node("n0")], [job("j", 1, phase="Running")], tasks)
    assert d.evictions == ()
    assert "j-9" not in {p.task for p in d.pipelined}


def test_within_job_victims_are_running_tasks_only() -> None:
    # j-1 (priority 2, 3 GPUs) needs the 2 GPUs j-5 is releasing and one more: j-0's. The
    # terminating j-5 (priority 0) is no victim, though it is the job's lowest task.
    tasks = [
        *running("j", [("n0", [0]), ("n0", [1])], priority=1),
        *pending("j", 1, gpus=3, start=2, priority=2),
        *running("j", [("n0", [2, 3])], gpus=2, priority=0, phase="Releasing", name="j-5"),
    ]
    d = _preempt_default([node("n0")], [job("j", 1, phase="Running")], tasks)
    assert [e.task for e in d.evictions] == ["j-0"]
    assert [p.task for p in d.pipelined] == ["j-2"]


def test_within_job_victims_have_a_strictly_lower_task_priority() -> None:
    # j-2 (priority 2, 4 GPUs) could fit on n0 only by evicting j-0 and j-1 of its own
    # priority; j-3 (priority 1, on n1) is the only lower task, and evicting it is not enough
    tasks = [
        *running("j", [("n0", [0, 1]), ("n0", [2, 3])], gpus=2, priority=2),
        *pending("j", 1, gpus=4, start=2, priority=2),
        *running("j", [("n1", [0])], name="j-3", priority=1),
        *running("x", [("n1", [1, 2, 3])], gpus=3, preemptable=False),
    ]
    d = _preempt_default(
        [node("n0"), node("n1")], [job("j", 1, phase="Running"), job("x", 1)], tasks
    )
    assert d.evictions == ()


def test_a_pending_task_that_outranks_no_running_task_is_passed_over_silently() -> None:
    # j-2 (priority 2) evicts j-0; j-3 (priority 1) outranks nothing: no refusal is recorded
    tasks = [
        *running("j", [("n0", [0, 1]), ("n0", [2, 3])], gpus=2, priority=1),
        *pending("j", 1, gpus=2, start=2, priority=2),
        *pending("j", 1, gpus=2, start=3, priority=1),
    ]
    d = _preempt_default([node("n0")], [job("j", 1, phase="Running")], tasks)
    assert [e.task for e in d.evictions] == ["j-0"]
    assert "j" not in d.preemption_reasons


# ------------------------------------------------------------------------------ starving


class _StarvingUntilEvictions:
    """Every job starves until something is being evicted or reserved (a plugin that changes
    its mind in the middle of a cycle, unlike ``gang``)."""

    name = "starving-until-evictions"
    known_arguments: tuple[str, ...] = ()

    def __init__(self, arguments: Any) -> None:
        self.arguments = arguments

    def job_starving(self, ssn: Session, job: int) -> bool:
        moving = (TaskState.RELEASING, TaskState.PIPELINED)
        return not bool(np.any(np.isin(ssn.task_state, moving)))


def _starving_plugin_config(action: str = "preempt") -> tuple[gs.Registry, Config]:
    reg = gs.default_registry()
    reg.register_plugin(_StarvingUntilEvictions.name, _StarvingUntilEvictions)
    tiers = [
        [{"name": _StarvingUntilEvictions.name}],
        [{"name": "priority"}, {"name": "gang"}, {"name": "conformance"}],
        [{"name": "predicates"}, {"name": "proportion"}, {"name": "nodeorder"}],
    ]
    cfg = Config.from_dict(
        {"actions": ["enqueue", "allocate", action], "tiers": tiers}, plugins=reg.plugins
    )
    return reg, cfg


def test_a_job_without_pending_tasks_is_no_preemptor_even_when_called_starving() -> None:
    reg, cfg = _starving_plugin_config()
    raw = {
        "nodes": [node("n0")],
        "queues": [{"name": "default"}],
        "jobs": [job("full", 1), job("p", 1, phase="Inqueue")],
        "tasks": running("full", [("n0", [0])]) + pending("p", 1),
    }
    ssn = open_session(gs.Snapshot.from_dict(raw), cfg, registry=reg)
    assert [ssn.snapshot.jobs[j].name for j in rules.preemptors(ssn)] == ["p"]


def test_a_preemptor_that_stops_starving_before_its_turn_is_skipped() -> None:
    # consolidate moves a task for big1; then no job starves any more, so big2 is skipped
    # (it would find no move and say so)
    reg, cfg = _starving_plugin_config("consolidate")
    raw = {
        "nodes": [node("n0", gpus=8), node("n1", gpus=8)],
        "queues": [{"name": "default"}],
        "jobs": [
            job("a", 1),
            job("b", 1, creation=1),
            job("big1", 1, phase="Inqueue", priority=9),
            job("big2", 1, phase="Inqueue", priority=8),
        ],
        "tasks": running("a", [("n0", [0, 1, 2, 3])], gpus=4)
        + running("b", [("n1", [0, 1, 2, 3])], gpus=4)
        + pending("big1", 1, gpus=8)
        + pending("big2", 1, gpus=8),
    }
    d = gs.schedule(gs.Snapshot.from_dict(raw), cfg, registry=reg)
    assert len(d.evictions) == 1 and d.evictions[0].preemptor == "big1"
    assert "big2" not in d.preemption_reasons


# ------------------------------------------------------------------------------ reclaim


def test_a_reclaimer_with_no_running_task_in_another_queue_says_so() -> None:
    # its own queue's running task is no candidate
    raw = {
        "nodes": [node("n0", gpus=2)],
        "queues": [{"name": "a"}, {"name": "b"}],
        "jobs": [job("mine", 1, queue="a"), job("p", 1, queue="a", phase="Inqueue", creation=1)],
        "tasks": running("mine", [("n0", [0, 1])], gpus=2) + pending("p", 1),
    }
    d = gs.schedule(gs.Snapshot.from_dict(raw), RECLAIM)
    assert d.evictions == ()
    assert d.preemption_reasons["p"].startswith(f"reclaim: {rules.NO_VICTIMS}: no running task")


def test_reclaim_never_takes_a_terminating_task() -> None:
    # queue b runs 4 GPUs, beyond its half; b1-0 is already terminating and comes first in
    # victim order: the two GPUs a1 needs come from b1's running tasks
    tasks = running("b1", [("n0", [0]), ("n0", [1]), ("n0", [2]), ("n0", [3])])
    tasks[0]["phase"] = "Releasing"
    tasks += running("b1", [("n1", [0])], name="b1-4")
    raw = {
        "nodes": [node("n0"), node("n1", gpus=1)],
        "queues": [{"name": "a"}, {"name": "b"}],
        "jobs": [job("b1", 1, queue="b"), job("a1", 2, queue="a", phase="Inqueue")],
        "tasks": tasks + pending("a1", 2),
    }
    d = gs.schedule(gs.Snapshot.from_dict(raw), RECLAIM)
    assert d.evictions, d.preemption_reasons
    assert "b1-0" not in {e.task for e in d.evictions}


def test_non_reclaimable_queues_within_their_share_are_not_named_as_the_obstacle() -> None:
    # c is not reclaimable but holds no more than it deserves: the refusal says no queue is
    # above its share, not that c is closed to reclaim
    raw = {
        "nodes": [node("n0")],
        "queues": [{"name": "a"}, {"name": "c", "reclaimable": False}],
        "jobs": [job("c1", 1, queue="c"), job("p", 4, queue="a", phase="Inqueue")],
        "tasks": running("c1", [("n0", [0])]) + pending("p", 4),
    }
    d = gs.schedule(gs.Snapshot.from_dict(raw), RECLAIM)
    assert d.preemption_reasons["p"] == (
        f"reclaim: {rules.QUEUE_NOT_OVER_DESERVED}: no other queue holds more than its deserved "
        "share"
    )


def _memory_heavy_reclaimer(releasing: bool = False) -> gs.Snapshot:
    """Queue a holds 200Gi of memory but deserves a quarter of it (b weighs 3 and asks for
    more); it is under its GPU share, so not overused, and its 1-GPU claim asks for no
    memory. With ``releasing``, one of b's GPUs is already being released."""

    def task(name: str, job_name: str, memory: str, gpus: int, on: str | None) -> Any:
        t: dict[str, Any] = {
            "name": name,
            "job": job_name,
            "request": {"cpu": 1, "nvidia.com/gpu": gpus, **({"memory": memory} if memory else {})},
        }
        if on is not None:
            t.update(phase="Running", node=on, gpu_indices=[int(name[-1])] if gpus else [])
            if releasing and name == "b1-0":
                t["phase"] = "Releasing"
        return t

    raw = {
        "nodes": [node("n0"), node("n1", gpus=0)],
        "queues": [{"name": "a", "weight": 1}, {"name": "b", "weight": 3}],
        "jobs": [
            job("am", 1, queue="a"),
            job("b1", 1, queue="b"),
            job("b2", 2, queue="b", phase="Inqueue"),
            job("p", 1, queue="a", phase="Inqueue"),
        ],
        "tasks": [
            task("am-0", "am", "200Gi", 0, "n1"),
            *(task(f"b1-{i}", "b1", "50Gi", 1, "n0") for i in range(4)),
            *(task(f"b2-{i}", "b2", "150Gi", 0, None) for i in range(2)),
            task("p-0", "p", "", 1, None),
        ],
    }
    return gs.Snapshot.from_dict(raw)


def test_a_reclaimer_above_its_share_on_another_resource_may_not_reclaim() -> None:
    # after the move a would still be above its share (and could be reclaimed back at once)
    d = gs.schedule(_memory_heavy_reclaimer(), RECLAIM)
    assert d.evictions == ()
    assert d.preemption_reasons["p"].startswith(f"reclaim: {rules.SHARE_GUARD}:")


def test_a_queue_above_its_share_on_every_resource_it_holds_is_overused() -> None:
    # a runs 4 GPUs but deserves 2 (b asks for as many); its pending task asks for a GPU only
    a_tasks = running("a1", [("n0", [i]) for i in range(4)])
    raw = {
        "nodes": [node("n0")],
        "queues": [{"name": "a"}, {"name": "b"}],
        "jobs": [
            job("a1", 1, queue="a"),
            job("p", 1, queue="a", phase="Inqueue"),
            job("b1", 4, queue="b", phase="Inqueue"),
        ],
        "tasks": [
            *a_tasks,
            {"name": "p-0", "job": "p", "request": {"nvidia.com/gpu": 1}},
            *pending("b1", 4),
        ],
    }
    d = gs.schedule(gs.Snapshot.from_dict(raw), RECLAIM)
    assert d.preemption_reasons["p"].startswith(f"reclaim: {rules.QUEUE_OVERUSED}:")


def test_the_share_guard_does_not_refuse_a_claim_that_evicts_nothing() -> None:
    # the same reclaimer, with a GPU already being released: the claim is reserved on it
    # without evictions, though the queue stays above its memory share
    d = gs.schedule(_memory_heavy_reclaimer(releasing=True), config("enqueue", "reclaim"))
    assert d.evictions == ()
    assert [p.task for p in d.pipelined] == ["p-0"]


def test_a_pending_task_of_another_job_never_moves() -> None:
    # x runs two tasks on n2 (a surplus of one) and has a pending one that fits nowhere, first
    # in name order: only running tasks are movable, so the move is a's or b's
    raw = {
        "nodes": [node("n0", gpus=8), node("n1", gpus=8), node("n2")],
        "queues": [{"name": "default"}],
        "jobs": [
            job("a", 1),
            job("b", 1, creation=1),
            job("x", 1, creation=2),
            job("big", 1, phase="Inqueue"),
        ],
        "tasks": running("a", [("n0", [0, 1, 2, 3])], gpus=4)
        + running("b", [("n1", [0, 1, 2, 3])], gpus=4)
        + [{"name": "x-0", "job": "x", "request": {"cpu": 100, "nvidia.com/gpu": 1}}]
        + running("x", [("n2", [0])], name="x-1")
        + running("x", [("n2", [1])], name="x-2")
        + pending("big", 1, gpus=8),
    }
    d = gs.schedule(gs.Snapshot.from_dict(raw), config("enqueue", "allocate", "consolidate"))
    assert [e.task for e in d.evictions] in (["a-0"], ["b-0"])
