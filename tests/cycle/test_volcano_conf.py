"""Production volcano-scheduler.conf files that name plugins gangsched does not implement."""

from __future__ import annotations

import json
import pickle
import warnings
from pathlib import Path

import pytest

import gangsched as gs
from gangsched.cli import main
from gangsched.config import BUILTIN_PLUGINS, UNIMPLEMENTED_PLUGINS, Config
from gangsched.errors import ConfigError, UnimplementedPluginWarning

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION = ROOT / "tests" / "data" / "volcano-scheduler-production.conf"
SKIPPED = (
    "pdb",
    "deviceshare",
    "numaaware",
    "tdm",
    "usage",
    "resourcequota",
    "extender",
)


def _load(**kw: object) -> tuple[Config, list[UnimplementedPluginWarning]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        config = Config.from_volcano_yaml(PRODUCTION.read_text(encoding="utf-8"), **kw)  # type: ignore[arg-type]
    found = [w.message for w in caught if isinstance(w.message, UnimplementedPluginWarning)]
    assert len(found) == len(caught)
    return config, found


def test_production_config_loads_with_one_warning_per_skipped_plugin() -> None:
    config, found = _load()
    assert config.ignored_plugins == SKIPPED
    assert [w.plugin for w in found] == list(SKIPPED)
    for w in found:
        assert w.detail == UNIMPLEMENTED_PLUGINS[w.plugin]
        assert str(w).startswith(f"plugin {w.plugin!r} is not implemented by gangsched")
    assert config.plugin_names == (
        "priority",
        "gang",
        "conformance",
        "overcommit",
        "drf",
        "predicates",
        "proportion",
        "nodeorder",
        "binpack",
        "task-topology",
    )
    # the tier only the extender filled is gone; the others keep their order and options
    assert len(config.tiers) == 2
    assert not config.plugin("gang").enabled("preemptable")  # type: ignore[union-attr]
    assert config.plugin("binpack").arguments["binpack.weight"] == 10  # type: ignore[union-attr]


def test_plugins_whose_job_gangsched_does_another_way_say_so() -> None:
    assert "another way" in UNIMPLEMENTED_PLUGINS["deviceshare"]
    assert "per-device" in UNIMPLEMENTED_PLUGINS["deviceshare"]
    assert "another way" in UNIMPLEMENTED_PLUGINS["pdb"]
    assert "disruption budgets" in UNIMPLEMENTED_PLUGINS["pdb"]


def test_the_loaded_production_config_schedules_gpus_per_device() -> None:
    config, _ = _load()
    snap = gs.Snapshot.from_dict(
        {
            "nodes": [{"name": "n0", "allocatable": {"cpu": 8}, "gpus": {"count": 2}}],
            "queues": [{"name": "default"}],
            "jobs": [{"name": "j", "min_available": 2}],
            "tasks": [
                {"name": f"j-{i}", "job": "j", "request": {"cpu": 1, "nvidia.com/gpu": 1}}
                for i in range(2)
            ],
        }
    )
    d = gs.schedule(snap, config)
    assert sorted(b.gpu_indices for b in d.binds) == [(0,), (1,)]


def test_strict_refuses_the_first_skipped_plugin_by_place() -> None:
    with pytest.raises(ConfigError) as exc:
        _load(strict=True)
    assert exc.value.kind == "plugin" and exc.value.name == "pdb"
    assert exc.value.field == "tiers[0].plugins[3].name"
    assert "not implemented by gangsched" in str(exc.value) and "strict" in str(exc.value)


def test_strict_key_in_the_file_is_the_same_as_the_argument() -> None:
    text = "strict: true\n" + PRODUCTION.read_text(encoding="utf-8")
    with pytest.raises(ConfigError, match="'pdb'"):
        Config.from_volcano_yaml(text)
    with pytest.raises(ConfigError) as exc:
        Config.from_dict({"actions": ["allocate"], "strict": "yes"})
    assert exc.value.field == "strict"


def test_unknown_plugins_are_still_errors() -> None:
    with pytest.raises(ConfigError, match="unknown plugin 'bnpack'"):
        Config.from_dict({"actions": ["allocate"], "tiers": [[{"name": "bnpack"}]]})


def test_a_registry_that_provides_the_plugin_keeps_it() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        config = Config.from_dict(
            {"actions": ["allocate"], "tiers": [[{"name": "gang"}, {"name": "pdb"}]]},
            plugins=(*BUILTIN_PLUGINS, "pdb"),
        )
    assert config.plugin_names == ("gang", "pdb") and config.ignored_plugins == ()


def test_ignored_plugins_do_not_change_equality_or_the_interchange_form() -> None:
    config, _ = _load()
    again = Config.from_dict(config.to_dict())
    assert again == config and hash(again) == hash(config)
    assert again.ignored_plugins == ()
    assert "ignored_plugins" not in config.to_dict()
    assert Config.from_volcano_yaml(config.to_volcano_yaml()) == config


def test_a_plugin_listed_twice_warns_once() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        config = Config.from_dict(
            {"actions": ["allocate"], "tiers": [[{"name": "tdm"}], [{"name": "tdm"}]]}
        )
    assert config.ignored_plugins == ("tdm",) and len(caught) == 1
    assert config.tiers == ()


def test_the_warning_pickles() -> None:
    w = UnimplementedPluginWarning("pdb", "lost")
    back = pickle.loads(pickle.dumps(w))
    assert (back.plugin, back.detail, str(back)) == (w.plugin, w.detail, str(w))


def test_cli_warns_on_stderr_and_strict_is_one_error_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    snapshot = str(ROOT / "examples" / "snapshot.yaml")
    assert main(["get", "queues", "-f", snapshot, "--config", str(PRODUCTION)]) == 0
    out = capsys.readouterr()
    assert out.out.startswith("NAME")
    lines = out.err.splitlines()
    assert [line.split("'")[1] for line in lines] == list(SKIPPED)
    assert all(line.startswith("gangsched: warning: plugin ") for line in lines)
    assert main(["schedule", "-f", snapshot, "--config", str(PRODUCTION), "--strict"]) == 1
    out = capsys.readouterr()
    assert out.out == ""
    (line,) = out.err.splitlines()
    assert line.startswith("gangsched: error: plugin 'pdb': not implemented by gangsched")
    assert "--strict" in line and "extender" in line


def test_no_builtin_plugin_is_listed_as_unimplemented() -> None:
    # a plugin that lands in gangsched must leave UNIMPLEMENTED_PLUGINS (and SKIPPED above)
    assert not set(UNIMPLEMENTED_PLUGINS) & set(BUILTIN_PLUGINS)


def test_replay_warns_in_the_cli_format_too(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", "--config", str(PRODUCTION), "--limit", "50"]) == 0
    err = capsys.readouterr().err.splitlines()
    warned = [line for line in err if line.startswith("gangsched: warning: plugin ")]
    assert [line.split("'")[1] for line in warned] == list(SKIPPED)
    assert not any("UnimplementedPluginWarning" in line for line in err)


SHUFFLE_CONF = """
actions: "enqueue, allocate, backfill, shuffle"
tiers:
- plugins:
  - name: priority
  - name: gang
"""


def test_the_shuffle_action_is_skipped_with_a_warning() -> None:
    with pytest.warns(gs.errors.UnimplementedActionWarning, match="'shuffle'") as caught:
        config = gs.Config.from_volcano_yaml(SHUFFLE_CONF)
    assert config.actions == ("enqueue", "allocate", "backfill")
    assert config.ignored_actions == ("shuffle",)
    assert caught[0].message.action == "shuffle"  # type: ignore[union-attr]
    # read from Volcano's YAML: enqueue without gangsched's shape check, as in Volcano
    assert config == gs.Config.from_dict(
        {
            "actions": ["enqueue", "allocate", "backfill"],
            "tiers": [[{"name": "priority"}, {"name": "gang"}]],
            "configurations": {"enqueue": {"shapeCheckEnable": False}},
        }
    )


def test_strict_refuses_the_shuffle_action_by_place() -> None:
    with pytest.raises(gs.ConfigError) as info:
        gs.Config.from_volcano_yaml(SHUFFLE_CONF, strict=True)
    assert info.value.kind == "action" and info.value.field == "actions[3]"


def test_an_action_list_of_only_unimplemented_actions_is_an_error() -> None:
    with pytest.warns(gs.errors.UnimplementedActionWarning), pytest.raises(gs.ConfigError):
        gs.Config.from_dict({"actions": ["shuffle"]})


def test_cli_strict_refuses_the_shuffle_action(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = tmp_path / "volcano-scheduler.conf"
    conf.write_text(SHUFFLE_CONF)
    snap = tmp_path / "snap.json"
    snap.write_text(
        json.dumps({"nodes": [], "queues": [{"name": "default"}], "jobs": [], "tasks": []})
    )
    assert main(["schedule", "-f", str(snap), "--config", str(conf)]) == 0
    assert "action 'shuffle' is not implemented" in capsys.readouterr().err
    assert main(["schedule", "-f", str(snap), "--config", str(conf), "--strict"]) != 0
    assert "shuffle" in capsys.readouterr().err
