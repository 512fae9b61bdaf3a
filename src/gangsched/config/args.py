"""Plugin and action arguments: frozen storage, declarations and typed readers.

Arguments are kept as written, frozen by :func:`_freeze_args` (lists → tuples, mappings →
:class:`FrozenArgs`), bounded in nesting, count and integer size. :func:`check_arguments` is
the one check of undeclared names; :func:`arg_float`, :func:`arg_int`, :func:`arg_bool` and
:func:`arg_str` read one argument each, raising :class:`~gangsched.errors.ConfigError` naming
the plugin and ``arguments.<key>``."""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Collection, Mapping
from typing import TypeVar

from gangsched._frozen import FrozenDict
from gangsched.errors import ConfigError
from gangsched.limits import MAX_ARG_WEIGHT

V = TypeVar("V")
N = TypeVar("N", int, float)


def _suggest(word: str, known: Collection[str]) -> str:
    close = difflib.get_close_matches(word, sorted(known), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _err(path: str, detail: str) -> ConfigError:
    return ConfigError(detail, kind="config", field=path)


def _known_keys(d: object, keys: Collection[str], *, entry: str, key: str) -> Mapping[str, object]:
    """``d`` as a mapping whose keys are all in ``keys``: else an error naming the ``entry``
    expected or the unknown ``key`` (with the closest known one)."""
    if not isinstance(d, Mapping):
        raise _err("", f"expected a {entry}, got {type(d).__name__}")
    for k in d:
        if k not in keys:
            raise _err(str(k), f"unknown {key}{_suggest(str(k), keys)}")
    return d


class FrozenArgs(FrozenDict[str, V]):
    """An immutable, hashable mapping with string keys kept in sorted order.

    Used for plugin and action arguments and for ``Config.configurations``. Two instances are
    equal when their items are equal; iteration order is always the sorted key order, so
    output built from it is byte-for-byte stable.
    """

    __slots__ = ()

    def __init__(self, data: Mapping[str, V] | None = None) -> None:
        super().__init__(dict(sorted((data or {}).items())))


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


def _to_float(value: object) -> float | str:
    """``value`` as a finite float (a number, or its text), else what was expected."""
    result: float | None = None
    try:
        if isinstance(value, int | float) and not isinstance(value, bool):
            result = float(value)
        elif isinstance(value, str) and len(value) <= _MAX_FLOAT_TEXT:
            result = float(value.strip())
    except (ValueError, OverflowError):
        result = None
    if result is None or not math.isfinite(result):
        return "expected a finite number"
    return result


def _to_int(value: object) -> int | str:
    """``value`` as a 64-bit integer (an int, a whole float, or its text), else what was
    expected."""
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
        return "expected an integer"
    if not _INT_MIN <= result <= _INT_MAX:
        return "integer out of the 64-bit range"
    return result


def _number_arg(
    args: Mapping[str, object],
    key: str,
    default: N,
    convert: Callable[[object], N | str],
    *,
    plugin: str,
    kind: str,
    minimum: float | None,
    maximum: float | None,
) -> N:
    """The one reading of :func:`arg_float` and :func:`arg_int`: ``default`` when ``key`` is
    absent, else the value ``convert`` makes of it, within the bounds; what ``convert``
    refuses is an error saying what it expected."""
    if key not in args:
        return default
    value = args[key]
    result = convert(value)
    if isinstance(result, str):
        raise _arg_error(plugin, kind, key, f"{result}, got {_show(value)}")
    _check_bounds(result, minimum, maximum, plugin=plugin, kind=kind, key=key, value=value)
    return result


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
    return _number_arg(
        args, key, default, _to_float, plugin=plugin, kind=kind, minimum=minimum, maximum=maximum
    )


def arg_weight(
    args: Mapping[str, object], key: str, default: float, *, plugin: str, signed: bool = True
) -> float:
    """A score weight argument: a finite float in ``[-MAX_ARG_WEIGHT, MAX_ARG_WEIGHT]``
    (``signed=False``: in ``[0, MAX_ARG_WEIGHT]``), as :func:`arg_float` reads it."""
    low = -MAX_ARG_WEIGHT if signed else 0.0
    return arg_float(args, key, default, plugin=plugin, minimum=low, maximum=MAX_ARG_WEIGHT)


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
    return _number_arg(
        args, key, default, _to_int, plugin=plugin, kind=kind, minimum=minimum, maximum=maximum
    )


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
