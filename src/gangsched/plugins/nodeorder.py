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

import math  # noqa: F401 -- read by the generated _score_row
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from gangsched._codegen import define
from gangsched._types import F64, I64
from gangsched.config.args import arg_weight
from gangsched.plugins._node_score_rule import RULE, node_score_source
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
            return np.array([_score_row(self, ssn, tmpl, int(rows[0]))])
        cols = self._columns(ssn)
        whole = rows.size == cols.n and bool((rows == np.arange(rows.size)).all())
        sel: npt.NDArray[np.intp] | slice = slice(None) if whole else rows  # a view, not a copy
        return _score_rows(self, ssn, tmpl, cols, sel, rows.size)

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


# ------------------------------------------------------------------ the rule's generated forms
#
# ``_score_rows`` (every row, or some, over the kept columns) and ``_score_row`` (one node, in
# plain numbers) are rendered from :data:`gangsched.plugins._node_score_rule.RULE` and defined
# in this module's namespace; the declarations give each its type.


class _ScoreRows(Protocol):
    def __call__(
        self,
        p: NodeOrderPlugin,
        ssn: Session,
        tmpl: TaskTemplate,
        cols: _Columns,
        sel: npt.NDArray[np.intp] | slice,
        size: int,
    ) -> F64: ...


class _ScoreRow(Protocol):
    def __call__(self, p: NodeOrderPlugin, ssn: Session, tmpl: TaskTemplate, i: int) -> float: ...


_made = define(node_score_source(RULE), globals(), "node scores")
_score_rows: _ScoreRows = _made["_score_rows"]
_score_row: _ScoreRow = _made["_score_row"]
