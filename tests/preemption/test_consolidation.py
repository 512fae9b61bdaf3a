"""The consolidate action: a pending gang that fits nowhere as the cluster is packed, but
would fit if a few running tasks moved, gets them moved (each reserved elsewhere in the same
statement) and is reserved on the room they free."""

from __future__ import annotations

from typing import Any

import pytest

import gangsched as gs
from _builders import gpu_node
from _preemption_helpers import TIERS, job, pending, running
from gangsched.actions import consolidate as c
from gangsched.config import Config
from gangsched.decisions import Decisions, Eviction, Pipeline
from gangsched.errors import ConfigError
from gangsched.testing.invariants import InvariantViolation, check_consolidation, check_cycle

GPU = "nvidia.com/gpu"


def config(**arguments: Any) -> Config:
    actions: list[Any] = ["enqueue", "allocate", "consolidate", "backfill"]
    return Config.from_dict(
        {
            "actions": actions,
            "tiers": TIERS,
            "configurations": [{"name": "consolidate", "arguments": arguments}]
            if arguments
            else [],
        }
    )


CONSOLIDATE = config()


def node(name: str, gpus: int = 8) -> dict[str, Any]:
    return gpu_node(name, gpus=gpus, cpu=32, pods=110)


def snap(
    jobs: list[dict[str, Any]],
    tasks: list[dict[str, Any]],
    *,
    nodes: list[dict[str, Any]] | None = None,
    queues: list[dict[str, Any]] | None = None,
    budgets: list[dict[str, Any]] | None = None,
) -> gs.Snapshot:
    return gs.Snapshot.from_dict(
        {
            "nodes": nodes or [node("n0"), node("n1")],
            "queues": queues or [{"name": "default"}],
            "jobs": jobs,
            "tasks": tasks,
            "disruption_budgets": budgets or [],
        }
    )


def _fragmented(**big: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """2 nodes × 8 GPUs, each running one 4-GPU job; an 8-GPU gang waits."""
    jobs = [
        job("a", 1),
        job("b", 1, creation=1),
        job("big", 1, phase="Inqueue", **big),
    ]
    tasks = (
        running("a", [("n0", [0, 1, 2, 3])], gpus=4)
        + running("b", [("n1", [0, 1, 2, 3])], gpus=4)
        + pending("big", 1, gpus=8)
    )
    return jobs, tasks


def schedule(s: gs.Snapshot, cfg: Config = CONSOLIDATE) -> Decisions:
    d = gs.schedule(s, cfg)
    check_cycle(s, d, cfg)
    return d


def test_consolidation_moves_one_4gpu_task_and_reserves_both() -> None:
    jobs, tasks = _fragmented()
    s = snap(jobs, tasks)
    d = schedule(s)
    assert len(d.evictions) == 1
    moved = d.evictions[0]
    assert moved.reason.startswith(c.CONSOLIDATION) and moved.preemptor == "big"
    reserved = {p.task: p.node for p in d.pipelined}
    old = s.task(moved.task).node
    # The moved task is reserved on the other node; the gang on the node it frees.
    assert set(reserved) == {moved.task, "big-0"}
    assert reserved["big-0"] == old and reserved[moved.task] != old
    assert f"moved to node {reserved[moved.task]!r}" in moved.reason
    assert d.binds == ()
    assert d.jobs["big"].message == (
        f"consolidate: 1 task(s) reserved, moving 1 task(s) of ['{s.task(moved.task).job}']"
    )
    assert "big" not in d.preemption_reasons


def test_consolidation_is_deterministic() -> None:
    jobs, tasks = _fragmented()
    s = snap(jobs, tasks)
    assert gs.schedule(s, CONSOLIDATE).to_dict() == gs.schedule(s, CONSOLIDATE).to_dict()


def _carry(s: gs.Snapshot, d: Decisions) -> gs.Snapshot:
    """The caller's side of a move, two steps at once: the old pod is gone and the moved task
    is listed Pipelined on its reserved node; other reservations are carried as usual."""
    out: dict[str, Any] = s.to_dict()
    pipes = {p.task: p for p in d.pipelined}
    binds = {b.task: b for b in d.binds}
    gone = {e.task for e in d.evictions}
    for t in out["tasks"]:
        if t["name"] in pipes:
            p = pipes[t["name"]]
            t.update(phase="Pipelined", node=p.node, gpu_indices=list(p.gpu_indices))
        elif t["name"] in gone:
            t.update(phase="Pending")
            t.pop("node", None)
            t.pop("gpu_indices", None)
        elif t["name"] in binds:
            b = binds[t["name"]]
            t.update(phase="Running", node=b.node, gpu_indices=list(b.gpu_indices))
    for j in out["jobs"]:
        status = d.jobs.get(j["name"])
        if status is not None and status.phase != "Unknown":
            j["phase"] = status.phase
    return gs.Snapshot.from_dict(out)


def test_the_next_cycle_binds_the_moved_task_and_the_gang() -> None:
    jobs, tasks = _fragmented()
    s = snap(jobs, tasks)
    d1 = schedule(s)
    s2 = _carry(s, d1)
    d2 = schedule(s2)
    bound = {b.task: b.node for b in d2.binds}
    assert bound == {p.task: p.node for p in d1.pipelined}
    assert d2.evictions == ()


def test_a_budget_stops_consolidation_outright() -> None:
    jobs, tasks = _fragmented()
    budgets = [{"name": "pdb", "jobs": ["a", "b"], "min_available": "100%"}]
    d = schedule(snap(jobs, tasks, budgets=budgets))
    assert d.evictions == () and d.pipelined == ()
    assert d.preemption_reasons["big"].startswith(f"consolidate: {c.NO_MOVABLE}:")


def test_a_budget_on_one_job_moves_the_other() -> None:
    jobs, tasks = _fragmented()
    budgets = [{"name": "pdb", "jobs": ["b"], "max_unavailable": 0}]
    s = snap(jobs, tasks, budgets=budgets)
    d = schedule(s)
    assert [e.task for e in d.evictions] == ["a-0"]


def test_tasks_marked_not_preemptable_are_not_moved() -> None:
    jobs, tasks = _fragmented()
    for t in tasks:
        if t["job"] == "b":
            t["preemptable"] = False
    d = schedule(snap(jobs, tasks))
    assert [e.task for e in d.evictions] == ["a-0"]


def test_queues_argument_limits_which_queues_are_moved() -> None:
    jobs, tasks = _fragmented()
    jobs[0]["queue"] = "batch"
    jobs[1]["queue"] = "prod"
    queues = [{"name": "default"}, {"name": "batch"}, {"name": "prod"}]
    d = schedule(snap(jobs, tasks, queues=queues), config(queues=["prod"]))
    assert [e.task for e in d.evictions] == ["b-0"]
    d = schedule(snap(jobs, tasks, queues=queues), config(queues="batch"))
    assert [e.task for e in d.evictions] == ["a-0"]
    d = schedule(snap(jobs, tasks, queues=queues), config(queues="nobody"))
    assert d.evictions == () and c.NO_MOVABLE in d.preemption_reasons["big"]


def test_a_gang_at_its_minimum_moves_whole_or_not_at_all() -> None:
    # 'pair' runs 2 × 2 GPUs on n0 at min_available 2: moving one would break it, so it
    # moves whole (both reserved on n1), which frees n0 for the 8-GPU gang.
    jobs = [job("pair", 2), job("big", 1, phase="Inqueue")]
    tasks = running("pair", [("n0", [0, 1]), ("n0", [2, 3])], gpus=2) + pending("big", 1, gpus=8)
    nodes = [node("n0"), node("n1", gpus=4)]
    d = schedule(snap(jobs, tasks, nodes=nodes))
    assert {e.task for e in d.evictions} == {"pair-0", "pair-1"}
    reserved = {p.task: p.node for p in d.pipelined}
    assert reserved == {"pair-0": "n1", "pair-1": "n1", "big-0": "n0"}


def test_a_gang_above_its_minimum_gives_only_its_surplus() -> None:
    # 'wide' runs 3 × 2 GPUs at min_available 1, two on n0 and one on n1 beside a 2-GPU task
    # that may not move: its 2 surplus tasks move from n0 to n1 and the 8-GPU gang gets n0.
    jobs = [job("wide", 1), job("fixed", 1, preemptable=False), job("big", 1, phase="Inqueue")]
    tasks = (
        running("wide", [("n0", [0, 1]), ("n0", [2, 3]), ("n1", [0, 1])], gpus=2)
        + running("fixed", [("n1", [2, 3])], gpus=2)
        + pending("big", 1, gpus=8)
    )
    d = schedule(snap(jobs, tasks))
    assert {e.task for e in d.evictions} == {"wide-0", "wide-1"}
    reserved = {p.task: p.node for p in d.pipelined}
    assert reserved == {"wide-0": "n1", "wide-1": "n1", "big-0": "n0"}


def test_max_moves_bounds_the_moves_and_says_so() -> None:
    jobs = [job("pair", 2), job("big", 1, phase="Inqueue")]
    tasks = running("pair", [("n0", [0, 1]), ("n0", [2, 3])], gpus=2) + pending("big", 1, gpus=8)
    nodes = [node("n0"), node("n1", gpus=4)]
    d = schedule(snap(jobs, tasks, nodes=nodes), config(**{"max-moves": 1}))
    assert d.evictions == ()
    assert d.preemption_reasons["big"].startswith(f"consolidate: {c.NO_PLAN}:")
    assert "at most 1 move(s)" in d.preemption_reasons["big"]


def test_no_queue_goes_below_its_guarantee() -> None:
    jobs, tasks = _fragmented()
    jobs[0]["queue"] = "kept"
    queues: list[dict[str, Any]] = [{"name": "default"}, {"name": "kept", "guarantee": {GPU: 4}}]
    d = schedule(snap(jobs, tasks, queues=queues))
    assert [e.task for e in d.evictions] == ["b-0"]


def test_no_room_anywhere_is_a_clear_refusal() -> None:
    # n1 also runs a 3-GPU job: 5 GPUs free in total, in pieces no set of moves joins.
    jobs, tasks = _fragmented()
    jobs.append(job("c", 1))
    tasks += running("c", [("n1", [4, 5, 6])], gpus=3)
    d = schedule(snap(jobs, tasks))
    assert d.evictions == ()
    assert d.preemption_reasons["big"].startswith(f"consolidate: {c.NO_PLAN}:")


def test_a_gang_that_already_fits_is_left_to_allocate() -> None:
    jobs, tasks = _fragmented()
    d = schedule(snap(jobs, tasks, nodes=[node("n0"), node("n1"), node("n2")]))
    assert d.evictions == () and {b.task for b in d.binds} == {"big-0"}


def test_never_and_delay_hold_consolidation_too() -> None:
    jobs, tasks = _fragmented(age=1, preemption_delay=10)
    d = schedule(snap(jobs, tasks))
    assert d.evictions == () and "9s left" in d.preemption_reasons["big"]
    jobs, tasks = _fragmented()
    tasks[-1]["preemption_policy"] = "Never"
    d = schedule(snap(jobs, tasks))
    assert d.evictions == () and "Never" in d.preemption_reasons["big"]


def test_the_search_budget_gives_a_clear_result() -> None:
    jobs, tasks = _fragmented()
    d = schedule(snap(jobs, tasks), config(**{"max-trials": 1}))
    assert d.evictions == ()
    assert d.preemption_reasons["big"].startswith(f"consolidate: {c.SEARCH_BUDGET}:")


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"max-moves": -1}, "arguments.max-moves"),
        ({"max-moves": "lots"}, "arguments.max-moves"),
        ({"max-trials": 0}, "arguments.max-trials"),
        ({"queues": 3}, "arguments.queues"),
        ({"queues": ["a", ""]}, "arguments.queues"),
    ],
)
def test_bad_arguments_are_config_errors(arguments: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as err:
        gs.schedule(snap(*_fragmented()), config(**arguments))
    assert err.value.field == field


def test_an_unknown_argument_is_refused() -> None:
    with pytest.raises(ConfigError):
        gs.schedule(snap(*_fragmented()), config(**{"max_moves": 2}))


# ------------------------------------------------------------------ the invariant checker


def _decisions(evictions: list[Eviction], pipelined: list[Pipeline]) -> Decisions:
    return Decisions(evictions=tuple(evictions), pipelined=tuple(pipelined))


def test_checker_refuses_a_consolidation_eviction_without_a_reservation() -> None:
    s = snap(*_fragmented())
    d = _decisions([Eviction(task="a-0", reason="consolidation: x", preemptor="big")], [])
    with pytest.raises(InvariantViolation, match="without a reservation"):
        check_consolidation(s, d)


def test_checker_refuses_a_consolidation_that_breaks_a_budget() -> None:
    jobs, tasks = _fragmented()
    s = snap(jobs, tasks, budgets=[{"name": "pdb", "jobs": ["a"], "min_available": 1}])
    d = _decisions(
        [Eviction(task="a-0", reason="consolidation: x", preemptor="big")],
        [Pipeline(task="a-0", node="n1", gpu_indices=(4, 5, 6, 7))],
    )
    with pytest.raises(InvariantViolation, match="breaks disruption budget 'pdb'"):
        check_consolidation(s, d)


def test_checker_accepts_the_action_output_and_a_preempt_eviction() -> None:
    jobs, tasks = _fragmented()
    s = snap(jobs, tasks, budgets=[{"name": "pdb", "jobs": ["a"], "min_available": 1}])
    check_consolidation(s, gs.schedule(s, CONSOLIDATE))
    # A preemption that breaks a budget is not this checker's business.
    check_consolidation(
        s, _decisions([Eviction(task="a-0", reason="preempted", preemptor="big")], [])
    )


def test_consolidation_never_takes_a_queue_past_its_capability() -> None:
    # Found by the disruption machine's soak: the claim passed its queue's check while the
    # moved tasks were out, and putting them back took the queue past its capability. Here
    # the queue may hold 12 GPUs: 8 run, the 8-GPU gang would make 16, so nothing moves.
    jobs, tasks = _fragmented()
    queues = [{"name": "default", "capability": {GPU: 12}}]
    d = schedule(snap(jobs, tasks, queues=queues))
    assert d.evictions == () and d.pipelined == ()
    assert d.preemption_reasons["big"].startswith(f"consolidate: {c.NO_PLAN}:")
    # With room in the quota the same cluster consolidates.
    queues = [{"name": "default", "capability": {GPU: 16}}]
    assert len(schedule(snap(jobs, tasks, queues=queues)).evictions) == 1


def test_only_running_tasks_of_other_jobs_are_moved() -> None:
    # n0 holds a 4-GPU reservation of 'held' (Pipelined, not running); n1 runs a task nobody
    # may move. Moving the reservation would free n0 for the 8-GPU gang, but a task that is
    # not running is not the search's to move.
    jobs = [job("held", 1, phase="Inqueue"), job("fixed", 1), job("big", 1, phase="Inqueue")]
    tasks = (
        running("held", [("n0", [0, 1, 2, 3])], gpus=4, phase="Pipelined")
        + running("fixed", [("n1", [0, 1, 2, 3])], gpus=4, preemptable=False)
        + pending("big", 1, gpus=8)
    )
    d = schedule(snap(jobs, tasks))
    assert d.evictions == ()
    assert "big-0" not in {p.task for p in d.pipelined} | {b.task for b in d.binds}
    assert d.preemption_reasons["big"].startswith(f"consolidate: {c.NO_MOVABLE}:")


def test_a_task_already_releasing_is_not_one_the_search_moves() -> None:
    # 'w' runs w-0 on n1 and has w-1 on its way out of n0, next to a task nobody may move.
    # Only the running task is w's to move: it goes whole (its job keeps nothing else
    # running) into the room w-1 leaves on n0, and the 8-GPU gang takes n1. Counting the
    # releasing task as a movable one would make w look like a job that cannot go whole.
    jobs = [job("w", 1), job("fixed", 1), job("big", 1, phase="Inqueue")]
    tasks = (
        running("w", [("n1", [0, 1, 2, 3]), ("n0", [4, 5, 6, 7])], gpus=4)
        + running("fixed", [("n0", [0, 1, 2, 3])], gpus=4, preemptable=False)
        + pending("big", 1, gpus=8)
    )
    tasks[1]["phase"] = "Releasing"
    d = schedule(snap(jobs, tasks))
    assert [e.task for e in d.evictions] == ["w-0"]
    assert {p.task: p.node for p in d.pipelined} == {"w-0": "n0", "big-0": "n1"}
