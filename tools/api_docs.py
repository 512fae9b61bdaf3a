"""The API reference of the documentation site: which modules it documents, a griffe
extension that turns the docstrings' Sphinx roles into links, and a check of the built page.

``docs/api.md`` holds one mkdocstrings directive (``::: module``) per module of
:data:`API_MODULES`; mkdocstrings (Python handler, extra ``docs``) renders every name of each
module's ``__all__`` from its docstring and signature. The docstrings are written with Sphinx
roles (``:class:`~gangsched.Config```, ``:meth:`Session.open```), which Markdown does not know:
:class:`SphinxRoles` rewrites each into a cross-reference to the name's entry on the page when
the name is documented there, and into plain code otherwise (a private helper, say), so the
strict build never meets a dangling link.

``python tools/api_docs.py SITE_DIR`` (run by ``make docs`` after the build) exits with status
1 when a public name has no entry in the built page, listing them.
"""

from __future__ import annotations

import importlib
import inspect
import re
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
API_PAGE = ROOT / "docs" / "api.md"

#: The documented modules, in the order of the page. A module that a documented module lists in
#: its ``__all__`` (``gangsched.testing.strategies``) is documented here as well.
API_MODULES = (
    "gangsched",
    "gangsched.errors",
    "gangsched.config",
    "gangsched.placement",
    "gangsched.io.k8s",
    "gangsched.io.volcano_out",
    "gangsched.io.openb",
    "gangsched.metrics",
    "gangsched.testing",
    "gangsched.testing.invariants",
    "gangsched.testing.machine",
    "gangsched.testing.reference",
    "gangsched.testing.strategies",
    "gangsched.testing.hostile",
    "gangsched.testing.hostile.streams",
)

_DIRECTIVE = re.compile(r"^::: ([\w.]+)\s*$", re.MULTILINE)
_LITERAL = re.compile(r"(\S)::\n(?=\s*\n)")
_ROLE = re.compile(r":(?:py:)?(?:class|meth|func|data|attr|mod|exc|obj|const):`([^`]+)`")


def page_modules(page: Path = API_PAGE) -> tuple[str, ...]:
    """The modules that ``docs/api.md`` documents, in its order."""
    return tuple(_DIRECTIVE.findall(page.read_text(encoding="utf-8")))


def public_names() -> list[str]:
    """Every documented public name, as the identifier of its entry: ``module.name``."""
    return [f"{m}.{n}" for m in API_MODULES for n in importlib.import_module(m).__all__]


def _own_and_inherited(cls: type) -> dict[str, object]:
    """A class's attributes as its entry shows them: its own and those it inherits from
    gangsched's classes (not from ``object`` or the standard library), nearest first."""
    found: dict[str, object] = {}
    for klass in cls.__mro__:
        if klass is cls or klass.__module__.split(".")[0] == "gangsched":
            for name, member in vars(klass).items():
                found.setdefault(name, member)
    return found


def _members(cls: type) -> Iterator[tuple[str, object]]:
    """A class's public methods and properties (the ones its entry shows)."""
    for name, member in _own_and_inherited(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(member, classmethod | staticmethod):
            yield name, member.__func__
        elif isinstance(member, property):
            yield name, member.fget
        elif inspect.isfunction(member):
            yield name, member


@cache
def _anchors() -> tuple[dict[int, str], frozenset[str]]:
    """Objects of the page by identity → their identifier, and every identifier."""
    by_object: dict[int, str] = {}
    ids: set[str] = set(API_MODULES)
    for module in API_MODULES:
        mod = importlib.import_module(module)
        by_object.setdefault(id(mod), module)
        for name in mod.__all__:
            ident = f"{module}.{name}"
            ids.add(ident)
            obj = getattr(mod, name)
            if isinstance(obj, type) or inspect.isfunction(obj):
                by_object.setdefault(id(obj), ident)
            if isinstance(obj, type):
                for member, func in _members(obj):
                    ids.add(f"{ident}.{member}")
                    if func is not None:
                        by_object.setdefault(id(func), f"{ident}.{member}")
    return by_object, frozenset(ids)


def _lookup(dotted: str) -> object | None:
    """The object a dotted path names (a module, then attributes), or None."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        except Exception:  # a module failing to import is not a link
            return None
        for attr in parts[cut:]:
            try:
                obj = getattr(obj, attr)
            except AttributeError:
                return None
        return obj
    return None


def _unwrap(obj: object) -> object:
    if isinstance(obj, classmethod | staticmethod):
        return obj.__func__
    if isinstance(obj, property):
        return obj.fget
    return obj


def resolve(target: str, module: str, owner: str | None) -> str | None:
    """The page identifier that a role's ``target`` names, read in ``module`` (and within the
    class ``owner``, a dotted path, if any), or None when the page does not document it."""
    by_object, ids = _anchors()
    target = target.lstrip(".")
    candidates = [target, f"{module}.{target}", f"gangsched.{target}"]
    if owner is not None:
        candidates.insert(0, f"{owner}.{target}")
    for candidate in candidates:
        if candidate in ids:
            return candidate
        obj = _lookup(candidate)
        if obj is None:
            continue
        if isinstance(obj, type | ModuleType) or inspect.isfunction(obj):
            found = by_object.get(id(_unwrap(obj)))
            if found is not None:
                return found
        head, _, tail = candidate.rpartition(".")
        parent = _lookup(head) if head else None
        members = _own_and_inherited(parent) if isinstance(parent, type) else {}
        if tail in members:
            found = by_object.get(id(_unwrap(members[tail])))
            if found is not None:
                return found
    return None


def rewrite(text: str, module: str, owner: str | None) -> str:
    """``text`` with every Sphinx role made a Markdown cross-reference or plain code, and a
    paragraph ending in reST's ``::`` (an indented code block follows, which Markdown shows
    as code too) ending in one colon."""

    def one(match: re.Match[str]) -> str:
        written = match.group(1).strip()
        short = written.startswith("~")
        target = written.lstrip("~")
        shown = target.rsplit(".", 1)[-1] if short else target
        ident = resolve(target, module, owner)
        return f"`{shown}`" if ident is None else f"[`{shown}`][{ident}]"

    return _LITERAL.sub(r"\1:\n", _ROLE.sub(one, text))


try:
    import griffe
except ImportError:  # the extension is only needed by the site build (extra `docs`)
    griffe = None  # type: ignore[assignment]

if griffe is not None:

    class SphinxRoles(griffe.Extension):
        """A griffe extension: rewrite the roles of every docstring of the package once it
        is loaded (see the module's docstring)."""

        def on_package(self, *, pkg: Any, loader: Any, **kwargs: Any) -> None:
            self._rewrite(pkg)

        def _rewrite(self, obj: Any) -> None:
            if obj.docstring is not None:
                parent = obj.parent
                owner = obj if obj.is_class else parent if parent and parent.is_class else None
                obj.docstring.value = rewrite(
                    obj.docstring.value, obj.module.path, None if owner is None else owner.path
                )
            if obj.is_module or obj.is_class:
                for member in list(obj.members.values()):
                    if not member.is_alias:
                        self._rewrite(member)


def missing_entries(site: Path) -> list[str]:
    """Public names with no entry (an element of that id) in the built API page."""
    html = (site / "api" / "index.html").read_text(encoding="utf-8")
    ids = set(re.findall(r'id="([^"]+)"', html))
    return [name for name in [*API_MODULES, *public_names()] if name not in ids]


def main(argv: list[str]) -> int:
    site = Path(argv[1]) if len(argv) > 1 else ROOT / "site"
    missing = missing_entries(site)
    for name in missing:
        print(f"{site}/api/index.html: no entry for {name}", file=sys.stderr)
    if missing:
        return 1
    print(f"API reference: {len(public_names())} public names documented")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
