"""Long-lived cluster state: a snapshot and a cycle after a few changes against building from
records, and the memory a ``ClusterState`` holds next to its snapshot.

Two cycles are timed: one on a state whose decisions are never applied (every cycle places the
same pending tasks again), and the embedding loop, where each cycle's decisions are applied
before the next changes (the cycle then costs what changed, plus the waiting jobs it retries).

Run ``python benchmarks/state_report.py`` (``--quick``: 1,213 nodes); ``benchmarks/report.py``
prints it as a section. Clusters are ``benchmarks/benchmarks/common.py``'s; the changes are
``bench_cluster_state.Changes`` (cordons and pending-task updates, 10 objects).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchmarks.bench_cluster_state import CHANGES, Changes, memory_ratio
from benchmarks.common import cluster_dict
from gangsched import ClusterState, Config, Snapshot, schedule


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


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    section(bool(ap.parse_args(argv).quick))


if __name__ == "__main__":
    main()
