"""Every incremental view of the core reads the session's change log, and nothing else does its
job: no module but :mod:`gangsched.session.changes` compares change-log lengths, positions,
node versions or occupancy digests to decide what to recompute, and only the ledger writes
the log.

The check reads the source of the core (L0-L6: everything but ``io``, ``sim``, ``cli``,
``testing`` and ``metrics``) with :mod:`ast`: a comparison may not involve a name or attribute
that spells a stamp (``version``, ``versions``, ``seen``, ``stamp``, ``digest``, a log's
``end`` or ``base``), nor the length of a log (``len(x.changed)``, ``len(x.changes)``, ...);
no module may name the retired stamps (``node_version``, ``queue_changes``, ``Session.changed``)
or hash the occupancy itself (``hashlib``); and ``ChangeLog.note`` / ``continue_from`` are
called from the ledger and the session's opening alone.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

import gangsched

SRC = Path(gangsched.__file__).resolve().parent
OWNER = "session/changes.py"
OUTSIDE_CORE = ("io/", "sim/", "cli/", "testing/", "metrics.py")

#: Names and attributes that hold a stamp of what a view has seen.
STAMP = re.compile(r"(^|_)(versions?|seen|stamp|digest|cache_key)$")
#: Attributes of a change log that are positions.
POSITIONS = {"end", "base", "_node_at", "_queue_at", "_job_at", "_entries"}
#: Containers whose length would be a change-log position.
LOGS = {"changed", "changes", "log", "_log", "_entries"}
#: What no module may name any more.
RETIRED = re.compile(r"\bnode_version\b|\bqueue_changes\b|\bssn\.changed\b|\bhashlib\b")
#: The log's writer methods, and the modules that may call them.
WRITERS = {"note": {"session/ledger.py"}, "continue_from": {"session/core.py"}}


def _core_files() -> list[Path]:
    out = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel == OWNER or rel.startswith(OUTSIDE_CORE):
            continue
        out.append(path)
    return out


def _names(node: ast.AST) -> list[str]:
    found = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            found.append(sub.id)
        elif isinstance(sub, ast.Attribute):
            found.append(sub.attr)
    return found


def _log_length(node: ast.AST) -> bool:
    """Whether ``node`` contains ``len(<a log>)``."""
    for sub in ast.walk(node):
        if (
            isinstance(sub, ast.Call)
            and isinstance(sub.func, ast.Name)
            and sub.func.id == "len"
            and sub.args
        ):
            arg = sub.args[0]
            name = arg.attr if isinstance(arg, ast.Attribute) else getattr(arg, "id", "")
            if name in LOGS:
                return True
    return False


_ORDERINGS = (ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE)


def _operand_names(node: ast.expr) -> list[tuple[str, bool]]:
    """The names an operand reads directly — itself, or inside arithmetic — as ``(name, is an
    attribute)``; names inside calls and subscripts are values, not stamps, and are left out."""
    if isinstance(node, ast.Name):
        return [(node.id, False)]
    if isinstance(node, ast.Attribute):
        return [(node.attr, True)]
    if isinstance(node, ast.BinOp):
        return _operand_names(node.left) + _operand_names(node.right)
    if isinstance(node, ast.UnaryOp):
        return _operand_names(node.operand)
    return []


def stamp_comparisons(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, what)`` of every equality or ordering in ``tree`` whose operand is a stamp, a
    log position or a log's length (membership tests and identity are other things)."""
    hits = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        if not any(isinstance(op, _ORDERINGS) for op in node.ops):
            continue
        operands = [node.left, *node.comparators]
        names = [n for o in operands for n in _operand_names(o)]
        bad = [n for n, _ in names if STAMP.search(n)]
        bad += [n for n, attr in names if attr and n in POSITIONS]
        if bad or any(_log_length(o) for o in operands):
            hits.append((node.lineno, ast.unparse(node)))
    return hits


@pytest.mark.parametrize("path", _core_files(), ids=lambda p: p.relative_to(SRC).as_posix())
def test_no_module_but_the_change_log_compares_stamps(path: Path) -> None:
    source = path.read_text()
    tree = ast.parse(source)
    hits = stamp_comparisons(tree)
    assert not hits, f"{path.name} decides what to recompute by its own stamps: {hits}"
    retired = [m.group(0) for m in RETIRED.finditer(source)]
    assert not retired, f"{path.name} names {retired}: read the session's change log instead"


@pytest.mark.parametrize("path", _core_files(), ids=lambda p: p.relative_to(SRC).as_posix())
def test_only_the_ledger_writes_the_change_log(path: Path) -> None:
    rel = path.relative_to(SRC).as_posix()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            allowed = WRITERS.get(node.func.attr)
            if allowed is not None and _names(node.func.value)[-1:] == ["changes"]:
                assert rel in allowed, f"{rel}:{node.lineno} writes the change log"


@pytest.mark.parametrize(
    "snippet",
    [
        "if len(ssn.changed) == self.seen: pass",
        "rows = np.flatnonzero(self._seen != ssn.changes.node_changes)",
        "ok = known[0] == stamp",
        "ok = self.cursor < log.base",
        "fresh = known[0] == log.end",
        "same = cached_digest == digest",
        "if key == self._cache_key: pass",
        "grown = len(self.log) - 3 > 0",
    ],
)
def test_the_check_sees_a_hand_written_stamp(snippet: str) -> None:
    """The check is not blind: each of these hand-written memories is reported."""
    assert stamp_comparisons(ast.parse(snippet))


def test_the_check_covers_the_incremental_views() -> None:
    """The modules that keep views incrementally are among those checked."""
    checked = {p.relative_to(SRC).as_posix() for p in _core_files()}
    for rel in (
        "session/evaluation.py",
        "session/fit.py",
        "session/close.py",
        "actions/_gang_placement.py",
        "actions/allocate.py",
        "plugins/nodeorder.py",
        "plugins/_gpu_common.py",
        "plugins/_gpu_scorers.py",
        "plugins/network_topology.py",
        "state/_core.py",
    ):
        assert rel in checked


def test_the_cursor_sweep_mutates_every_question_a_view_asks() -> None:
    """``tools/mutate_cursors.py`` makes an ignored and a stale mutant of every cursor question
    in the core (so a new view cannot join without its mutants)."""
    import importlib.util

    root = SRC.parents[1]
    spec = importlib.util.spec_from_file_location(
        "mutate_cursors", root / "tools" / "mutate_cursors.py"
    )
    assert spec is not None and spec.loader is not None
    tool = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = tool  # its dataclasses look their module up
    try:
        spec.loader.exec_module(tool)
    finally:
        del sys.modules[spec.name]
    found = tool.mutants(SRC.parent)
    # Every table's mutant still names text of the code (once): a table left behind by a
    # change of the code would stop the tool (SystemExit) before any mutant ran.
    for table in (tool.CARRY, tool.UNDO, tool.ARRAYS):
        assert len(tool.undo_mutants(SRC.parent, table)) == len(table)
    sites = {m.id.rsplit(":", 1)[0] for m in found if m.module != OWNER}
    asked = 0
    for path in _core_files():
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in tool.QUESTIONS
            ):
                asked += 1
    kinds = {m.id.rsplit(":", 1)[1] for m in found}
    assert {"ignored", "stale"} <= kinds
    assert asked >= 15
    questions = [s for s in sites if not s.endswith(":fingerprint")]
    assert len(questions) == asked, (sorted(questions), asked)
    for site in questions:
        ids = {m.id for m in found}
        assert f"{site}:ignored" in ids and f"{site}:stale" in ids, site
