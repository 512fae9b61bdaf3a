"""Go's ``math/rand`` seeded generator, reimplemented so shuffles match the reference simulator.

Theory of operation
-------------------
Go's seeded source is an additive lagged Fibonacci generator over 64-bit integers: 607 words of
state, and each draw replaces one word by the sum (mod 2**64) of itself and the word 273 places
behind, i.e. the output sequence obeys ``y[t] = y[t-607] + y[t-273]``.

Seeding fills the 607 words from a Park-Miller generator (multiplier 48271, modulus 2**31 - 1,
Schrage's method) started at the seed, three Park-Miller steps per word combined with shifts of
40 and 20 bits, each XORed with a fixed "cooked" word. The cooked words are the state reached by
the same lagged generator after 7.8e12 draws from a Park-Miller fill of seed 1 (shifts 20 and 10).
Rather than ship that table, :func:`_cooked` recomputes it: the state after N draws is linear in
the initial state, and the coefficients are those of ``x**k mod (x**607 - x**334 - 1)``, obtained
by square-and-multiply on polynomials with uint64 coefficients (wrapping arithmetic is exactly
arithmetic mod 2**64). This takes a fraction of a second and is cached.

On top of the source, :class:`GoRand` implements the ``Rand`` methods the simulator uses:
``Int63``, ``Int31``, ``Uint32``, ``Int31n`` (rejection sampling, used by ``Intn``) and the
multiply-shift ``int31n`` that ``Shuffle`` uses.
"""

from __future__ import annotations

from functools import cache

import numpy as np
import numpy.typing as npt

from gangsched.errors import ConfigError

__all__ = ["GoRand"]

_LEN = 607
_TAP = 273
_M = (1 << 31) - 1
_MASK63 = (1 << 63) - 1
_MASK64 = (1 << 64) - 1
_COOK_STEPS = 7_800_000_000_000

U64 = npt.NDArray[np.uint64]


def _park_miller(x: int) -> int:
    hi, lo = divmod(x, 44488)
    x = 48271 * lo - 3399 * hi
    return x + _M if x < 0 else x


def _fill(seed: int, shifts: tuple[int, int]) -> list[int]:
    seed %= _M
    if seed == 0:
        seed = 89482311
    x = seed
    out: list[int] = []
    for i in range(-20, _LEN):
        x = _park_miller(x)
        if i >= 0:
            u = x << shifts[0]
            x = _park_miller(x)
            u ^= x << shifts[1]
            x = _park_miller(x)
            u ^= x
            out.append(u & _MASK64)
    return out


def _polymulmod(a: U64, b: U64) -> U64:
    """``a * b mod (x^607 - x^334 - 1)`` with coefficients mod 2**64."""
    prod = np.zeros(2 * _LEN - 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for i in np.flatnonzero(a):
            prod[i : i + _LEN] += a[i] * b
        for d in range(2 * _LEN - 2, _LEN - 1, -1):
            c = prod[d]
            if c:
                prod[d] = 0
                prod[d - _LEN] += c  # x^d = x^(d-607) + x^(d-273)
                prod[d - _TAP] += c
    return prod[:_LEN].copy()


def _xpow(n: int) -> U64:
    result = np.zeros(_LEN, dtype=np.uint64)
    result[0] = 1
    base = np.zeros(_LEN, dtype=np.uint64)
    base[1] = 1
    while n:
        if n & 1:
            result = _polymulmod(result, base)
        n >>= 1
        if n:
            base = _polymulmod(base, base)
    return result


@cache
def _cooked() -> tuple[int, ...]:
    """State of the lagged generator after 7.8e12 draws from the seed-1 fill (shifts 20, 10)."""
    init = _fill(1, (20, 10))
    # Window z[s] = y[s - 606]; z[0..606] are the initial words: y[t] = vec[(334 - t) mod 607].
    z0 = np.asarray([init[(334 - (s - 606)) % _LEN] for s in range(_LEN)], dtype=np.uint64)
    coeffs = _xpow(_COOK_STEPS)  # x^N mod P: z[N] as a combination of z[0..606]
    vec = [0] * _LEN
    with np.errstate(over="ignore"):
        for k in range(_LEN):
            # z[N + k] = y[N + k - 606]; t = N - 606 + k is in (N - 607, N].
            t = _COOK_STEPS - 606 + k
            vec[(334 - t) % _LEN] = int(np.sum(coeffs * z0, dtype=np.uint64))
            # multiply the coefficients by x once more (mod P)
            top = coeffs[_LEN - 1]
            coeffs = np.concatenate([np.zeros(1, dtype=np.uint64), coeffs[:-1]])
            coeffs[0] += top
            coeffs[_LEN - _TAP] += top
    return tuple(vec)


class GoRand:
    """A ``math/rand`` ``Rand`` over a source seeded with ``rand.Seed(seed)``.

    Examples
    --------
    >>> r = GoRand(1)
    >>> [r.intn(100) for _ in range(4)]
    [81, 87, 47, 59]
    """

    __slots__ = ("_feed", "_tap", "_vec")

    def __init__(self, seed: int) -> None:
        if not -(2**63) <= seed < 2**63:
            raise ConfigError("seed must fit in int64", kind="rng", name="go", field="seed")
        cooked = _cooked()
        s = seed % _M  # Go: seed % int32max, made non-negative
        fill = _fill(s, (40, 20))
        self._vec = [(u ^ c) & _MASK64 for u, c in zip(fill, cooked, strict=True)]
        self._tap = 0
        self._feed = _LEN - _TAP

    def uint64(self) -> int:
        self._tap = self._tap - 1 if self._tap > 0 else _LEN - 1
        self._feed = self._feed - 1 if self._feed > 0 else _LEN - 1
        x = (self._vec[self._feed] + self._vec[self._tap]) & _MASK64
        self._vec[self._feed] = x
        return x

    def int63(self) -> int:
        return self.uint64() & _MASK63

    def int31(self) -> int:
        return self.int63() >> 32

    def uint32(self) -> int:
        return (self.int63() >> 31) & 0xFFFFFFFF

    def int31n(self, n: int) -> int:
        """``Rand.Int31n``: uniform in ``[0, n)`` by rejection (what ``Intn`` uses)."""
        if n <= 0 or n > _M:
            raise ConfigError(f"argument {n} out of range", kind="rng", name="go", field="n")
        if n & (n - 1) == 0:
            return self.int31() & (n - 1)
        limit = _M - (1 << 31) % n
        v = self.int31()
        while v > limit:
            v = self.int31()
        return v % n

    def intn(self, n: int) -> int:
        """``Rand.Intn`` for ``n`` up to 2**31 - 1."""
        return self.int31n(n)

    def shuffle_int31n(self, n: int) -> int:
        """The multiply-shift ``int31n`` that ``Rand.Shuffle`` draws with."""
        prod = self.uint32() * n
        low = prod & 0xFFFFFFFF
        if low < n:
            thresh = ((1 << 32) - n) % n
            while low < thresh:
                prod = self.uint32() * n
                low = prod & 0xFFFFFFFF
        return prod >> 32

    def shuffle_index(self, i: int) -> int:
        """Partner of position ``i`` in ``Rand.Shuffle`` (which walks ``i`` from n-1 down to 1)."""
        return self.shuffle_int31n(i + 1)

    def discard(self) -> None:
        """One ``Int`` draw (the reference logs one number right after seeding)."""
        self.int63()
