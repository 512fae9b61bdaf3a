"""Render the API reference, docs/api.md, from the docstrings of the public API.

Every name in the ``__all__`` of the modules listed in :data:`MODULES` gets a section: its
kind, its signature (classes: the constructor's) and its docstring as written, then, for a
class, its public methods and properties with their first docstring paragraph. The output is
deterministic (no memory addresses, the order of ``__all__``), so ``tests/test_docs_api.py``
can check that the page is up to date: regenerate it with ``make docs-api``.

Usage: ``python tools/gen_api_docs.py [--check] [OUT]`` (default ``docs/api.md``); with
``--check``, exit with status 1 when the file differs from what would be written.
"""

from __future__ import annotations

import enum
import importlib
import inspect
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "api.md"

MODULES = (
    "gangsched",
    "gangsched.errors",
    "gangsched.config",
    "gangsched.placement",
    "gangsched.io.k8s",
    "gangsched.io.volcano_out",
    "gangsched.io.openb",
    "gangsched.metrics",
    "gangsched.testing",
)

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _clean(text: str) -> str:
    return _ADDRESS.sub("", text)


def _signature(obj: object) -> str:
    try:
        sig = inspect.signature(obj)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return ""
    return _clean(str(sig))


def _doc(obj: object) -> str:
    doc = inspect.getdoc(obj)
    return "" if doc is None else doc.strip()


def _first_paragraph(doc: str) -> str:
    return " ".join(doc.split("\n\n", 1)[0].split())


def _kind(obj: object) -> str:
    if isinstance(obj, type):
        if issubclass(obj, BaseException):
            return "exception"
        if issubclass(obj, enum.Enum):
            return "enum"
        return "class"
    if callable(obj):
        return "function"
    return "value"


def _members(cls: type) -> list[str]:
    lines: list[str] = []
    for name, member in sorted(vars(cls).items()):
        if name.startswith("_"):
            continue
        if isinstance(member, property):
            head = f"- `{name}` (property)"
            doc = _doc(member)
        elif isinstance(member, classmethod | staticmethod):
            func = member.__func__
            head = f"- `{name}{_signature(getattr(cls, name))}`"
            doc = _doc(func)
        elif inspect.isfunction(member):
            head = f"- `{name}{_signature(member)}`"
            doc = _doc(member)
        else:
            continue
        lines.append(head + (f": {_first_paragraph(doc)}" if doc else ""))
    return lines


def _section(module: str, name: str, obj: object) -> list[str]:
    if inspect.ismodule(obj):  # a submodule listed in __all__: its summary, never its path
        summary = _first_paragraph(_doc(obj))
        return [f"### `{module}.{name}`", "", "*module*", "", *([summary, ""] if summary else [])]
    kind = _kind(obj)
    out = [f"### `{module}.{name}`", "", f"*{kind}*", ""]
    if kind == "value":
        out += [f"`{name} = {_clean(repr(obj))}`", ""]
        return out
    if kind == "enum":
        assert isinstance(obj, type) and issubclass(obj, enum.Enum)
        out += ["Members: " + ", ".join(f"`{m.name}` (`{m.value!r}`)" for m in obj), ""]
    else:
        sig = _signature(obj)
        if sig:
            out += ["```text", f"{name}{sig}", "```", ""]
    doc = _doc(obj)
    if doc and not (isinstance(obj, type) and doc == _doc(type(obj))):
        out += [doc, ""]
    if isinstance(obj, type) and kind != "enum":
        members = _members(obj)
        if members:
            out += ["Members:", "", *members, ""]
    return out


def render() -> str:
    lines = [
        "# API reference",
        "",
        "Generated from the docstrings by `tools/gen_api_docs.py` (`make docs-api`); do not "
        "edit by hand. The guide pages explain the concepts; this page lists every public name "
        "with its signature and documentation.",
        "",
    ]
    lines += ["| module | names |", "|---|---|"]
    modules = [(m, importlib.import_module(m)) for m in MODULES]
    for name, mod in modules:
        lines.append(f"| [`{name}`](#{name.replace('.', '')}) | {len(mod.__all__)} |")
    lines.append("")
    for name, mod in modules:
        lines += [f"## {name}", ""]
        summary = _first_paragraph(_doc(mod))
        if summary:
            lines += [summary, ""]
        for public in mod.__all__:
            lines += _section(name, public, getattr(mod, public))
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str]) -> int:
    check = "--check" in argv
    rest = [a for a in argv[1:] if a != "--check"]
    out = Path(rest[0]) if rest else OUT
    text = render()
    if check:
        if not out.exists() or out.read_text(encoding="utf-8") != text:
            print(f"{out} is out of date: run make docs-api", file=sys.stderr)
            return 1
        return 0
    out.write_text(text, encoding="utf-8")
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
