"""Differential campaign: gangsched's decisions against the real Volcano scheduler.

Random small clusters (homogeneous and mixed nodes, queues with weights, capabilities and
guarantees, gangs with role minimums, priorities, best-effort tasks, running work to preempt)
are scheduled for one cycle by gangsched and by a command that runs one session of Volcano on
the same snapshot (``GANGSCHED_VOLCANO_ORACLE``: the path of that command; it reads
``{"snapshot": ..., "conf": ...}`` on standard input and prints per-job outcomes), with the
later Volcano fixes of :data:`FIXES` applied. Volcano is run several times (its node choice
among equal scores and its map order vary); a cluster diverges only when gangsched's per-job
outcome — tasks bound, tasks reserved, tasks evicted, phase after the cycle — matches none of
Volcano's runs.

Both sides read the same ``volcano-scheduler.conf`` text (gangsched through
:meth:`gangsched.config.Config.from_volcano_yaml`). A diverging cluster is first run again on
Volcano with each emulated later upstream change of :data:`LATER` the command offers (``-fix``);
when gangsched matches that run, the cluster's class is the change (gangsched follows it).
Otherwise the class is named after the first job that differs: which outcome differs and which
way (``evicted: gangsched>volcano``).

Configurations whose clusters carry node affinity (required and preferred terms over node
labels and names) or Volcano's task topology (``task-topology`` plugin, the PodGroup
annotations) need a command that passes them to Volcano (:func:`oracle_features`); the
harness in ``volcano-oracle`` before its extension reads neither field of the snapshot (Go's
JSON decoding drops them without a note), so those rows are skipped, and said so, with it.

Usage::

    GANGSCHED_VOLCANO_ORACLE=<path> python tools/volcano_differential.py --clusters 1000
    ... --config default --config preemption --seed 0 --repeat 4 --show 3
    ... --config affinity --config affinity-preemption --config task-topology
    ... --config preemption --cluster 368 --cluster 553   # single clusters, as listed

It prints one table row per configuration and class, and exits non-zero when a class is not
in :data:`VERDICTS`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

import gangsched as gs
from gangsched.config import Config

ORACLE_ENV = "GANGSCHED_VOLCANO_ORACLE"

_TIERS = """tiers:
- plugins:
  - name: priority
  - name: gang
  - name: conformance
- plugins:
  - name: overcommit
  - name: drf
  - name: predicates
  - name: proportion
  - name: nodeorder
  - name: binpack
"""

_DEFAULT_ACTIONS = 'actions: "enqueue, allocate, backfill"\n'
_PREEMPTION_ACTIONS = 'actions: "enqueue, allocate, preempt, reclaim, backfill"\n'

#: The configurations compared: Volcano's default actions and the preemption actions, on
#: plain clusters, on clusters whose jobs carry node affinity, and with Volcano's task-topology
#: plugin on clusters whose jobs carry a task topology (:data:`FEATURES`).
CONFIGS: dict[str, str] = {
    "default": _DEFAULT_ACTIONS + _TIERS,
    "preemption": _PREEMPTION_ACTIONS + _TIERS,
    "affinity": _DEFAULT_ACTIONS + _TIERS,
    "affinity-preemption": _PREEMPTION_ACTIONS + _TIERS,
    "task-topology": _DEFAULT_ACTIONS + _TIERS + "  - name: task-topology\n",
}

#: What the generator adds to the clusters of a configuration (see :func:`random_cluster`).
FEATURES: dict[str, tuple[str, ...]] = {
    "affinity": ("node_affinity",),
    "affinity-preemption": ("node_affinity",),
    "task-topology": ("task_topology",),
}

#: Volcano's tiers with every victim plugin (priority, gang, conformance, drf, proportion) in
#: the first tier, so their answers are intersected: a diverging cluster under the preemption
#: actions is run again with these tiers; gangsched matching it means the divergence is the
#: tier walk (Volcano asks the next tier only when a tier gives no answer, and then that tier
#: alone), where gangsched applies every victim rule whatever tier answers.
MERGED_TIERS = """tiers:
- plugins:
  - name: priority
  - name: gang
  - name: conformance
  - name: drf
  - name: proportion
- plugins:
  - name: overcommit
  - name: predicates
  - name: nodeorder
  - name: binpack
"""

#: The class of a divergence that disappears under :data:`MERGED_TIERS`.
ALL_RULES = "victim rules: gangsched applies them all, Volcano's answering tier alone"

#: Fixes of later Volcano the oracle applies: nodeorder and predicates both added each placed
#: pod to the node map, so pods counted twice in the node scores (fixed in 9167045b7, v1.8.0).
FIXES = ("-fix", "nodeorder-addpod")

_V114 = (
    "later Volcano: reclaim evicts inside a statement, counts node idle and commits only a "
    "pipelined job (reworked in v1.14.0); this build evicts task by task and keeps them"
)
#: Later upstream changes the Volcano command can emulate (``-fix NAME``), each with its
#: verdict: a divergence that disappears under the emulation is that change, which gangsched
#: follows (the test pinning it is in tests/cycle/test_volcano_parity.py).
LATER: dict[str, str] = {
    "allocate-queue-order": (
        "later Volcano: allocate pushes a queue back after its job's allocation, so the queue "
        "order reads the share just allocated (a684cd848, v1.10.0); this build pushed it back "
        "before, with the share of before, and a ready job's queue came again"
    ),
    "preempt-queue-allocatable": (
        "later Volcano: preempt stops evicting and reserves the preemptor only when its queue "
        "may take it (ssn.Allocatable), not merely when the queue is not overused (af5c56308, "
        "v1.9.0)"
    ),
    "tier-walk": (
        "later Volcano: the victim walk keeps no flag across tiers, so when a first-tier "
        "plugin answers none after another answered some the next tier chooses (7976b63e2, "
        "v1.11.0); this build then ended the walk with no victims"
    ),
    "preempt-empty-victims": (
        "later Volcano: preempt accepts a node where the preemptor fits with no victim "
        "(util.ValidateVictims, 5939cc189, v1.8.0); this build refused it ('no victims')"
    ),
    "reclaim-keep-queue": (
        "later Volcano: reclaim goes on with a queue's other jobs when its queue refuses a "
        "job's task (305771369, v1.14.0; the refusal is proportion's preemptive check since "
        "61f9c9d62, v1.11.0); this build dropped the queue from its loop at the first refusal"
    ),
    "nodeaffinity-normalize": (
        "later Volcano: nodeorder's NodeAffinity score is normalised to 0-100 over the nodes "
        "scored, as kube's (375da74fc, v1.16.0); this build added the raw sum of the matched "
        "preferred weights"
    ),
}

#: The class of a divergence that disappears when gangsched recomputes every node's scores
#: for every task (:func:`gangsched_outcome` with ``fresh=True``).
LAG = "gangsched: task-topology scores of unchanged nodes lag"

#: Volcano (this 2023 build) reserved a job's best-effort tasks through reclaim or preempt,
#: evicting for a claim that needs no resources, where gangsched binds them in backfill.
BEST_EFFORT_CLAIM = "volcano evicts to reserve best-effort tasks"

#: Volcano (this 2023 build) reserved (pipelined) part of a gang and kept it although the gang
#: stayed below its minimum: its reclaim pipelines a job's tasks one at a time, evicting for
#: each, and keeps what it did when the job's queue refuses a later task (``allocatable``).
PARTIAL_GANG = "volcano reclaims for a gang it leaves below minAvailable"
#: Volcano (this 2023 build) reclaimed for a job's tasks beyond its minimum (elastic tasks).
ELASTIC_CLAIM = "volcano reclaims beyond a job's minAvailable"

#: Volcano (this 2023 build) evicted and reserved nothing for it: its reclaim evicts task by
#: task outside a statement and keeps the evictions when the reclaimer is not reserved.
KEPT_EVICTIONS = "volcano keeps evictions that reserved nothing"

#: gangsched took more tasks of a running gang than Volcano, leaving it below its minimum (a
#: symptom; :data:`WALK_ON_EMPTY` once the 2023 walk explains it).
GANGSCHED_BREAKS = "gangsched takes more of a gang below minAvailable"

#: gangsched took a running gang below its minimum where this Volcano evicted nothing of it:
#: in this build a first-tier plugin answering none after another answered some ended the
#: walk with no victims (``init`` in ``Session.Preemptable`` / ``Reclaimable``); since
#: 7976b63e2 (v1.11.0) the next tier chooses, as gangsched's walk does.
WALK_ON_EMPTY = "gangsched breaks a gang below minAvailable (tier walk since v1.11)"

#: gangsched reclaimed from a queue above its deserved share that holds less than the
#: reclaimer's request in some resource, where this Volcano's proportion answered no victim
#: of that queue (``LessPartly`` in its ``reclaimable``, removed in 975277f55, v1.12.0).
RECLAIM_SHORT_QUEUE = "gangsched reclaims from a queue holding less than the claim (since v1.12)"


#: gangsched reports Running for a job whose scheduled tasks are all being evicted (releasing),
#: where this Volcano reports Pending: its phase counted releasing tasks as not scheduled.
RELEASING_SCHEDULED = "phase: gangsched counts releasing tasks as scheduled"

#: Divergence classes with a verdict (see docs/volcano.md, "Differences from Volcano"). Each
#: names the cause found in the sampled clusters of the class and the Volcano change that
#: gangsched follows; the test that pins the newer behaviour is in
#: tests/cycle/test_volcano_parity.py.
VERDICTS: dict[str, str] = {
    KEPT_EVICTIONS: _V114,
    WALK_ON_EMPTY: (
        "later Volcano: a first-tier victim plugin answering none sends the walk to the next "
        "tier even when another first-tier plugin answered some (7976b63e2, v1.11.0: the "
        "`init` flag of Session.Preemptable / Reclaimable removed); this build then ended the "
        "walk with no victims, so the next tier's choice that takes a gang below its minimum "
        "was never made"
    ),
    RECLAIM_SHORT_QUEUE: (
        "later Volcano: proportion's reclaimable offers the tasks of a queue above its "
        "deserved share even when the queue holds less than the reclaimer's request in cpu, "
        "memory or a scalar resource it holds (975277f55, v1.12.0: the LessPartly check "
        "removed); this build offered none of them, so the reclaim that takes a gang below "
        "its minimum was never made"
    ),
    PARTIAL_GANG: (
        "later Volcano: reclaim commits a job's evictions and reservations only once the job "
        "is pipelined (a statement per job, v1.14.0); this build pipelined a gang's tasks one "
        "at a time, evicting for each, and kept them when the queue's allocatable refused the "
        "rest (the gang's tasks together exceed its queue's deserved share), so the gang "
        "stayed below its minimum with its victims gone; gangsched, as v1.14, places the "
        "claim whole or evicts nothing"
    ),
    ELASTIC_CLAIM: (
        "later Volcano: only a starving job reclaims, and only while it is below its minimum "
        "(a561215e0, v1.11.0); this build's reclaim took any job with pending tasks and "
        "claimed for each of them, so a job at or past its minimum evicted another queue's "
        "tasks for its elastic ones; gangsched, as v1.11, claims only up to a job's minimum "
        "(choosing the tasks that also meet its role minimums, which v1.11 does not read in "
        "reclaim)"
    ),
    BEST_EFFORT_CLAIM: (
        "later Volcano: a best-effort claim needs no eviction: reclaim counts the node's idle "
        "room since v1.14.0 (an empty request always fits), and preempt refuses a best-effort "
        "preemptor against other pods since 59b54cc3c (v1.10.0); this build evicted running "
        "tasks of another queue and reserved the best-effort tasks"
    ),
    "phase: gangsched Inqueue / volcano Running": (
        "later Volcano: a PodGroup is Running only once enough pods are scheduled (bound), "
        "not merely allocated (15a6a5a65, v1.13.0); this build reported Running for a job "
        "whose only ready task was a best-effort one backfill allocated but did not bind"
    ),
    "evicted: gangsched>volcano": (
        "later Volcano: preempt accepts a node where the preemptor fits with no victim "
        "(util.ValidateVictims, 5939cc189, v1.8.0); this build refused it ('no victims'), so "
        "a gang whose first task had evicted one could not place the next and its statement "
        "was discarded (each sampled cluster shows the refusal in Volcano's log)"
    ),
    "evicted: gangsched<volcano": _V114,
    "pipelined: gangsched>volcano": _V114,
    RELEASING_SCHEDULED: (
        "later Volcano: a PodGroup's releasing tasks that were scheduled count as scheduled, "
        "so a gang whose pods are terminating stays Running (d725ce4db, after "
        "v1.16.0-alpha.0); this build counted them as not scheduled and reported Pending"
    ),
    LAG: (
        "gangsched approximation (documented in plugins/task_topology.py): a node's "
        "task-topology score, whose last term reads the bucket's remaining request, is "
        "recomputed when that node changes, so it may lag on the other nodes after a task of "
        "the bucket is placed; Volcano recomputes every node for every task (gangsched then "
        "matches Volcano when every score is recomputed)"
    ),
    **{f"later: {name}": verdict for name, verdict in LATER.items()},
    f"later: {'+'.join(LATER)}": "later Volcano: all of " + "; ".join(LATER.values()),
}


def verdict_of(cls: str) -> str | None:
    """The verdict of a class, None when it has none. ``later: NAME; CLASS`` (a divergence
    that, with the later upstream change NAME emulated, becomes CLASS) has the verdicts of
    both; so for any number of parts joined by ``; ``, each with a verdict."""
    if cls in VERDICTS:
        return VERDICTS[cls]
    verdicts = [VERDICTS.get(part) for part in cls.split("; ")]
    if len(verdicts) < 2 or any(v is None for v in verdicts):
        return None
    head = "both" if len(verdicts) == 2 else "each"
    return f"{head}: " + "; and ".join(str(v) for v in verdicts)


#: Per job: (bound, pipelined, evicted, phase), and in configurations of :data:`PLACEMENTS`
#: also the sorted nodes its tasks were bound to.
Outcome = dict[str, tuple[Any, ...]]

#: Configurations compared on where tasks go as well: node affinity and task topology mostly
#: move tasks between nodes without changing how many are bound. Best-effort tasks are left
#: out of it: Volcano's backfill puts them on the first node that passes the predicates in Go
#: map order, a random node.
PLACEMENTS = frozenset({"affinity", "affinity-preemption", "task-topology"})


# ------------------------------------------------------------------------ random clusters


def _node(rng: random.Random, i: int, kind: int) -> dict[str, Any]:
    cpu, mem, gpus = [(8, 32, 0), (16, 64, 4), (32, 128, 8)][kind]
    node: dict[str, Any] = {
        "name": f"n{i}",
        "allocatable": {"cpu": cpu, "memory": f"{mem}Gi", "pods": 110},
    }
    if gpus:
        node["gpus"] = {"count": gpus, "model": "A100"}
    return node


def random_cluster(seed: int, features: tuple[str, ...] = ()) -> dict[str, Any]:
    """One random cluster (snapshot as plain data) from ``seed``. ``features``:
    ``"node_affinity"`` (node labels; jobs whose tasks carry required and preferred node
    affinity terms), ``"task_topology"`` (jobs with a task topology over their roles). The
    base cluster of a seed is the same whatever the features; they are drawn from their own
    random stream."""
    data = _base_cluster(seed)
    extra = random.Random(f"{seed}:{','.join(features)}")
    for feature in features:
        if feature == "node_affinity":
            _add_node_affinity(extra, data)
        elif feature == "task_topology":
            _add_task_topology(extra, data)
        else:
            raise ValueError(f"unknown cluster feature {feature!r}")
    return data


_ZONES = ("a", "b", "c")


def _term(rng: random.Random, names: list[str]) -> dict[str, Any]:
    """A node selector term of one or two requirements over the generator's labels, or (now
    and then) a node name."""
    if rng.random() < 0.15:
        op = rng.choice(["In", "NotIn"])
        return {
            "match_fields": [
                {"key": "metadata.name", "operator": op, "values": [rng.choice(names)]}
            ]
        }
    exprs: list[dict[str, Any]] = []
    for key in rng.sample(["zone", "rank", "ssd"], rng.randint(1, 2)):
        if key == "zone":
            op = rng.choice(["In", "NotIn"])
            values = sorted(rng.sample(_ZONES, rng.randint(1, 2)))
            exprs.append({"key": key, "operator": op, "values": values})
        elif key == "rank":
            op = rng.choice(["Gt", "Lt"])
            exprs.append({"key": key, "operator": op, "values": [str(rng.randint(1, 4))]})
        else:
            exprs.append({"key": key, "operator": rng.choice(["Exists", "DoesNotExist"])})
    return {"match_expressions": exprs}


def _add_node_affinity(rng: random.Random, data: dict[str, Any]) -> None:
    """Labels on every node (``zone``, ``rank``, sometimes ``ssd``); per job, maybe required
    terms and maybe weighted preferred terms, the same on each of its tasks (one pod
    template)."""
    for node in data["nodes"]:
        labels = {"zone": rng.choice(_ZONES), "rank": str(rng.randint(1, 5))}
        if rng.random() < 0.4:
            labels["ssd"] = "true"
        node["labels"] = labels
    names = [n["name"] for n in data["nodes"]]
    chosen: dict[str, dict[str, Any]] = {}
    for job in data["jobs"]:
        affinity: dict[str, Any] = {}
        if rng.random() < 0.5:
            affinity["required"] = [_term(rng, names) for _ in range(rng.randint(1, 2))]
        if rng.random() < 0.6:
            affinity["preferred"] = [
                {"weight": rng.randint(1, 100), "preference": _term(rng, names)}
                for _ in range(rng.randint(1, 2))
            ]
        if affinity:
            chosen[job["name"]] = affinity
    for task in data["tasks"]:
        if task["job"] in chosen:
            task["node_affinity"] = chosen[task["job"]]


def _add_task_topology(rng: random.Random, data: dict[str, Any]) -> None:
    """Per job, maybe a task topology over its roles: together, apart, and an order. A role
    is never both self-affine and self-anti-affine (a contradiction that Volcano and gangsched
    resolve differently; see docs/volcano.md)."""
    roles: dict[str, list[str]] = {}
    for task in data["tasks"]:
        if task["role"] not in roles.setdefault(task["job"], []):
            roles[task["job"]].append(task["role"])
    for job in data["jobs"]:
        mine = roles.get(job["name"], [])
        if not mine or rng.random() < 0.3:
            continue
        topology: dict[str, Any] = {}
        kind = rng.randrange(4)
        if kind == 2 and len(mine) == 1:
            kind = rng.choice([0, 1])
        if kind in (0, 2):
            topology["affinity"] = [sorted(mine)] if len(mine) > 1 else [mine]
        if kind in (1, 2) or (kind == 3 and len(mine) == 1):
            topology["anti_affinity"] = [[rng.choice(mine)]]
        if len(mine) > 1 and rng.random() < 0.6:
            order = list(mine)
            rng.shuffle(order)
            topology["task_order"] = order
        if topology:
            job["task_topology"] = topology


def _base_cluster(seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    n_nodes = rng.randint(1, 4)
    if rng.random() < 0.5:
        kinds = [rng.randrange(3)] * n_nodes
    else:
        kinds = [rng.randrange(3) for _ in range(n_nodes)]
    nodes = [_node(rng, i, k) for i, k in enumerate(kinds)]
    free = [
        {"cpu": n["allocatable"]["cpu"], "mem": int(n["allocatable"]["memory"][:-2])} for n in nodes
    ]
    gpu_free = [list(range(n["gpus"]["count"])) if "gpus" in n else [] for n in nodes]
    total_cpu = sum(f["cpu"] for f in free)
    queues: list[dict[str, Any]] = []
    guaranteed = 0
    for q in range(rng.randint(1, 3)):
        queue: dict[str, Any] = {"name": f"q{q}", "weight": rng.randint(1, 4)}
        if rng.random() < 0.25:
            queue["capability"] = {"cpu": rng.choice([4, 8, 16, 32])}
        if rng.random() < 0.2 and guaranteed < total_cpu // 2:
            g = rng.choice([2, 4])
            guaranteed += g
            queue["guarantee"] = {"cpu": g}
        queues.append(queue)
    jobs: list[dict[str, Any]] = []
    tasks: list[dict[str, Any]] = []
    for j in range(rng.randint(1, 6)):
        name = f"j{j}"
        running = rng.random() < 0.4
        n_tasks = rng.randint(1, 4)
        roles = rng.random() < 0.3
        cpu, mem = rng.choice([1, 2, 4, 8]), rng.choice([1, 2, 4, 8, 16])
        gpu = rng.choice([0, 0, 0, 1, 2]) if any(gpu_free) else 0
        job: dict[str, Any] = {
            "name": name,
            "queue": rng.choice(queues)["name"],
            "min_available": rng.randint(1, n_tasks),
            "priority": rng.randint(0, 3),
            "creation": j,
            "phase": "Running" if running else rng.choice(["Pending", "Inqueue"]),
        }
        members: list[dict[str, Any]] = []
        placed = 0
        for k in range(n_tasks):
            role = ("master" if k == 0 else "worker") if roles else "worker"
            best_effort = k > 0 and rng.random() < 0.15
            request: dict[str, Any] = {} if best_effort else {"cpu": cpu, "memory": f"{mem}Gi"}
            if gpu and not best_effort:
                request["nvidia.com/gpu"] = gpu
            task: dict[str, Any] = {"name": f"{name}-{k}", "job": name, "role": role}
            task["request"] = request
            if running:
                for i in rng.sample(range(n_nodes), n_nodes):
                    f = free[i]
                    need_gpu = request.get("nvidia.com/gpu", 0)
                    if (
                        f["cpu"] >= request.get("cpu", 0)
                        and f["mem"] >= (mem if request else 0)
                        and len(gpu_free[i]) >= need_gpu
                    ):
                        f["cpu"] -= request.get("cpu", 0)
                        f["mem"] -= mem if request else 0
                        idx = [gpu_free[i].pop(0) for _ in range(need_gpu)]
                        task.update(phase="Running", node=f"n{i}", gpu_indices=idx)
                        placed += 1
                        break
            members.append(task)
        if running and placed < job["min_available"]:
            job["phase"] = "Inqueue"  # a gang never runs below its minimum
            for t in members:  # (the room they took stays unused: more idle room)
                for key in ("phase", "node", "gpu_indices"):
                    t.pop(key, None)
        if roles:
            job["min_task_member"] = {
                "master": 1 if rng.random() < 0.7 else 0,
                "worker": rng.randint(0, max(n_tasks - 1, 0)),
            }
        jobs.append(job)
        tasks += members
    return {"nodes": nodes, "hypernodes": [], "queues": queues, "jobs": jobs, "tasks": tasks}


# ------------------------------------------------------------------------ outcomes


def gangsched_outcome(
    snapshot: gs.Snapshot,
    config: Config,
    placements: bool = False,
    *,
    fresh: bool = False,
    walk_2023: bool = False,
    proportion_2023: bool = False,
) -> Outcome:
    """gangsched's per-job outcome. ``fresh``: a diagnostic run in which every template's
    scores are recomputed on every node whenever it is evaluated (no row is kept from an
    earlier evaluation); its decisions are what the plugins answer on the current state.
    ``walk_2023``: a diagnostic run whose tier walk is the 2023 build's (:func:`_walk_2023`).
    ``proportion_2023``: a diagnostic run whose proportion ``reclaimable`` answer is the 2023
    build's (:func:`_proportion_2023`)."""
    if fresh:
        with _fresh_evaluations():
            d = gs.schedule(snapshot, config)
    elif walk_2023 or proportion_2023:
        with ExitStack() as stack:
            if walk_2023:
                stack.enter_context(_walk_2023())
            if proportion_2023:
                stack.enter_context(_proportion_2023())
            d = gs.schedule(snapshot, config)
    else:
        d = gs.schedule(snapshot, config)
    job_of = {t.name: t.job for t in snapshot.tasks}
    bound: Counter[str] = Counter(job_of[b.task] for b in d.binds)
    piped: Counter[str] = Counter(job_of[p.task] for p in d.pipelined)
    gone: Counter[str] = Counter(job_of[e.task] for e in d.evictions)
    nodes: dict[str, list[str]] = {}
    best_effort = {t.name for t in snapshot.tasks if t.best_effort}
    for b in d.binds:
        if b.task not in best_effort:
            nodes.setdefault(job_of[b.task], []).append(b.node)
    return {
        j.name: (bound[j.name], piped[j.name], gone[j.name], d.jobs[j.name].phase)
        + ((tuple(sorted(nodes.get(j.name, ()))),) if placements else ())
        for j in snapshot.jobs
    }


@contextmanager
def _fresh_evaluations() -> Iterator[None]:
    """Within the block, the session's evaluator forgets a template's evaluation before each
    use, so every row is computed anew (a diagnostic, never the library's behaviour)."""
    from gangsched.session import evaluation

    cls = evaluation.Evaluator
    kept = cls.evaluate

    def evaluate(self: Any, tmpl: Any) -> Any:
        self._evals.pop(self._key(tmpl), None)
        return kept(self, tmpl)

    cls.evaluate = evaluate  # type: ignore[method-assign]
    try:
        yield
    finally:
        cls.evaluate = kept  # type: ignore[method-assign]


@contextmanager
def _walk_2023() -> Iterator[None]:
    """Within the block, the tier walk of ``preempt`` and ``reclaim`` is the 2023 build's
    (67e339c04): a plugin answering none after another plugin (of any tier) answered some
    leaves no victims, as the ``init`` flag of its ``Session.Preemptable`` / ``Reclaimable``
    did (removed in 7976b63e2, v1.11.0). A diagnostic, never the library's behaviour."""
    import numpy as np

    from gangsched.framework import dispatch

    def group_2023(tiers: Any, candidates: Any, answer: Any, marker: str) -> Any:
        victims, init, marked = None, False, False
        for tier in tiers:
            for plugin in tier:
                got = answer(plugin, candidates)
                if got is None:
                    continue
                if got.size == 0:
                    victims = None
                    break
                if not init:
                    victims, init, marked = got, True, plugin.name == marker
                else:
                    marked = marked or plugin.name == marker
                    if victims is not None:
                        victims = np.intersect1d(victims, got)
                        victims = victims if victims.size else None
            if victims is not None:
                return np.sort(victims), marked
        return candidates[:0], False

    kept = (dispatch._walk_group, dispatch.ONE_BY_ONE_VICTIMS)
    dispatch._walk_group = group_2023
    dispatch.ONE_BY_ONE_VICTIMS = frozenset()
    try:
        yield
    finally:
        dispatch._walk_group, dispatch.ONE_BY_ONE_VICTIMS = kept


@contextmanager
def _proportion_2023() -> Iterator[None]:
    """Within the block, proportion's ``reclaimable`` answer is the 2023 build's (67e339c04): a
    queue holding less than the reclaimer's request in cpu, in memory or in a scalar resource
    it holds (``Resource.LessPartly``) gives no victim, whatever it holds beyond its deserved
    share (the check removed in 975277f55, v1.12.0). Volcano asks for one pending task at a
    time; the reclaimer here is the first task of the job's claim. A diagnostic, never the
    library's behaviour."""
    import numpy as np

    from gangsched.actions.victims.rules import current_claim
    from gangsched.plugins.proportion import ProportionPlugin
    from gangsched.units import CPU, MEMORY, PODS

    kept = ProportionPlugin.reclaimable

    def reclaimable(self: Any, ssn: Any, preemptor: int, candidates: Any) -> Any:
        out = kept(self, ssn, preemptor, candidates)
        claim = current_claim(ssn, preemptor)
        if not claim:
            return out
        spec = ssn.arrays.spec
        held = ssn.queue_allocated
        always = np.zeros(held.shape[1], dtype=np.bool_)
        always[[spec.index(CPU), spec.index(MEMORY)]] = True
        asked = always | (held > 0)
        asked[:, spec.index(PODS)] = False
        short = np.any(asked & (held < ssn.task_req[claim[0]]), axis=1)
        return out[~short[ssn.job_queue[ssn.task_job[out]]]]

    ProportionPlugin.reclaimable = reclaimable  # type: ignore[method-assign]
    try:
        yield
    finally:
        ProportionPlugin.reclaimable = kept  # type: ignore[method-assign]


def _run_oracle(oracle: str, args: list[str], envelope: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [oracle, *args], input=envelope, capture_output=True, text=True, check=False, timeout=120
    )


def oracle_features(oracle: str) -> frozenset[str]:
    """What the Volcano command passes to Volcano beyond the base snapshot: ``node_affinity``
    (a task whose required node affinity no node meets stays pending), ``task_topology`` and
    the emulations of :data:`LATER` (the command accepts ``-fix`` with their names: the
    extended harness, which also maps the task topology to the PodGroup's annotations)."""
    node = {"name": "n0", "allocatable": {"cpu": 4, "memory": "8Gi"}, "labels": {"zone": "a"}}
    term = {"match_expressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}
    snapshot = gs.Snapshot.from_dict(
        {
            "nodes": [node],
            "queues": [{"name": "default"}],
            "jobs": [{"name": "j", "queue": "default", "min_available": 1, "phase": "Inqueue"}],
            "tasks": [
                {
                    "name": "j-0",
                    "job": "j",
                    "request": {"cpu": 1},
                    "node_affinity": {"required": [term]},
                }
            ],
        }
    ).to_dict()
    envelope = json.dumps({"snapshot": snapshot, "conf": CONFIGS["default"]})
    found: set[str] = set()
    out = _run_oracle(oracle, [], envelope)
    if out.returncode == 0 and not json.loads(out.stdout).get("binds"):
        found.add("node_affinity")
    later = [
        name for name in LATER if _run_oracle(oracle, ["-fix", name], envelope).returncode == 0
    ]
    found.update(later)
    if "allocate-queue-order" in later:  # the extended harness
        found.add("task_topology")
    return frozenset(found)


def volcano_outcomes(
    oracle: str,
    snapshot: dict[str, Any],
    conf: str,
    repeat: int,
    later: tuple[str, ...] = (),
    placements: bool = False,
) -> list[Outcome]:
    """Volcano's per-job outcome in each of ``repeat`` runs (with the emulated later upstream
    changes ``later``, names of :data:`LATER`)."""
    envelope = json.dumps({"snapshot": snapshot, "conf": conf})
    fixes = [FIXES[0], ",".join((FIXES[1], *later))]
    out = subprocess.run(
        [oracle, "-repeat", str(repeat), "-runs", "-tie-break", "first", *fixes],
        input=envelope,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["no output"])[-1]
        raise OracleFailed(last[:200])
    result = json.loads(out.stdout)
    runs = result.get("runs") or [result]
    best_effort = {
        t["name"]
        for t in snapshot["tasks"]
        if not any(t.get("request") or {}) and not t.get("gpu_request")
    }
    out_runs: list[Outcome] = []
    for run in runs:
        nodes: dict[str, list[str]] = {}
        for b in run.get("binds") or []:
            if b["task"] not in best_effort:
                nodes.setdefault(b["job"], []).append(b["node"])
        out_runs.append(
            {
                name: (j["bound"], j["pipelined"], j["evicted"], j["phase"])
                + ((tuple(sorted(nodes.get(name, ()))),) if placements else ())
                for name, j in run["jobs"].items()
            }
        )
    return out_runs


class OracleFailed(RuntimeError):
    """The Volcano command failed on a cluster (this Volcano build can panic at session open,
    e.g. when guarantees overdraw the pool): the cluster is left out and counted."""


_FIELDS = ("bound", "pipelined", "evicted", "phase", "nodes")


def partial_gang(ours: Outcome, theirs: Outcome, snapshot: gs.Snapshot) -> str | None:
    """The first job (by name) that Volcano's run leaves pipelined but below its gang minimum
    (its running, bound and pipelined tasks together fewer than ``min_available``) where
    gangsched pipelined none of its tasks, else None. Since v1.14.0 Volcano's reclaim commits
    a job's evictions and reservations only once the job is pipelined (gang-ready), so such a
    partial reservation is never kept."""
    running: Counter[str] = Counter(
        t.job for t in snapshot.tasks if t.phase.value in ("Running", "Bound")
    )
    for job in sorted(snapshot.jobs, key=lambda j: j.name):
        mine, other = ours.get(job.name), theirs.get(job.name)
        if mine is None or other is None or not other[1] or mine[1]:
            continue
        if running[job.name] + other[0] + other[1] < job.min_available:
            return job.name
    return None


def elastic_claim(ours: Outcome, theirs: Outcome, snapshot: gs.Snapshot) -> str | None:
    """The first job (by name) for which Volcano's run pipelined more tasks than bring it to
    its ``min_available`` (counting its running tasks and the tasks the run bound), where
    gangsched pipelined no more than that, else None. This build's reclaim takes any job with
    pending tasks as a reclaimer and claims for every pending task; since a561215e0 (v1.11.0)
    only a starving job reclaims, and only while it is starving (below its minimum), as
    preempt always chose."""
    running: Counter[str] = Counter(
        t.job for t in snapshot.tasks if t.phase.value in ("Running", "Bound")
    )
    for job in sorted(snapshot.jobs, key=lambda j: j.name):
        mine, other = ours.get(job.name), theirs.get(job.name)
        if mine is None or other is None:
            continue
        need = max(0, job.min_available - running[job.name] - other[0])
        if other[1] > need >= mine[1]:
            return job.name
    return None


#: Volcano took more tasks of a running gang than gangsched, leaving it below its minimum.
#: Before gangsched walked the tiers as Volcano (``allVictimRules: false`` in a configuration
#: read from Volcano's YAML) this was the tier walk; what is left has other causes (which
#: victims Volcano's node-by-node preempt takes first, this build's reclaim evicting until the
#: victims alone cover a request) and no verdict.
TIER_WALK = "volcano takes more of a gang below minAvailable"


def _kept_evictions(ours: Outcome, theirs: Outcome) -> bool:
    """Volcano's run evicted more tasks than gangsched and reserved no task more than it, on
    any job (evictions that made no reservation)."""
    more_gone = sum(o[2] for o in theirs.values()) > sum(o[2] for o in ours.values())
    return more_gone and all(
        theirs[name][1] <= mine[1] for name, mine in ours.items() if name in theirs
    )


def divergence_class(ours: Outcome, theirs: Outcome, snapshot: gs.Snapshot | None = None) -> str:
    """The class of a divergence: :data:`BEST_EFFORT_CLAIM` when the only difference of some
    job is that Volcano reserved (by eviction) the best-effort tasks gangsched bound;
    :data:`KEPT_EVICTIONS` when Volcano evicted more and reserved nothing more; the reclaim
    classes of :func:`partial_gang` and :func:`elastic_claim` (this build's reclaim, which
    also evicts more); :data:`TIER_WALK` when Volcano's run took a running gang below its
    minimum and gangsched evicted fewer of its tasks; :data:`GANGSCHED_BREAKS` when gangsched
    took one below its minimum with more evictions than Volcano; else the first job (by name)
    and outcome that differ, and which way."""
    if snapshot is not None:
        best_effort: Counter[str] = Counter(
            t.job for t in snapshot.tasks if t.best_effort and t.phase.value == "Pending"
        )
        for name in sorted(ours):
            mine, other = ours[name], theirs.get(name)
            if other is None or mine[:4] == other[:4]:
                continue
            more = mine[0] - other[0]
            if 0 < more <= best_effort[name] and other[1] - mine[1] == more:
                return BEST_EFFORT_CLAIM
            # or reserved them where gangsched reserved the job's other tasks only
            if more == 0 and mine[1] > 0 and 0 < other[1] - mine[1] <= best_effort[name]:
                return BEST_EFFORT_CLAIM
    if snapshot is not None:
        running: Counter[str] = Counter(
            t.job for t in snapshot.tasks if t.phase.value in ("Running", "Bound")
        )
        if _kept_evictions(ours, theirs):
            return KEPT_EVICTIONS
        if partial_gang(ours, theirs, snapshot) is not None:
            return PARTIAL_GANG
        if elastic_claim(ours, theirs, snapshot) is not None:
            return ELASTIC_CLAIM
        for job in snapshot.jobs:
            gone = theirs.get(job.name, (0, 0, 0, ""))[2]
            mine_gone = ours.get(job.name, (0, 0, 0, ""))[2]
            if gone > mine_gone and running[job.name] - gone < job.min_available:
                return TIER_WALK
        for job in snapshot.jobs:
            gone = theirs.get(job.name, (0, 0, 0, ""))[2]
            mine_gone = ours.get(job.name, (0, 0, 0, ""))[2]
            if mine_gone > gone and running[job.name] - mine_gone < job.min_available:
                return GANGSCHED_BREAKS
    for name in sorted(ours):
        mine, other = ours[name], theirs.get(name)
        if other is None or mine == other:
            continue
        if (
            mine[:3] == other[:3]
            and mine[4:] == other[4:]
            and mine[2] > 0
            and (mine[3], other[3]) == ("Running", "Pending")
        ):
            return RELEASING_SCHEDULED
        for k, field in enumerate(_FIELDS):
            if mine[k] != other[k]:
                if field == "phase":
                    return f"phase: gangsched {mine[k]} / volcano {other[k]}"
                if field == "nodes":
                    return "nodes: same counts, other nodes"
                way = ">" if mine[k] > other[k] else "<"
                return f"{field}: gangsched{way}volcano"
    return "jobs differ"


def runs_class(ours: Outcome, runs: Sequence[Outcome], snapshot: gs.Snapshot | None = None) -> str:
    """The class of a divergence read from every Volcano run (its runs can disagree with each
    other, and so with the class): the class most runs give, ties to the first by name, so
    the class does not depend on the order in which the runs came back."""
    votes = Counter(divergence_class(ours, theirs, snapshot) for theirs in runs)
    return min(votes, key=lambda cls: (-votes[cls], cls))


@dataclass
class Result:
    clusters: int = 0
    diverged: int = 0
    skipped: int = 0
    classes: Counter[str] | None = None
    examples: dict[str, list[int]] | None = None
    #: Why the configuration was not run (the Volcano command cannot express its clusters).
    unsupported: str = ""
    #: Diverging clusters before the attribution to later upstream changes (by symptom).
    by_symptom: Counter[str] | None = None


def campaign(
    oracle: str,
    configs: Mapping[str, str],
    clusters: int,
    *,
    seed: int = 0,
    repeat: int = 4,
    progress: Callable[[str], None] | None = None,
    only: Sequence[int] = (),
) -> dict[str, Result]:
    """Run ``clusters`` random clusters under every configuration; per configuration the
    count of diverging clusters, per class, with a few seeds of each. ``only``: these cluster
    seeds instead (as the table lists them), ``clusters`` and ``seed`` unread."""
    results = {
        name: Result(classes=Counter(), examples={}, by_symptom=Counter()) for name in configs
    }
    parsed = {name: Config.from_volcano_yaml(text) for name, text in configs.items()}
    offered = oracle_features(oracle)
    later = tuple(name for name in LATER if name in offered)
    for name in configs:
        missing = [f for f in FEATURES.get(name, ()) if f not in offered]
        if missing:
            results[
                name
            ].unsupported = f"the Volcano command does not pass {', '.join(missing)} to Volcano"
    chosen = list(only) or [seed * 1_000_003 + k for k in range(clusters)]
    for k, cluster_seed in enumerate(chosen):
        built: dict[tuple[str, ...], tuple[gs.Snapshot, dict[str, Any]]] = {}
        for name, text in configs.items():
            res = results[name]
            assert res.classes is not None and res.examples is not None
            assert res.by_symptom is not None
            if res.unsupported:
                continue
            features = FEATURES.get(name, ())
            if features not in built:
                snapshot = gs.Snapshot.from_dict(random_cluster(cluster_seed, features))
                built[features] = (snapshot, snapshot.to_dict())
            snapshot, plain = built[features]
            where = name in PLACEMENTS
            try:
                theirs = volcano_outcomes(oracle, plain, text, repeat, placements=where)
            except OracleFailed:
                res.skipped += 1
                continue
            res.clusters += 1
            ours = gangsched_outcome(snapshot, parsed[name], where)
            if any(ours == t for t in theirs):
                continue
            res.diverged += 1
            symptom = runs_class(ours, theirs, snapshot)
            res.by_symptom[symptom] += 1
            cls = _later_change(oracle, plain, text, repeat, ours, later, where) or symptom
            if cls == symptom and verdict_of(symptom) is None:
                cls = (
                    _later_residue(oracle, plain, text, repeat, ours, later, where, snapshot) or cls
                )
            if (
                cls == symptom
                and verdict_of(cls) is None
                and _merged_tiers_match(oracle, plain, text, repeat, ours, where)
            ):
                cls = ALL_RULES
            if cls == symptom and verdict_of(cls) is None and _preempting(text):
                merged = text[: -len(_TIERS)] + MERGED_TIERS
                both = _later_change(oracle, plain, merged, repeat, ours, later, where)
                if both is not None:
                    cls = f"{ALL_RULES}; {both}"
            if cls == symptom and symptom == GANGSCHED_BREAKS:
                again = gangsched_outcome(snapshot, parsed[name], where, walk_2023=True)
                if any(again == t for t in theirs) or _later_change(
                    oracle, plain, text, repeat, again, later, where
                ):
                    cls = WALK_ON_EMPTY
                elif (rest := runs_class(again, theirs, snapshot)) in VERDICTS:
                    cls = f"{WALK_ON_EMPTY}; {rest}"
                else:
                    older = gangsched_outcome(
                        snapshot, parsed[name], where, walk_2023=True, proportion_2023=True
                    )
                    if any(older == t for t in theirs) or _later_change(
                        oracle, plain, text, repeat, older, later, where
                    ):
                        cls = f"{WALK_ON_EMPTY}; {RECLAIM_SHORT_QUEUE}"
            if cls == symptom and verdict_of(cls) is None and _preempting(text):
                cls = (
                    _older_residue(
                        oracle, plain, text, repeat, snapshot, parsed[name], later, where
                    )
                    or cls
                )
            if cls == symptom and "task_topology" in FEATURES.get(name, ()):
                again = gangsched_outcome(snapshot, parsed[name], where, fresh=True)
                if any(again == t for t in theirs) or _later_change(
                    oracle, plain, text, repeat, again, later, where
                ):
                    cls = LAG
            res.classes[cls] += 1
            res.examples.setdefault(cls, []).append(cluster_seed)
        if progress is not None and (k + 1) % 100 == 0:
            progress(f"{k + 1} clusters")
    return results


#: The 2023 build's behaviours gangsched can be run with (diagnostics, never the library's
#: behaviour), each with the class that names the later change it stands for.
_OLDER: tuple[tuple[dict[str, bool], str], ...] = (
    ({"proportion_2023": True}, RECLAIM_SHORT_QUEUE),
    ({"walk_2023": True}, WALK_ON_EMPTY),
    ({"walk_2023": True, "proportion_2023": True}, f"{WALK_ON_EMPTY}; {RECLAIM_SHORT_QUEUE}"),
)


def _older_residue(
    oracle: str,
    plain: dict[str, Any],
    conf: str,
    repeat: int,
    snapshot: gs.Snapshot,
    config: Config,
    later: tuple[str, ...],
    placements: bool,
) -> str | None:
    """The class of a divergence that needs a 2023 behaviour emulated on gangsched's side
    (:data:`_OLDER`) and, on Volcano's, no change or every emulated later change at once,
    leaving either no difference or a difference whose class has a verdict of its own (two
    later changes at once, one of them emulated on each side). None when no such pair
    explains it."""
    volcano: list[tuple[tuple[str, ...], list[Outcome]]] = []
    for names in ((), later):
        try:
            volcano.append(
                (names, volcano_outcomes(oracle, plain, conf, repeat, names, placements))
            )
        except OracleFailed:
            continue
    for flags, older in _OLDER:
        again = gangsched_outcome(snapshot, config, placements, **flags)
        for names, runs in volcano:
            fixed = f"later: {'+'.join(names)}; " if names else ""
            if any(again == t for t in runs):
                return f"{fixed}{older}"
            rest = runs_class(again, runs, snapshot)
            if verdict_of(rest) is not None and not rest.startswith("later: "):
                return f"{fixed}{older}; {rest}"
    return None


def _preempting(conf: str) -> bool:
    """Whether ``conf`` has preempt or reclaim on Volcano's tiers of :data:`CONFIGS`."""
    return conf.endswith(_TIERS) and any(a in conf for a in ("preempt", "reclaim"))


def _merged_tiers_match(
    oracle: str, plain: dict[str, Any], conf: str, repeat: int, ours: Outcome, placements: bool
) -> bool:
    """Whether Volcano decides as gangsched did once every victim plugin is in the first tier
    (only for configurations with preempt or reclaim on Volcano's tiers)."""
    if not _preempting(conf):
        return False
    merged = conf[: -len(_TIERS)] + MERGED_TIERS
    try:
        runs = volcano_outcomes(oracle, plain, merged, repeat, placements=placements)
    except OracleFailed:
        return False
    return any(ours == t for t in runs)


def _later_change(
    oracle: str,
    plain: dict[str, Any],
    conf: str,
    repeat: int,
    ours: Outcome,
    later: tuple[str, ...],
    placements: bool,
) -> str | None:
    """``later: NAME`` for the first emulated later upstream change under which Volcano
    decides as gangsched did, else ``later: NAME+NAME...`` when all of them together do,
    else None."""
    trials: list[tuple[str, ...]] = [(name,) for name in later]
    if len(later) > 1:
        trials.append(later)
    for names in trials:
        try:
            runs = volcano_outcomes(oracle, plain, conf, repeat, names, placements)
        except OracleFailed:
            continue
        if any(ours == t for t in runs):
            return "later: " + "+".join(names)
    return None


def _later_residue(
    oracle: str,
    plain: dict[str, Any],
    conf: str,
    repeat: int,
    ours: Outcome,
    later: tuple[str, ...],
    placements: bool,
    snapshot: gs.Snapshot,
) -> str | None:
    """``later: NAME; CLASS`` for the first emulated later change (or all of them together)
    under which Volcano's runs, though still not gangsched's outcome, give a class with a
    verdict of its own (two later changes at once), else None."""
    trials: list[tuple[str, ...]] = [(name,) for name in later]
    if len(later) > 1:
        trials.append(later)
    for names in trials:
        try:
            runs = volcano_outcomes(oracle, plain, conf, repeat, names, placements)
        except OracleFailed:
            continue
        rest = runs_class(ours, runs, snapshot)
        if rest in VERDICTS:
            return f"later: {'+'.join(names)}; {rest}"
    return None


def table(results: Mapping[str, Result], show: int = 3) -> str:
    lines = ["| configuration | clusters | diverged | class | count | verdict | seeds |"]
    lines.append("|---|---|---|---|---|---|---|")
    for name, res in results.items():
        assert res.classes is not None and res.examples is not None
        if res.unsupported:
            lines.append(f"| {name} | 0 | — | not run: {res.unsupported} | — | — | — |")
            continue
        if res.skipped:
            lines.append(
                f"| {name} | {res.clusters} | — | (Volcano failed; left out) | {res.skipped} "
                "| — | — |"
            )
        if not res.classes:
            lines.append(f"| {name} | {res.clusters} | 0 | — | 0 | — | — |")
        for cls, count in res.classes.most_common():
            seeds = ", ".join(str(s) for s in res.examples[cls][:show])
            verdict = verdict_of(cls) or "NONE"
            lines.append(
                f"| {name} | {res.clusters} | {res.diverged} | {cls} | {count} | {verdict} "
                f"| {seeds} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--clusters", type=int, default=100)
    p.add_argument("--config", action="append", choices=sorted(CONFIGS))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--repeat", type=int, default=4)
    p.add_argument("--show", type=int, default=3, help="seeds listed per class")
    p.add_argument("--case", type=int, help="print one cluster's snapshot and exit")
    p.add_argument(
        "--cluster",
        type=int,
        action="append",
        default=[],
        help="run this cluster seed (as the table lists it; repeatable) instead of --clusters",
    )
    args = p.parse_args(argv)
    if args.case is not None:
        features = FEATURES.get((args.config or ["default"])[0], ())
        print(json.dumps(random_cluster(args.case, features), indent=1))
        return 0
    oracle = os.environ.get(ORACLE_ENV)
    if not oracle:
        print(f"set {ORACLE_ENV} to the path of the Volcano oracle command", file=sys.stderr)
        return 2
    chosen = {name: CONFIGS[name] for name in (args.config or sorted(CONFIGS))}
    results = campaign(
        oracle,
        chosen,
        args.clusters,
        seed=args.seed,
        repeat=args.repeat,
        progress=lambda s: print(s, file=sys.stderr, flush=True),
        only=args.cluster,
    )
    print(table(results, args.show))
    for name, res in results.items():
        if res.by_symptom:
            symptoms = ", ".join(f"{c} {n}" for c, n in res.by_symptom.most_common())
            print(f"\n{name}: diverging clusters by symptom, before attribution: {symptoms}")
    unjudged = [
        cls for res in results.values() for cls in (res.classes or {}) if verdict_of(cls) is None
    ]
    return 1 if unjudged else 0


if __name__ == "__main__":
    raise SystemExit(main())
