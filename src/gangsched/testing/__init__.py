"""Tools for property-testing schedulers: gangsched itself or anyone else's.

* ``gangsched.testing.strategies`` — hypothesis strategies that build valid records and whole
  snapshots;
* ``gangsched.testing.invariants`` — plain checker functions ``check_x(snapshot, decisions)``
  that raise :class:`InvariantViolation`, and :func:`check_all`;
* ``gangsched.testing.machine`` — :class:`SchedulerMachine`, a hypothesis state machine that
  drives a scheduler through submissions, completions, node failures, new nodes and weight
  changes and checks every invariant after every step;
* ``gangsched.testing.reference`` — a plain, slow reference scheduler;
* ``gangsched.testing.hostile`` — a relational and boundary fuzzer run under time and memory
  limits (``python -m gangsched.testing.hostile``).

The checkers are imported with the package (``from gangsched.testing import check_all`` needs
no hypothesis); the strategies, the machine and the other submodules are loaded on first use:
they need hypothesis, which the ``test`` extra installs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from gangsched.testing import invariants
from gangsched.testing.invariants import *  # noqa: F403  (the names are invariants.__all__)

if TYPE_CHECKING:
    from gangsched.testing.machine import SchedulerAdapter as SchedulerAdapter
    from gangsched.testing.machine import SchedulerMachine as SchedulerMachine

_SUBMODULES = frozenset({"hostile", "invariants", "machine", "reference", "strategies"})
_FROM_MACHINE = frozenset({"SchedulerAdapter", "SchedulerMachine"})

# Written out (not computed) so the API reference can read it without importing the package.
__all__ = ["SchedulerAdapter", "SchedulerMachine"]  # the submodules are documented on their own
__all__ += invariants.__all__


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if name in _FROM_MACHINE:
        return getattr(importlib.import_module(f"{__name__}.machine"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*__all__, *_SUBMODULES})
