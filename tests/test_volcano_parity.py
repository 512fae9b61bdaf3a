"""Decisions that must match Volcano's on small clusters where gangsched once differed: role
minimums met by best-effort tasks, the exact deserved boundary, gang-safe victims in preempt
and reclaim (whole gangs only under gangpreempt / gangreclaim or the documented option), the
enqueue shape check of a configuration read from Volcano's YAML, and capacity's per-dimension
reclaim."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np

import gangsched as gs
from gangsched.config import Config
from gangsched.plugins._queue_exact import exact_water_fill

GI = 2**30

TIERS: list[list[dict[str, Any]]] = [
    [{"name": "priority"}, {"name": "gang"}, {"name": "conformance"}],
    [{"name": "drf"}, {"name": "predicates"}, {"name": "proportion"}, {"name": "nodeorder"}],
]


def config(*actions: str, **configurations: dict[str, object]) -> Config:
    return Config.from_dict(
        {
            "actions": list(actions),
            "tiers": TIERS,
            **({"configurations": configurations} if configurations else {}),
        }
    )


def snap(**parts: Any) -> gs.Snapshot:
    return gs.Snapshot.from_dict({"hypernodes": [], "queues": [{"name": "default"}], **parts})


# -- best-effort tasks count for their role ----------------------------------------------------


def test_role_minimum_met_by_a_pending_best_effort_task_binds_it() -> None:
    # Volcano's CheckTaskReady counts a pending task with an empty request for its role.
    s = snap(
        nodes=[{"name": "n0", "allocatable": {"cpu": 4, "memory": "8Gi", "pods": 110}}],
        jobs=[
            {
                "name": "j",
                "queue": "default",
                "min_available": 1,
                "min_task_member": {"master": 0, "worker": 1},
                "phase": "Inqueue",
            }
        ],
        tasks=[{"name": "j-w0", "job": "j", "role": "worker", "request": {}}],
    )
    d = gs.schedule(s, config("enqueue", "allocate", "backfill"))
    assert [(b.task, b.node) for b in d.binds] == [("j-w0", "n0")]
    assert d.jobs["j"].phase == "Running"


def test_best_effort_task_of_another_role_does_not_meet_a_role_minimum() -> None:
    s = snap(
        nodes=[{"name": "n0", "allocatable": {"cpu": 4, "memory": "8Gi", "pods": 110}}],
        jobs=[
            {
                "name": "j",
                "queue": "default",
                "min_available": 1,
                "min_task_member": {"worker": 1},
                "phase": "Inqueue",
            }
        ],
        tasks=[{"name": "j-m0", "job": "j", "role": "master", "request": {}}],
    )
    d = gs.schedule(s, config("enqueue", "allocate", "backfill"))
    assert d.binds == ()


# -- the deserved boundary ---------------------------------------------------------------------


def test_deserved_amounts_are_exact_for_whole_inputs() -> None:
    # 36Gi between weights 2, 5, 1, 3 asking 8, 6, 20, 16Gi: the third deserves exactly 6Gi.
    d = exact_water_fill(
        np.array([36.0 * GI]),
        np.array([2.0, 5.0, 1.0, 3.0]),
        np.array([[8.0 * GI], [6.0 * GI], [20.0 * GI], [16.0 * GI]]),
        np.zeros((4, 1)),
        np.full((4, 1), np.inf),
        np.ones(4, dtype=np.bool_),
    )
    assert d[2][0] == Fraction(6 * GI)
    assert sum(row[0] for row in d) <= 36 * GI


def test_a_task_that_brings_its_queue_exactly_to_deserved_is_admitted() -> None:
    def job(name: str, queue: str, phase: str = "Running") -> dict[str, Any]:
        return {"name": name, "queue": queue, "min_available": 1, "phase": phase}

    def task(name: str, gi: int, node: str | None = None) -> dict[str, Any]:
        t: dict[str, Any] = {"name": f"{name}-0", "job": name, "request": {"memory": f"{gi}Gi"}}
        if node:
            t.update(phase="Running", node=node)
        return t

    s = snap(
        nodes=[{"name": "n0", "allocatable": {"cpu": 64, "memory": "36Gi", "pods": 110}}],
        queues=[
            {"name": "a", "weight": 2},
            {"name": "b", "weight": 5},
            {"name": "c", "weight": 1},
            {"name": "d", "weight": 3},
        ],
        jobs=[
            job("a1", "a"),
            job("b1", "b"),
            job("c1", "c"),
            job("d1", "d"),
            job("c2", "c", "Inqueue"),
            job("c3", "c", "Inqueue"),
        ],
        tasks=[
            task("a1", 8, "n0"),
            task("b1", 6, "n0"),
            task("c1", 5, "n0"),
            task("d1", 16, "n0"),
            task("c2", 1),
            task("c3", 14),
        ],
    )
    d = gs.schedule(s, config("enqueue", "allocate", "backfill"))
    assert [b.task for b in d.binds] == ["c2-0"]
    assert d.queues["c"].deserved["memory"] == 6 * GI
