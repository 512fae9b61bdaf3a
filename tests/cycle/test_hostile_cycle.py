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
from gangsched.config import Config, arg_float, arg_int
from gangsched.errors import ConfigError
from gangsched.limits import Limits
from gangsched.model import Job, JobPhase, Node, Queue, Resources, Task
from gangsched.scheduler import default_registry, explain, make_actions, open_session, schedule
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
        _one_node_trace(10**5000, ())


@pytest.mark.parametrize("period", ["1e-320", "nan", "-1"])
def test_replay_cli_period_out_of_range_is_an_error_line(
    period: str, capsys: pytest.CaptureFixture[str]
) -> None:
    start = time.process_time()
    assert main(["replay", f"--period={period}", "--limit", "5"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("gangsched: error: option '--period'")
    assert "Traceback" not in err
    assert time.process_time() - start < 5.0  # refused before any data is loaded


def test_huge_integers_in_config_are_config_errors() -> None:
    digits = "1" * 5000
    plugin = "tiers:\n- plugins:\n  - name: binpack\n    arguments:\n      binpack.weight: {}\n"
    texts = [
        f"actions: allocate\n{plugin.format(digits)}",
        f"actions: allocate\n{plugin.format('0x' + 'f' * 5000)}",
        f"actions: allocate\n{plugin.format('1' + ':30' * 3000)}",
        f"actions: allocate\n{plugin.format('9' * 30)}",  # beyond 64 bits
        f"actions: [{digits}]\n",
    ]
    for text in texts:
        with pytest.raises(ConfigError) as info:
            Config.from_volcano_yaml(text)
        assert len(str(info.value)) < 300  # the message does not echo 5,000 digits
    with pytest.raises(ConfigError, match="64-bit"):
        Config.from_dict(
            {
                "actions": ["allocate"],
                "tiers": [[{"name": "binpack", "arguments": {"w": 10**5000}}]],
            }
        )
    with pytest.raises(ConfigError, match="line 6"):
        Config.from_volcano_yaml(texts[0])
    # The largest 64-bit integer is still an integer.
    ok = Config.from_volcano_yaml(f"actions: allocate\n{plugin.format(2**63 - 1)}")
    binpack = ok.plugin("binpack")
    assert binpack is not None and binpack.arguments["binpack.weight"] == 2**63 - 1


@pytest.mark.parametrize(
    "value",
    [10**5000, -(10**400), "1" * 5000, "9" * 40, 1e300, 2**64],
    ids=[
        "int-5000-digits",
        "int-minus-400-digits",
        "text-5000-digits",
        "text-40-digits",
        "1e300",
        "2**64",
    ],
)
def test_huge_integers_in_arguments_are_config_errors(value: object) -> None:
    with pytest.raises(ConfigError) as info:
        arg_int({"k": value}, "k", 0, plugin="allocate", kind="action")
    assert info.value.field == "arguments.k" and len(str(info.value)) < 200


@pytest.mark.parametrize(
    "value", [10**5000, -(10**400), 2**1100, "1" * 5000], ids=["int", "negative", "2**1100", "text"]
)
def test_huge_numbers_in_float_arguments_are_config_errors(value: object) -> None:
    with pytest.raises(ConfigError) as info:
        arg_float({"k": value}, "k", 0.0, plugin="binpack")
    assert info.value.field == "arguments.k" and len(str(info.value)) < 200


# -- long action lists ----------------------------------------------------------------------------


_ONE_TASK = {
    "nodes": [_NODE],
    "queues": [_QUEUE],
    "jobs": [_PENDING_JOB],
    "tasks": [_TASK],
}


def _long_config(n: int, **extra: Any) -> Config:
    return Config.from_dict(
        {
            "actions": ["allocate"] * n + ["enqueue", "allocate"],
            "tiers": GANG_ONLY.to_dict()["tiers"],
        },
        limits=Limits(max_actions=n + 2),
        **extra,
    )


def test_long_action_list_is_linear() -> None:
    snap = gs.Snapshot.from_dict(_ONE_TASK)
    small, large = _long_config(2_000), _long_config(100_000)
    schedule(snap, small)  # warm up
    start = time.process_time()
    d_small = schedule(snap, small)
    t_small = time.process_time() - start
    start = time.process_time()
    d_large = schedule(snap, large)
    t_large = time.process_time() - start
    # Rescanning the list per entry made 100k entries take over a minute (n**2); one pass
    # over it takes a fraction of a second. 50x the entries may cost at most ~50x (+ slack).
    assert t_large < 10.0
    assert t_large < 200 * max(t_small, 1e-3)
    # enqueue runs last but one, so the final allocate binds the task either way.
    assert [b.task for b in d_large.binds] == [b.task for b in d_small.binds] == ["t"]


def test_long_action_list_beyond_the_limit_is_a_config_error() -> None:
    from gangsched.limits import DEFAULT_LIMITS

    limit = DEFAULT_LIMITS.max_actions
    assert Config.from_dict({"actions": ["allocate"] * limit}).actions == ("allocate",) * limit
    for actions in (["allocate"] * (limit + 1), ",".join(["allocate"] * (limit + 1))):
        with pytest.raises(ConfigError) as info:
            Config.from_dict({"actions": actions})
        assert info.value.field == "actions" and "max_actions" in str(info.value)
    text = "actions: " + ", ".join(["allocate"] * (limit + 1)) + "\n"
    with pytest.raises(ConfigError, match="max_actions"):
        Config.from_volcano_yaml(text)
    assert len(Config.from_volcano_yaml(text, limits=Limits(max_actions=limit + 1)).actions) == (
        limit + 1
    )


def test_long_action_list_membership_is_a_set_lookup() -> None:
    config = Config(actions=("allocate",) * 50_000 + ("enqueue",))
    assert config.has_action("enqueue") and config.has_action("allocate")
    assert not config.has_action("preempt")
    assert config == Config(actions=("allocate",) * 50_000 + ("enqueue",))


def test_long_action_list_repeats_share_one_action_object() -> None:
    reg = default_registry()
    made: list[str] = []
    original = reg.actions["allocate"]

    def counting(arguments: Any) -> Any:
        made.append("allocate")
        return original(arguments)

    reg.actions["allocate"] = counting
    config = Config.from_dict({"actions": ["allocate", "backfill", "allocate"] * 10})
    actions = make_actions(config, reg)
    assert [a.name for a in actions] == list(config.actions)
    assert made == ["allocate"]
    assert schedule(gs.Snapshot.from_dict(_ONE_TASK), config, registry=reg).binds


# -- unknown plugin and action arguments ----------------------------------------------------------


def _with_plugin(name: str, arguments: dict[str, object], **extra: object) -> Config:
    return Config.from_dict(
        {
            "actions": ["enqueue", "allocate"],
            "tiers": [[{"name": name, "arguments": arguments}]],
            **extra,
        }
    )


def test_unknown_plugin_argument_is_refused_naming_the_closest() -> None:
    snap = gs.Snapshot.from_dict(_ONE_TASK)
    with pytest.raises(ConfigError) as info:
        schedule(snap, _with_plugin("binpack", {"binpack.wieght": 10}))
    err = info.value
    assert (err.kind, err.name, err.field) == ("plugin", "binpack", "arguments.binpack.wieght")
    assert "did you mean 'binpack.weight'?" in str(err)
    with pytest.raises(ConfigError, match=r"did you mean 'leastrequested\.weight'"):
        explain(snap, "t", _with_plugin("nodeorder", {"leastrequsted.weight": 1}))
    with pytest.raises(ConfigError, match=r"gang takes no arguments"):
        open_session(snap, _with_plugin("gang", {"weight": 1}))
    with pytest.raises(ConfigError, match="did you mean 'weight'"):
        schedule(snap, _with_plugin("fgd", {"wieght": 1}))


def test_unknown_action_argument_is_refused_naming_the_closest() -> None:
    snap = gs.Snapshot.from_dict(_ONE_TASK)
    config = Config.from_dict(
        {"actions": ["enqueue", "allocate"], "configurations": {"allocate": {"placr": "cpsat"}}}
    )
    with pytest.raises(ConfigError) as info:
        schedule(snap, config)
    err = info.value
    assert (err.kind, err.name, err.field) == ("action", "allocate", "arguments.placr")
    assert "did you mean 'placer'?" in str(err)
    # Arguments of an action configured but not listed are checked too.
    config = Config.from_dict(
        {"actions": ["allocate"], "configurations": {"preempt": {"minCandidateNodesPercent": 5}}}
    )
    with pytest.raises(ConfigError, match="did you mean 'minCandidateNodesPercentage'"):
        schedule(snap, config)


@pytest.mark.parametrize("name", sorted(default_registry().plugins))
def test_unknown_plugin_argument_every_builtin_plugin_refuses(name: str) -> None:
    reg = default_registry()
    assert name in reg.plugin_arguments  # every built-in declares its arguments
    with pytest.raises(ConfigError) as info:
        reg.make_plugin(name, {"no-such-argument": 1})
    assert (info.value.kind, info.value.name) == ("plugin", name)
    assert info.value.field == "arguments.no-such-argument"


@pytest.mark.parametrize("name", sorted(default_registry().actions))
def test_unknown_action_argument_every_builtin_action_refuses(name: str) -> None:
    reg = default_registry()
    assert name in reg.action_arguments
    with pytest.raises(ConfigError) as info:
        reg.make_action(name, {"no-such-argument": 1})
    assert (info.value.kind, info.value.name) == ("action", name)


VOLCANO_ARGUMENTS = """
actions: "enqueue, allocate, preempt, reclaim, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
  - name: conformance
  - name: sla
    arguments:
      sla-waiting-time: 1h
- plugins:
  - name: overcommit
    arguments:
      overcommit-factor: 1.5
  - name: drf
  - name: predicates
    arguments:
      predicate.NodeAffinityEnable: true
      predicate.NodePortsEnable: true
      predicate.TaintTolerationEnable: true
      predicate.PodAffinityEnable: true
      predicate.NodeVolumeLimitsEnable: true
      predicate.VolumeZoneEnable: true
      predicate.PodTopologySpreadEnable: true
      predicate.VolumeBindingEnable: true
      predicate.DynamicResourceAllocationEnable: false
      predicate.CacheEnable: true
      predicate.GPUSharingEnable: false
      predicate.ProportionalEnable: true
      predicate.resources: nvidia.com/gpu
      predicate.resources.nvidia.com/gpu.cpu: 4
      volumebinding.weight: 1
  - name: capacity
    arguments:
      ancestorReclaimLevel: 1
      capacity.DynamicResourceAllocationEnable: false
  - name: nodeorder
    arguments:
      leastrequested.weight: 1
      mostrequested.weight: 0
      nodeaffinity.weight: 2
      podaffinity.weight: 2
      balancedresource.weight: 1
      tainttoleration.weight: 3
      imagelocality.weight: 1
      podtopologyspread.weight: 2
      selectorspread.weight: 0
  - name: binpack
    arguments:
      binpack.weight: 10
      binpack.cpu: 2
      binpack.memory: 3
      binpack.resources: nvidia.com/gpu, example.com/foo
      binpack.resources.nvidia.com/gpu: 8
      binpack.resources.example.com/foo: 2
  - name: network-topology-aware
    arguments:
      weight: 2
      hypernode.binpack.cpu: 1
      hypernode.binpack.memory: 1
      hypernode.binpack.resources: nvidia.com/gpu
      hypernode.binpack.resources.nvidia.com/gpu: 3
      hypernode.binpack.normal-pod.enable: true
      hypernode.binpack.normal-pod.fading: 0.5
      hypernode.gradient.evict.max-hypernodes: 8
configurations:
- name: allocate
  arguments:
    predicateErrorCacheEnable: false
- name: backfill
  arguments:
    predicateErrorCacheEnable: false
- name: preempt
  arguments:
    predicateErrorCacheEnable: true
    enableTopologyAwarePreemption: true
    topologyAwarePreemptWorkerNum: 4
    minCandidateNodesPercentage: 10
    minCandidateNodesAbsolute: 1
    maxCandidateNodesAbsolute: 100
- name: reclaim
  arguments:
    predicateErrorCacheEnable: true
"""


def test_unknown_plugin_argument_volcano_documented_ones_are_accepted() -> None:
    config = Config.from_volcano_yaml(VOLCANO_ARGUMENTS)
    d = schedule(gs.Snapshot.from_dict(_ONE_TASK), config)
    assert [b.task for b in d.binds] == ["t"]


def test_unknown_plugin_argument_user_plugins_declare_or_accept_anything() -> None:
    class Quiet:
        name = "quiet"

        def __init__(self, arguments: Any) -> None:
            self.arguments = arguments

    reg = default_registry()
    reg.register_plugin("quiet", Quiet)  # declares nothing: takes any argument
    reg.register_plugin("strict", Quiet, arguments=("level", "level.*"))
    config = Config.from_dict(
        {
            "actions": ["allocate"],
            "tiers": [
                [
                    {"name": "quiet", "arguments": {"anything": 1}},
                    {"name": "strict", "arguments": {"level": 1, "level.x": 2}},
                ]
            ],
        },
        plugins=reg.plugins,
    )
    schedule(gs.Snapshot.from_dict(_ONE_TASK), config, registry=reg)
    assert reg.copy().plugin_arguments["strict"] == ("level", "level.*")
    with pytest.raises(ConfigError, match="did you mean 'level'"):
        reg.make_plugin("strict", {"levle": 1})
    with pytest.raises(ConfigError, match=r"unknown argument 'level\.'"):
        reg.make_plugin("strict", {"level.": 1})  # a pattern needs text in place of '*'
