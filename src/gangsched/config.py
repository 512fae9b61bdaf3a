"""The scheduler configuration: which actions run, which plugins sit in which tier.

Theory of operation
-------------------
A :class:`Config` is the validated, immutable form of Volcano's ``volcano-scheduler.conf``:

* ``actions`` — action names run in order each cycle (repeats are allowed, as in Volcano);
* ``tiers`` — ordered :class:`Tier` records, each an ordered tuple of :class:`PluginOption`;
* ``configurations`` — per-action arguments (``{"allocate": {...}}``).

A :class:`PluginOption` carries the plugin name, its arguments exactly as written (strings,
numbers, booleans; nested lists and mappings are frozen), the set of extension points switched
*off* for that plugin, and the ``hierarchy`` option read by ``drf`` and ``capacity``.

Every extension point is switched on unless switched off. This matches Volcano loading a
configuration file, where each unset ``enableXxx`` flag defaults to true. The flag spelling
Volcano uses maps onto gangsched's snake_case switch names through :data:`VOLCANO_FLAGS`; one
quirk is kept on purpose: Volcano gates both ``JobEnqueueable`` and ``JobEnqueued`` on the
flag ``enableJobEnqueued``, so here the ``job_enqueueable`` switch also governs
``job_enqueued``.

Names are checked in one place, :func:`check_names`. The constructors ``from_dict`` and
``from_volcano_yaml`` call it with :data:`BUILTIN_ACTIONS` and :data:`BUILTIN_PLUGINS` unless
the caller passes its own collections (a registry holding user plugins passes its names).
Building the dataclasses directly checks structure (types, duplicates, conflicts) but not
names, so a registry can validate against what it actually holds.

Every error is a :class:`~gangsched.errors.ConfigError` whose ``field`` is the path of the
offending value, ``tiers[1].plugins[2].name`` for instance.

Volcano plugins gangsched knows of but does not implement (:data:`UNIMPLEMENTED_PLUGINS`:
``deviceshare``, ``numaaware``, ``task-topology``, ``tdm``, ``pdb``, ``usage``,
``resourcequota``, ``extender``, ...) do not make a production configuration unusable: the
constructors leave them out, warn once per plugin with an
:class:`~gangsched.errors.UnimplementedPluginWarning` that says what is lost, and list them in
:attr:`Config.ignored_plugins`. ``strict=True`` (or ``strict: true`` at the top of the
configuration) raises a :class:`~gangsched.errors.ConfigError` instead. A plugin of that name
that the caller's registry does provide is kept like any other.
"""

from __future__ import annotations

import difflib
import math
import warnings
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Generic, TypeVar

import yaml

from .errors import ConfigError, UnimplementedPluginWarning
from .limits import DEFAULT_LIMITS, Limits

__all__ = [
    "BUILTIN_ACTIONS",
    "BUILTIN_PLUGINS",
    "EXTENSION_POINTS",
    "SWITCHES",
    "UNIMPLEMENTED_PLUGINS",
    "VOLCANO_FLAGS",
    "Config",
    "FrozenArgs",
    "PluginOption",
    "Tier",
    "arg_bool",
    "arg_float",
    "arg_int",
    "arg_str",
    "check_arguments",
    "check_names",
]

BUILTIN_ACTIONS: tuple[str, ...] = (
    "enqueue",
    "allocate",
    "backfill",
    "preempt",
    "reclaim",
    "consolidate",
)

BUILTIN_PLUGINS: tuple[str, ...] = (
    "priority",
    "gang",
    "conformance",
    "drf",
    "proportion",
    "capacity",
    "predicates",
    "nodeorder",
    "binpack",
    "overcommit",
    "network-topology-aware",
    "sla",
    "random",
    "dotprod",
    "gpu-clustering",
    "gpu-packing",
    "bestfit",
    "fgd",
)

UNIMPLEMENTED_PLUGINS: Mapping[str, str] = MappingProxyType(
    {
        "deviceshare": "gangsched does this job another way: GPUs are per-device capacity "
        "(Node.gpus, whole devices or milli-GPU shares) placed device by device by every "
        "action; what is lost is vGPU memory isolation (HAMi), MIG and other device kinds",
        "numaaware": "NUMA and CPU-manager topology policies are not checked; CPU and memory "
        "fit per node only",
        "task-topology": "affinity and anti-affinity buckets between a job's tasks are not "
        "honoured; to keep a gang together use its network topology (hypernode tiers)",
        "tdm": "time-division multiplexing of revocable nodes is not modelled; revocable-zone "
        "nodes are used as ordinary nodes at all times",
        "pdb": "gangsched does this job another way: PodDisruptionBudgets (policy/v1 manifests, "
        "the snapshot's disruption budgets) bind every evicting action without a plugin; "
        "preempt and reclaim prefer victims that break none",
        "usage": "nodes' measured usage is not used for filtering or scoring; requests only",
        "resourcequota": "namespaces' ResourceQuotas are not checked at enqueue; queue "
        "capability and capacity are the only limits",
        "extender": "HTTP scheduler extenders are not called (gangsched reads no sockets); "
        "their filters and scores are lost",
        "cdp": "cooldown protection of preemptable pods is not applied; they may be evicted "
        "as soon as they start",
        "rescheduling": "the descheduling of running pods by node usage is not done",
        "nodegroup": "queue-to-node-group affinity is not honoured; every queue may use every "
        "node (use node selectors or taints on the tasks instead)",
        "resource-strategy-fit": "per-resource scoring strategies are not applied; use "
        "binpack or nodeorder weights",
    }
)
"""Volcano plugins gangsched knows of but does not implement → what is lost without them (or
how gangsched does their job another way). A configuration naming one is accepted with an
:class:`~gangsched.errors.UnimplementedPluginWarning` unless ``strict``."""

EXTENSION_POINTS: tuple[str, ...] = (
    "job_order",
    "queue_order",
    "task_order",
    "subjob_order",
    "cluster_order",
    "job_valid",
    "job_enqueueable",
    "job_enqueued",
    "job_ready",
    "subjob_ready",
    "job_pipelined",
    "subjob_pipelined",
    "job_starving",
    "overused",
    "allocatable",
    "preemptive",
    "preemptable",
    "reclaimable",
    "victim_order",
    "predicate",
    "node_score",
    "best_node",
    "hypernode_score",
    "hypernode_gradient",
    "gpu_choice",
    "target_job",
    "reserved_nodes",
    "on_allocate",
    "on_deallocate",
)
"""Every extension point a plugin may implement, in snake_case."""

VOLCANO_FLAGS: Mapping[str, str] = MappingProxyType(
    {
        "enableJobOrder": "job_order",
        "enableQueueOrder": "queue_order",
        "enableTaskOrder": "task_order",
        "enabledSubJobOrder": "subjob_order",
        "enabledClusterOrder": "cluster_order",
        "enableJobEnqueued": "job_enqueueable",
        "enableJobReady": "job_ready",
        "enabledSubJobReady": "subjob_ready",
        "enableJobPipelined": "job_pipelined",
        "enabledSubJobPipelined": "subjob_pipelined",
        "enableJobStarving": "job_starving",
        "enabledOverused": "overused",
        "enabledAllocatable": "allocatable",
        "enablePreemptive": "preemptive",
        "enablePreemptable": "preemptable",
        "enableReclaimable": "reclaimable",
        "enabledVictim": "victim_order",
        "enablePredicate": "predicate",
        "enableNodeOrder": "node_score",
        "enableBestNode": "best_node",
        "enabledHyperNodeOrder": "hypernode_score",
        "enabledHyperNodeGradient": "hypernode_gradient",
        "enableTargetJob": "target_job",
        "enableReservedNodes": "reserved_nodes",
    }
)
"""Volcano's per-plugin YAML flag → gangsched switch name (each defaults to on)."""

SWITCHES: tuple[str, ...] = tuple(sorted(set(VOLCANO_FLAGS.values())))
"""The switch names accepted in ``PluginOption.disabled`` and ``{"switches": {...}}``."""

_FLAG_OF_SWITCH: Mapping[str, str] = {point: flag for flag, point in VOLCANO_FLAGS.items()}

# Extension point → the switch that gates it; None: the point cannot be switched off.
_GATE: Mapping[str, str | None] = {
    point: ("job_enqueueable" if point == "job_enqueued" else point if point in SWITCHES else None)
    for point in EXTENSION_POINTS
}

_HIERARCHY_KEY = "enableHierarchy"
_PLUGIN_KEYS = ("name", "arguments", "switches", "hierarchy", _HIERARCHY_KEY, *VOLCANO_FLAGS)
_TOP_KEYS = ("actions", "tiers", "configurations", "strict")

V = TypeVar("V")


def _suggest(word: str, known: Collection[str]) -> str:
    close = difflib.get_close_matches(word, sorted(known), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _err(path: str, detail: str) -> ConfigError:
    return ConfigError(detail, kind="config", field=path)


class FrozenArgs(Mapping[str, V], Generic[V]):
    """An immutable, hashable mapping with string keys kept in sorted order.

    Used for plugin and action arguments and for ``Config.configurations``. Two instances are
    equal when their items are equal; iteration order is always the sorted key order, so
    output built from it is byte-for-byte stable.
    """

    __slots__ = ("_data", "_hash")

    _data: dict[str, V]
    _hash: int | None

    def __init__(self, data: Mapping[str, V] | None = None) -> None:
        items = dict(sorted((data or {}).items()))
        object.__setattr__(self, "_data", items)
        object.__setattr__(self, "_hash", None)

    def __getitem__(self, key: str) -> V:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __hash__(self) -> int:
        cached = self._hash
        if cached is None:
            cached = hash(tuple(self._data.items()))
            object.__setattr__(self, "_hash", cached)
        return cached

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return self._data == dict(other)
        return NotImplemented

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("FrozenArgs is immutable")

    def __repr__(self) -> str:
        return f"FrozenArgs({self._data!r})"


_EMPTY_ARGS: FrozenArgs[object] = FrozenArgs()


_MAX_NESTING = 32  # argument values nested deeper than this (or containing themselves) fail
#: Argument values (scalars, list items, map entries) one plugin or action may hold. YAML
#: aliases can make a small text expand exponentially ("billion laughs"); the count stops it.
_MAX_VALUES = 100_000
#: Integer argument values must fit a signed 64-bit integer, as Volcano's Go int does.
_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1
#: Characters in an integer's text (YAML, or a string argument): a 64-bit value needs at most
#: 64 binary digits and a prefix; anything longer is out of range anyway, and Python refuses to
#: convert more than 4,300 decimal digits.
_MAX_INT_TEXT = 100
#: Longest text read as a float argument (longer is refused before parsing).
_MAX_FLOAT_TEXT = 100


def _show(value: object) -> str:
    """``repr(value)`` cut to 60 characters, for messages (a 5,000-digit value stays short)."""
    if isinstance(value, int) and not isinstance(value, bool) and not _INT_MIN <= value <= _INT_MAX:
        return "an integer beyond the 64-bit range"
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


def _freeze_value(
    value: object, path: str, depth: int = 0, seen: list[int] | None = None
) -> object:
    """Validate one argument value and make it immutable (lists → tuples, maps → FrozenArgs)."""
    if depth > _MAX_NESTING:
        raise _err(path, f"argument nested more than {_MAX_NESTING} levels deep")
    seen = [0] if seen is None else seen
    seen[0] += 1
    if seen[0] > _MAX_VALUES:
        raise _err(path, f"arguments hold more than {_MAX_VALUES} values (YAML alias expansion?)")
    if isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        if not _INT_MIN <= value <= _INT_MAX:
            raise _err(path, "integer argument out of the 64-bit range (-2**63 to 2**63-1)")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _err(path, f"argument value must be finite, got {value!r}")
        return value
    if isinstance(value, Mapping):
        return _freeze_args(value, path, depth + 1, seen)
    if isinstance(value, list | tuple):
        return tuple(_freeze_value(v, f"{path}[{i}]", depth + 1, seen) for i, v in enumerate(value))
    if value is None:
        raise _err(path, "argument has no value")
    raise _err(
        path,
        f"argument value must be a string, number, boolean, list or mapping, "
        f"got {type(value).__name__}",
    )


def _freeze_args(
    value: object, path: str, depth: int = 0, seen: list[int] | None = None
) -> FrozenArgs[object]:
    if value is None:
        return _EMPTY_ARGS
    if not isinstance(value, Mapping):
        raise _err(path, f"expected a mapping of arguments, got {type(value).__name__}")
    out: dict[str, object] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not key:
            raise _err(path, f"argument name must be a non-empty string, got {key!r}")
        out[key] = _freeze_value(item, f"{path}.{key}", depth, seen)
    return FrozenArgs(out)


def _thaw(value: object) -> object:
    if isinstance(value, FrozenArgs):
        return {k: _thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_thaw(v) for v in value]
    return value


def _check_name(value: object, path: str, what: str) -> str:
    if not isinstance(value, str):
        raise _err(path, f"{what} name must be a string, got {type(value).__name__}")
    name = value.strip()
    if not name:
        raise _err(path, f"{what} name is empty")
    return name


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
        if not isinstance(d, Mapping):
            raise _err("", f"expected a plugin mapping or name, got {type(d).__name__}")
        for key in d:
            if key not in _PLUGIN_KEYS:
                raise _err(str(key), f"unknown plugin option{_suggest(str(key), _PLUGIN_KEYS)}")
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


@dataclass(frozen=True, slots=True, kw_only=True)
class Config:
    """A validated scheduler configuration (see the module docstring).

    Construction checks structure: at least one action, no plugin listed twice, no ``drf``
    with hierarchy next to ``proportion``. Names are checked by :func:`check_names`.

    ``ignored_plugins`` names the plugins of :data:`UNIMPLEMENTED_PLUGINS` that ``from_dict``
    / ``from_volcano_yaml`` left out, in the order the input listed them. It is a note about
    where the configuration came from: it takes no part in comparison, hashing or ``to_dict``
    (two configurations that schedule alike are equal).
    """

    actions: tuple[str, ...]
    tiers: tuple[Tier, ...] = ()
    configurations: Mapping[str, Mapping[str, object]] = field(default=FrozenArgs())
    ignored_plugins: tuple[str, ...] = field(default=(), compare=False, hash=False)
    _action_set: frozenset[str] = field(
        init=False, repr=False, compare=False, hash=False, default=frozenset()
    )

    def __post_init__(self) -> None:
        if isinstance(self.actions, str) or not isinstance(self.actions, Sequence):
            raise _err(
                "actions", f"expected a sequence of action names, got {type(self.actions).__name__}"
            )
        actions = tuple(
            _check_name(a, f"actions[{i}]", "action") for i, a in enumerate(self.actions)
        )
        if not actions:
            raise _err("actions", "no actions configured")
        object.__setattr__(self, "actions", actions)
        object.__setattr__(self, "_action_set", frozenset(actions))
        if not isinstance(self.tiers, tuple | list):
            raise _err("tiers", f"expected a sequence of tiers, got {type(self.tiers).__name__}")
        seen: dict[str, str] = {}
        for i, tier in enumerate(self.tiers):
            if not isinstance(tier, Tier):
                raise _err(f"tiers[{i}]", f"expected a Tier, got {type(tier).__name__}")
            for j, plugin in enumerate(tier.plugins):
                path = f"tiers[{i}].plugins[{j}]"
                if plugin.name in seen:
                    raise _err(
                        f"{path}.name",
                        f"plugin {plugin.name!r} is listed twice (first at {seen[plugin.name]})",
                    )
                seen[plugin.name] = path
        object.__setattr__(self, "tiers", tuple(self.tiers))
        drf = self.plugin("drf")
        if drf is not None and drf.hierarchy and "proportion" in seen:
            raise _err(
                f"{seen['drf']}.hierarchy",
                f"drf with hierarchy conflicts with proportion (at {seen['proportion']})",
            )
        confs = self.configurations
        if not isinstance(confs, Mapping):
            raise _err(
                "configurations",
                f"expected a mapping of action name to arguments, got {type(confs).__name__}",
            )
        frozen: dict[str, FrozenArgs[object]] = {}
        for name, args in confs.items():
            key = _check_name(name, "configurations", "action")
            if key in frozen:
                raise _err(f"configurations.{key}", "action configured twice")
            frozen[key] = _freeze_args(args, f"configurations.{key}")
        object.__setattr__(self, "configurations", FrozenArgs(frozen))
        if isinstance(self.ignored_plugins, str) or not isinstance(self.ignored_plugins, Sequence):
            raise _err("ignored_plugins", "expected a sequence of plugin names")
        object.__setattr__(
            self,
            "ignored_plugins",
            tuple(
                _check_name(n, f"ignored_plugins[{i}]", "plugin")
                for i, n in enumerate(self.ignored_plugins)
            ),
        )

    # -- queries ---------------------------------------------------------------------------

    def plugin(self, name: str) -> PluginOption | None:
        """The option of plugin ``name``, or None when it is not configured."""
        for tier in self.tiers:
            for plugin in tier.plugins:
                if plugin.name == name:
                    return plugin
        return None

    @property
    def plugin_names(self) -> tuple[str, ...]:
        """Every configured plugin name, tier by tier, in order."""
        return tuple(name for tier in self.tiers for name in tier.names)

    def has_action(self, name: str) -> bool:
        """Whether action ``name`` is in the action list (a set lookup, however long the list)."""
        return name in self._action_set

    def action_arguments(self, name: str) -> Mapping[str, object]:
        """Arguments configured for action ``name`` (empty when none)."""
        return self.configurations.get(name, _EMPTY_ARGS)

    # -- construction ----------------------------------------------------------------------

    @classmethod
    def default(cls) -> Config:
        """Volcano's built-in configuration (used when no configuration file is given)."""
        return cls(
            actions=("enqueue", "allocate", "backfill"),
            tiers=(
                Tier(
                    plugins=tuple(PluginOption(name=n) for n in ("priority", "gang", "conformance"))
                ),
                Tier(
                    plugins=tuple(
                        PluginOption(name=n)
                        for n in ("overcommit", "drf", "predicates", "proportion", "nodeorder")
                    )
                ),
            ),
        )

    @classmethod
    def from_dict(
        cls,
        d: object,
        *,
        plugins: Collection[str] | None = None,
        actions: Collection[str] | None = None,
        limits: Limits = DEFAULT_LIMITS,
        strict: bool = False,
    ) -> Config:
        """Build and validate a configuration from plain data.

        ``actions`` is a list of names or Volcano's comma-separated string. ``tiers`` is a list
        whose items are plugin lists or ``{"plugins": [...]}`` mappings. ``configurations`` is
        ``{action: arguments}`` or Volcano's ``[{"name": action, "arguments": {...}}]``.
        Plugin and action names are checked against ``plugins`` / ``actions`` (default: the
        built-in names). The action list holds at most ``limits.max_actions`` entries.

        Plugins of :data:`UNIMPLEMENTED_PLUGINS` that ``plugins`` does not hold are left out
        with an :class:`~gangsched.errors.UnimplementedPluginWarning` each and listed in
        :attr:`ignored_plugins`; with ``strict`` (the argument, or ``strict: true`` in ``d``)
        they are a :class:`ConfigError` naming the plugin, its place and what it would lose.
        """
        if not isinstance(d, Mapping):
            raise _err("", f"expected a configuration mapping, got {type(d).__name__}")
        for key in d:
            if key not in _TOP_KEYS:
                raise _err(str(key), f"unknown configuration key{_suggest(str(key), _TOP_KEYS)}")
        if "actions" not in d:
            raise _err("actions", "no actions configured")
        if d.get("strict") is not None and not isinstance(d.get("strict"), bool):
            raise _err("strict", f"expected true or false, got {_show(d.get('strict'))}")
        strict = strict or d.get("strict") is True
        known = BUILTIN_PLUGINS if plugins is None else plugins
        tiers, ignored = _skip_unimplemented(_parse_tiers(d.get("tiers")), known, strict)
        config = cls(
            actions=_parse_actions(d["actions"], limits.max_actions),
            tiers=tiers,
            configurations=_parse_configurations(d.get("configurations")),
            ignored_plugins=ignored,
        )
        check_names(
            config,
            plugins=known,
            actions=BUILTIN_ACTIONS if actions is None else actions,
        )
        return config

    @classmethod
    def from_volcano_yaml(
        cls,
        text: str,
        *,
        plugins: Collection[str] | None = None,
        actions: Collection[str] | None = None,
        limits: Limits = DEFAULT_LIMITS,
        strict: bool = False,
    ) -> Config:
        """Parse the text of Volcano's ``volcano-scheduler.conf``.

        The ``metrics`` section Volcano also accepts is read and ignored. YAML syntax errors
        and repeated keys raise :class:`ConfigError` with the line and column. Plugins
        gangsched does not implement are handled as in :meth:`from_dict` (``strict``).
        """
        if not isinstance(text, str | bytes):
            raise _err("yaml", f"expected YAML text, got {type(text).__name__}")
        try:
            data = yaml.load(text, Loader=_StrictLoader)
        except yaml.YAMLError as exc:
            raise _err("yaml", f"not valid YAML: {_yaml_problem(exc)}") from None
        except RecursionError:
            raise _err("yaml", "not valid YAML: nested too deeply") from None
        if data is None:
            raise _err("", "the configuration is empty")
        if isinstance(data, Mapping) and "metrics" in data:
            if data["metrics"] is not None and not isinstance(data["metrics"], Mapping):
                raise _err("metrics", "expected a mapping")
            data = {k: v for k, v in data.items() if k != "metrics"}
        return cls.from_dict(data, plugins=plugins, actions=actions, limits=limits, strict=strict)

    # -- output ----------------------------------------------------------------------------

    def to_dict(self) -> dict[str, object]:
        """Canonical interchange form; ``Config.from_dict(c.to_dict()) == c``."""
        out: dict[str, object] = {
            "actions": list(self.actions),
            "tiers": [[p.to_dict() for p in tier.plugins] for tier in self.tiers],
        }
        if self.configurations:
            out["configurations"] = {
                name: _thaw(args) for name, args in self.configurations.items()
            }
        return out

    def to_volcano_yaml(self) -> str:
        """Volcano's own text format; ``Config.from_volcano_yaml(c.to_volcano_yaml()) == c``."""
        tiers: list[dict[str, object]] = []
        for tier in self.tiers:
            entries: list[dict[str, object]] = []
            for p in tier.plugins:
                entry: dict[str, object] = {"name": p.name}
                for switch in sorted(p.disabled):
                    entry[_FLAG_OF_SWITCH[switch]] = False
                if p.hierarchy:
                    entry[_HIERARCHY_KEY] = True
                if p.arguments:
                    entry["arguments"] = _thaw(p.arguments)
                entries.append(entry)
            tiers.append({"plugins": entries})
        doc: dict[str, object] = {"actions": ", ".join(self.actions), "tiers": tiers}
        if self.configurations:
            doc["configurations"] = [
                {"name": name, "arguments": _thaw(args)}
                for name, args in self.configurations.items()
            ]
        return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)


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


class _StrictLoader(yaml.SafeLoader):
    """A safe YAML loader that rejects a key repeated within one mapping."""


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[object, object]:
    loader.flatten_mapping(node)
    seen: set[object] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if isinstance(key, list | dict):
            continue  # unhashable keys are rejected by the base constructor
        if key in seen:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping",
                node.start_mark,
                f"found duplicate key {key!r}",
                key_node.start_mark,
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=True)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _construct_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int:
    """A YAML integer; one too long for Python's int-string conversion is a YAML error with
    its position (larger values than 64 bits are refused later, by the argument check)."""
    text = str(node.value)
    if len(text.replace("_", "")) > _MAX_INT_TEXT:
        raise yaml.constructor.ConstructorError(
            None, None, f"integer of {len(text)} characters is too long", node.start_mark
        )
    try:
        value = loader.construct_yaml_int(node)
    except ValueError:
        raise yaml.constructor.ConstructorError(
            None, None, "integer is too long", node.start_mark
        ) from None
    assert isinstance(value, int)
    return value


_StrictLoader.add_constructor("tag:yaml.org,2002:int", _construct_int)


def _yaml_problem(exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        return f"{exc.problem or exc.context}{where}"
    return str(exc)


# -- name validation --------------------------------------------------------------------------


def check_names(config: Config, *, plugins: Collection[str], actions: Collection[str]) -> None:
    """Raise :class:`ConfigError` for any action, plugin or configuration name not known.

    The message names the location (``tiers[1].plugins[2].name``), the unknown name and the
    closest known name when one is close.
    """
    for i, action in enumerate(config.actions):
        if action not in actions:
            raise _err(f"actions[{i}]", f"unknown action {action!r}{_suggest(action, actions)}")
    for i, tier in enumerate(config.tiers):
        for j, plugin in enumerate(tier.plugins):
            if plugin.name not in plugins:
                raise _err(
                    f"tiers[{i}].plugins[{j}].name",
                    f"unknown plugin {plugin.name!r}{_suggest(plugin.name, plugins)}",
                )
    for name in config.configurations:
        if name not in actions:
            raise _err(
                f"configurations.{name}", f"unknown action {name!r}{_suggest(name, actions)}"
            )


# -- argument declarations --------------------------------------------------------------------


def _matches(key: str, known: str) -> bool:
    """Whether argument ``key`` is the declared name ``known``; a ``*`` in ``known`` stands for
    any non-empty text (``binpack.resources.*`` matches ``binpack.resources.nvidia.com/gpu``)."""
    if "*" not in known:
        return key == known
    head, _, tail = known.partition("*")
    return len(key) > len(head) + len(tail) and key.startswith(head) and key.endswith(tail)


def check_arguments(
    arguments: Mapping[str, object], known: Collection[str], *, name: str, kind: str = "plugin"
) -> None:
    """Raise :class:`ConfigError` for the first argument (in sorted order) that ``known`` does
    not declare, naming it and the closest declared name.

    ``known`` is the plugin's or action's declaration (its ``known_arguments``): exact names,
    or patterns where ``*`` stands for any non-empty text. ``kind`` is ``"plugin"`` or
    ``"action"``.
    """
    exact = {k for k in known if "*" not in k}
    patterns = [k for k in known if "*" in k]
    for key in sorted(arguments):
        if key in exact or any(_matches(key, p) for p in patterns):
            continue
        shown = sorted(exact | {p.replace("*", "<name>") for p in patterns})
        if not shown:
            hint = f" ({name} takes no arguments)"
        else:
            close = difflib.get_close_matches(key, shown, n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else f" (known: {', '.join(shown)})"
        raise ConfigError(
            f"unknown argument {_show(key)}{hint}", kind=kind, name=name, field=f"arguments.{key}"
        )


# -- argument helpers -------------------------------------------------------------------------

_TRUE = frozenset({"1", "t", "T", "true", "TRUE", "True"})
_FALSE = frozenset({"0", "f", "F", "false", "FALSE", "False"})


def _arg_error(plugin: str, kind: str, key: str, detail: str) -> ConfigError:
    return ConfigError(detail, kind=kind, name=plugin, field=f"arguments.{key}")


def _bound_text(minimum: float | None, maximum: float | None) -> str:
    """``in [lo, hi]``, ``>= lo`` or ``<= hi`` (integers shown whole, floats as ``%g``)."""

    def num(x: float) -> str:
        return str(x) if isinstance(x, int) else f"{x:g}"

    if minimum is None:
        return f"<= {num(maximum)}" if maximum is not None else "a number"
    if maximum is None:
        return f">= {num(minimum)}"
    return f"in [{num(minimum)}, {num(maximum)}]"


def _check_bounds(
    result: float,
    minimum: float | None,
    maximum: float | None,
    *,
    plugin: str,
    kind: str,
    key: str,
    value: object,
) -> None:
    """The one bounds rule of :func:`arg_float` and :func:`arg_int` (``None``: no bound)."""
    if (minimum is not None and result < minimum) or (maximum is not None and result > maximum):
        raise _arg_error(
            plugin, kind, key, f"must be {_bound_text(minimum, maximum)}, got {_show(value)}"
        )


def arg_float(
    args: Mapping[str, object],
    key: str,
    default: float,
    *,
    plugin: str,
    kind: str = "plugin",
    minimum: float | None = None,
    maximum: float | None = None,
) -> float:
    """Argument ``key`` as a finite float (``10``, ``"2.5"``); ``default`` when absent.

    NaN and infinities are refused; so is a value below ``minimum`` or above ``maximum``
    (either ``None``: no bound), with a :class:`ConfigError` naming ``plugin`` and
    ``arguments.<key>``. ``kind`` is ``"action"`` when reading an action's arguments.
    """
    if key not in args:
        return default
    value = args[key]
    result: float | None = None
    try:
        if isinstance(value, int | float) and not isinstance(value, bool):
            result = float(value)
        elif isinstance(value, str) and len(value) <= _MAX_FLOAT_TEXT:
            result = float(value.strip())
    except (ValueError, OverflowError):
        result = None
    if result is None or not math.isfinite(result):
        raise _arg_error(plugin, kind, key, f"expected a finite number, got {_show(value)}")
    _check_bounds(result, minimum, maximum, plugin=plugin, kind=kind, key=key, value=value)
    return result


def arg_int(
    args: Mapping[str, object],
    key: str,
    default: int,
    *,
    plugin: str,
    kind: str = "plugin",
    minimum: int | None = None,
    maximum: int | None = None,
) -> int:
    """Argument ``key`` as an int (``10``, ``"10"``, ``10.0``); ``default`` when absent.

    Always within the 64-bit range; ``minimum`` / ``maximum`` narrow it (``None``: no further
    bound). A value outside is a :class:`ConfigError` naming ``plugin`` and ``arguments.<key>``.
    """
    if key not in args:
        return default
    value = args[key]
    result: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        result = value
    elif isinstance(value, float) and value.is_integer():
        result = int(value)
    elif isinstance(value, str) and len(value) <= _MAX_INT_TEXT:
        try:
            result = int(value.strip())
        except ValueError:
            result = None
    if result is None:
        raise _arg_error(plugin, kind, key, f"expected an integer, got {_show(value)}")
    if not _INT_MIN <= result <= _INT_MAX:
        raise _arg_error(plugin, kind, key, f"integer out of the 64-bit range, got {_show(value)}")
    _check_bounds(result, minimum, maximum, plugin=plugin, kind=kind, key=key, value=value)
    return result


def arg_bool(
    args: Mapping[str, object], key: str, default: bool, *, plugin: str, kind: str = "plugin"
) -> bool:
    """Argument ``key`` as a bool (``true``, ``"true"``, ``"1"``, ``"F"``...); as Go parses."""
    if key not in args:
        return default
    value = args[key]
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        text = value.strip()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
    raise _arg_error(plugin, kind, key, f"expected a boolean, got {_show(value)}")


def arg_str(
    args: Mapping[str, object], key: str, default: str, *, plugin: str, kind: str = "plugin"
) -> str:
    """Argument ``key`` as a string; ``default`` when absent. Numbers are not converted."""
    if key not in args:
        return default
    value = args[key]
    if isinstance(value, str):
        return value
    raise _arg_error(plugin, kind, key, f"expected a string, got {_show(value)}")
