"""The layer rule of ARCHITECTURE.md, checked on the source with ``ast``.

A module may import only from its own layer or a lower one, whether the import runs when the
module loads, inside a function, or only for annotations (``if TYPE_CHECKING:``). Within L5,
actions and plugins never import each other (a package's ``__init__`` may import its own
members to register them). Only the ``placement/cpsat`` package imports ortools. The core
(L0-L6) does not import modules that reach files, clocks, the environment or unseeded
randomness.

Modules import one another without cycles. An import inside a function or under
``TYPE_CHECKING`` can close a cycle that Python would refuse at load time (a plugin Protocol
naming the Session it receives, a record naming its builder); each such import is a known
debt, declared in :data:`CYCLE_EDGES` with its reason, and the only way an import may point
to a higher layer.

The maps are strict both ways: every module under ``src/gangsched`` must appear in
:data:`LAYERS` (a new module fails this test until it is placed there), and every entry of
:data:`LAYERS`, :data:`IMPURE_EXCEPTIONS`, :data:`ISOLATED` and :data:`CYCLE_EDGES` must
still match the code (a stale entry fails too).
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path

import pytest

import gangsched

PACKAGE = "gangsched"
SRC = Path(gangsched.__file__).resolve().parent

#: Module (dotted, relative to the package) → layer. ``name.*`` covers a subpackage: its
#: ``__init__`` and every module below it. The package root re-exports the public API.
LAYERS: dict[str, int] = {
    # L0: errors, units and bounds every layer uses.
    "errors": 0,
    "units": 0,
    "limits": 0,
    "_frozen": 0,
    "_types": 0,
    "_codegen": 0,
    # L1: the records, the snapshot and its topology index.
    "model.*": 1,
    # L2: the columns a cycle works on, the fit rule, the decisions and the FGD measure.
    "session.arrays": 2,
    "session.fit": 2,
    "session.fit_rule": 2,
    "session.changes": 2,
    "session.task_states": 2,
    "decisions": 2,
    "fragmentation.*": 2,
    # L3: placement problems and placers, the plugin contract, combiners, configuration.
    "placement.*": 3,
    "framework.extension_points": 3,
    "framework.combine": 3,
    "config.*": 3,
    # L4: the session, its statement and gate, the dispatcher and registry, shared rules.
    "framework.*": 4,
    "session.*": 4,
    "session.rules.*": 4,
    # L5: actions, plugins, and the rules only they read.
    "actions.*": 5,
    "plugins.*": 5,
    "session.rules.policies": 5,
    "session.rules.disruption": 5,
    # L6: the cycle as a function, its close, the long-lived state and the package root.
    "scheduler": 6,
    "session.close": 6,
    "state.*": 6,
    "__init__": 6,
    # L7: outside the core (files, clocks, studies, the command line).
    "testing.*": 7,
    "sim.*": 7,
    "io.*": 7,
    "cli.*": 7,
    "metrics": 7,
    "__main__": 7,
}

LAYER_NAMES = {
    0: "L0 (errors, units, limits)",
    1: "L1 (model/*: records, snapshot, topology, GPU charges)",
    2: "L2 (session arrays, fit and task states, decisions, fragmentation/*)",
    3: "L3 (placement/*, framework contract and combiners, config/*)",
    4: "L4 (session/*, framework dispatch and registry, session/rules/*)",
    5: "L5 (actions/*, plugins/*, job policies, disruption budgets)",
    6: "L6 (scheduler, session close, state/*, package root)",
    7: "L7 (testing/*, sim/*, io/*, cli/*, metrics)",
}

#: Subpackages whose members never import one another (ARCHITECTURE.md: "never import each other").
ISOLATED = ("actions", "plugins")

#: Core modules allowed one impure import, with the reason. The CP-SAT placer hands the solver
#: a wall-clock budget (a deadline shared by its successive solves); tests and benchmarks pass
#: ``max_deterministic_time`` instead, which makes results machine-independent.
IMPURE_EXCEPTIONS: dict[str, frozenset[str]] = {"placement.cpsat._budget": frozenset({"time"})}

#: Modules outside placement/cpsat that import ortools, with the reason (L7 studies only).
ORTOOLS_USERS: dict[str, str] = {
    "sim.fgd.window": "the FGD study's windowed batch protocol builds its own CP-SAT model",
}

#: Imports that close an import cycle, ``(importer, imported)`` → why. Each is an import
#: under ``TYPE_CHECKING`` ("type") or inside a function ("deferred"); a cycle of module-level
#: imports is never allowed. These are debts to pay down, not a place for new modules.
CYCLE_EDGES: dict[tuple[str, str], str] = {
    (
        "framework.extension_points",
        "session.core",
    ): "type: the extension-point Protocols name the Session they receive",
    ("framework.dispatch", "session.core"): "type: the dispatcher annotates the session it serves",
    ("session.evaluation", "session.core"): "type: per-template evaluation annotates its session",
    (
        "framework.registry",
        "session.core",
    ): "type: plugin factories annotate the session they open on",
    ("session.statement", "session.core"): "type: the Statement annotates the session it mutates",
    ("session.ledger", "session.core"): "type: the placement ledger annotates its session",
    ("session.pod_constraints", "session.core"): "type: the pod rules annotate their session",
    ("session.gate", "session.core"): "deferred: the gate reads the session's holding states",
    (
        "model.snapshot",
        "model.topology",
    ): "deferred: a snapshot builds its topology index on first use",
    ("placement._result", "placement.problem"): "type: results name the problem they answer",
    ("sim.replay.result", "sim.replay.engine"): "type: a replay result names its engine",
}

#: Standard-library modules the core (L0-L6) must not import: they reach files, clocks,
#: the environment, processes, the network or unseeded randomness.
IMPURE_STDLIB = frozenset(
    {
        "datetime",
        "glob",
        "http",
        "os",
        "pathlib",
        "random",
        "shutil",
        "socket",
        "subprocess",
        "tempfile",
        "time",
        "urllib",
    }
)


@dataclass(frozen=True)
class Module:
    name: str  # dotted, relative to the package: "placement.greedy", "__init__"
    path: Path
    is_package: bool  # an __init__.py

    @property
    def package(self) -> str:
        """The dotted package the module lives in (relative; "" for the root)."""
        if self.is_package:
            return "" if self.name == "__init__" else self.name
        return self.name.rpartition(".")[0]


def discover() -> list[Module]:
    out: list[Module] = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).with_suffix("")
        parts = list(rel.parts)
        is_package = parts[-1] == "__init__"
        if is_package and len(parts) > 1:
            parts = parts[:-1]
        out.append(Module(".".join(parts), path, is_package))
    return out


MODULES = discover()
MODULE_NAMES = {m.name for m in MODULES}


def layer_of(name: str) -> int | None:
    """The layer of a relative dotted module name, or None when it is not in the map."""
    if name in LAYERS:
        return LAYERS[name]
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        key = ".".join(parts[:i]) + ".*"
        if key in LAYERS:
            return LAYERS[key]
    return None


def _resolve_relative(module: Module, level: int, target: str | None) -> str:
    base = module.package.split(".") if module.package else []
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join([*base, *([target] if target else [])])


def _is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _type_only_lines(tree: ast.Module) -> set[int]:
    """Line numbers of imports that sit in the body of an ``if TYPE_CHECKING:`` block."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for stmt in node.body:
                for inner in ast.walk(stmt):
                    if isinstance(inner, ast.Import | ast.ImportFrom):
                        lines.add(inner.lineno)
    return lines


def type_only_imports(module: Module) -> set[int]:
    tree = ast.parse(module.path.read_text(encoding="utf-8"), filename=str(module.path))
    return _type_only_lines(tree)


def _deferred_lines(tree: ast.Module) -> set[int]:
    """Line numbers of imports inside a function (they run when it is called)."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            for inner in ast.walk(node):
                if isinstance(inner, ast.Import | ast.ImportFrom):
                    lines.add(inner.lineno)
    return lines


def import_kinds(module: Module) -> dict[int, str]:
    """Line → ``"type"`` (under TYPE_CHECKING) or ``"deferred"`` (in a function), for the
    imports that do not run when the module loads."""
    tree = ast.parse(module.path.read_text(encoding="utf-8"), filename=str(module.path))
    kinds = dict.fromkeys(_deferred_lines(tree), "deferred")
    kinds.update(dict.fromkeys(_type_only_lines(tree), "type"))
    return kinds


def import_graph(modules: list[Module]) -> dict[str, dict[str, str]]:
    """Importer → imported module → how (``"module"``, ``"deferred"`` or ``"type"``; the
    strongest when a module is imported several ways), internal modules only."""
    rank = {"type": 0, "deferred": 1, "module": 2}
    names = {m.name for m in modules}
    graph: dict[str, dict[str, str]] = {m.name: {} for m in modules}
    for m in modules:
        kinds = import_kinds(m)
        for line, target in imports_of(m):
            if target.startswith("!") or target == m.name or target not in names:
                continue
            how = kinds.get(line, "module")
            old = graph[m.name].get(target)
            if old is None or rank[how] > rank[old]:
                graph[m.name][target] = how
    return graph


def cycles(graph: dict[str, dict[str, str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative),
    each sorted; every import between members of one lies on a cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, {})))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    comp.append(member)
                    if member == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return sorted(out)


def cycle_edges(graph: dict[str, dict[str, str]]) -> dict[tuple[str, str], str]:
    """Every import between two members of one cycle, ``(importer, imported)`` → how."""
    out: dict[tuple[str, str], str] = {}
    for comp in cycles(graph):
        members = set(comp)
        for a in comp:
            for b, how in graph[a].items():
                if b in members:
                    out[(a, b)] = how
    return out


@functools.cache
def _graph() -> dict[str, dict[str, str]]:
    return import_graph(MODULES)


def _matches_a_module(key: str) -> bool:
    if key.endswith(".*"):
        head = key[:-2]
        return any(n == head or n.startswith(head + ".") for n in MODULE_NAMES)
    return key in MODULE_NAMES


def imports_of(module: Module) -> list[tuple[int, str]]:
    """``(line, target)`` for every import in ``module`` (type-only imports included).

    Internal targets are relative dotted names ("model", "placement.greedy", "__init__" for
    the package root); external ones are prefixed with "!" ("!ortools.sat.python").
    """
    tree = ast.parse(module.path.read_text(encoding="utf-8"), filename=str(module.path))
    out: list[tuple[int, str]] = []

    def internal(dotted: str) -> str:
        return dotted if dotted else "__init__"

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == PACKAGE or alias.name.startswith(PACKAGE + "."):
                    out.append((node.lineno, internal(alias.name[len(PACKAGE) + 1 :])))
                else:
                    out.append((node.lineno, "!" + alias.name))
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                src = node.module or ""
                if src != PACKAGE and not src.startswith(PACKAGE + "."):
                    out.append((node.lineno, "!" + src))
                    continue
                base = src[len(PACKAGE) + 1 :]
            else:
                base = _resolve_relative(module, node.level, node.module)
            # `from pkg import sub` imports the submodule when one exists.
            for alias in node.names:
                candidate = f"{base}.{alias.name}" if base else alias.name
                out.append(
                    (node.lineno, candidate if candidate in MODULE_NAMES else internal(base))
                )
    return out


#: Subpackages of an isolated group that hold code its members share (not members themselves).
SHARED_SUBPACKAGES = ("actions.victims",)


def _is_shared_code(name: str) -> bool:
    if name.rpartition(".")[2].startswith("_"):
        return True
    return any(name == s or name.startswith(s + ".") for s in SHARED_SUBPACKAGES)


def _isolated_group(name: str) -> str | None:
    head = name.split(".")[0]
    return head if head in ISOLATED else None


# ------------------------------------------------------------------------------------------


def test_the_package_was_found() -> None:
    assert {"errors", "units", "model", "model.snapshot", "__init__"} <= MODULE_NAMES


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.name)
def test_every_module_has_a_layer(module: Module) -> None:
    assert layer_of(module.name) is not None, (
        f"{module.path.relative_to(SRC.parent)} is not in the layer map: add "
        f"{module.name!r} (or its subpackage as 'name.*') to LAYERS in "
        "tests/project/test_layers.py, with its layer from ARCHITECTURE.md"
    )


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.name)
def test_imports_respect_layers(module: Module) -> None:
    own = layer_of(module.name)
    if own is None:
        pytest.fail(f"{module.name} has no layer (see test_every_module_has_a_layer)")
    problems: list[str] = []
    kinds = import_kinds(module)
    for line, target in imports_of(module):
        if target.startswith("!"):
            continue
        theirs = layer_of(target)
        if (module.name, target) in CYCLE_EDGES and line in kinds and theirs is not None:
            continue  # a declared debt (see CYCLE_EDGES); test_import_cycles checks it
        where = f"{module.path.relative_to(SRC.parent)}:{line}"
        how = {"type": " (under TYPE_CHECKING)", "deferred": " (in a function)"}
        if theirs is None:
            problems.append(f"{where} imports {target!r}, which has no layer in LAYERS")
        elif theirs > own:
            problems.append(
                f"{where}: {module.name} is {LAYER_NAMES[own]} but imports {target}"
                f"{how.get(kinds.get(line, ''), '')}, which is {LAYER_NAMES[theirs]}; a module "
                "imports only from its own layer or lower"
            )
    assert not problems, "\n".join(problems)


def test_import_cycles_are_declared() -> None:
    """No cycle of imports that run when their modules load; every import under
    TYPE_CHECKING or in a function that closes a cycle is declared in CYCLE_EDGES."""
    graph = _graph()
    at_load = {a: {b: h for b, h in out.items() if h == "module"} for a, out in graph.items()}
    problems = [f"modules import one another when they load: {c}" for c in cycles(at_load)]
    for (a, b), how in sorted(cycle_edges(graph).items()):
        if how != "module" and (a, b) not in CYCLE_EDGES:
            problems.append(
                f"{a} imports {b} ({'under TYPE_CHECKING' if how == 'type' else 'in a function'})"
                ", which closes an import cycle: move the shared names to a lower module, or, "
                "if the cycle must stay, declare it in CYCLE_EDGES with its reason"
            )
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("edge", sorted(CYCLE_EDGES), ids=lambda e: f"{e[0]}->{e[1]}")
def test_declared_cycle_edges_are_current(edge: tuple[str, str]) -> None:
    found = cycle_edges(_graph())
    assert edge in found and found[edge] != "module", (
        f"CYCLE_EDGES declares {edge[0]} -> {edge[1]}, but that import no longer closes an "
        "import cycle (or now runs at module level): remove the entry"
    )


@pytest.mark.parametrize("key", sorted(LAYERS))
def test_no_stale_layer_entries(key: str) -> None:
    assert _matches_a_module(key), (
        f"LAYERS has {key!r}, which matches no module under src/gangsched: remove it"
    )
    assert LAYERS[key] in LAYER_NAMES, f"LAYERS[{key!r}] = {LAYERS[key]} is not a layer"


def test_no_stale_exceptions_or_groups() -> None:
    stale = [k for k in IMPURE_EXCEPTIONS if k not in MODULE_NAMES]
    stale += [g for g in ISOLATED if not _matches_a_module(g + ".*")]
    stale += [k for k in ORTOOLS_USERS if k not in MODULE_NAMES]
    assert not stale, f"IMPURE_EXCEPTIONS / ISOLATED name no module: {stale}"


@pytest.mark.parametrize(
    "module", [m for m in MODULES if _isolated_group(m.name)], ids=lambda m: m.name
)
def test_actions_and_plugins_never_import_each_other(module: Module) -> None:
    problems: list[str] = []
    for line, target in imports_of(module):
        if target.startswith("!") or target == module.name:
            continue
        group = _isolated_group(target)
        if group is None:
            continue
        # A package __init__ may import its own members (to register them).
        if module.is_package and target.startswith(module.name + "."):
            continue
        # Private helpers and shared subpackages of the same group (actions/_base.py,
        # actions/victims/) are shared code, not members.
        if _is_shared_code(target) and group == _isolated_group(module.name):
            continue
        problems.append(
            f"{module.path.relative_to(SRC.parent)}:{line}: {module.name} imports {target}; "
            "actions and plugins never import one another (share code through a lower layer)"
        )
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.name)
def test_only_cpsat_imports_ortools(module: Module) -> None:
    if module.name == "placement.cpsat" or module.name.startswith("placement.cpsat."):
        return
    if module.name in ORTOOLS_USERS:
        assert layer_of(module.name) == 7, f"{module.name}: only an L7 study may use ortools"
        return
    hits = [line for line, t in imports_of(module) if t == "!ortools" or t.startswith("!ortools.")]
    assert not hits, (
        f"{module.name} imports ortools (lines {hits}); only the placement/cpsat package may, so "
        "the solver stays an optional dependency of one module"
    )


@pytest.mark.parametrize(
    "module", [m for m in MODULES if (layer_of(m.name) or 0) <= 6], ids=lambda m: m.name
)
def test_core_does_not_import_impure_modules(module: Module) -> None:
    bad = sorted(
        {
            (line, t[1:])
            for line, t in imports_of(module)
            if t.startswith("!")
            and t[1:].split(".")[0] in IMPURE_STDLIB
            and t[1:].split(".")[0] not in IMPURE_EXCEPTIONS.get(module.name, frozenset())
        }
    )
    assert not bad, (
        f"{module.name} (core) imports {', '.join(name for _, name in bad)} at lines "
        f"{[line for line, _ in bad]}: the core never touches files, clocks, the environment or "
        "unseeded randomness; move that code to io/, sim/, cli or report"
    )


# ------------------------------------------------------------------------------------------
# The checker itself


def _fake(name: str, is_package: bool = False) -> Module:
    return Module(name, SRC / "x.py", is_package)


def test_layer_lookup() -> None:
    assert layer_of("errors") == 0
    assert layer_of("placement") == layer_of("placement.cpsat") == 3
    assert layer_of("plugins.gang") == 5
    assert layer_of("session.arrays") == 2
    assert layer_of("session.statement") == layer_of("session.rules.gang") == 4
    assert layer_of("session.rules.policies") == 5
    assert layer_of("session.close") == 6
    assert layer_of("sim.replay.events") == 7
    assert layer_of("nonexistent") is None
    assert layer_of("placementx") is None


def test_relative_import_resolution() -> None:
    assert _resolve_relative(_fake("model"), 1, "units") == "units"
    assert _resolve_relative(_fake("placement.greedy"), 1, "base") == "placement.base"
    assert _resolve_relative(_fake("placement.greedy"), 2, "model") == "model"
    assert _resolve_relative(_fake("placement", is_package=True), 1, "greedy") == (
        "placement.greedy"
    )
    assert _resolve_relative(_fake("__init__", is_package=True), 1, "model") == "model"
    assert _resolve_relative(_fake("plugins.gang"), 2, None) == ""


def test_checker_sees_a_violation(tmp_path: Path) -> None:
    source = tmp_path / "units.py"
    source.write_text(
        "from __future__ import annotations\n"
        "from typing import TYPE_CHECKING\n"
        "from .model import Node\n"
        "if TYPE_CHECKING:\n"
        "    from gangsched.model.snapshot import Snapshot\n"
        "import gangsched.scheduler\n"
        "import ortools.sat.python.cp_model\n"
        "from . import errors\n",
        encoding="utf-8",
    )
    found = imports_of(Module("units", source, False))
    targets = [t for _, t in found]
    assert "model" in targets and "model.snapshot" in targets and "scheduler" in targets
    assert "!ortools.sat.python.cp_model" in targets
    assert "errors" in targets
    assert type_only_imports(Module("units", source, False)) == {5}
    assert all(layer_of(t) is not None for t in targets if not t.startswith("!"))
    assert max(layer_of(t) or 0 for t in targets if not t.startswith("!")) == 6


def test_cycle_finder() -> None:
    graph = {
        "a": {"b": "module"},
        "b": {"c": "module"},
        "c": {"a": "type"},
        "d": {"a": "module", "e": "deferred"},
        "e": {"d": "module"},
        "f": {},
    }
    assert cycles(graph) == [["a", "b", "c"], ["d", "e"]]
    edges = cycle_edges(graph)
    assert edges[("c", "a")] == "type" and edges[("e", "d")] == "module"
    assert ("d", "a") not in edges  # d reaches the first cycle but is not on it
    assert cycles({"x": {"y": "module"}, "y": {}}) == []


def test_checker_sees_type_only_and_deferred_imports(tmp_path: Path) -> None:
    source = tmp_path / "plugin.py"
    source.write_text(
        "from __future__ import annotations\n"
        "from typing import TYPE_CHECKING\n"
        "from .errors import SnapshotError\n"
        "if TYPE_CHECKING:\n"
        "    from .session import Session\n"
        "def later() -> None:\n"
        "    from .scheduler import schedule\n",
        encoding="utf-8",
    )
    module = Module("plugin", source, False)
    kinds = import_kinds(module)
    assert kinds == {5: "type", 7: "deferred"}
    others = []
    for name in ("errors", "session", "scheduler"):
        (tmp_path / f"{name}.py").write_text("", encoding="utf-8")
        others.append(Module(name, tmp_path / f"{name}.py", False))
    graph = import_graph([module, *others])
    assert graph["plugin"] == {"errors": "module", "session": "type", "scheduler": "deferred"}


def test_stale_entries_are_seen() -> None:
    assert _matches_a_module("placement.*") and _matches_a_module("model")
    assert not _matches_a_module("nonexistent") and not _matches_a_module("nothere.*")
