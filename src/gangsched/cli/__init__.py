"""Command line: ``gangsched`` (the scheduler comparison, in :mod:`gangsched.cli.story`),
``gangsched fgd``, ``gangsched fgd demo`` (the FGD study on the built-in trace) and
``gangsched fgd compare``,
``gangsched schedule`` and ``gangsched get`` (in :mod:`gangsched.cli.schedule`),
``gangsched replay`` (in :mod:`gangsched.cli.replay`).

Each subcommand is set up by a small ``_add_<name>_parser(subparsers)`` function and run by a
``_run_<name>(args)`` function, so new subcommands slot in beside them.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import os
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, cast

from gangsched.cli.explain import add_explain_parser
from gangsched.cli.progress import Progress
from gangsched.cli.replay import add_replay_parser
from gangsched.cli.schedule import add_get_parser, add_schedule_parser
from gangsched.cli.story import add_story_arguments, run_story_cli
from gangsched.errors import GangschedError, UnimplementedPluginWarning
from gangsched.fragmentation import PAPER_POLICIES, POLICIES

if TYPE_CHECKING:
    from gangsched.sim.fgd import RunResult
    from gangsched.sim.fgd.compare import AlloTable

__all__ = ["main"]

DEMO_POLICIES = ("bestfit", "fgd")
#: Arrived % at which ``gangsched --bound`` computes the placement limit.
LIMIT_POINTS = (80, 90, 100, 110, 120)
DEMO_SEEDS = "42-44"
DEMO_OUT_PREFIX = "gangsched-fgd-"
PLOT_FILE = "fgd_fig9a.png"


def _progress(prefix: str) -> Callable[[int, int, RunResult], None]:
    """A progress bar of the grid's runs on stderr, with its ETA (see
    :class:`gangsched.cli.progress.Progress`: drawn on a terminal only)."""
    bar = Progress(sys.stderr, prefix)

    def report(done: int, total: int, run: RunResult) -> None:
        bar.step(
            done,
            total,
            f"{run.policy} seed {run.seed}: {run.n_pods} pods, {run.failed} failed",
        )

    return report


def _default_workers() -> int:
    return max(1, min(2, os.cpu_count() or 1))


def _tune_ratio(text: str) -> float:
    """argparse type of ``--tune``: a finite ratio in [0, 10] (nan and inf are refused)."""
    from gangsched.sim.fgd import MAX_TUNE

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value) or not 0 <= value <= MAX_TUNE:
        raise argparse.ArgumentTypeError(
            f"expected a finite ratio in [0, {MAX_TUNE:g}], got {text!r}"
        )
    return value


def _add_fgd_parser(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from gangsched.sim.fgd.variants import VARIANTS
    from gangsched.sim.fgd.window import WINDOW_POLICIES

    p = subparsers.add_parser(
        "fgd",
        help="replay the FGD (ATC'23) fragmentation study on an openb workload",
        description="Fill the empty openb cluster with a shuffled workload tuned to TUNE x its GPU "
        "capacity, one pod at a time, under each policy and seed; write the authors' three tables.",
    )
    p.add_argument(
        "--nodes", default=None, help="node list CSV (default: vendored openb GPU nodes)"
    )
    p.add_argument("--pods", default=None, help="pod list CSV (default: vendored openb default)")
    p.add_argument(
        "--policy",
        action="append",
        choices=sorted([*POLICIES, *VARIANTS, *WINDOW_POLICIES]),
        default=None,
        help="policy to run (repeatable; default: the paper's six and fgd-price); the "
        "*-window<k> policies are a different protocol: k arrivals placed jointly by CP-SAT",
    )
    p.add_argument("--seeds", default="42-51", help="seeds: N, N-M or a comma list (42-51)")
    p.add_argument(
        "--tune", type=_tune_ratio, default=1.3, help="workload tuning ratio, 0-10 (1.3)"
    )
    p.add_argument("--out", default=None, help="output directory (required unless 'compare')")
    p.add_argument("--workers", type=int, default=1, help="worker processes (1)")
    p.add_argument(
        "--engine",
        choices=("process", "ray"),
        default="process",
        help="run the runs in worker processes (default) or as Ray tasks (extra 'ray')",
    )
    p.add_argument(
        "--ray-address",
        default=None,
        help="Ray cluster to use with --engine ray ('auto', 'ray://host:10001'; default: local)",
    )
    p.add_argument(
        "--rng",
        choices=("go", "numpy"),
        default="go",
        help="random generator: Go's math/rand as the reference (default) or NumPy",
    )
    p.add_argument("--limit", type=int, default=None, help=argparse.SUPPRESS)
    sub = p.add_subparsers(dest="fgd_command")
    c = sub.add_parser("compare", help="compare our allocation table with the authors'")
    c.add_argument("ours", help="directory (or analysis_allo_discrete.csv) written by 'fgd'")
    c.add_argument(
        "expected",
        nargs="?",
        default=None,
        help="the authors' directory or file (default: vendored expected results)",
    )
    c.add_argument(
        "--bound",
        action="store_true",
        help="also print each policy's distance to the placement limit (an upper bound from an "
        "integer program, and an offline packing) of the same arrivals; uses --nodes/--pods",
    )
    c.add_argument("--bound-seeds", default="42-44", help="seeds of the limit (42-44)")
    c.add_argument("--arrived", type=int, default=100, help="arrived %% of the limit (100)")
    d = sub.add_parser(
        "demo",
        help="the study on the built-in openb trace under BestFit and FGD, against the paper",
        description="Replay the FGD study on the built-in openb trace under BestFit and FGD "
        "and compare with the paper's numbers; writes the tables and a plot.",
    )
    d.add_argument("--seeds", default=DEMO_SEEDS, help=f"seeds ({DEMO_SEEDS})")
    d.add_argument("--limit", type=int, default=None, help=argparse.SUPPRESS)
    d.add_argument(
        "--out",
        default=None,
        metavar="DIR",
        help="where the demo writes its tables and plot (default: a new temporary folder, "
        "announced on stderr)",
    )
    d.add_argument("--workers", type=int, default=_default_workers(), help="worker processes")
    d.add_argument(
        "--bound",
        action="store_true",
        help="also compute the placement limit (bound and offline packing) of the first seed's "
        "arrivals at 80-120 %% and draw it in the plot (slower: about a minute)",
    )
    p.set_defaults(handler=_run_fgd)


def _run_fgd(args: argparse.Namespace) -> int:
    from gangsched.io.openb import load_nodes, load_pods
    from gangsched.sim.fgd import discrete_tables, parse_seeds, run_grid, write_tables
    from gangsched.sim.fgd.compare import compare_tables, format_comparison, read_allo_table

    if args.fgd_command == "demo":
        return _run_demo(args)
    if args.fgd_command == "compare":
        from gangsched.sim.fgd.compare import table_workloads

        ours = read_allo_table(args.ours)
        names = table_workloads(args.ours)
        theirs = read_allo_table(args.expected, workload=names[0] if len(names) == 1 else None)
        cmp = compare_tables(ours, theirs, checkpoints=_checkpoints(args))
        print(format_comparison(cmp))
        if args.bound:
            _print_limits(args, cmp, names)
        return 0
    if args.out is None:
        print("gangsched: error: fgd: --out DIR is required", file=sys.stderr)
        return 2
    nodes = load_nodes(args.nodes)
    pods = load_pods(args.pods)
    policies = args.policy or [*PAPER_POLICIES, "fgd-price"]
    seeds = parse_seeds(args.seeds)
    runs = run_grid(
        nodes,
        pods,
        policies,
        seeds,
        tune=args.tune,
        rng=args.rng,
        workers=args.workers,
        limit=args.limit,
        progress=_progress("fgd "),
        engine=args.engine,
        address=args.ray_address,
    )
    paths = write_tables([discrete_tables(r) for r in runs], args.out)
    for path in paths:
        print(path)
    return 0


def _checkpoints(args: argparse.Namespace) -> tuple[int, ...]:
    from gangsched.sim.fgd.compare import CHECKPOINTS

    extra = (args.arrived,) if args.bound and args.arrived not in CHECKPOINTS else ()
    return tuple(sorted(CHECKPOINTS + extra))


def _print_limits(args: argparse.Namespace, cmp: Any, names: tuple[str, ...]) -> None:
    from gangsched.io.openb import load_nodes, load_pods
    from gangsched.sim.fgd import parse_seeds
    from gangsched.sim.fgd.bounds import limit_figures
    from gangsched.sim.fgd.compare import format_limits

    nodes, pods = load_nodes(args.nodes), load_pods(args.pods)
    stem = Path(pods.source).stem
    if names and stem not in names:
        print(
            f"gangsched: note: the limit is of {stem}, the table holds {', '.join(names)}",
            file=sys.stderr,
        )
    seeds = parse_seeds(args.bound_seeds)
    bar = Progress(sys.stderr, "limit", unit="seed")
    figures = []
    try:
        for i, seed in enumerate(seeds, 1):  # one seed at a time, for the progress bar
            figures += limit_figures(
                nodes, pods, [seed], args.arrived, tune=args.tune, rng=args.rng
            )
            bar.step(i, len(seeds), f"seed {seed}")
    finally:
        bar.close()
    bound = [f.bound_unallocated_pct for f in figures]
    offline = [f.offline_unallocated_pct for f in figures]
    print(format_limits(cmp, args.arrived, bound, offline, seeds))


def _plot_fig9a(
    runs_table: AlloTable,
    expected: AlloTable,
    path: Path,
    limits: Sequence[tuple[int, float, float]] = (),
) -> str | None:
    """Fig. 9(a)-style plot; returns a note instead when matplotlib is missing.

    ``limits``: (arrived %, bound, offline packing) unallocated GPU %, drawn as markers."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install 'gangsched[plot]'); plot skipped"
    import numpy as np

    from gangsched.sim.fgd.compare import unallocated_series

    x = np.arange(131)
    window = (x >= 75) & (x <= 120)
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=120)
    for i, policy in enumerate(sorted(runs_table)):
        color = f"C{i}"
        ours = unallocated_series(runs_table, policy)
        if ours.shape[0] == 0:
            continue
        with warnings.catch_warnings():  # buckets beyond a short run are all NaN
            warnings.simplefilter("ignore", RuntimeWarning)
            med = np.nanmedian(ours, axis=0)
            lo, hi = np.nanpercentile(ours, 25, axis=0), np.nanpercentile(ours, 75, axis=0)
        ax.plot(x[window], med[window], color=color, label=f"{policy} (gangsched)")
        ax.fill_between(x[window], lo[window], hi[window], color=color, alpha=0.25, linewidth=0)
        theirs = unallocated_series(expected, policy)
        if theirs.shape[0]:
            ax.plot(
                x[window],
                np.nanmedian(theirs, axis=0)[window],
                color=color,
                linestyle="--",
                label=f"{policy} (authors)",
            )
    if limits:
        xs = [x for x, _, _ in limits]
        ax.plot(xs, [b for _, b, _ in limits], "k^-", label="bound (no placement below)")
        ax.plot(xs, [o for _, _, o in limits], "ks--", label="offline packing")
    ax.set_xlim(75, 120)
    ax.set_xlabel("arrived workload (% of GPU capacity)")
    ax.set_ylabel("unallocated GPU (%)")
    ax.set_title("openb default, tune 1.3: median and 25-75 % band over seeds")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return None


def _run_demo(args: argparse.Namespace) -> int:
    from gangsched.io.openb import load_nodes, load_pods
    from gangsched.sim.fgd import discrete_tables, parse_seeds, run_grid, write_tables
    from gangsched.sim.fgd.compare import compare_tables, format_comparison, read_allo_table

    start = time.perf_counter()
    nodes = load_nodes()
    pods = load_pods()
    seeds = parse_seeds(args.seeds)
    print(
        f"FGD study on the built-in openb default: {len(nodes)} nodes, {nodes.total_gpus} GPUs, "
        f"{len(pods)} pods tuned to 1.3x; policies {', '.join(DEMO_POLICIES)}; "
        f"seeds {args.seeds}",
        file=sys.stderr,
    )
    if args.out is None:
        out = Path(tempfile.mkdtemp(prefix=DEMO_OUT_PREFIX))
        print(f"writing the tables and the plot to {out}/ (choose with --out DIR)", file=sys.stderr)
    else:
        out = Path(args.out)
    runs = run_grid(
        nodes,
        pods,
        DEMO_POLICIES,
        seeds,
        tune=1.3,
        workers=args.workers,
        limit=args.limit,
        progress=_progress("runs"),
    )
    write_tables([discrete_tables(r) for r in runs], out)
    ours = read_allo_table(out)
    theirs = read_allo_table(None)
    print(format_comparison(compare_tables(ours, theirs)))
    plot_path = out / PLOT_FILE
    limits: list[tuple[int, float, float]] = []
    if args.bound:
        from gangsched.sim.fgd.bounds import limit_figures

        bar = Progress(sys.stderr, "limit", unit="point")
        try:
            for i, pct in enumerate(LIMIT_POINTS, 1):
                fig = limit_figures(nodes, pods, seeds[:1], pct)[0]
                limits.append((pct, fig.bound_unallocated_pct, fig.offline_unallocated_pct))
                bar.step(i, len(LIMIT_POINTS), f"{pct}% arrived")
        finally:
            bar.close()
        for pct, bound, off in limits:
            print(
                f"limit at {pct}% arrived (seed {seeds[0]}): bound "
                f"{bound:.2f} %, offline packing {off:.2f} % unallocated"
            )
    note = _plot_fig9a(ours, theirs, plot_path, limits)
    if note is None:
        print(f"plot: {plot_path}")
    else:
        print(f"gangsched: note: {note}", file=sys.stderr)
    print(f"tables: {out}/  ({time.perf_counter() - start:.1f}s)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gangsched",
        description="gangsched: gang scheduling and GPU placement as a library. Without a "
        "subcommand, replays a multi-tenant GPU job trace (by default a bundled window of "
        "Microsoft's Philly trace) under three schedulers: kube-default (pod by pod), volcano "
        "(Volcano's default configuration) and gangsched (gangs, fair share, topology), and "
        "prints what each does about half-placed gangs, waiting, fair share and placement.",
    )
    from gangsched import __version__

    parser.add_argument("--version", action="version", version=f"gangsched {__version__}")
    add_story_arguments(parser)
    subparsers = parser.add_subparsers(dest="command")
    _add_fgd_parser(subparsers)
    add_schedule_parser(subparsers)
    add_get_parser(subparsers)
    add_explain_parser(subparsers)
    add_replay_parser(subparsers)
    parser.set_defaults(handler=run_story_cli)
    return parser


DEBUG_ENV = "GANGSCHED_DEBUG"
#: Exit status when standard output is a closed pipe (``gangsched ... | head -1``): the
#: status of a process killed by SIGPIPE, as the shell reports it.
EXIT_BROKEN_PIPE = 141


class _OutputError(Exception):
    """Writing to standard output failed (a full device, a closed pipe)."""

    def __init__(self, cause: OSError) -> None:
        super().__init__(cause.strerror or str(cause))
        self.cause = cause


class _GuardedStdout:
    """Standard output whose write failures are told apart from every other ``OSError``."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as exc:
            raise _OutputError(exc) from exc

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as exc:
            raise _OutputError(exc) from exc

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _say(line: str) -> None:
    """Print one line on stderr; a stderr that cannot be written is given up on quietly."""
    with contextlib.suppress(OSError, ValueError):
        print(line, file=sys.stderr, flush=True)


_python_showwarning = warnings.showwarning


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    """A skipped Volcano plugin is one ``gangsched: warning:`` line, like the CLI's other
    messages; any other warning is shown as Python shows it."""
    if issubclass(category, UnimplementedPluginWarning):
        _say(f"gangsched: warning: {message}")
    else:
        _python_showwarning(message, category, filename, lineno, file, line)


def _discard_stdout(stream: TextIO) -> None:
    """Point the real standard output at /dev/null, so the interpreter's final flush of what
    could not be written does not fail again (and print a traceback) at exit."""
    try:
        fd = stream.fileno()
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        return
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)
    except OSError:
        pass


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``gangsched`` command; returns the exit status.

    Whatever goes wrong, the user gets one line on stderr and no traceback: ``gangsched: error:
    ...`` and status 1 for bad input or options (2 for a usage error, from argparse), status
    141 quietly when stdout is a closed pipe, and ``gangsched: internal error: ...`` (status 1)
    for an unexpected exception, with a hint; ``GANGSCHED_DEBUG=1`` prints its traceback too.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    real_stdout = sys.stdout
    sys.stdout = cast(TextIO, _GuardedStdout(real_stdout))
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning
            status: int = args.handler(args)
        sys.stdout.flush()
    except GangschedError as exc:
        _say(f"gangsched: error: {exc}")
        return 1
    except _OutputError as exc:
        _discard_stdout(real_stdout)
        if isinstance(exc.cause, BrokenPipeError):
            return EXIT_BROKEN_PIPE
        _say(f"gangsched: error: cannot write the output: {exc}")
        return 1
    except KeyboardInterrupt:
        return 130
    except UnicodeDecodeError as exc:
        _say(f"gangsched: error: an input is not UTF-8 text ({exc.reason} at byte {exc.start})")
        return 1
    except Exception as exc:
        if os.environ.get(DEBUG_ENV, "") not in ("", "0"):
            traceback.print_exc()
        detail = " ".join(str(exc).split())[:500]
        _say(
            f"gangsched: internal error: {type(exc).__name__}: {detail} (please report; rerun "
            f"with {DEBUG_ENV}=1 for the traceback)"
        )
        return 1
    finally:
        sys.stdout = real_stdout
    return status


if __name__ == "__main__":
    raise SystemExit(main())
