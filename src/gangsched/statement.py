"""A transaction over the session: allocate / pipeline / evict with an undo log.

A gang is tried inside one statement; ``commit()`` makes its operations decisions,
``discard()`` undoes them in reverse so every session array is restored exactly (resources are
int64, so undo is exact arithmetic, not approximate).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .session import Session

__all__ = ["Op", "Statement"]


@dataclass(frozen=True, slots=True)
class Op:
    kind: str  # "allocate" | "pipeline" | "evict"
    task: int
    node: int
    gpus: tuple[int, ...]
    prev_state: int = 0
    reason: str = ""
    preemptor: str = ""


class Statement:
    """Operations recorded against ``ssn``; nothing is a decision until :meth:`commit`."""

    __slots__ = ("_done", "ops", "ssn")

    def __init__(self, ssn: Session) -> None:
        self.ssn = ssn
        self.ops: list[Op] = []
        self._done = False

    def _check_open(self) -> None:
        if self._done:
            raise RuntimeError("statement already committed or discarded")

    def allocate(self, task: int, node: int, gpus: tuple[int, ...]) -> None:
        self._check_open()
        self.ssn.place(task, node, gpus, pipelined=False)
        self.ops.append(Op("allocate", task, node, gpus))

    def pipeline(self, task: int, node: int, gpus: tuple[int, ...]) -> None:
        self._check_open()
        self.ssn.place(task, node, gpus, pipelined=True)
        self.ops.append(Op("pipeline", task, node, gpus))

    def evict(self, task: int, reason: str, preemptor: str = "") -> None:
        self._check_open()
        prev = int(self.ssn.task_state[task])
        node = int(self.ssn.task_node[task])
        gpus = self.ssn.task_gpus[task]
        self.ssn.evict(task)
        self.ops.append(Op("evict", task, node, gpus, prev, reason, preemptor))

    def discard(self) -> None:
        """Undo every operation, newest first."""
        self._check_open()
        for op in reversed(self.ops):
            if op.kind == "evict":
                self.ssn.unevict(op.task, op.prev_state)
            else:
                self.ssn.unplace(op.task)
        self.ops.clear()
        self._done = True

    def commit(self) -> None:
        """Turn the operations into decisions."""
        self._check_open()
        self.ssn.record(self.ops, committed=True)
        self._done = True

    def keep(self) -> None:
        """Leave the operations applied as reservations without committing them (a gang that
        is pipelined but not ready keeps its claim on the resources for this cycle)."""
        self._check_open()
        self.ssn.record(self.ops, committed=False)
        self._done = True
