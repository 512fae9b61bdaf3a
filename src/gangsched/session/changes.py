"""The session's change log: what changed in a cycle, read through cursors.

Every change a cycle makes to its state — a placement, a reservation, an eviction, their undo,
a task's state moved on its own — is one *entry* of the session's :class:`ChangeLog`, written by
:mod:`gangsched.session.ledger` and by nothing else. An entry names the node it touched (if
any), the job whose counters moved and the queue whose allocation moved (if any).

A *cursor* is a position in the log (a plain ``int``, :attr:`ChangeLog.end` when it is taken).
A view kept incrementally — per-template evaluations, the shared free view, a plugin's per-node
columns — remembers the cursor of its last refresh and asks what changed since:

* :meth:`ChangeLog.nodes_since` — the node rows with an entry at or after the cursor (sorted,
  each once, read-only); :meth:`ChangeLog.node_since` — the node of the one entry since, as a
  plain ``int``, for the usual refresh after one placement;
* :meth:`ChangeLog.changed_since` — whether anything at all changed (the cheap "nothing
  changed": one comparison);
* :meth:`ChangeLog.queue_changed_since`, :meth:`ChangeLog.queues_since`,
  :meth:`ChangeLog.job_changed_since`, :meth:`ChangeLog.jobs_since` — the same for queues
  (allocation) and jobs (task counts).

One cut-off policy serves every reader: a few entries since the cursor are read from the log
itself; more than :attr:`ChangeLog.cutoff` (``max(16, n_nodes // 64)``) are answered by one
vector comparison of the position of each node's last entry. No reader keeps a copy of
per-node versions.

Across cycles
-------------
A session opened with the previous session of the same cluster (``ClusterState`` does so)
*continues* that session's log when the nodes are the same (names and order, resource columns,
GPU devices): positions go on where the previous log stopped, the session's opening is one
entry that marks every job and queue changed (but a job whose record, tasks and counters are
those of the end of the previous session, and a queue whose record and allocation are and
whose jobs all are, keep their last positions), and every node whose record (capacity, labels,
taints, devices, cordon) or occupancy differs from the end of the previous session is one
entry too. A cursor taken in the previous session (or any earlier one of the same
:attr:`ChangeLog.lineage`) is therefore valid here and answers exactly what a view kept then
must re-read now. When the node set changed (nodes added, removed, renamed, reordered, or
their GPU devices), the log continues for the jobs and queues alone
(:meth:`ChangeLog.continue_over_rows`): their positions go on as above, every node is changed
at the opening and the node rows are this log's own, so a cursor taken before is valid for
the questions about jobs and queues (:meth:`ChangeLog.knows_jobs`) and not for those about
nodes (:meth:`ChangeLog.knows`). When the resource columns changed, the log starts a new
lineage, and a view holding a cursor of another lineage starts afresh.

:attr:`ChangeLog.node_changes` counts each node's entries in this session (0 at the opening,
even when the log continues); it is data a plugin may draw from (``random`` seeds its draws
with it), never a way to decide what to recompute.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from gangsched._types import BOOL, I64
from gangsched.model.nodes import Node

__all__ = ["ChangeLog", "changed_nodes"]

_Rows = npt.NDArray[np.intp]

#: What :meth:`ChangeLog.nodes_since` answers when no node changed (never written to).
_NO_ROWS: _Rows = np.zeros(0, dtype=np.intp)
_NO_ROWS.flags.writeable = False


class _Lineage:
    """The identity shared by a log and the logs that continue it."""

    __slots__ = ()


class ChangeLog:
    """What changed in a session, entry by entry; see the module's docstring."""

    __slots__ = (
        "_continued",
        "_entries",
        "_fingerprint",
        "_job_at",
        "_node_at",
        "_queue_at",
        "_rows_from",
        "_single",
        "base",
        "cutoff",
        "end",
        "lineage",
        "node_changes",
        "records_changed",
        "taints_changed",
    )

    def __init__(self, n_nodes: int, n_queues: int, n_jobs: int) -> None:
        #: The identity of this log and of the logs that continue it: a cursor is valid for
        #: any log of the same lineage.
        self.lineage: object = _Lineage()
        #: The position of the first entry this log holds (0 unless it continues another).
        self.base = 0
        #: The position the next entry takes: a cursor taken now.
        self.end = 0
        #: Up to this many entries since a cursor are read from the log, more by comparing
        #: every node's last position.
        self.cutoff = max(16, n_nodes // 64)
        #: Per node, its entries in this session (a per-session count, starting at 0).
        self.node_changes: I64 = np.zeros(n_nodes, dtype=np.int64)
        #: Nodes whose record differs from the previous session's (all False when the log
        #: starts a new lineage), and whether some node's taints changed.
        self.records_changed: BOOL = np.zeros(n_nodes, dtype=np.bool_)
        self.taints_changed = False
        self._entries: list[int] = []  # the node of each entry (-1: none), from ``base``
        self._node_at: I64 = np.full(n_nodes, -1, dtype=np.int64)  # position of the last entry
        self._queue_at: list[int] = [-1] * n_queues
        self._job_at: list[int] = [-1] * n_jobs
        self._continued = False
        #: The first position whose node rows are this log's (a continuation over a change
        #: of the node set renumbers them): a cursor before it knows nothing of the nodes.
        self._rows_from = 0
        self._fingerprint: tuple[int, bytes] | None = None
        self._single: dict[int, _Rows] = {}  # node -> its one-row answer (read-only)

    # ---------------------------------------------------------------- opening

    def continue_from(
        self,
        previous: ChangeLog,
        stale: BOOL,
        records: BOOL,
        *,
        taints: bool,
        jobs: Sequence[int] | I64 | None = None,
        queues: Sequence[int] | I64 | None = None,
    ) -> bool:
        """Continue ``previous`` (the log of the finished session before, on the same nodes):
        one opening entry (every job and queue changed, but those ``jobs`` and ``queues``
        carry over), then one entry per ``stale`` node (record or occupancy differs from the
        end of ``previous``). ``records``: the nodes whose record differs; ``taints``: whether
        some node's taints did. ``jobs`` / ``queues``: per job / queue of this log, the one of
        ``previous`` whose record and counters (allocation) it continues unchanged, -1 when
        it changed or is new; such a job or queue keeps the position of its last entry.
        Only a new, empty log continues, and a log is continued once (a second session
        opened from the same one starts a new lineage). Whether it continued."""
        if self.end or previous._continued or previous._node_at.size != self._node_at.size:
            return False
        previous._continued = True
        self.lineage = previous.lineage
        self._rows_from = previous._rows_from
        self.base = self.end = previous.end
        self._node_at = previous._node_at.copy()
        self.records_changed = records
        self.taints_changed = taints
        opening = self.end
        self._queue_at = _carried(previous._queue_at, queues, opening, len(self._queue_at))
        self._job_at = _carried(previous._job_at, jobs, opening, len(self._job_at))
        self._entries.append(-1)
        self.end += 1
        for node in np.flatnonzero(stale).tolist():
            self._node_at[node] = self.end
            self._entries.append(node)
            self.end += 1
        return True

    def continue_over_rows(
        self,
        previous: ChangeLog,
        *,
        jobs: Sequence[int] | I64 | None = None,
        queues: Sequence[int] | I64 | None = None,
    ) -> bool:
        """Continue ``previous`` across a change of the node set (nodes added, removed,
        renamed, reordered, or their GPU devices changed): the jobs and queues as
        :meth:`continue_from` carries them, every node changed at the opening, and the node
        rows this log's own — a cursor taken before is valid for the questions about jobs
        and queues (:meth:`knows_jobs`), not for those about nodes (:meth:`knows`). Whether
        it continued."""
        if self.end or previous._continued:
            return False
        previous._continued = True
        self.lineage = previous.lineage
        opening = previous.end
        self._queue_at = _carried(previous._queue_at, queues, opening, len(self._queue_at))
        self._job_at = _carried(previous._job_at, jobs, opening, len(self._job_at))
        self._node_at[:] = opening
        self.records_changed[:] = True
        self.base = self.end = self._rows_from = opening + 1
        return True

    # ---------------------------------------------------------------- the writer

    def note(self, node: int, job: int, queue: int) -> None:
        """Log one change: ``node`` (-1: none) changed, ``job``'s counters moved, and
        ``queue``'s allocation (-1: not). Only the ledger writes."""
        at = self.end
        if node >= 0:
            self._node_at[node] = at
            self.node_changes[node] += 1
        if job >= 0:
            self._job_at[job] = at
        if queue >= 0:
            self._queue_at[queue] = at
        self._entries.append(node)
        self.end = at + 1

    # ---------------------------------------------------------------- readers

    def knows(self, lineage: object, cursor: int) -> bool:
        """Whether ``cursor``, taken on a log of ``lineage``, is valid on this log (for every
        question, the node rows included)."""
        return lineage is self.lineage and self._rows_from <= cursor <= self.end

    def knows_jobs(self, lineage: object, cursor: int) -> bool:
        """Whether ``cursor``, taken on a log of ``lineage``, is valid on this log for the
        questions about jobs and queues, which continue over a change of the node set
        (:meth:`continue_over_rows`)."""
        return lineage is self.lineage and cursor <= self.end

    def changed_since(self, cursor: int) -> bool:
        """Whether anything was logged at or after ``cursor``."""
        return self.end != cursor

    def nodes_since(self, cursor: int) -> _Rows:
        """The node rows with an entry at or after ``cursor``, ascending, each once."""
        grown = self.end - cursor
        if grown <= 0:
            return _NO_ROWS
        start = cursor - self.base
        if start >= 0 and grown <= self.cutoff:
            entries = self._entries
            if grown == 1:
                return self._one_row(entries[-1])
            fresh = set(entries[start:])
            fresh.discard(-1)
            return np.array(sorted(fresh), dtype=np.intp)
        return np.flatnonzero(self._node_at >= cursor)

    def node_since(self, cursor: int) -> int:
        """The node of the one entry logged since ``cursor`` — the usual question after one
        placement, answered without an array — or -1 when there is none, more than one, or
        it names no node (ask :meth:`nodes_since` then)."""
        if self.end - cursor != 1 or cursor < self.base:
            return -1
        return self._entries[-1]

    def _one_row(self, node: int) -> _Rows:
        if node < 0:
            return _NO_ROWS
        rows = self._single.get(node)
        if rows is None:
            rows = self._single[node] = np.array((node,), dtype=np.intp)
            rows.flags.writeable = False
        return rows

    def node_changed_since(self, node: int, cursor: int) -> bool:
        return bool(self._node_at[node] >= cursor)

    def queue_changed_since(self, queue: int, cursor: int) -> bool:
        """Whether ``queue``'s allocation changed at or after ``cursor``."""
        return self._queue_at[queue] >= cursor

    def queues_since(self, cursor: int) -> _Rows:
        return np.flatnonzero(np.asarray(self._queue_at, dtype=np.int64) >= cursor)

    def job_changed_since(self, job: int, cursor: int) -> bool:
        """Whether ``job``'s task counters changed at or after ``cursor``."""
        return self._job_at[job] >= cursor

    def jobs_since(self, cursor: int) -> _Rows:
        return np.flatnonzero(np.asarray(self._job_at, dtype=np.int64) >= cursor)

    def fingerprint(self, occupancy: Sequence[I64]) -> bytes:
        """A digest of ``occupancy`` (the session's used, releasing and reserved columns, per
        node and per device), worked out again only after an entry: equal fingerprints are
        equal occupancies, also across sessions (a key for answers that depend on the
        occupancy alone)."""
        known = self._fingerprint
        if known is not None and known[0] == self.end:
            return known[1]
        digest = hashlib.blake2b(digest_size=16)
        for column in occupancy:
            digest.update(column.tobytes())
        out = digest.digest()
        self._fingerprint = (self.end, out)
        return out


def _carried(
    before: list[int], kept: Sequence[int] | I64 | None, opening: int, n: int
) -> list[int]:
    """Per row of a continuing log, the position of its last entry: the opening, or the last
    position in ``before`` of the row it continues unchanged (``kept``; -1: none)."""
    if kept is None:
        return [opening] * n
    rows = np.asarray(kept, dtype=np.int64)
    if not before:
        return [opening] * rows.size
    last = np.asarray(before, dtype=np.int64)
    out: list[int] = np.where(rows < 0, opening, last[np.maximum(rows, 0)]).tolist()
    return out


def changed_nodes(
    before: Sequence[Node],
    after: Sequence[Node],
    occupancy_before: Sequence[I64],
    occupancy_after: Sequence[I64],
    gpu_node: I64,
) -> tuple[BOOL, BOOL, bool] | None:
    """What a continuing log logs at its opening: ``(stale, records, taints)`` — the nodes
    whose record or occupancy differs between two sessions, the nodes whose record does, and
    whether some node's taints changed. ``before`` / ``after``: the node records;
    ``occupancy_*``: used, releasing, pipelined (per node) then the same per device; None when
    a node was renamed (then nothing continues)."""
    records = np.zeros(len(after), dtype=np.bool_)
    taints = False
    if before is not after:
        for i, (x, y) in enumerate(zip(before, after, strict=True)):
            if x is y or x == y:
                continue
            if x.name != y.name:
                return None
            taints = taints or x.taints != y.taints
            records[i] = True
    rows: BOOL = records.copy()
    for old, new in zip(occupancy_before[:3], occupancy_after[:3], strict=True):
        rows |= (old != new).any(axis=1)
    devices = np.zeros(gpu_node.size, dtype=np.bool_)
    for old, new in zip(occupancy_before[3:], occupancy_after[3:], strict=True):
        devices |= old != new
    if devices.any():
        rows |= np.bincount(gpu_node[devices], minlength=rows.size) > 0
    return rows, records, taints
