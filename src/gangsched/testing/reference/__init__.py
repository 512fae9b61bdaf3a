"""A plain reference scheduler: the cycle of :func:`gangsched.schedule`, one task and one node
at a time.

Theory of operation
-------------------
``schedule(snapshot, config)`` runs enqueue, allocate and backfill with the plugins of Volcano's
default configuration (priority, gang, conformance, overcommit, drf, predicates, proportion,
nodeorder) and binpack, written as the rules read: Python loops over tasks and nodes, resource
amounts in dicts, no NumPy, no caching, no templates. It is slow on purpose and small enough to
check by eye, so the fast scheduler can be tested against it (same snapshot, same config, same
binds down to GPU indices) and timed against it.

The rules it follows (the same as the fast scheduler's):

* a task fits a node when every resource column (pods included) fits the node's idle amount,
  and, for GPU tasks, ``count`` devices each have the per-device share free; it fits *later*
  when it fits ``idle + releasing − pipelined``;
* the best node is the highest total score among the nodes where the task fits now, else among
  those where it fits later (the task is then pipelined); ties go to the lowest node index;
* queues are taken in queue order (recomputed after every job), jobs in job order (as it was
  when the job was queued), tasks in task order; a gang is committed when ready, kept as a
  reservation when only pipelined, and undone otherwise.

Only ``enqueue``, ``allocate`` and ``backfill`` and the plugins named above are supported, and
the topology is not modelled: compare on snapshots without hypernodes (jobs' network topology
then has no domain to keep to).

The cycle is one class built in three layers: its state and gang and order rules
(``reference.state``), its quota and node rules (``reference.rules``) and, here, its
mutation, actions and output.
"""

from __future__ import annotations

from typing import Any

from gangsched._frozen import FrozenDict
from gangsched.config import Config, arg_bool
from gangsched.decisions import Bind, Decisions, JobStatus, Pipeline, QueueStatus
from gangsched.model import QueueState
from gangsched.model.snapshot import Snapshot
from gangsched.testing.reference.rules import _Rules
from gangsched.testing.reference.state import DEFAULT_CPU as DEFAULT_CPU
from gangsched.testing.reference.state import DEFAULT_MEMORY as DEFAULT_MEMORY
from gangsched.testing.reference.state import EPS as EPS
from gangsched.testing.reference.state import HOLDING as HOLDING
from gangsched.testing.reference.state import NO_LIMIT as NO_LIMIT
from gangsched.testing.reference.state import READY, RESERVED, VALID
from gangsched.testing.reference.state import SLACK as SLACK
from gangsched.testing.reference.state import SUPPORTED as SUPPORTED
from gangsched.units import PODS

__all__ = ["schedule"]


def schedule(snapshot: Snapshot, config: Config | None = None) -> Decisions:
    """One scheduling cycle, computed the plain way. Same signature and output type as
    :func:`gangsched.schedule` (task reasons are shorter)."""
    cycle = _Cycle(snapshot, Config.default() if config is None else config)
    for action in cycle.config.actions:
        getattr(cycle, action)()
    return cycle.decisions()


class _Cycle(_Rules):
    """One cycle: enqueue, allocate and backfill, then the decisions."""

    # ------------------------------------------------------------ mutation

    def place(self, kind: str, t: int, n: int, gpus: tuple[int, ...], sign: int = 1) -> None:
        row, per = self.charge(t, n), self.per_device(t, n)
        node_row, devices = (
            (self.pip[n], self.dev_pip[n])
            if kind == "pipeline"
            else (self.used[n], self.dev_used[n])
        )
        self.add(node_row, row, sign)
        for d in gpus:
            devices[d] += sign * per
        self.add(self.job_alloc[self.job_of[t]], self.nominal(t), sign)
        self.add(self.queue_alloc[self.queue_of[self.job_of[t]]], self.nominal(t), sign)
        placed = "Pipelined" if kind == "pipeline" else "Allocated"
        self.state[t] = placed if sign > 0 else "Pending"
        self.where[t], self.gpus[t] = (n, gpus) if sign > 0 else (-1, ())

    # ------------------------------------------------------------ actions

    def enqueue(self) -> None:
        opt = self.config.action_arguments("enqueue")
        shape_check = arg_bool(opt, "shapeCheckEnable", True, plugin="enqueue", kind="action")
        waiting: dict[int, list[tuple[Any, int]]] = {}
        for j in range(len(self.snap.jobs)):
            if self.phase[j] == "Pending":
                waiting.setdefault(self.queue_of[j], []).append((self.job_key(j), j))
        while waiting:
            q = min(waiting, key=self.queue_key)
            entry = min(waiting[q])
            waiting[q].remove(entry)
            if not waiting[q]:
                del waiting[q]
            j = entry[1]
            if self.snap.queues[q].state is not QueueState.OPEN:
                continue
            if self.snap.jobs[j].min_resources is not None and not self.vote(j):
                continue
            if shape_check and not self.shape_fits(j):
                continue
            need = self.vector(self.snap.jobs[j].min_resources)
            for tier in self.plugins("job_enqueued"):
                for o in tier:
                    if o.name == "overcommit":
                        self.add(self.oc_inqueue, need)
                    elif o.name == "proportion":
                        for r in self.res:
                            self.q_inqueue[q][r] += need[r]
            self.phase[j] = "Inqueue"

    def enough(self, j: int) -> bool:
        have = self.count(j, RESERVED) + self.best_effort_pending(j)
        return have >= self.snap.jobs[j].min_available and self.roles_ok(j, RESERVED)

    def shape_fits(self, j: int) -> bool:
        """Dry run: can the job's minimum gang be placed (now or once releases finish)?
        Everything placed is undone."""
        if self.enough(j):
            return True
        tasks = self.snap.tasks
        todo = [
            t for t in self.tasks_of[j] if self.state[t] == "Pending" and not tasks[t].best_effort
        ]
        if self.count(j, RESERVED) + len(todo) < self.snap.jobs[j].min_available:
            return True  # the job lacks tasks: allocate reports it
        need_all = self.snap.jobs[j].min_available >= len(self.tasks_of[j])
        failed: set[Any] = set()
        ops: list[tuple[str, int, int, tuple[int, ...]]] = []
        for t in sorted(todo, key=self.task_key):
            if self.enough(j):
                break
            if self.shape(t) in failed:
                continue
            n, later = self.best_node(t)
            if n < 0:
                failed.add(self.shape(t))
                if need_all:
                    break
                continue
            op = ("pipeline" if later else "allocate", t, n, self.choose_gpus(t, n, later))
            self.place(*op)
            ops.append(op)
        ok = self.enough(j)
        for kind, t, n, gpus in reversed(ops):
            self.place(kind, t, n, gpus, sign=-1)
        return ok

    def shape(self, t: int) -> tuple[Any, ...]:
        """Tasks of one job with the same shape are placed alike."""
        x = self.snap.tasks[t]
        return (
            x.role,
            x.request,
            x.gpu_request,
            x.node_selector,
            x.tolerations,
            x.priority,
            x.preemptable,
            x.node_affinity,
        )

    def vote(self, j: int) -> bool:
        for tier in self.plugins("job_enqueueable"):
            voted = [o for o in tier if o.name in ("overcommit", "proportion")]
            for o in voted:
                if not self.enqueueable(o.name, j):
                    return False
            if voted:
                return True
        return True

    def allocate(self) -> None:
        tasks = self.snap.tasks
        waiting: dict[int, list[tuple[Any, int]]] = {}
        work: dict[int, list[int]] = {}
        for j in range(len(self.snap.jobs)):
            if self.phase[j] == "Pending":
                if "enqueue" in self.config.actions:
                    continue
                self.phase[j] = "Inqueue"
            todo = [
                t
                for t in self.tasks_of[j]
                if self.state[t] == "Pending" and not tasks[t].best_effort
            ]
            if todo and self.job_valid(j):
                work[j] = sorted(todo, key=self.task_key)
                waiting.setdefault(self.queue_of[j], []).append((self.job_key(j), j))
        failed: dict[int, set[tuple[Any, ...]]] = {j: set() for j in work}
        while waiting:
            q = min(waiting, key=self.queue_key)
            if self.overused(q):
                del waiting[q]
                continue
            entry = min(waiting[q])
            waiting[q].remove(entry)
            if not waiting[q]:
                del waiting[q]
            j = entry[1]
            ops: list[tuple[str, int, int, tuple[int, ...]]] = []
            again = self.allocate_job(j, q, work[j], failed[j], ops)
            if self.job_ready(j):
                self.committed += ops
            elif self.job_pipelined(j):
                self.kept += ops
            else:
                for kind, t, n, gpus in reversed(ops):
                    self.place(kind, t, n, gpus, sign=-1)
                self.unschedulable.add(j)
            if again:
                waiting.setdefault(q, []).append((self.job_key(j), j))

    def allocate_job(
        self, j: int, q: int, todo: list[int], failed: set[Any], ops: list[Any]
    ) -> bool:
        need_all = self.snap.jobs[j].min_available >= len(self.tasks_of[j])
        while todo:
            t = todo.pop(0)
            shape = self.shape(t)
            if self.state[t] != "Pending" or shape in failed or not self.allocatable(q, t):
                continue
            n, later = self.best_node(t)
            if n < 0:
                failed.add(shape)
                if need_all:
                    break
                continue
            kind = "pipeline" if later else "allocate"
            gpus = self.choose_gpus(t, n, later)
            self.place(kind, t, n, gpus)
            ops.append((kind, t, n, gpus))
            if todo and self.job_ready(j):
                return True
        return False

    def backfill(self) -> None:
        jobs = [j for j in range(len(self.snap.jobs)) if self.phase[j] != "Pending"]
        jobs.sort(key=lambda j: (self.queue_key(self.queue_of[j]), self.job_key(j)))
        for j in jobs:
            todo = [
                t
                for t in self.tasks_of[j]
                if self.state[t] == "Pending" and self.snap.tasks[t].best_effort
            ]
            # A gang that is not ready binds none of its best-effort tasks either.
            if not todo or not self.job_valid(j) or not self.job_ready(j):
                continue
            for t in sorted(todo, key=self.task_key):
                n, later = self.best_node(t)
                if n >= 0 and not later:
                    self.place("allocate", t, n, ())
                    self.committed.append(("allocate", t, n, ()))

    # ------------------------------------------------------------ output

    def decisions(self) -> Decisions:
        snap, names = self.snap, [n.name for n in self.snap.nodes]
        for kind, t, _, _ in self.kept:
            if kind == "allocate":
                self.state[t] = "Pipelined"
        reserved = [op for op in self.committed if op[0] == "pipeline"] + self.kept
        jobs: dict[str, JobStatus] = {}
        for j, job in enumerate(snap.jobs):
            count = {s: self.count(j, (s,)) for s in (*VALID, "Releasing", "Failed")}
            running = count["Running"] + count["Bound"]
            scheduled = (
                running
                + count["Succeeded"]
                + count["Failed"]
                + count["Releasing"]
                + count["Allocated"]
            )
            phase = self.phase[j]
            if running > 0 and j in self.unschedulable:
                phase = "Unknown"
            elif scheduled >= job.min_available and scheduled > 0:
                done = count["Succeeded"] + count["Failed"]
                phase = "Completed" if done == scheduled else "Running"
            elif phase != "Inqueue":
                phase = "Pending"
            ready = self.count(j, READY) + self.best_effort_pending(j) >= job.min_available
            jobs[job.name] = JobStatus(
                phase=phase,
                reason="Scheduled" if ready else "",
                ready=ready,
                min_available=job.min_available,
                running=running,
                allocated=count["Allocated"],
                pipelined=count["Pipelined"],
                pending=count["Pending"],
                succeeded=count["Succeeded"],
                failed=count["Failed"],
            )
        queues: dict[str, QueueStatus] = {}
        for q, queue in enumerate(snap.queues):
            phases = [
                jobs[job.name].phase for j, job in enumerate(snap.jobs) if self.queue_of[j] == q
            ]
            queues[queue.name] = QueueStatus(
                state=queue.state.value,
                allocated=FrozenDict(
                    {r: v for r, v in self.queue_alloc[q].items() if v and r != PODS}
                ),
                deserved=FrozenDict(
                    {r: round(v) for r, v in self.deserved[q].items() if round(v) and r != PODS}
                ),
                share=self.queue_share(q) if self.option("proportion") else 0.0,
                inqueue=phases.count("Inqueue"),
                pending=phases.count("Pending"),
                running=phases.count("Running"),
                unknown=phases.count("Unknown"),
                completed=phases.count("Completed"),
            )
        return Decisions(
            binds=tuple(
                Bind(task=snap.tasks[t].name, node=names[n], gpu_indices=g)
                for kind, t, n, g in self.committed
                if kind == "allocate"
            ),
            pipelined=tuple(
                Pipeline(task=snap.tasks[t].name, node=names[n], gpu_indices=g)
                for _, t, n, g in reserved
            ),
            jobs=FrozenDict(jobs),
            queues=FrozenDict(queues),
            task_reasons=FrozenDict(
                {
                    snap.tasks[t].name: "not placed"
                    for t in range(len(snap.tasks))
                    if self.state[t] == "Pending"
                }
            ),
        )
