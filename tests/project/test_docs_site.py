"""The documentation site (mkdocs.yml): every page is in the navigation, and, when mkdocs is
installed (extra ``docs``), the site builds with ``--strict`` and its API reference has an
entry for every public name."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def _nav_pages(node: object) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, list):
        return [p for item in node for p in _nav_pages(item)]
    if isinstance(node, dict):
        return [p for value in node.values() for p in _nav_pages(value)]
    return []


def test_every_docs_page_is_in_the_site_navigation() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    assert config["strict"] is True and config["docs_dir"] == "docs"
    pages = _nav_pages(config["nav"])
    assert len(pages) == len(set(pages))
    on_disk = sorted(p.name for p in (ROOT / "docs").glob("*.md"))
    assert sorted(pages) == on_disk, "add the page to nav in mkdocs.yml"


def test_site_builds_strictly(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    pytest.importorskip("mkdocstrings_handlers.python")
    out = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-d", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "api" / "index.html").is_file()
    assert (tmp_path / "getting-started" / "index.html").is_file()
    assert (tmp_path / "index.html").is_file()  # the site's root is a page, not a 404
    spec = importlib.util.spec_from_file_location("api_docs", ROOT / "tools" / "api_docs.py")
    assert spec is not None and spec.loader is not None
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    assert tool.missing_entries(tmp_path) == []
    page = (tmp_path / "api" / "index.html").read_text(encoding="utf-8")
    assert ":class:" not in page and ":meth:" not in page  # roles became links or code
    assert 'href="#gangsched.errors.SnapshotError"' in page
