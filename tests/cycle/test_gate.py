"""The placement gate: every placement passes one check (``gangsched.session.gate``).

Each rule is tried directly on a Statement (the operation is refused, nothing changes), and
then as a backstop: an action whose own check is switched off still returns decisions that
break no invariant, because the gate refuses what it proposes.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import gangsched as gs
from _preemption_helpers import GPU, config, job, node, pending, running, snap
from gangsched.scheduler import open_session
from gangsched.session.gate import Rule, rules_in_force
from gangsched.session.statement import Statement
from gangsched.testing.invariants import check_cycle

RACKS = [
    {"name": "rack-a", "tier": 1, "members": ["n0", "n1"]},
    {"name": "rack-b", "tier": 1, "members": ["n2", "n3"]},
]
CAPACITY_TIERS: list[list[dict[str, Any]]] = [
    [
        {"name": "priority"},
        {"name": "gang"},
        {"name": "conformance"},
        {"name": "capacity", "enableHierarchy": True},
    ],
    [{"name": "drf"}, {"name": "predicates"}, {"name": "nodeorder"}],
]


def _state(ssn: Any) -> tuple[Any, ...]:
    return (
        ssn.used.copy(),
        ssn.pipelined.copy(),
        ssn.gpu_used.copy(),
        ssn.queue_allocated.copy(),
        ssn.task_state.copy(),
    )


def _same(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    return all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def _t(ssn: Any, name: str) -> int:
    index: int = ssn.snapshot.task_index[name]
    return index


def _n(ssn: Any, name: str) -> int:
    index: int = ssn.snapshot.node_index[name]
    return index


def test_a_placement_on_a_full_node_is_refused_and_changes_nothing() -> None:
    s = snap(
        [node("n0", gpus=2), node("n1", gpus=2)],
        [job("full", 2), job("new", 1, phase="Inqueue")],
        running("full", [("n0", [0]), ("n0", [1])]) + pending("new", 1),
    )
    ssn = open_session(s, config())
    before = _state(ssn)
    stmt = Statement(ssn)
    assert stmt.allocate(_t(ssn, "new-0"), _n(ssn, "n0"), (0,)) is False
    assert stmt.pipeline(_t(ssn, "new-0"), _n(ssn, "n0"), (0,)) is False
    assert _same(before, _state(ssn)) and stmt.ops == []
    assert "does not fit node 'n0' now" in ssn.refusals[0].message
    assert "once releases finish" in ssn.refusals[1].message
    assert stmt.allocate(_t(ssn, "new-0"), _n(ssn, "n1"), (1,)) is True


def test_a_device_that_is_taken_is_refused() -> None:
    s = snap(
        [node("n0", gpus=2)],
        [job("a", 1), job("new", 1, phase="Inqueue")],
        running("a", [("n0", [0])]) + pending("new", 1),
    )
    ssn = open_session(s, config())
    stmt = Statement(ssn)
    assert stmt.allocate(_t(ssn, "new-0"), 0, (0,)) is False
    assert stmt.allocate(_t(ssn, "new-0"), 0, (1,)) is True


def test_a_cordoned_node_takes_nothing() -> None:
    s = snap([node("n0", unschedulable=True)], [job("new", 1, phase="Inqueue")], pending("new", 1))
    ssn = open_session(s, config())
    assert Statement(ssn).allocate(0, 0, (0,)) is False
    assert "unschedulable" in ssn.refusals[0].message


def test_a_task_that_is_not_pending_is_not_placed_twice() -> None:
    s = snap([node("n0"), node("n1")], [job("new", 1, phase="Inqueue")], pending("new", 1))
    ssn = open_session(s, config())
    stmt = Statement(ssn)
    assert stmt.allocate(0, 0, (0,)) is True
    assert stmt.allocate(0, 1, (0,)) is False
    assert "not pending" in ssn.refusals[0].message


def _capped(hierarchy: bool) -> tuple[Any, gs.Config]:
    queues = [
        {"name": "parent", "capability": {GPU: 4}},
        {"name": "leaf", "parent": "parent", "capability": {GPU: 8}},
    ]
    s = snap(
        [node("n0", gpus=8)],
        [job("a", 1, queue="leaf"), job("b", 1, queue="leaf", phase="Inqueue")],
        running("a", [("n0", [0, 1, 2, 3])], gpus=4) + pending("b", 1, gpus=2),
        queues=queues,
    )
    tiers = [list(CAPACITY_TIERS[0]), CAPACITY_TIERS[1]]
    tiers[0][3] = {"name": "capacity", "enableHierarchy": hierarchy}
    return s, config(tiers=tiers)


def test_capability_along_every_ancestor_under_hierarchical_capacity() -> None:
    s, cfg = _capped(hierarchy=True)
    ssn = open_session(s, cfg)
    assert rules_in_force(cfg).hierarchical
    assert Statement(ssn).allocate(_t(ssn, "b-0"), 0, (4, 5)) is False
    assert "queue 'parent' would exceed its capability on nvidia.com/gpu" in ssn.refusals[0].message


def test_flat_capacity_checks_only_the_tasks_own_queue() -> None:
    s, cfg = _capped(hierarchy=False)
    ssn = open_session(s, cfg)
    assert not rules_in_force(cfg).hierarchical
    assert Statement(ssn).allocate(_t(ssn, "b-0"), 0, (4, 5)) is True


def test_a_carried_reservation_is_not_bound_in_a_queue_over_its_capability() -> None:
    # The queue's capability was lowered under its reservation: binding it is growth.
    queues = [{"name": "q", "capability": {GPU: 0}}]
    s = snap(
        [node("n0", gpus=4)],
        [job("r", 1, queue="q", phase="Inqueue")],
        [
            {
                "name": "r-0",
                "job": "r",
                "request": {"cpu": 1, GPU: 1},
                "phase": "Pipelined",
                "node": "n0",
                "gpu_indices": [0],
            }
        ],
        queues=queues,
    )
    cfg = config(tiers=[list(CAPACITY_TIERS[0]), CAPACITY_TIERS[1]])
    ssn = open_session(s, cfg)
    stmt = Statement(ssn)
    stmt.lift(0)
    assert stmt.allocate(0, 0, (0,)) is False
    assert ssn.refusals[0].rule is Rule.CAPABILITY
    d = gs.schedule(s, cfg)
    assert d.binds == () and "reservation not bound" in d.task_reasons["r-0"]


_CHANGED_UNDER_A_RESERVATION: dict[str, tuple[dict[str, Any], dict[str, Any], str]] = {
    "node affinity": (
        {"labels": {"zone": "a"}},
        {
            "node_affinity": {
                "required": [
                    {"match_expressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}
                ]
            }
        },
        "node affinity",
    ),
    "node selector": ({"labels": {"zone": "a"}}, {"node_selector": {"zone": "b"}}, "selector"),
    "taint": ({"taints": [{"key": "x", "effect": "NoSchedule"}]}, {}, "untolerated taint"),
    "cordon": ({"unschedulable": True}, {}, "unschedulable"),
}


@pytest.mark.parametrize("change", sorted(_CHANGED_UNDER_A_RESERVATION))
def test_a_carried_reservation_is_not_bound_on_a_node_its_predicates_now_refuse(
    change: str,
) -> None:
    # The node's labels, taints or cordon changed after the reservation was made there: the
    # reservation is not bound on it (it stays, saying why), while the same reservation on
    # an unchanged node is bound.
    node_change, task_extra, words = _CHANGED_UNDER_A_RESERVATION[change]
    reserved: dict[str, Any] = {
        "name": "r-0",
        "job": "r",
        "request": {"cpu": 1},
        "phase": "Pipelined",
        "node": "n0",
        **task_extra,
    }
    for changed in (False, True):
        n0 = node("n0", gpus=0) | ({"labels": {"zone": "b"}} if not changed else node_change)
        s = snap([n0], [job("r", 1, phase="Inqueue")], [reserved])
        d = gs.schedule(s, config())
        check_cycle(s, d, config())
        if changed:
            assert d.binds == () and d.pipelined == ()
            assert "no longer passes its predicates" in d.task_reasons["r-0"]
            assert words in d.task_reasons["r-0"]
        else:
            assert [(b.task, b.node) for b in d.binds] == [("r-0", "n0")]


def test_hard_topology_keeps_a_gang_in_one_rack() -> None:
    nt = {"mode": "hard", "highest_tier_allowed": 1}
    s = snap(
        [node(f"n{i}", gpus=2) for i in range(4)],
        [job("g", 2, phase="Inqueue", network_topology=nt)],
        pending("g", 2),
        hypernodes=RACKS,
    )
    ssn = open_session(s, config())
    stmt = Statement(ssn)
    assert stmt.allocate(0, _n(ssn, "n0"), (0,)) is True
    assert stmt.allocate(1, _n(ssn, "n2"), (0,)) is False
    assert "outside the domain" in ssn.refusals[0].message
    assert stmt.allocate(1, _n(ssn, "n1"), (0,)) is True
    assert stmt.commit() is True


def test_what_if_trials_may_ignore_topology_but_never_apply() -> None:
    nt = {"mode": "hard", "highest_tier_allowed": 1}
    s = snap(
        [node(f"n{i}", gpus=2) for i in range(4)],
        [job("g", 2, phase="Inqueue", network_topology=nt)],
        pending("g", 2),
        hypernodes=RACKS,
    )
    ssn = open_session(s, config())
    stmt = Statement(ssn, relax=frozenset({Rule.TOPOLOGY}))
    assert stmt.allocate(0, _n(ssn, "n0"), (0,)) and stmt.allocate(1, _n(ssn, "n2"), (0,))
    with pytest.raises(RuntimeError):
        stmt.commit()
    stmt.discard()


def test_a_partial_gang_is_undone_instead_of_committed() -> None:
    s = snap([node("n0", gpus=4)], [job("g", 3, phase="Inqueue")], pending("g", 3))
    ssn = open_session(s, config())
    before = _state(ssn)
    stmt = Statement(ssn)
    assert stmt.allocate(0, 0, (0,)) and stmt.allocate(1, 0, (1,))
    assert stmt.commit() is False
    assert _same(before, _state(ssn)) and ssn.committed == []
    assert "bound below its minimum" in ssn.refusals[0].message
    stmt = Statement(ssn)
    assert stmt.pipeline(0, 0, (0,))
    assert stmt.keep() is False
    assert _same(before, _state(ssn)) and ssn.kept == []
    assert "reserved below its minimum" in ssn.refusals[1].message


def test_without_the_gang_plugin_a_partial_commit_is_allowed() -> None:
    tiers = [[{"name": "priority"}], [{"name": "predicates"}, {"name": "nodeorder"}]]
    s = snap([node("n0", gpus=4)], [job("g", 3, phase="Inqueue")], pending("g", 3))
    ssn = open_session(s, config(tiers=tiers))
    stmt = Statement(ssn)
    assert stmt.allocate(0, 0, (0,)) and stmt.commit() is True


@pytest.mark.no_invariant_hook
def test_the_gate_holds_when_an_action_forgets_topology(monkeypatch: pytest.MonkeyPatch) -> None:
    """Backfill with its topology check switched off (the defect it once had): the gate
    refuses the best-effort task that would leave the rack, and the decisions stay valid."""
    import gangsched.actions.backfill as backfill

    monkeypatch.setattr(backfill, "hard_domain", lambda ssn, j: None)
    nt = {"mode": "hard", "highest_tier_allowed": 1}
    # Two pods per node: each rack node has room for one best-effort task, the other rack
    # for four.
    pods2 = {"cpu": 2, "memory": "1Gi", "pods": 2}
    nodes = [node(f"n{i}", gpus=1, allocatable=pods2) for i in range(4)]
    tasks = running("g", [("n0", [0]), ("n1", [0])], gpus=1)
    tasks += [{"name": f"g-be{i}", "job": "g", "request": {}} for i in range(4)]
    s = snap(nodes, [job("g", 2, network_topology=nt)], tasks, hypernodes=RACKS)
    cfg = config("backfill")
    ssn = open_session(s, cfg)
    from gangsched.scheduler import default_registry, make_actions
    from gangsched.session.close import close_session

    for action in make_actions(cfg, default_registry()):
        action.execute(ssn)
    d = close_session(ssn)
    assert ssn.refusals and all("outside the domain" in r.message for r in ssn.refusals)
    check_cycle(s, d, cfg)
    assert all(b.node in ("n0", "n1") for b in d.binds)
    # With its own check on, backfill binds into the rack and the gate refuses nothing.
    monkeypatch.undo()
    ssn = open_session(s, cfg)
    for action in make_actions(cfg, default_registry()):
        action.execute(ssn)
    d = close_session(ssn)
    assert ssn.refusals == []
    assert sorted((b.task, b.node) for b in d.binds) == [("g-be0", "n0"), ("g-be1", "n1")]


def test_a_new_reservation_never_takes_a_queue_past_its_capability() -> None:
    """capacity with hierarchy + hierarchical drf: a queue capped at 37 GPUs holds 36, and
    the only room for its next 4-GPU task is a node whose pods are terminating — reserving it
    would take the queue to 40."""
    queues: list[dict[str, Any]] = [{"name": "capped", "capability": {GPU: 37}}, {"name": "other"}]
    nodes = [node(f"n{i}", gpus=4) for i in range(10)]
    jobs = [
        job("big", 9, queue="capped"),
        job("old", 1, queue="other"),
        job("more", 1, queue="capped", phase="Inqueue"),
    ]
    tasks = running("big", [(f"n{i}", [0, 1, 2, 3]) for i in range(9)], gpus=4)
    tasks += running("old", [("n9", [0, 1, 2, 3])], gpus=4, phase="Releasing")
    tasks += pending("more", 1, gpus=4)
    s = snap(nodes, jobs, tasks, queues=queues)
    tiers: list[list[dict[str, Any]]] = [
        [
            {"name": "priority"},
            {"name": "gang"},
            {"name": "conformance"},
            {"name": "capacity", "enableHierarchy": True},
        ],
        [{"name": "drf", "enableHierarchy": True}, {"name": "predicates"}, {"name": "nodeorder"}],
    ]
    cfg = config("enqueue", "allocate", "backfill", tiers=tiers)
    d = gs.schedule(s, cfg)
    assert d.binds == () and d.pipelined == ()
    check_cycle(s, d, cfg)
    # With room for one more GPU task under the cap, a 1-GPU task is reserved there.
    tasks[-1]["request"] = {"cpu": 1, GPU: 1}
    d = gs.schedule(snap(nodes, jobs, tasks, queues=queues), cfg)
    assert [p.task for p in d.pipelined] == ["more-0"]


def test_a_gang_is_not_bound_in_part_on_a_best_effort_reservation_left_reserved() -> None:
    """A gang of two carried reservations: one fits its node now, the other is a best-effort
    task on a node cordoned since. The cordoned one cannot bind and stays reserved, so the
    gang is not ready (a reserved task is not a ready one, a best-effort one no more than
    another) and binding its other task alone would place it in part. While lifted, the
    best-effort task is pending, which the gang rule counts toward readiness: readiness must
    be asked with it back on its reservation."""
    s = snap(
        [node("n0", unschedulable=True), node("n1")],
        [job("j", 2, phase="Inqueue")],
        [
            {"name": "j-0", "job": "j", "request": {"cpu": 3}, "phase": "Pipelined", "node": "n1"},
            {"name": "j-1", "job": "j", "request": {}, "phase": "Pipelined", "node": "n0"},
        ],
    )
    cfg = config("enqueue", "allocate", "backfill")
    d = gs.schedule(s, cfg)
    check_cycle(s, d, cfg)
    assert d.binds == ()
    assert d.jobs["j"].pipelined == 2 and not d.jobs["j"].ready
    assert "no longer passes its predicates" in d.task_reasons["j-1"]
