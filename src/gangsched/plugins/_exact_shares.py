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
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from gangsched._types import BOOL, F64, I64
from gangsched.limits import MAX_TOTAL

__all__ = ["as_floats", "exact_water_fill", "floor_limits"]

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
    n, r = request.shape
    tot = [_exact(x) for x in total.tolist()]
    w = [_exact(x) for x in weights.tolist()]
    req = [[_exact(x) for x in row] for row in request.tolist()]
    g = [[_exact(x) for x in row] for row in guarantee.tolist()]
    # the rounds cap at min(realCapability, request): the request is always finite
    cap = [
        [
            rq if not math.isfinite(rc) else min(rq, _exact(rc))
            for rq, rc in zip(rr, cr, strict=True)
        ]
        for rr, cr in zip(req, real_capability.tolist(), strict=True)
    ]
    inside = [bool(x) for x in part.tolist()]
    deserved = exact_rounds(tot, w, req, g, cap, inside)
    for c in range(r):
        held = sum((deserved[i][c] for i in range(n) if inside[i]), Fraction(0))
        if held > tot[c] + _EPS:
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


def exact_rounds(
    total: Sequence[Fraction],
    weights: Sequence[Fraction],
    request: Sequence[Sequence[Fraction]],
    guarantee: Sequence[Sequence[Fraction]],
    cap: Sequence[Sequence[Fraction]],
    part: Sequence[bool],
) -> Exact:
    """Volcano's rounds (see :func:`~gangsched.plugins.proportion.volcano_rounds`), exactly."""
    n, r = len(weights), len(total)
    zero = Fraction(0)
    deserved: Exact = [[zero] * r for _ in range(n)]
    remaining = [Fraction(x) for x in total]
    meet = [not p for p in part]
    for _ in range(8 * n + 64):
        active = [i for i in range(n) if not meet[i]]
        w_total = sum((weights[i] for i in active), Fraction(0))
        if w_total <= 0:
            break
        gained = [zero] * r
        for i in active:
            old = deserved[i]
            new = [
                max(min(old[c] + remaining[c] * weights[i] / w_total, cap[i][c]), guarantee[i][c])
                for c in range(r)
            ]
            satisfied = all(
                request[i][c] < new[c] or abs(request[i][c] - new[c]) < _EPS for c in range(r)
            )
            if satisfied or new == old:
                meet[i] = True
            for c in range(r):
                gained[c] += new[c] - old[c]
            deserved[i] = new
        left = [max(remaining[c] - gained[c], zero) for c in range(r)]
        if all(x < _EPS for x in left) or left == remaining:
            break
        remaining = left
    return deserved


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
    rows = []
    for row, caps in zip(exact, real_capability.tolist(), strict=True):
        out_row = []
        for d, rc in zip(row, caps, strict=True):
            bound = d if not math.isfinite(rc) else min(d, Fraction(rc))
            lim = math.ceil(bound + _EPS) - 1
            out_row.append(max(min(lim, MAX_TOTAL), 0))
        rows.append(out_row)
    out: I64 = np.zeros(real_capability.shape, dtype=np.int64)
    for q, limits in enumerate(rows):
        out[q] = limits
    return out
