"""The scheduler comparison: the job-trace loader, the three configurations, each metric on
small traces whose answer is known, and the bare command."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import gangsched as gs
from gangsched.cli import main
from gangsched.errors import ConfigError, SnapshotError
from gangsched.sim.jobtrace import (
    PRESETS,
    Columns,
    parse_cluster,
    parse_columns,
    pod_sizes,
    read_cluster_csv,
    read_jobs,
    read_preset,
    read_queue_weights,
)
from gangsched.sim.story import (
    METRIC_KEYS,
    SCHEDULERS,
    StorySettings,
    build_story_trace,
    format_table,
    run_story,
    scheduler_config,
)

COLS = "arrival=t,duration=d,gpus=g,queue=q"


def table_of(text: str, columns: str = COLS):  # type: ignore[no-untyped-def]
    return read_jobs(None, parse_columns(columns), text=text)


def runs_of(text: str, cluster: str, columns: str = COLS, **settings: Any):  # type: ignore[no-untyped-def]
    settings.setdefault("period", 0.0)
    runs = run_story(
        table_of(text, columns), parse_cluster(cluster, rack_size=2), StorySettings(**settings)
    )
    return {r.scheduler: r for r in runs}


# ------------------------------------------------------------------------------------ loader


def test_reads_dates_and_numbers_sorted_by_arrival() -> None:
    text = "t,d,g,q\n2017-10-09 07:01:55,60,1,a\n2017-10-09 07:00:55,30,8,b\n\n"
    table = table_of(text)
    assert table.arrival.tolist() == [0.0, 60.0]
    assert table.queue == ("b", "a") and table.gpus.tolist() == [8, 1]
    assert table.row.tolist() == [2, 1]
    numbers = table_of("t,d,g,q\n5,1,2,x\n", COLS)
    assert numbers.arrival.tolist() == [0.0] and numbers.epoch == 5.0


@pytest.mark.parametrize(
    ("text", "field", "words"),
    [
        ("x,d,g,q\n0,1,1,a\n", "header", "no column 't'"),
        ("t,d,g,q\n0,1,1,a\n0,,1,a\n", "row 2, column 'd'", "missing value"),
        ("t,d,g,q\n0,-5,1,a\n", "row 1, column 'd'", "negative time"),
        ("t,d,g,q\n0,1,1,a\n-3,1,1,a\n", "row 2, column 't'", "negative time"),
        ("t,d,g,q\n0,1,two,a\n", "row 1, column 'g'", "expected a number"),
        ("t,d,g,q\n0,1,0,a\n", "row 1, column 'g'", "whole number >= 1"),
        ("t,d,g,q\nyesterday,1,1,a\n", "row 1, column 't'", "date and time"),
        ("t,d,g,q\n0,1,1,\n", "row 1, column 'q'", "missing value"),
        ("t,d,g,q\n", "", "no job rows"),
    ],
)
def test_bad_cells_name_the_row_and_the_column(text: str, field: str, words: str) -> None:
    with pytest.raises(SnapshotError) as err:
        table_of(text)
    assert err.value.field == field and words in err.value.detail


def test_column_mapping() -> None:
    pods = parse_columns("arrival=a,duration=b,pods=p,gpus_per_pod=k")
    table = table_of("a,b,p,k\n0,10,3,2\n", "arrival=a,duration=b,pods=p,gpus_per_pod=k")
    assert pods.gpus is None and table.gpus.tolist() == [6] and table.pods.tolist() == [3]
    merged = parse_columns("queue=vc", PRESETS["itp"].columns)
    assert merged.arrival == "submission_time" and merged.queue == "vc"
    for bad in ("arrival=a", "arrival=a,duration=b,gpus=g,colour=c", "arrival=a,,duration"):
        with pytest.raises(ConfigError):
            parse_columns(bad)
    with pytest.raises(ConfigError):
        Columns(arrival="a", duration="b", gpus="g", pods="p", gpus_per_pod="k")


def test_the_bundled_window_reads() -> None:
    table = read_preset("philly")
    assert len(table) == 2000 and len(set(table.queue)) == 10 and int(table.gpus.max()) == 32
    with pytest.raises(ConfigError):
        read_preset("itp")


def test_pods_that_do_not_divide() -> None:
    assert pod_sizes(12, 8) == [8, 4]
    assert pod_sizes(8, 8) == [8]
    assert pod_sizes(3, 1) == [1, 1, 1]


def test_cluster_and_weight_files(tmp_path: Path) -> None:
    spec = parse_cluster("5x8x32", rack_size=2)
    assert spec.total_gpus == 40 and spec.cpus[0] == 32 and len(set(spec.racks)) == 3
    for bad in ("5", "5x", "0x8", "2x8x0x1"):
        with pytest.raises(ConfigError):
            parse_cluster(bad)
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("name,gpus,rack\na,8,r1\nb,4,\n", encoding="utf-8")
    read = read_cluster_csv(nodes)
    assert read.gpus == (8, 4) and read.racks == ("r1", "")
    nodes.write_text("name,gpus\na,8\na,8\n", encoding="utf-8")
    with pytest.raises(SnapshotError, match="duplicate"):
        read_cluster_csv(nodes)
    weights = tmp_path / "w.csv"
    weights.write_text("queue,weight\na,4\nb,1\n", encoding="utf-8")
    assert read_queue_weights(weights) == {"a": 4.0, "b": 1.0}
    weights.write_text("queue,weight\na,-1\n", encoding="utf-8")
    with pytest.raises(SnapshotError) as err:
        read_queue_weights(weights)
    assert err.value.field == "row 1, column 'weight'"


# ------------------------------------------------------------------------------------ configs


def test_the_three_configurations() -> None:
    kube = scheduler_config("kube-default")
    assert kube.actions == ("allocate", "gangpreempt")
    assert kube.plugin_names == ("priority", "predicates", "nodeorder")
    assert scheduler_config("kube-default", priorities=False).actions == ("allocate",)
    assert scheduler_config("volcano") == gs.Config.default()
    ours = scheduler_config("gangsched")
    assert ours.actions == ("enqueue", "allocate", "gangpreempt", "reclaim", "backfill")
    assert {"gang", "capacity", "network-topology-aware", "binpack"} <= set(ours.plugin_names)
    with pytest.raises(ConfigError):
        scheduler_config("slurm")


def test_traces_differ_only_in_queues_and_topology() -> None:
    table = table_of("t,d,g,q\n0,10,4,a\n1,10,1,b\n")
    cluster = parse_cluster("2x4", rack_size=2)
    settings = StorySettings(pod_gpus=1)
    kube, volcano, ours = (build_story_trace(table, cluster, s, settings) for s in SCHEDULERS)
    assert [q.name for q in kube.trace.queues] == ["default"]
    assert [q.name for q in volcano.trace.queues] == ["a", "b"]
    assert volcano.trace.queues[0].deserved is None
    assert ours.trace.queues[0].deserved is not None  # capacity quotas from the weights
    first = [st.trace.jobs[0] for st in (kube, volcano, ours)]
    assert all(tj.job.min_available == len(tj.tasks) == 4 for tj in first)
    assert first[0].job.network_topology is None and first[1].job.network_topology is None
    assert first[2].job.network_topology is not None
    assert ours.trace.jobs[1].job.network_topology is None  # one pod: nothing to keep together
    assert len(ours.trace.hypernodes) == 1


# ------------------------------------------------------------------------------------ metrics


def test_two_gang_deadlock_under_pod_by_pod_and_none_with_gangs() -> None:
    """X holds 1 GPU of n0 until t=100. A (2 pods of 4 GPUs) gets n1 and waits for a node
    with 4 free; B (5 pods of 1 GPU) takes n0's 3 free, then the one X frees. A holds n1, B
    holds n0, each waits for the other: forever. With gangs, A is not placed (7 free of 8),
    B runs, then A."""
    text = "t,d,p,k,q\n0,100,1,1,q\n1,1000,2,4,q\n2,1000,5,1,q\n"
    runs = runs_of(text, "2x4", "arrival=t,duration=d,pods=p,gpus_per_pod=k,queue=q")
    kube = runs["kube-default"].metrics
    assert runs["kube-default"].unfinished == 2 and kube["makespan_s"] is None
    assert kube["partial_gangs_peak"] == 2
    # A holds 4 GPUs from t=1, B 3 from t=2, until the replay's last event at t=100.
    assert kube["gpu_hours_held_idle"] == round((4 * 99 + 3 * 98) / 3600, 1)
    assert kube["deadlock_hours"] == round(98 / 3600, 2) and kube["deadlock_hours"] > 0
    for name in ("volcano", "gangsched"):
        m = runs[name].metrics
        assert runs[name].unfinished == 0
        assert m["partial_gangs_peak"] == 0 and m["gpu_hours_held_idle"] == 0.0
        assert m["deadlock_hours"] == 0.0
        assert m["makespan_s"] == 2002.0  # B 2..1002, then A 1002..2002
    assert "never (2 stuck)" in format_table(tuple(runs.values()))


def test_waits_completion_times_utilization_and_placement() -> None:
    """One 8-GPU node: A (8 GPUs, 0..100), B (8 GPUs, arrives at 10, runs 100..150)."""
    runs = runs_of("t,d,g,q\n0,100,8,q\n10,50,8,q\n", "1x8")
    for name, run in runs.items():
        m = run.metrics
        assert set(m) == set(METRIC_KEYS), name
        assert m["jobs"] == 2 and m["gpu_hours"] == round(8 * 150 / 3600, 1)
        assert (m["wait_p50_s"], m["wait_p95_s"]) == (45.0, 85.5)
        assert (m["jct_p50_s"], m["jct_p95_s"]) == (120.0, 138.0)
        assert m["utilization"] == 1.0 and m["makespan_s"] == 150.0
        assert m["gang_in_one_node_pct"] == 100.0 and m["gang_in_one_rack_pct"] == 100.0
        assert m["high_priority_wait_p95_s"] is None
        assert m["queue_share"] == {"q": {"used": 1.0, "deserved": 1.0}} and m["jain"] == 1.0


def test_gangs_kept_in_one_node_only_with_topology() -> None:
    """Two 4-GPU jobs as 1-GPU pods on two empty 8-GPU nodes: kube's scoring spreads the
    pods, gangsched's topology keeps each job on one node."""
    runs = runs_of("t,d,g,q\n0,100,4,q\n0,100,4,q\n", "2x8")
    assert runs["kube-default"].metrics["gang_in_one_node_pct"] == 0.0
    assert runs["gangsched"].metrics["gang_in_one_node_pct"] == 100.0
    assert runs["gangsched"].metrics["gang_in_one_rack_pct"] == 100.0


def test_a_four_to_one_pair_of_queues(tmp_path: Path) -> None:
    """Queues a and b (weights 4:1) each flood a 10-GPU node with 1-GPU jobs, their rows
    alternating. Queue-aware schedulers give a 8 GPUs and b 2 while both wait; one FIFO gives
    each 5 (it takes the jobs in arrival order, whoever they belong to)."""
    rows = "".join(f"0,1000,1,{'ab'[i % 2]}\n" for i in range(40))
    runs = runs_of("t,d,g,q\n" + rows, "1x10", queue_weights={"a": 4.0, "b": 1.0})
    kube = runs["kube-default"].metrics["queue_share"]
    assert isinstance(kube, dict)
    # a deserves 8 of 10 GPUs while both queues wait, less once its last jobs run.
    assert kube["a"] == {"used": 0.5, "deserved": 0.725}
    assert kube["b"] == {"used": 0.5, "deserved": 0.275}
    assert runs["kube-default"].metrics["jain"] == 0.8316
    for name in ("volcano", "gangsched"):
        share = runs[name].metrics["queue_share"]
        assert isinstance(share, dict)
        # 8 GPUs for 2000 s, then its last 4 jobs: 2/3 of the node while it waits.
        assert share == {
            "a": {"used": 0.6667, "deserved": 0.6667},
            "b": {"used": 0.5, "deserved": 0.5},
        }
        assert runs[name].metrics["jain"] == 1.0, name


def test_a_high_priority_class_preempts_under_pod_by_pod() -> None:
    """A low-priority job fills the node; a high-priority one (priority column) arrives."""
    text = "t,d,g,q,p\n0,1000,8,q,0\n10,100,8,q,1\n"
    runs = runs_of(text, "1x8", COLS + ",priority=p")
    for name in ("kube-default", "gangsched"):
        m = runs[name].metrics
        assert m["high_priority_wait_p95_s"] is not None and m["high_priority_wait_p95_s"] < 60
        assert runs[name].restarts == 1, name
    assert runs["volcano"].metrics["high_priority_wait_p95_s"] == 990.0  # no preempt action


# ------------------------------------------------------------------------------------ CLI


def test_the_bare_command_short(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "story"
    argv = ["--jobs", "60", "--cluster", "3x8", "--workers", "1", "--out", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr()
    assert printed.out.splitlines()[1].split()[1:] == list(SCHEDULERS)
    assert "half-placed gangs" in printed.out and "pod by pod does best on" in printed.out
    document = json.loads((out / "story.json").read_text(encoding="utf-8"))
    assert list(document["schedulers"]) == list(SCHEDULERS)
    for metrics in document["schedulers"].values():
        assert list(metrics) == list(METRIC_KEYS)
    assert document["parameters"]["jobs"] == 60 and document["parameters"]["gpus"] == 24
    plot = out / "story_gpus.png"
    assert plot.is_file() or "plots skipped" in printed.err
    assert main([*argv, "-o", "json", "--schedulers", "volcano"]) == 0
    assert list(json.loads(capsys.readouterr().out)["schedulers"]) == ["volcano"]


def test_the_bare_command_on_another_csv(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "itp.csv"
    trace.write_text(
        "job_id,submission_time,duration,num_gpu\nx,0,100,16\ny,5,50,1\n", encoding="utf-8"
    )
    common = ["--trace", str(trace), "--cluster", "2x8", "--workers", "1", "-o", "json"]
    assert main([*common, "--preset", "itp", "--out", str(tmp_path / "o")]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["schedulers"]["gangsched"]["jobs"] == 2
    columns = "arrival=submission_time,duration=duration,gpus=num_gpu"
    assert main([*common, "--columns", columns, "--out", str(tmp_path / "p")]) == 0
    capsys.readouterr()
    assert main([*common, "--out", str(tmp_path / "q")]) == 1
    assert "--columns" in capsys.readouterr().err
    assert main([*common, "--columns", "arrival=when,duration=d,gpus=g"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("gangsched: error:") and "no column 'when'" in err
    assert "Traceback" not in err
