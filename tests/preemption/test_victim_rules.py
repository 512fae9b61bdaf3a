"""Each victim rule has one owner, and a test here fails if the rule is removed or its
comparison changes:

* priority (victims are jobs of strictly lower priority): ``_victims.preempt_candidates``
  (asked by preempt and by admission);
* preemptable (``preemptable`` on the task and on its job): ``victims.rules.evictable``;
* gang surplus (at most ``ready − min_available`` tasks, every role kept at its minimum,
  pending best-effort tasks not counted): ``_victims.spare_tasks``;
* whole job (every running task is a candidate, no reservation or allocation of this cycle):
  ``_victims.may_go_whole``;
* queue reclaimable and Open: ``reclaim._candidates`` and ``reclaim._gate``;
* the ``priority`` and ``gang`` plugins permit every candidate, so their tier decides.

And one job-policy engine: ``io.volcano_out.job_actions`` is ``policies.job_actions``.
"""

from __future__ import annotations

from typing import Any

import pytest

import gangsched as gs
from _preemption_helpers import (
    PREEMPT,
    RECLAIM,
    config,
    evicted,
    job,
    node,
    pending,
    running,
    snap,
)
from gangsched.decisions import Decisions, Eviction, JobStatus
from gangsched.io.k8s.records import Cluster
from gangsched.io.volcano_out import job_actions as volcano_job_actions
from gangsched.session.rules.policies import job_actions

GPU = "nvidia.com/gpu"
OTHER_TIERS: list[list[dict[str, Any]]] = [
    [{"name": "drf"}, {"name": "predicates"}, {"name": "proportion"}, {"name": "nodeorder"}]
]


def _reason(d: gs.Decisions, job_name: str) -> str:
    return d.preemption_reasons.get(job_name, "")


# ------------------------------------------------------------------------------ priority


@pytest.mark.parametrize("with_priority_plugin", [True, False])
def test_equal_priority_is_never_preempted(with_priority_plugin: bool) -> None:
    # The rule is the action's: it holds with or without the priority plugin in the tiers.
    first = [{"name": "gang"}, {"name": "conformance"}]
    if with_priority_plugin:
        first.insert(0, {"name": "priority"})
    cfg = config("enqueue", "allocate", "preempt", tiers=[first, *OTHER_TIERS])
    jobs = [job("low", 4, priority=5), job("hi", 4, priority=5, phase="Inqueue", creation=1)]
    tasks = running("low", [("n0", [i]) for i in range(4)]) + pending("hi", 4)
    d = gs.schedule(snap([node("n0")], jobs, tasks), cfg)
    assert d.evictions == ()
    assert _reason(d, "hi").startswith("preempt: NoLowerPriorityVictims")
    # One step lower and the same job is preempted.
    jobs[0]["priority"] = 4
    d = gs.schedule(snap([node("n0")], jobs, tasks), cfg)
    assert evicted(d) == {f"low-{i}" for i in range(4)}


def test_higher_priority_is_never_preempted_even_when_drf_would() -> None:
    # Without the priority plugin, drf (tier 2) would let a small job take from a big one of
    # higher priority; the action's rule forbids it.
    cfg = config("enqueue", "allocate", "preempt", tiers=[[{"name": "gang"}], *OTHER_TIERS])
    jobs = [job("big", 1, priority=9), job("small", 1, priority=1, phase="Inqueue")]
    tasks = running("big", [("n0", [0, 1, 2, 3])], gpus=4) + pending("small", 1)
    d = gs.schedule(snap([node("n0")], jobs, tasks), cfg)
    assert d.evictions == ()
    assert _reason(d, "small").startswith("preempt: NoLowerPriorityVictims")


def _drf_would_refuse() -> gs.Snapshot:
    # hi needs all 4 GPUs: drf's rule (preemptor share after ≤ victim share after: 1 ≤ 0)
    # refuses the victim; priority's or gang's answer in tier 1 decides instead.
    jobs = [job("low", 1, priority=1), job("hi", 1, priority=9, phase="Inqueue")]
    tasks = running("low", [("n0", [0, 1, 2, 3])], gpus=4) + pending("hi", 1, gpus=4)
    return snap([node("n0")], jobs, tasks)


@pytest.mark.parametrize("plugin", ["priority", "gang"])
def test_priority_and_gang_answer_so_their_tier_decides(plugin: str) -> None:
    s = _drf_would_refuse()
    decided = config("enqueue", "allocate", "preempt", tiers=[[{"name": plugin}], *OTHER_TIERS])
    assert evicted(gs.schedule(s, decided)) == {"low-0"}
    # Control: drf alone refuses, so the eviction above is tier 1's decision.
    drf_only = config("enqueue", "allocate", "preempt", tiers=OTHER_TIERS)
    assert gs.schedule(s, drf_only).evictions == ()


def test_gang_answers_reclaim_so_its_tier_decides() -> None:
    # capacity's guarantee floor (b keeps 7 GPUs) refuses every 2-GPU victim, but only from
    # the tier that decides: in a later tier than gang it is never asked.
    jobs = [job(f"b{i}", 1, queue="b", priority=5, creation=i) for i in range(4)]
    jobs.append(job("a1", 1, queue="a", priority=1))
    tasks = [
        t
        for i in range(4)
        for t in running(f"b{i}", [(f"n{i // 2}", [2 * (i % 2), 2 * (i % 2) + 1])], gpus=2)
    ]
    tasks += pending("a1", 1)
    queues = [
        {"name": "a", "deserved": {GPU: 1, "cpu": 8, "memory": "64Gi"}},
        {"name": "b", "deserved": {GPU: 7, "cpu": 56, "memory": "448Gi"}, "guarantee": {GPU: 7}},
    ]
    s = snap([node("n0"), node("n1")], jobs, tasks, queues=queues)
    rest = [{"name": "drf"}, {"name": "predicates"}, {"name": "nodeorder"}]
    later = config(
        "enqueue", "allocate", "reclaim", tiers=[[{"name": "gang"}], [*rest, {"name": "capacity"}]]
    )
    assert evicted(gs.schedule(s, later)) == {"b3-0"}
    same = config(
        "enqueue", "allocate", "reclaim", tiers=[[{"name": "gang"}, {"name": "capacity"}], rest]
    )
    d = gs.schedule(s, same)
    assert d.evictions == ()
    assert _reason(d, "a1").startswith("reclaim: VictimsNotPreemptable")


# ------------------------------------------------------------------------------ preemptable


@pytest.mark.parametrize("where", ["task", "job"])
@pytest.mark.parametrize("action", ["preempt", "reclaim"])
def test_preemptable_false_on_task_or_job_protects_it(where: str, action: str) -> None:
    # n0's 4 GPUs: low's one task and three of filler f (never preemptable). hi needs 1 GPU.
    victim_queue = "a" if action == "preempt" else "b"
    queues = [{"name": "a"}] if action == "preempt" else [{"name": "a"}, {"name": "b"}]

    def case(flag: bool) -> gs.Snapshot:
        jobs = [
            job("low", 1, priority=1, queue=victim_queue),
            job("f", 1, priority=1, queue=victim_queue),
            job("hi", 1, priority=9, phase="Inqueue", queue="a"),
        ]
        tasks = running("low", [("n0", [0])])
        tasks += running("f", [("n0", [1]), ("n0", [2]), ("n0", [3])], preemptable=False)
        if where == "task":
            tasks[0]["preemptable"] = flag
        else:
            jobs[0]["preemptable"] = flag
        return snap([node("n0")], jobs, tasks + pending("hi", 1), queues=queues)

    cfg = PREEMPT if action == "preempt" else RECLAIM
    d = gs.schedule(case(False), cfg)
    assert d.evictions == ()
    assert "VictimsNotPreemptable" in _reason(d, "hi")
    # Control: with the flag set, low's task is the victim.
    assert evicted(gs.schedule(case(True), cfg)) == {"low-0"}


def test_within_job_preemption_respects_the_jobs_preemptable_flag() -> None:
    # j (min 1) runs two priority-1 tasks filling n0; its pending priority-9 task may evict
    # one of them, unless the job is preemptable: false.
    def case(flag: bool) -> gs.Snapshot:
        tasks = running("j", [("n0", [0, 1]), ("n0", [2, 3])], gpus=2, priority=1)
        tasks += [{**pending("j", 1, gpus=2, start=2)[0], "priority": 9}]
        return snap([node("n0")], [job("j", 1, preemptable=flag)], tasks)

    assert gs.schedule(case(False), PREEMPT).evictions == ()
    assert len(gs.schedule(case(True), PREEMPT).evictions) == 1


# ------------------------------------------------------------------------------ gang surplus


def _victim_job(n_running: int, min_available: int, **extra: Any) -> list[dict[str, Any]]:
    return running("low", [("n0", [i]) for i in range(n_running)], **extra)


def test_surplus_is_ready_minus_min_available_exactly() -> None:
    # low runs 3 tasks with minimum 2 (surplus 1) on a full 3-GPU node; low-0 may not go
    # (preemptable: false), so low can never go whole. hi needs 1 GPU: one task goes; hi
    # needing 2 GPUs would cut low below its minimum: nothing goes.
    for need, expect in ((1, 1), (2, 0)):
        jobs = [job("low", 2, priority=1), job("hi", 1, priority=9, phase="Inqueue")]
        tasks = _victim_job(3, 2)
        tasks[0]["preemptable"] = False
        tasks += pending("hi", 1, gpus=need)
        d = gs.schedule(snap([node("n0", gpus=3)], jobs, tasks), PREEMPT)
        assert len(d.evictions) == expect
        if expect == 0:
            assert _reason(d, "hi").startswith("preempt: GangWouldBreak")


def test_pending_best_effort_tasks_do_not_count_toward_a_victims_surplus() -> None:
    # low runs exactly its minimum (2) and has a best-effort task waiting: its surplus is 0
    # (Volcano's ReadyTaskNum), so nothing of it goes while low-0 keeps it from going whole.
    jobs = [job("low", 2, priority=1), job("hi", 1, priority=9, phase="Inqueue")]
    tasks = _victim_job(2, 2)
    tasks[0]["preemptable"] = False
    tasks += [{"name": "low-be", "job": "low", "request": {}}]
    tasks += pending("hi", 1)
    d = gs.schedule(snap([node("n0", gpus=2)], jobs, tasks), PREEMPT)
    assert d.evictions == ()
    assert _reason(d, "hi").startswith("preempt: GangWouldBreak")


def test_role_minimums_bound_the_surplus() -> None:
    # min 2 with roles ps ≥ 1, worker ≥ 1: three ready tasks give a surplus of one, but never
    # the only ps. The workers may not go (preemptable: false), so the ps is the only
    # candidate, and it must stay.
    jobs = [
        job("low", 2, priority=1, min_task_member={"ps": 1, "worker": 1}),
        job("hi", 1, priority=9, phase="Inqueue"),
    ]
    tasks = _victim_job(3, 2)
    tasks[0].update(name="low-ps", role="ps")
    tasks[1].update(role="worker", preemptable=False)
    tasks[2].update(role="worker", preemptable=False)
    tasks += pending("hi", 1)
    s = snap([node("n0", gpus=3)], jobs, tasks)
    d = gs.schedule(s, PREEMPT)
    assert d.evictions == ()
    assert _reason(d, "hi").startswith("preempt: GangWouldBreak")
    # Control: with a second ps, one ps is surplus and goes.
    tasks[1]["role"] = "ps"
    assert evicted(gs.schedule(snap([node("n0", gpus=3)], jobs, tasks), PREEMPT)) == {"low-ps"}


# ------------------------------------------------------------------------------ whole job


def test_a_job_goes_whole_only_when_every_running_task_is_a_candidate() -> None:
    # low (min 2) runs 2 tasks on n0 and 1 on n1; hi needs both GPUs of n0. The task on n1 is
    # a candidate, so low may go whole (3 tasks); marked preemptable: false, it is not, and
    # low keeps everything.
    jobs = [job("low", 2, priority=1), job("hi", 1, priority=9, phase="Inqueue")]
    tasks = running("low", [("n0", [0]), ("n0", [1]), ("n1", [0])])
    tasks += pending("hi", 1, gpus=2)
    nodes = [node("n0", gpus=2), node("n1", gpus=1)]
    assert evicted(gs.schedule(snap(nodes, jobs, tasks), PREEMPT)) == {"low-0", "low-1", "low-2"}
    tasks[2]["preemptable"] = False
    d = gs.schedule(snap(nodes, jobs, tasks), PREEMPT)
    assert d.evictions == ()
    assert _reason(d, "hi").startswith("preempt: GangWouldBreak")


def test_a_job_with_an_allocation_of_this_cycle_does_not_go_whole() -> None:
    # low (min 3) runs 2 tasks on n0; allocate binds its third on n1 in this cycle, so low is
    # ready with no surplus. hi (2 GPUs) fits only on n0: evicting low's two running tasks
    # would leave its fresh allocation alone, below the minimum.
    jobs = [job("low", 3, priority=1), job("hi", 1, priority=9, phase="Inqueue")]
    tasks = running("low", [("n0", [0]), ("n0", [1])]) + pending("low", 1, start=2)
    tasks += pending("hi", 1, gpus=2)
    nodes = [node("n0", gpus=2), node("n1", gpus=1)]
    d = gs.schedule(snap(nodes, jobs, tasks), PREEMPT)
    assert {b.task for b in d.binds} == {"low-2"}
    assert d.evictions == ()
    assert _reason(d, "hi").startswith("preempt: GangWouldBreak")


# ------------------------------------------------------------------------------ reclaim


def _reclaim_case(**queue_a: Any) -> gs.Snapshot:
    jobs = [
        job("b1", 4, queue="b", priority=5),
        job("b2", 4, queue="b", priority=5, creation=1),
        job("a1", 4, queue="a", priority=1, phase="Running"),
    ]
    tasks = (
        running("b1", [("n0", [i]) for i in range(4)])
        + running("b2", [("n1", [i]) for i in range(4)])
        + pending("a1", 4)
    )
    queues = [{"name": "a", **queue_a}, {"name": "b"}]
    return snap([node("n0"), node("n1")], jobs, tasks, queues=queues)


def _fair_share_tiers(plugin: str, **flags: Any) -> list[list[dict[str, Any]]]:
    return [
        [{"name": "priority"}, {"name": "gang"}, {"name": "conformance"}],
        [{"name": "drf"}, {"name": "predicates"}, {"name": plugin, **flags}, {"name": "nodeorder"}],
    ]


@pytest.mark.parametrize("state", ["Closed", "Closing"])
@pytest.mark.parametrize("plugin", ["proportion", "capacity"])
def test_reclaim_for_a_queue_that_is_not_open_evicts_nothing(state: str, plugin: str) -> None:
    # Volcano parity: only an Open queue reclaims. With the plugin's allocatable switched off
    # (enabledAllocatable: false) nothing else stops the claim, and four of b's tasks used to
    # be evicted on behalf of a queue that takes no new work.
    deserved = {"deserved": {GPU: 4, "cpu": 16, "memory": "128Gi"}}
    s = _reclaim_case(state=state, **deserved)
    for flags in ({"enabledAllocatable": False}, {}):
        cfg = config("enqueue", "allocate", "reclaim", tiers=_fair_share_tiers(plugin, **flags))
        d = gs.schedule(s, cfg)
        assert d.evictions == ()
        reason = _reason(d, "a1")
        assert reason.startswith("reclaim: QueueNotOpen") and f"is {state}" in reason
    # Control: the same queue, Open, reclaims.
    cfg = config(
        "enqueue", "allocate", "reclaim", tiers=_fair_share_tiers(plugin, enabledAllocatable=False)
    )
    assert len(gs.schedule(_reclaim_case(**deserved), cfg).evictions) == 4


def test_a_non_reclaimable_queue_keeps_its_tasks() -> None:
    s = _reclaim_case()
    assert len(gs.schedule(s, RECLAIM).evictions) == 4
    d = s.to_dict()
    d["queues"][1]["reclaimable"] = False
    out = gs.schedule(gs.Snapshot.from_dict(d), RECLAIM)
    assert out.evictions == ()
    assert _reason(out, "a1").startswith("reclaim: QueueNotOverDeserved")


def test_reclaim_respects_the_gang_surplus_rule_too() -> None:
    # b's two gangs of 4 run at their minimum; one task of each is preemptable: false, so
    # neither can go whole and none can be trimmed.
    s = _reclaim_case()
    d = s.to_dict()
    for t in d["tasks"]:
        if t["name"] in ("b1-0", "b2-0"):
            t["preemptable"] = False
    out = gs.schedule(gs.Snapshot.from_dict(d), RECLAIM)
    assert out.evictions == ()
    assert "GangWouldBreak" in _reason(out, "a1")


# ------------------------------------------------------------------------------ job policies


def _policy_snapshot(jobs: list[dict[str, Any]], tasks: list[dict[str, Any]]) -> gs.Snapshot:
    for t in tasks:
        t.setdefault("request", {"cpu": 1})
        if t.get("phase") == "Running":
            t.setdefault("node", "n0")
    return snap([node("n0")], jobs, tasks)


def _both(
    s: gs.Snapshot, evictions: dict[str, str], phases: dict[str, str]
) -> tuple[tuple[gs.JobAction, ...], tuple[gs.JobAction, ...]]:
    cluster = Cluster(snapshot=s, config=None, jobs={}, pods={}, ignored=())
    decisions = Decisions(
        evictions=tuple(Eviction(task=t, reason=r) for t, r in evictions.items()),
        jobs={name: JobStatus(phase=p) for name, p in phases.items()},
    )
    return job_actions(s, evictions, phases), volcano_job_actions(cluster, decisions)


def _t(name: str, phase: str, role: str = "") -> dict[str, Any]:
    return {"name": name, "job": name.rsplit("-", 1)[0], "role": role, "phase": phase}


#: The cases where the two engines used to differ (found by comparing them on random
#: policies, roles, phases and evictions), with what the one engine now says.
POLICY_CASES: list[tuple[str, dict[str, Any], list[dict[str, Any]], dict[str, str], Any]] = [
    (
        "TaskFailed was never raised by the Volcano writer",
        job("j", policies=[{"event": "TaskFailed", "action": "AbortJob"}]),
        [_t("j-0", "Succeeded", "r"), _t("j-1", "Failed", "r")],
        {},
        [("AbortJob", "TaskFailed: role 'r' ended with failed tasks")],
    ),
    (
        "two job-wide actions: only the most severe",
        job(
            "j",
            policies=[
                {"event": "PodFailed", "action": "RestartJob"},
                {"event": "Unknown", "action": "TerminateJob"},
            ],
        ),
        [_t("j-0", "Running"), _t("j-1", "Failed")],
        {"j": "Unknown"},
        [("TerminateJob", "Unknown: some tasks run while the gang cannot be placed")],
    ),
    (
        "a job-wide action covers a role's RestartTask",
        job(
            "j",
            policies=[{"event": "PodEvicted", "action": "RestartJob"}],
            role_policies={"worker": [{"event": "PodEvicted", "action": "RestartTask"}]},
        ),
        [_t("j-ps", "Running", "ps"), _t("j-worker", "Running", "worker")],
        {},
        [("RestartJob", "PodEvicted: task 'j-ps' preempted")],
    ),
    (
        "RestartTask once per role, not once per job",
        job("j", policies=[{"event": "PodFailed", "action": "RestartTask"}]),
        [_t("j-a", "Failed", "a"), _t("j-b", "Failed", "b"), _t("j-c", "Running", "c")],
        {},
        [
            ("RestartTask", "PodFailed: task 'j-a' failed"),
            ("RestartTask", "PodFailed: task 'j-b' failed"),
        ],
    ),
    (
        "Unknown is a job event: a role named '' does not override it",
        job(
            "j",
            policies=[{"event": "Unknown", "action": "RestartJob"}],
            role_policies={"": [{"event": "*", "action": "AbortJob"}]},
        ),
        [_t("j-0", "Running")],
        {"j": "Unknown"},
        [("RestartJob", "Unknown: some tasks run while the gang cannot be placed")],
    ),
    (
        "a wildcard role policy and a completed role: severity across events",
        job(
            "j",
            policies=[{"event": "TaskCompleted", "action": "CompleteJob"}],
            role_policies={"b": [{"event": "*", "action": "AbortJob"}]},
        ),
        [_t("j-a", "Succeeded", "a"), _t("j-b", "Failed", "b")],
        {},
        [("AbortJob", "PodFailed: task 'j-b' failed")],
    ),
]


@pytest.mark.parametrize(
    ("what", "job_dict", "tasks", "phases", "expect"),
    POLICY_CASES,
    ids=[c[0] for c in POLICY_CASES],
)
def test_the_volcano_writer_and_the_scheduler_give_the_same_job_actions(
    what: str,
    job_dict: dict[str, Any],
    tasks: list[dict[str, Any]],
    phases: dict[str, str],
    expect: list[tuple[str, str]],
) -> None:
    s = _policy_snapshot([job_dict], [dict(t) for t in tasks])
    evictions = {t["name"]: "preempted" for t in tasks if t["name"] in ("j-ps", "j-worker")}
    ours, volcano = _both(s, evictions, phases)
    assert ours == volcano
    assert [(a.action, a.cause) for a in ours] == expect


def test_the_volcano_writer_repeats_the_decisions_job_actions() -> None:
    # Decisions from a real cycle: the writer's job actions are the scheduler's.
    jobs = [
        job("low", 4, priority=1, policies=[{"event": "PodEvicted", "action": "RestartJob"}]),
        job("hi", 4, priority=9, phase="Inqueue"),
    ]
    s = snap([node("n0")], jobs, running("low", [("n0", [i]) for i in range(4)]) + pending("hi", 4))
    d = gs.schedule(s, PREEMPT)
    cluster = Cluster(snapshot=s, config=None, jobs={}, pods={}, ignored=())
    assert d.job_actions and volcano_job_actions(cluster, d) == d.job_actions
