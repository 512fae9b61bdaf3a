"""Cost guards: small inputs that used to cost far more than their size.

Each *family* builds an input of size ``n`` from nothing but ``n`` and times the public entry
point that once grew superlinearly on it. ``python benchmarks/cost_guards.py`` prints, per
family, the CPU time at each size and the fitted growth exponent ``k`` (time ∝ n^k, least
squares on log-log); ``k`` above ``MAX_EXPONENT`` is a regression. ``benchmarks/report.py``
prints the same table as its section 5.

Families
--------
queue-chain      queues in one parent chain (snapshot validation; rejected past the depth limit)
queue-forest     queues in chains of 100 under one root (validation + a proportion cycle)
hypernode-flat   one tier-2 hypernode listing every node directly, a hard-topology gang
distinct-taints  every node with its own NoSchedule taint, one pending task per taint
action-list      a config naming ``allocate`` n times, one small cycle
tier-number      two hypernodes whose tier numbers are 10**n apart (size is the exponent)
regex            a HyperNode ``regexMatch`` of ``^(a+)+$`` against an n-character node name
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import gangsched as gs
from gangsched.errors import GangschedError
from gangsched.limits import Limits

MAX_EXPONENT = 1.35  # n log n over a decade of sizes fits well below this

Build = Callable[[int], Callable[[], Any]]


def _quiet(fn: Callable[[], Any]) -> Callable[[], Any]:
    """Run ``fn``; a typed rejection is an answer, timed like any other."""

    def run() -> Any:
        try:
            return fn()
        except GangschedError as exc:
            return exc

    return run


def _node(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "allocatable": {"cpu": 8, "memory": "32Gi", "pods": 110}, **extra}


def queue_chain(n: int) -> Callable[[], Any]:
    queues = [{"name": "q0"}] + [{"name": f"q{i}", "parent": f"q{i - 1}"} for i in range(1, n)]
    doc = {"nodes": [_node("n0")], "queues": queues}
    return _quiet(lambda: gs.Snapshot.from_dict(doc))


def queue_forest(n: int) -> Callable[[], Any]:
    queues: list[dict[str, Any]] = [{"name": "root"}]
    for i in range(1, n):
        parent = "root" if i % 100 == 1 else f"q{i - 1}"
        queues.append({"name": f"q{i}", "parent": parent})
    doc = {
        "nodes": [_node("n0")],
        "queues": queues,
        "jobs": [{"name": "j", "queue": f"q{n - 1}", "min_available": 1, "phase": "Inqueue"}],
        "tasks": [{"name": "t", "job": "j", "request": {"cpu": 1}}],
    }
    return _quiet(lambda: gs.schedule(gs.Snapshot.from_dict(doc)))


def hypernode_flat(n: int) -> Callable[[], Any]:
    nodes = [_node(f"n{i}") for i in range(n)]
    racks = [
        {
            "name": f"r{r}",
            "tier": 1,
            "members": [f"n{i}" for i in range(r * 16, min(n, r * 16 + 16))],
        }
        for r in range(n // 32)
    ]
    top = {
        "name": "top",
        "tier": 2,
        "members": [*(r["name"] for r in racks), *(f"n{i}" for i in range((n // 32) * 16, n))],
    }
    job = {
        "name": "j",
        "queue": "default",
        "min_available": 4,
        "phase": "Inqueue",
        "network_topology": {"mode": "hard", "highest_tier_allowed": 2},
    }
    doc = {
        "nodes": nodes,
        "hypernodes": [*racks, top],
        "queues": [{"name": "default"}],
        "jobs": [job],
        "tasks": [{"name": f"t{i}", "job": "j", "request": {"cpu": 8}} for i in range(4)],
    }
    return _quiet(lambda: gs.schedule(gs.Snapshot.from_dict(doc)))


def distinct_taints(n: int) -> Callable[[], Any]:
    nodes = [
        _node(f"n{i}", taints=[{"key": f"k{i}", "value": "v", "effect": "NoSchedule"}])
        for i in range(n)
    ]
    tasks = [
        {
            "name": f"t{i}",
            "job": "j",
            "request": {"cpu": 1},
            "tolerations": [{"key": f"k{i}", "operator": "Exists"}],
        }
        for i in range(n)
    ]
    doc = {
        "nodes": nodes,
        "queues": [{"name": "default"}],
        "jobs": [{"name": "j", "queue": "default", "min_available": 1, "phase": "Inqueue"}],
        "tasks": tasks,
    }
    return _quiet(lambda: gs.schedule(gs.Snapshot.from_dict(doc)))


def action_list(n: int) -> Callable[[], Any]:
    doc = {
        "nodes": [_node("n0")],
        "queues": [{"name": "default"}],
        "jobs": [{"name": "j", "queue": "default", "min_available": 1, "phase": "Inqueue"}],
        "tasks": [{"name": "t", "job": "j", "request": {"cpu": 1}}],
    }
    snap = gs.Snapshot.from_dict(doc)
    cfg = {"actions": ["enqueue", *(["allocate"] * n)], "tiers": [[{"name": "gang"}]]}

    def run() -> Any:
        return gs.schedule(snap, gs.Config.from_dict(cfg, limits=Limits(max_actions=n + 2)))

    return _quiet(run)


def tier_number(n: int) -> Callable[[], Any]:
    doc = {
        "nodes": [_node("n0"), _node("n1")],
        "hypernodes": [
            {"name": "low", "tier": 1, "members": ["n0", "n1"]},
            {"name": "high", "tier": 10**n, "members": ["low"]},
        ],
        "queues": [{"name": "default"}],
        "jobs": [
            {
                "name": "j",
                "queue": "default",
                "min_available": 2,
                "phase": "Inqueue",
                "network_topology": {"mode": "hard", "highest_tier_allowed": 1},
            }
        ],
        "tasks": [{"name": f"t{i}", "job": "j", "request": {"cpu": 1}} for i in range(2)],
    }
    return _quiet(lambda: gs.schedule(gs.Snapshot.from_dict(doc)))


def regex(n: int) -> Callable[[], Any]:
    from gangsched.io.k8s import load_objects

    objs = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "a" * (n - 1) + "b"},
            "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}},
        },
        {
            "apiVersion": "topology.volcano.sh/v1alpha1",
            "kind": "HyperNode",
            "metadata": {"name": "h"},
            "spec": {
                "tier": 1,
                "members": [{"type": "Node", "selector": {"regexMatch": {"pattern": "^(a+)+$"}}}],
            },
        },
    ]
    return _quiet(lambda: load_objects(objs))


#: name → (builder, sizes). Sizes span at least a factor of four so the exponent means something.
FAMILIES: dict[str, tuple[Build, list[int]]] = {
    "queue-chain": (queue_chain, [2_000, 4_000, 8_000]),
    "queue-forest": (queue_forest, [1_000, 2_000, 4_000]),
    "hypernode-flat": (hypernode_flat, [1_000, 2_000, 4_000]),
    "distinct-taints": (distinct_taints, [250, 500, 1_000]),
    "action-list": (action_list, [2_500, 5_000, 10_000]),
    "regex": (regex, [16, 24, 32]),
}
#: families whose size is an exponent: the time must not grow at all (checked as a ratio).
FLAT_FAMILIES: dict[str, tuple[Build, list[int]]] = {
    "tier-number": (tier_number, [1, 4, 8, 15]),
}


def cpu_time(fn: Callable[[], Any], repeat: int = 3) -> float:
    best = math.inf
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return best


def exponent(sizes: list[int], times: list[float]) -> float:
    xs = [math.log(s) for s in sizes]
    ys = [math.log(max(t, 1e-6)) for t in times]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    num = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    den = sum((x - mx) ** 2 for x in xs)
    return num / den


def measure(quick: bool = False) -> list[list[str]]:
    rows: list[list[str]] = []
    for name, (build, sizes) in FAMILIES.items():
        use = sizes[:2] if quick else sizes
        times = [cpu_time(build(n), 1 if quick else 3) for n in use]
        k = exponent(use, times)
        cells = ", ".join(f"{n:,}: {t * 1e3:.1f} ms" for n, t in zip(use, times, strict=True))
        rows.append([name, cells, f"{k:.2f}", "ok" if k <= MAX_EXPONENT else "TOO STEEP"])
    for name, (build, sizes) in FLAT_FAMILIES.items():
        times = [cpu_time(build(n), 1 if quick else 3) for n in sizes]
        ratio = max(times) / max(min(times), 1e-6)
        cells = ", ".join(f"10^{n}: {t * 1e3:.1f} ms" for n, t in zip(sizes, times, strict=True))
        rows.append([name, cells, f"x{ratio:.1f}", "ok" if ratio <= 3.0 else "GROWS"])
    return rows


def main(argv: list[str] | None = None) -> int:
    quick = "--quick" in (argv if argv is not None else sys.argv[1:])
    rows = measure(quick)
    widths = [
        max(len(r[i]) for r in [["family", "CPU time by size", "k", ""], *rows]) for i in range(4)
    ]
    for r in [["family", "CPU time by size", "k", ""], *rows]:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))
    print(
        f"\nk: fitted exponent (time ∝ n^k), limit {MAX_EXPONENT}; "
        "tier-number: slowest / fastest over tier numbers 10^1 .. 10^15, limit x3"
    )
    return 0 if all(r[3] == "ok" for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
