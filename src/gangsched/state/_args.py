"""Argument checks of the state's public operations: a wrong type is a
:class:`~gangsched.errors.SnapshotError` naming the argument, as :class:`Snapshot`'s
constructors name a wrong field, never a ``TypeError`` from inside an operation."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from gangsched.errors import SnapshotError
from gangsched.units import show_value

R = TypeVar("R")


def name_arg(value: object, kind: str, field: str = "name") -> str:
    """A record name: a non-empty string."""
    if not isinstance(value, str) or not value:
        raise SnapshotError(
            f"expected a non-empty string, got {show_value(value)}", kind=kind, field=field
        )
    return value


def flag_arg(value: object, kind: str, field: str) -> bool:
    if not isinstance(value, bool):
        raise SnapshotError(f"expected a boolean, got {show_value(value)}", kind=kind, field=field)
    return value


def count_arg(value: object, kind: str, field: str) -> int:
    """A non-negative integer (a generation)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SnapshotError(
            f"expected a non-negative integer, got {show_value(value)}", kind=kind, field=field
        )
    return value


def _items(value: object, kind: str, field: str, what: str) -> list[Any]:
    """The items of a list-like argument (any iterable but a string, bytes or a mapping)."""
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
        raise SnapshotError(
            f"expected a list of {what}, got {type(value).__name__}", kind=kind, field=field
        )
    return list(value)


def records_arg(value: object, cls: type[R], kind: str, field: str) -> list[R]:
    """A list of ``cls`` records (any iterable of them)."""
    items = _items(value, kind, field, cls.__name__)
    for i, item in enumerate(items):
        if not isinstance(item, cls):
            raise SnapshotError(
                f"is a {type(item).__name__}, expected {cls.__name__}",
                kind=kind,
                field=f"{field}[{i}]",
            )
    return items


def indices_arg(value: object, kind: str, name: str, field: str) -> tuple[int, ...]:
    """Device indices: a list of integers (their range is the record's check)."""
    items = _items(value, kind, field, "integers")
    for i, item in enumerate(items):
        if isinstance(item, bool) or not isinstance(item, int):
            raise SnapshotError(
                f"expected an integer, got {show_value(item)}",
                kind=kind,
                name=name,
                field=f"{field}[{i}]",
            )
    return tuple(items)
