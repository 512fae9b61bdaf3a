"""nodeorder: kube-scheduler's resource scores, each 0–100 times its weight, summed.

* ``leastrequested.weight`` (1): mean over cpu and memory of
  ``(allocatable − requested) · 100 // allocatable`` (kube's LeastAllocated);
* ``mostrequested.weight`` (0): mean of ``requested · 100 // allocatable``;
* ``balancedresource.weight`` (1): ``⌊(1 − std(requested_r / allocatable_r)) · 100⌋`` over
  cpu, memory and, for GPU tasks, nvidia.com/gpu (kube truncates it to a whole number);
* ``tainttoleration.weight`` (3): kube's TaintToleration: fewer untolerated
  PreferNoSchedule taints is better, ``100 − 100 · count // most`` (integer division, as kube
  normalises: ``most`` is the largest count on a node; 100 everywhere when no node has one);
* ``nodeaffinity.weight`` (2): kube's NodeAffinity: the summed weights of the preferred node
  affinity terms a node matches, ``100 · sum // most`` (0 everywhere for a task without
  preferred terms).

``podaffinity.weight`` (2) and ``podtopologyspread.weight`` (2) weigh kube's InterPodAffinity
and PodTopologySpread scores; they read where other pods are, so they are added on top of the
cached scores when a node is picked (:mod:`gangsched.session.pod_constraints`), normalised
over the nodes where the task passes and fits.

Kube normalises the taint and node-affinity scores over the nodes that passed the filters;
here over every node, so the figures are fixed per task shape for the whole cycle (the same
order among nodes, a scale that can differ when the best-matching nodes are filtered out).

For LeastAllocated and MostAllocated, ``requested`` is kube's ``NonZeroRequested``: every
pod on the node, and this task, counts with kube's non-zero defaults (100m cpu, 200Mi memory)
for a resource it requests none of (a best-effort pod on a node lowers that node's score).
BalancedAllocation reads the plain requests of the node's pods and of this task (kube's
``useRequested``), so a best-effort task's balance is the node's own. Integer division as in
kube.

Every weight is a finite number in ``[-1e6, 1e6]`` (:data:`~gangsched.limits.MAX_ARG_WEIGHT`),
so the summed score stays within ``4e8`` in magnitude; anything else is a
:class:`~gangsched.errors.ConfigError` naming the argument.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar, cast

import numpy as np
import numpy.typing as npt

from gangsched._types import F64, I64
from gangsched.config.args import arg_weight
from gangsched.session.affinity_masks import preferred_sum
from gangsched.session.arrays import TaskTemplate
from gangsched.session.changes import ChangeLog
from gangsched.session.task_states import TaskState, in_states

if TYPE_CHECKING:
    from gangsched.session.core import Session

DEFAULT_CPU = 100
DEFAULT_MEMORY = 200 * 1024 * 1024
#: The scores computed here; each is weighted by its ``<score>.weight`` argument.
_SCORES = (
    "balancedresource",
    "leastrequested",
    "mostrequested",
    "nodeaffinity",
    "tainttoleration",
)
#: Volcano's other scores: their weights are checked here; ``podaffinity`` and
#: ``podtopologyspread`` are applied by :mod:`gangsched.session.pod_constraints`, the others
#: are not modelled.
_UNMODELLED = (
    "imagelocality",
    "podaffinity",
    "podtopologyspread",
    "selectorspread",
    "volumebinding",
)


class NodeOrderPlugin:
    name = "nodeorder"
    known_arguments = tuple(f"{score}.weight" for score in (*_SCORES, *_UNMODELLED))
    #: Answers depend only on a template's shape (request, GPUs, selector, tolerations) and
    #: the nodes' state, so templates of equal shape may share one evaluation.
    shape_only = True

    def __init__(self, arguments: Mapping[str, object]) -> None:
        def w(key: str, default: float) -> float:
            return arg_weight(arguments, key, default, plugin=self.name)

        self.least = w("leastrequested.weight", 1.0)
        self.most = w("mostrequested.weight", 0.0)
        self.balanced = w("balancedresource.weight", 1.0)
        self.taint = w("tainttoleration.weight", 3.0)
        self.affinity = w("nodeaffinity.weight", 2.0)
        for score in _UNMODELLED:
            w(f"{score}.weight", 0.0)
        self._taint_scores: dict[tuple[object, ...], F64] = {}
        self._affinity_scores: dict[object, F64] = {}
        self._cols: _Columns | None = None
        self._zero: _ZeroTasks | None = None

    def node_score(self, ssn: Session, tmpl: TaskTemplate, rows: npt.NDArray[np.intp]) -> F64:
        if rows.size == 1:  # the usual refresh after one placement: plain floats are faster
            return np.array([self._score_one(ssn, tmpl, int(rows[0]))])
        cols = self._columns(ssn)
        whole = rows.size == cols.n and bool((rows == np.arange(rows.size)).all())
        sel: npt.NDArray[np.intp] | slice = slice(None) if whole else rows  # a view, not a copy
        cpu, mem = tmpl.request[:2].tolist()
        want = (cpu or DEFAULT_CPU, mem or DEFAULT_MEMORY)
        score = np.zeros(rows.size)
        if self.least:
            per = [cols.least(c, sel, want[c]) for c in range(2)]
            score += self.least * _halved(per[0] + per[1])
        if self.most:
            alloc, safe = cols.alloc[:, sel], cols.safe[:, sel]
            nz_use = [cols.nz_use[c][sel] for c in range(2)]
            most = [
                np.where(
                    alloc[c] > 0, np.minimum(nz_use[c] + want[c], alloc[c]) * 100 // safe[c], 0
                )
                for c in range(2)
            ]
            score += self.most * _halved(most[0] + most[1])
        if self.balanced:
            use = [cols.use[c][sel] for c in range(2)]
            fracs = [_capped((use[c] + (cpu, mem)[c]) / cols.safe_f[c][sel]) for c in range(2)]
            if tmpl.gpu_count:
                after = cols.gpu_use[sel] + tmpl.request[cols.gpu_column]
                # 0 where the node has no GPU (a non-negative fraction times 0.0 is 0.0)
                gfrac = _capped(after / cols.gpu_safe_f[sel])
                gfrac *= cols.gpu_on[sel]
                fracs.append(gfrac)
            spread = np.sqrt(_variance(fracs))
            np.subtract(1.0, spread, out=spread)
            spread *= 100.0
            np.floor(spread, out=spread)  # kube truncates the score to a whole number
            spread *= self.balanced
            score += spread
        if self.taint and ssn.arrays.soft_taints:
            score += self.taint * self._taint(ssn, tmpl)[sel]
        if self.affinity and tmpl.node_affinity is not None and tmpl.node_affinity.preferred:
            score += self.affinity * self._preferred(ssn, tmpl)[sel]
        return score

    def _columns(self, ssn: Session) -> _Columns:
        """The per-node columns the scores read, current with the session's change log."""
        cols = self._cols
        if cols is None or not cols.mirrors(ssn):
            cols = self._cols = _Columns.build(ssn, self._zero_of(ssn))
        else:
            cols.catch_up(ssn)
        return cols

    def _zero_of(self, ssn: Session) -> _ZeroTasks:
        """The session's tasks that request no cpu or no memory (read once per task table)."""
        zero = self._zero
        if zero is None or zero.req is not ssn.task_req:
            zero = self._zero = _zero_tasks(ssn)
        return zero

    def _score_one(self, ssn: Session, tmpl: TaskTemplate, i: int) -> float:
        """:meth:`node_score` of one node: the same arithmetic, in the same order."""
        a = ssn.arrays
        request = tmpl.request.tolist()
        alloc_row = a.allocatable[i].tolist()
        used_row = ssn.used[i].tolist()
        want = (request[0] or DEFAULT_CPU, request[1] or DEFAULT_MEMORY)
        alloc, used = alloc_row[:2], used_row[:2]
        extra = self._zero_of(ssn).on(ssn, i)
        requested = [u + e + w for u, e, w in zip(used, extra, want, strict=True)]
        score = 0.0
        if self.least:
            per = [
                (al - rq) * 100 // max(al, 1) if al > 0 and rq <= al else 0
                for al, rq in zip(alloc, requested, strict=True)
            ]
            score += self.least * ((per[0] + per[1]) // 2)
        if self.most:
            per = [
                min(rq, al) * 100 // max(al, 1) if al > 0 else 0
                for al, rq in zip(alloc, requested, strict=True)
            ]
            score += self.most * ((per[0] + per[1]) // 2)
        if self.balanced:
            plain = [u + r for u, r in zip(used, request[:2], strict=True)]
            fracs = [min(rq / max(al, 1), 1.0) for al, rq in zip(alloc, plain, strict=True)]
            if tmpl.gpu_count:
                g = a.spec.gpu_column
                galloc = alloc_row[g]
                after = used_row[g] + request[g]
                fracs.append(min(after / max(galloc, 1), 1.0) if galloc > 0 else 0.0)
            score += math.floor((1.0 - math.sqrt(_variance(fracs))) * 100.0) * self.balanced
        if self.taint and a.soft_taints:
            score += self.taint * float(self._taint(ssn, tmpl)[i])
        if self.affinity and tmpl.node_affinity is not None and tmpl.node_affinity.preferred:
            score += self.affinity * float(self._preferred(ssn, tmpl)[i])
        return score

    def _taint(self, ssn: Session, tmpl: TaskTemplate) -> F64:
        found = self._taint_scores.get(tmpl.shape)
        if found is None:
            counts = ssn.arrays.soft_untolerated_count(tmpl.tolerations)
            top = int(counts.max()) if counts.size else 0
            found = (
                (100 - counts * 100 // top).astype(np.float64)
                if top
                else np.full(counts.size, 100.0)
            )
            self._taint_scores[tmpl.shape] = found
        return found

    def _preferred(self, ssn: Session, tmpl: TaskTemplate) -> F64:
        """kube's NodeAffinity score of every node, normalised to 0..100."""
        affinity = tmpl.node_affinity
        found = self._affinity_scores.get(affinity)
        if found is None:
            assert affinity is not None
            raw = preferred_sum(ssn.arrays, affinity)
            top = int(raw.max()) if raw.size else 0
            found = (raw * 100 // top).astype(np.float64) if top else np.zeros(raw.size)
            self._affinity_scores[affinity] = found
        return found


#: The float quotient ``x / s`` of two non-negative integers floors to ``x // s`` when the
#: quotient is at most 100 and ``s`` is below ``2**53 / 101`` (the gap to the next integer,
#: at least ``1 / s``, exceeds the rounding error); above it the integer division is used.
_EXACT_DIVISOR = (1 << 53) // 101


@dataclass(slots=True, eq=False)
class _Columns:
    """Per node, what the scores read of cpu and memory (rows 0 and 1 of each table) and of
    the GPU column, as contiguous columns: allocatable and its safe divisor (never below 1)
    do not move in a session; use and idle follow the session's change log. ``nz_use`` and
    ``idle`` are kube's ``NonZeroRequested`` view (``use`` plus the non-zero defaults of the
    node's pods that request no cpu or no memory); ``use`` is the plain one."""

    n: int
    used: I64  # the session's ``used`` table these columns mirror
    log: ChangeLog  # the session's change log
    cursor: int  # the log's cursor at the last refresh
    gpu_column: int
    alloc: I64  # (2, n)
    safe: I64  # (2, n) max(allocatable, 1)
    safe_f: F64  # (2, n) the same as floats
    use: I64  # (2, n)
    nz_use: I64  # (2, n) use + the non-zero defaults of the node's pods
    idle: I64  # (2, n) allocatable - nz_use
    zero: _ZeroTasks
    all_on: tuple[bool, bool]  # every node's allocatable > 0, per column
    gpu_on: F64  # (n,) 1.0 where allocatable GPU > 0, else 0.0
    gpu_safe_f: F64  # (n,)
    gpu_use: I64  # (n,)
    exact_float: bool  # every divisor below _EXACT_DIVISOR

    @classmethod
    def build(cls, ssn: Session, zero: _ZeroTasks | None = None) -> _Columns:
        a = ssn.arrays
        g = a.spec.gpu_column
        alloc = np.ascontiguousarray(a.allocatable[:, :2].T)
        safe = np.maximum(alloc, 1)
        gpu_alloc = a.allocatable[:, g]
        use = np.ascontiguousarray(ssn.used[:, :2].T)
        if zero is None:
            zero = _zero_tasks(ssn)
        nz_use = use + zero.per_node(ssn, a.n_nodes)
        return cls(
            n=a.n_nodes,
            used=ssn.used,
            log=ssn.changes,
            cursor=ssn.changes.end,
            gpu_column=g,
            alloc=alloc,
            safe=safe,
            safe_f=safe.astype(np.float64),
            use=use,
            nz_use=nz_use,
            idle=alloc - nz_use,
            zero=zero,
            all_on=(bool((alloc[0] > 0).all()), bool((alloc[1] > 0).all())),
            gpu_on=(gpu_alloc > 0).astype(np.float64),
            gpu_safe_f=np.maximum(gpu_alloc, 1).astype(np.float64),
            gpu_use=ssn.used[:, g].copy(),
            exact_float=bool((safe < _EXACT_DIVISOR).all()),
        )

    def mirrors(self, ssn: Session) -> bool:
        return self.used is ssn.used and self.log is ssn.changes

    def catch_up(self, ssn: Session) -> None:
        """Re-read the nodes the change log names since the last refresh."""
        log = self.log
        if not log.changed_since(self.cursor):
            return
        rows = log.nodes_since(self.cursor)
        self.cursor = log.end
        self.use[:, rows] = ssn.used[rows, :2].T
        self.nz_use[:, rows] = self.use[:, rows]
        if self.zero.tasks.size:
            self.nz_use[:, rows] += self.zero.per_node(ssn, self.n)[:, rows]
        self.idle[:, rows] = self.alloc[:, rows] - self.nz_use[:, rows]
        self.gpu_use[rows] = ssn.used[rows, self.gpu_column]

    def least(self, c: int, sel: npt.NDArray[np.intp] | slice, want: int) -> F64 | I64:
        """kube's LeastAllocated of column ``c`` on ``sel`` for a request of ``want``:
        ``(allocatable - requested) * 100 // allocatable`` where the request fits, else 0."""
        rest = self.idle[c][sel] - want  # allocatable - requested
        if self.exact_float and self.all_on[c]:  # fits where rest >= 0: 0 below
            clamped: F64 = np.maximum(rest, 0) * 100.0
            clamped /= self.safe_f[c][sel]
            return np.floor(clamped, out=clamped)
        fits = (rest >= 0) & (self.alloc[c][sel] > 0)
        if self.exact_float:
            per: F64 = np.floor(rest * 100.0 / self.safe_f[c][sel])
            out_f: F64 = np.where(fits, per, 0.0)
            return out_f
        out: I64 = np.where(fits, rest * 100 // self.safe[c][sel], 0)
        return out


#: Task states whose request a node's ``used`` holds (and so kube's node info lists).
_ON_NODE = (TaskState.ALLOCATED, TaskState.BOUND, TaskState.RUNNING, TaskState.RELEASING)


@dataclass(slots=True, eq=False)
class _ZeroTasks:
    """The session's tasks that request no cpu or no memory (``tasks``), and the non-zero
    defaults each counts as on a node (``defaults``, (2, k): 100m cpu, 200Mi memory for the
    resource it requests none of), for kube's ``NonZeroRequested``."""

    req: I64  # the session's task_req these were read from
    tasks: npt.NDArray[np.intp]
    defaults: I64

    def nodes(self, ssn: Session) -> I64:
        """The node each task is on now (its request in the node's ``used``), else -1."""
        held = in_states(ssn.task_state[self.tasks], _ON_NODE)
        out: I64 = np.where(held, ssn.task_node[self.tasks], -1)
        return out

    def per_node(self, ssn: Session, n: int) -> I64:
        """Per node (2, n): the defaults of the tasks on it now."""
        out = np.zeros((2, n), dtype=np.int64)
        if self.tasks.size:
            node = self.nodes(ssn)
            on = node >= 0
            for c in range(2):
                np.add.at(out[c], node[on], self.defaults[c][on])
        return out

    def on(self, ssn: Session, i: int) -> tuple[int, int]:
        """The defaults (cpu, memory) of the tasks on node ``i`` now."""
        if not self.tasks.size:
            return (0, 0)
        here = self.nodes(ssn) == i
        cpu, mem = self.defaults[:, here].sum(axis=1).tolist()
        return (int(cpu), int(mem))


def _zero_tasks(ssn: Session) -> _ZeroTasks:
    """:class:`_ZeroTasks` of the session."""
    req = ssn.task_req[:, :2]
    tasks = np.flatnonzero((req[:, 0] == 0) | (req[:, 1] == 0))
    defaults = np.stack(
        [
            np.where(req[tasks, 0] == 0, DEFAULT_CPU, 0),
            np.where(req[tasks, 1] == 0, DEFAULT_MEMORY, 0),
        ]
    ).astype(np.int64)
    return _ZeroTasks(req=ssn.task_req, tasks=tasks, defaults=defaults)


def _halved(total: F64 | I64) -> F64 | I64:
    """``total // 2``, in place: the mean of the two columns' whole percentages. A float total
    is a sum of two whole numbers, so halving it is exact and its floor is the floor
    division's (NumPy's float floor division costs about ten times the multiply and floor)."""
    if total.dtype.kind == "f":
        whole = cast(F64, total)
        whole *= 0.5
        return np.floor(whole, out=whole)
    ints = cast(I64, total)
    ints //= 2
    return ints


def _capped(frac: F64) -> F64:
    """``min(frac, 1.0)``, in place."""
    return np.minimum(frac, 1.0, out=frac)


_V = TypeVar("_V", float, npt.NDArray[np.float64])


def _variance(fracs: list[_V]) -> _V:
    """Population variance of ``fracs`` (floats, or arrays element-wise), summed left to right
    in one fixed order so the vector and the one-node paths agree to the last bit."""
    mean = fracs[0] + fracs[1]
    for f in fracs[2:]:
        mean = mean + f
    mean = mean / len(fracs)
    dev = [f - mean for f in fracs]
    var = dev[0] * dev[0] + dev[1] * dev[1]
    for d in dev[2:]:
        var = var + d * d
    return var / len(fracs)
