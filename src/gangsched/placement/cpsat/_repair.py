"""Joint placement: a repair search that raises the weight of an incumbent.

Each gang left out (heaviest first) is tried on what the placed gangs leave (greedy); if it
does not fit, each placed gang lighter than it whose nodes it could use is taken out in turn
(lightest first), the left-out gang placed in its room and the displaced gang placed again
elsewhere if it fits — a move is kept only when it raises the placed weight. Rounds repeat
while a move was kept, until the weight reaches the bound, or a fixed number of tries
(:data:`REPAIR_TRIES`, deterministic) or the wall budget is spent. Then greedy passes over
all gangs, each with one left-out gang first (:data:`RESTARTS` at most), replace the
incumbent when they place more weight. Every placement is made by
the greedy placer on the current free state, so the result is always valid; it proves nothing
by itself (the bound does).
"""

from __future__ import annotations

import numpy as np

from gangsched.placement._common import GangView
from gangsched.placement.cpsat._budget import _Budget, now
from gangsched.placement.cpsat._extract import _apply
from gangsched.placement.greedy import by_weight, greedy_gang
from gangsched.placement.problem import GangPlacement, PlacementProblem

#: Greedy placements one repair may try.
REPAIR_TRIES = 120
#: Greedy passes over all gangs (a left-out gang first) one repair may make.
RESTARTS = 6


def repair(
    problem: PlacementProblem,
    views: list[GangView],
    may_place: list[bool],
    gangs: list[GangPlacement],
    upper: int,
    budget: _Budget,
) -> list[GangPlacement]:
    """``gangs`` improved by the moves and passes of the module docstring (a new list)."""
    w = problem.weights
    assert w is not None
    out = list(gangs)
    free = problem.free.copy()
    gpu = problem.gpu_free.copy()
    for gi, gp in enumerate(out):
        if gp.placed:
            _apply(problem, gi, gp.replicas, free, gpu)
    usable = [np.asarray(v.mask.any(axis=0)) for v in views]
    weight = sum(int(w[gi]) for gi, gp in enumerate(out) if gp.placed)
    tries = 0
    longest = budget.pass_time / max(1, len(gangs))  # the longest try so far (seconds)
    improved = True
    while improved and weight < upper:
        improved = False
        for left in by_weight(problem):
            if out[left].placed or not may_place[left]:
                continue
            if tries >= REPAIR_TRIES or not budget.room_for(longest):
                return _restarts(problem, may_place, out, weight, upper, budget)
            tries += 1
            started = now()
            gp = greedy_gang(problem, left, free, gpu)
            longest = max(longest, now() - started)
            if gp.placed:
                out[left] = gp
                weight += int(w[left])
                improved = True
                continue
            lighter = sorted(
                (
                    gi
                    for gi, p in enumerate(out)
                    if p.placed
                    and int(w[gi]) < int(w[left])
                    and usable[left][[n for _, n, _ in p.replicas]].any()
                ),
                key=lambda gi: (int(w[gi]), gi),
            )
            for victim in lighter:
                if tries >= REPAIR_TRIES or not budget.room_for(longest):
                    return _restarts(problem, may_place, out, weight, upper, budget)
                tries += 1
                started = now()
                old = out[victim]
                _apply(problem, victim, old.replicas, free, gpu, sign=-1)
                gp = greedy_gang(problem, left, free, gpu)
                if not gp.placed:
                    _apply(problem, victim, old.replicas, free, gpu)
                    longest = max(longest, now() - started)
                    continue
                back = greedy_gang(problem, victim, free, gpu)
                out[left] = gp
                weight += int(w[left])
                if back.placed:
                    out[victim] = back
                else:
                    out[victim] = _left(problem, victim, old)
                    weight -= int(w[victim])
                improved = True
                break
            if weight >= upper:
                return _restarts(problem, may_place, out, weight, upper, budget)
    return _restarts(problem, may_place, out, weight, upper, budget)


def _restarts(
    problem: PlacementProblem,
    may_place: list[bool],
    gangs: list[GangPlacement],
    weight: int,
    upper: int,
    budget: _Budget,
) -> list[GangPlacement]:
    """Greedy passes over all gangs with one left-out gang moved to the front of the
    weight order (heaviest left-out first, at most :data:`RESTARTS` passes); a pass that
    places more weight replaces the incumbent."""
    w = problem.weights
    assert w is not None
    out = gangs
    order = by_weight(problem)
    longest = budget.pass_time
    passes = 0
    for first in order:
        if weight >= upper or passes >= RESTARTS or not budget.room_for(longest):
            break
        if out[first].placed or not may_place[first]:
            continue
        passes += 1
        started = now()
        free = problem.free.copy()
        gpu = problem.gpu_free.copy()
        trial = list(out)
        for gi in [first, *(g for g in order if g != first)]:
            gp = greedy_gang(problem, gi, free, gpu)
            trial[gi] = gp if gp.placed else _left(problem, gi, out[gi])
        got = sum(int(w[gi]) for gi, gp in enumerate(trial) if gp.placed)
        if got > weight:
            out, weight = trial, got
        longest = max(longest, now() - started)
    return out


def _left(problem: PlacementProblem, gi: int, was: GangPlacement) -> GangPlacement:
    if not was.placed:
        return was
    name = problem.gangs[gi].name
    why = f"gang {name!r}: left out to place more weight of other gangs"
    return GangPlacement(gang=name, placed=False, reason=why)
