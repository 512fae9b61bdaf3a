"""One error hierarchy for everything gangsched raises on purpose.

Every error raised on bad input names the object (kind and name) and the field that is wrong,
so a user with a thousand-object snapshot can find the culprit::

    task 'train-3': request.cpu: negative quantity '-1'

The structured parts are kept as attributes (``kind``, ``name``, ``field``, ``detail``) so
callers can route errors without parsing messages.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "DecisionError",
    "GangschedError",
    "PlacementError",
    "SnapshotError",
    "SolverError",
    "UnimplementedActionWarning",
    "UnimplementedPluginWarning",
]


class GangschedError(Exception):
    """Base of every error gangsched raises on purpose.

    Parameters
    ----------
    detail:
        What is wrong, in words.
    kind, name:
        The object the error is about (``"task"``, ``"train-3"``); empty when the error concerns
        the input as a whole.
    field:
        Dotted path of the offending field inside that object (``"request.cpu"``).
    """

    def __init__(self, detail: str, *, kind: str = "", name: str = "", field: str = "") -> None:
        self.detail = detail
        self.kind = kind
        self.name = name
        self.field = field
        super().__init__(self._format())

    def _format(self) -> str:
        parts: list[str] = []
        if self.kind:
            parts.append(f"{self.kind} {self.name!r}" if self.name else self.kind)
        if self.field:
            parts.append(self.field)
        parts.append(self.detail)
        return ": ".join(parts)

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild, (type(self), self.detail, self.kind, self.name, self.field))


def _rebuild(
    cls: type[GangschedError], detail: str, kind: str, name: str, field: str
) -> GangschedError:
    return cls(detail, kind=kind, name=name, field=field)


class SnapshotError(GangschedError):
    """The cluster snapshot (or a manifest or trace it was built from) is invalid."""


class DecisionError(SnapshotError):
    """A decision record is malformed (a scheduler's output, or its interchange form)."""


class ConfigError(GangschedError):
    """The scheduler configuration is invalid (unknown action or plugin, bad argument)."""


class PlacementError(GangschedError):
    """A placement problem or a placer's answer is inconsistent."""


class SolverError(PlacementError):
    """The CP-SAT model was rejected by the solver (MODEL_INVALID): a bug in gangsched."""


class UnimplementedPluginWarning(UserWarning):
    """A Volcano plugin gangsched knows of but does not implement was left out of the
    configuration. ``plugin`` is its name, ``detail`` what is lost without it (or how gangsched
    does its job another way). ``strict=True`` turns this into a :class:`ConfigError`."""

    def __init__(self, plugin: str, detail: str) -> None:
        self.plugin = plugin
        self.detail = detail
        super().__init__(
            f"plugin {plugin!r} is not implemented by gangsched and is skipped: {detail}"
        )

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.plugin, self.detail))


class UnimplementedActionWarning(UnimplementedPluginWarning):
    """A Volcano action gangsched knows of but does not implement was left out of the
    configuration's action list; ``action`` (also ``plugin``, for code that handles both) is its
    name, ``detail`` what is lost. ``strict=True`` turns this into a :class:`ConfigError`."""

    def __init__(self, action: str, detail: str) -> None:
        self.action = action
        self.plugin = action
        self.detail = detail
        UserWarning.__init__(
            self, f"action {action!r} is not implemented by gangsched and is skipped: {detail}"
        )
