"""docs/api.md is generated from the docstrings (tools/gen_api_docs.py) and kept up to date."""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gen_api_docs", ROOT / "tools" / "gen_api_docs.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_api_reference_is_up_to_date() -> None:
    gen = _generator()
    page = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    assert page == gen.render(), "docs/api.md is stale: run `make docs-api`"


def test_api_reference_lists_every_public_name_once() -> None:
    gen = _generator()
    page = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    for module in gen.MODULES:
        for name in importlib.import_module(module).__all__:
            assert page.count(f"### `{module}.{name}`\n") == 1, f"{module}.{name}"


def test_api_reference_is_deterministic() -> None:
    gen = _generator()
    assert gen.render() == gen.render()
    assert " at 0x" not in gen.render()
