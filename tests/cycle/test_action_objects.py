"""A configured action object keeps its configuration and nothing else: what one run works out
lives in the cycle (the session, its messages and caches), so the same objects run on one
session after another decide exactly as fresh objects do, and are unchanged by running."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

import gangsched as gs
from _preemption_helpers import GPU, TIERS, job, node, pending, running, snap
from gangsched.actions._base import ConfiguredAction
from gangsched.config import Config
from gangsched.framework.registry import Action
from gangsched.scheduler import default_registry, make_actions, open_session
from gangsched.session.close import close_session
from gangsched.testing.strategies import snapshots


def _config(*actions: str) -> Config:
    return Config.from_dict(
        {
            "actions": list(actions),
            "tiers": TIERS,
            "configurations": [
                {"name": a, "arguments": {"allowWholeBundle": True}}
                for a in ("preempt", "reclaim")
                if a in actions
            ],
        }
    )


#: Every built-in action, some twice (a repeat shares its object).
CONFIGS = (
    _config("enqueue", "allocate", "preempt", "reclaim", "consolidate", "allocate", "backfill"),
    _config("enqueue", "allocate", "gangpreempt", "gangreclaim", "backfill", "consolidate"),
)
QUEUES = [{"name": "default"}, {"name": "a"}, {"name": "b"}]


def _scenarios() -> list[gs.Snapshot]:
    """A consolidation, a preemption, a reclaim and carried reservations, on small clusters."""
    fragmented = snap(
        [node("n0", gpus=8), node("n1", gpus=8)],
        [job("a", 1), job("b", 1, creation=1), job("big", 1, phase="Inqueue")],
        running("a", [("n0", [0, 1, 2, 3])], gpus=4)
        + running("b", [("n1", [0, 1, 2, 3])], gpus=4)
        + pending("big", 1, gpus=8),
    )
    preemption = snap(
        [node("n0"), node("n1")],
        [
            job("same", 4, priority=5),
            job("low", 4, priority=1),
            job("high", 4, priority=10, phase="Inqueue"),
        ],
        running("same", [("n0", [i]) for i in range(4)])
        + running("low", [("n1", [i]) for i in range(4)])
        + pending("high", 4),
    )
    reclaim = snap(
        [node("n0"), node("n1")],
        [
            job("b1", 4, queue="b", priority=5),
            job("b2", 4, queue="b", priority=5, creation=1),
            job("a1", 4, queue="a", priority=1, phase="Inqueue"),
        ],
        running("b1", [("n0", [i]) for i in range(4)])
        + running("b2", [("n1", [i]) for i in range(4)])
        + pending("a1", 4),
        queues=QUEUES,
    )
    carried = snap(
        [node("n0"), node("n1")],
        [job("r", 2, phase="Inqueue"), job("late", 2, phase="Inqueue"), job("old", 1)],
        [
            {
                "name": f"r-{i}",
                "job": "r",
                "request": {"cpu": 1, GPU: 1},
                "phase": "Pipelined",
                "node": "n0",
                "gpu_indices": [i],
            }
            for i in range(2)
        ]
        + running("old", [("n0", [2, 3])], gpus=2, phase="Releasing")
        + pending("late", 2, gpus=2),
    )
    return [fragmented, preemption, reclaim, carried]


def _attributes(actions: list[Action]) -> list[dict[str, Any]]:
    return [dict(vars(a)) for a in actions]


def _run(
    actions: list[Action], s: gs.Snapshot, cfg: Config, registry: gs.Registry
) -> dict[str, Any]:
    ssn = open_session(s, cfg, registry=registry)
    for action in actions:
        action.execute(ssn)
    out: dict[str, Any] = close_session(ssn).to_dict()
    return out


def _check_reuse(
    cfg: Config, scenarios: list[gs.Snapshot], registry: gs.Registry | None = None
) -> None:
    registry = registry or default_registry()
    fresh = [gs.schedule(s, cfg, registry=registry).to_dict() for s in scenarios]
    actions = make_actions(cfg, registry)
    before = _attributes(actions)
    order = list(range(len(scenarios)))
    for i in order + order[::-1]:
        assert _run(actions, scenarios[i], cfg, registry) == fresh[i], (cfg.actions, i)
        assert _attributes(actions) == before


def test_the_scenarios_move_evict_reclaim_and_bind_reservations() -> None:
    """The fixed scenarios exercise every action that keeps work between its steps."""
    decided = [gs.schedule(s, CONFIGS[0]) for s in _scenarios()]
    fragmented, preemption, reclaim, carried = decided
    assert any(e.reason.startswith("consolidation") for e in fragmented.evictions)
    assert {e.preemptor for e in preemption.evictions} == {"high"}
    assert {e.preemptor for e in reclaim.evictions} == {"a1"}
    assert {b.task for b in carried.binds} >= {"r-0", "r-1"}


def test_reused_action_objects_decide_as_fresh_ones() -> None:
    for cfg in CONFIGS:
        _check_reuse(cfg, _scenarios())


class _Remembering(ConfiguredAction):
    """An action that keeps a count of its runs on itself (what the check must refuse)."""

    name = "remembering"

    def __init__(self, arguments: Any) -> None:
        super().__init__(arguments)
        self.runs = 0

    def execute(self, ssn: Any) -> None:
        self.runs += 1


def test_the_check_sees_state_kept_on_an_action_object() -> None:
    reg = default_registry()
    reg.register_action("remembering", _Remembering)
    cfg = Config.from_dict(
        {"actions": ["allocate", "remembering"], "tiers": TIERS}, actions=reg.actions
    )
    with pytest.raises(AssertionError):
        _check_reuse(cfg, _scenarios()[:1], reg)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    first=snapshots(max_nodes=4, max_jobs=4, max_tasks_per_job=4),
    second=snapshots(max_nodes=4, max_jobs=4, max_tasks_per_job=4),
)
def test_reused_action_objects_decide_as_fresh_ones_on_generated_snapshots(
    first: gs.Snapshot, second: gs.Snapshot
) -> None:
    for cfg in CONFIGS:
        _check_reuse(cfg, [first, second])
