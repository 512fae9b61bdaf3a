"""consolidate: move a few running tasks so that a pending gang fits (defragmentation).

Theory of operation
-------------------
A gang can wait forever although the cluster has room for it in total: the room is spread
over nodes in pieces too small for its tasks. ``consolidate`` finds, for every admitted,
valid, starving job (queue order, then job order; the preemptors of ``preempt`` and
``reclaim``), a small set of running tasks to *move*: each moved task is evicted (reason
``consolidation: moved to node ...``) and, in the same statement, reserved elsewhere (a
``Pipelined`` decision for the same task on another node); the gang's claim — the pending
tasks that bring it to its minimum (``victims.rules.needed_tasks``) — is reserved on the room
the moves free. Nothing is lost: every moved task has its new place, so unlike preemption no
priority rule applies. The next cycles bind the reservations as resources free.

Rules (each move set is checked in a trial statement, and only a set that passes all of them
is committed, all or nothing); the victim rules are :mod:`gangsched.actions.victims.rules`'s:

* the preemptor may evict at all (``policy_refusal``: no ``preemption_policy: Never`` task in
  its claim, its ``preemption_delay`` passed); a claim that fits without moves is left to
  ``allocate``;
* movable tasks are running or bound tasks of other jobs, ``preemptable`` on task and job
  (``evictable``), of the queues the ``queues`` argument names (default: all), of jobs without
  a hard network topology;
* gangs move whole or keep their minimum: a job gives its surplus (``spare_tasks``) one task
  at a time, or all of its running tasks together when it may go whole (``may_go_whole``);
* at most ``max-moves`` tasks move per cycle (default 8, over all jobs of the cycle);
* disruption budgets hold (:func:`gangsched.session.rules.disruption.would_break` is empty,
counting the
  evictions made earlier in the cycle);
* no queue goes below its guarantee: on every resource a moved task holds, its queue's running
  tasks keep at least the queue's ``guarantee``;
* every claimed task and every moved task is placed (best-scored node among those where it
  fits once the releases finish, the claim first, a moved task never on its own node), each
  claimed task passes its queue's ``allocatable`` check, and the job is ``job_pipelined``;
  a hard-topology claim stays inside one allowed domain (lowest tier first).

Each trial is one :class:`~gangsched.session.statement.Statement`: the moved tasks are
evicted, the claim reserved, and each moved task reserved on its new node
(:meth:`~gangsched.session.statement.Statement.move`); a trial that does not pass, and every
trial but the chosen set's, is undone by the statement's own undo.

The search is greedy, checked by the trial placements above: starting from no move, each step
tries the movable units (a surplus task or a whole job) on the nodes where one claimed task
lacks the least room, at most :data:`CANDIDATES_PER_STEP` of them, and keeps the one that
lets the most claimed tasks be placed (then fewer moves, then the smaller unit); it stops at
the first set that passes. The set is then minimised (a unit whose removal keeps it passing
goes). It is a heuristic: a set that passes is always valid, but a smaller one may exist, and
a set may be missed. Every trial counts against ``max-trials`` (default 256); when the budget
runs out, or no set is found, the job's ``preemption_reasons`` entry says so
(:data:`NO_PLAN`, :data:`SEARCH_BUDGET`, :data:`NO_MOVABLE`, :data:`MOVE_LIMIT`).

Determinism: units are ordered by the room their node lacks, then size, then the job's
creation (newest first) and name; nodes tie to the lowest index.

The moved task's two places: in the decisions it is evicted from its node and reserved on
another. A caller that cannot list one pod in two places keeps it ``Releasing`` on the old
node until the pod is gone, then lists it ``Pipelined`` on the reserved node (the reservation
stands for the re-created pod); a caller that re-creates it ``Pending`` instead loses the
reservation, and the pod is placed anew.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from gangsched.actions._base import ConfiguredAction
from gangsched.actions.victims import rules as v
from gangsched.actions.victims.loop import realise_reservations
from gangsched.actions.victims.rules import BOOL, I64
from gangsched.config import arg_int
from gangsched.errors import ConfigError
from gangsched.model import TopologyMode
from gangsched.session.arrays import TaskTemplate, build_templates, template_key
from gangsched.session.rules import disruption
from gangsched.session.statement import Statement
from gangsched.session.task_states import in_states

if TYPE_CHECKING:
    from gangsched.session.core import Session

__all__ = [
    "CANDIDATES_PER_STEP",
    "CONSOLIDATION",
    "MOVE_LIMIT",
    "NO_MOVABLE",
    "NO_PLAN",
    "SEARCH_BUDGET",
    "ConsolidateAction",
]

#: Every consolidation eviction's reason starts with this word.
CONSOLIDATION = "consolidation"
NO_PLAN = "NoConsolidation"
NO_MOVABLE = "NoMovableTasks"
SEARCH_BUDGET = "ConsolidationBudget"
MOVE_LIMIT = "MoveLimit"

#: Units tried at each step of the greedy search (the most promising first).
CANDIDATES_PER_STEP = 16
#: Upper bounds of the arguments.
MAX_MOVES = 1024
MAX_TRIALS = 100_000


@dataclass(frozen=True, slots=True)
class _Unit:
    job: int
    tasks: tuple[int, ...]
    key: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class _Trial:
    ok: bool
    placed: int  # claimed tasks placed
    where: dict[int, int]  # moved task → its new node


def _template(ssn: Session, task: int) -> TaskTemplate:
    """The task's template; a running task (which has none: templates group pending tasks)
    gets one, appended to the session's templates, shared by running tasks of one shape."""
    i = int(ssn.template_of[task])
    if i >= 0:
        return ssn.templates[i]
    memo = ssn.cache.move_templates
    key = template_key(ssn.snapshot.tasks[task])
    i = memo.get(key, -1)
    if i < 0:
        (built,), _ = build_templates(ssn.snapshot, ssn.task_req, [task])
        i = len(ssn.templates)
        ssn.templates.append(replace(built, index=i))
        memo[key] = i
    ssn.template_of[task] = i
    return ssn.templates[i]


def _queue_names(arguments: Mapping[str, object]) -> frozenset[str] | None:
    """The ``queues`` argument: a list of queue names or one comma-separated string; absent
    (or empty) = every queue."""
    raw = arguments.get("queues")
    if raw is None:
        return None
    if isinstance(raw, str):
        names = [part.strip() for part in raw.split(",") if part.strip()]
    elif isinstance(raw, list | tuple) and all(isinstance(x, str) and x for x in raw):
        names = list(raw)
    else:
        raise ConfigError(
            f"expected a list of queue names or a comma-separated string, got {raw!r}"[:200],
            kind="action",
            name="consolidate",
            field="arguments.queues",
        )
    return frozenset(names) if names else None


class ConsolidateAction(ConfiguredAction):
    """Move running tasks so that a pending gang fits; see the module docstring."""

    name = "consolidate"
    known_arguments = ("max-moves", "max-trials", "queues")

    def __init__(self, arguments: Mapping[str, object]) -> None:
        super().__init__(arguments)
        self.max_moves = arg_int(
            arguments, "max-moves", 8, plugin=self.name, kind="action", minimum=0, maximum=MAX_MOVES
        )
        self.max_trials = arg_int(
            arguments,
            "max-trials",
            256,
            plugin=self.name,
            kind="action",
            minimum=1,
            maximum=MAX_TRIALS,
        )
        self.queues = _queue_names(arguments)

    def execute(self, ssn: Session) -> None:
        realise_reservations(ssn)
        left = self.max_moves
        for j, claim in v.claimants(ssn):
            refusal = v.policy_refusal(ssn, j, claim)
            moved = 0
            if refusal is None:
                search = _Search(ssn, self, j, claim, left)
                moved, refusal = search.run()
            if refusal is None:
                left -= moved
            if refusal is None or refusal[0]:  # no code: the claim fits as it is, nothing to say
                v.note_refusal(ssn, j, self.name, refusal)


class _Search:
    """The greedy move search for one pending gang."""

    def __init__(
        self, ssn: Session, action: ConsolidateAction, job: int, claim: list[int], moves: int
    ) -> None:
        self.ssn = ssn
        self.action = action
        self.job = job
        self.claim = claim
        self.moves = moves
        self.queue = int(ssn.job_queue[job])
        self.name = ssn.snapshot.jobs[job].name
        self.trials = 0
        self.among: BOOL | None = None
        #: The moved tasks' new nodes, found by a trial and named in the committed reasons.
        self._plan: dict[int, int] = {}
        self.inv_total = v.inverse_totals(ssn)

    # ------------------------------------------------------------------ candidates

    def movable(self) -> I64:
        ssn = self.ssn
        snap = ssn.snapshot
        running = in_states(ssn.task_state, v.RUNNING_STATES) & (ssn.task_job != self.job)
        cands = np.flatnonzero(running).astype(np.int64)
        if self.action.queues is not None:
            allowed = np.array([q.name in self.action.queues for q in snap.queues], dtype=np.bool_)
            cands = cands[allowed[ssn.job_queue[ssn.task_job[cands]]]]
        hard = np.array(
            [
                j.network_topology is not None and j.network_topology.mode is TopologyMode.HARD
                for j in snap.jobs
            ],
            dtype=np.bool_,
        )
        cands = cands[~hard[ssn.task_job[cands]]]
        cands = cands[v.evictable(ssn, cands)]
        out: I64 = cands[~disruption.exhausted(ssn, cands)]
        return out

    def units(self, cands: I64) -> list[_Unit]:
        ssn = self.ssn
        snap = ssn.snapshot
        need = self._one_claim_row()
        lack = np.maximum(need[None, :] - ssn.future_idle(), 0) * self.inv_total  # (nodes, r)
        gap = lack.sum(axis=1)
        useful = np.zeros(ssn.arrays.n_nodes, dtype=np.bool_)
        for i in sorted({int(ssn.template_of[t]) for t in self.claim}):
            useful |= ssn.evaluate(ssn.templates[i]).ok
        if self.among is not None:
            useful &= self.among
        by_job: dict[int, list[int]] = {}
        for t in cands.tolist():
            by_job.setdefault(int(ssn.task_job[t]), []).append(int(t))
        out: list[_Unit] = []
        for j, tasks in sorted(by_job.items()):
            rec = snap.jobs[j]
            tasks.sort(key=lambda t: (float(gap[ssn.task_node[t]]), snap.tasks[t].name))
            spare = v.spare_tasks(ssn, j, [t for t in tasks if useful[ssn.task_node[t]]])
            for t in spare:
                size = float((ssn.task_req[t] * self.inv_total).sum())
                key = (float(gap[ssn.task_node[t]]), 1, size, -rec.creation, snap.tasks[t].name)
                out.append(_Unit(job=j, tasks=(t,), key=key))
            on_useful = any(useful[ssn.task_node[t]] for t in tasks)
            if not spare and on_useful and v.may_go_whole(ssn, j, tasks):
                size = float((ssn.task_req[tasks].sum(axis=0) * self.inv_total).sum())
                best = min(float(gap[ssn.task_node[t]]) for t in tasks)
                key = (best, len(tasks), size, -rec.creation, rec.name)
                out.append(_Unit(job=j, tasks=tuple(tasks), key=key))
        out.sort(key=lambda u: u.key)
        return out

    def _one_claim_row(self) -> I64:
        ssn = self.ssn
        rows = ssn.task_req[self.claim]
        out: I64 = rows.max(axis=0) if rows.size else np.zeros(ssn.task_req.shape[1], np.int64)
        return out

    # ------------------------------------------------------------------ trials

    def _guarantee_ok(self, moved: Sequence[int]) -> bool:
        ssn = self.ssn
        snap = ssn.snapshot
        by_queue: dict[int, list[int]] = {}
        for t in moved:
            by_queue.setdefault(int(ssn.job_queue[ssn.task_job[t]]), []).append(t)
        running = in_states(ssn.task_state, v.RUNNING_STATES)
        for q, tasks in by_queue.items():
            floor = snap.queues[q].guarantee
            if not floor:
                continue
            mine = running & (ssn.job_queue[ssn.task_job] == q)
            held = ssn.task_req[mine].sum(axis=0)
            out = ssn.task_req[tasks].sum(axis=0)
            dims = out > 0
            if np.any(held[dims] - out[dims] < ssn.vector(floor)[dims]):
                return False
        return True

    def _pick(self, t: int, exclude: int) -> int | None:
        return v.best_node(self.ssn, _template(self.ssn, t), None, exclude)

    def trial(self, units: Sequence[_Unit], *, commit: bool = False) -> _Trial:
        ssn = self.ssn
        moved = [t for u in units for t in u.tasks]
        fail = _Trial(ok=False, placed=0, where={})
        if disruption.would_break(ssn, moved) or not self._guarantee_ok(moved):
            return fail
        if not commit:
            self.trials += 1
        old = {t: int(ssn.task_node[t]) for t in moved}
        stmt = Statement(ssn)
        plan = self._plan if commit else {}
        try:
            names = ssn.arrays.node_names
            for t in moved:
                spot = f" to node {names[plan[t]]!r}" if t in plan else ""
                stmt.evict(
                    t,
                    f"{CONSOLIDATION}: moved{spot} (reserved there) to make room for job "
                    f"{self.name!r}",
                    self.name,
                )
            placed = 0
            for t in self.claim:
                tmpl = ssn.templates[int(ssn.template_of[t])]
                if not ssn.points.allocatable(self.queue, tmpl):
                    break
                node = v.best_node(ssn, tmpl, self.among)
                if node is None:
                    break
                gpus = ssn.choose_gpus(t, node, future=True)
                if stmt.attempt(t, node, gpus, pipelined=True) is not None:
                    break
                placed += 1
            if placed < len(self.claim) or not ssn.points.job_pipelined(self.job):
                return _Trial(ok=False, placed=placed, where={})
            where: dict[int, int] = {}
            for t in moved:
                home = self._pick(t, old[t])
                if home is None or not stmt.move(t, home, ssn.choose_gpus(t, home, future=True)):
                    return _Trial(ok=False, placed=placed, where={})
                where[t] = home
            if commit:
                stmt.commit()
                if not stmt.ops:  # the gate undid it (a gang would be partial)
                    return _Trial(ok=False, placed=placed, where={})
            return _Trial(ok=True, placed=placed, where=where)
        finally:
            if not stmt.finished:
                stmt.discard()

    # ------------------------------------------------------------------ search

    def run(self) -> tuple[int, v.VictimRefusal | None]:
        """``(tasks moved, None)`` on success, else ``(0, refusal)``; a refusal with an empty
        code means there was nothing to do (the claim fits without moves)."""
        ssn = self.ssn
        n = len(self.claim)
        best: tuple[list[_Unit], BOOL | None] | None = None
        why: v.VictimRefusal | None = None
        cands = self.movable()
        for among in v.domains(ssn, self.job):
            self.among = among
            if self.trial([]).ok:
                return 0, ("", "")
            if self.moves <= 0:
                return 0, (
                    MOVE_LIMIT,
                    f"max-moves {self.action.max_moves} already used this cycle",
                )
            units = self.units(cands)
            if not units:
                why = why or (
                    NO_MOVABLE,
                    f"no running task may move to make room for {n} task(s) (preemptable, "
                    "gang minimum kept, disruption budgets, queues allowed)",
                )
                continue
            found = self.greedy(units)
            if isinstance(found, str):
                why = (SEARCH_BUDGET, found)
                break
            if found is None:
                why = why or (
                    NO_PLAN,
                    f"no set of at most {self.moves} move(s) among {len(cands)} movable "
                    f"task(s) makes room for {n} task(s)",
                )
                continue
            size = sum(len(u.tasks) for u in found)
            if best is None or size < sum(len(u.tasks) for u in best[0]):
                best = (found, among)
        if best is None:
            return 0, why or (NO_PLAN, f"no move makes room for {n} task(s)")
        units, self.among = best
        probe = self.trial(units)
        self._plan = probe.where
        done = self.trial(units, commit=True)
        if not done.ok:  # the replay is deterministic; kept as a guard
            return 0, (NO_PLAN, "the chosen moves no longer fit")
        moved = [t for u in units for t in u.tasks]
        hit = sorted({ssn.snapshot.jobs[u.job].name for u in units})
        ssn.note_job(
            self.job,
            "Pipelined",
            f"consolidate: {n} task(s) reserved, moving {len(moved)} task(s) of {hit}",
        )
        return len(moved), None

    def greedy(self, units: list[_Unit]) -> list[_Unit] | str | None:
        """The move set (units), None when none was found, or why the trial budget ran out."""
        chosen: list[_Unit] = []
        size = 0
        budget = self.action.max_trials
        while True:
            options: list[tuple[tuple[Any, ...], _Unit, bool]] = []
            tried = 0
            for u in units:
                if u in chosen or size + len(u.tasks) > self.moves:
                    continue
                if tried >= CANDIDATES_PER_STEP:
                    break
                if self.trials >= budget:
                    return (
                        f"the search budget of {budget} trial placements (max-trials) ran out "
                        f"after {len(chosen)} unit(s)"
                    )
                tried += 1
                r = self.trial([*chosen, u])
                options.append(((not r.ok, -r.placed, len(u.tasks), u.key), u, r.ok))
            if not options:
                return None
            _, pick, ok = min(options, key=lambda o: o[0])
            chosen.append(pick)
            size += len(pick.tasks)
            if ok:
                break
        for u in reversed(list(chosen)):
            fewer = [x for x in chosen if x is not u]
            if fewer and self.trials < budget and self.trial(fewer).ok:
                chosen = fewer
        return chosen
