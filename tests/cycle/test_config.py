"""Tests for gangsched.config: the validated scheduler configuration."""

from __future__ import annotations

import json
import string
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gangsched.config import (
    BUILTIN_ACTIONS,
    BUILTIN_PLUGINS,
    EXTENSION_POINTS,
    SWITCHES,
    VOLCANO_FLAGS,
    Config,
    FrozenArgs,
    PluginOption,
    Tier,
    arg_bool,
    arg_float,
    arg_int,
    arg_str,
    check_names,
)
from gangsched.errors import ConfigError

# Volcano's built-in configuration text (scheduler/util.go), as the scheduler embeds it.
VOLCANO_DEFAULT = """
actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
  - name: conformance
- plugins:
  - name: overcommit
  - name: drf
  - name: predicates
  - name: proportion
  - name: nodeorder
"""

# A configuration in the style of the Helm chart's volcano-scheduler.conf, extended with
# binpack arguments and per-action configurations.
HELM_STYLE = """
actions: "enqueue, allocate, backfill, reclaim, preempt"
tiers:
- plugins:
  - name: priority
  - name: gang
    enablePreemptable: false
  - name: conformance
  - name: sla
    arguments:
      sla-waiting-time: 1h2m3s
- plugins:
  - name: overcommit
    arguments:
      overcommit-factor: 1.5
  - name: drf
    enablePreemptable: false
    enableJobOrder: true
  - name: predicates
    arguments:
      predicate.DynamicResourceAllocationEnable: true
  - name: proportion
  - name: nodeorder
    arguments:
      leastrequested.weight: 1
      mostrequested.weight: "0"
  - name: binpack
    enableNodeOrder: true
    enabledHyperNodeOrder: false
    arguments:
      binpack.weight: 10
      binpack.cpu: 2
      binpack.memory: "3"
      binpack.resources: nvidia.com/gpu, example.com/foo
      binpack.resources.nvidia.com/gpu: 8
      binpack.resources.example.com/foo: 2
  - name: network-topology-aware
configurations:
- name: allocate
  arguments:
    predicateErrorCacheEnable: false
- name: preempt
  arguments:
    enableTopologyAwarePreemption: true
    minCandidateNodesPercentage: 10
"""


def _raises(data: object, field: str, *words: str) -> ConfigError:
    """Assert from_dict rejects ``data`` at ``field`` and the message names it and ``words``."""
    with pytest.raises(ConfigError) as info:
        Config.from_dict(data)
    err = info.value
    assert err.field == field, str(err)
    assert field in str(err)
    for word in words:
        assert word in str(err), str(err)
    return err


def _one(plugin: object, **extra: object) -> dict[str, object]:
    return {"actions": ["allocate"], "tiers": [[plugin]], **extra}


# -- default ---------------------------------------------------------------------------------


def test_default_equals_volcano_builtin() -> None:
    # The same actions and plugins; read from Volcano's YAML, enqueue's shape check (a
    # gangsched extension, on in gangsched's own default) is off, as in Volcano.
    config = Config.default()
    volcano = Config.from_volcano_yaml(VOLCANO_DEFAULT)
    assert volcano.configurations == {"enqueue": {"shapeCheckEnable": False}}
    assert config == Config(
        actions=volcano.actions, tiers=volcano.tiers
    ) and config == Config.from_volcano_yaml(
        VOLCANO_DEFAULT
        + "configurations:\n- name: enqueue\n  arguments:\n    shapeCheckEnable: true\n"
    )
    assert Config.from_volcano_yaml(config.to_volcano_yaml()) == config
    assert config.actions == ("enqueue", "allocate", "backfill")
    assert [t.names for t in config.tiers] == [
        ("priority", "gang", "conformance"),
        ("overcommit", "drf", "predicates", "proportion", "nodeorder"),
    ]
    assert config.configurations == {}
    for tier in config.tiers:
        for plugin in tier.plugins:
            assert plugin.arguments == {}
            assert not plugin.hierarchy
            assert all(plugin.enabled(point) for point in EXTENSION_POINTS)


def test_default_is_hashable_and_stable() -> None:
    assert hash(Config.default()) == hash(Config.default())
    assert json.dumps(Config.default().to_dict()) == json.dumps(Config.default().to_dict())


# -- Volcano YAML ----------------------------------------------------------------------------


def test_helm_style_yaml() -> None:
    config = Config.from_volcano_yaml(HELM_STYLE)
    assert config.actions == ("enqueue", "allocate", "backfill", "reclaim", "preempt")
    assert config.plugin_names == (
        "priority",
        "gang",
        "conformance",
        "sla",
        "overcommit",
        "drf",
        "predicates",
        "proportion",
        "nodeorder",
        "binpack",
        "network-topology-aware",
    )
    gang = config.plugin("gang")
    assert gang is not None
    assert not gang.enabled("preemptable")
    assert gang.enabled("reclaimable") and gang.enabled("job_ready")
    assert gang.disabled == frozenset({"preemptable"})
    drf = config.plugin("drf")
    assert drf is not None and drf.disabled == frozenset({"preemptable"})
    assert drf.enabled("job_order")
    binpack = config.plugin("binpack")
    assert binpack is not None
    assert binpack.enabled("node_score") and not binpack.enabled("hypernode_score")
    assert dict(binpack.arguments) == {
        "binpack.cpu": 2,
        "binpack.memory": "3",
        "binpack.resources": "nvidia.com/gpu, example.com/foo",
        "binpack.resources.example.com/foo": 2,
        "binpack.resources.nvidia.com/gpu": 8,
        "binpack.weight": 10,
    }
    args = binpack.arguments
    assert arg_float(args, "binpack.weight", 1.0, plugin="binpack") == 10.0
    assert arg_float(args, "binpack.memory", 1.0, plugin="binpack") == 3.0
    assert arg_float(args, "binpack.resources.nvidia.com/gpu", 1.0, plugin="binpack") == 8.0
    assert arg_str(args, "binpack.resources", "", plugin="binpack").split(", ") == [
        "nvidia.com/gpu",
        "example.com/foo",
    ]
    predicates = config.plugin("predicates")
    assert predicates is not None
    assert predicates.arguments["predicate.DynamicResourceAllocationEnable"] is True
    assert config.action_arguments("allocate") == {"predicateErrorCacheEnable": False}
    preempt = config.action_arguments("preempt")
    assert arg_bool(preempt, "enableTopologyAwarePreemption", False, plugin="preempt")
    assert arg_int(preempt, "minCandidateNodesPercentage", 0, plugin="preempt") == 10
    assert config.action_arguments("backfill") == {}
    assert config.plugin("capacity") is None


def test_yaml_round_trip_of_helm_style() -> None:
    config = Config.from_volcano_yaml(HELM_STYLE)
    assert Config.from_volcano_yaml(config.to_volcano_yaml()) == config
    assert Config.from_dict(config.to_dict()) == config


def test_yaml_metrics_section_is_ignored() -> None:
    text = VOLCANO_DEFAULT + "metrics:\n  address: http://prom:9090\n"
    assert Config.from_volcano_yaml(text) == Config.from_volcano_yaml(VOLCANO_DEFAULT)


def test_yaml_switch_accepts_yaml_booleans_only() -> None:
    text = "actions: allocate\ntiers:\n- plugins:\n  - name: gang\n    enableJobReady: no\n"
    gang = Config.from_volcano_yaml(text).plugin("gang")
    assert gang is not None and not gang.enabled("job_ready")
    quoted = text.replace("no", '"false"')
    with pytest.raises(ConfigError, match=r"tiers\[0\]\.plugins\[0\]\.enableJobReady"):
        Config.from_volcano_yaml(quoted)


# -- switches --------------------------------------------------------------------------------


@pytest.mark.parametrize(("flag", "switch"), sorted(VOLCANO_FLAGS.items()))
def test_each_volcano_flag_turns_off_its_switch(flag: str, switch: str) -> None:
    plugin = PluginOption.from_dict({"name": "gang", flag: False})
    assert plugin.disabled == frozenset({switch})
    assert not plugin.enabled(switch)
    others = [p for p in EXTENSION_POINTS if p != switch]
    if switch == "job_enqueueable":
        assert not plugin.enabled("job_enqueued")
        others.remove("job_enqueued")
    assert all(plugin.enabled(p) for p in others)
    assert PluginOption.from_dict({"name": "gang", "switches": {switch: False}}) == plugin
    assert PluginOption.from_dict({"name": "gang", flag: True}) == PluginOption(name="gang")


def test_points_without_switch_are_always_on() -> None:
    plugin = PluginOption(name="gang", disabled=frozenset(SWITCHES))
    assert plugin.enabled("job_valid")
    assert plugin.enabled("on_allocate") and plugin.enabled("on_deallocate")
    assert not any(plugin.switches.values())
    assert list(plugin.switches) == sorted(SWITCHES)


def test_every_switch_is_an_extension_point() -> None:
    assert set(SWITCHES) <= set(EXTENSION_POINTS)
    assert len(set(VOLCANO_FLAGS.values())) == len(VOLCANO_FLAGS)


def test_enabled_unknown_point() -> None:
    with pytest.raises(ConfigError, match="node_order") as info:
        PluginOption(name="gang").enabled("node_order")
    assert "did you mean 'node_score'" in str(info.value)


def test_hierarchy_both_spellings() -> None:
    volcano = PluginOption.from_dict({"name": "capacity", "enableHierarchy": True})
    ours = PluginOption.from_dict({"name": "capacity", "hierarchy": True})
    assert volcano == ours and ours.hierarchy
    assert ours.disabled == frozenset()


def test_capacity_hierarchy_with_proportion_is_allowed() -> None:
    data = {
        "actions": ["allocate"],
        "tiers": [[{"name": "capacity", "enableHierarchy": True}, {"name": "proportion"}]],
    }
    config = Config.from_dict(data)
    plugin = config.plugin("capacity")
    assert plugin is not None and plugin.hierarchy


# -- alternative spellings -------------------------------------------------------------------


def test_spellings_are_equivalent() -> None:
    ours = {
        "actions": ["enqueue", "allocate"],
        "tiers": [
            [{"name": "gang", "switches": {"preemptable": False}}],
            ["drf", {"name": "binpack", "arguments": {"binpack.weight": 2}}],
        ],
        "configurations": {"allocate": {"predicateErrorCacheEnable": False}},
    }
    volcano = {
        "actions": "enqueue, allocate",
        "tiers": [
            {"plugins": [{"name": "gang", "enablePreemptable": False}]},
            {"plugins": [{"name": "drf"}, {"name": "binpack", "arguments": {"binpack.weight": 2}}]},
        ],
        "configurations": [{"name": "allocate", "arguments": {"predicateErrorCacheEnable": False}}],
    }
    assert Config.from_dict(ours) == Config.from_dict(volcano)


def test_repeated_actions_are_allowed() -> None:
    config = Config.from_dict({"actions": "allocate, backfill, allocate", "tiers": []})
    assert config.actions == ("allocate", "backfill", "allocate")


def test_empty_tiers_are_allowed() -> None:
    config = Config.from_dict({"actions": ["allocate"], "tiers": [{"plugins": None}, []]})
    assert config.tiers == (Tier(), Tier())
    assert Config.from_dict({"actions": ["allocate"]}).tiers == ()


def test_to_dict_is_canonical() -> None:
    a = Config.from_dict(
        _one({"name": "binpack", "arguments": {"b": 1, "a": [1, {"y": 2, "x": 1}]}})
    )
    b = Config.from_dict(
        _one({"name": "binpack", "arguments": {"a": [1, {"x": 1, "y": 2}], "b": 1}})
    )
    assert a == b
    assert json.dumps(a.to_dict()) == json.dumps(b.to_dict())
    assert a.to_dict()["tiers"] == [
        [{"name": "binpack", "arguments": {"a": [1, {"x": 1, "y": 2}], "b": 1}}]
    ]


# -- round trip (hypothesis) -----------------------------------------------------------------

_keys = st.text(alphabet=string.ascii_letters + string.digits + "._/-", min_size=1, max_size=12)
_scalars = st.one_of(
    st.booleans(),
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_keys, inner, max_size=3),
    max_leaves=6,
)
_args = st.dictionaries(_keys, _values, max_size=4)


@st.composite
def configs(draw: st.DrawFn) -> Config:
    names = draw(st.lists(st.sampled_from(BUILTIN_PLUGINS), unique=True, max_size=8))
    n_tiers = max(draw(st.integers(0, 3)), 1 if names else 0)
    where = sorted(
        draw(
            st.lists(st.integers(0, max(n_tiers - 1, 0)), min_size=len(names), max_size=len(names))
        )
    )
    tiers: list[list[PluginOption]] = [[] for _ in range(n_tiers)]
    for name, tier in zip(names, where, strict=True):
        can_nest = name == "capacity" or (name == "drf" and "proportion" not in names)
        tiers[tier].append(
            PluginOption(
                name=name,
                arguments=draw(_args),
                disabled=draw(st.frozensets(st.sampled_from(SWITCHES), max_size=4)),
                hierarchy=draw(st.booleans()) if can_nest else False,
            )
        )
    return Config(
        actions=tuple(draw(st.lists(st.sampled_from(BUILTIN_ACTIONS), min_size=1, max_size=6))),
        tiers=tuple(Tier(plugins=tuple(t)) for t in tiers),
        configurations=draw(st.dictionaries(st.sampled_from(BUILTIN_ACTIONS), _args, max_size=3)),
    )


@settings(max_examples=150, deadline=None)
@given(configs())
def test_round_trip_dict(config: Config) -> None:
    data = config.to_dict()
    again = Config.from_dict(data)
    assert again == config
    assert hash(again) == hash(config)
    assert json.dumps(again.to_dict()) == json.dumps(data)


@settings(max_examples=100, deadline=None)
@given(configs())
def test_round_trip_volcano_yaml(config: Config) -> None:
    text = config.to_volcano_yaml()
    assert Config.from_volcano_yaml(text) == config
    assert Config.from_volcano_yaml(text).to_volcano_yaml() == text


# -- names -----------------------------------------------------------------------------------


def test_unknown_plugin_suggests_close_match() -> None:
    data = {"actions": ["allocate"], "tiers": [["gang"], ["drf", "binpak"]]}
    err = _raises(data, "tiers[1].plugins[1].name", "'binpak'", "did you mean 'binpack'")
    assert "did you mean" in err.detail


def test_unknown_plugin_without_close_match() -> None:
    err = _raises(_one("zzzzqqq"), "tiers[0].plugins[0].name", "'zzzzqqq'")
    assert "did you mean" not in str(err)


def test_unknown_action_suggests_close_match() -> None:
    _raises({"actions": "enqueue, alocate"}, "actions[1]", "'alocate'", "'allocate'")


def test_unknown_configuration_action() -> None:
    data = {"actions": ["allocate"], "configurations": {"prempt": {}}}
    _raises(data, "configurations.prempt", "did you mean 'preempt'")


def test_caller_supplied_names() -> None:
    data = _one({"name": "my-plugin"}) | {"actions": ["my-action"]}
    with pytest.raises(ConfigError):
        Config.from_dict(data)
    config = Config.from_dict(data, plugins=[*BUILTIN_PLUGINS, "my-plugin"], actions=["my-action"])
    assert config.plugin_names == ("my-plugin",)
    with pytest.raises(ConfigError, match=r"actions\[0\]"):
        check_names(config, plugins=BUILTIN_PLUGINS, actions=BUILTIN_ACTIONS)


def test_check_names_on_constructed_config() -> None:
    config = Config(actions=("allocate",), tiers=(Tier(plugins=(PluginOption(name="gnag"),)),))
    with pytest.raises(ConfigError, match=r"tiers\[0\]\.plugins\[0\]\.name.*'gang'"):
        check_names(config, plugins=BUILTIN_PLUGINS, actions=BUILTIN_ACTIONS)
    check_names(config, plugins=["gnag"], actions=["allocate"])


# -- malformed input: one test per case ------------------------------------------------------


def test_top_level_not_mapping() -> None:
    with pytest.raises(ConfigError, match="expected a configuration mapping"):
        Config.from_dict(["allocate"])


def test_unknown_top_level_key() -> None:
    _raises({"actions": ["allocate"], "tier": []}, "tier", "did you mean 'tiers'")


def test_missing_actions() -> None:
    _raises({"tiers": []}, "actions", "no actions")


def test_actions_wrong_type() -> None:
    _raises({"actions": 5}, "actions", "int")


def test_actions_empty_list() -> None:
    _raises({"actions": []}, "actions", "no actions")


def test_actions_empty_string() -> None:
    _raises({"actions": ""}, "actions[0]", "empty")


def test_actions_trailing_comma() -> None:
    _raises({"actions": "enqueue, allocate,"}, "actions[2]", "empty")


def test_action_name_not_string() -> None:
    _raises({"actions": ["allocate", 3]}, "actions[1]", "must be a string")


def test_tiers_wrong_type() -> None:
    _raises({"actions": ["allocate"], "tiers": "gang"}, "tiers", "expected a list")


def test_tier_plugins_wrong_type() -> None:
    _raises({"actions": ["allocate"], "tiers": [{"plugins": "gang"}]}, "tiers[0].plugins")


def test_unknown_tier_key() -> None:
    _raises({"actions": ["allocate"], "tiers": [{"plugin": []}]}, "tiers[0].plugin")


def test_plugin_entry_wrong_type() -> None:
    _raises(_one(7), "tiers[0].plugins[0]", "int")


def test_plugin_without_name() -> None:
    _raises(_one({"arguments": {}}), "tiers[0].plugins[0].name", "no name")


def test_plugin_name_not_string() -> None:
    _raises(_one({"name": 12}), "tiers[0].plugins[0].name", "must be a string")


def test_plugin_name_empty() -> None:
    _raises(_one({"name": " "}), "tiers[0].plugins[0].name", "empty")


def test_unknown_plugin_option() -> None:
    err = _raises(
        _one({"name": "gang", "enablePreemtable": False}),
        "tiers[0].plugins[0].enablePreemtable",
        "did you mean 'enablePreemptable'",
    )
    assert err.kind == "plugin" and err.name == "gang"


def test_arguments_not_mapping() -> None:
    _raises(_one({"name": "binpack", "arguments": ["a"]}), "tiers[0].plugins[0].arguments")


def test_argument_name_not_string() -> None:
    _raises(
        _one({"name": "binpack", "arguments": {1: "a"}}),
        "tiers[0].plugins[0].arguments",
        "argument name",
    )


def test_argument_without_value() -> None:
    _raises(
        _one({"name": "binpack", "arguments": {"binpack.weight": None}}),
        "tiers[0].plugins[0].arguments.binpack.weight",
        "no value",
    )


def test_argument_not_finite() -> None:
    _raises(
        _one({"name": "binpack", "arguments": {"w": [1.0, float("nan")]}}),
        "tiers[0].plugins[0].arguments.w[1]",
        "finite",
    )


def test_argument_of_unsupported_type() -> None:
    _raises(
        _one({"name": "binpack", "arguments": {"w": {1, 2}}}),
        "tiers[0].plugins[0].arguments.w",
        "set",
    )


def test_volcano_flag_not_bool() -> None:
    _raises(_one({"name": "gang", "enableJobOrder": "false"}), "tiers[0].plugins[0].enableJobOrder")


def test_switch_value_not_bool() -> None:
    _raises(
        _one({"name": "gang", "switches": {"job_order": 0}}),
        "tiers[0].plugins[0].switches.job_order",
        "boolean",
    )


def test_switches_not_mapping() -> None:
    _raises(_one({"name": "gang", "switches": ["job_order"]}), "tiers[0].plugins[0].switches")


def test_unknown_switch() -> None:
    _raises(
        _one({"name": "gang", "switches": {"job_readyy": False}}),
        "tiers[0].plugins[0].switches.job_readyy",
        "did you mean 'job_ready'",
    )


def test_switch_set_twice() -> None:
    _raises(
        _one({"name": "gang", "enableJobReady": False, "switches": {"job_ready": False}}),
        "tiers[0].plugins[0].switches.job_ready",
        "enableJobReady",
    )


def test_hierarchy_not_bool() -> None:
    _raises(_one({"name": "drf", "enableHierarchy": "yes"}), "tiers[0].plugins[0].enableHierarchy")


def test_hierarchy_given_twice() -> None:
    _raises(
        _one({"name": "drf", "enableHierarchy": True, "hierarchy": True}),
        "tiers[0].plugins[0].enableHierarchy",
        "twice",
    )


def test_duplicate_plugin() -> None:
    data = {"actions": ["allocate"], "tiers": [["gang", "drf"], ["priority", "gang"]]}
    _raises(data, "tiers[1].plugins[1].name", "'gang'", "listed twice", "tiers[0].plugins[0]")


def test_drf_hierarchy_with_proportion_same_tier() -> None:
    data = _one({"name": "drf", "enableHierarchy": True})
    data["tiers"] = [[{"name": "drf", "enableHierarchy": True}, "proportion"]]
    _raises(data, "tiers[0].plugins[0].hierarchy", "proportion", "tiers[0].plugins[1]")


def test_drf_hierarchy_with_proportion_other_tier() -> None:
    data = {
        "actions": ["allocate"],
        "tiers": [["proportion"], [{"name": "drf", "enableHierarchy": True}]],
    }
    _raises(data, "tiers[1].plugins[0].hierarchy", "conflicts with proportion")


def test_configurations_wrong_type() -> None:
    _raises({"actions": ["allocate"], "configurations": "allocate"}, "configurations")


def test_configuration_entry_wrong_type() -> None:
    _raises({"actions": ["allocate"], "configurations": ["allocate"]}, "configurations[0]")


def test_configuration_without_name() -> None:
    data = {"actions": ["allocate"], "configurations": [{"arguments": {}}]}
    _raises(data, "configurations[0].name", "no action name")


def test_configuration_unknown_key() -> None:
    data = {"actions": ["allocate"], "configurations": [{"name": "allocate", "args": {}}]}
    _raises(data, "configurations[0].args")


def test_configuration_listed_twice() -> None:
    data = {
        "actions": ["allocate"],
        "configurations": [{"name": "allocate"}, {"name": "allocate", "arguments": {}}],
    }
    _raises(data, "configurations[1].name", "twice")


def test_configuration_arguments_not_mapping() -> None:
    data = {"actions": ["allocate"], "configurations": {"allocate": [1]}}
    _raises(data, "configurations.allocate", "mapping")


def test_yaml_syntax_error() -> None:
    with pytest.raises(ConfigError, match=r"yaml: .*line 2") as info:
        Config.from_volcano_yaml('actions: "allocate"\ntiers: ]\n')
    assert info.value.field == "yaml"


def test_yaml_duplicate_key() -> None:
    text = "actions: allocate\ntiers:\n- plugins:\n  - name: gang\n    name: drf\n"
    with pytest.raises(ConfigError, match=r"duplicate key 'name' at line 5"):
        Config.from_volcano_yaml(text)


def test_yaml_empty() -> None:
    with pytest.raises(ConfigError, match="empty"):
        Config.from_volcano_yaml("# nothing\n")


def test_yaml_not_mapping() -> None:
    with pytest.raises(ConfigError, match="expected a configuration mapping, got list"):
        Config.from_volcano_yaml("- allocate\n")


def test_yaml_metrics_not_mapping() -> None:
    with pytest.raises(ConfigError, match="metrics"):
        Config.from_volcano_yaml(VOLCANO_DEFAULT + "metrics: 5\n")


# -- direct construction ---------------------------------------------------------------------


def test_config_requires_actions() -> None:
    with pytest.raises(ConfigError, match="no actions"):
        Config(actions=())
    with pytest.raises(ConfigError, match="actions"):
        Config(actions="allocate")  # type: ignore[arg-type]


def test_plugin_option_validates() -> None:
    with pytest.raises(ConfigError, match="empty"):
        PluginOption(name="")
    with pytest.raises(ConfigError, match=r"plugin 'gang': disabled: unknown switch 'nope'"):
        PluginOption(name="gang", disabled=frozenset({"nope"}))
    with pytest.raises(ConfigError, match=r"plugin 'gang': arguments\.x: .*no value"):
        PluginOption(name="gang", arguments={"x": None})
    with pytest.raises(ConfigError, match="hierarchy"):
        PluginOption(name="drf", hierarchy=1)  # type: ignore[arg-type]


def test_tier_validates() -> None:
    with pytest.raises(ConfigError, match=r"plugins\[0\]"):
        Tier(plugins=("gang",))  # type: ignore[arg-type]


def test_arguments_are_frozen() -> None:
    source: dict[str, Any] = {"k": [1, 2], "m": {"b": 1, "a": 2}}
    plugin = PluginOption(name="binpack", arguments=source)
    source["k"].append(3)
    assert plugin.arguments["k"] == (1, 2)
    assert list(plugin.arguments["m"]) == ["a", "b"]  # type: ignore[call-overload]
    assert isinstance(plugin.arguments, FrozenArgs)
    with pytest.raises(AttributeError):
        plugin.arguments._data = {}
    with pytest.raises(TypeError):
        plugin.arguments["k"] = 1  # type: ignore[index]
    assert hash(plugin) == hash(
        PluginOption(name="binpack", arguments={"k": [1, 2], "m": {"a": 2, "b": 1}})
    )


# -- argument helpers ------------------------------------------------------------------------

_ARGS = {
    "i": 10,
    "s_int": " 10 ",
    "f": 2.5,
    "s_float": "2.5",
    "whole": 4.0,
    "t": True,
    "s_true": "true",
    "s_f": "F",
    "s_one": "1",
    "name": "nvidia.com/gpu",
    "word": "ten",
    "inf": "inf",
}


@pytest.mark.parametrize(
    ("key", "expected"),
    [("i", 10.0), ("s_int", 10.0), ("f", 2.5), ("s_float", 2.5), ("absent", 7.0)],
)
def test_arg_float(key: str, expected: float) -> None:
    assert arg_float(_ARGS, key, 7.0, plugin="binpack") == expected


@pytest.mark.parametrize(("key", "expected"), [("i", 10), ("s_int", 10), ("whole", 4), ("x", 3)])
def test_arg_int(key: str, expected: int) -> None:
    assert arg_int(_ARGS, key, 3, plugin="binpack") == expected


@pytest.mark.parametrize(
    ("key", "expected"),
    [("t", True), ("s_true", True), ("s_f", False), ("s_one", True), ("x", False)],
)
def test_arg_bool(key: str, expected: bool) -> None:
    assert arg_bool(_ARGS, key, False, plugin="gang") is expected


def test_arg_str() -> None:
    assert arg_str(_ARGS, "name", "", plugin="binpack") == "nvidia.com/gpu"
    assert arg_str(_ARGS, "absent", "dflt", plugin="binpack") == "dflt"


@pytest.mark.parametrize(
    ("helper", "key"),
    [
        (arg_float, "word"),
        (arg_float, "t"),
        (arg_float, "inf"),
        (arg_int, "f"),
        (arg_int, "s_float"),
        (arg_int, "t"),
        (arg_bool, "i"),
        (arg_bool, "word"),
        (arg_str, "i"),
    ],
)
def test_arg_helpers_reject_bad_values(helper: Any, key: str) -> None:
    with pytest.raises(ConfigError) as info:
        helper(_ARGS, key, None, plugin="binpack")
    err = info.value
    assert (err.kind, err.name, err.field) == ("plugin", "binpack", f"arguments.{key}")
    assert str(err).startswith(f"plugin 'binpack': arguments.{key}: expected")


def test_arg_helper_names_action() -> None:
    with pytest.raises(ConfigError, match=r"^action 'preempt': arguments\.n: expected an integer"):
        arg_int({"n": "many"}, "n", 0, plugin="preempt", kind="action")


def test_yaml_alias_expansion_bomb_is_a_config_error() -> None:
    # Nine levels of nine aliases expand to 9**9 values: refused, not hung on.
    lines = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    for i in range(1, 10):
        refs = ", ".join([f"*a{i - 1}"] * 9)
        lines.append(f"a{i}: &a{i} [{refs}]")
    args = "\n".join("      " + line for line in lines)
    text = f"""actions: "allocate"
tiers:
- plugins:
  - name: gang
    arguments:
{args}
"""
    with pytest.raises(ConfigError, match="alias"):
        Config.from_volcano_yaml(text)
