"""Tools for property-testing schedulers built on gangsched.

``gangsched.testing.strategies`` holds hypothesis strategies that build valid records and whole
snapshots. Submodules are imported on first use, so importing this package does not require
hypothesis.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["strategies"]


def __getattr__(name: str) -> ModuleType:
    if name in __all__:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
