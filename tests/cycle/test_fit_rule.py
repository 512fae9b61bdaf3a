"""The fit rule is written once (:data:`gangsched.session.fit_rule.RULE`) and every form of
:mod:`gangsched.session.fit` is generated from it: every row from the occupancy's arrays or
from the shared view, a few rows of the view, a few rows and one row in plain ints, one node
on chosen devices, the devices chosen, the free columns and the refusal reasons.

Each formula of the rule is mutated in turn and the module generated again from the mutant:
the forms must still agree with one another (a form holding its own copy of the formula
would keep the old answers and disagree) and must answer differently from the real rule
on the same occupancies (the mutation is seen). The occupancies put each node's and each
device's room now and later at, just below and just above the request, so every comparison
meets its boundary.
"""

from __future__ import annotations

import operator
import sys
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import gangsched.session.fit_rule as fit_rule
from _regenerated import regenerated
from gangsched import Snapshot, open_session
from gangsched.fragmentation import PodRequest, measure
from gangsched.session import fit
from gangsched.session.arrays import TaskTemplate
from gangsched.session.core import Session
from gangsched.session.fit import Occupancy
from gangsched.session.fit_rule import RULE, FitRule

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from benchmarks.common import cluster_dict

_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "<=": operator.le,
    "<": operator.lt,
    ">=": operator.ge,
    ">": operator.gt,
}

#: One mutant per formula of the rule.
MUTANTS = {
    "free": replace(RULE, free="{alloc} - {used} - 1"),
    "later": replace(RULE, later="{free} + {releasing}"),
    # later is no longer free where nothing is releasing or reserved: no form may skip it
    "later_shift": replace(RULE, later="{free} + {releasing} - {pipelined} - 1"),
    "fits": replace(RULE, fits="<"),
    "least_take": replace(RULE, least_take=10**9),
    "charge": replace(RULE, charge="{count} * {take} + 1"),
}


def _generated(rule: FitRule, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """A fresh copy of :mod:`gangsched.session.fit`, generated from ``rule``."""
    return regenerated(fit, fit_rule, rule, monkeypatch)


@pytest.fixture(scope="module")
def ssn() -> Session:
    return open_session(Snapshot.from_dict(cluster_dict(40, 160, seed=2)))


def _templates(ssn: Session) -> list[TaskTemplate]:
    """Some GPU templates (whole and shared devices) and, from them, requests without GPUs."""
    gpu = [t for t in ssn.templates if t.gpu_count][:2]
    assert len(gpu) == 2
    shared = [replace(gpu[0], gpu_count=1, gpu_milli=500), replace(gpu[1], gpu_milli=300)]
    picked = gpu + shared
    plain = []
    for t in picked[:3]:
        request = t.request.copy()
        request[ssn.arrays.spec.gpu_column] = 0
        plain.append(replace(t, request=request, gpu_count=0, gpu_milli=0))
    return picked + plain


def _occupancies(ssn: Session, tmpl: TaskTemplate, seed: int) -> Iterator[Occupancy]:
    """Occupancies whose rooms sit at, just below and just above ``tmpl``'s request."""
    a = ssn.arrays
    rng = np.random.default_rng(seed)
    req = np.broadcast_to(tmpl.request, a.allocatable.shape).copy()
    if tmpl.gpu_count:
        req[:, a.spec.gpu_column] = tmpl.gpu_count * fit.gpu_need(a, tmpl)
    cap = a.gpu_capacity[a.gpu_node]
    need = np.maximum(fit.gpu_need(a, tmpl), 1)[a.gpu_node] if tmpl.gpu_count else cap // 2
    for _ in range(3):
        free = req + rng.integers(-1, 2, size=req.shape)
        later = req + rng.integers(-1, 2, size=req.shape)
        dev_free = need + rng.integers(-1, 2, size=need.shape)
        dev_later = need + rng.integers(-1, 2, size=need.shape)
        yield Occupancy(
            arrays=a,
            used=a.allocatable - free,
            releasing=np.maximum(later - free, 0),
            pipelined=np.maximum(free - later, 0),
            gpu_used=cap - dev_free,
            gpu_releasing=np.maximum(dev_later - dev_free, 0),
            gpu_pipelined=np.maximum(dev_free - dev_later, 0),
        )


def _answers(m: ModuleType, rule: FitRule, ssn: Session) -> list[list[bool]]:
    """Every form's fit of every template on every node, checked to agree; returns the
    one-row form's answers."""
    fits = _OPS[rule.fits]
    a = ssn.arrays
    rows = np.arange(a.n_nodes, dtype=np.intp)
    some = rows[1::3].copy()
    out: list[list[bool]] = []
    for k, tmpl in enumerate(_templates(ssn)):
        for occ in _occupancies(ssn, tmpl, seed=k):
            view = m.FullView.build(occ, ssn.changes)
            now, later = m.resource_fit(occ, tmpl, rows)  # the occupancy's arrays
            forms = {
                "view": m.resource_fit(occ, tmpl, rows, None, view),
                "arrays": (now, later),
                "one": tuple(
                    np.array(x) for x in zip(*(m.fit_one(occ, tmpl, i) for i in rows), strict=True)
                ),
            }
            for name, (n2, l2) in forms.items():
                assert n2.tolist() == now.tolist(), name
                assert l2.tolist() == later.tolist(), name
            for part in (some, rows[:4].copy()):
                for v in (view, None):
                    n2, l2 = m.resource_fit(occ, tmpl, part, None, v)
                    assert n2.tolist() == now[part].tolist()
                    assert l2.tolist() == later[part].tolist()
            _check_reasons(m, occ, tmpl, view, later, rows, some)
            _check_nodes(m, rule, occ, tmpl, now, later, fits)
            out.append([*now.tolist(), *later.tolist()])
    return out


def _check_reasons(
    m: ModuleType,
    occ: Occupancy,
    tmpl: TaskTemplate,
    view: Any,
    later: Any,
    rows: Any,
    some: Any,
) -> None:
    """The refusal reasons: a node is short of no column and has the devices exactly when
    it fits once releases finish, from the arrays and from the view alike."""
    a = occ.arrays
    short, devices_ok = m.shortfalls(occ, tmpl, rows, None)
    short_v, devices_v = m.shortfalls_view(a, tmpl, view, None)
    assert [s.tolist() for s in short] == [s.tolist() for s in short_v]
    assert devices_ok.tolist() == devices_v.tolist()
    assert (~np.any(np.array(short), axis=0) & devices_ok).tolist() == later.tolist()
    short_s, devices_s = m.shortfalls_view(a, tmpl, view, None, some)
    assert [s.tolist() for s in short_s] == [s[some].tolist() for s in short]
    assert devices_s.tolist() == devices_ok[some].tolist()


def _check_nodes(
    m: ModuleType,
    rule: FitRule,
    occ: Occupancy,
    tmpl: TaskTemplate,
    now: Any,
    later: Any,
    fits: Callable[[Any, Any], Any],
) -> None:
    """One node on chosen devices (``fits_node``, ``choose_devices``) and the free columns
    answer as the every-row forms."""
    a = occ.arrays
    g = a.spec.gpu_column
    m_all = fit.gpu_need(a, tmpl)
    for future, want in ((False, now), (True, later)):
        room = m.node_free(occ, future=future)
        dev_room = m.device_free(occ, future=future)
        table = m.device_table(occ, a.device_range[:, None], a.gpu_node, future=future)
        assert table[:, 0].tolist() == dev_room.tolist()
        for i in range(a.n_nodes):
            assert m.node_room(occ, i, range(room.shape[1]), future=future) == room[i].tolist()
            cap = int(a.gpu_capacity[i])
            assert m.device_room(occ, i, cap, future=future) == dev_room[a.devices(i)].tolist()
            row = tmpl.request.copy()
            ok = True
            chosen: tuple[int, ...] = ()
            if tmpl.gpu_count:
                take = int(m_all[i])
                per_device = max(take, rule.least_take)
                row[g] = eval(rule.charge.format(count=tmpl.gpu_count, take=take))
                # the forms are given the take; the rule's least room is theirs to apply
                chosen = m.choose_devices(occ, i, take, int(a.gpu_count[i]), future=future)
                ok = bool(fits(tmpl.gpu_count, len(chosen)))
                span = a.devices(i)
                assert len(chosen) == int(np.sum(fits(per_device, dev_room[span])))
            fits_here = m.fits_node(occ, row, i, 0, (), future=future)
            assert fits_here == bool(np.all(fits(row, room[i])))
            assert (ok and fits_here) == bool(want[i]), (future, i)
            if ok and fits_here and tmpl.gpu_count:
                assert m.fits_node(occ, row, i, take, chosen, future=future)
    assert m.future_idle(occ).tolist() == m.node_free(occ, future=True).tolist()
    both = np.all(fits(tmpl.request, m.idle(occ)), axis=1) & later
    if not tmpl.gpu_count:
        assert both.tolist() == now.tolist()


def test_every_form_of_the_rule_gives_one_answer(ssn: Session) -> None:
    assert fit_rule.RULE == RULE
    _answers(fit, RULE, ssn)


@pytest.mark.parametrize("formula", sorted(MUTANTS))
def test_a_mutated_formula_changes_every_form_alike(
    formula: str, ssn: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    mutant = _generated(MUTANTS[formula], monkeypatch)
    assert mutant.fit_one is not fit.fit_one
    changed = _answers(mutant, MUTANTS[formula], ssn)
    assert changed != _answers(fit, RULE, ssn)


def test_the_idle_device_shortcut_is_generated_only_where_the_rule_allows_it() -> None:
    assert RULE.later_is_free_when_idle()
    assert MUTANTS["later"].later_is_free_when_idle()
    assert not MUTANTS["later_shift"].later_is_free_when_idle()
    assert "not any(releasing)" in fit_rule.fit_source(RULE)
    assert "not any(releasing)" not in fit_rule.fit_source(MUTANTS["later_shift"])


def test_the_generated_source_is_shown_in_tracebacks() -> None:
    import inspect

    source = inspect.getsource(fit.fit_one)
    assert source.startswith("def fit_one(") and RULE.fits in source
    assert fit.fit_one.__module__ == fit.__name__


# ---------------------------------------------------------------- the FGD study's fit


def _generated_measure(rule: FitRule, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """A fresh copy of :mod:`gangsched.fragmentation.measure`, its fit generated from
    ``rule``."""
    return regenerated(measure, fit_rule, rule, monkeypatch)


def _study_answers(m: ModuleType) -> list[bool]:
    """The study's fit of some pods on nodes whose free CPU, memory and devices sit at, just
    below and just above each request, every node at once and one at a time, checked to
    agree; returns the answers."""
    rng = np.random.default_rng(7)
    n, width = 90, 8
    allowed = np.array([True, False, True, False])
    pods = [
        PodRequest(cpu_milli=4000, memory=2**30, num_gpu=0, gpu_milli=0),
        PodRequest(cpu_milli=4000, memory=2**30, num_gpu=1, gpu_milli=1),
        PodRequest(cpu_milli=2000, memory=2**31, num_gpu=1, gpu_milli=500),
        PodRequest(cpu_milli=8000, memory=2**32, num_gpu=1, gpu_milli=1000, allowed_models=allowed),
        PodRequest(cpu_milli=16000, memory=2**33, num_gpu=4, gpu_milli=1000),
    ]
    out: list[bool] = []
    for pod in pods:
        cpu = pod.cpu_milli + rng.integers(-1, 2, size=n)
        mem = pod.memory + rng.integers(-1, 2, size=n)
        model = rng.integers(0, allowed.size, size=n)
        count = rng.integers(0, width + 1, size=n)
        dev = np.clip(max(pod.gpu_milli, 1) + rng.integers(-1, 2, size=(n, width)), 0, 1000)
        dev = np.where(np.arange(width) < count[:, None], dev, 0)  # padding slots hold 0
        every = m.fit_mask(cpu, mem, dev, model, pod)
        one = [
            m.fit_row(pod, int(cpu[i]), int(mem[i]), int(model[i]), dev[i, : count[i]].tolist())
            for i in range(n)
        ]
        assert every.tolist() == one
        out += one
    return out


def test_the_study_fit_is_the_rule() -> None:
    answers = _study_answers(measure)
    assert any(answers) and not all(answers)


@pytest.mark.parametrize("formula", sorted(MUTANTS))
def test_a_mutated_formula_changes_the_study_fit_alike(
    formula: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    mutant = _generated_measure(MUTANTS[formula], monkeypatch)
    assert mutant.fit_row is not measure.fit_row
    changed = _study_answers(mutant)
    # The study's nodes have no releases, reservations or node-level GPU charge: only the
    # comparison and the least room enter its fit.
    if formula in ("fits", "least_take"):
        assert changed != _study_answers(measure)
    else:
        assert changed == _study_answers(measure)


# ---------------------------------------------------------------- a take below the least room


def test_a_planned_placement_needs_the_least_room_of_a_device(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Session.fits and Session.choose_gpus judge devices by the rule's least room, as the
    evaluation does: a take of 0 milli-GPU (below ``least_take``) does not fit a device with
    nothing free."""
    snap = Snapshot.from_dict(cluster_dict(8, 16, seed=3))
    ssn = open_session(snap)
    a = ssn.arrays
    task = next(t for t, rec in enumerate(snap.tasks) if rec.gpu_request and not rec.node)
    node = next(i for i in range(a.n_nodes) if a.gpu_count[i])
    span = a.devices(node)
    ssn.gpu_used[span] = a.gpu_capacity[node]  # every device of the node full
    monkeypatch.setattr(Session, "device_milli", lambda self, task, node: 0)
    for future in (False, True):
        assert ssn.choose_gpus(task, node, future=future) == ()
        assert not ssn.fits(task, node, future=future, gpus=(0,))
    ssn.gpu_used[span.start] = a.gpu_capacity[node] - RULE.least_take  # one device has the room
    assert ssn.choose_gpus(task, node, future=False)[:1] == (0,)
    assert ssn.fits(task, node, future=False, gpus=(0,)) == bool(
        np.all(ssn.row_on(task, node) <= fit.node_free(ssn, future=False)[node])
    )
