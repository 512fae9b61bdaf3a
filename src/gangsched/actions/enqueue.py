"""enqueue: move Pending jobs to Inqueue when the plugins admit them and their shape fits.

Theory of operation
-------------------
Queues are taken in queue order, one job per turn (best job first by job order); a queue goes
back into the order after each of its jobs. A job is admitted when

1. its queue is Open (a Closing or Closed queue admits nothing new; its running work stays);
2. it has no ``min_resources``, or the ``job_enqueueable`` vote admits it (quota, overcommit).
   When the vote refuses, ``preempt`` is configured and ``admitByPreemption`` is on (the
   default), the job is voted on again with what
   it may preempt counted as available (:func:`preemptable_resources`, passed to the plugins
   through :meth:`~gangsched.session.core.Session.preemptable_for`): the running tasks the preempt
   action would consider for it — other jobs of its queue with a strictly lower priority,
   ``preemptable`` set, narrowed by the ``preemptable`` plugins — each victim job counted
   whole when it may go whole, else its gang surplus. A job admitted that way says so
   (``Enqueued``: ``admitted: 8 GPUs preemptable from lower-priority jobs``) and is left to
   preempt; one refused again keeps the first refusal's reason;
3. with the shape check on (the default), its minimum gang can be *placed*: quota sums say
   nothing about shape — eight free GPUs spread one per node are eight free GPUs, yet no
   8-GPU pod fits. The check is a dry run inside a :class:`~gangsched.session.statement.Statement`:
   the job's pending tasks are placed in task order with the allocate action's node choice
   (``best_node``, on what is free now or once releasing tasks are gone) until the gang's
   minimum (and every role's minimum) is reached; the statement is then discarded, so nothing
   changes. When ``preempt`` or ``reclaim`` is configured the dry run first evicts, in the
   same statement, every running task those actions could consider (preemptable tasks of
   other jobs of the same queue for preempt, of other reclaimable queues for reclaim): a job
   that fits once victims are gone is admitted and left to those actions. Results are cached
   per gang shape within the call. The check is about shape only: pod affinity,
   anti-affinity and topology spread are left to allocate, since they read where other pods
   are and the same cycle moves them (a job affine to pods placed later in the cycle is
   admitted with them, not a cycle late).

On admission ``job_enqueued`` lets plugins reserve the job's minimum as "inqueue" (so two
jobs never count the same preemptable resources: the second finds the first's minimum
reserved). A job not
admitted stays Pending with reason ``NotEnqueued`` and a message saying why; for the shape
check it names the gang's shape and the largest free slot, for example ``minimum gang of
1 task × 8 nvidia.com/gpu does not fit on any node: largest free is 1 GPU per node``.

Arguments: ``shapeCheckEnable`` (default true), ``admitByPreemption`` (default true).

Differences from Volcano: Volcano has neither the shape check nor admission that counts
preemption (its quota vote compares ``minResources`` with what is free); both are off in a
configuration read from Volcano's YAML unless it names them.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from gangsched._types import BOOL, I64
from gangsched.actions._base import ConfiguredAction
from gangsched.actions.victims.rules import (
    evictable,
    may_go_whole,
    preempt_candidates,
    spare_tasks,
    whole_gangs,
)
from gangsched.config import arg_bool
from gangsched.model import JobPhase, QueueState
from gangsched.model.gpu_charge import device_take, queue_gpu_charge
from gangsched.session.core import PIPELINED_OR_READY, TaskState
from gangsched.session.fit import device_free
from gangsched.session.gate import Rule
from gangsched.session.rules.gang import role_minimums
from gangsched.session.statement import Statement
from gangsched.session.task_states import RUNNING_STATES, in_states
from gangsched.units import CPU, GPU, MEMORY, PODS, format_quantity

if TYPE_CHECKING:
    from gangsched.session.arrays import TaskTemplate
    from gangsched.session.core import Session
    from gangsched.session.evaluation import Evaluation

__all__ = ["EnqueueAction", "preemptable_resources"]

#: The argument switching preemption-aware admission (:func:`_admit_by_preemption`).
ADMIT_BY_PREEMPTION = "admitByPreemption"

#: The actions whose victims preemption-aware admission counts.
_PREEMPT_ACTIONS = ("preempt", "gangpreempt")


class EnqueueAction(ConfiguredAction):
    name = "enqueue"
    known_arguments = ("shapeCheckEnable", ADMIT_BY_PREEMPTION)

    def __init__(self, arguments: Mapping[str, object]) -> None:
        super().__init__(arguments)
        self.shape_check = arg_bool(
            arguments, "shapeCheckEnable", True, plugin=self.name, kind="action"
        )
        self.admit_by_preemption = arg_bool(
            arguments, ADMIT_BY_PREEMPTION, True, plugin=self.name, kind="action"
        )

    def execute(self, ssn: Session) -> None:
        waiting: dict[int, list[int]] = {}
        pending = _pending_jobs(ssn.job_phase)
        for j, q in zip(pending, ssn.job_queue[pending].tolist(), strict=True):
            waiting.setdefault(q, []).append(j)
        # A queue's jobs in job order. With the package's job orders, a queue with one job
        # needs none (its key is never compared); a plugin from elsewhere is asked anyway,
        # so that a wrong answer is reported whatever the queue holds.
        per_queue: dict[int, list[tuple[Any, int]]] = {}
        order: list[tuple[Any, int]] = []
        one_needs_no_key = ssn.points.built_in("job_order")
        for q, jobs in waiting.items():
            heap = per_queue[q] = (
                [((), jobs[0])]
                if one_needs_no_key and len(jobs) == 1
                else [(ssn.job_key(j), j) for j in jobs]
            )
            heapq.heapify(heap)
            order.append((ssn.queue_key(q), q))
        heapq.heapify(order)
        shapes = ShapeCheck(ssn) if self.shape_check else None
        while order:
            _, q = heapq.heappop(order)
            _, j = heapq.heappop(per_queue[q])
            self._consider(ssn, j, shapes, self.admit_by_preemption)
            if per_queue[q]:
                heapq.heappush(order, (ssn.queue_key(q), q))

    @staticmethod
    def _consider(ssn: Session, j: int, shapes: ShapeCheck | None, by_preemption: bool) -> None:
        rec = ssn.snapshot.jobs[j]
        queue = ssn.snapshot.queues[int(ssn.job_queue[j])]
        if queue.state is not QueueState.OPEN:
            ssn.note_job(
                j,
                "NotEnqueued",
                f"queue {queue.name!r} is {queue.state.value}: it admits no new jobs",
            )
            return
        freed: I64 | None = None
        if rec.min_resources is not None and not ssn.points.job_enqueueable(j):
            if j not in ssn.job_reasons:
                ssn.note_job(j, "NotEnqueued", "a plugin rejected the job at enqueue")
            freed = _admit_by_preemption(ssn, j) if by_preemption else None
            if freed is None:
                return
        if shapes is not None:
            why = shapes.check(j)
            if why is not None:
                ssn.note_job(j, "NotEnqueued", why)
                return
        ssn.points.job_enqueued(j)
        admission = Statement(ssn)
        admission.admit(j)
        admission.commit()
        ssn.job_reasons.pop(j, None)
        if freed is not None:
            ssn.note_job(
                j,
                "Enqueued",
                f"admitted: {_resources(ssn, freed, ssn.vector(rec.min_resources) > 0)} "
                "preemptable from lower-priority jobs",
            )


def _pending_jobs(phases: list[JobPhase]) -> list[int]:
    """The indices of the Pending entries of ``phases``, ascending (``list.count`` and
    ``list.index`` walk the list in C; a phase is equal to a member only when it is that
    member)."""
    out: list[int] = []
    at = -1
    for _ in range(phases.count(JobPhase.PENDING)):
        at = phases.index(JobPhase.PENDING, at + 1)
        out.append(at)
    return out


def _admit_by_preemption(ssn: Session, j: int) -> I64 | None:
    """What ``j`` may preempt when counting it as available turns the refused vote into an
    admission, else None (the first refusal's reason stays)."""
    if not any(ssn.config.has_action(a) for a in _PREEMPT_ACTIONS):
        return None
    freed, freed_quota = preemptable_resources(ssn, j)
    need = ssn.vector(ssn.snapshot.jobs[j].min_resources) > 0
    if not freed[need].any():
        return None
    refusal = ssn.job_reasons.get(j)
    with ssn.messages.freed_by_preemption.counting(j, freed, freed_quota):
        ok = bool(ssn.points.job_enqueueable(j))
    if ok:
        return freed
    if refusal is not None:
        ssn.note_job(j, *refusal)
    return None


def preemptable_resources(ssn: Session, j: int) -> tuple[I64, I64]:
    """What job ``j`` could free by preemption, in ``task_req``'s terms, and the part of it
    that lowers its queue's allocation net of elastic amounts (per victim job, what it holds
    up to its ``min_resources`` before less after; a job without ``min_resources`` is all
    elastic, as the queue votes count it).

    The victims are the preempt action's candidates for ``j`` (running or bound tasks of
    other jobs of its queue with a strictly lower job priority, ``preemptable`` on the task and
    the job) narrowed by the ``preemptable`` plugins; per victim job, every candidate when the
    job may go whole and a configured preempt action evicts whole gangs, else its gang surplus
    (``victims.rules.evictable``, ``may_go_whole``, ``whole_gangs`` and ``spare_tasks``, the owners
    of those rules). A queue charge,
    so a fractional GPU on a device that cannot be shared counts less than it frees on its
    node: an estimate that errs on the side of refusing."""
    n_res = len(ssn.arrays.spec)
    freed = np.zeros(n_res, dtype=np.int64)
    quota = np.zeros(n_res, dtype=np.int64)
    allowed, _ = preempt_candidates(ssn, j)
    if allowed.size == 0:
        return freed, quota
    victims = np.asarray(ssn.points.preemptable(j, allowed), dtype=np.int64)
    if victims.size == 0:
        return freed, quota
    whole = any(ssn.config.has_action(a) and whole_gangs(ssn, a) for a in _PREEMPT_ACTIONS)
    jobs = ssn.task_job[victims]
    order = np.argsort(jobs, kind="stable")
    victims = victims[order]
    starts = np.flatnonzero(np.r_[True, jobs[order][1:] != jobs[order][:-1]])
    for group in np.split(victims, starts[1:]):
        vj = int(ssn.task_job[group[0]])
        tasks = group.tolist()
        if not (whole and may_go_whole(ssn, vj, tasks)):
            tasks.sort(key=ssn.victim_key)
            tasks = spare_tasks(ssn, vj, tasks)
        if not tasks:
            continue
        taken = ssn.task_req[np.asarray(tasks, dtype=np.int64)].sum(axis=0)
        held = ssn.job_allocated[vj]
        floor = ssn.vector(ssn.snapshot.jobs[vj].min_resources)
        freed += taken
        quota += np.minimum(held, floor) - np.minimum(np.maximum(held - taken, 0), floor)
    return freed, quota


def _resources(ssn: Session, row: I64, dims: npt.NDArray[np.bool_]) -> str:
    """``row`` on ``dims`` in words: ``8 GPUs``, ``8 GPUs, 16 cpu``."""
    words: list[str] = []
    for c, res in enumerate(ssn.arrays.spec.names):
        if not dims[c] or res == PODS or row[c] <= 0:
            continue
        if res == GPU:
            n = row[c] / 1000
            words.append(f"{n:g} GPU{'' if n == 1 else 's'}")
        else:
            words.append(f"{_amount(float(row[c]), res)} {res}")
    return ", ".join(words) or "nothing"


#: What the shape check's trial leaves out (:meth:`ShapeCheck._dry_run`).
_RELAXED = frozenset({Rule.CAPABILITY, Rule.TOPOLOGY, Rule.POD_CONSTRAINT})


class ShapeCheck:
    """Dry-run placement of a job's minimum gang on the session's free capacity."""

    def __init__(self, ssn: Session) -> None:
        self.ssn = ssn
        self.preempt = any(ssn.config.has_action(a) for a in _PREEMPT_ACTIONS)
        self.reclaim = any(ssn.config.has_action(a) for a in ("reclaim", "gangreclaim"))
        #: Whether the package's task orders alone order tasks: then one pending task needs
        #: no order; a task order from elsewhere is asked anyway, so that a wrong answer is
        #: reported.
        self._one_needs_no_order = ssn.points.built_in("task_order")
        self._cache: dict[tuple[Any, ...], str | None] = {}
        #: Whether every predicate answers by a template's shape alone (then jobs of one
        #: shape share an answer; a predicate that reads the job or its queue, such as
        #: ``nodegroup`` or ``sla``, makes each job's answer its own).
        self._by_shape = ssn.points.predicates_by_shape
        #: :meth:`_largest_free` by evaluation (an identity) and position of the change log.
        self._largest: dict[tuple[Evaluation, int], str] = {}

    # ------------------------------------------------------------------ gang bookkeeping

    def _enough(self, j: int) -> bool:
        ssn = self.ssn
        have = ssn.count_states(j, PIPELINED_OR_READY) + ssn.pending_best_effort(j)
        return self._enough_with(j, have)

    def _enough_with(self, j: int, have: int) -> bool:
        """:meth:`_enough` with ``have`` (the job's ready and pending best-effort tasks)."""
        ssn = self.ssn
        rec = ssn.snapshot.jobs[j]
        if have < rec.min_available:
            return False
        return all(
            ssn.count_states(j, PIPELINED_OR_READY, role) >= need
            for role, need in role_minimums(rec).items()
        )

    def _victims(self, j: int) -> list[int]:
        if not (self.preempt or self.reclaim):
            return []
        ssn = self.ssn
        snap = ssn.snapshot
        q = int(ssn.job_queue[j])
        out: list[int] = []
        cands = np.flatnonzero(in_states(ssn.task_state, RUNNING_STATES)).astype(np.int64)
        cands = cands[ssn.task_job[cands] != j]
        for t in cands[evictable(ssn, cands)].tolist():
            vj = int(ssn.task_job[t])
            vq = int(ssn.job_queue[vj])
            if (self.preempt and vq == q) or (
                self.reclaim and vq != q and snap.queues[vq].reclaimable
            ):
                out.append(int(t))
        return out

    # ------------------------------------------------------------------ the check

    def check(self, j: int) -> str | None:
        """None when the job's minimum gang can be placed, else why not."""
        ssn = self.ssn
        ready = ssn.count_states(j, PIPELINED_OR_READY)
        have = ready + ssn.pending_best_effort(j)
        if self._enough_with(j, have):
            return None
        rec = ssn.snapshot.jobs[j]
        cols = ssn.columns
        own = ssn.job_tasks(j)
        pending = own[ssn.task_state[own] == TaskState.PENDING]
        if cols.job_best_effort[j]:
            pending = pending[~cols.best_effort[pending]]
        n = len(pending)
        if ready + n < rec.min_available:
            return None  # not a shape question: the job lacks tasks (allocate reports it)
        templates = ssn.templates
        of = ssn.template_of[pending]
        tasks: list[int] | None = None
        if self._one_needs_no_order and (n < 2 or bool((of == of[0]).all())):
            # One template (or no task): one run whatever the task order, so the order is
            # worked out only for a trial (the package's task orders have nothing to report).
            runs: tuple[tuple[Any, int], ...] = ((_shape(templates[int(of[0])]), n),) if n else ()
        else:
            tasks = pending.tolist()
            tasks.sort(key=ssn.task_key)
            runs = _runs([_shape(templates[i]) for i in ssn.template_of[tasks].tolist()])
        roles = rec.min_task_member
        key = (
            runs,
            rec.min_available,
            tuple(sorted(roles.items())) if roles else (),
            have,
            int(ssn.job_queue[j]) if (self.preempt or self.reclaim) else -1,
            -1 if self._by_shape else j,
        )
        cache = self._cache
        if key in cache:
            return cache[key]
        if tasks is None:
            tasks = pending.tolist()
            if n > 1:
                tasks.sort(key=ssn.task_key)
        why = cache[key] = self._dry_run(j, tasks, have)
        return why

    def _dry_run(self, j: int, tasks: list[int], have: int) -> str | None:
        """The trial of :meth:`check` (``have``: the job's ready and pending best-effort
        tasks, as :meth:`check` counted them)."""
        ssn = self.ssn
        # A shape question: does the minimum gang fit the cluster at all? Queue limits are
        # the queue plugins' votes, topology and pod constraints the allocate action's (pod
        # constraints read where other pods are, which the same cycle changes), so leave
        # them out.
        victims = self._victims(j)
        if not victims and self._one_is_enough(j, have) and self._first_fits(tasks[0]):
            return None  # (what the trial below would find, without placing anything)
        stmt = Statement(ssn, relax=_RELAXED)
        for t in victims:
            stmt.evict(t, "enqueue shape check")
        need_all = int(ssn.job_min[j]) >= len(ssn.job_tasks(j))
        need = max(int(ssn.job_min[j]) - ssn.count_states(j, PIPELINED_OR_READY), 1)
        failed: set[int] = set()
        placed = 0
        why: str | None = None
        for t in tasks:
            if self._enough(j):
                break
            tmpl = ssn.templates[int(ssn.template_of[t])]
            if tmpl.index in failed:
                continue
            node, pipelined = self._best_node(tmpl)  # shape alone: no pod rules
            if node < 0:
                failed.add(tmpl.index)
                if why is None:
                    why = self._explain(tasks[:need], tmpl, placed)
                if need_all:
                    break
                continue
            gpus = ssn.choose_gpus(t, node, future=pipelined)
            (stmt.pipeline if pipelined else stmt.allocate)(t, node, gpus)
            placed += 1
        ok = self._enough(j)
        stmt.discard()
        if ok:
            return None
        return why or self._explain(tasks[:need], None, placed)

    def _best_node(self, tmpl: TaskTemplate) -> tuple[int, bool]:
        """The evaluator's best node for ``tmpl``; when no node fits it at all, found from
        the predicates and the fit alone, so the rows refreshed are scored by whoever asks
        for a score next (a gang refused cycle after cycle is never scored for it)."""
        evaluator = self.ssn.evaluator
        ev = evaluator.feasible(tmpl)
        if not (ev.ok & (ev.fit_idle | ev.fit_future)).any():
            return -1, False  # (best_node: every score where it fits is -inf)
        return evaluator.best_node(tmpl)

    def _one_is_enough(self, j: int, have: int) -> bool:
        """Whether one more task placed makes job ``j`` (``have``: its ready and pending
        best-effort tasks) enough (:meth:`_enough`), when its record sets no role minimums
        that count."""
        rec = self.ssn.snapshot.jobs[j]
        return not role_minimums(rec) and have + 1 >= rec.min_available

    def _first_fits(self, t: int) -> bool:
        """Whether the trial of :meth:`_dry_run` would place task ``t`` (its first): the best
        node of its template, on the devices it would take there, passes the gate under the
        trial's relaxed rules. Placing it is not needed to answer (a trial placement is
        undone, and a plugin drawing from the change log would see it)."""
        ssn = self.ssn
        node, pipelined = ssn.evaluator.best_node(ssn.templates[int(ssn.template_of[t])])
        if node < 0:
            return False
        gpus = ssn.choose_gpus(t, node, future=pipelined)
        return ssn.gate.refuse(t, node, gpus, pipelined=pipelined, relax=_RELAXED) is None

    # ------------------------------------------------------------------ words

    def _largest_free(self, tmpl: TaskTemplate) -> str:
        """:func:`_largest_free` of ``tmpl``, worked out once per evaluation and position of
        the change log: templates that share an evaluation (one shape, under the
        ``shape_only`` contract) read the same masks, devices and free columns from it."""
        ssn = self.ssn
        ev = ssn.feasible(tmpl)  # (no score read)
        key = (ev, ssn.changes.end)
        words = self._largest.get(key)
        if words is None:
            words = self._largest[key] = _largest_free(ssn, tmpl, ev.ok)
        return words

    def _explain(self, gang: list[int], tmpl: TaskTemplate | None, placed: int) -> str:
        """Why the gang (its first ``len(gang)`` pending tasks) does not fit, once ``placed``
        of them are in and ``tmpl`` found no node (None: the role minimums failed)."""
        ssn = self.ssn
        groups: list[tuple[int, int]] = []  # (template, count) in task order
        for t in gang:
            ti = int(ssn.template_of[t])
            if groups and groups[-1][0] == ti:
                groups[-1] = (ti, groups[-1][1] + 1)
            else:
                groups.append((ti, 1))
        n = len(gang)
        if len(groups) == 1:
            one = _describe(ssn, ssn.templates[groups[0][0]])
            shape = f"{n} task{'s' if n != 1 else ''} × {one}"
        else:
            parts = " + ".join(f"{c} × {_describe(ssn, ssn.templates[ti])}" for ti, c in groups)
            shape = f"{n} tasks ({parts})"
        evicting = self.preempt or self.reclaim
        where = " counting what preempt/reclaim could free" if evicting else ""
        if tmpl is None:
            return f"minimum gang of {shape} does not fit{where}"
        largest = self._largest_free(tmpl)
        if placed == 0:
            return f"minimum gang of {shape} does not fit on any node{where}: {largest}"
        return (
            f"minimum gang of {shape} does not fit{where}: only {placed} of {n} tasks "
            f"can be placed at once; then {largest}"
        )


def _shape(tmpl: TaskTemplate) -> tuple[str, tuple[object, ...]]:
    """What the shape check's answer reads of a template: its role (role minimums count
    by role) and its shape (what feasibility and fit read, node affinity included)."""
    return tmpl.role, tmpl.shape


def _runs(shapes: list[Any]) -> tuple[tuple[Any, int], ...]:
    """``shapes`` as runs of equal neighbours: ``(shape, how many in a row)`` in order."""
    runs: list[tuple[Any, int]] = []
    for shape in shapes:
        if runs and runs[-1][0] == shape:
            runs[-1] = (shape, runs[-1][1] + 1)
        else:
            runs.append((shape, 1))
    return tuple(runs)


def _amount(amount: float, res: str) -> str:
    if res == MEMORY:
        gib = amount / 2**30
        return f"{gib:g}Gi" if gib >= 1 else f"{amount / 2**20:g}Mi"
    if res in (CPU, GPU):
        return f"{amount / 1000:g}"
    return str(format_quantity(int(amount), res))


def _describe(ssn: Session, tmpl: TaskTemplate) -> str:
    """A template's request in words: ``8 nvidia.com/gpu``, ``(2 nvidia.com/gpu, 8 cpu)``."""
    words: list[str] = []
    spec = ssn.arrays.spec
    if tmpl.gpu_count:
        words.append(f"{queue_gpu_charge(tmpl.gpu_count, tmpl.gpu_milli) / 1000:g} {GPU}")
    for c, res in enumerate(spec.names):
        if res in (GPU, PODS) or tmpl.request[c] <= 0:
            continue
        words.append(f"{_amount(float(tmpl.request[c]), res)} {res}")
    if not words:
        return "no resources"
    return words[0] if len(words) == 1 else f"({', '.join(words)})"


def _largest_free(ssn: Session, tmpl: TaskTemplate, ok: BOOL) -> str:
    """The largest free slot, per node (those of ``ok``: the predicates pass), on the
    resource that keeps ``tmpl`` out."""
    a = ssn.arrays
    if not ok.any():
        return "no node passes the predicates (" + ssn.evaluator.fit_error(tmpl) + ")"
    rows = np.flatnonzero(ok)
    if tmpl.gpu_count:
        cap = a.gpu_capacity[rows]
        m_eff = device_take(tmpl.gpu_milli, cap, a.gpu_sharing[rows])
        idx, seg = a.devices_of(rows)
        free = device_free(ssn, future=True, devices=idx)
        devices = a.count_per_row(seg, free >= np.maximum(m_eff, 1)[seg], rows.size)
        best = int(devices.max(initial=0))
        if best < tmpl.gpu_count:
            unit = "GPU" if best == 1 else "GPUs"
            return f"largest free is {best} {unit} per node"
    future = ssn.future_idle()[rows]
    for c, res in enumerate(a.spec.names):
        if res == GPU or tmpl.request[c] <= 0:
            continue
        top = int(future[:, c].max(initial=0))
        if top < tmpl.request[c]:
            if res == PODS:
                return "every node is at its pod limit"
            return f"largest free {res} is {_amount(max(top, 0), res)} per node"
    return "no node has all of it free at once"
