"""conformance: never choose system-critical pods as victims.

Kubernetes' ``system-cluster-critical`` and ``system-node-critical`` priority classes have the
values 2,000,000,000 and 2,000,001,000; any task at or above the first is protected.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from gangsched.session.core import Session

SYSTEM_CRITICAL_PRIORITY = 2_000_000_000


class ConformancePlugin:
    name = "conformance"
    known_arguments: tuple[str, ...] = ()

    def __init__(self, arguments: Mapping[str, object]) -> None:
        self.arguments = arguments

    def _filter(self, ssn: Session, candidates: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        keep = [
            int(t)
            for t in candidates
            if ssn.snapshot.tasks[int(t)].priority < SYSTEM_CRITICAL_PRIORITY
        ]
        return np.array(keep, dtype=np.int64)

    def preemptable(
        self, ssn: Session, preemptor: int, candidates: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.int64]:
        return self._filter(ssn, candidates)

    def reclaimable(
        self, ssn: Session, preemptor: int, candidates: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.int64]:
        return self._filter(ssn, candidates)
