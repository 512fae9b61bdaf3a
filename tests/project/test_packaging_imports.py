"""What src/ imports and what pyproject.toml declares agree: every third-party module the
package imports at module level is a runtime dependency, every runtime dependency is used,
and optional ones (imported inside a function or a ``try``) belong to an extra."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "gangsched"

#: import name → distribution name, for the third-party modules gangsched may use.
DISTRIBUTION = {
    "numpy": "numpy",
    "ortools": "ortools",
    "yaml": "pyyaml",
    "re2": "google-re2",
    "scipy": "scipy",
    "matplotlib": "matplotlib",
    "ray": "ray",
    "kubernetes": "kubernetes",
    "rich": "rich",
    "tqdm": "tqdm",
    "hypothesis": "hypothesis",
    "pytest": "pytest",
}

#: Subpackages that need an extra (their module-level imports may come from it).
OPTIONAL_SUBPACKAGES = {"src/gangsched/testing/": "test"}


def _imports() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(module-level imports, deferred imports): top-level name → files importing it. An
    import inside a function, a ``try`` or an ``if`` is deferred (optional)."""
    eager: dict[str, set[str]] = {}
    lazy: dict[str, set[str]] = {}
    nesting = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Try, ast.If)

    def visit(node: ast.AST, deferred: bool, where: str) -> None:
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name.split(".")[0] for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module.split(".")[0]]
        for name in names:
            if name not in sys.stdlib_module_names and name not in ("gangsched", "__future__"):
                (lazy if deferred else eager).setdefault(name, set()).add(where)
        inner = deferred or isinstance(node, nesting)
        for child in ast.iter_child_nodes(node):
            visit(child, inner, where)

    for path in sorted(SRC.rglob("*.py")):
        visit(ast.parse(path.read_text(encoding="utf-8")), False, str(path.relative_to(ROOT)))
    return eager, lazy


def _name(req: str) -> str:
    return re.split(r"[<>=\[ ;~!]", req, maxsplit=1)[0].lower()


def _meta() -> dict[str, object]:
    project: dict[str, object] = tomllib.loads(
        (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    )["project"]
    return project


def _declared() -> tuple[set[str], set[str]]:
    meta = _meta()
    runtime = {_name(r) for r in meta["dependencies"]}  # type: ignore[attr-defined]
    extras = {_name(r) for reqs in meta["optional-dependencies"].values() for r in reqs}  # type: ignore[attr-defined]
    return runtime, extras


def _extra(extra: str) -> set[str]:
    return {_name(r) for r in _meta()["optional-dependencies"][extra]}  # type: ignore[index]


def test_every_module_level_import_is_a_runtime_dependency() -> None:
    eager, _ = _imports()
    runtime, _ = _declared()
    for module, files in sorted(eager.items()):
        assert module in DISTRIBUTION, f"{module} (imported by {sorted(files)}) is not known here"
        core = set(files)
        for prefix, extra in OPTIONAL_SUBPACKAGES.items():
            if DISTRIBUTION[module] in _extra(extra):
                core = {f for f in core if not f.startswith(prefix)}
        if not core:
            continue
        assert DISTRIBUTION[module] in runtime, (
            f"{sorted(files)} import {module} at module level, but {DISTRIBUTION[module]} is "
            "not in [project] dependencies"
        )


def test_every_runtime_dependency_is_imported() -> None:
    eager, lazy = _imports()
    runtime, _ = _declared()
    used = {DISTRIBUTION.get(m, m) for m in {*eager, *lazy}}
    assert runtime <= used, f"declared but never imported by src/: {sorted(runtime - used)}"


def test_deferred_imports_are_declared_somewhere() -> None:
    _, lazy = _imports()
    runtime, extras = _declared()
    for module, files in sorted(lazy.items()):
        dist = DISTRIBUTION.get(module)
        assert dist is not None, f"{module} (imported by {sorted(files)}) is not known here"
        assert dist in runtime or dist in extras, f"{dist} ({sorted(files)}) is not declared"
