"""Hostile snapshot documents: a valid base snapshot, then attacks on references, numbers,
sizes, names, placements and GPU shapes (:func:`snapshot_doc`)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gangsched.testing.hostile.case import (
    _OCCUPYING,
    _PHASES,
    _TIERS,
    Chooser,
    _name,
    _number,
    _pick,
)

if TYPE_CHECKING:
    pass

# --------------------------------------------------------------------------------------------
# Snapshot documents


def _base_snapshot(c: Chooser) -> dict[str, Any]:
    """A small, valid cluster: 1-4 nodes (some with GPUs), an optional two-tier topology, a
    queue tree, 1-3 gangs whose tasks are partly placed (consistently)."""
    n_nodes = 1 + c.below(4)
    nodes: list[dict[str, Any]] = []
    for i in range(n_nodes):
        node: dict[str, Any] = {
            "name": f"n{i}",
            "allocatable": {"cpu": _pick(c, (16, 8, 64)), "memory": "64Gi"},
            "labels": {"zone": _pick(c, ("a", "b"))},
        }
        if c.chance(0.4):
            node["allocatable"]["pods"] = _pick(c, (110, 1, 2))
        if c.chance(0.6):
            node["gpus"] = {
                "count": _pick(c, (2, 1, 4, 8)),
                "milli": _pick(c, (1000, 1000, 500, 250)),
                "sharing": not c.chance(0.2),
                "model": "A100",
            }
        if c.chance(0.15):
            node["taints"] = [{"key": "k", "value": "v", "effect": "NoSchedule"}]
        nodes.append(node)
    hypernodes: list[dict[str, Any]] = []
    if n_nodes >= 2 and c.chance(0.5):
        half = n_nodes // 2
        hypernodes = [
            {"name": "r0", "tier": 1, "members": [f"n{i}" for i in range(half)]},
            {"name": "r1", "tier": 1, "members": [f"n{i}" for i in range(half, n_nodes)]},
            {"name": "s0", "tier": 2, "members": ["r0", "r1"]},
        ]
    queues: list[dict[str, Any]] = [{"name": "default"}]
    for q in range(c.below(3)):
        queue: dict[str, Any] = {
            "name": f"q{q}",
            "weight": 1 + c.below(3),
            "parent": _pick(c, [x["name"] for x in queues]),
        }
        if c.chance(0.5):
            queue["capability"] = {"cpu": 8, "nvidia.com/gpu": 2}
        if c.chance(0.3):
            queue["guarantee"] = {"cpu": 1}
        queues.append(queue)
    jobs: list[dict[str, Any]] = []
    tasks: list[dict[str, Any]] = []
    free_gpus = {n["name"]: list(range(n["gpus"]["count"])) for n in nodes if "gpus" in n}
    for j in range(1 + c.below(3)):
        count = 1 + c.below(3)
        job: dict[str, Any] = {
            "name": f"j{j}",
            "queue": _pick(c, [q["name"] for q in queues]),
            "min_available": 1 + c.below(count),
            "priority": c.below(3),
        }
        if hypernodes and c.chance(0.4):
            job["network_topology"] = {
                "mode": _pick(c, ("hard", "soft")),
                "highest_tier_allowed": 1 + c.below(2),
            }
        placed = c.chance(0.4)
        if placed:
            job["phase"] = "Running"
        jobs.append(job)
        home = _pick(c, nodes)  # placed tasks of one gang share a node: topology holds
        for k in range(count):
            task: dict[str, Any] = {
                "name": f"j{j}-{k}",
                "job": job["name"],
                "role": "w",
                "request": {"cpu": "500m", "memory": "1Gi"},
                "priority": job["priority"],
            }
            wants_gpu = c.chance(0.4)
            if wants_gpu:
                task["gpu_request"] = {"count": 1, "milli": _pick(c, (1000, 500, 250))}
            if placed and (k == 0 or c.chance(0.6)):
                pods = home["allocatable"].get("pods")
                used = sum(1 for t in tasks if t.get("node") == home["name"])
                if pods is None or used < pods:
                    gpu_ok = not wants_gpu or free_gpus.get(home["name"])
                    if gpu_ok:
                        task["phase"] = _pick(c, ("Running", "Bound", "Releasing"))
                        task["node"] = home["name"]
                        if wants_gpu:
                            device = free_gpus[home["name"]].pop(0)
                            task["gpu_request"]["milli"] = home["gpus"]["milli"]
                            task["gpu_indices"] = [device]
            tasks.append(task)
    return {
        "nodes": nodes,
        "hypernodes": hypernodes,
        "queues": queues,
        "jobs": jobs,
        "tasks": tasks,
    }


def _records(doc: dict[str, Any], key: str) -> list[dict[str, Any]]:
    value = doc.setdefault(key, [])
    return value if isinstance(value, list) else []


def _atk_dangling(c: Chooser, doc: dict[str, Any]) -> str:
    ghost = _pick(c, ("ghost", "N0", "n0 ", "n0\u200b", "", "default/n0", "DEFAULT", "r0"))
    where = c.below(5)
    if where == 0 and doc["tasks"]:
        _pick(c, doc["tasks"])["job"] = ghost
        return "dangling-task-job"
    if where == 1 and doc["jobs"]:
        _pick(c, doc["jobs"])["queue"] = ghost
        return "dangling-job-queue"
    if where == 2 and doc["tasks"]:
        task = _pick(c, doc["tasks"])
        task["node"] = ghost
        if c.chance(0.5):
            task["phase"] = _pick(c, _PHASES)
        return "dangling-task-node"
    if where == 3:
        hns = doc["hypernodes"] or [{"name": "h0", "tier": 1, "members": []}]
        doc["hypernodes"] = hns
        _pick(c, hns)["members"].append(ghost)
        return "dangling-member"
    _pick(c, doc["queues"])["parent"] = ghost
    return "dangling-parent"


def _atk_duplicate(c: Chooser, doc: dict[str, Any]) -> str:
    key = _pick(c, ("nodes", "queues", "jobs", "tasks", "hypernodes", "members", "node-hypernode"))
    if key == "members":
        for h in doc["hypernodes"]:
            if h["members"]:
                h["members"].append(h["members"][0])
                return "duplicate-member"
        key = "nodes"
    if key == "node-hypernode" and doc["nodes"]:
        doc["hypernodes"].append({"name": doc["nodes"][0]["name"], "tier": 3, "members": []})
        return "duplicate-node-hypernode-name"
    records = _records(doc, key if key != "node-hypernode" else "nodes")
    if not records:
        return "duplicate-none"
    original = _pick(c, records)
    try:
        twin = copy.deepcopy(original)
    except RecursionError:  # a record another attack nested past Python's stack: share it
        twin = dict(original)
    if c.chance(0.3) and "name" in twin:  # same name up to unicode normalisation / case
        twin["name"] = _pick(c, (twin["name"].upper(), twin["name"] + "\u0301", twin["name"]))
    records.append(twin)
    if key == "hypernodes" or key == "nodes":
        for h in doc["hypernodes"]:  # a member in two hypernodes of one tier
            if h["tier"] == 1 and doc["nodes"] and c.chance(0.5):
                h["members"].append(doc["nodes"][0]["name"])
    return f"duplicate-{key}"


def _atk_cycle(c: Chooser, doc: dict[str, Any]) -> str:
    if c.chance(0.5):
        qs = doc["queues"]
        k = 1 + c.below(3)
        names = [f"cq{i}" for i in range(k)]
        for i, n in enumerate(names):
            qs.append({"name": n, "parent": names[(i + 1) % k]})
        if doc["jobs"]:
            doc["jobs"][0]["queue"] = names[0]
        if c.chance(0.3):
            qs[0]["parent"] = qs[0]["name"]
        return f"queue-cycle-{k}"
    hns = doc["hypernodes"]
    a = {"name": "ha", "tier": 2, "members": ["hb"]}
    b = {"name": "hb", "tier": _pick(c, (2, 1, 3)), "members": ["ha"]}
    hns.extend([a, b])
    if c.chance(0.3):
        hns.append({"name": "hs", "tier": 2, "members": ["hs"]})
    return "hypernode-cycle"


#: The resources a node's allocatable and a task's request are probed at: the built-in ones,
#: an extended resource and the GPU.
_PROBED_RESOURCES = ("cpu", "memory", "pods", "example.com/x", "nvidia.com/gpu")

_NUMERIC_PATHS: tuple[tuple[str, tuple[str, ...]], ...] = (
    *(("nodes", ("allocatable", res)) for res in _PROBED_RESOURCES),
    ("nodes", ("gpus", "count")),
    ("nodes", ("gpus", "milli")),
    *(("tasks", ("request", res)) for res in _PROBED_RESOURCES),
    ("tasks", ("gpu_request", "count")),
    ("tasks", ("gpu_request", "milli")),
    ("tasks", ("gpu_indices", "0")),
    ("tasks", ("priority",)),
    ("jobs", ("min_available",)),
    ("jobs", ("min_task_member", "w")),
    ("jobs", ("priority",)),
    ("jobs", ("creation",)),
    ("jobs", ("min_resources", "cpu")),
    ("jobs", ("network_topology", "highest_tier_allowed")),
    ("queues", ("weight",)),
    ("queues", ("priority",)),
    ("queues", ("capability", "cpu")),
    ("queues", ("capability", "memory")),
    ("queues", ("capability", "nvidia.com/gpu")),
    ("queues", ("guarantee", "cpu")),
    ("queues", ("guarantee", "memory")),
    ("queues", ("deserved", "cpu")),
    ("hypernodes", ("tier",)),
)


def _set_path(record: dict[str, Any], path: tuple[str, ...], value: object) -> None:
    target: Any = record
    for part in path[:-1]:
        nxt = target.get(part) if isinstance(target, dict) else None
        if not isinstance(nxt, dict | list):
            nxt = [] if part == "gpu_indices" else {}
            target[part] = nxt
        target = nxt
    last = path[-1]
    if isinstance(target, list):
        if target:
            target[0] = value
        else:
            target.append(value)
    else:
        target[last] = value
    if path[0] == "network_topology":
        record["network_topology"].setdefault("mode", "hard")


def _atk_numeric(c: Chooser, doc: dict[str, Any]) -> str:
    kind, path = _pick(c, _NUMERIC_PATHS)
    records = _records(doc, kind)
    if not records:
        return "numeric-none"
    value = _number(c)
    if c.chance(0.2) and isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    targets = records if c.chance(0.3) else [_pick(c, records)]
    for r in targets:
        _set_path(r, path, value)
    return f"numeric-{kind}.{'.'.join(path)}"


def _atk_huge_tier(c: Chooser, doc: dict[str, Any]) -> str:
    if not doc["hypernodes"] and doc["nodes"]:
        doc["hypernodes"] = [{"name": "h1", "tier": 1, "members": [doc["nodes"][0]["name"]]}]
    top = _pick(c, _TIERS[3:])
    for h in doc["hypernodes"]:
        if h["tier"] >= 2:
            h["tier"] = top
    if c.chance(0.5):
        for job in doc["jobs"]:
            job["network_topology"] = {"mode": "hard", "highest_tier_allowed": top}
    return f"huge-tier-{top}"


def _atk_deep_queues(c: Chooser, doc: dict[str, Any]) -> str:
    depth = _pick(c, (50, 300, 990, 1200, 2500, 8000))
    prev = "default"
    for i in range(depth):
        doc["queues"].append({"name": f"d{i}", "parent": prev})
        prev = f"d{i}"
    for job in doc["jobs"]:
        if c.chance(0.7):
            job["queue"] = prev
    return f"deep-queues-{depth}"


def _atk_deep_hypernodes(c: Chooser, doc: dict[str, Any]) -> str:
    if not doc["nodes"]:
        return "deep-hypernodes-none"
    depth = _pick(c, (20, 200, 1000, 3000))
    doc["hypernodes"] = [{"name": "t1", "tier": 1, "members": [n["name"] for n in doc["nodes"]]}]
    for i in range(2, depth + 1):
        doc["hypernodes"].append({"name": f"t{i}", "tier": i, "members": [f"t{i - 1}"]})
    for job in doc["jobs"]:
        if c.chance(0.5):
            job["network_topology"] = {"mode": "hard", "highest_tier_allowed": depth - 1}
    return f"deep-hypernodes-{depth}"


def _atk_wide(c: Chooser, doc: dict[str, Any]) -> str:
    n = _pick(c, (200, 1000, 2000, 4000))
    how = c.below(3)
    start = len(doc["nodes"])
    new: list[dict[str, Any]] = [
        {"name": f"w{i}", "allocatable": {"cpu": 4, "memory": "8Gi"}}
        for i in range(start, start + n)
    ]
    doc["nodes"].extend(new)
    if how == 0:  # a tier-2 hypernode listing nodes directly
        doc["hypernodes"] = [{"name": "flat", "tier": 2, "members": [x["name"] for x in new]}]
        return f"wide-direct-hypernode-{n}"
    if how == 1:
        for i, x in enumerate(new):
            x["taints"] = [{"key": f"t{i}", "value": "v", "effect": "NoSchedule"}]
        return f"distinct-taints-{n}"
    for i, x in enumerate(new):
        x["labels"] = {f"l{i}": "v"}
    for t in doc["tasks"]:
        t["node_selector"] = {f"l{c.below(n)}": "v"}
    return f"distinct-labels-{n}"


def _rename(doc: dict[str, Any], kind: str, old: str, new: str) -> None:
    for r in _records(doc, kind):
        if r.get("name") == old:
            r["name"] = new
    if kind == "nodes":
        for t in doc["tasks"]:
            if t.get("node") == old:
                t["node"] = new
    if kind in ("nodes", "hypernodes"):
        for h in doc["hypernodes"]:
            h["members"] = [new if m == old else m for m in h["members"]]
    if kind == "queues":
        for q in doc["queues"]:
            if q.get("parent") == old:
                q["parent"] = new
        for j in doc["jobs"]:
            if j.get("queue", "default") == old:
                j["queue"] = new
    if kind == "jobs":
        for t in doc["tasks"]:
            if t.get("job") == old:
                t["job"] = new


def _atk_names(c: Chooser, doc: dict[str, Any]) -> str:
    kind = _pick(c, ("nodes", "queues", "jobs", "tasks", "hypernodes"))
    records = _records(doc, kind)
    if not records:
        return "names-none"
    target = _pick(c, records)
    new = _name(c)
    if kind == "nodes" and c.chance(0.3):  # also as a label, and selected by a task
        target.setdefault("labels", {})[new] = new
        if doc["tasks"]:
            _pick(c, doc["tasks"])["node_selector"] = {new: new}
    _rename(doc, kind, target["name"], new)
    if kind == "tasks":
        target["role"] = new
    return f"name-{kind}-{new.encode('unicode_escape').decode()[:12]}"


def _atk_placed(c: Chooser, doc: dict[str, Any]) -> str:
    if not doc["tasks"]:
        return "placed-none"
    task = _pick(c, doc["tasks"])
    phase = _pick(c, _PHASES)
    task["phase"] = phase
    node_choice = c.below(4)
    if node_choice in (0, 3) and doc["nodes"]:
        task["node"] = _pick(c, doc["nodes"])["name"]
    elif node_choice == 1:
        task.pop("node", None)
    else:
        task["node"] = None
    gpu = c.below(5)
    if gpu == 0:
        task.pop("gpu_request", None)
    elif gpu == 1:
        task["gpu_request"] = {"count": 1}
    elif gpu == 2:
        task["gpu_request"] = {"count": 2, "milli": 500}
    elif gpu == 3:
        task["gpu_request"] = {"count": 0}
    else:
        task["gpu_request"] = {"count": 1, "milli": _pick(c, (250, 500, 999, 1, 0, 1001, 2000))}
    count = task.get("gpu_request", {}).get("count", 0)
    if c.chance(0.5):  # consistent with the request: the edge is in the phase and the node
        task["gpu_indices"] = list(range(count)) if c.chance(0.6) else [1 + c.below(8)][:count]
    else:
        task["gpu_indices"] = list(
            _pick(c, ((), (0,), (1,), (3,), (0, 0), (0, 1), (-1,), (2**31,), (7, 8), (2**62,)))
        )
    if c.chance(0.3):  # several placed tasks pile on one node
        for other in doc["tasks"]:
            if other is not task and c.chance(0.5):
                other.update(
                    phase=_pick(c, _OCCUPYING),
                    node=task.get("node"),
                    gpu_indices=list(task["gpu_indices"]),
                    gpu_request=copy.deepcopy(task.get("gpu_request")),
                )
    return f"placed-{phase}-{'node' if task.get('node') else 'nonode'}-gpu{gpu}"


def _atk_gpu_mix(c: Chooser, doc: dict[str, Any]) -> str:
    if not doc["nodes"]:
        return "gpu-mix-none"
    node = _pick(c, doc["nodes"])
    node["gpus"] = {
        "count": _pick(c, (2, 1, 8)),
        "milli": _pick(c, (500, 1000, 250, 1, 0, 1500, 2000)),
        "sharing": _pick(c, (True, False)),
    }
    node["allocatable"].pop("nvidia.com/gpu", None)
    shapes = ({"count": 1}, {"count": 1, "milli": 500}, {"count": 2, "milli": 300}, {"count": 3})
    for t in doc["tasks"]:
        if c.chance(0.6):
            t["gpu_request"] = dict(_pick(c, shapes))
            t.pop("gpu_indices", None)
            if c.chance(0.5):
                t["phase"] = _pick(c, _OCCUPYING)
                t["node"] = node["name"]
                n = t["gpu_request"]["count"]
                t["gpu_indices"] = list(range(n)) if c.chance(0.7) else [0] * n
            elif t.get("phase") in _OCCUPYING:
                t["phase"] = "Pending"
                t.pop("node", None)
    return f"gpu-mix-{node['gpus']['milli']}-{'share' if node['gpus']['sharing'] else 'whole'}"


def _atk_zero(c: Chooser, doc: dict[str, Any]) -> str:
    what = _pick(c, ("nodes", "queues", "tasks", "jobs", "empty-job", "cordon", "all", "alloc"))
    if what == "nodes":
        doc["nodes"] = []
        doc["hypernodes"] = []
        for t in doc["tasks"]:
            t.pop("node", None)
            t.pop("gpu_indices", None)
            t["phase"] = "Pending"
    elif what == "queues":
        doc["queues"] = []
    elif what == "tasks":
        doc["tasks"] = []
    elif what == "jobs":
        doc["jobs"] = []
        doc["tasks"] = []
    elif what == "empty-job":
        doc["jobs"].append({"name": "empty", "min_available": _pick(c, (0, 1, 5))})
    elif what == "cordon":
        for n in doc["nodes"]:
            n["unschedulable"] = True
    elif what == "alloc":
        for n in doc["nodes"]:
            n["allocatable"] = {}
    else:
        doc.clear()
    return f"zero-{what}"


def _atk_many_tasks(c: Chooser, doc: dict[str, Any]) -> str:
    # Cost is linear (about 0.25 ms per placement), but one probe runs seven cycles: a
    # 2,000-pod gang that fits (best-effort pods, no pod limit) passes the 10 s budget on a
    # loaded machine, so gangs stay at 1,000 here; the asv suite times large gangs.
    n = _pick(c, (100, 500, 1000))
    doc["jobs"].append({"name": "big", "min_available": _pick(c, (1, n, n + 1))})
    req: dict[str, object] = _pick(c, ({"cpu": "1m"}, {}, {"cpu": 1, "nvidia.com/gpu": 1}))
    for i in range(n):
        doc["tasks"].append({"name": f"big-{i}", "job": "big", "request": dict(req)})
    return f"many-tasks-{n}"


def _atk_shape(c: Chooser, doc: dict[str, Any]) -> str:
    kind = _pick(c, ("nodes", "queues", "jobs", "tasks", "hypernodes"))
    records = _records(doc, kind)
    what = c.below(4)
    if what == 0:
        records.append({})
        return f"shape-empty-{kind}"
    if what == 1 and records:
        target = _pick(c, records)
        key = _pick(c, sorted(target))
        target[key] = _pick(c, (None, True, [], {}, "", 1.5, [None], {"": None}))
        return f"shape-{kind}.{key}"
    if what == 2:
        doc[kind] = _pick(c, (None, {}, "", {"name": "x"}, [[]]))
        return f"shape-list-{kind}"
    nested: Any = "x"
    for _ in range(_pick(c, (50, 200, 800))):  # deeper: see the text inputs
        nested = [nested]
    if records:
        _pick(c, records)["labels"] = {"k": nested}
    return "shape-deep-nesting"


def _atk_spread_gang(c: Chooser, doc: dict[str, Any]) -> str:
    """A hard-topology gang whose running tasks already span several hypernodes (a state the
    scheduler did not make: nodes relabelled, topology changed), with more tasks pending."""
    if len(doc["nodes"]) < 2 or not doc["jobs"]:
        return "spread-gang-none"
    if not doc["hypernodes"]:
        doc["hypernodes"] = [
            {"name": f"h{i}", "tier": 1, "members": [n["name"]]} for i, n in enumerate(doc["nodes"])
        ]
    job = _pick(c, doc["jobs"])
    job["network_topology"] = {"mode": "hard", "highest_tier_allowed": 1}
    job["phase"] = "Running"
    mine = [t for t in doc["tasks"] if t.get("job") == job["name"]]
    for i, node in enumerate(doc["nodes"][:2]):
        doc["tasks"].append(
            {
                "name": f"{job['name']}-spread-{i}",
                "job": job["name"],
                "request": {"cpu": "100m"},
                "phase": _pick(c, ("Running", "Bound", "Pipelined")),
                "node": node["name"],
            }
        )
    for t in mine:
        for key in ("node", "gpu_indices", "phase"):
            t.pop(key, None)
    return "spread-gang"


_SNAPSHOT_ATTACKS: tuple[tuple[Callable[[Chooser, dict[str, Any]], str], int], ...] = (
    (_atk_placed, 14),
    (_atk_numeric, 16),
    (_atk_dangling, 8),
    (_atk_duplicate, 8),
    (_atk_gpu_mix, 10),
    (_atk_zero, 8),
    (_atk_names, 8),
    (_atk_cycle, 5),
    (_atk_huge_tier, 5),
    (_atk_spread_gang, 3),
    (_atk_shape, 4),
    (_atk_deep_queues, 2),
    (_atk_deep_hypernodes, 2),
    (_atk_wide, 1),
    (_atk_many_tasks, 1),
)
_ATTACK_TABLE = [fn for fn, weight in _SNAPSHOT_ATTACKS for _ in range(weight)]
_EXPENSIVE = frozenset({_atk_deep_queues, _atk_deep_hypernodes, _atk_wide, _atk_many_tasks})


def snapshot_doc(c: Chooser, *, cheap: bool = False) -> tuple[dict[str, Any], tuple[str, ...]]:
    """A hostile snapshot document and the names of the attacks applied (1-3 of them).
    ``cheap`` leaves out the attacks that build thousands of records."""
    doc = _base_snapshot(c)
    attacks: list[str] = []
    table = [fn for fn in _ATTACK_TABLE if not (cheap and fn in _EXPENSIVE)]
    for _ in range(1 + c.below(3)):
        if not isinstance(doc.get("tasks"), list) or not isinstance(doc.get("nodes"), list):
            break
        for key in ("nodes", "hypernodes", "queues", "jobs", "tasks"):
            if not isinstance(doc.get(key), list):
                doc[key] = []
        attack = _pick(c, table)
        try:
            attacks.append(attack(c, doc))
        except (TypeError, KeyError, AttributeError, IndexError, ValueError):
            # an earlier attack broke the shape this one relies on: the input stays as it is
            attacks.append(f"{attack.__name__[5:]}-on-broken-shape")
            break
    return doc, tuple(attacks)
