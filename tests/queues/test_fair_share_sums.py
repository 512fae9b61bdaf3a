"""The fair-share figures' per-queue sums (``_sum_rows``) equal ``np.add.at`` into the
floats of the start, bit for bit: summed in one ``reduceat`` while every float along the way
is exact, one by one otherwise (amounts near ``MAX_TOTAL`` round)."""

from __future__ import annotations

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gangsched.limits import MAX_TOTAL
from gangsched.session.rules.fairshare import _sum_rows

_AMOUNT = st.one_of(st.integers(0, 10**6), st.integers(0, MAX_TOTAL))


@settings(max_examples=60, deadline=None)
@given(
    n_groups=st.integers(1, 5),
    rows=st.lists(st.tuples(st.integers(0, 4), _AMOUNT, _AMOUNT), max_size=12),
    start=st.lists(st.tuples(_AMOUNT, _AMOUNT), min_size=5, max_size=5),
    floats=st.booleans(),
)
@example(
    n_groups=1, rows=[(0, 2**53 + 1, 0), (0, 1, 0), (0, 1, 0)], start=[(0, 0)] * 5, floats=False
)  # sums a float cannot hold exactly: the order of the additions shows
def test_sums_equal_add_at_into_the_start(
    n_groups: int, rows: list[tuple[int, int, int]], start: list[tuple[int, int]], floats: bool
) -> None:
    group = np.array([g % n_groups for g, _, _ in rows], dtype=np.int64)
    values = np.array([[a, b] for _, a, b in rows], dtype=np.int64).reshape(-1, 2)
    if floats:
        values_in = values.astype(np.float64)
        expected = np.zeros((n_groups, 2))
        np.add.at(expected, group, values_in)
        got = _sum_rows(group, values_in, n_groups)
    else:
        first = np.array(start[:n_groups], dtype=np.int64)
        expected = first.astype(np.float64)
        np.add.at(expected, group, values)
        got = _sum_rows(group, values, n_groups, first)
    assert got.dtype == np.float64
    assert got.tobytes() == expected.tobytes()
