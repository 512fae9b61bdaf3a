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

import math
import sys
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import gangsched.plugins._node_score_rule as node_score_rule
from _regenerated import regenerated
from gangsched import Config, Snapshot, open_session
from gangsched._codegen import define
from gangsched.fragmentation import PodRequest, policies
from gangsched.framework import dispatch
from gangsched.framework.dispatch import Fold
from gangsched.plugins import _gpu_common as gpu_common
from gangsched.plugins import _gpu_scorers, fgd_scores, nodeorder
from gangsched.plugins._gpu_scorers import BestFitPlugin, DotProdPlugin, GpuPackingPlugin
from gangsched.plugins._node_score_rule import RULE, NodeScoreRule, node_score_source
from gangsched.plugins.fgd_scores import FgdPlugin
from gangsched.scheduler import run_cycle
from gangsched.session.core import Session
from gangsched.session.fit_rule import RULE as FIT_RULE
from gangsched.session.fit_rule import TIGHTEST, study_fit_source

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
    return regenerated(nodeorder, node_score_rule, rule, monkeypatch)


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


# ---------------------------------------------------------------- the GPU scorers' answers

#: Mutants of the finishing formulas (each changes some answer on the tables below).
FINISH_MUTANTS = [
    gpu_common.FINISH,
    "where({fits} & isfinite({value}), {value}, 0.0) * {weight} * 0.5",
    "where({fits}, {value}, 0.0) * {weight}",
    "where(isfinite({value}), {value}, 0.0) * {weight}",
]
TRUNCATED_MUTANTS = [
    gpu_common.FINISH_TRUNCATED,
    "where({fits}, floor({raw}), 0.0) * {weight}",
    "where({fits}, trunc({raw}), 1.0) * {weight}",
    "where({fits}, {raw}, 0.0) * {weight}",
]


def _finishing(
    finish: str, truncated: str, scored: str = gpu_common.FINISH_SCORED
) -> dict[str, Callable[..., Any]]:
    source = gpu_common.finish_source(finish, truncated, scored)
    return define(source, {"np": np, "math": math}, "GPU scorer answers test")


def _bits(values: Any) -> list[str]:
    """Each float's exact value and sign (``-0.0`` is not ``0.0``; NaN is NaN)."""
    return [float(x).hex() for x in values]


def _finished(made: dict[str, Callable[..., Any]]) -> tuple[list[str], list[str]]:
    """Both formulas' answers on values at, around and between whole numbers (negative ones,
    non-numbers among them), in every form, checked equal; returns the answers."""
    rng = np.random.default_rng(11)
    n = 64
    fits = rng.random(n) < 0.7
    value = np.round(rng.normal(0.0, 40.0, n), 1)
    value[::9] = -np.inf
    value[4::11] = np.nan
    value[5::13] = -0.5
    weight = 1.5
    rows = made["_finish_rows"](fits, value, weight)
    few = made["_finish_few"](fits.tolist(), value.tolist(), weight)
    assert _bits(rows) == _bits(few)
    raw = np.where(np.isfinite(value), value, -7.25)  # a raw score is a number
    asked: list[int] = []

    def one(pod: object, cpu: int, idle: int) -> float:
        asked.append(cpu)
        return float(raw[cpu])

    cut = made["_truncated_rows"](fits, raw.copy(), weight)
    index = list(range(n))
    cut_few = made["_truncated_few"](
        None, index, lambda p, r: bool(fits[r]), one, index, index, 1.5
    )
    assert _bits(cut) == _bits(cut_few)
    assert asked == np.flatnonzero(fits).tolist()  # the raw score is read only where it fits
    return _bits(rows), _bits(cut)


@pytest.mark.parametrize("finish", FINISH_MUTANTS)
@pytest.mark.parametrize("truncated", TRUNCATED_MUTANTS)
def test_a_mutated_finishing_changes_both_forms_alike(finish: str, truncated: str) -> None:
    real = _finished(_finishing(gpu_common.FINISH, gpu_common.FINISH_TRUNCATED))
    changed = _finished(_finishing(finish, truncated))
    assert (changed[0] == real[0]) == (finish == gpu_common.FINISH)
    assert (changed[1] == real[1]) == (truncated == gpu_common.FINISH_TRUNCATED)


def test_a_masked_kernel_score_finishes_as_its_value_where_it_fits() -> None:
    """FINISH_SCORED (a kernel's score, -inf where the pod does not fit) answers as FINISH
    of the value and the mask; a mutant of it does not."""
    rng = np.random.default_rng(13)
    fits = rng.random(50) < 0.6
    value = np.round(rng.normal(0.0, 40.0, 50), 1)
    value[::7] = -np.inf
    masked = np.where(fits, value, -np.inf)
    for scored in (gpu_common.FINISH_SCORED, "where(isfinite({score}), {score}, 1.0) * {weight}"):
        made = _finishing(gpu_common.FINISH, gpu_common.FINISH_TRUNCATED, scored)
        same = _bits(made["_scored_rows"](masked, 2.5)) == _bits(
            made["_finish_rows"](fits, value, 2.5)
        )
        assert same == (scored == gpu_common.FINISH_SCORED)


@pytest.mark.parametrize(
    ("plugin", "module"),
    [(BestFitPlugin, _gpu_scorers), (FgdPlugin, fgd_scores), (GpuPackingPlugin, _gpu_scorers)],
)
def test_a_mutated_finishing_changes_a_scorers_every_path_alike(
    plugin: Any, module: ModuleType, sessions: list[Session], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scorer's array path and its few-rows path both read the generated finishing: a
    mutant (half the weight) changes both alike."""
    real = [list(_policy_answers(plugin({}), ssn)) for ssn in sessions]
    made = _finishing(
        gpu_common.FINISH + " * 0.5",
        gpu_common.FINISH_TRUNCATED + " * 0.5",
        gpu_common.FINISH_SCORED + " * 0.5",
    )
    names = ("_finish_rows", "_finish_few", "_truncated_rows", "_truncated_few", "_scored_rows")
    for name in names:
        monkeypatch.setattr(module, name, made[name], raising=False)
    changed = [list(_policy_answers(plugin({}), ssn)) for ssn in sessions]
    assert changed != real


# ---------------------------------------------------------------- the dispatcher's folds

#: The dispatcher's node points, generated from the folds.
NODE_POINTS = ("predicate_ok", "predicate_ok_one", "node_score", "node_score_one")
#: Mutants of the node points' folds (each changes some sum or mask on the sessions).
FOLD_MUTANTS = {
    "score halves": (dispatch.PREDICATE_FOLD, Fold("0.0", "{so_far} + {answer} * 0.5")),
    "score start": (dispatch.PREDICATE_FOLD, Fold("1.0", "{so_far} + {answer}")),
    "predicate keeps": (Fold("True", "{so_far} & {answer}"), dispatch.SCORE_FOLD),
    "predicate start": (Fold("False", "{so_far} & ~{answer}"), dispatch.SCORE_FOLD),
}


def _fold_answers(ssn: Session) -> list[object]:
    """The node points' mask and sum of some templates on every node, every row at once and
    one row at a time, checked equal; returns them."""
    every = _every(ssn)
    out: list[object] = []
    for tmpl in ssn.templates[:12]:
        mask = ssn.points.predicate_ok(tmpl, every).tolist()
        assert [ssn.points.predicate_ok_one(tmpl, every[i : i + 1]) for i in every] == mask
        summed = ssn.points.node_score(tmpl, every).tolist()
        assert [ssn.points.node_score_one(tmpl, every[i : i + 1]) for i in every] == summed
        out += [mask, summed]
    return out


@pytest.mark.parametrize("mutant", sorted(FOLD_MUTANTS))
def test_a_mutated_fold_changes_both_forms_alike(
    mutant: str, sessions: list[Session], monkeypatch: pytest.MonkeyPatch
) -> None:
    real = [_fold_answers(ssn) for ssn in sessions]
    made = define(dispatch.fold_source(*FOLD_MUTANTS[mutant]), {"np": np}, "folds test")
    for name in NODE_POINTS:
        monkeypatch.setattr(dispatch.Dispatch, name, made[name])
    assert [_fold_answers(ssn) for ssn in sessions] != real


def test_the_real_folds_render_the_sources_forms() -> None:
    made = define(
        dispatch.fold_source(dispatch.PREDICATE_FOLD, dispatch.SCORE_FOLD), {"np": np}, "again"
    )
    assert set(made) == set(NODE_POINTS)
    for name, form in made.items():
        assert form.__code__.co_code == getattr(dispatch.Dispatch, name).__code__.co_code


# ---------------------------------------------------------------- the study's device choice

#: Mutants of the fit rule's room and of the device choice's key.
CHOICE_MUTANTS = {
    "least_take": (replace(FIT_RULE, least_take=600), TIGHTEST),
    "fits": (replace(FIT_RULE, fits="<"), TIGHTEST),
    "loosest": (FIT_RULE, "-{free}"),
    "by index parity": (FIT_RULE, "{free} % 2"),
}


def _choices(made: dict[str, Callable[..., Any]]) -> list[object]:
    """Device rooms, fits over room counts and shared-device choices on device tables whose
    frees sit at, just below and above each take, every row at once and one row at a time,
    checked equal; returns them."""
    rng = np.random.default_rng(5)
    n, width = 120, 6
    out: list[object] = []
    for milli in (1, 300, 500, 999):
        pod = PodRequest(cpu_milli=100, memory=100, num_gpu=1, gpu_milli=milli)
        free = np.clip(milli + rng.choice([-1, 0, 1, 100, 250], size=(n, width)), 0, 1000)
        free[::5] = 600
        room = made["room_mask"](free, milli)
        one_room = [[made["has_room"](int(f), milli) for f in row] for row in free.tolist()]
        assert room.tolist() == one_room
        rows = made["best_fit_devices"](free, pod)
        assert rows.tolist() == [made["best_fit_device"](r, pod) for r in free.tolist()]
        cpu = np.full(n, 100, dtype=np.int64)
        enough = made["enough_rooms"](pod, room.sum(axis=1))
        fits = made["fit_rooms"](cpu, cpu, None, enough, pod)
        assert (
            fits.tolist() == made["fit_mask"](cpu, cpu, free, np.zeros(n, np.int64), pod).tolist()
        )
        out += [room.tolist(), rows.tolist(), fits.tolist()]
    return out


@pytest.mark.parametrize("mutant", sorted(CHOICE_MUTANTS))
def test_a_mutated_device_room_or_choice_changes_both_forms_alike(mutant: str) -> None:
    real = _choices(define(study_fit_source(FIT_RULE), {"np": np}, "study test"))
    rule, tightest = CHOICE_MUTANTS[mutant]
    changed = _choices(define(study_fit_source(rule, tightest), {"np": np}, "study mutant"))
    assert changed != real


BINPACK = Config.from_dict(
    {
        "actions": ["allocate"],
        "tiers": [
            [
                {
                    "name": "binpack",
                    "arguments": {
                        "binpack.weight": 3,
                        "binpack.cpu": 2,
                        "binpack.memory": 1,
                        "binpack.resources": "example.com/foo",
                        "binpack.resources.example.com/foo": 5,
                    },
                }
            ]
        ],
    }
)


@pytest.mark.parametrize("seed", range(6))
def test_binpack_scores_one_node_as_its_every_node_form_does(seed: int) -> None:
    """binpack's one-node answer (plain numbers) equals its every-node answer bit for bit, on
    nodes that overflow, lack a resource or have none of it allocatable."""
    rng = np.random.default_rng(seed)
    nodes, tasks = [], []
    for i in range(24):
        alloc: dict[str, Any] = {
            "cpu": int(rng.integers(8, 17)),
            "memory": f"{rng.integers(32, 65)}Gi",
        }
        if i % 3:
            alloc["example.com/foo"] = int(rng.integers(0, 4))
        nodes.append({"name": f"n{i}", "allocatable": alloc})
        for k in range(int(rng.integers(0, 3))):  # running tasks fill the nodes
            req = {"cpu": int(rng.integers(1, 5)), "memory": f"{rng.integers(1, 17)}Gi"}
            tasks.append(
                {
                    "name": f"r{i}-{k}",
                    "job": "run",
                    "request": req,
                    "phase": "Running",
                    "node": f"n{i}",
                }
            )
    for k in range(8):
        req = {"cpu": int(rng.integers(1, 13)), "memory": f"{rng.integers(1, 49)}Gi"}
        if k % 2:
            req["example.com/foo"] = int(rng.integers(1, 3))
        tasks.append({"name": f"p{k}", "job": "pend", "request": req})
    snap = Snapshot.from_dict(
        {
            "nodes": nodes,
            "queues": [{"name": "default"}],
            "jobs": [
                {"name": "run", "min_available": 1, "phase": "Running"},
                {"name": "pend", "min_available": 1, "phase": "Inqueue"},
            ],
            "tasks": tasks,
        }
    )
    ssn = open_session(snap, BINPACK)
    plugin = ssn.plugin("binpack")
    assert plugin is not None
    every = np.arange(ssn.arrays.n_nodes, dtype=np.intp)
    zero = positive = 0
    for tmpl in ssn.templates:
        scores = plugin.node_score(ssn, tmpl, every)
        for r in every.tolist():
            one = plugin.node_score(ssn, tmpl, np.array([r], dtype=np.intp))
            assert one.tolist() == [scores[r]], (tmpl.index, r)
        zero += int((scores == 0).sum())
        positive += int((scores > 0).sum())
    assert zero and positive  # overflowing nodes and scored ones both met
