"""Operations on the workload: jobs, tasks (incl. phase changes), disruption budgets, and
the decisions of a cycle."""

from __future__ import annotations

import dataclasses
from collections.abc import Container, Iterable
from typing import Any

from gangsched.decisions import Decisions
from gangsched.errors import PlacementError, SnapshotError
from gangsched.model import NODE_PHASES, DisruptionBudget, Job, Task, TaskPhase
from gangsched.model.checks import (
    check_budget_refs,
    check_job_queue,
    check_node_tasks,
    check_task_count,
    check_task_refs,
)
from gangsched.state._args import flag_arg, indices_arg, name_arg, records_arg
from gangsched.state._batch import Change, check_changes, commit_changes, decision_changes
from gangsched.state._core import (
    NodeLoad,
    StateCore,
    check_known,
    check_new,
    check_type,
    known,
    task_gpu,
    unreferenced,
)
from gangsched.units import show_value

_BIND_PHASES = {p.value: p for p in (TaskPhase.BOUND, TaskPhase.RUNNING)}


class _Plus(Container[str]):
    """The names of ``names`` and one more (a job being added with its tasks)."""

    __slots__ = ("extra", "names")

    def __init__(self, names: Container[str], extra: str) -> None:
        self.names, self.extra = names, extra

    def __contains__(self, name: object) -> bool:
        return name == self.extra or name in self.names


class WorkloadOps(StateCore):
    """Add, update and remove jobs, tasks and disruption budgets; apply decisions."""

    # ------------------------------------------------------------------ jobs

    def add_job(self, job: Job, tasks: Iterable[Task] = ()) -> None:
        """A new job, and optionally its tasks (all or nothing: everything is checked before
        anything is stored)."""
        check_new(job, Job, "job", self._jobs)
        batch = records_arg(tasks, Task, "job", "tasks")
        self._check_job(job)
        self._totals["job"].move(job.name, None, job.min_resources, commit=False)
        changes = self._check_new_tasks(batch, _Plus(self._jobs, job.name))
        self._index_job(job)
        self._bump("jobs")
        commit_changes(self, changes)

    def update_job(self, job: Job) -> None:
        """Replace the job of that name (phase, priority, min_available, queue, ...)."""
        old = check_known(job, Job, "job", self._jobs)
        self._check_job(job)
        if old.min_resources is not job.min_resources:  # (the same amounts: totals as they are)
            self._totals["job"].move(job.name, old.min_resources, job.min_resources, commit=True)
        if old.queue != job.queue:
            del self._queue_jobs[old.queue][job.name]
            self._queue_jobs[job.queue][job.name] = None
        self._jobs[job.name] = job
        self._bump("jobs")

    def remove_job(self, name: str, *, with_tasks: bool = False) -> None:
        """Remove a job; its tasks must be gone already unless ``with_tasks``."""
        old = self._job(name)
        flag_arg(with_tasks, "job", "with_tasks")
        tasks = self._job_tasks[name]
        if not with_tasks:
            unreferenced(tasks, f"unknown job {name!r}", "task", "job")
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
        check_job_queue(job, self._queues)

    def _job(self, name: str) -> Job:
        return known(self._jobs, "job", name)

    # ------------------------------------------------------------------ tasks

    def add_task(self, task: Task) -> None:
        """A new task (a pod); its job, and the node it names, must exist."""
        check_type(task, Task, "task")
        self.add_tasks((task,))

    def add_tasks(self, tasks: Iterable[Task]) -> None:
        """New tasks, all or nothing (all are checked before any is stored; each node they
        land on is checked once)."""
        batch = records_arg(tasks, Task, "task", "tasks")
        commit_changes(self, self._check_new_tasks(batch, self._jobs))

    def _check_new_tasks(self, batch: list[Task], jobs: Container[str]) -> list[Change]:
        seen: set[str] = set()
        for task in batch:
            if task.name in self._tasks or task.name in seen:
                raise SnapshotError(
                    "already in the state", kind="task", name=task.name, field="name"
                )
            seen.add(task.name)
        if batch:
            check_task_count(len(self._tasks) + len(batch), self.limits)
        changes: list[Change] = [(None, task) for task in batch]
        check_changes(self, changes, jobs)
        return changes

    def update_task(self, task: Task) -> None:
        """Replace the task of that name (phase, node, devices, ...)."""
        self._put_task(task, check_known(task, Task, "task", self._tasks))

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
            changes["node"] = name_arg(node, "task", "node")
        if gpu_indices is not None:
            changes["gpu_indices"] = indices_arg(gpu_indices, "task", name, "gpu_indices")
        if (phase is TaskPhase.PENDING or phase == TaskPhase.PENDING.value) and node is None:
            changes["node"] = None
            changes.setdefault("gpu_indices", ())
        new = dataclasses.replace(old, **changes)
        self._put_task(new, old)
        return new

    def remove_task(self, name: str) -> None:
        old = self._task(name)
        self._check_unbudgeted("task", name)
        there = old.node if old.node is not None and old.phase in NODE_PHASES else None
        left = self._node_load(there) if there is not None else None
        self._totals["task"].move(name, old.request, None, task_gpu(old), 0, commit=True)
        del self._tasks[name]
        del self._job_tasks[old.job][name]
        if old.node is not None:
            del self._node_tasks[old.node][name]
        self._bump("tasks", there)
        if left is not None and there is not None:
            left.move(old, -1)
            self._keep_load(there, left)

    def _task(self, name: str) -> Task:
        return known(self._tasks, "task", name)

    def _put_task(self, task: Task, old: Task | None) -> None:
        """Check then store ``task`` (replacing ``old``). The node it lands on is checked
        against the load its tasks hold (kept from one change to the next); only a change
        that does not fit goes through the whole check, which names the error."""
        check_task_refs(task, self._jobs, self._nodes)
        totals = self._totals["task"]
        amounts = (old.request if old else None, task.request, task_gpu(old), task_gpu(task))
        # (the same amounts as the record it replaces: the totals stay as they are)
        same = old is not None and old.request is task.request and amounts[2] == amounts[3]
        if not same:
            totals.move(task.name, *amounts, commit=False)
        here = task.node if task.node is not None and task.phase in NODE_PHASES else None
        there = None
        if old is not None and old.node is not None and old.phase in NODE_PHASES:
            there = old.node
        load: NodeLoad | None = None
        if here is not None:
            load = self._node_load(here)
            if old is not None and there == here:
                load.move(old, -1)
            load.move(task, 1)
            if not load.fits():
                load = None
                others = [self._tasks[t] for t in self._node_tasks[here] if t != task.name]
                others.append(task)
                check_node_tasks(self._nodes[here], others)
        if not same:
            totals.move(task.name, *amounts, commit=True)  # commit
        left = self._node_load(there) if there is not None and there != here else None
        self._link_task(task, old)
        self.generation += 1
        self._cache.pop("tasks", None)
        gen = self.generation
        if there is not None:
            self._node_gen[there] = gen
        if here is not None:
            self._node_gen[here] = gen
        if load is not None and here is not None:
            self._keep_load(here, load)
        if left is not None and there is not None and old is not None:
            left.move(old, -1)
            self._keep_load(there, left)

    # ------------------------------------------------------------------ disruption budgets

    def add_disruption_budget(self, budget: DisruptionBudget) -> None:
        """A new PodDisruptionBudget; the jobs and tasks it names must exist."""
        check_new(budget, DisruptionBudget, "disruption_budget", self._disruption_budgets)
        self._set_budget(budget)

    def update_disruption_budget(self, budget: DisruptionBudget) -> None:
        check_known(budget, DisruptionBudget, "disruption_budget", self._disruption_budgets)
        self._set_budget(budget)

    def remove_disruption_budget(self, name: str) -> None:
        old = self._budget(name)
        del self._disruption_budgets[name]
        self._unlist_budget(old)
        self._bump("disruption_budgets")

    def _set_budget(self, budget: DisruptionBudget) -> None:
        check_budget_refs(budget, self._jobs, self._tasks)
        old = self._disruption_budgets.get(budget.name)
        if old is not None:
            self._unlist_budget(old)
        self._disruption_budgets[budget.name] = budget
        self._list_budget(budget)
        self._bump("disruption_budgets")

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
        return known(self._disruption_budgets, "disruption_budget", name)

    # ------------------------------------------------------------------ decisions

    def apply(self, decisions: Decisions, *, bound: TaskPhase = TaskPhase.BOUND) -> None:
        """Apply one cycle's decisions as a binder would: binds become ``bound`` (Bound; pass
        ``TaskPhase.RUNNING`` to skip the kubelet's report) on their node and devices,
        reservations Pipelined, evicted tasks Releasing; a task evicted and reserved
        elsewhere in the same decisions (a ``consolidate`` move) ends Pipelined on its new node;
        job phases follow the reported statuses. The decisions are checked whole (each node
        touched once, with its final tasks), then made: on an error the state is unchanged.
        Costs O(decisions + tasks on the nodes they touch).

        Raises
        ------
        PlacementError
            A bind or reservation of a task that is not Pending or Pipelined (nor moved), an
            eviction of a task that is not Bound or Running, a task placed or evicted twice, a
            decision about an unknown task.
        DecisionError
            Decisions whose records are not :class:`Bind`, :class:`Eviction`,
            :class:`Pipeline` and :class:`JobStatus` ones.
        SnapshotError
            A decision that does not fit (the node's or device's capacity).
        """
        if not isinstance(decisions, Decisions):
            raise PlacementError(
                f"expected Decisions, got {type(decisions).__name__}", kind="state", field="apply"
            )
        key = bound.value if isinstance(bound, TaskPhase) else bound
        if not isinstance(key, str) or key not in _BIND_PHASES:
            raise PlacementError(
                f"a bind makes a task Bound or Running, not {show_value(bound)}",
                kind="state",
                field="bound",
            )
        changes, jobs = decision_changes(self, decisions, _BIND_PHASES[key])
        check_changes(self, changes, self._jobs, totals=False)
        commit_changes(self, changes)
        for job in jobs:
            self._jobs[job.name] = job
            self._bump("jobs")
