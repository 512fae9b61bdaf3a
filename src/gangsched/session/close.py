"""Decisions assembled from a finished session, by small functions: the committed operations
as records (:func:`close_session`), each job's phase from its tasks' states (the
``PHASE_RULES`` table, read top to bottom), the reasons of tasks left waiting and each queue's
status. Also :func:`nondeterministic_options`, the placer options that make a cycle depend on
more than its input.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cache
from itertools import compress, filterfalse, repeat
from operator import attrgetter, eq, itemgetter, ne, not_
from typing import Any, NamedTuple, TypeVar

import numpy as np
import numpy.typing as npt

from gangsched._frozen import FrozenDict
from gangsched.decisions import (
    Bind,
    Decisions,
    Eviction,
    Hold,
    JobStatus,
    Pipeline,
    PlacementInfo,
    QueueStatus,
)
from gangsched.model import Job, JobPhase, Task, TaskPhase
from gangsched.session.core import READY_STATES, Session, TaskState
from gangsched.session.rules.fairshare import demand_mask
from gangsched.session.rules.policies import job_actions
from gangsched.session.statement import OpKind
from gangsched.units import GPU, PODS

__all__ = ["close_session", "job_phase", "nondeterministic_options"]

_Rows = npt.NDArray[np.intp]
_NO_ROWS: _Rows = np.zeros(0, dtype=np.intp)


def close_session(ssn: Session) -> Decisions:
    """Turn a finished session into decisions: the operations as records, then each job's
    status, the reasons of tasks left waiting, each queue's status and the job actions."""
    snap = ssn.snapshot
    node_names = ssn.arrays.node_names
    binds, evictions, pipelined, state = _op_records(ssn)
    evicted = {e.task: e.reason for e in evictions}
    names = list(snap.job_index)
    jobs, book = _job_statuses(ssn, state, names)
    # (no job policies: no job actions, and no need of every job's phase by name)
    actions = (
        job_actions(snap, evicted, {name: jobs[name].phase for name in names})
        if book.asking
        else ()
    )
    task_reasons, noted = _task_reasons(ssn, state, jobs)
    queues = _queue_statuses(ssn, state, names, book)
    preemption_reasons = {
        snap.jobs[j].name: "; ".join(f"{action}: {why}" for action, why in per_action.items())
        for j, per_action in sorted(ssn.preemption_reasons.items())
    }
    holds = tuple(
        Hold(
            job=snap.jobs[j].name,
            nodes=tuple(node_names[n] for n in nodes),
            expected_wait=wait,
        )
        for j, nodes, wait in ssn.holds
    )
    placements: dict[str, PlacementInfo] = {
        snap.jobs[j].name: info for j, info in ssn.placements.items()
    }
    # The placer options that made this cycle depend on more than its input (each once, in
    # the order the actions first used them).
    options = dict.fromkeys(
        note for placer in ssn.placers for note in nondeterministic_options(placer)
    )
    return Decisions(
        binds=binds,
        evictions=evictions,
        pipelined=pipelined,
        # (the statuses are in the order of the names already; the copy is the decisions'
        # alone, as the book's statuses pass to the next cycle)
        jobs=FrozenDict.of_sorted({**jobs, **noted}),
        queues=FrozenDict(queues),
        task_reasons=task_reasons,
        job_actions=actions,
        preemption_reasons=FrozenDict(preemption_reasons),
        holds=holds,
        nondeterministic=tuple(options),
        placements=FrozenDict(placements),
    )


def _op_records(
    ssn: Session,
) -> tuple[tuple[Bind, ...], tuple[Eviction, ...], tuple[Pipeline, ...], npt.NDArray[np.int64]]:
    """Committed and kept operations as records, and each task's state after the cycle
    (allocations kept without a commit count as reservations)."""
    snap = ssn.snapshot
    node_names = ssn.arrays.node_names
    binds = tuple(
        Bind(task=snap.tasks[op.task].name, node=node_names[op.node], gpu_indices=op.gpus)
        for op in ssn.committed
        if op.kind is OpKind.ALLOCATE
    )
    evictions = tuple(
        Eviction(task=snap.tasks[op.task].name, reason=op.reason, preemptor=op.preemptor)
        for op in ssn.committed
        if op.kind is OpKind.EVICT
    )
    reserved_ops = [op for op in ssn.committed if op.kind is OpKind.PIPELINE] + [
        op for op in ssn.kept if op.kind is not OpKind.EVICT
    ]
    pipelined = tuple(
        Pipeline(task=snap.tasks[op.task].name, node=node_names[op.node], gpu_indices=op.gpus)
        for op in reserved_ops
    )
    kept = np.zeros(len(snap.tasks), dtype=np.bool_)
    kept[[op.task for op in ssn.kept if op.kind is OpKind.ALLOCATE]] = True
    state = ssn.task_state.astype(np.int64)
    state[kept] = TaskState.PIPELINED
    return binds, evictions, pipelined, state


@dataclass(frozen=True, slots=True)
class _Tally:
    """A job's task counts after the cycle, as the phase rules read them."""

    running: int  # Running or Bound
    scheduled: int  # everything placed once: running, finished, releasing, allocated
    finished: int  # Succeeded or Failed
    min_available: int
    lost: bool  # it runs but lost tasks it cannot replace
    before: JobPhase


#: A job's phase after the cycle (Volcano's PodGroup rules): the first row whose condition
#: holds gives the phase.
PHASE_RULES: tuple[tuple[str, Callable[[_Tally], bool], JobPhase], ...] = (
    ("runs but lost tasks it cannot replace", lambda t: t.running > 0 and t.lost, JobPhase.UNKNOWN),
    (
        "at least min_available scheduled, all finished",
        lambda t: t.scheduled >= t.min_available and t.scheduled > 0 and t.finished == t.scheduled,
        JobPhase.COMPLETED,
    ),
    (
        "at least min_available scheduled",
        lambda t: t.scheduled >= t.min_available and t.scheduled > 0,
        JobPhase.RUNNING,
    ),
    ("admitted before", lambda t: t.before is JobPhase.INQUEUE, JobPhase.INQUEUE),
    ("otherwise", lambda t: True, JobPhase.PENDING),
)


def job_phase(
    count: Mapping[int, int], min_available: int, before: JobPhase, lost: bool
) -> JobPhase:
    """A job's phase after the cycle, from its tasks per state, by :data:`PHASE_RULES`:
    Unknown when it runs but lost tasks it cannot replace (``lost``), Running once at least
    ``min_available`` tasks are scheduled (Completed when all of those finished), otherwise
    Pending unless it was admitted (Inqueue stays)."""
    running = count[TaskState.RUNNING] + count[TaskState.BOUND]
    finished = count[TaskState.SUCCEEDED] + count[TaskState.FAILED]
    scheduled = running + finished + count[TaskState.RELEASING] + count[TaskState.ALLOCATED]
    tally = _Tally(running, scheduled, finished, min_available, lost, before)
    return next(phase for _, when, phase in PHASE_RULES if when(tally))


_QUEUE_PHASES = ("Inqueue", "Pending", "Running", "Unknown", "Completed")


#: Where a finished session keeps its statuses for the next cycle's close (in
#: ``Session.records``): ``(lineage, cursor, {name: entry})`` with the change log's lineage
#: and end when they were made.
JOB_STATUSES = ("close", "job statuses")
QUEUE_STATUSES = ("close", "queue statuses")


def _since_last_close(
    ssn: Session, key: tuple[str, str], *, take: bool = False
) -> tuple[dict[str, Any], _Rows]:
    """The last cycle's statuses kept under ``key`` and the jobs (or queues, by key) the change
    log names since they were made; nothing kept when the log does not continue theirs.
    ``take``: they pass to this cycle (the last one keeps them no more)."""
    known = ssn.prior_records.pop(key, None) if take else ssn.prior_records.get(key)
    log = ssn.changes
    if known is None or not log.knows_jobs(known[0], known[1]):
        return {}, _NO_ROWS
    since = log.jobs_since(known[1]) if key is JOB_STATUSES else log.queues_since(known[1])
    return known[2], since


class _JobEntry(NamedTuple):
    """A job's status as the close step keeps it for the next cycle, with what it was made
    of besides the change log's cursor (a named tuple: one is made per job looked at)."""

    status: JobStatus
    job: Job  # the job's record
    phase: JobPhase  # admitted or not, in the session
    reason: tuple[str, str] | None
    lost: bool  # unschedulable while it runs
    row: tuple[int, ...]  # tasks per state
    best_effort: int  # pending best-effort tasks
    asks: bool  # its record names job policies (the job actions read it)
    settled: JobPhase | None  # its record's phase, which a cycle keeps (None: Pending)
    #: whether it is among the book's lost, running, unsettled, asking and reserving jobs
    marks: tuple[bool, bool, bool, bool, bool]


#: The marks of a job in none of the book's sets.
_UNMARKED = (False, False, False, False, False)


def _job_statuses(
    ssn: Session, state: npt.NDArray[np.int64], names: list[str]
) -> tuple[dict[str, JobStatus], _JobBook]:
    """Every job's status, in the sorted order of the jobs' names (``names``: those names in
    snapshot order), and the book of them the next cycle's close starts from
    (:class:`_JobBook`; its ``fresh`` are the jobs whose figures a queue's status reads —
    phase, tasks per state, record — may differ from the last cycle's close: new jobs, jobs
    the change log names whose record or tasks per state moved, and jobs whose phase did)."""
    snap = ssn.snapshot
    n_jobs = len(names)
    index = snap.job_index
    # A job the change log names no change of since the last cycle's close, admitted or not
    # as then and with the same words, has the status it had (records are immutable). One it
    # names (a trial placement undone is an entry too) has it when what the status is made
    # of is as then: its record, its tasks per state and its pending best-effort tasks.
    # (the kept entries and their book pass from the last cycle to this one, which updates
    # them in place: a cycle costs what changed, not what waits)
    last, changed = _since_last_close(ssn, JOB_STATUSES, take=True)
    known = ssn.prior_records.pop(JOB_BOOK, None)
    if known is not None and known[0] is last and last:
        book: _JobBook = known[1]
    else:
        book, last = _no_book(), {}
    unschedulable = ssn.unschedulable_jobs
    reasons = ssn.job_reasons
    phases = ssn.job_phase
    made, statuses, words, phases_of = last, book.statuses, book.words, book.phases_of
    sets = [book.lost, book.running, book.unsettled, book.asking, book.reserving]
    for name in list(filterfalse(index.__contains__, last)):  # the jobs gone
        gone = made.pop(name)
        phases_of[gone.job.queue][_column(gone.status)] -= 1
        del statuses[name]
        words.pop(name, None)
        for group in sets:
            group.discard(name)
    # The jobs to look at: those the log names (a new job among them), those whose phase may
    # have moved (admitted in the last cycle or in this one: only a Pending job is), those
    # whose words or whose being lost moved. Every other job keeps the entry it had, and the
    # book is the last one's with the entries of these replaced.
    changed_set = set(changed.tolist())
    look = set(changed_set)
    # (the words moved: a job with words now and other words or none in the book, or one
    # with words in the book and none now; read by whole lists, mostly the same objects)
    said = list(map(names.__getitem__, reasons))
    kept_words = list(map(words.get, said))
    moved = set(compress(said, map(ne, kept_words, reasons.values())))
    if len(words) != len(said) - kept_words.count(None):
        moved.update(words.keys() - set(said))
    unschedulable_now = set(map(names.__getitem__, unschedulable))
    # (being unschedulable changes a status only while the job runs: PHASE_RULES)
    moved |= (unschedulable_now & book.running) - book.lost
    moved |= book.lost - unschedulable_now
    moved |= book.unsettled
    look.update(j for j in map(index.get, moved, repeat(-1)) if j >= 0)
    absent = [j for j in look if names[j] not in last]
    if len(made) + len(absent) != n_jobs:  # (a new job the log does not name: looked at too)
        look.update(j for j, name in enumerate(names) if name not in made)
    fresh = np.zeros(n_jobs, dtype=np.bool_)
    # The statuses are kept in the order of the jobs' names (the decisions' order): a job
    # added after the last name in it sends them through one sort at the end.
    tail = next(reversed(statuses), None)
    in_order = True
    # Jobs of one shape waiting for one reason have one status (a status is a function of
    # what it is made of alone: kept from cycle to cycle, up to a bound).
    built = book.shapes if len(book.shapes) < _SHAPES_KEPT else {}
    if look:
        # Tasks per (job, state) from one bincount.
        n_states = int(ssn.job_count.shape[1])
        counts = np.bincount(ssn.task_job * n_states + state, minlength=n_jobs * n_states).reshape(
            n_jobs, n_states
        )
        best_effort = _pending_best_effort(ssn)
        jobs_rec = snap.jobs
        todo = sorted(look)
        for j, row in zip(todo, map(tuple, counts[todo].tolist()), strict=True):
            job = jobs_rec[j]
            name = names[j]
            phase, reason, lost = phases[j], reasons.get(j), j in unschedulable
            entry = before = last.get(name)
            if entry is not None and j in changed_set:
                be = best_effort[j]
                if entry.job is not job or entry.row != row or entry.best_effort != be:
                    entry = None
                    fresh[j] = True
            if (
                entry is None
                or entry.phase is not phase
                or entry.reason != reason
                or entry.lost != (lost and entry.status.running > 0)
            ):
                given = (row, best_effort[j], job.min_available, phase, lost, reason)
                status = built.get(given)
                if status is None:
                    status = built[given] = _job_status(
                        ssn, j, dict(enumerate(row)), best_effort[j]
                    )
                if before is not None and before.job is job:  # (what its record says)
                    asks, settled = before.asks, before.settled
                else:
                    asks = bool(job.policies or job.role_policies)
                    settled = None if job.phase is JobPhase.PENDING else job.phase
                runs = status.running > 0
                entry = _JobEntry(
                    status,
                    job,
                    phase,
                    reason,
                    lost and runs,
                    row,
                    best_effort[j],
                    asks,
                    settled,
                    (
                        lost and runs,
                        runs,
                        phase is not settled,
                        asks,
                        status.phase == "Inqueue" and job.min_resources is not None,
                    ),
                )
                if before is None or before.status.phase != status.phase:
                    fresh[j] = True
            if entry is before:
                continue  # (its book entries are those it had)
            column = _column(entry.status)
            if before is None:
                phases_of.setdefault(job.queue, [0] * (_OTHER_PHASES + 1))[column] += 1
                had = _UNMARKED
            else:
                was = _column(before.status)
                if was != column or before.job.queue != job.queue:
                    phases_of[before.job.queue][was] -= 1
                    phases_of.setdefault(job.queue, [0] * (_OTHER_PHASES + 1))[column] += 1
                had = before.marks
            made[name] = entry
            if before is None and in_order:
                in_order = tail is None or tail < name
                tail = name
            statuses[name] = entry.status
            if entry.reason is None:
                words.pop(name, None)
            else:
                words[name] = entry.reason
            if entry.marks != had:  # (the sets hold the marks of the entries kept)
                for group, marked, before_marked in zip(sets, entry.marks, had, strict=True):
                    if marked and not before_marked:
                        group.add(name)
                    elif before_marked and not marked:
                        group.discard(name)
    if not in_order:
        order = sorted(statuses)
        statuses = dict(zip(order, map(statuses.__getitem__, order), strict=True))
    log = ssn.changes
    ssn.records[JOB_STATUSES] = (log.lineage, log.end, made)
    lost_now, running, unsettled, asking, reserving = sets
    book = _JobBook(
        statuses, phases_of, words, lost_now, running, unsettled, asking, reserving, fresh, built
    )
    ssn.records[JOB_BOOK] = (made, book)
    return statuses, book


@dataclass(frozen=True, slots=True)
class _JobBook:
    """What the close step works a cycle's job statuses out from besides the kept entries, by
    job name: each job's status (in the sorted order of the names), per queue name its jobs
    per phase (``phases_of``: in the order of :data:`_QUEUE_PHASES`, any other phase last),
    the words of the jobs that have some (``words``), and the jobs lost (``lost``), running
    (``running``), whose phase may move (``unsettled``: its session's phase is not its
    record's, or its record is Pending, which a cycle may admit), whose record names job
    policies (``asking``) and the Inqueue ones with ``min_resources`` (``reserving``).
    ``fresh``: per job of the cycle, whether its figures may differ from the last cycle's
    (:func:`_job_statuses`). ``shapes``: the statuses made so far, by what each is made of
    (tasks per state, pending best-effort tasks, ``min_available``, phase in the session,
    unschedulable or not, words)."""

    statuses: dict[str, JobStatus]
    phases_of: dict[str, list[int]]
    words: dict[str, tuple[str, str]]
    lost: set[str]
    running: set[str]
    unsettled: set[str]
    asking: set[str]
    reserving: set[str]
    fresh: npt.NDArray[np.bool_]
    shapes: dict[tuple[object, ...], JobStatus]


#: At most this many statuses are kept by what they are made of (:attr:`_JobBook.shapes`).
_SHAPES_KEPT = 4096


def _column(status: JobStatus) -> int:
    """The column of a job with ``status`` in its queue's jobs per phase."""
    return _PHASE_COLUMN.get(status.phase, _OTHER_PHASES)


def _no_book() -> _JobBook:
    return _JobBook({}, {}, {}, set(), set(), set(), set(), set(), np.zeros(0, dtype=np.bool_), {})


#: Where a finished session keeps its :class:`_JobBook` (in ``Session.records``), with the
#: kept entries it goes with.
JOB_BOOK = ("close", "job book")


def _pending_best_effort(ssn: Session) -> list[int]:
    """Per job, its pending best-effort tasks (as :meth:`Session.pending_best_effort`: by the
    tasks' records), for every job at once."""
    n_jobs = len(ssn.snapshot.jobs)
    cols = ssn.columns
    if not cols.job_best_effort.any():  # (most clusters: no task is best-effort)
        return [0] * n_jobs
    waiting = cols.best_effort & (ssn.task_state == TaskState.PENDING)
    per_job: list[int] = np.bincount(ssn.task_job[waiting], minlength=n_jobs).tolist()
    return per_job


def _job_status(ssn: Session, j: int, count: Mapping[int, int], best_effort: int) -> JobStatus:
    """Job ``j``'s status from its tasks per state after the cycle."""
    job = ssn.snapshot.jobs[j]
    running = count[TaskState.RUNNING] + count[TaskState.BOUND]
    ready = sum(count[s] for s in READY_STATES) + best_effort >= job.min_available
    reason, message = ssn.job_reasons.get(j, ("", ""))
    phase = job_phase(count, job.min_available, ssn.job_phase[j], j in ssn.unschedulable_jobs).value
    if not reason:
        if ready:
            reason, message = "Scheduled", "gang ready"
        elif count[TaskState.PIPELINED]:
            reason = "Pipelined"
            message = f"{count[TaskState.PIPELINED]} task(s) reserved on resources being released"
        elif phase == "Pending":
            reason, message = "NotEnqueued", "job is not admitted (enqueue) yet"
    return JobStatus(
        phase=phase,
        reason=reason,
        message=message,
        ready=bool(ready),
        min_available=job.min_available,
        running=running,
        allocated=count[TaskState.ALLOCATED],
        pipelined=count[TaskState.PIPELINED],
        pending=count[TaskState.PENDING],
        succeeded=count[TaskState.SUCCEEDED],
        failed=count[TaskState.FAILED],
    )


#: Where a finished session keeps its pending tasks' words for the next cycle's close (in
#: ``Session.records``): a :class:`_Reasons`.
TASK_REASONS = ("close", "task reasons")


class _Reasons(NamedTuple):
    """The pending tasks' words of a cycle: the tasks' records and names, their words (task
    order) and the mapping of names to words made of them (in the order of the names)."""

    records: tuple[Task, ...]
    names: list[str]
    whys: list[str]
    mapping: FrozenDict[str, str]


def _task_reasons(
    ssn: Session, state: npt.NDArray[np.int64], jobs: Mapping[str, JobStatus]
) -> tuple[FrozenDict[str, str], dict[str, JobStatus]]:
    """Why each task left pending was not placed (and why a carried reservation held back by
    a rule was not bound); SLA holds are noted on the tasks and on their waiting jobs (the
    second mapping: the statuses of ``jobs`` with a note)."""
    snap = ssn.snapshot
    notes = ssn.points.reason_notes()
    rows = np.flatnonzero(state == TaskState.PENDING)
    pending = rows.tolist()
    # A task's own reason, else its job's message, else the job's status in words.
    whys: list[str] = list(map(ssn.task_reasons.get, pending, repeat("")))
    unsaid = list(compress(range(len(whys)), map(not_, whys)))
    task_job: list[int] = ssn.task_job[rows].tolist() if unsaid or notes else []
    if unsaid:
        of_job: dict[int, str] = {}
        for i in unsaid:
            j = task_job[i]
            why = of_job.get(j)
            if why is None:
                why = ssn.job_reasons.get(j, ("", ""))[1]
                if not why:
                    name = snap.jobs[j].name
                    why = f"job {name!r}: {jobs[name].message or 'not tried'}"
                of_job[j] = why
            whys[i] = why
    if notes:
        for i, j in enumerate(task_job):
            note = notes.get(j)
            if note:
                whys[i] = _with_note(whys[i], note)
    # The mapping in the order of the tasks' names. The same pending task records as the last
    # cycle's close have the same names in the same order; with the same words too, the
    # mapping is the last one. (the names from the records: the snapshot's name index of
    # tasks is made only if read)
    records = tuple(_picked(snap.tasks, pending))
    last: _Reasons | None = ssn.prior_records.pop(TASK_REASONS, None)
    if last is not None and last.records == records:
        names = last.names
        if last.whys == whys:
            task_reasons = last.mapping
        else:
            said = dict(zip(names, whys, strict=True))
            task_reasons = FrozenDict.of_sorted(
                dict(zip(last.mapping, map(said.__getitem__, last.mapping), strict=True))
            )
    else:
        names = list(map(_NAME, records))
        task_reasons = FrozenDict(dict(zip(names, whys, strict=True)))
    ssn.records[TASK_REASONS] = _Reasons(records, names, whys, task_reasons)
    # A carried reservation that stays unbound says why, when a rule held it back.
    held: dict[str, str] = {}
    for t in np.flatnonzero(state == TaskState.PIPELINED).tolist():
        held_back = ssn.task_reasons.get(t)
        if held_back and snap.tasks[t].phase is TaskPhase.PIPELINED:
            held[snap.tasks[t].name] = held_back
    if held:
        task_reasons = FrozenDict({**task_reasons, **held})
    noted: dict[str, JobStatus] = {}
    for j, note in notes.items():
        status = jobs[snap.jobs[j].name]
        if status.pending and not status.ready:
            noted[snap.jobs[j].name] = replace(status, message=_with_note(status.message, note))
    return task_reasons, noted


class _QueueEntry(NamedTuple):
    """A queue's status as the close step keeps it for the next cycle, with what it was made
    of besides the change log's cursor (a named tuple: one is made per queue a cycle)."""

    status: QueueStatus
    queue: object  # the queue's record
    deserved: bytes | None  # its deserved row
    real: bytes | None  # its real capability row
    share: float
    overused: bool
    rows: tuple[bytes, bytes, bytes, bytes]  # allocated, pending, inqueue, request rows


#: A job phase's column in a queue's counts (:data:`_QUEUE_PHASES`; any other phase: the last,
#: :data:`_OTHER_PHASES`).
_PHASE_COLUMN = {phase: c for c, phase in enumerate(_QUEUE_PHASES)}
_OTHER_PHASES = len(_QUEUE_PHASES)


def _picked(items: Sequence[_T], rows: list[int]) -> Sequence[_T]:
    """``items`` at ``rows``, in that order."""
    if len(rows) > 1:
        picked: tuple[_T, ...] = itemgetter(*rows)(items)
        return picked
    return [items[r] for r in rows]


_T = TypeVar("_T")
_NAME = attrgetter("name")


def _queue_statuses(
    ssn: Session,
    state: npt.NDArray[np.int64],
    names: list[str],
    book: _JobBook,
) -> dict[str, QueueStatus]:
    """Every queue's status. ``names``: the jobs' names in snapshot order; ``book``: their
    phases, and the jobs whose figures may have moved since the last cycle's close
    (:func:`_job_statuses`)."""
    snap = ssn.snapshot
    n_q = len(snap.queues)
    queues: dict[str, QueueStatus] = {}
    pending_req = np.zeros_like(ssn.queue_allocated)
    pend = np.flatnonzero(state == TaskState.PENDING)
    np.add.at(pending_req, ssn.job_queue[ssn.task_job[pend]], ssn.task_req[pend])
    fair = ssn.points.fair_share
    returning = np.zeros_like(ssn.queue_allocated)
    if (state == TaskState.RELEASING).any():  # (else the demand holds no task not pending)
        back = np.flatnonzero(demand_mask(ssn, state) & (state != TaskState.PENDING))
        np.add.at(returning, ssn.job_queue[ssn.task_job[back]], ssn.task_req[back])
    others = len(_QUEUE_PHASES)
    index = snap.job_index
    inqueue_req = _inqueue_resources(ssn, sorted(index[name] for name in book.reserving))

    # Under a queue hierarchy an inner queue's figures are those of its subtree.
    def subtrees(per_queue: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        return per_queue if fair is None else fair.queue_subtree_sum(ssn, per_queue)

    allocated_q = subtrees(ssn.queue_allocated)
    pending_req = subtrees(pending_req)
    returning = subtrees(returning)
    inqueue_req = subtrees(inqueue_req)
    request_q = allocated_q + pending_req + returning
    gpu = ssn.arrays.spec.gpu_column
    # Jobs per queue and phase, as the book counts them.
    nothing = [0] * others
    phase_counts = [book.phases_of.get(queue.name, nothing)[:others] for queue in snap.queues]
    # A queue the change log names no change of since the last cycle's close, none of whose
    # jobs' figures moved, has the figures it had then; with the same
    # fair-share figures (the water-filling reads every queue) it has the status it had. Under
    # a hierarchy a queue's figures are its subtree's: every status is worked out again.
    kept, changed = _since_last_close(ssn, QUEUE_STATUSES)
    last = {} if ssn.gate.rules.hierarchical else kept
    dirty = np.bincount(ssn.job_queue[book.fresh], minlength=n_q) > 0
    dirty[changed] = True
    made: dict[str, _QueueEntry] = {}
    for q, queue in enumerate(snap.queues):
        share: float = fair.queue_share(ssn, q) if fair is not None else 0.0
        real = fair.queue_real_capability(ssn, q) if fair is not None else None
        overused = bool(fair.queue_overused(ssn, q)) if fair is not None else False
        deserved_row = None if ssn.queue_deserved is None else ssn.queue_deserved[q].tobytes()
        real_row = None if real is None else real.tobytes()
        entry = None if dirty[q] else last.get(queue.name)
        if (
            entry is not None
            and entry.deserved == deserved_row
            and entry.real == real_row
            and entry.share == share
            and entry.overused == overused
        ):
            queues[queue.name] = entry.status
            made[queue.name] = entry
            continue
        # Worked out again: a resource mapping made of the very row the last status's was
        # made of is that mapping (a mapping is a function of its row).
        before = kept.get(queue.name)
        rows = (
            allocated_q[q].tobytes(),
            pending_req[q].tobytes(),
            inqueue_req[q].tobytes(),
            request_q[q].tobytes(),
        )
        old: QueueStatus | None = None if before is None else before.status
        same = (False,) * 4 if before is None else tuple(map(eq, rows, before.rows))
        same_queue = before is not None and before.queue is queue
        if old is not None and before is not None and before.deserved == deserved_row:
            deserved: Mapping[str, int] = old.deserved
        elif ssn.queue_deserved is not None:
            deserved = _frozen(ssn, ssn.queue_deserved[q])
        else:
            deserved = FrozenDict()
        cap_gpu = None
        if queue.capability is not None and GPU in queue.capability:
            cap_gpu = queue.capability[GPU] / 1000
        status = _queue_status(
            old is not None and same_queue,
            state=queue.state.value,
            allocated=old.allocated if old and same[0] else _frozen(ssn, allocated_q[q]),
            deserved=deserved,
            guarantee=(
                old.guarantee if old and same_queue else FrozenDict(dict(queue.guarantee or {}))
            ),
            capability=(
                old.capability if old and same_queue else FrozenDict(dict(queue.capability or {}))
            ),
            pending_resources=(
                old.pending_resources if old and same[1] else _frozen(ssn, pending_req[q])
            ),
            inqueue_resources=(
                old.inqueue_resources if old and same[2] else _frozen(ssn, inqueue_req[q])
            ),
            real_capability=(
                old.real_capability
                if old and before is not None and before.real == real_row
                else _finite(ssn, real)
            ),
            request=old.request if old and same[3] else _frozen(ssn, request_q[q]),
            weight=queue.weight,
            overused=overused,
            allocated_gpu=int(allocated_q[q, gpu]) / 1000,
            pending_gpu=int(pending_req[q, gpu]) / 1000,
            inqueue_gpu=int(inqueue_req[q, gpu]) / 1000,
            deserved_gpu=deserved.get(GPU, 0) / 1000,
            capability_gpu=cap_gpu,
            share=share,
            inqueue=phase_counts[q][0],
            pending=phase_counts[q][1],
            running=phase_counts[q][2],
            unknown=phase_counts[q][3],
            completed=phase_counts[q][4],
        )
        made[queue.name] = _QueueEntry(status, queue, deserved_row, real_row, share, overused, rows)
        queues[queue.name] = status
    log = ssn.changes
    ssn.records[QUEUE_STATUSES] = (log.lineage, log.end, made)
    return queues


#: The fields of a queue status that a cycle works out anew besides its resource mappings:
#: counts of jobs and figures (the record's checks: an integer >= 0, a number >= 0).
_COUNTS = ("inqueue", "pending", "running", "unknown", "completed")
_FIGURES = ("share", "allocated_gpu", "pending_gpu", "inqueue_gpu", "deserved_gpu")


def _queue_status(known: bool, /, **values: Any) -> QueueStatus:
    """``QueueStatus(**values)``. ``known``: the queue's own fields (state, weight,
    guarantee, capability) are those of a status made before from the same queue record, and
    every resource mapping is one made before or by :func:`_frozen` (names to plain
    integers): each of those passed or passes the record's check. Then, when every count and
    figure is a plain integer or float >= 0 and ``overused`` a bool (what the record's checks
    let through as they are), the record is made without its constructor; otherwise the
    constructor checks every field (and names the first one that is wrong)."""
    if (
        known
        and type(values["overused"]) is bool
        and all(type(values[f]) is int and values[f] >= 0 for f in _COUNTS)
        and all(type(values[f]) is float and values[f] >= 0 for f in _FIGURES)
    ):
        status = object.__new__(QueueStatus)
        for name, value in values.items():
            object.__setattr__(status, name, value)
        return status
    return QueueStatus(**values)


def _frozen(
    ssn: Session, row: npt.NDArray[np.int64] | npt.NDArray[np.float64]
) -> FrozenDict[str, int]:
    """``FrozenDict(ssn.as_mapping(row))``, made in its final order at once: the row read as
    plain numbers and its columns taken in the sorted order of their names."""
    values = row.tolist()
    return FrozenDict.of_sorted(
        {n: round(float(values[c])) for c, n in _shown(ssn.arrays.spec.names) if values[c]}
    )


@cache
def _shown(names: tuple[str, ...]) -> tuple[tuple[int, str], ...]:
    """The columns a resource mapping shows (every one but pods) with their names, in the
    sorted order of the names."""
    return tuple(sorted(((c, n) for c, n in enumerate(names) if n != PODS), key=itemgetter(1)))


def nondeterministic_options(placer: object) -> tuple[str, ...]:
    """The options of ``placer`` under which its answer may depend on more than the problem
    (the machine's load, thread timing): CP-SAT's ``workers`` above 1 (the parallel workers
    race) and a wall-clock ``time_limit_s`` (a loaded machine gets less done in the same
    seconds). Empty when the placer is deterministic, e.g. the greedy placer or CP-SAT with
    one worker and only its deterministic-time budget.

    Read from the placer's ``workers`` and ``time_limit_s`` attributes, so any placer that
    carries them is judged the same way. Each entry names the placer and the option.
    """
    name = getattr(placer, "name", type(placer).__name__)
    out: list[str] = []
    workers = getattr(placer, "workers", 1)
    if isinstance(workers, int | np.integer) and int(workers) > 1:
        out.append(
            f"placer {name!r}: workers={int(workers)} (parallel search is not deterministic)"
        )
    limit = getattr(placer, "time_limit_s", None)
    if isinstance(limit, int | float | np.number) and not isinstance(limit, bool):
        out.append(
            f"placer {name!r}: time_limit_s={float(limit):g} "
            "(a wall-clock limit is not deterministic)"
        )
    return tuple(out)


def _with_note(why: str, note: str | None) -> str:
    """``why`` with ``note`` added, unless it says it already."""
    if not note or note in why:
        return why
    return f"{why.rstrip('.')}; {note}" if why else note


def _inqueue_resources(ssn: Session, reserving: list[int]) -> npt.NDArray[np.int64]:
    """Per queue, what jobs left Inqueue with ``min_resources`` (``reserving``) still
    reserve: the unallocated part of their ``min_resources``."""
    out = np.zeros_like(ssn.queue_allocated)
    jobs = ssn.snapshot.jobs
    for j in reserving:
        need = ssn.vector(jobs[j].min_resources)
        out[ssn.job_queue[j]] += np.where(need > 0, np.maximum(need - ssn.job_allocated[j], 0), 0)
    return out


def _finite(ssn: Session, row: npt.NDArray[np.float64] | None) -> FrozenDict[str, int]:
    """A float resource row as a mapping, unlimited (infinite) dimensions left out."""
    if row is None:
        return FrozenDict()
    return _frozen(ssn, np.where(np.isfinite(row), row, 0.0))
