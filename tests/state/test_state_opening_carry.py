"""A cycle's opening carried from the last cycle equals one worked out from scratch.

``Session.open`` with the last session (as :class:`~gangsched.ClusterState` opens each cycle)
takes over what holds for the records both snapshots share, found by identity: the per-task
columns (state, node, job, request), the job records' rows, the templates of the pending
tasks and their attributes, the pod label keys; the dispatcher's wiring is resolved once per
configuration of plugin types. Here every cycle of a state driven through informer changes
of every kind (records replaced, tasks moved between states, jobs added and finished, queues
and role minimums changed, nodes removed and added, pod constraints appearing) is opened a
second time from scratch, on the same snapshot read back from its interchange form (new
records: nothing to carry), and the two openings must agree on every column, counter,
template, fair-share figure and note. ``GANGSCHED_SOAK=1`` explores random examples.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gangsched import ClusterState, Config, Job, Snapshot, Task, TaskPhase
from gangsched.errors import GangschedError
from gangsched.framework.registry import Registry
from gangsched.model import Queue
from gangsched.session.core import Session
from gangsched.session.task_states import same_records

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from benchmarks._openb_jobs import openb_jobs_cluster_dict

CONFIG = Config.default()
SOAK = os.environ.get("GANGSCHED_SOAK") == "1"
KINDS = (
    "cordon",
    "remove",
    "add",
    "add_job",
    "finish",
    "bind",
    "run",
    "release",
    "pend",
    "retask",
    "rejob",
    "roles",
    "minimum",
    "queue",
    "pod",
)

_TEMPLATE_FIELDS = (
    "index",
    "job",
    "role",
    "tasks",
    "gpu_count",
    "gpu_milli",
    "gpu_models",
    "tolerations",
    "best_effort",
    "priority",
    "key",
    "shape",
    "node_affinity",
)


def _plugin_figures(ssn: Session) -> dict[str, Any]:
    """What the plugins worked out at open, as plain values."""
    out: dict[str, Any] = {"notes": dict(ssn.job_reasons)}
    fair = ssn.plugin("proportion")
    if fair is not None:
        for name in ("deserved", "real_capability", "request", "inqueue", "elastic", "shares"):
            out[name] = getattr(fair, name).tolist()
        out["limits"] = fair._limit.tolist()
    if ssn.queue_deserved is not None:
        out["queue_deserved"] = ssn.queue_deserved.tolist()
    return out


def _wiring(ssn: Session) -> dict[str, Any]:
    """Which plugins (by name) serve each point, per tier, and the flags."""
    points = ssn.points
    served = {
        name: [[p.name for p in tier] for tier in tiers] for name, tiers in points._plugins.items()
    }
    return {"served": served, "flags": dict(points._flags)}


def assert_same_opening(carried: Session, fresh: Session) -> None:
    """Every column, counter, template and figure of the opening agree."""
    a, b = carried, fresh
    for name in (
        "state",
        "node",
        "job",
        "req",
        "job_queue",
        "job_min",
        "job_roles",
        "job_minimums",
    ):
        assert np.array_equal(getattr(a.columns, name), getattr(b.columns, name)), name
    for name in ("roles", "devices"):
        assert getattr(a.columns, name).tolist() == getattr(b.columns, name).tolist(), name
    assert a.columns.job_phase == b.columns.job_phase
    for name in (
        "task_state",
        "task_node",
        "task_job",
        "task_req",
        "job_queue",
        "job_min",
        "job_count",
        "job_allocated",
        "queue_allocated",
        "template_of",
        "used",
        "releasing",
        "pipelined",
        "gpu_used",
        "gpu_releasing",
        "gpu_pipelined",
    ):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    assert a.task_gpus == b.task_gpus
    assert a.job_phase == b.job_phase
    assert list(a.role_count) == list(b.role_count)  # the same pairs, in the same order
    assert all(np.array_equal(a.role_count[k], b.role_count[k]) for k in b.role_count)
    assert a.pod_label_keys == b.pod_label_keys
    assert len(a.templates) == len(b.templates)
    for ta, tb in zip(a.templates, b.templates, strict=True):
        for name in _TEMPLATE_FIELDS:
            assert getattr(ta, name) == getattr(tb, name), (ta.index, name)
        assert dict(ta.node_selector) == dict(tb.node_selector)
        assert np.array_equal(ta.request, tb.request)
        assert not ta.request.flags.writeable
    assert _plugin_figures(a) == _plugin_figures(b)
    assert _wiring(a) == _wiring(b)


@contextlib.contextmanager
def compared_openings() -> Iterator[list[int]]:
    """Within: each cycle a session opens with the last one is opened again from scratch on
    its snapshot read back from the interchange form, and the two compared. Yields a list
    that counts the cycles compared."""
    opened: list[int] = []
    original = Session.open.__func__  # type: ignore[attr-defined]

    def open_and_compare(
        cls: type[Session],
        snapshot: Snapshot,
        config: Config,
        registry: Registry,
        *,
        previous: Session | None = None,
    ) -> Session:
        ssn: Session = original(cls, snapshot, config, registry, previous=previous)
        if previous is not None:
            again = Snapshot.from_dict(snapshot.to_dict())
            assert_same_opening(ssn, original(cls, again, config, registry))
            opened.append(1)
        return ssn

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Session, "open", classmethod(open_and_compare))
        yield opened


def _state(n_nodes: int, n_jobs: int, seed: int) -> ClusterState:
    return ClusterState(Snapshot.from_dict(openb_jobs_cluster_dict(n_jobs, seed, n_nodes)))


def _pick(items: list[Any], k: int) -> Any:
    return items[k % len(items)] if items else None


def _change(state: ClusterState, kind: str, a: int, b: int, serial: int) -> None:
    """One informer change (a no-op when it does not apply to the state now)."""
    nodes = list(state.nodes.values())
    node = _pick(nodes, a)
    tasks = list(state.tasks.values())
    with contextlib.suppress(GangschedError):  # a change the state refuses: none made
        if kind == "cordon" and node is not None:
            state.cordon(node.name, not node.unschedulable)
        elif kind == "remove" and node is not None and len(nodes) > 2:
            if not any(t.node == node.name for t in tasks):
                state.remove_node(node.name)
        elif kind == "add" and node is not None:
            state.add_node(dataclasses.replace(node, name=f"extra-{serial}", unschedulable=False))
        elif kind in ("add_job", "pod"):
            d = openb_jobs_cluster_dict(1, b, n_nodes=len(nodes) or 1)
            job = next(j for j in d["jobs"] if j["phase"] == "Inqueue")
            name = f"new-{serial}"
            extra: dict[str, Any] = {}
            if kind == "pod":  # a pod constraint appears: the templates gain their pod part
                extra = {
                    "labels": {"app": name},
                    "pod_anti_affinity": {
                        "required": [
                            {
                                "topology_key": "kubernetes.io/hostname",
                                "label_selector": {"match_labels": {"app": name}},
                            }
                        ]
                    },
                }
            new_tasks = [
                Task.from_dict({**t, "name": f"{name}-{k}", "job": name, **extra})
                for k, t in enumerate(x for x in d["tasks"] if x["job"] == job["name"])
            ]
            state.add_job(
                Job.from_dict({**job, "name": name, "creation": 10_000 + serial}), new_tasks
            )
        elif kind == "finish":
            held = sorted({t.job for t in tasks if t.node is not None})
            if held:
                state.remove_job(_pick(held, a), with_tasks=True)
        elif kind == "bind" and node is not None:
            task = _pick([t for t in tasks if t.phase is TaskPhase.PENDING], b)
            if task is not None:
                gpus = task.gpu_request.count if task.gpu_request is not None else 0
                state.update_task(
                    dataclasses.replace(
                        task, phase=TaskPhase.BOUND, node=node.name, gpu_indices=tuple(range(gpus))
                    )
                )
        elif kind in ("run", "release", "pend"):
            phase = {"run": TaskPhase.RUNNING, "release": TaskPhase.RELEASING}.get(
                kind, TaskPhase.PENDING
            )
            task = _pick([t for t in tasks if t.node is not None], a)
            if task is not None:
                state.set_task_phase(task.name, phase)
        elif kind == "retask":  # the same pending task, another record (another priority)
            task = _pick([t for t in tasks if t.phase is TaskPhase.PENDING], b)
            if task is not None:
                state.update_task(dataclasses.replace(task, priority=task.priority + 1 + a % 3))
        elif kind in ("rejob", "roles", "minimum"):
            job = _pick(list(state.jobs.values()), b)
            if job is not None and kind == "rejob":
                state.update_job(dataclasses.replace(job, priority=job.priority + 1))
            elif job is not None and kind == "minimum":
                state.update_job(dataclasses.replace(job, min_resources={"cpu": 1 + a % 4}))
            elif job is not None:
                roles = {t.role for t in tasks if t.job == job.name}
                state.update_job(
                    dataclasses.replace(job, min_task_member={r: 1 for r in sorted(roles)})
                )
        elif kind == "queue":
            queue: Queue = _pick(list(state.queues.values()), a)
            if queue is not None:
                state.update_queue(dataclasses.replace(queue, weight=1 + (queue.weight + b) % 7))


_CHANGES = st.lists(
    st.tuples(st.sampled_from(KINDS), st.integers(0, 63), st.integers(0, 63)), max_size=8
)


@settings(max_examples=300 if SOAK else 25, deadline=None)
@given(
    n_nodes=st.integers(4, 14),
    n_jobs=st.integers(3, 24),
    seed=st.integers(0, 2**16),
    apply_first=st.booleans(),
    rounds=st.lists(_CHANGES, min_size=1, max_size=3),
)
@example(
    n_nodes=8, n_jobs=12, seed=3, apply_first=True,
    rounds=[[("retask", 0, 1), ("pend", 2, 0)], [("pod", 0, 5), ("queue", 1, 2)]],
)  # fmt: skip
@example(
    n_nodes=10, n_jobs=16, seed=7, apply_first=True,
    rounds=[
        [("remove", 3, 0), ("add", 1, 0), ("rejob", 0, 2)],
        [("roles", 0, 4), ("finish", 1, 0)],
    ],
)  # fmt: skip
def test_an_opening_carried_from_the_last_cycle_equals_one_from_scratch(
    n_nodes: int,
    n_jobs: int,
    seed: int,
    apply_first: bool,
    rounds: list[list[tuple[str, int, int]]],
) -> None:
    state = _state(n_nodes, n_jobs, seed)
    with compared_openings() as opened:
        first = state.schedule(CONFIG)
        if apply_first:
            state.apply(first)
        serial = 0
        for changes in rounds:
            for kind, a, b in changes:
                serial += 1
                _change(state, kind, a, b, serial)
            state.apply(state.schedule(CONFIG))
    assert len(opened) == len(rounds)


@pytest.mark.parametrize(
    "kind",
    [
        "retask",
        "pend",
        "release",
        "rejob",
        "roles",
        "minimum",
        "queue",
        "pod",
        "remove",
        "add",
        "finish",
    ],
)
def test_each_kind_of_change_is_seen_by_the_next_opening(kind: str) -> None:
    """One change of each kind between two cycles of a busy state: the carried opening still
    equals one from scratch (each kind replaces the records one carried part reads)."""
    state = _state(10, 20, 11)
    with compared_openings() as opened:
        state.apply(state.schedule(CONFIG))
        for k in range(3):
            _change(state, kind, k, 2 * k + 1, k)
            state.apply(state.schedule(CONFIG))
    assert len(opened) == 3


def test_same_records_matches_identity_not_equality() -> None:
    """Equal records that are other objects are not the same record."""
    task = Task.from_dict({"name": "t", "job": "j", "request": {"cpu": 1}})
    twin = Task.from_dict({"name": "t", "job": "j", "request": {"cpu": 1}})
    assert task == twin and task is not twin
    old = np.array([id(task), id(object)], dtype=np.uint64)
    now = np.array([id(twin), id(object), id(task)], dtype=np.uint64)
    assert same_records(old, now).tolist() == [-1, 1, 0]
    assert same_records(old[:0], now).tolist() == [-1, -1, -1]
