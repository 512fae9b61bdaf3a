"""Exact placement with the allocate action's placer defaults: CPU time, proof and budget.

Run ``python benchmarks/placement_report.py`` (``--quick``: 3 seeds a cell, ``--seeds N``);
``benchmarks/report.py`` prints it as its last section. Three generators, seeded:

* ``regular`` — :mod:`benchmarks._placement_data`: racks of 16 under spines of 8, identical
  8-GPU nodes, one-template gangs (one gang of 256 GPUs; 50 competing gangs of 4–64 GPUs).
* ``irregular`` — :mod:`benchmarks._placement_irregular`: irregular trees (racks under no
  spine, spines listing nodes directly, a tier gap, nodes in no domain), heterogeneous nodes
  (0–8 GPUs, shared devices partly used), cordoned nodes masked out. Multi-role gangs
  (1–8-GPU workers + a CPU launcher with role minimum 1 + two half-GPU evaluators), joint sets
  of 50 mixed gangs (with the cordoned nodes masked out, and without masks), and joint sets
  of 50 one-shape gangs with the cordoned nodes masked out.
* ``openb`` — :mod:`benchmarks._placement_openb`: the openb trace's GPU machines (repeated
  past 1,213) grouped into racks, blocks and zones of like machines, occupied by the trace's
  pods, 2 % cordoned; gangs of a CPU-only parameter-server role and workers of 1/2/4/8 GPUs
  on a GPU-model selector, sizes from the ITP trace.

Placer settings are the allocate action's defaults: one worker, seed 0, deterministic budget
1.0 (``placer.deterministic-time``), no wall budget. "proven" counts OPTIMAL and INFEASIBLE;
every placement passes ``validate_placement``. "CPU/budget" is a call's CPU seconds over its
deterministic budget, "work/budget" the solver's deterministic time over it (never above 1).
The budget rows rerun a sample with a 1 s wall budget and report the slowest call against
budget + 10 %.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchmarks._placement_data import joint_problem as regular_joint
from benchmarks._placement_data import problem as regular_problem
from benchmarks._placement_irregular import (
    joint_mixed_problem,
    joint_same_problem,
    multirole_problem,
)
from benchmarks._placement_openb import joint_problem as openb_joint
from benchmarks._placement_openb import single_problem as openb_single
from gangsched.placement import (
    CpSatPlacer,
    GreedyPlacer,
    JointCpSatPlacer,
    PlacementProblem,
    Status,
    validate_placement,
)

BUDGET = 1.0
ALLOCATE = {"workers": 1, "seed": 0, "max_deterministic_time": BUDGET, "time_limit_s": None}
GENERATORS = ("regular", "irregular", "openb")


def _q(values: list[float], q: float) -> str:
    v = float(np.quantile(values, q))
    return f"{v * 1e3:.0f} ms" if v < 1 else f"{v:.2f} s"


@dataclass
class Cell:
    """What the calls of one cell measured (times in CPU seconds unless named wall)."""

    tg: list[float] = field(default_factory=list)  # greedy
    tc: list[float] = field(default_factory=list)  # CP-SAT
    tw: list[float] = field(default_factory=list)  # CP-SAT, wall
    work: list[float] = field(default_factory=list)  # the solver's deterministic time
    proven: int = 0
    optimal: int = 0
    fallback: int = 0
    gap: float = 0.0

    @property
    def n(self) -> int:
        return len(self.tc)


def _cell(
    make: Callable[[int], PlacementProblem], joint: bool, seeds: int, wall: float | None = None
) -> Cell:
    greedy = GreedyPlacer()
    cls = JointCpSatPlacer if joint else CpSatPlacer
    placer = cls(**{**ALLOCATE, "time_limit_s": wall})  # type: ignore[arg-type]
    out = Cell()
    for seed in range(seeds):
        p = make(seed)
        t = time.process_time()
        rg = greedy.place(p)
        out.tg.append(time.process_time() - t)
        t, w = time.process_time(), time.perf_counter()
        rc = placer.place(p)
        out.tc.append(time.process_time() - t)
        out.tw.append(time.perf_counter() - w)
        out.work.append(rc.work)
        validate_placement(p, rg)
        validate_placement(p, rc)
        out.proven += rc.status in (Status.OPTIMAL, Status.INFEASIBLE)
        out.optimal += rc.status is Status.OPTIMAL
        out.fallback += rc.fallback
        out.gap = max(out.gap, rc.gap)
    return out


Case = tuple[str, str, int, Callable[[int], PlacementProblem], bool, int]


def _cases(seeds: int) -> list[Case]:
    """(generator, case, nodes, problem of a seed, joint, seeds) of every cell."""
    out: list[Case] = [
        (
            "regular",
            "one template 256 GPUs",
            5_000,
            partial(regular_problem, 5_000, 256),
            False,
            max(seeds, 10),
        ),
    ]
    for nodes in (640, 1_523):
        out.append(
            (
                "regular",
                "joint 50 one-template",
                nodes,
                partial(regular_joint, nodes, 50),
                True,
                seeds,
            )
        )
    for nodes in (1_523, 5_000):
        for gpus in (8, 64, 256):
            out.append(
                (
                    "irregular",
                    f"multi-role {gpus} GPUs",
                    nodes,
                    partial(multirole_problem, nodes, gpus),
                    False,
                    seeds,
                )
            )
    for nodes in (640, 1_523):
        out += [
            (
                "irregular",
                "joint 50 mixed, masked",
                nodes,
                partial(joint_mixed_problem, nodes),
                True,
                seeds,
            ),
            ("irregular", "joint 50 mixed, no mask", nodes, partial(_unmasked, nodes), True, seeds),
            (
                "irregular",
                "joint 50 same, masked",
                nodes,
                partial(joint_same_problem, nodes),
                True,
                seeds,
            ),
        ]
    for nodes in (1_213, 5_000):
        for gpus in (8, 64, 256):
            out.append(
                (
                    "openb",
                    f"PS + workers {gpus} GPUs",
                    nodes,
                    partial(openb_single, nodes, gpus),
                    False,
                    seeds,
                )
            )
    for nodes in (640, 1_213):
        out.append(
            ("openb", "joint 50 PS + workers", nodes, partial(openb_joint, nodes), True, seeds)
        )
    return out


def _unmasked(nodes: int, seed: int) -> PlacementProblem:
    return joint_mixed_problem(nodes, seed, masked=False)


def rows(seeds: int) -> tuple[list[list[str]], list[list[str]]]:
    """The per-cell rows and the per-generator summary rows."""
    out: list[list[str]] = []
    pooled = {g: Cell() for g in GENERATORS}
    for generator, case, nodes, make, joint, k in _cases(seeds):
        r = _cell(make, joint, k)
        out.append(
            [
                generator,
                case,
                f"{nodes:,}",
                f"{r.proven}/{r.n}",
                f"{r.optimal}/{r.n}",
                _q(r.tc, 0.5),
                _q(r.tc, 0.99),
                f"{max(r.tc) / BUDGET:.2f}",
                f"{max(r.work) / BUDGET:.3f}",
                f"{r.fallback}/{r.n}",
                f"{r.gap:.3f}",
                _q(r.tg, 0.5),
            ]
        )
        acc = pooled[generator]
        acc.tc += r.tc
        acc.work += r.work
        acc.proven += r.proven
    summary: list[list[str]] = []
    for generator in GENERATORS:
        acc = pooled[generator]
        share = acc.proven / acc.n
        p99 = float(np.quantile(acc.tc, 0.99))
        worst = max(acc.tc) / BUDGET
        met = p99 <= 1.0 and share >= 0.95 and worst <= 1.1
        summary.append(
            [
                generator,
                str(acc.n),
                _q(acc.tc, 0.5),
                _q(acc.tc, 0.99),
                f"{100 * share:.1f} %",
                f"{worst:.2f}",
                f"{max(acc.work) / BUDGET:.3f}",
                "met" if met else "MISSED",
            ]
        )
    return out, summary


def budget_rows(seeds: int, wall: float = 1.0) -> list[list[str]]:
    """The slowest call of a sample with a ``wall`` s budget, against budget + 10 %."""
    out: list[list[str]] = []
    cases: list[tuple[str, Callable[[int], PlacementProblem], bool]] = [
        ("multi-role 256 GPUs, 5,000 nodes", partial(multirole_problem, 5_000, 256), False),
        ("joint 50 mixed, 1,523 nodes", partial(joint_mixed_problem, 1_523), True),
        ("openb joint 50, 1,213 nodes", partial(openb_joint, 1_213), True),
    ]
    for name, make, joint in cases:
        r = _cell(make, joint, seeds, wall=wall)
        worst = max(r.tw)
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
        f"Exact placement, allocate's defaults (1 worker, seed 0, deterministic budget"
        f" {BUDGET}, no wall budget); {k} seeds a cell; p50 / p99: CPU time of one place call;"
        f" {_load()} at the start\n"
    )
    header = ["generator", "case", "nodes", "proven", "optimal", "p50", "p99", "CPU/budget"]
    header += ["work/budget", "fallback", "max gap", "greedy p50"]
    cells, summary = rows(k)
    table(header, cells)
    print("Per generator (every call of its cells; targets: p99 <= 1 s CPU, proven >= 95 %,")
    print("no call above its budget + 10 %)\n")
    head = ["generator", "calls", "p50", "p99", "proven", "max CPU/budget", "max work/budget"]
    table([*head, "targets"], summary)
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
