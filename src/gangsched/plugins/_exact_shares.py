"""proportion's water-filling in exact rational arithmetic.

Every input the fill reads is a whole number of canonical units (the cluster total, the queues'
requests, guarantees and realCapabilities; ``inf`` where a capability is unset) and every
weight is a whole number, so each round's grant ``remaining · w / Σw`` is a fraction. Kept as
:class:`fractions.Fraction`, the deserved amounts come out exact: a queue whose weighted share
of 24Gi is 8Gi deserves exactly 8Gi, not a float a hair below it, and the admission test
``allocated + request ≤ deserved`` compares whole numbers against the exact amount, with
Volcano's tolerance of 0.1 unit (:func:`floor_limits`).

The rules are the ones :mod:`gangsched.plugins.proportion` states: Volcano's rounds
(:func:`exact_rounds`), and on a dimension where the rounds overdraw the pool, the weighted
water level at which the queues hold exactly the total (:func:`exact_level`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from gangsched._types import BOOL, F64, I64
from gangsched.limits import MAX_TOTAL

__all__ = ["as_floats", "exact_water_fill", "floor_limits", "water_fill_figures"]

#: Volcano's ``minResource``: amounts closer than this compare equal, smaller ones are empty.
_EPS = Fraction(1, 10)

Exact = list[list[Fraction]]


def _exact(x: float) -> Fraction:
    """A finite float as the exact number it holds (amounts are whole numbers, and a float
    holds a whole number below 2**53 exactly)."""
    return Fraction(x)


def exact_water_fill(
    total: F64, weights: F64, request: F64, guarantee: F64, real_capability: F64, part: BOOL
) -> Exact:
    """The deserved amounts, exactly: Volcano's rounds, and the exact water level on every
    dimension the rounds overdraw. Shapes as :func:`~gangsched.plugins.proportion.water_fill`."""
    got = _fill(total, weights, request, guarantee, real_capability, part)
    if isinstance(got, tuple):
        den, nums = got
        return [[Fraction(x, den) for x in row] for row in nums]
    return got


def water_fill_figures(
    total: F64, weights: F64, request: F64, guarantee: F64, real_capability: F64, part: BOOL
) -> tuple[F64, I64]:
    """``(as_floats, floor_limits)`` of :func:`exact_water_fill`'s amounts. In the usual
    case (whole amounts and weights, no dimension overdrawn) both are read from the rounds'
    integers ``nums / den`` as they are, with no fraction made: a float of ``x / den`` is
    the float of the fraction (true division of integers rounds once, correctly), and the
    limits compare values alone."""
    got = _fill(total, weights, request, guarantee, real_capability, part)
    if not isinstance(got, tuple):
        return as_floats(got, total.size), floor_limits(got, real_capability)
    den, nums = got
    shape = real_capability.shape
    out: F64 = np.array([[x / den for x in row] for row in nums], dtype=np.float64).reshape(shape)
    return out, _whole_limits(den, nums, real_capability)


def _fill(
    total: F64, weights: F64, request: F64, guarantee: F64, real_capability: F64, part: BOOL
) -> tuple[int, list[list[int]]] | Exact:
    """:func:`exact_water_fill`'s amounts: ``(den, nums)`` (each amount ``nums[q][c] / den``)
    when the whole rounds stand, else the fractions."""
    n, r = request.shape
    inside = [bool(x) for x in part.tolist()]
    rc = real_capability
    amounts = np.concatenate((total, weights, request.ravel(), guarantee.ravel()))
    if (
        np.isfinite(amounts).all()
        and (np.floor(amounts) == amounts).all()
        and ((np.floor(rc) == rc) & (rc > -math.inf)).all()  # whole or inf
    ):
        # The usual case: whole amounts and weights, worked in plain integers; the rounds
        # cap at min(realCapability, request) (the request is always finite).
        ints = _ints(np.concatenate((amounts, np.minimum(request, rc).ravel())))
        tot_i, w_i = ints[:r].tolist(), ints[r : r + n].tolist()
        req_i, g_i, cap_i = ints[r + n :].reshape(3, n, r).tolist()
        den, nums = _whole_rounds(tot_i, w_i, req_i, g_i, cap_i, inside)
        # (the queues not taking part hold nothing)
        held = [sum(col) for col in zip(*nums, strict=True)] if n else [0] * r
        over = [c for c in range(r) if 10 * held[c] > (10 * tot_i[c] + 1) * den]
        if not over:
            return den, nums
        deserved = [[Fraction(x, den) for x in row] for row in nums]
        tot = [Fraction(x) for x in tot_i]
        w = [Fraction(x) for x in w_i]
        g = [[Fraction(x) for x in row] for row in g_i]
        cap = [[Fraction(x) for x in row] for row in cap_i]
    else:
        tot = [_exact(x) for x in total.tolist()]
        w = [_exact(x) for x in weights.tolist()]
        req = [[_exact(x) for x in row] for row in request.tolist()]
        g = [[_exact(x) for x in row] for row in guarantee.tolist()]
        # the rounds cap at min(realCapability, request): the request is always finite
        cap = [
            [
                rq if not math.isfinite(ceiling) else min(rq, _exact(ceiling))
                for rq, ceiling in zip(rr, cr, strict=True)
            ]
            for rr, cr in zip(req, rc.tolist(), strict=True)
        ]
        deserved = exact_rounds(tot, w, req, g, cap, inside)
        over = [
            c
            for c in range(r)
            if sum((deserved[i][c] for i in range(n) if inside[i]), Fraction(0)) > tot[c] + _EPS
        ]
    for c in over:
        level = exact_level(
            tot[c],
            [w[i] for i in range(n)],
            [cap[i][c] for i in range(n)],
            [g[i][c] for i in range(n)],
            inside,
        )
        for i in range(n):
            deserved[i][c] = level[i]
    return deserved


def _ints(values: F64) -> npt.NDArray[Any]:
    """Whole float amounts as exact integers: int64 while every magnitude is below
    ``2**62`` (each converts exactly), else Python ints in an object array."""
    if not values.size or float(np.abs(values).max()) < 2.0**62:
        return values.astype(np.int64)
    out: npt.NDArray[Any] = np.asarray(np.frompyfunc(int, 1, 1)(values), dtype=object)
    return out


def _common_denominator(values: Iterable[Fraction]) -> int:
    out = 1
    for v in values:
        out = math.lcm(out, v.denominator)
    return out


def exact_rounds(
    total: Sequence[Fraction],
    weights: Sequence[Fraction],
    request: Sequence[Sequence[Fraction]],
    guarantee: Sequence[Sequence[Fraction]],
    cap: Sequence[Sequence[Fraction]],
    part: Sequence[bool],
) -> Exact:
    """Volcano's rounds (see :func:`~gangsched.plugins.proportion.volcano_rounds`), exactly:
    the amounts as integers over their common denominator, the weights as integers in the same
    ratios, then :func:`_whole_rounds`."""
    base = _common_denominator(
        [*total, *(x for rows in (request, guarantee, cap) for row in rows for x in row)]
    )
    w_scale = _common_denominator(weights)

    def whole(rows: Sequence[Sequence[Fraction]]) -> list[list[int]]:
        return [[int(x * base) for x in row] for row in rows]

    den, nums = _whole_rounds(
        [int(x * base) for x in total],
        [int(x * w_scale) for x in weights],
        whole(request),
        whole(guarantee),
        whole(cap),
        part,
        unit=base,
    )
    return [[Fraction(x, den * base) for x in row] for row in nums]


def _whole_rounds(
    total: Sequence[int],
    weights: Sequence[int],
    request: Sequence[Sequence[int]],
    guarantee: Sequence[Sequence[int]],
    cap: Sequence[Sequence[int]],
    part: Sequence[bool],
    *,
    unit: int = 1,
) -> tuple[int, list[list[int]]]:
    """Volcano's rounds on whole amounts and weights, exactly: ``(den, nums)`` with each
    queue's deserved amount ``nums[i][c] / den``.

    Every amount ``x`` of a queue still in the rounds is held as the integer ``x·den``: a
    round multiplies ``den`` by the active weights' sum, so its grants ``remaining · w / Σw``
    are whole too, and the comparisons are those of the fractions (``|a − b| < 1/10`` is
    ``10·|a·den − b·den| < den``) — the numbers :class:`fractions.Fraction` arithmetic gives,
    without normalising every intermediate. ``unit``: the inputs are counted in ``1/unit``
    (Volcano's tolerance of a tenth is of a whole amount).

    A queue that leaves the rounds keeps its amounts over the ``den`` of that round (no later
    round reads or moves them), and the answer puts every queue over one denominator at the
    end. A column with nothing to share and neither a guarantee nor a request among the
    queues taking part holds 0 for each of them and meets every request: the rounds leave it
    out."""
    n, r = len(weights), len(total)
    inside = [i for i in range(n) if part[i]]
    cols = [
        c for c in range(r) if total[c] or any(guarantee[i][c] or request[i][c] for i in inside)
    ]
    ks = range(len(cols))
    # Per queue taking part, over the columns the rounds read: its ceiling, its floor (None
    # when it has none) and ``10·request − unit``: the request is met on a column when
    # ``10·(request·den − x) < den·unit``, i.e. ``den·(10·request − unit) < 10·x``.
    tops = {i: [cap[i][c] for c in cols] for i in inside}
    floors: dict[int, list[int] | None] = {}
    for i in inside:
        g = [guarantee[i][c] for c in cols]
        floors[i] = g if any(g) else None
    wants = {i: [10 * request[i][c] - unit for c in cols] for i in inside}
    held = {i: [0] * len(cols) for i in inside}
    over: dict[int, int] = {}  # a queue out of the rounds: the den its amounts are over
    den = 1
    remaining = [total[c] for c in cols]
    active = inside
    for _ in range(8 * n + 64):
        w_total = sum(weights[i] for i in active)
        if w_total <= 0:
            break
        # Everything over den · Σw from here: old amounts scale by Σw, a grant is remaining · w.
        den *= w_total
        tenth = den * unit
        gained = [0] * len(cols)
        still = []
        for i in active:
            old = [x * w_total for x in held[i]]
            wi, top = weights[i], tops[i]
            new = []
            for c in ks:
                x = old[c] + remaining[c] * wi
                ceiling = top[c] * den
                new.append(ceiling if ceiling < x else x)
            floor = floors[i]
            if floor is not None:
                for c in ks:
                    x = floor[c] * den
                    if new[c] < x:
                        new[c] = x
            want = wants[i]
            for c in ks:
                if not den * want[c] < 10 * new[c]:
                    break
            else:
                over[i] = den  # its request is met
            if i not in over:
                if new == old:
                    over[i] = den
                else:
                    still.append(i)
            for c in ks:
                gained[c] += new[c] - old[c]
            held[i] = new
        scaled = [x * w_total for x in remaining]
        left = [s - g if s > g else 0 for s, g in zip(scaled, gained, strict=True)]
        if all(10 * x < tenth for x in left) or left == scaled:
            break
        remaining = left
        active = still
        # Keep the numbers small: divide out what den and every amount in the rounds share.
        common = math.gcd(den, *remaining, *(x for i in active for x in held[i]))
        if common > 1:
            den //= common
            remaining = [x // common for x in remaining]
            for i in active:
                held[i] = [x // common for x in held[i]]
    for i in active:
        over.setdefault(i, den)
    out_den = 1
    for d in set(over.values()):
        out_den = math.lcm(out_den, d)
    nums = [[0] * r for _ in range(n)]
    for i in inside:
        scale, row = out_den // over[i], nums[i]
        for c, x in zip(cols, held[i], strict=True):
            row[c] = x * scale
    return out_den, nums


def exact_level(
    total: Fraction,
    weights: Sequence[Fraction],
    cap: Sequence[Fraction],
    guarantee: Sequence[Fraction],
    part: Sequence[bool],
) -> list[Fraction]:
    """One dimension's exact weighted water level: ``max(min(λ·w, cap), g)`` per queue with
    ``λ`` the least level at which the queues hold the total (every queue at its top when
    they cannot use that much; ``λ = 0`` when the guarantees alone exceed it). Queues outside
    ``part`` get nothing."""
    idx = [i for i in range(len(weights)) if part[i]]

    def held(lam: Fraction) -> Fraction:
        return sum(
            (max(min(lam * weights[i], cap[i]), guarantee[i]) for i in idx),
            Fraction(0),
        )

    out = [Fraction(0)] * len(weights)
    tops = {i: max(cap[i], guarantee[i]) for i in idx}
    if sum(tops.values(), Fraction(0)) <= total:
        for i in idx:
            out[i] = tops[i]
        return out
    # H(λ) is piecewise linear and nondecreasing, with kinks at g/w and cap/w.
    kinks = sorted(
        {Fraction(0)}
        | {guarantee[i] / weights[i] for i in idx}
        | {cap[i] / weights[i] for i in idx}
    )
    lam = Fraction(0)
    prev, h_prev = kinks[0], held(kinks[0])
    if h_prev < total:
        for k in kinks[1:]:
            h = held(k)
            if h >= total:
                lam = prev + (total - h_prev) * (k - prev) / (h - h_prev)
                break
            prev, h_prev = k, h
    for i in idx:
        out[i] = max(min(lam * weights[i], cap[i]), guarantee[i])
    return out


def as_floats(exact: Exact, n_resources: int) -> F64:
    """The exact amounts as float64 (for shares and reports), ``(n_queues, n_resources)``."""
    out: F64 = np.zeros((len(exact), n_resources), dtype=np.float64)
    for q, row in enumerate(exact):
        out[q] = [float(x) for x in row]
    return out


def floor_limits(exact: Exact, real_capability: F64) -> I64:
    """The largest whole amount Volcano's comparison admits against ``min(deserved,
    realCapability)``, as int64 (``2**60`` where both are unbounded).

    Volcano's ``allocated + request ≤ deserved`` holds within its ``minResource`` (0.1 of a
    unit): whole amounts ``x`` pass when ``x < limit + 0.1``, i.e. ``x ≤ ⌈limit + 0.1⌉ − 1``.
    Computed on the exact amount, so an exact 8Gi admits 8Gi, and a share the rounds approach
    without reaching (a geometric series stopped once less than 0.1 is left) admits the whole
    amount it converges to."""
    return _limits([[(d.numerator, d.denominator) for d in row] for row in exact], real_capability)


def _whole_limits(den: int, nums: list[list[int]], real_capability: F64) -> I64:
    """:func:`floor_limits` of the amounts ``nums[q][c] / den`` against a realCapability
    that is whole or ``inf`` everywhere (the whole rounds' case): ``⌈a/den + 1/10⌉ − 1``,
    which is ``(10a + den − 1) // 10den`` in integers, at most the realCapability (a whole
    ceiling below the amount is the limit itself), within ``[0, 2**60]``."""
    step = 10 * den
    lims = [[(10 * a + den - 1) // step for a in row] for row in nums]
    if (
        max((max(row) for row in lims), default=0) > MAX_TOTAL
        or min((min(row) for row in lims), default=0) < 0
    ):
        lims = [[max(min(x, MAX_TOTAL), 0) for x in row] for row in lims]
    out: I64 = np.array(lims, dtype=np.int64).reshape(real_capability.shape)
    ceiling = np.clip(real_capability, 0.0, float(MAX_TOTAL)).astype(np.int64)
    np.minimum(out, ceiling, out=out)
    np.maximum(out, 0, out=out)
    return out


def _limits(exact: list[list[tuple[int, int]]], real_capability: F64) -> I64:
    """:func:`floor_limits` of the amounts ``a / b`` given as ``(a, b)`` pairs (``b > 0``;
    not necessarily in lowest terms: every step compares values)."""
    rows = []
    for row, caps in zip(exact, real_capability.tolist(), strict=True):
        out_row = []
        for (a, b), rc in zip(row, caps, strict=True):
            if rc.is_integer() and int(rc) * b < a:
                lim = int(rc)  # a whole ceiling below deserved: ⌈rc + 1/10⌉ − 1 = rc
            else:
                if math.isfinite(rc) and not rc.is_integer() and Fraction(rc) < Fraction(a, b):
                    a, b = Fraction(rc).as_integer_ratio()
                # ⌈a/b + 1/10⌉ − 1 in integers: ⌈(10a + b) / 10b⌉ − 1
                lim = -(-(10 * a + b) // (10 * b)) - 1
            out_row.append(max(min(lim, MAX_TOTAL), 0))
        rows.append(out_row)
    out: I64 = np.zeros(real_capability.shape, dtype=np.int64)
    for q, limits in enumerate(rows):
        out[q] = limits
    return out
