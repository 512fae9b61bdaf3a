"""Functions made from generated source: a rule written once as text, rendered into the forms
that read it (every row at once over NumPy columns, one row over plain Python numbers).

:func:`define` compiles the source and runs it in the namespace of the module that owns the
rule, so the functions it defines are that module's own (their globals are the module's, as if
written there). The source is kept in :mod:`linecache` under a name that says where it comes
from, so tracebacks, profilers and :func:`inspect.getsource` show the generated lines.
"""

from __future__ import annotations

import ast
import linecache
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Operand", "define", "scalar", "vector"]


def define(source: str, namespace: dict[str, Any], label: str) -> dict[str, Callable[..., Any]]:
    """Run ``source`` (function definitions) in ``namespace`` and return the functions it
    defined, by name. ``label`` names the rule in tracebacks (``<generated label>``)."""
    filename = f"<generated {label}>"
    code = compile(source, filename, "exec")
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    exec(code, namespace)  # the package's own rule, rendered
    return {
        name: value
        for name, value in namespace.items()
        if getattr(getattr(value, "__code__", None), "co_filename", None) == filename
    }


# ---------------------------------------------------------------- one formula, two forms
#
# A score formula is written once, as a Python expression over named operands (``{name}``),
# with ``+ - * / //``, ``min(a, b)``, ``max(a, b)``, ``floor(x)``, ``sqrt(x)`` and
# ``trunc(x)`` (toward zero, the sign of a zero kept), and the choice ``where(c, a, b)`` (``a``
# where ``c`` holds, else ``b``) over conditions ``c & d``, ``~c`` and ``isfinite(x)``. It is
# rendered into the two forms a scorer needs: a plain-Python expression for one row
# (:func:`scalar`) and NumPy statements over columns for every row (:func:`vector`), which
# write into arrays the formula owns instead of allocating one per operation.
#
# Both forms read a divisor as a form spells it (a row's ``max(x, 1)``, a column's kept safe
# divisor), so a divisor is never zero; where the formula's operands make it exact, the
# vector form's rewrites keep every answer the scalar form's bit for bit:
#
# * ``a // 2**k`` is ``floor(a * 2**-k)`` (a power of two scales exactly);
# * with ``floats``, ``a // b`` is ``floor(a / b)`` in floats: exact when ``a`` and ``b``
#   are whole numbers below 2**53 and the quotient is small against the divisor (a quotient
#   at most ``q`` needs ``b < 2**53 / (q + 1)``; the caller checks its operands);
# * ``floor`` and ``sqrt`` of a float are NumPy's, which round as :mod:`math`'s; ``trunc``
#   is NumPy's and :mod:`math`'s with the sign of the number (``-0.5`` gives ``-0.0``),
#   of a finite number in one row;
# * ``where`` is :func:`numpy.where`, and a conditional expression in one row (its unused
#   branch not evaluated); ``c & d`` and ``~c`` are elementwise, ``and`` and ``not`` in one
#   row.

_UFUNCS = {
    ast.Add: "np.add",
    ast.Sub: "np.subtract",
    ast.Mult: "np.multiply",
    ast.Div: "np.divide",
    ast.FloorDiv: "np.floor_divide",
    ast.BitAnd: "np.logical_and",
}
_CALLS = {
    "min": "np.minimum",
    "max": "np.maximum",
    "floor": "np.floor",
    "sqrt": "np.sqrt",
    "trunc": "np.trunc",
    "isfinite": "np.isfinite",
    "where": "np.where",
}
_MATH = {"floor": "math.floor", "sqrt": "math.sqrt", "isfinite": "math.isfinite"}
_ARITY = {"where": 3, "min": 2, "max": 2}  # the others take one argument


def _parse(formula: str, operands: Iterable[str]) -> ast.expr:
    """The formula's expression, its ``{name}`` operands as plain names."""
    text = formula.format_map({name: name for name in operands})
    node = ast.parse(text, mode="eval").body
    for sub in ast.walk(node):
        ok = isinstance(
            sub,
            ast.BinOp
            | ast.Name
            | ast.Constant
            | ast.Call
            | ast.Load
            | ast.operator
            | ast.UnaryOp
            | ast.USub
            | ast.Invert,
        )
        if isinstance(sub, ast.BinOp) and type(sub.op) not in _UFUNCS:
            ok = False
        if isinstance(sub, ast.Call) and not (
            isinstance(sub.func, ast.Name)
            and sub.func.id in _CALLS
            and not sub.keywords
            and len(sub.args) == _ARITY.get(sub.func.id, 1)
        ):
            ok = False
        if not ok:
            raise ValueError(f"not a score formula's term: {ast.unparse(sub)!r} in {formula!r}")
    return node


def _divisors(node: ast.expr) -> Iterator[ast.Name]:
    for sub in ast.walk(node):
        if (
            isinstance(sub, ast.BinOp)
            and isinstance(sub.op, ast.Div | ast.FloorDiv)
            and isinstance(sub.right, ast.Name)
        ):
            yield sub.right


def scalar(formula: str, names: Mapping[str, str], divisors: Mapping[str, str]) -> str:
    """``formula`` as one plain-Python expression: operand ``x`` read as ``names[x]``, and as
    ``divisors[x]`` where it divides."""
    node = _parse(formula, names)
    for name in _divisors(node):
        name.id = f"({divisors[name.id]})"
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and sub.id in names:
            sub.id = f"({names[sub.id]})"
        elif isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name):
            sub.func.id = _MATH.get(sub.func.id, sub.func.id)
    node = _Choices().visit(node)
    return "(" + ast.unparse(node) + ")"


def _bool_and(node: ast.BinOp) -> ast.expr:
    return ast.BoolOp(ast.And(), [node.left, node.right])


class _Choices(ast.NodeTransformer):
    """``min(a, b)`` and ``max(a, b)`` as conditional expressions (a call costs more than the
    comparison), each operand evaluated once and the tie going to ``a``, as the builtins
    do; ``where(c, a, b)`` as ``a if c else b``, ``c & d`` as ``c and d`` and ``trunc(x)`` as
    :func:`math.trunc` given the sign of ``x`` (evaluated once)."""

    def __init__(self) -> None:
        self.made = 0

    def _once(self, node: ast.expr, *, spelled: bool = False) -> tuple[ast.expr, ast.expr]:
        """``node`` as evaluated first (bound to a name unless plain) and as read again; with
        ``spelled``, an operand spelled as an expression is not plain."""
        plain = isinstance(node, ast.Constant) or (
            isinstance(node, ast.Name) and (not spelled or node.id.isidentifier())
        )
        if plain:
            return node, node
        name = f"_v{self.made}"
        self.made += 1
        return ast.NamedExpr(ast.Name(name, ast.Store()), node), ast.Name(name, ast.Load())

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.expr:
        self.generic_visit(node)
        return ast.UnaryOp(ast.Not(), node.operand) if isinstance(node.op, ast.Invert) else node

    def visit_BinOp(self, node: ast.BinOp) -> ast.expr:
        self.generic_visit(node)
        return _bool_and(node) if isinstance(node.op, ast.BitAnd) else node

    def visit_Call(self, node: ast.Call) -> ast.expr:
        self.generic_visit(node)
        func = node.func
        if isinstance(func, ast.Name) and func.id == "where" and len(node.args) == 3:
            return ast.IfExp(node.args[0], node.args[1], node.args[2])
        if isinstance(func, ast.Name) and func.id == "trunc" and len(node.args) == 1:
            first, again = self._once(node.args[0], spelled=True)
            whole = ast.Call(_dotted("math.trunc"), [first], [])
            return ast.Call(_dotted("math.copysign"), [whole, again], [])
        if not (isinstance(func, ast.Name) and func.id in ("min", "max") and len(node.args) == 2):
            return node
        first, a = self._once(node.args[0])
        second, b = self._once(node.args[1])
        keep: ast.cmpop = ast.LtE() if func.id == "min" else ast.GtE()
        return ast.IfExp(ast.Compare(first, [keep], [second]), a, b)


def _dotted(name: str) -> ast.expr:
    """``name`` (``module.function``) as an expression."""
    module, attr = name.split(".")
    return ast.Attribute(ast.Name(module, ast.Load()), attr, ast.Load())


@dataclass(frozen=True, slots=True)
class Operand:
    """How the vector form reads an operand: its spelling, its kind (``"i"`` integer,
    ``"f"`` float or ``"b"`` bool), its spelling as a divisor, and whether the formula may
    overwrite it (an array the form made for this formula alone)."""

    code: str
    kind: str
    divisor: str = ""
    owned: bool = False


@dataclass(slots=True)
class _Val:
    code: str
    kind: str  # "i", "f", "b", or "c" (a constant: either)
    owned: bool


def vector(
    formula: str, operands: Mapping[str, Operand], target: str, *, floats: bool, indent: str
) -> str:
    """``formula`` as NumPy statements ending with its value in ``target``, over the columns
    ``operands`` name; ``floats``: floor divisions in floats (see above)."""
    node = _parse(formula, operands)
    counts: dict[str, int] = {}
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            counts[sub.id] = counts.get(sub.id, 0) + 1
    writer = _Vector(operands, counts, floats=floats, target=target)
    val = writer.emit(node)
    lines = writer.lines
    if val.code != target:
        lines.append(f"{target} = {val.code}")
    return "".join(f"{indent}{line}\n" for line in lines)


class _Vector:
    """Renders an expression as NumPy statements that work in arrays the formula owns."""

    def __init__(
        self,
        operands: Mapping[str, Operand],
        counts: Mapping[str, int],
        *,
        floats: bool,
        target: str,
    ) -> None:
        self.operands = operands
        self.counts = counts
        self.floats = floats
        self.target = target
        self.lines: list[str] = []
        self.made = 0

    def _new(self, expr: str, kind: str) -> _Val:
        name = self.target if self.made == 0 else f"{self.target}_{self.made}"
        self.made += 1
        self.lines.append(f"{name} = {expr}")
        return _Val(name, kind, True)

    def _into(self, ufunc: str, args: list[_Val], kind: str) -> _Val:
        """``ufunc(*args)`` written into an owned argument of the result's kind, else new."""
        for a in args:
            if a.owned and a.kind == kind:
                self.lines.append(f"{ufunc}({', '.join(x.code for x in args)}, out={a.code})")
                return a
        return self._new(f"{ufunc}({', '.join(x.code for x in args)})", kind)

    @staticmethod
    def _kind(*vals: _Val) -> str:
        kinds = {v.kind for v in vals}
        if kinds == {"b"}:
            return "b"
        if "f" in kinds:
            return "f"
        return "i" if "i" in kinds else "c"

    def emit(self, node: ast.expr, *, divisor: bool = False) -> _Val:
        if isinstance(node, ast.Name):
            op = self.operands[node.id]
            if divisor and op.divisor:
                return _Val(op.divisor, "f" if self.floats else op.kind, False)
            return _Val(op.code, op.kind, op.owned and self.counts[node.id] == 1)
        if isinstance(node, ast.Constant):
            return _Val(repr(node.value), "f" if isinstance(node.value, float) else "c", False)
        if isinstance(node, ast.UnaryOp):
            val = self.emit(node.operand)
            if isinstance(node.op, ast.Invert):
                return self._into("np.logical_not", [val], "b")
            return self._into("np.negative", [val], self._kind(val))
        if isinstance(node, ast.Call):
            assert isinstance(node.func, ast.Name)
            args = [self.emit(a) for a in node.args]
            name = node.func.id
            if name == "where":  # no ``out=``: a new array of its branches' kind
                return self._new(f"np.where({', '.join(a.code for a in args)})", "f")
            kind = {"floor": "f", "sqrt": "f", "trunc": "f", "isfinite": "b"}.get(name, "")
            return self._into(_CALLS[name], args, kind or self._kind(*args))
        assert isinstance(node, ast.BinOp)
        left = self.emit(node.left)
        if isinstance(node.op, ast.FloorDiv):
            return self._floor_div(left, node.right)
        right = self.emit(node.right, divisor=isinstance(node.op, ast.Div))
        kind = "f" if isinstance(node.op, ast.Div) else self._kind(left, right)
        if isinstance(node.op, ast.BitAnd):
            kind = "b"
        return self._into(_UFUNCS[type(node.op)], [left, right], kind)

    def _floor_div(self, left: _Val, right_node: ast.expr) -> _Val:
        scale = _inverse_power_of_two(right_node)
        if scale and (left.kind != "i" or self.floats):
            scaled = self._into("np.multiply", [left, _Val(repr(scale), "f", False)], "f")
            return self._into("np.floor", [scaled], "f")
        right = self.emit(right_node, divisor=True)
        if self.floats or "f" in (left.kind, right.kind):
            quotient = self._into("np.divide", [left, right], "f")
            return self._into("np.floor", [quotient], "f")
        return self._into("np.floor_divide", [left, right], self._kind(left, right))


def _inverse_power_of_two(node: ast.expr) -> float:
    """``1 / node`` when ``node`` is a constant power of two (dividing by it is an exact
    scaling), else 0."""
    value = node.value if isinstance(node, ast.Constant) else None
    if not isinstance(value, int | float) or value <= 0 or not float(value).is_integer():
        return 0.0
    whole = int(value)
    return 1 / whole if whole & (whole - 1) == 0 else 0.0
