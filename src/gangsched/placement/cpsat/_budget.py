"""The budget of one ``place`` call: deterministic work left and the wall-clock deadline.

The only module of the CP-SAT placers that reads the clock (``time.perf_counter``); every
other one asks the budget.

One budget, shared in order
---------------------------
Every solve of a call (the bounding programme, the model on replica classes or on aggregate
capacities, each objective level of each single-gang model, the check of a hint) draws on the
same deterministic budget: it is handed what the solves before it left, less what it may run
past its limit (:data:`OVERRUN_PER_ITEM`), and what it reports using is taken off. So the
deterministic time the solver reports over a whole call never exceeds the budget, and a phase
gets exactly what the earlier ones did not use. The bounding programme is the one solve with a
cap of its own (``RELAX_WORK``): its bound is valid unproven, so it never takes more. A solve
the budget can no longer afford is not started; the search then answers with what it has,
unproven (``limit == "work"``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

#: Deterministic time a solve may run past the limit it is given, per variable and constraint
#: of its model: CP-SAT checks its limit between steps (loading, presolve, the root LP), not
#: inside one. On the placement models (OR-Tools 9.15) the overrun was at most 2.9e-6 per
#: variable and constraint (a 6,000-item model: 0.017); this keeps a margin above it.
OVERRUN_PER_ITEM = 5e-6


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
    spent: float = 0.0  # deterministic time the solves of the call reported, summed

    def allowance(self, size: int) -> float | None:
        """The deterministic limit for one solve of a model of ``size`` variables and
        constraints: what is left of the budget less what the solve may run past its limit
        (``None`` without a deterministic budget; at most 0 when no solve fits)."""
        if self.work is None:
            return None
        return self.work - OVERRUN_PER_ITEM * size

    def charge(self, used: float) -> float:
        """Record ``used`` deterministic time of one solve against the call's budget, rounded
        to 1e-9: the solver's figure can differ in its last bit from run to run, and what is
        left of the budget sets the limits of the later solves. Returns the rounded figure,
        the only one a caller may decide by."""
        used = round(used, 9)
        self.spent += used
        if self.work is not None:
            self.work -= used
        return used

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
