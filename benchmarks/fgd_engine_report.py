"""The FGD protocol through the general engine against the fast path, on openb default.

Run ``python benchmarks/fgd_engine_report.py`` (every pod of the tuned workload, the median of
three runs per engine; ``--quick``: the first 3,000 pods, one run) or ``--profile N`` (also the
N costliest functions of the general engine's bestfit run by own time); ``benchmarks/report.py``
prints it as a section. Per policy, the general engine
(:func:`gangsched.sim.openb_trace.replay_fgd` with ``engine="schedule"``: one allocate cycle
with every pod pending in arrival order, records rebuilt from the binds) and the fast path
(``engine="fast"``, :func:`gangsched.sim.fgd.run_one`) run in this one process, alternately,
and must agree on every pod's node and devices and on every record (``random`` draws
differently in each engine). The figures are CPU times of the whole run, from the node and
pod tables to the records, so ratios are measured side by side.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import sys
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gangsched.io.openb import NodeTable, PodTable, load_nodes, load_pods
from gangsched.sim.fgd import RunResult
from gangsched.sim.openb_trace import replay_fgd

POLICIES = ("bestfit", "fgd", "dotprod", "gpu-packing", "gpu-clustering", "random")
#: The targets: the general engine's pods/s over the fast path's.
TARGETS = {"bestfit": 1 / 3, "fgd": 1 / 2}
SEED = 42
FIELDS = ("placement", "devices", "arrived", "used", "frag", "idle")


def same_run(a: RunResult, b: RunResult) -> bool:
    """Whether two runs placed every pod alike and recorded the same numbers."""
    return all(np.array_equal(getattr(a, f), getattr(b, f)) for f in FIELDS) and (
        a.failed,
        a.max_gpu_used,
        a.cpu_overcommit,
    ) == (b.failed, b.max_gpu_used, b.cpu_overcommit)


def measure(
    nodes: NodeTable, pods: PodTable, policy: str, limit: int | None, repeat: int
) -> dict[str, Any]:
    """Median CPU seconds of each engine (runs alternate) and whether they agree."""
    from report import timed  # the report's CPU timer

    times: dict[str, list[float]] = {"schedule": [], "fast": []}
    runs: dict[str, RunResult] = {}
    for _ in range(repeat):
        for engine in ("schedule", "fast"):
            run = partial(replay_fgd, nodes, pods, policy, SEED, limit=limit, engine=engine)
            took, runs[engine] = timed(run)
            times[engine].append(took)
    general, fast = statistics.median(times["schedule"]), statistics.median(times["fast"])
    n = runs["fast"].n_pods
    return {
        "policy": policy,
        "pods": n,
        "general": n / general,
        "fast": n / fast,
        "ratio": fast / general,
        "same": same_run(runs["schedule"], runs["fast"]),
    }


def rows(quick: bool) -> list[list[str]]:
    nodes, pods = load_nodes(), load_pods()
    limit, repeat = (3_000, 1) if quick else (None, 3)
    out = []
    for policy in POLICIES:
        m = measure(nodes, pods, policy, limit, repeat)
        target = TARGETS.get(policy)
        verdict = "" if target is None else ("met" if m["ratio"] >= target else "not met")
        same = "yes" if m["same"] else ("no (draws differ)" if policy == "random" else "NO")
        out.append(
            [
                policy,
                f"{m['pods']:,}",
                f"{m['general']:,.0f}",
                f"{m['fast']:,.0f}",
                f"{m['ratio']:.2f}",
                "" if target is None else f">= {target:.2f} {verdict}",
                same,
            ]
        )
    return out


def section(quick: bool) -> None:
    from report import table  # the report's table printer

    print(
        f"openb default (1,213 nodes), seed {SEED}, tune 1.3, "
        f"{'first 3,000 pods, one run' if quick else 'every pod, median of 3 runs'} per engine "
        "(CPU time from the tables to the records)\n"
    )
    table(
        ["policy", "pods", "general pods/s", "fast pods/s", "general/fast", "target", "same"],
        rows(quick),
    )


def profile(top: int) -> str:
    """The ``top`` costliest functions of the general engine's bestfit run by own time."""
    nodes, pods = load_nodes(), load_pods()
    prof = cProfile.Profile()
    prof.runcall(replay_fgd, nodes, pods, "bestfit", SEED)
    text = io.StringIO()
    pstats.Stats(prof, stream=text).strip_dirs().sort_stats("tottime").print_stats(top)
    return text.getvalue()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--profile", type=int, default=0, metavar="N")
    args = ap.parse_args(argv)
    section(bool(args.quick))
    if args.profile:
        print(profile(args.profile))


if __name__ == "__main__":
    main()
