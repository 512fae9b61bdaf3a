"""Gang-aware victim selection, shared by the ``preempt`` and ``reclaim`` actions.

Theory of operation
-------------------
A *preemptor* is an admitted, valid, starving job (the ``job_starving`` point) that still needs
pending tasks to reach its gang minimum. Its *claim* is exactly those tasks: the pending tasks
that bring ready + reserved up to ``min_available`` (every short role's minimum first), never
the elastic tasks beyond it.

The action (a :class:`Scope`) names the candidate victims — running or bound tasks that pass
:func:`evictable` (``preemptable`` set on the task and its job) — and its hard rules; the
``preemptable`` / ``reclaimable`` plugin point then narrows them. Candidates are grouped into
one *bundle per victim job*:

* its *surplus* (:func:`spare_tasks`): tasks whose removal keeps the job's ready tasks
  (allocated, bound, running, succeeded; not pending best-effort ones) at or above
  ``min_available`` and every role at or above its minimum, only those on nodes the preemptor
  can use, in victim order;
* the *whole* job (:func:`may_go_whole`): every running task of it, allowed only when all of
  them are candidates and the job holds no reservation or fresh allocation.

A victim set never contains part of a gang below its minimum. These functions are the only
definition of the gang and preemptable rules on victims: the ``gang`` plugin's
``preemptable`` / ``reclaimable`` answers permit every candidate (so its tier decides, as in
Volcano), and whatever the tiers say, the bundles hold. Sets are compared by a
lexicographic cost, smaller first:

1. the number of jobs hit;
2. their priorities, highest first (hit the least important work);
3. the number of jobs evicted whole (trim before kill);
4. resources freed beyond the claim (``Σ_r max(freed_r − claim_r, 0) / cluster_r``);
5. the number of tasks evicted;
6. the candidate rank of the jobs hit.

A set is *feasible* when, inside one :class:`~gangsched.statement.Statement`, the victims are
evicted, every claimed task is pipelined onto a node where it fits after release (plugin
predicates, ``allocatable`` of its queue, and the job's hard topology domain) and the job is
``job_pipelined``; it is *admissible* when, moreover, the action's after-move rule holds
(reclaim's fair-share rule). The search:

1. every single job: the shortest prefix of its surplus that is feasible (bisection: more
   victims never hurt placement), else the job whole;
2. if no single job works and there are at most :data:`PAIR_LIMIT` candidate jobs, every pair;
3. otherwise bundles are added in rank order until the claim fits, jobs are reprieved
   (highest rank first) while it still fits, whole bundles are cut back to their surplus where
   that suffices, and surplus tasks are reprieved one by one.

Sets are minimised on feasibility and checked for admissibility once minimal (fewer victims can
only help the fair-share rule). If one job suffices, a one-job set is found; if two do (and
the pair search runs), a two-job set; otherwise the set is irreducible (no job or task of it can
be spared). "Suffices" is judged by the greedy placement above (best-scored node per task, in
task order), not by an exact packing. A hard-topology job is searched
once per allowed domain (lowest tier first) and the cheapest plan wins (the lowest tier on a
tie).

The chosen plan is replayed and committed only if the claim is pipelined; otherwise nothing is
evicted. The claimed tasks are always *pipelined* — reserved on future-idle resources — never
bound in the cycle that evicts for them; the caller carries them as ``Pipelined`` tasks (with
node and devices) and :func:`realise_reservations` binds them in a later cycle once their
resources are idle. The session never lets other tasks take resources under a reservation.

Determinism: candidates are ranked by the ``victim_order`` point's key (smallest first), then
newest job first (larger ``creation``), then job name; tasks within a job by their
``victim_order`` key, then name. Nodes tie to the lowest index.

When no plan exists the job's entry in ``Decisions.preemption_reasons`` names the rule that
stopped it (one of the ``*`` reason codes below), found by relaxing the constraints one by one.

Who may evict (:func:`policy_refusal`, its one owner): a preemptor whose claim holds a task
with ``preemption_policy: Never``, or a job younger (``age``) than its ``preemption_delay``,
gets no candidate victims at all — it may still be pipelined onto resources already being
released — and its reason says which rule held it (the delay with the seconds left).

Disruption budgets (:mod:`gangsched.disruption`): the search first runs with the budgets as a
rule (tasks no eviction may take are left out, and a set that would break a budget is not
admissible); only when that finds nothing does it run again without them, and the plan it
commits then names the budgets it breaks (in each eviction's reason and the job's message):
Kubernetes' behaviour, a budget is respected when some other victim set exists.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from .. import disruption
from ..gate import Rule
from ..model import PREEMPT_NEVER, TaskPhase, TopologyMode
from ..session import HOLDING_STATES, PIPELINED_OR_READY, READY_STATES, TaskState
from ..statement import OpKind, Statement
from ..topology import Topology, build_topology
from ..units import PODS
from ._gang_placement import hard_domain

if TYPE_CHECKING:
    from ..session import Session

__all__ = [
    "BEYOND_DESERVED",
    "DISRUPTION_BUDGET",
    "GANG_WOULD_BREAK",
    "INSUFFICIENT",
    "NOT_PREEMPTABLE",
    "NO_FAIR_SHARE",
    "NO_LOWER_PRIORITY",
    "NO_VICTIMS",
    "PAIR_LIMIT",
    "POLICY_NEVER",
    "PREEMPTION_DELAYED",
    "QUEUE_NOT_OPEN",
    "QUEUE_NOT_OVER_DESERVED",
    "QUEUE_OVERUSED",
    "SHARE_GUARD",
    "TOPOLOGY",
    "Refusal",
    "Scope",
    "evictable",
    "may_go_whole",
    "needed_tasks",
    "no_baseline",
    "no_gate",
    "no_rule",
    "policy_refusal",
    "realise_reservations",
    "run",
    "spare_tasks",
]

I64 = npt.NDArray[np.int64]
BOOL = npt.NDArray[np.bool_]

NO_VICTIMS = "NoVictims"
NO_LOWER_PRIORITY = "NoLowerPriorityVictims"
NOT_PREEMPTABLE = "VictimsNotPreemptable"
QUEUE_NOT_OVER_DESERVED = "QueueNotOverDeserved"
QUEUE_NOT_OPEN = "QueueNotOpen"
QUEUE_OVERUSED = "QueueAtDeserved"
NO_FAIR_SHARE = "NoFairShare"
GANG_WOULD_BREAK = "GangWouldBreak"
TOPOLOGY = "TopologyUnsatisfiable"
SHARE_GUARD = "FairShareGuard"
BEYOND_DESERVED = "BeyondDeserved"
INSUFFICIENT = "InsufficientResources"
POLICY_NEVER = "PreemptionPolicyNever"
DISRUPTION_BUDGET = "DisruptionBudget"
PREEMPTION_DELAYED = "PreemptionDelayed"

#: Largest number of candidate jobs for which every pair of bundles is tried.
PAIR_LIMIT = 12

RUNNING_STATES = (TaskState.RUNNING, TaskState.BOUND)
FRESH_STATES = (TaskState.ALLOCATED, TaskState.PIPELINED)

#: ``(code, message)``: why a preemptor got no victims.
Refusal = tuple[str, str]


@dataclass(frozen=True, slots=True)
class Scope:
    """What differs between preempt and reclaim.

    ``gate(ssn, job)`` refuses a preemptor outright; ``candidates(ssn, job)`` returns the
    victims allowed by the action's hard rules (or an empty array and the refusal);
    ``baseline(ssn)`` records what the rule needs from before any move, and
    ``admissible(ssn, job, victims, baseline)`` checks the session state after a trial move;
    ``reason(ssn, job, victim)`` is the eviction's reason text.
    """

    action: str
    point: str
    gate: Callable[[Session, int], Refusal | None]
    candidates: Callable[[Session, int], tuple[I64, Refusal | None]]
    baseline: Callable[[Session], Any]
    admissible: Callable[[Session, int, Sequence[int], Any], Refusal | None]
    reason: Callable[[Session, int, int], str]


@dataclass(frozen=True, slots=True)
class _Bundle:
    job: int
    rank: int
    surplus: tuple[int, ...]  # tasks that keep the job at its minimum, eviction order
    whole: tuple[int, ...]  # every running task, or () when the job may not go whole


#: One victim job in a plan: (bundle, evicted tasks, evicted whole).
_Part = tuple[_Bundle, tuple[int, ...], bool]


@dataclass(frozen=True, slots=True)
class _Plan:
    parts: tuple[_Part, ...]
    among: BOOL | None
    cost: tuple[Any, ...]

    @property
    def victims(self) -> list[int]:
        return [t for _, tasks, _ in self.parts for t in tasks]


# -------------------------------------------------------------------------------- entry points


def run(ssn: Session, scope: Scope) -> None:
    """Preempt (or reclaim) for every starving job, in queue order then job order."""
    realise_reservations(ssn)
    reasons = ssn.preemption_reasons
    for j in _preemptors(ssn):
        if not ssn.call("job_starving", j):
            continue
        claim = needed_tasks(ssn, j)
        if not claim:
            continue
        refusal = scope.gate(ssn, j) or _preempt_job(ssn, scope, j, claim)
        if refusal is None:
            reasons.pop(j, None)
        else:
            reasons.setdefault(j, {})[scope.action] = f"{refusal[0]}: {refusal[1]}"


def needed_tasks(ssn: Session, job: int) -> list[int]:
    """The pending tasks that bring the job to its gang minimum (short roles first), in task
    order; empty when the minimum is met or cannot be reached from the pending tasks."""
    rec = ssn.snapshot.jobs[job]
    have = ssn.count_states(job, PIPELINED_OR_READY) + ssn.pending_best_effort(job)
    deficit = int(ssn.job_min[job]) - have
    if deficit <= 0:
        return []
    pending = [
        int(t)
        for t in ssn.job_tasks(job)
        if ssn.task_state[t] == TaskState.PENDING and not ssn.snapshot.tasks[int(t)].best_effort
    ]
    pending.sort(key=ssn.task_key)
    chosen: list[int] = []
    if rec.min_task_member and rec.min_available >= sum(rec.min_task_member.values()):
        for role, need in sorted(rec.min_task_member.items()):
            short = need - ssn.count_states(job, PIPELINED_OR_READY, role)
            of_role = [t for t in pending if ssn.snapshot.tasks[t].role == role]
            if short > len(of_role):
                return []
            chosen += of_role[: max(short, 0)]
    rest = [t for t in pending if t not in chosen]
    chosen += rest[: max(deficit - len(chosen), 0)]
    if len(chosen) < deficit:
        return []
    chosen.sort(key=ssn.task_key)
    return chosen


def realise_reservations(ssn: Session) -> None:
    """Bind carried reservations whose resources are idle now.

    A task the snapshot lists as ``Pipelined`` (with its node and devices) holds a reservation
    made in an earlier cycle. Per job, the reserved tasks whose node now has their resources
    idle — without eating into anyone else's reservation — are bound there, if that makes the
    job ready (together with what ``allocate`` placed for it in this cycle, which is then bound
    as well); the others keep their reservation. Runs once per session.
    """
    if ssn.reservations_realised:
        return
    ssn.reservations_realised = True
    carried: dict[int, list[int]] = {}
    for t, task in enumerate(ssn.snapshot.tasks):
        if task.phase is TaskPhase.PIPELINED and ssn.task_state[t] == TaskState.PIPELINED:
            carried.setdefault(int(ssn.task_job[t]), []).append(t)
    for j in sorted(carried):
        tasks = sorted(carried[j], key=ssn.task_key)
        # Asked while every reservation still holds its node: a hard gang whose reservations
        # and running tasks lie outside one allowed domain binds none of them.
        domain = hard_domain(ssn, j)
        if isinstance(domain, str):
            for t in tasks:
                ssn.task_reasons[t] = f"reservation not bound: {domain}"
            continue
        spots = {t: (int(ssn.task_node[t]), ssn.task_gpus[t]) for t in tasks}
        for t in tasks:
            ssn.unplace(t)
        stmt = Statement(ssn)
        for t in tasks:
            node, gpus = spots[t]
            # The gate's own rule, asked first: a reservation whose node is not idle yet, or
            # whose queue is over its capability, is kept, not refused.
            why = ssn.gate.refuse(t, node, gpus, pipelined=False)
            if why is None:
                stmt.allocate(t, node, gpus)
            elif why.rule is Rule.CAPABILITY:
                ssn.task_reasons[t] = f"reservation not bound: {why}"
        if stmt.ops and ssn.call("job_ready", j):
            stmt.commit()
            # Allocations ``allocate`` kept for this job (not ready then) count toward its
            # readiness now: they become binds too, or the job would be bound in part.
            mine = [
                op for op in ssn.kept if op.kind is OpKind.ALLOCATE and ssn.task_job[op.task] == j
            ]
            if mine:
                ssn.kept[:] = [op for op in ssn.kept if op not in mine]
                ssn.committed.extend(mine)
        else:
            stmt.discard()
        for t in tasks:
            if ssn.task_state[t] == TaskState.PENDING:
                node, gpus = spots[t]
                ssn.place(t, node, gpus, pipelined=True)


def evictable(ssn: Session, tasks: I64) -> BOOL:
    """The preemptable rule (its one owner): ``preemptable`` is set on the task and on its job.

    Vectorised over ``tasks``; the per-task and per-job flags are read once per session."""
    flags = ssn.scratch.get("_evictable")
    if not isinstance(flags, tuple):
        snap = ssn.snapshot
        flags = (
            np.array([t.preemptable for t in snap.tasks], dtype=np.bool_),
            np.array([j.preemptable for j in snap.jobs], dtype=np.bool_),
        )
        ssn.scratch["_evictable"] = flags
    task_ok, job_ok = flags
    out: BOOL = task_ok[tasks] & job_ok[ssn.task_job[tasks]]
    return out


def policy_refusal(ssn: Session, job: int, claim: Sequence[int] | None = None) -> Refusal | None:
    """Why ``job`` may not evict for ``claim`` (default: :func:`needed_tasks`), or None.

    The one owner of the preemption policy and delay rules: a claimed task with
    ``preemption_policy: Never`` never makes anything be evicted (it keeps its priority for
    ordering), and a job evicts only once its ``age`` reaches its ``preemption_delay``."""
    rec = ssn.snapshot.jobs[job]
    if rec.age < rec.preemption_delay:
        left = rec.preemption_delay - rec.age
        return (
            PREEMPTION_DELAYED,
            f"job {rec.name!r} may evict only after its preemption_delay of "
            f"{rec.preemption_delay}s; {left}s left (age {rec.age}s)",
        )
    tasks = ssn.snapshot.tasks
    for t in needed_tasks(ssn, job) if claim is None else claim:
        if tasks[t].preemption_policy == PREEMPT_NEVER:
            return (
                POLICY_NEVER,
                f"task {tasks[t].name!r} has preemption_policy Never: it waits without evicting",
            )
    return None


def preempt_candidates(ssn: Session, job: int) -> tuple[I64, Refusal | None]:
    """The preempt action's candidate victims for ``job``: running tasks of other jobs of its
    queue whose job priority is strictly lower, ``preemptable`` on the task and the job — and
    the refusal when there are none. The one owner of the priority rule: preempt and
    admission (enqueue's preemption-aware vote) both ask here."""
    snap = ssn.snapshot
    held = policy_refusal(ssn, job)
    if held is not None:
        return np.zeros(0, dtype=np.int64), held
    q = int(ssn.job_queue[job])
    queue = snap.queues[q].name
    running = np.isin(ssn.task_state, RUNNING_STATES) & (ssn.task_job != job)
    same = running & (ssn.job_queue[ssn.task_job] == q)
    cands = np.flatnonzero(same).astype(np.int64)
    if cands.size == 0:
        return cands, (NO_VICTIMS, f"no running task of another job in queue {queue!r}")
    # only jobs of strictly lower priority are victims (the ``priority`` plugin permits
    # whatever this leaves)
    prio = snap.jobs[job].priority
    job_prio = np.array([j.priority for j in snap.jobs], dtype=np.int64)
    lower = cands[job_prio[ssn.task_job[cands]] < prio]
    if lower.size == 0:
        return lower, (
            NO_LOWER_PRIORITY,
            f"no running job in queue {queue!r} has a priority below {prio}",
        )
    ok = lower[evictable(ssn, lower)]
    if ok.size == 0:
        return ok, (
            NOT_PREEMPTABLE,
            f"the {lower.size} lower-priority task(s) are marked preemptable: false",
        )
    return ok, None


def spare_tasks(ssn: Session, job: int, tasks: list[int]) -> list[int]:
    """The gang surplus rule (its one owner): the tasks, taken in the given (victim) order,
    that may go while the job keeps ``min_available`` ready tasks and every role keeps its
    minimum.

    Ready means allocated, bound, running or succeeded — Volcano's ``ReadyTaskNum``: pending
    best-effort tasks do not count (they run nowhere yet), so a job running exactly its
    minimum loses nothing whatever best-effort tasks wait. The surplus is
    ``ready − min_available``, and per role ``ready(role) − min_task_member[role]``."""
    rec = ssn.snapshot.jobs[job]
    spare = ssn.count_states(job, READY_STATES) - int(ssn.job_min[job])
    limits: dict[str, int] = {}
    if rec.min_task_member and rec.min_available >= sum(rec.min_task_member.values()):
        limits = {
            role: ssn.count_states(job, READY_STATES, role) - need
            for role, need in rec.min_task_member.items()
        }
    taken: list[int] = []
    for t in tasks:
        if len(taken) >= spare:
            break
        role = ssn.snapshot.tasks[t].role
        if role in limits:
            if limits[role] <= 0:
                continue
            limits[role] -= 1
        taken.append(t)
    return taken


def may_go_whole(ssn: Session, job: int, tasks: Sequence[int]) -> bool:
    """The whole-job rule (its one owner): ``tasks`` (candidates of ``job``) are every task the
    job runs or has bound, and the job holds no reservation or allocation of this cycle."""
    return ssn.count_states(job, FRESH_STATES) == 0 and len(tasks) == ssn.count_states(
        job, RUNNING_STATES
    )


# -------------------------------------------------------------------------------- helpers


def _preemptors(ssn: Session) -> list[int]:
    enqueue_on = ssn.config.has_action("enqueue")
    out = []
    for j in range(len(ssn.snapshot.jobs)):
        if ssn.job_phase[j] == "Pending" and enqueue_on:
            continue
        if ssn.count_states(j, (TaskState.PENDING,)) == 0:
            continue
        if ssn.call("job_valid", j) is not None or not ssn.call("job_starving", j):
            continue
        out.append(j)
    out.sort(key=lambda j: (ssn.queue_key(int(ssn.job_queue[j])), ssn.job_key(j)))
    return out


def _topology(ssn: Session) -> Topology:
    return build_topology(ssn.snapshot)  # built once per snapshot, which keeps it


def _domains(ssn: Session, job: int) -> list[BOOL | None]:
    """Node masks the claim must fit inside: ``[None]`` without a hard topology, else every
    domain of an allowed tier (lowest tier first) holding all of the job's placed tasks."""
    nt = ssn.snapshot.jobs[job].network_topology
    if nt is None or nt.mode is not TopologyMode.HARD:
        return [None]
    topo = _topology(ssn)
    allowed = nt.highest_tier_allowed
    top = topo.top_tier if allowed is None else topo.rank_of(allowed)  # a tier rank
    tasks = ssn.job_tasks(job)
    placed = tasks[np.isin(ssn.task_state[tasks], HOLDING_STATES) & (ssn.task_node[tasks] >= 0)]
    placed_nodes = ssn.task_node[placed]
    out: list[BOOL | None] = []
    for tier in range(1, min(top, topo.top_tier) + 1):
        dom = topo.domain_of[tier - 1]
        for d in range(topo.n_domains(tier)):
            mask = dom == d
            if bool(np.all(mask[placed_nodes])):
                out.append(mask)
    return out


def _gang_allowed(ssn: Session, candidates: I64) -> I64:
    """Candidates the bundle rule could ever take: jobs that may go whole, or that have a
    surplus among them (:func:`may_go_whole`, :func:`spare_tasks`)."""
    keep = np.zeros(candidates.size, dtype=np.bool_)
    jobs = ssn.task_job[candidates]
    for v in np.unique(jobs).tolist():
        mine = jobs == v
        tasks = candidates[mine].tolist()
        keep[mine] = may_go_whole(ssn, v, tasks) or bool(spare_tasks(ssn, v, tasks))
    out: I64 = candidates[keep]
    return out


def _preempt_job(ssn: Session, scope: Scope, job: int, claim: list[int]) -> Refusal | None:
    allowed, refusal = scope.candidates(ssn, job)
    held = policy_refusal(ssn, job, claim)
    if held is not None:
        allowed, refusal = allowed[:0], held
    search = _Search(ssn, scope, job, claim)
    victims = np.zeros(0, dtype=np.int64)
    if allowed.size:
        victims = np.asarray(ssn.call(scope.point, job, allowed), dtype=np.int64)
    budgeted = disruption.budgets(ssn) is not None
    # With budgets: first only sets that keep every budget, then (none found) any set.
    for keep in (True, False) if budgeted else (False,):
        search.keep_budgets = keep
        pool = victims[~disruption.exhausted(ssn, victims)] if keep else victims
        best: _Plan | None = None
        for among in _domains(ssn, job):  # lowest tier first: the first of equal cost wins
            plan = search.search(pool, among)
            if plan is not None and (best is None or plan.cost < best.cost):
                best = plan
        if best is not None:
            break
    if best is not None and search.commit(best):
        return None
    if allowed.size == 0:
        return refusal or (NO_VICTIMS, "no candidate victims")
    if victims.size == 0:
        if _gang_allowed(ssn, allowed).size == 0:
            return (
                GANG_WOULD_BREAK,
                "every candidate job runs at its min_available and cannot go whole",
            )
        return (NOT_PREEMPTABLE, f"no candidate passed the {scope.point} plugins")
    return search.diagnose(allowed, victims)


class _Search:
    """Feasibility trials and the bundle search for one preemptor."""

    def __init__(self, ssn: Session, scope: Scope, job: int, claim: list[int]) -> None:
        self.ssn = ssn
        self.scope = scope
        self.job = job
        self.queue = int(ssn.job_queue[job])
        self.claim = claim
        self.name = ssn.snapshot.jobs[job].name
        self.need = ssn.task_req[claim].sum(axis=0)
        total = ssn.arrays.allocatable.sum(axis=0).astype(np.float64)
        total[ssn.arrays.spec.index(PODS)] = 0.0
        self.inv_total = np.where(total > 0, 1.0 / np.where(total > 0, total, 1.0), 0.0)
        self.templates = sorted({int(ssn.template_of[t]) for t in claim})
        self._keys: dict[int, tuple[Any, ...]] = {}
        self.last_refusal: Refusal | None = None
        self.blocked: Refusal | None = None
        self.baseline = scope.baseline(ssn)
        #: Treat the disruption budgets as a rule of admissibility.
        self.keep_budgets = False

    # ------------------------------------------------------------------ trials

    def _place(self, stmt: Statement, among: BOOL | None) -> bool:
        ssn = self.ssn
        for t in self.claim:
            tmpl = ssn.templates[int(ssn.template_of[t])]
            if not ssn.call("allocatable", self.queue, tmpl):
                queue = ssn.snapshot.queues[self.queue].name
                self.blocked = (
                    BEYOND_DESERVED,
                    f"placing the {len(self.claim)} task(s) would take queue {queue!r} beyond "
                    "its deserved share (or the queue is not Open)",
                )
                return False
            ev = ssn.evaluate(tmpl)
            mask = ev.ok & ev.fit_future
            if among is not None:
                mask = mask & among
            if not mask.any():
                return False
            node = int(np.argmax(np.where(mask, ev.score, -np.inf)))
            stmt.pipeline(t, node, ssn.choose_gpus(t, node, future=True))
        return bool(ssn.call("job_pipelined", self.job))

    def _play(
        self, stmt: Statement, victims: Sequence[int], among: BOOL | None, rule: bool
    ) -> bool:
        ssn = self.ssn
        broken = disruption.would_break(ssn, victims)
        if rule and self.keep_budgets and broken:
            self.last_refusal = (
                DISRUPTION_BUDGET,
                f"evicting would break disruption budget(s) {broken}",
            )
            return False
        note = f"; breaks disruption budget(s) {broken}: no victim set keeps them" if broken else ""
        for v in victims:
            stmt.evict(v, self.scope.reason(ssn, self.job, v) + note, self.name)
        if not self._place(stmt, among):
            return False
        if rule:
            self.last_refusal = self.scope.admissible(ssn, self.job, victims, self.baseline)
            return self.last_refusal is None
        return True

    def attempt(self, victims: Sequence[int], among: BOOL | None, *, rule: bool = True) -> bool:
        """Would evicting ``victims`` let the claim be pipelined (inside ``among``; anywhere,
        topology ignored, when ``among`` is None)?"""
        relax = frozenset({Rule.TOPOLOGY}) if among is None else frozenset()
        stmt = Statement(self.ssn, relax=relax)
        try:
            return self._play(stmt, victims, among, rule)
        finally:
            stmt.discard()

    def commit(self, plan: _Plan) -> bool:
        ssn = self.ssn
        stmt = Statement(ssn)
        broken = disruption.would_break(ssn, plan.victims)
        if not self._play(stmt, plan.victims, plan.among, True):
            stmt.discard()
            return False
        stmt.commit()
        hit = sorted(ssn.snapshot.jobs[b.job].name for b, _, _ in plan.parts)
        by = f"evicting {len(plan.victims)} task(s) of {hit}" if hit else "without evictions"
        if broken:
            by += f", breaking disruption budget(s) {broken} (no victim set keeps them)"
        ssn.note_job(
            self.job,
            "Pipelined",
            f"{self.scope.action}: {len(self.claim)} task(s) reserved, {by}",
        )
        return True

    # ------------------------------------------------------------------ bundles

    def victim_key(self, task: int) -> tuple[Any, ...]:
        key = self._keys.get(task)
        if key is None:
            key = (*self.ssn.call("victim_order", task), self.ssn.snapshot.tasks[task].name)
            self._keys[task] = key
        return key

    def useful_nodes(self, among: BOOL | None) -> BOOL:
        ssn = self.ssn
        mask = np.zeros(ssn.arrays.n_nodes, dtype=np.bool_)
        for i in self.templates:
            mask |= ssn.evaluate(ssn.templates[i]).ok
        return mask if among is None else mask & among

    def _surplus(self, job: int, tasks: list[int]) -> tuple[int, ...]:
        return tuple(spare_tasks(self.ssn, job, tasks))

    def bundles(self, victims: I64, useful: BOOL) -> list[_Bundle]:
        ssn = self.ssn
        by_job: dict[int, list[int]] = {}
        for t in victims.tolist():
            by_job.setdefault(int(ssn.task_job[t]), []).append(int(t))
        ranked = []
        for v, tasks in by_job.items():
            tasks.sort(key=self.victim_key)
            on_useful = [t for t in tasks if useful[ssn.task_node[t]]]
            if not on_useful:
                continue
            whole = tuple(tasks) if may_go_whole(ssn, v, tasks) else ()
            surplus = self._surplus(v, on_useful)
            if not surplus and not whole:
                continue
            rec = ssn.snapshot.jobs[v]
            key = (min(self.victim_key(t)[:-1] for t in tasks), -rec.creation, rec.name)
            ranked.append((key, v, surplus, whole))
        ranked.sort(key=lambda item: item[0])
        return [_Bundle(job=v, rank=i, surplus=s, whole=w) for i, (_, v, s, w) in enumerate(ranked)]

    # ------------------------------------------------------------------ search

    def cost(self, parts: Sequence[_Part]) -> tuple[Any, ...]:
        ssn = self.ssn
        victims = [t for _, tasks, _ in parts for t in tasks]
        freed = ssn.task_req[victims].sum(axis=0) if victims else np.zeros_like(self.need)
        excess = float((np.maximum(freed - self.need, 0) * self.inv_total).sum())
        prios = sorted((ssn.snapshot.jobs[b.job].priority for b, _, _ in parts), reverse=True)
        n_whole = sum(1 for _, _, whole in parts if whole)
        ranks = tuple(sorted(b.rank for b, _, _ in parts))
        return (len(parts), tuple(prios), n_whole, round(excess, 12), len(victims), ranks)

    def _fits(self, parts: Sequence[_Part], among: BOOL | None, *, rule: bool = False) -> bool:
        return self.attempt([t for _, tasks, _ in parts for t in tasks], among, rule=rule)

    @staticmethod
    def _most(b: _Bundle) -> _Part:
        return (b, b.whole, True) if b.whole else (b, b.surplus, False)

    def _fewest(self, b: _Bundle, among: BOOL | None) -> _Part | None:
        """The shortest prefix of the surplus that makes room (placement only; more victims
        never hurt placement, so a bisection finds it), else None."""
        if not b.surplus or not self.attempt(b.surplus, among, rule=False):
            return None
        lo, hi = 1, len(b.surplus)
        while lo < hi:
            mid = (lo + hi) // 2
            if self.attempt(b.surplus[:mid], among, rule=False):
                hi = mid
            else:
                lo = mid + 1
        return (b, b.surplus[:lo], False)

    def search(self, victims: I64, among: BOOL | None) -> _Plan | None:
        """The cheapest admissible victim set inside ``among`` (see the module docstring).

        Sets are built and minimised on placement alone; the action's after-move rule is
        checked on the minimised set (fewer victims can only help the rule of reclaim)."""
        if self.attempt([], among):
            return _Plan((), among, self.cost(()))
        bundles = self.bundles(victims, self.useful_nodes(among))
        if not bundles:
            return None
        found: list[list[_Part]] = []
        for b in bundles:
            part = self._fewest(b, among)
            if part is not None and self._fits([part], among, rule=True):
                found.append([part])
            elif b.whole and self._fits([(b, b.whole, True)], among, rule=True):
                found.append([(b, b.whole, True)])
        if not found and len(bundles) <= PAIR_LIMIT:
            for a, b in itertools.combinations(bundles, 2):
                parts = [self._most(a), self._most(b)]
                if self._fits(parts, among):
                    parts = self._shrink(self._downgrade(parts, among), among)
                    if self._fits(parts, among, rule=True):
                        found.append(parts)
        if not found:
            parts = []
            for b in bundles:
                parts.append(self._most(b))
                if self._fits(parts, among):
                    break
            else:
                return None
            for i in reversed(range(len(parts))):
                trial = parts[:i] + parts[i + 1 :]
                if trial and self._fits(trial, among):
                    parts = trial
            parts = self._shrink(self._downgrade(parts, among), among)
            if not self._fits(parts, among, rule=True):
                return None
            found.append(parts)
        best = min(found, key=self.cost)
        shrunk = self._shrink(best, among)
        if shrunk != best and self._fits(shrunk, among, rule=True):
            best = shrunk
        return _Plan(tuple(best), among, self.cost(best))

    def _downgrade(self, parts: list[_Part], among: BOOL | None) -> list[_Part]:
        for i in reversed(range(len(parts))):
            b, _, whole = parts[i]
            if whole and b.surplus:
                trial = [*parts[:i], (b, b.surplus, False), *parts[i + 1 :]]
                if self._fits(trial, among):
                    parts = trial
        return parts

    def _shrink(self, parts: list[_Part], among: BOOL | None) -> list[_Part]:
        for i in reversed(range(len(parts))):
            b, tasks, whole = parts[i]
            if whole:
                continue
            kept = list(tasks)
            for t in reversed(tasks):
                fewer = [x for x in kept if x != t]
                trial = [
                    *parts[:i],
                    *([(b, tuple(fewer), False)] if fewer else []),
                    *parts[i + 1 :],
                ]
                if self._fits(trial, among):
                    kept = fewer
            parts = [*parts[:i], *([(b, tuple(kept), False)] if kept else []), *parts[i + 1 :]]
        return parts

    # ------------------------------------------------------------------ explanations

    def diagnose(self, allowed: I64, victims: I64) -> Refusal:
        """Which rule stopped preemption: relax the constraints one at a time."""
        ssn = self.ssn
        n = len(self.claim)
        useful = self.useful_nodes(None)
        bundles = self.bundles(victims, useful)
        most = [t for b in bundles for t in self._most(b)[1]]
        self.blocked = None
        if not self.attempt(victims.tolist(), None, rule=False) and self.blocked is not None:
            freed = ssn.task_req[victims].sum(axis=0)
            room = (ssn.future_idle()[useful]).sum(axis=0) + freed
            if np.all(room >= self.need):
                return self.blocked
            return (
                INSUFFICIENT,
                f"even evicting every candidate would not make room for {n} task(s)",
            )
        if most and self.attempt(most, None, rule=False):
            domains = _domains(ssn, self.job)
            hard = any(d is not None for d in domains)
            if hard and not any(
                self.attempt(
                    [t for b in self.bundles(victims, useful & d) for t in self._most(b)[1]],
                    d,
                    rule=False,
                )
                for d in domains
                if d is not None
            ):
                return (
                    TOPOLOGY,
                    f"room for the {n} task(s) exists only across network domains the job's "
                    "hard topology does not allow",
                )
            if self.scope.admissible is not no_rule:
                self.attempt(most, None)
                if self.last_refusal is not None:
                    return self.last_refusal
            return (INSUFFICIENT, f"no victim set found that makes room for {n} task(s)")
        on_useful = [t for t in victims.tolist() if useful[ssn.task_node[t]]]
        if on_useful and self.attempt(on_useful, None, rule=False):
            return (
                GANG_WOULD_BREAK,
                f"room for {n} task(s) exists only by cutting running gangs below min_available",
            )
        more = [t for t in allowed.tolist() if useful[ssn.task_node[t]]]
        if len(more) > len(on_useful) and self.attempt(more, None, rule=False):
            gang_ok = [t for t in _gang_allowed(ssn, allowed).tolist() if useful[ssn.task_node[t]]]
            if not self.attempt(gang_ok, None, rule=False):
                return (
                    GANG_WOULD_BREAK,
                    f"room for {n} task(s) exists only by cutting running gangs below "
                    "min_available",
                )
            return (
                NOT_PREEMPTABLE,
                f"the victims that would make room were refused by the {self.scope.point} plugins",
            )
        return (
            INSUFFICIENT,
            f"even evicting every candidate would not make room for {n} task(s)",
        )


def no_rule(ssn: Session, job: int, victims: Sequence[int], baseline: Any) -> Refusal | None:
    """The after-move rule of an action that has none."""
    return None


def no_baseline(ssn: Session) -> None:
    """The baseline of an action whose rule needs none."""
    return None


def no_gate(ssn: Session, job: int) -> Refusal | None:
    """The gate of an action that admits every preemptor."""
    return None
