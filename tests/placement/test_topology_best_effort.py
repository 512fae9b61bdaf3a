"""A hard-topology gang's best-effort members obey its topology too: while the gang holds no
node, a best-effort task goes only to a node inside some allowed domain (a node no hypernode of
the allowed tier lists is in none), under every configuration that runs ``backfill``."""

from __future__ import annotations

from typing import Any

import pytest

import gangsched as gs
from gangsched.testing.hostile.streams import stream_configs
from gangsched.testing.invariants import check_cycle


def _cluster(best_effort: int, pending: int = 0) -> gs.Snapshot:
    tasks: list[dict[str, Any]] = [{"name": f"g-{i}", "job": "g"} for i in range(best_effort)]
    tasks += [
        {"name": f"g-p{i}", "job": "g", "request": {"cpu": 64}} for i in range(pending)
    ]  # never fits: the gang holds nothing
    return gs.Snapshot.from_dict(
        {
            "nodes": [
                {"name": n, "allocatable": {"cpu": 8, "pods": 10}} for n in ("n0", "n1", "n2")
            ],
            "hypernodes": [
                {"name": "h1a", "tier": 1, "members": ["n2"]},
                {"name": "h1b", "tier": 1, "members": ["n1"]},
                {"name": "h2", "tier": 2, "members": ["h1a", "h1b"]},
            ],
            "queues": [{"name": "default"}],
            "jobs": [
                {
                    "name": "g",
                    "min_available": best_effort,
                    "phase": "Inqueue",
                    "network_topology": {"mode": "hard", "highest_tier_allowed": 1},
                }
            ],
            "tasks": tasks,
        }
    )


@pytest.mark.parametrize("config", ["default", "capacity", "preempt", "consolidate"])
@pytest.mark.parametrize(("best_effort", "pending"), [(1, 0), (2, 0), (1, 1)])
def test_best_effort_members_stay_inside_one_allowed_domain(
    config: str, best_effort: int, pending: int
) -> None:
    snap = _cluster(best_effort, pending)
    cfg = stream_configs()[config]
    decisions = gs.schedule(snap, cfg)
    check_cycle(snap, decisions, cfg)
    nodes = {b.node for b in decisions.binds}
    assert len(decisions.binds) == best_effort  # placed, not starved
    assert nodes <= {"n1"} or nodes <= {"n2"}, nodes  # n0 is in no tier-1 domain
