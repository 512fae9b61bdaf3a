"""Extension points: the contract between the session and its plugins, as data.

A plugin is any object with a ``name`` and the members of the points it serves. Every point is
one row of :data:`EXTENSION_POINTS`: its name, the :class:`~typing.Protocol` a plugin meets to
serve it, its kind and the combiner that folds the answers of all serving plugins, tier by
tier, into one (:mod:`gangsched.framework.combine`). The session resolves each point's chain
**once**,
when it opens: a plugin serves a point when it has the member, the config does not switch the
point off for it, and the member matches the Protocol's signature — otherwise the session
refuses to open with a :class:`~gangsched.errors.ConfigError` naming the plugin and the point
(a typo'd signature never fails silently in the middle of a cycle). The dispatcher
(:class:`gangsched.framework.dispatch.Dispatch`) is then the only code that walks tiers.

Kinds
-----
``CALL``
    asked with arguments, answers combined (orders, votes, victim sets, checks);
``ROWS``
    row-based: ``predicate`` and ``node_score`` receive the template and the node rows to
    evaluate and answer for exactly those rows, so the session re-evaluates only the rows a
    placement touched;
``EVENT``
    told, nothing returned (``on_session_open``, ``on_allocate``, ``on_deallocate``,
    ``job_enqueued``);
``FLAG``
    a boolean attribute the plugin declares (``shape_only``, ``queue_order_global``);
``PROVIDER``
    the plugin object itself, the first in tier order that meets the Protocol (the queue fair
    share: deserved amounts, shares, overuse and hierarchy that actions and the queue status
    read).

Contracts
---------
* ``job_order`` / ``queue_order`` / ``task_order`` / ``victim_order`` return a sort key
  (smaller first); keys of all plugins are concatenated in tier order, so the first plugin
  that distinguishes two objects decides, as Volcano's "first non-zero comparator".
* ``predicate`` returns ``(reject_mask, reason)`` pairs over ``rows``; a node passes when no
  pair rejects it. The first rejecting pair names the node's reason.
* ``node_score`` returns float scores over ``rows``; every plugin applies its own weight and
  scores are summed.
* ``job_pipelined`` / ``job_enqueueable`` vote (:class:`~gangsched.framework.combine.Vote`).
* ``preemptable`` / ``reclaimable`` return the subset of ``candidates`` they allow as victims
  (sorted task indices), or ``None`` to abstain.
* ``on_allocate`` / ``on_deallocate`` are called for every allocate / pipeline / evict and for
  their undo, and must keep plugin state exactly reversible.
* ``gpu_choice`` may name the devices of a placement (first answer of the right length wins);
  ``hypernode_score`` orders hypernodes for topology-aware gangs (first answer).
* ``allocatable_reason`` explains, in words, why the plugin's own ``allocatable`` refused;
  ``exposed`` says why a reclaimer's claimed task could be reclaimed back (per tier);
  ``preemptive`` why a queue may not reclaim for a claim (first refusal); ``reason_notes``
  adds per-job notes to the decisions' reasons (merged, first note per job wins).

What changed: the change log
----------------------------
Every point receives the session, and ``ssn.changes`` (a
:class:`~gangsched.session.changes.ChangeLog`) is part of this contract: a plugin that keeps a
view per node, queue or job keeps the log's cursor (``ssn.changes.end``) of its last read and
asks, at its next call, what changed since — ``nodes_since(cursor)`` (the node rows to re-read),
``changed_since(cursor)`` (the cheap "nothing changed"), ``queue_changed_since`` /
``queues_since``, ``job_changed_since`` / ``jobs_since``. Every placement, reservation,
eviction and undo is logged before ``on_allocate`` / ``on_deallocate`` is told, so a view read
through the log is current at every call. A view may outlive its session: the next cycle of a
``ClusterState`` continues the log when the nodes are the same (the nodes whose record or
occupancy moved in between are entries), so a cursor kept with its ``lineage`` stays valid;
``ssn.changes.knows(lineage, cursor)`` says whether it is, and a view starts afresh when it is
not. The package's own incremental views (evaluations, nodeorder's columns, the GPU scorers'
views) read the log the same way, and a test checks that nothing else decides what to
recompute.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from gangsched._types import BOOL, F64, I64
from gangsched.framework.combine import Vote
from gangsched.session.arrays import TaskTemplate
from gangsched.session.changes import ChangeLog

if TYPE_CHECKING:
    from gangsched.session.core import Session

__all__ = [
    "EXTENSION_POINTS",
    "AllocatablePlugin",
    "AllocatableReasonPlugin",
    "ChangeLog",
    "ExposedPlugin",
    "ExtensionPoint",
    "FairSharePlugin",
    "GpuChoicePlugin",
    "HypernodeScorePlugin",
    "JobEnqueueablePlugin",
    "JobEnqueuedPlugin",
    "JobOrderPlugin",
    "JobPipelinedPlugin",
    "JobReadyPlugin",
    "JobStarvingPlugin",
    "JobValidPlugin",
    "Kind",
    "NodeScorePlugin",
    "OnAllocatePlugin",
    "OnDeallocatePlugin",
    "OverusedPlugin",
    "Plugin",
    "PredicatePlugin",
    "PreemptablePlugin",
    "PreemptivePlugin",
    "QueueOrderGlobalPlugin",
    "QueueOrderPlugin",
    "ReasonNotesPlugin",
    "ReclaimablePlugin",
    "Rejections",
    "Rows",
    "SessionOpenPlugin",
    "ShapeOnlyPlugin",
    "TaskOrderPlugin",
    "VictimOrderPlugin",
    "argument_names",
]

Rows = npt.NDArray[np.intp]
Rejections = Sequence[tuple[BOOL, str]]


class Plugin(Protocol):
    """What every plugin has: a name (the one the config uses).

    A plugin or action class may also declare ``known_arguments``: a tuple of the argument
    names it reads or accepts (``*`` in a name stands for any non-empty text); the registry
    then refuses any other argument (:mod:`gangsched.framework.registry`). Volcano spells most of
    them
    ``<prefix>.<key>``, which :func:`argument_names` builds.
    """

    name: str


def argument_names(prefix: str, *keys: str) -> tuple[str, ...]:
    """``<prefix>.<key>`` for every key, in order: ``argument_names("binpack", "cpu",
    "memory")`` is ``("binpack.cpu", "binpack.memory")``."""
    return tuple(f"{prefix}.{key}" for key in keys)


class SessionOpenPlugin(Protocol):
    def on_session_open(self, ssn: Session) -> None: ...


class JobOrderPlugin(Protocol):
    def job_order(self, ssn: Session, job: int) -> tuple[Any, ...]: ...


class QueueOrderPlugin(Protocol):
    def queue_order(self, ssn: Session, queue: int) -> tuple[Any, ...]: ...


class TaskOrderPlugin(Protocol):
    def task_order(self, ssn: Session, task: int) -> tuple[Any, ...]: ...


class VictimOrderPlugin(Protocol):
    def victim_order(self, ssn: Session, task: int) -> tuple[Any, ...]: ...


class PredicatePlugin(Protocol):
    def predicate(self, ssn: Session, tmpl: TaskTemplate, rows: Rows) -> Rejections: ...


class NodeScorePlugin(Protocol):
    def node_score(self, ssn: Session, tmpl: TaskTemplate, rows: Rows) -> F64: ...


class JobValidPlugin(Protocol):
    def job_valid(self, ssn: Session, job: int) -> str | None: ...


class JobReadyPlugin(Protocol):
    def job_ready(self, ssn: Session, job: int) -> bool: ...


class JobPipelinedPlugin(Protocol):
    def job_pipelined(self, ssn: Session, job: int) -> Vote: ...


class JobEnqueueablePlugin(Protocol):
    def job_enqueueable(self, ssn: Session, job: int) -> Vote: ...


class JobEnqueuedPlugin(Protocol):
    def job_enqueued(self, ssn: Session, job: int) -> None: ...


class JobStarvingPlugin(Protocol):
    def job_starving(self, ssn: Session, job: int) -> bool: ...


class OverusedPlugin(Protocol):
    def overused(self, ssn: Session, queue: int) -> bool: ...


class AllocatablePlugin(Protocol):
    def allocatable(self, ssn: Session, queue: int, tmpl: TaskTemplate) -> bool: ...


class AllocatableReasonPlugin(Protocol):
    def allocatable_reason(self, ssn: Session, queue: int, tmpl: TaskTemplate) -> str | None: ...


class PreemptablePlugin(Protocol):
    def preemptable(self, ssn: Session, preemptor: int, candidates: I64) -> I64 | None: ...


class ReclaimablePlugin(Protocol):
    def reclaimable(self, ssn: Session, preemptor: int, candidates: I64) -> I64 | None: ...


class ExposedPlugin(Protocol):
    def exposed(self, ssn: Session, tasks: list[int]) -> str | None: ...


class PreemptivePlugin(Protocol):
    def preemptive(self, ssn: Session, queue: int, tasks: list[int]) -> str | None: ...


class OnAllocatePlugin(Protocol):
    def on_allocate(self, ssn: Session, task: int) -> None: ...


class OnDeallocatePlugin(Protocol):
    def on_deallocate(self, ssn: Session, task: int) -> None: ...


class GpuChoicePlugin(Protocol):
    def gpu_choice(
        self, ssn: Session, task: int, node: int, *, future: bool
    ) -> tuple[int, ...] | None: ...


class HypernodeScorePlugin(Protocol):
    def hypernode_score(self, ssn: Session) -> Any: ...


class ReasonNotesPlugin(Protocol):
    def reason_notes(self, ssn: Session) -> dict[int, str]: ...


class ShapeOnlyPlugin(Protocol):
    """Its ``predicate`` / ``node_score`` answer for a node depends only on the task's shape
    (requests, selectors, tolerations), that node (its record and occupancy) and the nodes'
    taints (a score may normalise over those, as kube's taint toleration does) — not on the
    task's job or other nodes' occupancy. When every row plugin declares it, templates of
    equal shape share one evaluation, and a cluster state's next cycle keeps the evaluations
    of rows that did not change."""

    shape_only: bool


class QueueOrderGlobalPlugin(Protocol):
    """Its ``queue_order`` keys may move for every queue when any queue allocates (HDRF), so
    allocate re-scans the queues instead of keeping a heap."""

    queue_order_global: bool


@runtime_checkable
class FairSharePlugin(Protocol):
    """The queue fair share (proportion, capacity): what each queue deserves and holds.

    ``queue_deserved`` gives the ``(n_queues, n_resources)`` deserved amounts once, after
    ``on_session_open`` (the session stores them as ``Session.queue_deserved``);
    ``queue_subtree_sum`` sums per-queue amounts over each queue's subtree under a hierarchy
    (unchanged without one)."""

    def queue_deserved(self, ssn: Session) -> I64: ...

    def queue_share(self, ssn: Session, queue: int) -> float: ...

    def queue_overused(self, ssn: Session, queue: int) -> bool: ...

    def queue_real_capability(self, ssn: Session, queue: int) -> F64 | None: ...

    def queue_subtree_sum(self, ssn: Session, per_queue: I64) -> I64: ...


class Kind(enum.StrEnum):
    CALL = enum.auto()
    ROWS = enum.auto()
    EVENT = enum.auto()
    FLAG = enum.auto()
    PROVIDER = enum.auto()


@dataclass(frozen=True, slots=True)
class ExtensionPoint:
    """One extension point: the member a plugin defines, the Protocol it meets, the kind and
    how the answers of all serving plugins are combined (in words; the dispatcher implements
    it with the named function of :mod:`gangsched.framework.combine`)."""

    name: str
    protocol: type
    kind: Kind
    combiner: str
    #: The point whose config switch also switches this one off (its explanation or a
    #: companion of it); None: its own switch, if the config has one.
    follows: str | None = None


_P = ExtensionPoint
#: Every extension point of the session, in one table.
EXTENSION_POINTS: tuple[ExtensionPoint, ...] = (
    _P("on_session_open", SessionOpenPlugin, Kind.EVENT, "each, in tier order"),
    _P("job_order", JobOrderPlugin, Kind.CALL, "lexicographic"),
    _P("queue_order", QueueOrderPlugin, Kind.CALL, "lexicographic"),
    _P("task_order", TaskOrderPlugin, Kind.CALL, "lexicographic"),
    _P("victim_order", VictimOrderPlugin, Kind.CALL, "lexicographic"),
    _P("job_valid", JobValidPlugin, Kind.CALL, "first_answer"),
    _P("job_ready", JobReadyPlugin, Kind.CALL, "all_pass"),
    _P("job_pipelined", JobPipelinedPlugin, Kind.CALL, "vote"),
    _P("job_enqueueable", JobEnqueueablePlugin, Kind.CALL, "vote"),
    _P("job_enqueued", JobEnqueuedPlugin, Kind.EVENT, "each, in tier order"),
    _P("job_starving", JobStarvingPlugin, Kind.CALL, "first_tier_all"),
    _P("overused", OverusedPlugin, Kind.CALL, "any_true"),
    _P("allocatable", AllocatablePlugin, Kind.CALL, "all_pass"),
    _P(
        "allocatable_reason",
        AllocatableReasonPlugin,
        Kind.CALL,
        "the refusing plugin's",
        "allocatable",
    ),
    _P("preemptable", PreemptablePlugin, Kind.CALL, "intersect_first_decisive"),
    _P("reclaimable", ReclaimablePlugin, Kind.CALL, "intersect_first_decisive"),
    _P("exposed", ExposedPlugin, Kind.CALL, "first_answer, per reclaimable tier", "reclaimable"),
    _P("preemptive", PreemptivePlugin, Kind.CALL, "first_answer"),
    _P("predicate", PredicatePlugin, Kind.ROWS, "all_pass per row, first reason"),
    _P("node_score", NodeScorePlugin, Kind.ROWS, "sum in tier order"),
    _P("on_allocate", OnAllocatePlugin, Kind.EVENT, "each, in tier order"),
    _P("on_deallocate", OnDeallocatePlugin, Kind.EVENT, "each, in tier order"),
    _P("gpu_choice", GpuChoicePlugin, Kind.CALL, "first_answer of the right length that fits"),
    _P("hypernode_score", HypernodeScorePlugin, Kind.CALL, "first_answer"),
    _P("reason_notes", ReasonNotesPlugin, Kind.CALL, "merged, first note per job"),
    _P("shape_only", ShapeOnlyPlugin, Kind.FLAG, "all row plugins declare it"),
    _P("queue_order_global", QueueOrderGlobalPlugin, Kind.FLAG, "any_true"),
    _P("fair_share", FairSharePlugin, Kind.PROVIDER, "first_answer"),
)
