"""Long-lived cluster state: a snapshot and a cycle after a few changes against building from
records, and the memory a ``ClusterState`` holds next to its snapshot.

Two cycles are timed: one on a state whose decisions are never applied (every cycle places the
same pending tasks again), and the embedding loop, where each cycle's decisions are applied
before the next changes (the cycle then costs what changed, plus the waiting jobs it retries).

Run ``python benchmarks/state_report.py`` (``--quick``: 1,213 nodes); ``benchmarks/report.py``
prints it as a section. Clusters are ``benchmarks/benchmarks/common.py``'s; the changes are
``bench_cluster_state.Changes`` (cordons and pending-task updates, 10 objects).

A second table (``--generators``, or ``--generator NAME`` for one) times the embedding loop
on three generators: the benchmark's (``common.cluster_dict``); the heterogeneous one of the
templates report (``_templates_data.templates_cluster_dict``: a template per job), with the
same changes and with the stream below; and the openb pending-jobs one
(``_openb_jobs.openb_jobs_cluster_dict``: the 1,213 openb nodes, 5,000 jobs each of its own
shape, GPU model selectors) with its stream of changes of every kind
(``_openb_jobs.StreamChanges``: cordons, a node removed or added back, jobs added and
finished, tasks reported running).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from typing import Any, Protocol

from benchmarks._openb_jobs import StreamChanges, openb_jobs_cluster_dict
from benchmarks._templates_data import templates_cluster_dict
from benchmarks.bench_cluster_state import CHANGES, Changes, memory_ratio
from benchmarks.common import cluster_dict
from gangsched import ClusterState, Config, Snapshot, schedule


class _Changes(Protocol):
    def apply(self) -> None: ...


def _generators(quick: bool) -> dict[str, tuple[Any, Any]]:
    """Per generator: how to make its cluster (interchange form) and its changes."""
    bench = (1_213, 4_000) if quick else (5_000, 20_000)
    hetero = (1_213, 1_400) if quick else (5_000, 1_200)
    return {
        "benchmark": (lambda: cluster_dict(*bench), Changes),
        "heterogeneous": (lambda: templates_cluster_dict(*hetero), Changes),
        "heterogeneous, stream": (lambda: templates_cluster_dict(*hetero), StreamChanges),
        "openb jobs": (openb_jobs_cluster_dict, StreamChanges),
    }


def loop_ratio(make: Any, changes_of: Any, repeat: int = 5) -> dict[str, Any]:
    """The embedding loop on one generator: a cycle after the changes with the decisions
    applied, against a cycle from scratch on the records; with the counts behind them."""
    from report import timed  # the report's CPU timer

    data = make()
    config = Config.default()
    state = ClusterState(Snapshot.from_dict(data))
    state.apply(state.schedule(config))
    changes: _Changes = changes_of(state)
    changes.apply()
    state.apply(state.schedule(config))  # the second cycle's ground: one loop done

    def cycle() -> None:
        changes.apply()
        state.apply(state.schedule(config))

    loop = timed(cycle, repeat)[0]
    scratch = timed(lambda: schedule(Snapshot.from_dict(data), config), max(repeat // 2, 1))[0]
    ssn = state.__dict__["_last_session"]
    return {
        "nodes": len(ssn.snapshot.nodes),
        "templates": len(ssn.templates),
        "carried": ssn.evaluator.carried,
        "cycle": loop,
        "scratch": scratch,
        "ratio": loop / scratch,
    }


def generator_rows(quick: bool, names: list[str] | None = None) -> list[list[str]]:
    from report import fmt_s  # the report's duration format

    out = []
    for name, (make, changes_of) in _generators(quick).items():
        if names and name not in names:
            continue
        m = loop_ratio(make, changes_of)
        out.append(
            [name, f"{m['nodes']:,}", f"{m['templates']:,}", f"{m['carried']:,}",
             fmt_s(m["cycle"]), fmt_s(m["scratch"]), f"{m['ratio']:.3f}"]
        )  # fmt: skip
    return out


def rows(nodes: int, pending: int, repeat: int = 3) -> list[list[str]]:
    from report import fmt_s, timed  # the report's CPU timer and duration format

    data = cluster_dict(nodes, pending)
    config = Config.default()
    state = ClusterState(Snapshot.from_dict(data))
    changes = Changes(state)

    def changed_snapshot() -> None:
        changes.apply()
        state.snapshot()

    def changed_cycle() -> None:
        changes.apply()
        state.schedule(config)

    # The embedding loop: the binder acts on each cycle's decisions and the informer reports
    # them back (``apply``) before the next changes arrive.
    applied = ClusterState(Snapshot.from_dict(data))
    applied.apply(applied.schedule(config))
    applied_changes = Changes(applied)

    def applied_cycle() -> None:
        applied_changes.apply()
        applied.apply(applied.schedule(config))

    scratch_snap = timed(lambda: Snapshot.from_dict(data), repeat)[0]
    inc_snap = timed(changed_snapshot, max(repeat, 5))[0]
    scratch_cycle = timed(lambda: schedule(Snapshot.from_dict(data), config), repeat)[0]
    inc_cycle = timed(changed_cycle, repeat)[0]
    applied_time = timed(applied_cycle, max(repeat, 5))[0]
    snap_bytes, extra, ratio = memory_ratio(nodes, pending)
    size = f"{nodes:,} / {pending:,}"
    return [
        [size, f"snapshot after {CHANGES} changes", fmt_s(inc_snap), fmt_s(scratch_snap),
         f"{inc_snap / scratch_snap:.4f}"],
        [size, f"cycle after {CHANGES} changes", fmt_s(inc_cycle), fmt_s(scratch_cycle),
         f"{inc_cycle / scratch_cycle:.2f}"],
        [size, f"cycle after {CHANGES} changes, decisions applied", fmt_s(applied_time),
         fmt_s(scratch_cycle), f"{applied_time / scratch_cycle:.2f}"],
        [size, "memory: state + snapshot / snapshot", f"{(snap_bytes + extra) / 2**20:.0f} MiB",
         f"{snap_bytes / 2**20:.0f} MiB", f"{ratio:.2f}"],
    ]  # fmt: skip


def section(quick: bool) -> None:
    from report import table  # the report's table printer

    nodes, pending = (1_213, 4_000) if quick else (5_000, 20_000)
    print(
        "Long-lived ClusterState vs records (CPU times, median); targets: a cycle after ≤ 10 "
        "changes ≤ 0.10 of scratch, memory ≤ 1.5\n"
    )
    table(["nodes / pending", "what", "state", "from records", "ratio"], rows(nodes, pending))


def generators_section(quick: bool, names: list[str] | None = None) -> None:
    from report import table  # the report's table printer

    print(
        f"Embedding loop by generator: a cycle after ≤ {CHANGES} changes, decisions applied, "
        "against a cycle from scratch (CPU times, median); target ≤ 0.10\n"
    )
    table(
        ["generator", "nodes", "pending templates", "carried", "cycle", "scratch", "ratio"],
        generator_rows(quick, names),
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--generators", action="store_true", help="also the table by generator")
    ap.add_argument("--generator", action="append", help="only the table, these generators")
    args = ap.parse_args(argv)
    if args.generator:
        generators_section(bool(args.quick), args.generator)
        return
    section(bool(args.quick))
    if args.generators:
        generators_section(bool(args.quick))


if __name__ == "__main__":
    main()
