"""proportion's exact water-filling worked in integers equals the same rounds worked in
:class:`fractions.Fraction` arithmetic, amount for amount.

The reference below is the rounds as the plugin's docstring states them, one fraction per
amount; the package works them over one common denominator (whole amounts) or scales
fractional inputs to it. Both must give the same exact numbers, and so the same admission
limits (``floor_limits``), on whole and on fractional inputs, with and without an overdrawn
dimension (where the exact water level takes over).

Examples: ``GANGSCHED_EXAMPLES`` (default 60); more with ``GANGSCHED_SOAK=1``.
"""

from __future__ import annotations

import math
import os
from fractions import Fraction

import numpy as np
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gangsched.plugins._exact_shares import (
    exact_level,
    exact_rounds,
    exact_water_fill,
    floor_limits,
    water_fill_figures,
)

EXAMPLES = int(
    os.environ.get("GANGSCHED_EXAMPLES", "600" if os.environ.get("GANGSCHED_SOAK") else "60")
)
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
EPS = Fraction(1, 10)
Rows = list[list[Fraction]]


def reference_rounds(
    total: list[Fraction],
    weights: list[Fraction],
    request: Rows,
    guarantee: Rows,
    cap: Rows,
    part: list[bool],
) -> Rows:
    """Volcano's rounds with one Fraction per amount."""
    n, r = len(weights), len(total)
    deserved: Rows = [[Fraction(0)] * r for _ in range(n)]
    remaining = list(total)
    meet = [not p for p in part]
    for _ in range(8 * n + 64):
        active = [i for i in range(n) if not meet[i]]
        w_total = sum((weights[i] for i in active), Fraction(0))
        if w_total <= 0:
            break
        gained = [Fraction(0)] * r
        for i in active:
            old = deserved[i]
            new = [
                max(min(old[c] + remaining[c] * weights[i] / w_total, cap[i][c]), guarantee[i][c])
                for c in range(r)
            ]
            if new == old or all(
                request[i][c] < new[c] or abs(request[i][c] - new[c]) < EPS for c in range(r)
            ):
                meet[i] = True
            for c in range(r):
                gained[c] += new[c] - old[c]
            deserved[i] = new
        left = [max(remaining[c] - gained[c], Fraction(0)) for c in range(r)]
        if all(x < EPS for x in left) or left == remaining:
            break
        remaining = left
    return deserved


def reference_fill(
    total: np.ndarray,
    weights: np.ndarray,
    request: np.ndarray,
    guarantee: np.ndarray,
    real: np.ndarray,
    part: np.ndarray,
) -> Rows:
    n, r = request.shape
    tot = [Fraction(x) for x in total.tolist()]
    w = [Fraction(x) for x in weights.tolist()]
    req = [[Fraction(x) for x in row] for row in request.tolist()]
    g = [[Fraction(x) for x in row] for row in guarantee.tolist()]
    cap = [
        [q if not math.isfinite(c) else min(q, Fraction(c)) for q, c in zip(qs, cs, strict=True)]
        for qs, cs in zip(req, real.tolist(), strict=True)
    ]
    inside = [bool(x) for x in part.tolist()]
    out = reference_rounds(tot, w, req, g, cap, inside)
    for c in range(r):
        if sum((out[i][c] for i in range(n) if inside[i]), Fraction(0)) > tot[c] + EPS:
            level = exact_level(
                tot[c], w, [cap[i][c] for i in range(n)], [g[i][c] for i in range(n)], inside
            )
            for i in range(n):
                out[i][c] = level[i]
    return out


def reference_limits(exact: Rows, real: np.ndarray) -> list[list[int]]:
    out = []
    for row, caps in zip(exact, real.tolist(), strict=True):
        lims = []
        for d, rc in zip(row, caps, strict=True):
            bound = d if not math.isfinite(rc) else min(d, Fraction(rc))
            lims.append(max(min(math.ceil(bound + EPS) - 1, 2**60), 0))
        out.append(lims)
    return out


@st.composite
def fills(draw: st.DrawFn, *, whole: bool) -> tuple[np.ndarray, ...]:
    n_q = draw(st.integers(1, 7))
    n_r = draw(st.integers(1, 4))

    def amount(hi: int) -> float:
        # fractional cases are small: a tenth of a unit then matters to when rounds stop
        x = draw(st.integers(0, hi if whole else hi // 500))
        if whole or not draw(st.booleans()):
            return float(x)
        return x + draw(st.sampled_from([0.5, 0.25, 0.125, 0.375]))

    total = np.array([amount(5000) for _ in range(n_r)])
    weights = np.array(
        [
            float(draw(st.integers(1, 300)))
            if whole or draw(st.booleans())
            else draw(st.sampled_from([0.5, 1.5, 2.25]))
            for _ in range(n_q)
        ]
    )
    request = np.array([[amount(3000) for _ in range(n_r)] for _ in range(n_q)])
    # guarantees may exceed the total: the rounds then overdraw and the level takes over
    guarantee = np.array(
        [[amount(1500) if draw(st.booleans()) else 0.0 for _ in range(n_r)] for _ in range(n_q)]
    )
    real = np.array(
        [
            [math.inf if draw(st.booleans()) else amount(4000) for _ in range(n_r)]
            for _ in range(n_q)
        ]
    )
    part = np.array([draw(st.booleans()) for _ in range(n_q)])
    return total, weights, request, guarantee, real, part


def _check(case: tuple[np.ndarray, ...]) -> None:
    expected = reference_fill(*case)
    got = exact_water_fill(*case)
    assert got == expected
    assert all(isinstance(x, Fraction) for row in got for x in row)
    assert floor_limits(got, case[4]).tolist() == reference_limits(expected, case[4])
    # the figures read from the rounds' integers: the floats and limits of the fractions
    floats, limits = water_fill_figures(*case)
    assert floats.tolist() == [[float(x) for x in row] for row in expected]
    assert limits.tolist() == reference_limits(expected, case[4])


# One queue met in the first round while another takes three rounds to fill its share.
_THREE_ROUNDS = (
    np.array([100.0]),
    np.array([1.0, 2.0, 3.0]),
    np.array([[10.0], [90.0], [60.0]]),
    np.zeros((3, 1)),
    np.full((3, 1), math.inf),
    np.array([True, True, True]),
)
# Guarantees above the total: the rounds overdraw, the exact level decides.
_OVERDRAWN = (
    np.array([10.0, 7.0]),
    np.array([3.0, 1.0]),
    np.array([[20.0, 5.0], [20.0, 5.0]]),
    np.array([[8.0, 0.0], [8.0, 4.0]]),
    np.array([[math.inf, 6.5], [15.0, math.inf]]),
    np.array([True, True]),
)

# A column with nothing to share and nobody asking (as pods is) beside one with nothing to
# share that a queue asks for: that queue never has its request met and leaves the rounds
# once its amounts stop moving, later than the queue the first column would let go.
_EMPTY_COLUMNS = (
    np.array([50.0, 0.0, 0.0]),
    np.array([1.0, 1.0]),
    np.array([[40.0, 0.0, 3.0], [40.0, 0.0, 0.0]]),
    np.zeros((2, 3)),
    np.full((2, 3), math.inf),
    np.array([True, True]),
)
# Amounts past 2**62: whole, but not all of them fit int64 on the way.
_HUGE = (
    np.array([2.0**63, 10.0]),
    np.array([1.0, 2.0]),
    np.array([[2.0**62, 4.0], [2.0**63, 9.0]]),
    np.zeros((2, 2)),
    np.array([[math.inf, 3.0], [2.0**64, math.inf]]),
    np.array([True, True]),
)

# Ten queues deserve 9.9 each, a tenth below a whole amount: Volcano's tolerance admits 9.
_A_TENTH_BELOW = (
    np.array([99.0]),
    np.ones(10),
    np.full((10, 1), 20.0),
    np.zeros((10, 1)),
    np.full((10, 1), math.inf),
    np.ones(10, dtype=np.bool_),
)


@SETTINGS
@given(fills(whole=True))
@example(_A_TENTH_BELOW)
@example(_THREE_ROUNDS)
@example(_OVERDRAWN)
@example(_EMPTY_COLUMNS)
@example(_HUGE)
def test_integer_rounds_equal_fraction_rounds_on_whole_amounts(
    case: tuple[np.ndarray, ...],
) -> None:
    _check(case)


@SETTINGS
@given(fills(whole=False))
def test_fractional_amounts_and_weights_give_the_fraction_rounds_too(
    case: tuple[np.ndarray, ...],
) -> None:
    _check(case)


def test_many_queues_over_many_rounds_give_the_fraction_rounds() -> None:
    """Cluster-sized cases: sixteen queues, cpu, memory in bytes, GPUs and an empty pods
    column, the GPUs asked for past the total, so that queues leave the rounds one after
    another while the others go on for several rounds."""
    rng = np.random.default_rng(7)
    total = np.array([17_808_000.0, 88_738_319_302_656.0, 1_016_000.0, 0.0])
    for _ in range(12):
        n = 16
        weights = rng.integers(1, 300, n).astype(np.float64)
        share = rng.uniform(0.0, 0.25, (n, 1)) * rng.uniform(0.5, 1.5, (n, 4))
        request = np.floor(share * total * np.array([1.0, 1.0, 3.0, 0.0]))
        real = np.tile(total, (n, 1))
        part = rng.random(n) < 0.9
        _check((total, weights, request, np.zeros((n, 4)), real, part))


def test_exact_rounds_takes_fractions_and_returns_the_reference_amounts() -> None:
    total = [Fraction(7, 2), Fraction(10)]
    weights = [Fraction(1, 2), Fraction(3, 4)]
    request = [[Fraction(3), Fraction(9, 4)], [Fraction(5, 3), Fraction(20)]]
    guarantee = [[Fraction(0), Fraction(1, 8)], [Fraction(0), Fraction(0)]]
    cap = [list(row) for row in request]
    part = [True, True]
    got = exact_rounds(total, weights, request, guarantee, cap, part)
    assert got == reference_rounds(total, weights, request, guarantee, cap, part)
    assert got[0][0] != int(got[0][0])  # a share that is not whole survives exactly


def test_a_tenth_below_a_whole_amount_admits_the_amount_below() -> None:
    floats, limits = water_fill_figures(*_A_TENTH_BELOW)
    assert floats[:, 0].tolist() == [9.9] * 10
    assert limits[:, 0].tolist() == [9] * 10


def test_a_whole_ceiling_below_deserved_limits_at_the_ceiling() -> None:
    exact = [[Fraction(21, 2), Fraction(3, 1)]]
    real = np.array([[10.0, 2.5]])
    # 10 ≤ 10.5 → 10; 2.5 below 3 → ⌈2.6⌉ − 1 = 2
    assert floor_limits(exact, real).tolist() == [[10, 2]]
    assert reference_limits(exact, real) == [[10, 2]]
