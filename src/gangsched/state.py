"""A long-lived, mutable cluster view fed by informer events, and cheap snapshots of it.

Theory of operation
-------------------
An embedder runs a cycle every second for days; rebuilding a :class:`~gangsched.snapshot.Snapshot`
from records each time costs the whole cluster. :class:`ClusterState` keeps the records in
insertion-ordered dicts, one per kind, plus the reverse references the checks need (tasks of a
job, tasks naming a node, jobs of a queue, children of a queue, hypernodes listing a member).

Rule 1: the state is always a valid snapshot. Every operation checks what it touches against
the rules :class:`~gangsched.snapshot.Snapshot` checks (the same :class:`SnapshotError`, naming
the object and the field) *before* it changes anything, so a refused operation leaves the state
as it was. Costs follow what the operation touches: a task update re-checks the node it sits
on (its few tasks), a queue update walks its parent chain and, on a re-parent, its subtree;
per-resource totals (:func:`~gangsched.model.check_totals`) are kept as running sums. A
hypernode operation re-checks the topology (nodes and hypernodes, no tasks): topology changes
are rare and global.

Rule 2: :meth:`ClusterState.snapshot` shares what did not change. Per kind, the record tuple
and its name index are cached and rebuilt (C-speed ``tuple(dict.values())``) only when a record
of that kind changed since the last snapshot; the topology is kept while neither nodes nor
hypernodes were added or removed. The snapshot is built through the trusted path of
:class:`Snapshot` (no re-validation: rule 1 already holds) and equals
``Snapshot.from_dict(state.to_dict())``.

Rule 3: changes are counted. Every operation bumps :attr:`ClusterState.generation`; each node
keeps the generation at which it, or a task on it, last changed
(:meth:`ClusterState.node_generation`), and :meth:`ClusterState.changed_nodes` names the nodes
changed since the last cycle, for cycle-to-cycle reuse of per-node work.

Records are ordered as they were added; an update keeps the record's place, a remove and an
add puts it last. The state is pure: no clock, no I/O; the same operations give the same
snapshots.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from ._frozen import FrozenDict
from .arrays import ArraysBase, ClusterArrays
from .decisions import Decisions
from .errors import PlacementError, SnapshotError
from .feasibility import device_take
from .limits import DEFAULT_LIMITS, MAX_TOTAL, Limits
from .model import (
    NODE_PHASES,
    DisruptionBudget,
    HyperNode,
    Job,
    JobPhase,
    Node,
    Queue,
    Task,
    TaskPhase,
)
from .snapshot import ROOT_QUEUE, Snapshot
from .units import PODS, canonical_unit

__all__ = ["ClusterState"]

V = TypeVar("V")

_ATTRS = ("nodes", "hypernodes", "queues", "jobs", "tasks", "disruption_budgets")
_KIND = {a: a[:-1] for a in _ATTRS}
_JOB_PHASES = {p.value: p for p in JobPhase}


def _check_type(record: object, cls: type[Any], kind: str) -> None:
    if not isinstance(record, cls):
        raise SnapshotError(
            f"is a {type(record).__name__}, expected {cls.__name__}", kind=kind, field="record"
        )


class _Totals:
    """Running per-resource sums of one amount field over the records of one kind, checked
    against :data:`~gangsched.limits.MAX_TOTAL` as :func:`~gangsched.model.check_totals` does."""

    __slots__ = ("field", "gpu", "kind", "names", "sums")

    def __init__(self, kind: str, field: str, names: dict[str, int]) -> None:
        self.kind, self.field = kind, field
        self.sums: dict[str, int] = {}
        self.gpu = 0
        self.names = names  # resource name -> records naming it (shared by every total)

    def move(
        self,
        name: str,
        old: Mapping[str, int] | None,
        new: Mapping[str, int] | None,
        old_gpu: int = 0,
        new_gpu: int = 0,
        *,
        commit: bool,
    ) -> None:
        """Check (and with ``commit`` apply) replacing ``old`` amounts by ``new`` ones."""
        for res, value in (new or {}).items():
            total = self.sums.get(res, 0) + value - (old or {}).get(res, 0)
            if total > MAX_TOTAL:
                raise SnapshotError(
                    f"the {self.kind}s' {self.field} {res} adds up past 2**60 = {MAX_TOTAL} "
                    f"{canonical_unit(res)} at this {self.kind}",
                    kind=self.kind,
                    name=name,
                    field=f"{self.field}.{res}",
                )
        if self.gpu + new_gpu - old_gpu > MAX_TOTAL:
            where = "gpus" if self.kind == "node" else "gpu_request"
            raise SnapshotError(
                f"the {self.kind}s' GPUs add up past 2**60 = {MAX_TOTAL} milli-GPU at this "
                f"{self.kind}",
                kind=self.kind,
                name=name,
                field=where,
            )
        if not commit:
            return
        _count_names(self.names, old, new)
        for res, value in (old or {}).items():
            self.sums[res] -= value
        for res, value in (new or {}).items():
            self.sums[res] = self.sums.get(res, 0) + value
        self.gpu += new_gpu - old_gpu


def _count_names(
    names: dict[str, int], old: Mapping[str, int] | None, new: Mapping[str, int] | None
) -> None:
    for res in old or ():
        left = names[res] - 1
        if left:
            names[res] = left
        else:
            del names[res]
    for res in new or ():
        names[res] = names.get(res, 0) + 1


def _node_gpu(node: Node | None) -> int:
    return node.gpus.count * node.gpus.milli if node is not None and node.gpus else 0


def _task_gpu(task: Task | None) -> int:
    return task.gpu_request.total_milli if task is not None and task.gpu_request else 0


class ClusterState:
    """A mutable cluster that informer events keep current; :meth:`snapshot` gives the
    immutable :class:`Snapshot` a cycle reads, sharing what did not change.

    Build it from a snapshot (``ClusterState(snapshot)``) or empty (``ClusterState()``), then
    call the typed operations: ``add_*`` / ``update_*`` / ``remove_*`` for nodes, hypernodes,
    queues, jobs and tasks, ``set_task_phase`` for the phase changes a kubelet reports, and
    :meth:`apply` for a cycle's decisions. ``update_*`` replaces the record of that name
    (it must exist), ``add_*`` refuses a name that exists. Each operation raises
    :class:`~gangsched.errors.SnapshotError` where :class:`Snapshot` would, and leaves the
    state unchanged when it does.
    """

    def __init__(self, snapshot: Snapshot | None = None, *, limits: Limits | None = None) -> None:
        if snapshot is not None and not isinstance(snapshot, Snapshot):
            raise SnapshotError(
                f"expected a Snapshot, got {type(snapshot).__name__}",
                kind="state",
                field="snapshot",
            )
        if limits is not None and not isinstance(limits, Limits):
            raise SnapshotError(
                f"expected Limits, got {type(limits).__name__}", kind="state", field="limits"
            )
        self.limits: Limits = (
            limits
            if limits is not None
            else (snapshot.limits if snapshot is not None else DEFAULT_LIMITS)
        )
        self._nodes: dict[str, Node] = {}
        self._hypernodes: dict[str, HyperNode] = {}
        self._queues: dict[str, Queue] = {}
        self._jobs: dict[str, Job] = {}
        self._tasks: dict[str, Task] = {}
        self._disruption_budgets: dict[str, DisruptionBudget] = {}
        # (kind, name) of a job or task -> the budgets naming it.
        self._budget_refs: dict[tuple[str, str], dict[str, None]] = {}
        # Reverse references (ordered sets as dicts).
        self._job_tasks: dict[str, dict[str, None]] = {}
        self._node_tasks: dict[str, dict[str, None]] = {}
        self._queue_jobs: dict[str, dict[str, None]] = {}
        self._children: dict[str, dict[str, None]] = {}
        self._owners: dict[str, dict[str, None]] = {}  # member -> hypernodes listing it
        #: Resource names the records use, with how many records name each (the columns of
        #: the snapshot's arrays).
        self._resource_names: dict[str, int] = {}
        names = self._resource_names
        self._totals = {
            "node": _Totals("node", "allocatable", names),
            "task": _Totals("task", "request", names),
            "guarantee": _Totals("queue", "guarantee", names),
            "deserved": _Totals("queue", "deserved", names),
            "job": _Totals("job", "min_resources", names),
        }
        self._weights = 0
        # Change tracking.
        self.generation = 0
        self._node_gen: dict[str, int] = {}
        self._cycle_gen = 0
        self._removed_nodes: set[str] = set()
        self._cache: dict[str, tuple[tuple[Any, ...], Mapping[str, int]]] = {}
        self._topology: object = None
        self._last: Snapshot | None = None
        self._last_gen = 0  # generation when ``_last`` was taken
        if snapshot is not None:
            if limits is not None and limits != snapshot.limits:
                # Other bounds: check the records against them once.
                snapshot = Snapshot(
                    nodes=snapshot.nodes,
                    hypernodes=snapshot.hypernodes,
                    queues=snapshot.queues,
                    jobs=snapshot.jobs,
                    tasks=snapshot.tasks,
                    disruption_budgets=snapshot.disruption_budgets,
                    limits=limits,
                )
            self._load(snapshot)

    # ------------------------------------------------------------------ loading

    def _load(self, snap: Snapshot) -> None:
        """Take a validated snapshot's records as they are (no re-check)."""
        for node in snap.nodes:
            self._nodes[node.name] = node
            self._node_tasks[node.name] = {}
            self._node_gen[node.name] = 0
            self._totals["node"].move(node.name, None, node.allocatable, 0, _node_gpu(node),
                                      commit=True)  # fmt: skip
        for hn in snap.hypernodes:
            self._hypernodes[hn.name] = hn
            for m in hn.members:
                self._owners.setdefault(m, {})[hn.name] = None
        for q in snap.queues:
            self._queues[q.name] = q
            self._queue_jobs[q.name] = {}
            self._children.setdefault(q.name, {})
            if q.parent is not None:
                self._children.setdefault(q.parent, {})[q.name] = None
            self._queue_totals(q.name, None, q, commit=True)
        for job in snap.jobs:
            self._jobs[job.name] = job
            self._job_tasks[job.name] = {}
            self._queue_jobs[job.queue][job.name] = None
            self._totals["job"].move(job.name, None, job.min_resources, commit=True)
        for task in snap.tasks:
            self._tasks[task.name] = task
            self._job_tasks[task.job][task.name] = None
            if task.node is not None:
                self._node_tasks[task.node][task.name] = None
            self._totals["task"].move(task.name, None, task.request, 0, _task_gpu(task),
                                      commit=True)  # fmt: skip
        for budget in snap.disruption_budgets:
            self._disruption_budgets[budget.name] = budget
            self._list_budget(budget)
        self._topology = snap._topology
        # Another state's snapshot may carry that state's reuse plan: start afresh then.
        self._last = None if isinstance(snap._arrays, ArraysBase) else snap
        for attr in _ATTRS:
            records = getattr(snap, attr)
            index = getattr(snap, f"{_KIND[attr]}_index")
            self._cache[attr] = (records, index)  # shared: never mutated

    # ------------------------------------------------------------------ lookups

    @property
    def nodes(self) -> Mapping[str, Node]:
        """Read-only view of the nodes by name, in order."""
        return _View(self._nodes)

    @property
    def hypernodes(self) -> Mapping[str, HyperNode]:
        return _View(self._hypernodes)

    @property
    def queues(self) -> Mapping[str, Queue]:
        return _View(self._queues)

    @property
    def jobs(self) -> Mapping[str, Job]:
        return _View(self._jobs)

    @property
    def tasks(self) -> Mapping[str, Task]:
        return _View(self._tasks)

    @property
    def disruption_budgets(self) -> Mapping[str, DisruptionBudget]:
        return _View(self._disruption_budgets)

    def tasks_of(self, job: str) -> tuple[Task, ...]:
        """The tasks of ``job``, in order of addition."""
        names = self._job_tasks.get(job)
        if names is None:
            raise SnapshotError("not in the state", kind="job", name=job)
        return tuple(self._tasks[t] for t in names)

    def tasks_on(self, node: str) -> tuple[Task, ...]:
        """The tasks that name ``node`` (any phase)."""
        names = self._node_tasks.get(node)
        if names is None:
            raise SnapshotError("not in the state", kind="node", name=node)
        return tuple(self._tasks[t] for t in names)

    # ------------------------------------------------------------------ change tracking

    def _bump(self, kind: str, node: str | None = None) -> None:
        self.generation += 1
        self._cache.pop(kind, None)
        if node is not None and node in self._node_gen:
            self._node_gen[node] = self.generation

    def node_generation(self, name: str) -> int:
        """The generation at which node ``name``, or a task on it, last changed (0: not since
        the state was built)."""
        try:
            return self._node_gen[name]
        except KeyError:
            raise SnapshotError("not in the state", kind="node", name=name) from None

    def changed_nodes(self, since: int | None = None) -> tuple[str, ...]:
        """Nodes changed (or added) after generation ``since`` (default: the last cycle, see
        :meth:`mark_cycle`), in node order. Removed nodes are in :meth:`removed_nodes`."""
        gen = self._cycle_gen if since is None else since
        return tuple(name for name, g in self._node_gen.items() if g > gen)

    def removed_nodes(self) -> tuple[str, ...]:
        """Nodes removed since the last cycle (sorted; a name added again is listed too)."""
        return tuple(sorted(self._removed_nodes))

    def mark_cycle(self) -> int:
        """Start counting changes for the next cycle; returns the current generation.
        :meth:`schedule` calls it."""
        self._cycle_gen = self.generation
        self._removed_nodes.clear()
        return self.generation

    # ------------------------------------------------------------------ nodes

    def add_node(self, node: Node) -> None:
        """A new node. Its name must not be a node's or a hypernode's."""
        _check_type(node, Node, "node")
        if node.name in self._nodes:
            raise SnapshotError("already in the state", kind="node", name=node.name, field="name")
        if node.name in self._hypernodes:
            raise SnapshotError(
                "a node has the same name, so members would be ambiguous",
                kind="hypernode",
                name=node.name,
                field="name",
            )
        self._totals["node"].move(node.name, None, node.allocatable, 0, _node_gpu(node),
                                  commit=True)  # fmt: skip
        self._nodes[node.name] = node
        self._node_tasks[node.name] = {}
        self._node_gen[node.name] = 0
        self._bump("nodes", node.name)
        self._topology = None

    def update_node(self, node: Node) -> None:
        """Replace the node of that name (allocatable, devices, labels, taints, cordon): its
        tasks must still fit."""
        _check_type(node, Node, "node")
        old = self._node(node.name)
        self._totals["node"].move(
            node.name, old.allocatable, node.allocatable, _node_gpu(old), _node_gpu(node),
            commit=False,
        )  # fmt: skip
        self._check_occupancy(node, [self._tasks[t] for t in self._node_tasks[node.name]])
        self._totals["node"].move(
            node.name, old.allocatable, node.allocatable, _node_gpu(old), _node_gpu(node),
            commit=True,
        )  # fmt: skip
        self._nodes[node.name] = node
        self._bump("nodes", node.name)

    def cordon(self, name: str, unschedulable: bool = True) -> None:
        """Mark node ``name`` unschedulable (or schedulable again)."""
        old = self._node(name)
        if old.unschedulable != unschedulable:
            self.update_node(dataclasses.replace(old, unschedulable=unschedulable))

    def remove_node(self, name: str) -> None:
        """Remove a node no task names and no hypernode lists."""
        self._node(name)
        owners = self._owners.get(name)
        if owners:
            raise SnapshotError(
                f"unknown member {name!r}",
                kind="hypernode",
                name=next(iter(owners)),
                field="members",
            )
        held = self._node_tasks[name]
        if held:
            task = next(iter(held))
            raise SnapshotError(f"unknown node {name!r}", kind="task", name=task, field="node")
        old = self._nodes.pop(name)
        self._totals["node"].move(name, old.allocatable, None, _node_gpu(old), 0, commit=True)
        del self._node_tasks[name]
        del self._node_gen[name]
        self._removed_nodes.add(name)
        self._bump("nodes")
        self._topology = None

    def _node(self, name: str) -> Node:
        try:
            return self._nodes[name]
        except KeyError:
            raise SnapshotError("not in the state", kind="node", name=name) from None

    # ------------------------------------------------------------------ hypernodes

    def add_hypernode(self, hypernode: HyperNode) -> None:
        _check_type(hypernode, HyperNode, "hypernode")
        if hypernode.name in self._hypernodes:
            raise SnapshotError(
                "already in the state", kind="hypernode", name=hypernode.name, field="name"
            )
        self._set_hypernode(hypernode)

    def update_hypernode(self, hypernode: HyperNode) -> None:
        _check_type(hypernode, HyperNode, "hypernode")
        self._hypernode(hypernode.name)
        self._set_hypernode(hypernode)

    def remove_hypernode(self, name: str) -> None:
        """Remove a hypernode no other hypernode lists."""
        old = self._hypernode(name)
        owners = self._owners.get(name)
        if owners:
            raise SnapshotError(
                f"unknown member {name!r}",
                kind="hypernode",
                name=next(iter(owners)),
                field="members",
            )
        hns = dict(self._hypernodes)
        del hns[name]
        topology = self._check_topology(hns)
        del self._hypernodes[name]
        self._unlist(old)
        self._topology = topology
        self._bump("hypernodes")

    def _set_hypernode(self, hn: HyperNode) -> None:
        hns = dict(self._hypernodes)
        hns[hn.name] = hn
        topology = self._check_topology(hns)
        old = self._hypernodes.get(hn.name)
        if old is not None:
            self._unlist(old)
        self._hypernodes[hn.name] = hn
        for m in hn.members:
            self._owners.setdefault(m, {})[hn.name] = None
        self._topology = topology
        self._bump("hypernodes")

    def _unlist(self, hn: HyperNode) -> None:
        for m in hn.members:
            owners = self._owners[m]
            owners.pop(hn.name, None)
            if not owners:
                del self._owners[m]

    def _check_topology(self, hns: Mapping[str, HyperNode]) -> object:
        """Check the hypernode rules and build the topology of ``hns`` over the current nodes
        (Snapshot's own checks, on the nodes and hypernodes only)."""
        nodes, index = self._records("nodes")
        records = tuple(hns.values())
        probe = Snapshot._trusted(
            nodes=nodes,
            hypernodes=records,
            indexes={"node": index, "hypernode": {n: i for i, n in enumerate(hns)}},
            limits=self.limits,
        )
        probe._check_hypernodes()
        if not records:
            return None
        from .topology import build_topology

        return build_topology(probe)

    def _hypernode(self, name: str) -> HyperNode:
        try:
            return self._hypernodes[name]
        except KeyError:
            raise SnapshotError("not in the state", kind="hypernode", name=name) from None

    # ------------------------------------------------------------------ queues

    def add_queue(self, queue: Queue) -> None:
        """A new queue; its parent must exist already."""
        _check_type(queue, Queue, "queue")
        if queue.name in self._queues:
            raise SnapshotError("already in the state", kind="queue", name=queue.name, field="name")
        self._check_queue(queue, None)
        self._queue_totals(queue.name, None, queue, commit=True)
        self._queues[queue.name] = queue
        self._queue_jobs[queue.name] = {}
        self._children.setdefault(queue.name, {})
        if queue.parent is not None:
            self._children[queue.parent][queue.name] = None
        self._bump("queues")

    def update_queue(self, queue: Queue) -> None:
        """Replace the queue of that name (weight, capability, state, parent, ...)."""
        _check_type(queue, Queue, "queue")
        old = self._queue(queue.name)
        self._check_queue(queue, old)
        self._queue_totals(queue.name, old, queue, commit=True)
        if old.parent != queue.parent:
            if old.parent is not None:
                self._children[old.parent].pop(queue.name, None)
            if queue.parent is not None:
                self._children[queue.parent][queue.name] = None
        self._queues[queue.name] = queue
        self._bump("queues")

    def remove_queue(self, name: str) -> None:
        """Remove a queue no job and no child queue names."""
        old = self._queue(name)
        children = self._children.get(name)
        if children:
            raise SnapshotError(
                f"unknown parent queue {name!r}",
                kind="queue",
                name=next(iter(children)),
                field="parent",
            )
        jobs = self._queue_jobs[name]
        if jobs:
            raise SnapshotError(
                f"unknown queue {name!r}", kind="job", name=next(iter(jobs)), field="queue"
            )
        self._queue_totals(name, old, None, commit=True)
        del self._queues[name]
        del self._queue_jobs[name]
        self._children.pop(name, None)
        if old.parent is not None:
            self._children[old.parent].pop(name, None)
        self._bump("queues")

    def _queue(self, name: str) -> Queue:
        try:
            return self._queues[name]
        except KeyError:
            raise SnapshotError("not in the state", kind="queue", name=name) from None

    def _queue_totals(
        self, name: str, old: Queue | None, new: Queue | None, *, commit: bool
    ) -> None:
        weights = self._weights - (old.weight if old else 0) + (new.weight if new else 0)
        if weights > MAX_TOTAL:
            raise SnapshotError(
                f"the queues' weights add up past 2**60 = {MAX_TOTAL} at this queue",
                kind="queue",
                name=name,
                field="weight",
            )
        for attr in ("guarantee", "deserved"):
            self._totals[attr].move(
                name,
                getattr(old, attr) if old else None,
                getattr(new, attr) if new else None,
                commit=False,
            )
        if commit:
            _count_names(
                self._resource_names,
                old.capability if old else None,
                new.capability if new else None,
            )
            for attr in ("guarantee", "deserved"):
                self._totals[attr].move(
                    name,
                    getattr(old, attr) if old else None,
                    getattr(new, attr) if new else None,
                    commit=True,
                )
            self._weights = weights

    def _check_queue(self, q: Queue, old: Queue | None) -> None:
        """The parent exists, the root has none, no cycle, depth within the limit."""
        if q.parent is not None and q.parent not in self._queues:
            raise SnapshotError(
                f"unknown parent queue {q.parent!r}", kind="queue", name=q.name, field="parent"
            )
        if q.parent is not None and q.name == ROOT_QUEUE:
            raise SnapshotError(
                f"the root of the queue hierarchy cannot have a parent (got {q.parent!r})",
                kind="queue",
                name=q.name,
                field="parent",
            )
        if old is not None and old.parent == q.parent:
            return
        # Walk up from the new parent: O(depth).
        above = 0
        cur = q.parent
        while cur is not None:
            if cur == q.name:
                raise SnapshotError(
                    f"queue parent cycle through {cur!r}", kind="queue", name=q.name, field="parent"
                )
            above += 1
            cur = self._queues[cur].parent
        # The subtree under q (its own children, unchanged): O(subtree).
        limit = self.limits.max_queue_depth
        frontier = [(q.name, above + 1)]
        while frontier:
            name, depth = frontier.pop()
            if depth > limit:
                raise SnapshotError(
                    f"queue nesting depth {depth} is beyond the limit of {limit} "
                    "(Limits.max_queue_depth)",
                    kind="queue",
                    name=name,
                    field="parent",
                )
            if old is not None:
                frontier.extend((c, depth + 1) for c in self._children.get(name, ()))

    # ------------------------------------------------------------------ jobs

    def add_job(self, job: Job, tasks: Iterable[Task] = ()) -> None:
        """A new job, and optionally its tasks (all or nothing)."""
        _check_type(job, Job, "job")
        if job.name in self._jobs:
            raise SnapshotError("already in the state", kind="job", name=job.name, field="name")
        self._check_job(job)
        batch = list(tasks)
        self._totals["job"].move(job.name, None, job.min_resources, commit=True)
        self._jobs[job.name] = job
        self._job_tasks[job.name] = {}
        self._queue_jobs[job.queue][job.name] = None
        self._bump("jobs")
        if batch:
            try:
                self.add_tasks(batch)
            except BaseException:
                self.remove_job(job.name)
                raise

    def update_job(self, job: Job) -> None:
        """Replace the job of that name (phase, priority, min_available, queue, ...)."""
        _check_type(job, Job, "job")
        old = self._job(job.name)
        self._check_job(job)
        self._totals["job"].move(job.name, old.min_resources, job.min_resources, commit=True)
        if old.queue != job.queue:
            del self._queue_jobs[old.queue][job.name]
            self._queue_jobs[job.queue][job.name] = None
        self._jobs[job.name] = job
        self._bump("jobs")

    def remove_job(self, name: str, *, with_tasks: bool = False) -> None:
        """Remove a job; its tasks must be gone already unless ``with_tasks``."""
        old = self._job(name)
        tasks = self._job_tasks[name]
        if tasks and not with_tasks:
            raise SnapshotError(
                f"unknown job {name!r}", kind="task", name=next(iter(tasks)), field="job"
            )
        self._check_unbudgeted("job", name)
        for t in tasks:
            self._check_unbudgeted("task", t)
        for t in list(tasks):
            self.remove_task(t)
        self._totals["job"].move(name, old.min_resources, None, commit=True)
        del self._jobs[name]
        del self._job_tasks[name]
        del self._queue_jobs[old.queue][name]
        self._bump("jobs")

    def _check_job(self, job: Job) -> None:
        if job.queue not in self._queues:
            raise SnapshotError(
                f"unknown queue {job.queue!r}", kind="job", name=job.name, field="queue"
            )

    def _job(self, name: str) -> Job:
        try:
            return self._jobs[name]
        except KeyError:
            raise SnapshotError("not in the state", kind="job", name=name) from None

    # ------------------------------------------------------------------ tasks

    def add_task(self, task: Task) -> None:
        """A new task (a pod); its job, and the node it names, must exist."""
        self.add_tasks((task,))

    def add_tasks(self, tasks: Iterable[Task]) -> None:
        """New tasks, all or nothing."""
        batch = list(tasks)
        seen: set[str] = set()
        for task in batch:
            _check_type(task, Task, "task")
            if task.name in self._tasks or task.name in seen:
                raise SnapshotError(
                    "already in the state", kind="task", name=task.name, field="name"
                )
            seen.add(task.name)
        limit = self.limits.max_tasks
        if len(self._tasks) + len(batch) > limit:
            raise SnapshotError(
                f"{len(self._tasks) + len(batch)} tasks is beyond the limit of {limit} "
                "(Limits.max_tasks)",
                kind="snapshot",
                field="tasks",
            )
        done: list[str] = []
        try:
            for task in batch:
                self._put_task(task, None)
                done.append(task.name)
        except BaseException:
            for name in reversed(done):
                self.remove_task(name)
            raise

    def update_task(self, task: Task) -> None:
        """Replace the task of that name (phase, node, devices, ...)."""
        _check_type(task, Task, "task")
        self._put_task(task, self._task(task.name))

    def set_task_phase(
        self,
        name: str,
        phase: TaskPhase | str,
        *,
        node: str | None = None,
        gpu_indices: Iterable[int] | None = None,
    ) -> Task:
        """Move task ``name`` to ``phase`` (Running, Releasing, Succeeded, Failed, Pending,
        ...). ``node`` and ``gpu_indices`` keep the task's own unless given; a Pending task
        leaves its node. Returns the new record."""
        old = self._task(name)
        changes: dict[str, Any] = {"phase": phase}
        if node is not None:
            changes["node"] = node
        if gpu_indices is not None:
            changes["gpu_indices"] = tuple(gpu_indices)
        if (phase is TaskPhase.PENDING or phase == TaskPhase.PENDING.value) and node is None:
            changes["node"] = None
            changes.setdefault("gpu_indices", ())
        new = dataclasses.replace(old, **changes)
        self._put_task(new, old)
        return new

    def remove_task(self, name: str) -> None:
        old = self._task(name)
        self._check_unbudgeted("task", name)
        self._totals["task"].move(name, old.request, None, _task_gpu(old), 0, commit=True)
        del self._tasks[name]
        del self._job_tasks[old.job][name]
        if old.node is not None:
            del self._node_tasks[old.node][name]
        self._bump("tasks", old.node if old.phase in NODE_PHASES else None)

    def _task(self, name: str) -> Task:
        try:
            return self._tasks[name]
        except KeyError:
            raise SnapshotError("not in the state", kind="task", name=name) from None

    def _put_task(self, task: Task, old: Task | None) -> None:
        """Check then store ``task`` (replacing ``old``)."""
        if task.job not in self._jobs:
            raise SnapshotError(
                f"unknown job {task.job!r}", kind="task", name=task.name, field="job"
            )
        if task.node is not None and task.node not in self._nodes:
            raise SnapshotError(
                f"unknown node {task.node!r}", kind="task", name=task.name, field="node"
            )
        self._totals["task"].move(
            task.name,
            old.request if old else None,
            task.request,
            _task_gpu(old),
            _task_gpu(task),
            commit=False,
        )
        if task.node is not None and task.phase in NODE_PHASES:
            others = [self._tasks[t] for t in self._node_tasks[task.node] if t != task.name]
            others.append(task)
            self._check_occupancy(self._nodes[task.node], others)
        # Commit.
        self._totals["task"].move(
            task.name,
            old.request if old else None,
            task.request,
            _task_gpu(old),
            _task_gpu(task),
            commit=True,
        )
        self._tasks[task.name] = task
        if old is not None:
            if old.job != task.job:
                del self._job_tasks[old.job][task.name]
            if old.node is not None and old.node != task.node:
                del self._node_tasks[old.node][task.name]
        self._job_tasks[task.job][task.name] = None
        if task.node is not None:
            self._node_tasks[task.node][task.name] = None
        self.generation += 1
        self._cache.pop("tasks", None)
        gen = self.generation
        if old is not None and old.node is not None and old.phase in NODE_PHASES:
            self._node_gen[old.node] = gen
        if task.node is not None and task.phase in NODE_PHASES:
            self._node_gen[task.node] = gen

    def _check_occupancy(self, node: Node, tasks: list[Task]) -> None:
        """Snapshot's occupancy rule for one node and the tasks that name it."""
        books: tuple[dict[str, int], dict[str, int]] = ({}, {})
        dev_books: tuple[dict[int, int], dict[int, int]] = ({}, {})
        holder: tuple[dict[int, str], dict[int, str]] = ({}, {})
        gpus = node.gpus
        n_dev = gpus.count if gpus is not None else 0
        cap = gpus.milli if gpus is not None else 0
        sharing = gpus.sharing if gpus is not None else False
        for task in tasks:
            phase = task.phase
            if phase not in NODE_PHASES:
                continue
            which = (
                (1,)
                if phase is TaskPhase.PIPELINED
                else ((0,) if phase is TaskPhase.RELEASING else (0, 1))
            )
            for b in which:
                book = books[b]
                for res, amount in task.request.items():
                    if res != PODS:
                        book[res] = book.get(res, 0) + amount
                book[PODS] = book.get(PODS, 0) + 1
            gpu = task.gpu_request
            if gpu is None:
                continue
            take = device_take(gpu.milli, cap, sharing)
            for idx in task.gpu_indices:
                if idx >= n_dev:
                    raise SnapshotError(
                        f"GPU index {idx} out of range: node {node.name!r} has {n_dev} GPUs",
                        kind="task",
                        name=task.name,
                        field="gpu_indices",
                    )
                for b in which:
                    held = dev_books[b].get(idx, 0) + take
                    dev_books[b][idx] = held
                    if held > cap:
                        other = holder[b].get(idx, "?")
                        when = "" if b == 0 else " once releases finish"
                        raise SnapshotError(
                            f"GPU {idx} of node {node.name!r} over-committed{when}: "
                            f"{held} of {cap} milli-GPU (already held by task {other!r})",
                            kind="task",
                            name=task.name,
                            field="gpu_indices",
                        )
                    holder[b].setdefault(idx, task.name)
        for b, when in ((0, ""), (1, " once releases finish (with reservations)")):
            for res, amount in sorted(books[b].items()):
                if res == PODS:
                    limit = node.pod_limit
                    if limit is not None and amount > limit:
                        raise SnapshotError(
                            f"{amount} tasks on a node with a pod limit of {limit}{when}",
                            kind="node",
                            name=node.name,
                            field=f"allocatable.{PODS}",
                        )
                    continue
                have = node.allocatable.get(res, 0)
                if amount > have:
                    raise SnapshotError(
                        f"running tasks use {amount} of {res} but only {have} is allocatable{when}",
                        kind="node",
                        name=node.name,
                        field=f"allocatable.{res}",
                    )

    # ------------------------------------------------------------------ disruption budgets

    def add_disruption_budget(self, budget: DisruptionBudget) -> None:
        """A new PodDisruptionBudget; the jobs and tasks it names must exist."""
        _check_type(budget, DisruptionBudget, "disruption_budget")
        if budget.name in self._disruption_budgets:
            raise SnapshotError(
                "already in the state", kind="disruption_budget", name=budget.name, field="name"
            )
        self._set_budget(budget)

    def update_disruption_budget(self, budget: DisruptionBudget) -> None:
        _check_type(budget, DisruptionBudget, "disruption_budget")
        self._budget(budget.name)
        self._set_budget(budget)

    def remove_disruption_budget(self, name: str) -> None:
        old = self._budget(name)
        del self._disruption_budgets[name]
        self._unlist_budget(old)
        self._bump("disruption_budgets")

    def _set_budget(self, budget: DisruptionBudget) -> None:
        for attr, known in (("jobs", self._jobs), ("tasks", self._tasks)):
            for i, ref in enumerate(getattr(budget, attr)):
                if ref not in known:
                    raise SnapshotError(
                        f"unknown {attr[:-1]} {ref!r}",
                        kind="disruption_budget",
                        name=budget.name,
                        field=f"{attr}[{i}]",
                    )
        old = self._disruption_budgets.get(budget.name)
        if old is not None:
            self._unlist_budget(old)
        self._disruption_budgets[budget.name] = budget
        self._list_budget(budget)
        self._bump("disruption_budgets")

    def _list_budget(self, budget: DisruptionBudget) -> None:
        for attr in ("jobs", "tasks"):
            for ref in getattr(budget, attr):
                self._budget_refs.setdefault((attr[:-1], ref), {})[budget.name] = None

    def _unlist_budget(self, budget: DisruptionBudget) -> None:
        for attr in ("jobs", "tasks"):
            for ref in getattr(budget, attr):
                names = self._budget_refs[(attr[:-1], ref)]
                names.pop(budget.name, None)
                if not names:
                    del self._budget_refs[(attr[:-1], ref)]

    def _check_unbudgeted(self, kind: str, name: str) -> None:
        """A job or task no budget names (else removing it breaks the budget's reference)."""
        names = self._budget_refs.get((kind, name))
        if names:
            budget = self._disruption_budgets[next(iter(names))]
            refs = budget.jobs if kind == "job" else budget.tasks
            raise SnapshotError(
                f"unknown {kind} {name!r}",
                kind="disruption_budget",
                name=budget.name,
                field=f"{kind}s[{refs.index(name)}]",
            )

    def _budget(self, name: str) -> DisruptionBudget:
        try:
            return self._disruption_budgets[name]
        except KeyError:
            raise SnapshotError("not in the state", kind="disruption_budget", name=name) from None

    # ------------------------------------------------------------------ decisions

    def apply(self, decisions: Decisions, *, bound: TaskPhase = TaskPhase.BOUND) -> None:
        """Apply one cycle's decisions as a binder would: binds become ``bound`` (Bound; pass
        ``TaskPhase.RUNNING`` to skip the kubelet's report) on their node and devices,
        reservations Pipelined, evicted tasks Releasing; job phases follow the reported
        statuses. All or nothing: on an error the state is unchanged.

        Raises
        ------
        PlacementError
            A bind or reservation of a task that is not Pending or Pipelined, an eviction of a
            task that holds nothing, a decision about an unknown task.
        SnapshotError
            A decision that does not fit (the node's or device's capacity).
        """
        if not isinstance(decisions, Decisions):
            raise PlacementError(
                f"expected Decisions, got {type(decisions).__name__}", kind="state", field="apply"
            )
        if bound not in (TaskPhase.BOUND, TaskPhase.RUNNING):
            raise PlacementError(
                f"a bind makes a task Bound or Running, not {bound}", kind="state", field="bound"
            )
        placed = [(b.task, b.node, b.gpu_indices, bound) for b in decisions.binds] + [
            (p.task, p.node, p.gpu_indices, TaskPhase.PIPELINED) for p in decisions.pipelined
        ]
        new: dict[str, Task] = {}
        for name, node, gpus, phase in placed:
            old = self._tasks.get(name)
            if old is None or old.phase not in (TaskPhase.PENDING, TaskPhase.PIPELINED):
                raise PlacementError(
                    "placed, but not Pending or Pipelined", kind="task", name=name, field="phase"
                )
            new[name] = dataclasses.replace(old, phase=phase, node=node, gpu_indices=tuple(gpus))
        for e in decisions.evictions:
            old = new.get(e.task) or self._tasks.get(e.task)
            if old is None or old.phase not in (TaskPhase.BOUND, TaskPhase.RUNNING):
                raise PlacementError(
                    "evicted, but not Bound or Running", kind="task", name=e.task, field="phase"
                )
            new[e.task] = dataclasses.replace(old, phase=TaskPhase.RELEASING)
        jobs: list[Job] = []
        for job_name, status in decisions.jobs.items():
            job = self._jobs.get(job_name)
            job_phase = _JOB_PHASES.get(status.phase)
            if job is not None and job_phase is not None and job_phase is not job.phase:
                jobs.append(dataclasses.replace(job, phase=job_phase))
        # Evictions first (they free room), then the placements; undo on error.
        order = sorted(new.values(), key=lambda t: t.phase is not TaskPhase.RELEASING)
        done: list[Task] = []
        try:
            for task in order:
                prev = self._tasks[task.name]
                self._put_task(task, prev)
                done.append(prev)
        except BaseException:
            for prev in reversed(done):
                self._put_task_unchecked(prev)
            raise
        for job in jobs:
            self.update_job(job)

    def _put_task_unchecked(self, task: Task) -> None:
        """Restore an earlier record of a task (its checks held when it was stored)."""
        old = self._tasks[task.name]
        self._totals["task"].move(
            task.name, old.request, task.request, _task_gpu(old), _task_gpu(task), commit=True
        )
        self._tasks[task.name] = task
        if old.node is not None and old.node != task.node:
            del self._node_tasks[old.node][task.name]
        if task.node is not None:
            self._node_tasks[task.node][task.name] = None
        self._bump("tasks", task.node)
        if old.node is not None:
            self._node_gen[old.node] = self.generation

    # ------------------------------------------------------------------ bulk

    def sync(self, snapshot: Snapshot) -> int:
        """Bring the state to ``snapshot``'s records (a full re-list, as an informer's resync
        delivers), touching only the records that differ; returns how many it touched.

        Records keep their place in the state; new ones go last. When the changes cannot be
        made one at a time (a task moving onto room another task frees later in the order),
        the state is rebuilt from ``snapshot`` (valid by construction).
        """
        if not isinstance(snapshot, Snapshot):
            raise SnapshotError(
                f"expected a Snapshot, got {type(snapshot).__name__}", kind="state", field="sync"
            )
        try:
            return self._sync(snapshot)
        except SnapshotError:
            fresh = ClusterState(snapshot, limits=self.limits)
            gen = self.generation + 1
            removed = set(self._nodes) - set(fresh._nodes)
            self.__dict__.update(fresh.__dict__)
            self.generation = gen
            self._node_gen = dict.fromkeys(self._node_gen, gen)
            self._removed_nodes |= removed
            return len(snapshot.nodes) + len(snapshot.tasks)

    def _sync(self, snap: Snapshot) -> int:
        touched = 0
        want: dict[str, dict[str, Any]] = {a: {r.name: r for r in getattr(snap, a)} for a in _ATTRS}
        # 1. What leaves or frees room: budgets, tasks, then jobs, hypernodes, queues, nodes.
        for name in [b for b in self._disruption_budgets if b not in want["disruption_budgets"]]:
            self.remove_disruption_budget(name)
            touched += 1
        for name, task in list(self._tasks.items()):
            new = want["tasks"].get(name)
            if new is None:
                self.remove_task(name)
                touched += 1
            elif new != task and (new.node is None or new.phase not in NODE_PHASES):
                self.update_task(new)
                touched += 1
        for name in [j for j in self._jobs if j not in want["jobs"]]:
            self.remove_job(name)
            touched += 1
        gone = [h for h in self._hypernodes if h not in want["hypernodes"]]
        for name in sorted(gone, key=lambda h: -self._hypernodes[h].tier):
            self.remove_hypernode(name)
            touched += 1
        gone = [q for q in self._queues if q not in want["queues"]]
        while gone:  # children first
            leaf = next(q for q in gone if not self._children.get(q))
            self.remove_queue(leaf)
            gone.remove(leaf)
            touched += 1
        for name in [n for n in self._nodes if n not in want["nodes"]]:
            self.remove_node(name)
            touched += 1
        # 2. What arrives or changes, in dependency order.
        for node in snap.nodes:
            touched += self._upsert(node, self._nodes, self.add_node, self.update_node)
        pending = list(snap.queues)
        while pending:  # parents first
            ready = [q for q in pending if q.parent is None or q.parent in self._queues]
            if not ready:
                ready = pending[:1]  # let the check name the problem
            for q in ready:
                touched += self._upsert(q, self._queues, self.add_queue, self.update_queue)
                pending.remove(q)
        for hn in sorted(snap.hypernodes, key=lambda h: h.tier):
            touched += self._upsert(hn, self._hypernodes, self.add_hypernode, self.update_hypernode)
        for job in snap.jobs:
            touched += self._upsert(job, self._jobs, self.add_job, self.update_job)
        for task in snap.tasks:
            touched += self._upsert(task, self._tasks, self.add_task, self.update_task)
        for budget in snap.disruption_budgets:
            touched += self._upsert(
                budget,
                self._disruption_budgets,
                self.add_disruption_budget,
                self.update_disruption_budget,
            )
        return touched

    @staticmethod
    def _upsert(record: Any, store: Mapping[str, Any], add: Any, update: Any) -> int:
        old = store.get(record.name)
        if old is None:
            add(record)
            return 1
        if old is record or old == record:
            return 0
        update(record)
        return 1

    # ------------------------------------------------------------------ cycles

    def _records(self, attr: str) -> tuple[tuple[Any, ...], Mapping[str, int]]:
        cached = self._cache.get(attr)
        if cached is None:
            store: dict[str, Any] = getattr(self, f"_{attr}")
            cached = (tuple(store.values()), dict(zip(store, range(len(store)), strict=True)))
            self._cache[attr] = cached
        return cached

    def snapshot(self) -> Snapshot:
        """The immutable snapshot of the state now, equal to
        ``Snapshot.from_dict(self.to_dict())``; kinds that did not change since the last
        snapshot share their record tuple and index with it."""
        last = self._last
        if last is not None and all(a in self._cache for a in _ATTRS):
            parts = {a: self._cache[a] for a in _ATTRS}
            if all(parts[a][0] is getattr(last, a) for a in _ATTRS):
                return last
        parts = {a: self._records(a) for a in _ATTRS}
        snap = Snapshot._trusted(
            **{a: parts[a][0] for a in _ATTRS},
            indexes={_KIND[a]: parts[a][1] for a in _ATTRS},
            limits=self.limits,
            topology=self._topology,
        )
        if snap.hypernodes and self._topology is None:
            from .topology import build_topology

            self._topology = build_topology(snap)
        object.__setattr__(snap, "_arrays", self._arrays_base())
        self._last, self._last_gen = snap, self.generation
        return snap

    def _arrays_base(self) -> ArraysBase:
        """What the new snapshot's arrays may reuse: the last snapshot whose arrays were
        built (the last one, or the one its arrays would have started from), and the tasks of
        every node changed since."""
        names = frozenset(self._resource_names)
        last: Snapshot | None = self._last
        since = self._last_gen
        hint = last._arrays if last is not None else None
        if isinstance(hint, ArraysBase):
            last, since = hint.previous, hint.since
        if last is None or not isinstance(last._arrays, ClusterArrays):
            return ArraysBase(previous=None, since=0, resource_names=names, changed=FrozenDict())
        tasks, on = self._tasks, self._node_tasks
        changed = {
            name: tuple(tasks[t] for t in on[name])
            for name, gen in self._node_gen.items()
            if gen > since
        }
        return ArraysBase(
            previous=last,
            since=since,
            resource_names=names,
            changed=changed,
        )

    def schedule(self, config: Any, **kwargs: Any) -> Decisions:
        """One cycle on the state now: :func:`gangsched.schedule` on :meth:`snapshot` (same
        keyword arguments). Marks the cycle for :meth:`changed_nodes`. The decisions are not
        applied: call :meth:`apply` once the binder has acted on them."""
        from .scheduler import schedule

        out = schedule(self.snapshot(), config, **kwargs)
        self.mark_cycle()
        return out

    def to_dict(self) -> dict[str, list[dict[str, object]]]:
        """The interchange format of the state now (as :meth:`Snapshot.to_dict`)."""
        return {
            attr: [rec.to_dict() for rec in getattr(self, f"_{attr}").values()]
            for attr in _ATTRS
            if attr != "disruption_budgets" or self._disruption_budgets
        }

    def __repr__(self) -> str:
        return (
            f"ClusterState(nodes={len(self._nodes)}, hypernodes={len(self._hypernodes)}, "
            f"queues={len(self._queues)}, jobs={len(self._jobs)}, tasks={len(self._tasks)}, "
            f"generation={self.generation})"
        )


class _View(Mapping[str, V]):
    """A read-only mapping over one of the state's dicts."""

    __slots__ = ("_d",)

    def __init__(self, d: dict[str, V]) -> None:
        self._d = d

    def __getitem__(self, key: str) -> V:
        return self._d[key]

    def __iter__(self) -> Any:
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)

    def __contains__(self, key: object) -> bool:
        return key in self._d
