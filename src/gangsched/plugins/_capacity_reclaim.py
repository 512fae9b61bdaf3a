"""The capacity plugin's victim and reclaimer rules (``reclaimable``, ``preemptive``,
``exposed``, ``victim_order``), as a part of :class:`~gangsched.plugins.capacity.CapacityPlugin`
(its module docstring states the rules, numbered as the comments here)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from gangsched._types import BOOL, F64, I64
from gangsched.model import QueueState
from gangsched.plugins._queue_amounts import EPS, SLACK, names_of
from gangsched.session.core import TaskState

if TYPE_CHECKING:
    from gangsched.session.core import Session

__all__ = ["CapacityReclaim"]


class CapacityReclaim:
    """The queue tree's figures these rules read are the capacity plugin's (set at open)."""

    hierarchy: bool
    reclaim_level: int
    root: int
    paths: list[I64]
    names: list[str]
    deserved: F64
    guarantee: F64
    real_capability: F64
    allocated: F64
    shares: F64
    n_queues: int
    leaf: BOOL
    _best_effort: BOOL
    _pods: int

    # ------------------------------------------------------------------ victims

    def _exceeds(self, alloc: F64, node: int, dims: BOOL) -> bool | None:
        """Rule 3 for tree node ``node`` holding ``alloc``: True / False on the victim's
        resources ``dims`` the node deserves, None when it deserves none of them."""
        relevant = dims & (self.deserved[node] >= EPS)
        if not relevant.any():
            return None
        return bool(np.any(alloc[relevant] > self.deserved[node, relevant] + EPS))

    def _level_nodes(self, queue: int) -> list[int]:
        """The queue's ancestors at levels 1..ancestorReclaimLevel (index 0 = level 1); -1 where
        the tree is not that deep."""
        path = self.paths[queue]
        return [int(path[k]) if k < path.size else -1 for k in range(1, self.reclaim_level + 1)]

    def reclaimable(
        self, ssn: Session, preemptor: int, candidates: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.int64]:
        pods = self._pods
        mine = ssn.job_tasks(preemptor)
        asks = (ssn.task_req[mine[ssn.task_state[mine] == TaskState.PENDING]] > 0).any(axis=0)
        asks[pods] = False  # (n_resources,) what the reclaiming job asks for
        rq = int(ssn.job_queue[preemptor])
        tree = self.hierarchy and self.reclaim_level > 0
        r_levels = self._level_nodes(rq) if tree else []
        r_scope = {n for n in r_levels if n >= 0 and n != self.root}
        r_deserves = bool(np.any(asks & (self.deserved[rq] >= EPS)))
        left: dict[int, F64] = {}  # tree node -> allocation less the victims kept so far
        snap = ssn.snapshot

        def rank(t: int) -> tuple[Any, ...]:
            rec = snap.jobs[int(ssn.task_job[t])]
            key = ssn.points.victim_order(t)
            return (*key, -rec.creation, rec.name, snap.tasks[t].name)

        order = sorted(candidates.tolist(), key=rank)
        keep: list[int] = []
        for t in order:
            row = ssn.task_req[t].astype(np.float64)  # what the victim charges its queue
            row[pods] = 0.0
            dims = row > 0
            if not np.any(dims & asks):
                continue  # rule 1
            q = int(ssn.job_queue[ssn.task_job[t]])
            alloc = left.setdefault(q, self.allocated[q].copy())
            if np.any(alloc[dims] - row[dims] < self.guarantee[q, dims] - SLACK):
                continue  # rule 2
            over = self._exceeds(alloc, q, dims)
            if over is False:
                continue  # rule 3
            ancestors: list[int] = []
            if tree:
                levels = self._level_nodes(q)
                if over is None and not r_deserves and r_scope & set(levels):
                    continue  # no contention inside a shared subtree
                eligible = True
                for node, theirs in zip(levels, r_levels, strict=True):
                    if node < 0 or node == self.root or node == theirs:
                        continue
                    up = left.setdefault(node, self.allocated[node].copy())
                    if self._exceeds(up, node, dims) is False:
                        eligible = False
                        break
                    ancestors.append(node)
                if not eligible:
                    continue  # rule 4
            alloc -= row
            for node in ancestors:
                left[node] -= row
            keep.append(t)
        return np.array(sorted(keep), dtype=np.int64)

    # ------------------------------------------------------------------ reclaimer

    def _partly_within(self, future: F64, node: int, req: F64) -> bool:
        """Volcano's ``LessEqualPartlyWithDimensionZeroFiltered(deserved, req)``."""
        d = self.deserved[node]
        dims = (req > 0) & ~((future < EPS) & (d < EPS))
        dims[self._pods] = False
        return bool(np.any(dims & ((future < d) | (np.abs(future - d) < EPS))))

    def preemptive(self, ssn: Session, queue: int, tasks: list[int]) -> str | None:
        """Why ``queue`` may not reclaim for ``tasks`` (None: it may); see the module docstring."""
        name = self.names[queue]
        state = ssn.snapshot.queues[queue].state
        if state is not QueueState.OPEN:
            return f"queue {name!r} is {state.value}: only an Open queue reclaims"
        req = ssn.task_req[tasks].sum(axis=0).astype(np.float64)
        req[self._pods] = 0.0
        future = self.allocated[queue] + req
        beyond = (req > 0) & (future > self.real_capability[queue] + SLACK)
        if beyond.any():
            return (
                f"queue {name!r} would exceed its real capability on {names_of(ssn, beyond)} "
                "with the claim added"
            )
        if self._partly_within(future, queue, req):
            return None
        if self.hierarchy:
            for node in self._level_nodes(queue):
                if node < 0 or node == self.root:
                    continue
                if self._partly_within(self.allocated[node] + req, node, req):
                    return None
        where = " (nor an ancestor within ancestorReclaimLevel)" if self.reclaim_level else ""
        return (
            f"queue {name!r}{where} would be above its deserved amount on every requested "
            f"resource ({names_of(ssn, req > 0)}) with the claim added"
        )

    def _reclaimer_of(self, queue: int, dims: BOOL, immediate: bool) -> str | None:
        """A leaf queue whose reclaim could select a task of ``queue`` holding ``dims`` now
        (rules 3 and 4 only, the reclaimer's request unknown), or None."""
        if not (self.hierarchy and self.reclaim_level > 0):
            return "another queue"
        levels = self._level_nodes(queue)
        scope = {n for n in levels if n >= 0 and n != self.root}
        for y in range(self.n_queues):
            if y == queue or not self.leaf[y]:
                continue
            theirs = self._level_nodes(y)
            if immediate and scope & set(theirs) and self._best_effort[y]:
                continue  # no contention inside a shared subtree
            if all(
                node < 0
                or node == self.root
                or node == other
                or self._exceeds(self.allocated[node], node, dims) is not False
                for node, other in zip(levels, theirs, strict=True)
            ):
                return f"queue {self.names[y]!r}"
        return None

    def exposed(self, ssn: Session, tasks: list[int]) -> str | None:
        """Why one of ``tasks`` (running or reserved) could be reclaimed now, or None."""
        for t in tasks:
            q = int(ssn.job_queue[ssn.task_job[t]])
            dims = ssn.task_req[t] > 0
            dims[self._pods] = False
            over = self._exceeds(self.allocated[q], q, dims)
            if over is False:
                continue
            who = self._reclaimer_of(q, dims, over is None)
            if who is None:
                continue
            task = ssn.snapshot.tasks[t].name
            if over is None:
                why = f"queue {self.names[q]!r} deserves none of what task {task!r} asks for"
            else:
                above = dims & (self.allocated[q] > self.deserved[q] + EPS)
                above &= self.deserved[q] >= EPS
                why = (
                    f"after the move queue {self.names[q]!r} would be above its deserved "
                    f"amount on {names_of(ssn, above)}, which task {task!r} holds"
                )
            return f"{why}, so {who} could reclaim it back"
        return None

    def victim_order(self, ssn: Session, task: int) -> tuple[Any, ...]:
        q = int(ssn.job_queue[ssn.task_job[task]])
        if not self.hierarchy:
            return (-float(self.shares[q]),)
        path = self.paths[q]
        top = int(path[-2]) if path.size >= 2 else q
        return (-float(self.shares[top]), -float(self.shares[q]))
