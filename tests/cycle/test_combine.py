"""The tier combiners, one by one: Volcano's rules and where each one stops asking."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gangsched.framework.combine import (
    Vote,
    all_pass,
    any_true,
    first_answer,
    first_tier_all,
    intersect_first_decisive,
    lexicographic,
    vote,
)


class Asked:
    """Thunks that record which plugins were asked."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, name: str, value: Any) -> Callable[[], Any]:
        def answer() -> Any:
            self.calls.append(name)
            return value

        return answer


def arr(*xs: int) -> np.ndarray[Any, np.dtype[np.int64]]:
    return np.array(xs, dtype=np.int64)


def test_lexicographic_concatenates_keys_in_tier_order() -> None:
    a = Asked()
    key = lexicographic([[a("prio", (-5,)), a("gang", (0,))], [a("drf", (0.25,))]])
    assert key == (-5, 0, 0.25)
    assert a.calls == ["prio", "gang", "drf"]


@given(st.lists(st.tuples(st.integers(-3, 3), st.integers(-3, 3)), min_size=2, max_size=8))
def test_lexicographic_keys_sort_like_first_non_zero_comparators(
    pairs: list[tuple[int, int]],
) -> None:
    # Volcano: the first plugin whose comparator is non-zero decides. Sorting by concatenated
    # keys gives exactly that order.
    keys = [lexicographic([[lambda p=p: (p[0],)], [lambda p=p: (p[1],)]]) for p in pairs]

    def volcano_less(x: tuple[int, int], y: tuple[int, int]) -> bool:
        for a, b in zip(x, y, strict=True):
            if a != b:
                return a < b
        return False

    for i, x in enumerate(pairs):
        for j, y in enumerate(pairs):
            assert (keys[i] < keys[j]) == volcano_less(x, y)


def test_all_pass_stops_at_the_first_false() -> None:
    a = Asked()
    assert not all_pass([[a("p1", True), a("p2", False)], [a("p3", True)]])
    assert a.calls == ["p1", "p2"]
    assert all_pass([[a("x", True)], [a("y", True)]])
    assert all_pass([])  # nobody objects


def test_any_true_stops_at_the_first_true() -> None:
    a = Asked()
    assert any_true([[a("p1", False)], [a("p2", True), a("p3", True)]])
    assert a.calls == ["p1", "p2"]
    assert not any_true([[a("q", False)]])
    assert not any_true([])


@pytest.mark.parametrize(
    ("tiers", "expected", "asked"),
    [
        # a reject anywhere wins, even after a permit in the same tier
        ([[Vote.PERMIT, Vote.REJECT]], False, 2),
        # a tier with a permit decides: the next tier is not asked
        ([[Vote.ABSTAIN, Vote.PERMIT], [Vote.REJECT]], True, 2),
        # abstentions pass to the next tier
        ([[Vote.ABSTAIN], [Vote.REJECT]], False, 2),
        # nobody votes: permitted
        ([[Vote.ABSTAIN], [Vote.ABSTAIN]], True, 2),
        ([], True, 0),
    ],
)
def test_vote(tiers: list[list[Vote]], expected: bool, asked: int) -> None:
    a = Asked()
    thunks = [[a(f"t{i}p{j}", v) for j, v in enumerate(tier)] for i, tier in enumerate(tiers)]
    assert vote(thunks) is expected
    assert len(a.calls) == asked


def test_intersect_first_decisive() -> None:
    a = Asked()
    # tier 1: intersection of the two non-abstaining answers decides
    got = intersect_first_decisive(
        [
            [a("gang", arr(1, 2, 3)), a("abstain", None), a("prio", arr(2, 3, 4))],
            [a("never", arr(9))],
        ]
    )
    assert got.tolist() == [2, 3]
    assert "never" not in a.calls
    # an empty answer empties its tier; the next tier decides
    got = intersect_first_decisive([[lambda: arr(1, 2), lambda: arr()], [lambda: arr(7)]])
    assert got.tolist() == [7]
    # an empty intersection also passes to the next tier
    got = intersect_first_decisive([[lambda: arr(1), lambda: arr(2)], [lambda: arr(5, 3)]])
    assert got.tolist() == [3, 5]
    # every plugin abstains: no victims
    assert intersect_first_decisive([[lambda: None]]).size == 0
    assert intersect_first_decisive([]).size == 0


def test_the_node_score_fold_adds_every_plugins_scores_in_tier_order() -> None:
    """The dispatcher's generated score fold (SCORE_FOLD) over every row and over one row."""
    from types import SimpleNamespace

    from gangsched.framework.dispatch import Dispatch

    chain = [[lambda s, t, r: np.array([1.0, 2.0])], [lambda s, t, r: np.array([10.0, 0.5])]]
    one = [[lambda s, t, r: np.array([1.5])], [lambda s, t, r: -0.25]]
    many = SimpleNamespace(_chains={"node_score": chain}, _ssn=None)
    rows = np.array([3, 7])
    assert Dispatch.node_score(many, None, rows).tolist() == [11.0, 2.5]  # type: ignore[arg-type]
    single = SimpleNamespace(_chains={"node_score": one}, _ssn=None)
    row = np.array([3])
    assert Dispatch.node_score_one(single, None, row) == 1.25  # type: ignore[arg-type]
    nobody = SimpleNamespace(_chains={"node_score": []}, _ssn=None)
    assert Dispatch.node_score(nobody, None, rows).tolist() == [0.0, 0.0]  # type: ignore[arg-type]


def test_first_tier_all_uses_only_the_first_tier_with_plugins() -> None:
    a = Asked()
    assert first_tier_all([[], [a("gang", True), a("prio", True)], [a("later", False)]])
    assert a.calls == ["gang", "prio"]
    assert not first_tier_all([[lambda: True, lambda: False]])
    assert not first_tier_all([])  # no plugin: not starving
    assert not first_tier_all([[], []])


def test_first_answer_returns_the_first_non_none() -> None:
    a = Asked()
    assert first_answer([[a("x", None)], [a("y", 3), a("z", 4)]]) == 3
    assert a.calls == ["x", "y"]
    assert first_answer([[lambda: None]]) is None
