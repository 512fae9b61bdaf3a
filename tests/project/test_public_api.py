"""The README's and docs' examples, run as tests; the public API surface."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import numpy.typing as npt
import pytest

import gangsched as gs
from gangsched.session.arrays import TaskTemplate
from gangsched.session.core import Session


def _readme_snapshot() -> gs.Snapshot:
    nodes = [
        gs.Node(name=f"n{i}", allocatable={"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": 8})
        for i in range(4)
    ]
    job = gs.Job(name="train", queue="default", min_available=8, phase="Inqueue")
    tasks = [
        gs.Task(name=f"train-{i}", job="train", request={"cpu": "8", "nvidia.com/gpu": 1})
        for i in range(8)
    ]
    return gs.Snapshot(nodes=nodes, queues=[gs.Queue(name="default")], jobs=[job], tasks=tasks)


def test_readme_example() -> None:
    out = gs.schedule(_readme_snapshot())
    assert len(out.binds) == 8
    assert out.jobs["train"].phase == "Running"
    assert out.jobs["train"].reason == "Scheduled"
    # least-requested spreads the replicas: two per node
    assert sorted({b.node for b in out.binds}) == ["n0", "n1", "n2", "n3"]


class PreferEvenNodes:
    name = "prefer-even"

    def __init__(self, arguments: Mapping[str, object]) -> None:
        self.weight = float(str(arguments.get("weight", 10)))

    def node_score(
        self, ssn: Session, tmpl: TaskTemplate, rows: npt.NDArray[np.intp]
    ) -> npt.NDArray[np.float64]:
        return np.where(rows % 2 == 1, self.weight, 0.0)


def test_user_plugin_from_docs_is_registered_and_used() -> None:
    reg = gs.default_registry()
    reg.register_plugin("prefer-even", PreferEvenNodes)
    with pytest.raises(gs.ConfigError):
        reg.register_plugin("prefer-even", PreferEvenNodes)
    config = gs.Config.from_dict(
        {
            "actions": ["allocate"],
            "tiers": [[{"name": "gang"}], [{"name": "prefer-even", "arguments": {"weight": 5}}]],
        },
        plugins=reg.plugins,
    )
    out = gs.schedule(_readme_snapshot(), config, registry=reg)
    # n1 and n3 tie at 5 points; ties go to the lower node index, and n1 has room for all 8
    assert {b.node for b in out.binds} == {"n1"}
    with pytest.raises(gs.ConfigError, match="prefer-even"):
        gs.Config.from_dict({"actions": ["allocate"], "tiers": [[{"name": "prefer-even"}]]})


def test_schedule_rejects_a_non_snapshot() -> None:
    with pytest.raises(gs.ConfigError, match="snapshot"):
        gs.schedule({"nodes": []})  # type: ignore[arg-type]


def test_explain_names_every_node_and_rejects_unknown_or_running_tasks() -> None:
    snap = _readme_snapshot()
    ex = gs.explain(snap, "train-0")
    assert [n.node for n in ex.nodes] == ["n0", "n1", "n2", "n3"]
    assert all(n.fits for n in ex.nodes)
    assert ex.best == "n0"
    assert set(ex.nodes[0].scores) == {"nodeorder"}
    with pytest.raises(gs.ConfigError, match="nope"):
        gs.explain(snap, "nope")


def test_config_without_tiers_runs_with_no_plugins() -> None:
    # No plugin at all: no gang rule, no queue rule; allocate still places tasks where they fit.
    config = gs.Config.from_dict({"actions": ["allocate"], "tiers": []})
    out = gs.schedule(_readme_snapshot(), config)
    assert len(out.binds) == 8
