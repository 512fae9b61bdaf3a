"""drf: dominant resource fairness between jobs, and hierarchical DRF between queues.

Theory of operation
-------------------
A job's *share* is ``max_r allocated_r / total_r`` over the cluster's resources (pods left
out). Job order: lower share first. Allocations made during the cycle count immediately
(``on_allocate`` / ``on_deallocate``), so gangs interleave fairly.

With ``enableHierarchy`` the plugin also orders queues by hierarchical DRF (Volcano's HDRF):

* the tree is the queue tree (``parent`` links; a queue named ``root``, or a virtual root when
  there is none); each queue node carries its ``weight``, and every job is a leaf (weight 1)
  under its queue. Only queues with jobs, and their ancestors, are in the tree;
* a job is *saturated* when it holds, on some resource it holds at all, as much as all its
  tasks request, or when it requests a resource the cluster has fully handed out;
* an inner node's allocation adds its children that hold something: saturated children as
  they are, the others scaled by ``mdr / share``, where ``mdr`` is the smallest dominant share
  among its unsaturated holding children (at most 1) — so a node's share measures how much its
  most modest active child could grow; a node is saturated when all its children are;
* queues are compared level by level from the root down: at the first level where their
  branches differ, an unsaturated branch goes first, then the lower ``share / weight``.

Each allocation updates the job's path to the root; when a resource becomes fully allocated (or
stops being so) every node is recomputed, one vectorized pass per tree level. Every walk of
the tree is a loop, never a recursion, so no depth of queue tree exhausts the stack.

As victims (``preemptable``): a task may go only if the preemptor's share, after adding the
requests of the tasks it still needs for its minimum, is at most the victim job's share after
removing that task and the job's candidates asked before it (within 1e-6), as Volcano's drf:
a job's candidates are taken away one after another, so only as many go as keep its share
at or above the preemptor's (Volcano's order is Go's map order; here the order asked).
``preemptable_by_group`` gives that answer for many groups of candidates (Volcano asks node
by node) in one pass, each group judged on its own.
``victim_order``: larger share first.

Differences from Volcano: the hierarchy comes from the queue tree instead of path annotations;
when two queues sit at different depths and tie down to the shallower one's depth, the
shallower goes first (Volcano calls it a tie).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from gangsched._types import BOOL, F64
from gangsched.model.snapshot import ROOT_QUEUE as ROOT
from gangsched.plugins._cluster_figures import cluster_figures
from gangsched.plugins._queue_amounts import EPS
from gangsched.session.core import PIPELINED_OR_READY, TaskState
from gangsched.units import PODS

if TYPE_CHECKING:
    from gangsched.session.core import Session

__all__ = ["DrfPlugin"]


class DrfPlugin:
    name = "drf"
    known_arguments: tuple[str, ...] = ()

    def __init__(self, arguments: Mapping[str, object]) -> None:
        self.arguments = arguments
        self.hierarchy = False
        self.shares: F64 = np.zeros(0)
        self._inv_total: F64 = np.zeros(0)
        self._total: F64 = np.zeros(0)
        self._tree: _Hdrf | None = None

    def on_session_open(self, ssn: Session) -> None:
        total, self._inv_total = cluster_figures(ssn)
        self._total = total
        # (each job's maximum over its few columns, taken over the transposed products: one
        # pass per column rather than one per job)
        products = np.ascontiguousarray((ssn.job_allocated * self._inv_total).T)
        self.shares = products.max(axis=0, initial=0.0)
        option = ssn.config.plugin(self.name)
        self.hierarchy = bool(option is not None and option.hierarchy)
        if self.hierarchy:
            self._tree = _Hdrf(ssn, total, self._inv_total)

    def share(self, ssn: Session, job: int) -> float:
        """The job's dominant share."""
        return float(self.shares[job])

    def _refresh(self, ssn: Session, task: int) -> None:
        j = int(ssn.task_job[task])
        self.shares[j] = float((ssn.job_allocated[j] * self._inv_total).max(initial=0.0))
        if self._tree is not None:
            self._tree.update_job(ssn, j)

    def on_allocate(self, ssn: Session, task: int) -> None:
        self._refresh(ssn, task)

    def on_deallocate(self, ssn: Session, task: int) -> None:
        self._refresh(ssn, task)

    def job_order(self, ssn: Session, job: int) -> tuple[Any, ...]:
        return (float(self.shares[job]),)

    def preemptable(
        self, ssn: Session, preemptor: int, candidates: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.int64]:
        keep = self.preemptable_by_group(ssn, preemptor, candidates, None)
        out: npt.NDArray[np.int64] = candidates[keep]
        return out

    def preemptable_by_group(
        self,
        ssn: Session,
        preemptor: int,
        candidates: npt.NDArray[np.int64],
        groups: npt.NDArray[np.int64] | None,
    ) -> BOOL:
        """:meth:`preemptable` asked about each group of ``candidates`` on its own
        (``groups``: the group of each; None: one group), all groups at once: whether each
        candidate is kept. A group's answer depends on its own candidates only (in the order
        given), so it is the answer :meth:`preemptable` gives about that group alone."""
        tasks = ssn.job_tasks(preemptor)
        pending = tasks[ssn.task_state[tasks] == TaskState.PENDING]
        have = ssn.count_states(preemptor, PIPELINED_OR_READY)
        deficit = max(int(ssn.job_min[preemptor]) - have, 1)
        need = ssn.task_req[pending[:deficit]].sum(axis=0)
        mine = float(((ssn.job_allocated[preemptor] + need) * self._inv_total).max(initial=0.0))
        keep = np.zeros(candidates.size, dtype=np.bool_)
        if candidates.size == 0:
            return keep
        # A job's candidates in a group go one after another, in the order asked: each is
        # judged by the share its job keeps once it and the job's candidates before it in the
        # group are gone (exact integer sums of requests, so every group's figures are those
        # it would get alone).
        jobs = ssn.task_job[candidates]
        order = np.argsort(jobs, kind="stable") if groups is None else np.lexsort((jobs, groups))
        grouped = jobs[order]
        starts = grouped[1:] != grouped[:-1]
        if groups is not None:
            by_group = groups[order]
            starts |= by_group[1:] != by_group[:-1]
        req = ssn.task_req[candidates[order]]
        cum = np.cumsum(req, axis=0)
        heads = np.flatnonzero(np.r_[True, starts])
        first = np.repeat(heads, np.diff(np.r_[heads, grouped.size]))
        left = ssn.job_allocated[grouped] - (cum - cum[first] + req[first])
        theirs = (left * self._inv_total).max(axis=1, initial=0.0)
        keep[order] = (mine < theirs) | (np.abs(mine - theirs) <= 1e-6)
        return keep

    def victim_order(self, ssn: Session, task: int) -> tuple[Any, ...]:
        return (-float(self.shares[int(ssn.task_job[task])]),)

    @property
    def queue_order_global(self) -> bool:
        """HDRF keys of every queue move when any queue allocates (allocate must re-scan)."""
        return self.hierarchy

    def queue_order(self, ssn: Session, queue: int) -> tuple[Any, ...]:
        """HDRF order of the queue (nothing without hierarchy)."""
        if self._tree is None:
            return ()
        return self._tree.queue_key(queue)

    def hdrf_share(self, queue: int) -> tuple[float, bool] | None:
        """``(share, saturated)`` of the queue's node in the HDRF tree (None when not in it)."""
        if self._tree is None:
            return None
        node = int(self._tree.queue_node[queue])
        if node < 0:
            return None
        return float(self._tree.share[node]), bool(self._tree.saturated[node])


class _Hdrf:
    """The HDRF tree as flat arrays: node 0 is the root, then queue nodes, then job leaves."""

    def __init__(self, ssn: Session, total: F64, inv_total: F64) -> None:
        snap = ssn.snapshot
        self.total = total
        self.inv_total = inv_total
        n_jobs = len(snap.jobs)
        root_q = snap.queue_index.get(ROOT)
        queue_node = np.full(len(snap.queues), -1, dtype=np.int64)
        if root_q is not None:
            queue_node[int(root_q)] = 0
        parents = [-1]
        weights = [1.0]

        def node_of(q: int) -> int:
            """The tree node of queue ``q``, adding it and its ancestors not yet in the tree
            (ancestors first, so parents always precede their children)."""
            chain: list[int] = []
            cur: int | None = q
            while cur is not None and queue_node[cur] < 0:
                chain.append(cur)
                parent = snap.queues[cur].parent
                cur = None if parent is None else snap.queue_index[parent]
            up = 0 if cur is None else int(queue_node[cur])
            for c in reversed(chain):
                queue_node[c] = len(parents)
                parents.append(up)
                weights.append(float(max(snap.queues[c].weight, 1)))
                up = int(queue_node[c])
            return int(queue_node[q])

        job_parent = [node_of(int(q)) for q in ssn.job_queue]
        self.queue_node = queue_node
        self.first_leaf = first = len(parents)
        n = first + n_jobs
        self.parent = np.array([*parents, *job_parent], dtype=np.int64)
        self.weight = np.array([*weights, *([1.0] * n_jobs)])
        depth = np.zeros(n, dtype=np.int64)
        for v in range(1, n):  # parents always precede their children
            depth[v] = depth[self.parent[v]] + 1
        self.depth = depth
        # Nodes grouped by depth (ascending index within a depth): level d is
        # by_depth[depth_start[d] : depth_start[d + 1]].
        self.by_depth = np.argsort(depth, kind="stable")
        self.depth_start = np.searchsorted(
            depth[self.by_depth], np.arange(int(depth.max(initial=0)) + 3)
        )
        order = np.argsort(self.parent[1:], kind="stable") + 1
        self.child_idx = order
        self.child_ptr = np.searchsorted(self.parent[order], np.arange(n + 1))
        n_r = total.size
        request = np.zeros((n_jobs, n_r))
        np.add.at(request, ssn.task_job, ssn.task_req)
        request[:, ssn.arrays.spec.index(PODS)] = 0.0
        self.request = request
        self.alloc = np.zeros((n, n_r))
        self.alloc[first:] = ssn.job_allocated
        self.alloc[first:, ssn.arrays.spec.index(PODS)] = 0.0
        self.share = np.zeros(n)
        self.saturated = np.zeros(n, dtype=np.bool_)
        self.total_alloc = self.alloc[first:].sum(axis=0)
        self.demanding = self._demanding()
        max_q_depth = int(depth[1:first].max(initial=0))
        self.key_len = max_q_depth
        self._recompute_all()

    def _demanding(self) -> BOOL:
        out: BOOL = (self.total >= EPS) & (self.total_alloc < self.total)
        return out

    def _leaf_state(self, rows: npt.NDArray[Any]) -> None:
        alloc = self.alloc[rows]
        req = self.request[rows - self.first_leaf]
        held = alloc >= EPS
        full = held & (alloc != 0) & (req != 0) & (alloc >= req)
        starved = held & ~self.demanding & (req != 0)
        self.saturated[rows] = np.any(full | starved, axis=1)
        self.share[rows] = (alloc * self.inv_total).max(axis=1, initial=0.0)

    def _inner(self, parents: npt.NDArray[Any], children: npt.NDArray[Any]) -> None:
        """Recompute ``parents`` (sorted) from their ``children`` (all of them)."""
        loc = np.searchsorted(parents, self.parent[children])
        share = self.share[children]
        sat = self.saturated[children]
        holding = share != 0
        k = parents.size
        mdr = np.ones(k)
        np.minimum.at(mdr, loc, np.where(holding & ~sat, share, 1.0))
        scale = np.where(sat, 1.0, mdr[loc] / np.where(holding, share, 1.0))
        scale = np.where(holding, scale, 0.0)
        acc = np.zeros((k, self.alloc.shape[1]))
        np.add.at(acc, loc, self.alloc[children] * scale[:, None])
        unsat = np.zeros(k, dtype=np.bool_)
        np.logical_or.at(unsat, loc, ~sat)
        self.alloc[parents] = acc
        self.saturated[parents] = ~unsat
        self.share[parents] = (acc * self.inv_total).max(axis=1, initial=0.0)

    def _recompute_all(self) -> None:
        n = self.parent.size
        self._leaf_state(np.arange(self.first_leaf, n))
        by_depth, start = self.by_depth, self.depth_start
        for d in range(start.size - 3, -1, -1):
            level = by_depth[start[d] : start[d + 1]]
            parents = level[level < self.first_leaf]
            if parents.size:
                self._inner(parents, by_depth[start[d + 1] : start[d + 2]])

    def update_job(self, ssn: Session, job: int) -> None:
        leaf = self.first_leaf + job
        now = ssn.job_allocated[job].astype(np.float64)
        now[ssn.arrays.spec.index(PODS)] = 0.0
        self.total_alloc += now - self.alloc[leaf]
        self.alloc[leaf] = now
        demanding = self._demanding()
        if not np.array_equal(demanding, self.demanding):
            self.demanding = demanding
            self._recompute_all()
            return
        self._leaf_state(np.array([leaf]))
        node = int(self.parent[leaf])
        while node >= 0:
            kids = self.child_idx[self.child_ptr[node] : self.child_ptr[node + 1]]
            self._inner(np.array([node]), kids)
            node = int(self.parent[node])

    def queue_key(self, queue: int) -> tuple[Any, ...]:
        """(unsaturated first, share / weight) per level from the root's children down to the
        queue, padded to the deepest queue so keys of all queues line up."""
        node = int(self.queue_node[queue])
        path: list[int] = []
        while node > 0:
            path.append(node)
            node = int(self.parent[node])
        key: list[Any] = []
        for v in reversed(path):
            key += (int(self.saturated[v]), float(self.share[v] / self.weight[v]))
        key += (0, 0.0) * (self.key_len - len(path))
        return tuple(key)
