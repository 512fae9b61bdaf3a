"""Mutation check of the change log's cursors: every misread cursor must fail at least one test.

Every incremental view of the package keeps a cursor into the session's change log
(:mod:`gangsched.session.changes`) and asks what changed since. This tool finds, with
:mod:`ast`, every such question asked outside the log's own module and makes two mutants of
each:

* **ignored** — the question answers "nothing changed": ``changed_since(c)`` and
  ``queue_changed_since(q, c)`` become ``False``, ``nodes_since(c)`` the empty answer
  (``nodes_since(log.end)``), ``fingerprint(...)`` a constant;
* **stale** — the cursor is read one step stale (one entry past what the view read):
  ``c`` becomes ``c + 1``, so the latest change before it is missed.

Plus :data:`NAMED` mutants of the log itself (its cut-off policy and its continuation across
cycles), :data:`ARRAYS` mutants of the cluster arrays moved over a node-set change (killed by
:data:`ARRAYS_TESTS`), and :data:`UNDO` mutants of the statement's undo — the one undo of
every change a cycle makes, whose skipped or misordered steps must fail a test of
:data:`UNDO_TESTS` just as a misread cursor must fail one of :data:`TESTS`. Each mutant is
applied to a *copy* of the source tree (``src/`` copied to a temporary directory put first on
``PYTHONPATH``; the working tree is never written), and the tests of its group run against it
with ``-x``. A mutant is *killed* when a test fails (or the run errors or times out),
*survived* when every test passes. The unmutated copy runs first and must pass.

Usage::

    python tools/mutate_cursors.py                 # every mutant, 2 workers
    python tools/mutate_cursors.py --list          # list the mutants, run nothing
    python tools/mutate_cursors.py --only evaluation
    python tools/mutate_cursors.py --only statement: ledger:   # the undo mutants
    python tools/mutate_cursors.py --json out.json --workers 2

A mutant listed in :data:`EQUIVALENT` is one no test can kill (it behaves as the code does, for
the reason given there); it is still run, and reported as *equivalent* if it survives (as
*killed* if it does not: then the explanation is wrong and should go).

Exit status: 0 when every mutant is killed or equivalent, 1 when some other survived (listed),
2 on a bad baseline.
"""

from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _mutation_runner import Result, judge_all, summarize  # noqa: E402

OWNER = "session/changes.py"

#: The log's questions that take a cursor, and the position of the cursor among their
#: arguments.
QUESTIONS: dict[str, int] = {
    "changed_since": 0,
    "node_since": 0,
    "nodes_since": 0,
    "queue_changed_since": 1,
    "queues_since": 0,
    "job_changed_since": 1,
    "jobs_since": 0,
    "node_changed_since": 1,
}
#: Questions answered by a boolean ("ignored": ``False``); the others by rows.
BOOLEAN = {"changed_since", "queue_changed_since", "job_changed_since", "node_changed_since"}

#: Named mutants of the log itself: (id, description, old text, new text) in
#: :data:`OWNER`; the old text must occur exactly once.
NAMED: tuple[tuple[str, str, str, str], ...] = (
    (
        "changes:vector-compare-off-by-one",
        "the vector answer misses entries at the cursor itself",
        "return np.flatnonzero(self._node_at >= cursor)",
        "return np.flatnonzero(self._node_at > cursor)",
    ),
    (
        "changes:slice-off-by-one",
        "the log-slice answer misses the first entry since the cursor",
        "fresh = set(entries[start:])",
        "fresh = set(entries[start + 1 :])",
    ),
    (
        "changes:one-entry-is-the-first",
        "one entry since the cursor: the first of the log is answered",
        "return self._one_row(entries[-1])",
        "return self._one_row(entries[0])",
    ),
    (
        "changes:opening-logs-no-node",
        "a continued log logs no node whose record or occupancy moved between cycles",
        "for node in np.flatnonzero(stale).tolist():",
        "for node in np.flatnonzero(stale & False).tolist():",
    ),
    (
        "changes:renumbered-rows-known",
        "a cursor taken before a node-set change renumbered the rows is valid for the nodes",
        "return lineage is self.lineage and self._rows_from <= cursor <= self.end",
        "return lineage is self.lineage and cursor <= self.end",
    ),
    (
        "changes:renumbering-forgotten",
        "a log continuing one that renumbered the node rows forgets where they start",
        "        self._rows_from = previous._rows_from\n",
        "        self._rows_from = 0\n",
    ),
    (
        "changes:queue-not-logged",
        "a change of a queue's allocation is not logged",
        "            self._queue_at[queue] = at\n",
        "            pass\n",
    ),
)

#: Mutants of the statement's undo: (id, description, module, old text, new text); the old
#: text must occur exactly once in the module.
UNDO: tuple[tuple[str, str, str, str, str], ...] = (
    (
        "statement:move-undo-skipped",
        "a discarded move leaves the task reserved on its new node",
        "session/statement.py",
        "            _ledger.unmove(ssn, op.task, op.origin.node, op.origin.gpus)\n",
        "            pass\n",
    ),
    (
        "statement:move-undone-as-a-placement",
        "a discarded move takes the reservation back but leaves the task off its old node",
        "session/statement.py",
        "            _ledger.unmove(ssn, op.task, op.origin.node, op.origin.gpus)\n",
        "            _ledger.unplace(ssn, op.task)\n",
    ),
    (
        "statement:lift-undo-skipped",
        "a lifted reservation that was not bound is not given back",
        "session/statement.py",
        "                _ledger.place(ssn, op.task, op.node, op.gpus, pipelined=True)\n",
        "                pass\n",
    ),
    (
        "statement:lift-undo-reversed",
        "lifted reservations are given back newest first",
        "session/statement.py",
        "        for op in self._lifted:\n",
        "        for op in reversed(self._lifted):\n",
    ),
    (
        "statement:kept-not-bound",
        "a commit that binds realised reservations leaves the job's kept allocations kept",
        "session/statement.py",
        "        if binding and self._bind_kept:",
        "        if False:",
    ),
    (
        "ledger:unmove-not-back-on-node",
        "the undo of a move leaves the task Releasing on no node",
        "session/ledger.py",
        "    ssn.task_node[task] = node\n    ssn.task_gpus[task] = gpus\n    _set_state(",
        "    _set_state(",
    ),
)

#: Mutants of the cluster arrays moved over a node-set change
#: (:func:`gangsched.session.arrays._node_set_moved`): (id, description, module, old text, new
#: text), as :data:`UNDO`.
ARRAYS: tuple[tuple[str, str, str, str, str], ...] = (
    (
        "arrays:moved-rows-not-moved",
        "the occupancy rows of the nodes kept stay zero after a node-set change",
        "session/arrays.py",
        "    used[new], releasing[new], pipelined[new] = (",
        "    _ = (",
    ),
    (
        "arrays:moved-devices-not-moved",
        "the used devices of the nodes kept stay zero after a node-set change",
        "session/arrays.py",
        "gpu_used[to], gpu_releasing[to] = base.gpu_used[src], base.gpu_releasing[src]",
        "gpu_releasing[to] = base.gpu_releasing[src]",
    ),
    (
        "arrays:moved-reserved-devices-not-moved",
        "the reserved devices of the nodes kept stay zero after a node-set change",
        "session/arrays.py",
        "    gpu_pipelined[to] = base.gpu_pipelined[src]\n",
        "    pass\n",
    ),
    (
        "arrays:moved-devices-read-at-new-rows",
        "the devices are read at the nodes' new rows instead of their old ones",
        "session/arrays.py",
        "    src, _ = base.devices_of(old)",
        "    src, _ = base.devices_of(new[new < base.n_nodes])",
    ),
    (
        "arrays:moved-rows-read-at-new-rows",
        "the occupancy rows are read at the nodes' new rows instead of their old ones",
        "session/arrays.py",
        "        base.used[old],\n",
        "        base.used[np.minimum(new, base.n_nodes - 1)],\n",
    ),
    (
        "arrays:moved-changed-not-booked",
        "the nodes whose tasks changed (the new ones among them) are not booked again",
        "session/arrays.py",
        "    _rebook(fresh, rebook, books)\n",
        "    pass\n",
    ),
    (
        "arrays:moved-changed-kept-moved",
        "a kept node whose tasks changed is moved with its old occupancy, not booked again",
        "session/arrays.py",
        "        if tasks is not None:\n",
        "        if tasks is not None and name not in old_index:\n",
    ),
    (
        "arrays:moved-new-node-unlisted",
        "a new node the hint lists no tasks for is booked from nothing",
        "session/arrays.py",
        "        if j is None:\n            return _build(snapshot, spec)",
        "        if j is None:\n            continue",
    ),
    (
        "arrays:moved-devices-unchecked",
        "devices are moved over a node whose devices differ and that the hint does not list",
        "session/arrays.py",
        "    if not (\n        np.array_equal(fresh.gpu_count[new]",
        "    if False and (\n        np.array_equal(fresh.gpu_count[new]",
    ),
    (
        "arrays:rebooked-rows-not-zeroed",
        "a node booked again keeps its old per-node occupancy under the new",
        "session/arrays.py",
        "        used[i], releasing[i], pipelined[i] = sums\n",
        "        used[i] += sums[0]\n"
        "        releasing[i] += sums[1]\n"
        "        pipelined[i] += sums[2]\n",
    ),
    (
        "arrays:rebooked-devices-not-zeroed",
        "a node booked again keeps its old device occupancy under the new",
        "session/arrays.py",
        "        gpu_used[devices] = gpu_releasing[devices] = gpu_pipelined[devices] = 0\n",
        "        pass\n",
    ),
)

#: The tests run against each :data:`ARRAYS` mutant.
ARRAYS_TESTS: tuple[str, ...] = (
    "tests/state/test_state_arrays_moved.py",
    "tests/state/test_state_incremental.py",
    "tests/state/test_state_templates_carry.py",
)

#: Mutants of what a continuing log carries over for the jobs and queues that did not change
#: between two cycles, and of the close step that reuses statuses through it: (id,
#: description, module, old text, new text); run against :data:`TESTS`.
CARRY: tuple[tuple[str, str, str, str, str], ...] = (
    (
        "changes:carry-every-job",
        "a continuing log keeps the last position of every job, changed or not",
        "session/changes.py",
        "    out: list[int] = np.where(rows < 0, opening, last[np.maximum(rows, 0)]).tolist()\n",
        "    out: list[int] = np.where(rows < 0, -1, last[np.maximum(rows, 0)]).tolist()\n",
    ),
    (
        "core:jobs-counts-not-compared",
        "a job whose counts at this opening differ from the last cycle's end is carried",
        "session/core.py",
        "        & (new.job_count == old.job_count[at]).all(axis=1)\n",
        "",
    ),
    (
        "core:jobs-tasks-not-compared",
        "a job whose task records changed is carried",
        "session/core.py",
        "        & (strays == 0)\n",
        "",
    ),
    (
        "core:job-record-not-compared",
        "a job whose record changed is carried",
        "session/core.py",
        "    old_of = new.columns.job_source  # the same record\n"
        "    if old_of is None:\n"
        "        old_of = same_records(old.columns.job_ids, new.columns.job_ids)\n",
        "    old_of = np.array(\n"
        "        [o_snap.job_index.get(j.name, -1) for j in n_snap.jobs], dtype=np.int64\n"
        "    )\n",
    ),
    (
        "core:queue-jobs-not-compared",
        "a queue one of whose jobs changed is carried",
        "session/core.py",
        "(q_old >= 0) & ~moved & (",
        "(q_old >= 0) & (",
    ),
    (
        "core:queue-record-not-compared",
        "a queue whose record changed is carried",
        "session/core.py",
        "        if oq >= 0 and o_snap.queues[oq] is queue:",
        "        if oq >= 0:",
    ),
    (
        "evaluation:carried-over-renumbered-rows",
        "evaluations are taken over as if the node rows continued over a node-set change",
        "session/evaluation.py",
        "        if not log.knows(old.changes.lineage, old.changes.end):\n",
        "        if log.lineage is not old.changes.lineage:\n",
    ),
    (
        "evaluation:unscored-never-scored",
        "the rows a feasibility read left unscored are never scored",
        "session/evaluation.py",
        "        if scored and ev.unscored is not None:\n            self._score_rows(ev, tmpl)\n",
        "",
    ),
    (
        "evaluation:moved-unscored-dropped",
        "the unscored rows of an evaluation moved over a node-set change are dropped",
        "session/evaluation.py",
        "            ev.unscored = now if now.size else None\n",
        "            ev.unscored = None\n",
    ),
    (
        "close:job-words-not-compared",
        "a job whose reason changed keeps its last status",
        "session/close.py",
        "            or entry.reason != reason\n",
        "",
    ),
    (
        "close:job-admission-not-compared",
        "a job admitted (or not) unlike the last cycle keeps its last status",
        "session/close.py",
        "            or entry.phase is not phase\n",
        "",
    ),
    (
        "close:changed-job-counts-not-compared",
        "a job the log names keeps its last status when its tasks per state moved",
        "session/close.py",
        " or entry.row != row or ",
        " or ",
    ),
    (
        "close:changed-job-record-not-compared",
        "a job the log names keeps its last status when its record changed",
        "session/close.py",
        "if entry.job is not job or ",
        "if ",
    ),
    (
        "close:changed-job-best-effort-not-compared",
        "a job the log names keeps its last status when its pending best-effort tasks moved",
        "session/close.py",
        " or entry.best_effort != be:",
        ":",
    ),
    (
        "close:cycle-memo-ignores-words",
        "statuses made this cycle are shared by jobs of one shape whatever their reasons",
        "session/close.py",
        "job.min_available, phase, lost, reason)",
        "job.min_available, phase, lost)",
    ),
    (
        "close:queue-fresh-jobs-ignored",
        "a queue whose jobs' statuses were worked out again keeps its last status",
        "session/close.py",
        "    dirty = np.bincount(ssn.job_queue[book.fresh], minlength=n_q) > 0\n",
        "    dirty = np.zeros(n_q, dtype=np.bool_)\n",
    ),
    (
        "close:queue-log-ignored",
        "a queue the change log names keeps its last status",
        "session/close.py",
        "    dirty[changed] = True\n",
        "",
    ),
    (
        "close:queue-shares-not-compared",
        "a queue whose deserved share moved keeps its last status",
        "session/close.py",
        "            and entry.deserved == deserved_row\n",
        "",
    ),
    (
        "close:queue-mapping-rows-not-compared",
        "a queue status worked out again keeps the last one's resource mappings",
        "session/close.py",
        "        same = (False,) * 4 if before is None else tuple(map(eq, rows, before.rows))\n",
        "        same = (False,) * 4 if before is None else (True,) * 4\n",
    ),
    (
        "close:book-words-not-read",
        "a job whose words alone moved is not looked at",
        "session/close.py",
        "    moved = set(compress(said, map(ne, kept_words, reasons.values())))\n",
        "    moved = set()\n",
    ),
    (
        "close:book-lost-not-read",
        "a job lost in the last cycle and not now is not looked at",
        "session/close.py",
        "    moved |= book.lost - unschedulable_now\n",
        "",
    ),
    (
        "close:book-running-not-read",
        "a running job found lost this cycle is not looked at",
        "session/close.py",
        "    moved |= (unschedulable_now & book.running) - book.lost\n",
        "",
    ),
    (
        "close:book-unsettled-not-read",
        "a job whose phase a cycle may move is not looked at",
        "session/close.py",
        "    moved |= book.unsettled\n",
        "",
    ),
    (
        "close:book-gone-jobs-kept",
        "a job gone from the snapshot keeps its status in the book",
        "session/close.py",
        "        del statuses[name]\n",
        "        pass\n",
    ),
    (
        "close:book-reserving-not-marked",
        "an admitted job with min_resources is not named among those reserving",
        "session/close.py",
        '                        status.phase == "Inqueue" and job.min_resources is not None,\n',
        "                        False,\n",
    ),
    (
        "close:book-queue-phases-not-moved",
        "a job whose phase moved still counts in its queue under its last phase",
        "session/close.py",
        "                    phases_of[before.job.queue][was] -= 1\n",
        "                    pass\n",
    ),
    (
        "close:book-asking-not-marked",
        "a job whose record names policies is not named among those asking",
        "session/close.py",
        "                        asks,\n",
        "                        False,\n",
    ),
)

#: The tests run against each :data:`UNDO` mutant.
UNDO_TESTS: tuple[str, ...] = (
    "tests/cycle/test_statement_ops.py",
    "tests/cycle/test_gate.py",
    "tests/preemption/test_consolidation.py",
    "tests/preemption/test_disruption_machine.py",
    "tests/cycle/test_scheduler_scenarios.py",
)

#: Mutants no test can kill, and why.
EQUIVALENT: dict[str, str] = {
    "core:queue-jobs-not-compared": (
        "the close step, the one reader of queue positions across cycles, works a queue's "
        "status out again whenever one of its jobs' statuses is, and a job that changed "
        "always is; a job gone from the queue changes its count of jobs, still compared"
    ),
    "session/evaluation:Evaluator.evaluate:node_since:ignored": (
        "node_since is the one-entry shortcut: answering -1 sends the refresh to nodes_since, "
        "which names the same node (the same answers, through the vector path)"
    ),
}

#: The tests run against each mutant (fast ones first: ``-x`` stops at the first failure).
TESTS: tuple[str, ...] = (
    "tests/cycle/test_cursors.py",
    "tests/plugins/test_incremental_plugin_example.py",
    "tests/cycle/test_evaluation_carry.py",
    "tests/cycle/test_attack_one_row_paths.py",
    "tests/state/test_state_incremental.py",
    "tests/cycle/test_hostile_dispatch_carry.py",
    "tests/sim/test_fgd_general_engine.py",
    "tests/cycle/test_pod_affinity.py",
    "tests/state/test_state_templates_carry.py",
    "tests/state/test_close_reuse.py",
    "tests/state/test_close_book.py",
    "tests/preemption/test_volcano_play_room.py",
)


@dataclass(frozen=True)
class Mutant:
    id: str
    module: str
    line: int
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

    def span(self, node: ast.AST) -> tuple[int, int]:
        line, col = node.lineno, node.col_offset  # type: ignore[attr-defined]
        end_line, end_col = node.end_lineno, node.end_col_offset  # type: ignore[attr-defined]
        return self.starts[line - 1] + col, self.starts[end_line - 1] + end_col

    def seg(self, node: ast.AST) -> bytes:
        a, b = self.span(node)
        return self.text[a:b]


def _function_of(tree: ast.Module, line: int) -> str:
    """The innermost function (``Class.method``) holding ``line``."""
    best = ""
    stack: list[tuple[ast.AST, str]] = [(tree, "")]
    while stack:
        node, prefix = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                end = child.end_lineno or child.lineno
                if child.lineno <= line <= end:
                    if isinstance(child, ast.FunctionDef):
                        best = name
                    stack.append((child, name + "."))
    return best or "<module>"


def _site_mutants(module: str, text: bytes) -> list[Mutant]:
    src = _Source(text)
    tree = ast.parse(text)
    out: list[Mutant] = []
    seen: dict[str, int] = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        question = node.func.attr
        where = f"{module.removesuffix('.py')}:{_function_of(tree, node.lineno)}:{question}"
        seen[where] = seen.get(where, 0) + 1
        if seen[where] > 1:
            where += f"#{seen[where]}"
        a, b = src.span(node)
        receiver = src.seg(node.func.value)
        if question == "fingerprint":
            out.append(
                Mutant(
                    f"{where}:ignored", module, node.lineno, "the occupancy is not told apart",
                    a, b, b'b""',
                )
            )  # fmt: skip
            continue
        at = QUESTIONS.get(question)
        if at is None or len(node.args) <= at:
            continue
        ignored = (
            b"False"
            if question in BOOLEAN
            else receiver + b"." + question.encode() + b"(" + receiver + b".end)"
        )
        out.append(
            Mutant(
                f"{where}:ignored", module, node.lineno, f"{question} answers nothing changed",
                a, b, ignored,
            )
        )  # fmt: skip
        ca, cb = src.span(node.args[at])
        out.append(
            Mutant(
                f"{where}:stale", module, node.lineno, f"{question} reads its cursor a step stale",
                ca, cb, b"(" + src.seg(node.args[at]) + b") + 1",
            )
        )  # fmt: skip
    return out


def _named_mutants(src_root: Path) -> list[Mutant]:
    text = (src_root / "gangsched" / OWNER).read_bytes()
    out = []
    for ident, what, old, new in NAMED:
        count = text.count(old.encode())
        if count != 1:
            raise SystemExit(f"{OWNER}: {old!r} occurs {count} times (expected once): update NAMED")
        a = text.index(old.encode())
        line = text[:a].count(b"\n") + 1
        out.append(Mutant(ident, OWNER, line, what, a, a + len(old.encode()), new.encode()))
    return out


def undo_mutants(
    src_root: Path, table: tuple[tuple[str, str, str, str, str], ...] = UNDO
) -> list[Mutant]:
    """The :data:`UNDO` mutants of the statement's undo (or those of another such
    ``table``)."""
    out = []
    for ident, what, module, old, new in table:
        text = (src_root / "gangsched" / module).read_bytes()
        count = text.count(old.encode())
        if count != 1:
            raise SystemExit(
                f"{module}: {old!r} occurs {count} times (expected once): update the table"
            )
        a = text.index(old.encode())
        line = text[:a].count(b"\n") + 1
        out.append(Mutant(ident, module, line, what, a, a + len(old.encode()), new.encode()))
    return out


def mutants(src_root: Path) -> list[Mutant]:
    """Every mutant: each cursor question outside the log's module, then :data:`NAMED`."""
    out: list[Mutant] = []
    package = src_root / "gangsched"
    for path in sorted(package.rglob("*.py")):
        module = path.relative_to(package).as_posix()
        if module == OWNER:
            continue
        text = path.read_bytes()
        if b"changes" not in text and b"log" not in text:
            continue
        out.extend(_site_mutants(module, text))
    out.sort(key=lambda m: (m.module, m.line, m.id))
    return out + _named_mutants(src_root)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="tree holding src/ and tests/")
    parser.add_argument(
        "--only", nargs="*", default=[], help="run only mutants whose id contains one of these"
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
    parser.add_argument(
        "--tests", nargs="*", help=f"instead of {TESTS} (and {UNDO_TESTS}, {ARRAYS_TESTS})"
    )
    args = parser.parse_args(argv)
    root = args.root.resolve()
    src_root = root / "src"
    groups = [
        (mutants(src_root) + undo_mutants(src_root, CARRY), TESTS),
        (undo_mutants(src_root), UNDO_TESTS),
        (undo_mutants(src_root, ARRAYS), ARRAYS_TESTS),
    ]
    chosen = [
        ([m for m in found if not args.only or any(o in m.id for o in args.only)], tests)
        for found, tests in groups
    ]
    if args.list:
        for found, _ in chosen:
            for m in found:
                print(f"{m.id:64} {m.module}:{m.line}  {m.description}")
        print(f"{sum(len(found) for found, _ in chosen)} mutants")
        return 0
    results: list[Result] = []
    for found, tests in chosen:
        if not found:
            continue
        listed = args.tests if args.tests is not None else tests
        judged = judge_all(
            found,
            root=root,
            tests=[t for t in listed if (root / t).exists()],
            workers=args.workers,
            timeout=args.timeout,
            equivalent=EQUIVALENT,
            prefix="mutate-cursors-",
            width=64,
        )
        if judged is None:
            return 2
        results += judged
    return summarize(results, args.json)


if __name__ == "__main__":
    sys.exit(main())
