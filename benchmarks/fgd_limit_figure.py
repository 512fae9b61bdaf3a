"""FGD study: the unallocated-GPU curves beside the placement limit, as a figure and a table.

Run ``python benchmarks/fgd_limit_figure.py --out DIR`` (``--seeds 42-51`` for the curves,
``--limit-seed 42``, ``--points 80,90,100,110,120``, ``--seconds 120`` per limit point). It runs
BestFit and FGD on the default workload, computes at each point the aggregate bound
(:func:`gangsched.sim.fgd.bounds.gpu_bound`) and the per-node configuration bound and MILP packing
(:func:`gangsched.sim.fgd.limit.config_limit`) of one seed's arrivals, prints them and draws
``DIR/fgd_limit.png`` (needs matplotlib). Every packing is checked with ``validate_packing``.
Slow: a limit point takes about a minute. ``--tables DIR`` reuses the curves of an earlier
``gangsched fgd`` run.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np


def main(argv: list[str] | None = None) -> int:
    from gangsched.io.openb import load_nodes, load_pods
    from gangsched.sim.fgd import (
        discrete_tables,
        make_source,
        parse_seeds,
        run_grid,
        tuned_order,
        write_tables,
    )
    from gangsched.sim.fgd.bounds import arrived_prefix, gpu_bound, validate_packing
    from gangsched.sim.fgd.compare import read_allo_table, unallocated_series
    from gangsched.sim.fgd.limit import config_limit

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seeds", default="42-51")
    ap.add_argument("--limit-seed", type=int, default=42)
    ap.add_argument("--points", default="80,90,100,110,120")
    ap.add_argument("--seconds", type=float, default=120.0)
    ap.add_argument("--tables", default=None, help="reuse the tables 'gangsched fgd' wrote there")
    args = ap.parse_args(argv)
    out = Path(args.out)
    nodes, pods = load_nodes(), load_pods()
    if args.tables is None:
        runs = run_grid(nodes, pods, ["bestfit", "fgd"], parse_seeds(args.seeds))
        write_tables([discrete_tables(r) for r in runs], out)
    else:
        out.mkdir(parents=True, exist_ok=True)
    ours, theirs = read_allo_table(args.tables or out), read_allo_table(None)
    order = tuned_order(pods, nodes.total_gpus, 1.3, make_source("go", args.limit_seed))
    rows = []
    for pct in (int(p) for p in args.points.split(",")):
        prefix = order[: arrived_prefix(pods, order, nodes.total_gpus, pct)]
        agg = gpu_bound(nodes, pods, prefix).bound_unallocated_pct
        lim = config_limit(nodes, pods, prefix, seconds=args.seconds)
        if validate_packing(nodes, pods, lim.order, lim.placement, lim.devices):
            print(f"invalid packing at {pct} %", file=sys.stderr)
            return 1
        rows.append((pct, max(agg, lim.bound_unallocated_pct), lim.packing_unallocated_pct))
        print(f"{pct}% arrived: bound {rows[-1][1]:.2f} %, MILP packing {rows[-1][2]:.2f} %")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed; no figure", file=sys.stderr)
        return 0
    x = np.arange(131)
    win = (x >= 75) & (x <= 120)
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=120)
    for i, policy in enumerate(("05-BestFit", "06-FGD")):
        ax.plot(
            x[win],
            np.nanmedian(unallocated_series(ours, policy), axis=0)[win],
            f"C{i}-",
            label=f"{policy[3:]} (gangsched, median)",
        )
        ax.plot(
            x[win],
            np.nanmedian(unallocated_series(theirs, policy), axis=0)[win],
            f"C{i}--",
            label=f"{policy[3:]} (authors)",
        )
    xs = [r[0] for r in rows]
    ax.plot(xs, [r[1] for r in rows], "k^-", label=f"bound (seed {args.limit_seed})")
    ax.plot(xs, [r[2] for r in rows], "ks--", label=f"MILP packing (seed {args.limit_seed})")
    ax.set_xlabel("arrived workload (% of GPU capacity)")
    ax.set_ylabel("unallocated GPU (%)")
    ax.set_xlim(75, 120)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "fgd_limit.png")
    print(out / "fgd_limit.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
