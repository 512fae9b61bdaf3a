"""Package metadata and entry points a user meets first."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

import gangsched
from gangsched.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_version_flag_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"gangsched {gangsched.__version__}"


def test_python_dash_m_runs_the_same_command_line() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "gangsched", "--version"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"gangsched {gangsched.__version__}"
    bad = subprocess.run(
        [sys.executable, "-m", "gangsched", "schedule", "-f", str(ROOT / "no-such-file.yaml")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert bad.returncode == 1
    assert bad.stderr.startswith("gangsched: error:") and "Traceback" not in bad.stderr


def test_license_file_and_metadata_agree() -> None:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert meta["license"] == "Apache-2.0"
    assert meta["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert meta["version"] == gangsched.__version__
    assert "Typing :: Typed" in meta["classifiers"]


def test_project_urls_keywords_and_classifiers_are_declared() -> None:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    urls = meta["urls"]
    assert {"Homepage", "Documentation", "Source", "Issues"} <= set(urls)
    repo = urls["Source"]
    assert all(url.startswith(repo) for url in urls.values()), urls
    site = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    assert site["repo_url"] == repo  # the site links to the same repository
    assert {"gang-scheduling", "volcano", "kueue", "gpu"} <= set(meta["keywords"])
    assert len(meta["classifiers"]) == len(set(meta["classifiers"]))
    # hatchling refuses an unknown classifier when it builds (make dist); with a PEP 639
    # license expression, License :: classifiers are not allowed either
    assert not [c for c in meta["classifiers"] if c.startswith("License ::")]
    supported = [c.rsplit(" :: ", 1)[1] for c in meta["classifiers"] if c.count("::") == 2]
    assert "3.11" in supported and meta["requires-python"] == ">=3.11"
