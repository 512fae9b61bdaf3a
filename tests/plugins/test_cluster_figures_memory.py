"""drf's and overcommit's cluster total (and drf's inverse of it) pass from one opening to
the next while the nodes' allocatable array is the same object, and are read again as soon as
a node's amounts change: each opening's figures equal those worked out afresh from its own
nodes."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import gangsched as gs
from _sessions import sessions_opened
from gangsched.plugins.drf import DrfPlugin
from gangsched.plugins.overcommit import OvercommitPlugin
from gangsched.session.core import Session
from gangsched.units import PODS, cluster_total


def _snapshot() -> gs.Snapshot:
    return gs.Snapshot.from_dict(
        {
            "nodes": [
                {"name": "n1", "allocatable": {"cpu": 8, "memory": "32Gi"}},
                {"name": "n2", "allocatable": {"cpu": 4, "memory": "16Gi"}},
            ],
            "queues": [{"name": "default"}],
            "jobs": [
                {"name": "a", "min_available": 1, "phase": "Inqueue"},
                {"name": "b", "min_available": 1, "phase": "Running"},
            ],
            "tasks": [
                {"name": "a-0", "job": "a", "role": "w", "request": {"cpu": 2}},
                {
                    "name": "b-0",
                    "job": "b",
                    "role": "w",
                    "request": {"cpu": 3, "memory": "4Gi"},
                    "phase": "Running",
                    "node": "n2",
                },
            ],
        }
    )


def _plugins(ssn: Session) -> tuple[DrfPlugin, OvercommitPlugin]:
    drf, over = ssn.plugin("drf"), ssn.plugin("overcommit")
    assert isinstance(drf, DrfPlugin) and isinstance(over, OvercommitPlugin)
    return drf, over


def _afresh(ssn: Session) -> tuple[list[float], list[float], list[float]]:
    """drf's total and inverse and overcommit's idle worked out from the session's nodes."""
    a = ssn.arrays
    total = cluster_total(a.allocatable, a.spec.index(PODS))
    inverse = [1.0 / x if x >= 0.1 else 0.0 for x in total.tolist()]
    idle = (total * 1.2 - ssn.used.sum(axis=0)).tolist()
    return total.tolist(), inverse, idle


def _check(ssn: Session) -> None:
    drf, over = _plugins(ssn)
    total, inverse, idle = _afresh(ssn)
    assert drf._total.tolist() == total
    assert drf._inv_total.tolist() == inverse
    assert over._idle.tolist() == idle
    shares = [
        max([0.0, *(float(x) * inv for x, inv in zip(row, inverse, strict=True))])
        for row in ssn.job_allocated.tolist()
    ]
    assert drf.shares.tolist() == shares


def test_cluster_figures_are_taken_over_only_from_the_same_allocatable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    opened = sessions_opened(monkeypatch)
    state = gs.ClusterState(_snapshot())
    config = gs.Config.default()
    for _ in range(3):  # (the first cycle's arrays are built afresh by the second)
        state.apply(state.schedule(config))
    first, second = opened[-2:]
    for ssn in (first, second):
        _check(ssn)
    assert second.arrays.allocatable is first.arrays.allocatable
    assert _plugins(second)[0]._total is _plugins(first)[0]._total  # the same nodes: taken over
    assert not _plugins(second)[0]._total.flags.writeable
    # a node grows: its amounts are read again
    n1 = state.nodes["n1"]
    grown = dataclasses.replace(n1, allocatable=gs.Resources({**n1.allocatable, "cpu": 24_000}))
    state.update_node(grown)
    state.apply(state.schedule(config))
    third = opened[-1]
    assert third.arrays.allocatable is not second.arrays.allocatable
    _check(third)
    assert _plugins(third)[0]._total.tolist() != _plugins(second)[0]._total.tolist()
    assert float(np.asarray(_plugins(third)[0]._total)[0]) == 28_000.0
