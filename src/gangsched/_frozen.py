"""A small immutable, hashable, ordered mapping used inside frozen records."""

from __future__ import annotations

from collections.abc import ItemsView, Iterator, KeysView, Mapping, ValuesView
from dataclasses import fields
from typing import Any, ClassVar, Protocol, TypeVar

K = TypeVar("K")
V = TypeVar("V")

__all__ = ["FrozenDict", "copied", "plain_fields"]


class DataclassInstance(Protocol):
    """Any dataclass instance (what :func:`dataclasses.fields` takes)."""

    __dataclass_fields__: ClassVar[dict[str, Any]]


R = TypeVar("R", bound="DataclassInstance")

#: Field names per record class, read once (``dataclasses.fields`` walks the class each call).
_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _names(record: DataclassInstance) -> tuple[str, ...]:
    names = _FIELD_NAMES.get(type(record))
    if names is None:
        names = _FIELD_NAMES[type(record)] = tuple(f.name for f in fields(record))
    return names


def copied(record: R) -> R:
    """A new record of ``record``'s type holding every one of its fields, made without its
    constructor (no check runs: the caller changes fields and checks those it changed)."""
    new = object.__new__(type(record))
    for name in _names(record):
        object.__setattr__(new, name, getattr(record, name))
    return new


def plain_fields(record: DataclassInstance) -> dict[str, object]:
    """A frozen record's plain form: its fields in declaration order, tuples as lists and
    mappings as dicts (the interchange form of records that add nothing to their fields)."""
    names = _names(record)
    out: dict[str, object] = {}
    for name in names:
        v = getattr(record, name)
        out[name] = list(v) if isinstance(v, tuple) else dict(v) if isinstance(v, Mapping) else v
    return out


class FrozenDict(Mapping[K, V]):
    """An immutable mapping with keys kept in sorted order; equal to any equal mapping."""

    __slots__ = ("_data", "_hash")
    _data: dict[K, V]
    _hash: int | None

    def __init__(self, data: Mapping[K, V] | None = None) -> None:
        # (a plain dict, the usual case, is told by type first: a test against the abstract
        # Mapping class costs more than the rest for a small mapping)
        if type(data) is dict:
            items = data
        elif isinstance(data, FrozenDict):  # sorted already, and never changed: shared
            object.__setattr__(self, "_data", data._data)
            object.__setattr__(self, "_hash", data._hash)
            return
        else:
            items = dict(data or {})
        try:
            keys = sorted(items)  # keys alone: comparing (key, value) pairs costs twice
        except TypeError:
            ordered = dict(items)
        else:
            ordered = dict(zip(keys, map(items.__getitem__, keys), strict=True))
        object.__setattr__(self, "_data", ordered)
        object.__setattr__(self, "_hash", None)

    @classmethod
    def of_sorted(cls, data: dict[K, V]) -> FrozenDict[K, V]:
        """The mapping of ``data``, a plain dict whose keys are in sorted order already,
        holding that very dict (no copy, no sort): the caller made it for this mapping alone
        and never changes it after. Equal, item for item and in order, to
        ``FrozenDict(data)``."""
        new = object.__new__(cls)
        object.__setattr__(new, "_data", data)
        object.__setattr__(new, "_hash", None)
        return new

    def __getitem__(self, key: K) -> V:
        return self._data[key]

    def __iter__(self) -> Iterator[K]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    # The views read the dict directly (Mapping's generic views look each key up again, and
    # ``tuple(m.items())`` asks their length first): records are read on every snapshot.
    def items(self) -> ItemsView[K, V]:
        return self._data.items()

    def keys(self) -> KeysView[K]:
        return self._data.keys()

    def values(self) -> ValuesView[V]:
        return self._data.values()

    def __hash__(self) -> int:
        cached: int | None = self._hash
        if cached is None:
            cached = hash(tuple(self._data.items()))
            object.__setattr__(self, "_hash", cached)
        return cached

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return dict(self._data) == dict(other)
        return NotImplemented

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __reduce__(self) -> tuple[type[FrozenDict[K, V]], tuple[dict[K, V]]]:
        # Rebuild through __init__ (attribute assignment is blocked), for pickle and deepcopy.
        return (type(self), (self._data,))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._data!r})"
