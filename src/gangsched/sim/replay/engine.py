"""The replay's discrete-event engine (see :mod:`gangsched.sim.replay`)."""

from __future__ import annotations

import dataclasses
import heapq
import math
from bisect import bisect_left
from collections.abc import Callable
from itertools import compress
from operator import is_not

import numpy as np
import numpy.typing as npt

from gangsched.decisions import Decisions, JobStatus
from gangsched.errors import ConfigError, PlacementError
from gangsched.fragmentation import MILLI, fragment_terms, node_fragment_from_terms
from gangsched.model import Job, JobPhase, Task, TaskPhase
from gangsched.model.gpu_charge import queue_gpu_charge
from gangsched.model.snapshot import Snapshot
from gangsched.sim.replay.result import ReplayResult, collect
from gangsched.sim.replay.trace import (
    JobState,
    ReplayOptions,
    ReplayProgress,
    Trace,
    derive_typical,
    trace_models,
)
from gangsched.state import ClusterState
from gangsched.units import CPU, MEMORY

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]

END, RELEASE, FAIL, RECOVER, ARRIVE, CYCLE = range(6)

# Kinds of the allocation log (ReplayResult.log_kind), in the order the engine did them.
LOG_ARRIVE, LOG_HOLD, LOG_FREE, LOG_START, LOG_RESTART, LOG_END = range(6)

# Task states inside the engine.
_WAITING, _PENDING, _RUNNING, _RELEASING, _GONE = range(5)


class Engine:
    """The replay's mutable state. One instance per :func:`replay` call."""

    #: About how many (row, node) figures the fragment rows are worked out over at once (a
    #: chunk's nodes-by-rows arrays of 2 MB: the default replay's settling took 0.09 s where
    #: arrays of 8 MB took 0.10-0.16 s; the figures are the same whatever the chunks).
    settle_cells = 1 << 18

    def __init__(
        self, trace: Trace, opts: ReplayOptions, progress: Callable[[ReplayProgress], None] | None
    ) -> None:
        self.trace, self.opts, self.progress = trace, opts, progress
        nodes = trace.nodes
        n = len(nodes)
        self.node_index = {node.name: i for i, node in enumerate(nodes)}
        counts = np.array([0 if nd.gpus is None else nd.gpus.count for nd in nodes], np.int64)
        width = int(counts.max()) if n else 0
        self.cap_cpu = np.array([nd.allocatable.get(CPU, 0) for nd in nodes], np.int64)
        self.cap_mem = np.array([nd.allocatable.get(MEMORY, 0) for nd in nodes], np.int64)
        self.dev_cap = np.array([0 if nd.gpus is None else nd.gpus.milli for nd in nodes], np.int64)
        self.sharing = np.array([nd.gpus is not None and nd.gpus.sharing for nd in nodes], bool)
        self.dev_valid = np.arange(width)[None, :] < counts[:, None]  # (n, width)
        models = trace_models(trace)
        midx = {m: i for i, m in enumerate(models)}
        self.model_idx = np.array(
            [len(models) if nd.gpus is None else midx[nd.gpus.model] for nd in nodes], np.int64
        )
        self.total_gpu = int((self.dev_cap[:, None] * self.dev_valid).sum())
        # (the per-node figures a hold or a free reads one at a time, as Python values)
        self.node_figures: list[tuple[int, int, int, int, bool]] = list(
            zip(
                self.cap_cpu.tolist(),
                self.cap_mem.tolist(),
                counts.tolist(),
                self.dev_cap.tolist(),
                self.sharing.tolist(),
                strict=True,
            )
        )

        # Tasks, flattened in job order.
        self.task_base: list[Task] = [task for tj in trace.jobs for task in tj.tasks]
        self.job_tasks: list[range] = []
        first = 0
        for tj in trace.jobs:
            self.job_tasks.append(range(first, first + len(tj.tasks)))
            first += len(tj.tasks)
        base = self.task_base
        self.task_index = {task.name: i for i, task in enumerate(base)}
        self.task_job = np.repeat(np.arange(len(trace.jobs)), [len(tj.tasks) for tj in trace.jobs])
        self.task_cpu = np.array([t.request.get(CPU, 0) for t in base], np.int64)
        self.task_mem = np.array([t.request.get(MEMORY, 0) for t in base], np.int64)
        gpu = [t.gpu_request for t in base]
        self.task_gpu_count = np.array([0 if g is None else g.count for g in gpu], np.int64)
        self.task_gpu_milli = np.array([0 if g is None else g.milli for g in gpu], np.int64)
        self.task_nominal = queue_gpu_charge(self.task_gpu_count, self.task_gpu_milli)
        # (the per-task figures a hold or a free reads one at a time, as Python ints)
        self.cpu_of: list[int] = self.task_cpu.tolist()
        self.mem_of: list[int] = self.task_mem.tolist()
        self.count_of: list[int] = self.task_gpu_count.tolist()
        self.milli_of: list[int] = self.task_gpu_milli.tolist()
        n_tasks, n_jobs = len(base), len(trace.jobs)
        self.job_gpu = np.zeros(n_jobs, np.int64)
        np.add.at(self.job_gpu, self.task_job, self.task_nominal)
        qidx = {q.name: i for i, q in enumerate(trace.queues)}
        self.job_queue = np.array([qidx[tj.job.queue] for tj in trace.jobs], np.int64)
        self.job_min = np.array([tj.job.min_available for tj in trace.jobs], np.int64)
        self.queue_of: list[int] = self.job_queue[self.task_job].tolist()  # per task

        # Dynamic state.
        self.task_state = np.full(n_tasks, _WAITING, np.int8)
        self.task_node = np.full(n_tasks, -1, np.int64)
        self.task_first_node = np.full(n_tasks, -1, np.int64)
        self.task_gpus: list[tuple[int, ...]] = [()] * n_tasks
        self.task_record: list[Task | None] = [None] * n_tasks
        self.used_cpu = np.zeros(n, np.int64)
        # The milli-GPU and millicores held, summed over the nodes (``queue_alloc`` and
        # ``used_cpu`` summed), moved by every hold and free.
        self.gpu_held = self.cpu_held = 0
        self.used_mem = np.zeros(n, np.int64)
        self.dev_used = np.zeros((n, width), np.int64)
        self.failed = np.zeros(n, dtype=bool)
        self.open_failures = np.zeros(n, np.int64)  # failure windows open on each node
        # The scheduler's view: live jobs in trace order, their tasks in job order.
        self.state = ClusterState(
            Snapshot(nodes=nodes, hypernodes=trace.hypernodes, queues=trace.queues)
        )
        self.live_order: list[int] = []  # live jobs in the state's order (ascending)
        self.job_state = np.full(n_jobs, JobState.NOT_ARRIVED, np.int64)
        self.job_started = np.zeros(n_jobs, dtype=bool)
        self.job_phase = [tj.job.phase for tj in trace.jobs]
        self.job_epoch = np.zeros(n_jobs, np.int64)
        self.job_start = np.full(n_jobs, np.nan)
        self.job_end = np.full(n_jobs, np.nan)
        self.job_restarts = np.zeros(n_jobs, np.int64)
        self.job_running_tasks = np.zeros(n_jobs, np.int64)
        self.job_records: dict[tuple[int, JobPhase], Job] = {}
        self.job_of = {tj.job.name: j for j, tj in enumerate(trace.jobs)}
        # Per job name, the status :meth:`apply` last looked at while the job's phase and
        # waiting stood as they stand now (every move of either outside that look drops it):
        # a status seen again moves nothing, so a cycle looks at the statuses that changed.
        self.seen: dict[str, JobStatus] = {}
        self.live: set[int] = set()  # arrived and not finished
        self.n_started = 0  # live jobs that have started
        self.n_arrived = 0
        self.queue_alloc = np.zeros(len(trace.queues), np.int64)
        self.queue_wait = np.zeros(len(trace.queues), np.int64)
        self.arrived_gpu = 0
        self.max_device = 0
        self.n_events = self.n_cycles = 0
        self.step_binds = self.step_evictions = self.step_pipelined = 0
        self.dirty = False
        self.dirty_nodes: set[int] = set()
        self.next_tick = -1.0
        self.heap: list[tuple[float, int, int, int, int]] = []
        self.seq = 0
        for j, tj in enumerate(trace.jobs):
            self.push(float(tj.arrival), ARRIVE, j)
        for k, f in enumerate(trace.failures):
            self.push(float(f.at), FAIL, k)
            if f.until is not None:
                self.push(float(f.until), RECOVER, k)

        # Fragmentation over the typical pods; one extra model column for nodes without GPUs.
        typical = opts.typical if opts.typical is not None else derive_typical(trace)
        if typical.allowed.shape[1] != len(models):
            raise ConfigError(
                f"typical pods have {typical.allowed.shape[1]} model columns, the trace has "
                f"{len(models)} GPU models",
                kind="replay",
                field="typical",
            )
        no_gpu = np.zeros((len(typical), 1), dtype=bool)
        self.typical = dataclasses.replace(
            typical, allowed=np.concatenate([typical.allowed, no_gpu], axis=1)
        )
        every = np.arange(n, dtype=np.intp)
        self.terms = fragment_terms(self._gpu_free(every), self.typical)
        self.node_frag = node_fragment_from_terms(
            self.cap_cpu.copy(), self.model_idx, self.terms, self.typical
        )
        self.rows: dict[str, list[object]] = {key: [] for key in _ROW_KEYS}
        # Per row that found nodes marked, to work its fragment and idle GPU out later: the
        # row, the nodes, the milli-GPU per device and the CPU they held then (:meth:`_settle`).
        self.frag_todo: list[tuple[int, npt.NDArray[np.intp], I64, I64]] = []
        # The fragment and idle GPU sums of the last row worked out.
        self.frag_last = (float(self.node_frag.sum()), int(self.terms.idle.sum()))
        # (time, kind, job or task, node, milli-GPU held): what happened to whom, in order.
        self.log: list[tuple[float, int, int, int, int]] = []
        self.now = 0.0

    def push(self, time: float, kind: int, payload: int, epoch: int = 0) -> None:
        heapq.heappush(self.heap, (time, kind, self.seq, payload, epoch))
        self.seq += 1

    @property
    def n_waiting(self) -> int:
        return len(self.live) - self.n_started

    # -------------------------------------------------------------------------- resources

    def _gpu_free(self, rows: npt.NDArray[np.intp], used: I64 | None = None) -> I64:
        """(k, width) free milli-GPU per device, scaled to 1000 per device, padding 0 (with
        ``used``: the milli-GPU the devices of ``rows`` held then, else now)."""
        cap = self.dev_cap[rows][:, None]
        held = self.dev_used[rows] if used is None else used
        free = np.where(self.dev_valid[rows], cap - held, 0)
        out: I64 = np.where(cap == MILLI, free, free * MILLI // np.maximum(cap, 1))
        return out

    def _charge(self, t: int, node: int) -> int:
        """Milli-GPU task ``t`` holds on each of its devices on ``node`` (as the session does)."""
        _, _, _, cap, sharing = self.node_figures[node]
        milli = self.milli_of[t]
        return cap if not sharing or milli >= cap else milli

    def _hold(self, t: int, node: int, gpus: tuple[int, ...]) -> None:
        """Book task ``t`` on ``node`` and ``gpus``; a bind that does not fit is an error."""

        def fail(detail: str, field: str) -> PlacementError:
            where = f"node {self.trace.nodes[node].name!r}"
            return PlacementError(
                f"bound to {where}: {detail}", kind="task", name=self.task_base[t].name, field=field
            )

        if self.failed[node]:
            raise fail("the node has failed (configure the 'predicates' plugin)", "node")
        count = self.count_of[t]
        if len(gpus) != count or len(set(gpus)) != len(gpus):
            raise fail(f"devices {list(gpus)} for a request of {count}", "gpu_indices")
        cpu_cap, mem_cap, n_dev, cap, _ = self.node_figures[node]
        charge = top = 0
        if gpus:
            charge = self._charge(t, node)
            row = self.dev_used[node]
            for g in gpus:
                if not 0 <= g < n_dev:
                    raise fail(f"device {g} does not exist", "gpu_indices")
                held = int(row[g]) + charge
                if held > cap:
                    raise fail(f"device {g} would hold {held} of {cap}", "gpu_indices")
                top = max(top, held)
        cpu, mem = self.cpu_of[t], self.mem_of[t]
        used_cpu = int(self.used_cpu[node]) + cpu
        used_mem = int(self.used_mem[node]) + mem
        if used_cpu > cpu_cap:
            raise fail("not enough cpu", "request.cpu")
        if used_mem > mem_cap:
            raise fail("not enough memory", "request.memory")
        self.used_cpu[node] = used_cpu
        self.used_mem[node] = used_mem
        if gpus:
            for g in gpus:
                row[g] += charge
            self.max_device = max(self.max_device, top)
        self.task_node[t] = node
        self.task_gpus[t] = gpus
        if self.task_first_node[t] < 0:
            self.task_first_node[t] = node
        milli = charge * len(gpus)
        self.queue_alloc[self.queue_of[t]] += milli
        self.gpu_held += milli
        self.cpu_held += cpu
        self.dirty_nodes.add(node)
        self.log.append((self.now, LOG_HOLD, t, node, milli))

    def _free(self, t: int) -> None:
        node = int(self.task_node[t])
        gpus = self.task_gpus[t]
        charge = self._charge(t, node) if gpus else 0
        cpu = self.cpu_of[t]
        self.used_cpu[node] -= cpu
        self.used_mem[node] -= self.mem_of[t]
        if gpus:
            row = self.dev_used[node]
            for g in gpus:
                row[g] -= charge
        milli = charge * len(gpus)
        self.queue_alloc[self.queue_of[t]] -= milli
        self.gpu_held -= milli
        self.cpu_held -= cpu
        self.log.append((self.now, LOG_FREE, t, node, milli))
        self.task_node[t] = -1
        self.task_gpus[t] = ()
        self.task_record[t] = None
        self.dirty_nodes.add(node)
        self.dirty = True

    # -------------------------------------------------------------------------- job moves

    def _arrive(self, j: int) -> None:
        q = int(self.job_queue[j])
        for t in self.job_tasks[j]:
            self.task_state[t] = _PENDING
            self.queue_wait[q] += int(self.task_nominal[t])
        self.job_state[j] = JobState.QUEUED
        self.live.add(j)
        # Keep the state's jobs in trace order: jobs after j (a trace not sorted by arrival)
        # leave and come back after it, as they are.
        order = self.live_order
        k = len(order)
        while k and order[k - 1] > j:
            k -= 1
        later = order[k:]
        moved = [(self.state.jobs[self._name(i)], self._tasks_now(i)) for i in later]
        for i in later:
            self.state.remove_job(self._name(i), with_tasks=True)
        self.state.add_job(self._job_record(j), [self.task_base[t] for t in self.job_tasks[j]])
        for job, tasks in moved:
            self.state.add_job(job, tasks)
        order.insert(k, j)
        self.n_arrived += 1
        self.arrived_gpu += int(self.job_gpu[j])
        self.log.append((self.now, LOG_ARRIVE, j, -1, 0))
        self.dirty = True

    def _name(self, j: int) -> str:
        return self.trace.jobs[j].job.name

    def _tasks_now(self, j: int) -> list[Task]:
        tasks = self.state.tasks
        return [tasks[self.task_base[t].name] for t in self.job_tasks[j]]

    def _sync_job(self, j: int) -> None:
        """The state's record of live job ``j`` follows its phase."""
        rec = self._job_record(j)
        if self.state.jobs[rec.name] is not rec:
            self.state.update_job(rec)

    def _sync_task(self, t: int) -> None:
        """The state's record of task ``t`` (of a live job) follows its engine state."""
        rec = self._task_record(t)
        if self.state.tasks[rec.name] is not rec:
            self.state.update_task(rec)

    def _start(self, j: int, time: float) -> None:
        self.log.append((time, LOG_START, j, -1, 0))
        self.seen.pop(self._name(j), None)
        self.job_started[j] = True
        self.n_started += 1
        self.job_state[j] = JobState.RUNNING
        self._sync_job(j)
        if math.isnan(self.job_start[j]):
            self.job_start[j] = time
        duration = self.trace.jobs[j].duration
        if duration is not None:
            self.push(time + float(duration), END, j, int(self.job_epoch[j]))

    def _finish(self, j: int, state: int, time: float) -> None:
        """End job ``j`` in ``state``: free what it holds, forget what it waits for."""
        q = int(self.job_queue[j])
        for t in self.job_tasks[j]:
            st = self.task_state[t]
            if st in (_RUNNING, _RELEASING):
                self._free(t)
            elif st == _PENDING:
                self.queue_wait[q] -= int(self.task_nominal[t])
            self.task_state[t] = _GONE
        if self.job_started[j]:
            self.n_started -= 1
            self.job_started[j] = False
        self.log.append((time, LOG_END, j, -1, 0))
        self.seen.pop(self._name(j), None)
        self.job_state[j] = state
        self.job_end[j] = time
        self.job_running_tasks[j] = 0
        self.job_epoch[j] += 1
        if j in self.live:
            self.live.discard(j)
            del self.live_order[bisect_left(self.live_order, j)]
            self.state.remove_job(self._name(j), with_tasks=True)

    def _restart(self, j: int) -> None:
        """Job ``j`` queues again from scratch: every task it holds is freed and pending."""
        q = int(self.job_queue[j])
        for t in self.job_tasks[j]:
            if self.task_state[t] in (_RUNNING, _RELEASING):
                self._free(t)
            if self.task_state[t] != _PENDING:
                self.queue_wait[q] += int(self.task_nominal[t])
            self.task_state[t] = _PENDING
        if self.job_started[j]:
            self.n_started -= 1
            self.job_started[j] = False
        self.log.append((self.now, LOG_RESTART, j, -1, 0))
        self.seen.pop(self._name(j), None)
        self.job_state[j] = JobState.QUEUED
        self.job_running_tasks[j] = 0
        self.job_phase[j] = self.trace.jobs[j].job.phase
        self.job_restarts[j] += 1
        self.job_epoch[j] += 1
        self.dirty = True
        for t in self.job_tasks[j]:
            self._sync_task(t)
        self._sync_job(j)

    def _set_failed(self, node: int, down: bool) -> None:
        if bool(self.failed[node]) == down:
            return
        self.failed[node] = down
        record = self.trace.nodes[node]
        self.state.update_node(dataclasses.replace(record, unschedulable=True) if down else record)
        self.dirty = True

    # -------------------------------------------------------------------------- events

    def apply_event(self, time: float, kind: int, payload: int, epoch: int) -> None:
        self.n_events += 1
        self.now = time
        if kind == ARRIVE:
            self._arrive(payload)
        elif kind == END:
            if epoch == self.job_epoch[payload] and self.job_started[payload]:
                self._finish(payload, JobState.DONE, time)
        elif kind == RELEASE:
            j = int(self.task_job[payload])
            if epoch == self.job_epoch[j] and self.task_state[payload] == _RELEASING:
                self._restart(j)
        elif kind == FAIL:
            node = self.node_index[self.trace.failures[payload].node]
            self.open_failures[node] += 1
            self._set_failed(node, True)
            on_node = np.flatnonzero(self.task_node == node)
            for j in np.unique(self.task_job[on_node]).tolist():
                if self.opts.on_node_failure == "fail":
                    self._finish(j, JobState.FAILED, time)
                else:
                    self._restart(j)
        elif kind == RECOVER:
            node = self.node_index[self.trace.failures[payload].node]
            self.open_failures[node] -= 1
            if self.open_failures[node] == 0:  # down while any of its windows is open
                self._set_failed(node, False)

    # -------------------------------------------------------------------------- cycles

    def _job_record(self, j: int) -> Job:
        phase = JobPhase.RUNNING if self.job_started[j] else self.job_phase[j]
        rec = self.job_records.get((j, phase))
        if rec is None:
            rec = self.trace.jobs[j].job.in_phase(phase, creation=j)
            self.job_records[(j, phase)] = rec
        return rec

    def _task_record(self, t: int) -> Task:
        st = self.task_state[t]
        if st == _PENDING:
            return self.task_base[t]
        phase = TaskPhase.RUNNING if st == _RUNNING else TaskPhase.RELEASING
        rec = self.task_record[t]
        if rec is None or rec.phase is not phase:
            rec = self.task_base[t].placed(
                phase, self.trace.nodes[int(self.task_node[t])].name, self.task_gpus[t]
            )
            self.task_record[t] = rec
        return rec

    def snapshot(self) -> Snapshot:
        """The cluster as the scheduler sees it now: live jobs and their tasks."""
        return self.state.snapshot()

    def cycle(self, time: float) -> None:
        self.n_cycles += 1
        self.dirty = False
        # Through the state, so that what one cycle computed and still holds (its snapshot,
        # its arrays, what the session lends the next one) serves the next.
        out = self.state.schedule(
            self.opts.config, placer=self.opts.placer, registry=self.opts.registry
        )
        self.apply(out, time)

    def apply(self, out: Decisions, time: float) -> None:
        """Apply one cycle's decisions (module docstring)."""
        self.now = time
        touched: set[int] = set()
        for b in out.binds:
            t = self.task_index.get(b.task)
            node = self.node_index.get(b.node)
            if t is None or node is None or self.task_state[t] != _PENDING:
                raise PlacementError(
                    f"bind to {b.node!r} of a task that is not waiting", kind="task", name=b.task
                )
            self._hold(t, node, tuple(b.gpu_indices))
            self.task_state[t] = _RUNNING
            self._sync_task(t)
            j = int(self.task_job[t])
            self.queue_wait[self.job_queue[j]] -= int(self.task_nominal[t])
            self.job_running_tasks[j] += 1
            touched.add(j)
        self.step_binds += len(out.binds)
        for j in sorted(touched):
            if not self.job_started[j] and self.job_running_tasks[j] >= self.job_min[j]:
                self._start(j, time)
        for e in out.evictions:
            t = self.task_index.get(e.task)
            if t is None or self.task_state[t] != _RUNNING:
                raise PlacementError(
                    "eviction of a task that is not running", kind="task", name=e.task
                )
            self.task_state[t] = _RELEASING
            self.task_record[t] = None
            self._sync_task(t)
            j = int(self.task_job[t])
            self.push(time + self.opts.eviction_grace, RELEASE, t, int(self.job_epoch[j]))
        self.step_evictions += len(out.evictions)
        self.step_pipelined += len(out.pipelined)
        # A waiting job's phase follows its status (Pending or Inqueue; the state holds the
        # job's record for its phase). A status seen before, the job's phase and waiting as
        # then, moves nothing: only the statuses not seen yet are looked at.
        seen = self.seen
        seen_get = seen.get
        job_of = self.job_of
        jobs = out.jobs
        unseen = compress(jobs.items(), map(is_not, jobs.values(), map(seen_get, jobs.keys())))
        new = sorted((job_of.get(name, -1), name, status) for name, status in unseen)
        for j, name, status in new:
            seen[name] = status
            if j < 0 or self.job_started[j] or j not in self.live:
                continue
            phase = status.phase
            if phase in ("Pending", "Inqueue") and phase != self.job_phase[j].value:
                self.job_phase[j] = JobPhase(phase)
                self._sync_job(j)
        if self.opts.drop_unplaced:
            for j in [j for j in sorted(self.live) if not self.job_started[j]]:
                if self.job_running_tasks[j] == 0:
                    self._finish(j, JobState.DROPPED, time)

    # -------------------------------------------------------------------------- recording

    def record(self, time: float) -> None:
        r = self.rows
        if self.dirty_nodes:
            # The fragment and idle GPU of the nodes marked since the last row are worked out
            # later, all in one pass (:meth:`_settle`), from what the nodes hold now.
            rows = np.array(sorted(self.dirty_nodes), dtype=np.intp)
            self.frag_todo.append((len(r["time"]), rows, self.dev_used[rows], self.used_cpu[rows]))
            self.dirty_nodes.clear()
        r["time"].append(time)
        r["gpu_alloc"].append(self.gpu_held)
        r["cpu_alloc"].append(self.cpu_held)
        r["arrived_gpu"].append(self.arrived_gpu)
        r["waiting"].append(self.n_waiting)
        r["running"].append(self.n_started)
        r["binds"].append(self.step_binds)
        r["evictions"].append(self.step_evictions)
        r["pipelined"].append(self.step_pipelined)
        r["queue_alloc"].append(self.queue_alloc.copy())
        r["queue_demand"].append(self.queue_alloc + self.queue_wait)
        self.step_binds = self.step_evictions = self.step_pipelined = 0

    # -------------------------------------------------------------------------- main loop

    def run(self) -> ReplayResult:
        self.record(0.0)
        until, period = self.opts.until, self.opts.period
        while self.heap:
            now = self.heap[0][0]
            if until is not None and now > until:
                break
            ticked = False
            while self.heap and self.heap[0][0] == now:
                _, kind, _, payload, epoch = heapq.heappop(self.heap)
                if kind == CYCLE:
                    ticked = True
                    self.n_events += 1
                else:
                    self.apply_event(now, kind, payload, epoch)
            if self.dirty and self.n_waiting > 0:
                if period == 0 or ticked or (now / period).is_integer():
                    self.cycle(now)
                elif self.next_tick <= now:
                    tick = math.ceil(now / period) * period
                    if tick <= now:  # rounding put the next multiple at now: it is a tick
                        self.cycle(now)
                    else:
                        self.next_tick = tick
                        self.push(tick, CYCLE, 0)
            self.record(now)
            if self.progress is not None:
                self.progress(
                    ReplayProgress(
                        time=now,
                        events=self.n_events,
                        cycles=self.n_cycles,
                        arrived=self.n_arrived,
                        n_jobs=len(self.trace.jobs),
                        running=self.n_started,
                        waiting=self.n_waiting,
                        finished=self.n_arrived - len(self.live),
                    )
                )
        return self.result()

    def _settle(self) -> None:
        """The fragment and idle rows :meth:`record` left to work out: every node state it
        noted goes through the fragment measure in one pass (the measure is exact per node,
        whatever nodes it is given with), then each row sums the nodes as they stood."""
        r, todo = self.rows, self.frag_todo
        n_rows, have = len(r["time"]), len(r["frag"])
        if have == n_rows:
            return
        sums: dict[int, tuple[float, int]] = {}  # per row that found nodes marked
        # (rows taken together so that a chunk's nodes-by-rows arrays stay about
        # ``settle_cells`` long)
        per_chunk = max(1, self.settle_cells // max(len(self.cap_cpu), 1))
        for first in range(0, len(todo), per_chunk):
            self._settle_rows(todo[first : first + per_chunk], sums)
        last = self.frag_last
        for row in range(have, n_rows):
            last = sums.get(row, last)
            r["frag"].append(last[0])
            r["idle"].append(last[1])
        self.frag_last = last
        todo.clear()

    def _settle_rows(
        self,
        chunk: list[tuple[int, npt.NDArray[np.intp], I64, I64]],
        sums: dict[int, tuple[float, int]],
    ) -> None:
        """The fragment and idle sums of the rows of ``chunk`` (in order, the first following
        the nodes as they stand), and the nodes as they stand after its last row."""
        rows = np.concatenate([rows for _, rows, _, _ in chunk])
        used = np.concatenate([used for _, _, used, _ in chunk])
        part = fragment_terms(self._gpu_free(rows, used), self.typical)
        free_cpu = self.cap_cpu[rows] - np.concatenate([cpu for _, _, _, cpu in chunk])
        frag = node_fragment_from_terms(free_cpu, self.model_idx[rows], part, self.typical)
        # Per row of the chunk and node, the state noted last at or before that row (-1: the
        # node's state before the chunk), then every node's figures at every row; each row
        # sums its nodes in node order, as one row of figures alone would be summed.
        at = np.full((len(chunk), len(self.cap_cpu)), -1, dtype=np.int64)
        step = np.repeat(np.arange(len(chunk)), [len(nodes) for _, nodes, _, _ in chunk])
        at[step, rows] = np.arange(len(rows))
        np.maximum.accumulate(at, axis=0, out=at)
        noted = at >= 0
        frag_now = np.where(noted, frag[at], self.node_frag[None, :]).sum(axis=1)
        idle_now = np.where(noted, part.idle[at], self.terms.idle[None, :]).sum(axis=1)
        for (row, _, _, _), f, i in zip(chunk, frag_now.tolist(), idle_now.tolist(), strict=True):
            sums[row] = (float(f), int(i))
        final = at[-1]
        moved = final >= 0
        last = final[moved]
        self.terms.fits_count[moved] = part.fits_count[last]
        self.terms.small_sum[moved] = part.small_sum[last]
        self.terms.idle[moved] = part.idle[last]
        self.node_frag[moved] = frag[last]

    def result(self) -> ReplayResult:
        self._settle()
        return collect(self)


_ROW_KEYS = (
    "time",
    "gpu_alloc",
    "cpu_alloc",
    "frag",
    "idle",
    "arrived_gpu",
    "waiting",
    "running",
    "binds",
    "evictions",
    "pipelined",
    "queue_alloc",
    "queue_demand",
)
