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
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from ..arrays import TaskTemplate
from ..config import arg_float

if TYPE_CHECKING:
    from ..session import Session

F64 = npt.NDArray[np.float64]
DEFAULT_CPU = 100
DEFAULT_MEMORY = 200 * 1024 * 1024


class NodeOrderPlugin:
    name = "nodeorder"

    def __init__(self, arguments: Mapping[str, object]) -> None:
        def w(key: str, default: float) -> float:
            return arg_float(arguments, key, default, plugin=self.name)

        self.least = w("leastrequested.weight", 1.0)
        self.most = w("mostrequested.weight", 0.0)
        self.balanced = w("balancedresource.weight", 1.0)
        self.taint = w("tainttoleration.weight", 3.0)
        self._taint_scores: dict[int, F64] = {}

    def node_score(self, ssn: Session, tmpl: TaskTemplate, rows: npt.NDArray[np.intp]) -> F64:
        a = ssn.arrays
        cols = [0, 1]  # cpu, memory
        req = tmpl.request[cols].copy()
        if req[0] == 0:
            req[0] = DEFAULT_CPU
        if req[1] == 0:
            req[1] = DEFAULT_MEMORY
        alloc = a.allocatable[rows][:, cols]
        requested = ssn.used[rows][:, cols] + req
        safe = np.maximum(alloc, 1)
        score = np.zeros(rows.size)
        if self.least:
            per = np.where((alloc > 0) & (requested <= alloc), (alloc - requested) * 100 // safe, 0)
            score += self.least * (per.sum(axis=1) // 2)
        if self.most:
            per = np.where(alloc > 0, np.minimum(requested, alloc) * 100 // safe, 0)
            score += self.most * (per.sum(axis=1) // 2)
        if self.balanced:
            frac = np.minimum(requested / safe, 1.0)
            if tmpl.gpu_count:
                g = a.spec.gpu_column
                galloc = a.allocatable[rows, g]
                gfrac = np.where(
                    galloc > 0,
                    np.minimum((ssn.used[rows, g] + tmpl.request[g]) / np.maximum(galloc, 1), 1.0),
                    0.0,
                )
                frac = np.column_stack([frac, gfrac])
            score += self.balanced * (1.0 - frac.std(axis=1)) * 100.0
        if self.taint and a.soft_taints:
            score += self.taint * self._taint(ssn, tmpl)[rows]
        return score

    def _taint(self, ssn: Session, tmpl: TaskTemplate) -> F64:
        found = self._taint_scores.get(tmpl.index)
        if found is None:
            counts = ssn.arrays.soft_untolerated_count(tmpl.tolerations)
            top = int(counts.max()) if counts.size else 0
            found = (100.0 - counts * 100.0 / top) if top else np.full(counts.size, 100.0)
            self._taint_scores[tmpl.index] = found
        return found
