"""Regressions found by the relational fuzzer (gangsched.testing.hostile), one test each.

Each input lives in ``tests/data/hostile/`` as the fuzzer saved it (shrunk); the test schedules
it under the configuration that broke and runs the invariant checker on the answer.
"""

from __future__ import annotations

import json
from pathlib import Path

import gangsched as gs
from gangsched.testing.invariants import check_all

DATA = Path(__file__).parent / "data" / "hostile"

PREEMPT = gs.Config.from_dict(
    {
        "actions": ["enqueue", "allocate", "preempt", "reclaim", "backfill"],
        "tiers": [
            [{"name": "priority"}, {"name": "gang"}, {"name": "conformance"}],
            [
                {"name": "drf"},
                {"name": "predicates"},
                {"name": "proportion"},
                {"name": "nodeorder"},
                {"name": "binpack"},
            ],
        ],
    }
)


def load(name: str) -> gs.Snapshot:
    return gs.Snapshot.from_dict(json.loads((DATA / name).read_text()))


def test_preempt_diagnosis_of_a_hard_topology_job_does_not_crash() -> None:
    # A hard-topology job that cannot preempt: explaining why compared a list of NumPy node
    # masks with ``!=`` (an ambiguous truth value).
    snap = load("preempt_topology_diagnose.json")
    out = gs.schedule(snap, PREEMPT)
    check_all(snap, out)
    assert not out.evictions
    assert "one domain of tier <= 1" in out.task_reasons["j0-0"]
