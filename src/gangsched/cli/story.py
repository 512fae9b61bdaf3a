"""The main job (bare ``gangsched``, wired in by :mod:`gangsched.cli`): one job trace replayed
under ``kube-default``, ``volcano`` and ``gangsched`` (:mod:`gangsched.sim.story`), printed as
one table (or ``-o json``) and drawn as two plots."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from gangsched.cli.progress import Progress
from gangsched.errors import ConfigError

__all__ = ["DEFAULTS", "OUT_PREFIX", "add_story_arguments", "run_story_cli"]

#: The bundled run: 1,000 jobs of the Philly window on 20 nodes of 8 GPUs (docs/story.md says
#: why), one cycle every 300 s.
DEFAULTS = {"jobs": 1000, "cluster": "20x8", "rack_size": 4, "period": 300.0}
OUT_PREFIX = "gangsched-story-"
GPU_PLOT = "story_gpus.png"
SHARE_PLOT = "story_queue_share.png"
JSON_FILE = "story.json"


def add_story_arguments(p: argparse.ArgumentParser) -> None:
    """The bare command's options (the comparison's trace, cluster and output)."""
    from gangsched.sim.jobtrace import PRESETS
    from gangsched.sim.story import SCHEDULERS

    g = p.add_argument_group("the comparison (the command without a subcommand)")
    g.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        default=None,
        help="a named trace: its columns and, for philly, its bundled file (default: philly "
        "unless --trace is given)",
    )
    g.add_argument("--trace", default=None, metavar="FILE", help="a job CSV, one job a row")
    g.add_argument(
        "--columns",
        default=None,
        metavar="MAP",
        help="which column is which: arrival=COL,duration=COL,gpus=COL (or pods=COL,"
        "gpus_per_pod=COL), optional queue=, user=, priority=, status=, requested_duration=",
    )
    g.add_argument(
        "--cluster",
        default=None,
        metavar="NODESxGPUS[xCPUS]",
        help=f"identical nodes (default {DEFAULTS['cluster']}; 8 CPU cores per GPU)",
    )
    g.add_argument(
        "--nodes", default=None, metavar="FILE", help="a node CSV: name,gpus[,cpus][,rack]"
    )
    g.add_argument(
        "--rack-size",
        type=int,
        default=DEFAULTS["rack_size"],
        help="nodes per rack with --cluster; each rack is a HyperNode (%(default)s)",
    )
    g.add_argument(
        "--pod-gpus",
        default="1",
        metavar="K|node",
        help="GPUs per pod: a job of G GPUs is ceil(G/K) pods, the last one holding the "
        "remainder ('node': a node's GPUs; default 1)",
    )
    g.add_argument(
        "--queue-weights",
        default="proportional",
        metavar="proportional|equal|FILE",
        help="queue weights: each queue's share of the requested GPU-hours, all equal, or a "
        "CSV queue,weight (default proportional)",
    )
    g.add_argument(
        "--high-priority",
        type=float,
        default=0.0,
        metavar="PCT",
        help="without a priority column, give PCT %% of the jobs (drawn with --seed) a high "
        "priority and preempt for them (default 0)",
    )
    g.add_argument("--seed", type=int, default=0, help="seed of --high-priority (0)")
    g.add_argument(
        "--jobs",
        type=int,
        default=None,
        help=f"replay this many jobs (default {DEFAULTS['jobs']} of the bundled trace, all of "
        "another)",
    )
    g.add_argument("--skip", type=int, default=0, help="start after this many jobs (0)")
    g.add_argument(
        "--period",
        type=float,
        default=DEFAULTS["period"],
        help="seconds of replay time between scheduling cycles (%(default)g)",
    )
    g.add_argument(
        "--schedulers",
        default=",".join(SCHEDULERS),
        help="which to run, comma-separated (default: all three)",
    )
    g.add_argument(
        "-o",
        "--output",
        dest="story_output",
        choices=("table", "json"),
        default="table",
        help="print the table (default) or the figures as JSON",
    )
    g.add_argument(
        "--out",
        default=None,
        metavar="DIR",
        help="where story.json and the plots go (default: a new temporary folder, announced "
        "on stderr)",
    )
    g.add_argument(
        "--workers",
        type=int,
        default=2,
        help="replay the schedulers in this many processes (2)",
    )


def _pod_gpus(text: str) -> int | None:
    if text == "node":
        return None
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(
            f"expected a number of GPUs or 'node', got {text!r}", kind="option", name="--pod-gpus"
        ) from None
    if value < 1:
        raise ConfigError(f"must be >= 1, got {value}", kind="option", name="--pod-gpus")
    return value


def _load(args: argparse.Namespace) -> tuple[Any, str]:
    from gangsched.sim.jobtrace import PRESETS, parse_columns, read_jobs, read_preset

    preset = args.preset or (None if args.trace else "philly")
    base = PRESETS[preset].columns if preset else None
    if args.trace is None:
        assert preset is not None
        if args.columns is not None:
            raise ConfigError("--columns needs --trace FILE", kind="option", name="--columns")
        table = read_preset(preset)
        label = f"preset {preset} ({PRESETS[preset].vendored[1]})"  # type: ignore[index]
    else:
        if args.columns is None and base is None:
            raise ConfigError(
                "say which column is which with --columns (or name a --preset)",
                kind="option",
                name="--trace",
            )
        columns = parse_columns(args.columns, base) if args.columns else base
        assert columns is not None
        table = read_jobs(args.trace, columns)
        label = f"{Path(args.trace).name} (columns {columns.spelled()})"
    jobs = args.jobs
    if jobs is None and args.trace is None:
        jobs = DEFAULTS["jobs"]
    if args.skip < 0 or (jobs is not None and jobs < 1):
        raise ConfigError("--skip must be >= 0 and --jobs >= 1", kind="option", name="--jobs")
    if args.skip >= len(table):
        raise ConfigError(
            f"the trace has {len(table)} jobs, none after --skip {args.skip}",
            kind="option",
            name="--skip",
        )
    table = table.window(args.skip, None if jobs is None else args.skip + jobs)
    return table, label


def _cluster(args: argparse.Namespace) -> Any:
    from gangsched.sim.jobtrace import parse_cluster, read_cluster_csv

    if args.nodes is not None:
        if args.cluster is not None:
            raise ConfigError("give --cluster or --nodes, not both", kind="option", name="--nodes")
        return read_cluster_csv(args.nodes)
    return parse_cluster(args.cluster or str(DEFAULTS["cluster"]), rack_size=args.rack_size)


def _weights(text: str) -> Any:
    from gangsched.sim.jobtrace import read_queue_weights

    return text if text in ("proportional", "equal") else read_queue_weights(text)


def _schedulers(text: str) -> tuple[str, ...]:
    from gangsched.sim.story import SCHEDULERS

    names = tuple(s.strip() for s in text.split(",") if s.strip())
    for s in names:
        if s not in SCHEDULERS:
            raise ConfigError(
                f"unknown scheduler {s!r} (known: {', '.join(SCHEDULERS)})",
                kind="option",
                name="--schedulers",
            )
    if not names:
        raise ConfigError("name at least one scheduler", kind="option", name="--schedulers")
    return names


def offered_load(table: Any, gpus: int) -> float:
    """Requested GPU-time over the GPU-time the cluster offers between the first and the
    last arrival."""
    span = float(table.arrival[-1] - table.arrival[0]) if len(table) > 1 else 0.0
    if span <= 0 or gpus <= 0:
        return float("nan")
    return float((table.gpus * table.duration).sum()) / (gpus * span)


def run_story_cli(args: argparse.Namespace) -> int:
    from gangsched.sim.story import StorySettings, format_table, run_story

    start = time.perf_counter()
    table, label = _load(args)
    cluster = _cluster(args)
    schedulers = _schedulers(args.schedulers)
    settings = StorySettings(
        pod_gpus=_pod_gpus(args.pod_gpus),
        queue_weights=_weights(args.queue_weights),
        high_priority_pct=args.high_priority,
        seed=args.seed,
        period=args.period,
    )
    if args.workers < 1:
        raise ConfigError("must be >= 1", kind="option", name="--workers")
    from gangsched.config import Config
    from gangsched.sim.replay import ReplayOptions

    ReplayOptions(config=Config.default(), period=args.period)  # a bad --period, before any work
    load = offered_load(table, cluster.total_gpus)
    header = (
        f"{label}: {len(table)} jobs over {float(table.arrival[-1]) / 3600:.1f} h of arrivals, "
        f"{len(set(table.queue))} queue(s); {cluster.label} ({cluster.total_gpus} GPUs); offered "
        f"load {load:.2f}; pods of {args.pod_gpus} GPU(s); a cycle every {args.period:g} s"
    )
    print(f"replaying {', '.join(schedulers)}: {header}", file=sys.stderr)
    if args.out is None:
        out = Path(tempfile.mkdtemp(prefix=OUT_PREFIX))
        print(
            f"writing story.json and the plots to {out}/ (choose with --out DIR)", file=sys.stderr
        )
    else:
        out = Path(args.out)
    bar = Progress(sys.stderr, "schedulers", unit="run")
    try:
        bar.step(0, len(schedulers), "replaying")
        runs = run_story(table, cluster, settings, schedulers, workers=args.workers)
        bar.step(len(schedulers), len(schedulers), "done")
    finally:
        bar.close()
    from gangsched.sim.replay.result import output_dir

    out = output_dir(out)
    parameters: dict[str, object] = {
        "trace": label,
        "jobs": len(table),
        "skip": args.skip,
        "arrival_span_s": float(table.arrival[-1]),
        "queues": len(set(table.queue)),
        "cluster": cluster.label,
        "gpus": cluster.total_gpus,
        "offered_load": round(load, 3),
        "pod_gpus": args.pod_gpus,
        "queue_weights": args.queue_weights,
        "high_priority_pct": args.high_priority,
        "seed": args.seed,
        "period_s": args.period,
        "skipped_jobs": runs[0].skipped,
    }
    document = {
        "parameters": parameters,
        "schedulers": {r.scheduler: r.metrics for r in runs},
    }
    text = json.dumps(document, indent=2)
    (out / JSON_FILE).write_text(text + "\n", encoding="utf-8")
    if args.story_output == "json":
        print(text)
    else:
        print(format_table(runs, header))
    sys.stdout.flush()
    notes = [_plot_gpus(runs, out / GPU_PLOT), _plot_shares(runs, out / SHARE_PLOT)]
    if notes[0] is None:
        print(f"plots: {out / GPU_PLOT}, {out / SHARE_PLOT}", file=sys.stderr)
    else:
        print(f"gangsched: note: {notes[0]}", file=sys.stderr)
    print(f"figures: {out / JSON_FILE}  ({time.perf_counter() - start:.0f}s)", file=sys.stderr)
    return 0


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


_SKIPPED = "matplotlib is not installed (pip install 'gangsched[plot]'); plots skipped"


def _plot_gpus(runs: Sequence[Any], path: Path) -> str | None:
    """GPUs running jobs and GPUs held idle by half-placed gangs over time, per scheduler."""
    plt = _pyplot()
    if plt is None:
        return _SKIPPED
    fig, axes = plt.subplots(len(runs), 1, figsize=(8, 2.2 * len(runs) + 0.6), sharex=True, dpi=110)
    axes = np.atleast_1d(axes)
    for ax, run in zip(axes, runs, strict=True):
        s = run.series
        hours = s.time / 3600.0
        ax.fill_between(
            hours, 0, s.busy, step="post", color="C2", alpha=0.7, linewidth=0, label="running jobs"
        )
        ax.fill_between(
            hours,
            s.busy,
            s.busy + s.held_idle,
            step="post",
            color="C3",
            alpha=0.8,
            linewidth=0,
            label="held idle (half-placed gangs)",
        )
        ax.axhline(run.total_gpus, color="k", linewidth=0.8, linestyle=":", label="GPUs")
        ax.set_ylabel("GPUs")
        ax.set_title(run.scheduler, fontsize=9, loc="left")
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=7, loc="upper right")
    axes[-1].set_xlabel("replay time (h)")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return None


def _plot_shares(runs: Sequence[Any], path: Path) -> str | None:
    """Per-queue share of the GPUs over time (solid) against its deserved share (dotted), for
    the queues with the most deserved GPU-time."""
    plt = _pyplot()
    if plt is None:
        return _SKIPPED
    fig, axes = plt.subplots(len(runs), 1, figsize=(8, 2.2 * len(runs) + 0.6), sharex=True, dpi=110)
    axes = np.atleast_1d(axes)
    # The same four queues in every panel: those deserving the most GPU-time in the first run.
    first = runs[0].series
    w = np.append(np.diff(first.time), 0.0)
    top = np.argsort(-(first.tenant_fair * w[:, None]).sum(axis=0), kind="stable")[:4]
    for ax, run in zip(axes, runs, strict=True):
        s = run.series
        hours = s.time / 3600.0
        for k, q in enumerate(top.tolist()):
            pct_used = 100.0 * s.tenant_used[:, q] / max(run.total_gpus, 1)
            pct_fair = 100.0 * s.tenant_fair[:, q] / max(run.total_gpus, 1)
            ax.step(
                hours, pct_used, where="post", color=f"C{k}", linewidth=0.9, label=run.tenants[q]
            )
            ax.step(hours, pct_fair, where="post", color=f"C{k}", linewidth=0.9, linestyle=":")
        ax.set_ylabel("% of GPUs")
        ax.set_title(f"{run.scheduler} (dotted: deserved)", fontsize=9, loc="left")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="upper right", ncol=4)
    axes[-1].set_xlabel("replay time (h)")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return None
