"""The API reference: docs/api.md documents every public module with a mkdocstrings directive,
every public class and function has a docstring to render, the docstrings' Sphinx roles become
links to entries of the page or plain code, and (tests/project/test_docs_site.py, with the ``docs``
extra) the built page has an entry for every public name."""

from __future__ import annotations

import ast
import enum
import importlib
import importlib.metadata
import importlib.util
import inspect
import re
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("api_docs", ROOT / "tools" / "api_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_page_has_one_directive_per_documented_module() -> None:
    tool = _tool()
    assert tool.page_modules() == tool.API_MODULES


def test_a_module_listed_in_a_public_all_is_documented_too() -> None:
    tool = _tool()
    for module in tool.API_MODULES:
        mod = importlib.import_module(module)
        for name in mod.__all__:
            value = getattr(mod, name)
            if inspect.ismodule(value):
                assert value.__name__ in tool.API_MODULES, f"{module}.{name}"


def test_every_public_name_exists_and_is_listed_once() -> None:
    names = _tool().public_names()
    assert len(names) == len(set(names))
    for name in names:
        module, _, attr = name.rpartition(".")
        assert hasattr(importlib.import_module(module), attr), name


def test_every_public_class_and_function_has_a_docstring() -> None:
    undocumented = []
    for name in _tool().public_names():
        module, _, attr = name.rpartition(".")
        obj = getattr(importlib.import_module(module), attr)
        if isinstance(obj, type) and issubclass(obj, enum.Enum):
            continue  # an enum's entry lists its members
        if isinstance(obj, type) or inspect.isfunction(obj) or inspect.ismodule(obj):
            doc = obj.__doc__
            if not doc or not doc.strip():
                undocumented.append(name)
    assert undocumented == []


@pytest.mark.parametrize(
    ("text", "module", "owner", "expected"),
    [
        (
            ":class:`~gangsched.errors.SnapshotError`",
            "gangsched.model.snapshot",
            None,
            "[`SnapshotError`][gangsched.errors.SnapshotError]",
        ),
        (":class:`Snapshot`", "gangsched.session.core", None, "[`Snapshot`][gangsched.Snapshot]"),
        (
            ":meth:`Session.open`",
            "gangsched.session.task_states",
            None,
            "[`Session.open`][gangsched.Session.open]",
        ),
        (
            ":meth:`open`",
            "gangsched.session.core",
            "gangsched.session.core.Session",
            "[`open`][gangsched.Session.open]",
        ),
        (
            ":meth:`ClusterState.add_job`",  # defined in a mixin, shown on ClusterState's entry
            "gangsched.state",
            None,
            "[`ClusterState.add_job`][gangsched.ClusterState.add_job]",
        ),
        (":func:`gangsched.sim.fgd.run_grid`", "gangsched", None, "`gangsched.sim.fgd.run_grid`"),
        (":data:`NO_SUCH_NAME`", "gangsched.config", None, "`NO_SUCH_NAME`"),
    ],
)
def test_roles_become_links_to_documented_names_and_code_otherwise(
    text: str, module: str, owner: str | None, expected: str
) -> None:
    assert _tool().rewrite(f"See {text}.", module, owner) == f"See {expected}."


def test_a_literal_block_marker_becomes_a_colon() -> None:
    text = "Typical use::\n\n    schedule(snapshot)\n\nA ``::`` inside a line stays::"
    assert _tool().rewrite(text, "gangsched", None) == (
        "Typical use:\n\n    schedule(snapshot)\n\nA ``::`` inside a line stays::"
    )


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=\[ ;]", r, maxsplit=1)[0].lower() for r in requirements}


def test_the_docs_extra_installs_what_the_documented_testing_modules_import() -> None:
    """The site build imports every documented module; gangsched.testing's need the test
    extra's hypothesis, so the docs extra must bring it (make docs failed without it)."""
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    have = _names(meta["dependencies"]) | _names(meta["optional-dependencies"]["docs"])
    dists = importlib.metadata.packages_distributions()
    needed: set[str] = set()
    for path in sorted((ROOT / "src" / "gangsched" / "testing").rglob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:  # module level only
            if isinstance(node, ast.Import):
                tops = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                tops = [node.module.split(".")[0]]
            else:
                continue
            for top in tops:
                if top not in sys.stdlib_module_names and top not in ("gangsched", "__future__"):
                    needed |= {d.lower() for d in dists.get(top, [top])}
    assert "hypothesis" in needed
    assert needed <= have, f"add to the docs extra: {sorted(needed - have)}"
