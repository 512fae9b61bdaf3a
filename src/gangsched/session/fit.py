"""Whether a task fits a node: the resource, pod-count and GPU-device rules, over arrays.

This module owns the node-side fit rule; the session, its evaluation cache and the actions call
it (the GPU take of one device is :func:`gangsched.model.gpu_charge.device_take`'s). The rule:

* **now**: the request (pods included, the GPU column charged per the node's devices: ``count
  × device_take``) fits the node's idle resources, ``count`` of its devices each have ``max(take,
  1)`` milli-GPU free, *and* the task also fits "later" (below) — a placement never eats into
  resources a reservation holds;
* **later** (once releasing tasks are gone): the same against ``allocatable - used + releasing -
  pipelined`` and the devices' free milli-GPU plus what is releasing minus what is reserved.

Everything reads an :class:`Occupancy` (the session's live arrays). The rule is written once,
as text, in :mod:`gangsched.session.fit_rule`; every function here that compares a request with
a room — over every node, a few rows or one node in plain ints, and the refusal reasons — is
generated from it when this module is imported, so they agree by construction.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import numpy.typing as npt

from gangsched._codegen import define
from gangsched._types import BOOL, I64
from gangsched.model.gpu_charge import device_take
from gangsched.session.arrays import ClusterArrays, TaskTemplate
from gangsched.session.changes import ChangeLog
from gangsched.session.fit_rule import RULE, fit_source

__all__ = [
    "FullView",
    "Occupancy",
    "choose_devices",
    "device_free",
    "device_room",
    "device_rooms",
    "device_table",
    "fit_one",
    "fits_node",
    "future_idle",
    "gpu_need",
    "idle",
    "node_free",
    "node_room",
    "occupancy_columns",
    "resource_fit",
    "shortfalls",
    "shortfalls_view",
]

_ALL = slice(None)


@dataclass(slots=True, eq=False)
class Occupancy:
    """The live occupancy a fit is judged against: the cluster's static arrays and what its
    nodes and devices hold, are releasing and have reserved. A session is one (its first
    fields)."""

    arrays: ClusterArrays
    used: I64
    releasing: I64
    pipelined: I64
    gpu_used: I64
    gpu_releasing: I64
    gpu_pipelined: I64


def occupancy_columns(occ: Occupancy) -> tuple[I64, I64, I64, I64, I64, I64]:
    """What the nodes hold, release and reserve, per node then per device: the columns whose
    equality is equality of occupancy."""
    return (
        occ.used,
        occ.releasing,
        occ.pipelined,
        occ.gpu_used,
        occ.gpu_releasing,
        occ.gpu_pipelined,
    )


def gpu_need(arrays: ClusterArrays, tmpl: TaskTemplate) -> I64:
    """Milli-GPU ``tmpl`` takes on each device of every node. Shape (n_nodes,)."""
    return device_take(tmpl.gpu_milli, arrays.gpu_capacity, arrays.gpu_sharing)


@dataclass(slots=True)
class FullView:
    """Every node's free resources (now and later) and free milli-GPU per device slot, kept
    current from the session's change log: what a fit over all nodes reads, whatever the
    template, so that many templates evaluated on the same occupancy share it. Device slots are
    a ``(n_nodes, most devices)`` table; padding slots (``real`` False) never count."""

    log: ChangeLog  # the change log it follows
    cursor: int  # the log's cursor at the last refresh
    free: I64
    later: I64
    real: BOOL
    index: I64
    dev_free: I64
    dev_later: I64
    #: Per GPU take (a template's ``gpu_milli``): each node's devices with room for it now
    #: (and later), and later alone; brought up to date when asked for.
    rooms: dict[int, _Room] = field(default_factory=dict)

    @classmethod
    def build(cls, occ: Occupancy, log: ChangeLog) -> FullView:
        a = occ.arrays
        slot = np.arange(a.max_gpus)
        real = slot < a.gpu_count[:, None]
        index = np.where(real, a.gpu_offset[:-1][:, None] + slot, 0)
        free, later = (np.asfortranarray(t) for t in _free_rows(occ, _ALL))  # by column
        dev_free, dev_later = _device_rows(occ, index, _ALL)
        return cls(log, log.end, free, later, real, index, dev_free, dev_later)

    def refresh(self, occ: Occupancy) -> None:
        """Re-read the nodes the change log names since the last refresh."""
        log = self.log
        if not log.changed_since(self.cursor):
            return
        rows = log.nodes_since(self.cursor)
        self.cursor = log.end
        self.free[rows], self.later[rows] = _free_rows(occ, rows)
        self.dev_free[rows], self.dev_later[rows] = _device_rows(occ, self.index[rows], rows)

    def room(self, a: ClusterArrays, milli: int) -> tuple[I64, I64]:
        """Per node, its devices with room for a take of ``milli`` now (and later), and
        later."""
        found = self.rooms.get(milli)
        if found is None:
            need = _view_need(a, milli)
            now, later = self._room(need, _ALL)
            found = self.rooms[milli] = _Room(need, now, later, self.cursor)
        elif found.cursor != self.cursor:
            # the rows changed since the room's refresh (read from the view's tables: rows
            # changed after the view's own refresh read the view as it is)
            rows = self.log.nodes_since(found.cursor)
            found.cursor = self.cursor
            found.now[rows], found.later[rows] = self._room(found.need[rows], rows)
        return found.now, found.later

    def _room(self, need: I64, rows: npt.NDArray[np.intp] | slice) -> tuple[I64, I64]:
        return _device_room(self.dev_free[rows], self.dev_later[rows], self.real[rows], need)


@dataclass(slots=True)
class _Room:
    """:meth:`FullView.room` of one GPU take: each node's need per device (at least 1
    milli-GPU, as a column) and its devices with room now and later, as of the view's
    ``cursor``."""

    need: I64
    now: I64
    later: I64
    cursor: int


def resource_fit(
    occ: Occupancy,
    tmpl: TaskTemplate,
    rows: npt.NDArray[np.intp],
    m_all: I64 | None = None,
    view: FullView | None = None,
) -> tuple[BOOL, BOOL]:
    """``(fits now, fits later)`` of ``tmpl`` on ``rows``. ``m_all``: :func:`gpu_need`,
    when the caller keeps it; ``view``: a current :class:`FullView`, read when ``rows`` are
    all the nodes in order, or a few rows of them."""
    a = occ.arrays
    if view is not None and rows.size > 1:
        if rows.size == a.n_nodes:
            return _fit_all(a, tmpl, view, m_all)
        return _fit_all(a, tmpl, view, m_all, rows)
    if rows.size <= _FEW:  # the usual refresh after a placement or a few: plain ints
        return _fit_few(occ, tmpl, rows, m_all)
    return _arrays_fit(occ, tmpl, rows, m_all)


#: Up to this many rows, :func:`resource_fit` runs in scalar arithmetic (a dozen array
#: operations on a few rows cost more than the numbers).
_FEW = 5


def _fit_few(
    occ: Occupancy, tmpl: TaskTemplate, rows: npt.NDArray[np.intp], m_all: I64 | None
) -> tuple[BOOL, BOOL]:
    """:func:`resource_fit` of a few rows, row by row (:func:`fit_one`)."""
    if tmpl.gpu_count and m_all is None:
        m_all = gpu_need(occ.arrays, tmpl)
    pairs = [fit_one(occ, tmpl, i, m_all) for i in rows.tolist()]
    fit_idle = np.array([now for now, _ in pairs], dtype=np.bool_)
    fit_later = np.array([later for _, later in pairs], dtype=np.bool_)
    return fit_idle, fit_later


# ------------------------------------------------------------------ the rule's generated forms
#
# Every function below is rendered from :data:`gangsched.session.fit_rule.RULE` and defined in
# this module's namespace (so it reads this module's names, as if written here); the
# declarations give each its type.


class _NodeFree(Protocol):
    def __call__(
        self, occ: Occupancy, rows: npt.NDArray[np.intp] | slice = _ALL, *, future: bool
    ) -> I64: ...


class _DeviceFree(Protocol):
    def __call__(
        self, occ: Occupancy, *, future: bool, devices: list[int] | I64 | slice = _ALL
    ) -> I64: ...


class _NodeRoom(Protocol):
    def __call__(
        self, occ: Occupancy, node: int, columns: Sequence[int], *, future: bool
    ) -> list[int]: ...


class _DeviceRoom(Protocol):
    def __call__(self, occ: Occupancy, node: int, cap: int, *, future: bool) -> list[int]: ...


class _DeviceTable(Protocol):
    def __call__(
        self, occ: Occupancy, index: I64, rows: npt.NDArray[np.intp] | slice, *, future: bool
    ) -> I64: ...


class _FitOne(Protocol):
    def __call__(
        self, occ: Occupancy, tmpl: TaskTemplate, i: int, m_all: I64 | None = None
    ) -> tuple[bool, bool]: ...


class _FitsNode(Protocol):
    def __call__(
        self,
        occ: Occupancy,
        row: I64,
        node: int,
        per_device: int,
        gpus: tuple[int, ...],
        *,
        future: bool,
    ) -> bool: ...


class _ChooseDevices(Protocol):
    def __call__(
        self, occ: Occupancy, node: int, per_device: int, count: int, *, future: bool
    ) -> tuple[int, ...]: ...


class _FitAll(Protocol):
    def __call__(
        self,
        a: ClusterArrays,
        tmpl: TaskTemplate,
        view: FullView,
        m_all: I64 | None,
        rows: npt.NDArray[np.intp] | None = None,
    ) -> tuple[BOOL, BOOL]: ...


class _ShortfallsView(Protocol):
    def __call__(
        self,
        a: ClusterArrays,
        tmpl: TaskTemplate,
        view: FullView,
        m_all: I64 | None,
        rows: npt.NDArray[np.intp] | None = None,
    ) -> tuple[list[BOOL], BOOL]: ...


_Rows = npt.NDArray[np.intp] | slice
_made = define(fit_source(RULE), globals(), "fit rule")

idle: Callable[[Occupancy], I64] = _made["idle"]
future_idle: Callable[[Occupancy], I64] = _made["future_idle"]
node_free: _NodeFree = _made["node_free"]
device_free: _DeviceFree = _made["device_free"]
_free_rows: Callable[[Occupancy, _Rows], tuple[I64, I64]] = _made["_free_rows"]
_device_rows: Callable[[Occupancy, I64, _Rows], tuple[I64, I64]] = _made["_device_rows"]
_arrays_fit: Callable[
    [Occupancy, TaskTemplate, npt.NDArray[np.intp], I64 | None], tuple[BOOL, BOOL]
] = _made["_arrays_fit"]
_view_need: Callable[[ClusterArrays, int], I64] = _made["_view_need"]
_device_room: Callable[[I64, I64, BOOL, I64], tuple[I64, I64]] = _made["_device_room"]
_fit_all: _FitAll = _made["_fit_all"]
device_rooms: Callable[[Occupancy, int], list[tuple[int, int]]] = _made["device_rooms"]
node_room: _NodeRoom = _made["node_room"]
device_room: _DeviceRoom = _made["device_room"]
device_table: _DeviceTable = _made["device_table"]
fit_one: _FitOne = _made["fit_one"]
fits_node: _FitsNode = _made["fits_node"]
choose_devices: _ChooseDevices = _made["choose_devices"]
shortfalls: Callable[
    [Occupancy, TaskTemplate, npt.NDArray[np.intp], I64 | None], tuple[list[BOOL], BOOL]
] = _made["shortfalls"]
shortfalls_view: _ShortfallsView = _made["shortfalls_view"]
