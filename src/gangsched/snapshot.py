"""The immutable cluster snapshot and its interchange format.

``Snapshot`` holds every record of one scheduling cycle's input and checks the rules that span
records: unique names, references that resolve, a queue tree without cycles, a topology tree
whose members are known and owned once per tier, and tasks already on nodes that fit them
(resources, pod count, GPU devices). A ``Snapshot`` that exists is consistent; the scheduler
never re-checks it.

``Snapshot.from_dict`` / ``to_dict`` implement the interchange format of design.md. ``to_dict``
is canonical (records in input order, keys sorted by :func:`json.dumps(sort_keys=True)` where
serialised, quantities in canonical units) so ``from_dict(to_dict(s)) == s``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .errors import SnapshotError
from .model import (
    OCCUPYING_PHASES,
    HyperNode,
    Job,
    Node,
    Queue,
    Task,
)
from .units import PODS

__all__ = ["Snapshot"]

R = TypeVar("R", Node, HyperNode, Queue, Job, Task)

_KINDS: tuple[tuple[str, str, type[Any]], ...] = (
    ("nodes", "node", Node),
    ("hypernodes", "hypernode", HyperNode),
    ("queues", "queue", Queue),
    ("jobs", "job", Job),
    ("tasks", "task", Task),
)


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
    node_index: Mapping[str, int] = field(init=False, repr=False, compare=False)
    hypernode_index: Mapping[str, int] = field(init=False, repr=False, compare=False)
    queue_index: Mapping[str, int] = field(init=False, repr=False, compare=False)
    job_index: Mapping[str, int] = field(init=False, repr=False, compare=False)
    task_index: Mapping[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for attr, kind, cls in _KINDS:
            value = getattr(self, attr)
            if isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
                raise SnapshotError(
                    f"expected a sequence of {cls.__name__}", kind="snapshot", field=attr
                )
            records = tuple(value)
            for i, rec in enumerate(records):
                if not isinstance(rec, cls):
                    raise SnapshotError(
                        f"is a {type(rec).__name__}, expected {cls.__name__}",
                        kind="snapshot",
                        field=f"{attr}[{i}]",
                    )
            object.__setattr__(self, attr, records)
            object.__setattr__(self, f"{kind}_index", _index(records, kind))
        self._check_queues()
        self._check_hypernodes()
        self._check_jobs_and_tasks()
        self._check_node_occupancy()

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

    # ---------------------------------------------------------------- validation

    def _check_queues(self) -> None:
        for q in self.queues:
            if q.parent is not None and q.parent not in self.queue_index:
                raise SnapshotError(
                    f"unknown parent queue {q.parent!r}", kind="queue", name=q.name, field="parent"
                )
        for q in self.queues:
            seen = {q.name}
            cur = q
            while cur.parent is not None:
                if cur.parent in seen:
                    raise SnapshotError(
                        f"queue parent cycle through {cur.parent!r}",
                        kind="queue",
                        name=q.name,
                        field="parent",
                    )
                seen.add(cur.parent)
                cur = self.queues[self.queue_index[cur.parent]]

    def _check_hypernodes(self) -> None:
        for hn in self.hypernodes:
            if hn.name in self.node_index:
                raise SnapshotError(
                    "a node has the same name, so members would be ambiguous",
                    kind="hypernode",
                    name=hn.name,
                    field="name",
                )
        owner: dict[tuple[int, str], str] = {}
        for hn in self.hypernodes:
            for member in hn.members:
                if member in self.node_index:
                    if hn.tier != 1 and any(m in self.hypernode_index for m in hn.members):
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
            if job.queue not in self.queue_index:
                raise SnapshotError(
                    f"unknown queue {job.queue!r}", kind="job", name=job.name, field="queue"
                )
        for task in self.tasks:
            if task.job not in self.job_index:
                raise SnapshotError(
                    f"unknown job {task.job!r}", kind="task", name=task.name, field="job"
                )
            # Succeeded / Failed / Pending tasks may carry their last node (it holds nothing),
            # but whatever node a task names must exist.
            if task.node is not None and task.node not in self.node_index:
                raise SnapshotError(
                    f"unknown node {task.node!r}", kind="task", name=task.name, field="node"
                )

    def _check_node_occupancy(self) -> None:
        used: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        pods: dict[str, int] = defaultdict(int)
        gpu_used: dict[tuple[str, int], int] = defaultdict(int)
        gpu_whole: dict[tuple[str, int], str] = {}
        gpu_first: dict[tuple[str, int], str] = {}
        for task in self.tasks:
            if task.phase not in OCCUPYING_PHASES or task.node is None:
                continue
            node = self.nodes[self.node_index[task.node]]
            for res, amount in task.request.items():
                if res == PODS:
                    continue
                used[node.name][res] += amount
            pods[node.name] += 1
            gpu = task.gpu_request
            if gpu is None:
                continue
            n_dev = node.gpus.count if node.gpus is not None else 0
            for idx in task.gpu_indices:
                if idx >= n_dev:
                    raise SnapshotError(
                        f"GPU index {idx} out of range: node {node.name!r} has {n_dev} GPUs",
                        kind="task",
                        name=task.name,
                        field="gpu_indices",
                    )
                key = (node.name, idx)
                cap = node.gpus.milli if node.gpus is not None else 0
                whole = gpu.milli >= cap or (node.gpus is not None and not node.gpus.sharing)
                if key in gpu_whole or (whole and key in gpu_first):
                    other = gpu_whole.get(key) or gpu_first[key]
                    raise SnapshotError(
                        f"GPU {idx} of node {node.name!r} is already held by task {other!r}",
                        kind="task",
                        name=task.name,
                        field="gpu_indices",
                    )
                gpu_first.setdefault(key, task.name)
                if whole:
                    gpu_whole[key] = task.name
                gpu_used[key] += gpu.milli
                if gpu_used[key] > cap:
                    raise SnapshotError(
                        f"GPU {idx} of node {node.name!r} over-committed: "
                        f"{gpu_used[key]} of {cap} milli-GPU",
                        kind="task",
                        name=task.name,
                        field="gpu_indices",
                    )
        for node_name, per_res in used.items():
            node = self.nodes[self.node_index[node_name]]
            for res, amount in sorted(per_res.items()):
                cap = node.allocatable.get(res, 0)
                if amount > cap:
                    raise SnapshotError(
                        f"running tasks use {amount} of {res} but only {cap} is allocatable",
                        kind="node",
                        name=node_name,
                        field=f"allocatable.{res}",
                    )
            limit = node.pod_limit
            if limit is not None and pods[node_name] > limit:
                raise SnapshotError(
                    f"{pods[node_name]} tasks on a node with a pod limit of {limit}",
                    kind="node",
                    name=node_name,
                    field=f"allocatable.{PODS}",
                )

    # ---------------------------------------------------------------- interchange

    @classmethod
    def from_dict(cls, d: object) -> Snapshot:
        """Build a snapshot from the interchange format (see design.md).

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
                "unknown key (allowed: hypernodes, jobs, nodes, queues, tasks)",
                kind="snapshot",
                field=unknown[0],
            )
        parts: dict[str, tuple[Any, ...]] = {}
        for attr, _kind, rec_cls in _KINDS:
            raw = d.get(attr)
            if raw is None:
                raw = ()
            if isinstance(raw, str | bytes | Mapping) or not isinstance(raw, Sequence):
                raise SnapshotError(
                    f"expected a list, got {type(raw).__name__}", kind="snapshot", field=attr
                )
            records = []
            for i, item in enumerate(raw):
                if not isinstance(item, Mapping):
                    raise SnapshotError(
                        f"expected a mapping, got {type(item).__name__}",
                        kind="snapshot",
                        field=f"{attr}[{i}]",
                    )
                records.append(rec_cls.from_dict(item, where=f"#{i}"))
            parts[attr] = tuple(records)
        return cls(**parts)

    def to_dict(self) -> dict[str, list[dict[str, object]]]:
        return {attr: [rec.to_dict() for rec in getattr(self, attr)] for attr, _, _ in _KINDS}

    def replace(self, **changes: Sequence[Any]) -> Snapshot:
        """A new snapshot with some record lists replaced (validated again)."""
        unknown = sorted(set(changes) - {a for a, _, _ in _KINDS})
        if unknown:
            raise SnapshotError("unknown record list", kind="snapshot", field=unknown[0])
        parts: dict[str, Any] = {a: getattr(self, a) for a, _, _ in _KINDS}
        parts.update(changes)
        return Snapshot(**parts)
