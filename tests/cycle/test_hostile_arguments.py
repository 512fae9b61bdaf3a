"""Hostile plugin and action arguments: bounded floats, waiting times, the root queue, and
decisions that say when a placer option made them nondeterministic."""

from __future__ import annotations

import json
import math
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import gangsched as gs
from gangsched.cli import main
from gangsched.config import arg_float, arg_int
from gangsched.limits import MAX_ARG_WEIGHT
from gangsched.plugins.sla import MAX_WAITING_TIME, parse_duration
from gangsched.scheduler import nondeterministic_options
from gangsched.testing import check_all

Obj = dict[str, Any]


def _snapshot(**extra: Any) -> gs.Snapshot:
    doc: Obj = {
        "nodes": [
            {"name": "n0", "allocatable": {"cpu": 8, "memory": "8Gi"}},
            {"name": "n1", "allocatable": {"cpu": 4, "memory": "4Gi"}},
        ],
        "hypernodes": [
            {"name": "r0", "tier": 1, "members": ["n0"]},
            {"name": "r1", "tier": 1, "members": ["n1"]},
        ],
        "queues": [{"name": "default"}],
        "jobs": [{"name": "j", "min_resources": {"cpu": 1}}],
        "tasks": [
            {"name": "t0", "job": "j", "request": {"cpu": 1, "memory": "1Gi"}},
            {"name": "r", "job": "j", "request": {"cpu": 1}, "phase": "Running", "node": "n1"},
        ],
    }
    doc.update(extra)
    return gs.Snapshot.from_dict(doc)


def _config(plugin: str, arguments: Obj) -> gs.Config:
    return gs.Config.from_dict(
        {
            "actions": ["enqueue", "allocate"],
            "tiers": [[{"name": "gang"}, {"name": plugin, "arguments": arguments}]],
        }
    )


def _schedule(plugin: str, arguments: Obj) -> gs.Decisions:
    return gs.schedule(_snapshot(), _config(plugin, arguments))


# -- float arguments are bounded ---------------------------------------------------------------

WEIGHTS = [
    ("binpack", "binpack.weight"),
    ("binpack", "binpack.cpu"),
    ("binpack", "binpack.memory"),
    ("nodeorder", "leastrequested.weight"),
    ("nodeorder", "mostrequested.weight"),
    ("nodeorder", "balancedresource.weight"),
    ("nodeorder", "tainttoleration.weight"),
    ("nodeorder", "nodeaffinity.weight"),
    ("network-topology-aware", "weight"),
    ("network-topology-aware", "hypernode.binpack.cpu"),
    ("fgd", "weight"),
    ("bestfit", "bestfit.weight"),
    ("random", "weight"),
]


@pytest.mark.parametrize(("plugin", "key"), [*WEIGHTS, ("overcommit", "overcommit-factor")])
@pytest.mark.parametrize(
    "value", [1e308, 1.0000001e6, "2e6", math.nan, math.inf, "nan", "-inf", "9" * 5000]
)
def test_float_plugin_arguments_past_their_bound_are_config_errors(
    plugin: str, key: str, value: object
) -> None:
    field = "(bestfit.)?weight" if plugin == "bestfit" else re.escape(key)  # prefix folded away
    # NaN and infinite numbers are already refused when the configuration is read
    where = re.escape(f"plugin '{plugin}': ") + r"(tiers\[0\]\.plugins\[1\]\.)?"
    with pytest.raises(gs.ConfigError, match=where + rf"arguments\.{field}: "):
        _schedule(plugin, {key: value})


@pytest.mark.parametrize(
    ("plugin", "key"), [p for p in WEIGHTS if p[0] in ("binpack", "nodeorder")]
)
def test_negative_weights_past_the_bound_are_config_errors(plugin: str, key: str) -> None:
    with pytest.raises(gs.ConfigError, match=r"must be in \[-1e\+06, 1e\+06\], got -1e\+308"):
        _schedule(plugin, {key: -1e308})


@pytest.mark.parametrize(("plugin", "key"), [*WEIGHTS, ("overcommit", "overcommit-factor")])
def test_float_arguments_at_their_bound_score_without_overflow(plugin: str, key: str) -> None:
    """The largest accepted weight (and quantities near their own bounds) gives finite scores,
    with numpy's overflow warnings turned into errors."""
    big = gs.Snapshot.from_dict(
        {
            "nodes": [
                {"name": "n0", "allocatable": {"cpu": f"{2**53}m", "memory": 2**53}},
                {"name": "n1", "allocatable": {"cpu": 1, "memory": 1}},
            ],
            "hypernodes": [{"name": "r0", "tier": 1, "members": ["n0", "n1"]}],
            "queues": [{"name": "default"}],
            "jobs": [{"name": "j", "min_resources": {"cpu": f"{2**52}m"}}],
            "tasks": [
                {"name": "t0", "job": "j", "request": {"cpu": "1m", "memory": 1}},
                {
                    "name": "r",
                    "job": "j",
                    "request": {"cpu": f"{2**52}m"},
                    "phase": "Running",
                    "node": "n0",
                },
            ],
        }
    )
    for value in (MAX_ARG_WEIGHT, -MAX_ARG_WEIGHT if plugin in ("binpack", "nodeorder") else 0):
        config = _config(plugin, {key: value})
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            with np.errstate(over="raise", invalid="raise"):
                d = gs.schedule(big, config)
                ex = gs.explain(big, "t0", config)
        assert all(math.isfinite(n.total) for n in ex.nodes)
        assert all(math.isfinite(s) for n in ex.nodes for s in n.scores.values())
        check_all(big, d)


def test_binpack_weight_at_the_bound_still_prefers_the_fuller_node() -> None:
    d = _schedule("binpack", {"binpack.weight": MAX_ARG_WEIGHT, "binpack.cpu": MAX_ARG_WEIGHT})
    assert [(b.task, b.node) for b in d.binds] == [("t0", "n1")]  # n1 already runs a task


def test_overcommit_factor_below_one_still_means_the_default() -> None:
    d = _schedule("overcommit", {"overcommit-factor": -1e308})
    assert d.jobs["j"].phase == "Running"


def test_typical_pod_weight_bound_names_the_entry() -> None:
    pods = [{"cpu": 1000, "gpus": 0, "weight": 1e308}]
    with pytest.raises(gs.ConfigError, match=r"arguments.typical-pods\[0\].weight: must be <="):
        _schedule("fgd", {"typical-pods": pods})


def test_arg_float_and_arg_int_take_bounds() -> None:
    args = {"a": "2.5", "b": 7, "c": "1" * 200}
    assert arg_float(args, "a", 0.0, plugin="p", minimum=0, maximum=2.5) == 2.5
    assert arg_float(args, "missing", 9.0, plugin="p", minimum=0, maximum=1) == 9.0
    with pytest.raises(gs.ConfigError, match=r"plugin 'p': arguments.a: must be >= 3"):
        arg_float(args, "a", 0.0, plugin="p", minimum=3)
    with pytest.raises(gs.ConfigError, match=r"action 'x': arguments.a: must be <= 1,"):
        arg_float(args, "a", 0.0, plugin="x", kind="action", maximum=1)
    with pytest.raises(gs.ConfigError, match=r"arguments\.c: expected a finite number"):
        arg_float(args, "c", 0.0, plugin="p")
    assert arg_int(args, "b", 0, plugin="p", minimum=7, maximum=7) == 7
    with pytest.raises(gs.ConfigError, match=r"arguments.b: must be in \[0, 6\], got 7"):
        arg_int(args, "b", 0, plugin="p", minimum=0, maximum=6)


# -- sla waiting times -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param("9" * 5000, id="text-of-5000-digits"),
        pytest.param("9" * 5000 + "h", id="hours-of-5000-digits"),
        pytest.param("1h" + "9" * 5000 + "s", id="seconds-of-5000-digits"),
        math.inf,
        -math.inf,
        math.nan,
        1e308,
        2**53 + 1,
        pytest.param(10**5000, id="int-of-5000-digits"),
        "9007199254740993",
        "²",  # a digit to str.isdigit, not to int()
        "١٢",  # Arabic-Indic digits: ASCII only
        -0.5,
        [10],
        None,
    ],
)
def test_sla_waiting_time_with_5000_digits_is_a_config_error(bad: object) -> None:
    with pytest.raises(gs.ConfigError, match="plugin 'sla': sla-waiting-time: "):
        parse_duration(bad)
    with pytest.raises(
        gs.ConfigError, match=r"plugin 'sla': (\S*\.arguments\.)?sla-waiting-time: "
    ):
        _schedule("sla", {"sla-waiting-time": bad})


def test_sla_waiting_time_bound_is_2_to_53_seconds() -> None:
    assert parse_duration(MAX_WAITING_TIME) == 2**53
    assert parse_duration(str(2**53)) == 2**53
    assert parse_duration(float(2**53)) == 2**53
    assert parse_duration(" 2501999792983h36m32s ") == 2**53
    assert parse_duration(90.9) == 90
    assert _schedule("sla", {"sla-waiting-time": 2**53}).jobs["j"].phase == "Running"


def test_job_age_and_walltime_past_the_bound_are_snapshot_errors() -> None:
    for field in ("age", "walltime"):
        with pytest.raises(gs.SnapshotError, match=f"job 'j': {field}: "):
            _snapshot(jobs=[{"name": "j", field: 10**5000}])
        with pytest.raises(gs.SnapshotError, match=f"job 'j': {field}: "):
            _snapshot(jobs=[{"name": "j", field: "10"}])


# -- the root queue ----------------------------------------------------------------------------

HIERARCHY = gs.Config.from_dict(
    {
        "actions": ["enqueue", "allocate", "preempt", "reclaim", "backfill"],
        "tiers": [
            [{"name": "priority"}, {"name": "gang"}],
            [
                {"name": "drf", "enableHierarchy": True},
                {"name": "predicates"},
                {"name": "capacity", "enableHierarchy": True},
            ],
        ],
    }
)


def _queued(queues: list[Obj], job_queues: list[str]) -> Obj:
    return {
        "nodes": [{"name": "n0", "allocatable": {"cpu": 8, "memory": "8Gi"}}],
        "queues": queues,
        "jobs": [{"name": f"j-{q}", "queue": q} for q in job_queues],
        "tasks": [{"name": f"t-{q}", "job": f"j-{q}", "request": {"cpu": 1}} for q in job_queues],
    }


@pytest.mark.parametrize(
    "queues",
    [
        [{"name": "q0"}, {"name": "root", "parent": "q0"}],
        [{"name": "root", "parent": "a"}, {"name": "a", "parent": "b"}, {"name": "b"}],
        [{"name": "top"}, {"name": "mid", "parent": "top"}, {"name": "root", "parent": "mid"}],
    ],
)
def test_root_queue_with_a_parent_is_rejected_at_validation(queues: list[Obj]) -> None:
    with pytest.raises(gs.SnapshotError, match=r"queue 'root': parent: .*cannot have a parent"):
        gs.Snapshot.from_dict(_queued(queues, ["root"]))


@pytest.mark.parametrize(
    ("queues", "job_queues", "bound"),
    [
        # jobs in the root and in an inner queue get nothing; the leaf's job binds
        (
            [{"name": "root"}, {"name": "a", "parent": "root"}, {"name": "a1", "parent": "a"}],
            ["root", "a", "a1"],
            {"t-a1"},
        ),
        ([{"name": "root"}], ["root"], {"t-root"}),  # a root without children is a leaf
        ([{"name": "a"}, {"name": "a1", "parent": "a"}], ["a", "a1"], {"t-a1"}),  # virtual root
        ([{"name": "x", "parent": "root"}, {"name": "root"}], ["x"], {"t-x"}),  # root listed last
    ],
)
def test_queue_hierarchy_edge_cases_schedule_cleanly(
    queues: list[Obj], job_queues: list[str], bound: set[str]
) -> None:
    snap = gs.Snapshot.from_dict(_queued(queues, job_queues))
    for config in (HIERARCHY, gs.Config.default()):
        d = gs.schedule(snap, config)
        check_all(snap, d, hierarchical=config is HIERARCHY)
        if config is HIERARCHY:
            assert {b.task for b in d.binds} == bound


# -- nondeterministic placer options are reported ----------------------------------------------


def _allocate_with(**arguments: object) -> gs.Config:
    return gs.Config.from_dict(
        {
            "actions": ["enqueue", "allocate"],
            "tiers": [[{"name": "gang"}, {"name": "predicates"}, {"name": "binpack"}]],
            "configurations": {"allocate": {"placer": "cpsat", **arguments}},
        }
    )


def test_deterministic_cycles_say_so() -> None:
    snap = _snapshot()
    for d in (
        gs.schedule(snap),
        gs.schedule(snap, _allocate_with()),
        gs.schedule(snap, _allocate_with(**{"placer.workers": 1, "placer.seed": 5})),
        gs.schedule(snap, placer=gs.CpSatPlacer()),
    ):
        assert d.deterministic and d.nondeterministic == ()
        assert d.to_dict()["nondeterministic"] == []
        assert gs.Decisions.from_dict(d.to_dict()) == d
    assert nondeterministic_options(gs.GreedyPlacer()) == ()


def test_nondeterministic_placer_options_are_named_in_decisions() -> None:
    snap = _snapshot()
    config = _allocate_with(**{"placer.workers": 2, "placer.time-limit": 5})
    d = gs.schedule(snap, config)
    assert not d.deterministic
    assert d.nondeterministic == (
        "placer 'cpsat': workers=2 (parallel search is not deterministic)",
        "placer 'cpsat': time_limit_s=5 (a wall-clock limit is not deterministic)",
    )
    assert d.to_dict()["nondeterministic"] == list(d.nondeterministic)
    assert gs.Decisions.from_dict(d.to_dict()) == d
    assert [b.task for b in d.binds] == ["t0"]  # the cycle itself is a normal one
    # a placer object handed to schedule is judged the same way; repeats are named once
    twice = gs.Config.from_dict(
        {**config.to_dict(), "actions": ["enqueue", "allocate", "allocate"]}
    )
    d = gs.schedule(snap, twice, placer=gs.CpSatPlacer(workers=3))
    assert d.nondeterministic == (
        "placer 'cpsat': workers=3 (parallel search is not deterministic)",
    )
    # no allocate in the cycle: no placer was used
    d = gs.schedule(snap, gs.Config.from_dict({**config.to_dict(), "actions": ["enqueue"]}))
    assert d.deterministic


@pytest.mark.parametrize("bad", ["workers=2", [1], {"a": 1}, None])
def test_malformed_nondeterministic_field_is_a_snapshot_error(bad: object) -> None:
    with pytest.raises(gs.SnapshotError, match="decisions: nondeterministic: expected a list"):
        gs.Decisions.from_dict({"nondeterministic": bad})


def _cli_inputs(tmp_path: Path, **arguments: object) -> list[str]:
    snap = tmp_path / "snapshot.json"
    snap.write_text(json.dumps(_snapshot().to_dict()))
    lines = [
        'actions: "enqueue, allocate"',
        "tiers:",
        "- plugins:",
        "  - name: gang",
        "  - name: predicates",
        "configurations:",
        "- name: allocate",
        "  arguments:",
        "    placer: cpsat",
        *(f"    {k}: {v}" for k, v in arguments.items()),
    ]
    conf = tmp_path / "volcano-scheduler.conf"
    conf.write_text("\n".join(lines) + "\n")
    return ["-f", str(snap), "--config", str(conf)]


def test_cli_table_warns_when_the_cycle_is_not_deterministic(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main(["schedule", *_cli_inputs(tmp_path, **{"placer.workers": 4})]) == 0
    out, err = capsys.readouterr()
    first, second = out.splitlines()[:2]
    assert first == (
        "WARNING: not deterministic, a rerun may decide differently: "
        "placer 'cpsat': workers=4 (parallel search is not deterministic)"
    )
    assert second == "BINDS (1)" and err == ""
    assert main(["get", "jobs", *_cli_inputs(tmp_path, **{"placer.time-limit": 2})]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("NAME") and "time_limit_s=2" in err and err.count("\n") == 1


def test_cli_table_has_no_warning_when_deterministic(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main(["schedule", *_cli_inputs(tmp_path, **{"placer.workers": 1})]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("BINDS (1)") and "WARNING" not in out and err == ""


@pytest.mark.parametrize("field", ["config", "registry"])
@pytest.mark.parametrize("junk", [{"actions": ["allocate"]}, "allocate", 3, object()])
def test_schedule_refuses_a_config_or_registry_of_the_wrong_type(field: str, junk: object) -> None:
    """A dict, a string or any other object where a Config or Registry belongs is a
    ConfigError naming the argument, not an AttributeError from inside the cycle."""
    snap = gs.Snapshot.from_dict({"nodes": [], "queues": [{"name": "default"}]})
    with pytest.raises(gs.ConfigError, match=field):
        gs.schedule(snap, **{field: junk})  # type: ignore[arg-type]
