"""Placement on irregular clusters (``_placement_irregular``): multi-role gangs and joint sets
of 50 gangs, with the allocate action's placer settings (one worker, seed 0, deterministic
budget 1.0, 10 s wall). Time, proven share and fallback share are tracked."""

from __future__ import annotations

from gangsched.placement.cpsat import CpSatPlacer, JointCpSatPlacer
from gangsched.placement.greedy import GreedyPlacer
from gangsched.placement.problem import PlacementProblem, Status

from ._placement_irregular import joint_mixed_problem, joint_same_problem, multirole_problem

SETTINGS = {"workers": 1, "seed": 0, "max_deterministic_time": 1.0, "time_limit_s": 10.0}


def _proven(results: list[object]) -> float:
    ok = sum(r.status in (Status.OPTIMAL, Status.INFEASIBLE) for r in results)  # type: ignore[attr-defined]
    return ok / len(results)


class MultiRole:
    params = ([1523, 5000], [8, 64, 256])
    param_names = ("nodes", "gpus")
    timeout = 600

    def setup(self, nodes: int, gpus: int) -> None:
        self.problems: list[PlacementProblem] = [
            multirole_problem(nodes, gpus, s) for s in range(3)
        ]
        self.cpsat = CpSatPlacer(**SETTINGS)  # type: ignore[arg-type]

    def time_greedy(self, nodes: int, gpus: int) -> None:
        for p in self.problems:
            GreedyPlacer().place(p)

    def time_cpsat(self, nodes: int, gpus: int) -> None:
        for p in self.problems:
            self.cpsat.place(p)

    def track_proven_fraction(self, nodes: int, gpus: int) -> float:
        return _proven([self.cpsat.place(p) for p in self.problems])

    track_proven_fraction.unit = "fraction"  # type: ignore[attr-defined]

    def track_fallback_fraction(self, nodes: int, gpus: int) -> float:
        results = [self.cpsat.place(p) for p in self.problems]
        return sum(r.fallback for r in results) / len(results)

    track_fallback_fraction.unit = "fraction"  # type: ignore[attr-defined]


class JointIrregular:
    params = ([640, 1523], ["mixed", "same-masked"])
    param_names = ("nodes", "gangs")
    timeout = 600

    def setup(self, nodes: int, gangs: str) -> None:
        make = joint_mixed_problem if gangs == "mixed" else joint_same_problem
        self.problems = [make(nodes, s) for s in range(3)]
        self.joint = JointCpSatPlacer(**SETTINGS)

    def time_joint(self, nodes: int, gangs: str) -> None:
        for p in self.problems:
            self.joint.place(p)

    def track_proven_fraction(self, nodes: int, gangs: str) -> float:
        return _proven([self.joint.place(p) for p in self.problems])

    track_proven_fraction.unit = "fraction"  # type: ignore[attr-defined]
