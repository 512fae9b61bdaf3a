"""Five GPU scorer plugins of the FGD study: random, dotprod, bestfit, gpu-packing and
gpu-clustering (registered with ``fgd`` by :mod:`gangsched.plugins.fgd_scores`, whose docstring
describes them)."""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import numpy as np

from gangsched._types import BOOL as B
from gangsched._types import F64, I64, U64
from gangsched.config import arg_int
from gangsched.fragmentation import (
    MILLI,
    N_AFFINITY,
    NodeScores,
    PodRequest,
    score_bestfit,
    score_dotprod,
    score_gpu_clustering,
    score_gpu_packing,
)
from gangsched.fragmentation.measure import best_fit_device, room_mask
from gangsched.fragmentation.policies import (
    bestfit_one,
    bestfit_raw,
    dotprod_one,
    dotprod_raw,
)
from gangsched.framework.extension_points import Rows
from gangsched.plugins._gpu_common import (
    _FEW_ROWS,
    _ON_NODE_STATES,
    RowLists,
    SharedDeviceChoice,
    _answer,
    _both,
    _feasible,
    _read_args,
    _scored_rows,
    _truncated_few,
    _truncated_rows,
    _View,
    _weight,
)
from gangsched.session.arrays import TaskTemplate
from gangsched.session.changes import ChangeLog
from gangsched.session.task_states import in_states

if TYPE_CHECKING:
    from gangsched.session.core import Session

# -------------------------------------------------------------------------------- hashing


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _mix(x: U64) -> U64:
    """SplitMix64 finaliser, elementwise (uint64 arithmetic wraps)."""
    x = x + _GOLDEN
    x = (x ^ (x >> np.uint64(30))) * _M1
    x = (x ^ (x >> np.uint64(27))) * _M2
    out: U64 = x ^ (x >> np.uint64(31))
    return out


def _uniform(seed: int, key: str, a: I64, b: I64) -> F64:
    """Uniform floats in [0, 1), one per element of ``a``/``b``, from (seed, key, a, b).

    ``key`` is hashed as its UTF-8 bytes; a lone surrogate (a name no UTF-8 text holds,
    but a ``str`` may) passes through as its three bytes instead of raising."""
    base = _mix(np.array([seed & (2**64 - 1)], dtype=np.uint64))
    base = _mix(base ^ np.uint64(zlib.crc32(key.encode("utf-8", "surrogatepass"))))
    h = _mix(base ^ _mix(a.astype(np.uint64)))
    h = _mix(h ^ _mix(b.astype(np.uint64) + np.uint64(0x632BE59BD9B4E019)))
    return (h >> np.uint64(11)).astype(np.float64) * (1.0 / 2**53)


# -------------------------------------------------------------------------------- plugins


class RandomPlugin(SharedDeviceChoice):
    """``random``: a uniformly random feasible node (seeded); random device for shared tasks."""

    name = "random"
    known_arguments: tuple[str, ...] = _both("random", "weight", "seed")

    def __init__(self, arguments: Mapping[str, object]) -> None:
        args = _read_args(self.name, arguments, self.known_arguments)
        self.weight = _weight(self.name, args)
        self.seed = arg_int(args, "seed", 0, plugin=self.name)

    def node_score(self, ssn: Session, tmpl: TaskTemplate, rows: Rows) -> F64:
        key = f"{ssn.snapshot.jobs[tmpl.job].name}/{tmpl.role}"
        u = _uniform(self.seed, key, rows.astype(np.int64), ssn.changes.node_changes[rows])
        return u * (100.0 * self.weight)

    def choose_device(
        self, ssn: Session, task: int, node: int, view: _View, pod: PodRequest
    ) -> tuple[int, ...] | None:
        room = np.flatnonzero(room_mask(view.gpu_free[0], pod.gpu_milli))
        if room.size == 0:
            return None
        version = np.full(room.size, int(ssn.changes.node_changes[node]), dtype=np.int64)
        u = _uniform(self.seed, ssn.snapshot.tasks[task].name, room.astype(np.int64), version)
        return (int(room[int(np.argmax(u))]),)


class _KernelScorer(SharedDeviceChoice):
    """A scorer that is one kernel of :mod:`gangsched.fragmentation` over the nodes' free
    capacity: ``node_score`` scores the rows, ``gpu_choice`` picks the shared device."""

    name = ""
    known_arguments: tuple[str, ...] = ()
    #: A node's score depends on the task's shape and that node's free capacity only, so
    #: templates of equal shape share one evaluation
    #: (:class:`gangsched.framework.extension_points.ShapeOnlyPlugin`).
    shape_only = True

    def __init_subclass__(cls, **kwargs: object) -> None:
        """Every scorer takes one argument, ``weight``, bare or under its name (a base of
        scorers, without a name, declares none); a scorer that declares its own
        ``known_arguments`` keeps them."""
        super().__init_subclass__(**kwargs)
        if "known_arguments" not in cls.__dict__:
            cls.known_arguments = _both(cls.name, "weight") if cls.name else ()

    def __init__(self, arguments: Mapping[str, object]) -> None:
        self.weight = _weight(self.name, _read_args(self.name, arguments, self.known_arguments))

    def _kernel(self, ssn: Session, rows: Rows, mask: B, pod: PodRequest, v: _View) -> NodeScores:
        """Scores of the node ``rows`` (``v`` is their view, ``mask`` where the pod fits)."""
        raise NotImplementedError

    def _answers(self, ssn: Session, rows: Rows, mask: B, pod: PodRequest, v: _View) -> F64:
        """The scorer's answers on ``rows``: its kernel's scores (``-inf`` where the pod does
        not fit) finished (:data:`FINISH_SCORED`); a scorer whose device choice costs more than
        its score overrides it with the score's own formula."""
        score = self._kernel(ssn, rows, mask, pod, v).score
        return _scored_rows(score, self.weight)

    def _few(self, lists: RowLists, rows: list[int], pod: PodRequest) -> list[float] | None:
        """:meth:`node_score` of a few ``rows`` in scalar arithmetic (the same operations),
        None for a scorer without a scalar formula."""
        return None

    def node_score(self, ssn: Session, tmpl: TaskTemplate, rows: Rows) -> F64:
        pod = self.views.pod(ssn, tmpl)
        if pod is None or self.weight == 0:
            return np.zeros(rows.size)
        if rows.size <= _FEW_ROWS:
            few = self._few(self.views.lists(ssn), rows.tolist(), pod)
            if few is not None:
                return np.array(few, dtype=np.float64)
        v = self.views.view(ssn, rows)
        return self._answers(ssn, rows, _feasible(v, pod), pod, v)

    def gpu_choice(
        self, ssn: Session, task: int, node: int, *, future: bool
    ) -> tuple[int, ...] | None:
        # Every kernel's shared device is the tightest with room (lowest index on ties): now,
        # it is read off the node's devices alone.
        if future:
            return super().gpu_choice(ssn, task, node, future=future)
        pod = self.views.task_pod(ssn, task)
        if pod is None or not pod.is_shared:
            return None
        share = best_fit_device(self.views.lists(ssn).devices[node], pod)
        return None if share < 0 else (share,)

    def choose_device(
        self, ssn: Session, task: int, node: int, v: _View, pod: PodRequest
    ) -> tuple[int, ...] | None:
        rows = np.array([node], dtype=np.intp)
        res = self._kernel(ssn, rows, np.ones(1, dtype=np.bool_), pod, v)
        return _answer(int(res.share_gpu[0]), v.gpu_free[0], pod)


class _LeftoverScorer(_KernelScorer):
    """A scorer whose score is a truncated formula of the node's free CPU and idle GPU
    (``raw``) and whose shared device is the tightest with room (``kernel``)."""

    raw: Callable[[PodRequest, I64, I64], F64]
    one: Callable[[PodRequest, int, int], float]  # ``raw`` of one node
    kernel: Callable[[B, PodRequest, I64, I64], NodeScores]

    def _few(self, lists: RowLists, rows: list[int], pod: PodRequest) -> list[float] | None:
        return _truncated_few(
            pod, rows, lists.fits, self.one, lists.free_cpu, lists.idle, self.weight
        )

    def _kernel(self, ssn: Session, rows: Rows, mask: B, pod: PodRequest, v: _View) -> NodeScores:
        return self.kernel(mask, pod, v.free_cpu, v.gpu_free)

    def _answers(self, ssn: Session, rows: Rows, mask: B, pod: PodRequest, v: _View) -> F64:
        # the kernel's score (its raw score truncated where the pod fits), finished
        raw = self.raw(pod, v.free_cpu, v.gpu_free.sum(axis=1))
        return _truncated_rows(mask, raw, self.weight)


class DotProdPlugin(_LeftoverScorer):
    """``dotprod``: the smallest dot product of normalized free and requested (CPU, GPU)."""

    name = "dotprod"
    raw = staticmethod(dotprod_raw)
    one = staticmethod(dotprod_one)
    kernel = staticmethod(score_dotprod)


class BestFitPlugin(_LeftoverScorer):
    """``bestfit``: the least weighted leftover (half CPU, half GPU) after placing the task."""

    name = "bestfit"
    raw = staticmethod(bestfit_raw)
    one = staticmethod(bestfit_one)
    kernel = staticmethod(score_bestfit)


class GpuPackingPlugin(_KernelScorer):
    """``gpu-packing``: partly used devices first, then used nodes, then idle nodes."""

    name = "gpu-packing"

    def _kernel(self, ssn: Session, rows: Rows, mask: B, pod: PodRequest, v: _View) -> NodeScores:
        return score_gpu_packing(mask, pod, v.gpu_free, v.gpu_count)


def _affinity_tag(count: int, milli: int) -> int:
    """Column of the affinity table: 0 shared device, k for k whole devices (8 and more: 8)."""
    if count == 1 and milli < MILLI:
        return 0
    return min(count, N_AFFINITY - 1)


class GpuClusteringPlugin(_KernelScorer):
    """``gpu-clustering``: nodes already hosting GPU tasks of the same shape first."""

    name = "gpu-clustering"
    #: Not declared: the score reads which tasks a node holds, which a later cycle's
    #: evaluation carry (comparing occupancy sums) could not see change.
    shape_only = False

    def __init__(self, arguments: Mapping[str, object]) -> None:
        super().__init__(arguments)
        self._tag: I64 = np.zeros(0, dtype=np.int64)  # (n_tasks,) -1 without GPUs
        self._counts: I64 = np.zeros((0, N_AFFINITY), dtype=np.int64)  # (n_nodes, 9)
        self._log: ChangeLog | None = None  # the change log of the session counted
        self._cursor = 0  # its cursor at the last count

    def on_session_open(self, ssn: Session) -> None:
        tags = []
        for rec in ssn.snapshot.tasks:
            g = rec.gpu_request
            tags.append(-1 if g is None else _affinity_tag(g.count, g.milli))
        self._tag = np.array(tags, dtype=np.int64)
        n = ssn.arrays.n_nodes
        self._counts = np.zeros((n, N_AFFINITY), dtype=np.int64)
        self._log, self._cursor = ssn.changes, ssn.changes.end
        self._count(ssn, np.arange(n, dtype=np.intp))

    def _count(self, ssn: Session, rows: Rows) -> None:
        """Recount the GPU tasks on ``rows`` from the session's task arrays."""
        self._counts[rows] = 0
        on = in_states(ssn.task_state, _ON_NODE_STATES) & (self._tag >= 0)
        on &= np.isin(ssn.task_node, rows)
        t = np.flatnonzero(on)
        np.add.at(self._counts, (ssn.task_node[t], self._tag[t]), 1)

    def affinity(self, ssn: Session) -> I64:
        """``(n_nodes, 9)`` GPU tasks on each node by shape, current with the session."""
        log = ssn.changes
        if self._log is not log:
            self.on_session_open(ssn)
        elif log.changed_since(self._cursor):
            stale = log.nodes_since(self._cursor)
            self._cursor = log.end
            if stale.size:
                self._count(ssn, stale)
        return self._counts

    def _kernel(self, ssn: Session, rows: Rows, mask: B, pod: PodRequest, v: _View) -> NodeScores:
        return score_gpu_clustering(mask, pod, v.gpu_free, self.affinity(ssn)[rows])
