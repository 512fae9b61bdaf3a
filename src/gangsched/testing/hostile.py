"""A relational and boundary fuzzer: inputs that attack references, numbers, sizes and encodings.

The polite fuzzer (``tests/test_fuzz_inputs.py``) mutates well-formed records one field at a
time. This one attacks what lies *between* records and at the *edges* of numbers:

* references that dangle or are duplicated (task → job, job → queue, task → node, hypernode
  members, queue parents), cycles among queue parents and hypernodes;
* every numeric field at 0, 1, −1, 2³¹, 2⁵³, 2⁶², 2⁶³−1 (and just past int64), huge tier numbers;
* deep trees (queue chains, hypernode towers) and wide ones (many nodes listed directly, one
  distinct taint per node), names with ``/``, unicode and control characters;
* Pipelined, Bound, Running and Releasing tasks with and without a node and GPU indices, GPU
  sharing and milli mixes, zero nodes, queues or tasks, every node cordoned;
* configurations with unknown or extreme plugin and action arguments;
* files in every encoding (UTF-8 with BOM, UTF-16, latin-1, binary junk, deep nesting) fed to
  the loaders and the command line.

Every input is one :class:`Case`. :func:`probe` runs it in the calling process: an input that is
rejected must raise a :class:`~gangsched.errors.GangschedError`; an accepted snapshot is
scheduled under each of :data:`CONFIGS` twice (the two decisions must be byte-identical), its
decisions must pass :func:`~gangsched.testing.invariants.check_all`, the snapshot must be
unmutated, and the *next* snapshot (the decisions applied) must be accepted again.

:class:`Runner` runs probes in a worker process with an address-space limit (``RLIMIT_AS``) and
a time limit; a worker that hangs or dies is replaced and the input that did it is reported.
Generators are written once against :class:`Chooser`: :class:`RandomChooser` drives them from
``random.Random(seed)`` for fast soaks, and :func:`hostile_cases` (and friends) drive them
from hypothesis draws, which shrink towards the first option of every choice.

Command line::

    python -m gangsched.testing.hostile --inputs 100000 --seed 0 --out DIR

prints a summary table and writes each failing input to ``DIR`` as JSON; ``--replay FILE``
runs one saved input again.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import copy
import importlib
import io
import json
import math
import multiprocessing
import os
import pickle
import re
import signal
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from hypothesis import strategies as st

    from ..config import Config

__all__ = [
    "BOUNDARY_INTS",
    "CONFIGS",
    "HOSTILE_NAMES",
    "Case",
    "Chooser",
    "DrawChooser",
    "Outcome",
    "RandomChooser",
    "Runner",
    "Summary",
    "config_doc",
    "generate_case",
    "hostile_cases",
    "main",
    "probe",
    "run",
    "shrink",
    "snapshot_doc",
    "text_input",
]

T = TypeVar("T")

#: The integers every numeric field is tried at.
BOUNDARY_INTS: tuple[int, ...] = (0, 1, -1, 2**31, 2**53, 2**62, 2**63 - 1, 2**63, -(2**63))
#: Further numbers: just past the bounds, huge, and floats that are not quite integers.
_MORE_NUMBERS: tuple[object, ...] = (
    2**53 + 1,
    2**62 + 1,
    2**64,
    10**16,
    10**30,
    2**31 - 1,
    1.0,
    0.5,
    1e308,
    -0.0,
)
_QUANTITY_TEXTS: tuple[str, ...] = (
    "9223372036854775807m",
    "9223372036854775807",
    "4Ei",
    "8Ei",
    "7Ei",
    "1e18",
    "9007199254740993",
    "1n",
    "0.001m",
    "9" * 5000,
)
#: Tier numbers: order is all that should matter.
_TIERS: tuple[int, ...] = (1, 2, 3, 64, 1000, 2000, 5000, 10**6, 10**8, 2**31, 2**53, 2**62)
#: Names that break naive code: separators, unicode, control characters, lengths.
HOSTILE_NAMES: tuple[str, ...] = (
    "a/b",
    "default/x",
    "/",
    "..",
    "名前",
    "ノード-0",
    "🙂",
    "e\u0301",
    "\u00e9",
    "\u202egpu",
    "\ufeffn",
    "a\x00b",
    "a\nb",
    "\t",
    " ",
    "",
    "x" * 300,
    "N0",
    "n0 ",
    "n0\u200b",
    "\ud800",
    "default",
    "root",
    "-",
    "a.b",
    "A_B",
)
_PHASES = ("Pending", "Pipelined", "Bound", "Running", "Releasing", "Succeeded", "Failed")
_OCCUPYING = ("Pipelined", "Bound", "Running", "Releasing")

# --------------------------------------------------------------------------------------------
# Choosers


class Chooser(Protocol):
    """Where a generator's choices come from. ``below(n)`` is in ``[0, n)`` and 0 is always the
    simplest option; ``chance(p)`` is True with probability ``p`` (False is the simple case)."""

    def below(self, n: int) -> int: ...

    def chance(self, p: float) -> bool: ...


class RandomChooser:
    """Choices from ``random.Random`` (fast: no hypothesis overhead)."""

    def __init__(self, seed: int | str) -> None:
        import random

        self.rng = random.Random(seed)

    def below(self, n: int) -> int:
        return self.rng.randrange(n) if n > 1 else 0

    def chance(self, p: float) -> bool:
        return self.rng.random() < p


class DrawChooser:
    """Choices from a hypothesis ``draw``: every choice shrinks towards its first option."""

    def __init__(self, draw: Callable[[Any], Any]) -> None:
        from hypothesis import strategies as st

        self._draw = draw
        self._st = st

    def below(self, n: int) -> int:
        return int(self._draw(self._st.integers(0, n - 1))) if n > 1 else 0

    def chance(self, p: float) -> bool:
        return int(self._draw(self._st.integers(0, 999))) >= round(1000 * (1 - p))


def _pick(c: Chooser, seq: Sequence[T]) -> T:
    return seq[c.below(len(seq))]


def _number(c: Chooser) -> object:
    k = c.below(10)
    if k < 6:
        return _pick(c, BOUNDARY_INTS)
    if k < 8:
        return _pick(c, _MORE_NUMBERS)
    return _pick(c, _QUANTITY_TEXTS)


def _name(c: Chooser) -> str:
    return _pick(c, HOSTILE_NAMES)


# --------------------------------------------------------------------------------------------
# Cases


@dataclass(frozen=True)
class Case:
    """One generated input.

    ``kind`` is ``"snapshot"`` (``doc`` is a snapshot document), ``"config"`` (``config`` is a
    configuration document, ``doc`` a valid snapshot to schedule with it) or ``"text"``
    (``data`` is a file's bytes; ``target`` says what reads it: ``"cli"``, ``"cli-config"``,
    ``"load"`` or ``"volcano-yaml"``). ``attacks`` names what was done to the input.
    """

    kind: str
    attacks: tuple[str, ...]
    doc: Any = None
    config: Any = None
    data: bytes = b""
    target: str = ""
    seed: int = 0
    index: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "attacks": list(self.attacks),
            "doc": self.doc,
            "config": self.config,
            "data": base64.b64encode(self.data).decode("ascii"),
            "target": self.target,
            "seed": self.seed,
            "index": self.index,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Case:
        return cls(
            kind=d["kind"],
            attacks=tuple(d["attacks"]),
            doc=d.get("doc"),
            config=d.get("config"),
            data=base64.b64decode(d.get("data", "")),
            target=d.get("target", ""),
            seed=d.get("seed", 0),
            index=d.get("index", 0),
        )


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


def _all_names(doc: dict[str, Any]) -> list[str]:
    return [
        r["name"]
        for key in ("nodes", "hypernodes", "queues", "jobs", "tasks")
        for r in _records(doc, key)
        if isinstance(r, dict) and isinstance(r.get("name"), str)
    ]


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


_NUMERIC_PATHS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("nodes", ("allocatable", "cpu")),
    ("nodes", ("allocatable", "memory")),
    ("nodes", ("allocatable", "pods")),
    ("nodes", ("allocatable", "example.com/x")),
    ("nodes", ("allocatable", "nvidia.com/gpu")),
    ("nodes", ("gpus", "count")),
    ("nodes", ("gpus", "milli")),
    ("tasks", ("request", "cpu")),
    ("tasks", ("request", "memory")),
    ("tasks", ("request", "pods")),
    ("tasks", ("request", "example.com/x")),
    ("tasks", ("request", "nvidia.com/gpu")),
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


# --------------------------------------------------------------------------------------------
# Configuration documents

_TIER1 = ("priority", "gang", "conformance")
_TIER2 = (
    "drf",
    "predicates",
    "proportion",
    "capacity",
    "nodeorder",
    "binpack",
    "overcommit",
    "network-topology-aware",
    "sla",
)
_ARGS: dict[str, tuple[str, ...]] = {
    "binpack": ("binpack.weight", "binpack.cpu", "binpack.resources", "binpack.wieght"),
    "nodeorder": ("leastrequested.weight", "balancedresource.weight", "nodeaffinity.weight"),
    "network-topology-aware": ("weight", "hypernode.binpack.cpu", "hypernode.binpack.fading"),
    "overcommit": ("overcommit-factor",),
    "proportion": ("proportion.weight",),
    "drf": ("drf.weight",),
    "sla": ("sla-waiting-time",),
    "gang": ("gang.weight",),
}
_ALLOCATE_ARGS: tuple[tuple[str, tuple[object, ...]], ...] = (
    ("placer", ("greedy", "cpsat", "exact", "", "CPSAT")),
    ("placer.seed", (0, 2**31, 2**31 - 1, -1, 2**63, 1.5)),
    ("placer.workers", (1, 0, -3, 2**31, 2**63, 8)),
    ("placer.time-limit", (0.5, 0, -1, 1e-320, math.inf, math.nan, 1e308)),
    ("placer.deterministic-time", (0.2, 0, -1, 1e-320, math.nan, 1e30)),
)


def config_doc(c: Chooser) -> tuple[dict[str, Any], tuple[str, ...]]:
    """A hostile configuration document and the names of the attacks applied."""
    attacks: list[str] = []
    actions = ["enqueue", "allocate", "backfill"]
    if c.chance(0.5):
        actions = ["enqueue", "allocate", "preempt", "reclaim", "backfill"]
    tier2 = [p for p in _TIER2 if c.chance(0.5)]
    if "capacity" in tier2 and "proportion" in tier2:
        tier2.remove("capacity")
    tiers: list[list[dict[str, Any]]] = [
        [{"name": p} for p in _TIER1 if c.chance(0.8)],
        [{"name": p} for p in tier2],
    ]
    doc: dict[str, Any] = {"actions": actions, "tiers": tiers}
    for _ in range(1 + c.below(2)):
        what = c.below(7)
        if what == 0:
            plugins = [p for t in tiers for p in t if p["name"] in _ARGS]
            if plugins:
                p = _pick(c, plugins)
                key = _pick(c, _ARGS[p["name"]])
                p.setdefault("arguments", {})[key] = _number(c)
                attacks.append(f"plugin-arg-{key}")
        elif what == 1:
            plugins = [p for t in tiers for p in t]
            if plugins:
                p = _pick(c, plugins)
                p.setdefault("arguments", {})[_pick(c, ("wieght", "weight ", "x", ""))] = 1
                attacks.append(f"unknown-arg-{p['name']}")
        elif what == 2:
            args: dict[str, object] = {}
            for key, values in _ALLOCATE_ARGS:
                if c.chance(0.5):
                    args[key] = _pick(c, values)
            args.setdefault("placer.deterministic-time", 0.2)
            args.setdefault("placer.time-limit", 2.0)
            doc["configurations"] = [{"name": "allocate", "arguments": args}]
            attacks.append("allocate-args-" + "-".join(sorted(args)))
        elif what == 3:
            n = _pick(c, (100, 10_000, 100_000))
            doc["actions"] = ["allocate"] * n
            attacks.append(f"many-actions-{n}")
        elif what == 4:
            doc["tiers"] = _pick(c, ([], [[]], [[{"name": "gang"}]] * 50, tiers + tiers))
            attacks.append("tiers-shape")
        elif what == 5:
            for p in (p for t in tiers for p in t if p["name"] in ("drf", "capacity")):
                p["enableHierarchy"] = True
            attacks.append("hierarchy")
        else:
            plugins = [p for t in tiers for p in t]
            if plugins:
                p = _pick(c, plugins)
                flag = _pick(c, ("enableJobOrder", "enablePredicate", "enableNodeOrder", "x"))
                p[flag] = _pick(c, (False, True, None, 0, "false"))
                attacks.append(f"flag-{flag}")
    return doc, tuple(attacks)


# --------------------------------------------------------------------------------------------
# Text inputs


def _manifests(c: Chooser) -> str:
    """Kubernetes manifests (YAML) with boundary values: replica counts, names, quantities."""
    replicas = _pick(c, (2, 0, -1, 10**6, 10**9, 2**63, "3"))
    name = _pick(c, ("train", "default/x", "a/b", "Train", "x" * 300, "名前", "-x"))
    cpu = _pick(c, ('"1"', '"9223372036854775807m"', "1e400", '"4Ei"', "9" * 5000))
    globals_ = "true" if c.chance(0.3) else "false"
    return f"""apiVersion: v1
kind: Node
metadata:
  name: node-0
status:
  allocatable: {{cpu: "8", memory: 32Gi, nvidia.com/gpu: "2", pods: "110"}}
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {{name: high}}
value: {_pick(c, (1000, 2**31, -(2**31) - 1, 10**30))}
globalDefault: {globals_}
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {{name: other}}
value: 10
globalDefault: {globals_}
---
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata: {{name: default}}
spec: {{weight: {_pick(c, (1, 0, -1, 2**63))}}}
---
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata:
  name: {json.dumps(name)}
spec:
  schedulerName: volcano
  minAvailable: {_pick(c, (1, 0, -1, 2**62))}
  tasks:
  - name: worker
    replicas: {json.dumps(replicas)}
    template:
      spec:
        containers:
        - name: c
          resources:
            requests: {{cpu: {cpu}, nvidia.com/gpu: {_pick(c, ("1", "0.5", "10000000000000000"))}}}
"""


_VOLCANO_CONF = """actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
- plugins:
  - name: drf
  - name: predicates
  - name: proportion
  - name: binpack
    arguments:
      binpack.weight: 3
"""


def _nested(c: Chooser) -> str:
    depth = _pick(c, (100, 1000, 5000, 100_000))
    shape = c.below(4)
    if shape == 0:
        return "[" * depth + "]" * depth
    if shape == 1:
        return '{"a":' * depth + "1" + "}" * depth
    if shape == 2:
        return "- " * depth + "x"
    return "[" * depth  # unterminated


def _alias_bomb(c: Chooser) -> str:
    levels = _pick(c, (3, 6, 9))
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels):
        prev = ",".join([f"*a{i - 1}"] * 9)
        lines.append(f"a{i}: &a{i} [{prev}]")
    lines.append(f"nodes: *a{levels - 1}")
    return "\n".join(lines) + "\n"


_ENCODINGS: tuple[str, ...] = (
    "utf-8",
    "utf-8-sig",
    "utf-16",
    "utf-16-le",
    "utf-16-be",
    "utf-32",
    "latin-1",
    "cp1252",
)


def text_input(c: Chooser) -> tuple[bytes, str, tuple[str, ...]]:
    """File bytes, the reader that gets them and the attack names."""
    source = c.below(6)
    target = _pick(c, ("cli", "load", "cli-config", "volcano-yaml"))
    attacks: list[str] = []
    if source == 0:
        doc, inner = snapshot_doc(c, cheap=True)
        text = json.dumps(doc, ensure_ascii=c.chance(0.5), indent=_pick(c, (None, 1)))
        attacks += inner
        target = target if target in ("cli", "load") else "cli"
    elif source == 1:
        text = _manifests(c)
        target = target if target in ("cli", "load") else "load"
        attacks.append("manifests")
    elif source == 2:
        text = _VOLCANO_CONF
        target = target if target in ("cli-config", "volcano-yaml") else "volcano-yaml"
        attacks.append("volcano-conf")
    elif source == 3:
        text = _nested(c)
        attacks.append("deep-nesting")
    elif source == 4:
        text = _alias_bomb(c)
        attacks.append("alias-bomb")
    else:
        digits = _pick(c, (20, 400, 5000, 50_000))
        text = f'{{"nodes": [{{"name": "n", "allocatable": {{"cpu": {"9" * digits}}}}}]}}'
        if target in ("cli-config", "volcano-yaml"):
            text = (
                "actions: allocate\ntiers:\n- plugins:\n  - name: binpack\n"
                f"    arguments:\n      binpack.weight: {'9' * digits}\n"
            )
        attacks.append(f"digits-{digits}")
    how = c.below(8)
    if how == 0:
        data = text.encode("utf-8", "surrogatepass")
        attacks.append("utf-8")
    elif how < 4:
        encoding = _pick(c, _ENCODINGS)
        if encoding in ("latin-1", "cp1252"):
            text = text.replace('"n0"', '"n\u00e90"').replace("node-0", "n\u00f6de-0")
        data = text.encode(encoding, errors="replace")
        attacks.append(f"enc-{encoding}")
    elif how == 4:
        raw = bytearray(text.encode("utf-8", "surrogatepass"))
        for _ in range(1 + c.below(4)):
            at = c.below(len(raw) + 1)
            raw[at:at] = _pick(c, (b"\xff", b"\xc3", b"\x00", b"\xed\xa0\x80", b"\xef\xbb\xbf"))
        data = bytes(raw)
        attacks.append("bad-utf8")
    elif how == 5:
        seed = c.below(2**16)
        import random

        rng = random.Random(seed)
        data = bytes(rng.randrange(256) for _ in range(_pick(c, (0, 1, 16, 4096))))
        attacks.append("binary-junk")
    elif how == 6:
        data = text.replace("\n", "\r\n").encode("utf-8", "surrogatepass")
        attacks.append("crlf")
    else:
        data = _pick(c, (b"", b"\xef\xbb\xbf", b"\xff\xfe", b"\x00" * 64, b"null", b"[]", b"{}"))
        attacks.append("tiny")
    return data, target, tuple(attacks)


# --------------------------------------------------------------------------------------------
# Generation


def generate_case(c: Chooser, *, seed: int = 0, index: int = 0, cheap: bool = False) -> Case:
    """One case: a snapshot (about 70%), a configuration (15%) or a file (15%)."""
    k = c.below(20)
    if k < 14:
        doc, attacks = snapshot_doc(c, cheap=cheap)
        return Case("snapshot", attacks, doc=doc, seed=seed, index=index)
    if k < 17:
        cfg, attacks = config_doc(c)
        snap = _base_snapshot(c)
        return Case("config", attacks, doc=snap, config=cfg, seed=seed, index=index)
    data, target, attacks = text_input(c)
    return Case("text", attacks, data=data, target=target, seed=seed, index=index)


def seeded_cases(seed: int, count: int, *, cheap: bool = False) -> Iterator[Case]:
    """``count`` cases from ``random.Random`` seeded per input (any one can be regenerated)."""
    for i in range(count):
        yield generate_case(RandomChooser(f"{seed}:{i}"), seed=seed, index=i, cheap=cheap)


def hostile_cases(*, cheap: bool = True) -> st.SearchStrategy[Case]:
    """A hypothesis strategy of cases (shrinks towards the simplest option of every choice)."""
    from hypothesis import strategies as st

    @st.composite
    def build(draw: st.DrawFn) -> Case:
        return generate_case(DrawChooser(draw), cheap=cheap)

    return build()


def hostile_snapshot_docs(*, cheap: bool = True) -> st.SearchStrategy[dict[str, Any]]:
    """A hypothesis strategy of hostile snapshot documents."""
    from hypothesis import strategies as st

    @st.composite
    def build(draw: st.DrawFn) -> dict[str, Any]:
        return snapshot_doc(DrawChooser(draw), cheap=cheap)[0]

    return build()


def hostile_config_docs() -> st.SearchStrategy[dict[str, Any]]:
    """A hypothesis strategy of hostile configuration documents."""
    from hypothesis import strategies as st

    @st.composite
    def build(draw: st.DrawFn) -> dict[str, Any]:
        return config_doc(DrawChooser(draw))[0]

    return build()


# --------------------------------------------------------------------------------------------
# Probing


#: Outcome categories that are failures.
FAILURES: tuple[str, ...] = (
    "escape",
    "hang",
    "blowup",
    "violation",
    "nondeterminism",
    "late-reject",
)


@dataclass(frozen=True)
class Outcome:
    """What one probe found. ``category`` is ``accepted``, ``rejected`` or one of
    :data:`FAILURES`; ``signature`` groups failures of one cause."""

    category: str
    stage: str = ""
    signature: str = ""
    message: str = ""
    trace: str = ""
    seconds: float = 0.0


class _ProbeTimeout(BaseException):
    """Raised by the time-limit alarm inside a worker (a BaseException so that ``except
    Exception`` in the code under test does not swallow it)."""


_CONFIG_CACHE: dict[str, Config] = {}


def _configs() -> dict[str, Config]:
    """Name → one of the configurations every accepted snapshot is scheduled under."""
    if not _CONFIG_CACHE:
        from ..config import Config

        _CONFIG_CACHE["default"] = Config.default()
        _CONFIG_CACHE["preempt"] = Config.from_dict(
            {
                "actions": ["enqueue", "allocate", "preempt", "reclaim", "backfill"],
                "tiers": [
                    [{"name": "priority"}, {"name": "gang"}, {"name": "conformance"}],
                    [
                        {"name": "drf"},
                        {"name": "predicates"},
                        {"name": "proportion"},
                        {"name": "nodeorder"},
                        {"name": "binpack"},
                        {"name": "network-topology-aware"},
                    ],
                ],
            }
        )
        _CONFIG_CACHE["hierarchy"] = Config.from_dict(
            {
                "actions": ["enqueue", "allocate", "preempt", "reclaim", "backfill"],
                "tiers": [
                    [{"name": "priority"}, {"name": "gang"}],
                    [
                        {"name": "drf", "enableHierarchy": True},
                        {"name": "predicates"},
                        {"name": "capacity", "enableHierarchy": True},
                        {"name": "network-topology-aware"},
                    ],
                ],
            }
        )
    return _CONFIG_CACHE


#: Names of the configurations every accepted snapshot is scheduled under.
CONFIGS: tuple[str, ...] = ("default", "preempt", "hierarchy")

_HOSTILE_FILE = os.path.abspath(__file__)
_PACKAGE_DIR = os.path.dirname(os.path.dirname(_HOSTILE_FILE))
_PACKAGE = __name__.rsplit(".", 2)[0]


def _where(tb: Any) -> str:
    """``module:function`` of the innermost gangsched frame (outside this file)."""
    best = "?"
    for frame in traceback.extract_tb(tb):
        path = os.path.abspath(frame.filename)
        if path.startswith(_PACKAGE_DIR) and path != _HOSTILE_FILE:
            rel = os.path.relpath(path, os.path.dirname(_PACKAGE_DIR))
            best = f"{rel[:-3].replace(os.sep, '.')}:{frame.name}"
    return best


def _where_stack() -> str:
    best = "?"
    for frame in traceback.extract_stack()[:-2]:
        path = os.path.abspath(frame.filename)
        if path.startswith(_PACKAGE_DIR) and path != _HOSTILE_FILE:
            rel = os.path.relpath(path, os.path.dirname(_PACKAGE_DIR))
            best = f"{rel[:-3].replace(os.sep, '.')}:{frame.name}"
    return best


_NUM = re.compile(r"\d+")
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")


def _shape(message: str) -> str:
    return _NUM.sub("N", _QUOTED.sub("'…'", message))[:90]


def _failure(category: str, stage: str, exc: BaseException, extra: str = "") -> Outcome:
    where = _where(exc.__traceback__)
    message = f"{type(exc).__name__}: {exc}"[:2000]
    if category in ("violation", "nondeterminism", "late-reject"):
        signature = f"{category} {stage.split('[')[0]}: {_shape(str(exc))}"
    else:
        signature = f"{category} {type(exc).__name__} @ {where}"
    trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-8))
    return Outcome(category, stage, signature, message + extra, trace[-4000:])


def _next_doc(before: dict[str, Any], decisions: Any) -> dict[str, Any]:
    """The snapshot document one cycle later: binds bound, reservations pipelined, victims
    releasing."""
    doc = copy.deepcopy(before)
    by_name = {t["name"]: t for t in doc["tasks"]}
    for e in decisions.evictions:
        by_name[e.task]["phase"] = "Releasing"
    for kind, items in (("Pipelined", decisions.pipelined), ("Bound", decisions.binds)):
        for d in items:
            t = by_name[d.task]
            t["phase"] = kind
            t["node"] = d.node
            t["gpu_indices"] = list(d.gpu_indices)
    return doc


def _schedule_checked(
    snapshot: Any,
    config: Config,
    label: str,
) -> tuple[Outcome | None, Any]:
    """Schedule twice, compare, and run the invariant checks of the rules ``config``'s
    plugins enforce (:func:`~gangsched.testing.invariants.check_cycle`)."""
    from ..errors import GangschedError
    from ..scheduler import schedule
    from .invariants import InvariantViolation, check_cycle

    stage = f"schedule[{label}]"
    try:
        first = schedule(snapshot, config)
    except GangschedError as exc:
        return _failure("late-reject", stage, exc), None
    try:
        second = schedule(snapshot, config)
    except GangschedError as exc:
        return _failure("nondeterminism", stage, exc), None
    a = json.dumps(first.to_dict(), sort_keys=True)
    b = json.dumps(second.to_dict(), sort_keys=True)
    if a != b and not first.nondeterministic:  # a wall-clock solver budget says so
        return Outcome(
            "nondeterminism",
            stage,
            f"nondeterminism {label}",
            f"two runs differ under {label}",
        ), None
    stage = f"check[{label}]"
    try:
        check_cycle(snapshot, first, config)
    except InvariantViolation as exc:
        return _failure("violation", stage, exc), None
    return None, first


def _probe_snapshot(case: Case) -> Outcome:
    from ..errors import GangschedError
    from ..scheduler import explain
    from ..snapshot import Snapshot
    from .invariants import InvariantViolation, check_snapshot_unmutated

    stage = "from_dict"
    try:
        try:
            snapshot = Snapshot.from_dict(case.doc)
        except GangschedError as exc:
            if not str(exc):
                return Outcome("escape", stage, "escape empty-message", repr(exc))
            return Outcome("rejected", stage, message=str(exc)[:300])
        stage = "to_dict"
        before = snapshot.to_dict()
        stage = "round-trip"
        again = Snapshot.from_dict(copy.deepcopy(before))
        if again.to_dict() != before:
            return Outcome("violation", stage, "violation round-trip: to_dict differs", "")
        first_decisions = None
        for label in CONFIGS:
            config = _configs()[label]
            stage = f"schedule[{label}]"
            bad, decisions = _schedule_checked(snapshot, config, label)
            if bad is not None:
                return bad
            if first_decisions is None:
                first_decisions = decisions
            stage = f"unmutated[{label}]"
            try:
                check_snapshot_unmutated(before, snapshot)
            except InvariantViolation as exc:
                return _failure("violation", stage, exc)
            stage = f"next-cycle[{label}]"
            try:
                Snapshot.from_dict(_next_doc(before, decisions))
            except GangschedError as exc:
                return _failure("violation", stage, exc)
        stage = "explain"
        pending = [t.name for t in snapshot.tasks if t.phase.value == "Pending"]
        if pending:
            try:
                explain(snapshot, pending[0])
            except GangschedError as exc:
                return _failure("late-reject", stage, exc)
    except _ProbeTimeout:
        raise
    except MemoryError as exc:
        return _failure("blowup", stage, exc)
    except Exception as exc:
        return _failure("escape", stage, exc)
    return Outcome("accepted", stage)


def _probe_config(case: Case) -> Outcome:
    from ..config import Config
    from ..errors import GangschedError
    from ..snapshot import Snapshot

    stage = "Config.from_dict"
    try:
        try:
            config = Config.from_dict(case.config)
        except GangschedError as exc:
            return Outcome("rejected", stage, message=str(exc)[:300])
        stage = "yaml-round-trip"
        try:
            again = Config.from_volcano_yaml(config.to_volcano_yaml())
        except GangschedError as exc:
            return _failure("violation", stage, exc)
        if again.to_volcano_yaml() != config.to_volcano_yaml():
            return Outcome("violation", stage, "violation yaml-round-trip: differs", "")
        snapshot = Snapshot.from_dict(case.doc)
        stage = "schedule[config]"
        bad, _ = _schedule_checked(snapshot, config, "config")
        if bad is not None and bad.category == "late-reject":
            # plugin and action arguments are read when the session opens
            return Outcome("rejected", stage, message=bad.message[:300])
        if bad is not None:
            return bad
    except _ProbeTimeout:
        raise
    except MemoryError as exc:
        return _failure("blowup", stage, exc)
    except Exception as exc:
        return _failure("escape", stage, exc)
    return Outcome("accepted", stage)


def _probe_text(case: Case, workdir: str) -> Outcome:
    from ..config import Config
    from ..errors import GangschedError

    path = os.path.join(workdir, "input.yaml")
    with open(path, "wb") as f:
        f.write(case.data)
    stage = case.target
    try:
        if case.target == "load":
            from ..io.k8s import load_files

            try:
                load_files([path])
            except GangschedError as exc:
                return Outcome("rejected", stage, message=str(exc)[:300])
            return Outcome("accepted", stage)
        if case.target == "volcano-yaml":
            try:
                Config.from_volcano_yaml(case.data.decode("latin-1"))
            except GangschedError as exc:
                return Outcome("rejected", stage, message=str(exc)[:300])
            return Outcome("accepted", stage)
        from ..cli import main as cli_main

        if case.target == "cli-config":
            snap = os.path.join(workdir, "snap.json")
            with open(snap, "w", encoding="utf-8") as f:
                json.dump({"nodes": [{"name": "n"}], "queues": [{"name": "default"}]}, f)
            argv = ["schedule", "-f", snap, "--config", path]
        else:
            argv = ["schedule", "-f", path, "-o", "json"]
        out, err = io.StringIO(), io.StringIO()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                status = cli_main(argv)
        except SystemExit as exc:
            status = exc.code if isinstance(exc.code, int) else 1
        text = err.getvalue()
        if "Traceback" in text or status not in (0, 1, 2):
            return Outcome(
                "escape",
                stage,
                f"escape cli status {status}",
                f"status {status}: {text[-500:]}",
            )
        if status != 0 and not text.startswith("gangsched"):
            return Outcome("escape", stage, "escape cli message", text[-500:])
        return Outcome("accepted" if status == 0 else "rejected", stage, message=text[-300:])
    except _ProbeTimeout:
        raise
    except MemoryError as exc:
        return _failure("blowup", stage, exc)
    except Exception as exc:
        return _failure("escape", stage, exc)


def _probe_selftest(case: Case) -> Outcome:
    """Cases that misbehave on purpose, to test the harness: ``hang``, ``memory``, ``exit``,
    ``raise`` and ``ok``."""
    if case.target == "hang":
        while True:
            time.sleep(0.05)
    if case.target == "memory":
        import numpy as np

        try:
            # 64 GiB in 64 MiB pieces; ``np.empty`` only reserves address space, so the limit
            # is hit at once however loaded the machine is (``bytearray`` zero-fills first)
            hog = [np.empty(2**26, dtype=np.uint8) for _ in range(1 << 10)]
        except MemoryError as exc:
            return _failure("blowup", "selftest", exc)
        return Outcome("accepted", "selftest", message=f"allocated {len(hog)} pieces")
    if case.target == "exit":
        os._exit(3)
    if case.target == "raise":
        try:
            raise KeyError("selftest")
        except KeyError as exc:
            return _failure("escape", "selftest", exc)
    return Outcome("accepted", "selftest")


def probe(case: Case, *, workdir: str | None = None) -> Outcome:
    """Run one case in this process (no time or memory limit: see :class:`Runner`)."""
    start = time.perf_counter()
    with warnings.catch_warnings():
        # a float overflow inside the library is a silent wrap or an infinity: an escape
        warnings.filterwarnings("error", message="overflow encountered", category=RuntimeWarning)
        if case.kind == "selftest":
            outcome = _probe_selftest(case)
        elif case.kind == "snapshot":
            outcome = _probe_snapshot(case)
        elif case.kind == "config":
            outcome = _probe_config(case)
        else:
            with tempfile.TemporaryDirectory(dir=workdir) as tmp:
                outcome = _probe_text(case, tmp)
    return Outcome(
        outcome.category,
        outcome.stage,
        outcome.signature,
        outcome.message,
        outcome.trace,
        time.perf_counter() - start,
    )


# --------------------------------------------------------------------------------------------
# Workers


def _vm_size() -> int:
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _on_alarm(signum: int, frame: Any) -> None:
    raise _ProbeTimeout(_where_stack())


def _worker(conn: Connection, time_limit: float, memory_limit: int) -> None:
    import resource

    # Import everything before measuring the baseline; an import that fails here fails again
    # inside the probe, where it is reported with the input.
    for module in ("scheduler", "cli", "io.k8s", "testing.invariants"):
        with contextlib.suppress(Exception):
            importlib.import_module(f"{_PACKAGE}.{module}")
    with contextlib.suppress(Exception):
        _configs()
    base = _vm_size()
    if memory_limit > 0 and base:
        limit = base + memory_limit
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    signal.signal(signal.SIGALRM, _on_alarm)
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 1000))
    conn.send("ready")
    while True:
        try:
            case = conn.recv()
        except EOFError:
            return
        if case is None:
            return
        start = time.perf_counter()
        signal.setitimer(signal.ITIMER_REAL, time_limit)
        try:
            outcome = probe(case)
        except _ProbeTimeout as exc:
            where = str(exc.args[0]) if exc.args else "?"
            outcome = Outcome(
                "hang",
                "?",
                f"hang @ {where}",
                f"more than {time_limit:g} s",
                "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-4000:],
                time.perf_counter() - start,
            )
        except MemoryError as exc:
            outcome = _failure("blowup", "?", exc)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        try:
            conn.send(outcome)
        except Exception:  # an outcome that does not pickle
            conn.send(Outcome(outcome.category, outcome.stage, outcome.signature, "unpicklable"))
        if outcome.category in ("hang", "blowup"):
            return  # the interpreter may be in a bad state: the parent starts a fresh worker


def _dumps(case: Case) -> bytes:
    """Pickle a case; deep documents need more than the default recursion limit."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 20_000))
    try:
        return pickle.dumps(case, protocol=pickle.HIGHEST_PROTOCOL)
    finally:
        sys.setrecursionlimit(limit)


class _Slot:
    def __init__(self, ctx: Any, time_limit: float, memory_limit: int) -> None:
        self.parent, child = ctx.Pipe()
        self.process = ctx.Process(
            target=_worker, args=(child, time_limit, memory_limit), daemon=True
        )
        self.process.start()
        child.close()
        self.case: Case | None = None
        self.deadline = 0.0
        self.ready = False

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.parent.send(None)
        self.process.join(1)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.parent.close()


class Runner:
    """Runs cases in worker processes, each probe under a time and an address-space limit.

    ``time_limit`` seconds per probe (the worker's own alarm first, then a hard kill after
    twice the limit plus a margin); ``memory_limit`` bytes of address space above what the
    worker holds after importing gangsched. A worker that hangs, dies or blows up is replaced.
    """

    def __init__(
        self, *, workers: int = 1, time_limit: float = 10.0, memory_limit: int = 2**30
    ) -> None:
        method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
        if method == "fork":  # import once here, so that a restarted worker starts at once
            for module in ("scheduler", "cli", "io.k8s", "testing.invariants"):
                with contextlib.suppress(Exception):
                    importlib.import_module(f"{_PACKAGE}.{module}")
            with contextlib.suppress(Exception):
                _configs()
        self._ctx = multiprocessing.get_context(method)
        self.time_limit = time_limit
        self.memory_limit = memory_limit
        self._slots = [self._start() for _ in range(max(1, workers))]

    def _start(self) -> _Slot:
        slot = _Slot(self._ctx, self.time_limit, self.memory_limit)
        try:
            if not slot.parent.poll(120):
                raise RuntimeError("fuzz worker did not start within 120 s")
            slot.parent.recv()
        except EOFError:
            raise RuntimeError(
                f"fuzz worker died on start (exit {slot.process.exitcode})"
            ) from None
        return slot

    def close(self) -> None:
        for slot in self._slots:
            slot.stop()

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run(self, cases: Iterator[Case]) -> Iterator[tuple[Case, Outcome]]:
        """Yield ``(case, outcome)`` as probes finish (not necessarily in input order)."""
        source = iter(cases)
        exhausted = False
        hard = self.time_limit * 2 + 5
        while True:
            for slot in self._slots:
                while slot.case is None and not exhausted:
                    case = next(source, None)
                    if case is None:
                        exhausted = True
                        break
                    try:
                        payload = _dumps(case)
                    except (RecursionError, pickle.PicklingError, TypeError) as exc:
                        yield case, Outcome("skipped", "send", "", f"cannot send: {exc!r}")
                        continue
                    slot.case = case
                    slot.deadline = time.monotonic() + hard
                    slot.parent.send_bytes(payload)
            busy = [s for s in self._slots if s.case is not None]
            if not busy:
                return
            timeout = max(0.0, min(s.deadline for s in busy) - time.monotonic())
            ready = wait([s.parent for s in busy], timeout=timeout)
            now = time.monotonic()
            for i, slot in enumerate(self._slots):
                if slot.case is None:
                    continue
                case = slot.case
                outcome: Outcome | None = None
                restart = False
                if slot.parent in ready:
                    try:
                        outcome = slot.parent.recv()
                    except (EOFError, OSError):
                        code = slot.process.exitcode
                        slot.process.join(5)
                        code = slot.process.exitcode
                        outcome = Outcome(
                            "blowup",
                            "?",
                            f"blowup worker died (exit {code})",
                            f"the worker process died with exit code {code}",
                        )
                        restart = True
                elif now >= slot.deadline:
                    slot.process.kill()
                    outcome = Outcome(
                        "hang", "?", "hang (killed)", f"no answer within {hard:g} s", ""
                    )
                    restart = True
                if outcome is None:
                    continue
                if outcome.category in ("hang", "blowup"):
                    restart = True
                slot.case = None
                if restart:
                    slot.stop()
                    self._slots[i] = self._start()
                yield case, outcome

    def probe(self, case: Case) -> Outcome:
        """One case, under the limits."""
        for _, outcome in self.run(iter([case])):
            return outcome
        raise RuntimeError("no outcome")


# --------------------------------------------------------------------------------------------
# Shrinking


def _smaller_docs(doc: Any) -> Iterator[Any]:
    """Documents one step smaller than ``doc``: a record list halved, a record removed, a key
    of a record removed, an element of a nested list removed."""
    if not isinstance(doc, dict):
        return
    for key in list(doc):
        value = doc[key]
        if isinstance(value, list) and len(value) > 1:
            for part in (value[: len(value) // 2], value[len(value) // 2 :]):
                yield {**doc, key: part}
    for key in list(doc):
        yield {k: v for k, v in doc.items() if k != key}
    for key in list(doc):
        value = doc[key]
        if not isinstance(value, list):
            continue
        for i in reversed(range(len(value))):
            yield {**doc, key: value[:i] + value[i + 1 :]}
        for i, record in enumerate(value):
            if not isinstance(record, dict):
                continue
            for field_name in list(record):
                if field_name == "name":
                    continue
                smaller = {k: v for k, v in record.items() if k != field_name}
                yield {**doc, key: [*value[:i], smaller, *value[i + 1 :]]}
                inner = record[field_name]
                if isinstance(inner, list) and inner:
                    for j in reversed(range(len(inner))):
                        cut = {**record, field_name: inner[:j] + inner[j + 1 :]}
                        yield {**doc, key: [*value[:i], cut, *value[i + 1 :]]}
                elif isinstance(inner, dict) and len(inner) > 1:
                    for sub in list(inner):
                        cut = {**record, field_name: {k: v for k, v in inner.items() if k != sub}}
                        yield {**doc, key: [*value[:i], cut, *value[i + 1 :]]}


def shrink(case: Case, signature: str, runner: Runner, *, budget: int = 300) -> Case:
    """A smaller case that still fails with ``signature`` (greedy, at most ``budget`` probes).
    Text cases are returned as they are."""
    if case.kind not in ("snapshot", "config"):
        return case
    best = case
    spent = 0
    progress = True
    while progress and spent < budget:
        progress = False
        fields = ("config", "doc") if case.kind == "config" else ("doc",)
        for name in fields:
            for smaller in _smaller_docs(getattr(best, name)):
                spent += 1
                candidate = Case(**{**best.__dict__, name: smaller})
                if runner.probe(candidate).signature == signature:
                    best = candidate
                    progress = True
                    break
                if spent >= budget:
                    break
            if progress or spent >= budget:
                break
    return best


# --------------------------------------------------------------------------------------------
# Summary and the command line


@dataclass
class Summary:
    """Counts per category, and per failure signature its count and first example."""

    inputs: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    signatures: dict[str, list[Any]] = field(default_factory=dict)
    seconds: float = 0.0
    written: list[str] = field(default_factory=list)

    def add(self, case: Case, outcome: Outcome, out: Path | None, keep: int = 3) -> None:
        self.inputs += 1
        self.counts[outcome.category] = self.counts.get(outcome.category, 0) + 1
        if outcome.category not in FAILURES:
            return
        entry = self.signatures.setdefault(outcome.signature, [0, case, outcome])
        entry[0] += 1
        if out is not None and entry[0] <= keep:
            out.mkdir(parents=True, exist_ok=True)
            slug = re.sub(r"[^A-Za-z0-9]+", "-", outcome.signature)[:70].strip("-")
            path = out / f"{slug}-{case.seed}-{case.index}.json"
            record = {
                "case": case.to_json(),
                "outcome": {
                    "category": outcome.category,
                    "stage": outcome.stage,
                    "signature": outcome.signature,
                    "message": outcome.message,
                    "trace": outcome.trace,
                    "seconds": outcome.seconds,
                },
            }
            try:
                text = json.dumps(record, indent=1, default=repr)
            except (RecursionError, ValueError):
                text = json.dumps({"unserialisable": repr(record)[:100_000]})
            path.write_text(text, encoding="utf-8")
            self.written.append(str(path))

    @property
    def failures(self) -> int:
        return sum(self.counts.get(k, 0) for k in FAILURES)

    def table(self) -> str:
        rows = [
            ("inputs", self.inputs),
            ("accepted", self.counts.get("accepted", 0)),
            ("rejected-typed", self.counts.get("rejected", 0)),
            ("untyped escapes", self.counts.get("escape", 0)),
            ("hangs", self.counts.get("hang", 0)),
            ("blow-ups", self.counts.get("blowup", 0)),
            ("invariant violations", self.counts.get("violation", 0)),
            ("nondeterminism", self.counts.get("nondeterminism", 0)),
            ("late rejections", self.counts.get("late-reject", 0)),
            ("not sent (harness)", self.counts.get("skipped", 0)),
            ("seconds", f"{self.seconds:.1f}"),
            ("inputs/s", f"{self.inputs / self.seconds:.1f}" if self.seconds else "-"),
        ]
        width = max(len(r[0]) for r in rows)
        lines = [f"{name:<{width}}  {value:>10}" for name, value in rows]
        if self.signatures:
            lines.append("")
            lines.append("failures by signature:")
            for sig, (count, case, outcome) in sorted(
                self.signatures.items(), key=lambda kv: -kv[1][0]
            ):
                lines.append(f"{count:>7}  {sig}")
                lines.append(f"         e.g. #{case.index} {','.join(case.attacks)[:100]}")
                lines.append(
                    f"         {outcome.message.splitlines()[0][:150] if outcome.message else ''}"
                )
        return "\n".join(lines)

    def describe(self) -> str:
        """A failure report for an assertion message."""
        return self.table()


def run(
    *,
    inputs: int,
    seed: int = 0,
    out: str | Path | None = None,
    workers: int = 1,
    time_limit: float = 10.0,
    memory_limit: int = 2**30,
    cheap: bool = False,
    cases: Sequence[Case] | None = None,
    progress: Callable[[Summary], None] | None = None,
) -> Summary:
    """Generate ``inputs`` cases from ``seed`` (or run the given ``cases``) under the limits."""
    summary = Summary()
    out_dir = Path(out) if out is not None else None
    start = time.perf_counter()
    source = iter(cases) if cases is not None else seeded_cases(seed, inputs, cheap=cheap)
    with Runner(workers=workers, time_limit=time_limit, memory_limit=memory_limit) as runner:
        for case, outcome in runner.run(source):
            summary.add(case, outcome, out_dir)
            summary.seconds = time.perf_counter() - start
            if progress is not None and summary.inputs % 1000 == 0:
                progress(summary)
    summary.seconds = time.perf_counter() - start
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gangsched.testing.hostile",
        description="Relational and boundary fuzzing of snapshots, configurations and files.",
    )
    parser.add_argument("--inputs", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="directory for failing inputs (JSON)")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--time-limit", type=float, default=10.0, help="seconds per input")
    parser.add_argument("--memory-limit", type=int, default=1024, help="MiB per input")
    parser.add_argument("--cheap", action="store_true", help="no attacks that build big inputs")
    parser.add_argument("--replay", default=None, metavar="FILE", help="run one saved input")
    parser.add_argument(
        "--shrink", action="store_true", help="shrink the first input of each signature"
    )
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    if args.replay is not None:
        record = json.loads(Path(args.replay).read_text(encoding="utf-8"))
        case = Case.from_json(record.get("case", record))
        with Runner(time_limit=args.time_limit, memory_limit=args.memory_limit << 20) as r:
            outcome = r.probe(case)
        print(f"{outcome.category} {outcome.stage} {outcome.signature}")
        print(outcome.message)
        print(outcome.trace)
        return 1 if outcome.category in FAILURES else 0

    def progress(s: Summary) -> None:
        if not args.quiet:
            rate = s.inputs / s.seconds if s.seconds else 0.0
            print(f"... {s.inputs} inputs, {s.failures} failures, {rate:.1f}/s", file=sys.stderr)

    summary = run(
        inputs=args.inputs,
        seed=args.seed,
        out=args.out,
        workers=args.workers,
        time_limit=args.time_limit,
        memory_limit=args.memory_limit << 20,
        cheap=args.cheap,
        progress=progress,
    )
    print(summary.table())
    if args.shrink and summary.signatures:
        _shrink_all(summary, args)
    return 1 if summary.failures else 0


def _shrink_all(summary: Summary, args: argparse.Namespace) -> None:
    print("\nminimal inputs:")
    limit = min(args.time_limit, 5.0)
    with Runner(time_limit=limit, memory_limit=args.memory_limit << 20) as runner:
        for sig, (_, case, outcome) in sorted(summary.signatures.items()):
            if outcome.category == "hang" or case.kind == "text":
                small = case
            else:
                small = shrink(case, sig, runner)
            shown = small.config if small.kind == "config" else small.doc
            text = json.dumps(shown, default=repr) if small.kind != "text" else repr(small.data)
            print(f"- {sig}\n  [{small.kind} {small.target}] {text[:700]}")
            if args.out is not None:
                slug = re.sub(r"[^A-Za-z0-9]+", "-", sig)[:70].strip("-")
                path = Path(args.out) / f"{slug}-min.json"
                record = {"case": small.to_json(), "signature": sig}
                with contextlib.suppress(RecursionError, ValueError):
                    path.write_text(json.dumps(record, indent=1, default=repr), encoding="utf-8")


if __name__ == "__main__":
    raise SystemExit(main())
