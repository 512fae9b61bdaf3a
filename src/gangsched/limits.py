"""The bounds gangsched puts on its input, in one place.

Every quantity, count and depth that a snapshot, a manifest or a trace can carry is bounded here
so that a small input can never cost much: sums over the whole cluster stay exact in int64 and
in a float64 round trip, recursion never runs deeper than Python allows, and memory follows what
the input really holds. A value past a bound is a typed error naming the object and the field
(see ``docs/model.md``, "Limits"), never a wrap-around, a hang or a blow-up.

:class:`Limits` is a frozen record; loaders that build many objects from a few bytes (manifests,
traces) take one as a keyword argument so a user can raise or lower a bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gangsched.errors import ConfigError

__all__ = [
    "DEFAULT_LIMITS",
    "MAX_ARG_WEIGHT",
    "MAX_QUANTITY",
    "MAX_REPLAY_TIME",
    "MAX_TOTAL",
    "MIN_REPLAY_PERIOD",
    "Limits",
    "check_seconds",
]

#: Largest canonical quantity (millicores, bytes, milli-GPU, counts) a single field may hold:
#: 2**53, so a quantity converts to float64 and back exactly.
MAX_QUANTITY: int = 2**53

#: Largest sum of one resource over a snapshot's records of one kind (nodes' allocatable,
#: tasks' requests, queues' guarantees or deserved amounts, jobs' min_resources) and of the
#: queues' weights: 2**60, so a few such sums added together still fit int64 and float64
#: carries each one to within 2**-53 of its value.
MAX_TOTAL: int = 2**60

#: Largest magnitude of a plugin's score weight or multiplying factor argument
#: (``binpack.weight``, ``nodeorder`` weights, ``overcommit-factor``...): 1e6, so a weight times
#: a score (at most 100), a ratio of two sums or a cluster total (at most ``MAX_TOTAL``) stays
#: far inside float64 and every plugin's score sum is finite.
MAX_ARG_WEIGHT: float = 1e6

#: Latest time (seconds) a replay trace may name (arrivals, run times, failure windows, the
#: stop time): 2**53, so whole seconds stay exact in float64.
MAX_REPLAY_TIME: float = 2.0**53

#: Shortest replay scheduling period (seconds) other than 0 (every event): 1 microsecond, so
#: ``time / period`` stays finite (at most 2**53 / 1e-6) for every time a trace may name.
MIN_REPLAY_PERIOD: float = 1e-6


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    """Configurable bounds on input size.

    Attributes
    ----------
    max_tasks:
        Tasks (pods) in one snapshot, and pods a manifest set may expand to.
    max_replicas:
        Replicas of one role (Volcano Job task, PyTorchJob replica spec) in a manifest.
    max_nesting:
        Depth of nested lists/mappings accepted in a manifest, config or snapshot document.
    max_queue_depth:
        Length of a queue's parent chain (root queue at depth 1).
    max_tiers:
        Distinct hypernode tier numbers in one snapshot (the tier numbers themselves may be
        anything from 1 to 2**53: only their order matters).
    max_actions:
        Entries in a scheduler configuration's action list (repeats count; every entry runs
        once per cycle).
    """

    max_tasks: int = 1_000_000
    max_replicas: int = 100_000
    max_nesting: int = 64
    max_queue_depth: int = 256
    max_tiers: int = 64
    max_actions: int = 1_000


DEFAULT_LIMITS = Limits()


def check_seconds(value: float, maximum: float, *, what: str, kind: str, field: str) -> None:
    """A solver's time budget ``value`` must be finite and in ``(0, maximum]`` seconds; else a
    :class:`~gangsched.errors.ConfigError` naming ``field`` (``what`` is how the message
    calls it)."""
    if not math.isfinite(value) or not 0 < value <= maximum:
        raise ConfigError(
            f"{what} must be in (0, {maximum:g}] s, got {value!r}", kind=kind, field=field
        )
