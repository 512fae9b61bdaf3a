"""Placement: greedy and CP-SAT solve time per (nodes, gang size), quality tracked beside it.

CP-SAT runs with one worker, seed 0 and a 1 s limit (2 s and 1.0 deterministic time for the
joint problem), so the
numbers are comparable between machines up to their speed. Inputs come from
``_placement_data`` (seeded, nothing read from disk).
"""

from __future__ import annotations

from gangsched.placement.cpsat import CpSatPlacer, JointCpSatPlacer
from gangsched.placement.greedy import GreedyPlacer
from gangsched.placement.problem import PlacementProblem, Status

from ._placement_data import joint_problem, problem


class SingleGang:
    params = ([64, 640, 1523, 5000], [8, 64, 256])
    param_names = ("nodes", "gang")
    timeout = 300

    def setup(self, nodes: int, gang: int) -> None:
        self.problems: list[PlacementProblem] = [problem(nodes, gang, s) for s in range(5)]
        self.cpsat = CpSatPlacer(time_limit_s=1.0, workers=1, seed=0)
        self.greedy = GreedyPlacer()

    def time_greedy(self, nodes: int, gang: int) -> None:
        for p in self.problems:
            self.greedy.place(p)

    def time_cpsat(self, nodes: int, gang: int) -> None:
        for p in self.problems:
            self.cpsat.place(p)

    def track_optimal_fraction(self, nodes: int, gang: int) -> float:
        results = [self.cpsat.place(p) for p in self.problems]
        return sum(r.status is Status.OPTIMAL for r in results) / len(results)

    track_optimal_fraction.unit = "fraction"  # type: ignore[attr-defined]

    def track_fallback_fraction(self, nodes: int, gang: int) -> float:
        results = [self.cpsat.place(p) for p in self.problems]
        return sum(r.fallback for r in results) / len(results)

    track_fallback_fraction.unit = "fraction"  # type: ignore[attr-defined]


class JointGangs:
    params = ([640, 1523],)
    param_names = ("nodes",)
    timeout = 300

    def setup(self, nodes: int) -> None:
        self.problem = joint_problem(nodes, 50, 0)
        self.joint = JointCpSatPlacer(
            time_limit_s=2.0, max_deterministic_time=1.0, workers=1, seed=0
        )

    def time_joint(self, nodes: int) -> None:
        self.joint.place(self.problem)

    def track_weight_over_greedy(self, nodes: int) -> float:
        w = self.problem.weights
        assert w is not None
        greedy = GreedyPlacer().place(self.problem)
        joint = self.joint.place(self.problem)
        wg = sum(int(w[i]) for i, g in enumerate(greedy.gangs) if g.placed)
        wj = sum(int(w[i]) for i, g in enumerate(joint.gangs) if g.placed)
        return wj / max(wg, 1)

    track_weight_over_greedy.unit = "ratio"  # type: ignore[attr-defined]

    def track_optimal(self, nodes: int) -> float:
        return float(self.joint.place(self.problem).status is Status.OPTIMAL)

    track_optimal.unit = "proven"  # type: ignore[attr-defined]
