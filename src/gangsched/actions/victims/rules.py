"""The victim rules: who may evict, which running tasks may be taken, and how many of a gang.

Theory of operation
-------------------
This module is the one owner of every rule that decides whether a running task may be a
victim; ``preempt``, ``reclaim``, ``consolidate`` and admission (``enqueue``) all ask here, and
the search (:mod:`.search`) only combines the answers. The rules:

1. **Who may evict** (:func:`policy_refusal`): a preemptor whose claim holds a task with
   ``preemption_policy: Never``, or a job younger (``age``) than its ``preemption_delay``, gets
   no candidate victims at all — it may still be pipelined onto resources already being
   released — and its reason says which rule held it (the delay with the seconds left).
2. **Preemptable** (:func:`evictable`): ``preemptable`` is set on the task and on its job.
3. **Priority** (:func:`preempt_candidates`): preempt's victims are running or bound tasks of
   *other* jobs of the preemptor's *own* queue whose job priority is strictly lower.
   (Reclaim's other-queue and over-deserved rules are the ``reclaim`` action's own.)
4. **Gang surplus** (:func:`spare_tasks`): a job gives only tasks whose removal keeps its ready
   tasks (allocated, bound, running, succeeded; not pending best-effort ones) at or above
   ``min_available`` and every role at or above its minimum.
5. **Whole job** (:func:`may_go_whole`): a job may lose every running task only when all of
   them are candidates and it holds no reservation or fresh allocation — and only in an
   action that evicts whole gangs (:func:`whole_gangs`): ``gangpreempt`` and ``gangreclaim``
   (Volcano's gang-aware eviction actions, ``allowWholeBundle`` true by default), or
   ``preempt`` / ``reclaim`` configured with ``allowWholeBundle: true``. ``preempt`` and
   ``reclaim`` otherwise take only tasks above a gang's minimum, as Volcano's do.

A victim set never contains part of a gang below its minimum. The ``gang`` plugin's
``preemptable`` / ``reclaimable`` answers permit every candidate (so its tier decides, as in
Volcano), and whatever the tiers say, rules 3 to 5 hold — gangsched's default
(``allVictimRules: true`` on ``preempt`` and ``reclaim``).

**Volcano's tier walk** (:func:`tier_walk`; ``allVictimRules: false``, what a configuration
read from Volcano's YAML gets unless the text names the argument): Volcano's
``Session.Preemptable`` / ``Reclaimable`` (the 2023 build and today) asks the plugins tier by
tier about one node's candidates and takes the victims of the first tier whose plugins all
answer some (what they all keep); a plugin answering none sends the walk to the next tier.
:func:`walk` does that, with priority and gang answering as Volcano's do (priority: jobs of
strictly lower priority; gang: jobs running more than ``min_available`` ready tasks), so
preempt's priority rule is no longer asked beforehand, and a tier without the gang plugin
(drf, proportion) chooses alone: its victims pass no gang rule, and a lower-priority job may
take a gang below its minimum. Two points follow today's Volcano rather than the 2023 build
(7976b63e2, v1.11.0): any plugin answering none moves the walk on, and an empty intersection
inside a tier starts the tier again from the next plugin's answer. Which of a job's surplus
tasks gang answers is Go's map order in Volcano; here the gang tier answers every task of a
job with a surplus and the search keeps the surplus rule (rule 4) for them, in victim order.

The claim (:func:`needed_tasks`) is the other side: the pending tasks that bring ready +
reserved up to ``min_available`` (every short role's minimum first), never the elastic tasks
beyond it. Preemptors (:func:`preemptors`) are admitted, valid, starving jobs with pending
tasks, in queue order then job order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from gangsched._types import BOOL, I64
from gangsched.config import arg_bool
from gangsched.model import PREEMPT_NEVER, JobPhase, TopologyMode
from gangsched.model.topology import Topology, build_topology
from gangsched.session.core import HOLDING_STATES, READY_STATES, TaskState
from gangsched.session.rules.gang import (
    FRESH_STATES,
    RUNNING_STATES,
    may_go_whole,
    needed_tasks,
    spare_tasks,
)
from gangsched.session.task_states import in_states
from gangsched.units import PODS

if TYPE_CHECKING:
    from gangsched.session.core import Session

__all__ = [
    "ALL_VICTIM_RULES",
    "BEYOND_DESERVED",
    "BOOL",
    "DISRUPTION_BUDGET",
    "FRESH_STATES",
    "GANG_WOULD_BREAK",
    "I64",
    "INSUFFICIENT",
    "MAX_DOMAINS",
    "NOT_PREEMPTABLE",
    "NO_FAIR_SHARE",
    "NO_LOWER_PRIORITY",
    "NO_VICTIMS",
    "POLICY_NEVER",
    "PREEMPTION_DELAYED",
    "QUEUE_NOT_OPEN",
    "QUEUE_NOT_OVER_DESERVED",
    "QUEUE_OVERUSED",
    "RUNNING_STATES",
    "SHARE_GUARD",
    "TOPOLOGY",
    "WHOLE_BUNDLE",
    "WHOLE_GANG_ACTIONS",
    "Scope",
    "VictimRefusal",
    "best_node",
    "claimants",
    "current_claim",
    "domains",
    "evictable",
    "gang_allowed",
    "inverse_totals",
    "mark_broken",
    "may_go_whole",
    "needed_tasks",
    "no_baseline",
    "no_gate",
    "no_rule",
    "note_refusal",
    "policy_refusal",
    "preempt_candidates",
    "preemptors",
    "spare_tasks",
    "tier_walk",
    "walk",
    "whole_gangs",
]


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


#: ``(code, message)``: why a preemptor got no victims.
VictimRefusal = tuple[str, str]


@dataclass(frozen=True, slots=True)
class Scope:
    """What differs between preempt and reclaim.

    ``gate(ssn, job)`` refuses a preemptor outright; ``candidates(ssn, job)`` returns the
    victims allowed by the action's hard rules (or an empty array and the refusal);
    ``baseline(ssn)`` records what the rule needs from before any move, and
    ``admissible(ssn, job, victims, baseline)`` checks the session state after a trial move;
    ``reason(ssn, job, victim)`` is the eviction's reason text; ``whole`` whether a victim
    job may go whole (rule 5; :func:`whole_gangs`).
    """

    action: str
    point: str
    gate: Callable[[Session, int], VictimRefusal | None]
    candidates: Callable[[Session, int], tuple[I64, VictimRefusal | None]]
    baseline: Callable[[Session], Any]
    admissible: Callable[[Session, int, Sequence[int], Any], VictimRefusal | None]
    reason: Callable[[Session, int, int], str]
    whole: bool = False


def no_rule(ssn: Session, job: int, victims: Sequence[int], baseline: Any) -> VictimRefusal | None:
    """The after-move rule of an action that has none."""
    return None


def no_baseline(ssn: Session) -> None:
    """The baseline of an action whose rule needs none."""
    return None


def no_gate(ssn: Session, job: int) -> VictimRefusal | None:
    """The gate of an action that admits every preemptor."""
    return None


# -------------------------------------------------------------------------------- the claim


# -------------------------------------------------------------------------------- victims


def evictable(ssn: Session, tasks: I64) -> BOOL:
    """The preemptable rule (its one owner): ``preemptable`` is set on the task and on its job.

    Vectorised over ``tasks``; the per-task and per-job flags are read once per session."""
    flags = ssn.cache.evictable
    if flags is None:
        snap = ssn.snapshot
        flags = (
            np.array([t.preemptable for t in snap.tasks], dtype=np.bool_),
            np.array([j.preemptable for j in snap.jobs], dtype=np.bool_),
        )
        ssn.cache.evictable = flags
    task_ok, job_ok = flags
    out: BOOL = task_ok[tasks] & job_ok[ssn.task_job[tasks]]
    return out


def policy_refusal(
    ssn: Session, job: int, claim: Sequence[int] | None = None
) -> VictimRefusal | None:
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


def preempt_candidates(
    ssn: Session, job: int, *, priority: bool = True
) -> tuple[I64, VictimRefusal | None]:
    """The preempt action's candidate victims for ``job``: running tasks of other jobs of its
    queue whose job priority is strictly lower, ``preemptable`` on the task and the job — and
    the refusal when there are none. The one owner of the priority rule: preempt and
    admission (enqueue's preemption-aware vote) both ask here. Without ``priority`` (Volcano's
    tier walk) every priority is a candidate: the walk asks the rule as the priority plugin's
    answer (:func:`walk`)."""
    snap = ssn.snapshot
    held = policy_refusal(ssn, job)
    if held is not None:
        return np.zeros(0, dtype=np.int64), held
    q = int(ssn.job_queue[job])
    queue = snap.queues[q].name
    running = in_states(ssn.task_state, RUNNING_STATES) & (ssn.task_job != job)
    same = running & (ssn.job_queue[ssn.task_job] == q)
    cands = np.flatnonzero(same).astype(np.int64)
    if cands.size == 0:
        return cands, (NO_VICTIMS, f"no running task of another job in queue {queue!r}")
    # only jobs of strictly lower priority are victims (the ``priority`` plugin permits
    # whatever this leaves)
    prio = snap.jobs[job].priority
    job_prio = np.array([j.priority for j in snap.jobs], dtype=np.int64)
    lower = cands[job_prio[ssn.task_job[cands]] < prio] if priority else cands
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


# -------------------------------------------------------------------------------- preemptors


def preemptors(ssn: Session) -> list[int]:
    """Admitted, valid, starving jobs with pending tasks, in queue order then job order."""
    enqueue_on = ssn.config.has_action("enqueue")
    out = []
    pending = ssn.job_count[:, TaskState.PENDING].tolist()  # each job's pending tasks
    for j in range(len(ssn.snapshot.jobs)):
        if ssn.job_phase[j] is JobPhase.PENDING and enqueue_on:
            continue
        if pending[j] == 0:
            continue
        if ssn.points.job_valid(j) is not None or not ssn.points.job_starving(j):
            continue
        out.append(j)
    out.sort(key=lambda j: (ssn.queue_key(int(ssn.job_queue[j])), ssn.job_key(j)))
    return out


def current_claim(ssn: Session, job: int) -> list[int]:
    """The claim of preemptor ``job`` when its turn comes: its needed tasks while it is still
    starving, else none."""
    if not ssn.points.job_starving(job):
        return []
    return needed_tasks(ssn, job)


def claimants(ssn: Session) -> Iterator[tuple[int, list[int]]]:
    """Every preemptor still starving when its turn comes, with its (non-empty) claim."""
    for j in preemptors(ssn):
        claim = current_claim(ssn, j)
        if claim:
            yield j, claim


def note_refusal(ssn: Session, job: int, action: str, refusal: VictimRefusal | None) -> None:
    """Record in ``ssn.preemption_reasons`` why ``action`` evicted nothing for ``job``
    (``"<code>: <words>"``), or, without a refusal, clear the job's entry."""
    reasons = ssn.preemption_reasons
    if refusal is None:
        reasons.pop(job, None)
    else:
        reasons.setdefault(job, {})[action] = f"{refusal[0]}: {refusal[1]}"


def _topology(ssn: Session) -> Topology:
    return build_topology(ssn.snapshot)  # built once per snapshot, which keeps it


def domains(ssn: Session, job: int) -> list[BOOL | None]:
    """Node masks the claim must fit inside: ``[None]`` without a hard topology, else every
    domain of an allowed tier (lowest tier first) holding all of the job's placed tasks."""
    nt = ssn.snapshot.jobs[job].network_topology
    if nt is None or nt.mode is not TopologyMode.HARD:
        return [None]
    tasks = ssn.job_tasks(job)
    placed = tasks[in_states(ssn.task_state[tasks], HOLDING_STATES) & (ssn.task_node[tasks] >= 0)]
    placed_nodes = ssn.task_node[placed]
    masks = _topology(ssn).domain_masks(nt.highest_tier_allowed)
    return [mask for mask in masks if bool(np.all(mask[placed_nodes]))]


def whole_gangs(ssn: Session, action: str) -> bool:
    """Whether ``action`` may evict a gang whole (rule 5): its ``allowWholeBundle`` argument,
    true by default for ``gangpreempt`` / ``gangreclaim`` and false for ``preempt`` /
    ``reclaim``."""
    default = action in WHOLE_GANG_ACTIONS
    return arg_bool(
        ssn.config.action_arguments(action), WHOLE_BUNDLE, default, plugin=action, kind="action"
    )


#: The argument of ``preempt`` and ``reclaim`` asking every victim to pass every victim rule
#: whatever tier answers (gangsched's default, true); false: Volcano's tier walk.
ALL_VICTIM_RULES = "allVictimRules"
#: The actions that read :data:`ALL_VICTIM_RULES`.
WALK_ACTIONS = ("preempt", "reclaim")


def tier_walk(ssn: Session, action: str) -> bool:
    """Whether ``action`` takes its victims by Volcano's tier walk (``allVictimRules:
    false``; only ``preempt`` and ``reclaim`` read it)."""
    if action not in WALK_ACTIONS:
        return False
    return not arg_bool(
        ssn.config.action_arguments(action), ALL_VICTIM_RULES, True, plugin=action, kind="action"
    )


def walk(ssn: Session, point: str, job: int, candidates: I64, nodes: I64) -> tuple[I64, I64]:
    """Volcano's ``Session.Preemptable`` / ``Reclaimable`` asked about each node's
    ``candidates`` on its own (``nodes``: the node of each), as Volcano's preempt and reclaim
    ask: per node, the victims of the first tier whose plugins all answer some
    (:meth:`~gangsched.framework.dispatch.Dispatch.walk_victims`), with ``priority`` and
    ``gang`` answering as Volcano's plugins do. Returns the sorted victims and, among them,
    those chosen without the gang plugin's answer (the search applies no gang rule to them)."""
    ready: I64 = ssn.job_count[:, list(READY_STATES)].sum(axis=1)
    prio = np.array([j.priority for j in ssn.snapshot.jobs], dtype=np.int64)

    def lower_priority(cands: I64) -> I64:
        lower: I64 = cands[prio[ssn.task_job[cands]] < prio[job]]
        return lower

    def gang_surplus(cands: I64) -> I64:
        victim_jobs = ssn.task_job[cands]
        spare: I64 = cands[ready[victim_jobs] > ssn.job_min[victim_jobs]]
        return spare

    answers = {"priority": lower_priority, "gang": gang_surplus}
    out: tuple[I64, I64] = ssn.points.walk_victims(
        point, job, candidates, nodes, answers, marker="gang"
    )
    return out


def placed_now(ssn: Session, jobs: I64 | None = None) -> BOOL:
    """Per job (of ``jobs``, default every job): whether it holds a task bound or reserved by
    this cycle (or a reservation carried into it): allocated or pipelined. The tier walk
    never takes such a job below its minimum, whatever tier chooses: the cycle's binds and
    reservations count on its gang (Volcano's walk may cut it after allocate bound its last
    task, leaving a bound pod of a gang below ``minAvailable``; gangsched keeps the gang
    whole instead)."""
    count = ssn.job_count if jobs is None else ssn.job_count[jobs]
    placed: BOOL = (count[:, TaskState.ALLOCATED] + count[:, TaskState.PIPELINED]) > 0
    return placed


def mark_broken(ssn: Session, jobs: Iterable[int]) -> None:
    """Record as unschedulable the victim ``jobs`` the tier walk left below their minimum
    (ready and pending best-effort tasks fewer than ``min_available``): Volcano's gang plugin
    gives every such job its Unschedulable condition when the session closes, so one that
    still runs tasks is Unknown after the cycle."""
    for j in jobs:
        have = ssn.count_states(j, READY_STATES) + ssn.pending_best_effort(j)
        if have < ssn.job_min[j]:
            ssn.unschedulable_jobs.add(j)


#: The actions that evict whole gangs unless told otherwise (Volcano's gang-aware eviction).
WHOLE_GANG_ACTIONS = ("gangpreempt", "gangreclaim")
#: The argument that lets a victim job go whole (Volcano's gangpreempt / gangreclaim name).
WHOLE_BUNDLE = "allowWholeBundle"
#: Volcano's cap on the hypernode domains gangpreempt / gangreclaim scan (accepted, not read).
MAX_DOMAINS = "maxDomains"


def gang_allowed(ssn: Session, candidates: I64, *, whole: bool = True) -> I64:
    """Candidates the bundle rule could ever take: jobs that may go whole (when ``whole``), or
    that have a surplus among them (:func:`may_go_whole`, :func:`spare_tasks`)."""
    keep = np.zeros(candidates.size, dtype=np.bool_)
    jobs = ssn.task_job[candidates]
    for v in np.unique(jobs).tolist():
        mine = jobs == v
        tasks = candidates[mine].tolist()
        keep[mine] = (whole and may_go_whole(ssn, v, tasks)) or bool(spare_tasks(ssn, v, tasks))
    out: I64 = candidates[keep]
    return out


# -------------------------------------------------------------------------------- placement


def inverse_totals(ssn: Session) -> npt.NDArray[np.float64]:
    """``1 / cluster_r`` per resource (0 for pods and for a resource the cluster lacks): the
    weights that turn amounts into fractions of the cluster."""
    total = ssn.arrays.allocatable.sum(axis=0).astype(np.float64)
    total[ssn.arrays.spec.index(PODS)] = 0.0
    out: npt.NDArray[np.float64] = np.where(total > 0, 1.0 / np.where(total > 0, total, 1.0), 0.0)
    return out


def best_node(ssn: Session, template: Any, among: BOOL | None, exclude: int = -1) -> int | None:
    """The best-scored node where a task of ``template`` fits once the releases finish (inside
    ``among``, never ``exclude``; lowest index on a tie), or None."""
    ev = ssn.evaluate(template)
    mask = ev.ok & ev.fit_future
    if among is not None:
        mask = mask & among
    if exclude >= 0:
        mask = mask.copy()
        mask[exclude] = False
    if not mask.any():
        return None
    return int(np.argmax(np.where(mask, ev.score, -np.inf)))
