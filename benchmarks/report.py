"""Speed report: the scheduler against the plain reference, the memory-bound floor and peers.

Run ``python benchmarks/report.py`` (about three minutes) or ``--quick`` (about thirty
seconds). Everything runs in this one process on the seeded clusters of
``benchmarks/benchmarks/common.py``:

1. a ladder of growing clusters on which both :func:`gangsched.schedule` and the reference
   scheduler (:mod:`gangsched.testing.reference`) run; their binds, reservations and job phases
   must agree, and the speed-up is reported up to the largest size the reference finishes
   within ``--ref-budget`` seconds;
2. the scale table (640 to 50,000 nodes): cycle time, pods placed per second, peak traced
   memory of the cycle, and the cycle time over the *floor*, the time of one vectorized fit
   pass ``(request <= free).all(1)`` over the nodes × resources matrix per distinct task
   template (the least work any scheduler that looks at every node once per template does);
3. the growth exponent of cycle time in nodes at a fixed pending load;
4. the bytes a snapshot and its arrays hold per node and per task;
5. the cost guards of ``benchmarks/cost_guards.py``: small hostile inputs (long queue chains,
   a flat hypernode, a distinct taint per node, long action lists, huge tier numbers, a
   backtracking regular expression) with the fitted growth exponent of each family;
6. exact placement on irregular clusters (``benchmarks/placement_report.py``): multi-role
   gangs and joint sets of 50 gangs, proven share, p50 / p99, fallbacks, the budget rule;
7. a long-lived :class:`gangsched.ClusterState` (``benchmarks/state_report.py``): a snapshot
   and a cycle after 10 changed objects against building from records, and its memory;
8. many distinct task shapes (``benchmarks/templates_report.py``): one full cycle at 5,000
   nodes with 1,200 distinct pending templates against the floor;
9. the FGD protocol through the general engine (``benchmarks/fgd_engine_report.py``): pods/s
   of one allocate cycle against the study's fast path, per policy, same placements;
10. Volcano's preemption configuration (``enqueue, allocate, preempt, reclaim, backfill`` on
    Volcano's default tiers) against the default one, on the same snapshot, per (nodes,
    generator): the benchmark's ``cluster_dict`` and ``benchmarks/preemption_clusters.py``
    (``--preemption`` runs this table alone); each figure is the median of three cycles.
"""

from __future__ import annotations

import argparse
import functools
import gc
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cost_guards
import fgd_engine_report
import placement_report
import preemption_clusters
import state_report
import templates_report
from benchmarks.common import cluster_dict
from gangsched import Snapshot, schedule
from gangsched.config import Config
from gangsched.decisions import Decisions
from gangsched.scheduler import open_session
from gangsched.session.arrays import build_cluster_arrays
from gangsched.testing import reference

PEERS = (
    "kube-scheduler gate ≥ 270 pods/s (5,000 nodes, scheduler_perf); "
    "YuniKorn 833 pods/s (KWOK, 5,000 nodes); Volcano claims 2,000 pods/s (10k nodes). "
    "Peers include API-server round trips; these figures are one in-process cycle."
)
TARGET_NODE_BYTES, TARGET_TASK_BYTES = 1024, 512


def timed(fn: Callable[[], Any], repeat: int = 1) -> tuple[float, Any]:
    """Median CPU time of ``repeat`` calls, and the last result. The work is single-threaded,
    so on an idle machine CPU time is the wall time; on a shared one it is the fairer figure."""
    times: list[float] = []
    out = None
    for _ in range(repeat):
        gc.collect()
        start = time.process_time()
        out = fn()
        times.append(time.process_time() - start)
    return statistics.median(times), out


def traced_peak(fn: Callable[[], Any]) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def placed(d: Decisions) -> int:
    return len(d.binds) + len(d.pipelined)


def view(d: Decisions) -> tuple[Any, ...]:
    return (
        [(b.task, b.node, b.gpu_indices) for b in d.binds],
        [(p.task, p.node, p.gpu_indices) for p in d.pipelined],
        {name: s.phase for name, s in d.jobs.items()},
    )


def floor_time(snapshot: Snapshot, repeat: int = 5) -> float:
    """One ``(request <= free).all(1)`` pass per distinct pending template, median of
    ``repeat``."""
    ssn = open_session(snapshot)
    free = ssn.arrays.allocatable - ssn.used  # (n_nodes, n_resources)
    requests = [t.request for t in ssn.templates]  # each (n_resources,)

    def run() -> int:
        fits = 0
        for req in requests:
            fits += int(np.asarray((req <= free).all(1))[0])
        return fits

    return timed(run, repeat)[0]


def row(cells: list[str], widths: list[int]) -> str:
    return "  ".join(c.rjust(w) for c, w in zip(cells, widths, strict=True))


def table(header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    print(row(header, widths))
    print(row(["-" * w for w in widths], widths))
    for r in rows:
        print(row(r, widths))
    print()


def fmt_s(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def ladder(budget: float, quick: bool) -> tuple[list[list[str]], float, tuple[int, int]]:
    """Fast vs reference on growing clusters (work doubles per step) until the reference
    would exceed ``budget`` seconds. Returns the rows, the last speed-up and its size."""
    rows: list[list[str]] = []
    ratio, size = 0.0, (0, 0)
    k, last_ref = 0, 0.0
    while True:
        nodes = round(64 * 2 ** (k / 2))
        pending = 4 * nodes
        if last_ref and last_ref * 2.2 > budget:
            break
        snap = Snapshot.from_dict(cluster_dict(nodes, pending, seed=k))
        fast_t, fast = timed(functools.partial(schedule, snap), 1 if quick else 3)
        ref_t, plain = timed(functools.partial(reference.schedule, snap))
        if view(fast) != view(plain):
            raise SystemExit(f"MISMATCH between scheduler and reference at {nodes} nodes")
        ratio, size, last_ref = ref_t / fast_t, (nodes, pending), ref_t
        rows.append(
            [
                f"{nodes:,}",
                f"{pending:,}",
                f"{placed(fast):,}",
                fmt_s(fast_t),
                fmt_s(ref_t),
                f"{ratio:.0f}x",
                "agree",
            ]
        )
        k += 1
    return rows, ratio, size


def scale_row(nodes: int, pending: int, quick: bool) -> list[str]:
    snap = Snapshot.from_dict(cluster_dict(nodes, pending))
    gpus = sum(n.gpus.count for n in snap.nodes if n.gpus is not None)
    cycle, d = timed(lambda: schedule(snap), 1 if quick else 5)
    # Tracing slows a cycle several times over; above 5,000 nodes see asv's peakmem instead.
    peak = traced_peak(lambda: schedule(snap)) if nodes <= 5_000 else -1
    floor = floor_time(snap)
    return [
        f"{nodes:,}",
        f"{gpus:,}",
        f"{pending:,}",
        f"{placed(d):,}",
        fmt_s(cycle),
        f"{placed(d) / cycle:,.0f}",
        f"{floor * 1e3:.2f} ms",
        f"{cycle / floor:,.0f}",
        f"{peak / 2**20:,.0f}" if peak >= 0 else "n/a",
    ]


def growth(sizes: list[int], pending: int) -> tuple[list[list[str]], float]:
    rows, times = [], []
    for nodes in sizes:
        snap = Snapshot.from_dict(cluster_dict(nodes, pending))
        t, d = timed(functools.partial(schedule, snap), 2 if nodes <= 10_000 else 1)
        times.append(t)
        rows.append([f"{nodes:,}", f"{pending:,}", f"{placed(d):,}", fmt_s(t)])
    slope = float(np.polyfit(np.log(sizes), np.log(times), 1)[0])
    return rows, slope


def memory(nodes: int, tasks: int) -> tuple[float, float]:
    """Traced bytes held by a snapshot plus its arrays, per node and per pending task."""

    def held(d: dict[str, Any]) -> int:
        gc.collect()
        tracemalloc.start()
        try:
            snap = Snapshot.from_dict(d)
            arrays = build_cluster_arrays(snap)
            current = tracemalloc.get_traced_memory()[0]
            del snap, arrays
            return current
        finally:
            tracemalloc.stop()

    base = cluster_dict(nodes, 1)
    base["tasks"] = [t for t in base["tasks"] if t.get("phase") != "Running"]
    base["jobs"] = [j for j in base["jobs"] if j.get("phase") != "Running"]
    per_node = held(base) / nodes
    full = cluster_dict(nodes, tasks)
    full["tasks"] = [t for t in full["tasks"] if t.get("phase") != "Running"]
    full["jobs"] = [j for j in full["jobs"] if j.get("phase") != "Running"]
    per_task = (held(full) - per_node * nodes) / tasks
    return per_node, per_task


def preemption_rows(sizes: list[int], repeat: int = 3) -> list[list[str]]:
    """Per size and generator, on one snapshot: the default cycle's CPU time, the preemption
    configuration's, and their ratio; each the median of ``repeat`` cycles, the two
    configurations taking turns (a single cycle's figure moves by a tenth on a shared
    machine)."""
    config = Config.from_volcano_yaml(preemption_clusters.VOLCANO_PREEMPTION_YAML)
    rows = []
    for nodes in sizes:
        for name, build in preemption_clusters.GENERATORS:
            snap = Snapshot.from_dict(build(nodes))

            def default(s: Snapshot = snap) -> Decisions:
                return schedule(s)

            def preemption(s: Snapshot = snap) -> Decisions:
                return schedule(s, config)

            default_times, preempt_times = [], []
            for _ in range(repeat):
                default_times.append(timed(default)[0])
                t, d = timed(preemption)
                preempt_times.append(t)
            default_t = statistics.median(default_times)
            preempt_t = statistics.median(preempt_times)
            evicted = len(d.evictions)
            rows.append(
                [
                    f"{nodes:,}",
                    name,
                    f"{len(snap.tasks):,}",
                    f"{evicted:,}",
                    fmt_s(default_t),
                    fmt_s(preempt_t),
                    f"{preempt_t / default_t:.1f}x",
                ]
            )
    return rows


PREEMPTION_HEADER = [
    "nodes",
    "generator",
    "tasks",
    "evicted",
    "default cycle",
    "preemption cycle",
    "ratio",
]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes only (about 30 s)")
    ap.add_argument(
        "--ref-budget",
        type=float,
        default=None,
        help="seconds the reference may take on the largest ladder size (default 60; 4 quick)",
    )
    ap.add_argument(
        "--preemption", action="store_true", help="only the preemption configuration's table"
    )
    args = ap.parse_args(argv)
    quick = bool(args.quick)
    if args.preemption:
        print("10. Volcano's preemption configuration against the default one (CPU times)\n")
        table(
            PREEMPTION_HEADER, preemption_rows([1_000, 2_000] if quick else [1_000, 2_000, 5_000])
        )
        return
    budget = args.ref_budget if args.ref_budget is not None else (4.0 if quick else 60.0)
    started = time.perf_counter()

    print("1. Scheduler vs reference (same process, same snapshots; decisions must agree)\n")
    rows, ratio, (n, p) = ladder(budget, quick)
    table(["nodes", "pending", "placed", "cycle", "reference", "speed-up", "check"], rows)
    print(
        f"Speed-up at the largest size the reference ran ({n:,} nodes, {p:,} tasks): {ratio:.0f}x\n"
    )

    print("2. Scale: one full cycle (enqueue, allocate, backfill), default configuration\n")
    sizes = (
        [(640, 2_000), (1_213, 4_000), (5_000, 5_000)]
        if quick
        else [(640, 10_000), (1_213, 10_000), (5_000, 20_000), (50_000, 20_000)]
    )
    header = ["nodes", "GPUs", "pending", "placed", "cycle", "pods/s", "floor", "cycle/floor"]
    table([*header, "peak MiB"], [scale_row(nn, pp, quick) for nn, pp in sizes])
    print(f"Peers (context, not like for like): {PEERS}\n")

    grow_sizes = [1_000, 2_000, 5_000] if quick else [1_000, 2_000, 5_000, 10_000, 20_000, 50_000]
    grow_pending = 2_000 if quick else 5_000
    print(f"3. Growth of cycle time in nodes at a fixed pending load ({grow_pending:,} tasks)\n")
    grow_rows, slope = growth(grow_sizes, grow_pending)
    table(["nodes", "pending", "placed", "cycle"], grow_rows)
    print(f"Fitted exponent (cycle ∝ nodes^k): k = {slope:.2f}  (target ≤ 1.1)\n")

    print("4. Memory held by a snapshot and its arrays\n")
    per_node, per_task = memory(2_000 if quick else 10_000, 5_000 if quick else 40_000)
    table(
        ["", "bytes", "target", "ratio"],
        [
            [
                "per node",
                f"{per_node:,.0f}",
                f"{TARGET_NODE_BYTES:,}",
                f"{per_node / TARGET_NODE_BYTES:.2f}",
            ],
            [
                "per task",
                f"{per_task:,.0f}",
                f"{TARGET_TASK_BYTES:,}",
                f"{per_task / TARGET_TASK_BYTES:.2f}",
            ],
        ],
    )
    print("5. Cost guards: growth of small hostile inputs (time ∝ n^k)\n")
    table(["family", "CPU time by size", "k", "verdict"], cost_guards.measure(quick))
    print(
        f"limit k ≤ {cost_guards.MAX_EXPONENT}; tier-number: slowest / fastest over tier "
        "numbers 10^1 .. 10^15, limit x3\n"
    )
    print("6. Exact placement on irregular clusters (wall times)\n")
    placement_report.section(quick)
    print("7. Long-lived cluster state (gangsched.ClusterState)\n")
    state_report.section(quick)
    print("8. Many distinct task shapes (one template per job)\n")
    templates_report.section(quick)
    print("9. FGD protocol through the general engine (openb default)\n")
    fgd_engine_report.section(quick)
    print("10. Volcano's preemption configuration against the default one (CPU times)\n")
    table(
        PREEMPTION_HEADER,
        preemption_rows([1_000, 2_000] if quick else [1_000, 2_000, 5_000]),
    )
    print(f"Total report time {time.perf_counter() - started:.0f} s (times above are CPU times)")


if __name__ == "__main__":
    main()
