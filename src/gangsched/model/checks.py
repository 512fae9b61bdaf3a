"""The per-record rules of a snapshot, one function per rule.

:class:`~gangsched.model.snapshot.Snapshot` applies them to every record on construction;
:class:`~gangsched.state.ClusterState` applies them to the records one operation touches.
Both raise the same :class:`~gangsched.errors.SnapshotError` (same message, kind, name and
field), so a state refuses an operation exactly when a snapshot of the changed records would
be refused.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable

from gangsched.errors import SnapshotError
from gangsched.limits import Limits
from gangsched.model import NODE_PHASES, DisruptionBudget, Job, Node, Queue, Task, TaskPhase
from gangsched.model.gpu_charge import device_take
from gangsched.units import PODS

__all__ = [
    "ROOT_QUEUE",
    "NodeBooks",
    "books_of",
    "check_budget_refs",
    "check_hypernode_name",
    "check_job_queue",
    "check_node_tasks",
    "check_queue_parent",
    "check_task_count",
    "check_task_refs",
    "queue_cycle_error",
    "queue_depth_error",
]

#: Name of the root of the queue hierarchy (Volcano's ``root`` queue): it has no parent.
ROOT_QUEUE = "root"


def check_task_count(count: int, limits: Limits) -> None:
    """At most ``limits.max_tasks`` tasks."""
    if count > limits.max_tasks:
        raise SnapshotError(
            f"{count} tasks is beyond the limit of {limits.max_tasks} (Limits.max_tasks)",
            kind="snapshot",
            field="tasks",
        )


def check_queue_parent(q: Queue, queues: Container[str]) -> None:
    """The parent is a known queue; the root queue has none."""
    if q.parent is not None and q.parent not in queues:
        raise SnapshotError(
            f"unknown parent queue {q.parent!r}", kind="queue", name=q.name, field="parent"
        )
    if q.parent is not None and q.name == ROOT_QUEUE:
        raise SnapshotError(
            f"the root of the queue hierarchy cannot have a parent (got {q.parent!r})",
            kind="queue",
            name=q.name,
            field="parent",
        )


def queue_cycle_error(name: str, through: str) -> SnapshotError:
    return SnapshotError(
        f"queue parent cycle through {through!r}", kind="queue", name=name, field="parent"
    )


def queue_depth_error(name: str, depth: int, limit: int) -> SnapshotError:
    return SnapshotError(
        f"queue nesting depth {depth} is beyond the limit of {limit} (Limits.max_queue_depth)",
        kind="queue",
        name=name,
        field="parent",
    )


def check_hypernode_name(name: str, nodes: Container[str]) -> None:
    """A hypernode's name is not a node's."""
    if name in nodes:
        raise SnapshotError(
            "a node has the same name, so members would be ambiguous",
            kind="hypernode",
            name=name,
            field="name",
        )


def check_job_queue(job: Job, queues: Container[str]) -> None:
    if job.queue not in queues:
        raise SnapshotError(
            f"unknown queue {job.queue!r}", kind="job", name=job.name, field="queue"
        )


def _task_error(task: Task, field: str, detail: str) -> SnapshotError:
    """The snapshot error naming ``task`` and its ``field``."""
    return SnapshotError(detail, kind="task", name=task.name, field=field)


def check_task_refs(task: Task, jobs: Container[str], nodes: Container[str]) -> None:
    """The task's job exists, and so does whatever node it names (Succeeded / Failed / Pending
    tasks may carry their last node: it holds nothing, but it must exist)."""
    if task.job not in jobs:
        raise _task_error(task, "job", f"unknown job {task.job!r}")
    if task.node is not None and task.node not in nodes:
        raise _task_error(task, "node", f"unknown node {task.node!r}")


def check_budget_refs(
    budget: DisruptionBudget, jobs: Container[str], tasks: Container[str]
) -> None:
    """A disruption budget names known jobs and tasks."""
    for attr, known in (("jobs", jobs), ("tasks", tasks)):
        for i, ref in enumerate(getattr(budget, attr)):
            if ref not in known:
                raise SnapshotError(
                    f"unknown {attr[:-1]} {ref!r}",
                    kind="disruption_budget",
                    name=budget.name,
                    field=f"{attr}[{i}]",
                )


def books_of(phase: TaskPhase) -> tuple[int, ...]:
    """Which of a node's two books a task in ``phase`` that names the node counts in: 0, what
    is held now; 1, what is held once releases finish (reservations included). A reserved
    (Pipelined) task counts once releases finish only, a Releasing one now only, a task that
    holds nothing (not in :data:`~gangsched.model.NODE_PHASES`) in neither."""
    if phase not in NODE_PHASES:
        return ()
    if phase is TaskPhase.PIPELINED:
        return (1,)
    return (0,) if phase is TaskPhase.RELEASING else (0, 1)


class NodeBooks:
    """Tasks on nodes fit them, now and once releases finish.

    *Now* counts what Bound, Running and Releasing tasks hold; *later* counts what stays once
    the Releasing tasks are gone plus what carried reservations (Pipelined tasks) hold. Each
    book must fit the node's allocatable, its pod limit and every GPU device (what a task takes
    from a device is :func:`~gangsched.model.gpu_charge.device_take`), and every device index must
    exist on the node. :meth:`add` books the tasks in order (device errors surface there, at
    the task that over-commits); :meth:`check` then checks the per-node totals.
    """

    __slots__ = ("books", "dev_books", "holder")

    def __init__(self) -> None:
        # 0 = now, 1 = once releases finish (reservations included).
        self.books: tuple[dict[str, dict[str, int]], dict[str, dict[str, int]]] = ({}, {})
        self.dev_books: tuple[dict[tuple[str, int], int], dict[tuple[str, int], int]] = ({}, {})
        self.holder: tuple[dict[tuple[str, int], str], dict[tuple[str, int], str]] = ({}, {})

    def add(self, task: Task, node: Node) -> None:
        """Book ``task`` (which names ``node``); tasks that hold nothing are skipped."""
        which = books_of(task.phase)
        if not which:
            return
        for b in which:
            book = self.books[b].setdefault(node.name, {})
            for res, amount in task.request.items():
                if res != PODS:
                    book[res] = book.get(res, 0) + amount
            book[PODS] = book.get(PODS, 0) + 1
        gpu = task.gpu_request
        if gpu is None:
            return
        gpus = node.gpus
        n_dev = gpus.count if gpus is not None else 0
        cap = gpus.milli if gpus is not None else 0
        take = device_take(gpu.milli, cap, gpus.sharing if gpus is not None else False)
        for idx in task.gpu_indices:
            if idx >= n_dev:
                why = f"GPU index {idx} out of range: node {node.name!r} has {n_dev} GPUs"
                raise _task_error(task, "gpu_indices", why)
            key = (node.name, idx)
            for b in which:
                held = self.dev_books[b].get(key, 0) + take
                self.dev_books[b][key] = held
                if held > cap:
                    other = self.holder[b].get(key, "?")
                    when = "" if b == 0 else " once releases finish"
                    raise _task_error(
                        task,
                        "gpu_indices",
                        f"GPU {idx} of node {node.name!r} over-committed{when}: "
                        f"{held} of {cap} milli-GPU (already held by task {other!r})",
                    )
                self.holder[b].setdefault(key, task.name)

    def check(self, node_of: Callable[[str], Node]) -> None:
        """The booked totals fit each node (``node_of`` maps a node name to its record)."""
        for b, when in ((0, ""), (1, " once releases finish (with reservations)")):
            for node_name, per_res in self.books[b].items():
                node = node_of(node_name)
                for res, amount in sorted(per_res.items()):
                    if res == PODS:
                        limit = node.pod_limit
                        if limit is not None and amount > limit:
                            raise SnapshotError(
                                f"{amount} tasks on a node with a pod limit of {limit}{when}",
                                kind="node",
                                name=node_name,
                                field=f"allocatable.{PODS}",
                            )
                        continue
                    cap = node.allocatable.get(res, 0)
                    if amount > cap:
                        raise SnapshotError(
                            f"running tasks use {amount} of {res} but only {cap} is "
                            f"allocatable{when}",
                            kind="node",
                            name=node_name,
                            field=f"allocatable.{res}",
                        )


def check_node_tasks(node: Node, tasks: Iterable[Task]) -> None:
    """:class:`NodeBooks` for one node and the tasks that name it."""
    books = NodeBooks()
    for task in tasks:
        books.add(task, node)
    books.check(lambda _name: node)
