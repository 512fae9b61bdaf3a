"""Cost guards for the manifest loader on hostile input: tiny documents that once cost a lot.

* ``RegexMatch`` — a HyperNode ``regexMatch`` of ``^(a+)+$`` (catastrophic backtracking for a
  backtracking engine: time doubled per character, 5.9 s at 29 characters) against one node
  whose name is ``a`` × (n − 1) + ``b``. With RE2 the time is flat in n.
* ``RegexManyNodes`` — the same pattern against n nodes with 60-character names: linear in n.
* ``HugeReplicas`` — a ~200-byte Volcano Job asking for 10**9 replicas: refused before any
  replica is built (time and peak memory flat; it once grew past 2.8 GB).
* ``DeepNesting`` — ``[`` × n: refused at the nesting bound, whatever n (once a
  RecursionError).

Inputs are generated here; nothing is read from disk.
"""

from __future__ import annotations

from typing import Any

from gangsched.errors import GangschedError
from gangsched.io.k8s import load_objects, load_text

PATTERN = "^(a+)+$"


def _node(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}},
    }


def _hypernode(pattern: str) -> dict[str, Any]:
    return {
        "apiVersion": "topology.volcano.sh/v1alpha1",
        "kind": "HyperNode",
        "metadata": {"name": "s0"},
        "spec": {
            "tier": 1,
            "members": [{"type": "Node", "selector": {"regexMatch": {"pattern": pattern}}}],
        },
    }


def _refused(fn: Any, *args: Any, **kwargs: Any) -> str:
    try:
        fn(*args, **kwargs)
    except GangschedError as exc:
        return type(exc).__name__
    raise AssertionError("the hostile input was accepted")


class RegexMatch:
    params = ([25, 29, 33, 253],)
    param_names = ("name_length",)

    def setup(self, n: int) -> None:
        self.objs = [_node("a" * (n - 1) + "b"), _hypernode(PATTERN)]

    def time_load(self, n: int) -> None:
        load_objects(self.objs)


class RegexManyNodes:
    params = ([1_000, 4_000],)
    param_names = ("nodes",)

    def setup(self, n: int) -> None:
        self.objs = [_node("a" * 50 + f"-{i:08d}") for i in range(n)] + [_hypernode(PATTERN)]

    def time_load(self, n: int) -> None:
        load_objects(self.objs)


class HugeReplicas:
    params = ([10**3, 10**9],)
    param_names = ("replicas",)

    def setup(self, n: int) -> None:
        self.text = f"""apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {{name: x}}
spec:
  tasks:
  - name: w
    replicas: {n}
    template: {{spec: {{containers: [{{name: c, resources: {{requests: {{cpu: 1}}}}}}]}}}}
"""

    def _load(self, n: int) -> None:
        if n > 10**5:
            _refused(load_text, self.text)
        else:
            load_text(self.text)

    def time_load(self, n: int) -> None:
        self._load(n)

    def peakmem_load(self, n: int) -> None:
        self._load(n)


class DeepNesting:
    params = ([1_000, 100_000],)
    param_names = ("brackets",)

    def setup(self, n: int) -> None:
        self.text = "[" * n

    def time_refused(self, n: int) -> None:
        _refused(load_text, self.text)
