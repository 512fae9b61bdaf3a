"""The plugin guide's incremental example (docs/plugins.md, "Keeping a per-node view
incrementally") runs as written — a per-node view kept through the change log, across the
cycles of a ``ClusterState`` — and its checks are not blind: a view that ignores its cursor, or
keeps one a step ahead of what it read, fails them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "plugins.md"


def _example() -> str:
    text = PAGE.read_text(encoding="utf-8")
    start = text.index("## Keeping a per-node view incrementally")
    found = re.search(r"^```python\n(.*?)^```", text[start:], flags=re.S | re.M)
    assert found is not None
    return found.group(1)


def _run(code: str) -> dict[str, object]:
    namespace: dict[str, object] = {"__name__": "plugins_example"}
    exec(compile(code, str(PAGE), "exec"), namespace)
    return namespace


def test_the_example_runs_with_one_view_across_cycles() -> None:
    ns = _run(_example())
    view: Any = ns["view"]
    assert view.lineage is not None  # it followed a log, cycle after cycle
    assert view.free.size == 16


@pytest.mark.parametrize(
    ("original", "mutant"),
    [
        # the view ignores what changed since its cursor
        ("rows = log.nodes_since(self.cursor)", "rows = np.zeros(0, dtype=np.intp)"),
        # the view keeps a cursor one step past what it read
        (
            "self.lineage, self.cursor = log.lineage, log.end",
            "self.lineage, self.cursor = log.lineage, log.end + 1",
        ),
    ],
)
def test_a_view_that_misreads_its_cursor_fails_the_example(original: str, mutant: str) -> None:
    code = _example()
    assert original in code
    with pytest.raises(AssertionError):
        _run(code.replace(original, mutant))


def test_a_view_that_never_trusts_its_cursor_is_told_apart() -> None:
    """A view that reads every node again at every call decides the same, but the example's
    count of rows read in the second cycle tells it apart."""
    code = _example()
    original = "if not log.knows(self.lineage, self.cursor):"
    assert original in code
    with pytest.raises(AssertionError):
        _run(code.replace(original, "if True:  # never trusts its cursor"))
