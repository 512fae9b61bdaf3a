"""Plugin options and tiers, and the readers of a configuration's plain-data sections."""

from __future__ import annotations

import warnings
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from gangsched.config.args import (
    _EMPTY_ARGS,
    FrozenArgs,
    _check_name,
    _err,
    _freeze_args,
    _known_keys,
    _suggest,
    _thaw,
)
from gangsched.config.names import (
    _GATE,
    _HIERARCHY_KEY,
    _PLUGIN_KEYS,
    EXTENSION_POINTS,
    SWITCHES,
    UNIMPLEMENTED_ACTIONS,
    UNIMPLEMENTED_PLUGINS,
    VOLCANO_FLAGS,
)
from gangsched.errors import ConfigError, UnimplementedActionWarning, UnimplementedPluginWarning


@dataclass(frozen=True, slots=True, kw_only=True)
class PluginOption:
    """One plugin in a tier: its name, arguments, switched-off points and hierarchy option.

    Parameters
    ----------
    name:
        The plugin name (``"binpack"``).
    arguments:
        Arguments as written (``{"binpack.weight": 10}``); stored sorted and frozen. Read them
        with :func:`arg_float`, :func:`arg_int`, :func:`arg_bool` and :func:`arg_str`.
    disabled:
        Switch names (see :data:`SWITCHES`) turned off for this plugin; everything else is on.
    hierarchy:
        Volcano's ``enableHierarchy``: hierarchical sharing for ``drf`` and ``capacity``.
    """

    name: str
    arguments: Mapping[str, object] = field(default=_EMPTY_ARGS)
    disabled: frozenset[str] = frozenset()
    hierarchy: bool = False

    def __post_init__(self) -> None:
        name = _check_name(self.name, "name", "plugin")
        object.__setattr__(self, "name", name)
        try:
            object.__setattr__(self, "arguments", _freeze_args(self.arguments, "arguments"))
        except ConfigError as exc:
            raise ConfigError(exc.detail, kind="plugin", name=name, field=exc.field) from None
        if not isinstance(self.disabled, frozenset | set | tuple | list):
            raise ConfigError(
                f"expected a set of switch names, got {type(self.disabled).__name__}",
                kind="plugin",
                name=name,
                field="disabled",
            )
        for point in self.disabled:
            if point not in SWITCHES:
                raise ConfigError(
                    f"unknown switch {point!r}{_suggest(str(point), SWITCHES)}",
                    kind="plugin",
                    name=name,
                    field="disabled",
                )
        object.__setattr__(self, "disabled", frozenset(self.disabled))
        if not isinstance(self.hierarchy, bool):
            raise ConfigError(
                f"expected a boolean, got {type(self.hierarchy).__name__}",
                kind="plugin",
                name=name,
                field="hierarchy",
            )

    def enabled(self, point: str) -> bool:
        """Whether this plugin's ``point`` hook takes part (points without a switch: always)."""
        try:
            gate = _GATE[point]
        except KeyError:
            raise ConfigError(
                f"unknown extension point{_suggest(point, EXTENSION_POINTS)}",
                kind="extension point",
                name=point,
            ) from None
        return gate is None or gate not in self.disabled

    @property
    def switches(self) -> Mapping[str, bool]:
        """Every switch name → whether it is on, in sorted order."""
        return FrozenArgs({s: s not in self.disabled for s in SWITCHES})

    def to_dict(self) -> dict[str, object]:
        """Canonical interchange form: only non-default fields, keys in a fixed order."""
        out: dict[str, object] = {"name": self.name}
        if self.arguments:
            out["arguments"] = _thaw(self.arguments)
        if self.disabled:
            out["switches"] = {s: False for s in sorted(self.disabled)}
        if self.hierarchy:
            out["hierarchy"] = True
        return out

    @classmethod
    def from_dict(cls, d: object) -> PluginOption:
        """Build from ``{"name": ..., "arguments": ..., "switches": ..., <Volcano flags>}``.

        A bare string is shorthand for ``{"name": <string>}``. Errors name paths relative to
        the entry (``arguments.binpack.weight``).
        """
        if isinstance(d, str):
            return cls(name=_check_name(d, "name", "plugin"))
        d = _known_keys(d, _PLUGIN_KEYS, entry="plugin mapping or name", key="plugin option")
        if "name" not in d:
            raise _err("name", "plugin has no name")
        name = _check_name(d["name"], "name", "plugin")
        given: dict[str, tuple[bool, str]] = {}

        def put(switch: str, value: object, path: str) -> None:
            if not isinstance(value, bool):
                raise _err(path, f"expected a boolean (true/false), got {value!r}")
            if switch in given:
                raise _err(path, f"switch {switch!r} is also set by {given[switch][1]}")
            given[switch] = (value, path)

        for flag, switch in VOLCANO_FLAGS.items():
            if flag in d:
                put(switch, d[flag], flag)
        raw_switches = d.get("switches")
        if raw_switches is not None:
            if not isinstance(raw_switches, Mapping):
                raise _err(
                    "switches",
                    f"expected a mapping of switch name to boolean, got "
                    f"{type(raw_switches).__name__}",
                )
            for key, value in raw_switches.items():
                if key not in SWITCHES:
                    raise _err(f"switches.{key}", f"unknown switch{_suggest(str(key), SWITCHES)}")
                put(key, value, f"switches.{key}")
        if "hierarchy" in d and _HIERARCHY_KEY in d:
            raise _err(_HIERARCHY_KEY, "hierarchy is given twice (hierarchy, enableHierarchy)")
        hier_key = _HIERARCHY_KEY if _HIERARCHY_KEY in d else "hierarchy"
        hierarchy = d.get(hier_key, False)
        if hierarchy is None:
            hierarchy = False
        if not isinstance(hierarchy, bool):
            raise _err(hier_key, f"expected a boolean (true/false), got {hierarchy!r}")
        return cls(
            name=name,
            arguments=_freeze_args(d.get("arguments"), "arguments"),
            disabled=frozenset(s for s, (on, _) in given.items() if not on),
            hierarchy=hierarchy,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Tier:
    """An ordered group of plugins; tiers are consulted in order by the tier combiners."""

    plugins: tuple[PluginOption, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.plugins, tuple | list):
            raise _err(
                "plugins", f"expected a sequence of plugins, got {type(self.plugins).__name__}"
            )
        for j, plugin in enumerate(self.plugins):
            if not isinstance(plugin, PluginOption):
                raise _err(f"plugins[{j}]", f"expected a PluginOption, got {type(plugin).__name__}")
        object.__setattr__(self, "plugins", tuple(self.plugins))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.plugins)


# -- parsing helpers --------------------------------------------------------------------------


def _parse_actions(value: object, limit: int) -> tuple[str, ...]:
    if isinstance(value, str):
        parts: Sequence[object] = value.split(",", limit)  # at most limit + 1 parts
    elif isinstance(value, list | tuple):
        parts = value
    else:
        raise _err(
            "actions",
            f"expected a list of action names or a comma-separated string, "
            f"got {type(value).__name__}",
        )
    if len(parts) > limit:
        raise _err(
            "actions",
            f"more than {limit} entries in the action list (Limits.max_actions); every entry "
            f"runs once per cycle",
        )
    names = tuple(_check_name(p, f"actions[{i}]", "action") for i, p in enumerate(parts))
    if not names:
        raise _err("actions", "no actions configured")
    return names


def _parse_tiers(value: object) -> tuple[Tier, ...]:
    if value is None:
        return ()
    if not isinstance(value, list | tuple):
        raise _err("tiers", f"expected a list of tiers, got {type(value).__name__}")
    tiers: list[Tier] = []
    for i, raw in enumerate(value):
        path = f"tiers[{i}]"
        if isinstance(raw, Mapping):
            for key in raw:
                if key != "plugins":
                    raise _err(f"{path}.{key}", "unknown tier key (only 'plugins')")
            raw = raw.get("plugins")
            if raw is None:
                raw = []
        if not isinstance(raw, list | tuple):
            raise _err(f"{path}.plugins", f"expected a list of plugins, got {type(raw).__name__}")
        options: list[PluginOption] = []
        for j, entry in enumerate(raw):
            where = f"{path}.plugins[{j}]"
            try:
                options.append(PluginOption.from_dict(entry))
            except ConfigError as exc:
                named = entry.get("name") if isinstance(entry, Mapping) else entry
                raise ConfigError(
                    exc.detail,
                    kind="plugin" if isinstance(named, str) and named.strip() else "config",
                    name=named.strip() if isinstance(named, str) else "",
                    field=f"{where}.{exc.field}" if exc.field else where,
                ) from None
        tiers.append(Tier(plugins=tuple(options)))
    return tuple(tiers)


def _skip_unimplemented_actions(
    actions: tuple[str, ...], known: Collection[str], strict: bool
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Leave out the actions of :data:`UNIMPLEMENTED_ACTIONS` that ``known`` lacks: warn once
    per action (or raise when ``strict``); at least one action must remain."""
    kept: list[str] = []
    ignored: list[str] = []
    for i, name in enumerate(actions):
        lost = UNIMPLEMENTED_ACTIONS.get(name)
        if lost is None or name in known:
            kept.append(name)
            continue
        if strict:
            raise ConfigError(
                f"not implemented by gangsched ({lost}); strict configurations refuse it",
                kind="action",
                name=name,
                field=f"actions[{i}]",
            )
        if name not in ignored:
            ignored.append(name)
            warnings.warn(UnimplementedActionWarning(name, lost), stacklevel=4)
    if not kept:
        raise _err(
            "actions",
            f"no actions configured besides ones gangsched does not implement "
            f"({', '.join(ignored)})",
        )
    return tuple(kept), tuple(ignored)


def _skip_unimplemented(
    tiers: tuple[Tier, ...], known: Collection[str], strict: bool
) -> tuple[tuple[Tier, ...], tuple[str, ...]]:
    """Leave out the plugins of :data:`UNIMPLEMENTED_PLUGINS` that ``known`` lacks: warn once
    per plugin (or raise when ``strict``), drop a tier only they filled."""
    ignored: list[str] = []
    out: list[Tier] = []
    for i, tier in enumerate(tiers):
        kept: list[PluginOption] = []
        for j, plugin in enumerate(tier.plugins):
            lost = UNIMPLEMENTED_PLUGINS.get(plugin.name)
            if lost is None or plugin.name in known:
                kept.append(plugin)
                continue
            if strict:
                raise ConfigError(
                    f"not implemented by gangsched ({lost}); strict configurations refuse it",
                    kind="plugin",
                    name=plugin.name,
                    field=f"tiers[{i}].plugins[{j}].name",
                )
            if plugin.name not in ignored:
                ignored.append(plugin.name)
                warnings.warn(UnimplementedPluginWarning(plugin.name, lost), stacklevel=4)
        if kept or not tier.plugins:
            out.append(Tier(plugins=tuple(kept)))
    return tuple(out), tuple(ignored)


def _parse_configurations(value: object) -> dict[str, FrozenArgs[object]]:
    if value is None:
        return {}
    out: dict[str, FrozenArgs[object]] = {}
    if isinstance(value, Mapping):
        for name, args in value.items():
            key = _check_name(name, "configurations", "action")
            out[key] = _freeze_args(args, f"configurations.{key}")
        return out
    if not isinstance(value, list | tuple):
        raise _err(
            "configurations",
            f"expected a mapping or a list of {{name, arguments}}, got {type(value).__name__}",
        )
    for i, entry in enumerate(value):
        path = f"configurations[{i}]"
        if not isinstance(entry, Mapping):
            raise _err(
                path, f"expected a mapping with name and arguments, got {type(entry).__name__}"
            )
        for key in entry:
            if key not in ("name", "arguments"):
                raise _err(f"{path}.{key}", "unknown key (only 'name' and 'arguments')")
        if "name" not in entry:
            raise _err(f"{path}.name", "configuration has no action name")
        name = _check_name(entry["name"], f"{path}.name", "action")
        if name in out:
            raise _err(f"{path}.name", f"action {name!r} configured twice")
        out[name] = _freeze_args(entry.get("arguments"), f"{path}.arguments")
    return out
