"""An empty file name on the command line is refused as such, not read as the current
directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from gangsched.cli import main

SNAPSHOT = Path(__file__).resolve().parents[2] / "examples" / "snapshot.yaml"


@pytest.mark.parametrize(
    "argv",
    [
        ["schedule", "-f", ""],
        ["schedule", "-f", str(SNAPSHOT), "--config", ""],
        ["explain", "t", "-f", ""],
    ],
)
def test_an_empty_file_name_is_refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) != 0
    err = capsys.readouterr().err
    assert "an empty file name" in err
    assert "Traceback" not in err and "directory" not in err
