"""A relational and boundary fuzzer: inputs that attack references, numbers, sizes and encodings.

The polite fuzzer (``tests/fuzzing/test_fuzz_inputs.py``) mutates well-formed records one field at a
time. This one attacks what lies *between* records and at the *edges* of numbers:

* references that dangle or are duplicated (task → job, job → queue, task → node, hypernode
  members, queue parents), cycles among queue parents and hypernodes;
* every numeric field at 0, 1, −1, 2³¹, 2⁵³, 2⁶², 2⁶³−1 (and just past int64), huge tier numbers;
* deep trees (queue chains, hypernode towers) and wide ones (many nodes listed directly, one
  distinct taint per node), names with ``/``, unicode and control characters;
* Pipelined, Bound, Running and Releasing tasks with and without a node and GPU indices, GPU
  sharing and milli mixes, zero nodes, queues or tasks, every node cordoned;
* configurations with unknown or extreme plugin and action arguments;
* files in every encoding (UTF-8 with BOM, UTF-16, latin-1, binary junk, deep nesting) fed to
  the loaders and the command line.

Every input is one :class:`Case`. :func:`probe` runs it in the calling process: an input that is
rejected must raise a :class:`~gangsched.errors.GangschedError`; an accepted snapshot is
scheduled under each of :data:`CONFIGS` twice (the two decisions must be byte-identical), its
decisions must pass :func:`~gangsched.testing.invariants.check_all`, the snapshot must be
unmutated, and the *next* snapshot (the decisions applied) must be accepted again.

:class:`Runner` runs probes in a worker process with an address-space limit (``RLIMIT_AS``) and
a time limit; a worker that hangs or dies is replaced and the input that did it is reported.
Generators are written once against :class:`Chooser`: :class:`RandomChooser` drives them from
``random.Random(seed)`` for fast soaks, and :func:`hostile_cases` (and friends) drive them
from hypothesis draws, which shrink towards the first option of every choice.

Command line::

    python -m gangsched.testing.hostile --inputs 100000 --seed 0 --out DIR

prints a summary table and writes each failing input to ``DIR`` as JSON; ``--replay FILE``
runs one saved input again.

The fuzzer lives in private modules: its vocabulary and :class:`Case` (``hostile.case``),
snapshot attacks (``hostile.snapshots``), configurations, files and case generation
(``hostile.inputs``), probing (``hostile.probing``) and worker processes and shrinking
(``hostile.runner``); this module holds the summary and the command line.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gangsched.testing.hostile.case import (
    BOUNDARY_INTS,
    HOSTILE_NAMES,
    Case,
    Chooser,
    DrawChooser,
    RandomChooser,
)
from gangsched.testing.hostile.inputs import config_doc, generate_case, hostile_cases, text_input
from gangsched.testing.hostile.inputs import hostile_config_docs as hostile_config_docs
from gangsched.testing.hostile.inputs import hostile_snapshot_docs as hostile_snapshot_docs
from gangsched.testing.hostile.inputs import seeded_cases as seeded_cases
from gangsched.testing.hostile.probing import CONFIGS, Outcome, probe
from gangsched.testing.hostile.probing import FAILURES as FAILURES
from gangsched.testing.hostile.runner import Runner, shrink
from gangsched.testing.hostile.snapshots import snapshot_doc

__all__ = [
    "BOUNDARY_INTS",
    "CONFIGS",
    "HOSTILE_NAMES",
    "Case",
    "Chooser",
    "DrawChooser",
    "Outcome",
    "RandomChooser",
    "Runner",
    "Summary",
    "config_doc",
    "generate_case",
    "hostile_cases",
    "main",
    "probe",
    "run",
    "shrink",
    "snapshot_doc",
    "text_input",
]


# --------------------------------------------------------------------------------------------
# Summary and the command line


@dataclass
class Summary:
    """Counts per category, and per failure signature its count and first example."""

    inputs: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    signatures: dict[str, list[Any]] = field(default_factory=dict)
    seconds: float = 0.0
    written: list[str] = field(default_factory=list)

    def add(self, case: Case, outcome: Outcome, out: Path | None, keep: int = 3) -> None:
        self.inputs += 1
        self.counts[outcome.category] = self.counts.get(outcome.category, 0) + 1
        if outcome.category not in FAILURES:
            return
        entry = self.signatures.setdefault(outcome.signature, [0, case, outcome])
        entry[0] += 1
        if out is not None and entry[0] <= keep:
            out.mkdir(parents=True, exist_ok=True)
            slug = re.sub(r"[^A-Za-z0-9]+", "-", outcome.signature)[:70].strip("-")
            path = out / f"{slug}-{case.seed}-{case.index}.json"
            record = {
                "case": case.to_json(),
                "outcome": {
                    "category": outcome.category,
                    "stage": outcome.stage,
                    "signature": outcome.signature,
                    "message": outcome.message,
                    "trace": outcome.trace,
                    "seconds": outcome.seconds,
                },
            }
            try:
                text = json.dumps(record, indent=1, default=repr)
            except (RecursionError, ValueError):
                text = json.dumps({"unserialisable": repr(record)[:100_000]})
            path.write_text(text, encoding="utf-8")
            self.written.append(str(path))

    @property
    def failures(self) -> int:
        return sum(self.counts.get(k, 0) for k in FAILURES)

    def table(self) -> str:
        rows = [
            ("inputs", self.inputs),
            ("accepted", self.counts.get("accepted", 0)),
            ("rejected-typed", self.counts.get("rejected", 0)),
            ("untyped escapes", self.counts.get("escape", 0)),
            ("hangs", self.counts.get("hang", 0)),
            ("blow-ups", self.counts.get("blowup", 0)),
            ("invariant violations", self.counts.get("violation", 0)),
            ("nondeterminism", self.counts.get("nondeterminism", 0)),
            ("late rejections", self.counts.get("late-reject", 0)),
            ("not sent (harness)", self.counts.get("skipped", 0)),
            ("seconds", f"{self.seconds:.1f}"),
            ("inputs/s", f"{self.inputs / self.seconds:.1f}" if self.seconds else "-"),
        ]
        width = max(len(r[0]) for r in rows)
        lines = [f"{name:<{width}}  {value:>10}" for name, value in rows]
        if self.signatures:
            lines.append("")
            lines.append("failures by signature:")
            for sig, (count, case, outcome) in sorted(
                self.signatures.items(), key=lambda kv: -kv[1][0]
            ):
                lines.append(f"{count:>7}  {sig}")
                lines.append(f"         e.g. #{case.index} {','.join(case.attacks)[:100]}")
                lines.append(
                    f"         {outcome.message.splitlines()[0][:150] if outcome.message else ''}"
                )
        return "\n".join(lines)

    def describe(self) -> str:
        """A failure report for an assertion message."""
        return self.table()


def run(
    *,
    inputs: int,
    seed: int = 0,
    out: str | Path | None = None,
    workers: int = 1,
    time_limit: float = 10.0,
    memory_limit: int = 2**30,
    cheap: bool = False,
    cases: Sequence[Case] | None = None,
    progress: Callable[[Summary], None] | None = None,
) -> Summary:
    """Generate ``inputs`` cases from ``seed`` (or run the given ``cases``) under the limits."""
    summary = Summary()
    out_dir = Path(out) if out is not None else None
    start = time.perf_counter()
    source = iter(cases) if cases is not None else seeded_cases(seed, inputs, cheap=cheap)
    with Runner(workers=workers, time_limit=time_limit, memory_limit=memory_limit) as runner:
        for case, outcome in runner.run(source):
            summary.add(case, outcome, out_dir)
            summary.seconds = time.perf_counter() - start
            if progress is not None and summary.inputs % 1000 == 0:
                progress(summary)
    summary.seconds = time.perf_counter() - start
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m gangsched.testing.hostile``: fuzz, then print the summary; the status is 1
    when an input failed."""
    parser = argparse.ArgumentParser(
        prog="python -m gangsched.testing.hostile",
        description="Relational and boundary fuzzing of snapshots, configurations and files.",
    )
    parser.add_argument("--inputs", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="directory for failing inputs (JSON)")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--time-limit", type=float, default=10.0, help="seconds per input")
    parser.add_argument("--memory-limit", type=int, default=1024, help="MiB per input")
    parser.add_argument("--cheap", action="store_true", help="no attacks that build big inputs")
    parser.add_argument("--replay", default=None, metavar="FILE", help="run one saved input")
    parser.add_argument(
        "--shrink", action="store_true", help="shrink the first input of each signature"
    )
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    if args.replay is not None:
        record = json.loads(Path(args.replay).read_text(encoding="utf-8"))
        case = Case.from_json(record.get("case", record))
        with Runner(time_limit=args.time_limit, memory_limit=args.memory_limit << 20) as r:
            outcome = r.probe(case)
        print(f"{outcome.category} {outcome.stage} {outcome.signature}")
        print(outcome.message)
        print(outcome.trace)
        return 1 if outcome.category in FAILURES else 0

    def progress(s: Summary) -> None:
        if not args.quiet:
            rate = s.inputs / s.seconds if s.seconds else 0.0
            print(f"... {s.inputs} inputs, {s.failures} failures, {rate:.1f}/s", file=sys.stderr)

    summary = run(
        inputs=args.inputs,
        seed=args.seed,
        out=args.out,
        workers=args.workers,
        time_limit=args.time_limit,
        memory_limit=args.memory_limit << 20,
        cheap=args.cheap,
        progress=progress,
    )
    print(summary.table())
    if args.shrink and summary.signatures:
        _shrink_all(summary, args)
    return 1 if summary.failures else 0


def _shrink_all(summary: Summary, args: argparse.Namespace) -> None:
    print("\nminimal inputs:")
    limit = min(args.time_limit, 5.0)
    with Runner(time_limit=limit, memory_limit=args.memory_limit << 20) as runner:
        for sig, (_, case, outcome) in sorted(summary.signatures.items()):
            if outcome.category == "hang" or case.kind == "text":
                small = case
            else:
                small = shrink(case, sig, runner)
            shown = small.config if small.kind == "config" else small.doc
            text = json.dumps(shown, default=repr) if small.kind != "text" else repr(small.data)
            print(f"- {sig}\n  [{small.kind} {small.target}] {text[:700]}")
            if args.out is not None:
                slug = re.sub(r"[^A-Za-z0-9]+", "-", sig)[:70].strip("-")
                path = Path(args.out) / f"{slug}-min.json"
                record = {"case": small.to_json(), "signature": sig}
                with contextlib.suppress(RecursionError, ValueError):
                    path.write_text(json.dumps(record, indent=1, default=repr), encoding="utf-8")


if __name__ == "__main__":
    raise SystemExit(main())
