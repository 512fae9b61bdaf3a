"""The python blocks of ``docs/model.md`` run as written, and say what the page says."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "model.md"


def test_model_page_blocks_run() -> None:
    text = DOC.read_text(encoding="utf-8")
    blocks = re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)
    assert len(blocks) >= 2
    out = io.StringIO()
    namespace: dict[str, object] = {}
    with contextlib.redirect_stdout(out):
        for block in blocks:
            exec(compile(block, "<docs/model.md>", "exec"), namespace)
    # the Limits example prints the error its comment shows
    assert "3 tasks is beyond the limit of 2 (Limits.max_tasks)" in out.getvalue()
    # the hypothesis example is a real test: run it
    test = namespace["test_round_trip"]
    assert callable(test)
    test()
