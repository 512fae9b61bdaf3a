"""The NumPy array types the package annotates with, named once."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["BOOL", "F64", "I64", "U64"]

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
BOOL = npt.NDArray[np.bool_]
U64 = npt.NDArray[np.uint64]
