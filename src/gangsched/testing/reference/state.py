"""The plain reference scheduler's state and its gang and order rules (see
:mod:`gangsched.testing.reference`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from gangsched.config import Config, PluginOption
from gangsched.errors import ConfigError
from gangsched.model import GpuRequest, TaskPhase
from gangsched.model.gpu_charge import device_take, queue_gpu_charge
from gangsched.model.snapshot import Snapshot
from gangsched.units import GPU, PODS

NO_LIMIT = 2**50  # pod capacity of a node without a pod limit
EPS = 0.1  # Volcano's minResource: amounts closer than this compare equal
SLACK = 1e-6  # float slack of the strict quota comparisons
DEFAULT_CPU, DEFAULT_MEMORY = 100, 200 * 1024 * 1024  # kube's non-zero defaults
READY = ("Allocated", "Bound", "Running", "Succeeded")
RESERVED = (*READY, "Pipelined")
VALID = ("Pending", "Allocated", "Pipelined", "Bound", "Running", "Succeeded")
HOLDING = ("Allocated", "Pipelined", "Bound", "Running")
SUPPORTED = {
    "priority",
    "gang",
    "conformance",
    "overcommit",
    "drf",
    "predicates",
    "proportion",
    "nodeorder",
    "binpack",
}
_SUFFIX = re.compile(r"-(\d+)$")


def _device_milli(g: GpuRequest | None, cap: int, sharing: bool) -> int:
    if g is None:
        return 0
    return device_take(g.milli, cap, sharing)


class _State:
    """The cycle's state: resource rows per node, job and queue, task states, and the
    plugin, gang and ordering rules read from them."""

    #: Each queue's deserved share (set by the proportion rules).
    deserved: list[dict[str, float]]

    def __init__(self, snap: Snapshot, config: Config) -> None:
        for action in config.actions:
            if action not in ("enqueue", "allocate", "backfill"):
                raise ConfigError("not supported by the reference", kind="action", name=action)
        self.opts: list[list[PluginOption]] = [list(t.plugins) for t in config.tiers]
        for opt in (o for tier in self.opts for o in tier):
            if opt.name not in SUPPORTED:
                raise ConfigError("not supported by the reference", kind="plugin", name=opt.name)
        self.snap, self.config = snap, config
        self.res = sorted(snap.resource_names())
        self.alloc: list[dict[str, int]] = []
        for node in snap.nodes:
            row = dict.fromkeys(self.res, 0)
            row.update(node.allocatable)
            row.setdefault(PODS, NO_LIMIT)
            if PODS not in node.allocatable:
                row[PODS] = NO_LIMIT
            row[GPU] = node.gpus.count * node.gpus.milli if node.gpus else 0
            self.alloc.append(row)
        self.used = [dict.fromkeys(self.res, 0) for _ in snap.nodes]
        self.rel = [dict.fromkeys(self.res, 0) for _ in snap.nodes]
        self.pip = [dict.fromkeys(self.res, 0) for _ in snap.nodes]
        self.dev_used = [[0] * (n.gpus.count if n.gpus else 0) for n in snap.nodes]
        self.dev_rel = [[0] * len(d) for d in self.dev_used]
        self.dev_pip = [[0] * len(d) for d in self.dev_used]
        self.state = [
            "Pending" if t.phase is TaskPhase.PENDING else t.phase.value for t in snap.tasks
        ]
        self.where = [snap.node_index[t.node] if t.node is not None else -1 for t in snap.tasks]
        self.gpus = [t.gpu_indices for t in snap.tasks]
        self.job_of = [snap.job_index[t.job] for t in snap.tasks]
        self.tasks_of: list[list[int]] = [[] for _ in snap.jobs]
        for t, j in enumerate(self.job_of):
            self.tasks_of[j].append(t)
        self.queue_of = [snap.queue_index[j.queue] for j in snap.jobs]
        self.phase = [j.phase.value for j in snap.jobs]
        self.job_alloc = [dict.fromkeys(self.res, 0) for _ in snap.jobs]
        self.queue_alloc = [dict.fromkeys(self.res, 0) for _ in snap.queues]
        for t, task in enumerate(snap.tasks):
            n, st = self.where[t], self.state[t]
            if n < 0 or st not in ("Bound", "Running", "Releasing", "Pipelined"):
                continue
            row = self.charge(t, n)
            per = self.per_device(t, n)
            if st == "Pipelined":
                self.add(self.pip[n], row)
                for d in task.gpu_indices:
                    self.dev_pip[n][d] += per
            else:
                self.add(self.used[n], row)
                for d in task.gpu_indices:
                    self.dev_used[n][d] += per
            if st == "Releasing":
                self.add(self.rel[n], row)
                for d in task.gpu_indices:
                    self.dev_rel[n][d] += per
            if st in HOLDING:
                self.add(self.job_alloc[self.job_of[t]], self.nominal(t))
                self.add(self.queue_alloc[self.queue_of[self.job_of[t]]], self.nominal(t))
        self.committed: list[tuple[str, int, int, tuple[int, ...]]] = []
        self.kept: list[tuple[str, int, int, tuple[int, ...]]] = []
        self.unschedulable: set[int] = set()
        self.total = {r: float(sum(a[r] for a in self.alloc)) for r in self.res}
        self.total[PODS] = 0.0
        self.soft_taints = any(x.effect == "PreferNoSchedule" for n in snap.nodes for x in n.taints)

    # ------------------------------------------------------------ resources

    @staticmethod
    def add(into: dict[str, int], row: Mapping[str, int], sign: int = 1) -> None:
        for r, v in row.items():
            into[r] += sign * v

    def nominal(self, t: int) -> dict[str, int]:
        """What the task charges its job and queue: its request, pods = 1, GPUs per
        :func:`~gangsched.model.gpu_charge.queue_gpu_charge`."""
        task = self.snap.tasks[t]
        row = {r: v for r, v in task.request.items() if r != PODS}
        row[PODS] = 1
        if task.gpu_request is not None:
            row[GPU] = queue_gpu_charge(task.gpu_request.count, task.gpu_request.milli)
        return row

    def per_device(self, t: int, n: int) -> int:
        gpus = self.snap.nodes[n].gpus
        cap, sharing = (gpus.milli, gpus.sharing) if gpus else (0, False)
        return _device_milli(self.snap.tasks[t].gpu_request, cap, sharing)

    def charge(self, t: int, n: int) -> dict[str, int]:
        """The task's request as charged on node ``n`` (GPU column per the node's devices)."""
        row = self.nominal(t)
        g = self.snap.tasks[t].gpu_request
        if g is not None:
            row[GPU] = g.count * self.per_device(t, n)
        return row

    def vector(self, amounts: Mapping[str, int] | None) -> dict[str, int]:
        row = dict.fromkeys(self.res, 0)
        row.update({r: v for r, v in (amounts or {}).items() if r != PODS})
        return row

    # ------------------------------------------------------------ plugin helpers

    def plugins(self, point: str) -> list[list[PluginOption]]:
        return [[o for o in tier if o.enabled(point)] for tier in self.opts]

    def has(self, point: str, name: str) -> bool:
        return any(o.name == name for tier in self.plugins(point) for o in tier)

    def option(self, name: str) -> PluginOption | None:
        return next((o for tier in self.opts for o in tier if o.name == name), None)

    def count(self, j: int, states: tuple[str, ...], role: str | None = None) -> int:
        snap = self.snap
        return sum(
            1
            for t in self.tasks_of[j]
            if self.state[t] in states and (role is None or snap.tasks[t].role == role)
        )

    def best_effort_pending(self, j: int) -> int:
        tasks = self.snap.tasks
        return sum(
            1 for t in self.tasks_of[j] if self.state[t] == "Pending" and tasks[t].best_effort
        )

    def roles_ok(self, j: int, states: tuple[str, ...], *, best_effort: bool = False) -> bool:
        """Every role has its minimum of tasks in ``states`` (with ``best_effort``, its
        pending best-effort tasks count too, as readiness counts them)."""
        job, tasks = self.snap.jobs[j], self.snap.tasks

        def extra(role: str) -> int:
            if not best_effort:
                return 0
            return sum(
                1
                for t in self.tasks_of[j]
                if self.state[t] == "Pending" and tasks[t].best_effort and tasks[t].role == role
            )

        if not job.min_task_member or job.min_available < sum(job.min_task_member.values()):
            return True
        return all(
            self.count(j, states, role) + extra(role) >= n
            for role, n in job.min_task_member.items()
        )

    def gang_ready(self, j: int) -> bool:
        have = self.count(j, READY) + self.best_effort_pending(j)
        return have >= self.snap.jobs[j].min_available and self.roles_ok(j, READY, best_effort=True)

    def job_ready(self, j: int) -> bool:
        return not self.has("job_ready", "gang") or self.gang_ready(j)

    def ready_by_count(self, j: int) -> bool:
        """Readiness as gang's job order reads it: ready and pending best-effort tasks reach
        ``min_available``; the per-role minimums are not read (Volcano's ``JobOrderFn``)."""
        have = self.count(j, READY) + self.best_effort_pending(j)
        return have >= self.snap.jobs[j].min_available

    def restoring(self, j: int) -> bool:
        """A gang that was running, still holds bound or running tasks, and is below its
        minimum: gang's job order puts it first within its priority."""
        return (
            self.phase[j] in ("Running", "Unknown")
            and self.count(j, ("Bound", "Running")) > 0
            and not self.gang_ready(j)
        )

    def job_pipelined(self, j: int) -> bool:
        if not self.has("job_pipelined", "gang"):
            return True
        have = self.count(j, RESERVED) + self.best_effort_pending(j)
        return have >= self.snap.jobs[j].min_available and self.roles_ok(
            j, RESERVED, best_effort=True
        )

    def job_valid(self, j: int) -> bool:
        if not self.has("job_valid", "gang"):
            return True
        valid = self.count(j, VALID) >= self.snap.jobs[j].min_available
        return valid and self.roles_ok(j, VALID)

    def drf_share(self, j: int) -> float:
        alloc, total = self.job_alloc[j], self.total
        return max([0.0] + [alloc[r] * (1.0 / total[r]) for r in self.res if total[r] >= EPS])

    def queue_share(self, q: int) -> float:
        d, a = self.deserved[q], self.queue_alloc[q]
        return max([0.0] + [a[r] * (1.0 / d[r]) for r in self.res if r != PODS and d[r] >= EPS])

    def job_key(self, j: int) -> tuple[Any, ...]:
        job, key = self.snap.jobs[j], list[float]()
        for tier in self.plugins("job_order"):
            for o in tier:
                if o.name == "priority":
                    key.append(-job.priority)
                elif o.name == "gang":
                    key.append(1 if self.ready_by_count(j) else -1 if self.restoring(j) else 0)
                elif o.name == "drf":
                    key.append(self.drf_share(j))
        return (*key, job.creation, job.name)

    def queue_key(self, q: int) -> tuple[Any, ...]:
        queue = self.snap.queues[q]
        if self.has("queue_order", "proportion"):
            return (-queue.priority, self.queue_share(q), queue.name)
        return (queue.name,)

    def task_key(self, t: int) -> tuple[Any, ...]:
        task = self.snap.tasks[t]
        m = _SUFFIX.search(task.name)
        prio = (-task.priority,) if self.has("task_order", "priority") else ()
        return (*prio, int(m.group(1)) if m else -1, task.name)
