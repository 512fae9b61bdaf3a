"""Every fenced ``python`` block of README.md and docs/*.md runs as written.

Each block runs on its own, in a fresh namespace, unless the line just above its fence marks
it:

* ``<!-- docs: continue -->`` — the block continues the page's previous block and runs in
  its namespace (a worked example told in steps);
* ``<!-- docs: skip (why) -->`` — pseudo-code, shown but not run; the reason is required.

A block that fails shows its page and line in the traceback (the code is compiled with the
page's line numbers). Output the blocks print is captured. Pages that have a dedicated test of
their own (docs/model.md, docs/testing.md) are still run here, so no page is left out.
"""

from __future__ import annotations

import contextlib
import io
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", flags=re.S | re.M)
_MARK = re.compile(r"<!--\s*docs:\s*(continue|skip)\b(.*?)-->")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # 1-based line of the first code line
    code: str
    mark: str  # "", "continue" or "skip"
    why: str


def blocks_of(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    out: list[Block] = []
    for match in _FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = _MARK.search(before)
        first = text.count("\n", 0, match.start(1))
        out.append(
            Block(
                page=page,
                line=first + 1,
                code="\n" * first + match.group(1),
                mark=mark.group(1) if mark else "",
                why=mark.group(2).strip(" ()") if mark else "",
            )
        )
    return out


def _pages_with_blocks() -> list[Path]:
    return [p for p in PAGES if blocks_of(p)]


def test_the_collector_finds_the_blocks() -> None:
    total = sum(len(blocks_of(p)) for p in PAGES)
    assert total >= 20
    readme = blocks_of(ROOT / "README.md")
    assert readme and readme[0].mark == ""


def test_marks_are_well_formed() -> None:
    for page in PAGES:
        found = blocks_of(page)
        for i, block in enumerate(found):
            where = f"{page.relative_to(ROOT)}:{block.line}"
            if block.mark == "skip":
                assert block.why, f"{where}: a skipped block must say why"
            if block.mark == "continue":
                assert i > 0, f"{where}: the first block of a page cannot continue another"
                assert found[i - 1].mark != "skip", f"{where}: continues a skipped block"
        marks = len(_MARK.findall(page.read_text(encoding="utf-8")))
        assert marks == sum(1 for b in found if b.mark), (
            f"{page.relative_to(ROOT)}: a docs mark that is not right above a python block"
        )


@pytest.mark.parametrize("page", _pages_with_blocks(), ids=lambda p: str(p.relative_to(ROOT)))
def test_page_blocks_run(page: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # blocks name files as a reader in the clone does
    namespace: dict[str, object] = {}
    for block in blocks_of(page):
        if block.mark == "skip":
            continue
        if block.mark != "continue":
            namespace = {"__name__": "__docs__"}
        name = str(page.relative_to(ROOT))
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(block.code, name, "exec"), namespace)
