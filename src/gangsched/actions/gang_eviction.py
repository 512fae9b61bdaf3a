"""gangpreempt and gangreclaim: preempt and reclaim where a victim gang may go whole.

Volcano (v1.15) added these two actions beside ``preempt`` and ``reclaim``: the older actions
take from a running gang only the tasks above its ``minAvailable`` (the gang plugin's victim
rule), while the gang-aware ones choose victims as bundles — a job's surplus, or the whole job
— so a gang running exactly at its minimum can be evicted entirely when nothing smaller makes
room. Their ``allowWholeBundle`` argument (default true) switches the whole-job bundles off.

gangsched's victim search already works on such bundles (:mod:`._victim_search`): these
actions are ``preempt`` and ``reclaim`` with whole-job bundles allowed by default. Who may
evict, which tasks are candidates, the fair-share rule of reclaim and the all-or-nothing
commit are those of ``preempt`` and ``reclaim``. The same choice is open to ``preempt`` and
``reclaim`` themselves through ``allowWholeBundle: true``.

``maxDomains`` (Volcano: how many hypernode domains a preemptor scans) is accepted and not
read: gangsched tries every domain the job's hard topology allows.
"""

from __future__ import annotations

from .preempt import PreemptAction
from .reclaim import ReclaimAction

__all__ = ["GangPreemptAction", "GangReclaimAction"]

#: Volcano's cap on the hypernode domains scanned per preemptor (accepted, not read).
MAX_DOMAINS = "maxDomains"


class GangPreemptAction(PreemptAction):
    """``preempt`` with whole-gang victims (``allowWholeBundle`` true unless set false)."""

    name = "gangpreempt"
    known_arguments: tuple[str, ...] = (*PreemptAction.known_arguments, MAX_DOMAINS)


class GangReclaimAction(ReclaimAction):
    """``reclaim`` with whole-gang victims (``allowWholeBundle`` true unless set false)."""

    name = "gangreclaim"
    known_arguments: tuple[str, ...] = (*ReclaimAction.known_arguments, MAX_DOMAINS)
