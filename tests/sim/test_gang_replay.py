"""The derived gang replay: Helios queue sizes, openb pods as jobs and single-node gangs,
synthetic multi-node gangs, the report and the ``gangsched replay`` command."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import gangsched as gs
from gangsched.cli import main
from gangsched.io.openb import NodeTable, PodTable, load_nodes, load_pods
from gangsched.sim.gang_replay import (
    DerivedTrace,
    GangReplaySettings,
    GangReport,
    build_gang_trace,
    format_summary,
    gang_config,
    load_vc_gpus,
    run_gang_replay,
    write_report,
)
from gangsched.sim.openb_trace import node_subset
from gangsched.sim.replay import JobState


@pytest.fixture(scope="module")
def tables() -> tuple[NodeTable, PodTable]:
    nodes = load_nodes()
    return node_subset(nodes, np.arange(0, len(nodes), 12)), load_pods()


SMALL = GangReplaySettings(time_scale=200, n_gangs=4, limit=250, seed=3, max_duration=20_000)


@pytest.fixture(scope="module")
def derived(tables: tuple[NodeTable, PodTable]) -> DerivedTrace:
    return build_gang_trace(*tables, SMALL)


@pytest.fixture(scope="module")
def report(derived: DerivedTrace) -> GangReport:
    return run_gang_replay(derived, period=30)


def test_queue_sizes_come_from_the_helios_table() -> None:
    last = load_vc_gpus()
    assert sum(last.values()) == 1080 and len(last) == 16
    assert min(last.values()) > 0  # VCs without GPUs that day are not queues
    first = load_vc_gpus(date="2020-04-01")
    assert sum(first.values()) == 968 and first["vcvGl"] == 80
    with pytest.raises(gs.SnapshotError, match="2019-01-01"):
        load_vc_gpus(date="2019-01-01")


def test_vc_table_errors_name_the_cell(tmp_path: Path) -> None:
    bad = tmp_path / "vc.csv"
    bad.write_text("date,vcA,total\n2020-01-01,x,1\n")
    with pytest.raises(gs.SnapshotError, match="vcA"):
        load_vc_gpus(bad)


def test_trace_is_labelled_derived_and_built_as_described(
    tables: tuple[NodeTable, PodTable], derived: DerivedTrace
) -> None:
    nodes, pods = tables
    trace = derived.trace
    assert derived.label.startswith("derived:")
    assert derived.skipped == int((pods.scheduled_time < 0).sum())
    assert derived.pod_jobs + derived.node_gangs == 250 and derived.multi_node_gangs == 4
    weights = {q.name: q.weight for q in trace.queues}
    assert weights == load_vc_gpus()
    assert len(trace.hypernodes) == len(nodes)
    assert all(h.tier == 1 and len(h.members) == 1 for h in trace.hypernodes)
    arrivals = [tj.arrival for tj in trace.jobs]
    assert arrivals == sorted(arrivals)
    by_name = {pods.names[i]: i for i in range(len(pods))}
    gangs = 0
    for tj in trace.jobs:
        if tj.job.name.startswith("gang-"):
            assert len(tj.tasks) in SMALL.gang_workers
            assert tj.job.min_available == len(tj.tasks)
            assert all(t.gpu_request == gs.GpuRequest(count=8) for t in tj.tasks)
            continue
        row = by_name[tj.job.name]
        assert pods.scheduled_time[row] >= 0
        assert tj.arrival == pods.creation_time[row] / SMALL.time_scale
        run = float(pods.deletion_time[row] - pods.scheduled_time[row])
        assert tj.duration == min(run, SMALL.max_duration or run)
        k = int(pods.num_gpu[row])
        if k >= 2:
            gangs += 1
            assert len(tj.tasks) == tj.job.min_available == k
            assert tj.job.network_topology is not None
            assert tj.job.network_topology.highest_tier_allowed == 1
            assert sum(t.request["cpu"] for t in tj.tasks) == pods.cpu_milli[row]
            assert all(t.gpu_request is not None and t.gpu_request.count == 1 for t in tj.tasks)
        else:
            assert len(tj.tasks) == 1 and tj.job.network_topology is None
    assert gangs == derived.node_gangs > 0


def test_trace_is_seeded(tables: tuple[NodeTable, PodTable], derived: DerivedTrace) -> None:
    again = build_gang_trace(*tables, SMALL)
    assert again.trace == derived.trace
    other = build_gang_trace(
        *tables, GangReplaySettings(time_scale=200, n_gangs=4, limit=250, seed=4)
    )
    assert [tj.job.queue for tj in other.trace.jobs] != [tj.job.queue for tj in derived.trace.jobs]


def test_replay_keeps_gangs_whole_and_on_one_node(
    derived: DerivedTrace, report: GangReport
) -> None:
    r = report.result
    index = {name: i for i, name in enumerate(r.task_names)}
    started = ~np.isnan(r.job_start)
    assert started.any()
    for j, tj in enumerate(derived.trace.jobs):
        placed = [int(r.task_node[index[t.name]]) for t in tj.tasks]
        if not started[j]:
            continue
        assert min(placed) >= 0  # a started gang has every member placed
        if tj.job.network_topology is not None:
            assert len(set(placed)) == 1, tj.job.name  # single-node gang
        if tj.job.name.startswith("gang-"):
            assert len(set(placed)) == len(placed), tj.job.name  # 8 GPUs: one node each
    # Everything that arrived either finished or is still accounted for.
    assert set(np.unique(r.job_state).tolist()) <= {JobState.DONE, JobState.QUEUED}
    assert (r.job_state == JobState.DONE).sum() >= 0.9 * len(r.job_state)
    assert r.max_device_used <= 1000


def test_summary_adds_up(report: GangReport) -> None:
    r = report.result
    assert sum(q.jobs for q in report.queues) == report.overall.jobs == len(r.job_names)
    assert sum(q.done for q in report.queues) == report.overall.done
    assert report.overall.gpu_hours == pytest.approx(sum(q.gpu_hours for q in report.queues))
    assert report.overall.share_mean == pytest.approx(sum(q.share_mean for q in report.queues))
    assert report.overall.delay_mean >= 0 and report.overall.jct_p95 >= report.overall.jct_p50
    assert 0 < report.utilisation <= 100
    delays = r.queueing_delay[np.isfinite(r.queueing_delay)]
    assert report.overall.delay_mean == pytest.approx(float(delays.mean()))
    # With a 30 s period every start falls on a tick.
    starts = r.job_start[np.isfinite(r.job_start)]
    assert np.all(starts % 30 == 0)
    text = format_summary(report)
    assert text.splitlines()[0].startswith("derived:")
    for q in report.queues:
        assert q.name in text


def test_report_files(report: GangReport, tmp_path: Path) -> None:
    summary, share, jobs = write_report(report, tmp_path)
    lines = summary.read_text().splitlines()
    assert lines[0].startswith("name,weight,jobs,done")
    assert len(lines) == 1 + len(report.queues) + 1
    rows = share.read_text().splitlines()
    assert len(rows) == 1 + report.result.time.size
    head = rows[0].split(",")
    assert head[0] == "time" and len(head) == 1 + 2 * len(report.queues)
    assert len(jobs.read_text().splitlines()) == 1 + len(report.result.job_names)


def test_policy_swaps_nodeorder(derived: DerivedTrace) -> None:
    cfg = gang_config(derived.trace, "fgd")
    assert "nodeorder" not in cfg.plugin_names and "fgd" in cfg.plugin_names
    assert gang_config(derived.trace) == gs.Config.default()
    with pytest.raises(gs.ConfigError, match="binpak"):
        gang_config(derived.trace, "binpak")


def test_bad_settings_are_config_errors() -> None:
    kwargs: dict[str, Any]
    for kwargs in ({"time_scale": 0}, {"n_gangs": -1}, {"gang_workers": (1,)}, {"limit": 0}):
        with pytest.raises(gs.ConfigError):
            GangReplaySettings(**kwargs)


def test_replay_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import gc

    thresholds = gc.get_threshold()
    status = main(
        [
            "replay",
            "--limit",
            "120",
            "--gangs",
            "2",
            "--node-step",
            "24",
            "--policy",
            "bestfit",
            "--out",
            str(tmp_path),
        ]
    )
    out = capsys.readouterr()
    assert status == 0
    assert "derived:" in out.out and "all" in out.out
    assert "replayed in" in out.err
    assert (tmp_path / "summary.csv").exists() and (tmp_path / "jobs.csv").exists()
    # the collector's thresholds are the replay's own while it runs, given back after it
    assert gc.get_threshold() == thresholds
    assert main(["replay", "--node-step", "0"]) == 1
