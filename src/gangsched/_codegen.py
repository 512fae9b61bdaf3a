"""Functions made from generated source: a rule written once as text, rendered into the forms
that read it (every row at once over NumPy columns, one row over plain Python numbers).

:func:`define` compiles the source and runs it in the namespace of the module that owns the
rule, so the functions it defines are that module's own (their globals are the module's, as if
written there). The source is kept in :mod:`linecache` under a name that says where it comes
from, so tracebacks, profilers and :func:`inspect.getsource` show the generated lines.
"""

from __future__ import annotations

import linecache
from collections.abc import Callable
from typing import Any

__all__ = ["define"]


def define(source: str, namespace: dict[str, Any], label: str) -> dict[str, Callable[..., Any]]:
    """Run ``source`` (function definitions) in ``namespace`` and return the functions it
    defined, by name. ``label`` names the rule in tracebacks (``<generated label>``)."""
    filename = f"<generated {label}>"
    code = compile(source, filename, "exec")
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    exec(code, namespace)  # the package's own rule, rendered
    return {
        name: value
        for name, value in namespace.items()
        if getattr(getattr(value, "__code__", None), "co_filename", None) == filename
    }
