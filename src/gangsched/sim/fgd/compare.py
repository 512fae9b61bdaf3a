"""Compare our allocation table with the authors' (median unallocated GPU % over seeds).

Both inputs are ``analysis_allo_discrete.csv`` files (``workload, sc_policy, tune, seed,
total_gpus, 0..130``). For each policy present in both and each checkpoint (arrived = 90, 100, 110,
130 %), the median over seeds of ``100 - allocation`` is computed on each side; the report lists
both medians, their difference, and the largest absolute difference.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from gangsched.errors import SnapshotError
from gangsched.io.openb import read_vendored_text

__all__ = [
    "CHECKPOINTS",
    "DEFAULT_WORKLOAD",
    "AlloTable",
    "Comparison",
    "compare_tables",
    "format_comparison",
    "format_limits",
    "read_allo_table",
    "table_workloads",
    "unallocated_series",
]

CHECKPOINTS = (90, 100, 110, 130)
EXPECTED_PACKAGE_DIR = "fgd_expected"
ALLO_FILE = "analysis_allo_discrete.csv"
#: The workload of the paper's main figures.
DEFAULT_WORKLOAD = "openb_pod_list_default"

# policy id -> seed -> 131 allocation values (NaN = empty cell)
AlloTable = dict[str, dict[int, list[float]]]


def _parse_allo(text: str, source: str, workload: str | None) -> AlloTable:
    reader = csv.DictReader(io.StringIO(text))
    fields = reader.fieldnames or []
    for col in ("sc_policy", "seed", "100"):
        if col not in fields:
            raise SnapshotError(f"missing column {col}", kind="file", name=source, field="header")
    out: AlloTable = {}
    for line, row in enumerate(reader, start=2):
        if workload is not None and row.get("workload") not in (workload, None):
            continue
        try:
            seed = int(row["seed"])
            values = [
                float(row[str(b)]) if row.get(str(b)) not in (None, "") else math.nan
                for b in range(131)
            ]
        except (ValueError, TypeError):
            raise SnapshotError(
                "malformed number", kind="file", name=source, field=f"row {line}"
            ) from None
        out.setdefault(row["sc_policy"], {})[seed] = values
    return out


def _read_table_text(path: str | Path) -> tuple[Path, str]:
    """The allocation table file (``path`` or ``path/analysis_allo_discrete.csv``) and its text."""
    p = Path(path)
    if p.is_dir():
        p = p / ALLO_FILE
    try:
        return p, p.read_text(encoding="utf-8")
    except OSError as exc:
        raise SnapshotError(f"cannot read: {exc.strerror}", kind="file", name=str(p)) from None
    except UnicodeDecodeError:
        raise SnapshotError("not UTF-8 text", kind="file", name=str(p)) from None


def read_allo_table(path: str | Path | None, *, workload: str | None = None) -> AlloTable:
    """Read an allocation table: a file, a directory holding ``analysis_allo_discrete.csv``, or
    ``None`` for the authors' vendored table (all 17 workloads of their grid; ``workload``
    picks one, :data:`DEFAULT_WORKLOAD` when not given).

    With a path, ``workload`` keeps only that workload's rows (``None``: every row).
    """
    if path is None:
        return _parse_allo(
            read_vendored_text(EXPECTED_PACKAGE_DIR, ALLO_FILE),
            f"{EXPECTED_PACKAGE_DIR}/{ALLO_FILE}",
            workload if workload is not None else DEFAULT_WORKLOAD,
        )
    p, text = _read_table_text(path)
    return _parse_allo(text, str(p), workload)


def table_workloads(path: str | Path) -> tuple[str, ...]:
    """The distinct ``workload`` values of an allocation table (file or directory), sorted."""
    _, text = _read_table_text(path)
    reader = csv.DictReader(io.StringIO(text))
    return tuple(sorted({row.get("workload") or "" for row in reader}))


def unallocated_series(table: AlloTable, policy: str) -> npt.NDArray[np.float64]:
    """``(n_seeds, 131)`` unallocated GPU % for one policy, seeds in ascending order."""
    seeds = sorted(table.get(policy, {}))
    if not seeds:
        return np.zeros((0, 131))
    return 100.0 - np.asarray([table[policy][s] for s in seeds], dtype=np.float64)


@dataclass(frozen=True, slots=True)
class Comparison:
    """Medians per (policy, checkpoint): ours, theirs; ``max_abs_diff`` over all of them."""

    policies: tuple[str, ...]
    checkpoints: tuple[int, ...]
    ours: tuple[tuple[float, ...], ...]  # [policy][checkpoint]
    theirs: tuple[tuple[float, ...], ...]
    n_seeds_ours: tuple[int, ...]
    n_seeds_theirs: tuple[int, ...]

    @property
    def max_abs_diff(self) -> float:
        diffs = [
            abs(o - t)
            for orow, trow in zip(self.ours, self.theirs, strict=True)
            for o, t in zip(orow, trow, strict=True)
            if math.isfinite(o) and math.isfinite(t)
        ]
        return max(diffs) if diffs else math.nan

    def diff(self, policy: str, checkpoint: int) -> float:
        i = self.policies.index(policy)
        j = self.checkpoints.index(checkpoint)
        return self.ours[i][j] - self.theirs[i][j]


def _median(series: npt.NDArray[np.float64], bucket: int) -> float:
    if series.shape[0] == 0:
        return math.nan
    col = series[:, bucket]
    col = col[np.isfinite(col)]
    return float(np.median(col)) if col.size else math.nan


def compare_tables(
    ours: AlloTable, theirs: AlloTable, *, checkpoints: Sequence[int] = CHECKPOINTS
) -> Comparison:
    """Median unallocated GPU % per policy found in ``ours`` (sorted by policy id)."""
    for c in checkpoints:
        if not 0 <= c <= 130:
            raise SnapshotError(f"checkpoint {c} outside 0..130", kind="comparison")
    policies = tuple(sorted(ours))
    o_rows, t_rows, n_o, n_t = [], [], [], []
    for p in policies:
        so, st = unallocated_series(ours, p), unallocated_series(theirs, p)
        o_rows.append(tuple(_median(so, c) for c in checkpoints))
        t_rows.append(tuple(_median(st, c) for c in checkpoints))
        n_o.append(int(so.shape[0]))
        n_t.append(int(st.shape[0]))
    return Comparison(
        policies=policies,
        checkpoints=tuple(checkpoints),
        ours=tuple(o_rows),
        theirs=tuple(t_rows),
        n_seeds_ours=tuple(n_o),
        n_seeds_theirs=tuple(n_t),
    )


def format_comparison(cmp: Comparison) -> str:
    """A plain-text table: one row per policy, ours/theirs/diff per checkpoint."""
    head = f"{'policy':<17} {'seeds':>5} " + " ".join(
        f"{'@' + str(c) + '% ours':>11} {'theirs':>7} {'diff':>6}" for c in cmp.checkpoints
    )
    lines = [
        "median unallocated GPU % (100 - allocation) vs arrived workload",
        head,
        "-" * len(head),
    ]
    for i, p in enumerate(cmp.policies):
        cells = []
        for o, t in zip(cmp.ours[i], cmp.theirs[i], strict=True):
            d = o - t if math.isfinite(o) and math.isfinite(t) else math.nan
            cells.append(f"{o:>11.2f} {t:>7.2f} {d:>+6.2f}")
        lines.append(
            f"{p:<17} {cmp.n_seeds_ours[i]:>2}/{cmp.n_seeds_theirs[i]:<2} " + " ".join(cells)
        )
    lines.append(f"largest |diff|: {cmp.max_abs_diff:.2f} percentage points")
    return "\n".join(lines)


def format_limits(
    cmp: Comparison,
    checkpoint: int,
    bound_unallocated: Sequence[float],
    offline_unallocated: Sequence[float],
    seeds: Sequence[int],
) -> str:
    """Per policy, its median unallocated GPU % at ``checkpoint`` and the distance to the median
    of the bound (the least any placement of the same arrivals can leave unallocated) and of the
    best offline packing found, over ``seeds``."""
    if checkpoint not in cmp.checkpoints:
        raise SnapshotError(f"checkpoint {checkpoint} not compared", kind="comparison")
    j = cmp.checkpoints.index(checkpoint)
    bound = float(np.median(bound_unallocated)) if len(bound_unallocated) else math.nan
    offline = float(np.median(offline_unallocated)) if len(offline_unallocated) else math.nan
    seed_text = ",".join(str(x) for x in seeds)
    lines = [
        f"limit at {checkpoint}% arrived, median over seeds {seed_text}: "
        f"bound {bound:.2f} % unallocated (no placement leaves less), "
        f"offline packing {offline:.2f} %",
        f"{'policy':<17} {'ours':>7} {'to bound':>9} {'to offline':>11}",
    ]
    for i, p in enumerate(cmp.policies):
        o = cmp.ours[i][j]
        lines.append(f"{p:<17} {o:>7.2f} {o - bound:>+9.2f} {o - offline:>+11.2f}")
    return "\n".join(lines)
