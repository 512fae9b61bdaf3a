"""Shared code of the GPU scorer plugins (:mod:`gangsched.plugins.fgd_scores`): argument
reading, the kernels' view of a session's rows, the kernels' pod of a task."""

from __future__ import annotations

import math  # noqa: F401 -- read by the generated _truncated_few and _finish_few
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from gangsched._codegen import Operand, define, scalar, vector
from gangsched._types import BOOL as B
from gangsched._types import F64, I64
from gangsched.config import check_arguments
from gangsched.config.args import arg_weight
from gangsched.errors import ConfigError
from gangsched.fragmentation import MILLI, PodRequest, fit_mask
from gangsched.fragmentation.measure import fit_row, has_room
from gangsched.framework.extension_points import Rows, argument_names
from gangsched.session.arrays import TaskTemplate
from gangsched.session.core import TaskState
from gangsched.session.fit import device_room, device_table, node_free, node_room
from gangsched.units import CPU, MEMORY

if TYPE_CHECKING:
    from gangsched.session.core import Session


#: Task states whose task sits on its node (pipelined tasks only hold a reservation).
_ON_NODE_STATES = (TaskState.ALLOCATED, TaskState.BOUND, TaskState.RUNNING, TaskState.RELEASING)


# -------------------------------------------------------------------------------- arguments


def _both(name: str, *keys: str) -> tuple[str, ...]:
    """A scorer's argument declaration: every key, bare and as ``<name>.<key>``."""
    return (*keys, *argument_names(name, *keys))


def _read_args(
    name: str, arguments: Mapping[str, object], known: Sequence[str]
) -> dict[str, object]:
    """``{key: value}`` with ``<name>.key`` folded onto ``key``; keys ``known`` (the plugin's
    declaration, see :func:`_both`) does not hold, or given twice, raise."""
    check_arguments(arguments, known, name=name)
    out: dict[str, object] = {}
    prefix = f"{name}."
    for raw, value in arguments.items():
        key = raw[len(prefix) :] if raw.startswith(prefix) else raw
        if key in out:
            raise ConfigError(
                f"given twice (as {key!r} and {prefix + key!r})",
                kind="plugin",
                name=name,
                field=f"arguments.{raw}",
            )
        out[key] = value
    return out


def _weight(name: str, args: Mapping[str, object]) -> float:
    return arg_weight(args, "weight", 1.0, plugin=name, signed=False)


# -------------------------------------------------------------------------------- session view


@dataclass(frozen=True, slots=True)
class _View:
    """The kernels' inputs over some rows of the session."""

    free_cpu: I64  # (k,)
    free_mem: I64  # (k,)
    gpu_free: I64  # (k, max_gpus) milli of 1000 per device, padding 0
    gpu_count: I64  # (k,)
    model_idx: I64  # (k,) index into the session's models; n_models = no GPUs


def _models(ssn: Session) -> tuple[str, ...]:
    return ssn.arrays.gpu_models


def _view(ssn: Session, rows: Rows, *, future: bool = False) -> _View:
    a = ssn.arrays
    spec = a.spec
    rows = np.asarray(rows, dtype=np.intp)
    free = node_free(ssn, rows, future=future)  # (k, n_resources)
    # Devices as a (k, widest of the rows) table of flat device indices; padding slots read
    # device 0 and are zeroed (a handful of array operations for the few rows of a refresh).
    counts = a.gpu_count[rows]
    width = max(int(counts.max()) if counts.size else 0, 1 if a.n_devices else 0)
    slot = np.arange(width)
    real = slot < counts[:, None]
    if a.n_devices:
        idx = np.where(real, a.gpu_offset[rows][:, None] + slot, 0)
        cap = a.gpu_capacity[rows][:, None]
        dev = np.where(real, _device_shares(device_table(ssn, idx, rows, future=future), cap), 0)
    else:
        dev = np.zeros((rows.size, width), dtype=np.int64)
    model = a.gpu_model[rows]
    return _View(
        free_cpu=np.asarray(free[:, spec.index(CPU)], dtype=np.int64),
        free_mem=np.asarray(free[:, spec.index(MEMORY)], dtype=np.int64),
        gpu_free=np.asarray(dev, dtype=np.int64),
        gpu_count=np.asarray(counts, dtype=np.int64),
        model_idx=np.where(model < 0, len(_models(ssn)), model).astype(np.int64),
    )


def _row_numbers(ssn: Session, row: int) -> tuple[int, int, list[int]]:
    """Free CPU, free memory and each device's free milli of one node (now), as
    :func:`_view` computes them, in scalar arithmetic: the refresh after a placement reads
    one node, where a dozen array operations cost more than the numbers."""
    a = ssn.arrays
    spec = a.spec
    cpu, mem = node_room(ssn, row, (spec.index(CPU), spec.index(MEMORY)), future=False)
    count = int(a.gpu_count[row])
    if not count:
        return cpu, mem, [0] if a.n_devices else []
    cap = int(a.gpu_capacity[row])
    return cpu, mem, _device_shares_row(device_room(ssn, row, cap, future=False), cap)


#: What the kernels read of a device: its free milli-GPU (``free``), never below 0, in
#: thousandths of the device (``capacity``: a device of another size is scaled to 1000).
DEVICE_SHARE = "max({free}, 0) * 1000 // {capacity}"


def device_share_source(formula: str) -> str:
    """The source of ``_device_shares`` (a table of devices, one row per node) and
    ``_device_shares_row`` (one node's devices, plain ints), rendered from ``formula``."""
    table = vector(
        formula,
        {
            "free": Operand("dev", "i", owned=True),
            "capacity": Operand("cap", "i", "np.maximum(cap, 1)"),
        },
        "dev",
        floats=False,
        indent="    ",
    )
    row = scalar(formula, {"free": "x", "capacity": "cap"}, {"capacity": "cap if cap > 1 else 1"})
    return f'''
def _device_shares(dev, cap):
    """The kernels' share of each device of ``dev`` (free milli-GPU, a new table the shares
    may be written into) on nodes whose devices hold ``cap`` milli-GPU each (a column)."""
{table}    return dev


def _device_shares_row(frees, cap):
    """:func:`_device_shares` of one node's devices, in plain ints."""
    return [{row} for x in frees]
'''


_made = define(device_share_source(DEVICE_SHARE), globals(), "device shares")
_device_shares: Callable[[I64, I64], I64] = _made["_device_shares"]
_device_shares_row: Callable[[list[int], int], list[int]] = _made["_device_shares_row"]


#: A GPU scorer's answer on a node from its kernel's ``value`` there: the value where the
#: pod ``fits`` and the value is a number, else 0; times the plugin's ``weight``.
FINISH = "where({fits} & isfinite({value}), {value}, 0.0) * {weight}"
#: The answer of a scorer whose kernel's value is a finite ``raw`` score truncated toward
#: zero (DotProd, BestFit): :data:`FINISH` of ``trunc({raw})``, whose value is a number.
FINISH_TRUNCATED = "where({fits}, trunc({raw}), 0.0) * {weight}"
#: The answer of a scorer whose kernel's ``score`` is already ``-inf`` where the pod does not
#: fit (gpu-packing, gpu-clustering): :data:`FINISH` without the mask, which changes nothing.
FINISH_SCORED = "where(isfinite({score}), {score}, 0.0) * {weight}"


def finish_source(finish: str, truncated: str, scored: str = FINISH_SCORED) -> str:
    """The source of the GPU scorers' finishing, rendered from the formulas ``finish``
    (:data:`FINISH`), ``truncated`` (:data:`FINISH_TRUNCATED`) and ``scored``
    (:data:`FINISH_SCORED`): over rows of NumPy columns (``_finish_rows``,
    ``_truncated_rows``, ``_scored_rows``) and over a few rows in plain floats
    (``_finish_few``, ``_truncated_few``: the kernel's value, and the raw score, read only
    where the pod fits)."""
    ops = {"fits": Operand("fits", "b"), "weight": Operand("weight", "f")}
    rows = vector(
        finish, {**ops, "value": Operand("value", "f")}, "out", floats=True, indent="    "
    )
    cut = vector(
        truncated,
        {**ops, "raw": Operand("raw", "f", owned=True)},
        "out",
        floats=True,
        indent="    ",
    )
    kernel = vector(
        scored,
        {"score": Operand("score", "f"), "weight": Operand("weight", "f")},
        "out",
        floats=True,
        indent="    ",
    )
    few = scalar(finish, {"fits": "fit", "value": "value", "weight": "weight"}, {})
    few_cut = scalar(
        truncated,
        {"fits": "fits(pod, r)", "raw": "one(pod, cpu[r], idle[r])", "weight": "weight"},
        {},
    )
    return f'''
def _finish_rows(fits, value, weight):
    """The scorer's answers on rows where the pod ``fits`` (bools) from its kernel's
    ``value`` (floats) there."""
{rows}    return out


def _truncated_rows(fits, raw, weight):
    """The answers of rows whose kernel's value is ``raw`` (floats, a new array the answers
    may be written into) truncated."""
{cut}    return out


def _scored_rows(score, weight):
    """The answers of rows whose kernel's ``score`` (floats) is ``-inf`` where the pod does
    not fit."""
{kernel}    return out


def _finish_few(feasible, values, weight):
    """:func:`_finish_rows` of a few rows, from lists of bools and floats."""
    return [{few} for fit, value in zip(feasible, values, strict=True)]


def _truncated_few(pod, rows, fits, one, cpu, idle, weight):
    """:func:`_truncated_rows` of the rows ``rows``: ``fits(pod, r)`` says whether the pod
    fits row ``r``, ``one(pod, cpu[r], idle[r])`` is its raw score (read where it fits)."""
    return [{few_cut} for r in rows]
'''


_finished = define(finish_source(FINISH, FINISH_TRUNCATED), globals(), "GPU scorer answers")
_finish_rows: Callable[[B, F64, float], F64] = _finished["_finish_rows"]
_truncated_rows: Callable[[B, F64, float], F64] = _finished["_truncated_rows"]
_scored_rows: Callable[[F64, float], F64] = _finished["_scored_rows"]
_finish_few: Callable[[list[bool], list[float], float], list[float]] = _finished["_finish_few"]
_truncated_few: Callable[
    [
        PodRequest,
        list[int],
        Callable[[PodRequest, int], bool],
        Callable[[PodRequest, int, int], float],
        list[int],
        list[int],
        float,
    ],
    list[float],
] = _finished["_truncated_few"]


#: Up to this many rows a scorer with a scalar formula scores them one by one: a few rows
#: cost less in scalar arithmetic than the array operations' fixed cost.
_FEW_ROWS = 32

#: What :meth:`ViewCache.sync_rows` returns when no row changed (never written to).
_NO_ROWS: Rows = np.zeros(0, dtype=np.intp)
_NO_ROWS.flags.writeable = False


@dataclass(frozen=True, slots=True)
class RowLists:
    """The kept view as Python lists, per node, with each node's idle milli-GPU: what a
    scorer reads for a few rows without an array operation per step."""

    free_cpu: list[int]
    free_mem: list[int]
    devices: list[list[int]]  # free milli of each of the node's devices (no padding)
    model_idx: list[int]
    idle: list[int]  # the devices' free milli, summed

    @classmethod
    def of(cls, v: _View) -> RowLists:
        n = v.free_cpu.size
        lists = cls([0] * n, [0] * n, [[]] * n, [0] * n, [0] * n)
        lists.write(np.arange(n, dtype=np.intp), v)
        return lists

    def put(self, row: int, cpu: int, mem: int, devices: list[int]) -> None:
        """Row ``row`` now has these free numbers (``devices`` without padding)."""
        self.free_cpu[row], self.free_mem[row], self.devices[row] = cpu, mem, devices
        self.idle[row] = sum(devices)

    def fits(self, pod: PodRequest, row: int) -> bool:
        """:func:`fit_mask` of row ``row``."""
        return fit_row(
            pod, self.free_cpu[row], self.free_mem[row], self.model_idx[row], self.devices[row]
        )

    def write(self, rows: Rows, v: _View) -> None:
        """Take the rows ``rows`` from their view ``v``."""
        frees, counts = v.gpu_free.tolist(), v.gpu_count.tolist()
        for row, cpu, mem, free, count, model in zip(
            rows.tolist(),
            v.free_cpu.tolist(),
            v.free_mem.tolist(),
            frees,
            counts,
            v.model_idx.tolist(),
            strict=True,
        ):
            self.put(row, cpu, mem, free[:count])
            self.model_idx[row] = model


class ViewCache:
    """The kernels' view (now, not ``future``) of every node of one session, kept current on
    the nodes the session's change log names since the last read (its cursor), so a read of a
    few rows is a gather (or a list read, :meth:`lists`); another session starts it afresh.
    ``on_rows(ssn, rows, view)`` is told every refresh (every row for a new session), with the
    view of those rows."""

    __slots__ = (
        "_all",
        "_cursor",
        "_lists",
        "_on_rows",
        "_pods",
        "_ssn",
        "_tasks",
        "_templates",
    )

    def __init__(self, on_rows: Callable[[Session, Rows, _View], None] | None = None) -> None:
        self._on_rows = on_rows
        self._ssn: Session | None = None
        self._all: _View | None = None
        self._lists: RowLists | None = None
        self._cursor = 0  # the change log's cursor at the last read
        self._pods: dict[object, PodRequest | None] = {}
        self._tasks: dict[tuple[int, int, int, int, tuple[str, ...]], PodRequest | None] = {}
        self._templates: dict[int, PodRequest | None] = {}  # by template index

    def sync_rows(self, ssn: Session) -> Rows:
        """Bring the view up to date; returns the rows that changed since the last call
        (every row when the session is new to it)."""
        if self._ssn is not ssn or self._all is None:
            rows: Rows = np.arange(ssn.arrays.n_nodes, dtype=np.intp)
            self._all = _view(ssn, rows)
            self._ssn, self._cursor = ssn, ssn.changes.end
            self._lists = RowLists.of(self._all)
            self._pods, self._tasks, self._templates = {}, {}, {}
            if self._on_rows is not None:
                self._on_rows(ssn, rows, self._all)
            return rows
        log = ssn.changes
        if not log.changed_since(self._cursor):  # nothing changed since the last call
            return _NO_ROWS
        rows = log.nodes_since(self._cursor)
        self._cursor = log.end
        full, lists = self._all, self._lists
        assert lists is not None and full is not None
        if rows.size == 1:  # one node (a placement's refresh): scalar arithmetic, written in
            row = int(rows[0])
            cpu, mem, dev = _row_numbers(ssn, row)
            full.free_cpu[row] = cpu
            full.free_mem[row] = mem
            full.gpu_free[row] = 0
            full.gpu_free[row, : len(dev)] = dev
            lists.put(row, cpu, mem, dev[: len(lists.devices[row])])
            if self._on_rows is not None:
                # the row's part of the kept view (read, not kept)
                end = row + 1
                part = _View(
                    free_cpu=full.free_cpu[row:end],
                    free_mem=full.free_mem[row:end],
                    gpu_free=full.gpu_free[row:end, : len(dev)],
                    gpu_count=full.gpu_count[row:end],
                    model_idx=full.model_idx[row:end],
                )
                self._on_rows(ssn, rows, part)
        elif rows.size:
            part = _view(ssn, rows)
            full.free_cpu[rows] = part.free_cpu
            full.free_mem[rows] = part.free_mem
            full.gpu_free[rows] = 0
            full.gpu_free[rows, : part.gpu_free.shape[1]] = part.gpu_free
            lists.write(rows, part)
            if self._on_rows is not None:
                self._on_rows(ssn, rows, part)
        return rows

    def pod(self, ssn: Session, tmpl: TaskTemplate) -> PodRequest | None:
        """:func:`_template_pod` of ``tmpl``, made once per template shape of the session."""
        if self._ssn is not ssn:
            self.sync_rows(ssn)
        if tmpl.index in self._templates:
            return self._templates[tmpl.index]
        # The pod is made of the request and the GPU request, both part of the shape:
        # templates of one shape share it.
        key: object = ("shape", tmpl.shape) if tmpl.shape else tmpl.index
        if key not in self._pods:
            self._pods[key] = _template_pod(ssn, tmpl)
        pod = self._templates[tmpl.index] = self._pods[key]
        return pod

    def task_pod(self, ssn: Session, task: int) -> PodRequest | None:
        """:func:`_task_pod` of ``task``, made once per request of the session."""
        if self._ssn is not ssn:
            self.sync_rows(ssn)
        key = _task_request(ssn, task)
        if key is None:
            return None
        if key not in self._tasks:
            self._tasks[key] = _pod(ssn, *key)
        return self._tasks[key]

    def lists(self, ssn: Session) -> RowLists:
        """The view as lists, brought up to date."""
        self.sync_rows(ssn)
        assert self._lists is not None
        return self._lists

    @property
    def session(self) -> Session | None:
        """The session the view is of (None before the first refresh)."""
        return self._ssn

    def view(self, ssn: Session, rows: Rows) -> _View:
        """:func:`_view` of ``rows`` (the same arrays), from the kept view."""
        self.sync_rows(ssn)
        full = self._all
        assert full is not None
        counts = full.gpu_count[rows]
        width = max(int(counts.max()) if counts.size else 0, 1 if ssn.arrays.n_devices else 0)
        return _View(
            free_cpu=full.free_cpu[rows],
            free_mem=full.free_mem[rows],
            gpu_free=full.gpu_free[rows, :width],
            gpu_count=counts,
            model_idx=full.model_idx[rows],
        )


def _allowed(ssn: Session, models: tuple[str, ...]) -> B | None:
    """Bool over the session's models plus the no-GPU slot; ``None`` for any model."""
    if not models:
        return None
    return np.array([m in models for m in _models(ssn)] + [False], dtype=np.bool_)


def _pod(
    ssn: Session, cpu: int, memory: int, count: int, milli: int, models: tuple[str, ...]
) -> PodRequest | None:
    """The kernels' pod, or ``None`` when they cannot represent the request."""
    if count == 0:
        return PodRequest(cpu_milli=cpu, memory=memory, num_gpu=0, gpu_milli=0)
    share = min(milli, MILLI)
    if count > 64 or (count > 1 and share < MILLI):
        return None
    return PodRequest(
        cpu_milli=cpu,
        memory=memory,
        num_gpu=count,
        gpu_milli=share,
        allowed_models=_allowed(ssn, models),
    )


def _template_pod(ssn: Session, tmpl: TaskTemplate) -> PodRequest | None:
    spec = ssn.arrays.spec
    return _pod(
        ssn,
        int(tmpl.request[spec.index(CPU)]),
        int(tmpl.request[spec.index(MEMORY)]),
        tmpl.gpu_count,
        tmpl.gpu_milli,
        tmpl.gpu_models,
    )


def _task_request(ssn: Session, task: int) -> tuple[int, int, int, int, tuple[str, ...]] | None:
    """What :func:`_pod` makes the task's pod of (None: the task asks no GPU)."""
    rec = ssn.snapshot.tasks[task]
    g = rec.gpu_request
    if g is None:
        return None
    return rec.request.get(CPU, 0), rec.request.get(MEMORY, 0), g.count, g.milli, g.models


def _task_pod(ssn: Session, task: int) -> PodRequest | None:
    request = _task_request(ssn, task)
    return None if request is None else _pod(ssn, *request)


def _shared_device(
    ssn: Session, task: int, node: int, future: bool, views: ViewCache | None = None
) -> tuple[_View, PodRequest] | None:
    """The one-row view and pod for a device choice; ``None`` when the task does not share a
    device (the session then chooses). ``views`` serves the view of now."""
    pod = _task_pod(ssn, task) if views is None else views.task_pod(ssn, task)
    if pod is None or not pod.is_shared:
        return None
    rows = np.array([node], dtype=np.intp)
    if views is not None and not future:
        return views.view(ssn, rows), pod
    return _view(ssn, rows, future=future), pod


def _answer(share_gpu: int, free: Sequence[int] | I64, pod: PodRequest) -> tuple[int, ...] | None:
    """``(share_gpu,)`` when that device of the node (``free``: its devices' free milli)
    has room for the pod, else None."""
    if not 0 <= share_gpu < len(free) or not has_room(int(free[share_gpu]), pod.gpu_milli):
        return None
    return (share_gpu,)


def _feasible(view: _View, pod: PodRequest) -> B:
    return fit_mask(view.free_cpu, view.free_mem, view.gpu_free, view.model_idx, pod)


class SharedDeviceChoice:
    """``gpu_choice`` for the GPU scorers: only a shared task's device is chosen, by
    :meth:`choose_device` on the node's one-row view; anything else is left to the session.
    :attr:`views` keeps the session's view for the scorer's reads."""

    _views: ViewCache | None = None

    @property
    def views(self) -> ViewCache:
        """This plugin's :class:`ViewCache` (made on first use)."""
        if self._views is None:
            self._views = ViewCache()
        return self._views

    def choose_device(
        self, ssn: Session, task: int, node: int, view: _View, pod: PodRequest
    ) -> tuple[int, ...] | None:
        raise NotImplementedError

    def gpu_choice(
        self, ssn: Session, task: int, node: int, *, future: bool
    ) -> tuple[int, ...] | None:
        found = _shared_device(ssn, task, node, future, self.views)
        if found is None:
            return None
        return self.choose_device(ssn, task, node, found[0], found[1])
