"""Per-template evaluations carried from one cycle to the next give a fresh cycle's decisions."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

import gangsched as gs
from _carried import uncarried
from _helpers_plugins import FarNodesFirst
from _state_cases import zoned_cluster
from gangsched._frozen import FrozenDict
from gangsched.model import TaskPhase
from gangsched.scheduler import run_cycle


def _cluster(n_nodes: int = 8, jobs: int = 12) -> dict[str, Any]:
    return zoned_cluster(n_nodes, jobs, selector_every=3)


def _canon(d: gs.Decisions) -> str:
    return json.dumps(d.to_dict(), sort_keys=True)


def test_a_second_cycle_takes_over_evaluations_and_decides_as_a_fresh_one() -> None:
    state = gs.ClusterState(gs.Snapshot.from_dict(_cluster()))
    config = gs.Config.default()
    first = state.schedule(config)
    state.apply(first)
    # Something runs, something finishes: occupancy moves on a few nodes only.
    bound = [b.task for b in first.binds]
    state.set_task_phase(bound[0], TaskPhase.RUNNING)
    state.set_task_phase(bound[1], TaskPhase.SUCCEEDED)
    snap = state.snapshot()
    previous = state.__dict__["_last_session"]
    fresh = gs.schedule(gs.Snapshot.from_dict(snap.to_dict()), config)
    carried, ssn = run_cycle(snap, config, previous=previous)
    assert ssn.evaluator.carried > 0  # some templates were taken over, not rebuilt
    assert _canon(uncarried(carried, fresh)) == _canon(fresh)


def _relabel_and_taint(base: dict[str, Any], node: int, **fields: Any) -> gs.Snapshot:
    changed = dict(base)
    changed["nodes"] = [dict(n) for n in base["nodes"]]
    changed["nodes"][node] = {**changed["nodes"][node], **fields}
    return gs.Snapshot.from_dict(changed)


def test_a_changed_node_record_is_re_evaluated_and_the_rest_carries() -> None:
    base = _cluster()
    config = gs.Config.default()
    _, ssn = run_cycle(gs.Snapshot.from_dict(base), config)
    snap2 = _relabel_and_taint(base, 3, labels={"zone": "z0"}, unschedulable=True)
    d2, ssn2 = run_cycle(snap2, config, previous=ssn)
    assert ssn2.evaluator.carried > 0
    assert _canon(d2) == _canon(gs.schedule(snap2, config))


def test_no_carry_when_a_node_s_taints_change() -> None:
    """Taint scores are normalised over the cluster's nodes, so a taint change may move every
    node's score: the next cycle evaluates afresh."""
    base = _cluster()
    config = gs.Config.default()
    _, ssn = run_cycle(gs.Snapshot.from_dict(base), config)
    taint = {"key": "k", "value": "v", "effect": "PreferNoSchedule"}
    snap2 = _relabel_and_taint(base, 3, taints=[taint])
    d2, ssn2 = run_cycle(snap2, config, previous=ssn)
    assert ssn2.evaluator.carried == 0
    assert _canon(d2) == _canon(gs.schedule(snap2, config))


def test_a_node_whose_device_count_changes_starts_a_fresh_evaluation() -> None:
    """A node going from 8 to 4 GPU devices changes the device layout every per-device array
    follows: nothing carries (and the comparison of the two layouts does not fail)."""
    base = _cluster()
    base["nodes"] = [
        {**n, "allocatable": {**n["allocatable"], "nvidia.com/gpu": 8}} for n in base["nodes"]
    ]
    base["tasks"][0] = {**base["tasks"][0], "request": {"cpu": 1, "nvidia.com/gpu": 2}}
    config = gs.Config.default()
    _, ssn = run_cycle(gs.Snapshot.from_dict(base), config)
    smaller = {**base["nodes"][2]["allocatable"], "nvidia.com/gpu": 4}
    snap2 = _relabel_and_taint(base, 2, allocatable=smaller)
    d2, ssn2 = run_cycle(snap2, config, previous=ssn)
    assert ssn2.evaluator.carried == 0
    assert _canon(d2) == _canon(gs.schedule(snap2, config))


def test_no_carry_when_the_registry_makes_other_plugins_of_the_same_names() -> None:
    other = gs.Registry()
    for name, factory in gs.default_registry().plugins.items():
        other.register_plugin(name, FarNodesFirst if name == "binpack" else factory)
    for name, factory in gs.default_registry().actions.items():
        other.register_action(name, factory)
    config = gs.Config.default()
    snap = gs.Snapshot.from_dict(_cluster())
    _, ssn = run_cycle(snap, config)
    d2, ssn2 = run_cycle(snap, config, registry=other, previous=ssn)
    assert ssn2.evaluator.carried == 0
    # (a job the retry memory carries keeps its last words: gang-aware retry's contract)
    fresh = gs.schedule(snap, config, registry=other)
    assert _canon(uncarried(d2, fresh)) == _canon(fresh)


def test_no_carry_under_a_plugin_that_is_not_shape_only() -> None:
    config = gs.Config.from_dict(
        {"actions": ["enqueue", "allocate"], "tiers": [[{"name": "gang"}], [{"name": "fgd"}]]}
    )
    snap = gs.Snapshot.from_dict(_cluster())
    _, ssn = run_cycle(snap, config)
    _, ssn2 = run_cycle(snap, config, previous=ssn)
    assert ssn2.evaluator.carried == 0


@settings(max_examples=25, deadline=None)
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from(["finish", "run", "evict", "cordon", "relabel", "none"]),
            st.integers(0, 50),
        ),
        min_size=1,
        max_size=6,
    ),
    with_binpack=st.booleans(),
)
def test_carried_cycles_match_fresh_cycles(
    steps: list[tuple[str, int]], with_binpack: bool
) -> None:
    tiers: list[list[dict[str, Any]]] = [
        [{"name": "priority"}, {"name": "gang"}],
        [{"name": "predicates"}, {"name": "proportion"}, {"name": "nodeorder"}],
    ]
    if with_binpack:
        tiers[1].append({"name": "binpack"})
    config = gs.Config.from_dict({"actions": ["enqueue", "allocate", "backfill"], "tiers": tiers})
    state = gs.ClusterState(gs.Snapshot.from_dict(_cluster(6, 10)))
    for what, pick in steps:
        snap = state.snapshot()
        d = state.schedule(config)
        fresh = gs.schedule(gs.Snapshot.from_dict(snap.to_dict()), config)
        assert _canon(uncarried(d, fresh)) == _canon(fresh)
        state.apply(d)
        if what in ("cordon", "relabel"):
            node = sorted(state.nodes)[pick % len(state.nodes)]
            rec = state.nodes[node]
            if what == "cordon":
                state.cordon(node, not rec.unschedulable)
            else:
                zone = "z1" if rec.labels.get("zone") == "z0" else "z0"
                state.update_node(dataclasses.replace(rec, labels=FrozenDict({"zone": zone})))
            continue
        placed = sorted(t.name for t in state.snapshot().tasks if t.node is not None)
        if placed and what != "none":
            name = placed[pick % len(placed)]
            phase = {
                "finish": TaskPhase.SUCCEEDED,
                "run": TaskPhase.RUNNING,
                "evict": TaskPhase.RELEASING,
            }[what]
            state.set_task_phase(name, phase)
