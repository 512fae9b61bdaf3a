"""Job policies: events from task phases and the cycle's evictions become job actions."""

from __future__ import annotations

from typing import Any

import pytest

import gangsched as gs
from _preemption_helpers import PREEMPT, job, node, pending, running, snap
from gangsched.session.rules.policies import job_actions


def _snap(jobs: list[dict[str, Any]], tasks: list[dict[str, Any]]) -> gs.Snapshot:
    return snap([node("n0", gpus=8), node("n1", gpus=8)], jobs, tasks)


def _task(name: str, job_name: str, phase: str, role: str = "", **extra: Any) -> dict[str, Any]:
    t: dict[str, Any] = {"name": name, "job": job_name, "role": role, "request": {"cpu": 1}}
    t["phase"] = phase
    if phase in ("Running", "Releasing"):
        t["node"] = "n0"
    return {**t, **extra}


def test_pod_failed_restarts_the_job() -> None:
    policies = [{"event": "PodFailed", "action": "RestartJob"}]
    s = _snap(
        [job("j", 2, policies=policies)],
        [_task("j-0", "j", "Running"), _task("j-1", "j", "Failed")],
    )
    (action,) = job_actions(s, {}, {"j": "Running"})
    assert action == gs.JobAction(
        job="j", action="RestartJob", cause="PodFailed: task 'j-1' failed"
    )


def test_role_policy_overrides_the_job_policy_for_its_role_only() -> None:
    # Volcano: task-level policies take precedence over job-level ones for their task.
    s = _snap(
        [
            job(
                "j",
                1,
                policies=[{"event": "PodFailed", "action": "AbortJob"}],
                role_policies={"worker": [{"event": "PodFailed", "action": "RestartTask"}]},
            ),
            job(
                "k",
                1,
                policies=[{"event": "PodFailed", "action": "AbortJob"}],
                role_policies={"worker": [{"event": "PodFailed", "action": "RestartTask"}]},
            ),
        ],
        [
            _task("j-w", "j", "Failed", role="worker"),
            _task("j-ps", "j", "Running", role="ps"),
            _task("k-w", "k", "Failed", role="worker"),
            _task("k-ps", "k", "Failed", role="ps"),
        ],
    )
    out = job_actions(s, {}, {})
    assert [(a.job, a.action) for a in out] == [("j", "RestartTask"), ("k", "AbortJob")]
    assert "role 'worker'" not in out[0].cause and "'j-w'" in out[0].cause


def test_wildcard_and_severity() -> None:
    # Several events fire; one job-wide action is reported, the most severe.
    s = _snap(
        [
            job(
                "j",
                1,
                policies=[
                    {"event": "TaskCompleted", "action": "CompleteJob"},
                    {"event": "*", "action": "TerminateJob"},
                ],
            )
        ],
        [_task("j-0", "j", "Succeeded", role="a"), _task("j-1", "j", "Failed", role="b")],
    )
    (action,) = job_actions(s, {}, {})
    assert action.action == "TerminateJob"
    assert action.cause.startswith("PodFailed")


def test_task_completed_and_task_failed_are_per_role() -> None:
    s = _snap(
        [
            job("done", 1, policies=[{"event": "TaskCompleted", "action": "CompleteJob"}]),
            job("bad", 1, policies=[{"event": "TaskFailed", "action": "AbortJob"}]),
            job("busy", 1, policies=[{"event": "TaskCompleted", "action": "CompleteJob"}]),
        ],
        [
            _task("done-0", "done", "Succeeded", role="r"),
            _task("done-1", "done", "Succeeded", role="r"),
            _task("bad-0", "bad", "Succeeded", role="r"),
            _task("bad-1", "bad", "Failed", role="r"),
            _task("busy-0", "busy", "Succeeded", role="r"),
            _task("busy-1", "busy", "Running", role="r"),
        ],
    )
    assert [(a.job, a.action) for a in job_actions(s, {}, {})] == [
        ("done", "CompleteJob"),
        ("bad", "AbortJob"),
    ]


def test_unknown_phase_is_a_job_event() -> None:
    s = _snap(
        [job("j", 2, policies=[{"event": "Unknown", "action": "RestartJob"}])],
        [_task("j-0", "j", "Running")],
    )
    assert job_actions(s, {}, {"j": "Running"}) == ()
    (action,) = job_actions(s, {}, {"j": "Unknown"})
    assert action.action == "RestartJob" and action.cause.startswith("Unknown")


def test_no_policies_no_actions_and_pod_running_is_never_raised() -> None:
    s = _snap(
        [job("plain", 1), job("r", 1, policies=[{"event": "PodRunning", "action": "AbortJob"}])],
        [_task("plain-0", "plain", "Failed"), _task("r-0", "r", "Running")],
    )
    assert job_actions(s, {"plain-0": "x"}, {}) == ()


def test_evicted_victims_get_their_pod_evicted_action_in_decisions() -> None:
    # The library owns no pods: the job controller reads the restart from the decisions.
    nodes = [node("n0")]
    jobs = [
        job("low", 4, priority=1, policies=[{"event": "PodEvicted", "action": "RestartJob"}]),
        job("hi", 4, priority=9, phase="Inqueue"),
    ]
    tasks = running("low", [("n0", [i]) for i in range(4)]) + pending("hi", 4)
    d = gs.schedule(snap(nodes, jobs, tasks), PREEMPT)
    assert len(d.evictions) == 4
    (action,) = d.job_actions
    assert action.job == "low" and action.action == "RestartJob"
    assert action.cause.startswith("PodEvicted: task 'low-0' preempted by job 'hi'")
    assert gs.Decisions.from_dict(d.to_dict()) == d


def test_role_policies_are_validated_and_round_trip() -> None:
    j = gs.Job.from_dict(
        {"name": "j", "role_policies": {"w": [{"event": "PodFailed", "action": "RestartTask"}]}}
    )
    assert j.role_policies["w"] == (gs.JobPolicy(event="PodFailed", action="RestartTask"),)
    assert gs.Job.from_dict(j.to_dict()) == j
    with pytest.raises(gs.SnapshotError, match=r"job 'j': role_policies\.w\[0\]\.event"):
        gs.Job.from_dict({"name": "j", "role_policies": {"w": [{"event": "X", "action": "A"}]}})
    with pytest.raises(gs.SnapshotError, match=r"job 'j': role_policies"):
        gs.Job(name="j", role_policies=["nope"])  # type: ignore[arg-type]
