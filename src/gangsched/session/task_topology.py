"""Volcano's task-topology buckets: which tasks of a job are meant to land together.

A job's :class:`~gangsched.model.affinity.TaskTopology` relates roles: a group of several
roles is inter-affinity (or inter-anti-affinity) between each pair, a group of one role is
that role's self-affinity (self-anti-affinity). Buckets are built once per cycle, as Volcano's
plugin builds them when the session opens:

1. tasks whose role the topology's (anti-)affinity names are bucketed, the others are out;
2. they are taken in order: tasks on a node first (by node name), then pending tasks by the
   role's place in ``task_order`` (earlier first), then by the role's strongest relation
   (self-anti-affinity, inter-affinity, self-affinity, inter-anti-affinity), then by name;
3. a task on a node joins the bucket of that node's earlier tasks (or opens one); a pending
   task joins the bucket whose tasks it is most drawn to (+1 per affine task, −1 per
   anti-affine one), the lighter bucket on a tie (the sum of its pending requests:
   milli-cpu + MiB of memory + the other resources' amounts), and opens a new bucket when
   every bucket repels it (or there is none).

The topology of a job naming a role none of its tasks has is ignored, as Volcano ignores it.
The buckets are a pure function of the snapshot; the plugin keeps their placements current.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gangsched.model.affinity import TaskTopology
from gangsched.model.snapshot import Snapshot
from gangsched.units import CPU, MEMORY, PODS

__all__ = ["Bucket", "JobBuckets", "RoleRelations", "build_buckets", "job_buckets"]

#: Relation strengths (Volcano's priorities: the larger, the earlier a role's tasks).
_SELF_ANTI, _INTER_AFF, _SELF_AFF, _INTER_ANTI = 4, 3, 2, 1


@dataclass(frozen=True, slots=True)
class RoleRelations:
    """The topology as relations between roles."""

    affine: frozenset[tuple[str, str]]  # (a, b): a drawn to b (a == b: self-affinity)
    repelled: frozenset[tuple[str, str]]  # (a, b): a kept from b (a == b: self-anti)
    strength: dict[str, int]  # role -> its strongest relation (bucketed roles only)
    order: dict[str, int]  # role -> len(task_order) - position (0: not listed)

    @classmethod
    def of(cls, topo: TaskTopology) -> RoleRelations:
        affine: set[tuple[str, str]] = set()
        repelled: set[tuple[str, str]] = set()
        strength: dict[str, int] = {}

        def mark(role: str, level: int) -> None:
            strength[role] = max(strength.get(role, 0), level)

        for groups, pairs, one, many in (
            (topo.affinity, affine, _SELF_AFF, _INTER_AFF),
            (topo.anti_affinity, repelled, _SELF_ANTI, _INTER_ANTI),
        ):
            for group in groups:
                if len(group) == 1:
                    pairs.add((group[0], group[0]))
                    mark(group[0], one)
                    continue
                for a in group:
                    pairs.update((a, b) for b in group if b != a)
                    mark(a, many)
        n = len(topo.task_order)
        order = {role: n - i for i, role in enumerate(topo.task_order)}
        return cls(frozenset(affine), frozenset(repelled), strength, order)

    def pull(self, role: str, counts: dict[str, int], *, only_anti: bool = False) -> int:
        """How much a task of ``role`` is drawn to tasks counted by role (Volcano's
        ``checkTaskSetAffinity``): +count per affine role, −count per repelling one."""
        total = 0
        for other, count in counts.items():
            if not only_anti and (role, other) in self.affine:
                total += count
            if (role, other) in self.repelled:
                total -= count
        return total


@dataclass(slots=True)
class Bucket:
    """Tasks meant to share nodes. ``pending``: its tasks not yet placed (in order);
    ``on_node``: its placed tasks per node index; ``roles``: its tasks per role."""

    index: int
    pending: list[int] = field(default_factory=list)
    roles: dict[str, int] = field(default_factory=dict)
    on_node: dict[int, int] = field(default_factory=dict)
    placed: int = 0
    weight: float = 0.0  # Volcano's reqScore of the pending tasks
    request: dict[str, int] = field(default_factory=dict)  # summed pending requests


@dataclass(slots=True)
class JobBuckets:
    """The buckets of one job; ``bucket_of``: task index -> bucket index."""

    relations: RoleRelations
    buckets: list[Bucket]
    bucket_of: dict[int, int]
    max_size: int


def _weight(request: dict[str, int]) -> float:
    total = float(request.get(CPU, 0)) + request.get(MEMORY, 0) / 1024 / 1024
    for res, amount in request.items():
        if res not in (CPU, MEMORY, PODS):
            total += amount
    return total


def task_request(snapshot: Snapshot, t: int) -> dict[str, int]:
    """A task's request as the buckets sum it (GPUs as milli-GPU)."""
    task = snapshot.tasks[t]
    out = {res: amount for res, amount in task.request.items() if res != PODS}
    if task.gpu_request is not None:
        out["nvidia.com/gpu"] = task.gpu_request.count * task.gpu_request.milli
    return out


def job_buckets(snapshot: Snapshot, job: int, tasks: list[int]) -> JobBuckets | None:
    """The buckets of ``job`` (``tasks``: its task indices), or None when it has no usable
    topology or no pending task."""
    topo = snapshot.jobs[job].task_topology
    if topo is None:
        return None
    records = snapshot.tasks
    if all(records[t].node is not None for t in tasks):
        return None
    have = {records[t].role for t in tasks}
    if not topo.roles <= have:
        return None
    rel = RoleRelations.of(topo)
    chosen = [t for t in tasks if records[t].role in rel.strength]

    def order(t: int) -> tuple[object, ...]:
        task = records[t]
        if task.node is not None:
            return (0, task.node)
        role = task.role
        return (1, -rel.order.get(role, 0), -rel.strength[role], task.name)

    chosen.sort(key=order)
    node_index = snapshot.node_index
    buckets: list[Bucket] = []
    by_node: dict[str, Bucket] = {}
    bucket_of: dict[int, int] = {}
    max_size = 0
    for t in chosen:
        task = records[t]
        picked: Bucket | None = None
        if task.node is not None:
            best = 0
            picked = by_node.get(task.node)
        else:
            best = -(1 << 62)
            for b in buckets:
                pull = rel.pull(task.role, b.roles)
                if pull > best:
                    best, picked = pull, b
                elif pull == best and picked is not None and b.weight < picked.weight:
                    picked = b
        if best < 0 or picked is None:
            picked = Bucket(index=len(buckets))
            buckets.append(picked)
            if task.node is not None:
                by_node[task.node] = picked
        picked.roles[task.role] = picked.roles.get(task.role, 0) + 1
        if task.node is not None:
            n = node_index[task.node]
            picked.on_node[n] = picked.on_node.get(n, 0) + 1
            picked.placed += 1
        else:
            picked.pending.append(t)
            req = task_request(snapshot, t)
            picked.weight += _weight(req)
            for res, amount in req.items():
                picked.request[res] = picked.request.get(res, 0) + amount
        bucket_of[t] = picked.index
        max_size = max(max_size, len(picked.pending) + picked.placed)
    return JobBuckets(rel, buckets, bucket_of, max_size)


def build_buckets(snapshot: Snapshot) -> dict[int, JobBuckets]:
    """Per job with a usable task topology and pending tasks, its buckets."""
    with_topology = [j for j, job in enumerate(snapshot.jobs) if job.task_topology is not None]
    if not with_topology:
        return {}
    by_job: dict[int, list[int]] = {j: [] for j in with_topology}
    job_index = snapshot.job_index
    for t, task in enumerate(snapshot.tasks):
        j = job_index[task.job]
        if j in by_job:
            by_job[j].append(t)
    out: dict[int, JobBuckets] = {}
    for j in with_topology:
        found = job_buckets(snapshot, j, by_job[j])
        if found is not None:
            out[j] = found
    return out
