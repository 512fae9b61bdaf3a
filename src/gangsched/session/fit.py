"""Whether a task fits a node: the resource, pod-count and GPU-device rules, over arrays.

This module owns the node-side fit rule; the session, its evaluation cache and the actions call
it (the GPU take of one device is :func:`gangsched.model.gpu_charge.device_take`'s). The rule:

* **now**: the request (pods included, the GPU column charged per the node's devices: ``count
  × device_take``) fits the node's idle resources, ``count`` of its devices each have ``max(take,
  1)`` milli-GPU free, *and* the task also fits "later" (below) — a placement never eats into
  resources a reservation holds;
* **later** (once releasing tasks are gone): the same against ``allocatable - used + releasing -
  pipelined`` and the devices' free milli-GPU plus what is releasing minus what is reserved.

Everything reads an :class:`Occupancy` (the session's live arrays), so the rule is stated once
for every caller.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from gangsched._types import BOOL, I64
from gangsched.model.gpu_charge import device_take
from gangsched.session.arrays import ClusterArrays, TaskTemplate
from gangsched.session.changes import ChangeLog

__all__ = [
    "FullView",
    "Occupancy",
    "choose_devices",
    "device_free",
    "fit_one",
    "fits_node",
    "future_idle",
    "gpu_need",
    "idle",
    "node_free",
    "occupancy_columns",
    "resource_fit",
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


def idle(occ: Occupancy) -> I64:
    out: I64 = occ.arrays.allocatable - occ.used
    return out


def future_idle(occ: Occupancy) -> I64:
    out: I64 = occ.arrays.allocatable - occ.used + occ.releasing - occ.pipelined
    return out


def node_free(occ: Occupancy, rows: npt.NDArray[np.intp] | slice = _ALL, *, future: bool) -> I64:
    """Free resources of the nodes ``rows``: once releases finish with ``future``, else now —
    never into a reservation, so the smaller of now and later."""
    free = occ.arrays.allocatable[rows] - occ.used[rows]
    later = free + occ.releasing[rows] - occ.pipelined[rows]
    out: I64 = later if future else np.minimum(free, later)
    return out


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
            need = np.maximum(device_take(milli, a.gpu_capacity, a.gpu_sharing), 1)[:, None]
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
        ok_later = (self.dev_later[rows] >= need) & self.real[rows]
        now: I64 = ((self.dev_free[rows] >= need) & ok_later).sum(axis=1)
        later: I64 = ok_later.sum(axis=1)
        return now, later


@dataclass(slots=True)
class _Room:
    """:meth:`FullView.room` of one GPU take: each node's need per device (at least 1
    milli-GPU, as a column) and its devices with room now and later, as of the view's
    ``cursor``."""

    need: I64
    now: I64
    later: I64
    cursor: int


def _free_rows(occ: Occupancy, rows: npt.NDArray[np.intp] | slice) -> tuple[I64, I64]:
    free: I64 = occ.arrays.allocatable[rows] - occ.used[rows]
    later: I64 = free + occ.releasing[rows] - occ.pipelined[rows]
    return free, later


def _device_rows(occ: Occupancy, index: I64, rows: npt.NDArray[np.intp] | slice) -> tuple[I64, I64]:
    dev_free: I64 = occ.arrays.gpu_capacity[rows][:, None] - occ.gpu_used[index]
    dev_later: I64 = dev_free + occ.gpu_releasing[index] - occ.gpu_pipelined[index]
    return dev_free, dev_later


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
    free = a.allocatable[rows] - occ.used[rows]
    later = free + occ.releasing[rows] - occ.pipelined[rows]
    m_eff = np.zeros(0, dtype=np.int64)
    if tmpl.gpu_count:
        m_eff = (gpu_need(a, tmpl) if m_all is None else m_all)[rows]
        req = np.repeat(tmpl.request[None, :], rows.size, axis=0)  # one row per node
        req[:, a.spec.gpu_column] = tmpl.gpu_count * m_eff
    else:
        req = tmpl.request  # (n_resources,) broadcast over the rows
    fit_idle: BOOL = np.asarray((req <= free).all(axis=1))
    fit_later: BOOL = np.asarray((req <= later).all(axis=1))
    if tmpl.gpu_count:
        # The rows' devices as a (k, most devices among them) table of flat indices; padding
        # slots read device 0 and never count.
        counts = a.gpu_count[rows]
        slot = np.arange(int(counts.max()) if counts.size else 0)
        real = slot < counts[:, None]
        idx = np.where(real, a.gpu_offset[rows][:, None] + slot, 0)
        dev_free = a.gpu_capacity[rows][:, None] - occ.gpu_used[idx]
        dev_later = dev_free + occ.gpu_releasing[idx] - occ.gpu_pipelined[idx]
        need = np.maximum(m_eff, 1)[:, None]
        ok_later = (dev_later >= need) & real
        fit_idle &= ((dev_free >= need) & ok_later).sum(axis=1) >= tmpl.gpu_count
        fit_later &= ok_later.sum(axis=1) >= tmpl.gpu_count
    fit_idle &= fit_later
    return fit_idle, fit_later


def _fit_all(
    a: ClusterArrays,
    tmpl: TaskTemplate,
    view: FullView,
    m_all: I64 | None,
    rows: npt.NDArray[np.intp] | None = None,
) -> tuple[BOOL, BOOL]:
    """:func:`resource_fit` of every node (or of ``rows``), read from ``view`` (the same
    rules). A few rows cost a handful of array operations, like every node."""
    request = tmpl.request.tolist()
    free, later_t = (view.free, view.later) if rows is None else (view.free[rows], view.later[rows])
    # Every node: column by column (the view's tables are stored so); a few rows: at once.
    fits = _columns_fit if rows is None else _rows_fit
    if not tmpl.gpu_count:
        fit_later = fits(request, later_t)
        fit_idle = fits(request, free)
        fit_idle &= fit_later
        return fit_idle, fit_later
    gcol = a.spec.gpu_column
    m_eff = gpu_need(a, tmpl) if m_all is None else m_all
    request[gcol] = 0  # the GPU column is charged per the node's devices, checked below
    charge = tmpl.gpu_count * (m_eff if rows is None else m_eff[rows])
    fit_idle = fits(request, free)
    fit_idle &= charge <= free[:, gcol]
    fit_later = fits(request, later_t)
    fit_later &= charge <= later_t[:, gcol]
    now, later = view.room(a, tmpl.gpu_milli)
    if rows is not None:
        now, later = now[rows], later[rows]
    fit_idle &= now >= tmpl.gpu_count
    fit_later &= later >= tmpl.gpu_count
    fit_idle &= fit_later
    return fit_idle, fit_later


def _columns_fit(request: list[int], table: I64) -> BOOL:
    """``(request <= table).all(axis=1)``, one column at a time (the view's tables are stored
    column by column, so each comparison reads contiguous memory)."""
    ok: BOOL = np.ones(table.shape[0], dtype=np.bool_)
    for c, q in enumerate(request):
        ok &= q <= table[:, c]
    return ok


def _rows_fit(request: list[int], table: I64) -> BOOL:
    """``(request <= table).all(axis=1)`` of a few rows, in one comparison."""
    ok: BOOL = np.asarray((np.array(request, dtype=np.int64) <= table).all(axis=1))
    return ok


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


def device_rooms(occ: Occupancy, node: int) -> list[tuple[int, int]]:
    """Free milli-GPU of each device of ``node`` now and once releases finish, as plain ints
    (the scalar form of :func:`device_free` for one node)."""
    cap = int(occ.arrays.gpu_capacity[node])
    span = occ.arrays.devices(node)
    return [
        (cap - u, cap - u + rl - pp)
        for u, rl, pp in zip(
            occ.gpu_used[span].tolist(),
            occ.gpu_releasing[span].tolist(),
            occ.gpu_pipelined[span].tolist(),
            strict=True,
        )
    ]


def fit_one(
    occ: Occupancy, tmpl: TaskTemplate, i: int, m_all: I64 | None = None
) -> tuple[bool, bool]:
    """:func:`resource_fit` of node ``i`` as two bools: the same rules in scalar arithmetic
    (a dozen array operations on one row cost more than the numbers)."""
    a = occ.arrays
    req = tmpl.request.tolist()
    count = tmpl.gpu_count
    m = 0
    if count:
        m = int((gpu_need(a, tmpl) if m_all is None else m_all)[i])
        req[a.spec.gpu_column] = count * m
    fit_idle = fit_later = True
    for q, al, u, rl, pp in zip(
        req,
        a.allocatable[i].tolist(),
        occ.used[i].tolist(),
        occ.releasing[i].tolist(),
        occ.pipelined[i].tolist(),
        strict=True,
    ):
        fit_idle = fit_idle and q <= al - u
        fit_later = fit_later and q <= al - u + rl - pp
    if count:
        need = max(m, 1)
        now = later = 0
        for free, free_later in device_rooms(occ, i):
            if free_later >= need:
                later += 1
                now += free >= need
        fit_idle = fit_idle and now >= count
        fit_later = fit_later and later >= count
    return fit_idle and fit_later, fit_later


def device_free(occ: Occupancy, *, future: bool, devices: list[int] | I64 | slice = _ALL) -> I64:
    """Free milli-GPU of each device (flat device order; ``devices`` selects some): once
    releases finish with ``future``, else now — and never into a reservation, so the smaller
    of now and later."""
    a = occ.arrays
    free = a.gpu_capacity[a.gpu_node[devices]] - occ.gpu_used[devices]
    later = free + occ.gpu_releasing[devices] - occ.gpu_pipelined[devices]
    out: I64 = later if future else np.minimum(free, later)
    return out


def fits_node(
    occ: Occupancy, row: I64, node: int, per_device: int, gpus: tuple[int, ...], *, future: bool
) -> bool:
    """Whether a request charged ``row`` on ``node`` (``per_device`` milli-GPU on each of
    ``gpus``) fits now — or once releases finish, with ``future``."""
    a = occ.arrays
    # One node: plain ints (a handful of array operations on one row cost more).
    for q, al, u, rl, pp in zip(
        row.tolist(),
        a.allocatable[node].tolist(),
        occ.used[node].tolist(),
        occ.releasing[node].tolist(),
        occ.pipelined[node].tolist(),
        strict=True,
    ):
        free = al - u
        if q > free + rl - pp or (not future and q > free):
            return False
    if not gpus:
        return True
    count = int(a.gpu_count[node])
    if any(not 0 <= g < count for g in gpus):
        return False
    cap = int(a.gpu_capacity[node])
    for d in a.device_index(node, gpus):
        free = cap - int(occ.gpu_used[d])
        later = free + int(occ.gpu_releasing[d]) - int(occ.gpu_pipelined[d])
        if (later if future else min(free, later)) < per_device:
            return False
    return True


def choose_devices(
    occ: Occupancy, node: int, per_device: int, count: int, *, future: bool
) -> tuple[int, ...]:
    """Device indices on ``node``: a fractional take best-fits onto the fullest device with
    room (ties to the lower index), whole devices are the lowest free indices."""
    cap = int(occ.arrays.gpu_capacity[node])
    # free milli-GPU of each device: once releases finish, or the smaller of both
    room = [later if future else min(free, later) for free, later in device_rooms(occ, node)]
    ok = [i for i, r in enumerate(room) if r >= per_device]
    if per_device < cap:
        ok.sort(key=lambda i: room[i])  # stable: equal rooms keep the lower index first
    return tuple(ok[:count])
