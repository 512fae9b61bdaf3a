"""Property tests of the scheduling core's invariants on generated snapshots.

Examples per property: ``GANGSCHED_EXAMPLES`` (default 150) — with three configs that is 450
generated clusters per invariant run in the default suite.
"""

from __future__ import annotations

import json
import os

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangsched.config import Config
from gangsched.model.snapshot import Snapshot
from gangsched.scheduler import open_session, schedule
from gangsched.session.core import TaskState
from gangsched.session.statement import Statement
from gangsched.testing.invariants import (
    check_capacity,
    check_deterministic,
    check_gang_atomicity,
    check_known_objects,
    check_queue_capability,
    check_reasons,
    check_snapshot_unmutated,
)
from gangsched.testing.strategies import snapshots

EXAMPLES = int(os.environ.get("GANGSCHED_EXAMPLES", "150"))

CONFIGS = {
    "default": Config.default(),
    "binpack": Config.from_dict(
        {
            "actions": ["enqueue", "allocate", "backfill"],
            "tiers": [
                [{"name": "priority"}, {"name": "gang"}, {"name": "conformance"}],
                [
                    {"name": "drf"},
                    {"name": "predicates"},
                    {"name": "proportion"},
                    {"name": "binpack"},
                ],
            ],
        }
    ),
    "gang-only": Config.from_dict(
        {
            "actions": ["allocate", "backfill"],
            "tiers": [[{"name": "gang"}], [{"name": "predicates"}, {"name": "nodeorder"}]],
        }
    ),
}

SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@SETTINGS
@given(
    snapshot=snapshots(max_nodes=6, max_jobs=5, max_tasks_per_job=5),
    config_name=st.sampled_from(sorted(CONFIGS)),
)
def test_core_invariants_hold(snapshot: Snapshot, config_name: str) -> None:
    config = CONFIGS[config_name]
    before = snapshot.to_dict()
    decisions = check_deterministic(lambda s: schedule(s, config), snapshot)
    check_snapshot_unmutated(before, snapshot)
    if config_name == "gang-only":
        # no queue plugin: queue capabilities are not enforced by this config
        for check in (check_known_objects, check_capacity, check_gang_atomicity, check_reasons):
            check(snapshot, decisions)
    else:
        # proportion is flat: it caps each queue by its own capability, not its parents'
        for check in (check_known_objects, check_capacity, check_gang_atomicity, check_reasons):
            check(snapshot, decisions)
        check_queue_capability(snapshot, decisions, hierarchical=False)


@SETTINGS
@given(snapshot=snapshots(max_nodes=5, max_jobs=4, max_tasks_per_job=4), data=st.data())
def test_discarded_statement_restores_every_array(snapshot: Snapshot, data: st.DataObject) -> None:
    ssn = open_session(snapshot)
    names = (
        "used",
        "releasing",
        "pipelined",
        "gpu_used",
        "gpu_releasing",
        "gpu_pipelined",
        "task_state",
        "task_node",
        "job_allocated",
        "queue_allocated",
        "job_count",
    )
    before = {n: getattr(ssn, n).copy() for n in names}
    roles_before = {k: v.copy() for k, v in ssn.role_count.items()}
    gpus_before = list(ssn.task_gpus)
    stmt = Statement(ssn)
    pending = [int(t) for t in np.flatnonzero(ssn.task_state == TaskState.PENDING)]
    for t in data.draw(
        st.lists(st.sampled_from(pending), unique=True, max_size=6) if pending else st.just([])
    ):
        tmpl = ssn.templates[int(ssn.template_of[t])]
        node, pipelined = ssn.best_node(tmpl)
        if node < 0:
            continue
        gpus = ssn.choose_gpus(t, node, future=pipelined)
        (stmt.pipeline if pipelined else stmt.allocate)(t, node, gpus)
    running = [int(t) for t in np.flatnonzero(ssn.task_state == TaskState.RUNNING)]
    for t in data.draw(
        st.lists(st.sampled_from(running), unique=True, max_size=3) if running else st.just([])
    ):
        stmt.evict(t, "test")
    stmt.discard()
    for n in names:
        assert np.array_equal(getattr(ssn, n), before[n]), n
    assert {k: v.tolist() for k, v in ssn.role_count.items()} == {
        k: v.tolist() for k, v in roles_before.items()
    }
    assert ssn.task_gpus == gpus_before


@settings(
    max_examples=max(20, EXAMPLES // 5), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(snapshot=snapshots(max_nodes=4, max_jobs=3))
def test_decisions_json_is_stable_across_round_trip(snapshot: Snapshot) -> None:
    d1 = schedule(snapshot)
    d2 = schedule(Snapshot.from_dict(json.loads(json.dumps(snapshot.to_dict()))))
    assert json.dumps(d1.to_dict(), sort_keys=True) == json.dumps(d2.to_dict(), sort_keys=True)
