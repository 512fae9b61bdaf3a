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
2. if no single job works and there are at most :data:`PAIR_LIMIT` candidate jobs, every pair
   (as far as the cheapest needs: :meth:`_Search._pairs`);
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

Kept between searches (per session, :class:`_Charges`): what evicting a task gives back; the
victim keys while the figures they read stand; each job's victim order (it never changes with
the built-in orders, see :meth:`_Charges.positions`); the gang rule's surplus count per job
while its task counters stand; and the explanations of searches that found nothing, given back
to a preemptor that reads the same while no task has moved (:class:`_Fruitless`).
"""

from __future__ import annotations

import functools
import itertools
import math
import operator
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

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
    mark_broken,
    may_go_whole,
    no_rule,
    placed_now,
    policy_refusal,
    spare_tasks,
    tier_walk,
    walk,
)
from gangsched.model import TopologyMode
from gangsched.session.core import TaskState
from gangsched.session.fit import gpu_need
from gangsched.session.gate import Rule
from gangsched.session.pod_constraints import pod_rules
from gangsched.session.rules import disruption
from gangsched.session.rules.gang import role_minimums
from gangsched.session.statement import Statement

if TYPE_CHECKING:
    from gangsched.session.core import Session

__all__ = [
    "PAIR_LIMIT",
    "devices_given_back",
    "given_back",
    "job_ranks",
    "lexical_order",
    "preempt_job",
    "victim_key_of",
]

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


class _Bundles:
    """Bundles in rank order: read whole as flat arrays of their tasks, or one at a time (each
    :class:`_Bundle` made when first asked for)."""

    __slots__ = ("_made", "_most", "_surplus", "bounds", "jobs", "tasks", "wholes")

    def __init__(
        self, jobs: list[int], tasks: I64, bounds: list[int], wholes: list[tuple[int, ...]] | None
    ) -> None:
        #: Per bundle: its job, and its surplus as ``tasks[bounds[i]:bounds[i + 1]]``.
        self.jobs = jobs
        self.tasks = tasks
        self.bounds = bounds
        #: Per bundle, the whole job (whole-gang mode only).
        self.wholes = wholes
        self._made: list[_Bundle | None] = [None] * len(jobs)
        self._surplus: tuple[I64, I64] | None = None
        self._most: tuple[I64, I64] | None = None

    @classmethod
    def of(cls, bundles: list[_Bundle]) -> _Bundles:
        tasks, sets = _Search._flat([b.surplus for b in bundles])
        bounds = np.searchsorted(sets, np.arange(len(bundles) + 1)).tolist()
        out = cls([b.job for b in bundles], tasks, bounds, [b.whole for b in bundles])
        out._made = list(bundles)
        out._surplus = (tasks, sets)
        return out

    def __len__(self) -> int:
        return len(self.jobs)

    def __getitem__(self, i: int) -> _Bundle:
        made = self._made[i]
        if made is None:
            a, b = self.bounds[i], self.bounds[i + 1]
            made = _Bundle(
                job=self.jobs[i],
                rank=i,
                surplus=tuple(self.tasks[a:b].tolist()),
                whole=self.wholes[i] if self.wholes is not None else (),
            )
            self._made[i] = made
        return made

    def __iter__(self) -> Iterator[_Bundle]:
        return (self[i] for i in range(len(self.jobs)))

    def surplus(self) -> tuple[I64, I64]:
        """Every bundle's surplus: the tasks, and the index of the bundle of each."""
        if self._surplus is None:
            sizes = [b - a for a, b in zip(self.bounds, self.bounds[1:], strict=False)]
            self._surplus = (self.tasks, np.repeat(np.arange(len(self.jobs)), sizes))
        return self._surplus

    def most(self) -> tuple[I64, I64]:
        """Every bundle's largest set (:meth:`_Search._most`): the tasks, and the index of the
        bundle of each."""
        if self.wholes is None:
            return self.surplus()
        if self._most is None:
            self._most = _Search._flat([_Search._most(b)[1] for b in self])
        return self._most


@dataclass(frozen=True, slots=True)
class _Plan:
    parts: tuple[_Part, ...]
    among: BOOL | None
    cost: tuple[Any, ...]

    @property
    def victims(self) -> list[int]:
        return [t for _, tasks, _ in self.parts for t in tasks]


def preempt_job(ssn: Session, scope: Scope, job: int, claim: list[int]) -> VictimRefusal | None:
    """Search, commit and (when nothing is found) explain, for one preemptor and its claim.

    A search that found nothing is not run again for a later preemptor that reads the same
    (:class:`_Fruitless`): its explanation is given back."""
    allowed, refusal = scope.candidates(ssn, job)
    held = policy_refusal(ssn, job, claim)
    if held is not None:
        allowed, refusal = allowed[:0], held
    victims = np.zeros(0, dtype=np.int64)
    free: frozenset[int] = frozenset()
    if allowed.size:
        victims, free = _asked(ssn, scope, job, allowed)
    fruitless = _Charges.of(ssn).fruitless
    key = None if held is not None else fruitless.key(ssn, scope, job, claim, allowed, victims)
    if key is not None:
        key = (*key, tuple(sorted(free)), refusal)
        known = fruitless.answer(ssn, key)
        if known is not None:
            return known
    out = _search_and_explain(ssn, scope, job, claim, allowed, refusal, victims, free)
    if out is not None and key is not None:
        fruitless.keep(ssn, key, out)
    return out


def _search_and_explain(
    ssn: Session,
    scope: Scope,
    job: int,
    claim: list[int],
    allowed: I64,
    refusal: VictimRefusal | None,
    victims: I64,
    free: frozenset[int],
) -> VictimRefusal | None:
    search = _Search(ssn, scope, job, claim)
    search.free = free
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


def _asked(ssn: Session, scope: Scope, job: int, allowed: I64) -> tuple[I64, frozenset[int]]:
    """The candidates the ``preemptable`` / ``reclaimable`` plugins permit, and those of them
    no gang rule applies to (chosen by a tier without the gang plugin in Volcano's tier walk,
    :func:`~gangsched.actions.victims.rules.walk`). Volcano's preempt and reclaim ask the
    plugins node by node (a plugin that keeps a running total, as capacity's victim rule
    does, judges each node's tasks against the queue's whole allocation), so an action that
    evicts only on the claim's nodes asks per node too; the whole-gang actions ask once for
    every candidate."""
    if scope.whole:
        out: I64 = ssn.points.victims(scope.point, job, allowed)
        return out, frozenset()
    nodes = ssn.task_node[allowed]
    if tier_walk(ssn, scope.action):
        walked, free = walk(ssn, scope.point, job, allowed, nodes)
        free = free[~placed_now(ssn)[ssn.task_job[free]]]  # their gang rule holds
        return walked, frozenset(free.tolist())
    return _asked_by_node(ssn, scope, job, allowed, nodes), frozenset()


def _asked_by_node(ssn: Session, scope: Scope, job: int, allowed: I64, nodes: I64) -> I64:
    """:func:`_asked` without the walk: the plugin tiers as gangsched combines them."""
    by_node = ssn.points.victims_by_group(scope.point, job, allowed, nodes, ssn.arrays.n_nodes)
    if by_node is not None:
        return by_node
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
        #: The claim's distinct requests, ascending.
        self.claim_shapes: list[list[int]] = [
            list(r) for r in sorted(set(map(tuple, self.claim_req.tolist())))
        ]
        self.inv_total = inverse_totals(ssn)
        self.templates = sorted({int(ssn.template_of[t]) for t in claim})
        self._keys: dict[int, tuple[Any, ...]] = _Charges.of(ssn).victim_keys(ssn)
        #: Whether victim keys are kept across searches (and with them each job's victim order).
        self._keys_kept = ssn.points.victim_order_by_job_and_queue()
        self.last_refusal: VictimRefusal | None = None
        self.blocked: VictimRefusal | None = None
        self.baseline = scope.baseline(ssn)
        #: Treat the disruption budgets as a rule of admissibility.
        self.keep_budgets = False
        #: The nodes the last trial placed claimed tasks on.
        self.claim_nodes: set[int] = set()
        #: While a search runs on one occupancy: the room bound of :meth:`_may_fit`.
        self._room: _Room | None = None
        #: Whether the last trial's queue refused one of its claimed tasks.
        self.first_refused = False
        #: Victims no gang rule applies to (Volcano's tier walk chose them without gang).
        self.free: frozenset[int] = frozenset()
        #: :meth:`useful_nodes` per ``among`` (by identity, kept with it).
        self._useful: dict[int, tuple[BOOL | None, BOOL]] = {}
        #: Per bundle of the last search, whether its largest set passes the room bound alone.
        self._alone: BOOL = np.zeros(0, dtype=np.bool_)
        #: Bundles made, per (victims, useful nodes): they are made on the search's opening
        #: occupancy (every trial is undone), so the explanation reads the search's.
        self._made: dict[tuple[bytes, bytes], _Bundles] = {}

    # ------------------------------------------------------------------ trials

    def _place(self, stmt: Statement, among: BOOL | None) -> bool:
        ssn = self.ssn
        self.first_refused = False
        for t in self.claim:
            tmpl = ssn.templates[int(ssn.template_of[t])]
            if not ssn.points.allocatable(self.queue, tmpl):
                # claimed tasks charge the queue their request wherever they go, so the
                # queue's holdings at this task depend on the victims alone
                self.first_refused = True
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
        self,
        stmt: Statement,
        victims: Sequence[int],
        among: BOOL | None,
        rule: bool,
        held: _Room | None = None,
    ) -> bool:
        """Evict ``victims`` in ``stmt`` (in ``held``'s statement instead, kept between the
        trials of an explanation) and place the claim; with ``rule``, the action's rules
        too."""
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
        if held:
            held.hold(victims, f"{self.scope.action} trial", self.name)
        else:
            for v in victims:
                stmt.evict(v, self.scope.reason(ssn, self.job, v) + note, self.name)
        self.claim_nodes = set()
        placed_from = stmt.mark()
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
        self,
        stmt: Statement,
        placed_from: tuple[int, int],
        victim_nodes: set[int],
        among: BOOL | None,
    ) -> None:
        """Place the claim again inside the victims' nodes, its first placement undone (the
        operations of ``stmt`` since the mark ``placed_from``), the evictions kept. When the victims
        make room in the claimant's queue rather than on a node, the best-scored node may
        need none of them; Volcano walks the nodes and reserves the preemptor on the node
        whose victims it evicted."""
        stmt.undo_to(placed_from)
        mask = np.zeros(self.ssn.arrays.n_nodes, dtype=np.bool_)
        mask[sorted(victim_nodes)] = True
        self.claim_nodes = set()
        if not self._place(stmt, mask if among is None else mask & among):
            self.claim_nodes = set()  # not placed whole: the caller's node rule refuses

    def _gang_safe(self, victims: Sequence[int] | I64) -> bool:
        """Every victim job keeps its minimum (bundles of one job on several nodes may add up
        past its surplus).

        The gang rule (:func:`~gangsched.actions.victims.rules.spare_tasks`) takes a job's
        tasks while it keeps ``min_available`` and each role its minimum, so whether it takes
        them all depends only on how many there are of the job and of each role with a
        minimum: inside a search the verdict is kept per job and those counts."""
        ssn = self.ssn
        if self.free:
            victims = [t for t in victims if t not in self.free]
        tasks = np.asarray(victims, dtype=np.int64)
        if tasks.size == 0:
            return True
        # the jobs hit, ascending, and how many tasks of each; a job's tasks (in the order
        # given) are listed only when the rule is asked about them
        jobs = ssn.task_job[tasks]
        counts = np.bincount(jobs)
        hit = np.flatnonzero(counts)
        by_job = _JobLists(tasks, jobs)
        known = self._room.safe if self._room is not None else None
        for j, n in zip(hit.tolist(), counts[hit].tolist(), strict=True):
            roles = role_minimums(ssn.snapshot.jobs[j])
            if roles:
                names = [ssn.snapshot.tasks[t].role for t in by_job.of(j)]
                key = (j, n, tuple(names.count(r) for r in roles))
            else:
                key = (j, n, ())
                if self._room is not None:
                    # without role minimums the rule takes the first ``spare`` tasks of any
                    # list: asked once with every task of the job, it answers for every count
                    every = self._room.spare.get(j)
                    if every is None:
                        self._room.restore_job(j)
                        listed = ssn.job_tasks(j).tolist()
                        every = (len(spare_tasks(ssn, j, listed)), len(listed))
                        self._room.spare[j] = every
                    if n <= every[1]:
                        if n > every[0]:
                            return False
                        continue
            safe = known.get(key) if known is not None else None
            if safe is None:
                if self._room is not None:
                    self._room.restore_job(j)  # judged on the search's occupancy
                mine = by_job.of(j)
                safe = len(spare_tasks(ssn, j, mine)) == len(mine)
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
        assert self._room is not None
        if self._room.refuses(np.asarray(victims, dtype=np.int64)):
            return False
        if not self.scope.whole and not self._gang_safe(victims):
            return False
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
        if self.free:
            mark_broken(ssn, {b.job for b, _, _ in plan.parts})
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
        return _kept_key(self.ssn, self._keys, task)

    def useful_nodes(self, among: BOOL | None) -> BOOL:
        """The nodes (inside ``among``) whose predicates admit some claimed task: read once
        per ``among`` for the search and the explanation of this preemptor, which read the
        same occupancy (every trial is undone)."""
        kept = self._useful.get(id(among))
        if kept is not None and kept[0] is among:
            return kept[1]
        ssn = self.ssn
        mask = np.zeros(ssn.arrays.n_nodes, dtype=np.bool_)
        # the predicates alone: node scores are not read here, and may lag where a score
        # worked out later is the same (:attr:`Dispatch.scores_may_lag`)
        read = ssn.feasible if ssn.points.scores_may_lag else ssn.evaluate
        for i in self.templates:
            mask |= read(ssn.templates[i]).ok
        out = mask if among is None else mask & among
        self._useful[id(among)] = (among, out)
        return out

    def _surplus(self, job: int, tasks: list[int]) -> tuple[int, ...]:
        if self.free and tasks[0] in self.free:
            return tuple(tasks)  # one node's tasks: the walk chose them all one way
        return tuple(spare_tasks(self.ssn, job, tasks))

    def bundles_once(self, victims: I64, useful: BOOL) -> _Bundles:
        """:meth:`bundles`, made once per search and explanation, on the opening occupancy
        (evictions an explanation holds between its trials are given back first)."""
        key = (victims.tobytes(), np.packbits(useful).tobytes())
        made = self._made.get(key)
        if made is None:
            if self._room is not None:
                self._room.release()
            made = self._made[key] = self.bundles(victims, useful)
        return made

    def bundles(self, victims: I64, useful: BOOL) -> _Bundles:
        """The bundles of ``victims`` (see the module docstring), in rank order.

        Each victim job's tasks are taken in victim order (:meth:`_positions`), and jobs are
        ranked by the victim key of their first task (without its name), then newest first, then
        name. Per node, the gang rule takes a prefix of the job's tasks there: of a job without
        role minimums, as many as it lets go of all the job's tasks (asked once per job), read
        for every node at once; of a job with role minimums, asked node by node."""
        ssn = self.ssn
        if victims.size == 0:
            return _Bundles.of([])
        pos = self._positions(victims)
        jobs = ssn.task_job[victims]
        if self.scope.whole:
            order = np.lexsort((pos, jobs))
            tasks, jobs = victims[order], jobs[order]
            on = useful[ssn.task_node[tasks]]
            first = _starts(jobs)
            ends = np.append(first[1:], jobs.size)
            # the key reads every task of the job, useful or not: its first in victim order
            by_job = jobs[first]
            lead = tasks[first]
            kept = np.flatnonzero(np.add.reduceat(on.astype(np.int64), first) > 0)
            ranked = kept[self._ranks(by_job[kept], lead[kept]).argsort()]
            return _Bundles.of(self._job_bundles(tasks, on, first, ends, ranked))
        # by job, then node, then victim order (a task's place is unique in its job)
        nodes = ssn.task_node[victims]
        order = lexical_order(jobs, nodes, pos)
        tasks, jobs, nodes, pos = victims[order], jobs[order], nodes[order], pos[order]
        # the key reads every task of the job, useful or not: its first in victim order
        by_job, lead = _firsts(tasks, jobs, pos)

        def rank_of(of: I64) -> I64:
            return self._ranks_among(by_job, lead, np.searchsorted(by_job, of))

        on = useful[nodes]
        return self._node_bundles(tasks[on], jobs[on], nodes[on], rank_of)

    def _ranks(self, jobs: I64, leads: I64) -> I64:
        """The rank of each of ``jobs`` (distinct) among them: by the victim key of its first
        task ``leads`` without the task's name, then newest first, then name."""
        snap_jobs = self.ssn.snapshot.jobs
        known = self._keys
        keys = []
        for j, t in zip(jobs.tolist(), leads.tolist(), strict=True):
            rec = snap_jobs[j]
            key = known.get(t)
            if key is None:
                key = self.victim_key(t)
            keys.append((key[:-1], -rec.creation, rec.name))
        out = np.empty(len(keys), dtype=np.int64)
        out[sorted(range(len(keys)), key=keys.__getitem__)] = np.arange(len(keys))
        return out

    def _ranks_among(self, jobs: I64, leads: I64, at: I64) -> I64:
        """:meth:`_ranks` of the jobs ``jobs[at]`` (``at`` ascending): asked of them alone when
        they are few, else read from the ranks of every one of ``jobs`` (:meth:`_every_rank`,
        kept between searches)."""
        if 2 * at.size < jobs.size:
            return self._ranks(jobs[at], leads[at])
        every = self._every_rank(jobs, leads)[at]
        out = np.empty(at.size, dtype=np.int64)
        out[np.argsort(every)] = np.arange(at.size)
        return out

    def _every_rank(self, jobs: I64, leads: I64) -> I64:
        """:meth:`_ranks`, kept between searches (:attr:`_Charges.job_order`): given back for
        the same first tasks (so the same jobs) while every key it read is still the one kept
        for its task (a key is read again, a new object, once what it reads changes:
        :meth:`_Charges.victim_keys`)."""
        if not self._keys_kept:
            return self._ranks(jobs, leads)
        charges = _Charges.of(self.ssn)
        kept = charges.job_order
        if (
            kept is not None
            and np.array_equal(kept.leads, leads)  # the jobs are theirs
            and all(map(operator.is_, map(self._keys.get, leads.tolist()), kept.keys))
        ):
            return kept.rank
        rank = self._ranks(jobs, leads)  # reads (and keeps) the key of each of ``leads``
        read = list(map(self._keys.__getitem__, leads.tolist()))
        charges.job_order = _JobOrder(leads.copy(), read, rank)
        return rank

    def _job_bundles(
        self, tasks: I64, on: BOOL, first: I64, ends: I64, ranked: I64
    ) -> list[_Bundle]:
        """Whole-gang mode: one bundle per job (rows ``first[i]:ends[i]`` of ``tasks``, in
        victim order), in the order ``ranked``: its surplus on useful nodes, and the whole job
        when it may go whole."""
        ssn = self.ssn
        listed = tasks.tolist()
        useful = on.tolist()
        out: list[_Bundle] = []
        for i in ranked.tolist():
            a, b = int(first[i]), int(ends[i])
            mine = listed[a:b]
            v = int(ssn.task_job[mine[0]])
            whole = tuple(mine) if may_go_whole(ssn, v, mine) else ()
            surplus = self._surplus(v, [t for t, ok in zip(mine, useful[a:b], strict=True) if ok])
            if surplus or whole:
                out.append(_Bundle(job=v, rank=len(out), surplus=surplus, whole=whole))
        return out

    def _node_bundles(
        self, tasks: I64, jobs: I64, nodes: I64, rank_of: Callable[[I64], I64]
    ) -> _Bundles:
        """Node mode: one bundle per victim job and useful node, the gang rule's surplus among
        the job's ``tasks`` there (given in victim order per job), ranked by the job's rank
        (``rank_of``, asked for the jobs left) then the node; a bundle whose node could not hold
        any claimed task even with it gone is left out (a cheap bound, read for every bundle at
        once)."""
        ssn = self.ssn
        if tasks.size == 0:
            return _Bundles.of([])
        tasks, jobs, nodes, pair = _by_pair(tasks, jobs, nodes, ssn.arrays.n_nodes)
        group = _starts(pair)
        size = np.diff(np.append(group, tasks.size))
        member = np.repeat(np.arange(group.size), size)
        at = np.arange(tasks.size) - group[member]  # place inside its (job, node)
        heads = jobs[group]
        limit = self._spare_counts(heads)
        if self.free:
            # a node's tasks the tier walk chose without the gang plugin: all of them go
            walked = np.array([t in self.free for t in tasks[group].tolist()], dtype=np.bool_)
            limit = np.where(walked, size, limit)
        taken = at < limit[member]
        for g in np.flatnonzero(limit < 0).tolist():  # role minimums: asked node by node
            a, n = int(group[g]), int(size[g])
            here = self._surplus(int(heads[g]), tasks[a : a + n].tolist())
            taken[a : a + n] = np.isin(tasks[a : a + n], here)
        count = np.bincount(member[taken], minlength=group.size)
        freed = np.zeros((group.size, ssn.task_req.shape[1]), dtype=np.int64)
        rows = np.flatnonzero(taken)  # in group order
        if rows.size:
            runs = _starts(member[rows])
            freed[member[rows[runs]]] = _run_sums(ssn.task_req[tasks[rows]], runs)
        room = ssn.future_idle()[nodes[group]] + freed
        fits = np.zeros(group.size, dtype=np.bool_)
        for need in self.claim_shapes:
            holds = count > 0
            for r, amount in enumerate(need):
                holds &= room[:, r] >= amount
            fits |= holds
        kept = np.flatnonzero(fits)
        if kept.size == 0:
            return _Bundles.of([])
        # the bundles left, by their job's rank then node; each one's tasks in victim order
        rank = np.empty(group.size, dtype=np.int64)
        left = heads[kept]  # ascending
        left = left[_starts(left)]
        rank[kept] = rank_of(left)[np.searchsorted(left, heads[kept])]
        placed = np.full(group.size, -1, dtype=np.int64)
        placed[kept[lexical_order(rank[kept], nodes[group[kept]])]] = np.arange(kept.size)
        chosen = np.flatnonzero(taken & (placed[member] >= 0))
        chosen = chosen[_stable(placed[member[chosen]])]
        by_place = kept[np.argsort(placed[kept])]
        bounds = np.concatenate(([0], np.cumsum(count[by_place]))).tolist()
        return _Bundles(heads[by_place].tolist(), tasks[chosen], bounds, None)

    def _spare_counts(self, jobs: I64) -> I64:
        """Per job of ``jobs`` without role minimums: how many tasks the gang rule lets go of
        any list of its tasks (it takes the first that many: asked once with every task of the
        job, it answers for every list); -1 for jobs with role minimums."""
        return _Charges.of(self.ssn).spare_counts(self.ssn, jobs)

    def _positions(self, victims: I64) -> I64:
        """Each victim's place in its job's victim order (comparable between tasks of one
        job only)."""
        if self._keys_kept:
            return _Charges.of(self.ssn).positions(self.ssn, victims, self.victim_key)
        listed = victims.tolist()
        keys = [self.victim_key(t) for t in listed]
        out = np.empty(victims.size, dtype=np.int64)
        out[sorted(range(len(keys)), key=keys.__getitem__)] = np.arange(victims.size)
        return out

    # ------------------------------------------------------------------ search

    def cost(self, parts: Sequence[_Part]) -> tuple[Any, ...]:
        ssn = self.ssn
        victims = [t for _, tasks, _ in parts for t in tasks]
        freed = ssn.task_req[victims].sum(axis=0) if victims else np.zeros_like(self.need)
        prios = sorted((ssn.snapshot.jobs[b.job].priority for b, _, _ in parts), reverse=True)
        n_whole = sum(1 for _, _, whole in parts if whole)
        ranks = tuple(sorted(b.rank for b, _, _ in parts))
        return self._order(
            len(parts), tuple(prios), n_whole, self._excess(freed), len(victims), ranks
        )

    @staticmethod
    def _order(
        n_jobs: int,
        prios: tuple[int, ...],
        n_whole: int,
        excess: float,
        n_tasks: int,
        ranks: tuple[int, ...],
    ) -> tuple[Any, ...]:
        """A set's cost from its terms, in the order they are compared (see the module
        docstring); a lower bound of every term is a lower bound of the cost."""
        return (n_jobs, prios, n_whole, excess, n_tasks, ranks)

    def _excess(self, freed: I64) -> float:
        """Resources freed beyond the claim, as a fraction of the cluster (cost item 4)."""
        return round(float((np.maximum(freed - self.need, 0) * self.inv_total).sum()), 12)

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
            # Every trial evicts a subset of ``victims``; when evicting them all leaves too
            # little room, none can succeed.
            if not room.fits_all(victims, among):
                return None
            return self._search(victims, among)
        finally:
            self._room = None
            room.release()

    def _search(self, victims: I64, among: BOOL | None) -> _Plan | None:
        if self.attempt([], among):
            return _Plan((), among, self.cost(()))
        bundles = self.bundles_once(victims, self.useful_nodes(among))
        if not bundles or self._queue_never_accepts(bundles):
            return None
        found = self._singles(bundles, among)
        if not found and len(bundles) <= PAIR_LIMIT:
            found = self._pairs(bundles, among)
        if not found:
            # bundles are added in rank order until the claim fits: the unions the room bound
            # rules out are not played, and once a union takes a job below its minimum every
            # larger one does too
            # (bundles are made only as far as the union that fits: ``bundles.most()`` holds
            # every bundle's largest set, in rank order, so a union is a prefix of its tasks)
            tasks, sets = bundles.most()
            n = len(bundles)
            ends = np.searchsorted(sets, np.arange(n), side="right").tolist()
            start = self._room.first_prefix(tasks, sets, n, among) if self._room else 0
            start = max(start, self._first_accepted(tasks, ends, start))
            parts = [self._most(bundles[i]) for i in range(start)]
            for i in range(start, n):
                parts.append(self._most(bundles[i]))
                if not self.scope.whole and not self._gang_safe(tasks[: ends[i]]):
                    return None
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

    @staticmethod
    def _flat(sets: Sequence[Sequence[int]]) -> tuple[I64, I64]:
        """The tasks of ``sets`` in one array, and the index of the set of each."""
        sizes = np.fromiter((len(x) for x in sets), dtype=np.int64, count=len(sets))
        tasks = np.fromiter((t for x in sets for t in x), dtype=np.int64, count=int(sizes.sum()))
        return tasks, np.repeat(np.arange(len(sets), dtype=np.int64), sizes)

    def _singles(self, bundles: _Bundles, among: BOOL | None) -> list[list[_Part]]:
        """Every bundle that makes room alone (its fewest victims, else the whole job), as far
        as the cheapest of them needs: bundles the room bound rules out are not tried, and the
        others are tried in the order of a lower bound of their cost, until that bound passes
        the cheapest set found (costs differ in the bundle's rank, so the cheapest is the one
        trying every bundle finds)."""
        assert self._room is not None
        tasks, sets = bundles.most()
        ok = self._alone = self._room.fits_sets(tasks, sets, len(bundles), among)
        tried = self._not_refused(bundles, ok)
        if tried.size == 0:
            return []
        ssn = self.ssn
        # the fewest victims are at least the first of the surplus, else the whole job; a
        # bundle's rank is its place in ``bundles``
        starts = np.asarray(bundles.bounds, dtype=np.int64)
        n_whole = np.zeros(tried.size, dtype=np.int64)
        n_tasks = np.ones(tried.size, dtype=np.int64)
        if bundles.wholes is None:
            least, at = bundles.tasks[starts[tried]], np.arange(tried.size)
        else:
            chosen = [bundles[i] for i in tried.tolist()]
            least, at = self._flat([b.surplus[:1] or b.whole for b in chosen])
            for k, b in enumerate(chosen):
                if not b.surplus:
                    n_whole[k], n_tasks[k] = 1, len(b.whole)
        freed = np.zeros((tried.size, ssn.task_req.shape[1]), dtype=np.int64)
        np.add.at(freed, at, ssn.task_req[least])
        # the cost's own expression, once per distinct freed row
        rows, where = np.unique(freed, axis=0, return_inverse=True)
        excess = np.array([self._excess(r) for r in rows])[where.reshape(-1)]
        jobs = ssn.snapshot.jobs
        prio = np.array([jobs[bundles.jobs[i]].priority for i in tried.tolist()], dtype=np.int64)
        # the bounds' order (one job each: compared from the priority on)
        order = np.lexsort((tried, n_tasks, excess, n_whole, prio)).tolist()
        found: list[list[_Part]] = []
        best: tuple[Any, ...] | None = None
        for k in order:
            i = int(tried[k])
            bound = self._order(
                1, (int(prio[k]),), int(n_whole[k]), float(excess[k]), int(n_tasks[k]), (i,)
            )
            if best is not None and bound > best:
                break
            b = bundles[i]
            part = self._fewest(b, among)
            if part is not None and self._fits([part], among, rule=True):
                found.append([part])
            elif b.whole and self._fits([(b, b.whole, True)], among, rule=True):
                found.append([(b, b.whole, True)])
            else:
                continue
            cost = self.cost(found[-1])
            if best is None or cost < best:
                best = cost
        found.sort(key=lambda parts: parts[0][0].rank)
        return found

    def _pairs(self, bundles: _Bundles, among: BOOL | None) -> list[list[_Part]]:
        """Every pair of bundles that makes room (both largest sets, then downgraded and
        shrunk; admissible), as far as the cheapest of them needs, in the order of the pairs.

        Pairs are tried in the order of a lower bound of their cost, until the bound passes the
        cheapest set found (costs differ in the bundles' ranks, so the cheapest is the one
        trying every pair finds). When neither bundle's largest set passes the room bound
        alone (:attr:`_alone`), neither part can be shrunk away (a trial of the other part
        alone evicts a subset of its largest set, which the bound, growing with the set,
        refuses unplayed): the set hits both jobs, at their priorities and ranks, evicts at
        least a task of each, and frees at least the least row of each (every resource's
        smallest request among the tasks its part may keep). Otherwise the bound is one job,
        below every cost."""
        jobs = self.ssn.snapshot.jobs
        req = self.ssn.task_req
        least = [req[list(self._most(b)[1])].min(axis=0) for b in bundles]
        prio = [jobs[b.job].priority for b in bundles]
        pairs = list(itertools.combinations(range(len(bundles)), 2))
        bounds: list[tuple[Any, ...]] = []
        for i, j in pairs:
            if self._alone[i] or self._alone[j]:
                bounds.append((1,))
                continue
            prios = tuple(sorted((prio[i], prio[j]), reverse=True))
            excess = self._excess(least[i] + least[j])
            bounds.append(self._order(2, prios, 0, excess, 2, (i, j)))
        found: list[tuple[int, list[_Part]]] = []
        best: tuple[Any, ...] | None = None
        for k in sorted(range(len(pairs)), key=bounds.__getitem__):
            if best is not None and bounds[k] > best:
                break
            i, j = pairs[k]
            parts = [self._most(bundles[i]), self._most(bundles[j])]
            if not self._fits(parts, among):
                continue
            parts = self._shrink(self._downgrade(parts, among), among)
            if self._fits(parts, among, rule=True):
                found.append((k, parts))
                cost = self.cost(parts)
                if best is None or cost < best:
                    best = cost
        found.sort(key=lambda item: item[0])
        return [parts for _, parts in found]

    def _refuses(self, victims: Sequence[int]) -> bool:
        """Whether the claim's queue refuses its first task once ``victims`` are evicted (the
        first question of a trial), noted for :meth:`_Room.may_fit`."""
        room = self._room
        assert room is not None
        if not (room.by_holdings and room.frees_none(victims)):
            # (else the queue holds now what it would hold with ``victims`` evicted, and that
            # is all it judges by: asked as it is)
            room.hold(victims, f"{self.scope.action} trial", self.name)
        tmpl = self.ssn.templates[int(self.ssn.template_of[self.claim[0]])]
        if self.ssn.points.allocatable(self.queue, tmpl):
            return False
        room.note_refused(victims)
        return True

    def _not_refused(self, bundles: _Bundles, ok: BOOL) -> I64:
        """The bundles marked ``ok`` (their indices) but those whose every trial the claim's
        queue refuses.

        When the queue judges by its holdings alone (:attr:`_Room.by_holdings`), a refusal
        with ``F`` freed from the queue stands for anything freeing at most ``F``: the bundle
        freeing the most is asked first, and a refusal rules out every bundle freeing no more,
        until one is accepted. A bundle's trials evict no more than its largest set."""
        chosen = np.flatnonzero(ok)
        room = self._room
        if room is None or not room.by_holdings or chosen.size < 2:
            return chosen
        ssn = self.ssn
        tasks, sets = bundles.most()
        inside = ok[sets]
        tasks, sets = tasks[inside], (np.cumsum(ok) - 1)[sets[inside]]
        mine = ssn.job_queue[ssn.task_job[tasks]] == self.queue
        freed = np.zeros((chosen.size, ssn.task_req.shape[1]), dtype=np.int64)
        np.add.at(freed, sets[mine], ssn.task_req[tasks[mine]])
        live = np.ones(chosen.size, dtype=np.bool_)
        weight = (freed * self.inv_total).sum(axis=1)
        for i in np.argsort(-weight, kind="stable").tolist():
            if not live[i]:
                continue
            if not self._refuses(self._most(bundles[int(chosen[i])])[1]):
                break
            live &= ~np.all(freed <= freed[i], axis=1)
        out: I64 = chosen[live]
        return out

    def _queue_never_accepts(self, bundles: _Bundles) -> bool:
        """Whether the claim's queue refuses every set Volcano's rule admits (surplus bundles
        on the claim's nodes only): such a set lies on at most as many nodes as the claim has
        tasks, so it frees from the queue no more, in each resource, than the bundles on the
        nodes freeing the most of that resource; one question with every bundle on those nodes
        answers for all of them when the queue judges by its holdings alone."""
        room = self._room
        if self.scope.whole or room is None or not room.by_holdings:
            return False
        ssn = self.ssn
        tasks, _ = bundles.surplus()
        nodes = ssn.task_node[tasks]
        mine = ssn.job_queue[ssn.task_job[tasks]] == self.queue
        freed = np.zeros((ssn.arrays.n_nodes, ssn.task_req.shape[1]), dtype=np.int64)
        np.add.at(freed, nodes[mine], ssn.task_req[tasks[mine]])
        c = len(self.claim)
        rows = _distinct(nodes[mine])
        rows = rows[freed[rows].any(axis=1)]
        if c >= rows.size:
            return False  # the question would be every bundle: the search asks it anyway
        chosen = _most_freeing(freed, rows, c)
        return self._refuses(tasks[chosen[nodes]].tolist())

    def _first_accepted(self, tasks: I64, ends: list[int], start: int) -> int:
        """The first ``i >= start`` such that the claim's queue may accept the union of the
        first ``i + 1`` sets (``tasks[: ends[i]]``), or ``len(ends)`` when it refuses them
        all; ``start`` when the queue does not judge by its holdings alone. The unions free
        ever more from the queue, so refusals end where acceptance begins: galloping up from
        ``start`` then bisecting finds it, each probe evicting little more than the one
        before."""
        room = self._room
        n = len(ends)
        if room is None or not room.by_holdings or start >= n:
            return start

        def refused(i: int) -> bool:
            return self._refuses(tasks[: ends[i]].tolist())

        if not refused(start):
            return start
        lo, step = start, 1  # refused at lo
        while True:
            hi = min(lo + step, n - 1)
            if hi == lo:
                return n
            if not refused(hi):
                break
            lo, step = hi, step * 2
        while hi - lo > 1:  # refused at lo, accepted at hi
            mid = (lo + hi) // 2
            if refused(mid):
                lo = mid
            else:
                hi = mid
        return hi

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
        """Which rule stopped preemption: relax the constraints one at a time. The trials'
        evictions are held between them (:meth:`_explain_trial`), and given back before
        anything else reads the occupancy."""
        room = self._room = _Room(self.ssn, self.claim, self.queue, bound=False)
        try:
            return self._diagnose(allowed, victims, room)
        finally:
            self._room = None
            room.release()

    def _explain_trial(self, victims: Sequence[int] | I64, among: BOOL | None) -> bool:
        """:meth:`attempt` on placement alone (``rule=False``), as it plays without a room,
        inside an explanation: the evictions stay held in the room between trials (only the
        difference to the next set is played; evictions commute), the placement is undone.
        Without a room (outside an explanation), :meth:`attempt` itself."""
        if self._room is None:
            return self.attempt(list(victims), among, rule=False)
        if not self.scope.whole and not self._gang_safe(victims):
            return False  # the trial's first check, read before the set is listed
        relax = frozenset({Rule.TOPOLOGY}) if among is None else frozenset()
        stmt = Statement(self.ssn, relax=relax)
        try:
            return self._play(stmt, np.asarray(victims).tolist(), among, False, held=self._room)
        finally:
            stmt.discard()

    def _diagnose(self, allowed: I64, victims: I64, held: _Room) -> VictimRefusal:
        ssn = self.ssn
        n = len(self.claim)
        useful = self.useful_nodes(None)
        most = self.bundles_once(victims, useful).most()[0]
        self.blocked = None
        trials = _Trials(self)
        if not trials.play(victims) and self.blocked is not None:
            held.release()
            freed = ssn.task_req[victims].sum(axis=0)
            room = (ssn.future_idle()[useful]).sum(axis=0) + freed
            if np.all(room >= self.need):
                return self.blocked
            return (
                INSUFFICIENT,
                f"even evicting every candidate would not make room for {n} task(s)",
            )
        if most.size and trials.play(most):
            allowed_domains = domains(ssn, self.job)  # the job's own tasks: never held
            hard = any(d is not None for d in allowed_domains)
            if hard and not any(
                trials.play(self.bundles_once(victims, useful & d).most()[0], d)
                for d in allowed_domains
                if d is not None
            ):
                return (
                    TOPOLOGY,
                    f"room for the {n} task(s) exists only across network domains the job's "
                    "hard topology does not allow",
                )
            if self.scope.admissible is not no_rule:
                self.attempt(most.tolist(), None)
                if self.last_refusal is not None:
                    return self.last_refusal
            return (INSUFFICIENT, f"no victim set found that makes room for {n} task(s)")
        on_useful = victims[useful[ssn.task_node[victims]]]
        if on_useful.size and trials.play(on_useful):
            return (
                GANG_WOULD_BREAK,
                f"room for {n} task(s) exists only by cutting running gangs below min_available",
            )
        more = allowed[useful[ssn.task_node[allowed]]]
        if more.size > on_useful.size and trials.play(more):
            held.release()
            spare = gang_allowed(ssn, allowed, whole=self.scope.whole)
            if not trials.play(spare[useful[ssn.task_node[spare]]]):
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


class _Trials:
    """The placement-only trials of one explanation (:meth:`_Search.diagnose`), each played on
    the same occupancy (every trial's statement is discarded).

    A set played before (in any order: evictions commute, the ledger's sums are integers and
    the plugins read them afresh) gives back its answer without being played again.

    The room bound (:meth:`_Room.fits_sets`) is not asked first: most sets an explanation
    tries pass it, and on clusters with GPU devices reading it costs more than the trials it
    spares."""

    __slots__ = ("_known", "search")

    def __init__(self, search: _Search) -> None:
        self.search = search
        #: Per (victims, among): the trial's answer (the victims as their sorted array's bytes).
        self._known: dict[tuple[bytes, int], bool] = {}

    def play(self, victims: Sequence[int] | I64, among: BOOL | None = None) -> bool:
        """:meth:`_Search.attempt` on placement alone, ``among`` None: topology relaxed."""
        tasks = np.asarray(victims, dtype=np.int64)
        key = (_distinct(tasks).tobytes(), -1 if among is None else id(among))
        known = self._known.get(key)
        if known is not None:
            return known
        ok = self.search._explain_trial(tasks, among)
        self._known[key] = ok
        return ok


_NONE: I64 = np.zeros((0, 0), dtype=np.int64)


def _most_freeing(freed: I64, rows: I64, c: int) -> BOOL:
    """Per resource, the ``c`` rows of ``freed`` (non-negative) freeing the most of it, the
    lowest index first on a tie; ``rows``: the rows freeing anything, ascending. The rows
    freeing some of a resource are sorted, and when fewer than ``c`` do, the first rows
    freeing none of it follow."""
    chosen = np.zeros(freed.shape[0], dtype=np.bool_)
    sub = freed[rows]
    top = np.argsort(-sub, axis=0, kind="stable")[:c]
    for r in range(sub.shape[1]):
        some = int(np.count_nonzero(sub[:, r]))
        chosen[rows[top[: min(some, c), r]]] = True
        if some < c:
            chosen[np.flatnonzero(freed[:, r] == 0)[: c - some]] = True
    return chosen


class _JobLists:
    """Each job's tasks among ``tasks`` (their jobs ``jobs``), in the order given: sorted by
    job once, when first asked."""

    __slots__ = ("_jobs", "_order", "jobs", "tasks")

    def __init__(self, tasks: I64, jobs: I64) -> None:
        self.tasks = tasks
        self.jobs = jobs
        self._order: I64 | None = None
        self._jobs: I64 = jobs[:0]

    def of(self, job: int) -> list[int]:
        if self._order is None:
            self._order = _stable(self.jobs)
            self._jobs = self.jobs[self._order]
        a, b = np.searchsorted(self._jobs, [job, job + 1]).tolist()
        out: list[int] = self.tasks[self._order[a:b]].tolist()
        return out


def _firsts(tasks: I64, jobs: I64, pos: I64) -> tuple[I64, I64]:
    """For rows grouped by job (``jobs`` ascending), each job and its task of least ``pos``
    (a task's place in its job's victim order: never the same for two tasks of one job)."""
    first = _starts(jobs)
    by_job = jobs[first]
    low = np.minimum.reduceat(pos, first)
    lead: I64 = tasks[pos == np.repeat(low, np.diff(np.append(first, jobs.size)))]
    return by_job, lead


def _by_pair(tasks: I64, jobs: I64, nodes: I64, n_nodes: int) -> tuple[I64, I64, I64, I64]:
    """``tasks`` (with their ``jobs`` and ``nodes``) sorted by job, then node, else in the
    order given, and each one's (job, node) pair as one number; not sorted again when they
    already are."""
    pair = jobs * n_nodes + nodes
    if pair.size < 2 or not bool((pair[1:] < pair[:-1]).any()):
        return tasks, jobs, nodes, pair
    order = np.lexsort((np.arange(tasks.size), nodes, jobs))
    return tasks[order], jobs[order], nodes[order], pair[order]


def _run_sums(rows: I64, starts: I64) -> I64:
    """``np.add.reduceat(rows, starts, axis=0)``: the sum of each run of ``rows`` beginning at
    ``starts`` (ascending, the first 0); the rows themselves when every run is one row."""
    if starts.size == rows.shape[0]:
        return rows
    # the running sum at each run's last row, less the one before the run (whole numbers:
    # exact, and a run's sum that fits is exact even where the running sum wraps around)
    cum = np.cumsum(rows, axis=0)
    out: I64 = cum[np.append(starts[1:], rows.shape[0]) - 1]
    out[1:] -= out[:-1].copy()
    return out


def lexical_order(*keys: I64) -> I64:
    """The order that sorts rows by ``keys`` (whole numbers), the first key first, as
    ``np.lexsort`` with the keys reversed: one sort of one combined key when they are not
    negative and it fits in 63 bits (rows with equal keys then in any order: the callers' keys
    tell every row apart)."""
    spans = [int(k.max()) + 1 if k.size else 1 for k in keys]
    if math.prod(spans) >= 1 << 62 or any(k.size and int(k.min()) < 0 for k in keys):
        return np.lexsort(keys[::-1])
    combined = keys[0].astype(np.int64)
    for k, span in zip(keys[1:], spans[1:], strict=True):
        combined = combined * span + k
    out: I64 = np.argsort(combined)
    return out


def _stable(keys: I64) -> I64:
    """``np.argsort(keys, kind="stable")`` of whole numbers ``keys``, by counting when they
    are not negative and below 2**16."""
    if keys.size and int(keys.min()) >= 0 and int(keys.max()) < 1 << 16:
        out: I64 = np.argsort(keys.astype(np.uint16), kind="stable")
        return out
    return np.argsort(keys, kind="stable")


def _grouping(keys: I64) -> I64 | None:
    """An order of the whole numbers ``keys`` that makes them ascending (equal keys in any
    order among themselves: the callers sum over runs of equal keys), or None when they
    already are. Keys from 0 to 2**16 are sorted as 16-bit numbers, by counting."""
    if keys.size < 2 or not bool((keys[1:] < keys[:-1]).any()):
        return None
    return _stable(keys)


def _distinct(values: I64) -> I64:
    """``np.unique(values)`` of whole numbers, by sorting (from 0 to 2**16, by counting)."""
    if values.size and int(values.min()) >= 0 and int(values.max()) < 1 << 16:
        ordered = np.sort(values.astype(np.uint16), kind="stable").astype(values.dtype)
    else:
        ordered = np.sort(values)
    out: I64 = ordered[_starts(ordered)]
    return out


def _starts(keys: I64) -> I64:
    """Where each run of equal values of the sorted ``keys`` starts."""
    if keys.size == 0:
        return keys
    out: I64 = np.flatnonzero(keys[1:] != keys[:-1]) + 1
    return np.concatenate(([0], out))


@dataclass(slots=True, eq=False)
class _Fruitless:
    """The explanations of searches that found nothing, kept while no task has moved.

    What a search reads of its preemptor, when every plugin it asks judges a task by its
    shape (predicates and node scores by template shape, no device-choice plugin, gang alone
    voting on ``job_pipelined``, the built-in queue and victim plugins), there are no pod
    constraints, and the job has no hard topology and no task placed or running: the action
    and its rules, the job's queue, the shape and role of each claimed task in claim order,
    the role and best-effort flag of its other tasks, its minimums, the candidates (and the
    refusal that came with them) and the victims the plugins allowed. Everything else it
    reads is the cluster's state, which only moves with a task (a failed search undoes its
    trials): the answers are dropped as soon as one task's state or node differs from when
    they were kept."""

    answers: dict[tuple[Any, ...], VictimRefusal] = field(default_factory=dict)
    #: The task states and nodes the answers were found with.
    states: npt.NDArray[Any] = field(default_factory=lambda: np.zeros(0, dtype=np.int8))
    nodes: npt.NDArray[Any] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    #: Whether the session's plugins and rules allow keeping answers (None: not asked yet).
    usable: bool | None = None

    def _allowed(self, ssn: Session) -> bool:
        if self.usable is None:
            points = ssn.points
            self.usable = (
                points.shape_only
                and points.served_only_by(("job_pipelined",), _PIPELINED_BY)
                and points.served_only_by(("gpu_choice",), frozenset())
                and all(
                    points.built_in(p)
                    for p in ("allocatable", "preemptable", "reclaimable", "exposed")
                )
                and not ssn.gate.rules.hierarchical
                and pod_rules(ssn) is None
            )
        return self.usable

    def key(
        self,
        ssn: Session,
        scope: Scope,
        job: int,
        claim: list[int],
        allowed: I64,
        victims: I64,
    ) -> tuple[Any, ...] | None:
        """What the search for ``job`` reads of it, or None when its answer is not kept."""
        if not self._allowed(ssn):
            return None
        rec = ssn.snapshot.jobs[job]
        nt = rec.network_topology
        if nt is not None and nt.mode is TopologyMode.HARD:
            return None
        tasks = ssn.job_tasks(job)
        if bool((ssn.task_state[tasks] != TaskState.PENDING).any()):
            return None
        records = ssn.snapshot.tasks
        claimed = set(claim)
        templates, template_of = ssn.templates, ssn.template_of
        return (
            scope.action,
            scope.point,
            scope.whole,
            scope.baseline,
            scope.admissible,
            int(ssn.job_queue[job]),
            tuple((templates[int(template_of[t])].shape, records[t].role) for t in claim),
            tuple(
                sorted(
                    (records[t].role, records[t].best_effort)
                    for t in tasks.tolist()
                    if t not in claimed
                )
            ),
            int(ssn.job_min[job]),
            tuple(role_minimums(rec).items()),
            allowed.tobytes(),
            victims.tobytes(),
        )

    def _unmoved(self, ssn: Session) -> bool:
        """Whether every task has the state and node it had when the answers were kept
        (else they are dropped)."""
        if np.array_equal(self.states, ssn.task_state) and np.array_equal(
            self.nodes, ssn.task_node
        ):
            return True
        self.answers.clear()
        self.states = ssn.task_state.copy()
        self.nodes = ssn.task_node.copy()
        return False

    def answer(self, ssn: Session, key: tuple[Any, ...]) -> VictimRefusal | None:
        if not self.answers or not self._unmoved(ssn):
            return None
        return self.answers.get(key)

    def keep(self, ssn: Session, key: tuple[Any, ...], answer: VictimRefusal) -> None:
        self._unmoved(ssn)
        self.answers[key] = answer


#: The ``job_pipelined`` plugins whose vote reads a job's counters and records alone.
_PIPELINED_BY = frozenset({"gang"})


@dataclass(frozen=True, slots=True, eq=False)
class _JobOrder:
    """The ranks of victim jobs (:meth:`_Search._ranks`): the first task of each in victim
    order, the victim key read for each of those tasks, and each job's rank."""

    leads: I64
    keys: list[tuple[Any, ...]]
    rank: I64


@dataclass(slots=True, eq=False)
class _Charges:
    """What evicting a task gives back, read once per session: its row as its node is
    charged (:meth:`Session.row_on`), its devices (flat indices, -1 padding after them) and
    the milli-GPU it holds on each, and the node they were read for (-1: not read yet)."""

    rows: I64
    devices: I64
    milli: I64
    read_on: I64
    #: How many devices each task holds (the entries of its ``devices`` row before the padding).
    n_devices: I64 = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    #: Victim keys kept across searches, and the change log's position when last brought up
    #: to date (None: never).
    keys: dict[int, tuple[Any, ...]] = field(default_factory=dict)
    keys_cursor: int | None = None
    #: Job allocations, job task counters and queue allocations the kept keys were read with.
    held_by: tuple[I64, I64, I64] = field(default_factory=lambda: (_NONE, _NONE, _NONE))
    #: Each task's place in its job's victim order, for the jobs marked ``ordered``.
    within: I64 = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    ordered: BOOL = field(default_factory=lambda: np.zeros(0, dtype=np.bool_))
    #: Per job, the gang rule's surplus count (:meth:`spare_counts`) and the task counters it
    #: was read with.
    spare: I64 = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    spare_read: I64 = field(default_factory=lambda: np.zeros((0, 0), dtype=np.int64))
    #: Searches that found nothing (:class:`_Fruitless`).
    fruitless: _Fruitless = field(default_factory=lambda: _Fruitless())
    #: The ranks of the victim jobs of the last search that read them all
    #: (:meth:`_Search._every_rank`).
    job_order: _JobOrder | None = None
    #: What every victim of the last search gives back (:meth:`_Room.fits_all`), and what it
    #: was read for: the victims, their nodes, the nodes allowed, whether GPUs were claimed.
    all_victims: tuple[tuple[bytes, bytes, bytes | None, bool], _Entries] | None = None

    @classmethod
    def of(cls, ssn: Session) -> _Charges:
        kept = ssn.cache.victim_rows
        if isinstance(kept, _Charges):
            return kept
        n_tasks = ssn.task_req.shape[0]
        out = cls(
            np.zeros_like(ssn.task_req),
            np.full((n_tasks, max(ssn.arrays.max_gpus, 1)), -1, dtype=np.int64),
            np.zeros(n_tasks, dtype=np.int64),
            np.full(n_tasks, -1, dtype=np.int64),
            np.zeros(n_tasks, dtype=np.int64),
        )
        ssn.cache.victim_rows = out
        return out

    def victim_keys(self, ssn: Session) -> dict[int, tuple[Any, ...]]:
        """The victim keys (:meth:`Session.victim_key`) a search may reuse: kept across
        searches when every plugin ordering victims is a built-in one whose key is a function of
        the task's own records, its job's counters and allocation and its queue's allocation;
        the keys of tasks whose job or queue changed since are
        dropped (:meth:`Dispatch.victim_order_by_job_and_queue`). Otherwise a fresh dictionary
        for one search."""
        if not ssn.points.victim_order_by_job_and_queue():
            return {}
        log = ssn.changes
        if self.keys_cursor is None or not self.keys:
            self.held_by = (
                ssn.job_allocated.copy(),
                ssn.job_count.copy(),
                ssn.queue_allocated.copy(),
            )
        elif log.changed_since(self.keys_cursor):
            # what a key reads may have been changed and changed back (a trial's evictions):
            # only jobs and queues whose figures differ from those the keys were read with
            jobs = log.jobs_since(self.keys_cursor)
            queues = log.queues_since(self.keys_cursor)
            job_alloc, job_count, queue_alloc = self.held_by
            moved = (ssn.job_allocated[jobs] != job_alloc[jobs]).any(axis=1) | (
                ssn.job_count[jobs] != job_count[jobs]
            ).any(axis=1)
            q_moved = (ssn.queue_allocated[queues] != queue_alloc[queues]).any(axis=1)
            jobs, queues = jobs[moved], queues[q_moved]
            if jobs.size or queues.size:
                kept = np.fromiter(self.keys, dtype=np.int64, count=len(self.keys))
                job = ssn.task_job[kept]
                stale = np.isin(job, jobs) | np.isin(ssn.job_queue[job], queues)
                for t in kept[stale].tolist():
                    del self.keys[t]
                job_alloc[jobs] = ssn.job_allocated[jobs]
                job_count[jobs] = ssn.job_count[jobs]
                queue_alloc[queues] = ssn.queue_allocated[queues]
        self.keys_cursor = log.end
        return self.keys

    def positions(self, ssn: Session, tasks: I64, key: Callable[[int], tuple[Any, ...]]) -> I64:
        """Each task's place in its job's victim order, ordered by ``key`` the first time a
        job is asked about, then kept for the session: when victim keys are kept
        (:meth:`victim_keys`), each built-in plugin's key is made of parts that are the same for
        every task of a job (its and its queue's figures and records) and parts read from the
        task's own record, so the order of one job's tasks never changes while its figures do."""
        n_jobs = len(ssn.snapshot.jobs)
        if self.ordered.size != n_jobs:
            self.within = np.full(ssn.task_req.shape[0], -1, dtype=np.int64)
            self.ordered = np.zeros(n_jobs, dtype=np.bool_)
        of = ssn.task_job[tasks]
        missing = ~self.ordered[of]
        for j in np.unique(of[missing]).tolist() if missing.any() else ():
            mine = ssn.job_tasks(j).tolist()
            mine.sort(key=key)
            self.within[mine] = np.arange(len(mine), dtype=np.int64)
            self.ordered[j] = True
        out: I64 = self.within[tasks]
        return out

    def spare_counts(self, ssn: Session, jobs: I64) -> I64:
        """Per job of ``jobs`` (repeats allowed) without role minimums, how many tasks the gang
        rule lets go of any list of its tasks; -1 for a job with role minimums. Kept per job
        while its task counters (all the rule reads of it but its records) stay as they were."""
        n_jobs = len(ssn.snapshot.jobs)
        if self.spare.size != n_jobs:
            self.spare = np.full(n_jobs, -1, dtype=np.int64)
            self.spare_read = np.full((n_jobs, ssn.job_count.shape[1]), -1, dtype=np.int64)
        uniq = _distinct(jobs)
        stale = uniq[(ssn.job_count[uniq] != self.spare_read[uniq]).any(axis=1)]
        records = ssn.snapshot.jobs
        for j in stale.tolist():
            roles = role_minimums(records[j])
            self.spare[j] = -1 if roles else len(spare_tasks(ssn, j, ssn.job_tasks(j).tolist()))
            self.spare_read[j] = ssn.job_count[j]
        out: I64 = self.spare[jobs]
        return out

    def read(self, ssn: Session, tasks: I64) -> None:
        stale = self.read_on[tasks] != ssn.task_node[tasks]
        if not stale.any():
            return
        todo = np.unique(tasks[stale])
        nodes = ssn.task_node[todo]
        # :meth:`Session.row_on` for every task at once; a GPU task's column and devices
        # (and any task holding devices) one by one
        self.rows[todo] = ssn.task_req[todo]
        self.devices[todo] = -1
        self.n_devices[todo] = 0
        self.milli[todo] = 0
        self.read_on[todo] = nodes
        records = ssn.snapshot.tasks
        gpu = ssn.arrays.spec.gpu_column
        for t, node in zip(todo.tolist(), nodes.tolist(), strict=True):
            g = records[t].gpu_request
            held = ssn.task_gpus[t]
            if g is None and not held:
                continue
            milli = ssn.device_milli(t, node)
            if g is not None:
                self.rows[t, gpu] = g.count * milli
            devices = ssn.arrays.device_index(node, held)
            self.devices[t, : len(devices)] = devices
            self.n_devices[t] = len(devices)
            self.milli[t] = milli


def _kept_key(ssn: Session, keys: dict[int, tuple[Any, ...]], task: int) -> tuple[Any, ...]:
    """``task``'s victim key from ``keys``, read and kept there when missing."""
    key = keys.get(task)
    if key is None:
        key = keys[task] = ssn.victim_key(task)
    return key


def victim_key_of(ssn: Session) -> Callable[[int], tuple[Any, ...]]:
    """:meth:`Session.victim_key` through the keys the searches keep (:meth:`_Charges.victim_keys`:
    a key is read again once the change log names a change of what it reads)."""
    return functools.partial(_kept_key, ssn, _Charges.of(ssn).victim_keys(ssn))


def given_back(ssn: Session, tasks: I64) -> I64:
    """Per task of ``tasks``, what evicting it gives back on its node: its row as the node is
    charged (:meth:`Session.row_on`), read once per session and node (:class:`_Charges`)."""
    charges = _Charges.of(ssn)
    charges.read(ssn, tasks)
    out: I64 = charges.rows[tasks]
    return out


def job_ranks(ssn: Session, tasks: I64) -> I64:
    """Each task's place in its job's victim order (:meth:`Session.victim_key`), comparable
    between tasks of one job only: kept for the session when every plugin ordering victims
    is a built-in one (:meth:`_Charges.positions`), else read from the tasks' keys."""
    if ssn.points.victim_order_by_job_and_queue():
        return _Charges.of(ssn).positions(ssn, tasks, ssn.victim_key)
    key = victim_key_of(ssn)
    listed = tasks.tolist()
    out = np.empty(tasks.size, dtype=np.int64)
    out[sorted(range(len(listed)), key=lambda i: key(listed[i]))] = np.arange(tasks.size)
    return out


def devices_given_back(ssn: Session, tasks: I64) -> tuple[I64, I64]:
    """Per task of ``tasks``, the devices evicting it gives milli-GPU back on (flat device
    indices, a row per task padded with -1) and how many milli-GPU on each of them: as
    charged on their nodes, read with :func:`given_back`'s rows."""
    charges = _Charges.of(ssn)
    charges.read(ssn, tasks)
    devices: I64 = charges.devices[tasks]
    milli: I64 = charges.milli[tasks]
    return devices, milli


#: What evicting victim sets gives back (:meth:`_Room._entries`): per (set, node) pair the set,
#: the node and the rows freed; per (set, device) pair the device, and its milli-GPU freed with
#: the index of its (set, node) pair.
_Entries = tuple[I64, I64, I64, I64, I64]
#: Whole numbers below this are summed exactly in floating point.
_EXACT = 1 << 53


@dataclass(slots=True, eq=False)
class _Kind:
    """One template of the claim, for the room bound: how many tasks the claim has of it, its
    request on each node, and, with GPUs, the devices a task takes and the milli-GPU it needs
    on each (at least 1)."""

    count: int
    req: I64  # (n_nodes, n_resources)
    gpus: int
    need: I64  # (n_nodes,)
    slots: I64  # (n_nodes,): device takes each node has room for now
    held: I64  # (n_nodes,): tasks each node holds now
    #: Per resource, the request when it is the same on every node (else None).
    same: list[int | None] = field(default_factory=list)


class _Room:
    """A bound on what a trial can place, read without playing it.

    A trial in which the queue refuses a claimed task places nothing (see ``refused``).
    A claimed task is pipelined only onto a node whose room once releases finish (allocatable
    − used − pipelined + releasing) holds its request in every resource, and, when it asks for
    ``g`` GPUs, onto ``g`` devices each with its take free once releases finish; each one
    placed takes that request from the node's room and its take from each of its devices. So a
    node holds at most as many tasks of a template as its room holds requests, and at most a
    ``g``-th of the takes its devices hold; a trial can succeed only when, for every template
    of the claim, the nodes (inside ``among``) hold at least as many of its tasks as the claim
    has, counted on the room after the victims' release alone. Evicting adds each victim's row
    to its node's room and its take to each of its devices; every other node keeps the room it
    has now. The bound is read for many victim sets at once (:meth:`fits_sets`,
    :meth:`first_prefix`), one vectorized pass each."""

    def __init__(self, ssn: Session, claim: list[int], queue: int, *, bound: bool = True) -> None:
        """``bound`` false: a room that only holds evictions between trials and keeps what the
        gang rule answered (an explanation's), the bound itself not read (no claimed kind)."""
        self.ssn = ssn
        self.queue = queue
        self.room = ssn.future_idle()
        a = ssn.arrays
        #: Each device's free milli-GPU once releases finish.
        self.dev_later: I64 = (
            a.gpu_capacity[a.gpu_node] - ssn.gpu_used + ssn.gpu_releasing - ssn.gpu_pipelined
        )
        self.charges = _Charges.of(ssn)
        # The built-in queue plugins judge a template by its request and the holdings of its
        # queue alone (without a queue hierarchy), and take it while holdings + request stay
        # within a limit: a trial whose first claimed task is refused with F freed from the
        # queue is refused with anything freed from it that is at most F in every resource.
        self.by_holdings = ssn.points.built_in("allocatable") and not ssn.gate.rules.hierarchical
        self.refused: list[I64] = []
        self._refused_rows: I64 = np.zeros((0, ssn.task_req.shape[1]), dtype=np.int64)
        counts: dict[int, int] = {}
        for t in claim if bound else ():
            k = int(ssn.template_of[t])
            counts[k] = counts.get(k, 0) + 1
        gpu_col = a.spec.gpu_column
        n = a.n_nodes
        self.kinds: list[_Kind] = []
        for k, c in sorted(counts.items()):
            tmpl = ssn.templates[k]
            req = np.repeat(np.asarray(tmpl.request, dtype=np.int64)[None, :], n, axis=0)
            need = np.ones(n, dtype=np.int64)
            slots = np.zeros(n, dtype=np.int64)
            if tmpl.gpu_count:
                take = gpu_need(a, tmpl)
                req[:, gpu_col] = tmpl.gpu_count * take
                need = np.maximum(take, 1)
                per = np.maximum(self.dev_later // need[a.gpu_node], 0)
                slots = np.bincount(a.gpu_node, weights=per, minlength=n).astype(np.int64)
            same: list[int | None] = [int(x) for x in req[0]] if n else []
            if tmpl.gpu_count and n:
                same[gpu_col] = None
            kind = _Kind(c, req, tmpl.gpu_count, need, slots, slots, same)
            kind.held = self._held(kind, self.room, slots)
            self.kinds.append(kind)
        self.gpu_kinds = any(kind.gpus for kind in self.kinds)
        self._sums: dict[int, tuple[BOOL | None, list[int]]] = {}
        #: Whether a job keeps its minimum without these tasks (the search's occupancy).
        self.safe: dict[tuple[int, int, tuple[int, ...]], bool] = {}
        #: Per job without role minimums: how many of its tasks the gang rule lets go, and of
        #: how many it was asked.
        self.spare: dict[int, tuple[int, int]] = {}
        #: The evictions kept between placement-only trials.
        self.held: Statement | None = None
        #: The last many-set entries read (:meth:`_entries_of`): the arrays asked about, and
        #: what they give back.
        self._last: tuple[I64, I64, BOOL | None, _Entries] | None = None

    @staticmethod
    def _held(kind: _Kind, room: I64, slots: I64, nodes: I64 | None = None) -> I64:
        """How many tasks of ``kind`` each row of ``room`` (with ``slots`` device takes) holds,
        at most the claim's count; ``nodes``: the node of each row (default: every node).
        Read column by column (a request the same on every node read as one number)."""
        cap = kind.count
        held = np.full(room.shape[0], cap, dtype=np.int64)
        negative = np.zeros(room.shape[0], dtype=np.bool_)
        for r, amount in enumerate(kind.same):
            col = room[:, r]
            negative |= col < 0
            if amount is None:
                req = kind.req[:, r] if nodes is None else kind.req[nodes, r]
                per = np.where(req > 0, col // np.where(req > 0, req, 1), cap)
                np.minimum(held, per, out=held)
            elif amount > 0:
                np.minimum(held, col // amount, out=held)
        if kind.gpus:
            np.minimum(held, slots // kind.gpus, out=held)
        np.maximum(held, 0, out=held)
        held[negative] = 0
        return held

    def _base(self, among: BOOL | None) -> list[int]:
        kept = self._sums.get(id(among))
        if kept is None or kept[0] is not among:
            sums = [
                int(kind.held.sum() if among is None else kind.held[among].sum())
                for kind in self.kinds
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

    def _entries(self, tasks: I64, sets: I64, among: BOOL | None) -> _Entries:
        """What evicting each set gives back, per (set, node) pair in set-major order (nodes
        outside ``among`` left out): the set, the node, the rows freed, and per (set, device)
        pair the device, its milli-GPU freed and the index of its (set, node) pair."""
        ssn = self.ssn
        n = ssn.arrays.n_nodes
        none = np.zeros(0, dtype=np.int64)
        if tasks.size == 0:
            return none, none, np.zeros((0, self.room.shape[1]), dtype=np.int64), none, none
        self.charges.read(ssn, tasks)
        key = sets * n + ssn.task_node[tasks]
        rows = self.charges.rows[tasks]
        order = _grouping(key)
        if order is not None:
            key, rows = key[order], rows[order]
        starts = _starts(key)
        add = _run_sums(rows, starts)
        key = key[starts]
        if among is not None:
            inside = among[key % n]
            key, add = key[inside], add[inside]
        if not self.gpu_kinds or key.size == 0:
            return key // n, key % n, add, none, none
        per_task = self.charges.n_devices[tasks]
        most = int(per_task.max())
        if most == 0:
            return key // n, key % n, add, none, none
        devices = self.charges.devices[tasks, :most]
        d_dev = devices[devices >= 0]  # task by task, each one's devices in order
        d_set = np.repeat(sets, per_task)
        d_milli = np.repeat(self.charges.milli[tasks], per_task)
        n_dev = self.dev_later.size
        d_key = d_set * n_dev + d_dev
        order = _grouping(d_key)
        if order is not None:
            d_key, d_milli = d_key[order], d_milli[order]
        starts = _starts(d_key)
        d_add = _run_sums(d_milli, starts)
        d_key = d_key[starts]
        d_dev = d_key % n_dev
        owner_key = (d_key // n_dev) * n + ssn.arrays.gpu_node[d_dev]
        at = np.searchsorted(key, owner_key)
        found = at < key.size
        found[found] = key[at[found]] == owner_key[found]
        return key // n, key % n, add, d_dev[found], np.stack([d_add[found], at[found]])

    def _slot_gain(self, kind: _Kind, d_dev: I64, before: I64, after: I64) -> I64:
        """Device takes of ``kind`` gained on devices ``d_dev`` going from ``before`` to
        ``after`` milli-GPU freed."""
        need = kind.need[self.ssn.arrays.gpu_node[d_dev]]
        base = self.dev_later[d_dev]
        out: I64 = np.maximum((base + after) // need, 0) - np.maximum((base + before) // need, 0)
        return out

    def _entries_of(self, tasks: I64, sets: I64, n_sets: int, among: BOOL | None) -> _Entries:
        """:meth:`_entries`: read by node and device totals for one set of many tasks (a few
        cost less to sort than every node to sum); for many sets, the last answer given back
        when asked again about the very same arrays (the bundles' flat arrays, read by the
        bound of each bundle and then by the bound of their unions)."""
        if n_sets == 1:
            if tasks.size < 16:
                return self._entries(tasks, sets, among)
            return self._entries_of_one(tasks, among)
        last = self._last
        if last is not None and last[0] is tasks and last[1] is sets and last[2] is among:
            return last[3]
        out = self._entries(tasks, sets, among)
        self._last = (tasks, sets, among, out)
        return out

    def _entries_of_one(self, tasks: I64, among: BOOL | None) -> _Entries:
        """:meth:`_entries` of one set, summed per node and per device without sorting (sums
        of whole numbers below 2**53 in floating point are exact; above, :meth:`_entries`)."""
        ssn = self.ssn
        none = np.zeros(0, dtype=np.int64)
        n = ssn.arrays.n_nodes
        self.charges.read(ssn, tasks)
        rows = self.charges.rows[tasks]
        if tasks.size == 0 or int(rows.sum(axis=0).max()) >= _EXACT:
            return self._entries(tasks, np.zeros_like(tasks), among)
        nodes = ssn.task_node[tasks]
        e_node = np.flatnonzero(np.bincount(nodes, minlength=n))
        if among is not None:
            e_node = e_node[among[e_node]]
        add = np.empty((e_node.size, rows.shape[1]), dtype=np.int64)
        for r in range(rows.shape[1]):
            add[:, r] = np.bincount(nodes, weights=rows[:, r], minlength=n)[e_node]
        e_set = np.zeros(e_node.size, dtype=np.int64)
        per_task = self.charges.n_devices[tasks]
        most = int(per_task.max())
        if not self.gpu_kinds or e_node.size == 0 or most == 0:
            return e_set, e_node, add, none, none
        devices = self.charges.devices[tasks, :most]
        d_all = devices[devices >= 0]  # task by task, each one's devices in order
        milli = np.repeat(self.charges.milli[tasks], per_task)
        if int(milli.sum()) >= _EXACT:
            return self._entries(tasks, np.zeros_like(tasks), among)
        n_dev = self.dev_later.size
        d_dev = np.flatnonzero(np.bincount(d_all, minlength=n_dev))
        d_add = np.bincount(d_all, weights=milli, minlength=n_dev)[d_dev].astype(np.int64)
        at = np.full(n, -1, dtype=np.int64)  # each node's place among ``e_node``
        at[e_node] = np.arange(e_node.size)
        at = at[ssn.arrays.gpu_node[d_dev]]
        found = at >= 0
        return e_set, e_node, add, d_dev[found], np.stack([d_add[found], at[found]])

    def fits_all(self, victims: I64, among: BOOL | None) -> bool:
        """:meth:`fits_sets` of every victim of a search as one set, what they give back kept
        for the next search asking about the same victims on the same nodes (and the same
        nodes allowed, and claimed GPUs or not): :attr:`_Charges.all_victims`."""
        charges = self.charges
        key = (
            victims.tobytes(),
            self.ssn.task_node[victims].tobytes(),
            None if among is None else among.tobytes(),
            self.gpu_kinds,
        )
        kept = charges.all_victims
        if kept is None or kept[0] != key:
            kept = charges.all_victims = (key, self._entries_of_one(victims, among))
        return bool(self._fits_entries(kept[1], 1, among)[0])

    def fits_sets(self, tasks: I64, sets: I64, n_sets: int, among: BOOL | None) -> BOOL:
        """The room bound for many victim sets at once (set ``s`` is ``tasks[sets == s]``):
        False only when no trial evicting that set can place the whole claim."""
        return self._fits_entries(self._entries_of(tasks, sets, n_sets, among), n_sets, among)

    def _fits_entries(self, entries: _Entries, n_sets: int, among: BOOL | None) -> BOOL:
        """:meth:`fits_sets` from what the sets give back (:meth:`_entries`)."""
        e_set, e_node, add, d_dev, d_info = entries
        room = self.room[e_node] + add
        ok = np.ones(n_sets, dtype=np.bool_)
        for kind, base in zip(self.kinds, self._base(among), strict=True):
            slots = kind.slots[e_node]
            if kind.gpus and d_dev.size:
                gain = self._slot_gain(kind, d_dev, np.zeros_like(d_dev), d_info[0])
                slots = slots + np.bincount(d_info[1], weights=gain, minlength=e_node.size).astype(
                    np.int64
                )
            held = self._held(kind, room, slots, e_node) - kind.held[e_node]
            ok &= base + np.bincount(e_set, weights=held, minlength=n_sets) >= kind.count
        return ok

    def first_prefix(self, tasks: I64, sets: I64, n_sets: int, among: BOOL | None) -> int:
        """The smallest ``i`` such that the union of sets ``0..i`` passes the room bound
        (every smaller union fails it), or ``n_sets`` when none does."""
        e_set, e_node, add, d_dev, d_info = self._entries_of(tasks, sets, n_sets, among)
        # each (set, node) pair's room with the sets before it (on that node) evicted, and with
        # it; the same per device
        order = lexical_order(e_node, e_set)  # (set, node) pairs: each once
        before, after = self._cumulative(e_node, add, order)
        if d_dev.size:
            d_order = lexical_order(d_dev, e_set[d_info[1]])  # (set, device) pairs: each once
            d_before, d_after = self._cumulative(d_dev, d_info[0][:, None], d_order)
        ok = np.ones(n_sets, dtype=np.bool_)
        for kind, base in zip(self.kinds, self._base(among), strict=True):
            gain: npt.NDArray[np.float64] = np.zeros(n_sets, dtype=np.float64)
            if e_set.size:
                slots_after = kind.slots[e_node].copy()
                slots_before = slots_after.copy()
                if kind.gpus and d_dev.size:
                    # device takes gained by each pair's sets so far, cumulated along its node
                    own = self._slot_gain(kind, d_dev, d_before[:, 0], d_after[:, 0])
                    step = np.bincount(d_info[1], weights=own, minlength=e_node.size)
                    cum_step = self._cumulative(e_node, step[:, None].astype(np.int64), order)
                    slots_before += cum_step[0][:, 0]
                    slots_after += cum_step[1][:, 0]
                room_b = self.room[e_node] + before
                room_a = self.room[e_node] + after
                per = self._held(kind, room_a, slots_after, e_node) - self._held(
                    kind, room_b, slots_before, e_node
                )
                gain = np.bincount(e_set, weights=per, minlength=n_sets).astype(np.float64)
            ok &= base + np.cumsum(gain) >= kind.count
        hit = np.flatnonzero(ok)
        return int(hit[0]) if hit.size else n_sets

    @staticmethod
    def _cumulative(group: I64, add: I64, order: I64) -> tuple[I64, I64]:
        """For rows taken in ``order`` (sorted by ``group``, then set), the sum of ``add``
        over the earlier rows of the same group (``before``) and including the row
        (``after``), returned in the rows' own order."""
        g = group[order]
        a = add[order]
        cum = np.cumsum(a, axis=0)
        first = _starts(g)
        lengths = np.diff(np.append(first, g.size))
        cum -= np.repeat(cum[first] - a[first], lengths, axis=0)
        after = np.empty_like(cum)
        after[order] = cum
        before = after - add
        return before, after

    def freed(self, tasks: I64) -> I64:
        """What evicting ``tasks`` takes from the holdings of the claim's queue."""
        ssn = self.ssn
        mine = tasks[ssn.job_queue[ssn.task_job[tasks]] == self.queue]
        out: I64 = ssn.task_req[mine].sum(axis=0)
        return out

    def frees_none(self, victims: Sequence[int]) -> bool:
        """Whether neither ``victims`` nor the evictions held now take anything from the
        holdings of the claim's queue."""
        held = [op.task for op in self.held.ops] if self.held is not None else []
        tasks = np.asarray([*victims, *held], dtype=np.int64)
        return not self.freed(tasks).any()

    def note_refused(self, victims: Sequence[int]) -> None:
        """The queue refused a claimed task once ``victims`` were evicted (and the tasks
        before it placed: what they charge the queue does not depend on the victims)."""
        if self.by_holdings:
            self.refused.append(self.freed(np.asarray(victims, dtype=np.int64)))

    def refuses(self, tasks: I64) -> bool:
        """Whether a refusal noted before stands for evicting ``tasks``."""
        if not self.refused:
            return False
        if len(self.refused) != self._refused_rows.shape[0]:
            self._refused_rows = np.asarray(self.refused)
        return bool(np.all(self.freed(tasks) <= self._refused_rows, axis=1).any())

    def may_fit(self, victims: Sequence[int], among: BOOL | None) -> bool:
        """False only when no trial evicting ``victims`` can place the whole claim."""
        tasks = np.asarray(victims, dtype=np.int64)
        if self.refuses(tasks):
            return False
        return bool(self.fits_sets(tasks, np.zeros_like(tasks), 1, among)[0])
