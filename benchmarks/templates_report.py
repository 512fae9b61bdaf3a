"""Many distinct task shapes: one full cycle at 5,000 nodes where almost every job has its own
request, against the memory-bound floor, and where the cycle's time goes.

Run ``python benchmarks/templates_report.py`` (``--quick``: 1,213 nodes, 300 jobs;
``--profile N``: also print the N costliest functions by own time); ``benchmarks/report.py``
prints it as a section. The cluster is ``benchmarks/benchmarks/_templates_data.py``'s: mixed
node shapes with 1 to 8 GPUs, gangs of 1 to 64 tasks, one distinct template per job. The floor
is the report's: one vectorized fit pass ``(request <= free).all(1)`` per distinct pending
template (``report.floor_time``).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchmarks._templates_data import templates_cluster_dict
from gangsched import Config, Snapshot, schedule
from gangsched.scheduler import open_session

#: The target: a cycle within this many floors.
TARGET_FLOORS = 10


def measure(nodes: int, jobs: int, repeat: int = 3) -> dict[str, Any]:
    """CPU times of building the snapshot, opening the session and one full cycle, the floor,
    and the counts behind them."""
    from report import floor_time, timed  # the report's floor and CPU timer

    data = templates_cluster_dict(nodes, jobs)
    snap = Snapshot.from_dict(data)
    config = Config.default()
    ssn = open_session(snap)
    out = schedule(snap, config)
    return {
        "nodes": nodes,
        "tasks": sum(1 for t in snap.tasks if t.node is None),
        "templates": len(ssn.templates),
        "placed": len(out.binds) + len(out.pipelined),
        "from_dict": timed(lambda: Snapshot.from_dict(data), repeat)[0],
        "open": timed(lambda: open_session(snap), repeat)[0],
        "cycle": timed(lambda: schedule(snap, config), repeat)[0],
        "floor": floor_time(snap),
    }


def profile(nodes: int, jobs: int, top: int) -> str:
    """The ``top`` costliest functions of one cycle by own time, and by cumulative time."""
    snap = Snapshot.from_dict(templates_cluster_dict(nodes, jobs))
    config = Config.default()
    prof = cProfile.Profile()
    prof.runcall(schedule, snap, config)
    text = io.StringIO()
    stats = pstats.Stats(prof, stream=text).strip_dirs()
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)
    return text.getvalue()


def section(quick: bool) -> None:
    from report import fmt_s, table  # the report's duration format and table printer

    nodes, jobs = (1_213, 300) if quick else (5_000, 1_200)
    m = measure(nodes, jobs, 1 if quick else 3)
    print(
        f"{m['nodes']:,} nodes (1-8 GPUs), {m['tasks']:,} pending tasks in gangs of 1-64, "
        f"{m['templates']:,} distinct templates, {m['placed']:,} placed (CPU times, median); "
        f"target: cycle ≤ {TARGET_FLOORS} floors\n"
    )
    table(
        ["snapshot from records", "session open", "full cycle", "floor", "cycle/floor"],
        [
            [
                fmt_s(m["from_dict"]),
                fmt_s(m["open"]),
                fmt_s(m["cycle"]),
                f"{m['floor'] * 1e3:.2f} ms",
                f"{m['cycle'] / m['floor']:,.0f}",
            ]
        ],
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--profile", type=int, default=0, metavar="N")
    args = ap.parse_args(argv)
    section(bool(args.quick))
    if args.profile:
        nodes, jobs = (1_213, 300) if args.quick else (5_000, 1_200)
        print(profile(nodes, jobs, args.profile))


if __name__ == "__main__":
    main()
