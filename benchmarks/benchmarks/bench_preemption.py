"""The configuration people run with preemption: Volcano's default tiers with ``enqueue,
allocate, preempt, reclaim, backfill`` (read from Volcano's YAML, so ``preempt`` plays
Volcano's own walk), against the default ``enqueue, allocate, backfill`` on the same snapshot.

Two generators, 2,000 nodes each (``benchmarks/preemption_clusters.py``): the benchmark's
``cluster_dict`` (four pending tasks per node) and ``openb_preemption`` (openb machines and pod
shapes, six tenants, running gangs with a surplus, waiting gangs that outrank them or belong
to queues below their share).

* ``time_default_cycle`` / ``time_preemption_cycle`` — one whole cycle of each configuration;
  their ratio is the figure ``benchmarks/report.py --preemption`` prints;
* ``track_evictions`` — the evictions the preemption cycle decides (quality beside speed: a
  change that makes the cycle faster by evicting less shows here).
"""

from __future__ import annotations

import sys
from pathlib import Path

from gangsched.config import Config
from gangsched.decisions import Decisions
from gangsched.model.snapshot import Snapshot
from gangsched.scheduler import schedule

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import preemption_clusters

NODES = 2_000


class PreemptionCycle:
    params = ([name for name, _ in preemption_clusters.GENERATORS],)
    param_names = ("generator",)
    timeout = 600

    def setup(self, generator: str) -> None:
        build = dict(preemption_clusters.GENERATORS)[generator]
        self.snapshot = Snapshot.from_dict(build(NODES))
        self.config = Config.from_volcano_yaml(preemption_clusters.VOLCANO_PREEMPTION_YAML)

    def time_default_cycle(self, generator: str) -> None:
        schedule(self.snapshot)

    def time_preemption_cycle(self, generator: str) -> None:
        schedule(self.snapshot, self.config)

    def track_evictions(self, generator: str) -> int:
        decisions: Decisions = schedule(self.snapshot, self.config)
        return len(decisions.evictions)
