"""Progress lines with an ETA on stderr, and the demo's output folder and notes."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from gangsched import cli
from gangsched._cli_progress import QUIET_EVERY_S, Progress, format_duration


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_durations_are_short() -> None:
    assert [format_duration(s) for s in (0, 42.4, 185, 3720)] == ["0s", "42s", "3m05s", "1h02m"]


def test_eta_is_the_mean_step_time_times_the_steps_left() -> None:
    clock = _Clock()
    bar = Progress(io.StringIO(), "fgd ", clock=clock, tty=False)
    clock.now = 20.0
    assert bar.line(2, 6, "fgd seed 42") == "fgd [2/6] fgd seed 42 (20s elapsed, ETA 40s)"
    assert bar.line(6, 6) == "fgd [6/6] (20s elapsed)"


def test_not_a_terminal_prints_first_last_and_sparse_lines() -> None:
    clock = _Clock()
    stream = io.StringIO()
    bar = Progress(stream, clock=clock, tty=False)
    for done in range(1, 101):
        clock.now = done * 0.5
        bar.step(done, 100)
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("[1/100]") and lines[-1].startswith("[100/100]")
    assert len(lines) <= 2 + 50 / QUIET_EVERY_S + 1
    assert "\r" not in stream.getvalue()


def test_a_terminal_redraws_one_line() -> None:
    clock = _Clock()
    stream = io.StringIO()
    bar = Progress(stream, clock=clock, tty=True)
    for done in range(1, 4):
        clock.now = float(done)
        bar.step(done, 3)
    text = stream.getvalue()
    assert text.count("\n") == 1 and text.endswith("(3s elapsed)\n")
    assert text.count("\r") == 3 and "ETA 1s" in text


def test_demo_writes_only_where_asked_and_notes_go_to_stderr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cli, "_plot_fig9a", lambda *a: "matplotlib is not installed; plot skipped")
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    assert cli.main(["--seeds", "42", "--limit", "200", "--workers", "1"]) == 0
    printed = capsys.readouterr()
    assert not (tmp_path / "gangsched-out").exists()
    (made,) = (tmp_path / "tmp").iterdir()
    assert made.name.startswith(cli.DEMO_OUT_PREFIX)
    assert (made / "analysis_allo_discrete.csv").is_file()
    assert f"writing the tables and the plot to {made}/" in printed.err
    assert "plot skipped" in printed.err and "plot skipped" not in printed.out
    assert "06-FGD" in printed.out and f"tables: {made}/" in printed.out
    assert "[1/2]" in printed.err and "[2/2]" in printed.err and "elapsed" in printed.err
