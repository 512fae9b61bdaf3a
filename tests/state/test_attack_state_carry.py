"""Cycle after cycle on one ``ClusterState`` while its nodes change under the kept
evaluations: a node replaced by another of the same name (new labels, taints, GPU model and
devices, allocatable), cordoned and uncordoned, tasks finishing. Each cycle, which lends the
last session's evaluations, selector / toleration / GPU-model masks and kept views to the next,
must equal a cycle on the state's snapshot read back from its interchange form."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _carried import uncarried
from gangsched import ClusterState, Config, Snapshot, schedule
from gangsched.errors import SnapshotError
from gangsched.testing import strategies as gst

_FIRST = [{"name": "priority"}, {"name": "gang"}, {"name": "conformance"}]
_SECOND = [{"name": "drf"}, {"name": "predicates"}, {"name": "proportion"}]
CONFIGS = {
    "nodeorder": [{"name": "nodeorder"}, {"name": "binpack"}],
    "gpu": [{"name": "bestfit"}, {"name": "gpu-packing"}, {"name": "gpu-clustering"}],
    "fgd": [{"name": "fgd"}, {"name": "dotprod"}],
}


def _config(name: str) -> Config:
    return Config.from_dict(
        {
            "actions": ["enqueue", "allocate", "preempt", "reclaim", "backfill"],
            "tiers": [_FIRST, _SECOND, CONFIGS[name]],
        }
    )


def _form(d: Any) -> str:
    return json.dumps(d.to_dict(), sort_keys=True)


@st.composite
def _node_changes(draw: st.DrawFn, names: list[str]) -> list[tuple[str, Any]]:
    """Per cycle: a replacement record for one node (same name), or a cordon switch."""
    out: list[tuple[str, Any]] = []
    for _ in range(draw(st.integers(1, 4))):
        name = draw(st.sampled_from(names))
        if draw(st.booleans()):
            out.append(("update", draw(gst.nodes(name))))
        else:
            out.append(("cordon", (name, draw(st.booleans()))))
    return out


@pytest.mark.parametrize("config_name", sorted(CONFIGS))
@settings(max_examples=12)
@given(
    snap=gst.snapshots(max_nodes=5, max_jobs=5, max_tasks_per_job=3),
    data=st.data(),
)
def test_cycles_with_replaced_nodes_match_fresh_cycles(
    config_name: str, snap: Snapshot, data: st.DataObject
) -> None:
    config = _config(config_name)
    state = ClusterState(snap)
    names = [n.name for n in snap.nodes]
    for _cycle in range(4):
        decisions = state.schedule(config)
        fresh = schedule(Snapshot.from_dict(state.snapshot().to_dict()), config)
        assert _form(uncarried(decisions, fresh)) == _form(fresh)
        state.apply(decisions)
        for task in list(state.tasks.values()):
            if task.phase.value == "Releasing":
                state.set_task_phase(task.name, "Failed")
            elif task.phase.value == "Bound" and data.draw(st.booleans()):
                state.set_task_phase(task.name, "Running")
        for kind, change in data.draw(_node_changes(names)):
            try:
                if kind == "update":
                    old = state.nodes[change.name]
                    state.update_node(dataclasses.replace(change, name=old.name))
                else:
                    state.cordon(*change)
            except SnapshotError:
                pass  # the node's tasks no longer fit it: refused, the state unchanged
