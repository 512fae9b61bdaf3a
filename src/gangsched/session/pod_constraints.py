"""Pod affinity, pod anti-affinity and topology spread over every node at once.

These constraints read where *other pods* are, so their answer for a node moves whenever a
pod lands anywhere in the node's domain — not only when the node itself changes. They are
therefore not part of a template's cached evaluation (:mod:`gangsched.session.evaluation`);
they are a mask (and a score) worked out on demand and applied on top of it: the session's
``evaluate`` / ``best_node`` / ``fit_error`` hand a template the rules concern to
:meth:`PodRules.restrict`, :meth:`PodRules.best_node` and :meth:`PodRules.fit_error` (so
every action — allocate, backfill, preempt, reclaim, the gang placers' masks — reads the
masked answer), and the placement gate (:mod:`gangsched.session.gate`) checks every
placement.

Counts
------
A *counter* counts the pods of one kind per domain of one topology key: the pods matching a
term's selector and namespaces, or the pods *carrying* a required anti-affinity term (for the
rule that a running pod's anti-affinity keeps matching pods out of its domain). It holds the
tasks it may count (fixed for the cycle: labels and terms do not change) and their jobs, and
keeps its counts, the domain each of its tasks is counted in, and the change log's cursor of
its last read: a read moves only the tasks of the jobs the log names since that cursor (those
whose state or node may have moved), so its cost follows what changed, never the number of
pods it counts; a task no constraint concerns costs one lookup.

Rules (Kubernetes' InterPodAffinity and PodTopologySpread filters)
------------------------------------------------------------------
* required pod affinity: the node carries every term's topology key, and each term's domain
  holds a pod matching *all* the terms; except that when no such pod exists anywhere and the
  pod matches all its own terms, any node carrying the keys passes (the first of a group);
* required pod anti-affinity: no term's domain (of a node carrying its key) holds a pod the
  term matches;
* existing pods' anti-affinity: no pod in any domain of the node carries a required
  anti-affinity term that matches the incoming pod;
* spread (``DoNotSchedule``): the node carries the key, and the matching pods in its domain,
  plus one if the pod matches its own selector, exceed the emptiest eligible domain by at most
  ``max_skew``. Eligible nodes pass the pod's node selector and required node affinity and
  carry every hard constraint's key; the emptiest counts as 0 while fewer than
  ``min_domains`` domains are eligible. Pods being released do not count (they do for
  affinity).

Pods counted are those on a node in the session: running, bound, releasing and the ones
placed (or reserved) earlier in the cycle — a gang's own pods included, so anti-affinity
inside one job spreads its replicas. ``kubernetes.io/hostname`` reads the node's name when no
node carries that label.

Scores (the preferred terms and ``ScheduleAnyway``) are Kubernetes' InterPodAffinity and
PodTopologySpread scores, normalised to 0..100 over the nodes where the task passes and
weighted by ``nodeorder``'s ``podaffinity.weight`` and ``podtopologyspread.weight`` (2 each,
Volcano's defaults); without ``nodeorder`` they are not scored.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from gangsched._types import BOOL, F64, I64
from gangsched.config import arg_bool
from gangsched.config.args import arg_weight
from gangsched.model.pod_affinity import LabelSelector, PodAffinityTerm, TopologySpreadConstraint
from gangsched.model.tasks import Task
from gangsched.session.affinity_masks import required_mask
from gangsched.session.arrays import TaskTemplate
from gangsched.session.evaluation import Evaluation
from gangsched.session.task_states import TaskState, in_states

if TYPE_CHECKING:
    from gangsched.session.core import Session

__all__ = ["HOSTNAME", "PodRules", "pod_rules"]

#: The node label naming the node itself; read from the node's name when no node has it.
HOSTNAME = "kubernetes.io/hostname"

#: Pods counted by affinity terms: every pod on a node, releasing ones included.
_AFFINITY_STATES = (
    TaskState.ALLOCATED,
    TaskState.PIPELINED,
    TaskState.BOUND,
    TaskState.RUNNING,
    TaskState.RELEASING,
)
#: Pods counted by spread constraints: releasing pods are not.
_SPREAD_STATES = (TaskState.ALLOCATED, TaskState.PIPELINED, TaskState.BOUND, TaskState.RUNNING)

#: Kubernetes' InterPodAffinity argument hardPodAffinityWeight (its default).
HARD_POD_AFFINITY_WEIGHT = 1
_MAX_SCORE = 100.0

#: One term as a pod predicate: its selector and the namespaces it looks in.
_Match = tuple[LabelSelector | None, frozenset[str]]
#: Words for a rejected node (row) of one rejection.
_Words = Callable[[int], str]

_AVAILABLE = re.compile(r"^(\d+)/(\d+) nodes are available(?:: (.*))?\.$", re.S)


@dataclass(slots=True, eq=False)
class _Counter:
    """Pods of ``tasks`` per domain of one topology key (see the module's "Counts")."""

    tasks: I64
    jobs: BOOL  # (n_jobs,) the jobs of ``tasks``
    codes: I64  # (n_nodes,) each node's domain, -1: none
    n_domains: int
    states: tuple[int, ...]
    eligible: BOOL | None  # (n_nodes,) nodes whose pods count (None: every node)
    cursor: int | None = None
    counts: I64 = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    #: Per task of ``tasks``, the domain it is counted in (-1: not counted).
    counted: I64 = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    #: ``tasks`` positions grouped by job (``by_job``) and each group's job (``group_jobs``).
    by_job: I64 = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    group_jobs: I64 = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    def _domains(self, ssn: Session, tasks: I64) -> I64:
        """The domain each of ``tasks`` counts in now (-1: not counted)."""
        nodes = ssn.task_node[tasks]
        hit = np.flatnonzero(in_states(ssn.task_state[tasks], self.states) & (nodes >= 0))
        where = nodes[hit]
        if self.eligible is not None:
            keep = self.eligible[where]
            hit, where = hit[keep], where[keep]
        out: I64 = np.full(tasks.shape, -1, dtype=np.int64)
        out[hit] = self.codes[where]
        return out

    def read(self, ssn: Session) -> I64:
        """The counts per domain, brought up to date: the first read counts every task; a
        later one moves only the tasks of the jobs the change log names since its cursor."""
        log = ssn.changes
        if self.cursor is None:
            self.cursor = log.end
            self.counted = self._domains(ssn, self.tasks)
            hit = self.counted[self.counted >= 0]
            self.counts = np.bincount(hit, minlength=self.n_domains).astype(np.int64)
            jobs = ssn.task_job[self.tasks]
            self.by_job = np.argsort(jobs, kind="stable").astype(np.int64)
            self.group_jobs = jobs[self.by_job]
            return self.counts
        if not log.changed_since(self.cursor):
            return self.counts
        changed = log.jobs_since(self.cursor)
        self.cursor = log.end
        changed = changed[self.jobs[changed]]
        if not changed.size:
            return self.counts
        lo = np.searchsorted(self.group_jobs, changed, side="left")
        hi = np.searchsorted(self.group_jobs, changed, side="right")
        where = np.concatenate(
            [self.by_job[a:b] for a, b in zip(lo.tolist(), hi.tolist(), strict=True)]
        )
        old = self.counted[where]
        new = self._domains(ssn, self.tasks[where])
        moved = old != new
        if moved.any():
            old, new = old[moved], new[moved]
            np.subtract.at(self.counts, old[old >= 0], 1)
            np.add.at(self.counts, new[new >= 0], 1)
            self.counted[where[moved]] = new
        return self.counts

    def one_in(self, ssn: Session, code: int) -> int:
        """A counted task in domain ``code`` (for explanations), or -1."""
        self.read(ssn)
        hit = np.flatnonzero(self.counted == code)
        return int(self.tasks[hit[0]]) if hit.size else -1


@dataclass(slots=True, eq=False)
class _Spread:
    constraint: TopologySpreadConstraint
    counter: _Counter
    self_match: bool
    domains: BOOL  # (n_domains,) the domains of eligible nodes


@dataclass(slots=True, eq=False)
class _TemplateRules:
    """What concerns one template: its own terms and the carried terms that match it."""

    task: Task
    #: Required affinity: one counter per term (pods matching all terms), and whether the
    #: pod matches all its own terms.
    affinity: list[tuple[PodAffinityTerm, _Counter]]
    self_affine: bool
    #: Required anti-affinity: one counter per term (pods the term matches).
    anti: list[tuple[PodAffinityTerm, _Counter]]
    #: Running pods' required anti-affinity terms that match this pod: counters of carriers.
    carried: list[tuple[PodAffinityTerm, _Counter]]
    spread: list[_Spread]
    #: Score parts: (counter, weight ±) per preferred term of its own or carried term
    #: matching it, and its ScheduleAnyway constraints.
    scored: list[tuple[_Counter, float]]
    soft_spread: list[_Spread]

    @property
    def filters(self) -> bool:
        return bool(self.affinity or self.anti or self.carried or self.spread)


class _TermIndex:
    """Carried terms by one ``(key, value)`` pair their selector requires, so a pod is checked
    only against the terms that could match it (and those whose selector requires no pair)."""

    def __init__(self, keys: list[tuple[Any, ...]]) -> None:
        self.keys = keys
        self.by_pair: dict[tuple[str, str], list[int]] = {}
        self.scan: list[int] = []
        for i, key in enumerate(keys):
            sel = key[0].label_selector
            if sel is None:
                continue  # matches no pod
            if sel.match_labels:
                self.by_pair.setdefault(min(sel.match_labels.items()), []).append(i)
            else:
                self.scan.append(i)

    def candidates(self, labels: Mapping[str, str]) -> list[tuple[Any, ...]]:
        """The terms that may match a pod with ``labels``, in their first order."""
        found = set(self.scan)
        for pair in labels.items():
            found.update(self.by_pair.get(pair, ()))
        return [self.keys[i] for i in sorted(found)]


class PodRules:
    """The pod constraints of one session (built once, when first asked)."""

    def __init__(self, ssn: Session, read: tuple[str, ...]) -> None:
        self.ssn = ssn
        snap = ssn.snapshot
        cfg = ssn.config
        pred = cfg.plugin("predicates")
        if pred is not None and not pred.enabled("predicate"):
            pred = None
        order = cfg.plugin("nodeorder")
        if order is not None and not order.enabled("node_score"):
            order = None
        self.filter_affinity = pred is not None and arg_bool(
            pred.arguments, "predicate.PodAffinityEnable", True, plugin="predicates"
        )
        self.filter_spread = pred is not None and arg_bool(
            pred.arguments, "predicate.PodTopologySpreadEnable", True, plugin="predicates"
        )
        # Volcano's defaults: 2 each.
        self.affinity_weight = (
            0.0
            if order is None
            else arg_weight(order.arguments, "podaffinity.weight", 2.0, plugin="nodeorder")
        )
        self.spread_weight = (
            0.0
            if order is None
            else arg_weight(order.arguments, "podtopologyspread.weight", 2.0, plugin="nodeorder")
        )
        # Pods by identity: their namespace and their values of the label keys selectors
        # read (``read``); pods differing only in other labels are one identity.
        ident: dict[tuple[str, tuple[str | None, ...]], int] = {}
        of = np.empty(len(snap.tasks), dtype=np.int64)
        for i, t in enumerate(snap.tasks):
            labels = t.pod_labels
            seen = tuple(labels.get(k) for k in read)
            of[i] = ident.setdefault((t.namespace, seen), len(ident))
        self.idents: list[tuple[str, Mapping[str, str]]] = [
            (ns, {k: v for k, v in zip(read, seen, strict=True) if v is not None})
            for ns, seen in ident
        ]
        self.ident_of = of
        # Terms carried by pods, by (term, resolved namespaces): the carriers.
        anti: dict[tuple[PodAffinityTerm, frozenset[str]], list[int]] = {}
        hard_aff: dict[tuple[PodAffinityTerm, frozenset[str]], list[int]] = {}
        soft: dict[tuple[PodAffinityTerm, frozenset[str], int], list[int]] = {}
        for i, t in enumerate(snap.tasks):
            if t.pod_anti_affinity is not None:
                for term in t.pod_anti_affinity.required:
                    anti.setdefault((term, term.namespaces_for(t.namespace)), []).append(i)
                for w in t.pod_anti_affinity.preferred:
                    key = (w.term, w.term.namespaces_for(t.namespace), -w.weight)
                    soft.setdefault(key, []).append(i)
            if t.pod_affinity is not None:
                for term in t.pod_affinity.required:
                    hard_aff.setdefault((term, term.namespaces_for(t.namespace)), []).append(i)
                for w in t.pod_affinity.preferred:
                    key = (w.term, w.term.namespaces_for(t.namespace), w.weight)
                    soft.setdefault(key, []).append(i)
        self.anti_carriers = {k: np.array(v, dtype=np.int64) for k, v in anti.items()}
        self.soft_carriers = {k: np.array(v, dtype=np.int64) for k, v in soft.items()}
        for (term, ns), v in hard_aff.items():
            key = (term, ns, HARD_POD_AFFINITY_WEIGHT)
            prior = self.soft_carriers.get(key)
            arr = np.array(v, dtype=np.int64)
            self.soft_carriers[key] = arr if prior is None else np.union1d(prior, arr)
        # Indexes by one (key, value) pair a selector requires: the identities carrying each
        # pair, and the carried terms requiring it (the others are scanned).
        self._with_label: dict[tuple[str, str], list[int]] = {}
        for i, (_, labels) in enumerate(self.idents):
            for pair in labels.items():
                self._with_label.setdefault(pair, []).append(i)
        self._anti_terms = _TermIndex(list(self.anti_carriers))
        self._soft_terms = _TermIndex(list(self.soft_carriers))
        self._rules: dict[int, _TemplateRules | None] = {}
        self._matches: dict[tuple[_Match, ...], BOOL] = {}
        self._counters: dict[tuple[object, ...], _Counter] = {}
        self._codes: dict[str, tuple[I64, list[str]]] = {}

    # ------------------------------------------------------------------ building blocks

    def codes(self, key: str) -> tuple[I64, list[str]]:
        """Each node's domain code for ``key`` (-1: no such label) and the domains' values."""
        found = self._codes.get(key)
        if found is not None:
            return found
        a = self.ssn.arrays
        codes = a.label_codes.get(key)
        if codes is None and key == HOSTNAME:
            out = (np.arange(a.n_nodes, dtype=np.int64), list(a.node_names))
        elif codes is None:
            out = (np.full(a.n_nodes, -1, dtype=np.int64), [])
        else:
            values = a.label_values[key]
            names = [""] * len(values)
            for v, c in values.items():
                names[c] = v
            out = (np.asarray(codes, dtype=np.int64), names)
        self._codes[key] = out
        return out

    def _matching(self, preds: tuple[_Match, ...]) -> BOOL:
        """Per pod identity, whether it meets every predicate (only the identities carrying a
        label pair a predicate requires are checked)."""
        found = self._matches.get(preds)
        if found is not None:
            return found
        found = np.zeros(len(self.idents), dtype=np.bool_)
        pool: list[int] | None = None
        for sel, _ in preds:
            if sel is None:
                self._matches[preds] = found
                return found
            if sel.match_labels:
                ids = self._with_label.get(min(sel.match_labels.items()), [])
                if pool is None or len(ids) < len(pool):
                    pool = ids
        for i in range(len(self.idents)) if pool is None else pool:
            ns, labels = self.idents[i]
            found[i] = all(
                sel is not None and ns in spaces and sel.matches(labels) for sel, spaces in preds
            )
        self._matches[preds] = found
        return found

    def _counter(
        self,
        key: tuple[object, ...],
        tasks: I64,
        topology_key: str,
        states: tuple[int, ...],
        eligible: BOOL | None = None,
    ) -> _Counter:
        found = self._counters.get(key)
        if found is None:
            ssn = self.ssn
            codes, values = self.codes(topology_key)
            jobs = np.zeros(len(ssn.snapshot.jobs), dtype=np.bool_)
            jobs[ssn.task_job[tasks]] = True
            found = _Counter(tasks, jobs, codes, len(values), states, eligible)
            self._counters[key] = found
        return found

    def _matched(self, preds: tuple[_Match, ...], topology_key: str) -> _Counter:
        """Counter of the pods meeting every predicate, over ``topology_key``."""
        key = ("match", preds, topology_key)
        found = self._counters.get(key)
        if found is not None:
            return found
        tasks = np.flatnonzero(self._matching(preds)[self.ident_of]).astype(np.int64)
        return self._counter(key, tasks, topology_key, _AFFINITY_STATES)

    # ------------------------------------------------------------------ per template

    def of(self, tmpl: TaskTemplate) -> _TemplateRules | None:
        """The rules concerning ``tmpl``'s tasks, or None when none does."""
        if tmpl.index in self._rules:
            return self._rules[tmpl.index]
        out = self._build(self.ssn.snapshot.tasks[tmpl.tasks[0]])
        self._rules[tmpl.index] = out
        return out

    def _build(self, task: Task) -> _TemplateRules | None:
        ns, labels = task.namespace, task.pod_labels
        aff: list[tuple[PodAffinityTerm, _Counter]] = []
        anti: list[tuple[PodAffinityTerm, _Counter]] = []
        carried: list[tuple[PodAffinityTerm, _Counter]] = []
        spread: list[_Spread] = []
        soft_spread: list[_Spread] = []
        scored: list[tuple[_Counter, float]] = []
        self_affine = False
        if self.filter_affinity:
            if task.pod_affinity is not None and task.pod_affinity.required:
                terms = task.pod_affinity.required
                preds = tuple((t.label_selector, t.namespaces_for(ns)) for t in terms)
                aff = [(t, self._matched(preds, t.topology_key)) for t in terms]
                self_affine = all(
                    t.matches(p[1], ns, labels) for t, p in zip(terms, preds, strict=True)
                )
            if task.pod_anti_affinity is not None:
                for t in task.pod_anti_affinity.required:
                    pred = ((t.label_selector, t.namespaces_for(ns)),)
                    anti.append((t, self._matched(pred, t.topology_key)))
            for t, spaces in self._anti_terms.candidates(labels):
                carriers = self.anti_carriers[(t, spaces)]
                if t.matches(spaces, ns, labels):
                    key = ("carry", t, spaces)
                    c = self._counter(key, carriers, t.topology_key, _AFFINITY_STATES)
                    carried.append((t, c))
        if self.affinity_weight:
            for kind, mult in (("aff", 1), ("anti", -1)):
                group = task.pod_affinity if kind == "aff" else task.pod_anti_affinity
                if group is None:
                    continue
                for w in group.preferred:
                    pred = ((w.term.label_selector, w.term.namespaces_for(ns)),)
                    scored.append((self._matched(pred, w.term.topology_key), mult * w.weight))
            for t, spaces, weight in self._soft_terms.candidates(labels):
                carriers = self.soft_carriers[(t, spaces, weight)]
                if t.matches(spaces, ns, labels):
                    soft_key = ("carry-soft", t, spaces, weight)
                    c = self._counter(soft_key, carriers, t.topology_key, _AFFINITY_STATES)
                    scored.append((c, float(weight)))
        hard = [c for c in task.topology_spread if c.hard]
        soft = [c for c in task.topology_spread if not c.hard]
        if self.filter_spread and hard:
            spread = self._spreads(task, hard)
        if self.spread_weight and soft:
            soft_spread = self._spreads(task, soft)
        rules = _TemplateRules(task, aff, self_affine, anti, carried, spread, scored, soft_spread)
        if not rules.filters and not rules.scored and not rules.soft_spread:
            return None
        return rules

    def _spreads(self, task: Task, constraints: list[TopologySpreadConstraint]) -> list[_Spread]:
        """Counters of the spread constraints (one group: hard or soft)."""
        a = self.ssn.arrays
        eligible = np.ones(a.n_nodes, dtype=np.bool_)
        if task.node_selector:
            eligible &= a.selector_mask(task.node_selector)
        if task.node_affinity is not None and task.node_affinity.required:
            eligible &= required_mask(a, task.node_affinity)
        for c in constraints:
            eligible &= self.codes(c.topology_key)[0] >= 0
        out = []
        for c in constraints:
            sel = c.label_selector
            pred = ((sel, frozenset((task.namespace,))),)
            tasks = np.flatnonzero(self._matching(pred)[self.ident_of]).astype(np.int64)
            key = ("spread", pred, c.topology_key, eligible.tobytes())
            counter = self._counter(key, tasks, c.topology_key, _SPREAD_STATES, eligible)
            codes = counter.codes[eligible]
            domains = np.zeros(counter.n_domains, dtype=np.bool_)
            domains[codes[codes >= 0]] = True
            mine = sel is not None and sel.matches(task.pod_labels)
            out.append(_Spread(c, counter, mine, domains))
        return out

    # ------------------------------------------------------------------ filter

    def rejections(self, rules: _TemplateRules) -> list[tuple[BOOL, _Words]]:
        """Per filter, the nodes it rejects and the words for a rejected node."""
        ssn = self.ssn
        names = ssn.snapshot.tasks
        out: list[tuple[BOOL, _Words]] = []
        if rules.affinity:
            out.extend(self._affinity(rules))
        for term, c in rules.anti:
            counts = c.read(ssn)
            busy = np.append(counts > 0, False)  # slot -1: no domain
            reject = busy[c.codes]

            def anti_words(n: int, term: PodAffinityTerm = term, c: _Counter = c) -> str:
                code = int(c.codes[n])
                other = c.one_in(ssn, code)
                who = names[other].name if other >= 0 else "?"
                value = self.codes(term.topology_key)[1][code]
                return f"anti-affinity with pod {who!r} on topology {term.topology_key}={value}"

            out.append((reject, anti_words))
        for term, c in rules.carried:
            counts = c.read(ssn)
            busy = np.append(counts > 0, False)
            reject = busy[c.codes]

            def carried_words(n: int, term: PodAffinityTerm = term, c: _Counter = c) -> str:
                code = int(c.codes[n])
                other = c.one_in(ssn, code)
                who = names[other].name if other >= 0 else "?"
                value = self.codes(term.topology_key)[1][code]
                return f"anti-affinity of pod {who!r} on topology {term.topology_key}={value}"

            out.append((reject, carried_words))
        for s in rules.spread:
            out.extend(self._spread(s))
        return out

    def _affinity(self, rules: _TemplateRules) -> list[tuple[BOOL, _Words]]:
        ssn = self.ssn
        n = ssn.arrays.n_nodes
        has_keys = np.ones(n, dtype=np.bool_)
        exist = np.ones(n, dtype=np.bool_)
        total = 0
        for _, c in rules.affinity:
            counts = c.read(ssn)
            total += int(counts.sum())
            has_keys &= c.codes >= 0
            exist &= np.append(counts > 0, False)[c.codes]
        missing = ~has_keys
        if total == 0 and rules.self_affine:
            lacking = np.zeros(n, dtype=np.bool_)
        else:
            lacking = has_keys & ~exist

        def key_words(node: int) -> str:
            key = next(
                (t.topology_key for t, c in rules.affinity if c.codes[node] < 0),
                rules.affinity[0][0].topology_key,
            )
            return f"pod affinity: node lacks topology key {key}"

        def none_words(node: int) -> str:
            for t, c in rules.affinity:
                counts = c.counts
                code = int(c.codes[node])
                if code >= 0 and counts[code] <= 0:
                    value = self.codes(t.topology_key)[1][code]
                    sel = "no pod" if t.label_selector is None else t.label_selector.describe()
                    return (
                        f"pod affinity: no pod matching {sel} on topology {t.topology_key}={value}"
                    )
            return "pod affinity: no matching pod"

        return [(missing, key_words), (lacking, none_words)]

    def _spread(self, s: _Spread) -> list[tuple[BOOL, _Words]]:
        ssn = self.ssn
        c = s.constraint
        counts = s.counter.read(ssn)
        inside = counts[s.domains]
        # The emptiest eligible domain (none: nothing to be skewed against).
        low = int(inside.min()) if inside.size else int(np.iinfo(np.int32).max)
        if c.min_domains is not None and int(inside.size) < c.min_domains:
            low = 0
        codes = s.counter.codes
        missing = codes < 0
        skew = np.append(counts, 0)[codes] + int(s.self_match) - low
        over = ~missing & (skew > c.max_skew)
        key = c.topology_key

        def missing_words(node: int) -> str:
            return f"topology spread: node lacks topology key {key}"

        def skew_words(node: int) -> str:
            return f"topology spread: {key} skew {int(skew[node])} > maxSkew {c.max_skew}"

        return [(missing, missing_words), (over, skew_words)]

    def mask(self, rules: _TemplateRules) -> BOOL:
        """The nodes every pod filter lets the template's tasks onto now."""
        ok = np.ones(self.ssn.arrays.n_nodes, dtype=np.bool_)
        for reject, _ in self.rejections(rules):
            ok &= ~reject
        return ok

    # ------------------------------------------------------------------ score

    def score(self, rules: _TemplateRules, among: BOOL) -> F64 | None:
        """The weighted pod scores of every node (0..100 each before weights, normalised over
        ``among``, the nodes where the task passes), or None when there is none."""
        ssn = self.ssn
        n = ssn.arrays.n_nodes
        out: F64 | None = None
        if rules.scored:
            raw = np.zeros(n, dtype=np.int64)
            for c, weight in rules.scored:
                counts = c.read(ssn)
                raw += np.append(counts * int(weight), 0)[c.codes]
            if among.any():
                lo, hi = int(raw[among].min()), int(raw[among].max())
            else:
                lo = hi = 0
            norm = np.zeros(n) if hi == lo else np.floor(_MAX_SCORE * (raw - lo) / (hi - lo))
            out = norm * self.affinity_weight
        if rules.soft_spread:
            spread = self._spread_score(rules.soft_spread, among) * self.spread_weight
            out = spread if out is None else out + spread
        return out

    def _spread_score(self, parts: list[_Spread], among: BOOL) -> F64:
        """Kubernetes' PodTopologySpread score: per node, the matching pods of its domain
        times log(domains + 2) plus max_skew - 1, summed over the constraints and rounded;
        then the fewest-pods node gets 100 (``100 * (max + min - s) / max``). Nodes lacking
        a constraint's key score 0."""
        ssn = self.ssn
        n = ssn.arrays.n_nodes
        ignored = np.zeros(n, dtype=np.bool_)
        for s in parts:
            ignored |= s.counter.codes < 0
        valid = among & ~ignored
        raw = np.zeros(n)
        for s in parts:
            c = s.constraint
            counts = s.counter.read(ssn)
            codes = s.counter.codes
            size = int(np.unique(codes[valid]).size)
            weight = math.log(size + 2)
            raw += np.append(counts, 0)[codes] * weight + (c.max_skew - 1)
        score = np.floor(raw + 0.5)
        if not valid.any():
            return np.zeros(n)
        hi = max(float(score[valid].max()), 0.0)
        lo = float(score[valid].min())
        out = np.full(n, _MAX_SCORE) if hi == 0 else np.floor(_MAX_SCORE * (hi + lo - score) / hi)
        out[ignored] = 0.0
        return out

    # ------------------------------------------------------------------ the session's asks

    def best_node(self, tmpl: TaskTemplate, among: BOOL | None) -> tuple[int, bool]:
        """:meth:`Session.best_node` for a template the rules concern."""
        ssn = self.ssn
        rules = self.of(tmpl)
        assert rules is not None
        mask = self.mask(rules) if rules.filters else None
        if mask is not None:
            among = mask if among is None else among & mask
        if not rules.scored and not rules.soft_spread:
            return ssn.evaluator.best_node(tmpl, among)
        ev = ssn.evaluator.evaluate(tmpl)
        base = ev.ok if among is None else ev.ok & among
        for fit, pipelined in ((ev.fit_idle, False), (ev.fit_future, True)):
            where = base & fit
            if where.any():
                extra = self.score(rules, where)
                total = ev.score if extra is None else ev.score + extra
                return int(np.argmax(np.where(where, total, -np.inf))), pipelined
        return -1, False

    def restrict(self, tmpl: TaskTemplate, ev: Evaluation) -> Evaluation:
        """:meth:`Session.evaluate` for a template the rules concern: the template's cached
        evaluation with the pod filters' mask applied to ``ok`` and the two "best" vectors
        (a new record; the cached one is left as it is)."""
        rules = self.of(tmpl)
        if rules is None or not rules.filters:
            return ev
        mask = self.mask(rules)
        if mask.all():
            return ev
        return replace(
            ev,
            ok=ev.ok & mask,
            best_idle=np.where(mask, ev.best_idle, -np.inf),
            best_future=np.where(mask, ev.best_future, -np.inf),
            reasons=None,
            error=None,
        )

    def fit_error(self, tmpl: TaskTemplate, among: BOOL | None) -> str:
        """:meth:`Session.fit_error` for a template the rules concern: nodes that pass every
        other filter and fit once releases finish, but fail a pod filter, are named by the
        first pod filter they fail."""
        ssn = self.ssn
        base = ssn.evaluator.fit_error(tmpl, among)
        rules = self.of(tmpl)
        if rules is None or not rules.filters:
            return base
        ev = ssn.evaluator.evaluate(tmpl)
        passing = ev.ok & ev.fit_future
        if among is not None:
            passing = passing & among
        why: dict[str, int] = {}
        hit = np.zeros(passing.size, dtype=np.bool_)
        for reject, words in self.rejections(rules):
            rows = np.flatnonzero(reject & passing & ~hit)
            hit[rows] = True
            for r in rows.tolist():
                w = words(r)
                why[w] = why.get(w, 0) + 1
        m = _AVAILABLE.match(base)
        if not why or m is None:
            return base
        n_ok = int(m.group(1)) - int(hit.sum())
        parts = sorted(((cnt, w) for w, cnt in why.items()), key=lambda p: (-p[0], p[1]))
        detail = ", ".join(f"{cnt} node(s) failed {w}" for cnt, w in parts)
        if m.group(3):
            detail += ", " + m.group(3)
        return f"{n_ok}/{m.group(2)} nodes are available: {detail}."

    def refusal(self, task: int, node: int) -> str | None:
        """Why placing ``task`` on ``node`` breaks a pod filter, or None (the gate's check)."""
        ssn = self.ssn
        ti = int(ssn.template_of[task])
        if ti < 0:
            return None
        rules = self.of(ssn.templates[ti])
        if rules is None or not rules.filters:
            return None
        for reject, words in self.rejections(rules):
            if reject[node]:
                return words(node)
        return None

    def concerns(self, tmpl: TaskTemplate) -> bool:
        return self.of(tmpl) is not None


def pod_rules(ssn: Session) -> PodRules | None:
    """The session's pod rules, or None when no task of the snapshot carries a pod
    constraint (then nothing here costs anything)."""
    cache = ssn.cache
    found = cache.pod_rules
    if found is False:
        return None
    if isinstance(found, PodRules):
        return found
    read = ssn.pod_label_keys  # the opening's pod_label_keys(ssn.snapshot)
    if read is None:
        cache.pod_rules = False
        return None
    rules = PodRules(ssn, read)
    cache.pod_rules = rules
    return rules
