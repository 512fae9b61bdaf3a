"""Invariant checkers: plain functions that raise :class:`InvariantViolation` with a precise
message naming the object that broke the rule.

Each ``check_x(snapshot, decisions)`` looks only at the input snapshot and the decisions, so it
checks *any* scheduler whose output can be expressed as :class:`~gangsched.decisions.Decisions`
(see ``Decisions.from_dict``). :func:`check_all` runs them all.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable

from ..decisions import Decisions
from ..model import OCCUPYING_PHASES, TaskPhase
from ..snapshot import Snapshot
from ..units import PODS

__all__ = [
    "InvariantViolation",
    "check_all",
    "check_capacity",
    "check_deterministic",
    "check_gang_atomicity",
    "check_known_objects",
    "check_queue_capability",
    "check_reasons",
    "check_snapshot_unmutated",
]


class InvariantViolation(AssertionError):
    """A scheduler's decisions broke an invariant."""


def check_known_objects(snapshot: Snapshot, decisions: Decisions) -> None:
    """Decisions reference only tasks, nodes, jobs and queues of the snapshot; a task is bound,
    pipelined or evicted at most once; only Pending tasks are bound or pipelined."""
    seen: dict[str, str] = {}
    for kind, items in (("bind", decisions.binds), ("pipeline", decisions.pipelined)):
        for d in items:
            if d.task not in snapshot.task_index:
                raise InvariantViolation(f"{kind} of unknown task {d.task!r}")
            if d.node not in snapshot.node_index:
                raise InvariantViolation(f"task {d.task!r}: {kind} to unknown node {d.node!r}")
            if d.task in seen:
                raise InvariantViolation(f"task {d.task!r}: both {seen[d.task]} and {kind}")
            seen[d.task] = kind
            phase = snapshot.task(d.task).phase
            if phase is not TaskPhase.PENDING:
                raise InvariantViolation(f"task {d.task!r}: {kind} of a {phase.value} task")
    for e in decisions.evictions:
        if e.task not in snapshot.task_index:
            raise InvariantViolation(f"eviction of unknown task {e.task!r}")
        if snapshot.task(e.task).phase not in OCCUPYING_PHASES:
            raise InvariantViolation(f"task {e.task!r}: eviction of a task that holds nothing")
    for name in decisions.jobs:
        if name not in snapshot.job_index:
            raise InvariantViolation(f"status of unknown job {name!r}")
    for name in decisions.queues:
        if name not in snapshot.queue_index:
            raise InvariantViolation(f"status of unknown queue {name!r}")


def _device_milli(snapshot: Snapshot, task_name: str, node_name: str) -> int:
    task = snapshot.task(task_name)
    node = snapshot.node(node_name)
    g = task.gpu_request
    if g is None or node.gpus is None:
        return 0
    if not node.gpus.sharing or g.milli >= node.gpus.milli:
        return node.gpus.milli
    return g.milli


def check_capacity(snapshot: Snapshot, decisions: Decisions) -> None:
    """After the binds, no node exceeds its allocatable in any resource or its pod limit, and
    no GPU device exceeds its capacity. Reservations (pipelined) fit once the releasing and
    evicted tasks are gone."""
    evicted = {e.task for e in decisions.evictions}
    now: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    later: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    dev_now: dict[tuple[str, int], int] = defaultdict(int)
    dev_later: dict[tuple[str, int], int] = defaultdict(int)

    def charge(
        book: dict[str, dict[str, int]],
        dev: dict[tuple[str, int], int],
        task: str,
        node: str,
        gpus: tuple[int, ...],
    ) -> None:
        t = snapshot.task(task)
        for res, amount in t.request.items():
            if res != PODS:
                book[node][res] += amount
        book[node][PODS] += 1
        per = _device_milli(snapshot, task, node)
        for g in gpus:
            dev[(node, g)] += per

    for t in snapshot.tasks:
        if t.node is None:
            continue
        if t.phase in OCCUPYING_PHASES:
            charge(now, dev_now, t.name, t.node, t.gpu_indices)
            if t.phase is not TaskPhase.RELEASING and t.name not in evicted:
                charge(later, dev_later, t.name, t.node, t.gpu_indices)
        elif t.phase is TaskPhase.PIPELINED:
            charge(later, dev_later, t.name, t.node, t.gpu_indices)
    for b in decisions.binds:
        charge(now, dev_now, b.task, b.node, b.gpu_indices)
        charge(later, dev_later, b.task, b.node, b.gpu_indices)
    for p in decisions.pipelined:
        charge(later, dev_later, p.task, p.node, p.gpu_indices)
    for label, book, dev in (("", now, dev_now), (" once releases finish", later, dev_later)):
        for node_name, used in book.items():
            node = snapshot.node(node_name)
            for res, amount in used.items():
                if res == PODS:
                    limit = node.pod_limit
                    if limit is not None and amount > limit:
                        raise InvariantViolation(
                            f"node {node_name!r}: {amount} pods over its limit {limit}{label}"
                        )
                    continue
                cap = node.allocatable.get(res, 0)
                if amount > cap:
                    raise InvariantViolation(
                        f"node {node_name!r}: {res} over-committed{label}: {amount} > {cap}"
                    )
        for (node_name, g), amount in dev.items():
            node = snapshot.node(node_name)
            count = node.gpus.count if node.gpus is not None else 0
            cap = node.gpus.milli if node.gpus is not None else 0
            if g >= count:
                raise InvariantViolation(f"node {node_name!r}: GPU index {g} out of range")
            if amount > cap:
                raise InvariantViolation(
                    f"node {node_name!r}: GPU {g} over-committed{label}: {amount} > {cap} milli"
                )
    for b in decisions.binds:
        request = snapshot.task(b.task).gpu_request
        if len(b.gpu_indices) != (request.count if request is not None else 0):
            raise InvariantViolation(
                f"task {b.task!r}: bound with {len(b.gpu_indices)} GPU indices for its request"
            )


_READY = (TaskPhase.BOUND, TaskPhase.RUNNING, TaskPhase.SUCCEEDED)


def check_gang_atomicity(snapshot: Snapshot, decisions: Decisions) -> None:
    """A job that gets binds ends with at least ``min_available`` ready tasks (and every role's
    minimum, when ``min_available`` covers them); one that gets reservations ends with at least
    ``min_available`` ready or reserved tasks. Never part of a gang."""
    bound = defaultdict(list)
    for b in decisions.binds:
        bound[snapshot.task(b.task).job].append(b.task)
    reserved = defaultdict(list)
    for p in decisions.pipelined:
        reserved[snapshot.task(p.task).job].append(p.task)
    evicted = {e.task for e in decisions.evictions}
    for job in snapshot.jobs:
        if job.name not in bound and job.name not in reserved:
            continue
        tasks = snapshot.tasks_of(job.name)
        new_ready = set(bound[job.name])
        best_effort_pending = {
            t.name
            for t in tasks
            if t.phase is TaskPhase.PENDING and t.best_effort and t.name not in new_ready
        }
        ready = [
            t for t in tasks if (t.phase in _READY and t.name not in evicted) or t.name in new_ready
        ]
        held = ready + [
            t for t in tasks if t.name in reserved[job.name] or (t.phase is TaskPhase.PIPELINED)
        ]
        count = held if job.name in reserved else ready
        if len(count) + len(best_effort_pending) < job.min_available:
            raise InvariantViolation(
                f"job {job.name!r}: partial gang: {len(count)} tasks ready or reserved, "
                f"min_available {job.min_available}"
            )
        if job.min_task_member and job.min_available >= sum(job.min_task_member.values()):
            for role, need in job.min_task_member.items():
                have = sum(1 for t in count if t.role == role)
                if have < need:
                    raise InvariantViolation(
                        f"job {job.name!r}: role {role!r} has {have} of its minimum {need}"
                    )


def check_queue_capability(
    snapshot: Snapshot, decisions: Decisions, *, hierarchical: bool = True
) -> None:
    """No queue — and, with ``hierarchical``, no ancestor of it — gains new allocations beyond
    its capability. (Flat fair-share plugins such as proportion ignore queue parents; check
    them with ``hierarchical=False``.)"""
    evicted = {e.task for e in decisions.evictions}
    used: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    grew: set[str] = set()
    placed = {b.task for b in decisions.binds} | {p.task for p in decisions.pipelined}

    def ancestors(queue: str) -> list[str]:
        out = [queue]
        q = snapshot.queue(queue)
        while hierarchical and q.parent is not None:
            out.append(q.parent)
            q = snapshot.queue(q.parent)
        return out

    for t in snapshot.tasks:
        holds = (
            t.phase in (TaskPhase.BOUND, TaskPhase.RUNNING, TaskPhase.PIPELINED)
            and t.name not in evicted
        ) or t.name in placed
        if not holds:
            continue
        queue = snapshot.job(t.job).queue
        for q in ancestors(queue):
            for res, amount in t.request.items():
                used[q][res] += amount
            g = t.gpu_request
            if g is not None:
                used[q]["nvidia.com/gpu"] += g.count * min(g.milli, 1000)
            if t.name in placed:
                grew.add(q)
    for q in grew:
        cap = snapshot.queue(q).capability
        if cap is None:
            continue
        for res, limit in cap.items():
            if res != PODS and used[q][res] > limit:
                raise InvariantViolation(
                    f"queue {q!r}: {res} {used[q][res]} over its capability {limit}"
                )


def check_reasons(snapshot: Snapshot, decisions: Decisions) -> None:
    """Every Pending task that was neither bound nor reserved has a reason."""
    placed = {b.task for b in decisions.binds} | {p.task for p in decisions.pipelined}
    for t in snapshot.tasks:
        if (
            t.phase is TaskPhase.PENDING
            and t.name not in placed
            and not decisions.task_reasons.get(t.name)
        ):
            raise InvariantViolation(f"task {t.name!r}: left pending without a reason")


def check_deterministic(
    schedule_fn: Callable[[Snapshot], Decisions], snapshot: Snapshot, runs: int = 2
) -> Decisions:
    """``schedule_fn`` gives byte-identical decisions on the same snapshot."""
    first = schedule_fn(snapshot)
    text = json.dumps(first.to_dict(), sort_keys=True)
    for _ in range(runs - 1):
        again = json.dumps(schedule_fn(snapshot).to_dict(), sort_keys=True)
        if again != text:
            raise InvariantViolation("same snapshot, different decisions")
    return first


def check_snapshot_unmutated(before: dict[str, object], snapshot: Snapshot) -> None:
    """``snapshot.to_dict()`` still equals ``before`` (taken before scheduling)."""
    if snapshot.to_dict() != before:
        raise InvariantViolation("the scheduler mutated its input snapshot")


ALL_CHECKS: tuple[Callable[[Snapshot, Decisions], None], ...] = (
    check_known_objects,
    check_capacity,
    check_gang_atomicity,
    check_queue_capability,
    check_reasons,
)


def check_all(snapshot: Snapshot, decisions: Decisions) -> None:
    """Run every snapshot/decisions invariant."""
    for check in ALL_CHECKS:
        check(snapshot, decisions)
