"""The layer rule of design.md, checked on the source with ``ast``.

A module may import only from its own layer or a lower one. Imports under
``if TYPE_CHECKING:`` are exempt from the ordering (they exist only for annotations and create
no runtime dependency, e.g. a plugin Protocol naming the Session it receives); every other
check applies to them too. Within L5, actions and plugins
never import each other (a package's ``__init__`` may import its own members to register
them). Only the ``placement/cpsat`` package imports ortools. The core (L0-L6) does not import
modules that reach files, clocks, the environment or unseeded randomness.

Every module under ``src/gangsched`` must appear in :data:`LAYERS`; a new module fails this
test until it is placed there.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

import gangsched

PACKAGE = "gangsched"
SRC = Path(gangsched.__file__).resolve().parent

#: Module (dotted, relative to the package) → layer. ``name.*`` covers a subpackage: its
#: ``__init__`` and every module below it. The package root re-exports the public API.
LAYERS: dict[str, int] = {
    "errors": 0,
    "units": 0,
    "limits": 0,
    "_frozen": 0,
    "model": 1,
    "_model_enums": 1,
    "_model_fields": 1,
    "_model_nodes": 1,
    "_model_jobs": 1,
    "_model_tasks": 1,
    "_model_totals": 1,
    "snapshot": 1,
    "_record_checks": 1,
    "topology": 1,
    "feasibility": 1,
    "arrays": 2,
    "fit": 2,
    "cycle": 2,
    "decisions": 2,
    "fragmentation": 2,
    "_frag_core": 2,
    "_frag_policies": 2,
    "placement.*": 3,
    "plugin": 3,
    "combine": 3,
    "config": 3,
    "registry": 4,
    "statement": 4,
    "session": 4,
    "dispatch": 4,
    "evaluation": 4,
    "_ledger": 4,
    "gate": 4,
    "gang": 4,
    "fairshare": 4,
    "actions.*": 5,
    "plugins.*": 5,
    "scheduler": 6,
    "state.*": 6,
    "explain": 6,
    "__init__": 6,
    "testing.*": 7,
    "sim.*": 7,
    "io.*": 7,
    "report": 7,
    "cli": 7,
    "_cli_schedule": 7,
    "_cli_replay": 7,
    "_cli_explain": 7,
    "_cli_progress": 7,
    "policies": 5,
    "disruption": 5,
    "metrics": 7,
    "quality": 7,
    "__main__": 7,
}

LAYER_NAMES = {
    0: "L0 (errors, units, _frozen)",
    1: "L1 (model, snapshot, topology, feasibility)",
    2: "L2 (arrays, decisions, fragmentation)",
    3: "L3 (placement/*, plugin, combine, config)",
    4: "L4 (registry, statement, session, gate, fairshare)",
    5: "L5 (actions/*, plugins/*)",
    6: "L6 (scheduler, explain, package root)",
    7: "L7 (testing/*, sim/*, io/*, report, cli, metrics)",
}

#: Subpackages whose members never import one another (design.md: "never import each other").
ISOLATED = ("actions", "plugins")

#: Core modules allowed one impure import, with the reason. The CP-SAT placer hands the solver
#: a wall-clock budget (a deadline shared by its successive solves); tests and benchmarks pass
#: ``max_deterministic_time`` instead, which makes results machine-independent.
IMPURE_EXCEPTIONS: dict[str, frozenset[str]] = {"placement.cpsat._budget": frozenset({"time"})}

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


def _isolated_group(name: str) -> str | None:
    head = name.split(".")[0]
    return head if head in ISOLATED else None


# ------------------------------------------------------------------------------------------


def test_the_package_was_found() -> None:
    assert {"errors", "units", "model", "snapshot", "__init__"} <= MODULE_NAMES


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.name)
def test_every_module_has_a_layer(module: Module) -> None:
    assert layer_of(module.name) is not None, (
        f"{module.path.relative_to(SRC.parent)} is not in the layer map: add "
        f"{module.name!r} (or its subpackage as 'name.*') to LAYERS in tests/test_layers.py, "
        "with its layer from design.md"
    )


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.name)
def test_imports_respect_layers(module: Module) -> None:
    own = layer_of(module.name)
    if own is None:
        pytest.fail(f"{module.name} has no layer (see test_every_module_has_a_layer)")
    problems: list[str] = []
    type_only = type_only_imports(module)
    for line, target in imports_of(module):
        if target.startswith("!"):
            continue
        theirs = layer_of(target)
        if line in type_only and theirs is not None:
            continue
        where = f"{module.path.relative_to(SRC.parent)}:{line}"
        if theirs is None:
            problems.append(f"{where} imports {target!r}, which has no layer in LAYERS")
        elif theirs > own:
            problems.append(
                f"{where}: {module.name} is {LAYER_NAMES[own]} but imports {target}, which is "
                f"{LAYER_NAMES[theirs]}; a module imports only from its own layer or lower"
            )
    assert not problems, "\n".join(problems)


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
        # Private helpers of the same group (actions/_victims.py) are shared code, not members.
        if target.rpartition(".")[2].startswith("_") and group == _isolated_group(module.name):
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
        "    from gangsched.snapshot import Snapshot\n"
        "import gangsched.scheduler\n"
        "import ortools.sat.python.cp_model\n"
        "from . import errors\n",
        encoding="utf-8",
    )
    found = imports_of(Module("units", source, False))
    targets = [t for _, t in found]
    assert "model" in targets and "snapshot" in targets and "scheduler" in targets
    assert "!ortools.sat.python.cp_model" in targets
    assert "errors" in targets
    assert type_only_imports(Module("units", source, False)) == {5}
    assert all(layer_of(t) is not None for t in targets if not t.startswith("!"))
    assert max(layer_of(t) or 0 for t in targets if not t.startswith("!")) == 6
