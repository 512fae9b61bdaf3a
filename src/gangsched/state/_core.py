"""The state's stores, reverse references, running totals and change counters, shared by
the operations of :class:`~gangsched.state.ClusterState`."""

from __future__ import annotations

from collections.abc import ItemsView, Iterable, KeysView, Mapping, ValuesView
from typing import Any, TypeVar

from gangsched.errors import SnapshotError
from gangsched.limits import DEFAULT_LIMITS, MAX_TOTAL, Limits
from gangsched.model import DisruptionBudget, HyperNode, Job, Node, Queue, Task
from gangsched.model.checks import books_of
from gangsched.model.gpu_charge import device_take
from gangsched.model.snapshot import Snapshot
from gangsched.session.arrays import ArraysBase
from gangsched.state._args import count_arg, name_arg
from gangsched.units import PODS, canonical_unit

V = TypeVar("V")

ATTRS = ("nodes", "hypernodes", "queues", "jobs", "tasks", "disruption_budgets")
KIND = {a: a[:-1] for a in ATTRS}


def known(store: Mapping[str, V], kind: str, name: str) -> V:
    """The record ``name`` of ``store``, else the "not in the state" error (a ``name`` that
    is not a string: the wrong-argument error)."""
    if not isinstance(name, str):
        name_arg(name, kind)
    try:
        return store[name]
    except KeyError:
        raise SnapshotError("not in the state", kind=kind, name=name) from None


def check_new(record: Any, cls: type[Any], kind: str, store: Mapping[str, Any]) -> None:
    """``record`` is a ``cls`` whose name ``store`` does not hold yet."""
    check_type(record, cls, kind)
    if record.name in store:
        raise SnapshotError("already in the state", kind=kind, name=record.name, field="name")


def unreferenced(refs: Mapping[str, None] | None, what: str, kind: str, field: str) -> None:
    """No record names the one about to go (``refs``: those that do), else the error the
    snapshot without it raises at the first of them: ``what``, on that ``kind`` and ``field``."""
    if refs:
        raise SnapshotError(what, kind=kind, name=next(iter(refs)), field=field)


def check_known(record: Any, cls: type[Any], kind: str, store: Mapping[str, V]) -> V:
    """``record`` is a ``cls`` whose name ``store`` holds: the record it replaces."""
    check_type(record, cls, kind)
    return known(store, kind, record.name)


def check_type(record: object, cls: type[Any], kind: str) -> None:
    if not isinstance(record, cls):
        raise SnapshotError(
            f"is a {type(record).__name__}, expected {cls.__name__}", kind=kind, field="record"
        )


class Totals:
    """Running per-resource sums of one amount field over the records of one kind, checked
    against :data:`~gangsched.limits.MAX_TOTAL` as :func:`~gangsched.model.check_totals` does."""

    __slots__ = ("field", "gpu", "kind", "names", "sums")

    def __init__(self, kind: str, field: str, names: dict[str, int]) -> None:
        self.kind, self.field = kind, field
        self.sums: dict[str, int] = {}
        self.gpu = 0
        self.names = names  # resource name -> records naming it (shared by every total)

    def scratch(self) -> Totals:
        """A copy to check a batch of moves on, one after another, before any is made."""
        out = Totals(self.kind, self.field, dict(self.names))
        out.sums, out.gpu = dict(self.sums), self.gpu
        return out

    def move(
        self,
        name: str,
        old: Mapping[str, int] | None,
        new: Mapping[str, int] | None,
        old_gpu: int = 0,
        new_gpu: int = 0,
        *,
        commit: bool,
    ) -> None:
        """Check (and with ``commit`` apply) replacing ``old`` amounts by ``new`` ones."""
        for res, value in (new or {}).items():
            total = self.sums.get(res, 0) + value - (old or {}).get(res, 0)
            if total > MAX_TOTAL:
                raise SnapshotError(
                    f"the {self.kind}s' {self.field} {res} adds up past 2**60 = {MAX_TOTAL} "
                    f"{canonical_unit(res)} at this {self.kind}",
                    kind=self.kind,
                    name=name,
                    field=f"{self.field}.{res}",
                )
        if self.gpu + new_gpu - old_gpu > MAX_TOTAL:
            where = "gpus" if self.kind == "node" else "gpu_request"
            raise SnapshotError(
                f"the {self.kind}s' GPUs add up past 2**60 = {MAX_TOTAL} milli-GPU at this "
                f"{self.kind}",
                kind=self.kind,
                name=name,
                field=where,
            )
        if not commit:
            return
        count_names(self.names, old, new)
        for res, value in (old or {}).items():
            self.sums[res] -= value
        for res, value in (new or {}).items():
            self.sums[res] = self.sums.get(res, 0) + value
        self.gpu += new_gpu - old_gpu


def count_names(
    names: dict[str, int], old: Mapping[str, int] | None, new: Mapping[str, int] | None
) -> None:
    for res in old or ():
        left = names[res] - 1
        if left:
            names[res] = left
        else:
            del names[res]
    for res in new or ():
        names[res] = names.get(res, 0) + 1


def node_gpu(node: Node | None) -> int:
    return node.gpus.count * node.gpus.milli if node is not None and node.gpus else 0


def task_gpu(task: Task | None) -> int:
    return task.gpu_request.total_milli if task is not None and task.gpu_request else 0


class NodeLoad:
    """What the tasks on one node hold, summed as :func:`~gangsched.model.checks.check_node_tasks`
    books them: per resource (and pods) now and once releases finish, and per GPU device.
    Valid for the node's record ``node`` at its change generation ``gen`` (the state's
    ``_node_gen``): any change of the node or of a task on it that does not move the load
    along moves the generation past it, and a load of another record or generation is not
    read (:meth:`StateCore._node_load`)."""

    __slots__ = ("devices", "gen", "named", "node", "totals")

    def __init__(self, node: Node, gen: int, tasks: Iterable[Task]) -> None:
        self.node, self.gen = node, gen
        # 0 = now, 1 = once releases finish (reservations included), as the check books them.
        self.totals: tuple[dict[str, int], dict[str, int]] = ({}, {})
        self.devices: tuple[dict[int, int], dict[int, int]] = ({}, {})
        self.named: dict[int, int] = {}  # device index -> tasks naming it
        for task in tasks:
            self.move(task, 1)

    def move(self, task: Task, sign: int) -> None:
        """Add (``sign`` 1) or take away (-1) what ``task``, which names this node, holds."""
        which = books_of(task.phase)
        if not which:
            return
        request = task.request.items()
        for b in which:
            book = self.totals[b]
            for res, amount in request:
                if res != PODS:
                    book[res] = book.get(res, 0) + sign * amount
            book[PODS] = book.get(PODS, 0) + sign
        gpu = task.gpu_request
        if gpu is None:
            return
        gpus = self.node.gpus
        take = sign * (
            device_take(gpu.milli, gpus.milli, gpus.sharing)
            if gpus is not None
            else device_take(gpu.milli, 0, False)
        )
        named = self.named
        for idx in task.gpu_indices:
            # (an index past the node's devices is booked too: it fails :meth:`fits`)
            left = named.get(idx, 0) + sign
            if left:
                named[idx] = left
            else:
                del named[idx]
            for b in which:
                held = self.devices[b]
                held[idx] = held.get(idx, 0) + take

    def fits(self) -> bool:
        """Whether every total fits the node: exactly when ``check_node_tasks`` on the node's
        tasks passes (it reads the same sums; which error it raises, it alone says)."""
        node = self.node
        allocatable = node.allocatable
        limit = node.pod_limit
        for book in self.totals:
            for res, amount in book.items():
                if res == PODS:
                    if limit is not None and amount > limit:
                        return False
                elif amount > allocatable.get(res, 0):
                    return False
        gpus = node.gpus
        n_dev, cap = (gpus.count, gpus.milli) if gpus is not None else (0, 0)
        if self.named and max(self.named) >= n_dev:
            return False
        return all(max(held.values(), default=0) <= cap for held in self.devices)


class StateCore:
    """What every operation of the state reads and keeps current (see
    :class:`~gangsched.state.ClusterState`)."""

    def __init__(self, snapshot: Snapshot | None = None, *, limits: Limits | None = None) -> None:
        if snapshot is not None and not isinstance(snapshot, Snapshot):
            raise SnapshotError(
                f"expected a Snapshot, got {type(snapshot).__name__}",
                kind="state",
                field="snapshot",
            )
        if limits is not None and not isinstance(limits, Limits):
            raise SnapshotError(
                f"expected Limits, got {type(limits).__name__}", kind="state", field="limits"
            )
        self.limits: Limits = (
            limits
            if limits is not None
            else (snapshot.limits if snapshot is not None else DEFAULT_LIMITS)
        )
        self._nodes: dict[str, Node] = {}
        self._hypernodes: dict[str, HyperNode] = {}
        self._queues: dict[str, Queue] = {}
        self._jobs: dict[str, Job] = {}
        self._tasks: dict[str, Task] = {}
        self._disruption_budgets: dict[str, DisruptionBudget] = {}
        # (kind, name) of a job or task -> the budgets naming it.
        self._budget_refs: dict[tuple[str, str], dict[str, None]] = {}
        # Reverse references (ordered sets as dicts).
        self._job_tasks: dict[str, dict[str, None]] = {}
        self._node_tasks: dict[str, dict[str, None]] = {}
        self._queue_jobs: dict[str, dict[str, None]] = {}
        self._children: dict[str, dict[str, None]] = {}
        self._owners: dict[str, dict[str, None]] = {}  # member -> hypernodes listing it
        #: Resource names the records use, with how many records name each (the columns of
        #: the snapshot's arrays).
        self._resource_names: dict[str, int] = {}
        names = self._resource_names
        self._totals = {
            "node": Totals("node", "allocatable", names),
            "task": Totals("task", "request", names),
            "guarantee": Totals("queue", "guarantee", names),
            "deserved": Totals("queue", "deserved", names),
            "job": Totals("job", "min_resources", names),
        }
        self._weights = 0
        # Change tracking.
        self.generation = 0
        self._node_gen: dict[str, int] = {}
        self._cycle_gen = 0
        self._removed_nodes: set[str] = set()
        # Per node, what its tasks hold (:class:`NodeLoad`), kept with the generation it is of.
        self._node_loads: dict[str, NodeLoad] = {}
        self._cache: dict[str, tuple[tuple[Any, ...], Mapping[str, int]]] = {}
        self._topology: object = None
        self._last: Snapshot | None = None
        self._last_gen = 0  # generation when ``_last`` was taken
        if snapshot is not None:
            if limits is not None and limits != snapshot.limits:
                # Other bounds: check the records against them once.
                snapshot = Snapshot(**{a: getattr(snapshot, a) for a in ATTRS}, limits=limits)
            self._load(snapshot)

    # ------------------------------------------------------------------ loading

    def _load(self, snap: Snapshot) -> None:
        """Take a validated snapshot's records as they are (no re-check)."""
        for node in snap.nodes:
            self._index_node(node)
        for hn in snap.hypernodes:
            self._hypernodes[hn.name] = hn
            self._list_members(hn)
        for q in snap.queues:
            self._index_queue(q)
        for job in snap.jobs:
            self._index_job(job)
        for task in snap.tasks:
            self._totals["task"].move(task.name, None, task.request, 0, task_gpu(task),
                                      commit=True)  # fmt: skip
            self._link_task(task, None)
        for budget in snap.disruption_budgets:
            self._disruption_budgets[budget.name] = budget
            self._list_budget(budget)
        self._topology = snap._topology
        # Another state's snapshot may carry that state's reuse plan: start afresh then.
        self._last = None if isinstance(snap._arrays, ArraysBase) else snap
        for attr in ATTRS:
            records = getattr(snap, attr)
            index = getattr(snap, f"{KIND[attr]}_index")
            self._cache[attr] = (records, index)  # shared: never mutated

    # ------------------------------------------------------------------ indexing

    def _index_node(self, node: Node) -> None:
        """Count a new node in the totals (checked first), then store it, with no tasks."""
        self._totals["node"].move(node.name, None, node.allocatable, 0, node_gpu(node),
                                  commit=True)  # fmt: skip
        self._nodes[node.name] = node
        self._node_tasks[node.name] = {}
        self._node_gen[node.name] = 0

    def _index_queue(self, q: Queue) -> None:
        """Count a new queue in the totals (checked first), then store it under its parent,
        with no jobs."""
        self._queue_totals(q.name, None, q, commit=True)
        self._queues[q.name] = q
        self._queue_jobs[q.name] = {}
        self._children.setdefault(q.name, {})
        if q.parent is not None:
            self._children.setdefault(q.parent, {})[q.name] = None

    def _index_job(self, job: Job) -> None:
        """Count a new job in the totals (checked first), then store it in its queue, with no
        tasks."""
        self._totals["job"].move(job.name, None, job.min_resources, commit=True)
        self._jobs[job.name] = job
        self._job_tasks[job.name] = {}
        self._queue_jobs[job.queue][job.name] = None

    def _link_task(self, task: Task, old: Task | None) -> None:
        """Store ``task`` in place of ``old`` (None: a new task), listed under its job and the
        node it names."""
        self._tasks[task.name] = task
        if old is not None:
            if old.job != task.job:
                del self._job_tasks[old.job][task.name]
            if old.node is not None and old.node != task.node:
                del self._node_tasks[old.node][task.name]
        self._job_tasks[task.job][task.name] = None
        if task.node is not None:
            self._node_tasks[task.node][task.name] = None

    def _queue_totals(
        self, name: str, old: Queue | None, new: Queue | None, *, commit: bool
    ) -> None:
        weights = self._weights - (old.weight if old else 0) + (new.weight if new else 0)
        if weights > MAX_TOTAL:
            raise SnapshotError(
                f"the queues' weights add up past 2**60 = {MAX_TOTAL} at this queue",
                kind="queue",
                name=name,
                field="weight",
            )
        # Both totals are checked before either is applied.
        moves = [
            (
                self._totals[attr],
                getattr(old, attr) if old else None,
                getattr(new, attr) if new else None,
            )
            for attr in ("guarantee", "deserved")
        ]
        for total, before, after in moves:
            total.move(name, before, after, commit=False)
        if commit:
            count_names(
                self._resource_names,
                old.capability if old else None,
                new.capability if new else None,
            )
            for total, before, after in moves:
                total.move(name, before, after, commit=True)
            self._weights = weights

    def _list_members(self, hn: HyperNode) -> None:
        for m in hn.members:
            self._owners.setdefault(m, {})[hn.name] = None

    def _list_budget(self, budget: DisruptionBudget) -> None:
        for attr in ("jobs", "tasks"):
            for ref in getattr(budget, attr):
                self._budget_refs.setdefault((attr[:-1], ref), {})[budget.name] = None

    def _node_load(self, name: str) -> NodeLoad:
        """What the tasks on node ``name`` hold now, taken out of the kept loads (the caller
        puts it back with :meth:`_keep_load` once the change it checks is made; an error in
        between leaves none kept): the kept one when it is of the node's record and
        generation, else summed again from the node's tasks."""
        load = self._node_loads.pop(name, None)
        node = self._nodes[name]
        gen = self._node_gen[name]
        if load is None or load.node is not node or load.gen != gen:
            tasks = self._tasks
            load = NodeLoad(node, gen, [tasks[t] for t in self._node_tasks[name]])
        return load

    def _keep_load(self, name: str, load: NodeLoad) -> None:
        """Keep ``load`` as node ``name``'s, at the node's generation now (the change it
        follows is made)."""
        load.gen = self._node_gen[name]
        self._node_loads[name] = load

    # ------------------------------------------------------------------ lookups

    @property
    def nodes(self) -> Mapping[str, Node]:
        """Read-only view of the nodes by name, in order."""
        return View(self._nodes)

    @property
    def hypernodes(self) -> Mapping[str, HyperNode]:
        return View(self._hypernodes)

    @property
    def queues(self) -> Mapping[str, Queue]:
        return View(self._queues)

    @property
    def jobs(self) -> Mapping[str, Job]:
        return View(self._jobs)

    @property
    def tasks(self) -> Mapping[str, Task]:
        return View(self._tasks)

    @property
    def disruption_budgets(self) -> Mapping[str, DisruptionBudget]:
        return View(self._disruption_budgets)

    def tasks_of(self, job: str) -> tuple[Task, ...]:
        """The tasks of ``job``, in order of addition."""
        return self._task_records(known(self._job_tasks, "job", job))

    def tasks_on(self, node: str) -> tuple[Task, ...]:
        """The tasks that name ``node`` (any phase)."""
        return self._task_records(known(self._node_tasks, "node", node))

    def _task_records(self, names: Iterable[str]) -> tuple[Task, ...]:
        return tuple(self._tasks[t] for t in names)

    # ------------------------------------------------------------------ change tracking

    def _bump(self, kind: str, node: str | None = None) -> None:
        self.generation += 1
        self._cache.pop(kind, None)
        if node is not None and node in self._node_gen:
            self._node_gen[node] = self.generation

    def node_generation(self, name: str) -> int:
        """The generation at which node ``name``, or a task on it, last changed (0: not since
        the state was built)."""
        return known(self._node_gen, "node", name)

    def changed_nodes(self, since: int | None = None) -> tuple[str, ...]:
        """Nodes changed (or added) after generation ``since`` (default: the last cycle, see
        :meth:`mark_cycle`), in node order. Removed nodes are in :meth:`removed_nodes`."""
        gen = self._cycle_gen if since is None else count_arg(since, "state", "since")
        return tuple(name for name, g in self._node_gen.items() if g > gen)

    def removed_nodes(self) -> tuple[str, ...]:
        """Nodes removed since the last cycle (sorted; a name added again is listed too)."""
        return tuple(sorted(self._removed_nodes))

    def mark_cycle(self) -> int:
        """Start counting changes for the next cycle; returns the current generation.
        :meth:`schedule` calls it."""
        self._cycle_gen = self.generation
        self._removed_nodes.clear()
        return self.generation

    # ------------------------------------------------------------------ cycles

    def _records(self, attr: str) -> tuple[tuple[Any, ...], Mapping[str, int]]:
        cached = self._cache.get(attr)
        if cached is None:
            store: dict[str, Any] = getattr(self, f"_{attr}")
            records = tuple(store.values())
            # (the tasks' name index is made only if read: a cycle reads tasks by row)
            index: Mapping[str, int] = (
                NameIndex(records)
                if attr == "tasks"
                else dict(zip(store, range(len(store)), strict=True))
            )
            cached = (records, index)
            self._cache[attr] = cached
        return cached


class NameIndex(Mapping[str, int]):
    """Each record's position in ``records`` by its name, as a snapshot's name index; the
    dict is made the first time it is read (``records`` never change)."""

    __slots__ = ("_index", "_records")

    def __init__(self, records: tuple[Any, ...]) -> None:
        self._records = records
        self._index: dict[str, int] | None = None

    def _made(self) -> dict[str, int]:
        index = self._index
        if index is None:
            names = [rec.name for rec in self._records]
            index = self._index = dict(zip(names, range(len(names)), strict=True))
        return index

    def __getitem__(self, key: str) -> int:
        return self._made()[key]

    def __iter__(self) -> Any:
        return iter(self._made())

    def __len__(self) -> int:
        return len(self._records)

    def __contains__(self, key: object) -> bool:
        return key in self._made()

    def get(self, key: str, default: Any = None) -> Any:
        return self._made().get(key, default)

    def keys(self) -> KeysView[str]:
        return self._made().keys()

    def values(self) -> ValuesView[int]:
        return self._made().values()

    def items(self) -> ItemsView[str, int]:
        return self._made().items()


class View(Mapping[str, V]):
    """A read-only mapping over one of the state's dicts."""

    __slots__ = ("_d",)

    def __init__(self, d: dict[str, V]) -> None:
        self._d = d

    def __getitem__(self, key: str) -> V:
        return self._d[key]

    def __iter__(self) -> Any:
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)

    def __contains__(self, key: object) -> bool:
        return key in self._d

    # The dict's own views (read-only, at C speed) instead of the Mapping mixins' (one
    # ``__getitem__`` call per record).
    def keys(self) -> KeysView[str]:
        return self._d.keys()

    def values(self) -> ValuesView[V]:
        return self._d.values()

    def items(self) -> ItemsView[str, V]:
        return self._d.items()
