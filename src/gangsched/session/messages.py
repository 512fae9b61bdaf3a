"""Messages between the actions of one cycle: typed, each with one writer.

An action that leaves word for a later action (or for the plugins it consults) writes it in
the cycle's :class:`CycleMessages` (``ssn.messages``), never in a loose field of the session.
Each message is a small class with one write method, called by its owner alone
(``tests/project/test_one_writer.py`` reads the source for it); every other module only reads:

* :class:`FreedByPreemption` — owned by the ``enqueue`` action: while it votes again on a job's
  admission counting what the job could free by preemption, that amount
  (:meth:`~FreedByPreemption.counting`); the queue plugins' votes read it through
  :meth:`gangsched.session.core.Session.preemptable_for`;
* :class:`ReservationsRealised` — owned by the victim loop
  (:func:`gangsched.actions.victims.loop.realise_reservations`): whether the carried
  reservations of the cycle were realised already (the first of ``allocate``, ``preempt``,
  ``reclaim`` and ``consolidate`` to run does it, once).

The messages belong to the cycle (a new session has new ones), so a configured action object
keeps nothing from one cycle to the next.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from gangsched._types import I64

__all__ = ["CycleMessages", "FreedByPreemption", "ReservationsRealised"]


class FreedByPreemption:
    """What the job being voted on at admission could free by preemption, in ``task_req``'s
    terms: ``freed`` in all, ``quota`` the part that lowers its queue's allocation beyond the
    victims' elastic amounts. Set for one job at a time, for the length of one vote."""

    __slots__ = ("_freed", "_job", "_quota")

    def __init__(self) -> None:
        self._job = -1
        self._freed: I64 | None = None
        self._quota: I64 | None = None

    @contextmanager
    def counting(self, job: int, freed: I64, quota: I64) -> Iterator[None]:
        """The one write: within the ``with`` block, ``job`` may count ``freed`` (``quota``)
        as available. Not nested: one vote at a time."""
        if self._job >= 0:
            raise RuntimeError(f"already counting what job #{self._job} could free")
        self._job, self._freed, self._quota = job, freed, quota
        try:
            yield
        finally:
            self._job, self._freed, self._quota = -1, None, None

    def of(self, job: int, *, quota: bool = False) -> I64 | None:
        """What ``job`` may count (its ``quota`` part), or None when it is not being voted on
        that way."""
        if job != self._job or self._job < 0:
            return None
        return self._quota if quota else self._freed


class ReservationsRealised:
    """Whether the cycle's carried reservations were realised already (once per cycle)."""

    __slots__ = ("_done",)

    def __init__(self) -> None:
        self._done = False

    @property
    def done(self) -> bool:
        return self._done

    def mark(self) -> None:
        """The one write: the reservations are being realised now; never twice."""
        if self._done:
            raise RuntimeError("the carried reservations were realised already in this cycle")
        self._done = True


@dataclass(frozen=True, slots=True)
class CycleMessages:
    """The messages of one cycle (``ssn.messages``); each field has one writer."""

    freed_by_preemption: FreedByPreemption = field(default_factory=FreedByPreemption)
    reservations: ReservationsRealised = field(default_factory=ReservationsRealised)
