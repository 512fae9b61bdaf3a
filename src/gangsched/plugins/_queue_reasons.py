"""Words for a queue plugin's refusal: which limit, on which resource, with the numbers.

Shared by ``proportion`` and ``capacity`` so both say the same thing the same way, e.g.
``cpu 7500m allocated + 1 requested > capability 8``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from gangsched._types import BOOL, F64
from gangsched.units import show_amount

if TYPE_CHECKING:
    from gangsched.session.core import Session

__all__ = ["over_limit"]


def over_limit(
    ssn: Session,
    alloc: F64,
    request: npt.NDArray[Any],
    limit: F64,
    dims: BOOL,
    label: Callable[[int], str],
    slack: float,
) -> list[str]:
    """One phrase per dimension of ``dims`` where ``alloc + request`` exceeds ``limit``
    (``slack`` as the plugin compares), naming the limit with ``label(column)``."""
    names = ssn.arrays.spec.names
    out: list[str] = []
    for c in np.flatnonzero(dims & (alloc + request > limit + slack)).tolist():
        res = names[c]
        out.append(
            f"{res} {show_amount(alloc[c], res)} allocated + "
            f"{show_amount(float(request[c]), res)} requested > "
            f"{label(c)} {show_amount(limit[c], res)}"
        )
    return out
