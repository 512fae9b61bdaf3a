"""Topology-aware gang placement: problems, results, the greedy and CP-SAT placers, and the
solver-independent validator.

``CpSatPlacer`` / ``JointCpSatPlacer`` are imported lazily so that ``import gangsched.placement``
does not load OR-Tools until a CP-SAT placer is asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from gangsched.placement.greedy import GreedyPlacer
from gangsched.placement.problem import (
    GangPlacement,
    GangRequest,
    PlacementProblem,
    PlacementResult,
    Status,
    placement_objective,
)
from gangsched.placement.validate import validate_placement

if TYPE_CHECKING:
    from gangsched.placement.cpsat import CpSatPlacer, JointCpSatPlacer

__all__ = [
    "CpSatPlacer",
    "GangPlacement",
    "GangRequest",
    "GreedyPlacer",
    "JointCpSatPlacer",
    "PlacementProblem",
    "PlacementResult",
    "Placer",
    "Status",
    "placement_objective",
    "validate_placement",
]


class Placer(Protocol):
    """Anything that answers a :class:`PlacementProblem` with a :class:`PlacementResult`."""

    def place(self, problem: PlacementProblem) -> PlacementResult: ...


def __getattr__(name: str) -> Any:
    if name in ("CpSatPlacer", "JointCpSatPlacer"):
        from gangsched.placement import cpsat

        return getattr(cpsat, name)
    raise AttributeError(name)
