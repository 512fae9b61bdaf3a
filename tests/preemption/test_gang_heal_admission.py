"""Gangs that heal and preemption-aware admission.

A running gang that lost tasks (a node failed under some of its pods) goes ahead of jobs that
hold nothing until it is back at its minimum; admission counts what a job may preempt as
available, so a high-priority gang on a full cluster is admitted and then preempts.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings

import gangsched as gs
from _preemption_helpers import BOTH, PREEMPT, apply, config, job, node, pending, running, snap
from gangsched.actions import preempt
from gangsched.actions.enqueue import EnqueueAction, preemptable_resources
from gangsched.actions.victims.rules import preempt_candidates
from gangsched.config import Config
from gangsched.scheduler import open_session
from gangsched.testing import reference
from gangsched.testing.strategies import snapshots

DEFAULT = Config.default()


# ------------------------------------------------------------------ gangs that heal


def _broken_gang(*, newer: int = 1, phase: str = "Running") -> gs.Snapshot:
    """A 2-GPU node: gang ``broken`` (min 2) has one pod running on GPU 0, its other pod is
    pending (its node failed); GPU 1 is free; ``newer`` 1-GPU jobs arrived after it."""
    jobs: list[dict[str, Any]] = [job("broken", 2, phase=phase, creation=0)]
    tasks = running("broken", [("n0", [0])]) + pending("broken", 1, start=1)
    for i in range(newer):
        jobs.append(job(f"new{i}", 1, phase="Pending", creation=1 + i))
        tasks += pending(f"new{i}", 1)
    return snap([node("n0", gpus=2)], jobs, tasks)


def test_gang_below_its_minimum_heals_before_newer_jobs() -> None:
    s = _broken_gang()
    for cfg in (DEFAULT, PREEMPT, BOTH):
        d = gs.schedule(s, cfg)
        assert [(b.task, b.node, b.gpu_indices) for b in d.binds] == [("broken-1", "n0", (1,))]
        assert d.jobs["broken"].ready and d.jobs["broken"].phase == "Running"
        assert not d.jobs["new0"].ready
    # The plain reference scheduler orders jobs the same way.
    plain = reference.schedule(s, DEFAULT)
    assert [(b.task, b.node) for b in plain.binds] == [("broken-1", "n0")]


def test_gang_below_its_minimum_heals_also_when_marked_unknown() -> None:
    # Volcano marks a running gang below its minimum Unknown; it still heals first.
    d = gs.schedule(_broken_gang(phase="Unknown"), DEFAULT)
    assert [b.task for b in d.binds] == ["broken-1"]


def test_restoring_gang_reason_says_restoring_its_minimum() -> None:
    d = gs.schedule(_broken_gang(), DEFAULT)
    status = d.jobs["broken"]
    assert status.reason == "RestoringMinimum"
    assert status.message == "restoring its minimum (1 of 2 running)"


def test_restoring_gang_heals_across_cycles_while_new_jobs_keep_arriving() -> None:
    # A stream of new 1-GPU jobs: each cycle the gang is first, so it heals in the first
    # cycle and the new jobs take what is left in arrival order afterwards.
    s = _broken_gang(newer=3)
    d = gs.schedule(s, DEFAULT)
    assert [b.task for b in d.binds] == ["broken-1"]
    s = apply(s, d)
    d = gs.schedule(s, DEFAULT)
    assert d.binds == ()  # node full: nobody jumps the healed gang, nothing is evicted
    assert d.jobs["broken"].reason == "Scheduled"


def test_only_gangs_that_lost_tasks_jump_ahead() -> None:
    # A pending gang that holds nothing, and a ready running job, keep drf's order: the
    # newer job that holds nothing goes first against a running elastic job with a share.
    jobs = [job("elastic", 1, creation=0), job("fresh", 1, phase="Pending", creation=1)]
    tasks = running("elastic", [("n0", [0])]) + pending("elastic", 1, start=1)
    tasks += pending("fresh", 1)
    d = gs.schedule(snap([node("n0", gpus=2)], jobs, tasks), DEFAULT)
    assert [b.task for b in d.binds] == ["fresh-0"]
    assert d.jobs["elastic"].reason != "RestoringMinimum"


def test_restoring_gang_that_cannot_fit_does_not_block_others() -> None:
    # The broken gang's missing pod needs 2 GPUs; only 1 is free: it keeps waiting (its
    # message still says why) and the newer 1-GPU job takes the free GPU meanwhile.
    jobs = [job("broken", 2, creation=0), job("new0", 1, phase="Pending", creation=1)]
    tasks = running("broken", [("n0", [0])], gpus=1)
    tasks += pending("broken", 1, start=1, gpus=2) + pending("new0", 1)
    d = gs.schedule(snap([node("n0", gpus=2)], jobs, tasks), DEFAULT)
    assert [b.task for b in d.binds] == ["new0-0"]
    assert not d.jobs["broken"].ready
    assert d.jobs["broken"].reason == "Unschedulable"
    assert d.jobs["broken"].message.startswith(
        "restoring its minimum (1 of 2 running): 1/2 tasks in gang unschedulable: "
    )


def test_restoring_gang_stays_behind_higher_priority_jobs() -> None:
    # The rule orders jobs within a priority: a higher-priority newcomer still goes first.
    s = _broken_gang()
    out = s.to_dict()
    for j in out["jobs"]:
        if j["name"] == "new0":
            j["priority"] = 5
    d = gs.schedule(gs.Snapshot.from_dict(out), config("enqueue", "allocate", "backfill"))
    assert [b.task for b in d.binds] == ["new0-0"]


# ------------------------------------------------------------------ preemption-aware admission

#: Volcano's default tiers (overcommit and proportion vote on admission) with preempt on.
ADMIT_TIERS: list[list[dict[str, Any]]] = [
    [{"name": "priority"}, {"name": "gang"}, {"name": "conformance"}],
    [
        {"name": "overcommit"},
        {"name": "drf"},
        {"name": "predicates"},
        {"name": "proportion"},
        {"name": "nodeorder"},
    ],
]
ADMIT_PREEMPT = config("enqueue", "allocate", "preempt", "backfill", tiers=ADMIT_TIERS)
ADMIT_NO_PREEMPT = config("enqueue", "allocate", "backfill", tiers=ADMIT_TIERS)
OVERCOMMIT_REFUSAL = (
    "overcommit: cluster (x1.2) cannot admit min_resources; short of nvidia.com/gpu"
)


def _full_node(
    *, low_priority: int = 0, preemptable: bool = True, low_gang: bool = False
) -> gs.Snapshot:
    """One 8-GPU node, every GPU held by a running 1-GPU task of ``low``; ``high`` (priority
    10) is a new gang of one 8-GPU task with ``min_resources`` of 8 GPUs. ``low_gang``: low
    is a gang of 8 with ``min_resources`` of 8 GPUs (nothing elastic for the queue votes)."""
    extra: dict[str, Any] = {"min_resources": {"nvidia.com/gpu": 8}} if low_gang else {}
    jobs = [
        job(
            "low",
            8 if low_gang else 1,
            priority=low_priority,
            preemptable=preemptable,
            creation=0,
            **extra,
        ),
        job(
            "high",
            1,
            phase="Pending",
            priority=10,
            creation=1,
            min_resources={"nvidia.com/gpu": 8},
        ),
    ]
    tasks = running("low", [("n0", [g]) for g in range(8)]) + pending("high", 1, gpus=8)
    return snap([node("n0", gpus=8)], jobs, tasks)


def test_admission_counts_what_a_job_may_preempt() -> None:
    s = _full_node()
    d = gs.schedule(s, ADMIT_PREEMPT)
    # Admitted, then preempts in the same cycle: low's eight tasks go, high is reserved.
    assert d.jobs["high"].phase == "Inqueue"
    assert {e.task for e in d.evictions} == {f"low-{i}" for i in range(8)}
    assert [p.task for p in d.pipelined] == ["high-0"]
    # Once the victims are gone the reservation binds.
    s2 = apply(s, d)
    out = s2.to_dict()
    out["tasks"] = [t for t in out["tasks"] if t["phase"] != "Releasing"]
    d2 = gs.schedule(gs.Snapshot.from_dict(out), ADMIT_PREEMPT)
    assert [(b.task, b.node) for b in d2.binds] == [("high-0", "n0")]
    assert d2.jobs["high"].ready


def test_admission_by_preemption_says_so() -> None:
    s = _full_node()
    ssn = open_session(s, ADMIT_PREEMPT)
    EnqueueAction({}).execute(ssn)
    high = s.job_index["high"]
    assert ssn.job_phase[high] is gs.JobPhase.INQUEUE
    assert ssn.job_reasons[high] == (
        "Enqueued",
        "admitted: 8 GPUs preemptable from lower-priority jobs",
    )
    # Over the whole cycle preempt then has the last word: what it reserved, evicting whom.
    d = gs.schedule(s, ADMIT_PREEMPT)
    assert (d.jobs["high"].reason, d.jobs["high"].message) == (
        "Pipelined",
        "preempt: 1 task(s) reserved, evicting 8 task(s) of ['low']",
    )


def test_admission_without_preempt_is_refused_as_before() -> None:
    d = gs.schedule(_full_node(), ADMIT_NO_PREEMPT)
    assert d.jobs["high"].phase == "Pending"
    assert (d.jobs["high"].reason, d.jobs["high"].message) == ("NotEnqueued", OVERCOMMIT_REFUSAL)
    assert d.evictions == ()


def test_admission_does_not_count_victims_preempt_may_not_take() -> None:
    # Victims marked preemptable: false, or of equal priority: refused with the old reason.
    for s in (_full_node(preemptable=False), _full_node(low_priority=10)):
        d = gs.schedule(s, ADMIT_PREEMPT)
        assert d.jobs["high"].phase == "Pending"
        assert (d.jobs["high"].reason, d.jobs["high"].message) == (
            "NotEnqueued",
            OVERCOMMIT_REFUSAL,
        )
        assert d.evictions == () and d.pipelined == ()


def test_admission_by_preemption_counts_victims_once() -> None:
    # Two high-priority gangs want the same 8 preemptable GPUs: only the first is admitted
    # (the second finds the first's minimum reserved).
    s = _full_node()
    out = s.to_dict()
    second = dict(next(j for j in out["jobs"] if j["name"] == "high"), name="high2", creation=2)
    out["jobs"].append(second)
    out["tasks"] += pending("high2", 1, gpus=8)
    d = gs.schedule(gs.Snapshot.from_dict(out), config("enqueue", "preempt", tiers=ADMIT_TIERS))
    assert d.jobs["high"].phase == "Inqueue"
    assert d.jobs["high2"].phase == "Pending"
    assert d.jobs["high2"].reason == "NotEnqueued"


def test_admission_by_preemption_with_capacity_queues() -> None:
    # capacity's quota vote counts the preemptable allocation of the job's own queue too.
    tiers: list[list[dict[str, Any]]] = [
        ADMIT_TIERS[0],
        [{"name": "drf"}, {"name": "predicates"}, {"name": "capacity"}, {"name": "nodeorder"}],
    ]
    s = _full_node(low_gang=True)
    out = s.to_dict()
    out["queues"] = [{"name": "default", "capability": {"nvidia.com/gpu": 8}}]
    s = gs.Snapshot.from_dict(out)
    refused = gs.schedule(s, config("enqueue", "allocate", "backfill", tiers=tiers))
    assert refused.jobs["high"].phase == "Pending"
    assert "quota insufficient" in refused.jobs["high"].message
    d = gs.schedule(s, config("enqueue", "allocate", "preempt", "backfill", tiers=tiers))
    assert d.jobs["high"].phase == "Inqueue"
    assert [p.task for p in d.pipelined] == ["high-0"]


def test_admission_by_preemption_passes_proportion_quota() -> None:
    # low holds its minimum (nothing elastic): proportion's quota vote refuses high too
    # unless what high may preempt in its queue is counted.
    # (Volcano's CI tiers: proportion votes, overcommit is not configured.)
    s = _full_node(low_gang=True)
    refused = gs.schedule(s, config("enqueue", "allocate", "backfill"))
    assert refused.jobs["high"].phase == "Pending"
    assert "quota insufficient" in refused.jobs["high"].message
    d = gs.schedule(s, PREEMPT)
    assert d.jobs["high"].phase == "Inqueue"
    assert {e.task for e in d.evictions} == {f"low-{i}" for i in range(8)}
    assert [p.task for p in d.pipelined] == ["high-0"]


def test_preemptable_resources_count_only_a_gang_surplus_when_it_may_not_go_whole() -> None:
    # low runs 8 tasks with min_available 6, and one of them is not preemptable: low may not
    # go whole, so only its surplus (2 tasks) counts.
    s = _full_node()
    out = s.to_dict()
    for j in out["jobs"]:
        if j["name"] == "low":
            j["min_available"] = 6
    out["tasks"][0]["preemptable"] = False
    ssn = open_session(gs.Snapshot.from_dict(out), ADMIT_PREEMPT)
    freed, quota = preemptable_resources(ssn, s.job_index["high"])
    gpu = ssn.arrays.spec.gpu_column
    assert freed[gpu] == 2000  # two whole GPUs (milli-GPU)
    assert quota[gpu] == 0  # low has no min_resources: all of it is elastic already


@settings(max_examples=150)
@given(snapshots(max_nodes=4, max_jobs=5, max_queues=2, topology=False))
def test_admission_counts_exactly_the_preempt_actions_candidates(s: gs.Snapshot) -> None:
    # Admission and preempt ask one owner for the candidates: the two name the same victims
    # for every job, whatever priorities and flags say.
    ssn = open_session(s, PREEMPT)
    for j in range(len(s.jobs)):
        theirs, _ = preempt.SCOPE.candidates(ssn, j)
        ours, _ = preempt_candidates(ssn, j)
        assert np.array_equal(np.sort(ours), np.sort(theirs))


def test_admission_by_preemption_is_a_named_switch_off_in_volcano_yaml() -> None:
    # Volcano's quota vote compares minResources with what is free: no admission by
    # preemption, so a configuration read from its YAML leaves the job Pending unless the
    # text names the switch.
    text = (
        'actions: "enqueue, allocate, preempt"\n'
        "tiers:\n- plugins:\n  - name: priority\n  - name: gang\n"
        "- plugins:\n  - name: overcommit\n  - name: predicates\n"
    )
    named = text + "configurations:\n- name: enqueue\n  arguments:\n    admitByPreemption: true\n"
    off = gs.schedule(_full_node(), Config.from_volcano_yaml(text))
    assert off.jobs["high"].phase == "Pending" and off.evictions == ()
    assert (off.jobs["high"].reason, off.jobs["high"].message) == (
        "NotEnqueued",
        OVERCOMMIT_REFUSAL,
    )
    on = gs.schedule(_full_node(), Config.from_volcano_yaml(named))
    assert on.jobs["high"].phase == "Inqueue"
    # gangsched's own configuration counts it by default, and may switch it off
    native = gs.schedule(_full_node(), ADMIT_PREEMPT)
    assert native.jobs["high"].phase == "Inqueue"
    plain = ADMIT_PREEMPT.to_dict()
    plain.setdefault("configurations", {})["enqueue"] = {"admitByPreemption": False}
    assert gs.schedule(_full_node(), Config.from_dict(plain)).jobs["high"].phase == "Pending"
    # written to Volcano's YAML, gangsched's configuration names the switch and reads back equal
    assert "admitByPreemption: true" in ADMIT_PREEMPT.to_volcano_yaml()
    assert Config.from_volcano_yaml(ADMIT_PREEMPT.to_volcano_yaml()) == ADMIT_PREEMPT
