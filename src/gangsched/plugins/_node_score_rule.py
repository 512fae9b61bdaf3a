"""nodeorder's score formulas, written once, and the source of both forms that read them.

:class:`NodeScoreRule` states kube's resource scores as formulas over named operands: what a
column scores under LeastAllocated and MostAllocated, how the cpu and memory scores make one,
a column's share of the node under BalancedAllocation and the balance of those shares.
:func:`node_score_source` renders the rule into :mod:`gangsched.plugins.nodeorder`'s two
scoring functions: ``_score_rows`` over every node (or some rows) at once, NumPy over the
plugin's kept columns, and ``_score_row`` over one node in plain Python numbers (the refresh
after one placement, where a dozen array operations cost more than the numbers). Each
formula's text enters both through :func:`gangsched._codegen.scalar` and
:func:`gangsched._codegen.vector`; only how operands are read (a row's numbers, a kept column)
and the order in which the weighted scores are summed are the forms' own, the same in both.
"""

from __future__ import annotations

from dataclasses import dataclass

from gangsched._codegen import Operand, scalar, vector

__all__ = ["RULE", "NodeScoreRule", "node_score_source"]


@dataclass(frozen=True, slots=True)
class NodeScoreRule:
    """The score formulas as text (operands in braces; a divisor is read never below 1)."""

    #: LeastAllocated of one column: what the node has left after the request (``left``:
    #: allocatable minus the non-zero requests, this one's included), in whole percent of
    #: ``alloc``; 0 where it does not fit
    least: str = "max({left}, 0) * 100 // {alloc}"
    #: MostAllocated of one column: the non-zero requests, this one's included, in whole
    #: percent of ``alloc``, at most 100
    most: str = "min({requested}, {alloc}) * 100 // {alloc}"
    #: one score of the cpu and the memory column's
    mean: str = "({cpu} + {memory}) // 2"
    #: BalancedAllocation's share of one column: the plain requests, this one's included,
    #: over ``alloc``, at most 1
    share: str = "min({requested} / {alloc}, 1.0)"
    #: BalancedAllocation from the population variance of the shares, truncated as kube does
    balanced: str = "floor((1.0 - sqrt({variance})) * 100.0)"


#: The rule :mod:`gangsched.plugins.nodeorder` is generated from.
RULE = NodeScoreRule()


def _vec(formula: str, target: str, indent: int, *, floats: bool, **ops: Operand) -> str:
    return vector(formula, ops, target, floats=floats, indent=" " * indent)


def node_score_source(r: NodeScoreRule) -> str:
    """The source of ``_score_rows`` and ``_score_row``, rendered from ``r``."""
    return _rows(r) + "\n\n" + _row(r)


def _rows(r: NodeScoreRule) -> str:
    """Every row (or ``sel``) at once. A floor division runs in floats when every divisor is
    below ``_EXACT_DIVISOR`` (the quotients are whole percentages), else in integers."""
    least, most, mean = {}, {}, {}
    for floats in (True, False):
        safe = "cols.safe_f[c][sel]" if floats else "cols.safe[c][sel]"
        alloc = Operand("cols.alloc[c][sel]", "i", safe)
        least[floats] = _vec(
            r.least, "least", 16, floats=floats, left=Operand("left", "i", owned=True), alloc=alloc
        )
        most[floats] = _vec(
            r.most,
            "most",
            16,
            floats=floats,
            requested=Operand("requested", "i", owned=True),
            alloc=alloc,
        )
        kind = "f" if floats else "i"
        mean[floats] = _vec(
            r.mean,
            "mean",
            12,
            floats=floats,
            cpu=Operand("per[0]", kind, owned=True),
            memory=Operand("per[1]", kind, owned=True),
        )
    # the share formula over the cpu and memory columns and over the GPU column
    share, gpu_share = (
        _vec(
            r.share,
            "share",
            12,
            floats=True,
            requested=Operand("requested", "i", owned=True),
            alloc=Operand(column, "f", column),
        )
        for column in ("cols.safe_f[c][sel]", "cols.gpu_safe_f[sel]")
    )
    balanced = _vec(
        r.balanced, "balanced", 8, floats=True, variance=Operand("variance", "f", owned=True)
    )

    def per_column(name: str, body: dict[bool, str], guard: str) -> str:
        return f"""        per = []
        for c in range(2):
{guard}            if cols.exact_float:
{body[True]}            else:
{body[False]}            if not cols.all_on[c]:  # 0 where nothing is allocatable
                {name} = np.where(cols.alloc[c][sel] > 0, {name}, 0)
            per.append({name})
        if cols.exact_float:
{mean[True]}        else:
{mean[False]}"""

    least_block = per_column("least", least, "            left = cols.idle[c][sel] - want[c]\n")
    most_block = per_column("most", most, "            requested = cols.nz_use[c][sel] + want[c]\n")
    return f'''
def _score_rows(p, ssn, tmpl, cols, sel, size):
    """:meth:`NodeOrderPlugin.node_score` of the rows ``sel`` (``size`` of them) from the
    plugin's kept columns ``cols``."""
    cpu, mem = tmpl.request[:2].tolist()
    want = (cpu or DEFAULT_CPU, mem or DEFAULT_MEMORY)
    score = np.zeros(size)
    if p.least:
{least_block}        score += p.least * mean
    if p.most:
{most_block}        score += p.most * mean
    if p.balanced:
        fracs = []
        for c in range(2):
            requested = cols.use[c][sel] + (cpu, mem)[c]
{share}            fracs.append(share)
        if tmpl.gpu_count:
            c = cols.gpu_column
            requested = cols.gpu_use[sel] + tmpl.request[c]
{gpu_share}            share *= cols.gpu_on[sel]  # 0 where the node has no GPU
            fracs.append(share)
        variance = _variance(fracs)
{balanced}        balanced *= p.balanced
        score += balanced
    if p.taint and ssn.arrays.soft_taints:
        score += p.taint * p._taint(ssn, tmpl)[sel]
    if p.affinity and tmpl.node_affinity is not None and tmpl.node_affinity.preferred:
        score += p.affinity * p._preferred(ssn, tmpl)[sel]
    return score
'''


def _row(r: NodeScoreRule) -> str:
    """One node, in plain Python numbers."""
    safe = {"alloc": "al if al > 1 else 1"}  # allocatable is never negative
    least = scalar(r.least, {"left": "al - rq", "alloc": "al"}, safe)
    most = scalar(r.most, {"requested": "rq", "alloc": "al"}, safe)
    mean = scalar(r.mean, {"cpu": "per[0]", "memory": "per[1]"}, {})
    share = scalar(r.share, {"requested": "rq", "alloc": "al"}, safe)
    gpu_share = scalar(
        r.share, {"requested": "after", "alloc": "galloc"}, {"alloc": "galloc if galloc > 1 else 1"}
    )
    balanced = scalar(r.balanced, {"variance": "_variance(fracs)"}, {})
    return f'''
def _score_row(p, ssn, tmpl, i):
    """:meth:`NodeOrderPlugin.node_score` of node ``i``: the same formulas, summed in the same
    order, in plain Python numbers."""
    a = ssn.arrays
    request = tmpl.request.tolist()
    alloc_row = a.allocatable[i].tolist()
    used_row = ssn.used[i].tolist()
    want = (request[0] or DEFAULT_CPU, request[1] or DEFAULT_MEMORY)
    alloc, used = alloc_row[:2], used_row[:2]
    extra = p._zero_of(ssn).on(ssn, i)
    nonzero = [u + e + w for u, e, w in zip(used, extra, want, strict=True)]
    score = 0.0
    if p.least:
        per = [{least} if al > 0 else 0 for al, rq in zip(alloc, nonzero, strict=True)]
        score += p.least * {mean}
    if p.most:
        per = [{most} if al > 0 else 0 for al, rq in zip(alloc, nonzero, strict=True)]
        score += p.most * {mean}
    if p.balanced:
        plain = [u + q for u, q in zip(used, request[:2], strict=True)]
        fracs = [{share} for al, rq in zip(alloc, plain, strict=True)]
        if tmpl.gpu_count:
            g = a.spec.gpu_column
            galloc = alloc_row[g]
            after = used_row[g] + request[g]
            fracs.append({gpu_share} if galloc > 0 else 0.0)
        score += {balanced} * p.balanced
    if p.taint and a.soft_taints:
        score += p.taint * float(p._taint(ssn, tmpl)[i])
    if p.affinity and tmpl.node_affinity is not None and tmpl.node_affinity.preferred:
        score += p.affinity * float(p._preferred(ssn, tmpl)[i])
    return score
'''
