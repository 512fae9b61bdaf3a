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

import numpy as np

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
    out: F64 = np.zeros((len(nums), total.size), dtype=np.float64)
    for q, row in enumerate(nums):
        out[q] = [x / den for x in row]
    pairs = [[(x, den) for x in row] for row in nums]
    return out, _limits(pairs, real_capability)


def _fill(
    total: F64, weights: F64, request: F64, guarantee: F64, real_capability: F64, part: BOOL
) -> tuple[int, list[list[int]]] | Exact:
    """:func:`exact_water_fill`'s amounts: ``(den, nums)`` (each amount ``nums[q][c] / den``)
    when the whole rounds stand, else the fractions."""
    n, r = request.shape
    inside = [bool(x) for x in part.tolist()]
    floats = (total.tolist(), weights.tolist(), request.tolist(), guarantee.tolist())
    rc_rows = real_capability.tolist()
    if (
        _whole(total)
        and _whole(weights)
        and _whole(request)
        and _whole(guarantee)
        and _whole(real_capability, unbounded=True)
    ):
        # The usual case: whole amounts and weights, worked in plain integers.
        t_f, w_f, req_f, g_f = floats
        tot_i = [int(x) for x in t_f]
        w_i = [int(x) for x in w_f]
        req_i = [[int(x) for x in row] for row in req_f]
        g_i = [[int(x) for x in row] for row in g_f]
        cap_i = [
            [
                rq if not math.isfinite(rc) else min(rq, int(rc))
                for rq, rc in zip(rr, cr, strict=True)
            ]
            for rr, cr in zip(req_i, rc_rows, strict=True)
        ]
        den, nums = _whole_rounds(tot_i, w_i, req_i, g_i, cap_i, inside)
        over = [
            c
            for c in range(r)
            if 10 * sum(nums[i][c] for i in range(n) if inside[i]) > (10 * tot_i[c] + 1) * den
        ]
        if not over:
            return den, nums
        deserved = [[Fraction(x, den) for x in row] for row in nums]
        tot = [Fraction(x) for x in tot_i]
        w = [Fraction(x) for x in w_i]
        g = [[Fraction(x) for x in row] for row in g_i]
        cap = [[Fraction(x) for x in row] for row in cap_i]
    else:
        tot = [_exact(x) for x in floats[0]]
        w = [_exact(x) for x in floats[1]]
        req = [[_exact(x) for x in row] for row in floats[2]]
        g = [[_exact(x) for x in row] for row in floats[3]]
        # the rounds cap at min(realCapability, request): the request is always finite
        cap = [
            [
                rq if not math.isfinite(rc) else min(rq, _exact(rc))
                for rq, rc in zip(rr, cr, strict=True)
            ]
            for rr, cr in zip(req, rc_rows, strict=True)
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


def _whole(values: F64, *, unbounded: bool = False) -> bool:
    """Whether every value is a whole number (``unbounded``: or ``inf``)."""
    ok = np.isfinite(values) & (np.floor(values) == values)
    if unbounded:
        ok |= values == math.inf
    return bool(ok.all())


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

    Every amount ``x`` is held as the integer ``x·den``: a round multiplies ``den`` by the
    active weights' sum, so its grants ``remaining · w / Σw`` are whole too, and the
    comparisons are those of the fractions (``|a − b| < 1/10`` is ``10·|a·den − b·den| <
    den``) — the numbers :class:`fractions.Fraction` arithmetic gives, without normalising
    every intermediate. ``unit``: the inputs are counted in ``1/unit`` (Volcano's tolerance of
    a tenth is of a whole amount)."""
    n, r = len(weights), len(total)
    den = 1
    deserved = [[0] * r for _ in range(n)]
    remaining = list(total)
    meet = [not p for p in part]
    for _ in range(8 * n + 64):
        active = [i for i in range(n) if not meet[i]]
        w_total = sum(weights[i] for i in active)
        if w_total <= 0:
            break
        # Everything over den · Σw from here: old amounts scale by Σw, a grant is remaining · w.
        den *= w_total
        tenth = den * unit  # |a − b| < 1/10 is 10·|a·den − b·den| < den · unit
        deserved = [[x * w_total for x in row] for row in deserved]
        gained = [0] * r
        for i in active:
            old = deserved[i]
            wi = weights[i]
            ci, gi, ri = cap[i], guarantee[i], request[i]
            new = []
            for c in range(r):
                x = old[c] + remaining[c] * wi
                top = ci[c] * den
                if top < x:
                    x = top
                floor = gi[c] * den
                if x < floor:
                    x = floor
                new.append(x)
            satisfied = True
            for c in range(r):
                want = ri[c] * den
                if not (want < new[c] or 10 * abs(want - new[c]) < tenth):
                    satisfied = False
                    break
            if satisfied or new == old:
                meet[i] = True
            for c in range(r):
                gained[c] += new[c] - old[c]
            deserved[i] = new
        scaled = [x * w_total for x in remaining]
        left = [max(scaled[c] - gained[c], 0) for c in range(r)]
        if all(10 * x < tenth for x in left) or left == scaled:
            break
        remaining = left
        # Keep the numbers small: divide out what den and every amount share.
        common = math.gcd(den, *remaining, *(x for row in deserved for x in row))
        if common > 1:
            den //= common
            remaining = [x // common for x in remaining]
            deserved = [[x // common for x in row] for row in deserved]
    return den, deserved


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
