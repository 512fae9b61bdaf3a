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

Names are loaded on first use: ``from gangsched.testing import check_all`` imports only the
checkers (no hypothesis needed); the strategies and the machine need hypothesis, which the
``test`` extra installs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .invariants import (
        ALL_CHECKS,
        Check,
        InvariantViolation,
        check_all,
        check_capacity,
        check_consolidation,
        check_deterministic,
        check_evictions,
        check_gang_atomicity,
        check_known_objects,
        check_queue_capability,
        check_reasons,
        check_schedulable_nodes,
        check_snapshot_unmutated,
        check_topology,
        find_cycle,
    )
    from .machine import SchedulerAdapter, SchedulerMachine

__all__ = [
    "ALL_CHECKS",
    "Check",
    "InvariantViolation",
    "SchedulerAdapter",
    "SchedulerMachine",
    "check_all",
    "check_capacity",
    "check_consolidation",
    "check_deterministic",
    "check_evictions",
    "check_gang_atomicity",
    "check_known_objects",
    "check_queue_capability",
    "check_reasons",
    "check_schedulable_nodes",
    "check_snapshot_unmutated",
    "check_topology",
    "find_cycle",
    "hostile",
    "invariants",
    "machine",
    "reference",
    "strategies",
]

_SUBMODULES = frozenset({"hostile", "invariants", "machine", "reference", "strategies"})
_FROM_MACHINE = frozenset({"SchedulerAdapter", "SchedulerMachine"})


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if name in __all__:
        module = "machine" if name in _FROM_MACHINE else "invariants"
        return getattr(importlib.import_module(f"{__name__}.{module}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
