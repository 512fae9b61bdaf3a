"""How the dispatcher asks a third-party plugin: the answer of each extension point checked.

A plugin's member raising, or answering in a form its point does not take (a sort key that is
not a tuple, a mask of the wrong length, a NaN score, victims that are not candidates, devices
the node does not have, deserved amounts of the wrong shape...), is a
:class:`~gangsched.errors.ConfigError` naming the plugin and the point, where it happens —
never a bare error deep inside the cycle. Answers are normalised to the form the combiners
read (numpy bools to bools, victims sorted and distinct, scores float64). The package's own
plugins (``gangsched.*``) are asked directly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from gangsched.errors import ConfigError, GangschedError
from gangsched.framework.combine import Vote
from gangsched.placement.problem import HypernodeOrder

__all__ = ["GuardedFairShare", "builtin", "guarded", "guarded_member", "who"]

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
BOOL = npt.NDArray[np.bool_]


def who(plugin: object) -> str:
    try:
        return str(getattr(plugin, "name", type(plugin).__name__))
    except Exception:  # a name property that raises: the type names it
        return type(plugin).__name__


def _bad(plugin: object, member: str, detail: str) -> ConfigError:
    return ConfigError(detail, kind="plugin", name=who(plugin), field=member)


class _Wrong(Exception):
    """A plugin's answer is not of its point's form (the message says what was expected)."""


def _is_bool(got: object) -> bool:
    return isinstance(got, bool | np.bool_)


def _as_vote(got: object) -> object:
    if isinstance(got, Vote):
        return got
    if isinstance(got, int | np.integer) and not _is_bool(got) and int(got) in (-1, 0, 1):
        return Vote(int(got))
    raise _Wrong(f"a Vote, not {got!r}")


def _as_mask(got: object, size: int) -> BOOL:
    mask = np.asarray(got)
    if mask.dtype != np.bool_ or mask.shape != (size,):
        raise _Wrong(f"a bool mask of shape ({size},), not {mask.dtype} {mask.shape}")
    return mask


def _as_rejections(got: object, args: tuple[Any, ...]) -> object:
    size = int(args[2].size)
    out: list[tuple[BOOL, str]] = []
    if not isinstance(got, Sequence | Iterator):
        raise _Wrong(f"a list of (reject mask, reason) pairs, not {type(got).__name__}")
    for pair in got:
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            raise _Wrong(f"(reject mask, reason) pairs, not {pair!r}")
        reject, reason = pair
        if not isinstance(reason, str):
            raise _Wrong(f"a reason string, not {type(reason).__name__}")
        out.append((_as_mask(reject, size), reason))
    return out


def _as_scores(got: object, args: tuple[Any, ...]) -> object:
    size = int(args[2].size)
    scores = np.asarray(got)
    if scores.dtype.kind not in "biuf" or scores.shape not in ((), (size,)):
        raise _Wrong(f"float scores of shape ({size},), not {scores.dtype} {scores.shape}")
    scores = np.broadcast_to(scores.astype(np.float64), (size,))
    if not np.isfinite(scores).all():
        raise _Wrong("finite scores (a NaN or infinite score answered)")
    return scores


def _as_victims(got: object, args: tuple[Any, ...]) -> object:
    if got is None:
        return None
    victims = np.asarray(got)
    if victims.ndim != 1 or (victims.size and victims.dtype.kind not in "iu"):
        raise _Wrong(f"a 1-D integer array, not {victims.dtype} {victims.shape}")
    victims = np.unique(victims.astype(np.int64))
    if not np.isin(victims, args[2]).all():
        raise _Wrong("a subset of the candidates (it named tasks that are not candidates)")
    return victims


def _as_devices(got: object, args: tuple[Any, ...]) -> object:
    if got is None:
        return None
    ssn, node = args[0], int(args[2])
    count = int(ssn.arrays.gpu_count[node])
    if not isinstance(got, Sequence) or isinstance(got, str):
        raise _Wrong(f"a tuple of device indices, not {type(got).__name__}")
    picks = tuple(got)
    if not all(isinstance(g, int | np.integer) and not _is_bool(g) for g in picks):
        raise _Wrong(f"device indices, not {picks!r}")
    devices = tuple(int(g) for g in picks)
    if len(set(devices)) != len(devices) or not all(0 <= g < count for g in devices):
        raise _Wrong(f"distinct devices of the node (0..{count - 1}), not {devices}")
    return devices


def _as_notes(got: object, args: tuple[Any, ...]) -> object:
    n_jobs = len(args[0].snapshot.jobs)
    if not isinstance(got, dict):
        raise _Wrong(f"a dict of job index to note, not {type(got).__name__}")
    for job, note in got.items():
        if not isinstance(job, int | np.integer) or not 0 <= int(job) < n_jobs:
            raise _Wrong(f"job indices (0..{n_jobs - 1}) as keys, not {job!r}")
        if not isinstance(note, str):
            raise _Wrong(f"notes as strings, not {type(note).__name__}")
    return got


def _typed(
    kind: type | tuple[type, ...], words: str
) -> Callable[[object, tuple[Any, ...]], object]:
    def check(got: object, args: tuple[Any, ...]) -> object:
        if not isinstance(got, kind):
            raise _Wrong(f"{words}, not {type(got).__name__}")
        return got

    return check


def _boolean(got: object, args: tuple[Any, ...]) -> object:
    if not _is_bool(got):
        raise _Wrong(f"a bool, not {type(got).__name__}")
    return bool(got)


_Check = Callable[[object, tuple[Any, ...]], object]


def _ranked(value: object) -> tuple[int, object]:
    """A sort-key element made comparable with any other: numbers, then strings, then
    tuples (of such elements); NaN and other types are refused."""
    if isinstance(value, bool | int | np.integer):
        return (0, int(value))
    if isinstance(value, float | np.floating):
        if value != value:
            raise _Wrong("sort key elements that are not NaN")
        return (0, float(value))
    if isinstance(value, str):
        return (1, value)
    if isinstance(value, tuple):
        return (2, tuple(_ranked(v) for v in value))
    raise _Wrong(f"sort key elements that are numbers or strings, not {type(value).__name__}")


def _key(got: object, args: tuple[Any, ...]) -> object:
    """A plugin's sort key as one element of the chain's key: keys of other lengths or mixed
    element types still compare (shorter prefix first, numbers before strings)."""
    if not isinstance(got, tuple):
        raise _Wrong(f"a tuple sort key, not {type(got).__name__}")
    return (tuple(_ranked(v) for v in got),)


_KEY = _key
_HYPERNODES = _typed((HypernodeOrder, type(None)), "a HypernodeOrder or None")
_WHY = _typed((str, type(None)), "a string or None")
#: How a third-party plugin's answer to each point is checked (and normalised).
_ANSWERS: dict[str, _Check] = {
    "job_order": _KEY,
    "queue_order": _KEY,
    "task_order": _KEY,
    "victim_order": _KEY,
    "job_valid": _WHY,
    "job_ready": _boolean,
    "job_starving": _boolean,
    "overused": _boolean,
    "allocatable": _boolean,
    "allocatable_reason": _WHY,
    "exposed": _WHY,
    "preemptive": _WHY,
    "job_pipelined": lambda got, args: _as_vote(got),
    "job_enqueueable": lambda got, args: _as_vote(got),
    "predicate": _as_rejections,
    "node_score": _as_scores,
    "preemptable": _as_victims,
    "reclaimable": _as_victims,
    "gpu_choice": _as_devices,
    "reason_notes": _as_notes,
    "hypernode_score": _HYPERNODES,
}


class _Guarded:
    """A third-party plugin's member as the dispatcher asks it: an exception it raises or an
    answer of the wrong form is a :class:`~gangsched.errors.ConfigError` naming the plugin and
    the point, not an error deep inside the cycle."""

    __slots__ = ("__self__", "_check", "_fn", "_point")

    def __init__(
        self, plugin: object, point: str, fn: Callable[..., Any], check: _Check | None = None
    ) -> None:
        self.__self__ = plugin
        self._point = point
        self._fn = fn
        self._check = check or _ANSWERS.get(point)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            got = self._fn(*args, **kwargs)
        except GangschedError:
            raise
        except Exception as err:
            detail = f"raised {type(err).__name__}: {err}"
            raise _bad(self.__self__, self._point, detail) from err
        if self._check is None:
            return got
        try:
            return self._check(got, args)
        except _Wrong as err:
            raise _bad(self.__self__, self._point, f"wrong answer: expected {err}") from err
        except Exception as err:  # an answer that cannot even be read as the point's form
            detail = f"wrong answer: {type(err).__name__}: {err}"
            raise _bad(self.__self__, self._point, detail) from err


def _amounts(got: object, shape: tuple[int, ...], words: str) -> I64:
    out = np.asarray(got)
    if out.dtype.kind not in "iu" or out.shape != shape or (out < 0).any():
        raise _Wrong(
            f"{words}: non-negative integers of shape {shape}, not {out.dtype} {out.shape}"
        )
    return out.astype(np.int64)


def _share(got: object, args: tuple[Any, ...]) -> object:
    if _is_bool(got) or not isinstance(got, int | float | np.integer | np.floating):
        raise _Wrong(f"a share as a number, not {type(got).__name__}")
    if np.isnan(got) or got < 0:
        raise _Wrong(f"a share >= 0, not {got}")
    return float(got)


def _capability(got: object, args: tuple[Any, ...]) -> object:
    if got is None:
        return None
    size = args[0].queue_allocated.shape[1]
    out = np.asarray(got)
    if out.dtype.kind not in "iuf" or out.shape != (size,) or not (out >= 0).all():
        raise _Wrong(f"amounts >= 0 of shape ({size},), not {out.dtype} {out.shape}")
    return out.astype(np.float64)


def _deserved(got: object, args: tuple[Any, ...]) -> object:
    return _amounts(got, args[0].queue_allocated.shape, "deserved amounts")


def _sums(got: object, args: tuple[Any, ...]) -> object:
    return _amounts(got, np.shape(args[1]), "subtree sums")


_FAIR_CHECKS: dict[str, _Check] = {
    "queue_deserved": _deserved,
    "queue_share": _share,
    "queue_overused": _boolean,
    "queue_real_capability": _capability,
    "queue_subtree_sum": _sums,
}


class GuardedFairShare:
    """A third-party fair-share provider as the session reads it: each member's answer is
    checked for its form (:class:`_Guarded`); deserved amounts and subtree sums keep the shape
    of the per-queue amounts and are never negative."""

    __slots__ = ("_ask", "plugin")

    def __init__(self, plugin: object) -> None:
        self.plugin = plugin
        self._ask = {m: _Guarded(plugin, m, getattr(plugin, m), c) for m, c in _FAIR_CHECKS.items()}

    def queue_deserved(self, ssn: Any) -> I64:
        out: I64 = self._ask["queue_deserved"](ssn)
        return out

    def queue_share(self, ssn: Any, queue: int) -> float:
        return float(self._ask["queue_share"](ssn, queue))

    def queue_overused(self, ssn: Any, queue: int) -> bool:
        return bool(self._ask["queue_overused"](ssn, queue))

    def queue_real_capability(self, ssn: Any, queue: int) -> F64 | None:
        out: F64 | None = self._ask["queue_real_capability"](ssn, queue)
        return out

    def queue_subtree_sum(self, ssn: Any, per_queue: I64) -> I64:
        out: I64 = self._ask["queue_subtree_sum"](ssn, per_queue)
        return out


def guarded(member: object) -> bool:
    """Whether ``member`` is a third-party plugin's member asked through its checks."""
    return isinstance(member, _Guarded)


def builtin(plugin: object) -> bool:
    return type(plugin).__module__.startswith("gangsched.")


def guarded_member(plugin: object, point: str) -> Callable[..., Any]:
    fn: Callable[..., Any] = getattr(plugin, point)
    return fn if builtin(plugin) else _Guarded(plugin, point, fn)
