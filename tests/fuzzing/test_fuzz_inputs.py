"""Malformed input escapes only as a ``GangschedError``.

Valid snapshot dicts, configuration dicts and ``volcano-scheduler.conf`` texts are mutated —
keys deleted or added, values replaced with wrong types, huge or tiny numbers, unicode and
control characters, NaN and infinities, names duplicated, references pointed at the wrong or
the same object (queue parent cycles, hypernodes containing their parents), containers made to
contain themselves, YAML anchors, aliases, tags and deep nesting — and fed to
``Snapshot.from_dict``, ``Config.from_dict`` and ``Config.from_volcano_yaml``. Each call must
either return or raise a :class:`~gangsched.errors.GangschedError` subclass with a message;
anything else escaping is a bug.

Budget: ``GANGSCHED_FUZZ_INPUTS`` mutated inputs per target (default 1,500 per dict target and
500 per YAML target, 4,000 in all, a few seconds); with ``GANGSCHED_SOAK=1`` the default is
30,000 per target (120,000 in all).
A hypothesis test adds structured junk with shrinking on top.
"""

from __future__ import annotations

import copy
import math
import os
import random
import time
import traceback
from collections.abc import Callable
from decimal import Decimal
from fractions import Fraction
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangsched.config import Config
from gangsched.errors import GangschedError
from gangsched.model.snapshot import Snapshot
from gangsched.testing.strategies import snapshots

SOAK = os.environ.get("GANGSCHED_SOAK") == "1"
PER_TARGET = int(os.environ.get("GANGSCHED_FUZZ_INPUTS", "30000" if SOAK else "1500"))
#: The YAML parser is pure Python (about 4 ms an input): a third of the budget by default.
PER_YAML = int(os.environ.get("GANGSCHED_FUZZ_INPUTS", "30000" if SOAK else "500"))

# --------------------------------------------------------------------------------------------
# Junk values


_TEXT_POOL = (
    "",
    " ",
    "\x00",
    "\t\n",
    "名前",
    "ノード-1",
    "🙂",
    "e\u0301",
    "\u202eevil",
    "\ufeffcpu",
    "\ud800",
    "Ω" * 300,
    "x" * 100_000,
    "default",
    "node-0",
    "job-0",
    "nvidia.com/gpu",
    "cpu",
    "pods",
    "Running",
    "Pipelined",
    "hard",
    "RestartJob",
)
_QUANTITY_POOL = (
    "1",
    "-1",
    "0",
    "-0",
    "500m",
    "1.5",
    ".5",
    "5.",
    "1e3",
    "1E3",
    "1e-3",
    "1e400",
    "1e-400",
    "1e99999999999",
    "9" * 64,
    "9" * 65,
    "1Ki",
    "1ki",
    "1Ei",
    "8Ei",
    "9223372036854775807",
    "9223372036854775808",
    "1.0000000001n",
    "0x10",
    "0o17",
    "1_000",
    "١٢",
    "１２",
    "12 ",
    " 12",
    "1 Gi",
    "Gi",
    "m",
    "+1",
    "++1",
    "nan",
    "inf",
    "-inf",
    "1/2",
)


def _number(rng: random.Random) -> Any:
    kind = rng.randrange(8)
    if kind == 0:
        return rng.choice((0, 1, -1, 2, 7, 8, 1000))
    if kind == 1:
        return rng.choice((1, -1)) * 2 ** rng.randrange(0, 200)
    if kind == 2:
        return rng.choice((2**62, 2**62 + 1, 2**63 - 1, 2**63, -(2**63), 10**30, 10**400))
    if kind == 3:
        return rng.choice(
            (math.nan, math.inf, -math.inf, -0.0, 0.5, 1e308, 5e-324, 1.0, 2.0**63, 1e19)
        )
    if kind == 4:
        return rng.uniform(-1e6, 1e6)
    if kind == 5:
        return rng.choice((True, False))
    if kind == 6:
        return rng.choice((Decimal("NaN"), Decimal("1.5"), Fraction(1, 3), complex(1, 2)))
    return rng.randrange(-5, 20)


def _text(rng: random.Random) -> str:
    kind = rng.randrange(4)
    if kind == 0:
        return rng.choice(_TEXT_POOL)
    if kind == 1:
        return rng.choice(_QUANTITY_POOL)
    if kind == 2:
        alphabet = "abcxyz-_./:0123456789 \t\n\\'\"{}[]&*!%@#|>名🙂\u0301\x00"
        return "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 12)))
    return "".join(chr(rng.randrange(0x20, 0x3000)) for _ in range(rng.randrange(1, 8)))


def _junk(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(12 if depth < 3 else 8)
    if kind < 3:
        return _number(rng)
    if kind < 6:
        return _text(rng)
    if kind == 6:
        return rng.choice((None, b"bytes", bytearray(b"x"), {1, 2}, frozenset(), object()))
    if kind == 7:
        return rng.choice(((), [], {}, ("a",), ["a"], {"": ""}))
    if kind < 10:
        return [_junk(rng, depth + 1) for _ in range(rng.randrange(0, 4))]
    return {
        rng.choice((_text(rng), _number(rng), None, ("t",))): _junk(rng, depth + 1)
        for _ in range(rng.randrange(0, 4))
    }


# --------------------------------------------------------------------------------------------
# Valid seeds


def _random_snapshot(rng: random.Random) -> dict[str, Any]:
    """A valid snapshot dict: nodes with GPUs and labels, a two-tier topology, a queue tree,
    gangs with roles and topology, some tasks running on nodes."""
    n_nodes = rng.randrange(1, 5)
    nodes = []
    for i in range(n_nodes):
        node: dict[str, Any] = {
            "name": f"node-{i}",
            "allocatable": {"cpu": rng.choice((64, "64", "64000m")), "memory": "256Gi"},
            "labels": {"zone": rng.choice(("a", "b"))},
            "taints": [{"key": "gpu", "value": "yes", "effect": "NoSchedule"}]
            if rng.random() < 0.3
            else [],
            "unschedulable": rng.random() < 0.1,
        }
        if rng.random() < 0.5:
            node["allocatable"]["pods"] = 110
        if rng.random() < 0.6:
            node["gpus"] = {"count": rng.choice((1, 4, 8)), "model": "A100", "sharing": True}
        nodes.append(node)
    hypernodes: list[dict[str, Any]] = []
    if n_nodes > 1 and rng.random() < 0.6:
        half = n_nodes // 2
        hypernodes = [
            {"name": "rack-0", "tier": 1, "members": [f"node-{i}" for i in range(half)]},
            {"name": "rack-1", "tier": 1, "members": [f"node-{i}" for i in range(half, n_nodes)]},
            {"name": "spine", "tier": 2, "members": ["rack-0", "rack-1"]},
        ]
    queues: list[dict[str, Any]] = [{"name": "default", "weight": 1}]
    for q in range(1, rng.randrange(1, 4)):
        queues.append(
            {
                "name": f"queue-{q}",
                "weight": rng.randrange(1, 5),
                "capability": {"cpu": 32, "memory": "64Gi", "nvidia.com/gpu": 8},
                "guarantee": {"cpu": 1},
                "parent": rng.choice([x["name"] for x in queues]),
                "state": rng.choice(("Open", "Closing", "Closed")),
            }
        )
    jobs = []
    tasks = []
    used_gpus: dict[str, int] = {}
    for j in range(rng.randrange(1, 4)):
        name = f"job-{j}"
        count = rng.randrange(1, 4)
        job: dict[str, Any] = {
            "name": name,
            "queue": rng.choice(queues)["name"],
            "min_available": rng.randrange(1, count + 1),
            "priority": rng.randrange(0, 3),
            "phase": rng.choice(("Pending", "Inqueue", "Running")),
            "min_task_member": {"worker": 1},
            "policies": [{"event": "PodEvicted", "action": "RestartJob"}],
        }
        if hypernodes and rng.random() < 0.5:
            job["network_topology"] = {"mode": "hard", "highest_tier_allowed": 1}
        if rng.random() < 0.3:
            job["min_resources"] = {"cpu": "1", "memory": "1Gi"}
        jobs.append(job)
        for k in range(count):
            task: dict[str, Any] = {
                "name": f"{name}-worker-{k}",
                "job": name,
                "role": "worker",
                "request": {"cpu": "500m", "memory": "1Gi"},
                "priority": job["priority"],
                "node_selector": {"zone": "a"} if rng.random() < 0.2 else {},
                "tolerations": [{"key": "gpu", "operator": "Exists"}],
            }
            node = rng.choice(nodes)
            gpus = node.get("gpus", {}).get("count", 0)
            if rng.random() < 0.5:
                task["phase"] = rng.choice(("Running", "Bound", "Releasing"))
                task["node"] = node["name"]
                if gpus > used_gpus.get(node["name"], 0):
                    task["gpu_request"] = {"count": 1, "milli": 1000}
                    task["gpu_indices"] = [used_gpus.get(node["name"], 0)]
                    used_gpus[node["name"]] = used_gpus.get(node["name"], 0) + 1
            elif rng.random() < 0.5:
                task["gpu_request"] = {"count": 1, "milli": 500, "models": ["A100"]}
            tasks.append(task)
    return {
        "nodes": nodes,
        "hypernodes": hypernodes,
        "queues": queues,
        "jobs": jobs,
        "tasks": tasks,
    }


def _random_config(rng: random.Random) -> dict[str, Any]:
    out: dict[str, Any] = {
        "actions": rng.choice(
            (["enqueue", "allocate", "backfill"], "enqueue, allocate, backfill", ["allocate"])
        ),
        "tiers": [
            [{"name": "priority"}, {"name": "gang", "enablePreemptable": False}],
            {
                "plugins": [
                    {"name": "drf", "enableJobOrder": rng.random() < 0.5},
                    {"name": "predicates"},
                    {"name": "proportion"},
                    {
                        "name": "binpack",
                        "arguments": {
                            "binpack.weight": rng.randrange(1, 10),
                            "binpack.resources": "nvidia.com/gpu",
                            "binpack.resources.nvidia.com/gpu": 3,
                        },
                    },
                    {"name": "nodeorder", "arguments": {"leastrequested.weight": 1.5}},
                ]
            },
        ],
    }
    if rng.random() < 0.5:
        out["configurations"] = [
            {"name": "allocate", "arguments": {"mode": "fast", "list": [1, 2, {"a": "b"}]}}
        ]
    return out


# --------------------------------------------------------------------------------------------
# Mutations


Slot = tuple[Any, Any]  # (container, key or index)


def _slots(obj: Any, out: list[Slot], containers: list[Any], depth: int = 0) -> None:
    if depth > 8:
        return
    if isinstance(obj, dict):
        containers.append(obj)
        for key in list(obj):
            out.append((obj, key))
            _slots(obj[key], out, containers, depth + 1)
    elif isinstance(obj, list):
        containers.append(obj)
        for i in range(len(obj)):
            out.append((obj, i))
            _slots(obj[i], out, containers, depth + 1)


def _names(doc: Any) -> list[str]:
    names: list[str] = []
    if isinstance(doc, dict):
        for part in doc.values():
            if isinstance(part, list):
                names += [r["name"] for r in part if isinstance(r, dict) and "name" in r]
    return [n for n in names if isinstance(n, str)] or ["x"]


_REFERENCE_KEYS = ("parent", "queue", "job", "node", "members", "name")


def _mutate(doc: Any, rng: random.Random) -> Any:
    doc = copy.deepcopy(doc)
    for _ in range(rng.randrange(1, 4)):
        slots: list[Slot] = []
        containers: list[Any] = []
        _slots(doc, slots, containers)
        op = rng.randrange(9)
        if not slots or op == 0:
            return _junk(rng) if rng.random() < 0.2 else doc
        container, key = rng.choice(slots)
        if op == 1:
            container[key] = _junk(rng)
        elif op == 2:
            del container[key]
        elif op == 3:
            target = rng.choice(containers)
            if isinstance(target, dict):
                target[rng.choice((_text(rng), _number(rng), "name", "extra"))] = _junk(rng)
            else:
                target.append(_junk(rng))
        elif op == 4 and isinstance(container, list):
            container.insert(rng.randrange(len(container) + 1), copy.deepcopy(container[key]))
        elif op == 5:
            # point a reference at an existing name, often the object itself: cycles, clashes
            refs = [(c, k) for c, k in slots if isinstance(c, dict) and k in _REFERENCE_KEYS]
            if refs:
                c, k = rng.choice(refs)
                name = rng.choice([*_names(doc), str(c.get("name", "x"))])
                c[k] = [name] if k == "members" else name
        elif op == 6:
            container[key] = container  # a container holding itself
        elif op == 7:
            value = container[key]
            container[key] = rng.choice(
                (
                    [value],
                    {"value": value},
                    str(value)[:50],
                    tuple(value) if isinstance(value, list) else value,
                )
            )
        else:
            container[key] = rng.choice((10 ** rng.randrange(18, 400), -(2**63), "9" * 30 + "Ei"))
    return doc


_YAML_SNIPPETS = (
    "&a ",
    "*a",
    "<<: *a\n",
    "!!python/object:os.system ",
    "!!binary aGVsbG8= ",
    "!!set {a}",
    "? [a]\n: b\n",
    ".inf",
    ".nan",
    "1e999",
    "0x1F",
    "0o17",
    "2020-01-01",
    "~",
    "null",
    "yes",
    "on",
    "%YAML 1.1\n---\n",
    "---\n",
    "...\n",
    "\x00",
    "\ufeff",
    "\t",
    "- ",
    ": ",
    "{",
    "}",
    "[",
    "]",
    "'",
    '"',
    "|\n",
    ">-\n",
    "#",
    "名前: 🙂\n",
    "[" * 3000,
    "actions: allocate\n",
    "actions: allocate\n",
)


def _mutate_text(text: str, rng: random.Random) -> str:
    for _ in range(rng.randrange(1, 4)):
        op = rng.randrange(6)
        at = rng.randrange(len(text) + 1)
        if op == 0:
            text = text[:at] + rng.choice(_YAML_SNIPPETS) + text[at:]
        elif op == 1:
            end = min(len(text), at + rng.randrange(1, 20))
            text = text[:at] + text[end:]
        elif op == 2:
            text = text[:at] + _text(rng) + text[at:]
        else:
            lines = text.split("\n")
            i = rng.randrange(len(lines))
            if op == 3:
                lines.insert(i, lines[rng.randrange(len(lines))])
            elif op == 4:
                lines[i] = rng.choice(("  ", "\t", "")) + lines[i].lstrip(" ")
            else:
                j = rng.randrange(len(lines))
                lines[i], lines[j] = lines[j], lines[i]
            text = "\n".join(lines)
    return text


# --------------------------------------------------------------------------------------------
# Driver


class Escapes:
    """Inputs that made something other than a GangschedError escape."""

    def __init__(self) -> None:
        self.count = 0
        self.inputs = 0
        self.examples: list[str] = []

    def feed(self, target: str, fn: Callable[[Any], object], value: Any) -> None:
        self.inputs += 1
        try:
            fn(value)
        except GangschedError as exc:
            assert str(exc), f"{target}: empty error message"
        except Exception:
            self.count += 1
            if len(self.examples) < 5:
                shown = repr(value)
                shown = shown if len(shown) < 600 else shown[:600] + "…"
                self.examples.append(f"{target}({shown}):\n{traceback.format_exc(limit=4)}")

    def check(self) -> None:
        assert self.count == 0, f"{self.count} escapes, e.g.:\n" + "\n".join(self.examples)


def _run(target: str, seed: int) -> Escapes:
    rng = random.Random(seed)
    escapes = Escapes()
    if target == "snapshot":
        seeds = [_random_snapshot(rng) for _ in range(40)]
        for doc in seeds:
            Snapshot.from_dict(doc)  # the seeds themselves are valid
        for _ in range(PER_TARGET):
            escapes.feed(target, Snapshot.from_dict, _mutate(rng.choice(seeds), rng))
    elif target == "config":
        seeds = [_random_config(rng) for _ in range(10)]
        for doc in seeds:
            Config.from_dict(doc)
        for _ in range(PER_TARGET):
            escapes.feed(target, Config.from_dict, _mutate(rng.choice(seeds), rng))
    elif target == "yaml-text":
        texts = [Config.from_dict(_random_config(rng)).to_volcano_yaml() for _ in range(10)]
        for text in texts:
            Config.from_volcano_yaml(text)
        for _ in range(PER_YAML):
            escapes.feed(target, Config.from_volcano_yaml, _mutate_text(rng.choice(texts), rng))
    else:  # "yaml-dump": YAML written from mutated dicts, anchors and aliases included
        seeds = [_random_config(rng) for _ in range(10)]
        fed = 0
        while fed < PER_YAML:
            doc = _mutate(rng.choice(seeds), rng)
            try:
                text = yaml.dump(doc, Dumper=yaml.SafeDumper, allow_unicode=True)
            except Exception:  # not representable as YAML (cycles through sets, NaN keys ...)
                continue
            escapes.feed(target, Config.from_volcano_yaml, text)
            fed += 1
    return escapes


def _budget_line(target: str, escapes: Escapes, seconds: float) -> str:
    return f"{target}: {escapes.inputs} inputs in {seconds:.1f}s, {escapes.count} escapes"


def test_snapshot_from_dict_raises_only_snapshot_errors() -> None:
    start = time.perf_counter()
    escapes = _run("snapshot", seed=1)
    print(_budget_line("Snapshot.from_dict", escapes, time.perf_counter() - start))
    escapes.check()
    assert escapes.inputs == PER_TARGET


def test_config_from_dict_raises_only_config_errors() -> None:
    start = time.perf_counter()
    escapes = _run("config", seed=2)
    print(_budget_line("Config.from_dict", escapes, time.perf_counter() - start))
    escapes.check()
    assert escapes.inputs == PER_TARGET


def test_volcano_yaml_text_raises_only_config_errors() -> None:
    start = time.perf_counter()
    escapes = _run("yaml-text", seed=3)
    print(_budget_line("from_volcano_yaml(text)", escapes, time.perf_counter() - start))
    escapes.check()
    assert escapes.inputs == PER_YAML


def test_volcano_yaml_dumped_from_mutated_dicts_raises_only_config_errors() -> None:
    start = time.perf_counter()
    escapes = _run("yaml-dump", seed=4)
    print(_budget_line("from_volcano_yaml(dump)", escapes, time.perf_counter() - start))
    escapes.check()
    assert escapes.inputs == PER_YAML


def test_fuzzer_reaches_past_the_first_check() -> None:
    """The mutations are not all rejected at the door: some mutated snapshots are still
    valid and the errors name many different fields, so deep validation is exercised."""
    rng = random.Random(5)
    seeds = [_random_snapshot(rng) for _ in range(20)]
    fields: set[str] = set()
    valid = 0
    for _ in range(2000):
        try:
            Snapshot.from_dict(_mutate(rng.choice(seeds), rng))
            valid += 1
        except GangschedError as exc:
            fields.add(f"{exc.kind}.{exc.field.split('[')[0].split('.')[0]}")
    assert valid > 50
    assert len(fields) > 25, sorted(fields)


def test_the_escapes_once_found_stay_fixed() -> None:
    """Inputs that once escaped as RecursionError / AttributeError."""
    loop: list[Any] = []
    loop.append(loop)
    nested = "actions: allocate\ntiers:\n- plugins:\n  - name: gang\n    arguments:\n      x: "
    bad: Callable[[], object]
    for bad in (
        lambda: Config.from_dict(
            {"actions": ["allocate"], "tiers": [[{"name": "gang", "arguments": {"x": loop}}]]}
        ),
        lambda: Config.from_volcano_yaml("actions: allocate\ntiers: " + "[" * 3000),
        lambda: Config.from_volcano_yaml(nested + "[" * 900 + "]" * 900),
        lambda: Config.from_volcano_yaml(5),  # type: ignore[arg-type]
    ):
        try:
            bad()
        except GangschedError as exc:
            assert str(exc)
        else:
            raise AssertionError("malformed input accepted")


# --------------------------------------------------------------------------------------------
# Structured junk with shrinking


def _containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner)


JUNK = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=20)
    | st.binary(max_size=4),
    _containers,
    max_leaves=8,
)


@settings(
    max_examples=2000 if SOAK else 150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(snapshot=snapshots(max_nodes=3, max_jobs=2), data=st.data())
def test_snapshot_with_one_field_of_junk(snapshot: Snapshot, data: st.DataObject) -> None:
    doc: Any = snapshot.to_dict()
    slots: list[Slot] = []
    _slots(doc, slots, [])
    container, key = data.draw(st.sampled_from(slots), label="slot")
    container[key] = data.draw(JUNK, label="junk")
    try:
        Snapshot.from_dict(doc)
    except GangschedError as exc:
        assert str(exc)
