"""Small third-party plugins shared by the tests of evaluations carried across cycles."""

from __future__ import annotations

from typing import Any


class FarNodesFirst:
    """A node score registered as "binpack" that prefers the highest node index."""

    name = "binpack"
    shape_only = True

    def __init__(self, arguments: Any) -> None:
        pass

    def node_score(self, ssn: Any, tmpl: Any, rows: Any) -> Any:
        return rows.astype(float) * 1000.0
