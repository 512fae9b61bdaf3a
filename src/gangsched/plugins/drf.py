"""drf: order jobs by dominant resource share, lowest first.

A job's share is ``max_r allocated_r / total_r`` over the cluster's resources (pods excluded);
allocations made during the cycle count immediately, so gangs interleave fairly.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from ..units import PODS

if TYPE_CHECKING:
    from ..session import Session


class DrfPlugin:
    name = "drf"

    def __init__(self, arguments: Mapping[str, object]) -> None:
        self.arguments = arguments
        self._total = np.zeros(0)

    def on_session_open(self, ssn: Session) -> None:
        total = ssn.arrays.allocatable.sum(axis=0).astype(np.float64)
        total[ssn.arrays.spec.index(PODS)] = 0.0
        self._total = total

    def share(self, ssn: Session, job: int) -> float:
        alloc = ssn.job_allocated[job]
        ratio = np.where(self._total > 0, alloc / np.where(self._total > 0, self._total, 1), 0.0)
        return float(ratio.max()) if ratio.size else 0.0

    def job_order(self, ssn: Session, job: int) -> tuple[Any, ...]:
        return (self.share(ssn, job),)
