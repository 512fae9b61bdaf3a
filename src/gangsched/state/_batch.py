"""Changes to many tasks at once (new tasks, a cycle's decisions): checked whole against the
rules, then made. Every node touched is checked once, with its final tasks, so a batch costs
O(tasks changed + tasks on the nodes touched) however many of its tasks share a node, and the
order of the changes inside a batch does not matter (a reservation may move while another
task takes its room)."""

from __future__ import annotations

import dataclasses
from collections.abc import Container, Mapping, Sequence
from typing import Any

from gangsched.decisions import Bind, Decisions, Eviction, JobStatus, Pipeline
from gangsched.errors import DecisionError, PlacementError
from gangsched.model import NODE_PHASES, Job, JobPhase, Task, TaskPhase
from gangsched.model.checks import check_node_tasks, check_task_refs
from gangsched.state._core import StateCore, task_gpu

#: A task's change: the record it replaces (None: a new task) and its new record.
Change = tuple[Task | None, Task]

_JOB_PHASES = {p.value: p for p in JobPhase}
_PLACEABLE = (TaskPhase.PENDING, TaskPhase.PIPELINED)
_EVICTABLE = (TaskPhase.BOUND, TaskPhase.RUNNING)


def _on_node(task: Task | None) -> str | None:
    """The node ``task`` holds room on (None: none)."""
    if task is not None and task.node is not None and task.phase in NODE_PHASES:
        return task.node
    return None


def check_changes(
    core: StateCore, changes: Sequence[Change], jobs: Container[str], *, totals: bool = True
) -> None:
    """Check ``changes`` made together, changing nothing: each new record's references
    (its job among ``jobs``, its node among the state's), the per-resource totals as the
    records come (with ``totals``), then every node touched, once, with its final tasks."""
    nodes = core._nodes
    scratch = core._totals["task"].scratch() if totals else None
    final: dict[str, Task] = {}
    touched: dict[str, None] = {}
    for old, new in changes:
        check_task_refs(new, jobs, nodes)
        if scratch is not None:
            amounts = (old.request if old else None, new.request, task_gpu(old), task_gpu(new))
            scratch.move(new.name, *amounts, commit=True)
        final[new.name] = new
        for node in (_on_node(old), _on_node(new)):
            if node is not None:
                touched[node] = None
    if not touched:
        return
    # Tasks that come to a node they do not name yet go after its own, in the batch's order
    # (where storing them puts them).
    arriving: dict[str, list[Task]] = {}
    for old, new in changes:
        if new.node is not None and new.node in touched and (old is None or old.node != new.node):
            arriving.setdefault(new.node, []).append(new)
    tasks = core._tasks
    for node in touched:
        after = [final[t] if t in final else tasks[t] for t in core._node_tasks[node]]
        after = [t for t in after if t.node == node]
        after.extend(arriving.get(node, ()))
        check_node_tasks(nodes[node], after)


def commit_changes(core: StateCore, changes: Sequence[Change]) -> None:
    """Make ``changes`` (checked by :func:`check_changes`): one generation for all of them."""
    if not changes:
        return
    totals = core._totals["task"]
    for old, new in changes:
        if old is None or old.request != new.request or task_gpu(old) != task_gpu(new):
            amounts = (old.request if old else None, new.request, task_gpu(old), task_gpu(new))
            totals.move(new.name, *amounts, commit=True)
        core._link_task(new, old)
    core.generation += 1
    core._cache.pop("tasks", None)
    gen = core.generation
    node_gen = core._node_gen
    for old, new in changes:
        for node in (_on_node(old), _on_node(new)):
            if node is not None:
                node_gen[node] = gen


def _records(value: object, cls: type[Any], field: str) -> Sequence[Any]:
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Sequence):
        raise DecisionError(
            f"expected a list of {cls.__name__}, got {type(value).__name__}",
            kind="decisions",
            field=field,
        )
    for i, item in enumerate(value):
        if not isinstance(item, cls):
            raise DecisionError(
                f"is a {type(item).__name__}, expected {cls.__name__}",
                kind="decisions",
                field=f"{field}[{i}]",
            )
    return value


def decision_changes(
    core: StateCore, decisions: Decisions, bound: TaskPhase
) -> tuple[list[Change], list[Job]]:
    """The task changes and job records ``decisions`` make, checked against the tasks'
    phases (not yet against the nodes: :func:`check_changes`).

    A bind or a reservation takes a Pending or Pipelined task (a reservation may move); an
    eviction a Bound or Running one, which becomes Releasing on its node. A task evicted and
    reserved in the same decisions is moved (``consolidate``): it ends Pipelined on its new
    node, the reservation standing for the re-created pod."""
    binds = _records(decisions.binds, Bind, "binds")
    evictions = _records(decisions.evictions, Eviction, "evictions")
    pipelined = _records(decisions.pipelined, Pipeline, "pipelined")
    statuses = decisions.jobs
    if not isinstance(statuses, Mapping):
        raise DecisionError(
            f"expected a mapping of job statuses, got {type(statuses).__name__}",
            kind="decisions",
            field="jobs",
        )
    tasks = core._tasks
    final: dict[str, Task] = {}
    evicted: set[str] = set()
    for e in evictions:
        old = tasks.get(e.task)
        if old is None:
            raise PlacementError("evicted, but not in the state", kind="task", name=e.task)
        if e.task in evicted:
            raise PlacementError("evicted twice", kind="task", name=e.task, field="phase")
        if old.phase not in _EVICTABLE:
            raise PlacementError(
                f"evicted, but not Bound or Running ({old.phase.value})",
                kind="task",
                name=e.task,
                field="phase",
            )
        evicted.add(e.task)
        final[e.task] = dataclasses.replace(old, phase=TaskPhase.RELEASING)
    placed: set[str] = set()
    steps = [(b, bound) for b in binds] + [(p, TaskPhase.PIPELINED) for p in pipelined]
    for d, phase in steps:
        old = tasks.get(d.task)
        if old is None:
            raise PlacementError("placed, but not in the state", kind="task", name=d.task)
        if d.task in placed:
            raise PlacementError("placed twice", kind="task", name=d.task, field="phase")
        moved = phase is TaskPhase.PIPELINED and d.task in evicted
        if old.phase not in _PLACEABLE and not moved:
            raise PlacementError(
                f"placed, but not Pending or Pipelined ({old.phase.value})",
                kind="task",
                name=d.task,
                field="phase",
            )
        placed.add(d.task)
        final[d.task] = dataclasses.replace(
            old, phase=phase, node=d.node, gpu_indices=tuple(d.gpu_indices)
        )
    jobs: list[Job] = []
    for name, status in statuses.items():
        if not isinstance(status, JobStatus):
            raise DecisionError(
                f"is a {type(status).__name__}, expected JobStatus",
                kind="decisions",
                field=f"jobs[{name!r}]",
            )
        job = core._jobs.get(name) if isinstance(name, str) else None
        job_phase = _JOB_PHASES.get(status.phase)
        if job is not None and job_phase is not None and job_phase is not job.phase:
            jobs.append(dataclasses.replace(job, phase=job_phase))
    return [(tasks[name], new) for name, new in final.items()], jobs
