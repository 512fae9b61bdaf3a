"""The ``gangsched replay`` subcommand (wired in by :mod:`gangsched.cli`): the derived gang
replay of :mod:`gangsched.sim.gang_replay` with a progress line and a summary table."""

from __future__ import annotations

import argparse
import dataclasses
import gc
import math
import sys
import time
from pathlib import Path

import numpy as np

from gangsched.cli.common import add_command
from gangsched.cli.progress import replay_progress
from gangsched.config import Config
from gangsched.errors import ConfigError
from gangsched.fragmentation import POLICIES
from gangsched.limits import MIN_REPLAY_PERIOD

__all__ = ["add_replay_parser", "run_replay"]


def add_replay_parser(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = add_command(
        subparsers,
        "replay",
        run_replay,
        "replay openb with gangs and Helios queues through the scheduler (derived trace)",
        "A derived gang replay: openb arrivals (compressed) and run times, multi-GPU pods as "
        "single-node gangs, synthetic multi-node gangs, queues sized like the Venus VCs of the "
        "Helios data; every cycle goes through gangsched.schedule(). Prints a per-queue summary "
        "of queueing delay, job completion time and fair share.",
    )
    p.add_argument("--nodes", default=None, help="node list CSV (default: vendored openb)")
    p.add_argument("--pods", default=None, help="pod list CSV with times (default: vendored)")
    p.add_argument(
        "--node-step",
        type=int,
        default=6,
        help="keep every N-th node (6: about 1000 GPUs, the size of the Venus cluster)",
    )
    p.add_argument(
        "--time-scale", type=float, default=200.0, help="divide arrival times by this (200)"
    )
    p.add_argument(
        "--max-duration",
        type=float,
        default=172800.0,
        help="cap run times, seconds (172800 = 2 days; 0: no cap)",
    )
    p.add_argument("--gangs", type=int, default=100, help="synthetic multi-node gangs (100)")
    p.add_argument("--seed", type=int, default=0, help="seed of queues and gangs (0)")
    p.add_argument(
        "--policy",
        choices=sorted(POLICIES),
        default=None,
        help="node scorer instead of nodeorder in Volcano's default configuration",
    )
    p.add_argument("--config", default=None, help="volcano-scheduler.conf to use instead")
    p.add_argument(
        "--period", type=float, default=60.0, help="scheduling period, replay seconds (60)"
    )
    p.add_argument(
        "--retry",
        choices=("on-change", "always"),
        default=None,
        help="allocate's retry of waiting jobs (default: the configuration's, on-change)",
    )
    p.add_argument("--limit", type=int, default=None, help="replay the first N pods only")
    p.add_argument("--vc-date", default=None, help="Helios day sizing the queues (last day)")
    p.add_argument("--out", default=None, help="write summary.csv, queue_share.csv, jobs.csv")


def _plot(report: object, path: Path) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install 'gangsched[plot]'); plot skipped"
    from gangsched.sim.gang_replay import GangReport

    assert isinstance(report, GangReport)
    r = report.result
    hours = r.time / 3600.0
    share = 100.0 * r.queue_alloc / max(r.total_gpu, 1)
    top = np.argsort(-share.mean(axis=0), kind="stable")[:8]
    fig, ax = plt.subplots(figsize=(7.5, 4.2), dpi=120)
    for k, q in enumerate(top.tolist()):
        ax.step(hours, share[:, q], where="post", color=f"C{k}", label=r.queue_names[q])
        fair = 100.0 * r.queue_fair[:, q] / max(r.total_gpu, 1)
        ax.step(hours, fair, where="post", color=f"C{k}", linestyle=":", linewidth=0.8)
    ax.set_xlabel("replay time (h)")
    ax.set_ylabel("GPUs allocated (% of cluster); dotted: fair share")
    ax.set_title("derived gang replay: per-queue share (8 largest)", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return None


def _check_period(period: float) -> None:
    """``--period``: 0 (a cycle at every event) or a finite number of seconds, not so small
    that replay times divided by it overflow."""
    if not math.isfinite(period) or period < 0 or 0 < period < MIN_REPLAY_PERIOD:
        raise ConfigError(
            f"must be 0 (a cycle at every event) or a number of seconds from "
            f"{MIN_REPLAY_PERIOD:g} up, got {period:g}",
            kind="option",
            name="--period",
        )


def with_retry(config: Config, retry: str) -> Config:
    """``config`` with allocate's ``retry`` argument set to ``retry``."""
    confs = {name: dict(args) for name, args in config.configurations.items()}
    confs.setdefault("allocate", {})["retry"] = retry
    return dataclasses.replace(config, configurations=confs)


def run_replay(args: argparse.Namespace) -> int:
    from gangsched.io.openb import load_nodes, load_pods
    from gangsched.sim.gang_replay import (
        GangReplaySettings,
        build_gang_trace,
        format_summary,
        gang_config,
        run_gang_replay,
        write_report,
    )
    from gangsched.sim.openb_trace import node_subset

    if args.node_step < 1:
        raise ConfigError("must be at least 1", kind="option", name="--node-step")
    _check_period(args.period)
    nodes = load_nodes(args.nodes)
    nodes = node_subset(nodes, np.arange(0, len(nodes), args.node_step))
    pods = load_pods(args.pods)
    settings = GangReplaySettings(
        time_scale=args.time_scale,
        max_duration=args.max_duration if args.max_duration > 0 else None,
        n_gangs=args.gangs,
        seed=args.seed,
        limit=args.limit,
        vc_date=args.vc_date,
    )
    derived = build_gang_trace(nodes, pods, settings)
    # The trace's records (every job and task of the replay) live until the end: leave them
    # out of the cyclic collector's full passes, which would otherwise walk them again and
    # again as the cycles' sessions come and go (a process-wide setting: this is the
    # command's own process; the decisions do not depend on it). Each cycle's session makes
    # many short-lived objects in reference cycles (the dispatcher, gate and evaluator point
    # back at it): collecting the youngest generation every 50,000 allocations rather than
    # every 700 took the default replay from 32.2 / 31.1 s to 30.6 / 26.0 s of CPU (two
    # interleaved pairs on a loaded machine), the same output.
    gc.collect()
    gc.freeze()
    thresholds = gc.get_threshold()
    config = None
    if args.config is not None:
        from gangsched.cli.schedule import read_config

        config = read_config(args.config)
    if args.retry is not None:
        config = with_retry(
            config if config is not None else gang_config(derived.trace, args.policy), args.retry
        )
    print(
        f"{derived.label}; {len(nodes)} nodes, {nodes.total_gpus} GPUs, "
        f"{len(derived.trace.jobs)} jobs",
        file=sys.stderr,
    )
    show, close = replay_progress(sys.stderr)
    start = time.perf_counter()
    gc.set_threshold(50_000, 20, 100)
    try:
        report = run_gang_replay(
            derived, config=config, policy=args.policy, period=args.period, progress=show
        )
    finally:
        gc.set_threshold(*thresholds)
        close()
    elapsed = time.perf_counter() - start
    print(format_summary(report))
    r = report.result
    print(
        f"replayed in {elapsed:.1f}s ({r.events / max(elapsed, 1e-9):,.0f} events/s)",
        file=sys.stderr,
    )
    if args.out is not None:
        for path in write_report(report, args.out):
            print(path)
        plot = Path(args.out) / "queue_share.png"
        note = _plot(report, plot)
        if note is None:
            print(plot)
        else:
            print(f"gangsched: note: {note}", file=sys.stderr)
    return 0
