"""One writer for each thing a cycle changes, checked on the source of the core with :mod:`ast`.

* **Placements, evictions and reservations**: the statement
  (:mod:`gangsched.session.statement`) is their only writer. Only it imports the ledger that
  does the bookkeeping; only the ledger assigns a session's placement columns (task states,
  nodes, devices, node and device occupancy, job and queue allocations, counters); only the
  statement assigns job phases (admission) and files its operations (``Session.record``); only
  ``Session.record`` changes the ``committed`` and ``kept`` lists.
* **Messages between actions** (:mod:`gangsched.session.messages`): each field of
  ``CycleMessages`` has one write method, called by one module (its owner); every other
  module only reads it.

The core is every module but ``io``, ``sim``, ``cli``, ``testing`` and ``metrics`` (which
keep state of their own and never write a session).
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import numpy as np
import pytest

import gangsched
from gangsched.session import messages as m

SRC = Path(gangsched.__file__).resolve().parent
OUTSIDE_CORE = ("io/", "sim/", "cli/", "testing/", "metrics.py")

#: Receivers that are a session: ``ssn.x``, ``self.ssn.x``, ``self._ssn.x``.
SESSIONS = {"ssn", "_ssn"}
#: A session's placement columns, and the modules that may assign them.
COLUMNS = {
    "task_state",
    "task_node",
    "task_gpus",
    "used",
    "releasing",
    "pipelined",
    "gpu_used",
    "gpu_releasing",
    "gpu_pipelined",
    "job_allocated",
    "queue_allocated",
    "job_count",
    "role_count",
}
COLUMN_WRITERS = {"session/ledger.py"}
#: Other session fields with one writer.
FIELD_WRITERS = {
    "job_phase": {"session/statement.py"},
    "committed": {"session/core.py"},
    "kept": {"session/core.py"},
}
#: List methods that change the list.
MUTATORS = {"append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse"}
#: Calls with one caller module: ``<session>.record`` (the statement's ending).
CALLERS = {"record": {"session/statement.py"}}
#: The message fields: (writing method, owner module, reading members).
MESSAGES: dict[str, tuple[str, str, frozenset[str]]] = {
    "freed_by_preemption": ("counting", "actions/enqueue.py", frozenset({"of"})),
    "reservations": ("mark", "actions/victims/loop.py", frozenset({"done"})),
}


def _core_files() -> list[Path]:
    out = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if not rel.startswith(OUTSIDE_CORE):
            out.append(path)
    return out


def _receiver(node: ast.expr) -> str:
    """The last name of an attribute's receiver: ``ssn`` for ``self.ssn.used``."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _written(target: ast.expr) -> ast.Attribute | None:
    """The session attribute an assignment target writes (``ssn.used[3] += ...`` → ``used``)."""
    while isinstance(target, ast.Subscript):
        target = target.value
    if isinstance(target, ast.Attribute) and _receiver(target.value) in SESSIONS:
        return target
    return None


def writes(tree: ast.AST) -> list[tuple[int, str, str]]:
    """``(line, what, how)`` of every write the rules restrict: assignments to session
    columns and single-writer fields, list mutations of those fields, restricted calls, and
    uses of a message other than through its readers or writer."""
    hits: list[tuple[int, str, str]] = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for target in targets:
            for sub in ast.walk(target) if isinstance(target, ast.Tuple) else [target]:
                if isinstance(sub, ast.expr):
                    attr = _written(sub)
                    if attr is not None and (attr.attr in COLUMNS or attr.attr in FIELD_WRITERS):
                        hits.append((sub.lineno, attr.attr, "assign"))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            if (
                node.func.attr in MUTATORS
                and isinstance(owner, ast.Attribute)
                and _receiver(owner.value) in SESSIONS
                and (owner.attr in COLUMNS or owner.attr in FIELD_WRITERS)
            ):
                hits.append((node.lineno, owner.attr, node.func.attr))
            if node.func.attr in CALLERS and _receiver(owner) in SESSIONS:
                hits.append((node.lineno, node.func.attr, "call"))
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Attribute)
            and node.value.attr in MESSAGES
            and _receiver(node.value.value) == "messages"
        ):
            writer, _, readers = MESSAGES[node.value.attr]
            how = "write" if node.attr == writer else "read" if node.attr in readers else "other"
            hits.append((node.lineno, f"{node.value.attr}.{node.attr}", how))
    return hits


def _allowed(rel: str, what: str, how: str) -> bool:
    if how == "read":
        return True
    if how == "other":
        return False
    if "." in what:  # a message written
        return rel == MESSAGES[what.split(".")[0]][1]
    if how == "call":
        return rel in CALLERS[what]
    if what in COLUMNS:
        return rel in COLUMN_WRITERS
    return rel in FIELD_WRITERS[what]


@pytest.mark.parametrize("path", _core_files(), ids=lambda p: p.relative_to(SRC).as_posix())
def test_each_thing_a_cycle_changes_has_one_writer(path: Path) -> None:
    rel = path.relative_to(SRC).as_posix()
    tree = ast.parse(path.read_text())
    bad = [(line, what, how) for line, what, how in writes(tree) if not _allowed(rel, what, how)]
    assert not bad, f"{rel} writes what another module owns: {bad}"


@pytest.mark.parametrize("path", _core_files(), ids=lambda p: p.relative_to(SRC).as_posix())
def test_only_the_statement_calls_the_ledger(path: Path) -> None:
    rel = path.relative_to(SRC).as_posix()
    for node in ast.walk(ast.parse(path.read_text())):
        named: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module:
            named = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
        elif isinstance(node, ast.Import):
            named = [a.name for a in node.names]
        if any(n == "gangsched.session.ledger" for n in named):
            assert rel == "session/statement.py", f"{rel} imports the ledger"


@pytest.mark.parametrize(
    ("snippet", "what"),
    [
        ("ssn.task_node[t] = n", "task_node"),
        ("self.ssn.used[node] += row", "used"),
        ("ssn.kept[:] = []", "kept"),
        ("ssn.committed.extend(ops)", "committed"),
        ("ssn.job_phase[j] = phase", "job_phase"),
        ("ssn.record(ops, committed=True)", "record"),
        ("ssn.messages.reservations.mark()", "reservations.mark"),
        ("ssn.messages.reservations._done = True", "reservations._done"),
        ("a, ssn.task_gpus[t] = 1, ()", "task_gpus"),
    ],
)
def test_the_check_sees_a_hand_written_write(snippet: str, what: str) -> None:
    """The check is not blind: each of these writes is reported (and outside its owner,
    refused)."""
    found = [w for w in writes(ast.parse(snippet)) if w[1] == what]
    assert found and not _allowed("actions/allocate.py", found[0][1], found[0][2])


def test_every_message_has_one_writer_and_readers() -> None:
    """A new message joins :data:`MESSAGES` with its writer and owner, or this fails; each
    message class has exactly its write method and its readers as public members."""
    fields = {f.name: f for f in dataclasses.fields(m.CycleMessages)}
    assert set(fields) == set(MESSAGES)
    made = m.CycleMessages()
    for name, (writer, owner, readers) in MESSAGES.items():
        cls = type(getattr(made, name))
        public = {a for a in dir(cls) if not a.startswith("_")}
        assert public == {writer} | readers, (name, public)
        assert (SRC / owner).exists()
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.reservations = m.ReservationsRealised()  # type: ignore[misc]


def test_freed_by_preemption_is_set_for_one_vote_of_one_job() -> None:
    msg = m.FreedByPreemption()
    freed, quota = np.array([1, 2]), np.array([0, 1])
    assert msg.of(3) is None
    with msg.counting(3, freed, quota):
        assert msg.of(3) is freed and msg.of(3, quota=True) is quota
        assert msg.of(4) is None
        with pytest.raises(RuntimeError, match="already counting"), msg.counting(4, freed, quota):
            pass
    assert msg.of(3) is None
    with pytest.raises(KeyError), msg.counting(5, freed, quota):
        raise KeyError("the vote failed")
    assert msg.of(5) is None  # cleared whatever the vote did


def test_the_reservations_are_marked_realised_once() -> None:
    msg = m.ReservationsRealised()
    assert not msg.done
    msg.mark()
    assert msg.done
    with pytest.raises(RuntimeError, match="realised already"):
        msg.mark()
