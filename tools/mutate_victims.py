"""Mutation check of the victim rules: every mutant of a rule must fail at least one test.

A *mutant* is one small change to one rule function: a comparison flipped (``<`` ↔ ``<=``,
``>`` ↔ ``>=``, ``==`` ↔ ``!=``, ``is`` ↔ ``is not``, ``in`` ↔ ``not in``), ``and`` ↔ ``or``
(and ``&`` ↔ ``|`` on masks), one side of a mask conjunction dropped, a negation dropped, a
guard (``if ...: return/continue/break``) removed, a filter ``x[mask]`` replaced by ``x``, the
whole rule removed (its function answers "allowed"), or the victim order changed. Mutants are
found with :mod:`ast` inside the functions listed in :data:`RULES` (and :data:`NAMED`), so
they follow the code as it moves.

Each mutant is applied to a *copy* of the source tree (``src/`` copied to a temporary
directory put first on ``PYTHONPATH``; the working tree is never written), and a fast subset
of the tests (:data:`TESTS`) runs against it with ``-x``. A mutant is *killed* when a test
fails (or the run errors or times out), *survived* when every test passes. The unmutated copy
runs first and must pass.

Usage::

    python tools/mutate_victims.py                 # every mutant, 2 workers
    python tools/mutate_victims.py --list          # list the mutants, run nothing
    python tools/mutate_victims.py --only spare    # mutants whose id contains "spare"
    python tools/mutate_victims.py --json out.json --workers 2
    python tools/mutate_victims.py --rerun out.json  # only the survivors of that run

A mutant listed in :data:`EQUIVALENT` is one no test can kill (it behaves as the rule does, for
the reason given there); it is still run, and reported as *equivalent* if it survives (as
*killed* if it does not: then the explanation is wrong and should go).

Exit status: 0 when every mutant is killed or equivalent, 1 when some other survived (listed),
2 on a bad baseline.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _mutation_runner import judge_all, summarize  # noqa: E402

#: Rule functions (``Class.method`` for methods), by module path under ``src/gangsched``.
RULES: dict[str, tuple[str, ...]] = {
    "session/rules/gang.py": (
        "role_minimums",
        "deficit",
        "needed_tasks",
        "spare_tasks",
        "may_go_whole",
    ),
    "actions/victims/rules.py": (
        "evictable",
        "policy_refusal",
        "preempt_candidates",
        "preemptors",
        "current_claim",
        "claimants",
        "gang_allowed",
    ),
    "actions/victims/search.py": (
        "preempt_job",
        "_search_and_explain",
        "_Search._play",
        "_Search.bundles",
        "_Search._ranks",
        "_Search._node_bundles",
        "_Charges.positions",
        "_Charges.spare_counts",
        "_Fruitless.key",
        "_Fruitless._unmoved",
        "_most_freeing",
    ),
    "actions/reclaim.py": (
        "_gate",
        "_candidates",
        "_over_queues",
        "_priority_levels",
        "exposed_claim",
        "_admissible",
    ),
    "actions/preempt.py": ("within_job_jobs", "_within_job"),
    "actions/consolidate.py": ("_Search.movable", "_Search._guarantee_ok"),
    "session/rules/disruption.py": ("desired_count", "allowed", "would_break", "exhausted"),
    "plugins/proportion.py": ("ProportionPlugin.overused", "ProportionPlugin.reclaimable"),
}

#: Named mutants: (module, function, id, description, old text, new text). The old text must
#: occur exactly once in the function; ``old`` of ``None`` inserts ``new`` as the function's
#: first statement (after its docstring): the rule removed.
NAMED: tuple[tuple[str, str, str, str, str | None, str], ...] = (
    (
        "actions/victims/rules.py",
        "evictable",
        "removed",
        "every task evictable",
        None,
        "return np.ones(len(tasks), dtype=np.bool_)",
    ),
    (
        "actions/victims/rules.py",
        "policy_refusal",
        "removed",
        "every job may evict",
        None,
        "return None",
    ),
    (
        "session/rules/gang.py",
        "spare_tasks",
        "removed",
        "every task is surplus",
        None,
        "return list(tasks)",
    ),
    (
        "session/rules/gang.py",
        "may_go_whole",
        "removed",
        "every job may go whole",
        None,
        "return True",
    ),
    (
        "session/rules/gang.py",
        "may_go_whole",
        "never",
        "no job may go whole",
        None,
        "return False",
    ),
    (
        "actions/victims/rules.py",
        "preempt_candidates",
        "any-queue",
        "preempt takes from every queue",
        "& (ssn.job_queue[ssn.task_job] == q)",
        "",
    ),
    (
        "actions/victims/rules.py",
        "preemptors",
        "order",
        "preemptors in reverse order",
        "out.sort(key=lambda j: (ssn.queue_key(int(ssn.job_queue[j])), ssn.job_key(j)))",
        "out.sort(key=lambda j: (ssn.queue_key(int(ssn.job_queue[j])), ssn.job_key(j)), "
        "reverse=True)",
    ),
    (
        "actions/victims/search.py",
        "_search_and_explain",
        "no-budget-pass",
        "budgets never steer the search",
        "(True, False) if budgeted else (False,)",
        "(False,)",
    ),
    (
        "actions/victims/search.py",
        "_Search._ranks",
        "order-reversed",
        "victim jobs tried in reverse rank",
        "key=keys.__getitem__)",
        "key=keys.__getitem__, reverse=True)",
    ),
    (
        "actions/victims/search.py",
        "_Search._ranks",
        "oldest-first",
        "older jobs before newer ones",
        "-rec.creation",
        "rec.creation",
    ),
    (
        "actions/victims/search.py",
        "_Charges.positions",
        "task-order-reversed",
        "tasks of a job in reverse victim order",
        "mine.sort(key=key)",
        "mine.sort(key=key, reverse=True)",
    ),
    (
        "actions/victims/search.py",
        "_Fruitless.key",
        "any-victims",
        "an answer given back whatever victims the plugins allowed",
        "victims.tobytes(),",
        "",
    ),
    (
        "actions/victims/search.py",
        "_Fruitless.key",
        "any-shape",
        "an answer given back whatever the claimed tasks' shapes",
        "templates[int(template_of[t])].shape",
        "None",
    ),
    (
        "actions/victims/search.py",
        "_Fruitless.key",
        "placed-too",
        "an answer kept for a job with placed or running tasks",
        "if bool((ssn.task_state[tasks] != TaskState.PENDING).any()):",
        "if False:",
    ),
    (
        "actions/victims/search.py",
        "_Search._order",
        "jobs-not-first",
        "priority before the number of jobs hit",
        "(n_jobs, prios,",
        "(prios, n_jobs,",
    ),
    (
        "actions/victims/search.py",
        "_Search.cost",
        "lowest-priority-last",
        "priorities compared lowest first",
        "reverse=True",
        "reverse=False",
    ),
    (
        "actions/victims/search.py",
        "_Search._order",
        "kill-before-trim",
        "whole jobs not penalised",
        "n_whole, excess, n_tasks",
        "excess, n_whole, n_tasks",
    ),
    ("actions/reclaim.py", "_gate", "removed", "every reclaimer admitted", None, "return None"),
    ("actions/reclaim.py", "_admissible", "removed", "no fair-share guard", None, "return None"),
    (
        "actions/reclaim.py",
        "exposed_claim",
        "removed",
        "no claimed task is exposed",
        None,
        "return None",
    ),
    (
        "actions/reclaim.py",
        "_priority_levels",
        "removed",
        "every victim queue at once",
        None,
        "return [None]",
    ),
    (
        "actions/consolidate.py",
        "_Search._guarantee_ok",
        "removed",
        "queues may go below their guarantee",
        None,
        "return True",
    ),
    (
        "session/rules/disruption.py",
        "would_break",
        "removed",
        "no budget is ever broken",
        None,
        "return []",
    ),
    (
        "session/rules/disruption.py",
        "exhausted",
        "removed",
        "no task is protected by a budget",
        None,
        "return np.zeros(tasks.size, dtype=np.bool_)",
    ),
)

#: Mutants that behave exactly as the rule does, and why.
EQUIVALENT: dict[str, str] = {
    "actions/consolidate:_Search._guarantee_ok:guard-1": (
        "a queue without a guarantee has an empty one: its floor vector is zero, and running "
        "tasks never hold less than what moves"
    ),
    "actions/victims/search:_Search._play:cmp-2": (
        "with the victims' nodes equal to the claim's, `<` places the claim again inside those "
        "nodes: each task's best node among them is the one it had, so the trial ends the same"
    ),
    "actions/victims/search:preempt_job:guard-1": (
        "an answer kept for a search that found nothing only saves running that search again, "
        "which finds nothing again and gives the same explanation (the kept answers are checked "
        "against fresh searches by test_kept_answers_change_no_decision)"
    ),
    "actions/victims/search:_Search.bundles:guard-1": (
        "with no victims every array is empty and both bundle modes return no bundle anyway "
        "(a shortcut)"
    ),
    "actions/victims/search:_Search._node_bundles:guard-1": (
        "with no task every array is empty, no bundle passes the bound and none is returned "
        "anyway (a shortcut)"
    ),
    "actions/victims/search:_most_freeing:cmp-1": (
        "with exactly c rows freeing some of a resource, `<=` asks for the first 0 rows freeing "
        "none of it: an empty slice, nothing added"
    ),
    "actions/victims/search:_Search._node_bundles:guard-2": (
        "with no bundle left the ranking reads empty arrays and the bundles come out empty "
        "anyway (a shortcut)"
    ),
    "actions/victims/search:_Search._node_bundles:cmp-4": (
        "a job without role minimums whose spare count is 0 asked node by node: the gang rule "
        "lets none of its tasks go there either, as the count said"
    ),
    "actions/preempt:within_job_jobs:guard-1": (
        "with no jobs every array is empty and the function returns [] anyway (a shortcut)"
    ),
    "actions/preempt:within_job_jobs:cmp-3": (
        "top_pending > low only fails for a job without pending tasks, whose top_pending is the "
        "int64 minimum; then least_running < top_pending fails too (task priorities are bounded)"
    ),
    "actions/preempt:within_job_jobs:drop-4": "the same redundant conjunct as cmp-3",
    "actions/preempt:_within_job:guard-1": (
        "the pending list is built before the loop, and a task's statement only evicts running "
        "tasks and reserves the task itself: every later task is still pending at its turn"
    ),
    "actions/reclaim:_over_queues:cmp-1": (
        "a share exactly equal to 1 + SLACK: SLACK absorbs the rounding of deserved amounts, so "
        "> and >= differ only at a value inside the rounding error"
    ),
    "actions/reclaim:exposed_claim:cmp-3": "the same boundary as _over_queues:cmp-1",
    "actions/reclaim:_candidates:drop-4": (
        "with a priority ceiling, queues within their share get in too, but the shipped "
        "fair-share plugins' reclaimable answers (proportion, capacity) drop them again: the "
        "over-share rule is written twice (see the report)"
    ),
    "actions/reclaim:_candidates:drop-7": (
        "the names are computed only when no candidate queue is both over its share and "
        "reclaimable, so every over queue there is already not reclaimable"
    ),
    "plugins/proportion:ProportionPlugin.overused:cmp-2": (
        "equality is already covered by the |d - alloc| < EPS term"
    ),
    "plugins/proportion:ProportionPlugin.overused:cmp-3": (
        "amounts are integers (milli-units), so |d - alloc| is 0 or at least 1, never EPS (0.1)"
    ),
    "plugins/proportion:ProportionPlugin.reclaimable:cmp-1": (
        "reclaim's own candidate rule keeps only tasks of queues above their share before the "
        "plugin is asked; the plugin's answer then changes nothing"
    ),
    "plugins/proportion:ProportionPlugin.reclaimable:cmp-2": (
        "the same as reclaimable:cmp-1, and the boundary lies within EPS of the deserved amount"
    ),
}

#: The fast subset of tests run against each mutant (``-x``: the first failure kills it).
TESTS: tuple[str, ...] = (
    "tests/preemption/test_victim_search_reuse.py",
    "tests/preemption/test_victim_mutants.py",
    "tests/preemption/test_victim_search_edges.py",
    "tests/preemption/test_victim_rules.py",
    "tests/preemption/test_disruption_policy.py",
    "tests/preemption/test_disruption_budgets.py",
    "tests/preemption/test_preempt.py",
    "tests/preemption/test_reclaim.py",
    "tests/queues/test_reclaim_fairshare.py",
    "tests/preemption/test_consolidation.py",
    "tests/preemption/test_gang_heal_admission.py",
)

_FLIP = {
    ast.Lt: ("<", "<="),
    ast.LtE: ("<=", "<"),
    ast.Gt: (">", ">="),
    ast.GtE: (">=", ">"),
    ast.Eq: ("==", "!="),
    ast.NotEq: ("!=", "=="),
    ast.Is: ("is", "is not"),
    ast.IsNot: ("is not", "is"),
    ast.In: ("in", "not in"),
    ast.NotIn: ("not in", "in"),
}
_TOKEN = {
    "<": r"<(?![<=])",
    "<=": r"<=",
    ">": r"(?<![-=>])>(?![>=])",
    ">=": r">=",
    "==": r"==",
    "!=": r"!=",
    "is": r"\bis\b(?!\s+not\b)",
    "is not": r"\bis\s+not\b",
    "in": r"(?<!not )\bin\b",
    "not in": r"\bnot\s+in\b",
}
#: Calls whose result, used as a mask ``x[call(...)]``, is a rule (dropping it removes it).
_RULE_CALLS = {"evictable", "exhausted", "isin", "in_states"}


@dataclass(frozen=True)
class Mutant:
    id: str
    module: str
    function: str
    line: int
    kind: str
    description: str
    start: int  # byte offsets in the module's source
    end: int
    replacement: bytes

    def apply(self, source: bytes) -> bytes:
        return source[: self.start] + self.replacement + source[self.end :]


class _Source:
    def __init__(self, text: bytes) -> None:
        self.text = text
        self.starts = [0]
        for line in text.split(b"\n"):
            self.starts.append(self.starts[-1] + len(line) + 1)

    def offset(self, line: int, col: int) -> int:
        return self.starts[line - 1] + col

    def span(self, node: ast.AST) -> tuple[int, int]:
        return (
            self.offset(node.lineno, node.col_offset),  # type: ignore[attr-defined]
            self.offset(node.end_lineno, node.end_col_offset),  # type: ignore[attr-defined]
        )

    def seg(self, node: ast.AST) -> bytes:
        a, b = self.span(node)
        return self.text[a:b]


def _functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    out: dict[str, ast.FunctionDef] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            out[node.name] = node
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    out[f"{node.name}.{item.name}"] = item
    return out


def _short(text: bytes, limit: int = 70) -> str:
    one = " ".join(text.decode("utf-8").split())
    return one if len(one) <= limit else one[: limit - 1] + "…"


def _body_start(fn: ast.FunctionDef) -> ast.stmt:
    body = fn.body
    first = body[0]
    is_doc = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
    return body[1] if is_doc and len(body) > 1 else first


def _code(fn: ast.FunctionDef) -> Iterator[ast.AST]:
    """Every node of the function's body, annotations left out."""
    todo: list[ast.AST] = list(reversed(fn.body))
    while todo:
        node = todo.pop()
        yield node
        for field, value in reversed(list(ast.iter_fields(node))):
            if field in ("annotation", "returns"):
                continue
            items = value if isinstance(value, list) else [value]
            todo.extend(x for x in reversed(items) if isinstance(x, ast.AST))


def _auto(module: str, name: str, fn: ast.FunctionDef, src: _Source) -> Iterator[Mutant]:
    found = sorted(_sites(module, name, fn, src), key=lambda m: (m.start, m.end, m.description))
    counts: dict[str, int] = {}
    for m in found:
        counts[m.kind] = counts.get(m.kind, 0) + 1
        yield Mutant(**{**asdict(m), "id": f"{m.id}:{m.kind}-{counts[m.kind]}"})


def _sites(module: str, name: str, fn: ast.FunctionDef, src: _Source) -> Iterator[Mutant]:
    def make(node: ast.AST, kind: str, what: str, a: int, b: int, new: bytes) -> Mutant:
        return Mutant(
            id=f"{module.removesuffix('.py')}:{name}",
            module=module,
            function=name,
            line=node.lineno,  # type: ignore[attr-defined]
            kind=kind,
            description=what,
            start=a,
            end=b,
            replacement=new,
        )

    for node in _code(fn):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            for i, op in enumerate(node.ops):
                old, new = _FLIP[type(op)]
                a = src.span(operands[i])[1]
                b = src.span(operands[i + 1])[0]
                gap = src.text[a:b].decode("utf-8")
                m = re.search(_TOKEN[old], gap)
                if m is None:
                    continue
                patched = (gap[: m.start()] + new + gap[m.end() :]).encode("utf-8")
                whole = src.seg(node)
                what = f"`{_short(whole)}`: {old} → {new}"
                yield make(node, "cmp", what, a, b, patched)
        elif isinstance(node, ast.BoolOp):
            old, new = ("and", "or") if isinstance(node.op, ast.And) else ("or", "and")
            a, b = src.span(node)
            pieces = [src.text[a : src.span(node.values[0])[0]]]
            for left, right in zip(node.values, node.values[1:], strict=False):
                pieces.append(src.seg(left))
                text = src.text[src.span(left)[1] : src.span(right)[0]].decode("utf-8")
                pieces.append(re.sub(rf"\b{old}\b", new, text, count=1).encode("utf-8"))
            pieces.append(src.text[src.span(node.values[-1])[0] : b])
            what = f"`{_short(src.seg(node))}`: {old} → {new}"
            yield make(node, "bool", what, a, b, b"".join(pieces))
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitAnd | ast.BitOr):
            sym, other = ("&", "|") if isinstance(node.op, ast.BitAnd) else ("|", "&")
            a, b = src.span(node)
            la, lb = src.span(node.left)
            ra, rb = src.span(node.right)
            between = src.text[lb:ra].decode("utf-8").replace(sym, other, 1).encode("utf-8")
            shown = _short(src.seg(node))
            yield make(
                node,
                "bool",
                f"`{shown}`: {sym} → {other}",
                a,
                b,
                src.text[a:lb] + between + src.text[ra:b],
            )
            yield make(node, "drop", f"`{shown}`: keep only the left side", a, b, src.text[la:lb])
            yield make(node, "drop", f"`{shown}`: keep only the right side", a, b, src.text[ra:rb])
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not | ast.Invert):
            a, b = src.span(node)
            what = f"`{_short(src.seg(node))}`: negation dropped"
            yield make(node, "not", what, a, b, src.seg(node.operand))
        elif isinstance(node, ast.If) and not node.orelse:
            last = node.body[-1]
            if isinstance(last, ast.Return | ast.Continue | ast.Break | ast.Raise):
                a = src.starts[node.lineno - 1]
                b = src.starts[node.end_lineno or node.lineno]
                indent = b" " * node.col_offset
                what = f"guard `if {_short(src.seg(node.test))}` removed"
                yield make(node, "guard", what, a, b, indent + b"pass\n")
        elif isinstance(node, ast.Subscript):
            sl = node.slice
            rule = isinstance(sl, ast.Compare | ast.BoolOp) or (
                isinstance(sl, ast.UnaryOp) and isinstance(sl.op, ast.Invert)
            )
            rule = rule or (isinstance(sl, ast.BinOp) and isinstance(sl.op, ast.BitAnd))
            if isinstance(sl, ast.Call):
                f = sl.func
                called = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
                rule = called in _RULE_CALLS
            if rule:
                a, b = src.span(node)
                what = f"filter `{_short(src.seg(node))}` dropped"
                yield make(node, "filter", what, a, b, src.seg(node.value))


def _named(module: str, name: str, fn: ast.FunctionDef, src: _Source) -> Iterator[Mutant]:
    a_fn, b_fn = src.span(fn)
    for mod, func, tag, what, old, new in NAMED:
        if (mod, func) != (module, name):
            continue
        ident = f"{module.removesuffix('.py')}:{name}:{tag}"
        if old is None:
            first = _body_start(fn)
            at = src.starts[first.lineno - 1]
            indent = b" " * first.col_offset
            yield Mutant(
                ident,
                module,
                name,
                first.lineno,
                "rule",
                what,
                at,
                at,
                indent + new.encode("utf-8") + b"\n",
            )
            continue
        body = src.text[a_fn:b_fn]
        hits = [m.start() for m in re.finditer(re.escape(old.encode("utf-8")), body)]
        if len(hits) != 1:
            print(f"warning: {ident}: {old!r} found {len(hits)} times; skipped", file=sys.stderr)
            continue
        at = a_fn + hits[0]
        line = src.text[:at].count(b"\n") + 1
        yield Mutant(
            ident,
            module,
            name,
            line,
            "order" if "order" in tag or "first" in tag else "rule",
            what,
            at,
            at + len(old.encode("utf-8")),
            new.encode("utf-8"),
        )


def mutants(src_root: Path) -> list[Mutant]:
    """Every mutant of the rules, in module then source order."""
    out: list[Mutant] = []
    wanted = {(m, f) for m, fs in RULES.items() for f in fs} | {(m, f) for m, f, *_ in NAMED}
    for module in dict.fromkeys([m for m, _ in sorted(wanted)]):
        path = src_root / "gangsched" / module
        if not path.exists():
            print(f"warning: {module} not found; skipped", file=sys.stderr)
            continue
        text = path.read_bytes()
        src = _Source(text)
        funcs = _functions(ast.parse(text))
        for mod, name in sorted(wanted):
            if mod != module:
                continue
            fn = funcs.get(name)
            if fn is None:
                print(f"warning: {module}: {name} not found; skipped", file=sys.stderr)
                continue
            if name in RULES.get(module, ()):
                out.extend(_auto(module, name, fn, src))
            out.extend(_named(module, name, fn, src))
    out.sort(key=lambda m: (m.module, m.line, m.id))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="tree holding src/ and tests/")
    parser.add_argument(
        "--only", nargs="*", default=[], help="run only mutants whose id contains one of these"
    )
    parser.add_argument(
        "--rerun", type=Path, help="run only the mutants that survived in this --json file"
    )
    parser.add_argument("--list", action="store_true", help="list the mutants and stop")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="seconds per mutant (default: five times the unmutated run, at least 120)",
    )
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--tests", nargs="*", default=list(TESTS))
    args = parser.parse_args(argv)
    root = args.root.resolve()
    src_root = root / "src"
    found = [m for m in mutants(src_root) if not args.only or any(o in m.id for o in args.only)]
    if args.rerun:
        again = {r["id"] for r in json.loads(args.rerun.read_text()) if r["fate"] == "survived"}
        found = [m for m in found if m.id in again]
    if args.list:
        for m in found:
            print(f"{m.id:60} {m.module}:{m.line}  {m.description}")
        print(f"{len(found)} mutants")
        return 0
    tests = [t for t in args.tests if (root / t).exists()]
    results = judge_all(
        found,
        root=root,
        tests=tests,
        workers=args.workers,
        timeout=args.timeout,
        equivalent=EQUIVALENT,
        prefix="mutate-victims-",
        width=55,
    )
    if results is None:
        return 2
    return summarize(results, args.json)


if __name__ == "__main__":
    sys.exit(main())
