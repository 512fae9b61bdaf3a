"""Volcano's own preempt loop: ``preempt`` with ``victimSelection: volcano``.

Theory of operation
-------------------
gangsched's ``preempt`` searches, for a starving job's whole claim, the cheapest admissible
victim set (:mod:`.search`). Volcano's preempt (``pkg/scheduler/actions/preempt``) does not
search: it walks the preemptor's tasks one by one and, for each, the nodes in score order,
evicting on the first node where the victims its plugins allow free enough. This module plays
that walk, so that a configuration read from Volcano's YAML causes the disruption Volcano
causes (:data:`VICTIM_SELECTION`; :func:`gangsched.config.Config.from_volcano_yaml` sets it).

Queue by queue (queue order), two passes run.

*Between jobs.* Every admitted, valid, starving job of the queue (job order) opens one
:class:`~gangsched.session.statement.Statement`; its pending tasks are taken in task order
while the job is still starving. For each task:

1. a task with ``preemption_policy: Never`` (or a job inside its ``preemption_delay``) evicts
   nothing: the first is skipped, the second only uses room already free or being freed;
2. the nodes whose predicates pass (resources aside) are ordered by node score, best first,
   the lowest index on a tie;
3. the candidates are the running or bound tasks, ``preemptable`` on task and job, of *other*
   jobs of the *same* queue. The
   victims of each node are the answer of Volcano's tier walk
   (:meth:`~gangsched.framework.dispatch.Dispatch.walk_victims`) about that node's
   candidates, asked with the session as it is now: priority answers the jobs of strictly
   lower priority (tasks of lower task priority inside one job), gang at most ``ready −
   min_available`` tasks of a job on the node, drf the tasks after whose eviction their job's
   share stays at or above the preemptor's share with *this task* added to its allocation
   (which counts what the job's statement has already reserved); a job's tasks are judged one
   after another in victim order;
4. a node is *validated* when its future idle plus its victims' requests cover the task's
   request (pods aside; a node needing no victim is accepted, as Volcano since 5939cc189);
5. on the first validated node in score order, victims are evicted in victim order
   (``victim_order`` key, then name) until the task fits there once the releases finish
   (the queue's ``allocatable``, the predicates); the task is then pipelined, else that node's
   evictions are undone and the next node is tried.

After the job's tasks, the statement is committed when the job is pipelined, else discarded
whole. Victim jobs the walk left below their minimum are marked unschedulable, as Volcano's
gang plugin does at session close.

*Inside a job.* Then, for every job that was a preemptor of the queue, its pending tasks in
task order, one statement each, with the candidates of the task's *own* job (the same walk:
priority answers lower task priority); the statement is committed when the task is pipelined
and its job is pipelined, else discarded and the job's pass ends.

The node scores are read once per task, before any eviction (Volcano scores the nodes once
per preemptor task). Because a node that fails is undone exactly, every node a task tries
sees the session of the task's start, so nothing is asked node by node that can be worked
out without evicting:

* what evicting every candidate of a node would give back, whether that covers the task
  (Volcano's validation, a bound on what any walk gives) and whether the task would then fit
  once releases finish (:class:`_Room`, GPU devices included), per node, kept across tasks
  (per queue, pass and task shape: ``_View``) and worked out again only on the nodes the
  change log names since (and, when another job of the queue reads it, where either job
  runs: the candidates differ only there);
* the nodes are taken in score order a batch at a time by partition (only the batch is
  sorted), and the walk is asked about a batch of those that pass both at once;
* with the batch's victims, whether all of a node's victims, or none of them, let the task
  fit: a node where all of them do not is counted as tried and left (its try would evict and
  undo without asking the queue), and on a node where they do the victims before the first
  that can let it fit are evicted without asking. Only the node finally chosen keeps its
  statement operations, apart from a node where the fit is still refused after that
  (predicates, the queue, a best-effort victim that frees nothing).

What this loop does not do: a best-effort task (no request) is not a preemptor task (it
needs no eviction and ``backfill`` places it; Volcano reserves it here when its turn comes
while its job is starving, and lets it evict only best-effort pods); a job with a network
topology (HyperNodes) is not a preemptor (Volcano's preempt skips it); disruption budgets are
not read (Volcano's preempt has no ``pdb`` rule); a task reserved inside a job whose gang
stays short is not kept (gangsched's gang gate; Volcano keeps it pipelined for its session,
which ends without binding it).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from gangsched.actions.victims import loop, search
from gangsched.actions.victims import rules as v
from gangsched.config import arg_bool, arg_str
from gangsched.errors import ConfigError
from gangsched.model.gpu_charge import device_take
from gangsched.session.core import READY_STATES, TaskState
from gangsched.session.fit import device_free, node_free
from gangsched.session.pod_constraints import pod_rules
from gangsched.session.statement import OpKind, Statement
from gangsched.session.task_states import PIPELINED_OR_READY, in_states
from gangsched.units import PODS

if TYPE_CHECKING:
    from gangsched.session.arrays import TaskTemplate
    from gangsched.session.core import Session

__all__ = [
    "CHEAPEST",
    "SELECTIONS",
    "VICTIM_SELECTION",
    "VOLCANO",
    "run",
    "victim_selection",
]

#: The argument of ``preempt`` choosing how victims are selected (:data:`SELECTIONS`).
VICTIM_SELECTION = "victimSelection"
#: gangsched's cheapest admissible victim set for a job's whole claim (the default).
CHEAPEST = "cheapest"
#: Volcano's per-task, per-node walk (this module).
VOLCANO = "volcano"
#: The values of :data:`VICTIM_SELECTION`.
SELECTIONS = (CHEAPEST, VOLCANO)

I64 = v.I64
BOOL = v.BOOL
#: How many nodes the walk is first asked about for a task (then four times as many).
_FIRST_BATCH = 32
F64 = npt.NDArray[np.float64]
#: The devices' give-back of a task that takes no GPU: the fit rule reads none.
_NO_DEVICES: I64 = np.zeros(0, dtype=np.int64)
_NO_DEVICES.flags.writeable = False


def victim_selection(arguments: Mapping[str, object], action: str) -> str:
    """The ``victimSelection`` of an action's ``arguments`` (default ``cheapest``).

    Raises :class:`~gangsched.errors.ConfigError` for a value not in :data:`SELECTIONS`, and
    for ``volcano`` together with ``allVictimRules: true``: Volcano's walk takes the victims
    of the first answering tier, so it cannot also hold every victim rule whatever tier
    answers (``volcano`` implies ``allVictimRules: false``)."""
    value = arg_str(arguments, VICTIM_SELECTION, CHEAPEST, plugin=action, kind="action")
    if value not in SELECTIONS:
        raise ConfigError(
            f"unknown victim selection {value!r} (known: {', '.join(SELECTIONS)})",
            kind="action",
            name=action,
            field=f"arguments.{VICTIM_SELECTION}",
        )
    if value == VOLCANO and arg_bool(
        arguments, v.ALL_VICTIM_RULES, False, plugin=action, kind="action"
    ):
        raise ConfigError(
            f"{VICTIM_SELECTION}: {VOLCANO} takes the victims of Volcano's tier walk, which "
            f"{v.ALL_VICTIM_RULES}: true forbids (set {v.ALL_VICTIM_RULES}: false or leave it "
            f"out, or choose {VICTIM_SELECTION}: {CHEAPEST})",
            kind="action",
            name=action,
            field=f"arguments.{VICTIM_SELECTION}",
        )
    return value


# ------------------------------------------------------------------------------- the loop


def run(ssn: Session, action: str) -> None:
    """Volcano's preempt: the between-jobs pass then the within-job pass, queue by queue
    (carried reservations are bound first, as in gangsched's loop)."""
    loop.realise_reservations(ssn)
    pool = _Pool(ssn)
    by_queue: dict[int, list[int]] = {}
    for j in v.preemptors(ssn):
        by_queue.setdefault(int(ssn.job_queue[j]), []).append(j)
    for q in sorted(by_queue, key=ssn.queue_key):
        jobs = by_queue[q]
        for j in jobs:
            v.note_refusal(ssn, j, action, _between_jobs(ssn, action, j, pool))
        for j in jobs:
            _within_job(ssn, action, j, pool)  # a preemptor keeps the explanation of its first pass


def _pending(ssn: Session, job: int) -> list[int]:
    """The job's pending tasks in task order, best-effort ones left to ``backfill``."""
    tasks = ssn.job_tasks(job)
    pending = tasks[ssn.task_state[tasks] == TaskState.PENDING].tolist()
    out = [int(t) for t in pending if not ssn.snapshot.tasks[int(t)].best_effort]
    out.sort(key=ssn.task_key)
    return out


def _between_jobs(ssn: Session, action: str, job: int, pool: _Pool) -> v.VictimRefusal | None:
    rec = ssn.snapshot.jobs[job]
    if rec.network_topology is not None:
        return (
            v.TOPOLOGY,
            "Volcano's preempt does not preempt for a job with a network topology",
        )
    stmt = Statement(ssn)
    first: v.VictimRefusal | None = None
    placed = 0
    # A task that fails leaves the session as it found it, so a later task alike (same
    # template, task priority and policy) fails too until a task is placed.
    failed: set[tuple[int, int, str]] = set()
    tasks = ssn.snapshot.tasks
    for t in _pending(ssn, job):
        if not ssn.points.job_starving(job):
            break
        alike = (int(ssn.template_of[t]), tasks[t].priority, tasks[t].preemption_policy)
        if alike in failed:
            continue
        refusal = _TaskPlay(ssn, action, job, t, pool, own_job=False).play(stmt)
        if refusal is None:
            placed += 1
            failed.clear()
        else:
            failed.add(alike)
            if first is None:
                first = refusal
    if placed and ssn.points.job_pipelined(job):
        victims = [op.task for op in stmt.ops if op.kind is OpKind.EVICT]
        if stmt.commit():
            v.mark_broken(ssn, {int(ssn.task_job[t]) for t in victims})
            hit = sorted({ssn.snapshot.jobs[int(ssn.task_job[t])].name for t in victims})
            by = f"evicting {len(victims)} task(s) of {hit}" if hit else "without evictions"
            ssn.note_job(job, "Pipelined", f"{action}: {placed} task(s) reserved, {by}")
            return None
    else:
        stmt.discard()
    need = int(ssn.job_min[job])
    code, words = first or (
        v.INSUFFICIENT,
        "its pending tasks ran out before it reached its minimum",
    )
    if placed:
        words = (
            f"{words}; {placed} task(s) could be reserved, short of min_available {need}, "
            "so nothing was evicted"
        )
    return code, words


def _within_job(ssn: Session, action: str, job: int, pool: _Pool) -> v.VictimRefusal | None:
    """The within-job pass of one job; the refusal of the task that ended it, if any."""
    for t in _pending(ssn, job):
        if ssn.task_state[t] != TaskState.PENDING:
            continue
        stmt = Statement(ssn)
        refusal = _TaskPlay(ssn, action, job, t, pool, own_job=True).play(stmt)
        if refusal is None and not ssn.points.job_pipelined(job):
            refusal = (
                v.GANG_WOULD_BREAK,
                f"task {ssn.snapshot.tasks[t].name!r}: its job would be reserved below "
                f"min_available {int(ssn.job_min[job])}",
            )
        if refusal is not None or not stmt.commit():
            if not stmt.finished:
                stmt.discard()
            return refusal
    return None


# ------------------------------------------------------------------------- one task


class _TaskPlay:
    """One preemptor task: Volcano's ``preempt`` for it, inside the caller's statement."""

    def __init__(
        self, ssn: Session, action: str, job: int, task: int, pool: _Pool, *, own_job: bool
    ) -> None:
        self.ssn = ssn
        self.pool = pool
        self.action = action
        self.job = job
        self.task = task
        self.own_job = own_job
        self.queue = int(ssn.job_queue[job])
        self.tmpl = ssn.templates[int(ssn.template_of[task])]
        self.rec = ssn.snapshot.tasks[task]
        #: Whether the queue refused the task at the last fit; at any fit.
        self.queue_refused = False
        self.any_queue_refused = False
        #: What the victims of each node where the queue refused the task gave back.
        self.queue_fails: list[I64] = []
        #: The place in score order (negated score, node) of the node of each of
        #: ``queue_fails``.
        self.queue_fail_at: list[tuple[float, int]] = []
        #: Whether every ``allocatable`` rule is a built-in one (loosening as a queue gives).
        self.monotone_queue = False
        self.room: _Room | None = None

    # -- fit -----------------------------------------------------------------------------

    def queue_takes(self) -> bool:
        """:meth:`fits` on a node where the task is known to pass the predicates and fit once
        releases finish: whether the queue may take it."""
        self.queue_refused = False
        if not self.ssn.points.allocatable(self.queue, self.tmpl):
            self.queue_refused = self.any_queue_refused = True
            return False
        return True

    def fits(self, node: int) -> bool:
        """Volcano's ``preemptorFitsOnNode``: the queue may take the task, it fits ``node``
        once the releases finish, and the node's predicates pass."""
        ssn = self.ssn
        self.queue_refused = False
        ev = ssn.feasible(self.tmpl)  # the scores are not read here
        if not (ev.ok[node] and ev.fit_future[node]):
            return False
        if not ssn.points.allocatable(self.queue, self.tmpl):
            self.queue_refused = self.any_queue_refused = True
            return False
        return True

    # -- candidates and victims ----------------------------------------------------------

    def candidates(self, ok: BOOL) -> I64:
        """Running or bound tasks on the ``ok`` nodes that Volcano's filter keeps."""
        ssn = self.ssn
        running = in_states(ssn.task_state, v.RUNNING_STATES)
        if self.own_job:
            mask = running & (ssn.task_job == self.job)
        else:
            mask = running & (ssn.task_job != self.job)
            mask &= ssn.job_queue[ssn.task_job] == self.queue
        cands = np.flatnonzero(mask).astype(np.int64)
        cands = cands[ok[ssn.task_node[cands]]]
        cands = cands[v.evictable(ssn, cands)]
        return cands

    def candidates_on(self, nodes: I64) -> I64:
        """:meth:`candidates` on ``nodes`` (whose predicates pass), read from the pool."""
        ssn = self.ssn
        cands = self.pool.on(nodes)
        cands = cands[in_states(ssn.task_state[cands], v.RUNNING_STATES)]
        jobs = ssn.task_job[cands]
        if self.own_job:
            out: I64 = cands[jobs == self.job]
        else:
            out = cands[(jobs != self.job) & (ssn.job_queue[jobs] == self.queue)]
        return out

    def _rows_since(self, view: _View) -> I64:
        """The nodes to work ``view`` out again on for this task's job: those the change log
        names since its cursor, and, when it held another job's, the nodes where either job
        has tasks (their candidates differ only there); every node when it holds nothing."""
        ssn = self.ssn
        log = ssn.changes
        if view.lineage is None or not log.knows(view.lineage, view.cursor):
            rows = np.arange(ssn.arrays.n_nodes, dtype=np.int64)
        else:
            rows = np.asarray(log.nodes_since(view.cursor), dtype=np.int64)
            if view.job != self.job:
                rows = np.union1d(rows, self.pool.job_nodes(view.job))
                rows = np.union1d(rows, self.pool.job_nodes(self.job))
        view.job, view.lineage, view.cursor = self.job, log.lineage, log.end
        return rows

    def _view(self) -> _View:
        """This task's :class:`_View` (its queue, pass and template), up to date."""
        ssn = self.ssn
        pool = self.pool
        given = pool.view(self.queue, self.own_job, -1)
        rows = self._rows_since(given)
        if rows.size:
            cands = self.candidates_on(rows)
            given.freed[rows] = self._freed(rows, cands)
            if given.dev_freed.size:
                if rows.size == 1:  # one node: its devices are a slice
                    a = ssn.arrays
                    node = int(rows[0])
                    given.dev_freed[int(a.gpu_offset[node]) : int(a.gpu_offset[node + 1])] = 0
                else:
                    given.dev_freed[_devices_of(ssn, rows)] = 0
                taken, milli = search.devices_given_back(ssn, cands)
                used = taken >= 0
                np.add.at(given.dev_freed, taken[used], np.repeat(milli, used.sum(axis=1)))
        view = pool.view(self.queue, self.own_job, pool.shape(self))
        rows = self._rows_since(view)
        if rows.size == 1:  # the usual update after one placement: plain numbers
            node = int(rows[0])
            room = self._room()
            later = room.later(rows)[0]
            freed = given.freed[node]
            one = self._covers_one(node, freed, later)
            view.covered[node] = one
            if one:
                fits, _ = room.fits_with(
                    rows, freed[None, :], given.dev_freed, later[None, :], without=False
                )
                one = bool(fits[0])
            view.roomy[node] = one
        elif rows.size:
            freed = given.freed[rows]
            room = self._room()
            # (rows ascend, each once: as many as the nodes are all of them)
            later = room.later(rows, every=rows.size == ssn.arrays.n_nodes)
            covered = self._covers(rows, freed, later)
            view.covered[rows] = covered
            roomy = np.zeros_like(covered)
            at = np.flatnonzero(covered)
            if at.size:
                roomy[at] = room.fits_with(
                    rows[at], freed[at], given.dev_freed, later[at], without=False
                )[0]
            view.roomy[rows] = roomy
        return view

    def victims(self, cands: I64) -> I64:
        """Volcano's tier walk about each node's ``cands``, with priority, gang and drf
        answering for this task as Volcano's plugins do."""
        ssn = self.ssn
        if cands.size == 0:
            return cands
        rank = self.pool.ranks(cands)
        memo: list[tuple[I64, _Grouping]] = []

        def grouped(c: I64) -> _Grouping:
            """:func:`_by_job_and_node` of ``c``, kept for the walk's next answer about it
            (gang and drf are asked about the same candidates)."""
            if not (memo and memo[0][0] is c):
                memo[:] = [(c, _by_job_and_node(ssn, c, rank))]
            return memo[0][1]

        answers: dict[str, Callable[[I64], BOOL]] = {
            "priority": self._priority_keeps,
            "gang": lambda c: _gang_keeps(ssn, c, rank, grouping=grouped(c)),
        }
        if self.pool.drf_built_in:  # "drf" names the package's own plugin
            inv = self.pool.inverse_totals()
            answers["drf"] = lambda c: _drf_keeps(
                ssn, self.job, self.task, c, rank, inv, grouping=grouped(c) if c.size else None
            )
        walked, _ = ssn.points.walk_victims(
            "preemptable",
            self.job,
            cands,
            ssn.task_node[cands],
            answers,
            marker="gang",
            grouped=_BY_NODE,  # they group a node's candidates by job themselves
            masks=True,
            unmarked=False,  # the marks are not read here
        )
        out: I64 = walked
        kept = v.placed_now(ssn, ssn.task_job[out])
        if kept.any() and not self.own_job:
            # a gang this cycle bound or reserved tasks for gives only its surplus: over its
            # ready tasks where it has binds (they need the gang ready, reservations do not
            # make it so), over ready and reserved tasks where it has reservations alone
            held = out[kept]
            bound = ssn.job_count[ssn.task_job[held], TaskState.ALLOCATED] > 0
            spare = np.zeros(held.size, dtype=np.bool_)
            spare[bound] = _gang_keeps(ssn, held[bound], rank, READY_STATES)
            spare[~bound] = _gang_keeps(ssn, held[~bound], rank, PIPELINED_OR_READY)
            out = np.sort(np.concatenate([out[~kept], held[spare]]))
        return out

    def _priority(self, cands: I64) -> I64:
        """Volcano's priority ``preemptableFn``: the tasks of jobs of lower priority than
        the preemptor's, and of its own job the tasks of lower task priority."""
        out: I64 = cands[self._priority_keeps(cands)]
        return out

    def _priority_keeps(self, cands: I64) -> BOOL:
        """Which of ``cands`` :meth:`_priority` keeps."""
        ssn = self.ssn
        job_priority, task_priority = self.pool.priorities()
        jobs = ssn.task_job[cands]
        own = jobs == self.job
        keep: BOOL = np.where(
            own,
            task_priority[cands] < self.rec.priority,
            job_priority[jobs] < job_priority[self.job],
        )
        return keep

    def frees_nothing(self, victim: int, node: int) -> bool:
        """A best-effort victim (no request) frees only its pod slot: it goes only when the
        node's pods are what the task lacks (Volcano preempts best-effort pods for a node at
        its pod limit, 59b54cc3c; before, it never chose a pod without a request)."""
        ssn = self.ssn
        if not ssn.snapshot.tasks[victim].best_effort:
            return False
        pods = ssn.arrays.spec.index(PODS)
        return bool(ssn.future_idle()[node, pods] >= ssn.task_req[self.task, pods])

    # -- validation ----------------------------------------------------------------------

    def _freed(self, nodes: I64, victims: I64) -> I64:
        """Per node of ``nodes`` (distinct), what those of ``victims`` on it give back there
        (as charged on their nodes)."""
        ssn = self.ssn
        freed = np.zeros((nodes.size, ssn.task_req.shape[1]), dtype=np.int64)
        if victims.size and nodes.size == 1:
            here = victims[ssn.task_node[victims] == nodes[0]]
            if here.size:
                freed[0] = search.given_back(ssn, here).sum(axis=0)
        elif victims.size:
            at = _rows_of(ssn, nodes)[ssn.task_node[victims]]
            inside = at >= 0
            at, rows = at[inside], search.given_back(ssn, victims[inside])
            if at.size:
                by = np.argsort(at, kind="stable")
                at = at[by]
                starts = _starts(at)
                freed[at[starts]] = np.add.reduceat(rows[by], starts, axis=0)
        return freed

    def _covers(self, nodes: I64, freed: I64, later: I64 | None = None) -> BOOL:
        """Volcano's ``ValidateVictims`` on every node of ``nodes`` at once: future idle plus
        ``freed`` (what the victims there give back, a row per node) cover the task's request
        (pods aside; ``later``: the room of ``nodes`` once releases finish, if read already)."""
        ssn = self.ssn
        spec = ssn.arrays.spec
        later = self._room().later(nodes) if later is None else later
        room = later + freed - ssn.task_req[self.task]
        g = self.rec.gpu_request
        if g is not None:
            gpu = spec.gpu_column
            takes = self.pool.takes(g.milli)[nodes]
            room[:, gpu] = later[:, gpu] + freed[:, gpu] - g.count * takes
        room[:, spec.index(PODS)] = 0
        ok: BOOL = (room >= 0).all(axis=1)
        return ok

    def _covers_one(self, node: int, freed: I64, later: I64) -> bool:
        """:meth:`_covers` of one node, in plain numbers (``freed`` and ``later``: its rows)."""
        spec = self.ssn.arrays.spec
        need: list[int] = self.ssn.task_req[self.task].tolist()
        g = self.rec.gpu_request
        if g is not None:
            need[spec.gpu_column] = g.count * int(self.pool.takes(g.milli)[node])
        pods = spec.index(PODS)  # pods aside, as Volcano's validation
        return all(
            a + b >= q or r == pods
            for r, (a, b, q) in enumerate(zip(later.tolist(), freed.tolist(), need, strict=True))
        )

    def _dev_freed(self, victims: I64) -> I64:
        """Per device of the cluster, what ``victims`` give back on it."""
        ssn = self.ssn
        out = np.zeros(ssn.arrays.gpu_node.size, dtype=np.int64)
        if victims.size and out.size:
            devices, milli = search.devices_given_back(ssn, victims)
            used = devices >= 0
            np.add.at(out, devices[used], np.repeat(milli, used.sum(axis=1)))
        return out

    def _fits_with_victims(
        self, room: _Room, nodes: I64, freed: I64, victims: I64, later: I64
    ) -> tuple[BOOL, BOOL]:
        """:meth:`_Room.fits_with` of ``nodes`` with their ``victims`` evicted: the devices
        are read only for a task that takes GPUs (the rule reads no device otherwise)."""
        devices = self._dev_freed(victims) if room.gpus else _NO_DEVICES
        return room.fits_with(nodes, freed, devices, later)

    def _room(self) -> _Room:
        """The task's room on the nodes as the session is at the task's start."""
        if self.room is None:
            self.room = _Room(self.ssn, self.tmpl, self.pool)
        return self.room

    # -- the play ------------------------------------------------------------------------

    def play(self, stmt: Statement) -> v.VictimRefusal | None:
        """Evict for the task on the first node that works and pipeline it there; None when
        done, else why not.

        Every node is tried from the session of the task's start (a node that fails is
        undone), so the answers of the walk and the validation do not depend on the nodes
        tried before: nodes whose every candidate would not cover the task are left out
        first (the walk's victims are among the candidates), and the walk is asked about the
        rest in score order, a growing batch of nodes at a time, until a node takes the
        task. A node where the task would not fit once releases finish even with all its
        candidates evicted (:class:`_Room`) takes no part in the walk: its try would evict
        and undo without asking the queue; it is walked only when the task finds no node, to
        count it in the explanation as the try would have."""
        ssn = self.ssn
        held = v.policy_refusal(ssn, self.job, [self.task])
        if held is not None and held[0] == v.POLICY_NEVER:
            return held  # Volcano: not eligible to preempt (the task is not placed either)
        # the scores are read only on the nodes the candidates' room covers: rows whose score
        # lags (:meth:`Session.feasible`) are scored below when one of them is such a node
        lazy = self.pool.scores_may_lag
        ev = ssn.feasible(self.tmpl) if lazy else ssn.evaluate(self.tmpl)
        ok = ev.ok.copy()
        nodes = np.flatnonzero(ok)
        if nodes.size == 0:
            return (v.INSUFFICIENT, f"task {self.rec.name!r}: {ssn.fit_error(self.tmpl)}")
        none = np.zeros(0, dtype=np.int64)
        if held is None:
            view = self._view()
            covered, roomy = ok & view.covered, ok & view.roomy
        else:  # no candidates
            covered = np.zeros_like(ok)
            roomy = np.zeros_like(ok)
            freed = self._freed(nodes, none)
            covered[nodes] = self._covers(nodes, freed)
            nothing = np.zeros(ssn.arrays.gpu_node.size, dtype=np.int64)
            roomy[nodes] = (
                covered[nodes] & self._room().fits_with(nodes, freed, nothing, without=False)[0]
            )
        # the nodes the candidates' room covers (the most any walk could give), in score
        # order: ascending negated score, the lowest index on a tie; those where the task
        # cannot fit with them all evicted are left out of the walk
        if lazy and ev.unscored is not None and covered[ev.unscored].any():
            ev = ssn.evaluate(self.tmpl)
        walk = np.flatnonzero(roomy)
        out = np.flatnonzero(covered & ~roomy)
        out_neg = -ev.score[out]
        self.monotone_queue = self.pool.monotone_queue
        found = 0
        tried = 0
        for batch, where in _in_score_order(walk, -ev.score[walk], _FIRST_BATCH):
            victims = self.victims(self.candidates_on(batch) if held is None else none)
            found += victims.size
            freed = self._freed(batch, victims)
            room = self._room()
            later = room.later(batch)
            valid = self._covers(batch, freed, later) & ~self._queue_doomed(freed)
            fit = np.zeros_like(valid)
            bare = np.zeros_like(valid)
            judged = np.flatnonzero(valid)
            if judged.size:  # whether all the node's victims, or none, let the task fit
                fit[judged], bare[judged] = self._fits_with_victims(
                    room, batch[judged], freed[judged], victims, later[judged]
                )
            seen = len(self.queue_fails)
            for i in np.flatnonzero(valid).tolist():
                if self._queue_doomed(freed[[i]], seen)[0]:  # refused since the batch began
                    continue
                tried += 1
                node = int(batch[i])
                at = (float(where[i]), node)
                if self._try_node(
                    stmt, node, victims, freed[i], at, bool(fit[i]), bool(bare[i]), later[i]
                ):
                    return None
        # The nodes left out: tried, each would have been undone without asking the queue.
        if out.size:
            victims = self.victims(self.candidates_on(out) if held is None else none)
            found += victims.size
            freed = self._freed(out, victims)
            for i in np.flatnonzero(self._covers(out, freed)).tolist():
                place = (float(out_neg[i]), int(out[i]))
                tried += not self._queue_doomed(freed[[i]], before=place)[0]
        cands = self.candidates(ok) if held is None else none
        return self.diagnose(held, nodes.size, cands, int(covered.sum()), found, tried)

    def _queue_doomed(
        self, freed: I64, since: int = 0, before: tuple[float, int] | None = None
    ) -> BOOL:
        """Per row of ``freed`` (what a node's victims give back): whether the queue refused
        the task on a node whose victims gave back at least as much in every resource (the
        built-in ``allocatable`` rules only loosen as the queue's allocation drops, and every
        victim is of the task's queue); only the refusals from the ``since``-th on are read,
        and with ``before`` only those on nodes before that place in score order (negated
        score, node)."""
        fails = self.queue_fails[since:]
        if before is not None:
            fails = [
                f for f, at in zip(fails, self.queue_fail_at[since:], strict=True) if at < before
            ]
        if not (self.monotone_queue and fails):
            return np.zeros(len(freed), dtype=np.bool_)
        covered: BOOL = np.all(freed[:, None, :] <= np.asarray(fails)[None], axis=2)
        doomed: BOOL = np.any(covered, axis=1)
        return doomed

    def _try_node(
        self,
        stmt: Statement,
        node: int,
        victims: I64,
        freed: I64,
        at: tuple[float, int],
        can: bool,
        bare: bool,
        later: I64,
    ) -> bool:
        """Evict ``node``'s victims in victim order until the task fits there and pipeline
        it; undo and return False when it does not fit (``at``: the node's place in score
        order). The victims before the first that :class:`_Room` lets the task fit after are
        evicted without asking (the task cannot fit before them), and none when no number of
        them lets it (``can``: whether all of them do; ``bare``: whether none needs to go,
        both by :meth:`_Room.fits_with`; ``later``: the node's room once releases finish)."""
        if not can:
            return False  # would be undone, the queue never asked
        ssn = self.ssn
        here = victims[ssn.task_node[victims] == node].tolist()
        if len(here) > 1:  # a victim alone needs no key
            here.sort(key=ssn.victim_key)
        # (``can``: every victim evicted, the task fits; one victim is then the fewest)
        first = 0 if bare else 1 if len(here) == 1 else self._room().first_fit(node, here, later)
        if first is None:
            return False
        mark = stmt.mark()
        self.queue_refused = False
        # With predicates that read the task's shape alone and no pod constraints, the node's
        # predicates pass as they did at the task's start, and while every victim so far went
        # the room is exactly :class:`_Room`'s: from the first victim on, the task fits the
        # node once releases finish and only the queue is left to ask.
        known = self.pool.predicates_by_shape
        k = 0
        while k < first:
            victim = here[k]
            k += 1
            if self.frees_nothing(victim, node):
                known = False
            else:
                stmt.evict(victim, self.reason(victim), ssn.snapshot.jobs[self.job].name)
        fits = self.queue_takes() if known else self.fits(node)
        while not fits and k < len(here):
            victim = here[k]
            k += 1
            if self.frees_nothing(victim, node):
                known = False
                continue
            stmt.evict(victim, self.reason(victim), ssn.snapshot.jobs[self.job].name)
            fits = self.queue_takes() if known else self.fits(node)
        if fits:
            gpus = ssn.choose_gpus(self.task, node, future=True)
            if stmt.attempt(self.task, node, gpus, pipelined=True) is None:
                return True
        elif self.queue_refused and k == len(here):  # the last answer, every victim gone
            self.queue_fails.append(freed)
            self.queue_fail_at.append(at)
        stmt.undo_to(mark)
        return False

    def reason(self, victim: int) -> str:
        ssn = self.ssn
        if self.own_job:
            other = ssn.snapshot.tasks[victim]
            return (
                f"preempted by task {self.rec.name!r} of the same job {self.rec.job!r} "
                f"(task priority {self.rec.priority}, its {other.priority}; Volcano's preempt)"
            )
        mine = ssn.snapshot.jobs[self.job]
        theirs = ssn.snapshot.jobs[int(ssn.task_job[victim])]
        why = (
            f"priority {mine.priority} > {theirs.priority}"
            if mine.priority > theirs.priority
            else "a tier after the priority plugin's chose it: Volcano's tier walk"
        )
        return (
            f"preempted by task {self.rec.name!r} of job {mine.name!r} in queue "
            f"{mine.queue!r} ({why}; Volcano's preempt, first node in score order)"
        )

    def diagnose(
        self,
        held: v.VictimRefusal | None,
        n_nodes: int,
        cands: I64,
        covering: int,
        victims: int,
        tried: int,
    ) -> v.VictimRefusal:
        ssn = self.ssn
        name = self.rec.name
        queue = ssn.snapshot.queues[self.queue].name
        where = f"the {n_nodes} node(s) its predicates pass"
        if held is not None and tried == 0:
            return held
        if self.any_queue_refused:
            return (
                v.BEYOND_DESERVED,
                f"task {name!r}: placing it would take queue {queue!r} beyond its deserved "
                "share (or the queue is not Open)",
            )
        if tried:
            return (
                v.INSUFFICIENT,
                f"task {name!r}: on the {tried} node(s) whose victims cover its request, "
                "evicting them still leaves it unfit (predicates or devices)",
            )
        if cands.size == 0:
            whose = "its own job" if self.own_job else f"another job of queue {queue!r}"
            return (
                v.NO_VICTIMS,
                f"task {name!r}: no running preemptable task of {whose} on {where}, and it "
                "fits on none of them as they are",
            )
        if covering == 0:
            return (
                v.INSUFFICIENT,
                f"task {name!r}: even evicting every candidate of a node would not free its "
                f"request on any of {where}",
            )
        there = f"the {covering} node(s) where its candidates could make room"
        if victims == 0:
            lower = self._priority(cands)
            if lower.size == 0:
                what = "task" if self.own_job else "job"
                return (
                    v.NO_LOWER_PRIORITY,
                    f"task {name!r}: no candidate {what} on {where} has a lower priority",
                )
            ready = ssn.job_count[:, list(READY_STATES)].sum(axis=1)
            jobs = ssn.task_job[lower]
            if bool(np.all(ready[jobs] <= ssn.job_min[jobs])):
                return (
                    v.GANG_WOULD_BREAK,
                    f"task {name!r}: every lower-priority candidate job runs at its min_available",
                )
            return (
                v.NOT_PREEMPTABLE,
                f"task {name!r}: on {there}, the preemptable plugins (Volcano's tier walk) "
                "chose no victim",
            )
        return (
            v.INSUFFICIENT,
            f"task {name!r}: on {there}, the {victims} victim(s) the preemptable plugins allow "
            "would not free its request",
        )


# ------------------------------------------------------------------ the room of a node


class _Room:
    """Whether a task fits a node once releases finish after some of the node's tasks are
    evicted, read without evicting them.

    Evicting a task adds its row as charged on its node (:func:`search.given_back`) to the
    node's releasing column and its milli-GPU to each of its devices
    (:func:`search.devices_given_back`); the fit rule then asks, of the node's room once
    releases finish (allocatable − used + releasing − pipelined), that it hold the request
    (its GPU column charged per the node's devices) and that ``gpu_count`` devices each hold
    the take. Read from the occupancy as it is when asked (before any eviction of a try, or
    after its undo: the occupancy of the task's start), counting every evicted task as
    giving all of that back, which is the most it can give, so a node judged here unable to
    take the task cannot take it in a try either (the predicates and the queue asked on top
    only refuse more)."""

    def __init__(self, ssn: Session, tmpl: TaskTemplate, pool: _Pool) -> None:
        self.ssn = ssn
        self.gpus = int(tmpl.gpu_count)
        self.request: I64 = np.asarray(tmpl.request, dtype=np.int64)
        self.take: I64 = pool.takes(tmpl.gpu_milli) if self.gpus else np.zeros(0, np.int64)

    def later(self, nodes: I64, *, every: bool = False) -> I64:
        """The room of ``nodes`` once releases finish (``every``: ``nodes`` are all the
        nodes in order, read without gathering them)."""
        out: I64 = (
            node_free(self.ssn, future=True) if every else node_free(self.ssn, nodes, future=True)
        )
        return out

    def _req(self, nodes: I64) -> I64:
        """The request as each node of ``nodes`` is charged (a row, or one row for all)."""
        if not self.gpus:
            return self.request
        req = np.repeat(self.request[None, :], nodes.size, axis=0)
        req[:, self.ssn.arrays.spec.gpu_column] = self.gpus * self.take[nodes]
        return req

    def _devices_later(self, nodes: I64) -> tuple[I64, I64]:
        """The flat devices of ``nodes`` and each one's room once releases finish."""
        devices = _devices_of(self.ssn, nodes)
        later: I64 = device_free(self.ssn, future=True, devices=devices)
        return devices, later

    def fits_with(
        self,
        nodes: I64,
        freed: I64,
        dev_freed: I64,
        later: I64 | None = None,
        *,
        without: bool = True,
    ) -> tuple[BOOL, BOOL]:
        """Per node of ``nodes`` (distinct): whether the task fits there once releases
        finish with some tasks on it evicted (``freed``: what they give back on each node,
        a row per node; ``dev_freed``: on each device of the cluster), and whether it does
        without evicting (``later``: :meth:`later` of ``nodes`` if read already; with
        ``without`` false, the second is not worked out and reads false)."""
        later = self.later(nodes) if later is None else later
        if nodes.size == 1:
            return self._fits_one(int(nodes[0]), freed[0], dev_freed, later[0], without)
        req = self._req(nodes)
        ok: BOOL = np.asarray((later + freed >= req).all(axis=1))
        bare: BOOL = ok & np.asarray((later >= req).all(axis=1)) if without else ok & False
        if self.gpus and ok.any():
            a = self.ssn.arrays
            mine, dev_later = self._devices_later(nodes)
            need = np.maximum(self.take[a.gpu_node[mine]], 1)
            owner = np.repeat(np.arange(nodes.size), a.gpu_count[nodes])
            room = dev_later + dev_freed[mine] >= need
            ok &= np.bincount(owner, weights=room, minlength=nodes.size) >= self.gpus
            if bare.any():
                room = dev_later >= need
                bare &= np.bincount(owner, weights=room, minlength=nodes.size) >= self.gpus
        return ok, bare & ok

    def _fits_one(
        self, node: int, freed: I64, dev_freed: I64, later: I64, without: bool
    ) -> tuple[BOOL, BOOL]:
        """:meth:`fits_with` on one node, in plain numbers (``freed`` and ``later``: its
        rows)."""
        room: list[int] = later.tolist()
        req: list[int] = self.request.tolist()
        if self.gpus:
            req[self.ssn.arrays.spec.gpu_column] = self.gpus * int(self.take[node])
        ok = all(r + f >= q for r, f, q in zip(room, freed.tolist(), req, strict=True))
        bare = without and ok and all(r >= q for r, q in zip(room, req, strict=True))
        if self.gpus and ok:
            a = self.ssn.arrays
            lo, hi = int(a.gpu_offset[node]), int(a.gpu_offset[node + 1])
            dev_later = device_free(
                self.ssn, future=True, devices=np.arange(lo, hi, dtype=np.int64)
            ).tolist()
            need = max(int(self.take[node]), 1)
            back = dev_freed[lo:hi].tolist()
            ok = sum(r + b >= need for r, b in zip(dev_later, back, strict=True)) >= self.gpus
            bare = bare and sum(r >= need for r in dev_later) >= self.gpus
        return np.array([ok], dtype=np.bool_), np.array([bare and ok], dtype=np.bool_)

    def first_fit(self, node: int, tasks: list[int], later: I64 | None = None) -> int | None:
        """The fewest of ``tasks`` (on ``node``, in eviction order) after whose eviction the
        task fits ``node`` once releases finish; None when not even all of them do
        (``later``: the node's room once releases finish, if read already)."""
        ssn = self.ssn
        listed = np.asarray(tasks, dtype=np.int64)
        where = np.asarray([node], dtype=np.int64)
        # a few victims on one node: plain numbers, one victim added at a time
        room: list[int] = (self.later(where)[0] if later is None else later).tolist()
        req: list[int] = self.request.tolist()
        rows: list[list[int]] = search.given_back(ssn, listed).tolist()
        devices: list[list[int]] = []
        milli: list[int] = []
        dev_room: list[int] = []
        lo = need = 0
        if self.gpus:
            req[ssn.arrays.spec.gpu_column] = self.gpus * int(self.take[node])
            mine, dev_later = self._devices_later(where)
            lo = int(mine[0]) if mine.size else 0
            dev_room = dev_later.tolist()
            need = max(int(self.take[node]), 1)
            given, each = search.devices_given_back(ssn, listed)
            devices, milli = given.tolist(), each.tolist()
        for k in range(len(rows) + 1):
            if k:
                room = [r + g for r, g in zip(room, rows[k - 1], strict=True)]
                for d in devices[k - 1] if self.gpus else ():
                    if lo <= d < lo + len(dev_room):
                        dev_room[d - lo] += milli[k - 1]
            if all(r >= q for r, q in zip(room, req, strict=True)) and (
                not self.gpus or sum(r >= need for r in dev_room) >= self.gpus
            ):
                return k
        return None


class _View:
    """Per node, for a job's pass and one template: what evicting every candidate there
    would give back, whether the victims' room would cover the task then (Volcano's
    validation, :meth:`_TaskPlay._covers`) and whether the task would fit (:class:`_Room`).
    Each is a function of the node's occupancy and tasks alone, so the view is kept across
    the job's tasks and brought up to date through the change log: only the nodes it names
    since the view's cursor are worked out again, and, when another job of the queue plays
    it next, the nodes where either job has tasks (the candidates differ only there)."""

    def __init__(self, n_nodes: int, n_resources: int, n_devices: int) -> None:
        #: The job whose candidates the view holds, and the change log's lineage and
        #: position when it was last brought up to date.
        self.job = -1
        self.lineage: object = None
        self.cursor = 0
        #: What evicting every candidate gives back on each node and each device (the
        #: view of no template), and for the view of a template, whether that covers it
        #: and lets it fit.
        self.freed: I64 = np.zeros((n_nodes, n_resources), dtype=np.int64)
        self.dev_freed: I64 = np.zeros(n_devices, dtype=np.int64)
        self.covered: BOOL = np.zeros(n_nodes, dtype=np.bool_)
        self.roomy: BOOL = np.zeros(n_nodes, dtype=np.bool_)


class _Pool:
    """What the loop reads for every task, kept for its run: the tasks that can be
    candidates by node (running or bound, ``preemptable`` on task and job, when the loop
    starts: no task becomes running or bound while it runs but one whose eviction is undone,
    and the candidates are read among these as they are then), job and task priorities, the
    weights turning amounts into fractions of the cluster, each GPU take's milli-GPU per node,
    and the :class:`_View` of the job played."""

    def __init__(self, ssn: Session) -> None:
        self.ssn = ssn
        tasks = np.flatnonzero(in_states(ssn.task_state, v.RUNNING_STATES)).astype(np.int64)
        tasks = tasks[v.evictable(ssn, tasks)]
        nodes = ssn.task_node[tasks]
        by_node = np.argsort(nodes, kind="stable")
        self.tasks: I64 = tasks[by_node]
        self.offsets: I64 = np.searchsorted(
            nodes[by_node], np.arange(ssn.arrays.n_nodes + 1, dtype=np.int64)
        ).astype(np.int64)
        self._views: dict[tuple[int, bool, int], _View] = {}
        self._job_nodes: dict[int, I64] = {}
        self._shapes: dict[tuple[object, ...], int] = {}
        #: Whether the ``preemptable`` plugins are the package's own.
        self.drf_built_in = ssn.points.built_in("preemptable")
        #: Whether every ``allocatable`` rule is a built-in one (loosening as a queue gives).
        self.monotone_queue = ssn.points.built_in("allocatable")
        #: Whether every predicate reads the task's shape alone and no task has a pod
        #: constraint: a node's predicates then pass or not whatever it runs.
        self.predicates_by_shape = ssn.points.shape_only and pod_rules(ssn) is None
        #: Whether a task's evaluation may be read with its scores lagging on the rows
        #: changed since it was last scored (:attr:`Dispatch.scores_may_lag`, and no pod
        #: constraint masks the evaluation): the loop scores them only when it reads one.
        self.scores_may_lag = ssn.points.scores_may_lag and pod_rules(ssn) is None
        #: Each pool task's place in its job's victim order when it never moves (every
        #: plugin ordering victims a built-in one: :func:`search.job_ranks`), else None;
        #: read for a task the first time it is a candidate the walk is asked about
        #: (``_ranked``), as most pool tasks never are.
        self._ranks: I64 | None = None
        self._ranked: BOOL = np.zeros(0, dtype=np.bool_)
        if ssn.points.victim_order_by_job_and_queue():
            self._ranks = np.zeros(ssn.task_req.shape[0], dtype=np.int64)
            self._ranked = np.zeros(ssn.task_req.shape[0], dtype=np.bool_)
        self._priorities: tuple[I64, I64] | None = None
        self._inverse: F64 | None = None
        self._takes: dict[int, I64] = {}

    def priorities(self) -> tuple[I64, I64]:
        """Each job's priority, and each task's."""
        if self._priorities is None:
            snap = self.ssn.snapshot
            self._priorities = (
                np.array([j.priority for j in snap.jobs], dtype=np.int64),
                np.array([t.priority for t in snap.tasks], dtype=np.int64),
            )
        return self._priorities

    def on(self, nodes: I64) -> I64:
        """The pool's tasks on ``nodes``, ascending."""
        if nodes.size == 1:  # a node's tasks ascend already
            node = int(nodes[0])
            one: I64 = self.tasks[int(self.offsets[node]) : int(self.offsets[node + 1])].copy()
            return one
        lo, hi = self.offsets[nodes], self.offsets[nodes + 1]
        counts = hi - lo
        first = np.cumsum(counts) - counts
        at = np.repeat(lo - first, counts) + np.arange(int(counts.sum()), dtype=np.int64)
        out: I64 = np.sort(self.tasks[at])
        return out

    def view(self, queue: int, own_job: bool, template: int) -> _View:
        """The view of a pass (``own_job``) for tasks of one :meth:`shape`, ``template``
        (-1: what the candidates give back, for every shape) of the jobs of ``queue``: one
        at a time plays it (:attr:`_View.job`)."""
        got = self._views.get((queue, own_job, template))
        if got is None:
            a = self.ssn.arrays
            got = self._views[queue, own_job, template] = _View(
                a.n_nodes, self.ssn.task_req.shape[1], a.gpu_node.size if template < 0 else 0
            )
        return got

    def ranks(self, cands: I64) -> I64:
        """Per task (indexed by task), each of ``cands``' place in its job's victim order
        (``victim_order`` key, then name): the answers here compare tasks of one job only."""
        if self._ranks is None:
            return _victim_ranks(self.ssn, cands)
        missing = cands[~self._ranked[cands]]
        if missing.size:
            self._ranks[missing] = search.job_ranks(self.ssn, missing)
            self._ranked[missing] = True
        return self._ranks

    def shape(self, play: _TaskPlay) -> int:
        """A number for what the views of ``play``'s task read of it (its request, as the
        queue and as its nodes are charged, and its GPU request): tasks alike share views."""
        g = play.rec.gpu_request
        tmpl = play.tmpl
        key = (
            self.ssn.task_req[play.task].tobytes(),
            np.asarray(tmpl.request, dtype=np.int64).tobytes(),
            tmpl.gpu_count,
            tmpl.gpu_milli,
            None if g is None else (g.count, g.milli),
        )
        return self._shapes.setdefault(key, len(self._shapes))

    def job_nodes(self, job: int) -> I64:
        """The nodes of the pool's tasks of ``job``: the only nodes where its candidates
        and another job's of its queue can differ."""
        if not self._job_nodes:
            jobs = self.ssn.task_job[self.tasks]
            nodes = self.ssn.task_node[self.tasks]
            # the distinct (job, node) pairs, by job then node: one sort, then a slice a job
            at = np.lexsort((nodes, jobs))
            jobs, nodes = jobs[at], nodes[at]
            pairs = _starts(jobs, nodes)
            jobs, nodes = jobs[pairs], nodes[pairs]
            for a, b in itertools.pairwise([*_starts(jobs).tolist(), jobs.size]):
                self._job_nodes[int(jobs[a])] = nodes[a:b]
        got = self._job_nodes.get(job)
        if got is None:
            got = self._job_nodes[job] = np.zeros(0, dtype=np.int64)
        return got

    def takes(self, milli: int) -> I64:
        """Milli-GPU a take of ``milli`` holds on each device of every node."""
        out = self._takes.get(milli)
        if out is None:
            a = self.ssn.arrays
            out = self._takes[milli] = np.asarray(
                device_take(milli, a.gpu_capacity, a.gpu_sharing), dtype=np.int64
            )
        return out

    def inverse_totals(self) -> F64:
        """:func:`rules.inverse_totals` (the cluster's allocatable does not move)."""
        if self._inverse is None:
            self._inverse = v.inverse_totals(self.ssn)
        return self._inverse


# ------------------------------------------------------------------ Volcano's answers


#: The answers given here that judge each node's candidates alone when asked about every
#: node's at once (:func:`_by_job_and_node`): the walk asks them once for all nodes.
_BY_NODE = frozenset({"gang", "drf"})


def _victim_ranks(ssn: Session, cands: I64) -> I64:
    """Per task (indexed by task), each candidate's place in its job's victim order
    (``victim_order`` key, then name): the answers here compare tasks of one job only."""
    rank = np.zeros(ssn.task_req.shape[0], dtype=np.int64)
    rank[cands] = search.job_ranks(ssn, cands)
    return rank


def _in_score_order(nodes: I64, neg: I64 | F64, first: int) -> Iterator[tuple[I64, F64]]:
    """``nodes`` in score order (ascending ``neg``, the negated score, then index) a batch
    at a time, ``first`` nodes then four times as many each time, with each one's ``neg``:
    each batch is picked by a partition and only it is sorted, so a task that finds its node
    early sorts a few nodes, not all."""
    neg = np.asarray(neg, dtype=np.float64)
    size = first
    while nodes.size:
        kth = np.partition(neg, size - 1)[size - 1] if nodes.size > size else np.nan
        if np.isnan(kth):  # the rest at once (NaN sorts last, as a sort of them does)
            at = np.lexsort((nodes, neg))
            yield nodes[at], neg[at]
            return
        top = np.flatnonzero(neg <= kth)
        at = top[np.lexsort((nodes[top], neg[top]))[:size]]
        yield nodes[at], neg[at]
        rest = np.ones(nodes.size, dtype=np.bool_)
        rest[at] = False
        nodes, neg = nodes[rest], neg[rest]
        size *= 4


def _starts(*keys: I64) -> I64:
    """Where runs of equal ``keys`` (read together, each sorted into runs) start."""
    new = np.ones(keys[0].size, dtype=np.bool_)
    if keys[0].size > 1:
        differs = keys[0][1:] != keys[0][:-1]
        for key in keys[1:]:
            differs |= key[1:] != key[:-1]
        new[1:] = differs
    out: I64 = np.flatnonzero(new)
    return out


def _devices_of(ssn: Session, nodes: I64) -> I64:
    """The flat indices of the GPU devices of ``nodes``, node by node."""
    a = ssn.arrays
    lo, hi = a.gpu_offset[nodes], a.gpu_offset[nodes + 1]
    counts = hi - lo
    first = np.cumsum(counts) - counts
    out: I64 = np.repeat(lo - first, counts) + np.arange(int(counts.sum()), dtype=np.int64)
    return out


def _rows_of(ssn: Session, nodes: I64) -> I64:
    """Per node of the cluster, its place in ``nodes`` (distinct), -1 when absent."""
    at = np.full(ssn.arrays.n_nodes, -1, dtype=np.int64)
    at[nodes] = np.arange(nodes.size, dtype=np.int64)
    return at


#: :func:`_by_job_and_node`'s answer: the candidates sorted, their jobs, each one's place in
#: its group, and where each was among the candidates given.
_Grouping = tuple[I64, I64, I64, I64]


def _by_job_and_node(ssn: Session, cands: I64, rank: I64) -> _Grouping:
    """``cands`` by (job, node), each group in victim order: the candidates so sorted, their
    jobs, each one's place in its group and its place in ``cands`` (Volcano's plugins are
    asked about one node's candidates and judge a job's tasks one after another)."""
    jobs, nodes = ssn.task_job[cands], ssn.task_node[cands]
    # (a candidate's job, node and rank tell it apart: one sort of one combined key)
    at = search.lexical_order(jobs, nodes, rank[cands])
    c, j = cands[at], jobs[at]
    first = np.zeros(c.size, dtype=np.int64)
    starts = _starts(j, nodes[at])
    first[starts] = starts
    np.maximum.accumulate(first, out=first)  # each one's group's start
    place: I64 = np.arange(c.size, dtype=np.int64) - first
    return c, j, place, at


def _gang_keeps(
    ssn: Session,
    cands: I64,
    rank: I64,
    states: tuple[int, ...] = READY_STATES,
    *,
    grouping: _Grouping | None = None,
) -> BOOL:
    """Volcano's gang ``preemptableFn``, as a mask over ``cands``: of one node's candidates,
    at most ``ready − min_available`` tasks of each job (the first in victim order:
    ``rank``); ``states``: those counted as ready; ``grouping``: :func:`_by_job_and_node` of
    ``cands`` if read)."""
    keep = np.zeros(cands.size, dtype=np.bool_)
    if cands.size:
        _, j, place, at = _by_job_and_node(ssn, cands, rank) if grouping is None else grouping
        ready: I64 = ssn.job_count[j] @ _selector(states, ssn.job_count.shape[1])
        keep[at] = place < ready - ssn.job_min[j]
    return keep


@functools.cache
def _selector(states: tuple[int, ...], n_states: int) -> I64:
    """A row of ones at ``states`` (of ``n_states``): a task counter row's dot with it is
    the count of tasks in those states."""
    out = np.zeros(n_states, dtype=np.int64)
    out[list(states)] = 1
    out.flags.writeable = False
    return out


def _drf_answer(
    ssn: Session,
    job: int,
    task: int,
    cands: I64,
    rank: I64,
    inv: F64,
    *,
    grouping: _Grouping | None = None,
) -> I64:
    """Volcano's drf ``preemptableFn`` for one preemptor task: the preemptor's share is its
    job's allocation now plus this task's request; a candidate is kept while its job's share,
    after it and the job's candidates before it (victim order) are taken away, stays at or
    above it (within 1e-6). ``grouping``: :func:`_by_job_and_node` of ``cands`` if read."""
    if cands.size == 0:
        return cands
    out: I64 = np.sort(cands[_drf_keeps(ssn, job, task, cands, rank, inv, grouping=grouping)])
    return out


def _drf_keeps(
    ssn: Session,
    job: int,
    task: int,
    cands: I64,
    rank: I64,
    inv: F64,
    *,
    grouping: _Grouping | None = None,
) -> BOOL:
    """Which of ``cands`` :func:`_drf_answer` keeps."""
    keep = np.zeros(cands.size, dtype=np.bool_)
    if cands.size == 0:
        return keep
    mine = float(((ssn.job_allocated[job] + ssn.task_req[task]) * inv).max(initial=0.0))
    # by (job, node), each group in victim order; integer running sums of what goes
    c, j, place, at = _by_job_and_node(ssn, cands, rank) if grouping is None else grouping
    req = ssn.task_req[c]
    cum = np.cumsum(req, axis=0)
    first = np.arange(c.size) - place
    left = ssn.job_allocated[j].astype(np.int64) - (cum - cum[first] + req[first])
    theirs = (left * inv).max(axis=1, initial=0.0)
    keep[at] = (mine < theirs) | (np.abs(mine - theirs) <= 1e-6)
    return keep
