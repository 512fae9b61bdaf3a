"""The cost of placement constraints: one full cycle at 5,000 nodes and 20,000 pending tasks
with node affinity on 10 % of the jobs, and with pod affinity, anti-affinity and topology
spread on 10 % of the jobs, each against the same cluster without them (the target: at most
twice the time).

Run ``python benchmarks/affinity_report.py`` (``--quick``: 640 nodes and 10,000 tasks;
``--repeat N``). The clusters are ``benchmarks/benchmarks/bench_affinity.py``'s and
``bench_pod_affinity.py``'s. Times are CPU times (median of the repeats), the runs
interleaved so a busy neighbour slows both alike.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchmarks.bench_affinity import affinity_cluster_dict
from benchmarks.bench_pod_affinity import pod_affinity_cluster_dict
from gangsched import Snapshot, schedule

#: The target: a cycle with affinity within this many cycles without.
TARGET_RATIO = 2.0


def measure(nodes: int, pending: int, repeat: int = 3, *, pods: bool = False) -> dict[str, Any]:
    """Interleaved CPU times of one cycle without and with the constraints (node affinity, or
    with ``pods`` the pod constraints), and what each placed."""
    build = pod_affinity_cluster_dict if pods else affinity_cluster_dict
    plain = Snapshot.from_dict(build(nodes, pending, 0.0))
    constrained = Snapshot.from_dict(build(nodes, pending, 0.1))
    times: dict[str, list[float]] = {"without": [], "with": []}
    placed: dict[str, int] = {}
    for _ in range(repeat):
        for key, snap in (("without", plain), ("with", constrained)):
            gc.collect()
            start = time.process_time()
            out = schedule(snap)
            times[key].append(time.process_time() - start)
            placed[key] = len(out.binds) + len(out.pipelined)
    if pods:
        carrying = sum(1 for t in constrained.tasks if t.pod_constrained)
    else:
        carrying = sum(1 for t in constrained.tasks if t.node_affinity is not None)
    without = statistics.median(times["without"])
    with_ = statistics.median(times["with"])
    return {
        "nodes": nodes,
        "pending": pending,
        "tasks_with_affinity": carrying,
        "without": without,
        "with": with_,
        "ratio": with_ / without,
        "placed": placed,
    }


def section(quick: bool, repeat: int = 3) -> str:
    nodes, pending = (640, 10_000) if quick else (5000, 20_000)
    out = []
    for pods, what in ((False, "node affinity"), (True, "pod (anti-)affinity and spread")):
        m = measure(nodes, pending, repeat, pods=pods)
        verdict = "ok" if m["ratio"] <= TARGET_RATIO else "OVER TARGET"
        out.append(
            f"{what}: {m['nodes']} nodes, {m['pending']} pending tasks, "
            f"{m['tasks_with_affinity']} constrained (10 % of the jobs)\n"
            f"  cycle without: {m['without']:.2f} s, with: {m['with']:.2f} s, "
            f"ratio {m['ratio']:.2f} (target <= {TARGET_RATIO:g}: {verdict})\n"
            f"  placed without: {m['placed']['without']}, with: {m['placed']['with']}"
        )
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(section(args.quick, args.repeat))


if __name__ == "__main__":
    main()
