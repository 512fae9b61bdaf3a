"""Invariant checkers: plain functions that raise :class:`InvariantViolation` with a precise
message naming the object that broke the rule.

Each ``check_x(snapshot, decisions)`` looks only at the input snapshot and the decisions, so it
checks *any* scheduler whose output can be expressed as :class:`~gangsched.decisions.Decisions`
(see ``Decisions.from_dict``). :func:`check_all` runs them all.

The rules are the ones peers have broken in production: over-committed nodes and GPU devices,
partial gangs, queues growing past their capability, gangs split across the network, victims
evicted for nobody, tasks left pending with no word of why, and schedulers whose answer depends
on more than their input.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Set

from gangsched.config import Config, arg_bool
from gangsched.decisions import Decisions
from gangsched.model import OCCUPYING_PHASES, NodeGroupAffinity, TaskPhase, TopologyMode
from gangsched.model.gpu_charge import device_take, queue_gpu_charge
from gangsched.model.nodes import Node
from gangsched.model.pod_affinity import TopologySpreadConstraint
from gangsched.model.snapshot import Snapshot
from gangsched.model.tasks import Task
from gangsched.session.gate import rules_in_force
from gangsched.session.rules.disruption import desired_count
from gangsched.units import GPU, PODS

__all__ = [
    "ALL_CHECKS",
    "Check",
    "InvariantViolation",
    "check_all",
    "check_capacity",
    "check_consolidation",
    "check_cycle",
    "check_deterministic",
    "check_evictions",
    "check_gang_atomicity",
    "check_known_objects",
    "check_node_affinity",
    "check_node_groups",
    "check_pod_constraints",
    "check_queue_capability",
    "check_reasons",
    "check_schedulable_nodes",
    "check_snapshot_unmutated",
    "check_topology",
    "find_cycle",
]

#: The signature every snapshot/decisions checker has.
Check = Callable[[Snapshot, Decisions], None]


class InvariantViolation(AssertionError):
    """A scheduler's decisions broke an invariant."""


def _job_of(snapshot: Snapshot, task: str) -> str:
    index = snapshot.task_index.get(task)
    if index is None:
        raise InvariantViolation(f"decision about unknown task {task!r}")
    return snapshot.tasks[index].job


_BINDABLE = (TaskPhase.PENDING, TaskPhase.PIPELINED)


def check_known_objects(snapshot: Snapshot, decisions: Decisions) -> None:
    """Decisions reference only tasks, nodes, jobs and queues of the snapshot; a task is bound,
    pipelined or evicted at most once; only Pending tasks are pipelined — or a task evicted by
    the same decisions and reserved on another node (a move, see ``consolidate``) — and only
    Pending or Pipelined ones (a reservation carried from an earlier cycle) are bound; GPU
    indices are not repeated within one decision."""
    seen: dict[str, str] = {}
    moving = {e.task: e for e in decisions.evictions}
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
            allowed: Set[TaskPhase] = set(_BINDABLE if kind == "bind" else (TaskPhase.PENDING,))
            if kind == "pipeline" and d.task in moving:
                if snapshot.task(d.task).node == d.node:
                    raise InvariantViolation(f"task {d.task!r}: moved onto the node it leaves")
                allowed = OCCUPYING_PHASES
            if phase not in allowed:
                raise InvariantViolation(f"task {d.task!r}: {kind} of a {phase.value} task")
            if len(set(d.gpu_indices)) != len(d.gpu_indices):
                raise InvariantViolation(
                    f"task {d.task!r}: {kind} repeats a GPU index in {list(d.gpu_indices)}"
                )
    evicted: set[str] = set()
    for e in decisions.evictions:
        if e.task not in snapshot.task_index:
            raise InvariantViolation(f"eviction of unknown task {e.task!r}")
        if e.task in evicted:
            raise InvariantViolation(f"task {e.task!r}: evicted twice")
        evicted.add(e.task)
        if snapshot.task(e.task).phase not in OCCUPYING_PHASES:
            raise InvariantViolation(f"task {e.task!r}: eviction of a task that holds nothing")
    for name in decisions.jobs:
        if name not in snapshot.job_index:
            raise InvariantViolation(f"status of unknown job {name!r}")
    for name in decisions.queues:
        if name not in snapshot.queue_index:
            raise InvariantViolation(f"status of unknown queue {name!r}")
    for name in decisions.task_reasons:
        if name not in snapshot.task_index:
            raise InvariantViolation(f"reason given for unknown task {name!r}")
    for a in decisions.job_actions:
        if a.job not in snapshot.job_index:
            raise InvariantViolation(f"{a.action} asked for unknown job {a.job!r}")


def _device_milli(snapshot: Snapshot, task_name: str, node_name: str) -> int:
    task = snapshot.task(task_name)
    node = snapshot.node(node_name)
    g = task.gpu_request
    if g is None or node.gpus is None:
        return 0
    return device_take(g.milli, node.gpus.milli, node.gpus.sharing)


def check_capacity(snapshot: Snapshot, decisions: Decisions) -> None:
    """After the binds, no node exceeds its allocatable in any resource or its pod limit, and
    no GPU device exceeds its capacity. Reservations (Pipelined tasks, old and new) fit once
    the releasing and evicted tasks are gone; a reservation that is bound now counts once, where
    it is bound. Every bind and reservation names as many GPU devices as its task asks for."""
    evicted = {e.task for e in decisions.evictions}
    bound = {b.task for b in decisions.binds}
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
        elif t.phase is TaskPhase.PIPELINED and t.name not in bound:
            charge(later, dev_later, t.name, t.node, t.gpu_indices)
    for kind, items in (("bound", decisions.binds), ("pipelined", decisions.pipelined)):
        for d in items:
            request = snapshot.task(d.task).gpu_request
            wanted = request.count if request is not None else 0
            if len(d.gpu_indices) != wanted:
                raise InvariantViolation(
                    f"task {d.task!r}: {kind} with {len(d.gpu_indices)} GPU indices for a "
                    f"request of {wanted} devices"
                )
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
                raise InvariantViolation(
                    f"node {node_name!r}: GPU index {g} out of range ({count} devices)"
                )
            if amount > cap:
                raise InvariantViolation(
                    f"node {node_name!r}: GPU {g} over-committed{label}: {amount} > {cap} milli"
                )


_READY = (TaskPhase.BOUND, TaskPhase.RUNNING, TaskPhase.SUCCEEDED)


def check_gang_atomicity(snapshot: Snapshot, decisions: Decisions) -> None:
    """Never part of a gang.

    A job that gets binds ends with at least ``min_available`` ready tasks (Bound, Running,
    Succeeded or just bound; pending best-effort tasks count, as Volcano counts them): binding
    part of a gang while the rest only holds reservations is a partial gang too. A job that
    gets reservations (pipelined tasks) ends with at least ``min_available`` ready or reserved
    tasks. When ``min_available`` covers the per-role minimums (``min_task_member``), every
    role must reach its own minimum the same way.
    """
    bound: dict[str, set[str]] = defaultdict(set)
    for b in decisions.binds:
        bound[_job_of(snapshot, b.task)].add(b.task)
    reserved: dict[str, set[str]] = defaultdict(set)
    for p in decisions.pipelined:
        reserved[_job_of(snapshot, p.task)].add(p.task)
    evicted = {e.task for e in decisions.evictions}
    for job in snapshot.jobs:
        if job.name not in bound and job.name not in reserved:
            continue
        tasks = snapshot.tasks_of(job.name)
        new_ready = bound.get(job.name, set())
        new_reserved = reserved.get(job.name, set())
        best_effort_pending = [
            t
            for t in tasks
            if t.phase is TaskPhase.PENDING
            and t.best_effort
            and t.name not in new_ready
            and t.name not in new_reserved
        ]
        ready = [
            t for t in tasks if (t.phase in _READY and t.name not in evicted) or t.name in new_ready
        ]
        held = ready + [
            t
            for t in tasks
            if t.name in new_reserved
            or (t.phase is TaskPhase.PIPELINED and t.name not in new_ready)
        ]
        sets = []
        if job.name in bound:
            sets.append(("ready", ready))
        if job.name in reserved:
            sets.append(("ready or reserved", held))
        for what, count in sets:
            if len(count) + len(best_effort_pending) < job.min_available:
                raise InvariantViolation(
                    f"job {job.name!r}: partial gang: {len(count)} tasks {what}, "
                    f"min_available {job.min_available}"
                )
            if job.min_task_member and job.min_available >= sum(job.min_task_member.values()):
                for role, need in job.min_task_member.items():
                    have = sum(1 for t in count if t.role == role)
                    have += sum(1 for t in best_effort_pending if t.role == role)
                    if have < need:
                        raise InvariantViolation(
                            f"job {job.name!r}: role {role!r} has {have} tasks {what}, "
                            f"under its minimum {need}"
                        )


def check_queue_capability(
    snapshot: Snapshot, decisions: Decisions, *, hierarchical: bool = True
) -> None:
    """No queue — and, with ``hierarchical``, no ancestor of it — gains new allocations beyond
    its capability in a resource the new allocations ask for. (Flat fair-share plugins such
    as proportion ignore queue parents; check them with ``hierarchical=False``.)

    A queue counts what its tasks hold after the cycle: Bound, Running and Pipelined tasks
    that were not evicted, plus the new binds and reservations. GPUs count what the request
    charges its queue (:func:`~gangsched.model.gpu_charge.queue_gpu_charge`: 1000 per whole-GPU
    device whatever the device size, the milli of a fractional one).

    Binding a carried reservation (a task Pipelined in the snapshot) counts as growth too: a
    queue the snapshot shows over its capability (a capability lowered since, running work
    above a quota) binds nothing, its reservations included, until it is back within it.
    """
    evicted = {e.task for e in decisions.evictions}
    used: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    grew: dict[str, set[str]] = defaultdict(set)
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
        amounts = {res: v for res, v in t.request.items() if res != PODS}
        g = t.gpu_request
        if g is not None:
            amounts[GPU] = queue_gpu_charge(g.count, g.milli)
        new = t.name in placed
        queue = snapshot.job(t.job).queue
        for q in ancestors(queue):
            for res, amount in amounts.items():
                used[q][res] += amount
                if new and amount > 0:
                    grew[q].add(res)
    for q in sorted(grew):
        # cpu / memory at or below zero read as unlimited (the flat reading), so a
        # hierarchical zero is not checked here.
        cap = snapshot.queue(q).capability_limits(flat=True)
        for res in sorted(grew[q]):
            limit = cap.get(res)
            if limit is not None and used[q][res] > limit:
                raise InvariantViolation(
                    f"queue {q!r}: {res} {used[q][res]} over its capability {limit}"
                )


def _leaves(snapshot: Snapshot) -> dict[str, frozenset[str]]:
    """Hypernode name → the node names under it (the snapshot guarantees a tree)."""
    out: dict[str, frozenset[str]] = {}

    def leaves(name: str) -> frozenset[str]:
        if name not in out:
            h = snapshot.hypernodes[snapshot.hypernode_index[name]]
            found: set[str] = set()
            for m in h.members:
                found |= leaves(m) if m in snapshot.hypernode_index else {m}
            out[name] = frozenset(found)
        return out[name]

    for h in sorted(snapshot.hypernodes, key=lambda h: h.tier):
        leaves(h.name)
    return out


def check_topology(snapshot: Snapshot, decisions: Decisions) -> None:
    """A job with a *hard* network topology that gets binds or reservations ends with all its
    placed tasks (Bound, Running and Pipelined ones not evicted, plus the new ones) under one
    hypernode of tier ≤ ``highest_tier_allowed``.

    As in Volcano, a cluster-wide domain sits one tier above the highest hypernode tier, so an
    allowed tier at or above it (or no allowed tier at all) constrains nothing; a cluster
    without hypernodes constrains nothing. Soft mode is a preference, never checked.
    """
    placed: dict[str, set[str]] = defaultdict(set)
    for items in (decisions.binds, decisions.pipelined):
        for d in items:
            placed[_job_of(snapshot, d.task)].add(d.node)
    if not placed:
        return
    top_tier = max((h.tier for h in snapshot.hypernodes), default=0) + 1
    evicted = {e.task for e in decisions.evictions}
    moved = {b.task for b in decisions.binds} | {p.task for p in decisions.pipelined}
    leaves: dict[str, frozenset[str]] | None = None
    for name in sorted(placed):
        job = snapshot.job(name)
        topo = job.network_topology
        if topo is None or topo.mode is not TopologyMode.HARD:
            continue
        allowed = topo.highest_tier_allowed
        if allowed is None or allowed >= top_tier:
            continue
        used = set(placed[name])
        for t in snapshot.tasks_of(name):
            if (
                t.node is not None
                and t.phase in (TaskPhase.BOUND, TaskPhase.RUNNING, TaskPhase.PIPELINED)
                and t.name not in evicted
                and t.name not in moved
            ):
                used.add(t.node)
        if leaves is None:
            leaves = _leaves(snapshot)
        if not any(h.tier <= allowed and used <= leaves[h.name] for h in snapshot.hypernodes):
            raise InvariantViolation(
                f"job {name!r}: hard network topology broken: nodes {sorted(used)} are not "
                f"all under one hypernode of tier <= {allowed}"
            )


def check_evictions(snapshot: Snapshot, decisions: Decisions) -> None:
    """Every eviction names its preemptor, a job of the snapshot that gets pipelined tasks in
    the same decisions (the victims' resources are being released for it): nothing is
    evicted for nobody."""
    pipelined_jobs = {_job_of(snapshot, p.task) for p in decisions.pipelined}
    for e in decisions.evictions:
        victim_job = _job_of(snapshot, e.task)
        if not e.preemptor:
            raise InvariantViolation(
                f"task {e.task!r} (job {victim_job!r}): evicted without a preemptor"
            )
        if e.preemptor not in snapshot.job_index:
            raise InvariantViolation(
                f"task {e.task!r} (job {victim_job!r}): evicted for unknown job {e.preemptor!r}"
            )
        if e.preemptor not in pipelined_jobs:
            raise InvariantViolation(
                f"task {e.task!r} (job {victim_job!r}): evicted for job {e.preemptor!r}, "
                "which got no pipelined tasks"
            )


def check_consolidation(snapshot: Snapshot, decisions: Decisions) -> None:
    """Every consolidation eviction (reason starting ``consolidation``) has a reservation for
    the moved task on another node in the same decisions, and breaks no disruption budget:
    walking the evictions in order, a budget a consolidation eviction hits still has at least
    its desired healthy count (:func:`gangsched.session.rules.disruption.desired_count`; healthy =
    Running
    or Bound in the snapshot and not evicted so far)."""
    reserved = {p.task: p.node for p in decisions.pipelined}
    covered: list[frozenset[str]] = []
    healthy: list[int] = []
    desired: list[int] = []
    for b in snapshot.disruption_budgets:
        jobs = set(b.jobs)
        names = frozenset(t.name for t in snapshot.tasks if t.job in jobs or t.name in b.tasks)
        live = [snapshot.task(n) for n in names]
        expected = sum(1 for t in live if t.phase not in (TaskPhase.SUCCEEDED, TaskPhase.FAILED))
        covered.append(names)
        healthy.append(sum(1 for t in live if t.phase in (TaskPhase.RUNNING, TaskPhase.BOUND)))
        desired.append(desired_count(b, expected))
    for e in decisions.evictions:
        task = snapshot.task_index.get(e.task)
        if task is None:
            raise InvariantViolation(f"eviction of unknown task {e.task!r}")
        phase = snapshot.tasks[task].phase
        hit = [k for k, names in enumerate(covered) if e.task in names]
        if phase in (TaskPhase.RUNNING, TaskPhase.BOUND):
            for k in hit:
                healthy[k] -= 1
        if not e.reason.startswith("consolidation"):
            continue
        node = reserved.get(e.task)
        if node is None:
            raise InvariantViolation(
                f"task {e.task!r}: moved by consolidation without a reservation elsewhere"
            )
        if node == snapshot.tasks[task].node:
            raise InvariantViolation(f"task {e.task!r}: moved onto the node it leaves")
        for k in hit:
            if healthy[k] < desired[k]:
                name = snapshot.disruption_budgets[k].name
                raise InvariantViolation(
                    f"task {e.task!r}: consolidation breaks disruption budget {name!r} "
                    f"({healthy[k]} healthy, {desired[k]} desired)"
                )


def check_schedulable_nodes(snapshot: Snapshot, decisions: Decisions) -> None:
    """Nothing new is bound or reserved on a node marked unschedulable (cordoned)."""
    for kind, items in (("bound", decisions.binds), ("pipelined", decisions.pipelined)):
        for d in items:
            index = snapshot.node_index.get(d.node)
            if index is not None and snapshot.nodes[index].unschedulable:
                raise InvariantViolation(
                    f"task {d.task!r}: {kind} to unschedulable node {d.node!r}"
                )


def check_node_affinity(snapshot: Snapshot, decisions: Decisions) -> None:
    """Nothing new is bound or reserved on a node its task's required node affinity keeps
    out (no required term matches the node's labels and name)."""
    for kind, items in (("bound", decisions.binds), ("pipelined", decisions.pipelined)):
        for d in items:
            t = snapshot.task_index.get(d.task)
            n = snapshot.node_index.get(d.node)
            if t is None or n is None:
                continue
            affinity = snapshot.tasks[t].node_affinity
            node = snapshot.nodes[n]
            if affinity is not None and not affinity.allows(node.name, node.labels):
                raise InvariantViolation(
                    f"task {d.task!r}: {kind} to node {d.node!r}, which its node affinity "
                    f"keeps out ({affinity.describe_required()})"
                )


_HOSTNAME = "kubernetes.io/hostname"


def _domain_reader(snapshot: Snapshot) -> Callable[[Node, str], str | None]:
    """A node's value of a topology key (the node's name for ``kubernetes.io/hostname`` when
    no node carries that label)."""
    named = any(_HOSTNAME in n.labels for n in snapshot.nodes)

    def read(node: Node, key: str) -> str | None:
        if key == _HOSTNAME and not named:
            return node.name
        return node.labels.get(key)

    return read


def check_pod_constraints(
    snapshot: Snapshot, decisions: Decisions, *, affinity: bool = True, spread: bool = True
) -> None:
    """Every task newly bound or reserved meets, in the cluster the decisions leave (the
    snapshot's pods on nodes, releasing and evicted ones included, plus the decisions'
    placements):

    * its required pod anti-affinity: no other pod its term matches in the node's domain;
    * the required anti-affinity of every other pod: none whose term matches it shares that
      term's domain;
    * its required pod affinity: the node carries every term's key, and each domain holds
      another pod matching all the terms — or the task matches them itself (the first of a
      group);
    * (``spread``) its ``DoNotSchedule`` spread constraints, when the decisions evict
      nothing: for each domain holding one of the group's new pods (tasks with the same
      constraint, namespace and node filters), the matching pods there, less the new ones
      placed there without the constraint, exceed the emptiest eligible domain by at most
      ``max_skew``. Pods placed one after another meet this whatever their order.
    """
    read = _domain_reader(snapshot)
    nodes = {n.name: n for n in snapshot.nodes}
    where: dict[str, str] = {}
    for t in snapshot.tasks:
        if t.node is not None and t.phase in OCCUPYING_PHASES | {TaskPhase.PIPELINED}:
            where[t.name] = t.node
    new: dict[str, str] = {}
    for items in (decisions.binds, decisions.pipelined):
        for d in items:
            at = snapshot.task_index.get(d.task)
            if at is None or d.node not in nodes:
                continue
            t = snapshot.tasks[at]
            if t.phase is TaskPhase.PENDING:
                new[d.task] = d.node
            where[d.task] = d.node
    tasks = {t.name: t for t in snapshot.tasks}
    placed = [(tasks[name], nodes[node]) for name, node in where.items() if name in tasks]
    if affinity:
        for name, node_name in sorted(new.items()):
            _check_pod_affinity(tasks[name], nodes[node_name], placed, read)
    if spread and not decisions.evictions:
        releasing = {t.name for t in snapshot.tasks if t.phase is TaskPhase.RELEASING}
        _check_spread(snapshot, new, placed, releasing, read)


def _check_pod_affinity(
    p: Task, node: Node, placed: list[tuple[Task, Node]], read: Callable[[Node, str], str | None]
) -> None:
    others = [(q, m) for q, m in placed if q.name != p.name]
    if p.pod_anti_affinity is not None:
        for term in p.pod_anti_affinity.required:
            value = read(node, term.topology_key)
            if value is None:
                continue
            spaces = term.namespaces_for(p.namespace)
            for q, m in others:
                if read(m, term.topology_key) == value and term.matches(
                    spaces, q.namespace, q.pod_labels
                ):
                    raise InvariantViolation(
                        f"task {p.name!r} on node {node.name!r}: anti-affinity with pod "
                        f"{q.name!r} on topology {term.topology_key}={value}"
                    )
    for q, m in others:
        if q.pod_anti_affinity is None:
            continue
        for term in q.pod_anti_affinity.required:
            value = read(m, term.topology_key)
            if value is None or read(node, term.topology_key) != value:
                continue
            if term.matches(term.namespaces_for(q.namespace), p.namespace, p.pod_labels):
                raise InvariantViolation(
                    f"task {p.name!r} on node {node.name!r}: pod {q.name!r}'s anti-affinity "
                    f"covers topology {term.topology_key}={value}"
                )
    if p.pod_affinity is None or not p.pod_affinity.required:
        return
    terms = p.pod_affinity.required
    resolved = [(t, t.namespaces_for(p.namespace)) for t in terms]
    for t, _ in resolved:
        if read(node, t.topology_key) is None:
            raise InvariantViolation(
                f"task {p.name!r} on node {node.name!r}: pod affinity needs topology key "
                f"{t.topology_key!r}, which the node lacks"
            )
    if all(t.matches(ns, p.namespace, p.pod_labels) for t, ns in resolved):
        return
    friends = [
        (q, m)
        for q, m in others
        if all(t.matches(ns, q.namespace, q.pod_labels) for t, ns in resolved)
    ]
    for t, _ in resolved:
        value = read(node, t.topology_key)
        if not any(read(m, t.topology_key) == value for _, m in friends):
            raise InvariantViolation(
                f"task {p.name!r} on node {node.name!r}: pod affinity: no pod matching "
                f"{'no pod' if t.label_selector is None else t.label_selector.describe()} "
                f"on topology {t.topology_key}={value}"
            )


def _check_spread(
    snapshot: Snapshot,
    new: Mapping[str, str],
    placed: list[tuple[Task, Node]],
    releasing: Set[str],
    read: Callable[[Node, str], str | None],
) -> None:
    tasks = {t.name: t for t in snapshot.tasks}
    groups: dict[tuple[object, ...], list[str]] = defaultdict(list)
    what: dict[tuple[object, ...], tuple[str, TopologySpreadConstraint, tuple[str, ...]]] = {}
    for name in sorted(new):
        p = tasks[name]
        hard = tuple(c for c in p.topology_spread if c.hard)
        for c in hard:
            keys = tuple(sorted({h.topology_key for h in hard}))
            group: tuple[object, ...] = (p.namespace, c, p.node_selector, p.node_affinity, keys)
            groups[group].append(name)
            what[group] = (p.namespace, c, keys)
    by_node = {n.name: n for n in snapshot.nodes}
    for group, members in groups.items():
        ns, c, keys = what[group]
        first = tasks[members[0]]

        def eligible(n: Node, first: Task = first, keys: tuple[str, ...] = keys) -> bool:
            if any(n.labels.get(k) != v for k, v in first.node_selector.items()):
                return False
            if first.node_affinity is not None and not first.node_affinity.allows(n.name, n.labels):
                return False
            return all(read(n, k) is not None for k in keys)

        domains = {
            v for n in snapshot.nodes if eligible(n) and (v := read(n, c.topology_key)) is not None
        }
        if not domains:
            continue
        count = dict.fromkeys(domains, 0)
        loose = dict.fromkeys(domains, 0)
        mine = set(members)
        for q, m in placed:
            if q.name in releasing or not eligible(m):
                continue
            v = read(m, c.topology_key)
            if v is None or not c.matches(q.namespace, ns, q.pod_labels):
                continue
            count[v] += 1
            if q.name in new and q.name not in mine:
                loose[v] += 1
        low = min(count.values())
        if c.min_domains is not None and len(domains) < c.min_domains:
            low = 0
        for name in members:
            v = read(by_node[new[name]], c.topology_key)
            if v is None:
                raise InvariantViolation(
                    f"task {name!r}: topology spread needs key {c.topology_key!r}, which node "
                    f"{new[name]!r} lacks"
                )
            skew = count.get(v, 0) - loose.get(v, 0) - low
            if skew > c.max_skew:
                raise InvariantViolation(
                    f"task {name!r} on node {new[name]!r}: topology spread: "
                    f"{c.topology_key} skew {skew} > maxSkew {c.max_skew}"
                )


def check_node_groups(snapshot: Snapshot, decisions: Decisions, config: Config) -> None:
    """Under the ``nodegroup`` plugin, nothing new lands on a node whose group
    (``volcano.sh/nodegroup-name``) the task's queue may not use: Volcano's rule, restated
    here over the records (a node without a group only for a queue without an affinity and
    ``strict: false``; a group in the required or preferred list and not anti-required, or
    anti-preferred). With ``enableHierarchy`` a queue without an affinity takes its nearest
    ancestor's (a queue without a parent hangs under ``root``)."""
    option = config.plugin("nodegroup")
    if option is None:
        return
    strict = arg_bool(option.arguments, "strict", True, plugin="nodegroup")
    queues = {q.name: q for q in snapshot.queues}

    def affinity(name: str) -> NodeGroupAffinity | None:
        seen: set[str] = set()
        while name not in seen:
            seen.add(name)
            q = queues[name]
            if q.node_group_affinity is not None or not option.hierarchy:
                return q.node_group_affinity
            parent = q.parent if q.parent is not None else ("root" if name != "root" else None)
            if parent is None or parent not in queues:
                return None
            name = parent
        return None

    for kind, items in (("bound", decisions.binds), ("pipelined", decisions.pipelined)):
        for d in items:
            t = snapshot.task_index.get(d.task)
            n = snapshot.node_index.get(d.node)
            if t is None or n is None:
                continue
            job = snapshot.jobs[snapshot.job_index[snapshot.tasks[t].job]]
            aff = affinity(job.queue)
            group = snapshot.nodes[n].labels.get("volcano.sh/nodegroup-name")
            lists = (
                (aff.required, aff.preferred, aff.anti_required, aff.anti_preferred)
                if aff is not None
                else ((), (), (), ())
            )
            unset = not any(lists)
            if group is None:
                ok = unset and not strict
            elif unset:
                ok = False
            else:
                req, pref, anti_req, anti_pref = lists
                ok = ((group in req or group in pref) and group not in anti_req) or (
                    group in anti_pref
                )
            if not ok:
                raise InvariantViolation(
                    f"task {d.task!r}: {kind} to node {d.node!r} (node group {group!r}), "
                    f"which queue {job.queue!r} may not use"
                )


def _node_affinity_in_force(config: Config) -> bool:
    """Whether ``config`` runs the predicates plugin with its node-affinity filter on."""
    for tier in config.tiers:
        for p in tier.plugins:
            if p.name == "predicates" and p.enabled("predicate"):
                return arg_bool(
                    p.arguments, "predicate.NodeAffinityEnable", True, plugin="predicates"
                )
    return False


def _pod_filters_in_force(config: Config) -> tuple[bool, bool]:
    """Whether ``config`` runs the predicates plugin with its pod-affinity and its
    topology-spread filters on."""
    for tier in config.tiers:
        for p in tier.plugins:
            if p.name == "predicates" and p.enabled("predicate"):
                return (
                    arg_bool(p.arguments, "predicate.PodAffinityEnable", True, plugin="predicates"),
                    arg_bool(
                        p.arguments, "predicate.PodTopologySpreadEnable", True, plugin="predicates"
                    ),
                )
    return False, False


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
    """``schedule_fn`` gives byte-identical decisions on the same snapshot (compared as
    sorted-key JSON of ``to_dict()``); returns the first run's decisions."""
    first = schedule_fn(snapshot)
    text = json.dumps(first.to_dict(), sort_keys=True)
    for run in range(1, runs):
        again = json.dumps(schedule_fn(snapshot).to_dict(), sort_keys=True)
        if again != text:
            raise InvariantViolation(
                f"same snapshot, different decisions (run 1 and run {run + 1} differ)"
            )
    return first


def check_snapshot_unmutated(before: Mapping[str, object], snapshot: Snapshot) -> None:
    """``snapshot.to_dict()`` still equals ``before`` (taken before scheduling)."""
    after = snapshot.to_dict()
    if after != before:
        changed = sorted(k for k in after if after[k] != before.get(k))
        raise InvariantViolation(f"the scheduler mutated its input snapshot ({', '.join(changed)})")


def find_cycle(edges: Mapping[str, Set[str]]) -> list[str] | None:
    """A directed cycle in ``edges`` (node → successors) as ``[a, b, ..., a]``, or ``None``.

    Iterative depth-first search, nodes and successors visited in sorted order, so the cycle
    reported is deterministic.
    """
    done: set[str] = set()
    for root in sorted(edges):
        if root in done:
            continue
        path: list[str] = [root]
        on_path = {root}
        stack: list[Iterator[str]] = [iter(sorted(edges.get(root, ())))]
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                stack.pop()
                done.add(path[-1])
                on_path.discard(path.pop())
                continue
            if nxt in on_path:
                return [*path[path.index(nxt) :], nxt]
            if nxt in done:
                continue
            path.append(nxt)
            on_path.add(nxt)
            stack.append(iter(sorted(edges.get(nxt, ()))))
    return None


#: Every snapshot/decisions checker, in the order :func:`check_all` runs them.
ALL_CHECKS: tuple[Check, ...] = (
    check_known_objects,
    check_capacity,
    check_gang_atomicity,
    check_queue_capability,
    check_topology,
    check_evictions,
    check_consolidation,
    check_schedulable_nodes,
    check_node_affinity,
    check_reasons,
)


def check_all(snapshot: Snapshot, decisions: Decisions, *, hierarchical: bool = True) -> None:
    """Run every snapshot/decisions invariant (:data:`ALL_CHECKS`); ``hierarchical`` is passed
    to :func:`check_queue_capability`."""
    for check in ALL_CHECKS:
        if check is check_queue_capability:
            check_queue_capability(snapshot, decisions, hierarchical=hierarchical)
        else:
            check(snapshot, decisions)


def check_cycle(snapshot: Snapshot, decisions: Decisions, config: Config) -> None:
    """:func:`check_all` for a cycle run under ``config``: only the rules some configured
    plugin enforces. Gang atomicity needs ``gang``; queue capability needs ``proportion`` or
    ``capacity``, and binds along every ancestor only under hierarchical ``capacity``; node
    affinity needs ``predicates`` with its node-affinity filter; node groups
    (:func:`check_node_groups`) need ``nodegroup``."""
    rules = rules_in_force(config)
    check_node_groups(snapshot, decisions, config)
    affinity, spread = _pod_filters_in_force(config)
    if affinity or spread:
        check_pod_constraints(snapshot, decisions, affinity=affinity, spread=spread)
    for check in ALL_CHECKS:
        if check is check_node_affinity and not _node_affinity_in_force(config):
            continue
        if check is check_gang_atomicity and not rules.gang:
            continue
        if check is check_queue_capability:
            if rules.capability:
                check_queue_capability(snapshot, decisions, hierarchical=rules.hierarchical)
            continue
        check(snapshot, decisions)
