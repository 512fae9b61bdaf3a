"""Regressions found by the relational fuzzer (gangsched.testing.hostile), one test each.

Each input lives in ``tests/data/hostile/`` as the fuzzer saved it (shrunk); the test schedules
it under the configuration that broke and runs the invariant checker on the answer.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import gangsched as gs
from gangsched.testing.invariants import check_all

DATA = Path(__file__).parents[1] / "data" / "hostile"

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


def _tower(levels: int) -> dict[str, object]:
    hns = [{"name": "t1", "tier": 1, "members": ["n0"]}]
    hns += [{"name": f"t{i}", "tier": i, "members": [f"t{i - 1}"]} for i in range(2, levels + 1)]
    return {
        "nodes": [{"name": "n0", "allocatable": {"cpu": 8}}],
        "hypernodes": hns,
        "queues": [{"name": "default"}],
        "jobs": [
            {
                "name": "j",
                "queue": "default",
                "phase": "Inqueue",
                "network_topology": {"mode": "hard", "highest_tier_allowed": levels},
            }
        ],
        "tasks": [{"name": "t", "job": "j", "request": {"cpu": 1}}],
    }


def test_too_many_tiers_are_rejected_when_the_snapshot_is_built() -> None:
    # The tier-count bound used to be checked only when a cycle first built the topology, so
    # a snapshot that validated aborted the next schedule() call.
    with pytest.raises(gs.SnapshotError) as err:
        gs.Snapshot.from_dict(_tower(65))
    assert (err.value.kind, err.value.name, err.value.field) == ("hypernode", "t65", "tier")
    snap = gs.Snapshot.from_dict(_tower(64))
    check_all(snap, gs.schedule(snap))


def test_overlapping_domains_are_rejected_when_the_snapshot_is_built() -> None:
    doc = {
        "nodes": [{"name": f"n{i}", "allocatable": {"cpu": 8}} for i in range(3)],
        "hypernodes": [
            {"name": "r0", "tier": 1, "members": ["n0", "n1"]},
            {"name": "r1", "tier": 1, "members": ["n2"]},
            {"name": "s0", "tier": 2, "members": ["n0"]},
            {"name": "s1", "tier": 2, "members": ["n1", "n2"]},
        ],
    }
    with pytest.raises(gs.SnapshotError) as err:
        gs.Snapshot.from_dict(doc)
    assert err.value.kind == "hypernode" and err.value.field == "members"


def test_a_snapshot_shares_its_topology_read_only() -> None:
    from gangsched.model.topology import build_topology

    snap = gs.Snapshot.from_dict(_tower(3))
    topo = build_topology(snap)
    assert build_topology(snap) is topo
    with pytest.raises(ValueError):
        topo.domain_of[0, 0] = 5


@pytest.mark.parametrize("config", [gs.Config.default(), PREEMPT], ids=["default", "preempt"])
def test_hard_topology_gang_already_spread_gets_no_more_tasks(config: gs.Config) -> None:
    # Running tasks in two tier-1 racks (the topology changed under the gang): placing more in
    # the rack holding most of them broke the hard constraint the checker enforces.
    snap = load("hard_topology_already_spread.json")
    out = gs.schedule(snap, config)
    check_all(snap, out)
    assert not out.binds and not out.pipelined
    assert "outside any one domain of tier <= 1" in out.task_reasons["t2"]


def test_zero_cpu_capability_reads_as_unset_for_scheduler_and_checker() -> None:
    # Volcano reads a cpu / memory capability at or below zero as unset; proportion did, the
    # invariant checker did not. One rule now: Queue.capability_limits.
    snap = load("zero_cpu_capability.json")
    out = gs.schedule(snap)
    check_all(snap, out)
    assert [b.task for b in out.binds] == ["j0-0"]
    q = snap.queue("default")
    assert q.capability_limits(flat=True) == {}
    assert q.capability_limits(flat=False) == {"cpu": 0}


def _racks(pods: int = 110) -> dict[str, object]:
    return {
        "nodes": [
            {"name": f"n{i}", "allocatable": {"cpu": 8, "memory": "8Gi", "pods": pods}}
            for i in range(3)
        ],
        "hypernodes": [
            {"name": "r0", "tier": 1, "members": ["n0", "n2"]},
            {"name": "r1", "tier": 1, "members": ["n1"]},
        ],
        "queues": [{"name": "default"}],
    }


def test_backfill_keeps_best_effort_tasks_of_a_hard_gang_in_one_domain() -> None:
    # One pod per node: backfill put the first best-effort task on n0 (rack r0) and the
    # second on the next best node, n1 (rack r1), across the job's hard tier-1 boundary.
    doc = _racks(pods=1)
    doc["jobs"] = [
        {
            "name": "j",
            "queue": "default",
            "min_available": 2,
            "phase": "Inqueue",
            "network_topology": {"mode": "hard", "highest_tier_allowed": 1},
        }
    ]
    doc["tasks"] = [{"name": f"be{i}", "job": "j"} for i in range(2)]
    snap = gs.Snapshot.from_dict(doc)
    for config in (gs.Config.default(), PREEMPT):
        out = gs.schedule(snap, config)
        check_all(snap, out)
        assert sorted((b.task, b.node) for b in out.binds) == [("be0", "n0"), ("be1", "n2")]


def test_carried_reservations_outside_one_domain_are_not_bound() -> None:
    doc = _racks()
    doc["jobs"] = [
        {
            "name": "j",
            "queue": "default",
            "min_available": 2,
            "phase": "Inqueue",
            "network_topology": {"mode": "hard", "highest_tier_allowed": 1},
        }
    ]
    doc["tasks"] = [
        {"name": "a", "job": "j", "request": {"cpu": 1}, "phase": "Pipelined", "node": "n0"},
        {"name": "b", "job": "j", "request": {"cpu": 1}, "phase": "Pipelined", "node": "n1"},
    ]
    snap = gs.Snapshot.from_dict(doc)
    out = gs.schedule(snap)
    check_all(snap, out)
    assert not out.binds
    assert out.jobs["j"].phase != gs.JobPhase.RUNNING.value


def test_within_job_preemption_keeps_a_hard_gang_in_its_domain() -> None:
    # A hard tier-1 gang already spread over two racks, with lower-priority tasks of its own:
    # the within-job pass reserved its pending tasks on a node without asking the topology.
    snap = load("within_job_preempt_spread_gang.json")
    out = gs.schedule(snap, PREEMPT)
    check_all(snap, out)
    assert not [p for p in out.pipelined if p.task.startswith("j1-")]


def test_spread_reservations_are_not_bound_even_when_only_one_fits_now() -> None:
    # Two carried reservations of a hard tier-1 gang in two racks; only the one on n1 fits
    # now. Binding it alone (the other kept as a reservation on n0) split the gang.
    snap = load("reservations_spread_one_fits.json")
    for config in (gs.Config.default(), PREEMPT):
        out = gs.schedule(snap, config)
        check_all(snap, out)
        assert not [b for b in out.binds if b.task.startswith("j0-")]
