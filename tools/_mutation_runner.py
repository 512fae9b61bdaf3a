"""What the mutation checks share (``mutate_victims.py``, ``mutate_cursors.py``): each mutant is
applied to a copy of ``src/``, the given tests run against it in a subprocess (``-x``), and the
mutant is killed when a test fails. A tool supplies its mutants and tests; this module copies
the trees, judges the mutants on a pool of copies and prints the summary."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol


class MutantLike(Protocol):
    @property
    def id(self) -> str: ...
    @property
    def module(self) -> str: ...  # path under src/gangsched
    @property
    def line(self) -> int: ...
    @property
    def description(self) -> str: ...

    def apply(self, text: bytes) -> bytes: ...


@dataclass(frozen=True)
class Result:
    id: str
    line: int
    description: str
    fate: str  # "killed", "survived", "equivalent", "timeout", "error"
    by: str  # the first failing test, or why
    seconds: float


def first_failure(output: str) -> str:
    for pattern in (r"^FAILED (\S+)", r"^ERROR (\S+)", r"^E\s+(\w+Error.*)$"):
        m = re.search(pattern, output, flags=re.M)
        if m:
            return m.group(1).split(" - ")[0]
    tail = [line for line in output.strip().splitlines() if line.strip()]
    return tail[-1] if tail else "no output"


def run_tests(src_copy: Path, tests: list[str], timeout: float, root: Path) -> tuple[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(src_copy) + os.pathsep + env.get("PYTHONPATH", "")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.setdefault("HYPOTHESIS_PROFILE", "default")
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests]
    try:
        done = subprocess.run(
            cmd, cwd=root, env=env, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return "timeout", f"no result within {timeout:.0f} s"
    if done.returncode == 0:
        return "survived", ""
    if done.returncode in (1, 2):
        return "killed", first_failure(done.stdout + done.stderr)
    return "error", f"pytest exit {done.returncode}: {first_failure(done.stdout + done.stderr)}"


def copy_tree(src_root: Path, into: Path) -> Path:
    dest = into / "src"
    shutil.copytree(src_root, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return dest


#: Without a timeout given, a mutant's tests may take this many times the unmutated run's.
TIMEOUT_FACTOR = 5.0
#: ... and at least this many seconds.
MIN_TIMEOUT = 120.0
#: The unmutated run's own limit when no timeout is given.
BASELINE_TIMEOUT = 3600.0


def judge_all(
    found: Sequence[MutantLike],
    *,
    root: Path,
    tests: list[str],
    workers: int,
    timeout: float | None,
    equivalent: Mapping[str, str],
    prefix: str,
    width: int,
) -> list[Result] | None:
    """Judge every mutant on ``workers`` copies of ``root/src``; None when the tests fail on
    the unmutated copy (nothing can be judged then). ``timeout``: seconds per mutant; None:
    :data:`TIMEOUT_FACTOR` times the unmutated run's time, at least :data:`MIN_TIMEOUT` (so a
    loaded machine does not turn slow runs into timeouts, which count as killed)."""
    src_root = root / "src"
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        base = copy_tree(src_root, Path(tmp) / "base")
        t0 = time.perf_counter()
        fate, why = run_tests(base, tests, timeout or BASELINE_TIMEOUT, root)
        if fate != "survived":
            print(f"baseline fails ({fate}: {why}); nothing to judge", file=sys.stderr)
            return None
        if timeout is None:
            timeout = max(MIN_TIMEOUT, TIMEOUT_FACTOR * (time.perf_counter() - t0))
            print(f"timeout per mutant: {timeout:.0f} s", file=sys.stderr)
        free = [copy_tree(src_root, Path(tmp) / f"w{i}") for i in range(workers)]
        originals = {m.module: (src_root / "gangsched" / m.module).read_bytes() for m in found}

        def judge(m: MutantLike) -> Result:
            copy = free.pop()
            target = copy / "gangsched" / m.module
            try:
                target.write_bytes(m.apply(originals[m.module]))
                t0 = time.perf_counter()
                fate, by = run_tests(copy, tests, timeout, root)
                took = time.perf_counter() - t0
            finally:
                target.write_bytes(originals[m.module])
                free.append(copy)
            if fate == "survived" and m.id in equivalent:
                fate, by = "equivalent", equivalent[m.id]
            print(f"{fate:9} {m.id:{width}} {by}", flush=True)
            return Result(m.id, m.line, m.description, fate, by, round(took, 1))

        with ThreadPoolExecutor(max_workers=workers) as pool:
            return list(pool.map(judge, found))


def summarize(results: list[Result], json_path: Path | None) -> int:
    """Print the tally and the survivors, write the results as JSON; 1 when one survived."""
    survived = [r for r in results if r.fate == "survived"]
    same = [r for r in results if r.fate == "equivalent"]
    killed = len(results) - len(survived) - len(same)
    print(
        f"\n{len(results)} mutants: {killed} killed, {len(same)} equivalent, "
        f"{len(survived)} survived"
    )
    for r in survived:
        print(f"  survived: {r.id} (line {r.line}): {r.description}")
    if json_path:
        json_path.write_text(json.dumps([asdict(r) for r in results], indent=1) + "\n")
    return 1 if survived else 0
