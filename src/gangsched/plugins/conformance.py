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
        # (snapshot, whether each of its tasks may be a victim), read once per snapshot
        self._open: tuple[object, npt.NDArray[np.bool_]] | None = None

    def _filter(self, ssn: Session, candidates: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        known = self._open
        if known is None or known[0] is not ssn.snapshot:
            prio = np.fromiter(
                (t.priority for t in ssn.snapshot.tasks),
                dtype=np.int64,
                count=len(ssn.snapshot.tasks),
            )
            known = self._open = (ssn.snapshot, prio < SYSTEM_CRITICAL_PRIORITY)
        keep: npt.NDArray[np.int64] = np.asarray(candidates, dtype=np.int64)
        return keep[known[1][keep]]

    def preemptable(
        self, ssn: Session, preemptor: int, candidates: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.int64]:
        return self._filter(ssn, candidates)

    def reclaimable(
        self, ssn: Session, preemptor: int, candidates: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.int64]:
        return self._filter(ssn, candidates)
