"""What a placer answers: :class:`GangPlacement` per gang, :class:`PlacementResult`, and the
rules every placer and the validator share for a placement — its objective
(:func:`placement_objective`) and its slice groups (:func:`slice_groups`). See
:mod:`gangsched.placement.problem` for the objective and the slice rule.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from gangsched.model.topology import Topology
    from gangsched.placement.problem import GangRequest, PlacementProblem

__all__ = [
    "GangPlacement",
    "PlacementResult",
    "Status",
    "placement_objective",
    "slice_groups",
    "slice_rank",
]

I64 = npt.NDArray[np.int64]


class Status(enum.Enum):
    OPTIMAL = "OPTIMAL"
    FEASIBLE = "FEASIBLE"
    INFEASIBLE = "INFEASIBLE"
    TIMED_OUT = "TIMED_OUT"
    GREEDY = "GREEDY"


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class GangPlacement:
    """Where one gang goes (or why it does not).

    ``replicas`` lists ``(template, node, gpu_indices)`` for every placed replica, sorted by
    template then node then devices. ``tier`` is the tier number of the lowest domain that
    holds every replica (0 = one node) and ``domain`` that domain's index among the domains of
    its tier; ``objective`` counts by tier rank (see the module docstring).
    """

    gang: str
    placed: bool
    replicas: tuple[tuple[int, int, tuple[int, ...]], ...] = ()
    tier: int = -1
    domain: int = -1
    objective: tuple[int, ...] = ()
    reason: str = ""

    def counts(self, n_templates: int, n_nodes: int) -> I64:
        """``(n_templates, n_nodes)`` replicas per template and node."""
        out = np.zeros((n_templates, n_nodes), dtype=np.int64)
        for t, node, _ in self.replicas:
            out[t, node] += 1
        return out


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class PlacementResult:
    """A placer's answer: one :class:`GangPlacement` per gang, in problem order.

    ``status`` is OPTIMAL / FEASIBLE (solver, with ``gap`` = relative distance to its bound),
    INFEASIBLE (proven: nothing fits), TIMED_OUT (the solver ran out of time; ``fallback`` then
    says the greedy answer is returned) or GREEDY (the heuristic answered). ``limit`` names
    the budget that cut the search short: ``"work"`` (the deterministic budget: the answer
    is still the same on every run), ``"wall"`` (the wall-clock budget: the answer depends on
    the machine's speed) or ``""`` (none); a proven answer keeps the limit that cut a step
    the proof did not need. ``work`` is the deterministic time the solver
    reported over every solve of the call (CP-SAT's ``deterministic_time``, summed; 0 for
    placers that do not solve); it never exceeds the call's deterministic budget.
    """

    gangs: tuple[GangPlacement, ...]
    status: Status
    gap: float = 0.0
    fallback: bool = False
    solve_time: float = 0.0
    limit: str = ""
    work: float = 0.0

    @property
    def placed_weight(self) -> int:
        return sum(1 for g in self.gangs if g.placed)


def slice_groups(topology: Topology, gang: GangRequest) -> I64:
    """``(n_nodes,)`` int64: per node the id of its slice group — its largest enclosing domain
    of tier ≤ ``gang.slice_tier`` (:meth:`~gangsched.model.topology.Topology.nest_group` at the
    rank of that tier; the node itself for tier 0 or when nothing of tier ≤ ``slice_tier``
    covers it). A placement of a sliced gang puts a multiple of ``slice_size`` replicas in
    every group."""
    return topology.nest_group(slice_rank(topology, gang))


def slice_rank(topology: Topology, gang: GangRequest) -> int:
    """Tier rank of a gang's slice groups (see :func:`slice_groups`; 0 without slices)."""
    return topology.rank_of(gang.slice_tier) if gang.slice_size else 0


def placement_objective(problem: PlacementProblem, gang_index: int, counts: I64) -> tuple[int, ...]:
    """Objective tuple of a placement given as ``(n_templates, n_nodes)`` counts
    (see the module docstring)."""
    topo = problem.topology
    per_node = counts.sum(axis=0)
    used = per_node > 0
    if not used.any():
        return ()
    span = topo.top_tier
    for t in range(0, topo.top_tier + 1):
        if np.unique(topo.group_of(t)[used]).size == 1:
            span = t
            break
    ds = [int(np.unique(topo.nest_group(t)[used]).size) for t in range(topo.top_tier, 0, -1)]
    waste = int(problem.emptiness[gang_index][used].sum())
    return (span, *ds, int(used.sum()), waste)
