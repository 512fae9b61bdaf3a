"""``ClusterState`` fed records of another cluster: dangling references, duplicate names,
removals of records in use, wrong record types.

Each operation takes its record from the state's own snapshot or from a second, unrelated
one, so jobs name queues the state lacks, tasks name unknown jobs and nodes, nodes arrive
twice. A refused operation raises :class:`SnapshotError` and leaves the state as it was;
after the sequence, ``state.schedule`` equals a cycle on the state's snapshot read back from
its interchange form, and the task listings by job and node match the tasks' own fields.
"""

from __future__ import annotations

import dataclasses
import json
import random
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _carried import uncarried
from _preemption_helpers import BOTH
from gangsched import ClusterState, Snapshot, schedule
from gangsched.errors import SnapshotError
from gangsched.model import TaskPhase
from gangsched.testing import strategies as gst

CONFIG = BOTH  # Volcano's CI tiers, every preemption-related action on
PHASES = [p.value for p in TaskPhase]


def _form(state: ClusterState) -> str:
    return json.dumps(state.snapshot().to_dict(), sort_keys=True)


def _decisions(state_or_snap: Any) -> str:
    return json.dumps(state_or_snap.to_dict(), sort_keys=True)


def _operation(state: ClusterState, rng: random.Random, own: Snapshot, other: Snapshot) -> Any:
    """One operation, as a thunk, its record from ``own`` or ``other``."""
    src = rng.choice([own, other])

    def pick(seq: Any) -> Any:
        seq = list(seq)
        return rng.choice(seq) if seq else None

    ops: list[Any] = []
    if src.nodes:
        n = pick(src.nodes)
        ops += [lambda: state.add_node(n), lambda: state.update_node(n)]
    nodes = [*sorted(state.nodes), "absent"]
    node_name = pick(nodes)
    ops += [lambda: state.remove_node(node_name), lambda: state.cordon(node_name)]
    if src.queues:
        q = pick(src.queues)
        ops += [lambda: state.add_queue(q), lambda: state.update_queue(q)]
        ops.append(lambda: state.update_node(q))  # a queue where a node belongs
    queue_name = pick([*sorted(state.queues), "absent", "root"])
    ops.append(lambda: state.remove_queue(queue_name))
    if src.jobs:
        j = pick(src.jobs)
        members = [t for t in src.tasks if t.job == j.name]
        ops += [lambda: state.add_job(j, members), lambda: state.update_job(j)]
    job_name = pick([*sorted(state.jobs), "absent"])
    with_tasks = rng.random() < 0.5
    ops.append(lambda: state.remove_job(job_name, with_tasks=with_tasks))
    if src.tasks:
        t = pick(src.tasks)
        moved = dataclasses.replace(t, job=pick([*sorted(state.jobs), "absent"]))
        ops += [
            lambda: state.add_task(t),
            lambda: state.update_task(t),
            lambda: state.update_task(moved),
        ]
    task_names = [*sorted(state.tasks), *(t.name for t in other.tasks), "absent"]
    task_name = pick(task_names)
    phase = pick(PHASES)
    phase_node = pick([*nodes, None, None])
    gpus = pick([None, (), (0,), (0, 1), (7,)])
    ops += [
        lambda: state.remove_task(task_name),
        lambda: state.set_task_phase(task_name, phase, node=phase_node, gpu_indices=gpus),
    ]
    if src.hypernodes:
        h = pick(src.hypernodes)
        ops += [lambda: state.add_hypernode(h), lambda: state.update_hypernode(h)]
    hn_name = pick([*sorted(state.hypernodes), "absent"])
    ops.append(lambda: state.remove_hypernode(hn_name))
    return pick(ops)


@settings(max_examples=25, suppress_health_check=[HealthCheck.too_slow])
@given(
    gst.snapshots(max_nodes=5, max_jobs=5, max_tasks_per_job=3, max_queues=3),
    gst.snapshots(max_nodes=5, max_jobs=5, max_tasks_per_job=3, max_queues=3),
    st.randoms(use_true_random=False),
)
def test_foreign_records_are_refused_cleanly_and_cycles_match(
    own: Snapshot, other: Snapshot, rng: random.Random
) -> None:
    state = ClusterState(own)
    for step in range(30):
        if step % 10 == 9:
            decisions = state.schedule(CONFIG)
            fresh = schedule(Snapshot.from_dict(state.snapshot().to_dict()), CONFIG)
            assert _decisions(uncarried(decisions, fresh)) == _decisions(fresh)
            state.apply(decisions)
            continue
        before = _form(state)
        op = _operation(state, rng, own, other)
        try:
            op()
        except SnapshotError:
            assert _form(state) == before
    snap = state.snapshot()
    assert _form(ClusterState(Snapshot.from_dict(snap.to_dict()))) == _form(state)
    for job in state.jobs:
        assert {t.name for t in state.tasks_of(job)} == {t.name for t in snap.tasks if t.job == job}
    for node in state.nodes:
        assert {t.name for t in state.tasks_on(node)} == {
            t.name for t in snap.tasks if t.node == node
        }
