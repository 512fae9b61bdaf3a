"""The budget of one ``place`` call: deterministic work left and the wall-clock deadline.

The only module of the CP-SAT placers that reads the clock (``time.perf_counter``); every
other one asks the budget.
"""

from __future__ import annotations

import time
from dataclasses import dataclass


def now() -> float:
    """The monotonic clock the wall budget is measured on (seconds)."""
    return time.perf_counter()


@dataclass(slots=True)
class _Budget:
    """What is left of one ``place`` call's limits: deterministic work (``None``: none) and
    the wall-clock deadline (``None``: none)."""

    deadline: float | None
    work: float | None
    limit: str = ""  # the limit that cut the search short: "work", "wall" or ""
    pass_time: float = 0.0  # wall seconds of one greedy pass over the gangs (joint mode)

    def exhausted(self) -> bool:
        if self.work is not None and self.work <= 0:
            return True
        return self.past_deadline()

    def past_deadline(self) -> bool:
        """Whether the wall-clock deadline has passed (and then records that it cut the
        search)."""
        if self.deadline is not None and now() >= self.deadline:
            self.limit = "wall"
            return True
        return False

    def room_for(self, seconds: float) -> bool:
        """Whether the wall-clock deadline leaves ``seconds`` (the longest step of a loop so
        far) for one more step; records the cut when it does not. Always true without a
        deadline, so that the result never depends on the clock then."""
        if self.deadline is not None and now() + seconds >= self.deadline:
            self.limit = "wall"
            return False
        return True

    def remaining(self) -> float:
        """Wall-clock seconds left before the deadline (at least 1 ms; a deadline is set)."""
        assert self.deadline is not None
        return max(0.001, self.deadline - now())
