"""Hostile inputs to one scheduling cycle: empty clusters, long action lists, overlapping node
failures in a replay, numbers at the edges and arguments nobody declared."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

import gangsched as gs
from gangsched.cli import main
from gangsched.config import Config
from gangsched.errors import ConfigError
from gangsched.model import Job, JobPhase, Node, Queue, Resources, Task
from gangsched.scheduler import explain, open_session, schedule
from gangsched.sim.replay import NodeFailure, ReplayOptions, Trace, TraceJob, replay

# -- shapes and configurations ------------------------------------------------------------------

_QUEUE = {"name": "default"}
_JOB = {"name": "j", "queue": "default", "min_available": 1, "phase": "Inqueue"}
_PENDING_JOB = {**_JOB, "phase": "Pending"}
_TASK = {"name": "t", "job": "j", "request": {"cpu": 1}}
_NODE = {"name": "n0", "allocatable": {"cpu": 4, "memory": "8Gi", "pods": 10}}

EMPTY_SHAPES: dict[str, dict[str, Any]] = {
    "no_nodes": {"nodes": [], "queues": [_QUEUE], "jobs": [_JOB], "tasks": [_TASK]},
    "no_nodes_pending_job": {
        "nodes": [],
        "queues": [_QUEUE],
        "jobs": [_PENDING_JOB],
        "tasks": [_TASK],
    },
    "nothing_at_all": {"nodes": [], "queues": [], "jobs": [], "tasks": []},
    "no_queues": {"nodes": [_NODE], "queues": [], "jobs": [], "tasks": []},
    "no_tasks": {"nodes": [_NODE], "queues": [_QUEUE], "jobs": [], "tasks": []},
    "job_without_tasks": {"nodes": [_NODE], "queues": [_QUEUE], "jobs": [_JOB], "tasks": []},
    "every_node_cordoned": {
        "nodes": [{**_NODE, "unschedulable": True}, {**_NODE, "name": "n1", "unschedulable": True}],
        "queues": [_QUEUE],
        "jobs": [_JOB],
        "tasks": [_TASK],
    },
}

GANG_ONLY = Config.from_dict(
    {
        "actions": ["enqueue", "allocate", "backfill"],
        "tiers": [
            [{"name": "priority"}, {"name": "gang"}],
            [{"name": "predicates"}, {"name": "nodeorder"}],
        ],
    }
)
PREEMPT_TOPOLOGY = Config.from_dict(
    {
        "actions": ["enqueue", "allocate", "preempt", "reclaim", "backfill"],
        "tiers": [
            [{"name": "priority"}, {"name": "gang"}, {"name": "conformance"}],
            [
                {"name": "drf"},
                {"name": "predicates"},
                {"name": "proportion"},
                {"name": "nodeorder"},
                {"name": "binpack"},
                {"name": "network-topology-aware"},
            ],
        ],
    }
)
CONFIGS: dict[str, Config | None] = {
    "default": None,
    "gang_only": GANG_ONLY,
    "preempt_reclaim_topology": PREEMPT_TOPOLOGY,
}


def _snap(shape: str) -> gs.Snapshot:
    return gs.Snapshot.from_dict(EMPTY_SHAPES[shape])


def _config_yaml(config: Config | None) -> str:
    return (Config.default() if config is None else config).to_volcano_yaml()


# -- empty cluster --------------------------------------------------------------------------------


@pytest.mark.parametrize("config_name", sorted(CONFIGS))
@pytest.mark.parametrize("shape", sorted(EMPTY_SHAPES))
def test_empty_cluster_schedule_is_a_normal_cycle(shape: str, config_name: str) -> None:
    snap = _snap(shape)
    config = CONFIGS[config_name]
    d = schedule(snap, config)
    assert d.binds == () and d.evictions == () and d.pipelined == ()
    assert set(d.jobs) == {job.name for job in snap.jobs}
    assert set(d.queues) == {q.name for q in snap.queues}
    # Every pending task says why it stayed pending.
    assert set(d.task_reasons) == {t.name for t in snap.tasks}
    assert all(d.task_reasons.values())
    assert schedule(snap, config) == d  # deterministic


def test_empty_cluster_reason_counts_zero_nodes() -> None:
    d = schedule(_snap("no_nodes"), GANG_ONLY)
    assert d.task_reasons["t"] == "0/0 nodes are available."
    assert not d.jobs["j"].ready
    d = schedule(_snap("every_node_cordoned"), GANG_ONLY)
    assert d.task_reasons["t"].startswith("0/2 nodes are available: 2 node(s) were unschedulable")


@pytest.mark.parametrize("config_name", sorted(CONFIGS))
@pytest.mark.parametrize("shape", ["no_nodes", "no_nodes_pending_job", "every_node_cordoned"])
def test_empty_cluster_explain_has_no_best_node(shape: str, config_name: str) -> None:
    snap = _snap(shape)
    if snap.task("t").phase.value != "Pending":  # pragma: no cover - shapes hold pending tasks
        pytest.skip("no pending task")
    e = explain(snap, "t", CONFIGS[config_name])
    assert e.best is None
    assert len(e.nodes) == len(snap.nodes)
    assert all(not n.fits for n in e.nodes)


@pytest.mark.parametrize("config_name", sorted(CONFIGS))
def test_empty_cluster_best_node_and_fit_error(config_name: str) -> None:
    ssn = open_session(_snap("no_nodes"), CONFIGS[config_name])
    tmpl = ssn.templates[0]
    assert ssn.best_node(tmpl) == (-1, False)
    assert ssn.fit_error(tmpl) == "0/0 nodes are available."


@pytest.mark.parametrize("config_name", sorted(CONFIGS))
def test_empty_cluster_enqueue_dry_run_says_why(config_name: str) -> None:
    # A Pending job on a cluster without nodes: the enqueue shape check (a dry-run placement)
    # runs and refuses it with reasons, it does not crash.
    config = CONFIGS[config_name] or Config.default()
    d = schedule(_snap("no_nodes_pending_job"), config)
    status = d.jobs["j"]
    assert status.phase == "Pending" and not status.ready
    assert status.reason and status.message
    assert d.task_reasons["t"]


@pytest.mark.parametrize("config_name", sorted(CONFIGS))
@pytest.mark.parametrize("command", ["schedule", "get-jobs", "get-queues", "schedule-json"])
@pytest.mark.parametrize("shape", sorted(EMPTY_SHAPES))
def test_empty_cluster_cli_prints_a_normal_cycle(
    shape: str,
    command: str,
    config_name: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    snap_file = tmp_path / "snap.json"
    snap_file.write_text(json.dumps(EMPTY_SHAPES[shape]), encoding="utf-8")
    conf_file = tmp_path / "scheduler.conf"
    conf_file.write_text(_config_yaml(CONFIGS[config_name]), encoding="utf-8")
    argv = {
        "schedule": ["schedule"],
        "schedule-json": ["schedule", "-o", "json"],
        "get-jobs": ["get", "jobs"],
        "get-queues": ["get", "queues"],
    }[command]
    status = main([*argv, "-f", str(snap_file), "--config", str(conf_file)])
    out, err = capsys.readouterr()
    assert status == 0, err
    assert "Traceback" not in err and "error" not in err
    if command == "schedule-json":
        doc = json.loads(out)
        assert doc["binds"] == []
        assert set(doc["jobs"]) == {j["name"] for j in EMPTY_SHAPES[shape]["jobs"]}


def _trace_without_nodes() -> Trace:
    job = Job(name="j", queue="default", min_available=1, phase=JobPhase.PENDING)
    task = Task(name="t", job="j", request=Resources({"cpu": 1000}))
    return Trace(
        nodes=(),
        queues=(Queue(name="default"),),
        jobs=(TraceJob(job=job, tasks=(task,), arrival=1.0, duration=5.0),),
    )


@pytest.mark.parametrize("config_name", sorted(CONFIGS))
def test_empty_cluster_replay_queues_the_job(config_name: str) -> None:
    config = CONFIGS[config_name] or Config.default()
    result = replay(_trace_without_nodes(), ReplayOptions(config=config))
    assert result.job_state.tolist() == [0]  # queued: it never started
    assert result.binds.sum() == 0
    assert result.total_gpu == 0 and result.total_cpu == 0


# -- replay: overlapping node failures ---------------------------------------------------------


def _one_node_trace(arrival: float, failures: tuple[NodeFailure, ...]) -> Trace:
    node = Node(name="n0", allocatable=Resources({"cpu": 4000, "memory": 2**33, "pods": 10}))
    job = Job(name="j", queue="default", min_available=1, phase=JobPhase.PENDING)
    task = Task(name="t", job="j", request=Resources({"cpu": 1000}))
    return Trace(
        nodes=(node,),
        queues=(Queue(name="default"),),
        jobs=(TraceJob(job=job, tasks=(task,), arrival=arrival, duration=5.0),),
        failures=failures,
    )


def test_replay_node_failures_overlapping_windows_keep_the_node_down() -> None:
    # (n0, 10-30) and (n0, 20-50): n0 is down from 10 to 50, not back at 30.
    failures = (
        NodeFailure(node="n0", at=10.0, until=30.0),
        NodeFailure(node="n0", at=20.0, until=50.0),
    )
    result = replay(_one_node_trace(25.0, failures), ReplayOptions(config=Config.default()))
    assert result.job_start.tolist() == [50.0]
    assert result.job_end.tolist() == [55.0]


def test_replay_node_failures_permanent_failure_outlasts_a_window() -> None:
    # A permanent failure from 10 and a window 5-15: the node never comes back.
    failures = (NodeFailure(node="n0", at=10.0), NodeFailure(node="n0", at=5.0, until=15.0))
    result = replay(_one_node_trace(12.0, failures), ReplayOptions(config=Config.default()))
    assert result.job_state.tolist() == [0]  # queued to the end
    assert result.binds.sum() == 0


def test_replay_node_failures_back_to_back_windows_and_recovery() -> None:
    # Windows 10-20 and 20-30 touch: down from 10 to 30; the job arriving at 15 starts at 30.
    failures = (
        NodeFailure(node="n0", at=20.0, until=30.0),
        NodeFailure(node="n0", at=10.0, until=20.0),
    )
    result = replay(_one_node_trace(15.0, failures), ReplayOptions(config=Config.default()))
    assert result.job_start.tolist() == [30.0]


# -- numbers at the edges -------------------------------------------------------------------------


@pytest.mark.parametrize("period", [1e-320, 5e-324, 1e-7, -1.0, float("nan"), float("inf")])
def test_replay_period_out_of_range_is_a_config_error(period: float) -> None:
    with pytest.raises(ConfigError) as info:
        ReplayOptions(config=Config.default(), period=period)
    assert info.value.field == "period"


def test_replay_smallest_period_at_the_latest_time_runs() -> None:
    from gangsched.limits import MAX_REPLAY_TIME, MIN_REPLAY_PERIOD

    trace = _one_node_trace(MAX_REPLAY_TIME - 10.0, ())
    result = replay(trace, ReplayOptions(config=Config.default(), period=MIN_REPLAY_PERIOD))
    assert result.job_state.tolist() == [2]  # done
    with pytest.raises(ConfigError, match="at most"):
        _one_node_trace(MAX_REPLAY_TIME * 2, ())
    with pytest.raises(ConfigError, match="arrival"):
        _one_node_trace(10**5000, ())  # type: ignore[arg-type]


@pytest.mark.parametrize("period", ["1e-320", "nan", "-1"])
def test_replay_cli_period_out_of_range_is_an_error_line(
    period: str, capsys: pytest.CaptureFixture[str]
) -> None:
    start = time.perf_counter()
    assert main(["replay", f"--period={period}", "--limit", "5"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("gangsched: error: option '--period'")
    assert "Traceback" not in err
    assert time.perf_counter() - start < 5.0  # refused before any data is loaded
