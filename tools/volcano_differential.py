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
:meth:`gangsched.config.Config.from_volcano_yaml`). Each diverging cluster is put in a class
named after the first job that differs: which outcome differs and which way (``evicted:
gangsched>volcano``).

Usage::

    GANGSCHED_VOLCANO_ORACLE=<path> python tools/volcano_differential.py --clusters 1000
    ... --config default --config preemption --seed 0 --repeat 4 --show 3

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
from collections.abc import Callable, Mapping
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

#: The configurations compared: Volcano's default actions and the preemption actions.
CONFIGS: dict[str, str] = {
    "default": 'actions: "enqueue, allocate, backfill"\n' + _TIERS,
    "preemption": 'actions: "enqueue, allocate, preempt, reclaim, backfill"\n' + _TIERS,
}

#: Fixes of later Volcano the oracle applies: nodeorder and predicates both added each placed
#: pod to the node map, so pods counted twice in the node scores (fixed in 9167045b7, v1.8.0).
FIXES = ("-fix", "nodeorder-addpod")

_V19 = (
    "later Volcano: preempt reserves a task only when its queue's allocatable passes "
    "(af5c56308, v1.9.0); this build reserves past a queue's capability or share"
)
_V114 = (
    "later Volcano: reclaim evicts inside a statement, counts node idle and commits only a "
    "pipelined job (reworked in v1.14.0); this build evicts task by task and keeps them"
)
_SCORE = (
    "open: order of a ready job's elastic tasks — Volcano pushes a job back once it is ready "
    "and places its tasks beyond the minimum in the job and queue order of that moment; "
    "gangsched placed another queue's gang first (seed 430; the balanced-score truncation "
    "that explained the rest is fixed)"
)

#: Divergence classes with a verdict (see docs/volcano.md, "Differences from Volcano"). Each
#: names the cause found in the sampled clusters of the class and the Volcano change that
#: gangsched follows; the test that pins the newer behaviour is in
#: tests/cycle/test_volcano_parity.py.
VERDICTS: dict[str, str] = {
    "volcano breaks a gang below minAvailable (tier walk)": (
        "later Volcano: the tier that answers decides (7976b63e2, v1.11.0)"
    ),
    "pipelined: gangsched<volcano": _V19,
    "evicted: gangsched>volcano": _V19,
    "evicted: gangsched<volcano": _V114,
    "pipelined: gangsched>volcano": _V114,
    "bound: gangsched>volcano": _SCORE,
    "bound: gangsched<volcano": _SCORE,
}

#: Per job: (bound, pipelined, evicted, phase).
Outcome = dict[str, tuple[int, int, int, str]]


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


def random_cluster(seed: int) -> dict[str, Any]:
    """One random cluster (snapshot as plain data) from ``seed``."""
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


def gangsched_outcome(snapshot: gs.Snapshot, config: Config) -> Outcome:
    d = gs.schedule(snapshot, config)
    job_of = {t.name: t.job for t in snapshot.tasks}
    bound: Counter[str] = Counter(job_of[b.task] for b in d.binds)
    piped: Counter[str] = Counter(job_of[p.task] for p in d.pipelined)
    gone: Counter[str] = Counter(job_of[e.task] for e in d.evictions)
    return {
        j.name: (bound[j.name], piped[j.name], gone[j.name], d.jobs[j.name].phase)
        for j in snapshot.jobs
    }


def volcano_outcomes(
    oracle: str, snapshot: dict[str, Any], conf: str, repeat: int
) -> list[Outcome]:
    """Volcano's per-job outcome in each of ``repeat`` runs."""
    envelope = json.dumps({"snapshot": snapshot, "conf": conf})
    out = subprocess.run(
        [oracle, "-repeat", str(repeat), "-runs", "-tie-break", "first", *FIXES],
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
    return [
        {
            name: (j["bound"], j["pipelined"], j["evicted"], j["phase"])
            for name, j in run["jobs"].items()
        }
        for run in runs
    ]


class OracleFailed(RuntimeError):
    """The Volcano command failed on a cluster (this Volcano build can panic at session open,
    e.g. when guarantees overdraw the pool): the cluster is left out and counted."""


_FIELDS = ("bound", "pipelined", "evicted", "phase")


#: Volcano (this 2023 build) evicted part of a gang at or below its minimum: with the gang
#: plugin's tier giving no victim, the next tier chose alone (changed in 7976b63e2, v1.11.0).
TIER_WALK = "volcano breaks a gang below minAvailable (tier walk)"


def divergence_class(ours: Outcome, theirs: Outcome, snapshot: gs.Snapshot | None = None) -> str:
    """The class of a divergence: :data:`TIER_WALK` when Volcano's run took a running gang
    below its minimum, else the first job (by name) and outcome that differ, and which way."""
    if snapshot is not None:
        running: Counter[str] = Counter(
            t.job for t in snapshot.tasks if t.phase.value in ("Running", "Bound")
        )
        for job in snapshot.jobs:
            gone = theirs.get(job.name, (0, 0, 0, ""))[2]
            if gone and running[job.name] - gone < job.min_available:
                return TIER_WALK
    for name in sorted(ours):
        mine, other = ours[name], theirs.get(name)
        if other is None or mine == other:
            continue
        for k, field in enumerate(_FIELDS):
            if mine[k] != other[k]:
                if field == "phase":
                    return f"phase: gangsched {mine[k]} / volcano {other[k]}"
                way = ">" if mine[k] > other[k] else "<"  # type: ignore[operator]
                return f"{field}: gangsched{way}volcano"
    return "jobs differ"


@dataclass
class Result:
    clusters: int = 0
    diverged: int = 0
    skipped: int = 0
    classes: Counter[str] | None = None
    examples: dict[str, list[int]] | None = None


def campaign(
    oracle: str,
    configs: Mapping[str, str],
    clusters: int,
    *,
    seed: int = 0,
    repeat: int = 4,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Result]:
    """Run ``clusters`` random clusters under every configuration; per configuration the
    count of diverging clusters, per class, with a few seeds of each."""
    results = {name: Result(classes=Counter(), examples={}) for name in configs}
    parsed = {name: Config.from_volcano_yaml(text) for name, text in configs.items()}
    for k in range(clusters):
        cluster_seed = seed * 1_000_003 + k
        data = random_cluster(cluster_seed)
        snapshot = gs.Snapshot.from_dict(data)
        plain = snapshot.to_dict()
        for name, text in configs.items():
            res = results[name]
            assert res.classes is not None and res.examples is not None
            try:
                theirs = volcano_outcomes(oracle, plain, text, repeat)
            except OracleFailed:
                res.skipped += 1
                continue
            res.clusters += 1
            ours = gangsched_outcome(snapshot, parsed[name])
            if any(ours == t for t in theirs):
                continue
            res.diverged += 1
            cls = divergence_class(ours, theirs[0], snapshot)
            res.classes[cls] += 1
            res.examples.setdefault(cls, []).append(cluster_seed)
        if progress is not None and (k + 1) % 100 == 0:
            progress(f"{k + 1} clusters")
    return results


def table(results: Mapping[str, Result], show: int = 3) -> str:
    lines = ["| configuration | clusters | diverged | class | count | verdict | seeds |"]
    lines.append("|---|---|---|---|---|---|---|")
    for name, res in results.items():
        assert res.classes is not None and res.examples is not None
        if res.skipped:
            lines.append(
                f"| {name} | {res.clusters} | — | (Volcano failed; left out) | {res.skipped} "
                "| — | — |"
            )
        if not res.classes:
            lines.append(f"| {name} | {res.clusters} | 0 | — | 0 | — | — |")
        for cls, count in res.classes.most_common():
            seeds = ", ".join(str(s) for s in res.examples[cls][:show])
            verdict = VERDICTS.get(cls, "NONE")
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
    args = p.parse_args(argv)
    if args.case is not None:
        print(json.dumps(random_cluster(args.case), indent=1))
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
    )
    print(table(results, args.show))
    unjudged = [
        cls for res in results.values() for cls in (res.classes or {}) if cls not in VERDICTS
    ]
    return 1 if unjudged else 0


if __name__ == "__main__":
    raise SystemExit(main())
