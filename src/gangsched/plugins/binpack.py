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
from typing import TYPE_CHECKING

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
        alloc = ssn.arrays.allocatable[rows][:, cols]
        after = ssn.used[rows][:, cols] + tmpl.request[cols]
        wv = np.array(weights)
        part = np.where(alloc > 0, wv * after / np.maximum(alloc, 1), 0.0)
        score = part.sum(axis=1) / wv.sum() * 100.0 * self.weight
        overflow = ((after > alloc) & (alloc > 0)).any(axis=1)
        return np.where(overflow, 0.0, score)
