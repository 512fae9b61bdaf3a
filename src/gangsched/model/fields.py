"""Field validators shared by the model's records, and :class:`Resources`.

Each validator takes the value and the record's ``kind``, ``name`` and ``field`` and returns
the normalised value or raises :class:`~gangsched.errors.SnapshotError` naming all three."""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import MISSING, fields
from typing import Any, Protocol, TypeVar

from gangsched._frozen import FrozenDict
from gangsched.errors import SnapshotError
from gangsched.limits import MAX_QUANTITY
from gangsched.units import GPU, check_resource_name, format_resources, parse_resources, show_value

#: What a record's constructor accepts for a resource map: canonical ints (a :class:`Resources`
#: is one) or quantities as written in a manifest (``"500m"``, ``"32Gi"``, ``1.5``).
ResourceInput = Mapping[str, int | float | str]


class Resources(FrozenDict[str, int]):
    """Canonical resource amounts (``{name: int}``, sorted): millicores, bytes, milli-GPU, counts.

    Build one from quantities with :meth:`parse`; a plain ``Resources(...)`` trusts its ints.
    """

    __slots__ = ()

    @classmethod
    def parse(cls, value: object, *, kind: str, name: str, field: str) -> Resources:
        if isinstance(value, Resources):
            for res, amount in value.items():
                check_resource_name(res, kind=kind, name=name, field=field)
                if (
                    isinstance(amount, bool)
                    or not isinstance(amount, int)
                    or not 0 <= amount <= MAX_QUANTITY
                ):
                    raise SnapshotError(
                        f"canonical amount must be an int in [0, 2**53], got {show_value(amount)}",
                        kind=kind,
                        name=name,
                        field=f"{field}.{res}",
                    )
            return value
        return _intern(cls(parse_resources(value, kind=kind, name=name, field=field)))

    def to_dict(self) -> dict[str, str | int]:
        return format_resources(self)


E = TypeVar("E", bound=enum.Enum)


def member(cls: type[E], value: object, *, kind: str, name: str, field: str) -> E:
    if isinstance(value, cls):
        return value
    for member in cls:
        if member.value == value:
            return member
    allowed = ", ".join(repr(m.value) for m in cls)
    raise SnapshotError(
        f"unknown value {value!r} (expected one of {allowed})", kind=kind, name=name, field=field
    )


def known(
    value: object, allowed: Iterable[object], what: str, *, kind: str, name: str, field: str
) -> None:
    """Reject a ``value`` not among ``allowed``: ``unknown <what> <value>``."""
    if value not in allowed:
        raise SnapshotError(f"unknown {what} {value!r}", kind=kind, name=name, field=field)


def record_name(value: object, kind: str, where: str = "") -> str:
    if not isinstance(value, str) or not value:
        detail = "missing" if value is None else f"must be a non-empty string, got {value!r}"
        raise SnapshotError(detail, kind=kind, name=where, field="name")
    return value


def string(value: object, *, kind: str, name: str, field: str, optional: bool = False) -> Any:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise SnapshotError(
            f"expected a string, got {type(value).__name__}", kind=kind, name=name, field=field
        )
    return value


def integer(
    value: object,
    *,
    kind: str,
    name: str,
    field: str,
    minimum: int | None = None,
) -> int:
    """An integer field, at least ``minimum``; every integer of a record is at most
    :data:`~gangsched.limits.MAX_QUANTITY` in size, so it is exact as a float64 too."""
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise SnapshotError(
                f"expected an integer, got {show_value(value)}", kind=kind, name=name, field=field
            )
    if abs(value) > MAX_QUANTITY:
        raise SnapshotError(
            f"integer {show_value(value)} out of range (at most 2**53 = {MAX_QUANTITY} in size)",
            kind=kind,
            name=name,
            field=field,
        )
    if minimum is not None and value < minimum:
        raise SnapshotError(f"must be >= {minimum}, got {value}", kind=kind, name=name, field=field)
    return value


def boolean(value: object, *, kind: str, name: str, field: str) -> bool:
    if not isinstance(value, bool):
        raise SnapshotError(f"expected a boolean, got {value!r}", kind=kind, name=name, field=field)
    return value


#: Equal small immutable mappings are shared between records (thousands of tasks of one job
#: carry the same request, nodes of one shape the same labels): a memo that changes no value,
#: only memory. Bounded; cleared when full.
_INTERNED: dict[tuple[object, ...], FrozenDict[Any, Any]] = {}
_INTERN_LIMIT = 1 << 16

FD = TypeVar("FD", bound=FrozenDict[Any, Any])


def _intern(value: FD) -> FD:
    key = (type(value), *value.items())
    found = _INTERNED.get(key)
    if found is not None:
        return found  # type: ignore[return-value]
    if len(_INTERNED) >= _INTERN_LIMIT:
        _INTERNED.clear()
    _INTERNED[key] = value
    return value


def str_map(value: object, *, kind: str, name: str, field: str) -> FrozenDict[str, str]:
    if value is None:
        return _intern(FrozenDict())
    pairs = mapping(value, kind=kind, name=name, field=field, of=" of strings")
    for k, v in pairs.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise SnapshotError(
                f"keys and values must be strings, got {k!r}: {v!r}",
                kind=kind,
                name=name,
                field=field,
            )
    if isinstance(pairs, FrozenDict):
        return _intern(pairs)
    return _intern(FrozenDict(pairs))


def str_tuple(value: object, *, kind: str, name: str, field: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise SnapshotError(
            f"expected a list of strings, got {type(value).__name__}",
            kind=kind,
            name=name,
            field=field,
        )
    for i, item in enumerate(value):
        if not isinstance(item, str) or not item:
            raise SnapshotError(
                f"expected a non-empty string, got {item!r}",
                kind=kind,
                name=name,
                field=f"{field}[{i}]",
            )
    return tuple(value)


def sequence(value: object, *, kind: str, name: str, field: str) -> Sequence[Any]:
    if value is None:
        return ()
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Sequence):
        raise SnapshotError(
            f"expected a list, got {type(value).__name__}", kind=kind, name=name, field=field
        )
    return value


def mapping(
    value: object, *, kind: str, name: str, field: str = "", of: str = ""
) -> Mapping[str, Any]:
    """``value`` if it is a mapping; else an error saying a mapping (``of`` what) was expected."""
    if not isinstance(value, Mapping):
        raise SnapshotError(
            f"expected a mapping{of}, got {type(value).__name__}", kind=kind, name=name, field=field
        )
    return value


def or_empty(value: object) -> Any:
    """``value``, or an empty mapping when it is absent (``None``); wrong types pass through
    so the record's own check reports them."""
    return FrozenDict() if value is None else value


def integer_field(
    record: object, attr: str, *, kind: str, name: str, minimum: int | None = None
) -> None:
    """Check the integer field ``attr`` of ``record`` (at least ``minimum``) and store it
    back as the int it reads as (a whole float becomes an int)."""
    value = integer(getattr(record, attr), kind=kind, name=name, field=attr, minimum=minimum)
    assign(record, attr, value)


def assign(obj: object, attr: str, value: object) -> None:
    object.__setattr__(obj, attr, value)


def only_keys(
    d: Mapping[str, Any], allowed: frozenset[str], *, kind: str, name: str, field: str = ""
) -> None:
    unknown = sorted(str(k) for k in d if k not in allowed)
    if unknown:
        prefix = f"{field}." if field else ""
        raise SnapshotError(
            f"unknown key (allowed: {', '.join(sorted(allowed))})",
            kind=kind,
            name=name,
            field=prefix + unknown[0],
        )


class _Validated(Protocol):
    def validate(self, *, kind: str, name: str, field: str) -> None: ...


VR = TypeVar("VR", bound=_Validated)


def records(value: object, cls: type[VR], *, kind: str, name: str, field: str) -> tuple[VR, ...]:
    """A list of ``cls`` records, each checked with its ``validate`` at ``field[i]``."""
    items = tuple(sequence(value, kind=kind, name=name, field=field))
    for i, item in enumerate(items):
        if not isinstance(item, cls):
            raise SnapshotError(
                f"expected a {cls.__name__}", kind=kind, name=name, field=f"{field}[{i}]"
            )
        item.validate(kind=kind, name=name, field=f"{field}[{i}]")
    return items


def sub_mappings(
    value: object, keys: frozenset[str], *, kind: str, name: str, field: str
) -> list[Mapping[str, Any]]:
    """A list of plain mappings (``field[i]``), each with only ``keys``."""
    out: list[Mapping[str, Any]] = []
    for i, item in enumerate(sequence(value, kind=kind, name=name, field=field)):
        m = mapping(item, kind=kind, name=name, field=f"{field}[{i}]")
        only_keys(m, keys, kind=kind, name=name, field=f"{field}[{i}]")
        out.append(m)
    return out


def record_mapping(
    d: object, keys: frozenset[str], *, kind: str, where: str
) -> tuple[Mapping[str, Any], str]:
    """The plain mapping of one record (``from_dict``) and its checked name; only ``keys``."""
    m = mapping(d, kind=kind, name=where)
    name = record_name(m.get("name"), kind, where)
    only_keys(m, keys, kind=kind, name=name)
    return m, name


R = TypeVar("R")


def nested(
    value: object,
    keys: frozenset[str],
    build: Callable[[Mapping[str, Any]], R],
    *,
    kind: str,
    name: str,
    field: str,
) -> R | None:
    """A record given as a plain mapping inside another (``None`` when absent): its keys are
    checked, and its errors name the outer record with ``field.`` before the inner field."""
    if value is None:
        return None
    sub = mapping(value, kind=kind, name=name, field=field)
    only_keys(sub, keys, kind=kind, name=name, field=field)
    try:
        return build(sub)
    except SnapshotError as exc:
        raise SnapshotError(
            exc.detail, kind=kind, name=name, field=f"{field}.{exc.field}"
        ) from None


def by_role(
    job: Any, attr: str, what: str, convert: Callable[[object, str], R]
) -> FrozenDict[str, R]:
    """A job's mapping of role (a string) to ``what`` in field ``attr``, each value converted
    at ``attr.<role>``."""
    value, name = getattr(job, attr), job.name
    if not isinstance(value, Mapping):
        raise SnapshotError(
            f"expected a mapping of role to {what}", kind="job", name=name, field=attr
        )
    out: dict[str, R] = {}
    for role, item in value.items():
        string(role, kind="job", name=name, field=attr)
        out[role] = convert(item, f"{attr}.{role}")
    return FrozenDict(out)


class _Devices(Protocol):
    @property
    def count(self) -> int: ...


DV = TypeVar("DV", bound=_Devices)


def split_devices(
    amounts: Resources,
    record: object,
    cls: type[DV],
    build: Callable[[int], DV],
    *,
    noun: str,
    whole: str,
    kind: str,
    name: str,
    field: str,
) -> tuple[Resources, DV | None]:
    """``amounts`` without ``nvidia.com/gpu``, and the device record (``noun``, a ``cls``):
    GPUs in the mapping are whole devices (else ``whole``), and agree with ``record``'s count
    or, when there is no record, make one with ``build(devices)``."""
    if record is not None and not isinstance(record, cls):
        raise SnapshotError(f"expected {cls.__name__}", kind=kind, name=name, field=noun)
    if GPU not in amounts:
        return amounts, record
    where = f"{field}.{GPU}"
    devices, rest = divmod(amounts[GPU], 1000)
    if rest:
        raise SnapshotError(whole, kind=kind, name=name, field=where)
    if record is None:
        try:
            record = build(devices)
        except SnapshotError as exc:
            raise SnapshotError(exc.detail, kind=kind, name=name, field=where) from None
    elif record.count != devices:
        raise SnapshotError(
            f"{field} says {devices} GPUs but {noun}.count is {record.count}",
            kind=kind,
            name=name,
            field=where,
        )
    return Resources({k: v for k, v in amounts.items() if k != GPU}), record


#: Per record class, for :func:`trusted`: its fields with their defaults (default factories
#: called once: the defaults are immutable, so every record may share them; ``MISSING`` for
#: a required field) and the names of its required fields.
_Defaults = tuple[tuple[tuple[str, object], ...], frozenset[str], frozenset[str]]
_DEFAULTS: dict[type, _Defaults] = {}


def _defaults_of(cls: type) -> _Defaults:
    out: list[tuple[str, object]] = []
    for f in fields(cls):
        factory: Any = f.default_factory
        if f.default is not MISSING:
            out.append((f.name, f.default))
        elif factory is not MISSING:
            out.append((f.name, factory()))
        else:
            out.append((f.name, MISSING))
    required = frozenset(name for name, default in out if default is MISSING)
    _DEFAULTS[cls] = found = (tuple(out), required, frozenset(name for name, _ in out))
    return found


def trusted(cls: type[R], **values: object) -> R:
    """A record of dataclass ``cls`` from ``values`` already in the form its constructor
    leaves them (names non-empty strings, ints, ``Resources``, tuples, members), the other
    fields at their defaults, without running the constructor's checks.

    Only for records the library builds itself from values it has checked or made (the
    FGD protocol's pods, for one); every public constructor and ``from_dict`` keeps its
    checks."""
    found = _DEFAULTS.get(cls)
    defaults, required, names = found if found is not None else _defaults_of(cls)
    if not required <= values.keys() <= names:
        raise TypeError(f"{cls.__name__}: fields {sorted(values)} (required {sorted(required)})")
    record = object.__new__(cls)
    put = object.__setattr__
    get = values.get
    for name, default in defaults:
        put(record, name, get(name, default))
    return record
