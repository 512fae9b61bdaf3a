"""Name → factory for plugins and actions. Built-ins are registered by
:mod:`gangsched.scheduler`; users add their own with :meth:`Registry.register_plugin`.

Each factory may declare the argument names it reads: a ``known_arguments`` attribute (a
tuple of names; ``*`` in a name stands for any non-empty text, as in ``binpack.resources.*``),
or the ``arguments`` keyword of ``register_*``. :meth:`Registry.make_plugin` and
:meth:`Registry.make_action` then refuse any other argument with a
:class:`~gangsched.errors.ConfigError` naming it and the closest declared name. A factory
that declares nothing is handed whatever the configuration holds.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from gangsched.config import check_arguments
from gangsched.errors import ConfigError

if TYPE_CHECKING:
    from gangsched.session.core import Session

__all__ = ["Action", "PluginFactory", "Registry"]

PluginFactory = Callable[[Mapping[str, object]], Any]


class Action(Protocol):
    name: str

    def execute(self, ssn: Session) -> None: ...


def _declared(
    factory: object, given: Collection[str] | None, kind: str, name: str
) -> tuple[str, ...] | None:
    """The argument names ``factory`` declares (``given`` first), or None when it declares
    none."""
    known = getattr(factory, "known_arguments", None) if given is None else given
    if known is None:
        return None
    if isinstance(known, str) or not all(isinstance(k, str) and k for k in known):
        raise ConfigError(
            "known_arguments must be a collection of non-empty names",
            kind=kind,
            name=name,
            field="known_arguments",
        )
    return tuple(sorted(known))


@dataclass(slots=True)
class Registry:
    """Plugin and action factories by name, with the argument names each declares.
    Duplicate names are rejected."""

    plugins: dict[str, PluginFactory] = field(default_factory=dict)
    actions: dict[str, Callable[[Mapping[str, object]], Action]] = field(default_factory=dict)
    plugin_arguments: dict[str, tuple[str, ...]] = field(default_factory=dict)
    action_arguments: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def register_plugin(
        self, name: str, factory: PluginFactory, *, arguments: Collection[str] | None = None
    ) -> None:
        """Add plugin ``name``; ``arguments`` (default: ``factory.known_arguments``) are the
        argument names it accepts (None: anything)."""
        _add(self.plugins, self.plugin_arguments, name, factory, arguments, "plugin")

    def register_action(
        self,
        name: str,
        factory: Callable[[Mapping[str, object]], Action],
        *,
        arguments: Collection[str] | None = None,
    ) -> None:
        """Add action ``name``; ``arguments`` as for :meth:`register_plugin`."""
        _add(self.actions, self.action_arguments, name, factory, arguments, "action")

    def copy(self) -> Registry:
        return Registry(
            plugins=dict(self.plugins),
            actions=dict(self.actions),
            plugin_arguments=dict(self.plugin_arguments),
            action_arguments=dict(self.action_arguments),
        )

    def check_plugin_arguments(self, name: str, arguments: Mapping[str, object]) -> None:
        """Raise :class:`ConfigError` for an argument plugin ``name`` does not declare."""
        known = self.plugin_arguments.get(name)
        if known is not None:
            check_arguments(arguments, known, name=name, kind="plugin")

    def check_action_arguments(self, name: str, arguments: Mapping[str, object]) -> None:
        """Raise :class:`ConfigError` for an argument action ``name`` does not declare."""
        known = self.action_arguments.get(name)
        if known is not None:
            check_arguments(arguments, known, name=name, kind="action")

    def make_plugin(self, name: str, arguments: Mapping[str, object]) -> Any:
        factory = _factory(self.plugins, name, "plugin")
        self.check_plugin_arguments(name, arguments)
        return factory(arguments)

    def make_action(self, name: str, arguments: Mapping[str, object]) -> Action:
        factory = _factory(self.actions, name, "action")
        self.check_action_arguments(name, arguments)
        return factory(arguments)


F = TypeVar("F")


def _factory(factories: Mapping[str, F], name: str, kind: str) -> F:
    found = factories.get(name)
    if found is None:
        known = ", ".join(sorted(factories))
        raise ConfigError(f"unknown {kind} (known: {known})", kind=kind, name=name)
    return found


def _add(
    factories: dict[str, F],
    declared: dict[str, tuple[str, ...]],
    name: str,
    factory: F,
    arguments: Collection[str] | None,
    kind: str,
) -> None:
    if name in factories:
        raise ConfigError("already registered", kind=kind, name=name)
    known = _declared(factory, arguments, kind, name)
    factories[name] = factory
    if known is not None:
        declared[name] = known
