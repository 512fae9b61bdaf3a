"""Loader for the Alibaba ``openb`` GPU-sharing trace (cluster-trace-gpu-v2023).

Theory of operation
-------------------
The trace is two kinds of CSV file:

* a node list, columns ``sn, cpu_milli, memory_mib, gpu, model``: one row per machine, its CPU in
  millicores, RAM in MiB, number of GPUs and the GPU model (empty on CPU-only machines);
* a pod list, columns ``name, cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec, qos,
  pod_phase, creation_time, deletion_time, scheduled_time``. The ``multigpu*`` variants carry only
  the first five columns. ``gpu_milli`` is the share of *each* requested GPU in 1/1000 GPU; it is
  below 1000 only for a single-GPU pod (GPU sharing). ``gpu_spec`` lists the allowed GPU models,
  separated by ``|`` (empty: any model). Times are seconds; ``scheduled_time`` is empty for a
  pod that never ran.

Both load into columnar, read-only NumPy tables (one array per column, row order of the file), which
is what the vectorized kernels consume. Every malformed cell raises
:class:`~gangsched.errors.SnapshotError` naming the file, the row (1-based line number in the file,
the header being line 1) and the column.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np
import numpy.typing as npt

from gangsched._types import I64
from gangsched.errors import ConfigError, SnapshotError
from gangsched.io._text import read_source

__all__ = [
    "DEFAULT_NODES",
    "DEFAULT_PODS",
    "NODE_COLUMNS",
    "POD_COLUMNS",
    "POD_COLUMNS_SHORT",
    "NodeTable",
    "PodTable",
    "load_nodes",
    "load_pods",
    "read_vendored_text",
    "shapes_fit_classes",
]

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = (
    "name",
    "cpu_milli",
    "memory_mib",
    "num_gpu",
    "gpu_milli",
    "gpu_spec",
    "qos",
    "pod_phase",
    "creation_time",
    "deletion_time",
    "scheduled_time",
)
POD_COLUMNS_SHORT = POD_COLUMNS[:5]

DEFAULT_NODES = "openb_node_list_gpu_node.csv"
DEFAULT_PODS = "openb_pod_list_default.csv"

MILLI = 1000
MAX_GPUS_PER_POD = 8
MISSING_TIME = -1
_INT64_MAX = 2**63 - 1


def read_vendored_text(package_dir: str, filename: str) -> str:
    """Text of a file vendored under ``gangsched/data/<package_dir>/`` (also in a wheel)."""
    ref = resources.files("gangsched").joinpath("data", package_dir, filename)
    try:
        return ref.read_text(encoding="utf-8")
    except OSError as exc:
        raise SnapshotError(
            f"vendored file missing: {exc}", kind="file", name=f"{package_dir}/{filename}"
        ) from None


def _frozen(array: I64) -> I64:
    array.setflags(write=False)
    return array


def _group(rows: I64, keys: list[I64]) -> tuple[I64, I64, I64]:
    """The rows ``rows``, the distinct keys ``(n_groups, len(keys))`` of their columns ``keys``
    (sorted) and the group of each row."""
    stacked = np.stack(keys, axis=1).reshape(-1, len(keys)).astype(np.int64)
    if stacked.shape[0] == 0:
        return rows, stacked, np.zeros(0, dtype=np.int64)
    uniq, inverse = np.unique(stacked, axis=0, return_inverse=True)
    return rows, uniq.astype(np.int64), inverse.reshape(-1).astype(np.int64)


@dataclass(frozen=True, slots=True)
class NodeTable:
    """The node list as columns (row order of the file).

    ``models`` is the sorted tuple of distinct GPU model names ("" for CPU-only machines);
    ``model_idx`` indexes it.
    """

    source: str
    names: tuple[str, ...]
    cpu_milli: npt.NDArray[np.int64]  # (n_nodes,)
    memory_mib: npt.NDArray[np.int64]  # (n_nodes,)
    gpu_count: npt.NDArray[np.int64]  # (n_nodes,)
    model_idx: npt.NDArray[np.int64]  # (n_nodes,)
    models: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.names)

    @property
    def total_gpus(self) -> int:
        return int(self.gpu_count.sum())

    @property
    def max_gpus(self) -> int:
        return int(self.gpu_count.max()) if len(self.names) else 0

    def model_of(self, node: int) -> str:
        return self.models[int(self.model_idx[node])]

    def gpu_classes(self) -> tuple[I64, I64, I64]:
        """Classes of identical GPU nodes: the GPU nodes' indices, the class keys
        ``(n_classes, 4)`` (cpu, mem, gpus, model) and the class of each GPU node."""
        rows = np.flatnonzero(self.gpu_count > 0).astype(np.int64)
        cols = (self.cpu_milli, self.memory_mib, self.gpu_count, self.model_idx)
        return _group(rows, [c[rows] for c in cols])


@dataclass(frozen=True, slots=True)
class PodTable:
    """A pod list as columns (row order of the file).

    ``specs`` is the sorted tuple of distinct ``gpu_spec`` strings ("" = any model first), and
    ``spec_idx`` indexes it, so comparing two spec ids compares the strings. Files without the
    optional columns get ``qos``/``phase`` "" and times :data:`MISSING_TIME` (``has_times`` False).
    """

    source: str
    names: tuple[str, ...]
    cpu_milli: npt.NDArray[np.int64]  # (n_pods,)
    memory_mib: npt.NDArray[np.int64]  # (n_pods,)
    num_gpu: npt.NDArray[np.int64]  # (n_pods,)
    gpu_milli: npt.NDArray[np.int64]  # (n_pods,) per GPU, 0 for CPU-only pods
    spec_idx: npt.NDArray[np.int64]  # (n_pods,)
    specs: tuple[str, ...]
    qos: tuple[str, ...]
    phase: tuple[str, ...]
    creation_time: npt.NDArray[np.int64]  # (n_pods,) seconds, MISSING_TIME if absent
    deletion_time: npt.NDArray[np.int64]  # (n_pods,)
    scheduled_time: npt.NDArray[np.int64]  # (n_pods,)
    has_times: bool

    def __len__(self) -> int:
        return len(self.names)

    @property
    def total_gpu_milli(self) -> int:
        return int((self.num_gpu * self.gpu_milli).sum())

    def spec_models(self, spec: int) -> tuple[str, ...]:
        """Allowed models of spec id ``spec`` (empty tuple: any model)."""
        return tuple(part for part in self.specs[spec].split("|") if part)

    def spec_allowed(self, models: Sequence[str]) -> npt.NDArray[np.bool_]:
        """``(n_specs, n_models)`` bool: may a pod of that spec run on a GPU of that model."""
        out = np.zeros((len(self.specs), len(models)), dtype=np.bool_)
        for s in range(len(self.specs)):
            wanted = self.spec_models(s)
            if not wanted:
                out[s, :] = True
            else:
                out[s, :] = [m in wanted for m in models]
        return out

    def indices(self, values: npt.ArrayLike, *, kind: str, field: str) -> I64:
        """``values`` as a 1-d array of row indices into this table (repeats allowed); a
        :class:`~gangsched.errors.ConfigError` naming ``field`` when one is out of range."""
        idx = np.asarray(values, dtype=np.int64)
        if idx.ndim != 1 or (idx.size and (idx.min() < 0 or idx.max() >= len(self))):
            raise ConfigError(
                f"pod index out of range: {field} must be a 1-d array of indices in "
                f"[0, {len(self)})",
                kind=kind,
                field=field,
            )
        return idx

    def gpu_shapes(self, idx: I64) -> tuple[I64, I64, I64]:
        """Shapes of the GPU pods among rows ``idx``: those rows, the shape keys
        ``(n_shapes, 5)`` (cpu, mem, num_gpu, gpu_milli, spec) and the shape of each row."""
        rows = idx[self.num_gpu[idx] > 0]
        cols = (self.cpu_milli, self.memory_mib, self.num_gpu, self.gpu_milli, self.spec_idx)
        return _group(rows, [c[rows] for c in cols])


def shapes_fit_classes(
    pods: PodTable, nodes: NodeTable, shapes: I64, classes: I64
) -> npt.NDArray[np.bool_]:
    """``(n_shapes, n_classes)`` bool: one pod of the shape fits one empty node of the class
    (CPU, memory, GPU count and an allowed model), keys as :meth:`PodTable.gpu_shapes` and
    :meth:`NodeTable.gpu_classes` give them."""
    allowed = pods.spec_allowed(nodes.models)
    return np.asarray(
        (shapes[:, None, 0] <= classes[None, :, 0])
        & (shapes[:, None, 1] <= classes[None, :, 1])
        & (shapes[:, None, 2] <= classes[None, :, 2])
        & allowed[shapes[:, 4]][:, classes[:, 3]]
    )


def _read_rows(
    text: str, source: str, required: Sequence[str], optional: Sequence[str] = ()
) -> tuple[list[str], list[list[str]]]:
    reader = csv.reader(io.StringIO(text))
    try:
        header = next(reader)
    except StopIteration:
        raise SnapshotError(
            "empty file, expected a header line", kind="file", name=source
        ) from None
    except csv.Error as exc:
        raise SnapshotError(f"not valid CSV: {exc}", kind="file", name=source) from None
    header = [h.strip() for h in header]
    missing = [c for c in required if c not in header]
    if missing:
        raise SnapshotError(
            f"missing column(s) {', '.join(missing)}; header is {','.join(header)}",
            kind="file",
            name=source,
            field="header",
        )
    known = set(required) | set(optional)
    unknown = [c for c in header if c not in known]
    if unknown:
        raise SnapshotError(
            f"unknown column(s) {', '.join(unknown)}", kind="file", name=source, field="header"
        )
    rows: list[list[str]] = []
    try:
        for line_no, row in enumerate(reader, start=2):
            _check_row(row, header, source, line_no, rows)
    except csv.Error as exc:
        raise SnapshotError(
            f"not valid CSV: {exc}", kind="file", name=source, field=f"line {reader.line_num}"
        ) from None
    return header, rows


def _check_row(
    row: list[str], header: list[str], source: str, line_no: int, rows: list[list[str]]
) -> None:
    """Append ``row`` (with its line number first) unless it is blank."""
    if not row or (len(row) == 1 and not row[0].strip()):
        return
    if len(row) != len(header):
        raise SnapshotError(
            f"row has {len(row)} cells, header has {len(header)}",
            kind="file",
            name=source,
            field=f"row {line_no}",
        )
    rows.append([str(line_no), *row])


def _unique_name(cell: str, seen: set[str], what: str, source: str, line: str, column: str) -> str:
    """The row's name, stripped; empty or repeated names are a SnapshotError."""
    name = cell.strip()
    where = f"row {line}, column {column}"
    if not name:
        raise SnapshotError(f"empty {what} name", kind="file", name=source, field=where)
    if name in seen:
        raise SnapshotError(
            f"duplicate {what} name {name!r}", kind="file", name=source, field=where
        )
    seen.add(name)
    return name


def _int_cell(
    text: str, source: str, line: str, column: str, *, lo: int = 0, hi: int = _INT64_MAX
) -> int:
    cell = text.strip()
    try:
        value = int(cell)
    except ValueError:
        raise SnapshotError(
            f"expected an integer, got {text[:40]!r}" + ("..." if len(text) > 40 else ""),
            kind="file",
            name=source,
            field=f"row {line}, column {column}",
        ) from None
    if not lo <= value <= hi:
        raise SnapshotError(
            f"value {value} out of range [{lo}, {hi}]",
            kind="file",
            name=source,
            field=f"row {line}, column {column}",
        )
    return value


def _time_cell(text: str, source: str, line: str, column: str) -> int:
    if not text.strip():
        return MISSING_TIME
    return _int_cell(text, source, line, column)


def _source_text(path: str | Path | None, default: str) -> tuple[str, str]:
    if path is None:
        return read_vendored_text("openb", default), default
    return read_source(path)


def load_nodes(path: str | Path | None = None) -> NodeTable:
    """Load an openb node list (``None``: the vendored ``openb_node_list_gpu_node.csv``).

    Raises
    ------
    SnapshotError
        Missing or unknown column, malformed or negative number, duplicate node name, a GPU count
        above 8... The message names the file, the row and the column.
    """
    text, source = _source_text(path, DEFAULT_NODES)
    header, rows = _read_rows(text, source, NODE_COLUMNS)
    col = {name: header.index(name) + 1 for name in NODE_COLUMNS}
    names: list[str] = []
    cpu: list[int] = []
    mem: list[int] = []
    gpus: list[int] = []
    models: list[str] = []
    seen: set[str] = set()
    for row in rows:
        line = row[0]
        name = _unique_name(row[col["sn"]], seen, "node", source, line, "sn")
        names.append(name)
        cpu.append(_int_cell(row[col["cpu_milli"]], source, line, "cpu_milli"))
        mem.append(_int_cell(row[col["memory_mib"]], source, line, "memory_mib"))
        n_gpu = _int_cell(row[col["gpu"]], source, line, "gpu", hi=64)
        model = row[col["model"]].strip()
        if n_gpu > 0 and not model:
            raise SnapshotError(
                "a node with GPUs needs a model",
                kind="file",
                name=source,
                field=f"row {line}, column model",
            )
        if "|" in model:
            raise SnapshotError(
                f"model {model!r} must be one name",
                kind="file",
                name=source,
                field=f"row {line}, column model",
            )
        gpus.append(n_gpu)
        models.append(model if n_gpu > 0 else "")
    distinct = tuple(sorted(set(models)))
    index = {m: i for i, m in enumerate(distinct)}
    return NodeTable(
        source=source,
        names=tuple(names),
        cpu_milli=_frozen(np.asarray(cpu, dtype=np.int64)),
        memory_mib=_frozen(np.asarray(mem, dtype=np.int64)),
        gpu_count=_frozen(np.asarray(gpus, dtype=np.int64)),
        model_idx=_frozen(np.asarray([index[m] for m in models], dtype=np.int64)),
        models=distinct,
    )


def load_pods(path: str | Path | None = None) -> PodTable:
    """Load an openb pod list (``None``: the vendored ``openb_pod_list_default.csv``).

    Accepts the full 11-column format and the 5-column ``multigpu*`` format.

    Raises
    ------
    SnapshotError
        Missing or unknown column, malformed number, ``num_gpu`` outside 0..8, ``gpu_milli`` outside
        0..1000, a GPU pod with ``gpu_milli`` 0 (or a CPU-only pod with a GPU share), a fractional
        share on a multi-GPU pod, a duplicate pod name. The message names file, row and column.
    """
    text, source = _source_text(path, DEFAULT_PODS)
    header, rows = _read_rows(text, source, POD_COLUMNS_SHORT, POD_COLUMNS[5:])
    col = {name: header.index(name) + 1 for name in POD_COLUMNS if name in header}
    has_spec = "gpu_spec" in col
    has_times = all(c in col for c in ("creation_time", "deletion_time", "scheduled_time"))
    n = len(rows)
    names: list[str] = []
    cpu = np.zeros(n, dtype=np.int64)
    mem = np.zeros(n, dtype=np.int64)
    num = np.zeros(n, dtype=np.int64)
    milli = np.zeros(n, dtype=np.int64)
    spec_str: list[str] = []
    qos: list[str] = []
    phase: list[str] = []
    times = np.full((3, n), MISSING_TIME, dtype=np.int64)
    seen: set[str] = set()
    for i, row in enumerate(rows):
        line = row[0]
        name = _unique_name(row[col["name"]], seen, "pod", source, line, "name")
        names.append(name)
        cpu[i] = _int_cell(row[col["cpu_milli"]], source, line, "cpu_milli")
        mem[i] = _int_cell(row[col["memory_mib"]], source, line, "memory_mib")
        num[i] = _int_cell(row[col["num_gpu"]], source, line, "num_gpu", hi=MAX_GPUS_PER_POD)
        milli[i] = _int_cell(row[col["gpu_milli"]], source, line, "gpu_milli", hi=MILLI)
        if (num[i] == 0) != (milli[i] == 0):
            raise SnapshotError(
                f"num_gpu {num[i]} and gpu_milli {milli[i]} disagree (both zero or both positive)",
                kind="file",
                name=source,
                field=f"row {line}, column gpu_milli",
            )
        if num[i] > 1 and milli[i] != MILLI:
            raise SnapshotError(
                f"a {num[i]}-GPU pod must use whole GPUs, got gpu_milli {milli[i]}",
                kind="file",
                name=source,
                field=f"row {line}, column gpu_milli",
            )
        spec = row[col["gpu_spec"]].strip() if has_spec else ""
        parts = [p.strip() for p in spec.split("|") if p.strip()]
        spec_str.append("|".join(parts))
        qos.append(row[col["qos"]].strip() if "qos" in col else "")
        phase.append(row[col["pod_phase"]].strip() if "pod_phase" in col else "")
        for k, column in enumerate(("creation_time", "deletion_time", "scheduled_time")):
            if column in col:
                times[k, i] = _time_cell(row[col[column]], source, line, column)
    specs = tuple(sorted(set(spec_str) | {""}))
    spec_index = {s: k for k, s in enumerate(specs)}
    return PodTable(
        source=source,
        names=tuple(names),
        cpu_milli=_frozen(cpu),
        memory_mib=_frozen(mem),
        num_gpu=_frozen(num),
        gpu_milli=_frozen(milli),
        spec_idx=_frozen(np.asarray([spec_index[s] for s in spec_str], dtype=np.int64)),
        specs=specs,
        qos=tuple(qos),
        phase=tuple(phase),
        creation_time=_frozen(times[0].copy()),
        deletion_time=_frozen(times[1].copy()),
        scheduled_time=_frozen(times[2].copy()),
        has_times=has_times,
    )
