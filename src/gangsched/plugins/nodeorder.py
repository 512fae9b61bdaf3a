"""nodeorder: kube-scheduler's resource scores, each 0–100 times its weight, summed.

* ``leastrequested.weight`` (1): mean over cpu and memory of
  ``(allocatable − requested) · 100 // allocatable`` (kube's LeastAllocated);
* ``mostrequested.weight`` (0): mean of ``requested · 100 // allocatable``;
* ``balancedresource.weight`` (1): ``(1 − std(requested_r / allocatable_r)) · 100`` over cpu,
  memory and, for GPU tasks, nvidia.com/gpu;
* ``tainttoleration.weight`` (3): fewer untolerated PreferNoSchedule taints is better,
  normalised over the nodes as kube does.

``requested`` is the node's current use plus this task, with kube's non-zero defaults
(100m cpu, 200Mi memory) for a task that requests none. Integer division as in kube.

Every weight is a finite number in ``[-1e6, 1e6]`` (:data:`~gangsched.limits.MAX_ARG_WEIGHT`),
so the summed score stays within ``4e8`` in magnitude; anything else is a
:class:`~gangsched.errors.ConfigError` naming the argument.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, TypeVar

import numpy as np
import numpy.typing as npt

from .._config_args import arg_weight
from .._types import F64
from ..arrays import TaskTemplate

if TYPE_CHECKING:
    from ..session import Session

DEFAULT_CPU = 100
DEFAULT_MEMORY = 200 * 1024 * 1024
#: The scores computed here; each is weighted by its ``<score>.weight`` argument.
_SCORES = ("balancedresource", "leastrequested", "mostrequested", "tainttoleration")
#: Volcano's other scores (not modelled): their weights are checked, not used.
_UNMODELLED = (
    "imagelocality",
    "nodeaffinity",
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
        for score in _UNMODELLED:
            w(f"{score}.weight", 0.0)
        self._taint_scores: dict[tuple[object, ...], F64] = {}

    def node_score(self, ssn: Session, tmpl: TaskTemplate, rows: npt.NDArray[np.intp]) -> F64:
        if rows.size == 1:  # the usual refresh after one placement: plain floats are faster
            return np.array([self._score_one(ssn, tmpl, int(rows[0]))])
        a = ssn.arrays
        whole = rows.size == a.n_nodes and bool((rows == np.arange(rows.size)).all())
        sel: npt.NDArray[np.intp] | slice = slice(None) if whole else rows  # a view, not a copy
        req = tmpl.request[:2].copy()  # cpu, memory (the first two columns)
        if req[0] == 0:
            req[0] = DEFAULT_CPU
        if req[1] == 0:
            req[1] = DEFAULT_MEMORY
        alloc = a.allocatable[sel, :2]
        requested = ssn.used[sel, :2] + req
        safe = np.maximum(alloc, 1)
        score = np.zeros(rows.size)
        if self.least:
            per = np.where((alloc > 0) & (requested <= alloc), (alloc - requested) * 100 // safe, 0)
            score += self.least * ((per[:, 0] + per[:, 1]) // 2)
        if self.most:
            per = np.where(alloc > 0, np.minimum(requested, alloc) * 100 // safe, 0)
            score += self.most * ((per[:, 0] + per[:, 1]) // 2)
        if self.balanced:
            frac = np.minimum(requested / safe, 1.0)
            fracs = [frac[:, 0], frac[:, 1]]
            if tmpl.gpu_count:
                g = a.spec.gpu_column
                galloc = a.allocatable[sel, g]
                gfrac = np.where(
                    galloc > 0,
                    np.minimum((ssn.used[sel, g] + tmpl.request[g]) / np.maximum(galloc, 1), 1.0),
                    0.0,
                )
                fracs.append(gfrac)
            score += self.balanced * (1.0 - np.sqrt(_variance(fracs))) * 100.0
        if self.taint and a.soft_taints:
            score += self.taint * self._taint(ssn, tmpl)[sel]
        return score

    def _score_one(self, ssn: Session, tmpl: TaskTemplate, i: int) -> float:
        """:meth:`node_score` of one node: the same arithmetic, in the same order."""
        a = ssn.arrays
        cpu, mem = tmpl.request[:2].tolist()
        want = (cpu or DEFAULT_CPU, mem or DEFAULT_MEMORY)
        alloc = a.allocatable[i, :2].tolist()
        used = ssn.used[i, :2].tolist()
        requested = [u + w for u, w in zip(used, want, strict=True)]
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
            fracs = [min(rq / max(al, 1), 1.0) for al, rq in zip(alloc, requested, strict=True)]
            if tmpl.gpu_count:
                g = a.spec.gpu_column
                galloc = int(a.allocatable[i, g])
                after = int(ssn.used[i, g]) + int(tmpl.request[g])
                fracs.append(min(after / max(galloc, 1), 1.0) if galloc > 0 else 0.0)
            score += self.balanced * (1.0 - math.sqrt(_variance(fracs))) * 100.0
        if self.taint and a.soft_taints:
            score += self.taint * float(self._taint(ssn, tmpl)[i])
        return score

    def _taint(self, ssn: Session, tmpl: TaskTemplate) -> F64:
        found = self._taint_scores.get(tmpl.shape)
        if found is None:
            counts = ssn.arrays.soft_untolerated_count(tmpl.tolerations)
            top = int(counts.max()) if counts.size else 0
            found = (100.0 - counts * 100.0 / top) if top else np.full(counts.size, 100.0)
            self._taint_scores[tmpl.shape] = found
        return found


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
