"""Placement solve-time and quality table (plain script: ``python benchmarks/placement_table.py``).

For every (nodes, gang size) cell, ``SEEDS`` seeded instances are placed by the greedy and the
CP-SAT placer (1 worker, seed 0, 1 s limit); the table gives the p50 / p99 wall time of
``place`` (greedy included, as CP-SAT computes it first), how often CP-SAT proved its answer
optimal (gap 0), how often it fell back to greedy, and how often its objective beat greedy's.
The joint rows place 50 competing gangs at once (2 s and 1.0 deterministic-time limit, at least
20 seeds) and compare the placed weight with greedy's; "optimal" counts the instances where
the placed weight is proven the most possible.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchmarks._placement_data import joint_problem, problem
from gangsched.placement.cpsat import CpSatPlacer, JointCpSatPlacer
from gangsched.placement.greedy import GreedyPlacer
from gangsched.placement.problem import Status
from gangsched.placement.validate import validate_placement

NODES = (64, 640, 1523, 5000)
SIZES = (8, 64, 256)
SEEDS = int(os.environ.get("PLACEMENT_SEEDS", "20"))


def _ms(values: list[float], q: float) -> str:
    return f"{1000 * float(np.quantile(values, q)):7.1f}"


def single_rows() -> None:
    print(
        f"{'nodes':>6} {'gang':>5} | {'greedy p50':>10} {'p99':>7} | {'cpsat p50':>9} "
        f"{'p99':>7} | {'gap0':>5} {'fallbk':>6} {'better':>6} {'placed':>6}"
    )
    greedy = GreedyPlacer()
    cpsat = CpSatPlacer(time_limit_s=1.0, workers=1, seed=0)
    for n in NODES:
        for size in SIZES:
            tg: list[float] = []
            tc: list[float] = []
            gap0 = fallback = better = placed = 0
            for seed in range(SEEDS):
                p = problem(n, size, seed)
                t = time.perf_counter()
                rg = greedy.place(p)
                tg.append(time.perf_counter() - t)
                t = time.perf_counter()
                rc = cpsat.place(p)
                tc.append(time.perf_counter() - t)
                validate_placement(p, rg)
                validate_placement(p, rc)
                gp, gg = rc.gangs[0], rg.gangs[0]
                placed += gp.placed
                gap0 += rc.status in (Status.OPTIMAL, Status.INFEASIBLE)
                fallback += rc.fallback
                better += gp.placed and gg.placed and gp.objective < gg.objective
            print(
                f"{n:>6} {size:>5} | {_ms(tg, 0.5):>10} {_ms(tg, 0.99)} | {_ms(tc, 0.5):>9} "
                f"{_ms(tc, 0.99)} | {100 * gap0 / SEEDS:4.0f}% {100 * fallback / SEEDS:5.0f}% "
                f"{100 * better / SEEDS:5.0f}% {100 * placed / SEEDS:5.0f}%"
            )


def joint_rows(n_gangs: int = 50) -> None:
    print(
        f"\njoint, {n_gangs} gangs: {'nodes':>6} | {'p50 ms':>7} {'p99 ms':>7} | "
        f"{'weight greedy':>13} {'joint':>6} | {'optimal':>7} {'fallbk':>6}"
    )
    joint = JointCpSatPlacer(time_limit_s=2.0, max_deterministic_time=1.0, workers=1, seed=0)
    for n in (640, 1523):
        times: list[float] = []
        wg = wj = opt = fb = 0
        for seed in range(max(20, SEEDS)):
            p = joint_problem(n, n_gangs, seed)
            rg = GreedyPlacer().place(p)
            t = time.perf_counter()
            rj = joint.place(p)
            times.append(time.perf_counter() - t)
            validate_placement(p, rj)
            w = p.weights
            assert w is not None
            wg += sum(int(w[i]) for i, g in enumerate(rg.gangs) if g.placed)
            wj += sum(int(w[i]) for i, g in enumerate(rj.gangs) if g.placed)
            opt += rj.status is Status.OPTIMAL
            fb += rj.fallback
        k = len(times)
        print(
            f"{'':>22}{n:>6} | {_ms(times, 0.5)} {_ms(times, 0.99)} | {wg:>13} {wj:>6} | "
            f"{opt:>3}/{k:<3} {fb:>3}/{k:<3}"
        )


if __name__ == "__main__":
    single_rows()
    joint_rows()
