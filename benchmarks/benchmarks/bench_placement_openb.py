"""Placement on the openb cluster (``_placement_openb``): the trace's machines and occupancy,
gangs of a parameter-server role and GPU workers on a model selector, one at a time and 50 at
once, with the allocate action's placer defaults (one worker, seed 0, deterministic budget
1.0, no wall budget). Time, proven share and the solver's work against the budget are
tracked."""

from __future__ import annotations

from gangsched.placement.cpsat import CpSatPlacer, JointCpSatPlacer
from gangsched.placement.problem import PlacementProblem, Status

from ._placement_openb import joint_problem, single_problem

SETTINGS = {"workers": 1, "seed": 0, "max_deterministic_time": 1.0}


class OpenbSingle:
    params = ([1213, 5000], [8, 64, 256])
    param_names = ("nodes", "gpus")
    timeout = 600

    def setup(self, nodes: int, gpus: int) -> None:
        self.problems: list[PlacementProblem] = [single_problem(nodes, gpus, s) for s in range(3)]
        self.cpsat = CpSatPlacer(**SETTINGS)  # type: ignore[arg-type]

    def time_cpsat(self, nodes: int, gpus: int) -> None:
        for p in self.problems:
            self.cpsat.place(p)

    def track_proven_fraction(self, nodes: int, gpus: int) -> float:
        results = [self.cpsat.place(p) for p in self.problems]
        return sum(r.status in (Status.OPTIMAL, Status.INFEASIBLE) for r in results) / 3

    track_proven_fraction.unit = "fraction"  # type: ignore[attr-defined]

    def track_max_work_share(self, nodes: int, gpus: int) -> float:
        return max(self.cpsat.place(p).work for p in self.problems) / 1.0

    track_max_work_share.unit = "budget"  # type: ignore[attr-defined]


class OpenbJoint:
    params = ([640, 1213],)
    param_names = ("nodes",)
    timeout = 600

    def setup(self, nodes: int) -> None:
        self.problems = [joint_problem(nodes, s) for s in range(3)]
        self.joint = JointCpSatPlacer(**SETTINGS)

    def time_joint(self, nodes: int) -> None:
        for p in self.problems:
            self.joint.place(p)

    def track_proven_fraction(self, nodes: int) -> float:
        results = [self.joint.place(p) for p in self.problems]
        return sum(r.status is Status.OPTIMAL for r in results) / 3

    track_proven_fraction.unit = "fraction"  # type: ignore[attr-defined]
