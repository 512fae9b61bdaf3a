"""Name → factory for plugins and actions. Built-ins are registered by
:mod:`gangsched.scheduler`; users add their own with :meth:`Registry.register_plugin`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from .errors import ConfigError

if TYPE_CHECKING:
    from .session import Session

__all__ = ["Action", "PluginFactory", "Registry"]

PluginFactory = Callable[[Mapping[str, object]], Any]


class Action(Protocol):
    name: str

    def execute(self, ssn: Session) -> None: ...


@dataclass(slots=True)
class Registry:
    """Plugin and action factories by name. Duplicate names are rejected."""

    plugins: dict[str, PluginFactory] = field(default_factory=dict)
    actions: dict[str, Callable[[Mapping[str, object]], Action]] = field(default_factory=dict)

    def register_plugin(self, name: str, factory: PluginFactory) -> None:
        if name in self.plugins:
            raise ConfigError("already registered", kind="plugin", name=name)
        self.plugins[name] = factory

    def register_action(self, name: str, factory: Callable[[Mapping[str, object]], Action]) -> None:
        if name in self.actions:
            raise ConfigError("already registered", kind="action", name=name)
        self.actions[name] = factory

    def copy(self) -> Registry:
        return Registry(plugins=dict(self.plugins), actions=dict(self.actions))

    def make_plugin(self, name: str, arguments: Mapping[str, object]) -> Any:
        try:
            factory = self.plugins[name]
        except KeyError:
            raise ConfigError(
                f"unknown plugin (known: {', '.join(sorted(self.plugins))})",
                kind="plugin",
                name=name,
            ) from None
        return factory(arguments)

    def make_action(self, name: str, arguments: Mapping[str, object]) -> Action:
        try:
            factory = self.actions[name]
        except KeyError:
            raise ConfigError(
                f"unknown action (known: {', '.join(sorted(self.actions))})",
                kind="action",
                name=name,
            ) from None
        return factory(arguments)
