"""The victim search: the cheapest admissible victim set for one preemptor.

Theory of operation
-------------------
The action (a :class:`~gangsched.actions.victims.rules.Scope`) names the candidate victims and its
hard rules;
the ``preemptable`` / ``reclaimable`` plugin point then narrows them. Candidates are grouped
into bundles, in one of two modes (``Scope.whole``):

* **whole gangs** (``gangpreempt``, ``gangreclaim``, or ``allowWholeBundle: true``): one
  bundle per victim job, its *surplus* (:func:`~gangsched.actions.victims.rules.spare_tasks`, only
  the tasks on
  nodes the preemptor can use, in victim order) and, when
  :func:`~gangsched.actions.victims.rules.may_go_whole` allows, the *whole* job; the plugins are
  asked once;
* **surplus on the claim's nodes** (``preempt``, ``reclaim``: Volcano's rule): one bundle per
  victim job and node, the job's surplus among its tasks there; the plugins are asked node by
  node, no set takes a job below its minimum, and a set is admissible only when every victim
  is on a node a claimed task is placed on.

Sets are compared by a lexicographic cost, smaller first:

1. the number of jobs hit;
2. their priorities, highest first (hit the least important work);
3. the number of jobs evicted whole (trim before kill);
4. resources freed beyond the claim (``Σ_r max(freed_r − claim_r, 0) / cluster_r``);
5. the number of tasks evicted;
6. the candidate rank of the jobs hit.

A set is *feasible* when, inside one :class:`~gangsched.session.statement.Statement`, the victims
are
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
task order), not by an exact packing. A hard-topology job is searched once per allowed domain
(lowest tier first) and the cheapest plan wins (the lowest tier on a tie).

Determinism: candidates are ranked by the ``victim_order`` point's key (smallest first), then
newest job first (larger ``creation``), then job name; tasks within a job by their
``victim_order`` key, then name. Nodes tie to the lowest index.

Disruption budgets (:mod:`gangsched.session.rules.disruption`): the search first runs with the
budgets as a
rule (tasks no eviction may take are left out, and a set that would break a budget is not
admissible); only when that finds nothing does it run again without them, and the plan it
commits then names the budgets it breaks (in each eviction's reason and the job's message):
Kubernetes' behaviour, a budget is respected when some other victim set exists.

When no plan exists, :meth:`_Search.diagnose` names the rule that stopped it, found by relaxing
the constraints one by one.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from gangsched.actions.victims.rules import (
    BEYOND_DESERVED,
    BOOL,
    DISRUPTION_BUDGET,
    GANG_WOULD_BREAK,
    I64,
    INSUFFICIENT,
    NO_VICTIMS,
    NOT_PREEMPTABLE,
    TOPOLOGY,
    Scope,
    VictimRefusal,
    best_node,
    domains,
    gang_allowed,
    inverse_totals,
    may_go_whole,
    no_rule,
    policy_refusal,
    spare_tasks,
)
from gangsched.session.fit import gpu_need
from gangsched.session.gate import Rule
from gangsched.session.rules import disruption
from gangsched.session.statement import Statement

if TYPE_CHECKING:
    from gangsched.session.core import Session

__all__ = ["PAIR_LIMIT", "preempt_job"]

#: Largest number of candidate jobs for which every pair of bundles is tried.
PAIR_LIMIT = 12


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


def preempt_job(ssn: Session, scope: Scope, job: int, claim: list[int]) -> VictimRefusal | None:
    """Search, commit and (when nothing is found) explain, for one preemptor and its claim."""
    allowed, refusal = scope.candidates(ssn, job)
    held = policy_refusal(ssn, job, claim)
    if held is not None:
        allowed, refusal = allowed[:0], held
    search = _Search(ssn, scope, job, claim)
    victims = np.zeros(0, dtype=np.int64)
    if allowed.size:
        victims = _asked(ssn, scope, job, allowed)
    budgeted = disruption.budgets(ssn) is not None
    # With budgets: first only sets that keep every budget, then (none found) any set.
    for keep in (True, False) if budgeted else (False,):
        search.keep_budgets = keep
        pool = victims[~disruption.exhausted(ssn, victims)] if keep else victims
        best: _Plan | None = None
        for among in domains(ssn, job):  # lowest tier first: the first of equal cost wins
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
        if gang_allowed(ssn, allowed, whole=scope.whole).size == 0:
            return (
                GANG_WOULD_BREAK,
                "every candidate job runs at its min_available and cannot go whole"
                if scope.whole
                else f"every candidate job runs at its min_available ({scope.action} takes "
                "only tasks above a gang's minimum)",
            )
        return (NOT_PREEMPTABLE, f"no candidate passed the {scope.point} plugins")
    return search.diagnose(allowed, victims)


def _asked(ssn: Session, scope: Scope, job: int, allowed: I64) -> I64:
    """The candidates the ``preemptable`` / ``reclaimable`` plugins permit. Volcano's preempt
    and reclaim ask them node by node (a plugin that keeps a running total, as capacity's
    victim rule does, judges each node's tasks against the queue's whole allocation), so an
    action that evicts only on the claim's nodes asks per node too; the whole-gang actions ask
    once for every candidate."""
    if scope.whole:
        out: I64 = ssn.points.victims(scope.point, job, allowed)
        return out
    nodes = ssn.task_node[allowed]
    parts = [
        np.asarray(ssn.points.victims(scope.point, job, allowed[nodes == n]), dtype=np.int64)
        for n in np.unique(nodes).tolist()
    ]
    merged: I64 = np.sort(np.concatenate(parts)) if parts else allowed[:0]
    return merged


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
        self.claim_req = ssn.task_req[claim]
        self.inv_total = inverse_totals(ssn)
        self.templates = sorted({int(ssn.template_of[t]) for t in claim})
        self._keys: dict[int, tuple[Any, ...]] = {}
        self.last_refusal: VictimRefusal | None = None
        self.blocked: VictimRefusal | None = None
        self.baseline = scope.baseline(ssn)
        #: Treat the disruption budgets as a rule of admissibility.
        self.keep_budgets = False
        #: The nodes the last trial placed claimed tasks on.
        self.claim_nodes: set[int] = set()
        #: While a search runs on one occupancy: the room bound of :meth:`_may_fit`.
        self._room: _Room | None = None
        #: Whether the last trial's queue refused its first claimed task.
        self.first_refused = False

    # ------------------------------------------------------------------ trials

    def _place(self, stmt: Statement, among: BOOL | None) -> bool:
        ssn = self.ssn
        self.first_refused = False
        for i, t in enumerate(self.claim):
            tmpl = ssn.templates[int(ssn.template_of[t])]
            if not ssn.points.allocatable(self.queue, tmpl):
                self.first_refused = i == 0
                queue = ssn.snapshot.queues[self.queue].name
                self.blocked = (
                    BEYOND_DESERVED,
                    f"placing the {len(self.claim)} task(s) would take queue {queue!r} beyond "
                    "its deserved share (or the queue is not Open)",
                )
                return False
            node = best_node(ssn, tmpl, among)
            if node is None:
                return False
            stmt.pipeline(t, node, ssn.choose_gpus(t, node, future=True))
            self.claim_nodes.add(node)
        return bool(ssn.points.job_pipelined(self.job))

    def _play(
        self, stmt: Statement, victims: Sequence[int], among: BOOL | None, rule: bool
    ) -> bool:
        ssn = self.ssn
        if not self.scope.whole and not self._gang_safe(victims):
            return False
        broken = disruption.would_break(ssn, victims)
        if rule and self.keep_budgets and broken:
            self.last_refusal = (
                DISRUPTION_BUDGET,
                f"evicting would break disruption budget(s) {broken}",
            )
            return False
        note = f"; breaks disruption budget(s) {broken}: no victim set keeps them" if broken else ""
        victim_nodes = {int(ssn.task_node[v]) for v in victims}
        for v in victims:
            stmt.evict(v, self.scope.reason(ssn, self.job, v) + note, self.name)
        self.claim_nodes = set()
        placed_from = len(stmt.ops)
        if not self._place(stmt, among):
            if self.first_refused and self._room is not None:
                self._room.note_refused(victims)
            return False
        if rule and not self.scope.whole and not victim_nodes <= self.claim_nodes:
            self._replace_on_victim_nodes(stmt, placed_from, victim_nodes, among)
        if rule and not self.scope.whole and not victim_nodes <= self.claim_nodes:
            # Volcano's preempt and reclaim evict only on the node a claimed task goes to.
            self.last_refusal = (
                INSUFFICIENT,
                "the victims that make room are not on the nodes the claimed tasks would use "
                f"({self.scope.action} evicts only on those nodes)",
            )
            return False
        if rule:
            self.last_refusal = self.scope.admissible(ssn, self.job, victims, self.baseline)
            return self.last_refusal is None
        return True

    def _replace_on_victim_nodes(
        self, stmt: Statement, placed_from: int, victim_nodes: set[int], among: BOOL | None
    ) -> None:
        """Place the claim again inside the victims' nodes, its first placement undone (the
        operations of ``stmt`` from ``placed_from`` on), the evictions kept. When the victims
        make room in the claimant's queue rather than on a node, the best-scored node may
        need none of them; Volcano walks the nodes and reserves the preemptor on the node
        whose victims it evicted."""
        for op in reversed(stmt.ops[placed_from:]):
            stmt._undo(op)
        del stmt.ops[placed_from:]
        mask = np.zeros(self.ssn.arrays.n_nodes, dtype=np.bool_)
        mask[sorted(victim_nodes)] = True
        self.claim_nodes = set()
        if not self._place(stmt, mask if among is None else mask & among):
            self.claim_nodes = set()  # not placed whole: the caller's node rule refuses

    def _gang_safe(self, victims: Sequence[int]) -> bool:
        """Every victim job keeps its minimum (bundles of one job on several nodes may add up
        past its surplus)."""
        ssn = self.ssn
        by_job: dict[int, list[int]] = {}
        jobs = ssn.task_job[np.asarray(victims, dtype=np.int64)].tolist()
        for t, j in zip(victims, jobs, strict=True):
            by_job.setdefault(j, []).append(int(t))
        known = self._room.safe if self._room is not None else None
        for j, ts in by_job.items():
            key = (j, tuple(ts))
            safe = known.get(key) if known is not None else None
            if safe is None:
                if self._room is not None:
                    self._room.restore_job(j)  # judged on the search's occupancy
                safe = len(spare_tasks(ssn, j, ts)) == len(ts)
                if known is not None:
                    known[key] = safe
            if not safe:
                return False
        return True

    def attempt(self, victims: Sequence[int], among: BOOL | None, *, rule: bool = True) -> bool:
        """Would evicting ``victims`` let the claim be pipelined (inside ``among``; anywhere,
        topology ignored, when ``among`` is None)?"""
        relax = frozenset({Rule.TOPOLOGY}) if among is None else frozenset()
        if self._room is not None:
            if not rule:
                return self._trial(victims, among, relax)
            self._room.release()
        stmt = Statement(self.ssn, relax=relax)
        try:
            return self._play(stmt, victims, among, rule)
        finally:
            stmt.discard()

    def _trial(self, victims: Sequence[int], among: BOOL | None, relax: frozenset[Rule]) -> bool:
        """:meth:`attempt` on placement alone, inside a search: the evictions stay between
        trials (only the difference to the next set is played), the placements are undone."""
        if not self.scope.whole and not self._gang_safe(victims):
            return False
        assert self._room is not None
        if not self._room.may_fit(victims, among):
            return False
        self._room.hold(victims, f"{self.scope.action} trial", self.name)
        stmt = Statement(self.ssn, relax=relax)
        try:
            self.claim_nodes = set()
            if self._place(stmt, among):
                return True
            if self.first_refused:
                self._room.note_refused(victims)
            return False
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
            key = self.ssn.victim_key(task)
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
        ranked: list[tuple[tuple[Any, ...], int, tuple[int, ...], tuple[int, ...]]] = []
        idle = ssn.future_idle() if not self.scope.whole else None
        for v, tasks in by_job.items():
            tasks.sort(key=self.victim_key)
            on_useful = [t for t in tasks if useful[ssn.task_node[t]]]
            if not on_useful:
                continue
            whole = tuple(tasks) if self.scope.whole and may_go_whole(ssn, v, tasks) else ()
            rec = ssn.snapshot.jobs[v]
            key = (min(self.victim_key(t)[:-1] for t in tasks), -rec.creation, rec.name)
            if not self.scope.whole:
                # evicting only on the claim's nodes: one surplus bundle per node, as Volcano
                # asks the gang rule about one node's tasks at a time; a node where no claimed
                # task could fit even with the bundle gone is left out (a cheap bound)
                for n in sorted({int(ssn.task_node[t]) for t in on_useful}):
                    here = self._surplus(v, [t for t in on_useful if ssn.task_node[t] == n])
                    assert idle is not None
                    room = idle[n] + ssn.task_req[list(here)].sum(axis=0) if here else idle[n]
                    if here and bool(np.any(np.all(self.claim_req <= room, axis=1))):
                        ranked.append(((*key, n), v, here, ()))
                continue
            surplus = self._surplus(v, on_useful)
            if not surplus and not whole:
                continue
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
        room = self._room = _Room(self.ssn, self.claim, self.queue)
        try:
            return self._search(victims, among)
        finally:
            self._room = None
            room.release()

    def _search(self, victims: I64, among: BOOL | None) -> _Plan | None:
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

    def diagnose(self, allowed: I64, victims: I64) -> VictimRefusal:
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
            allowed_domains = domains(ssn, self.job)
            hard = any(d is not None for d in allowed_domains)
            if hard and not any(
                self.attempt(
                    [t for b in self.bundles(victims, useful & d) for t in self._most(b)[1]],
                    d,
                    rule=False,
                )
                for d in allowed_domains
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
            gang_ok = [
                t
                for t in gang_allowed(ssn, allowed, whole=self.scope.whole).tolist()
                if useful[ssn.task_node[t]]
            ]
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


class _Room:
    """A bound on what a trial can place, read without playing it.

    A trial whose first claimed task its queue refuses places nothing (see ``refused``).
    A claimed task is pipelined only onto a node whose room once releases finish (allocatable
    − used − pipelined + releasing) holds its request in every resource, and each one placed
    takes that request from the node's room. So a trial can succeed only when, for every
    template of the claim, the nodes (inside ``among``) hold at least as many of its tasks as
    the claim has, counted on the room after the victims' release alone. Evicting adds each
    victim's row to its node's room; every other node keeps the room it has now."""

    def __init__(self, ssn: Session, claim: list[int], queue: int) -> None:
        self.ssn = ssn
        self.queue = queue
        self.room = ssn.future_idle()
        # The built-in queue plugins judge a template by its request and the holdings of its
        # queue alone (without a queue hierarchy), and take it while holdings + request stay
        # within a limit: a trial whose first claimed task is refused with F freed from the
        # queue is refused with anything freed from it that is at most F in every resource.
        self.by_holdings = ssn.points.built_in("allocatable") and not ssn.gate.rules.hierarchical
        self.refused: list[I64] = []
        n_tasks = ssn.task_req.shape[0]
        self.rows_of = np.zeros_like(ssn.task_req)
        self.known = np.zeros(n_tasks, dtype=np.bool_)
        counts: dict[int, int] = {}
        for t in claim:
            k = int(ssn.template_of[t])
            counts[k] = counts.get(k, 0) + 1
        gpu_col = ssn.arrays.spec.gpu_column
        n = ssn.arrays.n_nodes
        #: Per template: (tasks claimed, request per node, tasks each node holds now).
        self.kinds: list[tuple[int, I64, I64]] = []
        for k, c in sorted(counts.items()):
            tmpl = ssn.templates[k]
            req = np.repeat(np.asarray(tmpl.request, dtype=np.int64)[None, :], n, axis=0)
            if tmpl.gpu_count:
                req[:, gpu_col] = tmpl.gpu_count * gpu_need(ssn.arrays, tmpl)
            self.kinds.append((c, req, self._held(self.room, req, c)))
        self._sums: dict[int, tuple[BOOL | None, list[int]]] = {}
        #: Whether a job keeps its minimum without these tasks (the search's occupancy).
        self.safe: dict[tuple[int, tuple[int, ...]], bool] = {}
        #: The evictions kept between placement-only trials.
        self.held: Statement | None = None

    @staticmethod
    def _held(room: I64, req: I64, cap: int) -> I64:
        """How many requests of ``req`` each row of ``room`` holds (at most ``cap``)."""
        safe = np.where(req > 0, req, 1)
        per = np.where(req > 0, room // safe, cap)
        held = np.minimum(per.min(axis=1), cap)
        out: I64 = np.where((room < 0).any(axis=1), 0, np.maximum(held, 0))
        return out

    def _base(self, among: BOOL | None) -> list[int]:
        kept = self._sums.get(id(among))
        if kept is None or kept[0] is not among:
            sums = [
                int(held.sum() if among is None else held[among].sum()) for _, _, held in self.kinds
            ]
            kept = self._sums[id(among)] = (among, sums)
        return kept[1]

    def hold(self, victims: Sequence[int], reason: str, preemptor: str) -> None:
        """Make the evictions held between trials exactly ``victims``."""
        if self.held is None:
            self.held = Statement(self.ssn)
        wanted = {int(v) for v in victims}
        for t in [op.task for op in reversed(self.held.ops) if op.task not in wanted]:
            self.held.restore(t)
        evicted = {op.task for op in self.held.ops}
        for v in victims:
            if int(v) not in evicted:
                self.held.evict(int(v), reason, preemptor)

    def restore_job(self, job: int) -> None:
        """Undo the held evictions of ``job``'s tasks."""
        if self.held is not None:
            task_job = self.ssn.task_job
            for t in [op.task for op in reversed(self.held.ops) if task_job[op.task] == job]:
                self.held.restore(t)

    def release(self) -> None:
        """Undo the evictions held between trials."""
        if self.held is not None:
            self.held.discard()
            self.held = None

    def rows(self, tasks: I64) -> I64:
        """Each task's row as its node is charged (:meth:`Session.row_on`), read once."""
        ssn = self.ssn
        missing = tasks[~self.known[tasks]]
        for t in np.unique(missing).tolist():
            self.rows_of[t] = ssn.row_on(t, int(ssn.task_node[t]))
            self.known[t] = True
        out: I64 = self.rows_of[tasks]
        return out

    def freed(self, tasks: I64) -> I64:
        """What evicting ``tasks`` takes from the holdings of the claim's queue."""
        ssn = self.ssn
        mine = tasks[ssn.job_queue[ssn.task_job[tasks]] == self.queue]
        out: I64 = ssn.task_req[mine].sum(axis=0)
        return out

    def note_refused(self, victims: Sequence[int]) -> None:
        """The queue refused the claim's first task once ``victims`` were evicted."""
        if self.by_holdings:
            self.refused.append(self.freed(np.asarray(victims, dtype=np.int64)))

    def may_fit(self, victims: Sequence[int], among: BOOL | None) -> bool:
        """False only when no trial evicting ``victims`` can place the whole claim."""
        ssn = self.ssn
        tasks = np.asarray(victims, dtype=np.int64)
        if self.refused:
            freed = self.freed(tasks)
            if bool(np.all(freed <= np.asarray(self.refused), axis=1).any()):
                return False
        nodes, where = np.unique(ssn.task_node[tasks], return_inverse=True)
        room = np.zeros((nodes.size, self.room.shape[1]), dtype=np.int64)
        np.add.at(room, where, self.rows(tasks))
        if among is not None:
            inside = among[nodes]
            nodes, room = nodes[inside], room[inside]
        room += self.room[nodes]
        for (c, req, held), base in zip(self.kinds, self._base(among), strict=True):
            total = base - int(held[nodes].sum()) + int(self._held(room, req[nodes], c).sum())
            if total < c:
                return False
        return True
