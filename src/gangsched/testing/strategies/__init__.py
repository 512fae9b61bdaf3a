"""Hypothesis strategies that build *valid* gangsched records and whole snapshots.

Every strategy here produces objects that pass validation, so a property test can spend its
examples on the behaviour under test instead of on input errors. Sizes are small by default
(a few nodes, a few jobs of a few tasks) so failures shrink to readable cases.

Quantities are written the way people write them in manifests (``"500m"``, ``2``, ``"4Gi"``,
``"1e3"``, ``0.5``): the records parse them, so every generated object also exercises the
quantity parser. :func:`quantity_pairs` gives the written form together with its canonical
int, for testing parsers directly.

:func:`snapshots` builds whole clusters with contention: pending demand usually exceeds free
capacity, gangs have ``min_available`` between 1 and their task count, and (with
``running=True``) some gangs already run. Running tasks are placed by a small first-fit that
honours every rule the snapshot validates (resources, pod limits, GPU devices) and also the
scheduling predicates (node selectors, taints, GPU models, queue capability, hard network
topology), so a scheduler under test starts from a state it could have produced itself.

Typical use::

    from hypothesis import given
    from gangsched.testing.strategies import snapshots

    @given(snapshots(max_nodes=6))
    def test_never_overcommits(snapshot):
        decisions = schedule(snapshot, config)
        ...

The record strategies live in ``strategies.records``; this module builds snapshots from them
and re-exports them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from hypothesis import strategies as st

from gangsched.model import (
    DisruptionBudget,
    HyperNode,
    Job,
    JobPhase,
    Node,
    Queue,
    Task,
    TaskPhase,
    TopologyMode,
)
from gangsched.model.snapshot import Snapshot
from gangsched.testing.strategies.records import (
    EXTENDED_RESOURCE,
    GPU_MODELS,
    ZONES,
    _sum_requests,
    gangs,
    hypernode_trees,
    jobs,
    nodes,
    quantities,
    quantity_pairs,
    queues,
    spellings,
    tasks,
)
from gangsched.testing.strategies.records import Quantity as Quantity
from gangsched.units import PODS

__all__ = [
    "EXTENDED_RESOURCE",
    "GPU_MODELS",
    "ZONES",
    "budgets",
    "gangs",
    "hypernode_trees",
    "jobs",
    "nodes",
    "quantities",
    "quantity_pairs",
    "queues",
    "snapshots",
    "spellings",
    "tasks",
]


# --------------------------------------------------------------------------------------------
# Snapshots


class _Ledger:
    """Free capacity while the strategy places running tasks first-fit."""

    def __init__(self, node_list: Sequence[Node], queue_list: Sequence[Queue]) -> None:
        self.nodes = {n.name: n for n in node_list}
        self.free = {
            n.name: {r: v for r, v in n.allocatable.items() if r != PODS} for n in node_list
        }
        self.pods = {n.name: n.pod_limit for n in node_list}
        self.gpu_free = {n.name: [n.gpus.milli] * n.gpus.count if n.gpus else [] for n in node_list}
        self.gpu_whole = {n.name: [False] * (n.gpus.count if n.gpus else 0) for n in node_list}
        self.queues = {q.name: q for q in queue_list}
        self.queue_used: dict[str, dict[str, int]] = {q.name: {} for q in queue_list}

    def copy(self) -> _Ledger:
        other = object.__new__(_Ledger)
        other.nodes = self.nodes
        other.free = {k: dict(v) for k, v in self.free.items()}
        other.pods = dict(self.pods)
        other.gpu_free = {k: list(v) for k, v in self.gpu_free.items()}
        other.gpu_whole = {k: list(v) for k, v in self.gpu_whole.items()}
        other.queues = self.queues
        other.queue_used = {k: dict(v) for k, v in self.queue_used.items()}
        return other

    def queue_admits(self, queue: str, demand: Mapping[str, int]) -> bool:
        """Whether ``demand`` fits the capability of ``queue`` and of every ancestor."""
        name: str | None = queue
        while name is not None:
            q = self.queues[name]
            if q.capability is not None:
                used = self.queue_used[name]
                for res, cap in q.capability.items():
                    if used.get(res, 0) + demand.get(res, 0) > cap:
                        return False
            name = q.parent
        return True

    def charge_queue(self, queue: str, demand: Mapping[str, int]) -> None:
        name: str | None = queue
        while name is not None:
            used = self.queue_used[name]
            for res, amount in demand.items():
                used[res] = used.get(res, 0) + amount
            name = self.queues[name].parent

    def _devices(self, task: Task, node: Node) -> tuple[int, ...] | None:
        gpu = task.gpu_request
        if gpu is None:
            return ()
        if node.gpus is None or gpu.milli > node.gpus.milli:
            return None
        if gpu.models and node.gpus.model not in gpu.models:
            return None
        free = self.gpu_free[node.name]
        whole_held = self.gpu_whole[node.name]
        exclusive = gpu.milli >= node.gpus.milli or not node.gpus.sharing
        chosen = [
            i
            for i in range(node.gpus.count)
            if (free[i] == node.gpus.milli if exclusive else not whole_held[i])
            and free[i] >= gpu.milli
        ][: gpu.count]
        return tuple(chosen) if len(chosen) == gpu.count else None

    def try_place(self, task: Task, node_name: str) -> tuple[int, ...] | None:
        """Place ``task`` on the node if it fits; return its GPU indices, or ``None``."""
        node = self.nodes[node_name]
        if any(node.labels.get(k) != v for k, v in task.node_selector.items()):
            return None
        for taint in node.taints:
            if taint.effect != "PreferNoSchedule" and not any(
                t.tolerates(taint) for t in task.tolerations
            ):
                return None
        free = self.free[node_name]
        if any(amount > free.get(res, 0) for res, amount in task.request.items() if res != PODS):
            return None
        pods = self.pods[node_name]
        if pods is not None and pods < 1:
            return None
        devices = self._devices(task, node)
        if devices is None:
            return None
        for res, amount in task.request.items():
            if res != PODS:
                free[res] = free.get(res, 0) - amount
        if pods is not None:
            self.pods[node_name] = pods - 1
        if task.gpu_request is not None and node.gpus is not None:
            exclusive = task.gpu_request.milli >= node.gpus.milli or not node.gpus.sharing
            for i in devices:
                self.gpu_free[node_name][i] -= task.gpu_request.milli
                self.gpu_whole[node_name][i] = exclusive
        return devices


def _domains(hypernode_list: Sequence[HyperNode], highest: int) -> list[list[str]]:
    """Node sets of every hypernode of tier ≤ ``highest``, lowest tier first."""
    by_name = {h.name: h for h in hypernode_list}

    def leaves(h: HyperNode) -> list[str]:
        out: list[str] = []
        for m in h.members:
            out += leaves(by_name[m]) if m in by_name else [m]
        return out

    chosen = sorted((h for h in hypernode_list if h.tier <= highest), key=lambda h: h.tier)
    return [leaves(h) for h in chosen]


def _place_gang(
    ledger: _Ledger, job: Job, members: Sequence[Task], domains: list[list[str]]
) -> tuple[_Ledger, list[tuple[str, tuple[int, ...]]]] | None:
    """First-fit all ``members`` inside the first domain that holds them; ``None`` if none."""
    demand = _sum_requests(members)
    if not ledger.queue_admits(job.queue, demand):
        return None
    for domain in domains:
        trial = ledger.copy()
        placed: list[tuple[str, tuple[int, ...]]] = []
        for task in members:
            for node_name in domain:
                devices = trial.try_place(task, node_name)
                if devices is not None:
                    placed.append((node_name, devices))
                    break
            else:
                break
        if len(placed) == len(members):
            trial.charge_queue(job.queue, demand)
            return trial, placed
    return None


_RUNNING_PHASES = (TaskPhase.RUNNING, TaskPhase.RUNNING, TaskPhase.BOUND, TaskPhase.RELEASING)


@st.composite
def snapshots(
    draw: st.DrawFn,
    *,
    min_nodes: int = 1,
    max_nodes: int = 4,
    max_jobs: int = 4,
    max_tasks_per_job: int = 4,
    max_queues: int = 3,
    running: bool = True,
    topology: bool = True,
) -> Snapshot:
    """A whole consistent snapshot.

    Nodes ``node-<i>`` of mixed shapes, an optional hypernode tree (``topology``), queues,
    and up to ``max_jobs`` gangs ``job-<j>``. With ``running``, each gang may already run:
    between ``min_available`` and all of its tasks are placed first-fit (inside one allowed
    domain for hard network topology, within queue capability); those tasks are Running,
    Bound or Releasing with their node and GPU indices and the job is Running. A gang that
    does not fit stays pending in full. Pending demand usually exceeds the free capacity.
    """
    n_nodes = draw(st.integers(min_nodes, max_nodes))
    node_list = [draw(nodes(f"node-{i}")) for i in range(n_nodes)]
    hypernode_list: tuple[HyperNode, ...] = ()
    if topology and node_list and draw(st.booleans()):
        hypernode_list = draw(hypernode_trees([n.name for n in node_list]))
    max_tier = max((h.tier for h in hypernode_list), default=0)
    queue_list = draw(queues(max_queues=max_queues))
    queue_names = [q.name for q in queue_list]
    n_jobs = draw(st.integers(1, max_jobs)) if max_jobs > 0 else 0
    ledger = _Ledger(node_list, queue_list)
    all_nodes = [[n.name for n in node_list]]
    job_list: list[Job] = []
    task_list: list[Task] = []
    for j in range(n_jobs):
        job, members = draw(
            gangs(
                queue_names,
                name=f"job-{j}",
                max_tasks=max_tasks_per_job,
                max_tier=max_tier,
                creation=j,
            )
        )
        placed: list[tuple[str, tuple[int, ...]]] = []
        if running and draw(st.integers(0, 2)) != 0:
            count = draw(st.integers(job.min_available, len(members)))
            topo = job.network_topology
            domains = all_nodes
            if (
                topo is not None
                and topo.mode is TopologyMode.HARD
                and topo.highest_tier_allowed is not None
            ):
                domains = _domains(hypernode_list, topo.highest_tier_allowed)
            result = _place_gang(ledger, job, members[:count], domains)
            if result is not None:
                ledger, placed = result
        if placed:
            job = replace(job, phase=JobPhase.RUNNING)
        for i, task in enumerate(members):
            if i < len(placed):
                node_name, devices = placed[i]
                task = replace(
                    task,
                    phase=draw(st.sampled_from(_RUNNING_PHASES)),
                    node=node_name,
                    gpu_indices=devices,
                )
            task_list.append(task)
        job_list.append(job)
    return Snapshot(
        nodes=tuple(node_list),
        hypernodes=hypernode_list,
        queues=queue_list,
        jobs=tuple(job_list),
        tasks=tuple(task_list),
        disruption_budgets=draw(budgets([j.name for j in job_list])),
    )


@st.composite
def budgets(draw: st.DrawFn, job_names: Sequence[str]) -> tuple[DisruptionBudget, ...]:
    """Usually none; sometimes one or two disruption budgets ``pdb-<k>`` over some of
    ``job_names``, with ``min_available`` or ``max_unavailable`` as a count or a percentage."""
    if not job_names or draw(st.integers(0, 2)) != 0:
        return ()
    out = []
    for k in range(draw(st.integers(1, 2))):
        covered = draw(st.lists(st.sampled_from(tuple(job_names)), min_size=1, max_size=2))
        amount = draw(st.sampled_from((0, 1, 2)) | st.sampled_from(("50%", "100%")))
        by_min = draw(st.booleans())
        out.append(
            DisruptionBudget(
                name=f"pdb-{k}",
                jobs=tuple(dict.fromkeys(covered)),
                min_available=amount if by_min else None,
                max_unavailable=None if by_min else amount,
            )
        )
    return tuple(out)
