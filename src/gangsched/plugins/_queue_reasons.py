"""Words for a queue plugin's refusal: which limit, on which resource, with the numbers.

Shared by ``proportion`` and ``capacity`` so both say the same thing the same way, e.g.
``cpu 7500m allocated + 1 requested > capability 8``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from ..units import GPU, format_quantity, is_byte_resource

if TYPE_CHECKING:
    from ..session import Session

__all__ = ["over_limit", "show_amount"]

F64 = npt.NDArray[np.float64]
BOOL = npt.NDArray[np.bool_]

_BINARY = ((2**40, "Ti"), (2**30, "Gi"), (2**20, "Mi"), (2**10, "Ki"))


def show_amount(amount: float, resource: str) -> str:
    """A canonical amount in the units a user writes: ``7500m`` / ``8`` cpu, ``16Gi`` memory,
    ``2`` GPUs, plain counts otherwise."""
    value = round(float(amount))
    if is_byte_resource(resource) and value:
        for scale, suffix in _BINARY:
            if value % scale == 0:
                return f"{value // scale}{suffix}"
        return str(value)
    shown = format_quantity(value, resource)
    if resource == GPU and isinstance(shown, str):
        return f"{value / 1000:g}"
    return str(shown)


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
