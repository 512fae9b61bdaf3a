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
``deviceshare``, ``numaaware``, ``tdm``, ``pdb``, ``usage``,
``resourcequota``, ``extender``, ...) do not make a production configuration unusable: the
constructors leave them out, warn once per plugin with an
:class:`~gangsched.errors.UnimplementedPluginWarning` that says what is lost, and list them in
:attr:`Config.ignored_plugins`. ``strict=True`` (or ``strict: true`` at the top of the
configuration) raises a :class:`~gangsched.errors.ConfigError` instead. A plugin of that name
that the caller's registry does provide is kept like any other.

The pieces live in private modules: the names (``config.names``), arguments and their
readers (``config.args``), plugin options and tiers (``config.tiers``) and the YAML codec
(``config.volcano_yaml``); this module holds :class:`Config` and re-exports the rest.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from gangsched.config.args import (
    _EMPTY_ARGS,
    _check_name,
    _err,
    _freeze_args,
    _known_keys,
    _show,
    _suggest,
    _thaw,
)
from gangsched.config.args import FrozenArgs as FrozenArgs
from gangsched.config.args import arg_bool as arg_bool
from gangsched.config.args import arg_float as arg_float
from gangsched.config.args import arg_int as arg_int
from gangsched.config.args import arg_str as arg_str
from gangsched.config.args import check_arguments as check_arguments
from gangsched.config.names import (
    _FLAG_OF_SWITCH,
    _HIERARCHY_KEY,
    _TOP_KEYS,
    BUILTIN_ACTIONS,
    BUILTIN_PLUGINS,
    EXTENSION_POINTS,
    SWITCHES,
    UNIMPLEMENTED_ACTIONS,
    UNIMPLEMENTED_PLUGINS,
    VOLCANO_FLAGS,
)
from gangsched.config.tiers import (
    PluginOption,
    Tier,
    _parse_actions,
    _parse_configurations,
    _parse_tiers,
    _skip_unimplemented,
    _skip_unimplemented_actions,
)
from gangsched.config.volcano import as_volcano_reads, naming_extensions, without_defaults
from gangsched.config.volcano_yaml import dump_volcano_yaml, load_volcano_yaml
from gangsched.limits import DEFAULT_LIMITS, Limits

__all__ = [
    "BUILTIN_ACTIONS",
    "BUILTIN_PLUGINS",
    "EXTENSION_POINTS",
    "SWITCHES",
    "UNIMPLEMENTED_ACTIONS",
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
    #: The actions of :data:`UNIMPLEMENTED_ACTIONS` ``from_dict`` left out (a note, as
    #: ``ignored_plugins``).
    ignored_actions: tuple[str, ...] = field(default=(), compare=False, hash=False)
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
        object.__setattr__(self, "configurations", FrozenArgs(without_defaults(frozen)))
        for attr, kind in (("ignored_plugins", "plugin"), ("ignored_actions", "action")):
            names = getattr(self, attr)
            if isinstance(names, str) or not isinstance(names, Sequence):
                raise _err(attr, f"expected a sequence of {kind} names")
            checked = tuple(_check_name(n, f"{attr}[{i}]", kind) for i, n in enumerate(names))
            object.__setattr__(self, attr, checked)

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
        """Volcano's built-in actions and tiers (used when no configuration file is given),
        with gangsched's defaults for its extensions (the enqueue shape check on; read from
        Volcano's YAML the same text leaves it off: :meth:`from_volcano_yaml`)."""
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
        :attr:`ignored_plugins` (actions of :data:`UNIMPLEMENTED_ACTIONS`, e.g. ``shuffle``,
        likewise, with an :class:`~gangsched.errors.UnimplementedActionWarning`, in
        :attr:`ignored_actions`); with ``strict`` (the argument, or ``strict: true`` in ``d``)
        they are a :class:`ConfigError` naming the plugin, its place and what it would lose.
        """
        d = _known_keys(d, _TOP_KEYS, entry="configuration mapping", key="configuration key")
        if "actions" not in d:
            raise _err("actions", "no actions configured")
        if d.get("strict") is not None and not isinstance(d.get("strict"), bool):
            raise _err("strict", f"expected true or false, got {_show(d.get('strict'))}")
        strict = strict or d.get("strict") is True
        known = BUILTIN_PLUGINS if plugins is None else plugins
        tiers, ignored = _skip_unimplemented(_parse_tiers(d.get("tiers")), known, strict)
        known_actions = BUILTIN_ACTIONS if actions is None else actions
        listed, skipped = _skip_unimplemented_actions(
            _parse_actions(d["actions"], limits.max_actions), known_actions, strict
        )
        config = cls(
            actions=listed,
            tiers=tiers,
            configurations=_parse_configurations(d.get("configurations")),
            ignored_plugins=ignored,
            ignored_actions=skipped,
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

        The configuration schedules as Volcano would: a gangsched extension that changes
        decisions and is on by default (the enqueue shape check, ``shapeCheckEnable``;
        admission that counts what a job may preempt, ``admitByPreemption``; every victim rule
        whatever tier answers, ``allVictimRules``) is off unless the text sets it
        (:mod:`gangsched.config.volcano`).
        """
        data = as_volcano_reads(load_volcano_yaml(text), limits.max_actions)
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
        """Volcano's own text format; ``Config.from_volcano_yaml(c.to_volcano_yaml()) == c``
        (every gangsched extension on by default is named, so that reading the text back
        keeps it on)."""
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
        named = naming_extensions(self.configurations, self.actions)
        configurations: dict[str, object] = (
            {name: _thaw(args) for name, args in self.configurations.items()}
            if named is None
            else dict(named)
        )
        if configurations:
            doc["configurations"] = [
                {"name": name, "arguments": args} for name, args in configurations.items()
            ]
        return dump_volcano_yaml(doc)


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
