"""Exact placement on irregular clusters: proven share, p50 / p99 time, fallbacks, budgets.

Run ``python benchmarks/placement_report.py`` (``--quick``: 3 seeds a cell, ``--seeds N``);
``benchmarks/report.py`` prints it as its last section. Generators (seeded, nothing read from
disk):

* ``irregular`` — :mod:`benchmarks._placement_irregular`: irregular trees (racks under no
  spine, spines listing nodes directly, a tier gap, nodes in no domain), heterogeneous nodes
  (0–8 GPUs, shared devices partly used), cordoned nodes masked out. Multi-role gangs
  (1–8-GPU workers + a CPU launcher with role minimum 1 + two half-GPU evaluators), joint sets
  of 50 mixed gangs (with the cordoned nodes masked out, and without masks), and joint sets
  of 50 one-shape gangs with the cordoned nodes masked out.
* ``regular`` — :mod:`benchmarks._placement_data`: racks of 16 under spines of 8, identical
  8-GPU nodes, one-template gangs (the one-template reference row).

Placer settings are the allocate action's: one worker, seed 0, deterministic budget 1.0,
10 s wall. "proven" counts OPTIMAL and INFEASIBLE; every placement passes
``validate_placement``. The budget rows rerun a sample with a 1 s wall budget and report the
slowest call against budget + 10 %.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchmarks._placement_data import problem as regular_problem
from benchmarks._placement_irregular import (
    joint_mixed_problem,
    joint_same_problem,
    multirole_problem,
)
from gangsched.placement import (
    CpSatPlacer,
    GreedyPlacer,
    JointCpSatPlacer,
    PlacementProblem,
    Status,
    validate_placement,
)

ALLOCATE = {"workers": 1, "seed": 0, "max_deterministic_time": 1.0, "time_limit_s": 10.0}


def _q(values: list[float], q: float) -> str:
    v = float(np.quantile(values, q))
    return f"{v * 1e3:.0f} ms" if v < 1 else f"{v:.2f} s"


def _cell(
    make: Callable[[int], PlacementProblem], joint: bool, seeds: int, wall: float = 10.0
) -> dict[str, object]:
    greedy = GreedyPlacer()
    cls = JointCpSatPlacer if joint else CpSatPlacer
    placer = cls(**{**ALLOCATE, "time_limit_s": wall})  # type: ignore[arg-type]
    tg: list[float] = []
    tc: list[float] = []
    tw: list[float] = []
    proven = optimal = fallback = 0
    gaps: list[float] = []
    for seed in range(seeds):
        p = make(seed)
        t = time.process_time()
        rg = greedy.place(p)
        tg.append(time.process_time() - t)
        t, w = time.process_time(), time.perf_counter()
        rc = placer.place(p)
        tc.append(time.process_time() - t)
        tw.append(time.perf_counter() - w)
        validate_placement(p, rg)
        validate_placement(p, rc)
        proven += rc.status in (Status.OPTIMAL, Status.INFEASIBLE)
        optimal += rc.status is Status.OPTIMAL
        fallback += rc.fallback
        gaps.append(rc.gap)
    return {
        "tg": tg,
        "tc": tc,
        "tw": tw,
        "proven": proven,
        "optimal": optimal,
        "fallback": fallback,
        "n": seeds,
        "gap": max(gaps),
    }


def rows(seeds: int) -> list[list[str]]:
    out: list[list[str]] = []

    def add(generator: str, case: str, nodes: int, r: dict[str, object]) -> None:
        n = int(r["n"])  # type: ignore[call-overload]
        out.append(
            [
                generator,
                case,
                f"{nodes:,}",
                f"{r['proven']}/{n}",
                _q(r["tc"], 0.5),  # type: ignore[arg-type]
                _q(r["tc"], 0.99),  # type: ignore[arg-type]
                _q(r["tw"], 0.99),  # type: ignore[arg-type]
                f"{r['fallback']}/{n}",
                f"{r['gap']:.3f}",
                _q(r["tg"], 0.5),  # type: ignore[arg-type]
                _q(r["tg"], 0.99),  # type: ignore[arg-type]
            ]
        )

    for nodes in (1_523, 5_000):
        for gpus in (8, 64, 256):
            r = _cell(lambda s, n=nodes, g=gpus: multirole_problem(n, g, s), False, seeds)
            add("irregular", f"multi-role {gpus} GPUs", nodes, r)
    for nodes in (640, 1_523):
        r = _cell(lambda s, n=nodes: joint_mixed_problem(n, s), True, seeds)
        add("irregular", "joint 50 mixed, masked", nodes, r)
        r = _cell(lambda s, n=nodes: joint_mixed_problem(n, s, masked=False), True, seeds)
        add("irregular", "joint 50 mixed, no mask", nodes, r)
        r = _cell(lambda s, n=nodes: joint_same_problem(n, s), True, seeds)
        add("irregular", "joint 50 same, masked", nodes, r)
    r = _cell(lambda s: regular_problem(5_000, 256, s), False, max(seeds, 10))
    add("regular", "one template 256 GPUs", 5_000, r)
    return out


def budget_rows(seeds: int, wall: float = 1.0) -> list[list[str]]:
    """The slowest call of a sample with a ``wall`` s budget, against budget + 10 %."""
    out: list[list[str]] = []
    cases: list[tuple[str, Callable[[int], PlacementProblem], bool]] = [
        ("multi-role 256 GPUs, 5,000 nodes", lambda s: multirole_problem(5_000, 256, s), False),
        ("joint 50 mixed, 1,523 nodes", lambda s: joint_mixed_problem(1_523, s), True),
    ]
    for name, make, joint in cases:
        r = _cell(make, joint, seeds, wall=wall)
        worst = max(r["tw"])  # type: ignore[type-var]
        ok = worst <= 1.1 * wall
        out.append([name, f"{wall:.1f} s", f"{worst:.3f} s", "within" if ok else "OVER"])
    return out


def table(header: list[str], body: list[list[str]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in body)) for i, h in enumerate(header)]
    print("  ".join(h.rjust(w) for h, w in zip(header, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for r in body:
        print("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)))
    print()


def _load() -> str:
    """The machine's load (1-minute average) against its cores: CPU time is what counts on a
    shared machine, wall time stretches with the load."""
    return f"load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"


def section(quick: bool, seeds: int | None = None) -> None:
    k = seeds if seeds is not None else (3 if quick else 10)
    print(
        f"Exact placement, allocate's settings (1 worker, seed 0, det 1.0, 10 s wall); {k} seeds;"
        f" p50 / p99: CPU time of one place call; {_load()} at the start\n"
    )
    header = ["generator", "case", "nodes", "proven", "p50", "p99", "wall p99", "fallback"]
    header.append("max gap")
    table([*header, "greedy p50", "greedy p99"], rows(k))
    print("Budget rule: slowest call (wall time) with a 1 s wall budget (limit: budget + 10 %)\n")
    table(["case", "budget", "slowest", "verdict"], budget_rows(max(2, k // 2)))
    print(f"{_load()} at the end")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="3 seeds a cell")
    ap.add_argument("--seeds", type=int, default=None, help="seeds a cell (default 10)")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    section(bool(args.quick), args.seeds)
    print(f"Section time {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
