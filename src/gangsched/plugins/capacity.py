"""capacity: explicit per-queue quotas, flat or as a tree (Volcano's capacity plugin).

Theory of operation
-------------------
Each queue states ``deserved`` (its fair amount), ``guarantee`` (reserved for it) and
``capability`` (a hard ceiling). A queue may *borrow* idle resources beyond its deserved up to
its ``realCapability``; borrowed resources are what reclaim takes back.

Flat (default): ``realCapability = min(max(total − Σ all guarantees, 0) + guarantee,
capability)`` and ``deserved = max(min(deserved, realCapability), guarantee)``. Unset
capability dimensions (and cpu / memory at or below zero) are unlimited.

Hierarchical (``enableHierarchy``): queues form a tree through ``parent``; the queue named
``root`` is the root when it exists (a virtual, unlimited root otherwise) and a queue without a
parent hangs under it.

* capability: the root's unset dimensions are unlimited; every other queue inherits each
  dimension it leaves unset from its parent;
* guarantee / deserved: ``deserved = max(deserved, guarantee)``; the root's guarantee and
  deserved are the sums over its children;
* ``realCapability`` of a child = ``min(max(parent.realCapability − Σ guarantees of the
  parent's children, 0) + own guarantee, own capability)`` — the parent's room less what the
  siblings are guaranteed; the root's is its capability;
* allocated, inqueue and elastic of an inner queue are the sums over its subtree;
* only leaf queues hold jobs: a job in an inner queue is neither admitted nor allocated;
* a task is allocatable when it fits under ``realCapability`` at its queue **and every
  ancestor**, so a child never exceeds its parent's capability even when its siblings are idle,
  and never eats into a sibling's guarantee;
* queue order: leaves first; two leaves are compared at their lowest common ancestor, through
  the two children of it that lead to them (share, then queues with a deserved amount first,
  then name).

Lending limits (Kueue's ``lendingLimit``, queue field ``lending_limit``): a queue lends at most
that much of its unused deserved share to the other queues. Wherever the formulas above
subtract the guarantees of the *other* queues (siblings, with hierarchy) and add a queue's own,
they use the amount the queue *keeps*: ``max(guarantee, deserved − lending_limit)`` on each
resource its ``lending_limit`` names (its guarantee elsewhere). So the others' realCapability
leaves room for what the queue does not lend, and the queue itself may still use all of it.
Reclaim takes back what was lent through the usual victim rules (a borrower is above its
deserved amount).

Share = max over the dimensions of ``deserved`` of allocated / deserved, and 1 for a queue
with no deserved amount (a best-effort queue goes after every queue still below its share).
The plugin has no ``overused`` point, as in Volcano.

As victims (``reclaimable``), candidates are walked in victim order (``victim_order`` key,
then the newest job first, then job and task name — the reclaim action's ranking), each
queue's allocation lowered by the victims already kept. A task is kept when

1. it holds a resource the reclaiming job asks for (cpu, memory, GPU, ...; pods do not count);
2. its removal keeps its queue at or above its ``guarantee`` on every resource it holds;
3. its queue holds more than ``deserved`` on one of the task's resources that the queue has a
   deserved amount of — or the queue deserves none of the task's resources at all;
4. with hierarchy and ``ancestorReclaimLevel: L`` (> 0), for each level 1..L (1 = parent):
   the victim queue's ancestor at that level, unless it is the root or also the reclaimer's
   ancestor at that level, passes rule 3 too (its allocation lowered by the kept victims).
   And a victim kept by the "deserves none" branch of rule 3 is dropped when its queue shares
   a non-root ancestor within L levels with the reclaimer and the reclaimer's queue deserves
   none of the resources its job asks for (no real contention inside that subtree).

The reclaim action adds its own rule after the move (see ``actions/reclaim.py``): no claimed
task may be *exposed* (``exposed``), i.e. selectable by rules 3 and 4 for some other leaf queue
(rules 1 and 2, and the reclaimer's own request in rule 4, are left out: that only makes the
check stricter); rule 3 is what makes only borrowed resources reclaimable.

As a reclaimer (``preemptive``, Volcano's ``PreemptiveFn`` on the claim): the queue is Open;
with the claim added it stays within its ``realCapability`` on every requested resource; and it
is at or below ``deserved`` (within 0.1) on *at least one* requested resource, skipping the
requested resources where it neither deserves nor would hold anything — or, with hierarchy and
``ancestorReclaimLevel: L``, one of its ancestors at levels 1..L (not the root) is, with the
claim added to it.
``victim_order``: tasks of the queue with the larger share first; with hierarchy, first the
larger share of the victim's top-level subtree (child of the root), then of its own queue.

Differences from Volcano: a job in an inner queue blocks only itself (Volcano stops the whole
plugin); ties in the hierarchical order go to the queue name at the lowest common ancestor
(Volcano falls through to the next plugin); a root queue with a partial capability leaves the
other dimensions unlimited (Volcano leaves them at zero). As victims: the reclaimer is a job,
so "the resources it asks for" are those of its pending tasks (Volcano: of one task); the
guarantee floor is checked on the resources the victim holds (Volcano: on every resource, so a
queue below its guarantee on one resource protects all of its tasks); ``victim_order`` cannot
prefer queues far from the reclaimer in the tree (the point is not told the reclaimer), and
``preemptive`` judges the whole claim at once (Volcano: task by task, the queue's allocation
growing as they are pipelined, which comes to the same for the last task).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from gangsched._types import BOOL, F64, I64
from gangsched.errors import ConfigError, SnapshotError
from gangsched.framework.combine import Vote
from gangsched.model import QueueState
from gangsched.model.snapshot import ROOT_QUEUE as ROOT
from gangsched.plugins._capacity_reclaim import CapacityReclaim
from gangsched.plugins._queue_amounts import (
    EPS,
    SLACK,
    capability_matrix,
    fits,
    names_of,
    resource_matrix,
)
from gangsched.plugins._queue_reasons import over_limit
from gangsched.session.arrays import TaskTemplate
from gangsched.session.rules.fairshare import QueueShares, enqueue_need, job_figures
from gangsched.units import PODS, cluster_total, to_amounts

if TYPE_CHECKING:
    from gangsched.session.core import Session

__all__ = ["ROOT", "CapacityPlugin"]


def _kept(ssn: Session, guarantee: F64, deserved: F64) -> F64:
    """What each queue keeps from the others: ``max(guarantee, deserved − lending_limit)`` on
    the resources its ``lending_limit`` names, its guarantee elsewhere (the lending rule's one
    owner). Rows are the snapshot's queues."""
    kept = guarantee.copy()
    for q, queue in enumerate(ssn.snapshot.queues):
        if queue.lending_limit is None:
            continue
        for res, amount in queue.lending_limit.items():
            if res == PODS:
                continue
            c = ssn.arrays.spec.index(res)
            kept[q, c] = max(guarantee[q, c], deserved[q, c] - float(amount))
    return kept


def reclaim_level(arguments: Mapping[str, object]) -> int:
    """``ancestorReclaimLevel``: a non-negative integer (0, the default, checks no ancestor)."""
    raw = arguments.get("ancestorReclaimLevel", 0)
    if isinstance(raw, str) and raw.strip().isdigit():
        raw = int(raw.strip())
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
        raise ConfigError(
            f"expected a non-negative integer, got {raw!r}",
            kind="plugin",
            name="capacity",
            field="ancestorReclaimLevel",
        )
    return raw


class CapacityPlugin(CapacityReclaim, QueueShares):
    """Queue quotas with optional hierarchy; see the module docstring."""

    name = "capacity"
    known_arguments: tuple[str, ...] = (
        "ancestorReclaimLevel",
        "capacity.DRAConsumableCapacityEnable",
        "capacity.DynamicResourceAllocationEnable",
    )

    def __init__(self, arguments: Mapping[str, object]) -> None:
        QueueShares.__init__(self, arguments)  # the arrays proportion keeps too
        self.reclaim_level = reclaim_level(arguments)
        self.hierarchy = False
        # Tree nodes are the queues, then (if the snapshot has no queue named root) a virtual
        # root at index n_queues. In flat mode every queue is its own root.
        self.n_queues = 0
        self.root = -1
        self.parent: I64 = np.zeros(0, dtype=np.int64)
        self.paths: list[I64] = []  # node -> itself and its ancestors, leaf first
        self.leaf: BOOL = np.zeros(0, dtype=np.bool_)
        self.names: list[str] = []
        self.guarantee: F64 = np.zeros((0, 0))
        self.capability: F64 = np.zeros((0, 0))
        self.allocated: F64 = np.zeros((0, 0))
        self._seen: F64 = np.zeros((0, 0))
        self._best_effort: BOOL = np.zeros(0, dtype=np.bool_)

    # ------------------------------------------------------------------ opening

    def on_session_open(self, ssn: Session) -> None:
        option = ssn.config.plugin(self.name)
        self.hierarchy = bool(option is not None and option.hierarchy)
        a = ssn.arrays
        self._pods = pods = a.spec.index(PODS)
        self.n_queues = n_q = len(ssn.snapshot.queues)
        total = cluster_total(a.allocatable, pods)
        request, inqueue, elastic, _ = job_figures(ssn)
        guarantee = resource_matrix(ssn, "guarantee")
        deserved = resource_matrix(ssn, "deserved")
        guarantee[:, pods] = 0.0
        deserved[:, pods] = 0.0
        alloc = ssn.queue_allocated.astype(np.float64)
        alloc[:, pods] = 0.0
        self._seen = ssn.queue_allocated.astype(np.float64)
        self.names = [q.name for q in ssn.snapshot.queues]
        if self.hierarchy:
            self._open_tree(ssn, guarantee, deserved)
        else:
            capability, _ = capability_matrix(ssn, flat=True)
            capability[:, pods] = np.inf
            kept = _kept(ssn, guarantee, deserved)
            real = np.maximum(total - kept.sum(axis=0), 0.0) + kept
            self.real_capability = np.minimum(real, capability)
            self.capability = capability
            self.guarantee = guarantee
            self.deserved = np.maximum(np.minimum(deserved, self.real_capability), guarantee)
            self.parent = np.full(n_q, -1, dtype=np.int64)
            self.paths = [np.array([q], dtype=np.int64) for q in range(n_q)]
            self.leaf = np.ones(n_q, dtype=np.bool_)
        n_nodes = self.parent.size
        self.allocated = self._subtree_sum(alloc, n_nodes)
        self.inqueue = self._subtree_sum(inqueue, n_nodes)
        self.elastic = self._subtree_sum(elastic, n_nodes)
        self.request = self._subtree_sum(request, n_nodes)
        has = self.deserved >= EPS
        has[:, pods] = False
        self._inv = np.where(has, 1.0 / np.where(has, self.deserved, 1.0), 0.0)
        self._best_effort = ~np.any(has, axis=1)
        self.shares = self._share_rows(np.arange(n_nodes))
        self.deserved_amounts = to_amounts(self.deserved[:n_q])

    def _open_tree(self, ssn: Session, guarantee: F64, deserved: F64) -> None:
        snap = ssn.snapshot
        n_q, n_r = len(snap.queues), len(ssn.arrays.spec)
        found = snap.queue_index.get(ROOT)
        self.root = root = n_q if found is None else int(found)
        n_nodes = n_q + (1 if found is None else 0)
        if found is not None and snap.queues[root].parent is not None:
            raise SnapshotError(
                "the root of the queue hierarchy cannot have a parent",
                kind="queue",
                name=ROOT,
                field="parent",
            )
        parent = np.full(n_nodes, -1, dtype=np.int64)
        for q, queue in enumerate(snap.queues):
            if q != root:
                parent[q] = root if queue.parent is None else snap.queue_index[queue.parent]
        children: list[list[int]] = [[] for _ in range(n_nodes)]
        for q in range(n_nodes):
            if parent[q] >= 0:
                children[int(parent[q])].append(q)
        order = [root]  # top-down
        for node in order:
            order.extend(children[node])
        cap_spec, given = capability_matrix(ssn, flat=False)
        cap = np.full((n_nodes, n_r), np.inf)
        cap[:n_q] = cap_spec
        given_all = np.zeros((n_nodes, n_r), dtype=np.bool_)
        given_all[:n_q] = given
        given_all[:, self._pods] = False
        g = np.zeros((n_nodes, n_r))
        g[:n_q] = guarantee
        d = np.zeros((n_nodes, n_r))
        d[:n_q] = np.maximum(deserved, guarantee)
        g[root] = g[children[root]].sum(axis=0)
        d[root] = d[children[root]].sum(axis=0)
        kept = g.copy()  # what a queue keeps from its siblings (lending limits)
        kept[:n_q] = _kept(ssn, g[:n_q], d[:n_q])
        real = np.full((n_nodes, n_r), np.inf)
        real[root] = np.where(given_all[root], cap[root], np.inf)
        cap[root] = real[root]
        for node in order[1:]:
            p = int(parent[node])
            cap[node] = np.where(given_all[node], cap[node], cap[p])
            room = np.maximum(real[p] - kept[children[p]].sum(axis=0), 0.0) + kept[node]
            real[node] = np.minimum(room, cap[node])
        self.parent = parent
        self.capability, self.real_capability = cap, real
        self.guarantee, self.deserved = g, d
        self.leaf = np.array([not children[q] for q in range(n_nodes)], dtype=np.bool_)
        paths: list[I64] = []
        for q in range(n_nodes):
            chain = [q]
            while parent[chain[-1]] >= 0:
                chain.append(int(parent[chain[-1]]))
            paths.append(np.array(chain, dtype=np.int64))
        self.paths = paths
        if found is None:
            self.names.append(ROOT)

    def _subtree_sum(self, per_queue: F64, n_nodes: int) -> F64:
        out = np.zeros((n_nodes, per_queue.shape[1]))
        for q in range(self.n_queues):
            out[self.paths[q]] += per_queue[q]
        return out

    # ------------------------------------------------------------------ shares

    def _share_rows(self, rows: npt.NDArray[Any]) -> F64:
        s = (self.allocated[rows] * self._inv[rows]).max(axis=-1, initial=0.0)
        out: F64 = np.where(self._best_effort[rows], 1.0, s)
        return out

    def queue_subtree_sum(self, ssn: Session, per_queue: I64) -> I64:
        """Amounts summed over each queue's subtree under a hierarchy (only leaves hold jobs,
        so an inner queue holds what its leaves hold); unchanged without one."""
        if not self.hierarchy:
            return per_queue
        n_q = per_queue.shape[0]
        out = np.zeros_like(per_queue)
        for q, path in enumerate(self.paths[:n_q]):
            up = path[path < n_q]  # the virtual root, when there is one, has no status
            out[up] += per_queue[q]
        return out

    def _refresh(self, ssn: Session, task: int) -> None:
        q = int(ssn.job_queue[ssn.task_job[task]])
        now = ssn.queue_allocated[q].astype(np.float64)
        delta = now - self._seen[q]
        delta[self._pods] = 0.0
        self._seen[q] = now
        path = self.paths[q]
        self.allocated[path] += delta
        self.shares[path] = self._share_rows(path)

    def queue_overused(self, ssn: Session, queue: int) -> bool:
        """For status, as Volcano's metric: share above 1."""
        return bool(self.shares[queue] > 1.0)

    def on_allocate(self, ssn: Session, task: int) -> None:
        self._refresh(ssn, task)

    def on_deallocate(self, ssn: Session, task: int) -> None:
        self._refresh(ssn, task)

    def _level_key(self, node: int) -> tuple[Any, ...]:
        return (float(self.shares[node]), bool(self._best_effort[node]), self.names[node])

    # ------------------------------------------------------------------ extension points

    def queue_order(self, ssn: Session, queue: int) -> tuple[Any, ...]:
        prio = -ssn.snapshot.queues[queue].priority
        if not self.hierarchy:
            return (prio, float(self.shares[queue]), bool(self._best_effort[queue]))
        if not self.leaf[queue]:
            return (prio, 1, *self._level_key(queue))
        key: tuple[Any, ...] = (prio, 0)
        for node in self.paths[queue][::-1]:
            if node != self.root:
                key += self._level_key(int(node))
        return key

    def _inner_queue(self, queue: int) -> bool:
        return self.hierarchy and not bool(self.leaf[queue])

    def allocatable(self, ssn: Session, queue: int, tmpl: TaskTemplate) -> bool:
        if ssn.snapshot.queues[queue].state is not QueueState.OPEN or self._inner_queue(queue):
            return False
        dims = tmpl.request > 0
        dims[self._pods] = False
        path = self.paths[queue]
        after = self.allocated[path][:, dims] + tmpl.request[dims]
        return bool(np.all(after <= self.real_capability[path][:, dims] + SLACK))

    def allocatable_reason(self, ssn: Session, queue: int, tmpl: TaskTemplate) -> str | None:
        """Why :meth:`allocatable` refuses (None when it does not), in the words that follow
        "queue 'q' cannot take this task now:": the queue's state, an inner queue, or the
        first queue on the path up (the queue, then its ancestors) where a resource would pass
        its capability or realCapability (the parent's room less what the siblings are
        guaranteed), with the numbers."""
        rec = ssn.snapshot.queues[queue]
        if rec.state is not QueueState.OPEN:
            return f"the queue is {rec.state.value}"
        if self._inner_queue(queue):
            return "the queue has child queues; only leaf queues hold jobs"
        if self.allocatable(ssn, queue, tmpl):
            return None
        dims = tmpl.request > 0
        dims[self._pods] = False
        for node in self.paths[queue].tolist():
            real, cap = self.real_capability[node], self.capability[node]

            def ceiling(c: int, real: F64 = real, cap: F64 = cap) -> str:
                return "capability" if cap[c] <= real[c] else "realCapability"

            phrases = over_limit(
                ssn, self.allocated[node], tmpl.request, real, dims, ceiling, SLACK
            )
            if phrases:
                where = "" if node == queue else f"ancestor {self.names[node]!r}: "
                return where + "; ".join(phrases)
        return "over its realCapability"

    def job_enqueueable(self, ssn: Session, job: int) -> Vote:
        q = int(ssn.job_queue[job])
        queue = ssn.snapshot.queues[q]
        if self._inner_queue(q):
            ssn.note_job(
                job,
                "NotEnqueued",
                f"queue {queue.name!r} has child queues; only leaf queues hold jobs",
            )
            return Vote.REJECT
        got = enqueue_need(ssn, job, self._pods)
        if isinstance(got, Vote):
            return got
        # What the job may preempt is held in its own queue, so in every ancestor too.
        need, dims, freed = got
        for node in self.paths[q]:
            base = self.allocated[node] + self.inqueue[node] - self.elastic[node] - freed
            if not fits(base, need, self.real_capability[node], dims):
                over = dims & (base + need > self.real_capability[node] + SLACK)
                where = "" if node == q else f" (ancestor {self.names[node]!r})"
                ssn.note_job(
                    job,
                    "NotEnqueued",
                    f"queue {queue.name!r}{where} resource quota insufficient: "
                    f"{names_of(ssn, over)}",
                )
                return Vote.REJECT
        return Vote.PERMIT

    def job_enqueued(self, ssn: Session, job: int) -> None:
        rec = ssn.snapshot.jobs[job]
        if rec.min_resources is None:
            return
        need = ssn.vector(rec.min_resources).astype(np.float64)
        need[self._pods] = 0.0
        self.inqueue[self.paths[int(ssn.job_queue[job])]] += need
