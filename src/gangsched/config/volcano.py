"""Where gangsched's defaults differ from Volcano's, and what reading or writing Volcano's
``volcano-scheduler.conf`` does about it.

A configuration read from Volcano's YAML schedules as Volcano would: gangsched's extensions
that change a decision are on only when the text names them (:func:`as_volcano_reads`). A
configuration written to Volcano's YAML names every such extension it has on
(:func:`naming_extensions`), so that reading the text back gives the same behaviour and an
equal :class:`~gangsched.config.Config`: an argument set to gangsched's default is left out of
a configuration (:func:`without_defaults`), since it schedules alike without it.

The extensions, as ``(action, argument, gangsched's default, Volcano's behaviour)``:

* ``enqueue`` / ``shapeCheckEnable``: gangsched keeps a Pending job out while its minimum gang
  fits no node's shape; Volcano's enqueue has no such check (a job without ``minResources``
  is always admitted).
* ``enqueue`` / ``admitByPreemption``: when the quota vote refuses a job and ``preempt`` is
  configured, gangsched votes again with what the job may preempt counted as free; Volcano's
  vote compares ``minResources`` with what is free, so a high-priority gang on a cluster full
  of low-priority work stays Pending.
* ``reclaim`` and ``gangreclaim`` / ``fairShareGuard``: gangsched refuses a reclaim whose
  claimed tasks the victim queue could reclaim straight back (the reclaimer left above its
  deserved share on a resource they hold); Volcano's ``preemptive`` admits a reclaimer within
  its deserved share on one requested resource whatever the others.
* ``preempt`` and ``reclaim`` / ``allVictimRules``: gangsched asks every victim a preemptor
  takes to pass every victim rule (priority, the gang surplus) whatever tier of
  ``preemptable`` / ``reclaimable`` plugins answers; Volcano walks the tiers and takes the
  victims of the first tier whose plugins all answer some, so when a first-tier plugin
  (priority, gang) answers none the next tier (drf, proportion) chooses alone.
* ``preempt`` / ``victimSelection``: gangsched's preempt evicts the cheapest admissible victim
  set for a starving job's whole claim (``cheapest``); Volcano's walks the job's tasks one by
  one and, for each, the nodes in score order, evicting on the first node where its plugins'
  victims make room (``volcano``). A text that sets ``allVictimRules: true`` on ``preempt``
  and names no ``victimSelection`` keeps ``cheapest`` (the two together are refused).
"""

from __future__ import annotations

from collections.abc import Mapping

from gangsched.config.args import _TRUE, FrozenArgs, _err, _thaw
from gangsched.config.tiers import _parse_actions, _parse_configurations
from gangsched.errors import ConfigError

__all__ = [
    "EXTENSIONS",
    "VOLCANO_PREEMPTION_CONF",
    "as_volcano_reads",
    "check_victim_selection",
    "naming_extensions",
    "without_defaults",
]

#: Volcano's default tiers (as its chart ships ``volcano-scheduler.conf``) with the preemption
#: actions ``enqueue, allocate, preempt, reclaim, backfill``: the configuration people run
#: with preemption, as the text :meth:`Config.from_volcano_yaml` reads.
VOLCANO_PREEMPTION_CONF = """actions: "enqueue, allocate, preempt, reclaim, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
  - name: conformance
- plugins:
  - name: overcommit
  - name: drf
  - name: predicates
  - name: proportion
  - name: nodeorder
  - name: binpack
"""

#: ``(action, argument, gangsched's default, the value that behaves like Volcano)``.
EXTENSIONS: tuple[tuple[str, str, bool | str, bool | str], ...] = (
    ("enqueue", "shapeCheckEnable", True, False),
    ("enqueue", "admitByPreemption", True, False),
    ("reclaim", "fairShareGuard", True, False),
    ("gangreclaim", "fairShareGuard", True, False),
    ("preempt", "allVictimRules", True, False),
    ("reclaim", "allVictimRules", True, False),
    ("preempt", "victimSelection", "cheapest", "volcano"),
)


#: Extensions that change nothing unless one of these actions is configured too: they are
#: neither set nor written without one.
_ONLY_WITH: dict[tuple[str, str], tuple[str, ...]] = {
    ("enqueue", "admitByPreemption"): ("preempt", "gangpreempt"),
}


def _all_rules_named(args: Mapping[str, object]) -> bool:
    """Whether ``args`` set ``allVictimRules`` true (as Go reads a boolean)."""
    value = args.get("allVictimRules")
    if isinstance(value, str):
        value = value.strip() in _TRUE
    return value is True


def check_victim_selection(configurations: Mapping[str, Mapping[str, object]]) -> None:
    """Refuse ``preempt``'s ``victimSelection: volcano`` together with ``allVictimRules:
    true`` (checked before the default is dropped, so the explicit ``true`` is seen): Volcano's
    walk takes the victims of the first answering tier alone, which cannot also hold every
    victim rule whatever tier answers."""
    args = configurations.get("preempt", {})
    if args.get("victimSelection") == "volcano" and _all_rules_named(args):
        raise _err(
            "configurations.preempt.victimSelection",
            "victimSelection: volcano takes the victims of Volcano's tier walk, which "
            "allVictimRules: true forbids (set allVictimRules: false or leave it out, or "
            "choose victimSelection: cheapest)",
        )


def _with(
    configurations: Mapping[str, Mapping[str, object]], actions: tuple[str, ...], value_of: int
) -> dict[str, dict[str, object]] | None:
    """``configurations`` with every extension of a listed action that is not set given the
    value at position ``value_of`` of its :data:`EXTENSIONS` entry; None when nothing is added."""
    out = {name: {k: _thaw(v) for k, v in args.items()} for name, args in configurations.items()}
    added = False
    for entry in EXTENSIONS:
        action, argument = entry[0], entry[1]
        needs = _ONLY_WITH.get((action, argument))
        if needs is not None and not any(a in actions for a in needs):
            continue
        if action in actions and argument not in out.get(action, {}):
            if argument == "victimSelection" and _all_rules_named(out.get(action, {})):
                continue  # every victim rule asked: the search, gangsched's default
            out.setdefault(action, {})[argument] = entry[value_of]
            added = True
    return out if added else None


def as_volcano_reads(data: object, max_actions: int) -> object:
    """The plain data of a text read from Volcano's YAML with every extension the text leaves
    unset set to Volcano's behaviour. Data that does not parse is returned as it is (reading
    it then reports the error)."""
    if not isinstance(data, Mapping) or "actions" not in data:
        return data
    try:
        actions = _parse_actions(data["actions"], max_actions)
        configurations = _parse_configurations(data.get("configurations"))
    except ConfigError:
        return data
    volcano = _with(configurations, actions, 3)
    return data if volcano is None else {**data, "configurations": volcano}


def naming_extensions(
    configurations: Mapping[str, Mapping[str, object]], actions: tuple[str, ...]
) -> dict[str, dict[str, object]] | None:
    """The configurations to write to Volcano's YAML: every extension left at gangsched's
    default is named with that default (None when there is none to name)."""
    return _with(configurations, actions, 2)


def without_defaults(
    configurations: dict[str, FrozenArgs[object]],
) -> dict[str, FrozenArgs[object]]:
    """``configurations`` without the extension arguments set to gangsched's default, and
    without an empty argument map of an action that has extensions (it schedules as no entry
    does, and the two must compare equal once written to Volcano's YAML and read back)."""
    out = dict(configurations)
    for action, argument, default, _ in EXTENSIONS:
        args = out.get(action)
        if args is None:
            continue
        rest = {
            k: v
            for k, v in args.items()
            if not (k == argument and type(v) is type(default) and v == default)
        }
        if not rest:
            del out[action]
        elif len(rest) < len(args):
            out[action] = FrozenArgs(rest)
    return out
