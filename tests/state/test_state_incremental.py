"""What a long-lived state reuses from its last cycle (patched node rows, status records, a
queue's refusal) gives the decisions of a fresh cycle on the same records."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gangsched as gs
from _carried import uncarried
from _state_cases import zoned_cluster
from gangsched.model import TaskPhase
from gangsched.scheduler import default_registry
from gangsched.session.arrays import build_cluster_arrays


def _cluster(n_nodes: int = 6, jobs: int = 10) -> dict[str, Any]:
    queues = [{"name": "q0", "weight": 1}, {"name": "q1", "weight": 1, "capability": {"cpu": 6}}]
    return zoned_cluster(n_nodes, jobs, queues=queues)


def _canon(d: gs.Decisions) -> str:
    return json.dumps(d.to_dict(), sort_keys=True)


def _fresh(state: gs.ClusterState, config: gs.Config) -> str:
    return _canon(gs.schedule(gs.Snapshot.from_dict(state.snapshot().to_dict()), config))


def test_a_cordoned_or_resized_node_patches_its_rows_and_decides_as_a_fresh_cycle() -> None:
    state = gs.ClusterState(gs.Snapshot.from_dict(_cluster()))
    config = gs.Config.default()
    state.apply(state.schedule(config))
    before = build_cluster_arrays(state.snapshot())
    n0, n1 = state.nodes["n0"], state.nodes["n1"]
    state.update_node(dataclasses.replace(n0, unschedulable=True))
    bigger = dict(n1.allocatable)
    bigger["cpu"] = bigger["cpu"] * 3
    state.update_node(dataclasses.replace(n1, allocatable=gs.model.Resources(bigger)))
    after = build_cluster_arrays(state.snapshot())
    # The static columns that did not move are shared, the patched ones are new rows.
    assert after.label_codes is before.label_codes
    assert after.unschedulable[0] and not before.unschedulable[0]
    cpu = after.spec.index("cpu")
    assert after.allocatable[1, cpu] == 3 * before.allocatable[1, cpu]
    assert np.array_equal(after.allocatable[2:], before.allocatable[2:])
    assert _canon(state.schedule(config)) == _fresh(state, config)


def test_a_relabelled_node_rebuilds_the_columns_and_decides_as_a_fresh_cycle() -> None:
    state = gs.ClusterState(gs.Snapshot.from_dict(_cluster()))
    config = gs.Config.default()
    state.apply(state.schedule(config))
    before = build_cluster_arrays(state.snapshot())
    n2 = state.nodes["n2"]
    state.update_node(dataclasses.replace(n2, labels=gs._frozen.FrozenDict({"zone": "z9"})))
    after = build_cluster_arrays(state.snapshot())
    assert after.label_codes is not before.label_codes
    assert after.label_values["zone"]["z9"] >= 0
    assert _canon(state.schedule(config)) == _fresh(state, config)


def test_an_unchanged_status_is_the_last_cycles_record_and_a_changed_one_is_new() -> None:
    state = gs.ClusterState(gs.Snapshot.from_dict(_cluster()))
    config = gs.Config.default()
    first = state.schedule(config)
    state.apply(first)
    second = state.schedule(config)
    state.apply(second)
    third = state.schedule(config)
    assert _canon(third) == _fresh(state, config)
    for name, status in third.jobs.items():
        if status == second.jobs[name]:
            assert status is second.jobs[name]
    for name, qstatus in third.queues.items():
        if qstatus == second.queues[name]:
            assert qstatus is second.queues[name]
    # A task finishing changes its job's counts: a new record with the new count.
    running = next(n for n, s in third.jobs.items() if s.running)
    task = next(t for t in state.tasks.values() if t.job == running and t.node is not None)
    state.apply(third)
    state.set_task_phase(task.name, TaskPhase.SUCCEEDED)
    fourth = state.schedule(config)
    assert fourth.jobs[running].succeeded == third.jobs[running].succeeded + 1
    assert fourth.jobs[running] is not third.jobs[running]
    assert _canon(fourth) == _fresh(state, config)


def test_a_queue_refusal_is_reported_on_every_task_of_the_template() -> None:
    # q1 may hold 6 cpu: a job of four 5-cpu tasks is refused task after task.
    data = _cluster(jobs=0)
    data["jobs"] = [{"name": "big", "min_available": 1, "phase": "Inqueue", "queue": "q1"}]
    data["tasks"] = [{"name": f"big-{k}", "job": "big", "request": {"cpu": 5}} for k in range(4)]
    config = gs.Config.default()
    d = gs.schedule(gs.Snapshot.from_dict(data), config)
    placed = {b.task for b in d.binds}
    assert len(placed) == 1
    refused = [f"big-{k}" for k in range(4) if f"big-{k}" not in placed]
    reasons = {d.task_reasons[t] for t in refused}
    assert len(reasons) == 1
    (why,) = reasons
    assert "queue 'q1' cannot take this task now" in why


def _topology_cluster() -> dict[str, Any]:
    """Racks of three and two 8-GPU nodes, a small job on one node of the first: a rack-bound
    gang of three 8-GPU tasks fits only once the small job is gone."""
    sizes = (3, 2)
    nodes = [
        {"name": f"r{r}n{n}", "allocatable": {"cpu": 64}, "gpus": {"count": 8, "model": "H100"}}
        for r, size in enumerate(sizes)
        for n in range(size)
    ]
    racks = [
        {"name": f"r{r}", "tier": 1, "members": [f"r{r}n{n}" for n in range(size)]}
        for r, size in enumerate(sizes)
    ]
    jobs = [
        {
            "name": "big",
            "min_available": 3,
            "phase": "Inqueue",
            "network_topology": {"mode": "hard", "highest_tier_allowed": 1},
        },
        {"name": "small", "min_available": 1, "phase": "Running"},
    ]
    tasks = [
        {"name": f"big-{i}", "job": "big", "request": {"cpu": 1}, "gpu_request": {"count": 8}}
        for i in range(3)
    ] + [
        {
            "name": "small-0",
            "job": "small",
            "request": {"cpu": 1},
            "gpu_request": {"count": 1},
            "node": "r0n0",
            "gpu_indices": [0],
            "phase": "Running",
        }
    ]
    return {"nodes": nodes, "hypernodes": racks, "queues": [{"name": "default"}], "jobs": jobs,
            "tasks": tasks}  # fmt: skip


def test_a_failed_gang_placement_on_unchanged_ground_is_answered_from_the_record(
    monkeypatch: Any,
) -> None:
    from gangsched.placement import GreedyPlacer

    calls = []
    place = GreedyPlacer.place

    def counting(self: GreedyPlacer, problem: Any) -> Any:
        calls.append(problem)
        return place(self, problem)

    monkeypatch.setattr(GreedyPlacer, "place", counting)
    state = gs.ClusterState(gs.Snapshot.from_dict(_topology_cluster()))
    config = gs.Config.default()
    first = state.schedule(config)
    assert not first.binds and calls  # the gang was tried, and failed
    tried = len(calls)
    second = state.schedule(config)
    assert len(calls) == tried  # nothing changed: the failure is the record's
    assert _canon(uncarried(second, first)) == _canon(first) == _fresh(state, config)
    # The small job ends: its node is whole again, the gang is tried afresh (and fits).
    state.set_task_phase("small-0", TaskPhase.SUCCEEDED)
    third = state.schedule(config)
    assert len(calls) > tried
    assert {b.task for b in third.binds} == {"big-0", "big-1", "big-2"}
    assert _canon(third) == _fresh(state, config)


def _gpu_cluster(seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    nodes = []
    for i in range(12):
        node: dict[str, Any] = {"name": f"n{i}", "allocatable": {"cpu": int(rng.integers(4, 33))}}
        if i % 4:
            node["gpus"] = {"count": int(rng.integers(1, 9)), "sharing": bool(i % 3 == 0)}
        nodes.append(node)
    jobs, tasks = [], []
    for j in range(10):
        jobs.append({"name": f"j{j}", "min_available": 1, "phase": "Inqueue"})
        for k in range(int(rng.integers(1, 4))):
            task: dict[str, Any] = {
                "name": f"j{j}-{k}",
                "job": f"j{j}",
                "request": {"cpu": int(rng.integers(1, 9))},
            }
            if j % 2:
                milli = int(rng.choice([250, 500, 1000]))
                count = 1 if milli < 1000 else int(rng.integers(1, 5))
                task["gpu_request"] = {"count": count, "milli": milli}
            tasks.append(task)
    return {"nodes": nodes, "queues": [{"name": "default"}], "jobs": jobs, "tasks": tasks}


@given(st.integers(0, 10_000))
@settings(max_examples=40, deadline=None)
def test_the_shared_full_view_fits_as_the_direct_rule_after_placements(seed: int) -> None:
    from gangsched.scheduler import open_session
    from gangsched.session.fit import FullView, resource_fit
    from gangsched.session.statement import Statement

    ssn = open_session(gs.Snapshot.from_dict(_gpu_cluster(seed)))
    view = FullView.build(ssn, ssn.changes)
    rows = np.arange(ssn.arrays.n_nodes, dtype=np.intp)
    rng = np.random.default_rng(seed)
    for _ in range(6):
        tmpl = ssn.templates[int(rng.integers(len(ssn.templates)))]
        t = next((t for t in tmpl.tasks if ssn.task_state[t] == 0), None)
        node, pipelined = ssn.best_node(tmpl)
        if t is not None and node >= 0 and not pipelined:
            stmt = Statement(ssn)
            stmt.allocate(t, node, ssn.choose_gpus(t, node, future=False))
            stmt.commit()
        view.refresh(ssn)
        for other in ssn.templates:
            direct = resource_fit(ssn, other, rows)
            shared = resource_fit(ssn, other, rows, None, view)
            assert np.array_equal(direct[0], shared[0]) and np.array_equal(direct[1], shared[1])


class _CountingQueueGate:
    """A plugin from outside the package on the ``allocatable`` point: it refuses every task
    and counts how often it is asked."""

    name = "counting-gate"
    asked = 0

    def __init__(self, arguments: object = None) -> None:
        pass

    def allocatable(self, ssn: object, queue: int, tmpl: object) -> bool:
        type(self).asked += 1
        return False


def _many_waiting() -> gs.Snapshot:
    data = _cluster(jobs=0)
    data["jobs"] = [
        {"name": f"w{j}", "min_available": 1, "phase": "Inqueue", "queue": "q1"} for j in range(4)
    ]
    data["tasks"] = [
        {"name": f"w{j}-{k}", "job": f"w{j}", "request": {"cpu": 7}}
        for j in range(4)
        for k in range(3)
    ]
    return gs.Snapshot.from_dict(data)


def test_a_builtin_queue_refusal_is_shared_by_the_jobs_of_a_request_and_worded_once() -> None:
    d = gs.schedule(_many_waiting(), gs.Config.default())
    assert not d.binds  # 7 cpu never fits q1's capability of 6
    reasons = {d.task_reasons[f"w{j}-{k}"] for j in range(4) for k in range(3)}
    assert len(reasons) == 1 and "queue 'q1' cannot take this task now" in reasons.pop()


def test_a_queue_plugin_from_elsewhere_is_asked_for_every_task() -> None:
    reg = gs.default_registry()
    reg.register_plugin(_CountingQueueGate.name, _CountingQueueGate)
    config = gs.Config.from_dict(
        {"actions": ["allocate"], "tiers": [[{"name": "gang"}], [{"name": "counting-gate"}]]},
        plugins=reg.plugins,
    )
    _CountingQueueGate.asked = 0
    d = gs.schedule(_many_waiting(), config, registry=reg)
    assert not d.binds
    # Every task of every job is asked, then asked again by the refusal's wording.
    assert _CountingQueueGate.asked == 2 * 12


class _Drain:
    """An action that evicts the running tasks its ``tasks`` argument names (a descheduler
    between allocate and the next cycle): its evictions are the only change of their nodes."""

    name = "drain"

    def __init__(self, arguments: Any) -> None:
        self.tasks = tuple(str(t) for t in arguments.get("tasks", ()))

    def execute(self, ssn: Any) -> None:
        from gangsched.session.statement import Statement
        from gangsched.session.task_states import TaskState

        stmt = Statement(ssn)
        for name in self.tasks:
            t = ssn.snapshot.task_index.get(name)
            if t is not None and ssn.task_state[t] == TaskState.RUNNING:
                stmt.evict(t, "drained")
        stmt.commit()


@pytest.mark.no_invariant_hook  # ``drain`` evicts for no preemptor, as no built-in action does
def test_a_node_freed_at_the_failed_attempts_own_cursor_wakes_the_waiting_gang() -> None:
    """The first entry after a failed attempt's cursor is the one a stale read of the cursor
    misses: here it is the eviction that frees the only node the waiting job can use, and no
    later entry names that node (the next cycle finds it as the last one left it). Retrying
    every job pipelines the job there in the next cycle; gang-aware retry must wake it too
    (reading the log from the attempt's cursor, not a step after it)."""
    reg = default_registry()
    reg.register_action("drain", _Drain)
    nodes = [{"name": n, "allocatable": {"cpu": 8, "memory": "32Gi"}} for n in ("y1", "y2")]
    snap = gs.Snapshot.from_dict({"nodes": nodes, "queues": [{"name": "q"}]})
    eight = gs.model.Resources({"cpu": 8000, "memory": 2**30})
    decided: dict[str, list[gs.Decisions]] = {}
    for retry in ("on-change", "always"):
        config = gs.Config.from_dict(
            {
                "actions": ["enqueue", "allocate", "drain", "backfill"],
                "tiers": [
                    [{"name": "priority"}, {"name": "gang"}],
                    [{"name": "predicates"}, {"name": "nodeorder"}],
                ],  # no queue limit: a-0 fails for room alone
                "configurations": {"allocate": {"retry": retry}, "drain": {"tasks": ["v-0"]}},
            },
            actions=reg.actions,
        )
        state = gs.ClusterState(snap)
        for job, node in (("v", "y1"), ("w", "y2")):
            state.add_job(
                gs.model.Job(name=job, queue="q", min_available=1, phase=gs.model.JobPhase.RUNNING),
                [gs.model.Task(name=f"{job}-0", job=job, request=eight, node=node,
                               phase=TaskPhase.RUNNING)],
            )  # fmt: skip
        state.add_job(
            gs.model.Job(name="a", queue="q", min_available=1, phase=gs.model.JobPhase.INQUEUE),
            [gs.model.Task(name="a-0", job="a", request=eight)],
        )
        out = decided[retry] = []
        for _ in range(3):
            d = state.schedule(config, registry=reg)
            out.append(d)
            state.apply(d, bound=TaskPhase.RUNNING)
    every = decided["always"]
    assert [e.task for e in every[0].evictions] == ["v-0"]  # y1 frees after a-0 failed
    assert [(p.task, p.node) for p in every[1].pipelined] == [("a-0", "y1")]
    fast = decided["on-change"]
    assert fast[0].jobs["a"].phase == every[0].jobs["a"].phase
    for mine, theirs in zip(fast, every, strict=True):
        assert mine.binds == theirs.binds
        assert mine.evictions == theirs.evictions
        assert mine.pipelined == theirs.pipelined
        assert {k: s.phase for k, s in mine.jobs.items()} == {
            k: s.phase for k, s in theirs.jobs.items()
        }
