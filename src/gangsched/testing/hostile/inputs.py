"""Hostile configurations and files, and the generation of whole cases (seeded or drawn by
hypothesis)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from gangsched.testing.hostile.case import Case, Chooser, DrawChooser, RandomChooser, _number, _pick
from gangsched.testing.hostile.snapshots import _base_snapshot, snapshot_doc

if TYPE_CHECKING:
    from hypothesis import strategies as st

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
