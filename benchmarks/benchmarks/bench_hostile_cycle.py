"""Cost guards for one scheduling cycle on hostile configurations: a long action list.

* ``LongActionList`` — a configuration naming ``allocate`` n times (then ``enqueue`` and a
  last ``allocate``) on a one-node, one-task cluster, with ``Limits.max_actions`` raised to
  allow it. Every ``allocate`` once scanned the whole action list for ``enqueue``, so the cycle
  grew as n² (100,000 entries: 112 s); it is linear now (about 0.15 s). Parsing the list (plain
  data and Volcano YAML) is timed too.
* ``LongActionListRefused`` — the same list under the default limits: refused at parse time
  (``ConfigError`` naming ``Limits.max_actions``), in time linear in the text.

Inputs are generated here; nothing is read from disk.
"""

from __future__ import annotations

from typing import Any

from gangsched import Snapshot, schedule
from gangsched.config import Config
from gangsched.errors import ConfigError
from gangsched.limits import Limits

_SNAPSHOT = {
    "nodes": [{"name": "n0", "allocatable": {"cpu": 4, "memory": "8Gi", "pods": 10}}],
    "queues": [{"name": "default"}],
    "jobs": [{"name": "j", "queue": "default", "min_available": 1, "phase": "Pending"}],
    "tasks": [{"name": "t", "job": "j", "request": {"cpu": 1}}],
}
_TIERS = [
    [{"name": "priority"}, {"name": "gang"}],
    [{"name": "predicates"}, {"name": "proportion"}, {"name": "nodeorder"}],
]


def _data(n: int) -> dict[str, Any]:
    return {"actions": ["allocate"] * n + ["enqueue", "allocate"], "tiers": _TIERS}


class LongActionList:
    params = ([1_000, 10_000, 100_000],)
    param_names = ("entries",)

    def setup(self, n: int) -> None:
        self.limits = Limits(max_actions=n + 2)
        self.data = _data(n)
        self.config = Config.from_dict(self.data, limits=self.limits)
        self.yaml = self.config.to_volcano_yaml()
        self.snapshot = Snapshot.from_dict(_SNAPSHOT)

    def time_schedule(self, n: int) -> None:
        schedule(self.snapshot, self.config)

    def time_parse(self, n: int) -> None:
        Config.from_dict(self.data, limits=self.limits)

    def time_parse_yaml(self, n: int) -> None:
        Config.from_volcano_yaml(self.yaml, limits=self.limits)

    def track_binds(self, n: int) -> int:
        return len(schedule(self.snapshot, self.config).binds)


class LongActionListRefused:
    params = ([10_000, 100_000],)
    param_names = ("entries",)

    def setup(self, n: int) -> None:
        self.data = _data(n)

    def time_refused(self, n: int) -> None:
        try:
            Config.from_dict(self.data)
        except ConfigError:
            return
        raise AssertionError("the action list was accepted past Limits.max_actions")
