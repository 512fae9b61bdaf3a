"""Event streams against :class:`~gangsched.state.ClusterState` (see :mod:`.events`).

Command line::

    python -m gangsched.testing.hostile.streams --streams 2000 --steps 60 --seed 1

prints the figures and every broken promise (category, stream, step, the operation and the
operations before it); ``--replay SEED:INDEX`` runs one stream again. The status is 1 when a
stream broke a promise.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from gangsched.testing.hostile.events import (
    STREAM_CONFIGS,
    VOLCANO_PREEMPT,
    StreamFailure,
    StreamSummary,
    replay,
    run_stream,
    run_streams,
    stream_configs,
)

__all__ = [
    "STREAM_CONFIGS",
    "VOLCANO_PREEMPT",
    "StreamFailure",
    "StreamSummary",
    "main",
    "replay",
    "run_stream",
    "run_streams",
    "stream_configs",
]


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: run seeded streams (or replay one) and print the figures; 1 when a
    stream broke a promise."""
    parser = argparse.ArgumentParser(
        prog="python -m gangsched.testing.hostile.streams",
        description="Hostile event streams against ClusterState.",
    )
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--replay", default=None, metavar="SEED:INDEX")
    args = parser.parse_args(argv)
    if args.replay is not None:
        seed, _, index = args.replay.partition(":")
        summary = replay(int(seed), int(index), args.steps)
        for failure in summary.failures:
            print("\n".join(failure.history))
    else:

        def progress(s: StreamSummary) -> None:
            if s.streams % 100 == 0:
                print(f"... {s.streams} streams, {s.operations} operations, "
                      f"{len(s.failures)} failures", file=sys.stderr)  # fmt: skip

        summary = run_streams(
            streams=args.streams, steps=args.steps, seed=args.seed, progress=progress
        )
    print(summary.table())
    return 1 if summary.failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
