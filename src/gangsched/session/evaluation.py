"""Per-template predicates, resource fit and scores on every node, refreshed from the change log.

An :class:`Evaluation` holds, for one task template (or one task shape, when every row plugin
is ``shape_only``), the predicate mask, the fit now and later (:mod:`gangsched.session.fit`) and the
summed ``node_score`` of every node, plus the two "best" vectors (score where the template
passes and fits, ``-inf`` elsewhere) that make picking a node one ``argmax``. Every change to a
node is an entry of the session's change log (:mod:`gangsched.session.changes`); an evaluation
keeps the cursor of its last refresh, and :meth:`Evaluator.evaluate` recomputes only the rows
the log names since that cursor.

Ties between equally scored nodes go to the lowest node index (the snapshot's node order);
Volcano breaks them at random.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from gangsched._types import BOOL, F64, I64
from gangsched.session.arrays import TaskTemplate
from gangsched.session.changes import ChangeLog
from gangsched.session.fit import (
    FullView,
    fit_one,
    gpu_need,
    occupancy_columns,
    resource_fit,
    shortfalls,
    shortfalls_view,
)
from gangsched.units import PODS

if TYPE_CHECKING:
    from gangsched.session.core import Session

__all__ = ["Evaluation", "Evaluator"]


@dataclass(slots=True, eq=False)
class Evaluation:
    cursor: int  # the change log's cursor at the last refresh
    ok: BOOL  # (n_nodes,) plugin predicates pass
    fit_idle: BOOL  # (n_nodes,) resources fit now
    fit_future: BOOL  # (n_nodes,) resources fit once releasing tasks are gone
    score: F64  # (n_nodes,)
    # score where ok & fit_idle (resp. ok & fit_future), -inf elsewhere: one argmax per pick
    best_idle: F64 = field(default_factory=lambda: np.zeros(0))  # (n_nodes,)
    best_future: F64 = field(default_factory=lambda: np.zeros(0))  # (n_nodes,)
    gpu_need: I64 | None = None  # (n_nodes,) milli-GPU charged per device on each node
    # Why each node refuses the template (a code into Evaluator's words, -1: it fits), and the
    # change log's cursor when they were last refreshed; filled by the first fit_error.
    reasons: I64 | None = None
    reason_cursor: int = 0
    # The last fit_error over every node (a function of ``reasons`` alone) and the change
    # log's cursor when it was last found to hold: nothing changed since, so no reason moved.
    error: tuple[int, str] | None = None
    # Set when the evaluation was carried over a change of the node set: its rows are still
    # the previous session's, and its cursors that session's log's (settled on first use).
    moved: _Moved | None = None
    # Set when ``reasons`` were carried over a change of the node set and not yet read in
    # this session: they are still in the previous session's rows, ``reason_cursor`` of its
    # log (moved and refreshed by the next fit_error).
    reasons_moved: _Moved | None = None
    # Rows whose score (and best vectors) lag behind their predicates and fit, left by
    # Evaluator.feasible; scored by the next Evaluator.evaluate.
    unscored: npt.NDArray[np.intp] | None = None


@dataclass(slots=True, eq=False)
class _Moved:
    """How the rows of a previous session's evaluations become this session's after the node
    set changed (nodes added, removed, renamed or reordered), shared by every evaluation
    carried then."""

    log: ChangeLog  # the previous session's log, which the evaluations' cursors belong to
    take: npt.NDArray[np.intp]  # per node now, its previous row (0 for a new node)
    now_of: npt.NDArray[np.intp]  # per previous row, its row now (-1: the node is gone)
    stale: npt.NDArray[np.intp]  # rows of new nodes and of nodes whose record or occupancy
    # differs from the end of the previous session
    lineage: object  # this session's log's lineage, and its position at the carry: what
    start: int  # this session logged since is read from there
    # Per cursor of the previous log, the rows now to refresh for what happened up to the
    # carry (many evaluations were last read at the same cursor).
    known: dict[int, BOOL] = field(default_factory=dict)

    def rows(self, log: ChangeLog, cursor: int) -> npt.NDArray[np.intp]:
        """The rows now that a view read at ``cursor`` of the previous log must refresh to
        be current with ``log`` (a log of :attr:`lineage`)."""
        upto = self.known.get(cursor)
        if upto is None:
            before = self.now_of[self.log.nodes_since(cursor)]
            upto = np.zeros(self.take.size, dtype=np.bool_)
            upto[before[before >= 0]] = True
            upto[self.stale] = True
            self.known[cursor] = upto
        since = log.nodes_since(self.start)
        if not since.size:
            return np.flatnonzero(upto)
        marked = upto.copy()
        marked[since] = True
        return np.flatnonzero(marked)


def _forget_reasons(ev: Evaluation) -> None:
    """Drop the per-node reasons of ``ev`` (the next fit_error finds them on every node)."""
    ev.reasons = None
    ev.reasons_moved = None
    ev.error = None


class Evaluator:
    """The evaluation cache of one session."""

    __slots__ = ("_evals", "_factories", "_needs", "_ssn", "_words", "carried", "same_ground")

    def __init__(self, ssn: Session) -> None:
        self._ssn = ssn
        # The factories the session's plugins are made by, as they are at open: a registry's
        # plugins may be replaced in place before the next cycle.
        registry = ssn.registry
        self._factories: dict[str, object] = dict(registry.plugins) if registry else {}
        self._evals: dict[object, Evaluation] = {}
        self._words: dict[str, int] = {}  # reason word -> code (Evaluation.reasons)
        self._needs: dict[int, I64] = {}  # GPU take -> its gpu_need (shared, never written)
        #: Evaluations taken over from the previous session (:meth:`carry`).
        self.carried = 0
        #: Whether :meth:`carry` found the previous session on the same ground (the
        #: ``shape_only`` contract, configuration, factories, nodes and taints).
        self.same_ground = False

    def carry(self, previous: Evaluator) -> int:
        """Take over the evaluations of ``previous`` (a finished session's) that this session
        can use, and mark the rows they must refresh. Returns how many were taken.

        Valid when the answers for a node row depend on nothing but the template's shape, that
        node and the nodes' taints (the ``shape_only`` contract): every row plugin declares
        ``shape_only`` in both sessions, the configuration and the registry's factories (as
        they were when each session opened) are the same, the nodes are the same (names,
        order, resource columns, number of GPU devices each) and no node's taints changed (a
        plugin may normalise over the cluster's taints). The session's change log continues the
        previous one (:meth:`~gangsched.session.changes.ChangeLog.continue_from`), so an
        evaluation keeps its cursor: a row is refreshed when its node's record (capacity,
        labels, devices, cordon) or occupancy differs from the end of the previous session,
        or when it changed there after the evaluation last read it; every other row keeps its
        values, which are what a fresh evaluation computes (the same inputs, the same
        arithmetic)."""
        ssn, old = self._ssn, previous._ssn
        log = ssn.changes
        if not log.knows(old.changes.lineage, old.changes.end):
            # The log did not continue over the same node rows: the evaluations move onto
            # the new rows when only the node set changed, else nothing is carried.
            if old.arrays.node_names != ssn.arrays.node_names:
                return self._carry_moved(previous)
            return 0
        if log.taints_changed:
            return 0  # another ground: taints moved
        if self._factories != previous._factories or not _same_ground(old, ssn):
            return 0
        if log.records_changed.any() and _relabelled_under_preference(old, ssn):
            return 0
        self.same_ground = True
        records = log.records_changed.any()
        # (the evaluations' keys are ("shape", shape): the shape_only contract holds; the
        # templates share few shape objects, each hashed once here: any template of a shape
        # serves, its evaluation reads the shape alone)
        by_object = {id(t.shape): t for t in ssn.templates}
        wanted: dict[object, TaskTemplate] = {t.shape: t for t in by_object.values()}
        taken = 0
        for key, ev in previous._evals.items():
            tmpl = wanted.get(key[1]) if isinstance(key, tuple) else None
            if tmpl is None:
                continue
            # Its cursors stay: the continued log names what changed since, the nodes whose
            # record or occupancy moved between the sessions included. Its last fit_error
            # stays too (a function of the per-node reasons, which are refreshed on the same
            # rows); a node's devices may have changed, so the GPU take is read again (once
            # per GPU share).
            if ev.gpu_need is not None and records:
                ev.gpu_need = self._need(tmpl)
            if ev.reasons_moved is not None:
                _forget_reasons(ev)  # rows of a session before the previous one
            self._evals[key] = ev
            taken += 1
        self._words = previous._words  # the carried reason codes' words
        previous._evals = {}  # moved, not shared: the previous session is finished
        self.carried = taken
        return taken

    def _carry_moved(self, previous: Evaluator) -> int:
        """:meth:`carry` when the node set changed (nodes added, removed, renamed or
        reordered): the log starts a new lineage, so each evaluation taken over keeps the
        previous log and a map of rows (:class:`_Moved`) and is settled when first used: its
        rows gathered into this session's order, and refreshed on the new nodes, the nodes
        whose record or occupancy differs from the end of the previous session and the nodes
        changed since its cursors (in the previous session, then in this one).

        Valid under the same conditions as :meth:`carry`, and when the nodes' taints did not
        change (no node added or removed with taints, no kept node's taints changed), the
        resource columns are the same and no template prefers nodes by label (preferred
        node affinity and taint scores are normalised over every node)."""
        ssn, old = self._ssn, previous._ssn
        if self._factories != previous._factories or not _same_ground(old, ssn):
            return 0
        if old.arrays.spec.names != ssn.arrays.spec.names or _prefers_by_label(ssn):
            return 0
        moved = _moved_rows(old, ssn)
        if moved is None:
            return 0
        wanted = {t.shape for t in ssn.templates}
        taken = 0
        for key, ev in previous._evals.items():
            if not isinstance(key, tuple) or key[1] not in wanted or ev.moved is not None:
                continue  # not wanted, or moved twice before any use: evaluated afresh
            ev.moved = moved
            ev.error = None  # counts over another node set
            if ev.reasons_moved is not None:
                _forget_reasons(ev)  # rows of a session before the previous one
            self._evals[key] = ev
            taken += 1
        self._words = previous._words
        previous._evals = {}
        self.carried = taken
        return taken

    def _settle(self, ev: Evaluation, tmpl: TaskTemplate, moved: _Moved, scored: bool) -> None:
        """Bring an evaluation carried over a change of the node set into this session's rows
        (:meth:`_carry_moved`), current with the log (the refreshed rows' scores left for
        later unless ``scored``)."""
        ssn = self._ssn
        log = ssn.changes
        ev.moved = None
        take = moved.take
        rows = moved.rows(log, ev.cursor)
        ev.cursor = log.end
        ev.ok, ev.fit_idle, ev.fit_future = ev.ok[take], ev.fit_idle[take], ev.fit_future[take]
        ev.score, ev.best_idle, ev.best_future = (
            ev.score[take],
            ev.best_idle[take],
            ev.best_future[take],
        )
        if ev.unscored is not None:  # rows left unscored in the previous session
            now = moved.now_of[ev.unscored]
            now = now[now >= 0]
            ev.unscored = now if now.size else None
        if tmpl.gpu_count:
            ev.gpu_need = self._need(tmpl)
        if rows.size:
            self._refresh_rows(ev, tmpl, rows, scored)
        if ev.reasons is not None:
            ev.reasons_moved = moved  # moved when a fit_error reads them

    def _settle_reasons(self, ev: Evaluation, tmpl: TaskTemplate, moved: _Moved) -> None:
        """Bring the per-node reasons of an evaluation settled over a change of the node set
        (:meth:`_settle`) into this session's rows, current with the log."""
        assert ev.reasons is not None
        log = self._ssn.changes
        ev.reasons_moved = None
        rows = moved.rows(log, ev.reason_cursor)
        ev.reason_cursor = log.end
        ev.reasons = ev.reasons[moved.take]
        if rows.size:
            ev.reasons[rows] = self._reason_rows(tmpl, rows, ev.gpu_need)

    def _need(self, tmpl: TaskTemplate) -> I64:
        """:func:`gpu_need` of ``tmpl``, shared by the templates of its GPU share."""
        m_all = self._needs.get(tmpl.gpu_milli)
        if m_all is None:
            m_all = self._needs[tmpl.gpu_milli] = gpu_need(self._ssn.arrays, tmpl)
        return m_all

    def _key(self, tmpl: TaskTemplate) -> object:
        return ("shape", tmpl.shape) if self._ssn.points.shape_only else tmpl.index

    def evaluate(self, tmpl: TaskTemplate, *, scored: bool = True) -> Evaluation:
        """Predicates, resource fit and scores of ``tmpl`` on every node, refreshed only on
        the rows changed since the last call. ``scored=False`` (:meth:`feasible`): the
        scores of the rows refreshed are left for the next scored call
        (:attr:`Evaluation.unscored`)."""
        ssn = self._ssn
        key = self._key(tmpl)
        ev = self._evals.get(key)
        if ev is None:
            ev = self._evals[key] = self._first(tmpl)
            return ev
        if ev.moved is not None:
            self._settle(ev, tmpl, ev.moved, scored)
        else:
            log = ssn.changes
            cursor = ev.cursor
            if log.changed_since(cursor):
                ev.cursor = log.end
                node = log.node_since(cursor)
                if node >= 0:  # the usual refresh after one placement: plain numbers
                    self._refresh_one(ev, tmpl, node)
                else:
                    rows = log.nodes_since(cursor)
                    if rows.size > 1:
                        self._refresh_rows(ev, tmpl, rows, scored)
                    elif rows.size:
                        self._refresh_one(ev, tmpl, int(rows[0]))
        if scored and ev.unscored is not None:
            self._score_rows(ev, tmpl)
        return ev

    def feasible(self, tmpl: TaskTemplate) -> Evaluation:
        """:meth:`evaluate` for where ``tmpl`` may go: its predicate mask and fit now and
        later are current, its scores (and the best vectors) may lag on
        :attr:`Evaluation.unscored` rows until the next :meth:`evaluate`."""
        return self.evaluate(tmpl, scored=False)

    def _refresh_rows(
        self, ev: Evaluation, tmpl: TaskTemplate, rows: npt.NDArray[np.intp], scored: bool = True
    ) -> None:
        """:meth:`evaluate`'s refresh of the nodes ``rows``, vectorized (their scores left for
        later unless ``scored``)."""
        ssn = self._ssn
        ok = ssn.points.predicate_ok(tmpl, rows)
        ev.ok[rows] = ok
        view = self._view() if ssn.arrays.n_nodes > 1 else None  # rows read from the view
        fit_idle, fit_future = resource_fit(ssn, tmpl, rows, ev.gpu_need, view)
        ev.fit_idle[rows], ev.fit_future[rows] = fit_idle, fit_future
        if not scored:
            if ev.unscored is None:
                ev.unscored = rows
            else:  # a row named twice is scored twice, to the same figure
                ev.unscored = np.concatenate((ev.unscored, rows))
                if ev.unscored.size > ev.ok.size:
                    ev.unscored = np.unique(ev.unscored)
            return
        score = ssn.points.node_score(tmpl, rows)
        ev.score[rows] = score
        ev.best_idle[rows] = np.where(ok & fit_idle, score, -np.inf)
        ev.best_future[rows] = np.where(ok & fit_future, score, -np.inf)

    def _score_rows(self, ev: Evaluation, tmpl: TaskTemplate) -> None:
        """Score the rows :meth:`feasible` left unscored, on the occupancy of now (what a
        fresh evaluation scores: a row that changed since was refreshed)."""
        rows = ev.unscored
        ev.unscored = None
        if rows is None or not rows.size:
            return
        score = self._ssn.points.node_score(tmpl, rows)
        ev.score[rows] = score
        ev.best_idle[rows] = np.where(ev.ok[rows] & ev.fit_idle[rows], score, -np.inf)
        ev.best_future[rows] = np.where(ev.ok[rows] & ev.fit_future[rows], score, -np.inf)

    def _view(self) -> FullView:
        """The session's view of every node's free resources, current with its change log."""
        ssn = self._ssn
        view = ssn.cache.fit_view
        if view is None:
            view = ssn.cache.fit_view = FullView.build(ssn, ssn.changes)
        else:
            view.refresh(ssn)
        return view

    def _refresh_one(self, ev: Evaluation, tmpl: TaskTemplate, i: int) -> None:
        """:meth:`evaluate`'s refresh of node ``i`` alone: the same answers, as scalars."""
        ssn = self._ssn
        row = np.array([i], dtype=np.intp)
        ok = ssn.points.predicate_ok_one(tmpl, row)
        fit_idle, fit_future = fit_one(ssn, tmpl, i, ev.gpu_need)
        score = ssn.points.node_score_one(tmpl, row)
        ev.ok[i], ev.fit_idle[i], ev.fit_future[i], ev.score[i] = ok, fit_idle, fit_future, score
        ev.best_idle[i] = score if ok and fit_idle else -np.inf
        ev.best_future[i] = score if ok and fit_future else -np.inf

    def _first(self, tmpl: TaskTemplate) -> Evaluation:
        """The first evaluation of ``tmpl``: every node, the fit read from the shared view."""
        ssn = self._ssn
        n = ssn.arrays.n_nodes
        rows = np.arange(n, dtype=np.intp)
        m_all = self._need(tmpl) if tmpl.gpu_count else None
        ok = ssn.points.predicate_ok(tmpl, rows)
        view = self._view() if n > 1 else None  # all nodes, read from the shared view
        fit_idle, fit_future = resource_fit(ssn, tmpl, rows, m_all, view)
        score = ssn.points.node_score(tmpl, rows)
        return Evaluation(
            cursor=ssn.changes.end,
            ok=ok,
            fit_idle=fit_idle,
            fit_future=fit_future,
            score=score,
            best_idle=np.where(ok & fit_idle, score, -np.inf),
            best_future=np.where(ok & fit_future, score, -np.inf),
            gpu_need=m_all,
        )

    def best_node(self, tmpl: TaskTemplate, among: BOOL | None = None) -> tuple[int, bool]:
        """Best node for ``tmpl``: highest score among nodes where it fits now, else among nodes
        where it fits once releasing resources are freed (then ``pipelined`` is True).
        Returns ``(-1, False)`` when no node fits (always so on a cluster without nodes)."""
        ev = self.evaluate(tmpl)
        if ev.score.size == 0:
            return -1, False
        if among is None:
            for best, pipelined in ((ev.best_idle, False), (ev.best_future, True)):
                node = int(best.argmax())
                if best[node] > -np.inf:
                    return node, pipelined
            return -1, False
        base = ev.ok & among
        for mask, pipelined in ((base & ev.fit_idle, False), (base & ev.fit_future, True)):
            if mask.any():
                return int(np.argmax(np.where(mask, ev.score, -np.inf))), pipelined
        return -1, False

    def fit_error(self, tmpl: TaskTemplate, among: BOOL | None = None) -> str:
        """Why no node fits ``tmpl``, aggregated over nodes as kube-scheduler words it. Each
        node's reason is the first that applies: outside ``among`` (the allowed topology
        domain), a predicate's word (tier order), then the first resource short once releases
        finish (pods, then each resource; GPU devices count with the GPU column). Per-node
        reasons are kept with the template's evaluation and refreshed on the nodes the change
        log names."""
        ev = self.feasible(tmpl)  # the reasons read no score
        ssn = self._ssn
        log = ssn.changes
        stamp = log.end
        if among is None and ev.error is not None and not log.changed_since(ev.error[0]):
            return ev.error[1]
        n = ssn.arrays.n_nodes
        if ev.reasons_moved is not None:
            self._settle_reasons(ev, tmpl, ev.reasons_moved)
        if ev.reasons is None:
            ev.reasons = np.full(n, -1, dtype=np.int64)
            rows = np.arange(n, dtype=np.intp)
        else:
            rows = log.nodes_since(ev.reason_cursor)
        ev.reason_cursor = stamp
        kept = among is None and ev.error is not None  # its wording holds if no code moved
        if rows.size:
            codes = self._reason_rows(tmpl, rows, ev.gpu_need)
            kept = kept and bool(np.array_equal(codes, ev.reasons[rows]))
            ev.reasons[rows] = codes
        if kept and ev.error is not None:
            ev.error = (stamp, ev.error[1])
            return ev.error[1]
        reason = ev.reasons
        if among is not None:
            outside = self._code("node(s) outside the allowed topology domain")
            reason = np.where(among, reason, outside)
        words = {code: word for word, code in self._words.items()}
        counts = np.bincount(reason[reason >= 0]).tolist() if n else []
        parts = sorted(((cnt, words[r]) for r, cnt in enumerate(counts) if cnt), key=_by_count)
        n_ok = int((reason < 0).sum())
        detail = ", ".join(f"{cnt} {word}" for cnt, word in parts)
        error = f"{n_ok}/{n} nodes are available" + (f": {detail}." if detail else ".")
        if among is None:
            ev.error = (stamp, error)
        return error

    def _code(self, word: str) -> int:
        return self._words.setdefault(word, len(self._words))

    def _reason_rows(
        self, tmpl: TaskTemplate, rows: npt.NDArray[np.intp], m_all: I64 | None = None
    ) -> I64:
        """The reason code of each node of ``rows`` (-1: it fits once releases finish);
        ``m_all``: :func:`gpu_need` of ``tmpl``, when the caller keeps it."""
        ssn = self._ssn
        a = ssn.arrays
        reason = np.full(rows.size, -1, dtype=np.int64)

        def mark(reject: BOOL, word: str) -> None:
            sel = reject & (reason < 0)
            if sel.any():
                reason[sel] = self._code(word)

        for reject, word in ssn.points.rejections(tmpl, rows):
            mark(reject, word)
        if a.n_nodes > 1 and rows.size > 1:  # read the shared view
            every = rows.size == a.n_nodes
            short, devices_ok = shortfalls_view(
                a, tmpl, self._view(), m_all, None if every else rows
            )
        else:
            short, devices_ok = shortfalls(ssn, tmpl, rows, m_all)
        if rows.size < a.n_nodes:  # a few rows: every column at once
            g = a.spec.gpu_column
            short[g] = short[g] | ~devices_ok
            table = np.column_stack(short)
            first = table.argmax(axis=1)  # each row's first short column
            hit = table[np.arange(rows.size), first] & (reason < 0)
            if hit.any():
                found = first[hit].tolist()
                code = {c: self._code(_column_word(a.spec.names, c, g)) for c in sorted(set(found))}
                reason[hit] = [code[c] for c in found]
            return reason
        for c, res in enumerate(a.spec.names):
            if res == PODS:
                mark(short[c], "Too many pods")
            elif c == a.spec.gpu_column:
                mark(short[c] | ~devices_ok, f"Insufficient {res}")
            else:
                mark(short[c], f"Insufficient {res}")
        return reason


def _same_ground(old: Session, new: Session) -> bool:
    """Whether both sessions keep the ``shape_only`` contract under one configuration."""
    shape_only = old.points.shape_only and new.points.shape_only
    return shape_only and (old.config is new.config or old.config == new.config)


def _by_count(part: tuple[int, str]) -> tuple[int, str]:
    return -part[0], part[1]


def _column_word(names: tuple[str, ...], c: int, gpu_column: int) -> str:
    """The reason word of a node short of resource column ``c`` (as the per-column marks of
    :meth:`Evaluator._reason_rows` word it)."""
    res = names[c]
    if res == PODS and c != gpu_column:
        return "Too many pods"
    return f"Insufficient {res}"


def _prefers_by_label(ssn: Session) -> bool:
    """Whether a template of ``ssn`` prefers nodes by label (a score normalised over every
    node's labels)."""
    return any(
        t.node_affinity is not None and bool(t.node_affinity.preferred) for t in ssn.templates
    )


def _moved_rows(old: Session, new: Session) -> _Moved | None:
    """The map from ``old``'s node rows to ``new``'s (by name), and the rows of ``new`` to
    refresh whatever a view read in ``old``: new nodes, and nodes whose record or occupancy
    differs from the end of ``old``. None when the nodes' taints changed (a node with taints
    came or went, or a kept node's taints changed)."""
    before, after = old.snapshot.nodes, new.snapshot.nodes
    row_of = old.snapshot.node_index
    n_new = len(after)
    take = np.zeros(n_new, dtype=np.intp)
    kept = np.zeros(n_new, dtype=np.bool_)
    stale = np.zeros(n_new, dtype=np.bool_)
    now_of = np.full(len(before), -1, dtype=np.intp)
    for i, node in enumerate(after):
        j = row_of.get(node.name)
        if j is None:
            if node.taints:
                return None
            stale[i] = True
            continue
        take[i], kept[i], now_of[j] = j, True, i
        was = before[j]
        if was is not node and was != node:
            if was.taints != node.taints:
                return None
            stale[i] = True
    if any(before[j].taints for j in np.flatnonzero(now_of < 0).tolist()):
        return None
    if not kept.any():
        return None  # no node kept (the previous session may have had none): nothing to move
    a, b = old.arrays, new.arrays
    rows = np.flatnonzero(kept)
    occ_old, occ_new = occupancy_columns(old), occupancy_columns(new)
    for col_was, col_now in zip(occ_old[:3], occ_new[:3], strict=True):
        stale[rows] |= (col_was[take[rows]] != col_now[rows]).any(axis=1)
    # Devices: kept nodes with as many devices as before, compared device by device (a node
    # whose device count moved has another record, so it is stale already).
    count_old = np.diff(a.gpu_offset)[take]
    count_new = np.diff(b.gpu_offset)
    same = kept & ~stale & (count_new == count_old) & (count_new > 0)
    if same.any():
        rows = np.flatnonzero(same)
        counts = count_new[rows]
        step = np.arange(int(counts.sum()), dtype=np.intp) - np.repeat(
            np.cumsum(counts) - counts, counts
        )
        dev_new = np.repeat(b.gpu_offset[rows], counts) + step
        dev_old = np.repeat(a.gpu_offset[take[rows]], counts) + step
        moved = np.zeros(int(b.gpu_offset[-1]), dtype=np.bool_)
        for col_was, col_now in zip(occ_old[3:], occ_new[3:], strict=True):
            moved[dev_new] |= col_was[dev_old] != col_now[dev_new]
        if moved.any():
            stale |= np.bincount(b.gpu_node[moved], minlength=n_new) > 0
    log = new.changes
    return _Moved(
        log=old.changes,
        take=take,
        now_of=now_of,
        stale=np.flatnonzero(stale),
        lineage=log.lineage,
        start=log.end,
    )


def _relabelled_under_preference(old: Session, new: Session) -> bool:
    """Whether a node's labels changed between the sessions while a template prefers nodes by
    label: preferred node affinity is normalised over every node, so every row may move."""
    before, after = old.snapshot.nodes, new.snapshot.nodes
    rows = np.flatnonzero(new.changes.records_changed).tolist()
    if not any(before[i].labels != after[i].labels for i in rows):
        return False
    return any(
        t.node_affinity is not None and bool(t.node_affinity.preferred) for t in new.templates
    )
