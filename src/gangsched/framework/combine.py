"""Tier combiners: how the answers of the plugins of every tier become one answer.

Each combiner receives the plugins' bound methods grouped by tier and the arguments of the
call (``tiers[i][j](*args)`` asks plugin ``j`` of tier ``i``; with no arguments they are
thunks), so it can stop early exactly where Volcano stops. They are
named, pure and unit-tested; the session's dispatcher maps every extension point to one of them,
except the two asked per node row: ``predicate`` and ``node_score`` are folded by functions the
dispatcher generates from one formula each (``dispatch.PREDICATE_FOLD``, every answer true;
``dispatch.SCORE_FOLD``, the scores added in tier order, each plugin applying its own weight),
rendered for every row and for one.

================================  ===========================================================
combiner                          rule
================================  ===========================================================
:func:`lexicographic`             order keys concatenated in tier order: the first plugin
                                  that tells two objects apart decides ("first non-zero")
:func:`all_pass`                  every answer must be true (predicates, job_ready,
                                  allocatable); stops at the first false
:func:`any_true`                  true if any answer is true (overused)
:func:`vote`                      REJECT anywhere → false; a tier with a PERMIT → true;
                                  nobody votes → true (job_pipelined, job_enqueueable)
:func:`intersect_first_decisive`  per tier, intersect the victim sets of the plugins that did
                                  not abstain (an empty answer empties the tier); the first
                                  tier with a non-empty set decides (preemptable, reclaimable)
:func:`first_tier_all`            only the first tier with any plugin answers; all of its
                                  answers must be true; no plugin → false (job_starving)
:func:`first_answer`              the first non-``None`` answer (job_valid, hypernode order,
                                  preemptive, exposed)
:func:`each`                      every plugin is told, in tier order (events)
================================  ===========================================================
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

__all__ = [
    "Vote",
    "all_pass",
    "any_true",
    "each",
    "first_answer",
    "first_tier_all",
    "intersect_first_decisive",
    "lexicographic",
    "vote",
]

T = TypeVar("T")
Tiers = Sequence[Sequence[Callable[..., T]]]


class Vote(enum.IntEnum):
    REJECT = -1
    ABSTAIN = 0
    PERMIT = 1


def lexicographic(tiers: Tiers[tuple[Any, ...]], *args: Any) -> tuple[Any, ...]:
    key: tuple[Any, ...] = ()
    for tier in tiers:
        for answer in tier:
            key += answer(*args)
    return key


def all_pass(tiers: Tiers[bool], *args: Any) -> bool:
    for tier in tiers:
        for answer in tier:
            if not answer(*args):
                return False
    return True


def any_true(tiers: Tiers[bool], *args: Any) -> bool:
    for tier in tiers:
        for answer in tier:
            if answer(*args):
                return True
    return False


def vote(tiers: Tiers[Vote], *args: Any) -> bool:
    for tier in tiers:
        permitted = False
        for answer in tier:
            v = answer(*args)
            if v is Vote.REJECT:
                return False
            if v is Vote.PERMIT:
                permitted = True
        if permitted:
            return True
    return True


def intersect_first_decisive(
    tiers: Tiers[npt.NDArray[np.int64] | None], *args: Any
) -> npt.NDArray[np.int64]:
    """Victim sets (sorted int arrays of task indices; ``None`` = abstain)."""
    for tier in tiers:
        victims: npt.NDArray[np.int64] | None = None
        for answer in tier:
            got = answer(*args)
            if got is None:
                continue
            if got.size == 0:
                victims = None
                break
            victims = got if victims is None else np.intersect1d(victims, got)
            if victims.size == 0:
                victims = None
                break
        if victims is not None:
            return np.sort(victims)
    return np.zeros(0, dtype=np.int64)


def first_tier_all(tiers: Tiers[bool], *args: Any) -> bool:
    for tier in tiers:
        if tier:
            return all(answer(*args) for answer in tier)
    return False


def each(tiers: Tiers[object], *args: Any) -> None:
    """Tell every plugin, in tier order (events; answers are ignored)."""
    for tier in tiers:
        for answer in tier:
            answer(*args)


def first_answer(tiers: Tiers[T | None], *args: Any) -> T | None:
    for tier in tiers:
        for answer in tier:
            got = answer(*args)
            if got is not None:
                return got
    return None
