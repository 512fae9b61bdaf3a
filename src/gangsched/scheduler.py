"""``schedule(snapshot, config) -> Decisions``: one scheduling cycle, as a pure function.

Opens a :class:`~gangsched.session.core.Session`, runs the configured actions in order and turns the
session's committed operations and final state into :class:`~gangsched.decisions.Decisions`.
The snapshot is never mutated; the same snapshot and config give byte-identical decisions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from gangsched._frozen import FrozenDict
from gangsched.actions.allocate import AllocateAction
from gangsched.actions.backfill import BackfillAction
from gangsched.actions.consolidate import ConsolidateAction
from gangsched.actions.enqueue import EnqueueAction
from gangsched.actions.preempt import GangPreemptAction, PreemptAction
from gangsched.actions.reclaim import GangReclaimAction, ReclaimAction
from gangsched.config import Config
from gangsched.decisions import Decisions
from gangsched.errors import ConfigError
from gangsched.framework.registry import Action, Registry
from gangsched.model.snapshot import Snapshot
from gangsched.placement import Placer
from gangsched.plugins.binpack import BinpackPlugin
from gangsched.plugins.capacity import CapacityPlugin
from gangsched.plugins.conformance import ConformancePlugin
from gangsched.plugins.drf import DrfPlugin
from gangsched.plugins.fgd_scores import SCORE_PLUGINS
from gangsched.plugins.gang import GangPlugin
from gangsched.plugins.network_topology import NetworkTopologyAwarePlugin
from gangsched.plugins.nodegroup import NodeGroupPlugin
from gangsched.plugins.nodeorder import NodeOrderPlugin
from gangsched.plugins.overcommit import OvercommitPlugin
from gangsched.plugins.predicates import PredicatesPlugin
from gangsched.plugins.priority import PriorityPlugin
from gangsched.plugins.proportion import ProportionPlugin
from gangsched.plugins.sla import SlaPlugin
from gangsched.plugins.task_topology import TaskTopologyPlugin
from gangsched.session.close import close_session
from gangsched.session.close import nondeterministic_options as nondeterministic_options
from gangsched.session.core import Session

__all__ = ["default_registry", "explain", "make_actions", "open_session", "run_cycle", "schedule"]


def default_registry() -> Registry:
    """A fresh registry holding every built-in plugin and action (add your own to it)."""
    reg = Registry()
    for cls in (
        GangPlugin,
        PriorityPlugin,
        ConformancePlugin,
        DrfPlugin,
        ProportionPlugin,
        CapacityPlugin,
        PredicatesPlugin,
        NodeOrderPlugin,
        BinpackPlugin,
        OvercommitPlugin,
        SlaPlugin,
        NetworkTopologyAwarePlugin,
        NodeGroupPlugin,
        TaskTopologyPlugin,
    ):
        reg.register_plugin(cls.name, cls)
    for name, factory in SCORE_PLUGINS.items():
        reg.register_plugin(name, factory)
    for action in (
        EnqueueAction,
        AllocateAction,
        BackfillAction,
        PreemptAction,
        ReclaimAction,
        ConsolidateAction,
        GangPreemptAction,
        GangReclaimAction,
    ):
        reg.register_action(action.name, action)
    return reg


def _given_or_default(config: Config | None, registry: Registry | None) -> tuple[Config, Registry]:
    """The config and registry a cycle uses: those given, else :meth:`Config.default`
    (Volcano's default) and :func:`default_registry`."""
    for value, cls, name in ((config, Config, "config"), (registry, Registry, "registry")):
        if value is not None and not isinstance(value, cls):
            raise ConfigError(
                f"expected a {cls.__name__} or None, got {type(value).__name__}",
                kind="schedule",
                field=name,
            )
    return (
        Config.default() if config is None else config,
        default_registry() if registry is None else registry,
    )


def open_session(
    snapshot: Snapshot,
    config: Config | None = None,
    *,
    registry: Registry | None = None,
    previous: Session | None = None,
) -> Session:
    """Open a session (for custom actions, tests and what-if tools); ``previous`` as for
    :func:`run_cycle`."""
    if not isinstance(snapshot, Snapshot):
        raise ConfigError(
            f"expected a Snapshot, got {type(snapshot).__name__}", kind="schedule", field="snapshot"
        )
    config, registry = _given_or_default(config, registry)
    if previous is not None:
        if not isinstance(previous, Session):
            raise ConfigError(
                f"expected a finished Session or None, got {type(previous).__name__}",
                kind="schedule",
                field="previous",
            )
        if previous.released:
            raise ConfigError(
                "this session was released (Session.release): it lends nothing to another "
                "cycle; pass the last session that was not released, or None",
                kind="schedule",
                field="previous",
            )
    return Session.open(snapshot, config, registry, previous=previous)


def schedule(
    snapshot: Snapshot,
    config: Config | None = None,
    *,
    placer: Placer | None = None,
    registry: Registry | None = None,
) -> Decisions:
    """Run one scheduling cycle.

    Parameters
    ----------
    snapshot:
        The cluster as it is now.
    config:
        Actions and plugin tiers; :meth:`Config.default` (Volcano's default) when omitted.
    placer:
        Places gangs whole (e.g. ``CpSatPlacer(...)``); by default only jobs with a network
        topology go through a placer (greedy) and the others are placed task by task.
    registry:
        Plugin and action factories; :func:`default_registry` when omitted.

    Returns
    -------
    Decisions
        Binds, evictions, reservations and the status of every job and queue.
    """
    return run_cycle(snapshot, config, placer=placer, registry=registry)[0]


def run_cycle(
    snapshot: Snapshot,
    config: Config | None = None,
    *,
    placer: Placer | None = None,
    registry: Registry | None = None,
    previous: Session | None = None,
) -> tuple[Decisions, Session]:
    """:func:`schedule`, also returning the finished session, for a caller that runs cycle
    after cycle on one cluster (:class:`gangsched.ClusterState`): handing the last session
    back as ``previous`` lets the next cycle keep the per-template evaluations that still
    hold. The decisions are the same with or without it."""
    config, registry = _given_or_default(config, registry)
    ssn = open_session(snapshot, config, registry=registry, previous=previous)
    if placer is not None:
        ssn.placer = placer
    for action in make_actions(config, registry):
        action.execute(ssn)
    return close_session(ssn), ssn


def make_actions(config: Config, registry: Registry) -> list[Action]:
    """The actions of one cycle, in the configured order: one object per action name, shared
    by its repeats (as in Volcano), so a long action list costs one lookup per entry.

    Arguments configured for an action that is not in the list are checked too (an unknown
    argument is a :class:`~gangsched.errors.ConfigError` wherever it is written)."""
    made: dict[str, Action] = {}
    for name in config.actions:
        if name not in made:
            made[name] = registry.make_action(name, config.action_arguments(name))
    for name, arguments in config.configurations.items():
        if name not in made and name in registry.actions:
            registry.check_action_arguments(name, arguments)
    return [made[name] for name in config.actions]


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeExplanation:
    node: str
    fits: bool
    fits_after_release: bool
    reason: str
    scores: Mapping[str, float]
    total: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Explanation:
    """Why a task would go where: every node's feasibility and per-plugin scores."""

    task: str
    nodes: tuple[NodeExplanation, ...]
    best: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "best": self.best,
            "nodes": [
                {
                    "node": n.node,
                    "fits": n.fits,
                    "fits_after_release": n.fits_after_release,
                    "reason": n.reason,
                    "scores": dict(n.scores),
                    "total": n.total,
                }
                for n in self.nodes
            ],
        }


def explain(
    snapshot: Snapshot,
    task_name: str,
    config: Config | None = None,
    *,
    registry: Registry | None = None,
) -> Explanation:
    """For every node: does ``task_name`` fit (and if not, which check said no), each
    ``node_score`` plugin's score and the total — the numbers ``allocate`` would use at the
    start of the cycle. The task must be Pending."""
    ssn = open_session(snapshot, config, registry=registry)
    found = snapshot.task_index.get(task_name)
    if found is None:
        raise ConfigError("not in the snapshot", kind="task", name=task_name)
    t = int(found)
    if ssn.template_of[t] < 0:
        raise ConfigError(
            f"task is {snapshot.tasks[t].phase.value}, not Pending",
            kind="task",
            name=task_name,
            field="phase",
        )
    tmpl = ssn.templates[int(ssn.template_of[t])]
    rows = np.arange(ssn.arrays.n_nodes, dtype=np.intp)
    ev = ssn.evaluate(tmpl)
    reasons = [""] * rows.size
    for reject, word in ssn.points.rejections(tmpl, rows):
        for k in np.flatnonzero(reject).tolist():
            if not reasons[k]:
                reasons[k] = word
    per_plugin = ssn.points.node_scores(tmpl, rows)
    nodes = []
    for i, name in enumerate(ssn.arrays.node_names):
        reason = reasons[i]
        if not reason and not ev.fit_future[i]:
            reason = "insufficient resources"
        nodes.append(
            NodeExplanation(
                node=name,
                fits=bool(ev.ok[i] and ev.fit_idle[i]),
                fits_after_release=bool(ev.ok[i] and ev.fit_future[i]),
                reason=reason,
                scores=FrozenDict({k: float(v[i]) for k, v in per_plugin.items()}),
                total=float(ev.score[i]),
            )
        )
    best_idx, _ = ssn.best_node(tmpl)
    return Explanation(
        task=task_name,
        nodes=tuple(nodes),
        best=ssn.arrays.node_names[best_idx] if best_idx >= 0 else None,
    )
