"""Gang-aware victim selection, shared by the ``preempt`` and ``reclaim`` actions.

Theory of operation
-------------------
A *preemptor* is an admitted, valid, starving job (the ``job_starving`` point) that still needs
pending tasks to reach its gang minimum. Its *claim* is exactly those tasks: the pending tasks
that bring ready + reserved up to ``min_available`` (every short role's minimum first), never
the elastic tasks beyond it.

The work is split in three modules, each the one owner of its part:

* :mod:`.rules` — the rules a victim must pass (who may evict: ``preemption_policy:
  Never`` and ``preemption_delay``; ``preemptable`` on task and job; the priority rule of
  preempt; the gang surplus and whole-job rules), the claim and the preemptor order;
* :mod:`.search` — the bundle search, its cost order, the disruption-budget passes,
  the all-or-nothing commit and the explanation when nothing is found;
* :mod:`.loop` — the action loop (:func:`~gangsched.actions.victims.loop.run`) and the binding
  of carried reservations (:func:`~gangsched.actions.victims.loop.realise_reservations`).

A victim set never contains part of a gang below its minimum, whatever the plugin tiers say.
The chosen plan is replayed and committed only if the claim is pipelined; otherwise nothing is
evicted. The claimed tasks are always *pipelined* — reserved on future-idle resources — never
bound in the cycle that evicts for them; the caller carries them as ``Pipelined`` tasks (with
node and devices) and :func:`~gangsched.actions.victims.loop.realise_reservations` binds them
in a later cycle once their resources are idle. The session never lets other tasks take resources
under a reservation.

When no plan exists the job's entry in ``Decisions.preemption_reasons`` names the rule that
stopped it (one of the ``*`` reason codes of :mod:`.rules`).
"""
