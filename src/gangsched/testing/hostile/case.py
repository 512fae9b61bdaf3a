"""The hostile fuzzer's vocabulary: boundary numbers and names, choosers and the :class:`Case`."""

from __future__ import annotations

import base64
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

T = TypeVar("T")

#: The integers every numeric field is tried at.
BOUNDARY_INTS: tuple[int, ...] = (0, 1, -1, 2**31, 2**53, 2**62, 2**63 - 1, 2**63, -(2**63))
#: Further numbers: just past the bounds, huge, and floats that are not quite integers.
_MORE_NUMBERS: tuple[object, ...] = (
    2**53 + 1,
    2**62 + 1,
    2**64,
    10**16,
    10**30,
    2**31 - 1,
    1.0,
    0.5,
    1e308,
    -0.0,
)
_QUANTITY_TEXTS: tuple[str, ...] = (
    "9223372036854775807m",
    "9223372036854775807",
    "4Ei",
    "8Ei",
    "7Ei",
    "1e18",
    "9007199254740993",
    "1n",
    "0.001m",
    "9" * 5000,
)
#: Tier numbers: order is all that should matter.
_TIERS: tuple[int, ...] = (1, 2, 3, 64, 1000, 2000, 5000, 10**6, 10**8, 2**31, 2**53, 2**62)
#: Names that break naive code: separators, unicode, control characters, lengths.
HOSTILE_NAMES: tuple[str, ...] = (
    "a/b",
    "default/x",
    "/",
    "..",
    "名前",
    "ノード-0",
    "🙂",
    "e\u0301",
    "\u00e9",
    "\u202egpu",
    "\ufeffn",
    "a\x00b",
    "a\nb",
    "\t",
    " ",
    "",
    "x" * 300,
    "N0",
    "n0 ",
    "n0\u200b",
    "\ud800",
    "default",
    "root",
    "-",
    "a.b",
    "A_B",
)
_PHASES = ("Pending", "Pipelined", "Bound", "Running", "Releasing", "Succeeded", "Failed")
_OCCUPYING = ("Pipelined", "Bound", "Running", "Releasing")

# --------------------------------------------------------------------------------------------
# Choosers


class Chooser(Protocol):
    """Where a generator's choices come from. ``below(n)`` is in ``[0, n)`` and 0 is always the
    simplest option; ``chance(p)`` is True with probability ``p`` (False is the simple case)."""

    def below(self, n: int) -> int: ...

    def chance(self, p: float) -> bool: ...


class RandomChooser:
    """Choices from ``random.Random`` (fast: no hypothesis overhead)."""

    def __init__(self, seed: int | str) -> None:
        import random

        self.rng = random.Random(seed)

    def below(self, n: int) -> int:
        return self.rng.randrange(n) if n > 1 else 0

    def chance(self, p: float) -> bool:
        return self.rng.random() < p


class DrawChooser:
    """Choices from a hypothesis ``draw``: every choice shrinks towards its first option."""

    def __init__(self, draw: Callable[[Any], Any]) -> None:
        from hypothesis import strategies as st

        self._draw = draw
        self._st = st

    def below(self, n: int) -> int:
        return int(self._draw(self._st.integers(0, n - 1))) if n > 1 else 0

    def chance(self, p: float) -> bool:
        return int(self._draw(self._st.integers(0, 999))) >= round(1000 * (1 - p))


def _pick(c: Chooser, seq: Sequence[T]) -> T:
    return seq[c.below(len(seq))]


def _number(c: Chooser) -> object:
    k = c.below(10)
    if k < 6:
        return _pick(c, BOUNDARY_INTS)
    if k < 8:
        return _pick(c, _MORE_NUMBERS)
    return _pick(c, _QUANTITY_TEXTS)


def _name(c: Chooser) -> str:
    return _pick(c, HOSTILE_NAMES)


# --------------------------------------------------------------------------------------------
# Cases


@dataclass(frozen=True)
class Case:
    """One generated input.

    ``kind`` is ``"snapshot"`` (``doc`` is a snapshot document), ``"config"`` (``config`` is a
    configuration document, ``doc`` a valid snapshot to schedule with it) or ``"text"``
    (``data`` is a file's bytes; ``target`` says what reads it: ``"cli"``, ``"cli-config"``,
    ``"load"`` or ``"volcano-yaml"``). ``attacks`` names what was done to the input.
    """

    kind: str
    attacks: tuple[str, ...]
    doc: Any = None
    config: Any = None
    data: bytes = b""
    target: str = ""
    seed: int = 0
    index: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "attacks": list(self.attacks),
            "doc": self.doc,
            "config": self.config,
            "data": base64.b64encode(self.data).decode("ascii"),
            "target": self.target,
            "seed": self.seed,
            "index": self.index,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Case:
        return cls(
            kind=d["kind"],
            attacks=tuple(d["attacks"]),
            doc=d.get("doc"),
            config=d.get("config"),
            data=base64.b64decode(d.get("data", "")),
            target=d.get("target", ""),
            seed=d.get("seed", 0),
            index=d.get("index", 0),
        )
