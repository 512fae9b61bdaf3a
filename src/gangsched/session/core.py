"""The working state of one scheduling cycle.

Theory of operation
-------------------
``Session.open(snapshot, config, registry)`` copies the mutable columns of the snapshot's
:class:`~gangsched.session.arrays.ClusterArrays` (used, releasing, pipelined, per-device GPU use),
sets
up per-task state codes and per-job / per-queue aggregates (:mod:`gangsched.session.task_states`),
opens every
configured plugin in tier order and resolves, once, which plugins serve which extension point
(:class:`~gangsched.framework.dispatch.Dispatch`, reached as ``ssn.points``). The session holds
state and
answers questions about it; the work is done by the modules that own each rule:

* ``ssn.points`` — the dispatcher, the one place the tiers of plugins are walked;
* :mod:`gangsched.session.changes` — the change log (``ssn.changes``): what changed since a
  cursor, which every incremental view reads;
* :mod:`gangsched.session.evaluation` — per-template predicates, fit and scores, refreshed on the
  nodes the change log names (``ssn.evaluate``, ``ssn.best_node``, ``ssn.fit_error``);
* :mod:`gangsched.session.fit` — the node fit rule (resources, pods, GPU devices);
* :class:`~gangsched.session.statement.Statement` — the only way to change the state (through the
gate,
  :mod:`gangsched.session.gate`, and the bookkeeping of :mod:`gangsched.session.ledger`), with undo.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from gangsched._types import BOOL, I64
from gangsched.config import Config
from gangsched.decisions import PlacementInfo
from gangsched.framework.dispatch import Dispatch
from gangsched.framework.registry import Registry
from gangsched.model import JobPhase
from gangsched.model.gpu_charge import device_take
from gangsched.model.snapshot import Snapshot
from gangsched.session.arrays import (
    TaskTemplate,
    build_cluster_arrays,
    build_templates,
    pod_label_keys,
)
from gangsched.session.changes import ChangeLog, changed_nodes
from gangsched.session.evaluation import Evaluation, Evaluator
from gangsched.session.fit import (
    Occupancy,
    choose_devices,
    fits_node,
    future_idle,
    idle,
    occupancy_columns,
)
from gangsched.session.gate import Gate, Refusal
from gangsched.session.messages import CycleMessages
from gangsched.session.pod_constraints import pod_rules
from gangsched.session.statement import Op
from gangsched.session.task_states import (
    HOLDING_STATES,
    N_STATES,
    PIPELINED_OR_READY,
    READY_STATES,
    CycleCache,
    JobTasks,
    RoleCounts,
    TaskColumns,
    TaskState,
    job_counters,
    same_records,
    task_columns,
)
from gangsched.session.task_topology import build_buckets
from gangsched.units import PODS

__all__ = [
    "HOLDING_STATES",
    "N_STATES",
    "PIPELINED_OR_READY",
    "READY_STATES",
    "Session",
    "TaskState",
]


_INDEX_SUFFIX = re.compile(r"-(\d+)$")


def _continue_log(old: Session, new: Session, source: I64 | None) -> None:
    """Continue ``old``'s change log in ``new`` when both sessions have the same resource
    columns, carrying the jobs and queues that did not change. With the same nodes (names
    and order, GPU devices) the node rows continue too, the nodes whose record or occupancy
    differs logged (:meth:`~gangsched.session.changes.ChangeLog.continue_from`); otherwise
    the node rows start afresh (:meth:`~gangsched.session.changes.ChangeLog.
    continue_over_rows`). ``source``: per task of ``new``, the task of ``old`` that is the
    same record (-1: none)."""
    a, b = old.arrays, new.arrays
    if a is not b and a.spec.names != b.spec.names:
        return
    if a is not b and (
        a.node_names != b.node_names
        or not np.array_equal(a.gpu_node, b.gpu_node)  # the same devices on the same nodes
        or len(old.snapshot.nodes) != len(new.snapshot.nodes)
    ):
        # Another node set: the jobs and queues continue, the node rows start afresh.
        jobs, queues = _unchanged_jobs(old, new, source)
        new.changes.continue_over_rows(old.changes, jobs=jobs, queues=queues)
        return
    found = changed_nodes(
        old.snapshot.nodes,
        new.snapshot.nodes,
        occupancy_columns(old),
        occupancy_columns(new),
        b.gpu_node,
    )
    if found is not None:
        stale, records, taints = found
        jobs, queues = _unchanged_jobs(old, new, source)
        new.changes.continue_from(
            old.changes, stale, records, taints=taints, jobs=jobs, queues=queues
        )


def _unchanged_jobs(
    old: Session, new: Session, source: I64 | None
) -> tuple[I64 | None, I64 | None]:
    """Per job and per queue of ``new``, the one of ``old`` it continues unchanged (-1: none).

    A job continues when it is the same record with the same task records, and its task
    counts per state and its allocation at ``new``'s opening are those at ``old``'s end (a
    reservation ``old`` kept and the snapshot does not show is a change). A queue continues
    when it is the same record with the same allocation and every job of it, in both, is a
    job that continues."""
    o_snap, n_snap = old.snapshot, new.snapshot
    if source is None or not o_snap.jobs or not o_snap.tasks or not o_snap.queues:
        return None, None
    o_jobs = o_snap.jobs
    n_jobs = len(n_snap.jobs)
    old_of = new.columns.job_source  # the same record
    if old_of is None:
        old_of = same_records(old.columns.job_ids, new.columns.job_ids)
    mapped = old_of >= 0
    at = np.where(mapped, old_of, 0)
    # every task of the job is a record of the old job, and there are as many
    have = source >= 0
    task_old_job = np.where(have, old.task_job[np.where(have, source, 0)], -2)
    strays = np.bincount(new.task_job[task_old_job != old_of[new.task_job]], minlength=n_jobs)
    o_count = np.bincount(old.task_job, minlength=len(o_jobs))
    same = (
        mapped
        & (strays == 0)
        & (np.bincount(new.task_job, minlength=n_jobs) == o_count[at])
        & (new.job_count == old.job_count[at]).all(axis=1)
        & (new.job_allocated == old.job_allocated[at]).all(axis=1)
    )
    jobs = np.where(same, old_of, -1)
    # queues
    if o_snap.queues is n_snap.queues:  # the same queue records, in the same order
        q_old = np.arange(len(n_snap.queues), dtype=np.int64)
    else:
        o_queues = o_snap.queue_index
        q_old = np.full(len(n_snap.queues), -1, dtype=np.int64)
        for q, queue in enumerate(n_snap.queues):
            oq = o_queues.get(queue.name, -1)
            if oq >= 0 and o_snap.queues[oq] is queue:
                q_old[q] = oq
    q_at = np.where(q_old >= 0, q_old, 0)
    n_q = len(n_snap.queues)
    moved = np.bincount(new.job_queue[~same], minlength=n_q) > 0
    o_per_queue = np.bincount(old.job_queue, minlength=len(o_snap.queues))
    q_same = (
        (q_old >= 0) & ~moved & (np.bincount(new.job_queue, minlength=n_q) == o_per_queue[q_at])
    )  # (its allocation is the sum of its jobs': the same)
    queues = np.where(q_same, q_old, -1)
    return jobs, queues


@dataclass(slots=True, eq=False)
class Session(Occupancy):
    snapshot: Snapshot
    config: Config
    #: What changed in this cycle, read through cursors (:mod:`gangsched.session.changes`);
    #: written by :mod:`gangsched.session.ledger` alone.
    changes: ChangeLog
    task_state: npt.NDArray[np.int8]
    task_node: I64
    task_gpus: list[tuple[int, ...]]
    task_job: I64
    #: (n_tasks, n_resources) what each task charges its job and queue: its request, pods = 1,
    #: the GPU column per queue_gpu_charge (a node is charged per its devices: row_on)
    task_req: I64
    job_queue: I64
    job_min: I64
    job_phase: list[JobPhase]
    job_allocated: I64  # (n_jobs, n_resources) held or reserved, in task_req's terms
    job_count: I64  # (n_jobs, n_states) tasks per state
    role_count: RoleCounts  # (job, role) -> (n_states,) tasks per state
    queue_allocated: I64  # (n_queues, n_resources) Σ job_allocated of the queue's jobs
    templates: list[TaskTemplate]
    template_of: I64
    #: The per-task columns as the cycle opened (read-only; the next cycle carries the rows
    #: of the records it shares from them).
    columns: TaskColumns
    #: The pod label keys some pod constraint of the snapshot reads (None: no task has one;
    #: :func:`~gangsched.session.arrays.pod_label_keys`).
    pod_label_keys: tuple[str, ...] | None
    #: The opened plugins, by tier.
    plugins: list[list[Any]] = field(default_factory=list)
    job_reasons: dict[int, tuple[str, str]] = field(default_factory=dict)
    task_reasons: dict[int, str] = field(default_factory=dict)
    unschedulable_jobs: set[int] = field(default_factory=set)
    #: (n_queues, n_resources) what each queue deserves (the fair-share plugin's), if any.
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
    #: Messages between the actions of this cycle, each with one writer
    #: (:mod:`gangsched.session.messages`).
    messages: CycleMessages = field(default_factory=CycleMessages)
    #: Operations the placement gate refused, in words (an action proposed a placement that
    #: breaks a hard rule: see :mod:`gangsched.session.gate`).
    refusals: list[Refusal] = field(default_factory=list)
    #: Per-session caches of plugins and actions (typed; never outputs).
    cache: CycleCache = field(default_factory=CycleCache)
    #: What this cycle leaves for the next, and the last cycle's: job and queue statuses with
    #: the change log's position they were made at (``session.close``), failed greedy gang
    #: placements (``actions._gang_placement.place_job``) and failed attempts
    #: (``actions._retry``).
    records: dict[tuple[object, ...], Any] = field(default_factory=dict)
    prior_records: dict[tuple[object, ...], Any] = field(default_factory=dict)
    #: The registry the plugins came from.
    registry: Registry | None = None
    #: Per GPU take asked for (a request's milli-GPU per device): what it holds on one device
    #: of each node (``device_take`` over the nodes, as plain ints; :meth:`device_milli`).
    device_takes: dict[int, list[int]] = field(default_factory=dict)
    points: Dispatch = field(init=False)
    gate: Gate = field(init=False)
    evaluator: Evaluator = field(init=False)

    # ---------------------------------------------------------------- opening

    @classmethod
    def open(
        cls,
        snapshot: Snapshot,
        config: Config,
        registry: Registry,
        *,
        previous: Session | None = None,
    ) -> Session:
        """Open a cycle on ``snapshot``. ``previous``: the finished session of the cycle before
        on the same cluster, whose per-template evaluations this one takes over where they
        still hold (:meth:`gangsched.session.evaluation.Evaluator.carry`); the decisions are the
        same
        with or without it."""
        arrays = build_cluster_arrays(snapshot)
        same = previous is not None and previous.arrays.spec.names == arrays.spec.names
        prior = (previous.snapshot, previous.columns) if previous is not None and same else None
        cols = task_columns(snapshot, arrays.spec, prior)
        job_queue = cols.job_queue
        by_job = JobTasks(cols.job, len(snapshot.jobs))
        job_count, role_count, job_allocated, queue_allocated = job_counters(
            snapshot, cols, job_queue, by_job
        )
        pending = np.flatnonzero(cols.state == TaskState.PENDING).tolist()
        carried = None
        read: tuple[str, ...] | None = None
        if previous is not None and cols.source is not None:
            # A task whose record was a task of the last cycle's template joins that key's
            # template; the pod label keys, none last cycle, are none unless a new record
            # asks for some.
            have = cols.source >= 0
            old_of = np.full(len(snapshot.tasks), -1, dtype=np.int64)
            old_of[have] = previous.template_of[cols.source[have]]
            carried = (previous.templates, old_of, previous.snapshot.job_index)
            tasks = snapshot.tasks
            if previous.pod_label_keys is not None or any(
                tasks[t].pod_constrained for t in np.flatnonzero(~have).tolist()
            ):
                read = pod_label_keys(snapshot)
        else:
            read = pod_label_keys(snapshot)
        split = None
        if config.plugin("task-topology") is not None:
            buckets = build_buckets(snapshot)
            split = {t: b for jb in buckets.values() for t, b in jb.bucket_of.items()}
        templates, template_of = build_templates(
            snapshot, cols.req, pending, carried, split, read=read, jobs=cols.job
        )
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
            changes=ChangeLog(arrays.n_nodes, len(snapshot.queues), len(snapshot.jobs)),
            task_state=cols.state.copy(),
            task_node=cols.node.copy(),
            task_gpus=cols.devices.tolist(),
            task_job=cols.job,
            task_req=cols.req,
            job_queue=job_queue,
            job_min=cols.job_min,
            job_phase=list(cols.job_phase),
            job_allocated=job_allocated,
            job_count=job_count,
            role_count=role_count,
            queue_allocated=queue_allocated,
            templates=templates,
            template_of=template_of,
            columns=cols,
            pod_label_keys=read,
        )
        ssn.cache.job_tasks = by_job
        ssn.registry = registry
        if previous is not None:
            _continue_log(previous, ssn, cols.source)
        ssn.gate = Gate(ssn)
        ssn.evaluator = Evaluator(ssn)
        opened = [
            [
                (option, registry.make_plugin(option.name, option.arguments))
                for option in tier.plugins
            ]
            for tier in config.tiers
        ]
        ssn.plugins = [[p for _, p in tier] for tier in opened]
        ssn.points = Dispatch(ssn, opened)
        ssn.points.on_session_open()
        fair = ssn.points.fair_share
        if fair is not None:
            ssn.queue_deserved = fair.queue_deserved(ssn)
        if previous is not None:
            ssn.evaluator.carry(previous.evaluator)
            ssn.prior_records = previous.records
        return ssn

    def plugin(self, name: str) -> Any | None:
        """The opened plugin called ``name``, if configured (for tests and tools; the package
        itself reaches plugins only through their extension points)."""
        return next((p for t in self.plugins for p in t if getattr(p, "name", None) == name), None)

    # ---------------------------------------------------------------- orders

    def job_key(self, job: int) -> tuple[Any, ...]:
        rec = self.snapshot.jobs[job]
        return (*self.points.job_order(job), rec.creation, rec.name)

    def queue_key(self, queue: int) -> tuple[Any, ...]:
        return (*self.points.queue_order(queue), self.snapshot.queues[queue].name)

    def task_key(self, task: int) -> tuple[Any, ...]:
        name = self.snapshot.tasks[task].name
        m = _INDEX_SUFFIX.search(name)
        return (*self.points.task_order(task), int(m.group(1)) if m else -1, name)

    def victim_key(self, task: int) -> tuple[Any, ...]:
        return (*self.points.victim_order(task), self.snapshot.tasks[task].name)

    # ---------------------------------------------------------------- resources and fit

    def device_milli(self, task: int, node: int) -> int:
        g = self.snapshot.tasks[task].gpu_request
        if g is None:
            return 0
        takes = self.device_takes.get(g.milli)
        if takes is None:
            a = self.arrays
            takes = device_take(g.milli, a.gpu_capacity, a.gpu_sharing).tolist()
            self.device_takes[g.milli] = takes
        return takes[node]

    def row_on(self, task: int, node: int) -> I64:
        """The task's request as it is charged on ``node`` (GPU column per the node's devices);
        its job and queue are charged ``task_req[task]`` instead."""
        row: I64 = self.task_req[task].copy()
        g = self.snapshot.tasks[task].gpu_request
        if g is not None:
            row[self.arrays.spec.gpu_column] = g.count * self.device_milli(task, node)
        return row

    def idle(self) -> I64:
        return idle(self)

    def future_idle(self) -> I64:
        return future_idle(self)

    def evaluate(self, tmpl: TaskTemplate) -> Evaluation:
        ev = self.evaluator.evaluate(tmpl)
        rules = pod_rules(self)  # pod (anti-)affinity and spread: a mask on top, if any
        if rules is not None and rules.concerns(tmpl):
            return rules.restrict(tmpl, ev)
        return ev

    def feasible(self, tmpl: TaskTemplate) -> Evaluation:
        """:meth:`evaluate` for where ``tmpl`` may go: ``ok``, ``fit_idle`` and
        ``fit_future`` are current; the scores and best vectors may lag
        (:meth:`~gangsched.session.evaluation.Evaluator.feasible`)."""
        rules = pod_rules(self)
        if rules is not None and rules.concerns(tmpl):
            return rules.restrict(tmpl, self.evaluator.evaluate(tmpl))
        return self.evaluator.feasible(tmpl)

    def best_node(self, tmpl: TaskTemplate, among: BOOL | None = None) -> tuple[int, bool]:
        rules = pod_rules(self)
        if rules is not None and rules.concerns(tmpl):
            return rules.best_node(tmpl, among)
        return self.evaluator.best_node(tmpl, among)

    def fit_error(self, tmpl: TaskTemplate, among: BOOL | None = None) -> str:
        rules = pod_rules(self)
        if rules is not None and rules.concerns(tmpl):
            return rules.fit_error(tmpl, among)
        return self.evaluator.fit_error(tmpl, among)

    def fits(self, task: int, node: int, *, future: bool, gpus: tuple[int, ...] = ()) -> bool:
        """Whether ``task`` fits ``node`` now (or after releases, with ``future``) on these GPU
        devices — the check a planned placement passes before it is applied. The fit rule's
        generated form judges each device as the evaluation does (its least room for the
        task's take included)."""
        milli = self.device_milli(task, node)
        return fits_node(self, self.row_on(task, node), node, milli, gpus, future=future)

    def choose_gpus(self, task: int, node: int, *, future: bool) -> tuple[int, ...]:
        """Device indices for ``task`` on ``node``: a plugin may name them (``gpu_choice``),
        else :func:`gangsched.session.fit.choose_devices` (devices with the fit rule's least
        room for the task's take)."""
        g = self.snapshot.tasks[task].gpu_request
        if g is None:
            return ()
        pick = self.points.gpu_choice(task, node, g.count, future=future)
        if pick is not None:
            return pick
        return choose_devices(self, node, self.device_milli(task, node), g.count, future=future)

    # ---------------------------------------------------------------- bookkeeping

    def record(self, ops: Sequence[Op], *, committed: bool, promoted: Sequence[Op] = ()) -> None:
        """File the operations of a finished statement as decisions (``committed``) or kept
        reservations; ``promoted``: kept operations that become decisions after them. The
        statement's ending is the only caller, and this the only writer of ``committed``
        and ``kept``."""
        (self.committed if committed else self.kept).extend(ops)
        if promoted:
            self.kept[:] = [op for op in self.kept if op not in promoted]
            self.committed.extend(promoted)

    # ---------------------------------------------------------------- job counters

    def count_states(self, job: int, states: Sequence[int], role: str | None = None) -> int:
        """Number of the job's tasks (of ``role``, if given) in any of ``states``."""
        if role is None:
            counts = self.job_count[job]
        else:
            try:
                counts = self.role_count[job, role]
            except KeyError:
                return 0  # no task of the job has that role
        per_state = counts.tolist()
        total = 0
        for s in states:  # a plain loop: a generator costs twice as much on this hot path
            total += per_state[s]
        return total

    def job_tasks(self, job: int) -> I64:
        """Indices of the job's tasks (snapshot order)."""
        by_job = self.cache.job_tasks
        if by_job is None:
            by_job = self.cache.job_tasks = JobTasks(self.task_job, len(self.snapshot.jobs))
        got = by_job.made[job]
        return by_job.of(job) if got is None else got

    def pending_best_effort(self, job: int) -> int:
        """Pending best-effort tasks of the job (Volcano counts them toward readiness)."""
        cols = self.columns
        if not cols.job_best_effort[job]:
            return 0  # (most jobs: no task of theirs is best-effort)
        be = self.cache.best_effort.get(job)
        if be is None:
            own = self.job_tasks(job)
            be = self.cache.best_effort[job] = own[cols.best_effort[own]]
        return int((self.task_state[be] == TaskState.PENDING).sum())

    def vector(self, resources: Mapping[str, int] | None) -> I64:
        """A canonical resource mapping as a row over the session's columns (pods → 0)."""
        row = np.zeros(len(self.arrays.spec), dtype=np.int64)
        for res, amount in (resources or {}).items():
            if res != PODS:
                row[self.arrays.spec.index(res)] = amount
        return row

    def as_mapping(self, row: npt.NDArray[Any]) -> dict[str, int]:
        """A row over the session's columns as ``{resource: amount}`` (non-zero, pods dropped)."""
        names = self.arrays.spec.names
        return {n: round(float(v)) for n, v in zip(names, row, strict=True) if n != PODS and v}

    def note_job(self, job: int, reason: str, message: str) -> None:
        """Record why a job did not progress (the last word wins)."""
        self.job_reasons[job] = (reason, message)

    def release(self) -> None:
        """Let a finished session go: drop its dispatcher, gate and evaluator, which point
        back at it, so that it and everything it alone holds are freed as soon as the last
        reference to it goes, without waiting for the cyclic garbage collector. For a caller
        that runs cycle after cycle (:class:`gangsched.ClusterState` releases a session once
        the next one has taken over what it lends); the session cannot run anything after."""
        for name in ("points", "gate", "evaluator"):
            if hasattr(self, name):
                delattr(self, name)

    @property
    def released(self) -> bool:
        """Whether :meth:`release` let this session go."""
        return not hasattr(self, "evaluator")

    def preemptable_for(self, job: int, *, quota: bool = False) -> I64:
        """Resources ``job`` may take by preemption, in ``task_req``'s terms, as the enqueue
        action counts them while it votes on the job's admission (zeros otherwise): the
        ``job_enqueueable`` votes count them as available. ``quota``: only the part that lowers
        its queue's allocation beyond the victims' elastic amounts. The enqueue action owns the
        count: the cycle's ``freed_by_preemption`` message
        (:class:`~gangsched.session.messages.FreedByPreemption`)."""
        got = self.messages.freed_by_preemption.of(job, quota=quota)
        if got is None:
            return np.zeros(len(self.arrays.spec), dtype=np.int64)
        return got
