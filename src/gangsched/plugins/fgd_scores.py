"""The six node scorers of the FGD study as scheduler plugins.

Theory of operation
-------------------
Each plugin wraps one kernel of :mod:`gangsched.fragmentation` and serves two points:

* ``node_score(ssn, tmpl, rows)`` — the kernel's score (0..100, times the plugin's ``weight``)
  on the requested rows. Rows where the kernel itself sees no fit (free CPU, memory, GPU model,
  enough devices with room) score 0: the session masks them anyway, this only keeps the sum
  finite.
* ``gpu_choice(ssn, task, node, future=...)`` — the device a *shared* (fractional, one-device)
  task should use on ``node``, as the policy picks it, or ``None`` to leave the choice to the
  session (whole-device requests, CPU-only tasks, no device with room).
  :meth:`gangsched.session.core.Session.choose_gpus` asks the configured plugins in tier order and
  takes the first answer.

The kernels read plain arrays, so each call builds a view of the session over the rows it needs:
free CPU and memory (now, and not eating into reservations), per-device free milli-GPU scaled to
1000 per device (padding slots 0) and the node's GPU model index. A node without GPUs gets an
extra model index that no request accepts.

Two policies keep per-node state, refreshed incrementally: a node is recomputed only when the
session's change log names it since the plugin last looked (its cursor).

* ``gpu-clustering`` counts the GPU tasks held on each node by shape (shared, 1, 2, ... 8
  whole devices) from the session's task arrays.
* ``fgd`` keeps the fragment terms and ``F_n`` of every node over its target workload, the
  *typical pods*. They are given by the ``typical-pods`` argument (a list of
  ``{cpu, gpus, milli, models, weight}``), or derived when the session opens from every task of
  the snapshot (shapes covering ``threshold`` % of the tasks, 95 by default).

Arguments (each may also be written with the plugin name as prefix, ``fgd.weight``):
``weight`` (1.0, a finite number in ``[0, 1e6]``, :data:`~gangsched.limits.MAX_ARG_WEIGHT`) for
all six, ``seed`` (0) for ``random``, ``typical-pods`` (each shape's ``weight`` in ``(0, 1e6]``)
and ``threshold`` for ``fgd``. Unknown keys and values out of range are a
:class:`~gangsched.errors.ConfigError`.

``random`` draws from a counter-based hash of (``seed``, the job and role of the template, the
node, how many times the node changed in the session: ``ssn.changes.node_changes``): the same
snapshot and seed give the same choice, and a node that changed during the cycle gets a fresh
draw (a trial placement undone counts as changes; enqueue's shape check of a one-task gang
places none). Its device choice hashes the task's name
the same way.

What the plugins do not model: a task asking for several fractional devices (``count > 1`` with
``milli < 1000``) is scored 0 everywhere and left to the session's device choice; nodes without
GPU sharing are scored as if their devices could be shared.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from gangsched._types import BOOL as B
from gangsched._types import F64, I64
from gangsched.config import arg_float, arg_int
from gangsched.errors import ConfigError, PlacementError
from gangsched.fragmentation import (
    MILLI,
    FragTerms,
    PodRequest,
    TypicalPods,
    fragment_terms,
    node_fragment_from_terms,
    score_fgd,
    typical_pods_of_tasks,
)
from gangsched.fragmentation.policies import fgd_rows
from gangsched.framework.extension_points import Rows
from gangsched.limits import MAX_ARG_WEIGHT
from gangsched.plugins._gpu_common import (
    _FEW_ROWS,
    SharedDeviceChoice,
    ViewCache,
    _answer,
    _both,
    _feasible,
    _finish_few,
    _finish_rows,
    _models,
    _read_args,
    _View,
    _weight,
)
from gangsched.plugins._gpu_scorers import (
    BestFitPlugin,
    DotProdPlugin,
    GpuClusteringPlugin,
    GpuPackingPlugin,
    RandomPlugin,
)
from gangsched.session.arrays import TaskTemplate

if TYPE_CHECKING:
    from gangsched.session.core import Session

__all__ = [
    "SCORE_PLUGINS",
    "BestFitPlugin",
    "DotProdPlugin",
    "FgdPlugin",
    "GpuClusteringPlugin",
    "GpuPackingPlugin",
    "RandomPlugin",
    "typical_pods_argument",
]


# -------------------------------------------------------------------------------- fgd


def typical_pods_argument(typical: TypicalPods, models: Sequence[str]) -> list[dict[str, object]]:
    """The ``typical-pods`` argument of ``fgd`` for ``typical`` (whose ``allowed`` columns are
    ``models``): one ``{cpu, gpus, milli, models, weight}`` mapping per shape, in order.

    ``models`` lists the accepted GPU models, empty when every model of ``models`` is accepted.
    """
    if typical.allowed.shape[1] != len(models):
        raise ConfigError(
            f"{typical.allowed.shape[1]} model columns but {len(models)} model names",
            kind="typical pods",
            field="models",
        )
    out: list[dict[str, object]] = []
    for i in range(len(typical)):
        allowed = typical.allowed[i]
        names = (
            [] if bool(allowed.all()) else [m for m, ok in zip(models, allowed, strict=True) if ok]
        )
        out.append(
            {
                "cpu": int(typical.cpu_milli[i]),
                "gpus": int(typical.num_gpu[i]),
                "milli": int(typical.gpu_milli[i]),
                "models": names,
                "weight": float(typical.prob[i]),
            }
        )
    return out


def _typical_from_argument(
    raw: object, name: str
) -> tuple[list[tuple[int, int, int, tuple[str, ...], float]], float]:
    """Parse the ``typical-pods`` list; returns the shapes and the weight total."""
    field = "arguments.typical-pods"
    if isinstance(raw, str | bytes) or not isinstance(raw, Sequence) or not raw:
        raise ConfigError(
            "expected a non-empty list of {cpu, gpus, milli, models, weight}",
            kind="plugin",
            name=name,
            field=field,
        )
    shapes: list[tuple[int, int, int, tuple[str, ...], float]] = []
    for i, item in enumerate(raw):
        where = f"{field}[{i}]"
        if not isinstance(item, Mapping):
            raise ConfigError("expected a mapping", kind="plugin", name=name, field=where)
        unknown = sorted(set(item) - {"cpu", "gpus", "milli", "models", "weight"})
        if unknown:
            raise ConfigError(
                "unknown key", kind="plugin", name=name, field=f"{where}.{unknown[0]}"
            )
        cpu = arg_int(item, "cpu", 0, plugin=name)
        gpus = arg_int(item, "gpus", 0, plugin=name)
        milli = arg_int(item, "milli", MILLI if gpus else 0, plugin=name)
        try:
            weight = arg_float(item, "weight", 1.0, plugin=name, maximum=MAX_ARG_WEIGHT)
        except ConfigError as exc:
            raise ConfigError(
                exc.detail, kind="plugin", name=name, field=f"{where}.weight"
            ) from None
        chosen = item.get("models", ())
        if isinstance(chosen, str | bytes) or not isinstance(chosen, Sequence):
            raise ConfigError(
                "expected a list of model names", kind="plugin", name=name, field=f"{where}.models"
            )
        try:
            PodRequest(cpu_milli=cpu, memory=0, num_gpu=gpus, gpu_milli=milli)
        except PlacementError as exc:
            raise ConfigError(exc.detail, kind="plugin", name=name, field=where) from None
        if weight <= 0:
            raise ConfigError(
                f"weight must be > 0, got {weight}", kind="plugin", name=name, field=where
            )
        shapes.append((cpu, gpus, milli, tuple(str(m) for m in chosen), weight))
    return shapes, sum(s[4] for s in shapes)


class FgdPlugin(SharedDeviceChoice):
    """``fgd``: fragmentation gradient descent, the smallest growth of the node's fragment."""

    name = "fgd"
    known_arguments: tuple[str, ...] = _both("fgd", "weight", "typical-pods", "threshold")

    def __init__(self, arguments: Mapping[str, object]) -> None:
        args = _read_args(self.name, arguments, self.known_arguments)
        self.weight = _weight(self.name, args)
        self.threshold = arg_float(args, "threshold", 95.0, plugin=self.name)
        if not 0 < self.threshold <= 100:
            raise ConfigError(
                f"must be in (0, 100], got {self.threshold}",
                kind="plugin",
                name=self.name,
                field="arguments.threshold",
            )
        self._given = args.get("typical-pods")
        if self._given is not None:
            _typical_from_argument(self._given, self.name)  # fail at config time
        #: With given typical pods a node's score depends on the task's shape and that node
        #: only; derived ones follow the snapshot's tasks, so evaluations must not be shared.
        self.shape_only = self._given is not None
        self.typical: TypicalPods | None = None
        self._terms: FragTerms | None = None
        self._frag: F64 = np.zeros(0)  # (n_nodes,)
        self._memo = _StateMemo()
        self._views = ViewCache(self._rows_changed)

    def on_session_open(self, ssn: Session) -> None:
        models = _models(ssn)
        self.typical = (
            self._typical_given(models) if self._given is not None else self._typical_derived(ssn)
        )
        self._terms = None
        self._memo = _StateMemo()
        self._views = ViewCache(self._rows_changed)
        self._views.sync_rows(ssn)  # every row: the terms, F_n and states of the whole cluster

    def _rows_changed(self, ssn: Session, rows: Rows, v: _View) -> None:
        """The view refreshed ``rows`` (``v``): their terms, ``F_n`` and states follow."""
        assert self.typical is not None
        part = fragment_terms(v.gpu_free, self.typical)
        frag = node_fragment_from_terms(v.free_cpu, v.model_idx, part, self.typical)
        if self._terms is None:
            self._terms, self._frag = part, frag
        else:
            self._terms.fits_count[rows] = part.fits_count
            self._terms.small_sum[rows] = part.small_sum
            self._terms.idle[rows] = part.idle
            self._frag[rows] = frag
        self._memo.number(rows, v)

    def _typical_given(self, models: tuple[str, ...]) -> TypicalPods:
        shapes, total = _typical_from_argument(self._given, self.name)
        # Weights that already sum to 1 (as typical_pods_argument writes them) are kept bit for
        # bit, so scores match the kernels' exactly.
        scale = 1.0 if abs(total - 1.0) <= 1e-12 else total
        allowed = np.zeros((len(shapes), len(models) + 1), dtype=np.bool_)
        for i, (_, _, _, names, _) in enumerate(shapes):
            allowed[i, : len(models)] = [not names or m in names for m in models]
        return TypicalPods(
            cpu_milli=np.array([s[0] for s in shapes], dtype=np.int64),
            num_gpu=np.array([s[1] for s in shapes], dtype=np.int64),
            gpu_milli=np.array([s[2] for s in shapes], dtype=np.int64),
            allowed=allowed,
            prob=np.array([s[4] / scale for s in shapes], dtype=np.float64),
        )

    def _typical_derived(self, ssn: Session) -> TypicalPods:
        return typical_pods_of_tasks(
            ssn.snapshot.tasks, _models(ssn), threshold_pct=self.threshold, no_gpu_slot=True
        )

    def _refresh(self, ssn: Session) -> tuple[TypicalPods, FragTerms]:
        """Bring terms and ``F_n`` up to date on the nodes changed since the last call."""
        if self.typical is None or self.views.session is not ssn:
            self.on_session_open(ssn)
        else:
            self.views.sync_rows(ssn)
        assert self.typical is not None and self._terms is not None
        return self.typical, self._terms

    def node_fragment(self, ssn: Session) -> F64:
        """``F_n`` ``(n_nodes,)`` of every node, current with the session (milli-GPU)."""
        self._refresh(ssn)
        return self._frag

    def node_score(self, ssn: Session, tmpl: TaskTemplate, rows: Rows) -> F64:
        typical, terms = self._refresh(ssn)  # first: a new session re-derives the typical pods
        pod = self.views.pod(ssn, tmpl)
        if pod is None or self.weight == 0:
            return np.zeros(rows.size)
        if rows.size <= _FEW_ROWS:
            return np.array(self._few(ssn, rows, pod, typical, terms), dtype=np.float64)
        v = self.views.view(ssn, rows)
        feasible = _feasible(v, pod)
        known, missing = self._memo.lookup(pod, rows, feasible)
        if missing.size:
            # One row per node state not scored yet for this shape: a row's score depends on
            # nothing but the pod and that row (fgd_rows computes every row on its own).
            sub = FragTerms(
                fits_count=terms.fits_count[rows[missing]],
                small_sum=terms.small_sum[rows[missing]],
                idle=terms.idle[rows[missing]],
            )
            at = np.arange(missing.size, dtype=np.intp)
            value, share = fgd_rows(
                at,
                pod,
                v.free_cpu[missing],
                v.gpu_free[missing],
                v.model_idx[missing],
                typical,
                sub,
                self._frag[rows[missing]],
            )
            known = self._memo.store(pod, rows, missing, value, share)
        # score_fgd's scores (-inf where the pod does not fit), finished
        return _finish_rows(feasible, known, self.weight)

    def _few(
        self, ssn: Session, rows: Rows, pod: PodRequest, typical: TypicalPods, terms: FragTerms
    ) -> list[float]:
        """:meth:`node_score` of a few ``rows``: the fit and the memo read one row at a time,
        the states not scored yet computed together as there."""
        fits = self.views.lists(ssn).fits
        feasible = [fits(pod, r) for r in rows.tolist()]
        states = self._memo.state[rows].tolist()
        table, _ = self._memo.table(pod)
        values = table[states].tolist()
        missing, seen = [], set()
        for i, (fit, state, value) in enumerate(zip(feasible, states, values, strict=True)):
            if fit and math.isnan(value) and state not in seen:
                seen.add(state)
                missing.append(i)
        if missing:
            sel = rows[missing]
            v = self.views.view(ssn, sel)
            sub = FragTerms(
                fits_count=terms.fits_count[sel],
                small_sum=terms.small_sum[sel],
                idle=terms.idle[sel],
            )
            value, share = fgd_rows(
                np.arange(sel.size, dtype=np.intp),
                pod,
                v.free_cpu,
                v.gpu_free,
                v.model_idx,
                typical,
                sub,
                self._frag[sel],
            )
            values = self._memo.store(pod, rows, np.asarray(missing), value, share).tolist()
        # score_fgd's scores (-inf where the pod does not fit), finished
        return _finish_few(feasible, values, self.weight)

    def gpu_choice(
        self, ssn: Session, task: int, node: int, *, future: bool
    ) -> tuple[int, ...] | None:
        if not future:  # the device node_score found with the node's score, when it did
            self._refresh(ssn)
            pod = self.views.task_pod(ssn, task)
            if pod is not None and pod.is_shared:
                share = self._memo.share(pod, node)
                if share is not None:
                    return _answer(share, self.views.lists(ssn).devices[node], pod)
        return super().gpu_choice(ssn, task, node, future=future)

    def choose_device(
        self, ssn: Session, task: int, node: int, v: _View, pod: PodRequest
    ) -> tuple[int, ...] | None:
        typical, _ = self._refresh(ssn)
        res = score_fgd(
            np.ones(1, dtype=np.bool_), pod, v.free_cpu, v.gpu_free, v.model_idx, typical
        )
        return _answer(int(res.share_gpu[0]), v.gpu_free[0], pod)


class _StateMemo:
    """FGD's score per (pod shape, node state), for the nodes of one session.

    A node's *state* is its free CPU, GPU model and per-device free milli-GPU as the kernels
    see them; nodes in the same state have the same fragment terms, so a shape's score on one
    is its score on all (and its shared device the same). States are numbered as nodes reach
    them (:meth:`number`, for the rows the plugin refreshed) and a number never changes
    meaning."""

    __slots__ = ("_ids", "_scores", "_shares", "state")

    def __init__(self) -> None:
        self._ids: dict[tuple[int, ...], int] = {}
        self._scores: dict[tuple[int, int, int], F64] = {}
        self._shares: dict[tuple[int, int, int], I64] = {}
        self.state: I64 = np.zeros(0, dtype=np.int64)  # (n_nodes,)

    def number(self, rows: Rows, v: _View) -> None:
        """Number the states of ``rows`` (``v``: their view)."""
        at = rows.tolist()
        if self.state.size <= max(at, default=-1):
            grown = np.zeros(max(at) + 1, dtype=np.int64)
            grown[: self.state.size] = self.state
            self.state = grown
        ids = self._ids
        keys = zip(
            v.free_cpu.tolist(),
            v.model_idx.tolist(),
            v.gpu_count.tolist(),
            v.gpu_free.tolist(),
            strict=True,
        )
        self.state[rows] = [
            ids.setdefault((cpu, model, count, *free[:count]), len(ids))
            for cpu, model, count, free in keys
        ]

    def table(self, pod: PodRequest) -> tuple[F64, I64]:
        """Score (NaN: not computed) and shared device per state, for the pod's shape."""
        key = (pod.cpu_milli, pod.num_gpu, pod.gpu_milli)
        table = self._scores.get(key)
        if table is None or table.size < len(self._ids):
            size = max(len(self._ids), 2 * (0 if table is None else table.size), 64)
            grown = np.full(size, np.nan)
            shares = np.full(size, -1, dtype=np.int64)
            if table is not None:
                grown[: table.size] = table
                shares[: table.size] = self._shares[key]
            table = self._scores[key] = grown
            self._shares[key] = shares
        return table, self._shares[key]

    def share(self, pod: PodRequest, node: int) -> int | None:
        """The shared device of ``node``'s state for the pod's shape, None if not scored."""
        values, shares = self.table(pod)
        state = int(self.state[node])
        return None if np.isnan(values[state]) else int(shares[state])

    def lookup(self, pod: PodRequest, rows: Rows, feasible: B) -> tuple[F64, Rows]:
        """Known scores of ``rows`` (NaN where unknown) and the positions in ``rows`` of one
        feasible row per state not scored yet."""
        values = self.table(pod)[0][self.state[rows]]
        unknown = np.isnan(values) & feasible
        if not unknown.any():
            return values, np.zeros(0, dtype=np.intp)
        _, first = np.unique(self.state[rows][unknown], return_index=True)
        return values, np.flatnonzero(unknown)[first].astype(np.intp)

    def store(self, pod: PodRequest, rows: Rows, missing: Rows, value: F64, share: I64) -> F64:
        """Remember ``value`` and ``share`` for the states of ``rows[missing]``; the scores of
        ``rows``."""
        table, shares = self.table(pod)
        states = self.state[rows[missing]]
        table[states] = value
        shares[states] = share
        out: F64 = table[self.state[rows]]
        return out


#: The six plugins by name, ready for :meth:`gangsched.framework.registry.Registry.register_plugin`.
SCORE_PLUGINS: Mapping[str, type] = {
    cls.name: cls
    for cls in (
        RandomPlugin,
        DotProdPlugin,
        GpuClusteringPlugin,
        GpuPackingPlugin,
        BestFitPlugin,
        FgdPlugin,
    )
}
