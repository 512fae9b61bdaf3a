"""Starvation: the sla plugin's waiting-time bound and the reservation that holds nodes for
the head-of-line job, with backfill that cannot delay it."""

from __future__ import annotations

from typing import Any

import pytest

import gangsched as gs
from _preemption_helpers import TIERS, apply, config, job, node, pending, running, snap
from gangsched.decisions import Hold
from gangsched.plugins.sla import parse_duration


def _tiers(**sla_args: Any) -> list[list[dict[str, Any]]]:
    first = [*TIERS[0], {"name": "sla", "arguments": {"sla-waiting-time": "10m", **sla_args}}]
    return [first, TIERS[1]]


SLA = config("enqueue", "allocate", "backfill", tiers=_tiers())
SLA_PREEMPT = config("enqueue", "allocate", "preempt", "backfill", tiers=_tiers())
NO_SLA = config("enqueue", "allocate", "backfill")


def _queued(
    name: str, walltime: int | None, gpus: int = 1
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    extra = {} if walltime is None else {"walltime": walltime}
    return job(name, 1, phase="Inqueue", age=10, **extra), pending(name, 1, gpus=gpus)


def _blocked_big_job(s2_walltime: int | None = 300) -> gs.Snapshot:
    # Two 4-GPU nodes, each half used by a small running job; "big" needs both nodes whole
    # and has waited past the limit. Four small jobs queue behind it.
    extra = {} if s2_walltime is None else {"walltime": s2_walltime}
    jobs = [
        job("s1", 1, walltime=100),
        job("s2", 1, **extra),
        job("big", 2, phase="Inqueue", age=1000),
    ]
    tasks = running("s1", [("n0", [0, 1])], gpus=2) + running("s2", [("n1", [0, 1])], gpus=2)
    tasks += pending("big", 2, gpus=4)
    for name, wt in (("short", 50), ("long", 500), ("open", None)):
        j, t = _queued(name, wt)
        jobs.append(j)
        tasks += t
    jobs.append(job("be", 1, phase="Inqueue", age=10))
    tasks.append({"name": "be-0", "job": "be", "request": {}})
    return snap([node("n0"), node("n1")], jobs, tasks)


def test_head_of_line_job_gets_nodes_held_and_only_harmless_work_backfills() -> None:
    # volcano#748 / #4690: big jobs starve behind a stream of small ones. Slurm's backfill
    # guarantee: a job may jump ahead only if it ends before the head job can start.
    s = _blocked_big_job()
    d = gs.schedule(s, SLA)
    (hold,) = d.holds
    assert hold == Hold(job="big", nodes=("n0", "n1"), expected_wait=300)
    bound = {b.task for b in d.binds}
    assert bound == {"short-0", "be-0"}  # 50 s ≤ 300 s, and best-effort
    for t in ("long-0", "open-0"):
        assert "held for starving job 'big'" in d.task_reasons[t]
    # Without the plugin the queue jumps ahead and the big job keeps starving.
    free_for_all = gs.schedule(s, NO_SLA)
    assert {b.task for b in free_for_all.binds} >= {"short-0", "long-0", "open-0"}
    assert free_for_all.holds == ()


def test_unknown_wait_lets_only_best_effort_tasks_use_held_nodes() -> None:
    # s2 declares no walltime: the head's start cannot be bounded, so a short job could
    # still delay it; only best-effort tasks may use the held nodes.
    d = gs.schedule(_blocked_big_job(s2_walltime=None), SLA)
    (hold,) = d.holds
    assert hold.expected_wait is None
    assert {b.task for b in d.binds} == {"be-0"}


def test_a_job_not_yet_overdue_gets_no_reservation() -> None:
    s = _blocked_big_job()
    d = gs.schedule(
        s, config("enqueue", "allocate", "backfill", tiers=_tiers(**{"sla-waiting-time": 5000}))
    )
    assert d.holds == ()
    assert "long-0" in {b.task for b in d.binds}


def test_the_reservation_can_be_switched_off() -> None:
    d = gs.schedule(
        _blocked_big_job(),
        config("enqueue", "allocate", "backfill", tiers=_tiers(**{"sla.reservation": False})),
    )
    assert d.holds == () and "long-0" in {b.task for b in d.binds}


def test_overdue_jobs_are_admitted_and_ordered_first() -> None:
    # Volcano's sla: past the waiting time a job is admitted even when overcommit says no.
    tiers = _tiers()
    tiers[1] = [{"name": "overcommit"}, *tiers[1]]
    cfg = config("enqueue", "allocate", tiers=tiers)
    jobs = [
        job("young", 1, phase="Pending", age=60, min_resources={"cpu": 1000}),
        job("old", 1, phase="Pending", age=700, min_resources={"cpu": 1000}),
    ]
    tasks = pending("young", 1, gpus=0) + pending("old", 1, gpus=0)
    d = gs.schedule(snap([node("n0")], jobs, tasks), cfg)
    assert d.jobs["old"].phase != "Pending" and d.jobs["young"].phase == "Pending"


def test_the_head_job_starts_no_later_than_its_first_expected_start() -> None:
    # volcano#748 over time: small 1-GPU jobs (walltime 400 s) arrive every 100 s and take
    # whatever frees up. Without a reservation the 8-GPU job never finds both nodes empty;
    # with it, it starts by the expected start computed when the nodes were first held.
    for cfg, expect_start in ((SLA, True), (NO_SLA, False)):
        _, started_at, promised = _simulate(cfg, cycles=14)
        if expect_start:
            assert promised is not None and started_at is not None
            assert started_at <= promised
        else:
            assert started_at is None


def _simulate(cfg: gs.Config, cycles: int) -> tuple[gs.Snapshot, int | None, int | None]:
    jobs = [job("big", 2, phase="Inqueue", age=500)]
    tasks = pending("big", 2, gpus=4)
    for i in range(4):
        jobs.append(job(f"w{i}", 1, walltime=100 * (i + 1)))
        tasks += running(f"w{i}", [(f"n{i // 2}", [2 * (i % 2), 2 * (i % 2) + 1])], gpus=2)
    s = snap([node("n0"), node("n1")], jobs, tasks)
    started_at = promised = None
    now = 0
    for cycle in range(cycles):
        d = gs.schedule(s, cfg)
        if d.holds and promised is None and d.holds[0].expected_wait is not None:
            promised = now + d.holds[0].expected_wait
        if any(b.task.startswith("big-") for b in d.binds) and started_at is None:
            started_at = now
        s = _advance(apply(s, d), 100, f"n{cycle}")
        now += 100
    return s, started_at, promised


def _advance(s: gs.Snapshot, dt: int, newcomer: str) -> gs.Snapshot:
    """``dt`` seconds later: running jobs use up their walltime and leave when it runs out,
    everyone ages, and a new small job arrives."""
    d: dict[str, Any] = s.to_dict()
    ended = set()
    for j in d["jobs"]:
        j["age"] = j.get("age", 0) + dt
        if j["phase"] == "Running" and j.get("walltime") is not None:
            j["walltime"] -= dt
            if j["walltime"] <= 0:
                ended.add(j["name"])
    d["jobs"] = [j for j in d["jobs"] if j["name"] not in ended]
    d["tasks"] = [t for t in d["tasks"] if t["job"] not in ended]
    d["jobs"].append(job(newcomer, 1, phase="Inqueue", walltime=400))
    d["tasks"].extend(pending(newcomer, 1, gpus=2))
    return gs.Snapshot.from_dict(d)


def test_best_effort_tasks_are_evicted_first() -> None:
    # A preemptor needing one pod slot: among an elastic job's surplus tasks, the best-effort
    # one goes first (sla's victim order); without sla the name order would pick another.
    n0 = {"name": "n0", "allocatable": {"cpu": 3, "memory": "8Gi", "pods": 3}}
    jobs = [job("low", 1, priority=1), job("hi", 1, priority=9)]
    tasks = [
        {"name": "low-0", "job": "low", "request": {"cpu": 1}, "phase": "Running", "node": "n0"},
        {"name": "low-1", "job": "low", "request": {"cpu": 1}, "phase": "Running", "node": "n0"},
        {"name": "low-2", "job": "low", "request": {}, "phase": "Running", "node": "n0"},
        {"name": "hi-0", "job": "hi", "request": {"cpu": 1}},
    ]
    s = snap([n0], jobs, tasks)
    assert {e.task for e in gs.schedule(s, SLA_PREEMPT).evictions} == {"low-2"}
    assert {e.task for e in gs.schedule(s, config("enqueue", "allocate", "preempt")).evictions} == {
        "low-0"
    }


def test_held_nodes_respect_the_head_jobs_topology() -> None:
    racks = [
        {"name": "rack-a", "tier": 1, "members": ["n0", "n1"]},
        {"name": "rack-b", "tier": 1, "members": ["n2", "n3"]},
    ]
    jobs = [
        job("w0", 1, walltime=900),
        job("w1", 1, walltime=100),
        job("w2", 1, walltime=200),
        job("w3", 1, walltime=800),
    ]
    tasks = [t for i in range(4) for t in running(f"w{i}", [(f"n{i}", [0, 1, 2, 3])], gpus=4)]
    hard = {"mode": "hard", "highest_tier_allowed": 1}
    jobs.append(job("big", 2, phase="Inqueue", age=1000, network_topology=hard))
    tasks += pending("big", 2, gpus=4)
    d = gs.schedule(snap([node(f"n{i}") for i in range(4)], jobs, tasks, hypernodes=racks), SLA)
    # n1 (100 s) and n2 (200 s) free first but sit in different racks; rack b frees at 800 s,
    # rack a at 900 s.
    (hold,) = d.holds
    assert hold.nodes == ("n2", "n3") and hold.expected_wait == 800


def test_holds_round_trip_through_the_interchange_form() -> None:
    d = gs.schedule(_blocked_big_job(), SLA)
    assert gs.Decisions.from_dict(d.to_dict()) == d


@pytest.mark.parametrize(
    ("text", "seconds"), [(90, 90), ("90", 90), ("10m", 600), ("1h30m", 5400), ("2h5s", 7205)]
)
def test_waiting_time_spellings(text: object, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["", "ten", "5d", -1, True, "1m1h"])
def test_bad_waiting_time_is_a_config_error(bad: object) -> None:
    with pytest.raises(gs.ConfigError, match="plugin 'sla': sla-waiting-time"):
        config("allocate", tiers=[[{"name": "sla", "arguments": {"sla-waiting-time": bad}}]])
        gs.schedule(
            snap([node("n0")], [], []),
            config("allocate", tiers=[[{"name": "sla", "arguments": {"sla-waiting-time": bad}}]]),
        )
