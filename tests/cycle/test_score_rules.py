"""Every score formula is written once and every form that scores with it reads that one
statement: nodeorder's formulas (:data:`gangsched.plugins._node_score_rule.RULE`) render both
its every-row and its one-row form; DotProd's and BestFit's formulas
(:mod:`gangsched.fragmentation.policies`) are one function each that the plugins' array
path and their few-rows path both call; the GPU scorers' view reads a device's share with one
formula (:data:`gangsched.plugins._gpu_common.DEVICE_SHARE`) for every row and for one. The
dispatcher's one-row sum has no formula of its own (the chain's answers added in order, in
floats rather than in arrays, which cost more on one row): it is checked to equal the every-row
sum.

Each formula is mutated in turn: the forms must still agree with one another (a form holding
its own copy of the formula would keep the old answers and disagree) and answer differently
from the real formula (the mutation is seen), on sessions at open and after a cycle's
placements, in float and in integer arithmetic, with every node allocatable and without.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import gangsched.plugins._node_score_rule as node_score_rule
from gangsched import Config, Snapshot, open_session
from gangsched._codegen import define
from gangsched.fragmentation import policies
from gangsched.plugins import _gpu_common as gpu_common
from gangsched.plugins import nodeorder
from gangsched.plugins._gpu_scorers import BestFitPlugin, DotProdPlugin
from gangsched.plugins._node_score_rule import RULE, NodeScoreRule, node_score_source
from gangsched.scheduler import run_cycle
from gangsched.session.core import Session

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from benchmarks.common import cluster_dict

#: One mutant per formula of nodeorder's rule.
MUTANTS = {
    "least": replace(RULE, least="max({left}, 0) * 99 // {alloc}"),
    "most": replace(RULE, most="min({requested}, {alloc}) * 99 // {alloc}"),
    "mean": replace(RULE, mean="({cpu} + {memory} + 1) // 2"),
    "share": replace(RULE, share="min({requested} / {alloc}, 1.0) * 0.5"),
    "balanced": replace(RULE, balanced="floor((1.0 - sqrt({variance})) * 90.0)"),
}

#: Every nodeorder score in play (mostrequested is off by default).
_ARGUMENTS = {"mostrequested.weight": 2, "leastrequested.weight": 1, "balancedresource.weight": 3}

_CONFIG = Config.from_dict(
    {
        "actions": ["enqueue", "allocate", "backfill"],
        "tiers": [
            [{"name": "priority"}, {"name": "gang"}],
            [{"name": "drf"}, {"name": "predicates"}, {"name": "proportion"}],
            [{"name": "nodeorder", "arguments": _ARGUMENTS}, {"name": "bestfit"}],
            [{"name": "dotprod", "arguments": {"weight": 2}}],
        ],
    }
)


def _generated(rule: NodeScoreRule, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """A fresh copy of :mod:`gangsched.plugins.nodeorder`, generated from ``rule``."""
    name = f"_nodeorder_from_{abs(hash(rule))}"
    spec = importlib.util.spec_from_file_location(name, nodeorder.__file__)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    with monkeypatch.context() as m:
        m.setattr(node_score_rule, "RULE", rule)
        m.setitem(sys.modules, name, module)
        spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def sessions() -> list[Session]:
    """Sessions at open and after a cycle, with best-effort tasks (kube's non-zero
    defaults) on 40 GPU nodes."""
    out = []
    for seed in (2, 5):
        snap = Snapshot.from_dict(cluster_dict(40, 160, seed=seed, best_effort=12))
        out.append(open_session(snap, _CONFIG))
        out.append(run_cycle(snap, _CONFIG)[1])
    return out


def _every(ssn: Session) -> np.ndarray[Any, np.dtype[np.intp]]:
    return np.arange(ssn.arrays.n_nodes, dtype=np.intp)


def _nodeorder_answers(module: ModuleType, ssn: Session) -> list[float]:
    """nodeorder's scores of every template on every node, checked equal in every form:
    every row at once (in floats and in integers, with and without the allocatable guard),
    some rows, and one row at a time."""
    plugin = module.NodeOrderPlugin(_ARGUMENTS)
    every = _every(ssn)
    some = every[1::3].copy()
    out: list[float] = []
    for tmpl in ssn.templates[:40]:
        vector = plugin.node_score(ssn, tmpl, every)
        one = [float(plugin.node_score(ssn, tmpl, every[i : i + 1])[0]) for i in every]
        assert one == vector.tolist()
        assert plugin.node_score(ssn, tmpl, some).tolist() == vector[some].tolist()
        cols = plugin._columns(ssn)
        kept = (cols.exact_float, cols.all_on)
        try:
            for exact, all_on in (
                (False, kept[1]),
                (kept[0], (False, False)),
                (False, (False,) * 2),
            ):
                cols.exact_float, cols.all_on = exact, all_on
                assert plugin.node_score(ssn, tmpl, every).tolist() == vector.tolist()
        finally:
            cols.exact_float, cols.all_on = kept
        out += vector.tolist()
    return out


def test_nodeorder_forms_give_one_answer(sessions: list[Session]) -> None:
    assert node_score_rule.RULE == RULE
    for ssn in sessions:
        _nodeorder_answers(nodeorder, ssn)


@pytest.mark.parametrize("formula", sorted(MUTANTS))
def test_a_mutated_score_formula_changes_both_forms_alike(
    formula: str, sessions: list[Session], monkeypatch: pytest.MonkeyPatch
) -> None:
    mutant = _generated(MUTANTS[formula], monkeypatch)
    assert mutant._score_row is not nodeorder._score_row
    changed = [_nodeorder_answers(mutant, ssn) for ssn in sessions]
    assert changed != [_nodeorder_answers(nodeorder, ssn) for ssn in sessions]


def test_every_formula_of_the_rule_is_mutated() -> None:
    assert set(MUTANTS) == set(NodeScoreRule.__dataclass_fields__)
    for name, mutant in MUTANTS.items():
        assert getattr(mutant, name) != getattr(RULE, name)
        assert node_score_source(mutant) != node_score_source(RULE)


# ---------------------------------------------------------------- DotProd and BestFit


def _halved_cpu(formula: Callable[..., Any]) -> Callable[..., Any]:
    """``formula`` (``(pod, free_cpu, idle)``) as if a node had half its free CPU (arrays and
    numbers alike)."""

    def mutant(pod: Any, free_cpu: Any, idle: Any) -> Any:
        return formula(pod, free_cpu * 0.5, idle)

    return mutant


def _policy_answers(plugin: Any, ssn: Session) -> Iterator[list[float]]:
    """The plugin's scores of every template on every node, checked equal in its array form
    (more rows than the few-rows path takes) and its few-rows form (one row, a few rows)."""
    every = _every(ssn)
    assert every.size > 32  # the array path
    for tmpl in ssn.templates[:40]:
        vector = plugin.node_score(ssn, tmpl, every)
        one = [float(plugin.node_score(ssn, tmpl, every[i : i + 1])[0]) for i in every]
        assert one == vector.tolist()
        few = every[::7].copy()
        assert plugin.node_score(ssn, tmpl, few).tolist() == vector[few].tolist()
        yield vector.tolist()


@pytest.mark.parametrize(
    ("plugin", "formula"), [(DotProdPlugin, "_dotprod"), (BestFitPlugin, "_bestfit")]
)
def test_a_mutated_policy_formula_changes_both_forms_alike(
    plugin: Any, formula: str, sessions: list[Session], monkeypatch: pytest.MonkeyPatch
) -> None:
    real = [list(_policy_answers(plugin({}), ssn)) for ssn in sessions]
    monkeypatch.setattr(policies, formula, _halved_cpu(getattr(policies, formula)))
    changed = [list(_policy_answers(plugin({}), ssn)) for ssn in sessions]
    assert changed != real


# ---------------------------------------------------------------- the dispatcher's sum


def test_the_one_row_sum_is_the_every_row_sum(sessions: list[Session]) -> None:
    """Three scorers in two tiers: the one-row sum is the every-row sum's, bit for bit."""
    for ssn in sessions:
        every = _every(ssn)
        for tmpl in ssn.templates[:20]:
            summed = ssn.points.node_score(tmpl, every)
            assert [ssn.points.node_score_one(tmpl, every[i : i + 1]) for i in every] == (
                summed.tolist()
            )
            assert summed.any()


# ---------------------------------------------------------------- the GPU scorers' view


@pytest.fixture(scope="module")
def odd_devices() -> Session:
    """A cycle's session on nodes whose devices hold 1000, 500 and 2000 milli-GPU."""
    data = cluster_dict(40, 160, seed=4)
    busy = {t.get("node") for t in data["tasks"]}
    idle = [n for n in data["nodes"] if n["name"] not in busy and n.get("gpus")]
    for node, milli in zip(idle, (500, 2000, 500, 2000), strict=False):
        node["gpus"] = {**node["gpus"], "milli": milli, "sharing": True}
    return run_cycle(Snapshot.from_dict(data), _CONFIG)[1]


def test_the_view_reads_devices_alike_for_every_row_and_one(
    odd_devices: Session, sessions: list[Session]
) -> None:
    """The GPU scorers' view of every node and of one node read each device's share with
    the one formula, on devices of 500, 1000 and 2000 milli-GPU."""
    assert {500, 1000, 2000} <= set(odd_devices.arrays.gpu_capacity.tolist())
    for ssn in (odd_devices, *sessions):
        every = _every(ssn)
        view = gpu_common._view(ssn, every)
        for i in every.tolist():
            cpu, mem, dev = gpu_common._row_numbers(ssn, i)
            count = int(view.gpu_count[i])
            assert (cpu, mem) == (int(view.free_cpu[i]), int(view.free_mem[i]))
            assert dev[:count] == view.gpu_free[i, :count].tolist()


@pytest.mark.parametrize(
    "formula",
    [
        gpu_common.DEVICE_SHARE,
        "max({free}, 0) * 999 // {capacity}",
        "max({free}, 1) * 1000 // {capacity}",
        "max({free}, 0) * 1000 // {capacity} // 2",
    ],
)
def test_a_mutated_device_share_changes_both_forms_alike(formula: str) -> None:
    made = define(gpu_common.device_share_source(formula), {"np": np}, "device shares test")
    rng = np.random.default_rng(3)
    cap = np.array([[500], [1000], [2000], [1000]], dtype=np.int64)
    table = rng.integers(-300, 2100, size=(4, 8)).astype(np.int64)
    every = made["_device_shares"](table.copy(), cap).tolist()
    one = [
        made["_device_shares_row"](r, int(c))
        for r, c in zip(table.tolist(), cap[:, 0].tolist(), strict=True)
    ]
    assert every == one
    real = define(gpu_common.device_share_source(gpu_common.DEVICE_SHARE), {"np": np}, "real")
    assert (every == real["_device_shares"](table.copy(), cap).tolist()) == (
        formula == gpu_common.DEVICE_SHARE
    )
