"""binpack: prefer the fullest node that still fits (Volcano's binpack formula).

For each resource the task requests with a configured weight ``w_r``::

    s_r = w_r · (used_r + request_r) / allocatable_r       (0 when allocatable_r is 0)
    score = Σ s_r / Σ w_r · 100 · binpack.weight            (0 if any used + request > alloc)

Arguments: ``binpack.weight`` (1), ``binpack.cpu`` (1), ``binpack.memory`` (1),
``binpack.resources: "nvidia.com/gpu, example.com/foo"`` and ``binpack.resources.<name>`` (1).
Every weight is a finite number in ``[-1e6, 1e6]`` (:data:`~gangsched.limits.MAX_ARG_WEIGHT`;
a resource weight <= 0 leaves that resource out), so a score is at most ``1e8`` in magnitude;
anything else is a :class:`~gangsched.errors.ConfigError` naming the argument.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, TypeVar

import numpy as np
import numpy.typing as npt

from gangsched.config.args import arg_weight
from gangsched.plugins._resource_weights import resource_weight_arguments, resource_weights
from gangsched.session.arrays import TaskTemplate

if TYPE_CHECKING:
    from gangsched.session.core import Session


class BinpackPlugin:
    name = "binpack"
    known_arguments = (*resource_weight_arguments("binpack"), "binpack.weight")
    #: Answers depend only on a template's shape (request, GPUs, selector, tolerations) and
    #: the nodes' state, so templates of equal shape may share one evaluation.
    shape_only = True

    def __init__(self, arguments: Mapping[str, object]) -> None:
        def w(key: str) -> float:
            return arg_weight(arguments, key, 1.0, plugin=self.name)

        self.weight = w("binpack.weight")
        self.weights = resource_weights(arguments, "binpack", w, plugin=self.name)

    def node_score(
        self, ssn: Session, tmpl: TaskTemplate, rows: npt.NDArray[np.intp]
    ) -> npt.NDArray[np.float64]:
        if self.weight == 0:
            return np.zeros(rows.size)
        spec = ssn.arrays.spec
        cols, weights = [], []
        for name, w in self.weights.items():
            if name in spec.names:
                c = spec.index(name)
                if tmpl.request[c] > 0 and w > 0:
                    cols.append(c)
                    weights.append(w)
        if not cols:
            return np.zeros(rows.size)
        if rows.size == 1:  # one node (a refresh after one placement): plain numbers
            return np.array([self._score_one(ssn, tmpl, int(rows[0]), cols, weights)])
        alloc = ssn.arrays.allocatable[rows][:, cols]
        after = ssn.used[rows][:, cols] + tmpl.request[cols]
        wv = np.array(weights)
        part = np.where(alloc > 0, _fill(wv, after, np.maximum(alloc, 1)), 0.0)
        score = _total(part.sum(axis=1), wv.sum(), self.weight)
        overflow = ((after > alloc) & (alloc > 0)).any(axis=1)
        return np.where(overflow, 0.0, score)

    def _score_one(
        self, ssn: Session, tmpl: TaskTemplate, row: int, cols: list[int], weights: list[float]
    ) -> float:
        """:meth:`node_score` of one node from the same two formulas, summed in the same
        order (the columns' fills from the first, as NumPy sums a row of a few)."""
        alloc = ssn.arrays.allocatable[row].tolist()
        used = ssn.used[row].tolist()
        request = tmpl.request.tolist()
        total = 0.0
        weight_sum = 0.0
        for c, w in zip(cols, weights, strict=True):
            a, after = alloc[c], used[c] + request[c]
            if a > 0:
                if after > a:
                    return 0.0
                total += _fill(w, after, a)
            weight_sum += w
        return float(_total(total, weight_sum, self.weight))


_N = TypeVar("_N", float, npt.NDArray[np.float64])


def _fill(w: _N, after: object, alloc: object) -> _N:
    """One column's weighted fill once the request is placed (``alloc`` > 0): the formula
    both forms read, NumPy columns and one node's numbers alike."""
    out: _N = w * after / alloc  # type: ignore[operator]
    return out


def _total(fills: _N, weight_sum: object, weight: float) -> _N:
    """The node's score from its columns' summed fills: their weighted mean in percent,
    times the plugin's weight."""
    out: _N = fills / weight_sum * 100.0 * weight  # type: ignore[operator]
    return out
