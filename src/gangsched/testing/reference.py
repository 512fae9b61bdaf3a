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
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from .._frozen import FrozenDict
from ..config import Config, PluginOption, arg_bool, arg_float, arg_str
from ..decisions import Bind, Decisions, JobStatus, Pipeline, QueueStatus
from ..errors import ConfigError
from ..feasibility import device_take, queue_gpu_charge
from ..model import GpuRequest, QueueState, TaskPhase
from ..plugins.proportion import water_fill
from ..snapshot import Snapshot
from ..units import CPU, GPU, MEMORY, PODS

__all__ = ["schedule"]

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


def schedule(snapshot: Snapshot, config: Config | None = None) -> Decisions:
    """One scheduling cycle, computed the plain way. Same signature and output type as
    :func:`gangsched.schedule` (task reasons are shorter)."""
    cycle = _Cycle(snapshot, Config.default() if config is None else config)
    for action in cycle.config.actions:
        getattr(cycle, action)()
    return cycle.decisions()


def _device_milli(g: GpuRequest | None, cap: int, sharing: bool) -> int:
    if g is None:
        return 0
    return device_take(g.milli, cap, sharing)


class _Cycle:
    def __init__(self, snap: Snapshot, config: Config) -> None:
        for action in config.actions:
            if action not in ("enqueue", "allocate", "backfill"):
                raise ConfigError("not supported by the reference", kind="action", name=action)
        self.opts: list[list[PluginOption]] = [list(t.plugins) for t in config.tiers]
        for opt in (o for tier in self.opts for o in tier):
            if opt.name not in SUPPORTED:
                raise ConfigError("not supported by the reference", kind="plugin", name=opt.name)
        self.snap, self.config = snap, config
        names = {CPU, MEMORY, GPU, PODS}
        for node in snap.nodes:
            names.update(node.allocatable)
        for task in snap.tasks:
            names.update(task.request)
        for q in snap.queues:
            for quota in (q.capability, q.guarantee, q.deserved):
                names.update(quota or {})
        for job in snap.jobs:
            names.update(job.min_resources or {})
        self.res = sorted(names)
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
        self._open_overcommit()
        self._open_proportion()
        self._open_scorers()

    # ------------------------------------------------------------ resources

    @staticmethod
    def add(into: dict[str, int], row: Mapping[str, int], sign: int = 1) -> None:
        for r, v in row.items():
            into[r] += sign * v

    def nominal(self, t: int) -> dict[str, int]:
        """What the task charges its job and queue: its request, pods = 1, GPUs per
        :func:`~gangsched.feasibility.queue_gpu_charge`."""
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

    def roles_ok(self, j: int, states: tuple[str, ...]) -> bool:
        job = self.snap.jobs[j]
        if not job.min_task_member or job.min_available < sum(job.min_task_member.values()):
            return True
        return all(self.count(j, states, role) >= n for role, n in job.min_task_member.items())

    def gang_ready(self, j: int) -> bool:
        have = self.count(j, READY) + self.best_effort_pending(j)
        return have >= self.snap.jobs[j].min_available and self.roles_ok(j, READY)

    def job_ready(self, j: int) -> bool:
        return not self.has("job_ready", "gang") or self.gang_ready(j)

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
        return have >= self.snap.jobs[j].min_available and self.roles_ok(j, RESERVED)

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
                    key.append(1 if self.gang_ready(j) else -1 if self.restoring(j) else 0)
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

    # ------------------------------------------------------------ proportion, overcommit

    def _open_proportion(self) -> None:
        snap, res = self.snap, self.res
        request = [{r: float(a[r]) for r in res} for a in self.queue_alloc]
        for t in range(len(snap.tasks)):
            # Pending tasks, and Releasing ones of a job not completed: they come back.
            returning = (
                self.state[t] == "Releasing"
                and snap.jobs[self.job_of[t]].phase.value != "Completed"
            )
            if self.state[t] == "Pending" or returning:
                for r, v in self.nominal(t).items():
                    request[self.queue_of[self.job_of[t]]][r] += v
        self.q_inqueue = [dict.fromkeys(res, 0.0) for _ in snap.queues]
        self.q_elastic = [dict.fromkeys(res, 0.0) for _ in snap.queues]
        for j, job in enumerate(snap.jobs):
            need, q = self.vector(job.min_resources), self.queue_of[j]
            held = self.count(j, ("Allocated", "Bound", "Running")) >= job.min_available
            if job.min_resources is not None and (
                self.phase[j] == "Inqueue" or (self.phase[j] == "Running" and held)
            ):
                for r in res:
                    if need[r] > 0:
                        self.q_inqueue[q][r] += max(need[r] - self.job_alloc[j][r], 0)
            for r in res:
                self.q_elastic[q][r] += max(self.job_alloc[j][r] - need[r], 0)
        guarantee = [self.vector(q.guarantee) for q in snap.queues]
        capability = []
        for queue in snap.queues:
            cap = {r: math.inf for r in res}
            for r, v in (queue.capability or {}).items():
                if r != PODS and not (r in (CPU, MEMORY) and v <= 0):
                    cap[r] = float(v)
            capability.append(cap)
        spare = {r: max(self.total[r] - sum(g[r] for g in guarantee), 0.0) for r in res}
        real = [
            {r: min(spare[r] + g[r], c[r]) for r in res}
            for g, c in zip(guarantee, capability, strict=True)
        ]
        for row in request + self.q_inqueue + self.q_elastic:
            row[PODS] = 0.0

        def matrix(rows: list[dict[str, Any]]) -> Any:
            return np.array([[row[r] for r in res] for row in rows], dtype=np.float64).reshape(
                len(rows), len(res)
            )

        deserved = water_fill(
            np.array([self.total[r] for r in res]),
            np.array([q.weight for q in snap.queues], dtype=np.float64),
            matrix(request),
            matrix(guarantee),
            matrix(real),
            participating=np.array([q in self.queue_of for q in range(len(snap.queues))]),
        )
        self.deserved = [{r: float(row[i]) for i, r in enumerate(res)} for row in deserved]
        self.real = real

    def _open_overcommit(self) -> None:
        opt = self.option("overcommit")
        factor = (
            arg_float(opt.arguments, "overcommit-factor", 1.2, plugin="overcommit") if opt else 1.2
        )
        factor = factor if factor >= 1.0 else 1.2
        used = {r: sum(u[r] for u in self.used) for r in self.res}
        self.oc_idle = {r: self.total[r] * factor - used[r] for r in self.res}
        self.oc_inqueue = dict.fromkeys(self.res, 0)
        for j, job in enumerate(self.snap.jobs):
            if job.min_resources is None:
                continue
            need = self.vector(job.min_resources)
            if self.phase[j] == "Inqueue":
                self.add(self.oc_inqueue, need)
            elif self.phase[j] == "Running":
                for r in self.res:
                    self.oc_inqueue[r] += max(need[r] - self.job_alloc[j][r], 0)

    def enqueueable(self, name: str, j: int) -> bool:
        job, q = self.snap.jobs[j], self.queue_of[j]
        if name == "proportion" and self.snap.queues[q].state is not QueueState.OPEN:
            return False
        if job.min_resources is None:
            return True
        need = self.vector(job.min_resources)
        dims = [r for r in self.res if need[r] > 0]
        if name == "overcommit":
            return all(self.oc_inqueue[r] + need[r] <= self.oc_idle[r] for r in dims)
        a, inq, el = self.queue_alloc[q], self.q_inqueue[q], self.q_elastic[q]
        return all(a[r] + inq[r] - el[r] + need[r] <= self.real[q][r] + SLACK for r in dims)

    def overused(self, q: int) -> bool:
        if not self.has("overused", "proportion"):
            return False
        d, a = self.deserved[q], self.queue_alloc[q]
        return all(d[r] < a[r] or abs(d[r] - a[r]) < EPS for r in self.res if r != PODS)

    def allocatable(self, q: int, t: int) -> bool:
        if not self.has("allocatable", "proportion"):
            return True
        if self.snap.queues[q].state is not QueueState.OPEN:
            return False
        req = self.nominal(t)
        d, a, real = self.deserved[q], self.queue_alloc[q], self.real[q]
        return all(
            a[r] + v <= min(d[r], real[r]) + SLACK for r, v in req.items() if v > 0 and r != PODS
        )

    # ------------------------------------------------------------ nodes

    def passes(self, t: int, n: int) -> bool:
        """The predicates plugin: cordon, node selector, hard taints, GPU model."""
        opt = self.option("predicates")
        if opt is None or not opt.enabled("predicate"):
            return True
        task, node = self.snap.tasks[t], self.snap.nodes[n]
        if node.unschedulable:
            return False
        affinity = arg_bool(
            opt.arguments, "predicate.NodeAffinityEnable", True, plugin="predicates"
        )
        if affinity and any(node.labels.get(k) != v for k, v in task.node_selector.items()):
            return False
        if arg_bool(opt.arguments, "predicate.TaintTolerationEnable", True, plugin="predicates"):
            for taint in node.taints:
                if taint.effect != "PreferNoSchedule" and not any(
                    tol.tolerates(taint) for tol in task.tolerations
                ):
                    return False
        g = task.gpu_request
        return not (g and g.models and node.gpus and node.gpus.model not in g.models)

    def fits(self, t: int, n: int, later: bool) -> bool:
        """Whether task ``t`` fits node ``n`` once releasing tasks are gone (``later``), or
        now — which also requires fitting later, so a task never eats into a reservation."""
        if not later and not self.fits(t, n, True):
            return False
        row = self.charge(t, n)
        alloc, used, rel, pip = self.alloc[n], self.used[n], self.rel[n], self.pip[n]
        for r in self.res:
            free = alloc[r] - used[r] + ((rel[r] - pip[r]) if later else 0)
            if row.get(r, 0) > free:
                return False
        g = self.snap.tasks[t].gpu_request
        if g is None:
            return True
        return (
            sum(1 for f in self.device_free(n, later) if f >= max(self.per_device(t, n), 1))
            >= g.count
        )

    def device_free(self, n: int, later: bool) -> list[int]:
        """Free milli-GPU per device of node ``n``: once releases finish (``later``), or now
        and without touching reservations (the smaller of now and later)."""
        gpus = self.snap.nodes[n].gpus
        cap = gpus.milli if gpus else 0
        out = []
        for d, used in enumerate(self.dev_used[n]):
            after = cap - used + self.dev_rel[n][d] - self.dev_pip[n][d]
            out.append(after if later else min(cap - used, after))
        return out

    def _open_scorers(self) -> None:
        """Read the node_score plugins' arguments once (tier order = summation order)."""
        self.scorers: list[tuple[str, dict[str, float]]] = []
        for tier in self.plugins("node_score"):
            for o in tier:
                args = o.arguments
                if o.name == "nodeorder":
                    keys = [("leastrequested", 1.0), ("mostrequested", 0.0)]
                    keys += [("balancedresource", 1.0), ("tainttoleration", 3.0)]
                    w = {k: arg_float(args, f"{k}.weight", d, plugin=o.name) for k, d in keys}
                    self.scorers.append(("nodeorder", w))
                elif o.name == "binpack":
                    w = {"": arg_float(args, "binpack.weight", 1.0, plugin=o.name)}
                    w[CPU] = arg_float(args, "binpack.cpu", 1.0, plugin=o.name)
                    w[MEMORY] = arg_float(args, "binpack.memory", 1.0, plugin=o.name)
                    for name in arg_str(args, "binpack.resources", "", plugin=o.name).split(","):
                        if name.strip():
                            key = f"binpack.resources.{name.strip()}"
                            w[name.strip()] = arg_float(args, key, 1.0, plugin=o.name)
                    self.scorers.append(("binpack", w))

    def untolerated(self, t: int, n: int) -> int:
        """Distinct PreferNoSchedule taints of node ``n`` that task ``t`` does not tolerate."""
        soft = {x for x in self.snap.nodes[n].taints if x.effect == "PreferNoSchedule"}
        return sum(
            1 for x in soft if not any(tol.tolerates(x) for tol in self.snap.tasks[t].tolerations)
        )

    def score(self, t: int, n: int, top: int) -> float:
        """Sum of the node_score plugins; ``top``: the most untolerated soft taints on a node."""
        total = 0.0
        for name, w in self.scorers:
            total += self.nodeorder(w, t, n, top) if name == "nodeorder" else self.binpack(w, t, n)
        return total

    def nodeorder(self, w: dict[str, float], t: int, n: int, top: int) -> float:
        req, alloc, used = self.nominal(t), self.alloc[n], self.used[n]
        want = {CPU: req.get(CPU, 0) or DEFAULT_CPU, MEMORY: req.get(MEMORY, 0) or DEFAULT_MEMORY}
        requested = {r: used[r] + want[r] for r in (CPU, MEMORY)}
        score = 0.0
        if w["leastrequested"]:
            parts = [
                (alloc[r] - requested[r]) * 100 // alloc[r] if 0 < alloc[r] >= requested[r] else 0
                for r in (CPU, MEMORY)
            ]
            score += w["leastrequested"] * ((parts[0] + parts[1]) // 2)
        if w["mostrequested"]:
            parts = [
                min(requested[r], alloc[r]) * 100 // alloc[r] if alloc[r] > 0 else 0
                for r in (CPU, MEMORY)
            ]
            score += w["mostrequested"] * ((parts[0] + parts[1]) // 2)
        if w["balancedresource"]:
            fracs = [min(requested[r] / max(alloc[r], 1), 1.0) for r in (CPU, MEMORY)]
            if self.snap.tasks[t].gpu_request is not None:
                g_alloc = alloc[GPU]
                fracs.append(min((used[GPU] + req[GPU]) / g_alloc, 1.0) if g_alloc > 0 else 0.0)
            mean = sum(fracs) / len(fracs)
            std = math.sqrt(sum((f - mean) * (f - mean) for f in fracs) / len(fracs))
            score += w["balancedresource"] * (1.0 - std) * 100.0
        if w["tainttoleration"] and self.soft_taints:
            mine = (100.0 - self.untolerated(t, n) * 100.0 / top) if top else 100.0
            score += w["tainttoleration"] * mine
        return score

    def binpack(self, w: dict[str, float], t: int, n: int) -> float:
        req, alloc, used = self.nominal(t), self.alloc[n], self.used[n]
        picked = [(r, wr) for r, wr in w.items() if r in self.res and req.get(r, 0) > 0 and wr > 0]
        if w[""] == 0 or not picked:
            return 0.0
        score = 0.0
        for r, wr in picked:
            after = used[r] + req[r]
            if after > alloc[r] > 0:
                return 0.0
            score += wr * after / max(alloc[r], 1) if alloc[r] > 0 else 0.0
        return score / sum(wr for _, wr in picked) * 100.0 * w[""]

    def best_node(self, t: int) -> tuple[int, bool]:
        top = (
            max(self.untolerated(t, n) for n in range(len(self.snap.nodes)))
            if self.soft_taints
            else 0
        )
        for later in (False, True):
            best, best_score = -1, -math.inf
            for n in range(len(self.snap.nodes)):
                if self.passes(t, n) and self.fits(t, n, later):
                    s = self.score(t, n, top)
                    if s > best_score:
                        best, best_score = n, s
            if best >= 0:
                return best, later
        return -1, False

    def choose_gpus(self, t: int, n: int, later: bool) -> tuple[int, ...]:
        """Fractional shares best-fit onto the fullest device with room (then lowest index);
        whole devices by lowest index."""
        g = self.snap.tasks[t].gpu_request
        if g is None:
            return ()
        need = self.per_device(t, n)
        fractional = need < self.snap.nodes[n].gpus.milli  # type: ignore[union-attr]
        free = self.device_free(n, later)
        ok = [(f if fractional else 0, d) for d, f in enumerate(free) if f >= need]
        return tuple(d for _, d in sorted(ok)[: g.count])

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
