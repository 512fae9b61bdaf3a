"""What the queue plugins (``proportion``, ``capacity``) read of the queues as
``(n_queues, n_resources)`` matrices, and how they compare amounts."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from gangsched._types import BOOL, F64

if TYPE_CHECKING:
    from gangsched.session.core import Session

__all__ = ["EPS", "SLACK", "capability_matrix", "fits", "names_of", "resource_matrix"]


#: Volcano's ``minResource``: amounts closer than this compare equal, smaller ones are empty.
EPS = 0.1
#: Float slack of the strict comparisons (canonical units are integers).
SLACK = 1e-6


def capability_matrix(ssn: Session, *, flat: bool = True) -> tuple[F64, BOOL]:
    """Every queue's capability as ``(n_queues, n_resources)`` (``inf`` where unset) and the
    mask of the dimensions it sets. With ``flat``, cpu and memory at or below zero count as
    unset (as Volcano's flat plugins read them)."""
    a = ssn.arrays
    n_q, n_r = len(ssn.snapshot.queues), len(a.spec)
    cap = np.full((n_q, n_r), np.inf)
    given = np.zeros((n_q, n_r), dtype=np.bool_)
    for q, queue in enumerate(ssn.snapshot.queues):
        for res, amount in queue.capability_limits(flat=flat).items():
            c = a.spec.index(res)
            cap[q, c] = float(amount)
            given[q, c] = True
    return cap, given


def resource_matrix(ssn: Session, attr: str) -> F64:
    """``guarantee`` or ``deserved`` of every queue as ``(n_queues, n_resources)`` (0 unset)."""
    out = np.zeros((len(ssn.snapshot.queues), len(ssn.arrays.spec)))
    for q, queue in enumerate(ssn.snapshot.queues):
        out[q] = ssn.vector(getattr(queue, attr))
    return out


def fits(alloc: F64, request: npt.NDArray[Any], limit: F64, dims: BOOL) -> bool:
    """``alloc + request ≤ limit`` on ``dims`` (strict, float slack only)."""
    return bool(np.all(alloc[dims] + request[dims] <= limit[dims] + SLACK))


def names_of(ssn: Session, over: BOOL) -> str:
    """The names of the resources ``over`` marks, comma-separated."""
    return ", ".join(ssn.arrays.spec.names[c] for c in np.flatnonzero(over))
