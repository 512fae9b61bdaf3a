"""The cluster's allocatable total per resource, as drf and overcommit read it at every
opening, and its inverse (drf's shares divide by it).

Both are read from the nodes' allocatable array alone, so an opening takes them over from the
last one while that array and the resource columns are the very same objects: a cluster
state hands every cycle the same allocatable array until a node's amounts change, and then a
new one (the array is never written once a cycle has it). An array held here cannot be
another with the same identity, and the figures handed out are read-only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from gangsched._types import F64
from gangsched.plugins._queue_amounts import EPS
from gangsched.units import PODS, cluster_total

if TYPE_CHECKING:
    from gangsched.session.core import Session

__all__ = ["cluster_figures"]

#: The last opening's figures with the allocatable array and resource columns they came from.
_LAST: list[tuple[npt.NDArray[np.int64], Any, tuple[F64, F64]]] = []


def cluster_figures(ssn: Session) -> tuple[F64, F64]:
    """``(total, inverse)``: :func:`~gangsched.units.cluster_total` of the nodes'
    allocatable (pods at 0) and ``1 / total`` where the total is at least ``EPS`` (0
    elsewhere); read-only, and the last opening's own when its allocatable array and resource
    columns are the very same objects."""
    a = ssn.arrays
    for allocatable, spec, figures in _LAST:
        if allocatable is a.allocatable and spec is a.spec:
            return figures
    total = cluster_total(a.allocatable, a.spec.index(PODS))
    has = total >= EPS
    inverse: F64 = np.where(has, 1.0 / np.where(has, total, 1.0), 0.0)
    total.flags.writeable = False
    inverse.flags.writeable = False
    _LAST[:] = [(a.allocatable, a.spec, (total, inverse))]
    return total, inverse
