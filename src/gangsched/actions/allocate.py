"""allocate: place gangs, all or nothing (Volcano's allocate action).

Theory of operation
-------------------
Queues are popped in queue order, re-evaluated after every job (shares move as jobs get
resources); an overused queue is dropped for the rest of the cycle. From the queue, the best job
by job order is tried inside one :class:`~gangsched.session.statement.Statement`: its pending
tasks, in
task order, each go to the best node where the task fits now (allocate) or, failing that, where
it fits once releasing resources are gone (pipeline). As soon as the job is ready it is pushed
back so its remaining elastic tasks interleave with other jobs. The statement is committed if
the job is ready, kept as a reservation if it is only pipelined, and discarded otherwise — the
gang's tasks then get the reason.

A task template that found no node is not retried for the job (Volcano's predicate error cache);
when every task is needed for the minimum, the first such failure ends the attempt.

Gang-aware retry (argument ``retry``: ``on-change``, the default, or ``always``): a job
whose last attempt failed and that nothing since could help is carried — not tried, its last
words given back marked ``carried:`` — see :mod:`gangsched.actions._retry` and
``docs/scheduling.md`` ("Retrying waiting jobs"); binds, evictions, reservations and phases are
those of trying every job.

Jobs still Pending are skipped when ``enqueue`` is configured; otherwise they are treated as
admitted. Best-effort tasks are left to ``backfill``.

Placers
-------
A job with a ``network_topology`` is placed as one gang by a placer (all of its minimum inside
one domain of an allowed tier, greedy by default). The action argument ``placer`` selects it:
``greedy`` (default; only topology jobs go through it), ``cpsat`` (every gang goes through the
CP-SAT placer) or ``cpsat-joint`` (before the queue loop, the pending gangs are placed together
by one model that maximises the priority-weighted number of gangs placed; each job then applies
its share in the usual order). ``placer.deterministic-time`` (1.0: the solver's deterministic
work budget per placement), ``placer.seed`` (0, below 2**31) and ``placer.workers`` (1, at
most 256) tune the solver; with them the decisions are deterministic. ``placer.time-limit``
(seconds, none by default) adds a wall-clock limit and ``placer.workers`` above 1 parallel
search: both make the decisions depend on the machine's speed and are not deterministic,
and the cycle's ``Decisions.nondeterministic`` names them. The parameters are checked when
the action is built (:class:`~gangsched.errors.ConfigError` naming the argument).
``schedule(..., placer=...)`` overrides all of it with a placer object of your own. The
queue's ``allocatable`` check still applies to every task of a placed gang.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import pairwise
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from gangsched._types import I64
from gangsched.actions._base import PREDICATE_ERROR_CACHE, ConfiguredAction
from gangsched.actions._gang_placement import place_job, place_jobs_jointly, placement_ground
from gangsched.actions._retry import (
    CARRIED,
    MEMORY_KEY,
    Failure,
    context_of,
    gained,
    renewed,
    room_short,
    runs_nothing,
    same_but_nodes,
    same_context,
    skipping_allowed,
)
from gangsched.actions.victims.loop import realise_reservations
from gangsched.config import arg_float, arg_int, arg_str
from gangsched.errors import ConfigError
from gangsched.framework.extension_points import argument_names
from gangsched.model import Job, JobPhase, TopologyMode
from gangsched.placement import GreedyPlacer, Placer
from gangsched.placement._common import check_solver_parameters
from gangsched.session.core import PIPELINED_OR_READY, TaskState
from gangsched.session.rules.gang import pending_tasks
from gangsched.session.statement import Statement
from gangsched.units import PODS, show_amount

if TYPE_CHECKING:
    from gangsched.session.arrays import TaskTemplate
    from gangsched.session.core import Session


def queue_refusal(ssn: Session, queue: int, tmpl: TaskTemplate) -> str:
    """Why the ``allocatable`` point refuses ``tmpl`` in ``queue``, in words.

    The point's combiner stops at the first plugin (in tier order) that answers false; that
    plugin decides, so it is the one asked to explain, through its ``allocatable_reason``
    (None when it does not refuse, else the limit with the numbers). A plugin without one is
    named instead."""
    name = ssn.snapshot.queues[queue].name
    why = ssn.points.allocatable_refusal(queue, tmpl)
    return f"queue {name!r} cannot take this task now" + (f": {why}" if why else "")


def overused_reason(ssn: Session, queue: int) -> str:
    """Why an overused queue gets nothing more: what it holds against what it deserves, on
    every resource it deserves (when a queue plugin computed the deserved amounts)."""
    name = ssn.snapshot.queues[queue].name
    if ssn.queue_deserved is None:
        return f"queue {name!r} is overused"
    names = ssn.arrays.spec.names
    held, deserved = ssn.queue_allocated[queue], ssn.queue_deserved[queue]
    parts = [
        f"{names[c]} {show_amount(held[c], names[c])} allocated >= "
        f"deserved {show_amount(deserved[c], names[c])}"
        for c in np.flatnonzero(deserved > 0).tolist()
        if names[c] != PODS
    ]
    return f"queue {name!r} is overused" + (f": {'; '.join(parts)}" if parts else "")


#: A queue's refusal kept before anyone asked why (see :attr:`_Run.verdicts`).
_UNWORDED = "\0unworded"

#: A job held for its turn (:attr:`_Run.deferred`): its last failure, its one template, its
#: pending tasks, whether the failure's context is the run's, its tasks (snapshot order).
_Held = tuple[Failure, int, int, bool, list[int]]

#: The package's task orders that read a task's record alone (see ``AllocateAction.execute``;
#: a plugin from elsewhere of the same name, a subclass say, may read more).
_RECORD_TASK_ORDERS = frozenset({"priority"})


def _waiting_groups(
    ssn: Session, waiting: I64
) -> tuple[list[int], list[list[int]], list[int], list[bool]]:
    """The jobs with waiting tasks (``waiting``: ascending task indices), in index order; per
    job its waiting tasks (ascending), the template of the first and whether all of them
    share it."""
    if not waiting.size:
        return [], [], [], []
    job = ssn.task_job[waiting]
    if job.size > 1 and bool((job[1:] < job[:-1]).any()):
        order = np.argsort(job, kind="stable")
        waiting, job = waiting[order], job[order]
    starts = np.flatnonzero(np.concatenate(([True], job[1:] != job[:-1])))
    tmpl = ssn.template_of[waiting]
    first = tmpl[starts]
    same = np.minimum.reduceat(tmpl, starts) == np.maximum.reduceat(tmpl, starts)
    rows = waiting.tolist()
    bounds = [*starts.tolist(), len(rows)]
    spans = [rows[a:b] for a, b in pairwise(bounds)]
    return job[starts].tolist(), spans, first.tolist(), same.tolist()


@dataclass(slots=True, eq=False)
class _Run:
    """What one run of the action keeps while it runs (never on the action object, which the
    cycle's repeats of the action share)."""

    placer: Placer
    #: Whether every gang goes through the placer, not only topology-aware jobs.
    place_all: bool
    #: Whether the ``allocatable`` point is served by built-in plugins only (their verdicts
    #: depend on a template's request and the queues' holdings alone).
    shared: bool
    #: ``(queue, request)`` -> ``(change-log cursor, why it refuses or None)``; a refusal
    #: found without its words (:meth:`AllocateAction._takes`) is kept as :data:`_UNWORDED`
    #: until some task needs them.
    verdicts: dict[tuple[int, bytes], tuple[int, str | None]] = field(default_factory=dict)
    #: Per job, the joint placer's plan.
    joint: dict[int, list[tuple[int, int, tuple[int, ...], bool]]] = field(default_factory=dict)
    #: Whether the queue refused a task during the current attempt.
    refused: bool = False
    #: Gang-aware retry: the failed attempts remembered from before (job name -> failure),
    #: those kept for the next cycle, what they share, and "did a node gain room" per
    #: remembered ground and request (see :mod:`gangsched.actions._retry`).
    prior: dict[str, Failure] = field(default_factory=dict)
    memory: dict[str, Failure] = field(default_factory=dict)
    context: tuple[object, ...] = ()
    gains: dict[tuple[int, int, int], npt.NDArray[np.intp]] = field(default_factory=dict)
    #: Per template shape, at most how many of its tasks each node could take (on the room
    #: of when it was first asked, at least the room of later in the run;
    #: :func:`~gangsched.actions._retry.copies_bound`).
    bounds: dict[object, I64] = field(default_factory=dict)
    #: Per job whose last failure still holds for its records and whose queue takes its
    #: template at the run's start: that failure, the job's one template, its pending tasks
    #: and whether the failure's context is this run's (the job is carried at its turn when
    #: the attempt would fail then: :meth:`AllocateAction._fails_now`).
    deferred: dict[int, _Held] = field(default_factory=dict)
    #: What the checks of the run share: at its start (:meth:`AllocateAction._carry`;
    #: nothing changes before the first attempt), whether a remembered context is this run's
    #: (by the context's identity) and whether a queue takes a template (by queue and
    #: template shape); at the jobs' turns (:meth:`AllocateAction._fails_now`; room only
    #: shrinks, so an answer found earlier still proves), whether no place has room enough
    #: (by what :func:`room_short` reads of a job), and per job the tasks it still needs for
    #: its minimum (as at the start: a job's tasks move only in its own attempt). Templates
    #: of one shape
    #: (:attr:`~gangsched.session.arrays.TaskTemplate.shape`: what feasibility, fit and the
    #: queue verdicts read) share their answers: ``shapes`` numbers the shapes.
    contexts: dict[int, tuple[bool, bool]] = field(default_factory=dict)
    shapes: dict[object, int] = field(default_factory=dict)
    #: Per template (by index), its shape's number in ``shapes`` (-1: not numbered yet).
    shape_of: list[int] = field(default_factory=list)
    #: Per job, its queue (the session's, as plain ints, for the checks of the run's start).
    queue_of: list[int] = field(default_factory=list)
    #: Per job, how many tasks it has (plain ints, for the checks of the run's start).
    task_count: list[int] = field(default_factory=list)
    takes: dict[tuple[int, int], bool] = field(default_factory=dict)
    short: dict[tuple[object, ...], bool] = field(default_factory=dict)
    missing: list[int] | None = None

    def as_gang(self, ssn: Session, j: int) -> bool:
        """Whether job ``j`` is placed whole by the placer rather than task by task."""
        return ssn.snapshot.jobs[j].network_topology is not None or self.place_all


class AllocateAction(ConfiguredAction):
    name = "allocate"
    known_arguments = (
        "placer",
        *argument_names("placer", "deterministic-time", "seed", "time-limit", "workers"),
        PREDICATE_ERROR_CACHE,
        "retry",
    )

    PLACERS = ("greedy", "cpsat", "cpsat-joint")
    #: ``retry``: ``on-change`` (default) tries a waiting job again only when something it
    #: could use changed since its last failed attempt; ``always`` tries every waiting job.
    RETRIES = ("on-change", "always")

    def __init__(self, arguments: Mapping[str, object]) -> None:
        super().__init__(arguments)
        self.placer_name = arg_str(arguments, "placer", "greedy", plugin=self.name, kind="action")
        if self.placer_name not in self.PLACERS:
            raise ConfigError(
                f"unknown placer {self.placer_name!r} (known: {', '.join(self.PLACERS)})",
                kind="action",
                name=self.name,
                field="placer",
            )
        self.retry = arg_str(arguments, "retry", "on-change", plugin=self.name, kind="action")
        if self.retry not in self.RETRIES:
            raise ConfigError(
                f"unknown retry {self.retry!r} (known: {', '.join(self.RETRIES)})",
                kind="action",
                name=self.name,
                field="retry",
            )
        self.deterministic_time = arg_float(
            arguments, "placer.deterministic-time", 1.0, plugin=self.name, kind="action"
        )
        self.time_limit: float | None = (
            arg_float(arguments, "placer.time-limit", 0.0, plugin=self.name, kind="action")
            if "placer.time-limit" in arguments
            else None
        )
        self.seed = arg_int(arguments, "placer.seed", 0, plugin=self.name, kind="action")
        self.workers = arg_int(arguments, "placer.workers", 1, plugin=self.name, kind="action")
        check_solver_parameters(
            time_limit_s=self.time_limit,
            seed=self.seed,
            workers=self.workers,
            max_deterministic_time=self.deterministic_time,
            kind="action",
            name=self.name,
            fields={
                "time_limit_s": "arguments.placer.time-limit",
                "seed": "arguments.placer.seed",
                "workers": "arguments.placer.workers",
                "max_deterministic_time": "arguments.placer.deterministic-time",
            },
        )

    def _placer(self, ssn: Session) -> tuple[Placer, bool]:
        """The placer, and whether every gang (not only topology jobs) goes through it."""
        given = ssn.placer
        if given is not None:
            return given, True
        if self.placer_name == "greedy":
            return GreedyPlacer(), False
        from gangsched.placement import CpSatPlacer, JointCpSatPlacer

        cls = JointCpSatPlacer if self.placer_name == "cpsat-joint" else CpSatPlacer
        return cls(
            time_limit_s=self.time_limit,
            seed=self.seed,
            workers=self.workers,
            max_deterministic_time=self.deterministic_time,
        ), True

    def execute(self, ssn: Session) -> None:
        enqueue_on = ssn.config.has_action("enqueue")
        per_queue: dict[int, list[tuple[Any, int]]] = {}
        worklist: dict[int, list[int] | deque[int]] = {}
        # Without enqueue every Pending job is admitted; one statement holds the admissions
        # (they place nothing, so committing them together is committing each).
        admission = Statement(ssn)
        pending, best_effort = pending_tasks(ssn)
        waiting = pending[~best_effort]  # backfill places the best-effort ones
        # With enqueue on, a job without a waiting task has nothing to do here; without it,
        # every Pending job is admitted.
        # Each job's waiting tasks (task order): the jobs in index order, each with the run
        # of its tasks in ``spans`` and whether they share one template, from array passes.
        jobs_w, spans, first_of, uniform = _waiting_groups(ssn, waiting)
        placer, place_all = self._placer(ssn)
        run = _Run(placer, place_all, shared=ssn.points.built_in("allocatable"))
        joint = bool(getattr(placer, "joint", False))
        # Gang-aware retry: a job whose last attempt failed and that nothing since could help
        # is carried (not tried); ``single`` holds, per job that may be remembered, its one
        # template, and from its first attempt on what its tasks were at the start (nothing
        # moves a job's tasks before its own attempt, so they are read then: a job carried at
        # its turn is never read).
        skip = self.retry == "on-change" and skipping_allowed(ssn, placer, joint)
        single: dict[int, int | tuple[int, bytes] | None] = {}
        # A job held for its turn is sorted (its tasks in task order) at its attempt, when
        # the task order reads the task records alone (the same order then as at the start):
        # most held jobs are carried at their turn and never sorted.
        unsorted: set[int] = set()
        lazy_sort = (
            skip
            and ssn.points.built_in("task_order")
            and ssn.points.served_only_by(("task_order",), _RECORD_TASK_ORDERS)
        )
        if skip:
            known = ssn.records.get(MEMORY_KEY) or ssn.prior_records.get(MEMORY_KEY)
            run.prior = known if isinstance(known, dict) else {}
            run.context = context_of(ssn)
            # An earlier context the same as this run's stands for it (the failures kept
            # this run then share one context object with those carried: the checks of the
            # next run's start compare each distinct object once).
            kept = next(iter(run.prior.values()), None)
            if kept is not None and same_context(kept.context, run.context):
                run.context = kept.context
            run.shape_of = [-1] * len(ssn.templates)
            run.queue_of = ssn.job_queue.tolist()
            run.task_count = np.bincount(ssn.task_job, minlength=len(ssn.snapshot.jobs)).tolist()
        phases = ssn.job_phase
        groups: Iterable[tuple[int, list[int] | None, int, bool]] = zip(
            jobs_w, spans, first_of, uniform, strict=True
        )
        if not enqueue_on:
            # Every Pending job is admitted, those without a waiting task too.
            have = {j: (j, span, ti, same) for j, span, ti, same in groups}
            groups = (have.get(j, (j, None, -1, False)) for j in range(len(ssn.snapshot.jobs)))
        for j, tasks, ti, same in groups:
            if phases[j] is JobPhase.PENDING:
                if enqueue_on:
                    continue
                admission.admit(j)
            if not tasks:
                continue
            if skip and ti >= 0 and same:
                if self._carry(ssn, run, j, tasks, ti):
                    continue
                single[j] = ti
            # A job held for its turn is valid: its records and task states are those of the
            # attempt it failed, which the package's validity check (the only one allowed
            # when jobs are carried) passed, reading nothing else.
            if j in run.deferred:
                if len(tasks) > 1:
                    if lazy_sort:
                        unsorted.add(j)
                    else:
                        tasks.sort(key=ssn.task_key)
            else:
                invalid = ssn.points.job_valid(j)
                if invalid is not None:
                    ssn.note_job(j, "NotEnoughTasks", invalid)
                    continue
                if len(tasks) > 1:
                    tasks.sort(key=ssn.task_key)
            worklist[j] = tasks
            per_queue.setdefault(int(ssn.job_queue[j]), []).append((ssn.job_key(j), j))
        admission.commit()
        for heap in per_queue.values():
            heapq.heapify(heap)
        ssn.placers.append(placer)  # see Decisions.nondeterministic
        if joint:
            run.joint = place_jobs_jointly(
                ssn,
                [(j, list(worklist[j])) for j in sorted(worklist) if run.as_gang(ssn, j)],
                placer,
            )
        failed: dict[int, set[int]] = {}
        # A queue's order key moves only when that queue allocates (proportion, capacity,
        # priority), so a heap re-checked on pop is exact; a plugin whose keys move for every
        # queue at once (HDRF) declares ``queue_order_global`` and the queues are re-scanned.
        scan = ssn.points.queue_order_global
        qheap = [(ssn.queue_key(q), q) for q in per_queue]
        heapq.heapify(qheap)
        # Once one queue is left no other comes back (a job goes back to its own queue), so
        # its order key decides nothing: the package's queue orders are not asked for it.
        alone = ssn.points.built_in("queue_order")
        same_turn = alone and ssn.points.built_in("overused")
        while per_queue:
            if alone and len(per_queue) == 1:
                q = next(iter(per_queue))
            elif scan:
                q = min(per_queue, key=ssn.queue_key)
            else:
                key, q = heapq.heappop(qheap)
                if q not in per_queue:
                    continue
                fresh = ssn.queue_key(q)
                if fresh != key:
                    heapq.heappush(qheap, (fresh, q))
                    continue
            if ssn.points.overused(q):
                why = overused_reason(ssn, q)
                for _, j in per_queue.pop(q):
                    ssn.note_job(j, "QueueOverused", why)
                continue
            heap = per_queue[q]
            # A job carried at its turn changes nothing the queue order, the queue's overuse,
            # a verdict or the room reads: the queue would come first again, so the jobs
            # after it are taken in this turn, until one is to be tried or none is left. (With
            # a queue order or overuse from elsewhere, which may read what carrying changes,
            # the job to be tried waits for its queue to be chosen again.)
            carried = False
            while True:
                key, j = heapq.heappop(heap)
                held = run.deferred.pop(j, None)
                if held is None or not self._fails_now(ssn, run, j, q, held):
                    if carried and not same_turn:
                        heapq.heappush(heap, (key, j))
                        if held is not None:
                            run.deferred[j] = held
                        j = -1
                    break
                # Its attempt would fail at its turn (its queue refuses its one template, or
                # the room of now cannot hold it): it is carried (see ``_retry``).
                self._give_back(ssn, run, j, held[4], held[0])
                carried = True
                if not heap:
                    j = -1
                    break
            if not heap:
                del per_queue[q]
            work: deque[int] | None = None
            if j >= 0:
                given = worklist[j]
                if isinstance(given, deque):
                    work = given
                else:
                    if j in unsorted:
                        given.sort(key=ssn.task_key)
                    work = worklist[j] = deque(given)
            if work is not None and self._attempt(
                ssn, run, j, q, work, failed, self._start_of(ssn, single, j)
            ):
                heapq.heappush(per_queue.setdefault(q, []), (ssn.job_key(j), j))
            if not scan and q in per_queue and not (alone and len(per_queue) == 1):
                heapq.heappush(qheap, (ssn.queue_key(q), q))
        if skip:
            ssn.records[MEMORY_KEY] = run.memory
        # Reservations carried in the snapshot (Pipelined tasks) bind once their resources are
        # idle, together with what this pass placed for the same job (nobody else could take
        # those resources meanwhile: fitting now requires fitting once releases finish).
        realise_reservations(ssn)

    def _attempt(
        self,
        ssn: Session,
        run: _Run,
        j: int,
        q: int,
        tasks: deque[int],
        failed: dict[int, set[int]],
        before: tuple[int, bytes] | None,
    ) -> bool:
        """Try job ``j`` in one statement: committed when ready, kept when pipelined, else
        discarded, explained and (``before``: it may be) remembered. Whether it goes back to
        its queue (ready with elastic tasks left)."""
        stmt = Statement(ssn)
        cursor = ssn.changes.end
        run.refused = False
        again = self._allocate_job(ssn, run, stmt, j, q, tasks, failed.setdefault(j, set()))
        if ssn.points.job_ready(j):
            stmt.commit()
        elif ssn.points.job_pipelined(j):
            stmt.keep()
        else:
            tried = [op.task for op in stmt.ops]
            stmt.discard()
            self._explain_discard(ssn, j, tried)
            if before is not None:
                # The discard gave back exactly what the attempt took: the room of now is the
                # room the attempt saw (read only for an attempt that failed).
                self._remember(ssn, run, j, before, cursor, placement_ground(ssn))
        return again

    @staticmethod
    def _start_of(
        ssn: Session, single: dict[int, int | tuple[int, bytes] | None], j: int
    ) -> tuple[int, bytes] | None:
        """Job ``j``'s one template and its tasks' states at the run's start when it may be
        remembered (it runs nothing), else None; read at its first attempt."""
        known = single.get(j)
        if isinstance(known, int):
            own = ssn.job_tasks(j)
            known = single[j] = (
                (known, ssn.task_state[own].tobytes()) if runs_nothing(ssn, j) else None
            )
        return known

    def _carry(self, ssn: Session, run: _Run, j: int, waiting: list[int], ti: int) -> bool:
        """Carry job ``j`` when its last attempt failed, its gang and the records it read
        are the same, and its queue refuses its template now
        (:mod:`gangsched.actions._retry`): its last words come back, marked carried, and it
        is not tried. A job whose memory holds but whose queue takes the template is held
        for its turn (:attr:`_Run.deferred`, :meth:`_fails_now`). ``waiting``: its pending
        tasks, not best-effort (ascending); ``ti``: their one template.

        Only the run's start asks, before any attempt (the admissions it makes place
        nothing): what the checks read of the session is the same for every job then, so
        each answer is worked out once per context, queue and template shape, and shared."""
        snap = ssn.snapshot
        rec = snap.jobs[j]
        e = run.prior.get(rec.name)
        if e is None or e.job is not rec:
            return False
        count = len(e.tasks)
        if run.task_count[j] != count:
            return False
        # Under another configuration, queue or hypernode records, nothing is carried; under
        # other node records, only what the nodes prove (the queue refuses, or no place has
        # room enough) or what the log names as changed since (room and records).
        if e.context is run.context:
            same = True
        else:
            known = run.contexts.get(id(e.context))
            if known is None:
                same = same_context(e.context, run.context)
                known = run.contexts[id(e.context)] = (
                    same,
                    same or same_but_nodes(e.context, run.context),
                )
            same, usable = known
            if not usable:
                return False
        tasks = snap.tasks
        if count == 1:  # (most jobs: one task, the waiting one, read as plain ints)
            rows = waiting
            t = rows[0]
            if tasks[t] is not e.tasks[0] or ssn.task_state.item(t) != e.states[0]:
                return False
        else:
            own = ssn.job_tasks(j)
            rows = own.tolist()
            for t, was in zip(rows, e.tasks, strict=True):
                if tasks[t] is not was:
                    return False
            if ssn.task_state[own].tobytes() != e.states:
                return False
        q = run.queue_of[j]
        shape = run.shape_of[ti]
        if shape < 0:
            shape = run.shape_of[ti] = run.shapes.setdefault(
                ssn.templates[ti].shape, len(run.shapes)
            )
        # The queue refuses the template: the attempt would fail again.
        takes = run.takes.get((q, shape))
        if takes is None:
            takes = run.takes[q, shape] = self._takes(ssn, run, q, ssn.templates[ti])
        if not takes:
            self._give_back(ssn, run, j, rows, e)
            return True
        # The room proofs wait for the job's turn (most jobs held are refused by their queue
        # then, having cost no proof), where the room is at most the run start's.
        run.deferred[j] = (e, ti, len(waiting), same, rows)
        return False

    def _fails_now(self, ssn: Session, run: _Run, j: int, q: int, held: _Held) -> bool:
        """Whether the attempt of job ``j`` (held for its turn: ``held``) would fail now, at
        its turn: its queue ``q`` refuses its one template, no place has room enough for the
        gang, or no node that may help changed since its failure (or, under a hard topology,
        no place holding one has room enough). Room only shrinks and holdings only grow
        during a run, so each answer worked out earlier in the run (by queue and shape, by
        shape and size, by failure ground) still proves what it proved."""
        e, ti, waiting, same, _ = held
        tmpl = ssn.templates[ti]
        if not self._takes(ssn, run, q, tmpl):
            return True
        shape = run.shape_of[ti]  # (numbered when the run's start held the job)
        rec = ssn.snapshot.jobs[j]
        # No place has room enough for the gang, whichever nodes changed: the cheapest proof,
        # shared by the jobs of one shape and size, asked first.
        if self._short(ssn, run, j, rec, ti, shape, waiting, None):
            return True
        log = ssn.changes
        if e.capacity and log.knows(e.lineage, e.cursor):
            # A ground is worked out again after every change the log names, so failures on
            # one ground share the nodes changed since (a node changed later in the run only
            # lost room, or got back exactly what an attempt took).
            key = (id(e.ground[0]), id(e.context), shape)
            more = run.gains.get(key)
            if more is None:
                # Only a node that changed and could take one of the tasks now or later may
                # take more of them than at the failure: one with more room, or one whose
                # record changed (it may admit the template now).
                changed = log.nodes_since(e.cursor)
                if changed.size:
                    ev = ssn.feasible(tmpl)
                    changed = changed[ev.ok[changed] & ev.fit_future[changed]]
                found = gained(e.ground, placement_ground(ssn), changed, e.request, e.gpu)
                if not same:
                    found = np.union1d(found, renewed(e.context, run.context, changed))
                more = run.gains[key] = found
            # No node that may help, or (under a hard topology, where the places are
            # domains) no place holding one has room enough.
            if not more.size or self._short(ssn, run, j, rec, ti, shape, waiting, key):
                return True
        return False

    @staticmethod
    def _short(
        ssn: Session,
        run: _Run,
        j: int,
        rec: Job,
        ti: int,
        shape: int,
        waiting: int,
        key: tuple[int, int, int] | None,
    ) -> bool:
        """:func:`room_short` for job ``j`` at its turn, shared by the jobs it would answer
        alike (room only shrinks during a run: an answer found earlier still proves): what it
        reads of a job is the template, how many tasks the gang still needs, and under a hard
        topology its tier and the nodes that may help (``key``: their entry in
        ``run.gains``, None: any node). ``shape``: the template's number in ``run.shapes``."""
        missing = run.missing
        if missing is None:
            pending, best_effort = pending_tasks(ssn)
            spare = np.bincount(
                ssn.task_job[pending[best_effort]], minlength=len(ssn.snapshot.jobs)
            )
            have = ssn.job_count[:, list(PIPELINED_OR_READY)].sum(axis=1) + spare
            missing = run.missing = (ssn.job_min - have).tolist()
        size = waiting if missing[j] <= 0 else missing[j]
        nt = rec.network_topology
        hard = nt is not None and nt.mode is TopologyMode.HARD
        memo: tuple[object, ...]
        if hard:
            assert nt is not None
            memo = (shape, size, nt.highest_tier_allowed, key)
        else:
            memo = (shape, size)
        short = run.short.get(memo)
        if short is None:
            more = None if key is None else run.gains[key]
            short = run.short[memo] = room_short(
                ssn, j, waiting, ssn.templates[ti], run.bounds, more, size=size
            )
        return short

    @staticmethod
    def _give_back(ssn: Session, run: _Run, j: int, rows: list[int], e: Failure) -> None:
        """Carry job ``j`` (``rows``: its tasks): the words of its last failed attempt ``e``
        come back, and the attempt is remembered for the next run."""
        if e.reason is not None:
            ssn.job_reasons[j] = e.reason  # (Session.note_job: the last word wins)
        if e.task_words:
            reasons = ssn.task_reasons
            for offset, text in e.task_words:
                reasons[rows[offset]] = text
        ssn.unschedulable_jobs.add(j)
        if e.placement is not None:
            ssn.placements[j] = e.placement
        run.memory[e.job.name] = e  # the job's record (the carry checks found it the same)

    @staticmethod
    def _remember(
        ssn: Session,
        run: _Run,
        j: int,
        before: tuple[int, bytes],
        cursor: int,
        ground: tuple[I64, I64, I64, I64],
    ) -> None:
        """Remember job ``j``'s failed attempt (taken at ``cursor`` on ``ground``) for a later
        run, when its tasks are as they were at the run's start."""
        ti, states = before
        own = ssn.job_tasks(j)
        if ssn.task_state[own].tobytes() != states:
            return
        snap = ssn.snapshot
        tmpl = ssn.templates[ti]
        reason = ssn.job_reasons.get(j)
        words = []
        for offset, t in enumerate(own.tolist()):
            text = ssn.task_reasons.get(t)
            if text:
                words.append((offset, CARRIED + text))
        run.memory[snap.jobs[j].name] = Failure(
            job=snap.jobs[j],
            tasks=tuple(snap.tasks[t] for t in own.tolist()),
            states=states,
            context=run.context,
            lineage=ssn.changes.lineage,
            cursor=cursor,
            capacity=not run.refused,
            ground=ground,
            request=tmpl.request,
            gpu=bool(tmpl.gpu_count),
            reason=None if reason is None else (reason[0], CARRIED + reason[1]),
            task_words=tuple(words),
            placement=ssn.placements.get(j),
        )

    @staticmethod
    def _known(
        ssn: Session, run: _Run, q: int, tmpl: TaskTemplate
    ) -> tuple[tuple[int, bytes] | None, bool, str | None]:
        """The key of queue ``q``'s verdict on ``tmpl`` among the run's verdicts, whether a
        verdict kept there still holds, and that verdict (why the queue refuses, None when it
        takes the template).

        The built-in queue plugins judge a template by its request and the queues' holdings:
        without a queue hierarchy, by the holdings of ``q`` alone, so an answer holds for any
        template of the same request in the queue until the change log names a change of the
        queue's allocation; under a hierarchy, until it names any change. With a plugin from
        elsewhere on the point, nothing is kept."""
        if not run.shared:
            return None, False, None
        key = (q, tmpl.request.tobytes())
        known = run.verdicts.get(key)
        if known is None:
            return key, False, None
        log = ssn.changes
        if (
            log.changed_since(known[0])
            if ssn.gate.rules.hierarchical
            else log.queue_changed_since(q, known[0])
        ):
            return key, False, None
        return key, True, known[1]

    @classmethod
    def _takes(cls, ssn: Session, run: _Run, q: int, tmpl: TaskTemplate) -> bool:
        """Whether queue ``q`` takes ``tmpl`` now (:meth:`_refusal` without the words: a
        carried job gives its last words back)."""
        key, holds, why = cls._known(ssn, run, q, tmpl)
        if holds:
            return why is None
        takes = bool(ssn.points.allocatable(q, tmpl))
        if key is not None:
            run.verdicts[key] = (ssn.changes.end, None if takes else _UNWORDED)
        return takes

    @classmethod
    def _refusal(cls, ssn: Session, run: _Run, q: int, tmpl: TaskTemplate) -> str | None:
        """Why queue ``q`` refuses ``tmpl`` now (:func:`queue_refusal`), None when it takes it;
        kept per request while it holds (:meth:`_known`), so the tasks and jobs of a waiting
        queue are not asked and worded one by one."""
        key, holds, why = cls._known(ssn, run, q, tmpl)
        if not holds:
            why = None if ssn.points.allocatable(q, tmpl) else queue_refusal(ssn, q, tmpl)
            if key is not None:
                run.verdicts[key] = (ssn.changes.end, why)
        elif why is _UNWORDED:
            # The refusal still holds and nothing changed since: its words are those of now.
            why = queue_refusal(ssn, q, tmpl)
            if key is not None:
                run.verdicts[key] = (run.verdicts[key][0], why)
        if why is not None:
            run.refused = True
        return why

    def _allocate_job(
        self,
        ssn: Session,
        run: _Run,
        stmt: Statement,
        j: int,
        q: int,
        tasks: deque[int],
        failed: set[int],
    ) -> bool:
        if run.as_gang(ssn, j):
            return self._allocate_gang(ssn, run, stmt, j, q, tasks)
        need_all = int(ssn.job_min[j]) >= len(ssn.job_tasks(j))
        while tasks:
            t = tasks.popleft()
            if ssn.task_state[t] != TaskState.PENDING:
                continue
            tmpl = ssn.templates[int(ssn.template_of[t])]
            if tmpl.index in failed:
                ssn.task_reasons.setdefault(t, ssn.task_reasons.get(tmpl.tasks[0], ""))
                continue
            why = self._refusal(ssn, run, q, tmpl)
            if why is not None:
                ssn.task_reasons[t] = why
                continue
            node, pipelined = ssn.best_node(tmpl)
            if node < 0:
                failed.add(tmpl.index)
                ssn.task_reasons[t] = ssn.fit_error(tmpl)
                if need_all:
                    break
                continue
            gpus = ssn.choose_gpus(t, node, future=pipelined)
            if pipelined:
                stmt.pipeline(t, node, gpus)
            else:
                stmt.allocate(t, node, gpus)
            ssn.task_reasons.pop(t, None)
            if tasks and ssn.points.job_ready(j):
                return True
        return False

    def _allocate_gang(
        self, ssn: Session, run: _Run, stmt: Statement, j: int, q: int, tasks: deque[int]
    ) -> bool:
        """Place the job's gang through the placer; push it back while elastic tasks remain."""
        pending = [t for t in tasks if ssn.task_state[t] == TaskState.PENDING]
        tasks.clear()
        if not pending:
            return False
        planned = run.joint.pop(j, None)
        result = planned if planned is not None else place_job(ssn, j, pending, run.placer)
        if isinstance(result, str):
            for t in pending:
                ssn.task_reasons[t] = result
            return False
        for t, node, gpus, pipelined in result:
            tmpl = ssn.templates[int(ssn.template_of[t])]
            refused = self._refusal(ssn, run, q, tmpl)
            if refused is not None:
                ssn.task_reasons[t] = refused
                break
            why = ssn.gate.refuse(t, node, gpus, pipelined=pipelined)
            if why is not None:  # the plan went stale (an earlier gang took the room)
                run.refused = True  # not a failure for room alone: never carried
                ssn.task_reasons[t] = f"the planned placement no longer holds: {why}"
                break
            (stmt.pipeline if pipelined else stmt.allocate)(t, node, gpus)
        placed = {op.task for op in stmt.ops}
        rest = [t for t in pending if t not in placed]
        tasks.extend(rest)
        return bool(rest) and bool(placed) and bool(ssn.points.job_ready(j))

    @staticmethod
    def _explain_discard(ssn: Session, j: int, tried: list[int]) -> None:
        own = ssn.job_tasks(j)
        total = len(own)
        pending: list[int] = own[ssn.task_state[own] == TaskState.PENDING].tolist()
        why = next((ssn.task_reasons[t] for t in pending if ssn.task_reasons.get(t)), "")
        message = f"{len(pending)}/{total} tasks in gang unschedulable: {why}".rstrip(": ")
        prev = ssn.job_reasons.get(j)
        if prev is not None and prev[0] == "RestoringMinimum":  # gang's note: keep it in front
            message = f"{prev[1]}: {message}"
        ssn.note_job(j, "Unschedulable", message)
        ssn.unschedulable_jobs.add(j)
        for t in tried:
            ssn.task_reasons[t] = (
                f"gang {ssn.snapshot.jobs[j].name!r} not ready "
                f"(min_available {int(ssn.job_min[j])}): {why}"
            )
