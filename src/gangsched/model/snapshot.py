"""The immutable cluster snapshot and its interchange format.

``Snapshot`` holds every record of one scheduling cycle's input and checks the rules that span
records: unique names, references that resolve, a queue tree without cycles, a topology tree
whose members are known and owned once per tier, and tasks already on nodes that fit them
(resources, pod count, GPU devices). A ``Snapshot`` that exists is consistent; the scheduler
never re-checks it.

``Snapshot.from_dict`` / ``to_dict`` implement the interchange format described in docs/model.md.
``to_dict``
is canonical (records in input order, keys sorted by :func:`json.dumps(sort_keys=True)` where
serialised, quantities in canonical units) so ``from_dict(to_dict(s)) == s``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields
from typing import TYPE_CHECKING, Any, TypeVar

from gangsched.errors import SnapshotError
from gangsched.limits import DEFAULT_LIMITS, Limits
from gangsched.model import DisruptionBudget, HyperNode, Job, Node, Queue, Task, check_totals
from gangsched.model.checks import ROOT_QUEUE as ROOT_QUEUE  # importable from here too
from gangsched.model.checks import (
    NodeBooks,
    check_budget_refs,
    check_hypernode_name,
    check_job_queue,
    check_queue_parent,
    check_task_count,
    check_task_refs,
    queue_cycle_error,
    queue_depth_error,
)
from gangsched.units import CPU, GPU, MEMORY, PODS

__all__ = ["Snapshot"]

R = TypeVar("R", Node, HyperNode, Queue, Job, Task, DisruptionBudget)

_KINDS: tuple[tuple[str, str, type[Any]], ...] = (
    ("nodes", "node", Node),
    ("hypernodes", "hypernode", HyperNode),
    ("queues", "queue", Queue),
    ("jobs", "job", Job),
    ("tasks", "task", Task),
    ("disruption_budgets", "disruption_budget", DisruptionBudget),
)


def _list_field(value: object, attr: str, want: type, wanted: str) -> tuple[Any, ...]:
    """The record list ``attr`` of a snapshot (records, or their plain data): ``value`` as a
    tuple whose every item is a ``want`` (``wanted`` names it in the message)."""
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
        raise SnapshotError(
            f"expected a list, got {type(value).__name__}", kind="snapshot", field=attr
        )
    items = tuple(value)
    for i, item in enumerate(items):
        if not isinstance(item, want):
            raise SnapshotError(
                f"expected {wanted}, got {type(item).__name__}",
                kind="snapshot",
                field=f"{attr}[{i}]",
            )
    return items


def _index(records: Sequence[R], kind: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for i, rec in enumerate(records):
        if rec.name in out:
            raise SnapshotError(
                f"duplicate name (entries #{out[rec.name]} and #{i})",
                kind=kind,
                name=rec.name,
                field="name",
            )
        out[rec.name] = i
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class Snapshot:
    """Everything one scheduling cycle looks at. Immutable; validated on construction."""

    nodes: tuple[Node, ...] = ()
    hypernodes: tuple[HyperNode, ...] = ()
    queues: tuple[Queue, ...] = ()
    jobs: tuple[Job, ...] = ()
    tasks: tuple[Task, ...] = ()
    #: PodDisruptionBudgets over the tasks (see :mod:`gangsched.session.rules.disruption`).
    disruption_budgets: tuple[DisruptionBudget, ...] = ()
    node_index: Mapping[str, int] = field(init=False, repr=False, compare=False)
    hypernode_index: Mapping[str, int] = field(init=False, repr=False, compare=False)
    queue_index: Mapping[str, int] = field(init=False, repr=False, compare=False)
    job_index: Mapping[str, int] = field(init=False, repr=False, compare=False)
    task_index: Mapping[str, int] = field(init=False, repr=False, compare=False)
    disruption_budget_index: Mapping[str, int] = field(init=False, repr=False, compare=False)
    #: Input bounds this snapshot is checked against (not part of its value).
    limits: Limits = field(default=DEFAULT_LIMITS, repr=False, compare=False)
    #: The tiered topology, built (and so checked: tier count, nesting, overlaps) on
    #: construction so that a snapshot that exists is one every cycle can use; ``None``
    #: without hypernodes. Read it through :func:`gangsched.model.topology.build_topology`.
    _topology: object = field(init=False, default=None, repr=False, compare=False)
    #: Set only on snapshots of a :class:`~gangsched.state.ClusterState`: what
    #: :func:`gangsched.session.arrays.build_cluster_arrays` may reuse from the state's previous
    #: snapshot (its arrays, and the nodes whose tasks changed since), then the arrays built.
    _arrays: object = field(init=False, default=None, repr=False, compare=False)

    if TYPE_CHECKING:  # what the constructor accepts; the fields hold the checked values

        def __init__(
            self,
            *,
            nodes: Iterable[Node] = ...,
            hypernodes: Iterable[HyperNode] = ...,
            queues: Iterable[Queue] = ...,
            jobs: Iterable[Job] = ...,
            tasks: Iterable[Task] = ...,
            disruption_budgets: Iterable[DisruptionBudget] = ...,
            limits: Limits = ...,
        ) -> None: ...

    def __post_init__(self) -> None:
        if not isinstance(self.limits, Limits):
            raise SnapshotError(
                f"expected Limits, got {type(self.limits).__name__}",
                kind="snapshot",
                field="limits",
            )
        for attr, kind, cls in _KINDS:
            records = _list_field(getattr(self, attr), attr, cls, cls.__name__)
            object.__setattr__(self, attr, records)
            if attr == "tasks":
                self._check_limits()
            object.__setattr__(self, f"{kind}_index", _index(records, kind))
        check_totals(self.nodes, self.queues, self.jobs, self.tasks)
        self._check_queues()
        self._check_hypernodes()
        self._check_jobs_and_tasks()
        self._check_budgets()
        self._check_node_occupancy()
        if self.hypernodes:
            from gangsched.model.topology import (
                build_topology,  # same layer; it reads the records above
            )

            build_topology(self)  # checks the tree and keeps it on the snapshot

    @classmethod
    def _trusted(
        cls,
        *,
        indexes: Mapping[str, Mapping[str, int]],
        limits: Limits = DEFAULT_LIMITS,
        topology: object = None,
        **records: tuple[Any, ...],
    ) -> Snapshot:
        """A snapshot of record tuples already known to form a valid snapshot, without
        checking them again: :class:`~gangsched.state.ClusterState` keeps that invariant
        operation by operation. ``indexes`` maps a kind (``"node"``, ...) to its name index
        (kinds left out get an empty one); ``topology`` is a topology built for these nodes
        and hypernodes, or ``None``. Internal: the public constructor validates."""
        snap = object.__new__(cls)
        for f in fields(cls):
            if f.name in records:
                value: object = records[f.name]
            elif f.default is not MISSING:
                value = f.default
            elif f.default_factory is not MISSING:
                value = f.default_factory()
            else:
                value = None
            object.__setattr__(snap, f.name, value)
        for _attr, kind, _cls in _KINDS:
            object.__setattr__(snap, f"{kind}_index", indexes.get(kind, {}))
        object.__setattr__(snap, "limits", limits)
        object.__setattr__(snap, "_topology", topology)
        return snap

    # ---------------------------------------------------------------- lookups

    def node(self, name: str) -> Node:
        return self.nodes[self._lookup(self.node_index, name, "node")]

    def queue(self, name: str) -> Queue:
        return self.queues[self._lookup(self.queue_index, name, "queue")]

    def job(self, name: str) -> Job:
        return self.jobs[self._lookup(self.job_index, name, "job")]

    def task(self, name: str) -> Task:
        return self.tasks[self._lookup(self.task_index, name, "task")]

    @staticmethod
    def _lookup(index: Mapping[str, int], name: str, kind: str) -> int:
        try:
            return index[name]
        except KeyError:
            raise SnapshotError("not in the snapshot", kind=kind, name=name) from None

    def tasks_of(self, job: str) -> tuple[Task, ...]:
        return tuple(t for t in self.tasks if t.job == job)

    def resource_names(self) -> set[str]:
        """Every resource the snapshot names (nodes, tasks, queue quotas, job minimums), and
        the four every cluster has: cpu, memory, GPU and pods."""
        names: set[str] = {CPU, MEMORY, GPU, PODS}
        for node in self.nodes:
            names.update(node.allocatable)
        for task in self.tasks:
            names.update(task.request)
        for queue in self.queues:
            for res in (queue.capability, queue.guarantee, queue.deserved):
                if res is not None:
                    names.update(res)
        for job in self.jobs:
            if job.min_resources is not None:
                names.update(job.min_resources)
        return names

    # ---------------------------------------------------------------- validation

    def _check_queues(self) -> None:
        """Parents exist, the queue named ``root`` (:data:`ROOT_QUEUE`) has none, the parent
        chains have no cycle and are at most ``limits.max_queue_depth`` long (a root queue has
        depth 1).

        Iterative and memoised: every queue's depth is computed once, from the first known
        depth above it, so a chain of n queues costs O(n).
        """
        for q in self.queues:
            check_queue_parent(q, self.queue_index)
        limit = self.limits.max_queue_depth
        depth: dict[str, int] = {}
        by_name = {q.name: q for q in self.queues}
        for q in self.queues:
            path: list[str] = []
            on_path: set[str] = set()
            cur: str | None = q.name
            while cur is not None and cur not in depth:
                if cur in on_path:
                    raise queue_cycle_error(q.name, cur)
                path.append(cur)
                on_path.add(cur)
                cur = by_name[cur].parent
            d = 0 if cur is None else depth[cur]
            for name in reversed(path):
                d += 1
                depth[name] = d
        for q in self.queues:
            if depth[q.name] > limit:
                raise queue_depth_error(q.name, depth[q.name], limit)

    def _check_limits(self) -> None:
        check_task_count(len(self.tasks), self.limits)

    def _check_hypernodes(self) -> None:
        for hn in self.hypernodes:
            check_hypernode_name(hn.name, self.node_index)
        owner: dict[tuple[int, str], str] = {}
        for hn in self.hypernodes:
            mixed = hn.tier != 1 and any(m in self.hypernode_index for m in hn.members)
            for member in hn.members:
                if member in self.node_index:
                    if mixed:
                        raise SnapshotError(
                            "mixes nodes and hypernodes as members",
                            kind="hypernode",
                            name=hn.name,
                            field="members",
                        )
                elif member in self.hypernode_index:
                    child = self.hypernodes[self.hypernode_index[member]]
                    if child.tier >= hn.tier:
                        raise SnapshotError(
                            f"member hypernode {member!r} has tier {child.tier}, not below "
                            f"{hn.tier}",
                            kind="hypernode",
                            name=hn.name,
                            field="members",
                        )
                else:
                    raise SnapshotError(
                        f"unknown member {member!r}",
                        kind="hypernode",
                        name=hn.name,
                        field="members",
                    )
                key = (hn.tier, member)
                if key in owner and owner[key] != hn.name:
                    raise SnapshotError(
                        f"member {member!r} already belongs to tier-{hn.tier} hypernode "
                        f"{owner[key]!r}",
                        kind="hypernode",
                        name=hn.name,
                        field="members",
                    )
                owner[key] = hn.name
        # Tiers strictly decrease from parent to member, so the member graph has no cycle;
        # a hypernode listing itself is caught by the tier check above.

    def _check_jobs_and_tasks(self) -> None:
        for job in self.jobs:
            check_job_queue(job, self.queue_index)
        for task in self.tasks:
            check_task_refs(task, self.job_index, self.node_index)

    def _check_budgets(self) -> None:
        """A disruption budget names known jobs and tasks."""
        for budget in self.disruption_budgets:
            check_budget_refs(budget, self.job_index, self.task_index)

    def _check_node_occupancy(self) -> None:
        """Tasks on nodes fit them, now and once releases finish (:class:`NodeBooks`)."""
        books = NodeBooks()
        nodes, index = self.nodes, self.node_index
        for task in self.tasks:
            if task.node is not None:
                books.add(task, nodes[index[task.node]])
        books.check(lambda name: nodes[index[name]])

    # ---------------------------------------------------------------- interchange

    @classmethod
    def from_dict(cls, d: object, *, limits: Limits = DEFAULT_LIMITS) -> Snapshot:
        """Build a snapshot from the interchange format (see docs/model.md), checked against
        ``limits``.

        Raises
        ------
        SnapshotError
            On any malformed or inconsistent input; the message names the object and field.
        """
        if not isinstance(d, Mapping):
            raise SnapshotError(f"expected a mapping, got {type(d).__name__}", kind="snapshot")
        unknown = sorted(str(k) for k in d if k not in {a for a, _, _ in _KINDS})
        if unknown:
            raise SnapshotError(
                "unknown key (allowed: disruption_budgets, hypernodes, jobs, nodes, queues, tasks)",
                kind="snapshot",
                field=unknown[0],
            )
        parts: dict[str, tuple[Any, ...]] = {}
        for attr, _kind, rec_cls in _KINDS:
            raw = d.get(attr)
            items = _list_field(() if raw is None else raw, attr, Mapping, "a mapping")
            if attr == "tasks":
                check_task_count(len(items), limits)
            parts[attr] = tuple(
                rec_cls.from_dict(item, where=f"#{i}") for i, item in enumerate(items)
            )
        return cls(**parts, limits=limits)

    def to_dict(self) -> dict[str, list[dict[str, Any]]]:
        """Every record list (plain JSON values); ``disruption_budgets`` only when there are
        any."""
        return {
            attr: [rec.to_dict() for rec in getattr(self, attr)]
            for attr, _, _ in _KINDS
            if attr != "disruption_budgets" or self.disruption_budgets
        }

    def replace(self, **changes: Sequence[Any]) -> Snapshot:
        """A new snapshot with some record lists replaced (validated again)."""
        unknown = sorted(set(changes) - {a for a, _, _ in _KINDS})
        if unknown:
            raise SnapshotError("unknown record list", kind="snapshot", field=unknown[0])
        parts: dict[str, Any] = {a: getattr(self, a) for a, _, _ in _KINDS}
        parts.update(changes)
        return Snapshot(**parts, limits=self.limits)
