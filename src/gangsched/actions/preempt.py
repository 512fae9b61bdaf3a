"""preempt: a starving job takes resources from lower-priority jobs of its own queue, and a
job's higher-priority pending task takes them from lower-priority tasks of the same job.

Theory of operation
-------------------
Carried reservations are bound first (see ``victims.loop.realise_reservations``). Then, queue by
queue in queue order, two passes run.

*Between jobs.* Every admitted, valid, starving job of the queue, in job order, claims the
pending tasks that bring it to its gang minimum. Candidate victims are the running or bound
tasks of *other* jobs of the *same* queue whose job priority is strictly lower than the
preemptor's (this action owns that rule; the ``priority`` plugin permits what it leaves), with
``preemptable`` set on the task and on its job (``victims.rules.evictable``); the ``preemptable``
plugin point narrows them (tier by tier, the first tier with an answer decides). Victims are
chosen as surplus bundles by the shared gang-aware search (a gang gives only tasks above its
minimum, as Volcano's gang plugin allows; with ``allowWholeBundle: true``, or as
``gangpreempt``, a gang that may go whole is a bundle too), and evicted only if the whole claim
is then pipelined; the claim is reserved, never bound in this cycle.

*Inside a job.* Then every admitted, valid job of the queue with pending tasks, in job order,
lets its pending tasks (task order; best-effort tasks excluded) evict running or bound tasks of
the *same* job whose task priority is strictly lower, ``preemptable`` on the task and the job.
The job's own gang stays whole: at most ``ready − min_available`` of its tasks go (and no role
below its ``min_task_member``), so a job at its minimum evicts nothing of its own. Each pending
task is one statement: on every node holding such victims, victims are evicted in victim order
(``victim_order`` key, then name) until the task fits there once the releases finish and its
queue's ``allocatable`` check passes; the node needing the fewest victims wins (then the lowest
highest victim priority, the best node score, the lowest index), the task is pipelined there and
the statement committed. A task without a node stops its job's pass (later tasks of the job are
lower in task order). The ``preemptable`` plugin point is not asked here: its answers compare
one job with another (``priority``: job priorities, ``drf``: job shares), so they mean nothing
between tasks of one job; the action applies the within-job rules itself (those of Volcano's
priority, gang and conformance answers for one job: lower task priority, gang surplus, and
system-critical tasks are protected by their priority).

No preemption cycle: every eviction goes from a job to one of strictly higher priority, or from
a task to a task of the same job with strictly higher task priority; priorities do not change,
so the victim→preemptor graph of ``preempt`` follows a strict order and cannot close a loop.
The rules are the action's own, not a plugin's, so they hold whatever the tiers say.

Who may evict at all (``preemption_policy: Never``, ``preemption_delay``) is
``victims.rules.policy_refusal``'s rule, asked by both passes; disruption budgets are counted in the
first pass (``victims``), not inside a job.

Not done: elastic tasks beyond ``min_available`` evicting *other* jobs (they never preempt
other jobs).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from gangsched._types import I64
from gangsched.actions._base import PREDICATE_ERROR_CACHE, ConfiguredAction
from gangsched.actions._gang_placement import hard_domain
from gangsched.actions.victims import loop, search, volcano_play
from gangsched.actions.victims import rules as v
from gangsched.model import JobPhase
from gangsched.session.core import TaskState
from gangsched.session.statement import Statement
from gangsched.session.task_states import in_states

if TYPE_CHECKING:
    from gangsched.session.core import Session

__all__ = ["SCOPE", "GangPreemptAction", "PreemptAction", "within_job_jobs"]


def _candidates(ssn: Session, job: int) -> tuple[I64, v.VictimRefusal | None]:
    return v.preempt_candidates(ssn, job)


def _walk_candidates(ssn: Session, job: int) -> tuple[I64, v.VictimRefusal | None]:
    # Volcano's tier walk asks the priority rule as the priority plugin's answer
    return v.preempt_candidates(ssn, job, priority=False)


def _reason(ssn: Session, job: int, victim: int) -> str:
    jobs = ssn.snapshot.jobs
    mine = jobs[job]
    theirs = jobs[int(ssn.task_job[victim])]
    if mine.priority <= theirs.priority:  # only under Volcano's tier walk
        return (
            f"preempted by job {mine.name!r} in queue {mine.queue!r} (a tier after the "
            "priority plugin's chose it: Volcano's tier walk)"
        )
    return (
        f"preempted by job {mine.name!r} (priority {mine.priority} > {theirs.priority}) "
        f"in queue {mine.queue!r}"
    )


SCOPE = v.Scope(
    action="preempt",
    point="preemptable",
    gate=v.no_gate,
    candidates=_candidates,
    baseline=v.no_baseline,
    admissible=v.no_rule,
    reason=_reason,
)


# -------------------------------------------------------------------------- inside one job


def _task_priorities(ssn: Session) -> I64:
    cached = ssn.cache.task_priority
    if cached is None:
        cached = np.array([t.priority for t in ssn.snapshot.tasks], dtype=np.int64)
        ssn.cache.task_priority = cached
    out: I64 = cached
    return out


def within_job_jobs(ssn: Session) -> list[int]:
    """Jobs where a pending task outranks a running or bound task of the same job: admitted,
    valid, in queue order then job order. Shape filters are vectorised over all tasks."""
    n_jobs = len(ssn.snapshot.jobs)
    if n_jobs == 0:
        return []
    prio = _task_priorities(ssn)
    best_effort = np.array([t.best_effort for t in ssn.snapshot.tasks], dtype=np.bool_)
    pending = (ssn.task_state == TaskState.PENDING) & ~best_effort
    running = in_states(ssn.task_state, v.RUNNING_STATES)
    low = np.iinfo(np.int64).min
    top_pending = np.full(n_jobs, low, dtype=np.int64)  # (n_jobs,)
    np.maximum.at(top_pending, ssn.task_job[pending], prio[pending])
    least_running = np.full(n_jobs, np.iinfo(np.int64).max, dtype=np.int64)  # (n_jobs,)
    np.minimum.at(least_running, ssn.task_job[running], prio[running])
    maybe = np.flatnonzero((top_pending > low) & (least_running < top_pending))
    enqueue_on = ssn.config.has_action("enqueue")
    out = [
        int(j)
        for j in maybe.tolist()
        if not (enqueue_on and ssn.job_phase[j] is JobPhase.PENDING)
        and ssn.points.job_valid(j) is None
    ]
    out.sort(key=lambda j: (ssn.queue_key(int(ssn.job_queue[j])), ssn.job_key(j)))
    return out


class _WithinJob:
    """One pending task evicting lower-priority tasks of its own job."""

    def __init__(self, ssn: Session, job: int, task: int) -> None:
        self.ssn = ssn
        self.job = job
        self.task = task
        self.queue = int(ssn.job_queue[job])
        self.tmpl = ssn.templates[int(ssn.template_of[task])]
        self.blocked_by_queue = False

    def key(self, victim: int) -> tuple[Any, ...]:
        ssn = self.ssn
        return ssn.victim_key(victim)

    def fits(self, node: int) -> bool:
        ssn = self.ssn
        ev = ssn.evaluate(self.tmpl)
        if not (ev.ok[node] and ev.fit_future[node]):
            return False
        if not ssn.points.allocatable(self.queue, self.tmpl):
            self.blocked_by_queue = True
            return False
        return True

    def needed(self, node: int, victims: list[int]) -> int | None:
        """How many of ``victims`` (a prefix) must go before the task fits ``node``."""
        stmt = Statement(self.ssn)
        try:
            for k, victim in enumerate(victims):
                if self.fits(node):
                    return k
                stmt.evict(victim, "")
            return len(victims) if self.fits(node) else None
        finally:
            stmt.discard()

    def reason(self, victim: int) -> str:
        tasks = self.ssn.snapshot.tasks
        mine, theirs = tasks[self.task], tasks[victim]
        return (
            f"preempted by task {mine.name!r} of the same job {mine.job!r} "
            f"(task priority {mine.priority} > {theirs.priority})"
        )

    def run(self, lower: list[int]) -> v.VictimRefusal | None:
        """Evict for the task and pipeline it; ``None`` when done, else why not."""
        ssn = self.ssn
        rec = ssn.snapshot.jobs[self.job]
        name = ssn.snapshot.tasks[self.task].name
        prio = _task_priorities(ssn)
        flags = v.evictable(ssn, np.asarray(lower, dtype=np.int64)).tolist()
        allowed = [t for t, ok in zip(lower, flags, strict=True) if ok]
        if not allowed:
            return (
                v.NOT_PREEMPTABLE,
                f"task {name!r}: the {len(lower)} lower-priority task(s) of its own job are "
                "marked preemptable: false",
            )
        allowed.sort(key=self.key)
        ok = ssn.evaluate(self.tmpl).ok
        domain = hard_domain(ssn, self.job)
        if isinstance(domain, str):
            return (v.TOPOLOGY, domain)
        if domain is not None:
            ok = ok & domain
        score = ssn.evaluate(self.tmpl).score
        best: tuple[Any, ...] | None = None
        for node in sorted({int(ssn.task_node[t]) for t in allowed}):
            if not ok[node]:
                continue
            here = v.spare_tasks(ssn, self.job, [t for t in allowed if ssn.task_node[t] == node])
            k = self.needed(node, here)
            if k is None:
                continue
            cost = (k, int(prio[here[:k]].max(initial=np.iinfo(np.int64).min)))
            cand = (*cost, -float(score[node]), node, tuple(here[:k]))
            if best is None or cand < best:
                best = cand
        if best is not None:
            node, victims = int(best[3]), list(best[4])
            stmt = Statement(ssn)
            for victim in victims:
                stmt.evict(victim, self.reason(victim), rec.name)
            stmt.pipeline(self.task, node, ssn.choose_gpus(self.task, node, future=True))
            stmt.commit()
            return None
        return self.diagnose(name, allowed)

    def diagnose(self, name: str, allowed: list[int]) -> v.VictimRefusal:
        ssn = self.ssn
        ok = ssn.evaluate(self.tmpl).ok
        queue = ssn.snapshot.queues[self.queue].name
        self.blocked_by_queue = False
        gang = False
        for node in sorted({int(ssn.task_node[t]) for t in allowed}):
            here = [t for t in allowed if ssn.task_node[t] == node]
            if ok[node] and self.needed(node, here) is not None:
                gang = gang or len(v.spare_tasks(ssn, self.job, here)) < len(here)
        if gang:
            return (
                v.GANG_WOULD_BREAK,
                f"task {name!r}: room exists only by taking its own job below min_available "
                f"{int(ssn.job_min[self.job])} (or a role below its minimum)",
            )
        if self.blocked_by_queue:
            return (
                v.BEYOND_DESERVED,
                f"task {name!r}: placing it would take queue {queue!r} beyond its deserved "
                "share (or the queue is not Open)",
            )
        return (
            v.INSUFFICIENT,
            f"task {name!r}: evicting its job's {len(allowed)} lower-priority task(s) would "
            "not make room on any node",
        )


def _within_job(ssn: Session, job: int) -> v.VictimRefusal | None:
    """Run the within-job pass for one job; the refusal of its first task that got nothing."""
    prio = _task_priorities(ssn)
    tasks = ssn.job_tasks(job)
    pending = [
        int(t)
        for t in tasks.tolist()
        if ssn.task_state[t] == TaskState.PENDING and not ssn.snapshot.tasks[int(t)].best_effort
    ]
    pending.sort(key=ssn.task_key)
    for t in pending:
        if ssn.task_state[t] != TaskState.PENDING:
            continue
        running = tasks[in_states(ssn.task_state[tasks], v.RUNNING_STATES)]
        lower = [int(x) for x in running.tolist() if prio[x] < prio[t]]
        if not lower:
            continue
        refusal = v.policy_refusal(ssn, job, [t]) or _WithinJob(ssn, job, t).run(lower)
        if refusal is not None:
            return refusal
    return None


class PreemptAction(ConfiguredAction):
    name = "preempt"
    known_arguments: tuple[str, ...] = (
        v.WHOLE_BUNDLE,
        v.ALL_VICTIM_RULES,
        "enableTopologyAwarePreemption",
        "maxCandidateNodesAbsolute",
        "minCandidateNodesAbsolute",
        "minCandidateNodesPercentage",
        PREDICATE_ERROR_CACHE,
        "topologyAwarePreemptWorkerNum",
        volcano_play.VICTIM_SELECTION,
    )

    def __init__(self, arguments: Mapping[str, object]) -> None:
        super().__init__(arguments)
        #: ``victimSelection``: ``cheapest`` (the search) or ``volcano`` (Volcano's walk).
        self.victim_selection = volcano_play.victim_selection(arguments, self.name)

    def execute(self, ssn: Session) -> None:
        if self.victim_selection == volcano_play.VOLCANO:
            volcano_play.run(ssn, self.name)
            return
        scope = replace(SCOPE, action=self.name, whole=v.whole_gangs(ssn, self.name))
        if v.tier_walk(ssn, self.name):
            scope = replace(scope, candidates=_walk_candidates)
        loop.realise_reservations(ssn)
        starving = v.preemptors(ssn)
        inside = within_job_jobs(ssn)
        by_queue: dict[int, tuple[list[int], list[int]]] = {}
        for j in starving:
            by_queue.setdefault(int(ssn.job_queue[j]), ([], []))[0].append(j)
        for j in inside:
            by_queue.setdefault(int(ssn.job_queue[j]), ([], []))[1].append(j)
        for q in sorted(by_queue, key=ssn.queue_key):
            jobs, within = by_queue[q]
            for j in jobs:
                claim = v.current_claim(ssn, j)
                if claim:
                    refusal = scope.gate(ssn, j) or search.preempt_job(ssn, scope, j, claim)
                    v.note_refusal(ssn, j, scope.action, refusal)
            claimed = set(jobs)
            for j in within:
                refusal = _within_job(ssn, j)
                # A preemptor of the pass above keeps that pass's explanation.
                if refusal is not None and j not in claimed:
                    v.note_refusal(ssn, j, scope.action, refusal)


class GangPreemptAction(PreemptAction):
    """``gangpreempt`` (Volcano v1.15's gang-aware preempt): ``preempt`` whose victims may be
    whole gangs — a job's surplus or, when it may go whole, the whole job, anywhere the claim
    can use — unless ``allowWholeBundle`` is set false. Who may evict, the candidates, the
    search and the all-or-nothing commit are preempt's. ``maxDomains`` (how many hypernode
    domains Volcano scans) is accepted and not read: every allowed domain is tried."""

    name = "gangpreempt"
    known_arguments: tuple[str, ...] = (
        *(
            a
            for a in PreemptAction.known_arguments
            if a not in (v.ALL_VICTIM_RULES, volcano_play.VICTIM_SELECTION)
        ),
        v.MAX_DOMAINS,
    )
