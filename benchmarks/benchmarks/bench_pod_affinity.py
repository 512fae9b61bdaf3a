"""Pod affinity, anti-affinity and topology spread at scale: one full cycle at 5,000 nodes
(20,000 pending tasks) where 10 % of the jobs carry pod constraints, against the same cycle
without them.

The cluster is ``bench_affinity.affinity_cluster_dict``'s (racks, four zones) with every
pod labelled ``app: <its job>``. Every tenth pending job carries, in turn: required
anti-affinity to its own pods per node (``kubernetes.io/hostname``: one replica per node);
required affinity to its own pods per rack (the gang in one rack) with a preferred
anti-affinity (weight 50) to the previous constrained job's pods per zone; a
``DoNotSchedule`` spread of its pods over the zones (``maxSkew`` 1) with a ``ScheduleAnyway``
spread over the racks. The target is a cycle within twice the cycle without pod constraints
(``benchmarks/affinity_report.py`` prints the ratio).
"""

from __future__ import annotations

from typing import Any

from gangsched import Snapshot, schedule

from .bench_affinity import affinity_cluster_dict

HOSTNAME = "kubernetes.io/hostname"


def _own(job: str, key: str) -> dict[str, Any]:
    return {"topology_key": key, "label_selector": {"match_labels": {"app": job}}}


def pod_affinity_cluster_dict(nodes: int, pending: int, share: float = 0.1) -> dict[str, Any]:
    """``affinity_cluster_dict(nodes, pending, 0)`` with ``app`` labels on every pod and pod
    constraints on every ``round(1 / share)``-th pending job's tasks (``share = 0``: labels
    only)."""
    data = affinity_cluster_dict(nodes, pending, 0.0)
    for t in data["tasks"]:
        t["labels"] = {"app": t["job"]}
    if share <= 0:
        return data
    every = max(1, round(1 / share))
    pending_jobs = [j["name"] for j in data["jobs"] if j["phase"] != "Running"]
    chosen = [name for k, name in enumerate(pending_jobs) if k % every == 0]
    constraints: dict[str, dict[str, Any]] = {}
    for k, job in enumerate(chosen):
        kind = k % 3
        if kind == 0:
            constraints[job] = {"pod_anti_affinity": {"required": [_own(job, HOSTNAME)]}}
        elif kind == 1:
            previous = chosen[k - 1]
            constraints[job] = {
                "pod_affinity": {"required": [_own(job, "rack")]},
                "pod_anti_affinity": {
                    "preferred": [{"weight": 50, "term": _own(previous, "zone")}]
                },
            }
        else:
            selector = {"match_labels": {"app": job}}
            constraints[job] = {
                "topology_spread": [
                    {"max_skew": 1, "topology_key": "zone", "label_selector": selector},
                    {
                        "max_skew": 2,
                        "topology_key": "rack",
                        "when_unsatisfiable": "ScheduleAnyway",
                        "label_selector": selector,
                    },
                ]
            }
    for t in data["tasks"]:
        extra = constraints.get(t["job"])
        if extra is not None and t.get("node") is None:
            t.update(extra)
    return data


class PodAffinityCycle:
    """One full cycle with and without pod constraints on 10 % of the jobs."""

    params = ([0.0, 0.1],)
    param_names = ("share",)
    timeout = 900

    def setup(self, share: float) -> None:
        self.snap = Snapshot.from_dict(pod_affinity_cluster_dict(5000, 20_000, share))

    def time_cycle(self, share: float) -> None:
        schedule(self.snap)

    def track_placed(self, share: float) -> int:
        out = schedule(self.snap)
        return len(out.binds) + len(out.pipelined)

    track_placed.unit = "tasks"  # type: ignore[attr-defined]
