"""Node affinity at scale: one full cycle at 5,000 nodes (20,000 pending tasks) where 10 % of
the jobs carry node affinity, against the same cycle without it.

The cluster is ``common.cluster_dict``'s with a ``zone`` label per rack (four zones) and a
``tier`` label per node (0..9). Every tenth job asks for ``zone In [two zones]`` and
``tier Gt 2`` (required) and prefers ``zone In [one zone]`` (preferred, weight 50) and a
node-name list (``matchFields``, weight 10); the other jobs are unchanged. The target is a
cycle within twice the cycle without affinity (``benchmarks/affinity_report.py`` prints the
ratio).
"""

from __future__ import annotations

import copy
from typing import Any

from gangsched import Snapshot, schedule

from .common import cluster_dict

ZONES = ("zone-a", "zone-b", "zone-c", "zone-d")


def affinity_cluster_dict(nodes: int, pending: int, share: float = 0.1) -> dict[str, Any]:
    """``cluster_dict(nodes, pending)`` with zone and tier labels, and node affinity on every
    ``round(1 / share)``-th job's tasks (``share = 0``: labels only)."""
    data = copy.deepcopy(cluster_dict(nodes, pending))
    for i, node in enumerate(data["nodes"]):
        rack = int(node["labels"]["rack"].rsplit("-", 1)[1])
        node["labels"]["zone"] = ZONES[rack % len(ZONES)]
        node["labels"]["tier"] = str(i % 10)
    if share <= 0:
        return data
    every = max(1, round(1 / share))
    pending_jobs = [j["name"] for j in data["jobs"] if j["phase"] != "Running"]
    chosen = {name: k for k, name in enumerate(pending_jobs) if k % every == 0}
    names = [n["name"] for n in data["nodes"]]
    for t in data["tasks"]:
        k = chosen.get(t["job"])
        if k is None or t.get("node") is not None:
            continue
        zones = [ZONES[k % 4], ZONES[(k + 1) % 4]]
        t["node_affinity"] = {
            "required": [
                {
                    "match_expressions": [
                        {"key": "zone", "operator": "In", "values": zones},
                        {"key": "tier", "operator": "Gt", "values": ["2"]},
                    ]
                }
            ],
            "preferred": [
                {
                    "weight": 50,
                    "preference": {
                        "match_expressions": [
                            {"key": "zone", "operator": "In", "values": zones[:1]}
                        ]
                    },
                },
                {
                    "weight": 10,
                    "preference": {
                        "match_fields": [
                            {
                                "key": "metadata.name",
                                "operator": "In",
                                "values": [names[k % len(names)]],
                            }
                        ]
                    },
                },
            ],
        }
    return data


class AffinityCycle:
    """One full cycle with and without node affinity on 10 % of the jobs."""

    params = ([0.0, 0.1],)
    param_names = ("share",)
    timeout = 900

    def setup(self, share: float) -> None:
        self.snap = Snapshot.from_dict(affinity_cluster_dict(5000, 20_000, share))

    def time_cycle(self, share: float) -> None:
        schedule(self.snap)

    def track_placed(self, share: float) -> int:
        out = schedule(self.snap)
        return len(out.binds) + len(out.pipelined)

    track_placed.unit = "tasks"  # type: ignore[attr-defined]
