"""The trace replay's throughput, per part of the cycle, against a reference tree.

``python benchmarks/replay_report.py`` runs ``gangsched replay`` with its defaults (the derived
gang replay over the vendored openb nodes and pods: generator
``sim.gang_replay.build_gang_trace``) in a child process and prints its events per second,
the process's CPU time and the CPU of each part of the cycle: opening the session, each
action, closing, and the engine applying the decisions. ``--limit N`` replays the first N pods
only (a quick look); ``--retry always`` tries every waiting job, as Volcano does.

``--args '...'`` passes more options to ``gangsched replay``: another derived trace (more
nodes, more gangs, another seed or arrival rate), a generator the cuts were not tuned on.

``--reference DIR`` runs the same replay on another checkout (its ``src`` first on the path),
the two trees interleaved ``--repeat`` times (2), and prints each figure's ratio
(this tree / reference) per round: on a shared machine, compare ratios measured in one run.
Each child also prints a digest of its replay's summary, so a table whose digests differ says
so (the decisions moved).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import shlex
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PARTS = ("open", "enqueue", "allocate", "backfill", "close", "apply")


def _child(argv: list[str]) -> dict[str, Any]:
    """Run the replay in this process with a CPU timer around each part of the cycle."""
    import gangsched.scheduler as scheduler
    from gangsched.cli import main
    from gangsched.session import core
    from gangsched.sim.replay import engine

    cpu: dict[str, float] = defaultdict(float)

    def timed(fn: Callable[..., Any], label: str) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            start = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                cpu[label] += time.process_time() - start

        return run

    def wrap(owner: Any, name: str, label: str) -> None:
        setattr(owner, name, timed(getattr(owner, name), label))

    made_by = scheduler.make_actions

    def actions(config: Any, registry: Any) -> Any:
        made = made_by(config, registry)
        for action in made:
            if not getattr(action, "_timed", False):
                wrap(action, "execute", action.name)
                setattr(action, "_timed", True)  # noqa: B010  (not an attribute of Action)
        return made

    setattr(scheduler, "make_actions", actions)  # noqa: B010  (a module's function)
    opened = core.Session.__dict__["open"].__func__
    setattr(core.Session, "open", classmethod(timed(opened, "open")))  # noqa: B010
    wrap(scheduler, "close_session", "close")
    wrap(engine.Engine, "apply", "apply")
    out, err = io.StringIO(), io.StringIO()
    start = time.process_time()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["replay", *argv])
    total = time.process_time() - start
    rate = next(
        (
            float(line.split("(")[1].split()[0].replace(",", ""))
            for line in err.getvalue().splitlines()
            if line.startswith("replayed in")
        ),
        float("nan"),
    )
    return {
        "code": code,
        "events_per_s": rate,
        "cpu": total,
        "parts": dict(cpu),
        "digest": hashlib.sha256(out.getvalue().encode()).hexdigest()[:12],
    }


def _run(tree: Path, argv: list[str]) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(tree / "src"))
    got = subprocess.run(
        [sys.executable, str(HERE / "replay_report.py"), "--child", "--args", shlex.join(argv)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, Any] = json.loads(got.stdout.strip().splitlines()[-1])
    return result


def _row(label: str, r: dict[str, Any]) -> str:
    parts = " ".join(f"{r['parts'].get(p, 0.0):8.2f}" for p in PARTS)
    return f"{label:10s} {r['events_per_s']:9,.0f} {r['cpu']:8.2f} {parts}  {r['digest']}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reference", type=Path, default=None, help="another checkout to compare")
    p.add_argument("--repeat", type=int, default=2, help="interleaved rounds (2)")
    p.add_argument("--limit", type=int, default=None, help="replay the first N pods only")
    p.add_argument("--retry", choices=("on-change", "always"), default=None)
    p.add_argument(
        "--args",
        default="",
        help="more options of gangsched replay, one string (another derived trace: e.g. "
        "'--node-step 2 --gangs 300' or '--time-scale 400 --seed 7')",
    )
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    argv: list[str] = shlex.split(args.args)
    if args.child:  # (the options of the replay come whole in --args)
        print(json.dumps(_child(argv)))
        return 0
    if args.limit is not None:
        argv += ["--limit", str(args.limit)]
    if args.retry is not None:
        argv += ["--retry", args.retry]
    here = HERE.parent
    trees = [("this", here)] + ([("reference", args.reference)] if args.reference else [])
    print(
        f"{'tree':10s} {'events/s':>9s} {'CPU s':>8s} "
        + " ".join(f"{p:>8s}" for p in PARTS)
        + "  summary digest"
    )
    for round_ in range(1, args.repeat + 1):
        got = {}
        # Alternate which tree goes first, so drift of the machine's load splits evenly.
        order = trees if round_ % 2 else trees[::-1]
        for label, tree in order:
            got[label] = _run(tree, argv)
            print(_row(label, got[label]), flush=True)
        if args.reference is not None:
            a, b = got["this"], got["reference"]
            ratios = " ".join(
                f"{a['parts'].get(k, 0.0) / max(b['parts'].get(k, 0.0), 1e-9):8.2f}" for k in PARTS
            )
            same = "same output" if a["digest"] == b["digest"] else "OUTPUT DIFFERS"
            print(
                f"{'ratio':10s} {a['events_per_s'] / b['events_per_s']:9.2f} "
                f"{a['cpu'] / b['cpu']:8.2f} {ratios}  {same}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
