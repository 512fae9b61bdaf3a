"""Each score formula and the fit have one statement, checked on the source with :mod:`ast`:
a hand-written one-row (or every-row) copy of a formula is what these tests refuse.

* **nodeorder** (:mod:`gangsched.plugins.nodeorder`): its scores are generated from
  :mod:`gangsched.plugins._node_score_rule`; the hand-written module divides, floors and
  takes square roots only in the functions that both generated forms read as they are (the
  taint and node-affinity tables, the variance).
* **DotProd and BestFit** (:mod:`gangsched.fragmentation.policies`): a policy's one-node
  function (``*_one``) does no arithmetic of its own: it calls the formula its every-node
  function (``*_raw``) calls, on its numbers as floats.
* **The GPU scorers' view** (:mod:`gangsched.plugins._gpu_common`): a device's share is
  read with one formula (``DEVICE_SHARE``) for every row and for one; the hand-written
  module divides nowhere.
* **The fit of the FGD study and of the GPU scorers**: generated from the fit rule
  (:mod:`gangsched.session.fit_rule`); no scorer or study module (the FGD engine and its
  window among them) compares a pod's CPU or memory request with a room by hand (what a copy
  of the node fit would do), nor a device's free milli-GPU with the pod's take: whether a
  device has room is the rule's (``room_mask`` / ``has_room``, with its least take), and so
  is the shared device a pod takes (``best_fit_devices`` / ``best_fit_device``).
* **The GPU scorers' answers**: truncating, masking and weighting a kernel's value is
  :data:`~gangsched.plugins._gpu_common.FINISH` / ``FINISH_TRUNCATED`` / ``FINISH_SCORED``,
  rendered for many rows
  and for a few; the scorer modules truncate, test finiteness and weight nowhere by hand.
* **The dispatcher's node points**: ``predicate_ok`` / ``node_score`` and their one-row forms
  fold the chain with one formula each (``PREDICATE_FOLD``, ``SCORE_FOLD``), generated; the
  four methods loop and compute nothing of their own.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

import gangsched
from gangsched.fragmentation import measure, policies
from gangsched.framework import dispatch
from gangsched.plugins import _gpu_common as gpu_common
from gangsched.plugins import _gpu_scorers, fgd_scores, nodeorder
from gangsched.sim.fgd import engine

SRC = Path(gangsched.__file__).resolve().parent

#: nodeorder's hand-written functions that both generated forms read as they are.
NODEORDER_SHARED = {"_taint", "_preferred", "_variance"}
#: Calls that are a score formula's (rounding, roots).
FORMULA_CALLS = {"floor", "sqrt", "trunc", "ceil", "copysign"}
#: Modules that score nodes or judge the FGD study's fit.
SCORER_MODULES = (
    "fragmentation/measure.py",
    "fragmentation/policies.py",
    "plugins/_gpu_common.py",
    "plugins/_gpu_scorers.py",
    "plugins/fgd_scores.py",
    "plugins/nodeorder.py",
    "sim/fgd/engine.py",
    "sim/fgd/window.py",
)
#: What names a pod's request in those modules.
REQUESTS = {"pod", "req"}


def _tree(path: str) -> ast.Module:
    return ast.parse((SRC / path).read_text(encoding="utf-8"), filename=path)


def _functions(tree: ast.AST) -> Iterator[ast.FunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            yield node


def _called(node: ast.AST) -> set[str]:
    """Names of the functions ``node`` calls (``f(...)`` and ``x.f(...)``)."""
    out = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            func = sub.func
            if isinstance(func, ast.Name):
                out.add(func.id)
            elif isinstance(func, ast.Attribute):
                out.add(func.attr)
    return out


def _formula_terms(fn: ast.FunctionDef) -> list[str]:
    """What in ``fn`` is a score formula's: a division, a rounding or a root."""
    found = [
        f"line {sub.lineno}: {ast.unparse(sub)}"
        for sub in ast.walk(fn)
        if isinstance(sub, ast.BinOp) and isinstance(sub.op, ast.Div | ast.FloorDiv)
    ]
    found += [f"calls {name}" for name in sorted(_called(fn) & FORMULA_CALLS)]
    return found


def test_nodeorder_scores_only_through_its_rule() -> None:
    problems = [
        f"plugins/nodeorder.py {fn.name}: {term}"
        for fn in _functions(_tree("plugins/nodeorder.py"))
        if fn.name not in NODEORDER_SHARED
        for term in _formula_terms(fn)
    ]
    assert not problems, (
        "nodeorder's score arithmetic is written in plugins/_node_score_rule.py and "
        "generated into both forms; a hand-written copy: " + "; ".join(problems)
    )
    for name in ("_score_rows", "_score_row"):
        form = getattr(nodeorder, name)
        assert form.__code__.co_filename == "<generated node scores>"


def test_the_gpu_scorers_view_scales_devices_only_through_its_formula() -> None:
    problems = [
        f"plugins/_gpu_common.py {fn.name}: {term}"
        for fn in _functions(_tree("plugins/_gpu_common.py"))
        for term in _formula_terms(fn)
    ]
    assert not problems, "a device's share is DEVICE_SHARE's: " + "; ".join(problems)
    for name in ("_device_shares", "_device_shares_row"):
        form = getattr(gpu_common, name)
        assert form.__code__.co_filename == "<generated device shares>"


def test_the_shared_functions_are_still_there() -> None:
    names = {fn.name for fn in _functions(_tree("plugins/nodeorder.py"))}
    assert names >= NODEORDER_SHARED  # an allowance naming nothing would hide nothing


def _one_row_policies() -> list[ast.FunctionDef]:
    fns = [f for f in _functions(_tree("fragmentation/policies.py")) if f.name.endswith("_one")]
    return [f for f in fns if f.name != "trunc_one"]  # np.trunc's scalar twin, no formula


@pytest.mark.parametrize("fn", _one_row_policies(), ids=lambda f: f.name)
def test_a_policy_scores_one_node_with_its_every_node_formula(fn: ast.FunctionDef) -> None:
    raw = {f.name: f for f in _functions(_tree("fragmentation/policies.py"))}.get(
        fn.name.removesuffix("_one") + "_raw"
    )
    assert raw is not None, f"{fn.name} has no every-node form {fn.name[:-4]}_raw"
    body = [
        s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))
    ]
    assert len(body) == 1 and isinstance(body[0], ast.Return), f"{fn.name}: one return"
    arithmetic = [
        ast.unparse(sub)
        for sub in ast.walk(body[0])
        if isinstance(sub, ast.BinOp | ast.UnaryOp | ast.Compare | ast.IfExp)
    ]
    assert not arithmetic, f"{fn.name} computes on its own: {arithmetic}"
    formulas = {n for n in _called(fn) if n.startswith("_")}
    assert formulas and formulas <= _called(raw), (fn.name, formulas, _called(raw))


@pytest.mark.parametrize("path", SCORER_MODULES)
def test_no_scorer_compares_a_request_with_a_room_by_hand(path: str) -> None:
    problems = []
    for sub in ast.walk(_tree(path)):
        if not isinstance(sub, ast.Compare):
            continue
        sides = [sub.left, *sub.comparators]
        request = [s for s in sides if _request(s, "cpu_milli", "memory")]
        if request and not all(isinstance(s, ast.Constant) for s in sides if s not in request):
            problems.append(f"{path}:{sub.lineno}: {ast.unparse(sub)}")
    assert not problems, "the fit is the fit rule's generated forms': " + "; ".join(problems)


def _request(node: ast.expr, *fields: str) -> bool:
    """``node`` reads one of ``fields`` of a pod's request (``pod.gpu_milli``)."""
    return (
        isinstance(node, ast.Attribute)
        and node.attr in fields
        and isinstance(node.value, ast.Name)
        and node.value.id in REQUESTS
    )


@pytest.mark.parametrize("path", SCORER_MODULES)
def test_no_scorer_checks_a_devices_room_by_hand(path: str) -> None:
    """A device's room for the pod's take is the rule's (its least take among it): no
    comparison of the take with anything but a constant (``pod.gpu_milli < MILLI`` says
    what the request is, not whether a device holds it)."""
    problems = []
    for sub in ast.walk(_tree(path)):
        if not isinstance(sub, ast.Compare):
            continue
        sides = [sub.left, *sub.comparators]
        take = [s for s in sides if _request(s, "gpu_milli")]
        others = [s for s in sides if s not in take]
        if take and not all(_constant(s) for s in others):
            problems.append(f"{path}:{sub.lineno}: {ast.unparse(sub)}")
    assert not problems, "a device's room is the fit rule's room_mask / has_room: " + "; ".join(
        problems
    )


def _constant(node: ast.expr) -> bool:
    """A literal or a module constant (an upper-case name such as ``MILLI``)."""
    return isinstance(node, ast.Constant) or (isinstance(node, ast.Name) and node.id.isupper())


def test_the_study_fit_is_generated() -> None:
    for form in (
        measure.fit_mask,
        measure.fit_row,
        measure.fit_rooms,
        measure.enough_rooms,
        measure.room_mask,
        measure.has_room,
        measure.best_fit_devices,
        measure.best_fit_device,
    ):
        assert form.__code__.co_filename == "<generated fit rule (FGD study)>", form
    # the shared-device choice is the generated one, for every row and for one
    assert policies._best_fit_gpu is measure.best_fit_devices
    assert vars(_gpu_scorers)["best_fit_device"] is measure.best_fit_device


def test_the_fgd_engine_fits_with_the_rule() -> None:
    fits = next(
        f
        for f in _functions(_tree("sim/fgd/engine.py"))
        if f.name == "fits"  # StudyArrays.fits
    )
    assert {"fit_rooms", "room_mask", "enough_rooms"} <= _called(fits)
    assert vars(engine)["fit_rooms"] is measure.fit_rooms
    assert vars(engine)["room_mask"] is measure.room_mask
    assert vars(engine)["enough_rooms"] is measure.enough_rooms


#: Calls that finish a kernel's value (truncate it, test that it is a number).
FINISHING_CALLS = {"trunc", "trunc_one", "isfinite", "copysign"}


def _weighted(node: ast.AST) -> list[str]:
    """Products with a weight in ``node``."""
    return [
        ast.unparse(sub)
        for sub in ast.walk(node)
        if isinstance(sub, ast.BinOp)
        and isinstance(sub.op, ast.Mult)
        and any(
            (isinstance(x, ast.Name) and x.id == "weight")
            or (isinstance(x, ast.Attribute) and x.attr == "weight")
            for x in ast.walk(sub)
        )
    ]


@pytest.mark.parametrize("path", ["plugins/_gpu_scorers.py", "plugins/fgd_scores.py"])
def test_the_gpu_scorers_finish_only_through_their_formulas(path: str) -> None:
    """Every path of a kernel scorer (many rows, a few rows) finishes its kernel's value with
    the generated forms of FINISH / FINISH_TRUNCATED: no truncation, finiteness test or weight
    product by hand (``random``'s score is no kernel's: it draws its own)."""
    problems = []
    for cls in ast.walk(_tree(path)):
        if not isinstance(cls, ast.ClassDef) or cls.name == "RandomPlugin":
            continue
        for fn in _functions(cls):
            problems += [f"{cls.name}.{fn.name} calls {c}" for c in _called(fn) & FINISHING_CALLS]
            problems += [f"{cls.name}.{fn.name}: {w}" for w in _weighted(fn)]
    assert not problems, "finish with the generated _finish_* / _truncated_*: " + "; ".join(
        problems
    )
    generated = ("_finish_rows", "_finish_few", "_truncated_rows", "_truncated_few", "_scored_rows")
    for name in generated:
        form = getattr(gpu_common, name)
        assert form.__code__.co_filename == "<generated GPU scorer answers>"
    assert vars(fgd_scores)["_finish_few"] is gpu_common._finish_few


#: The dispatcher's node points: each is generated from its fold.
NODE_POINTS = ("predicate_ok", "predicate_ok_one", "node_score", "node_score_one")


def test_the_dispatchers_node_points_are_generated_from_their_folds() -> None:
    """No node point of the dispatcher is written by hand: each is one of the functions
    generated from PREDICATE_FOLD and SCORE_FOLD (a hand-written one-row loop beside the
    every-row fold is what this refuses)."""
    written = {f.name for f in _functions(_tree("framework/dispatch.py"))}
    assert not written & set(NODE_POINTS), "written by hand: " + ", ".join(
        sorted(written & set(NODE_POINTS))
    )
    for name in NODE_POINTS:
        form = getattr(dispatch.Dispatch, name)
        assert form.__code__.co_filename == "<generated node point folds>", name
