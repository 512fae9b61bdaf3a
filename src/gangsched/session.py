"""The working state of one scheduling cycle.

Theory of operation
-------------------
``Session.open(snapshot, config, registry)`` copies the mutable columns of the snapshot's
:class:`~gangsched.arrays.ClusterArrays` (used, releasing, pipelined, per-device GPU use), sets
up per-task state codes and per-job / per-queue aggregates, opens every configured plugin in
tier order and resolves, once, which plugins serve which extension point. Actions then read and
change the session only through:

* the dispatcher (:meth:`call`, :meth:`job_key`, :meth:`queue_key`, :meth:`task_key`,
  :meth:`evaluate`) — one tier loop, driven by the ``POINTS`` table of (point, combiner);
* :class:`~gangsched.statement.Statement`, whose operations call :meth:`place`,
  :meth:`unplace`, :meth:`evict` and :meth:`unevict` — the only code that mutates the arrays.

Feasibility and scores are kept per task template and refreshed incrementally: every change to a
node bumps ``node_version[node]``, and :meth:`evaluate` recomputes only the rows whose version
moved since the template was last evaluated.

Ties between equally scored nodes go to the lowest node index (the snapshot's node order);
Volcano breaks them at random.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
import numpy.typing as npt

from .arrays import ClusterArrays, TaskTemplate, build_cluster_arrays, build_templates
from .combine import (
    all_pass,
    any_true,
    first_tier_all,
    intersect_first_decisive,
    lexicographic,
    vote,
)
from .config import Config
from .decisions import PlacementInfo
from .errors import PlacementError
from .feasibility import device_take, queue_gpu_charge
from .gate import Gate, Refusal
from .model import TaskPhase
from .registry import Registry
from .snapshot import Snapshot
from .statement import Op
from .units import PODS

__all__ = ["POINTS", "Session", "TaskState"]

I64 = npt.NDArray[np.int64]
BOOL = npt.NDArray[np.bool_]
F64 = npt.NDArray[np.float64]


class TaskState:
    """Int codes of a task's state inside a session (stored in an int8 array). Plain class
    attributes, not an ``IntEnum``: they are read on every placement, and enum member access
    costs a metaclass lookup on Python 3.11."""

    PENDING = 0
    ALLOCATED = 1
    PIPELINED = 2
    BOUND = 3
    RUNNING = 4
    RELEASING = 5
    SUCCEEDED = 6
    FAILED = 7


N_STATES = 8

_FROM_PHASE = {
    TaskPhase.PENDING: TaskState.PENDING,
    TaskPhase.PIPELINED: TaskState.PIPELINED,
    TaskPhase.BOUND: TaskState.BOUND,
    TaskPhase.RUNNING: TaskState.RUNNING,
    TaskPhase.RELEASING: TaskState.RELEASING,
    TaskPhase.SUCCEEDED: TaskState.SUCCEEDED,
    TaskPhase.FAILED: TaskState.FAILED,
}
#: States that count toward a gang being ready (Volcano's ReadyTaskNum).
READY_STATES = (TaskState.ALLOCATED, TaskState.BOUND, TaskState.RUNNING, TaskState.SUCCEEDED)
#: States whose resources count as the job's (and its queue's) allocation.
HOLDING_STATES = (TaskState.ALLOCATED, TaskState.PIPELINED, TaskState.BOUND, TaskState.RUNNING)

#: Ready or reserved.
PIPELINED_OR_READY = (*READY_STATES, TaskState.PIPELINED)

#: Extension point → (plugin method, combiner). The tier loop exists once, in :meth:`call`.
POINTS: Mapping[str, Callable[..., Any]] = {
    "job_order": lexicographic,
    "queue_order": lexicographic,
    "task_order": lexicographic,
    "job_valid": lambda tiers: next(
        (r for tier in tiers for a in tier if (r := a()) is not None), None
    ),
    "job_ready": all_pass,
    "job_pipelined": vote,
    "job_enqueueable": vote,
    "job_enqueued": lambda tiers: [a() for tier in tiers for a in tier] and None,
    "job_starving": first_tier_all,
    "overused": any_true,
    "allocatable": all_pass,
    "preemptable": intersect_first_decisive,
    "reclaimable": intersect_first_decisive,
    "victim_order": lexicographic,
}
#: Row-based points, evaluated by :meth:`Session.evaluate`.
ROW_POINTS = ("predicate", "node_score")
EVENT_POINTS = ("on_allocate", "on_deallocate")
#: Points an action or the session asks plugins directly, in tier order (first answer wins
#: or each is consulted): GPU device choice, the hypernode order, reclaim's preemptive check.
HOOK_POINTS = ("gpu_choice", "hypernode_score", "preemptive")
#: Every extension point; chains are resolved once, at open, for each.
ALL_POINTS = (*POINTS, *ROW_POINTS, *EVENT_POINTS, *HOOK_POINTS)

_INDEX_SUFFIX = re.compile(r"-(\d+)$")


@dataclass(slots=True, eq=False)
class _Eval:
    versions: I64  # (n_nodes,) node_version at the last refresh
    ok: BOOL  # (n_nodes,) plugin predicates pass
    fit_idle: BOOL  # (n_nodes,) resources fit now
    fit_future: BOOL  # (n_nodes,) resources fit once releasing tasks are gone
    score: F64  # (n_nodes,)
    # score where ok & fit_idle (resp. ok & fit_future), -inf elsewhere: one argmax per pick
    best_idle: F64 = field(default_factory=lambda: np.zeros(0))  # (n_nodes,)
    best_future: F64 = field(default_factory=lambda: np.zeros(0))  # (n_nodes,)
    gpu_need: I64 | None = None  # (n_nodes,) milli-GPU charged per device on each node
    seen: int = 0  # length of Session._changed at the last refresh


@dataclass(slots=True, eq=False)
class Session:
    snapshot: Snapshot
    config: Config
    arrays: ClusterArrays
    used: I64
    releasing: I64
    pipelined: I64
    gpu_used: I64
    gpu_releasing: I64
    gpu_pipelined: I64
    node_version: I64
    task_state: npt.NDArray[np.int8]
    task_node: I64
    task_gpus: list[tuple[int, ...]]
    task_job: I64
    # (n_tasks, n_resources) what each task charges its job and queue: its request, pods = 1,
    # the GPU column per queue_gpu_charge (a node is charged per its devices: row_on)
    task_req: I64
    job_queue: I64
    job_min: I64
    job_phase: list[str]
    job_allocated: I64  # (n_jobs, n_resources) held or reserved, in task_req's terms
    job_count: I64  # (n_jobs, n_states) tasks per state
    role_count: dict[tuple[int, str], I64]  # (job, role) -> (n_states,) tasks per state
    queue_allocated: I64  # (n_queues, n_resources) Σ job_allocated of the queue's jobs
    templates: list[TaskTemplate]
    template_of: I64
    plugins: list[list[Any]] = field(default_factory=list)
    chains: dict[str, list[list[Any]]] = field(default_factory=dict)
    _serving: dict[str, list[Any]] = field(default_factory=dict)
    job_reasons: dict[int, tuple[str, str]] = field(default_factory=dict)
    task_reasons: dict[int, str] = field(default_factory=dict)
    unschedulable_jobs: set[int] = field(default_factory=set)
    queue_deserved: I64 | None = None
    committed: list[Op] = field(default_factory=list)
    kept: list[Op] = field(default_factory=list)
    # What the actions of this cycle leave for the decisions and for one another.
    #: The placer ``schedule()`` was given (None: each action's own).
    placer: Any = None
    #: Placers the actions used, in order (their nondeterministic options are reported).
    placers: list[Any] = field(default_factory=list)
    #: Per job whose gang went through a placer: what the placer said.
    placements: dict[int, PlacementInfo] = field(default_factory=dict)
    #: ``(job, node indices, expected wait)`` of the nodes held for starving jobs.
    holds: list[tuple[int, tuple[int, ...], int | None]] = field(default_factory=list)
    #: Per job, per action: why it did not preempt or reclaim (or what it evicted).
    preemption_reasons: dict[int, dict[str, str]] = field(default_factory=dict)
    #: Per job: what it could free by preemption (enqueue's admission counts it).
    preemption_freed: dict[int, tuple[I64, I64]] = field(default_factory=dict)
    #: Whether carried reservations were realised already (once per session).
    reservations_realised: bool = False
    #: Per-session caches of plugins and actions (private keys; never outputs).
    scratch: dict[str, Any] = field(default_factory=dict)
    #: Operations the placement gate refused, in words (an action proposed a placement that
    #: breaks a hard rule: see :mod:`gangsched.gate`).
    refusals: list[Refusal] = field(default_factory=list)
    gate: Gate = field(init=False)
    _evals: dict[object, _Eval] = field(default_factory=dict)
    _changed: list[int] = field(default_factory=list)  # nodes in the order they changed

    # ---------------------------------------------------------------- opening

    @classmethod
    def open(cls, snapshot: Snapshot, config: Config, registry: Registry) -> Session:
        arrays = build_cluster_arrays(snapshot)
        spec = arrays.spec
        n_tasks, n_jobs = len(snapshot.tasks), len(snapshot.jobs)
        task_state = np.zeros(n_tasks, dtype=np.int8)
        task_node = np.full(n_tasks, -1, dtype=np.int64)
        task_job = np.zeros(n_tasks, dtype=np.int64)
        task_req = np.zeros((n_tasks, len(spec)), dtype=np.int64)
        task_gpus: list[tuple[int, ...]] = []
        col = {name: i for i, name in enumerate(spec.names)}
        pods_col, gpu_col = col[PODS], spec.gpu_column
        for i, task in enumerate(snapshot.tasks):
            task_state[i] = _FROM_PHASE[task.phase]
            if task.node is not None:
                task_node[i] = snapshot.node_index[task.node]
            task_job[i] = snapshot.job_index[task.job]
            for res, amount in task.request.items():
                if res != PODS:
                    task_req[i, col[res]] = amount
            task_req[i, pods_col] = 1
            if task.gpu_request is not None:
                g = task.gpu_request
                task_req[i, gpu_col] = queue_gpu_charge(g.count, g.milli)
            task_gpus.append(task.gpu_indices)
        job_queue = np.array([snapshot.queue_index[j.queue] for j in snapshot.jobs], dtype=np.int64)
        ssn = cls(
            snapshot=snapshot,
            config=config,
            arrays=arrays,
            used=arrays.used.copy(),
            releasing=arrays.releasing.copy(),
            pipelined=arrays.pipelined.copy(),
            gpu_used=arrays.gpu_used.copy(),
            gpu_releasing=arrays.gpu_releasing.copy(),
            gpu_pipelined=arrays.gpu_pipelined.copy(),
            node_version=np.zeros(arrays.n_nodes, dtype=np.int64),
            task_state=task_state,
            task_node=task_node,
            task_gpus=task_gpus,
            task_job=task_job,
            task_req=task_req,
            job_queue=job_queue,
            job_min=np.array([j.min_available for j in snapshot.jobs], dtype=np.int64),
            job_phase=[j.phase.value for j in snapshot.jobs],
            job_allocated=np.zeros((n_jobs, len(spec)), dtype=np.int64),
            job_count=np.zeros((n_jobs, N_STATES), dtype=np.int64),
            role_count={},
            queue_allocated=np.zeros((len(snapshot.queues), len(spec)), dtype=np.int64),
            templates=[],
            template_of=np.full(n_tasks, -1, dtype=np.int64),
        )
        np.add.at(ssn.job_count, (task_job, task_state.astype(np.int64)), 1)
        for i, task in enumerate(snapshot.tasks):
            key = (int(task_job[i]), task.role)
            if key not in ssn.role_count:
                ssn.role_count[key] = np.zeros(N_STATES, dtype=np.int64)
            ssn.role_count[key][task_state[i]] += 1
        holding = np.isin(task_state, HOLDING_STATES) & (task_node >= 0)
        np.add.at(ssn.job_allocated, task_job[holding], task_req[holding])
        np.add.at(ssn.queue_allocated, job_queue, ssn.job_allocated)
        pending = [i for i in range(n_tasks) if task_state[i] == TaskState.PENDING]
        ssn.templates, ssn.template_of = build_templates(snapshot, spec, pending)
        ssn.gate = Gate(ssn)
        ssn._open_plugins(registry)
        return ssn

    def _open_plugins(self, registry: Registry) -> None:
        self.scratch["_options"] = []
        for tier in self.config.tiers:
            opened = []
            for option in tier.plugins:
                plugin = registry.make_plugin(option.name, option.arguments)
                opened.append((option, plugin))
            self.plugins.append([p for _, p in opened])
            self.scratch.setdefault("_options", []).append(opened)
        for tier_plugins in self.plugins:
            for plugin in tier_plugins:
                opener = getattr(plugin, "on_session_open", None)
                if opener is not None:
                    opener(self)
        # The one tier loop: each point's chain, resolved once (tiers kept for the combiners
        # that care about them, flattened in tier order for everything else).
        for point in ALL_POINTS:
            self.chains[point] = [
                [p for option, p in tier if hasattr(p, point) and _enabled(option, point)]
                for tier in self.scratch["_options"]
            ]
            self._serving[point] = [p for tier in self.chains[point] for p in tier]

    def serving(self, point: str) -> list[Any]:
        """The plugins serving ``point`` (enabled for it), in tier order."""
        return self._serving[point]

    def plugin(self, name: str) -> Any | None:
        """The opened plugin called ``name``, if configured."""
        for tier in self.plugins:
            for p in tier:
                if getattr(p, "name", None) == name:
                    return p
        return None

    # ---------------------------------------------------------------- dispatch

    def call(self, point: str, *args: Any) -> Any:
        """Ask every plugin serving ``point`` and combine the answers with its combiner."""
        thunks = [
            [partial(getattr(p, point), self, *args) for p in tier] for tier in self.chains[point]
        ]
        return POINTS[point](thunks)

    def job_key(self, job: int) -> tuple[Any, ...]:
        rec = self.snapshot.jobs[job]
        return (*self.call("job_order", job), rec.creation, rec.name)

    def queue_key(self, queue: int) -> tuple[Any, ...]:
        return (*self.call("queue_order", queue), self.snapshot.queues[queue].name)

    def task_key(self, task: int) -> tuple[Any, ...]:
        name = self.snapshot.tasks[task].name
        m = _INDEX_SUFFIX.search(name)
        return (*self.call("task_order", task), int(m.group(1)) if m else -1, name)

    # ---------------------------------------------------------------- resources

    def device_milli(self, task: int, node: int) -> int:
        g = self.snapshot.tasks[task].gpu_request
        if g is None:
            return 0
        a = self.arrays
        return device_take(g.milli, int(a.gpu_capacity[node]), bool(a.gpu_sharing[node]))

    def row_on(self, task: int, node: int) -> I64:
        """The task's request as it is charged on ``node`` (GPU column per the node's devices);
        its job and queue are charged ``task_req[task]`` instead."""
        row: I64 = self.task_req[task].copy()
        g = self.snapshot.tasks[task].gpu_request
        if g is not None:
            row[self.arrays.spec.gpu_column] = g.count * self.device_milli(task, node)
        return row

    def idle(self) -> I64:
        out: I64 = self.arrays.allocatable - self.used
        return out

    def future_idle(self) -> I64:
        out: I64 = self.arrays.allocatable - self.used + self.releasing - self.pipelined
        return out

    def _gpu_need(self, tmpl: TaskTemplate) -> I64:
        """Milli-GPU ``tmpl`` takes on each device of every node
        (:func:`~gangsched.feasibility.device_take`). Shape (n_nodes,)."""
        a = self.arrays
        return device_take(tmpl.gpu_milli, a.gpu_capacity, a.gpu_sharing)

    def _resource_fit(
        self, tmpl: TaskTemplate, rows: npt.NDArray[np.intp], m_all: I64 | None = None
    ) -> tuple[BOOL, BOOL]:
        if rows.size == 1:  # the usual refresh after one placement: plain ints are faster
            return self._fit_one(tmpl, int(rows[0]), m_all)
        a = self.arrays
        idle = a.allocatable[rows] - self.used[rows]
        future = idle + self.releasing[rows] - self.pipelined[rows]
        if tmpl.gpu_count:
            m_eff = (self._gpu_need(tmpl) if m_all is None else m_all)[rows]
            req = np.broadcast_to(tmpl.request, (rows.size, tmpl.request.size)).copy()
            req[:, a.spec.gpu_column] = tmpl.gpu_count * m_eff
        else:
            req = tmpl.request  # (n_resources,) broadcast over the rows
        fit_idle: BOOL = np.asarray((req <= idle).all(axis=1))
        fit_future: BOOL = np.asarray((req <= future).all(axis=1))
        if tmpl.gpu_count:
            idx, seg = a.devices_of(rows)
            free = a.gpu_capacity[rows][seg] - self.gpu_used[idx]
            ffree = free + self.gpu_releasing[idx] - self.gpu_pipelined[idx]
            need = np.maximum(m_eff, 1)[seg]
            later = ffree >= need
            # A device is usable now only if it is also free of reservations (below).
            fit_idle &= a.count_per_row(seg, (free >= need) & later, rows.size) >= tmpl.gpu_count
            fit_future &= a.count_per_row(seg, later, rows.size) >= tmpl.gpu_count
        # Fitting now must not eat into a reservation (pipelined tasks hold future-idle):
        # a task takes idle resources only where it also fits once releases finish.
        fit_idle &= fit_future
        return fit_idle, fit_future

    def _fit_one(self, tmpl: TaskTemplate, i: int, m_all: I64 | None) -> tuple[BOOL, BOOL]:
        """:meth:`_resource_fit` of one node, the same rules in scalar arithmetic."""
        a = self.arrays
        req = tmpl.request.tolist()
        m_eff = 0
        if tmpl.gpu_count:
            m_eff = int((self._gpu_need(tmpl) if m_all is None else m_all)[i])
            req[a.spec.gpu_column] = tmpl.gpu_count * m_eff
        fit_idle = fit_future = True
        for q, al, u, rl, pp in zip(
            req,
            a.allocatable[i].tolist(),
            self.used[i].tolist(),
            self.releasing[i].tolist(),
            self.pipelined[i].tolist(),
            strict=True,
        ):
            fit_idle = fit_idle and q <= al - u
            fit_future = fit_future and q <= al - u + rl - pp
        if tmpl.gpu_count:
            cap, need = int(a.gpu_capacity[i]), max(m_eff, 1)
            now = later = 0
            dev = a.devices(i)
            for u, rl, pp in zip(
                self.gpu_used[dev].tolist(),
                self.gpu_releasing[dev].tolist(),
                self.gpu_pipelined[dev].tolist(),
                strict=True,
            ):
                if cap - u + rl - pp >= need:
                    later += 1
                    now += cap - u >= need
            fit_idle = fit_idle and now >= tmpl.gpu_count
            fit_future = fit_future and later >= tmpl.gpu_count
        fit_idle = fit_idle and fit_future
        return np.array([fit_idle]), np.array([fit_future])

    def _eval_key(self, tmpl: TaskTemplate) -> object:
        """Templates of equal shape share an evaluation when every predicate and node_score
        plugin declares ``shape_only`` (its answer does not depend on the job)."""
        shared = self.scratch.get("_shape_only")
        if shared is None:
            shared = all(
                getattr(p, "shape_only", False) for point in ROW_POINTS for p in self.serving(point)
            )
            self.scratch["_shape_only"] = shared
        return ("shape", tmpl.shape) if shared else tmpl.index

    def evaluate(self, tmpl: TaskTemplate) -> _Eval:
        """Predicates, resource fit and scores of ``tmpl`` on every node, refreshed only on
        the rows changed since the last call."""
        key = self._eval_key(tmpl)
        ev = self._evals.get(key)
        n = self.arrays.n_nodes
        if ev is None:
            rows = np.arange(n, dtype=np.intp)
            ev = _Eval(
                versions=self.node_version.copy(),
                ok=np.ones(n, dtype=np.bool_),
                fit_idle=np.zeros(n, dtype=np.bool_),
                fit_future=np.zeros(n, dtype=np.bool_),
                score=np.zeros(n),
                best_idle=np.full(n, -np.inf),
                best_future=np.full(n, -np.inf),
                gpu_need=self._gpu_need(tmpl) if tmpl.gpu_count else None,
                seen=len(self._changed),
            )
            self._evals[key] = ev
        else:
            # Few changes since the last refresh: read them from the log, not all versions.
            changed = self._changed
            if len(changed) - ev.seen <= max(16, n // 64):
                rows = np.array(sorted(set(changed[ev.seen :])), dtype=np.intp)
            else:
                rows = np.flatnonzero(ev.versions != self.node_version).astype(np.intp)
            ev.seen = len(changed)
            if rows.size == 0:
                return ev
            ev.versions[rows] = self.node_version[rows]
        ok = np.ones(rows.size, dtype=np.bool_)
        for p in self.serving("predicate"):
            for reject, _reason in p.predicate(self, tmpl, rows):
                ok &= ~reject
        ev.ok[rows] = ok
        fit_idle, fit_future = self._resource_fit(tmpl, rows, ev.gpu_need)
        ev.fit_idle[rows], ev.fit_future[rows] = fit_idle, fit_future
        score = np.zeros(rows.size)
        for p in self.serving("node_score"):
            score += p.node_score(self, tmpl, rows)
        ev.score[rows] = score
        ev.best_idle[rows] = np.where(ok & fit_idle, score, -np.inf)
        ev.best_future[rows] = np.where(ok & fit_future, score, -np.inf)
        return ev

    def best_node(self, tmpl: TaskTemplate, among: BOOL | None = None) -> tuple[int, bool]:
        """Best node for ``tmpl``: highest score among nodes where it fits now, else among nodes
        where it fits once releasing resources are freed (then ``pipelined`` is True).
        Returns ``(-1, False)`` when no node fits (always so on a cluster without nodes)."""
        ev = self.evaluate(tmpl)
        if ev.score.size == 0:
            return -1, False
        if among is None:
            for best, pipelined in ((ev.best_idle, False), (ev.best_future, True)):
                node = int(np.argmax(best))
                if best[node] > -np.inf:
                    return node, pipelined
            return -1, False
        base = ev.ok & among
        for mask, pipelined in ((base & ev.fit_idle, False), (base & ev.fit_future, True)):
            if mask.any():
                return int(np.argmax(np.where(mask, ev.score, -np.inf))), pipelined
        return -1, False

    def fit_error(self, tmpl: TaskTemplate, among: BOOL | None = None) -> str:
        """Why no node fits ``tmpl``, aggregated over nodes as kube-scheduler words it."""
        n = self.arrays.n_nodes
        rows = np.arange(n, dtype=np.intp)
        reason = np.full(n, -1, dtype=np.int64)
        words: list[str] = []

        def mark(reject: BOOL, word: str) -> None:
            sel = reject & (reason < 0)
            if sel.any():
                if word not in words:
                    words.append(word)
                reason[sel] = words.index(word)

        if among is not None:
            mark(~among, "node(s) outside the allowed topology domain")
        for p in self.serving("predicate"):
            for reject, word in p.predicate(self, tmpl, rows):
                mark(reject, word)
        a = self.arrays
        req = np.broadcast_to(tmpl.request, (n, tmpl.request.size)).copy()
        if tmpl.gpu_count:
            cap = a.gpu_capacity
            m_eff = self._gpu_need(tmpl)
            req[:, a.spec.gpu_column] = tmpl.gpu_count * m_eff
            dev_node = a.gpu_node
            ffree = cap[dev_node] - self.gpu_used + self.gpu_releasing - self.gpu_pipelined
            later = ffree >= np.maximum(m_eff, 1)[dev_node]
            devices_ok = a.count_per_row(dev_node, later, n) >= tmpl.gpu_count
        else:
            devices_ok = np.ones(n, dtype=np.bool_)
        future = self.future_idle()
        short = req > future
        for c, res in enumerate(a.spec.names):
            if res == PODS:
                mark(short[:, c], "Too many pods")
            elif c == a.spec.gpu_column:
                mark(short[:, c] | ~devices_ok, f"Insufficient {res}")
            else:
                mark(short[:, c], f"Insufficient {res}")
        counts = Counter(dict(enumerate(np.bincount(reason[reason >= 0]).tolist())))
        counts = +counts  # drop zero counts
        n_ok = int((reason < 0).sum())
        parts = sorted(((cnt, words[r]) for r, cnt in counts.items()), key=lambda x: (-x[0], x[1]))
        detail = ", ".join(f"{cnt} {word}" for cnt, word in parts)
        return f"{n_ok}/{n} nodes are available" + (f": {detail}." if detail else ".")

    def fits(self, task: int, node: int, *, future: bool, gpus: tuple[int, ...] = ()) -> bool:
        """Whether ``task`` fits ``node`` now (or after releases, with ``future``) on these GPU
        devices — the check a planned placement passes before it is applied."""
        a = self.arrays
        row = self.row_on(task, node)
        free = a.allocatable[node] - self.used[node]
        later = free + self.releasing[node] - self.pipelined[node]
        # Now means now *and* later: never into resources a reservation holds.
        if not bool((row <= later).all()) or not (future or bool((row <= free).all())):
            return False
        if not gpus:
            return True
        count = int(a.gpu_count[node])
        if any(not 0 <= g < count for g in gpus):
            return False
        dev = a.device_index(node, gpus)
        now = a.gpu_capacity[node] - self.gpu_used[dev]
        dev_later = now + self.gpu_releasing[dev] - self.gpu_pipelined[dev]
        room = dev_later if future else np.minimum(now, dev_later)
        return bool((room >= self.device_milli(task, node)).all())

    def choose_gpus(self, task: int, node: int, *, future: bool) -> tuple[int, ...]:
        """Device indices for ``task`` on ``node``: fractional requests best-fit onto the
        fullest device with room, whole-device requests take the lowest free indices."""
        g = self.snapshot.tasks[task].gpu_request
        if g is None:
            return ()
        for p in self.serving("gpu_choice"):  # a plugin may name them (first answer wins)
            pick = p.gpu_choice(self, task, node, future=future)
            if pick is not None and len(pick) == g.count:
                return tuple(pick)
        a = self.arrays
        cap = int(a.gpu_capacity[node])
        need = self.device_milli(task, node)
        devs = a.devices(node)
        free = cap - self.gpu_used[devs]
        later = free + self.gpu_releasing[devs] - self.gpu_pipelined[devs]
        free = later if future else np.minimum(free, later)
        ok = np.flatnonzero(free >= need)
        order = ok[np.lexsort((ok, free[ok]))] if need < cap else ok
        return tuple(int(i) for i in order[: g.count])

    # ---------------------------------------------------------------- mutation

    def place(self, task: int, node: int, gpus: tuple[int, ...], *, pipelined: bool) -> None:
        row = self.row_on(task, node)
        per_device = self.device_milli(task, node)
        dev = self._device_index(task, node, gpus)
        if pipelined:
            self.pipelined[node] += row
            self.gpu_pipelined[dev] += per_device
            self._set_state(task, TaskState.PIPELINED)
        else:
            self.used[node] += row
            self.gpu_used[dev] += per_device
            self._set_state(task, TaskState.ALLOCATED)
        self.task_node[task] = node
        self.task_gpus[task] = gpus
        self._charge(task, 1)
        self._bump(node)
        self._fire("on_allocate", task)

    def unplace(self, task: int) -> None:
        node = int(self.task_node[task])
        gpus = self.task_gpus[task]
        row = self.row_on(task, node)
        per_device = self.device_milli(task, node)
        dev = self.arrays.device_index(node, gpus)
        if self.task_state[task] == TaskState.PIPELINED:
            self.pipelined[node] -= row
            self.gpu_pipelined[dev] -= per_device
        else:
            self.used[node] -= row
            self.gpu_used[dev] -= per_device
        self._charge(task, -1)
        self._set_state(task, TaskState.PENDING)
        self.task_node[task] = -1
        self.task_gpus[task] = ()
        self._bump(node)
        self._fire("on_deallocate", task)

    def evict(self, task: int) -> None:
        node = int(self.task_node[task])
        row = self.row_on(task, node)
        per_device = self.device_milli(task, node)
        self.releasing[node] += row
        self.gpu_releasing[self.arrays.device_index(node, self.task_gpus[task])] += per_device
        self._charge(task, -1)
        self._set_state(task, TaskState.RELEASING)
        self._bump(node)
        self._fire("on_deallocate", task)

    def unevict(self, task: int, prev_state: int) -> None:
        node = int(self.task_node[task])
        row = self.row_on(task, node)
        per_device = self.device_milli(task, node)
        self.releasing[node] -= row
        self.gpu_releasing[self.arrays.device_index(node, self.task_gpus[task])] -= per_device
        self._charge(task, 1)
        self._set_state(task, prev_state)
        self._bump(node)
        self._fire("on_allocate", task)

    def _charge(self, task: int, sign: int) -> None:
        """Add (``sign`` 1) or take back (-1) what ``task`` charges its job and queue."""
        j = int(self.task_job[task])
        if sign > 0:
            self.job_allocated[j] += self.task_req[task]
            self.queue_allocated[self.job_queue[j]] += self.task_req[task]
        else:
            self.job_allocated[j] -= self.task_req[task]
            self.queue_allocated[self.job_queue[j]] -= self.task_req[task]

    def _device_index(self, task: int, node: int, gpus: tuple[int, ...]) -> list[int]:
        """Flat indices of ``gpus`` on ``node``; a device the node lacks, a repeated device or
        a count that is not the task's is a :class:`PlacementError` (never a wrong device)."""
        count = int(self.arrays.gpu_count[node])
        g = self.snapshot.tasks[task].gpu_request
        wanted = g.count if g is not None else 0
        if (
            len(gpus) != wanted
            or len(set(gpus)) != len(gpus)
            or any(not 0 <= d < count for d in gpus)
        ):
            raise PlacementError(
                f"GPU devices {list(gpus)} on node {self.arrays.node_names[node]!r} "
                f"({count} devices) for a request of {wanted}",
                kind="task",
                name=self.snapshot.tasks[task].name,
                field="gpu_indices",
            )
        return self.arrays.device_index(node, gpus)

    def _bump(self, node: int) -> None:
        """Mark ``node`` changed: every template re-evaluates it on its next use."""
        self.node_version[node] += 1
        self._changed.append(node)

    def _set_state(self, task: int, state: int) -> None:
        old = int(self.task_state[task])
        j = int(self.task_job[task])
        self.job_count[j, old] -= 1
        self.job_count[j, state] += 1
        roles = self.role_count[(j, self.snapshot.tasks[task].role)]
        roles[old] -= 1
        roles[state] += 1
        self.task_state[task] = state

    def _fire(self, point: str, task: int) -> None:
        for p in self.serving(point):
            getattr(p, point)(self, task)

    def record(self, ops: Sequence[Op], *, committed: bool) -> None:
        (self.committed if committed else self.kept).extend(ops)

    # ---------------------------------------------------------------- job counters

    def count_states(self, job: int, states: Sequence[int], role: str | None = None) -> int:
        """Number of the job's tasks (of ``role``, if given) in any of ``states``."""
        counts = (
            self.job_count[job]
            if role is None
            else self.role_count.get((job, role), np.zeros(N_STATES, dtype=np.int64))
        )
        per_state = counts.tolist()
        return sum(per_state[s] for s in states)

    def _job_tasks(self, job: int) -> I64:
        by_job = self.scratch.get("_job_tasks")
        if by_job is None:
            order = np.argsort(self.task_job, kind="stable")
            bounds = np.searchsorted(self.task_job[order], np.arange(len(self.snapshot.jobs) + 1))
            by_job = [order[bounds[j] : bounds[j + 1]] for j in range(len(self.snapshot.jobs))]
            self.scratch["_job_tasks"] = by_job
        result: I64 = by_job[job]
        return result

    def job_tasks(self, job: int) -> I64:
        """Indices of the job's tasks (snapshot order)."""
        return self._job_tasks(job)

    def pending_best_effort(self, job: int) -> int:
        """Pending best-effort tasks of the job (Volcano counts them toward readiness)."""
        cache = self.scratch.setdefault("_best_effort", {})
        be = cache.get(job)
        if be is None:
            be = np.array(
                [t for t in self._job_tasks(job) if self.snapshot.tasks[t].best_effort],
                dtype=np.int64,
            )
            cache[job] = be
        return int((self.task_state[be] == TaskState.PENDING).sum()) if be.size else 0

    def vector(self, resources: Mapping[str, int] | None) -> I64:
        """A canonical resource mapping as a row over the session's columns (pods → 0)."""
        row = np.zeros(len(self.arrays.spec), dtype=np.int64)
        for res, amount in (resources or {}).items():
            if res != PODS:
                row[self.arrays.spec.index(res)] = amount
        return row

    def as_mapping(self, row: npt.NDArray[Any]) -> dict[str, int]:
        """A row over the session's columns as ``{resource: amount}`` (non-zero, pods dropped)."""
        return {
            name: round(float(v))
            for name, v in zip(self.arrays.spec.names, row, strict=True)
            if name != PODS and v
        }

    def note_job(self, job: int, reason: str, message: str) -> None:
        """Record why a job did not progress (the last word wins)."""
        self.job_reasons[job] = (reason, message)

    def preemptable_for(self, job: int, *, quota: bool = False) -> I64:
        """Resources ``job`` may take by preemption, in ``task_req``'s terms, as the enqueue
        action counts them while it votes on the job's admission (zeros otherwise): the
        ``job_enqueueable`` votes count them as available. ``quota``: only the part that
        lowers its queue's allocation beyond the victims' elastic amounts (what they hold
        past their ``min_resources``, which the queue votes already count as free). The
        enqueue action owns the count (the victim rules live with the actions) and sets
        ``preemption_freed[job] = (freed, freed_quota)``."""
        got = self.preemption_freed.get(job)
        if got is None:
            return np.zeros(len(self.arrays.spec), dtype=np.int64)
        out: I64 = got[1] if quota else got[0]
        return out


def _enabled(option: Any, point: str) -> bool:
    enabled = getattr(option, "enabled", None)
    return True if enabled is None else bool(enabled(point))
