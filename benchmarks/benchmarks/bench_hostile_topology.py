"""Cost guards for hostile topologies: huge tier numbers, a wide hypernode, a deep tree.

* ``TierNumbers`` — a 300-byte snapshot: two 2-node racks (tier 1) under one spine whose tier
  number is the parameter, and a hard 3-task gang allowed up to that tier. Cost once grew with
  the tier *number* (tier 2,000: 17 s; 5,000: hang; 10**8: MemoryError); it follows the number
  of distinct tiers now, so every size costs the same (a few milliseconds).
* ``HypernodeListsNodes`` — ``n`` nodes listed directly by one tier-2 hypernode: snapshot
  validation checked "mixes nodes and hypernodes" once per member (~n²: 4,000 nodes 0.4 s);
  it is linear now. Snapshot building and topology building are timed separately, and a whole
  cycle with a hard-topology gang.
* ``DeepHypernodeChain`` — a chain of ``n`` hypernodes of distinct tiers over 64 nodes (up to
  ``Limits.max_tiers``): topology building and a greedy placement, iterative at every depth.

Inputs are generated here; nothing is read from disk.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gangsched import Snapshot, schedule
from gangsched.model import HyperNode, Node, TopologyMode
from gangsched.model.topology import build_topology
from gangsched.placement import GreedyPlacer
from gangsched.placement.problem import GangRequest, PlacementProblem


def _tier_snapshot(top: int) -> dict[str, Any]:
    nodes = [{"name": f"r{r}n{i}", "allocatable": {"cpu": 4}} for r in range(2) for i in range(2)]
    return {
        "nodes": nodes,
        "hypernodes": [
            {"name": "r0", "tier": 1, "members": ["r0n0", "r0n1"]},
            {"name": "r1", "tier": 1, "members": ["r1n0", "r1n1"]},
            {"name": "sp", "tier": top, "members": ["r0", "r1"]},
        ],
        "queues": [{"name": "q"}],
        "jobs": [
            {
                "name": "j",
                "queue": "q",
                "min_available": 3,
                "network_topology": {"mode": "hard", "highest_tier_allowed": top},
            }
        ],
        "tasks": [{"name": f"t{i}", "job": "j", "request": {"cpu": 3}} for i in range(3)],
    }


class TierNumbers:
    params = ([2, 2_000, 5_000, 10**8, 2**53],)
    param_names = ("tier",)
    timeout = 120

    def setup(self, tier: int) -> None:
        self.data = _tier_snapshot(tier)
        self.snapshot = Snapshot.from_dict(self.data)

    def time_topology(self, tier: int) -> None:
        build_topology(self.snapshot)

    def time_schedule(self, tier: int) -> None:
        schedule(Snapshot.from_dict(self.data))

    def peakmem_schedule(self, tier: int) -> None:
        schedule(Snapshot.from_dict(self.data))


def _flat(n: int) -> dict[str, Any]:
    names = [f"n{i:06d}" for i in range(n)]
    return {
        "nodes": [{"name": name, "allocatable": {"cpu": 4, "pods": 110}} for name in names],
        "hypernodes": [{"name": "flat", "tier": 2, "members": names}],
        "queues": [{"name": "q"}],
        "jobs": [
            {
                "name": "j",
                "queue": "q",
                "min_available": 8,
                "network_topology": {"mode": "hard", "highest_tier_allowed": 2},
            }
        ],
        "tasks": [{"name": f"t{i}", "job": "j", "request": {"cpu": 3}} for i in range(8)],
    }


class HypernodeListsNodes:
    params = ([1_000, 2_000, 4_000, 16_000],)
    param_names = ("nodes",)
    timeout = 300

    def setup(self, nodes: int) -> None:
        self.data = _flat(nodes)
        self.snapshot = Snapshot.from_dict(self.data)

    def time_snapshot(self, nodes: int) -> None:
        Snapshot.from_dict(self.data)

    def time_topology(self, nodes: int) -> None:
        build_topology(self.snapshot)

    def time_schedule(self, nodes: int) -> None:
        schedule(self.snapshot)


class DeepHypernodeChain:
    params = ([4, 16, 64],)
    param_names = ("depth",)
    timeout = 120

    def setup(self, depth: int) -> None:
        nodes = [Node(name=f"n{i}", allocatable={"cpu": 4}) for i in range(64)]
        hns = [HyperNode(name=f"r{r}", tier=1, members=[f"n{r * 8 + i}" for i in range(8)])
               for r in range(8)]  # fmt: skip
        hns.append(HyperNode(name="h2", tier=2, members=[f"r{r}" for r in range(8)]))
        for t in range(3, depth + 1):
            hns.append(HyperNode(name=f"h{t}", tier=t * 1000, members=[hns[-1].name]))
        self.snapshot = Snapshot(nodes=nodes, hypernodes=hns)
        topo = build_topology(self.snapshot)
        gang = GangRequest(
            name="g",
            request=np.array([[3000]]),
            counts=np.array([20]),
            mask=np.ones((1, 64), dtype=np.bool_),
            mode=TopologyMode.SOFT,
        )
        self.problem = PlacementProblem(
            free=np.full((64, 1), 4000, dtype=np.int64),
            gpu_free=np.zeros((64, 0), dtype=np.int64),
            gpu_capacity=np.zeros(64, dtype=np.int64),
            gpu_sharing=np.zeros(64, dtype=np.bool_),
            topology=topo,
            gangs=(gang,),
        )

    def time_topology(self, depth: int) -> None:
        build_topology(self.snapshot)

    def time_greedy(self, depth: int) -> None:
        GreedyPlacer().place(self.problem)
