"""task-topology: Volcano's affinity and anti-affinity between the roles of one job.

A job's :class:`~gangsched.model.affinity.TaskTopology` (e.g. parameter servers and workers
together, parameter servers apart from one another) splits its tasks into *buckets*
(:mod:`gangsched.session.task_topology`): tasks meant to share nodes. Everything here is soft:

* **task order** — a job's bucketed tasks go before its others; bigger buckets (more pending
  tasks) first, then older buckets, then, inside a bucket, roles earlier in ``task_order`` and
  with the stronger relation first;
* **node score** — for a task of bucket ``b`` on node ``n``, as Volcano's plugin:
  the tasks of ``b`` already on ``n``, minus the tasks on ``n`` (placed this cycle) that the
  task's role is anti-affine to, minus one for each other pending task of ``b`` that would not
  fit beside it on ``n`` (its free resources once releases finish; the others are dropped in
  bucket order), times ``task-topology.weight`` (1) · 100 / the largest bucket size. A node
  the task cannot fit on at all scores 0. Volcano adds the bucket's pending count to every
  node's score too; that term is the same on every node and moves no choice, so it is left
  out (the other plugins' scores are summed with the same differences).

Tasks of one role and shape stay one template per bucket (the session splits templates by
bucket when this plugin is configured), so each bucket's tasks are scored for their own
bucket. Like every row score, a node's score is refreshed when that node changes; the part
that reads the bucket's remaining request may lag on nodes not re-evaluated since another
task of the bucket was placed. Volcano drops the other pending tasks in random (map) order;
here in bucket order, so the result is deterministic.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from gangsched._types import F64
from gangsched.config import arg_float
from gangsched.session.arrays import TaskTemplate
from gangsched.session.fit import node_free
from gangsched.session.task_topology import JobBuckets, build_buckets, task_request

if TYPE_CHECKING:
    from gangsched.session.core import Session

__all__ = ["TaskTopologyPlugin"]

_MAX_NODE_SCORE = 100.0


class TaskTopologyPlugin:
    name = "task-topology"
    known_arguments = ("task-topology.weight",)

    def __init__(self, arguments: Mapping[str, object]) -> None:
        self.weight = arg_float(arguments, "task-topology.weight", 1.0, plugin=self.name)
        self.jobs: dict[int, JobBuckets] = {}
        self._rank: dict[int, int] = {}  # bucketed pending task -> its place in its bucket
        self._placed: dict[int, int] = {}  # task placed this cycle -> node
        self._here: dict[int, dict[int, dict[str, int]]] = {}  # job -> node -> role -> count
        self._requests: dict[int, dict[str, int]] = {}

    def on_session_open(self, ssn: Session) -> None:
        self.jobs = build_buckets(ssn.snapshot)
        self._rank = {
            t: i for jb in self.jobs.values() for b in jb.buckets for i, t in enumerate(b.pending)
        }
        self._requests = {t: task_request(ssn.snapshot, t) for t in self._rank}
        self._placed = {}
        self._here = {}

    # ------------------------------------------------------------------ order

    def task_order(self, ssn: Session, task: int) -> tuple[Any, ...]:
        jb = self.jobs.get(int(ssn.task_job[task]))
        b = jb.bucket_of.get(task) if jb is not None else None
        if jb is None or b is None:
            return (1, 0, 0, 0, 0)
        bucket = jb.buckets[b]
        role = ssn.snapshot.tasks[task].role
        rel = jb.relations
        return (0, -len(bucket.pending), b, -rel.order.get(role, 0), -rel.strength.get(role, 0))

    # ------------------------------------------------------------------ score

    def node_score(self, ssn: Session, tmpl: TaskTemplate, rows: npt.NDArray[np.intp]) -> F64:
        out = np.zeros(rows.size)
        jb = self.jobs.get(tmpl.job)
        first = tmpl.tasks[0]
        b = jb.bucket_of.get(first) if jb is not None else None
        if jb is None or b is None or jb.max_size == 0:
            return out
        bucket = jb.buckets[b]
        pos = {int(n): i for i, n in enumerate(rows.tolist())}
        for n, count in bucket.on_node.items():
            i = pos.get(n)
            if i is not None:
                out[i] += count
        role = tmpl.role
        for n, counts in self._here.get(tmpl.job, {}).items():
            i = pos.get(n)
            if i is not None:
                pull = jb.relations.pull(role, counts, only_anti=True)
                if pull < 0:
                    out[i] += pull
        out -= self._dropped(ssn, tmpl, bucket.pending, rows, out)
        out *= self.weight * _MAX_NODE_SCORE / jb.max_size
        return out

    def _dropped(
        self,
        ssn: Session,
        tmpl: TaskTemplate,
        pending: list[int],
        rows: npt.NDArray[np.intp],
        out: F64,
    ) -> F64:
        """Per row, the other pending tasks of the bucket to drop before the rest fits beside
        this one; rows where the task itself cannot fit are zeroed in ``out``."""
        spec = ssn.arrays.spec
        free = node_free(ssn, rows, future=True)
        current = next((t for t in pending if t in set(tmpl.tasks)), None)
        if current is None:
            return np.zeros(rows.size)
        own = self._vector(spec.names, self._requests[current])
        never = (own > free).any(axis=1)
        others = [self._vector(spec.names, self._requests[t]) for t in pending if t != current]
        # the bucket's remaining request after dropping the first k others (bucket order),
        # k = 0..len(others)
        dropped = np.zeros((len(others) + 1, own.size), dtype=np.int64)
        if others:
            np.cumsum(np.stack(others), axis=0, out=dropped[1:])
        remains = (own + dropped[-1]) - dropped  # (k + 1, n_res)
        fits = (remains[:, None, :] <= free[None, :, :]).all(axis=2)  # (k + 1, rows)
        k = np.where(fits.any(axis=0), fits.argmax(axis=0), len(others)).astype(np.float64)
        out[never] = 0.0
        k[never] = 0.0
        return k

    @staticmethod
    def _vector(names: tuple[str, ...], request: dict[str, int]) -> npt.NDArray[np.int64]:
        row = np.zeros(len(names), dtype=np.int64)
        for c, res in enumerate(names):
            row[c] = request.get(res, 0)
        return row

    # ------------------------------------------------------------------ events

    def on_allocate(self, ssn: Session, task: int) -> None:
        if task not in self._rank or task in self._placed:
            return
        j = int(ssn.task_job[task])
        jb = self.jobs[j]
        node = int(ssn.task_node[task])
        self._placed[task] = node
        role = ssn.snapshot.tasks[task].role
        counts = self._here.setdefault(j, {}).setdefault(node, {})
        counts[role] = counts.get(role, 0) + 1
        bucket = jb.buckets[jb.bucket_of[task]]
        bucket.pending.remove(task)
        bucket.on_node[node] = bucket.on_node.get(node, 0) + 1
        bucket.placed += 1
        for res, amount in self._requests[task].items():
            bucket.request[res] -= amount

    def on_deallocate(self, ssn: Session, task: int) -> None:
        node = self._placed.pop(task, None)
        if node is None:
            return
        j = int(ssn.task_job[task])
        jb = self.jobs[j]
        role = ssn.snapshot.tasks[task].role
        counts = self._here[j][node]
        counts[role] -= 1
        if not counts[role]:
            del counts[role]
        bucket = jb.buckets[jb.bucket_of[task]]
        rank = self._rank[task]
        at = next((i for i, t in enumerate(bucket.pending) if self._rank[t] > rank), None)
        bucket.pending.insert(len(bucket.pending) if at is None else at, task)
        bucket.on_node[node] -= 1
        if not bucket.on_node[node]:
            del bucket.on_node[node]
        bucket.placed -= 1
        for res, amount in self._requests[task].items():
            bucket.request[res] += amount
