"""Variable containers and small solver helpers shared by the CP-SAT models."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
from ortools.sat.python import cp_model

I64 = npt.NDArray[np.int64]
#: One logger for the package (its public name), whatever module logs.
_log = logging.getLogger("gangsched.placement.cpsat")


@dataclass(slots=True)
class _Cell:
    """One count variable: replicas of template ``t`` of gang ``g`` on unit ``u``."""

    g: int
    t: int
    u: int
    var: cp_model.IntVar
    ub: int


@dataclass(slots=True)
class _Vars:
    """Variable containers of one model."""

    cells: list[_Cell] = field(default_factory=list)
    used: dict[tuple[int, int], cp_model.IntVar] = field(default_factory=dict)  # (g, u)
    placed: dict[int, cp_model.IntVar] = field(default_factory=dict)
    choice: dict[tuple[int, int], cp_model.IntVar] = field(default_factory=dict)  # (g, dom)
    lower: dict[tuple[int, int, int], cp_model.IntVar] = field(default_factory=dict)
    shares: dict[tuple[int, int, int, int], cp_model.IntVar] = field(default_factory=dict)
    whole: dict[tuple[int, int], cp_model.IntVar] = field(default_factory=dict)  # (node, d)
    # per objective level: its terms (variable, coefficient) and a valid lower bound; for the
    # last level (the emptiness), ``emp_sorted`` (each used node's emptiness, ascending) gives
    # a bound once the node count is fixed
    level_terms: list[list[tuple[cp_model.IntVar, int]]] = field(default_factory=list)
    level_lbs: list[int] = field(default_factory=list)
    emp_sorted: I64 | None = None
    # per level, a lower bound that holds while every earlier level is at its bound's value
    # (a lexicographic lower bound of the model's placements); ``None``: none
    cond_lbs: list[int] | None = None
    # a lower bound on the emptiness level once the node count is known, which may stop
    # once it reaches its second argument (``None``: no bound)
    waste_lb: Callable[[int, int | None], int] | None = None


class _HintValues:
    """A model's solution hint read as a solution (``value`` like a solved ``CpSolver``)."""

    def __init__(self, values: dict[int, int]) -> None:
        self.values = values

    def value(self, var: cp_model.IntVar) -> int:
        return self.values[var.index]


def _hint_values(model: cp_model.CpModel) -> dict[int, int]:
    hint = model.proto.solution_hint
    return dict(zip(hint.vars, hint.values, strict=True))


@dataclass(slots=True)
class _Units:
    """Units of a model: ``rep[u]`` a representative node, ``members[u]`` its nodes."""

    rep: npt.NDArray[np.intp]
    members: list[npt.NDArray[np.intp]]

    @property
    def size(self) -> int:
        return int(self.rep.size)

    def mult(self, u: int) -> int:
        return int(self.members[u].size)


def _collapse(keys: I64, nodes: npt.NDArray[np.intp]) -> _Units:
    """Classes of ``nodes`` with identical rows of ``keys`` ``(n, k)`` (first seen order)."""
    _, first, inv = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    cls = rank[inv.reshape(-1)]
    members = [nodes[cls == k] for k in range(order.size)]
    return _Units(rep=np.array([m[0] for m in members], dtype=np.intp), members=members)


def _lex_objective(levels: list[tuple[cp_model.LinearExprT, int]]) -> cp_model.LinearExprT:
    """One weighted sum that orders solutions lexicographically by ``levels``
    (each ``(expression, upper bound)``; the first level is the most important)."""
    terms: list[cp_model.LinearExprT] = []
    weight = 1
    for expr, bound in reversed(levels):
        terms.append(weight * expr)
        weight *= int(bound) + 1
    return cp_model.LinearExpr.sum(terms)


def _rehint(model: cp_model.CpModel, vs: _Vars, solver: cp_model.CpSolver) -> None:
    """Hint every container variable with its value in ``solver``'s solution."""
    model.clear_hints()  # type: ignore[no-untyped-call]
    groups: list[list[cp_model.IntVar]] = [
        [c.var for c in vs.cells],
        list(vs.used.values()),
        list(vs.choice.values()),
        list(vs.lower.values()),
        list(vs.shares.values()),
        list(vs.whole.values()),
    ]
    for group in groups:
        for var in group:
            model.add_hint(var, int(solver.value(var)))
