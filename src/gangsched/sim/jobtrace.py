"""Job-level traces (one CSV row per job) and the clusters they are replayed on.

A row is a job: when it arrived, how long it ran and how many GPUs it used, optionally which
queue (tenant, virtual cluster) it belongs to, its user, priority, final status and the run time
its owner asked for. :class:`Columns` maps those fields onto the file's column names:

* ``arrival=`` (seconds, or a date and time such as ``2017-10-09 07:01:55``, read as UTC),
  ``duration=`` (seconds), and either ``gpus=`` (GPUs of the whole job) or ``pods=`` with
  ``gpus_per_pod=``;
* optional ``queue=``, ``user=``, ``priority=`` (an integer), ``status=``,
  ``requested_duration=`` (seconds).

:func:`read_jobs` reads such a file into a :class:`JobTable`, with arrivals counted from the
first one and the rows in arrival order (the file's order among equal arrivals). Every bad
cell is a :class:`~gangsched.errors.SnapshotError` whose field names the data row (the first
row under the header is row 1) and the column: a missing column, an empty cell, a number that
is not one, a negative time or a job without GPUs.

:data:`PRESETS` name the bundled Philly window (``philly``, a vendored sample of the Microsoft
Philly 2017 trace, see ``gangsched/data/philly/SOURCE.md``) and the column spelling of the
Microsoft ITP traces (``itp``, whose files are given with a path).

:class:`ClusterSpec` is the cluster: ``NODESxGPUS[xCPUS]`` identical nodes (:func:`parse_cluster`)
grouped into racks of ``rack_size`` nodes, each rack a tier-1 HyperNode; or the rows of a node
CSV (:func:`read_cluster_csv`: ``name,gpus[,cpus][,rack]``).

Jobs become gangs by one rule (:func:`pod_sizes`): a job of ``G`` GPUs is ``ceil(G / k)`` pods
of ``k`` GPUs, ``k`` being ``pod_gpus``, the last pod holding the remainder when ``k`` does not
divide ``G`` (12 GPUs in pods of 8: pods of 8 and 4). With ``pods=`` and ``gpus_per_pod=``
columns the file's own split is kept.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import numpy.typing as npt

from gangsched.errors import ConfigError, SnapshotError
from gangsched.io.openb import read_vendored_text

__all__ = [
    "PRESETS",
    "ClusterSpec",
    "Columns",
    "JobTable",
    "Preset",
    "parse_cluster",
    "parse_columns",
    "pod_sizes",
    "read_cluster_csv",
    "read_jobs",
    "read_preset",
    "read_queue_weights",
]

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]

#: The fields a column mapping may name; the first two are required, then ``gpus`` or
#: ``pods`` with ``gpus_per_pod``.
FIELDS = (
    "arrival",
    "duration",
    "gpus",
    "pods",
    "gpus_per_pod",
    "queue",
    "user",
    "priority",
    "status",
    "requested_duration",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Columns:
    """Which column of the file holds which field (module docstring)."""

    arrival: str
    duration: str
    gpus: str | None = None
    pods: str | None = None
    gpus_per_pod: str | None = None
    queue: str | None = None
    user: str | None = None
    priority: str | None = None
    status: str | None = None
    requested_duration: str | None = None

    def __post_init__(self) -> None:
        if self.gpus is None and (self.pods is None or self.gpus_per_pod is None):
            raise ConfigError(
                "give gpus=COLUMN, or pods=COLUMN and gpus_per_pod=COLUMN",
                kind="option",
                name="--columns",
            )
        if self.gpus is not None and (self.pods is not None or self.gpus_per_pod is not None):
            raise ConfigError(
                "gpus= and pods=/gpus_per_pod= exclude each other", kind="option", name="--columns"
            )

    def spelled(self) -> str:
        """The mapping as ``--columns`` spells it."""
        return ",".join(f"{f}={getattr(self, f)}" for f in FIELDS if getattr(self, f) is not None)


def parse_columns(text: str, base: Columns | None = None) -> Columns:
    """``arrival=COL,duration=COL,gpus=COL,...`` as :class:`Columns`; fields not given keep
    their column in ``base`` (a preset's mapping) when there is one."""
    given: dict[str, str] = {}
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        key, sep, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not value:
            raise ConfigError(
                f"expected FIELD=COLUMN, got {part!r}", kind="option", name="--columns"
            )
        if key not in FIELDS:
            raise ConfigError(
                f"unknown field {key!r} (known: {', '.join(FIELDS)})",
                kind="option",
                name="--columns",
            )
        if key in given:
            raise ConfigError(f"field {key!r} given twice", kind="option", name="--columns")
        given[key] = value
    merged: dict[str, str | None] = {}
    if base is not None:
        merged = {f: getattr(base, f) for f in FIELDS}
        if "gpus" in given:
            merged["pods"] = merged["gpus_per_pod"] = None
        if "pods" in given or "gpus_per_pod" in given:
            merged["gpus"] = None
    merged.update(given)
    for required in ("arrival", "duration"):
        if not merged.get(required):
            raise ConfigError(f"missing {required}=COLUMN", kind="option", name="--columns")
    return Columns(**merged)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class Preset:
    """A named trace: its column mapping and, for a bundled one, its vendored file."""

    name: str
    columns: Columns
    vendored: tuple[str, str] | None  # (data directory, file name) under gangsched/data
    about: str


PRESETS: Mapping[str, Preset] = {
    "philly": Preset(
        "philly",
        Columns(arrival="timestamp", duration="duration", gpus="num_gpus", queue="cluster"),
        ("philly", "philly_window.csv"),
        "a window of the Microsoft Philly 2017 trace (bundled): submit time, run time, GPUs, "
        "virtual cluster as the queue",
    ),
    "itp": Preset(
        "itp",
        Columns(arrival="submission_time", duration="duration", gpus="num_gpu"),
        None,
        "a Microsoft ITP cluster file (ElasticFlow release, give it with --trace): one queue",
    ),
}


@dataclass(frozen=True, slots=True, eq=False)
class JobTable:
    """Jobs of a trace in arrival order (module docstring). Times in seconds."""

    source: str
    row: I64  # data row in the file (1 = first row under the header)
    arrival: F64  # from the first arrival
    duration: F64
    gpus: I64  # GPUs of the whole job
    pods: I64  # pods given by the file, 0 when the file gives GPUs per job
    gpus_per_pod: I64  # 0 when the file gives GPUs per job
    queue: tuple[str, ...]  # "default" without a queue column
    user: tuple[str, ...]
    priority: I64
    status: tuple[str, ...]
    requested_duration: F64  # NaN without the column
    epoch: float  # the first arrival as read (seconds since 1970 for dates)
    columns: Columns

    def __len__(self) -> int:
        return int(self.arrival.size)

    def window(self, start: int, stop: int | None) -> JobTable:
        """Rows ``start:stop`` (arrival order), arrivals again from the first of them."""
        sl = slice(start, stop)
        arrival = self.arrival[sl]
        first = float(arrival[0]) if arrival.size else 0.0
        return JobTable(
            source=self.source,
            row=self.row[sl],
            arrival=arrival - first,
            duration=self.duration[sl],
            gpus=self.gpus[sl],
            pods=self.pods[sl],
            gpus_per_pod=self.gpus_per_pod[sl],
            queue=self.queue[sl],
            user=self.user[sl],
            priority=self.priority[sl],
            status=self.status[sl],
            requested_duration=self.requested_duration[sl],
            epoch=self.epoch + first,
            columns=self.columns,
        )


def _cell_error(source: str, row: int, column: str, detail: str) -> SnapshotError:
    return SnapshotError(detail, kind="file", name=source, field=f"row {row}, column {column!r}")


def _number(source: str, row: int, column: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise _cell_error(source, row, column, f"expected a number, got {text[:40]!r}") from None
    if not math.isfinite(value):
        raise _cell_error(source, row, column, f"expected a finite number, got {text!r}")
    return value


def _time(source: str, row: int, column: str, text: str) -> float:
    """Seconds: a number, or a date and time (ISO 8601, UTC unless it says otherwise)."""
    try:
        return _number(source, row, column, text)
    except SnapshotError:
        pass
    try:
        stamp = datetime.fromisoformat(text)
    except ValueError:
        raise _cell_error(
            source, row, column, f"expected seconds or a date and time, got {text[:40]!r}"
        ) from None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    return stamp.timestamp()


def _whole(source: str, row: int, column: str, text: str, minimum: int) -> int:
    value = _number(source, row, column, text)
    if not value.is_integer() or value < minimum or value > 1 << 20:
        raise _cell_error(
            source, row, column, f"expected a whole number >= {minimum}, got {text[:40]!r}"
        )
    return int(value)


def read_jobs(path: str | Path | None, columns: Columns, *, text: str | None = None) -> JobTable:
    """Read a job CSV (``text`` when given, else the file at ``path``); see the module
    docstring for what is checked."""
    if text is None:
        if path is None:
            raise ConfigError("a job trace needs a file", kind="option", name="--trace")
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise SnapshotError(
                f"cannot read: {exc.strerror or exc}", kind="file", name=str(path)
            ) from None
    source = str(path) if path is not None else "<text>"
    reader = csv.reader(io.StringIO(text))
    header = next(reader, None)
    if not header:
        raise SnapshotError("the file is empty (no header row)", kind="file", name=source)
    header = [h.strip() for h in header]
    index: dict[str, int] = {}
    for f in FIELDS:
        name = getattr(columns, f)
        if name is None:
            continue
        if name not in header:
            raise SnapshotError(
                f"no column {name!r} for {f}= (the header has: {', '.join(header)[:200]})",
                kind="file",
                name=source,
                field="header",
            )
        index[f] = header.index(name)

    def cell(cells: list[str], row: int, f: str, *, required: bool = True) -> str | None:
        k = index.get(f)
        if k is None:
            return None
        value = cells[k].strip() if k < len(cells) else ""
        if not value and required:
            raise _cell_error(source, row, getattr(columns, f), "missing value")
        return value

    arrival: list[float] = []
    duration: list[float] = []
    gpus: list[int] = []
    pods: list[int] = []
    per_pod: list[int] = []
    queue: list[str] = []
    user: list[str] = []
    priority: list[int] = []
    status: list[str] = []
    requested: list[float] = []
    rows: list[int] = []
    for row, cells in enumerate(reader, 1):
        if not cells or all(not c.strip() for c in cells):
            continue  # blank lines (a trailing one is common)
        a = _time(source, row, columns.arrival, str(cell(cells, row, "arrival")))
        d = _number(source, row, columns.duration, str(cell(cells, row, "duration")))
        if d < 0:
            raise _cell_error(source, row, columns.duration, f"negative time {d:g}")
        if columns.gpus is not None:
            g = _whole(source, row, columns.gpus, str(cell(cells, row, "gpus")), 1)
            p = k = 0
        else:
            assert columns.pods is not None and columns.gpus_per_pod is not None
            p = _whole(source, row, columns.pods, str(cell(cells, row, "pods")), 1)
            k = _whole(source, row, columns.gpus_per_pod, str(cell(cells, row, "gpus_per_pod")), 1)
            g = p * k
        q = cell(cells, row, "queue")
        u = cell(cells, row, "user", required=False)
        pr = cell(cells, row, "priority")
        st = cell(cells, row, "status", required=False)
        rq = cell(cells, row, "requested_duration", required=False)
        rq_value = math.nan
        if rq:
            assert columns.requested_duration is not None
            rq_value = _number(source, row, columns.requested_duration, rq)
            if rq_value < 0:
                raise _cell_error(
                    source, row, columns.requested_duration, f"negative time {rq_value:g}"
                )
        arrival.append(a)
        duration.append(d)
        gpus.append(g)
        pods.append(p)
        per_pod.append(k)
        queue.append(q if q is not None else "default")
        user.append(u or "")
        priority.append(0 if pr is None else int(_number(source, row, str(columns.priority), pr)))
        status.append(st or "")
        requested.append(rq_value)
        rows.append(row)
    if not rows:
        raise SnapshotError("no job rows under the header", kind="file", name=source)
    arr = np.asarray(arrival, dtype=np.float64)
    if arr.min() < 0:
        bad = int(np.argmin(arr))
        raise _cell_error(source, rows[bad], columns.arrival, f"negative time {arr[bad]:g}")
    order = np.argsort(arr, kind="stable")
    epoch = float(arr[order[0]])

    def pick(values: Sequence[str]) -> tuple[str, ...]:
        return tuple(values[i] for i in order.tolist())

    return JobTable(
        source=source,
        row=np.asarray(rows, dtype=np.int64)[order],
        arrival=arr[order] - epoch,
        duration=np.asarray(duration, dtype=np.float64)[order],
        gpus=np.asarray(gpus, dtype=np.int64)[order],
        pods=np.asarray(pods, dtype=np.int64)[order],
        gpus_per_pod=np.asarray(per_pod, dtype=np.int64)[order],
        queue=pick(queue),
        user=pick(user),
        priority=np.asarray(priority, dtype=np.int64)[order],
        status=pick(status),
        requested_duration=np.asarray(requested, dtype=np.float64)[order],
        epoch=epoch,
        columns=columns,
    )


def read_preset(name: str) -> JobTable:
    """The bundled trace of preset ``name``."""
    preset = PRESETS[name]
    if preset.vendored is None:
        raise ConfigError(
            f"preset {name!r} has no bundled file; give one with --trace",
            kind="option",
            name="--preset",
        )
    folder, filename = preset.vendored
    return read_jobs(
        f"{folder}/{filename}", preset.columns, text=read_vendored_text(folder, filename)
    )


def pod_sizes(gpus: int, pod_gpus: int) -> list[int]:
    """GPUs of each pod of a job of ``gpus`` GPUs cut into pods of ``pod_gpus`` (the last
    pod holds the remainder)."""
    if pod_gpus < 1:
        raise ConfigError(f"must be >= 1, got {pod_gpus}", kind="option", name="--pod-gpus")
    full, rest = divmod(gpus, pod_gpus)
    return [pod_gpus] * full + ([rest] if rest else [])


# ------------------------------------------------------------------------------- the cluster


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterSpec:
    """Nodes (name, GPUs, CPU cores) and the rack of each (``""``: in no rack)."""

    names: tuple[str, ...]
    gpus: tuple[int, ...]
    cpus: tuple[int, ...]
    racks: tuple[str, ...]
    label: str = ""
    memory_per_gpu_gib: int = field(default=64)

    @property
    def total_gpus(self) -> int:
        return sum(self.gpus)

    @property
    def gpus_per_node(self) -> int:
        return max(self.gpus) if self.gpus else 0


def parse_cluster(text: str, *, rack_size: int = 8) -> ClusterSpec:
    """``NODESxGPUS[xCPUS]``: identical nodes (CPU cores default to 8 per GPU), racks of
    ``rack_size`` nodes in name order."""
    parts = text.lower().split("x")
    if len(parts) not in (2, 3) or not all(p.strip().isdigit() for p in parts):
        raise ConfigError(
            f"expected NODESxGPUS[xCPUS] (e.g. 64x8), got {text!r}", kind="option", name="--cluster"
        )
    nodes, gpus = int(parts[0]), int(parts[1])
    cpus = int(parts[2]) if len(parts) == 3 else 8 * max(gpus, 1)
    if nodes < 1 or not 1 <= gpus <= 64 or cpus < 1:
        raise ConfigError(
            f"need at least one node, 1..64 GPUs and a CPU per node, got {text!r}",
            kind="option",
            name="--cluster",
        )
    if rack_size < 1:
        raise ConfigError(f"must be >= 1, got {rack_size}", kind="option", name="--rack-size")
    width = len(str(nodes - 1))
    names = tuple(f"node-{i:0{width}d}" for i in range(nodes))
    racks = tuple(f"rack-{i // rack_size:0{width}d}" for i in range(nodes))
    return ClusterSpec(
        names=names,
        gpus=(gpus,) * nodes,
        cpus=(cpus,) * nodes,
        racks=racks,
        label=f"{nodes} nodes x {gpus} GPUs, racks of {rack_size}",
    )


def read_cluster_csv(path: str | Path) -> ClusterSpec:
    """A node CSV with columns ``name,gpus`` and optional ``cpus`` (8 per GPU) and ``rack``."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise SnapshotError(
            f"cannot read: {exc.strerror or exc}", kind="file", name=source
        ) from None
    reader = csv.DictReader(io.StringIO(text))
    header = [h.strip() for h in reader.fieldnames or []]
    for need in ("name", "gpus"):
        if need not in header:
            raise SnapshotError(
                f"no column {need!r} (a node CSV has name,gpus[,cpus][,rack])",
                kind="file",
                name=source,
                field="header",
            )
    names: list[str] = []
    gpus: list[int] = []
    cpus: list[int] = []
    racks: list[str] = []
    for row, rec in enumerate(reader, 1):
        rec = {k.strip(): (v or "").strip() for k, v in rec.items() if k is not None}
        if not any(rec.values()):
            continue
        name = rec.get("name", "")
        if not name:
            raise _cell_error(source, row, "name", "missing value")
        if name in names:
            raise _cell_error(source, row, "name", f"duplicate node {name!r}")
        g = _whole(source, row, "gpus", rec.get("gpus", ""), 0)
        c = _whole(source, row, "cpus", rec["cpus"], 1) if rec.get("cpus") else 8 * max(g, 1)
        names.append(name)
        gpus.append(g)
        cpus.append(c)
        racks.append(rec.get("rack", ""))
    if not names or max(gpus) < 1:
        raise SnapshotError("no node with GPUs", kind="file", name=source)
    return ClusterSpec(
        names=tuple(names),
        gpus=tuple(gpus),
        cpus=tuple(cpus),
        racks=tuple(racks),
        label=f"{len(names)} nodes from {Path(path).name}, {sum(gpus)} GPUs",
    )


def read_queue_weights(path: str | Path) -> dict[str, float]:
    """A CSV ``queue,weight`` (a header row, then one queue a row; the first two columns)."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise SnapshotError(
            f"cannot read: {exc.strerror or exc}", kind="file", name=source
        ) from None
    rows = [r for r in csv.reader(io.StringIO(text)) if r and any(c.strip() for c in r)]
    if len(rows) < 2 or len(rows[0]) < 2:
        raise SnapshotError("expected a header and rows of queue,weight", kind="file", name=source)
    column = rows[0][1].strip()
    out: dict[str, float] = {}
    for row, cells in enumerate(rows[1:], 1):
        if len(cells) < 2 or not cells[1].strip():
            raise _cell_error(source, row, column, "missing value")
        weight = _number(source, row, column, cells[1].strip())
        if weight <= 0:
            raise _cell_error(source, row, column, f"a weight must be > 0, got {weight:g}")
        out[cells[0].strip()] = weight
    return out
