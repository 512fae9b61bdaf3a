"""Progress bars (tqdm) with an ETA on stderr, quiet off a terminal, and the demo's output
folder and notes."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from gangsched import cli
from gangsched.cli.progress import PROGRESS_ENV, Progress, format_duration, replay_progress
from gangsched.sim.replay import ReplayProgress


class _Terminal(io.StringIO):
    """A text stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def test_durations_are_short() -> None:
    assert [format_duration(s) for s in (0, 42.4, 185, 3720)] == ["0s", "42s", "3m05s", "1h02m"]


def test_a_terminal_gets_a_tqdm_bar_with_an_eta(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PROGRESS_ENV, raising=False)
    stream = _Terminal()
    bar = Progress(stream, "fgd ")
    assert bar.enabled
    for done in range(1, 4):
        bar.step(done, 3, f"bestfit seed {41 + done}")
    text = stream.getvalue()
    assert "\r" in text and text.endswith("\n")  # redrawn in place, then left on its line
    last = text.rstrip("\n").rsplit("\r", 1)[-1]
    assert last.startswith("fgd: 100%|") and "| 3/3 [" in last
    assert " elapsed, ETA " in last and last.endswith(", bestfit seed 44]")


def test_not_a_terminal_is_quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PROGRESS_ENV, raising=False)
    stream = io.StringIO()
    bar = Progress(stream, "fgd ")
    for done in range(1, 101):
        bar.step(done, 100, "run")
    bar.close()
    assert not bar.enabled and stream.getvalue() == ""


def test_the_environment_forces_the_bar_on_or_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PROGRESS_ENV, "1")
    forced_on = io.StringIO()
    Progress(forced_on).step(1, 1)
    assert "1/1" in forced_on.getvalue()
    monkeypatch.setenv(PROGRESS_ENV, "0")
    forced_off = _Terminal()
    Progress(forced_off).step(1, 1)
    assert forced_off.getvalue() == ""


def test_an_interrupted_bar_is_ended_on_its_line() -> None:
    stream = io.StringIO()
    bar = Progress(stream, tty=True)
    bar.step(1, 4)
    bar.close()
    bar.close()
    assert stream.getvalue().endswith("\n") and "1/4" in stream.getvalue()


def test_a_replay_shows_finished_jobs_and_its_clock() -> None:
    stream = io.StringIO()
    show, close = replay_progress(stream, tty=True)
    show(ReplayProgress(3600.0, 50, 60, 40, 80, 10, 5, 20))
    close()
    text = stream.getvalue()
    assert "replay:" in text and "20/80" in text and "ETA" in text
    assert "t=3,600s, 10 running, 5 waiting" in text


def test_demo_writes_only_where_asked_and_notes_go_to_stderr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(PROGRESS_ENV, raising=False)
    monkeypatch.setattr(cli, "_plot_fig9a", lambda *a: "matplotlib is not installed; plot skipped")
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    assert cli.main(["fgd", "demo", "--seeds", "42", "--limit", "200", "--workers", "1"]) == 0
    printed = capsys.readouterr()
    assert not (tmp_path / "gangsched-out").exists()
    (made,) = (tmp_path / "tmp").iterdir()
    assert made.name.startswith(cli.DEMO_OUT_PREFIX)
    assert (made / "analysis_allo_discrete.csv").is_file()
    assert f"writing the tables and the plot to {made}/" in printed.err
    assert "plot skipped" in printed.err and "plot skipped" not in printed.out
    assert "06-FGD" in printed.out and f"tables: {made}/" in printed.out
    assert "ETA" not in printed.err  # stderr is not a terminal here: no progress bar


def test_fgd_draws_its_bar_when_asked_and_keeps_stdout_clean(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(PROGRESS_ENV, "1")
    argv = ["fgd", "--policy", "fgd", "--seeds", "42-43", "--limit", "150", "--out", str(tmp_path)]
    assert cli.main(argv) == 0
    printed = capsys.readouterr()
    assert "fgd: 100%|" in printed.err and "2/2 [" in printed.err and "ETA" in printed.err
    assert "fgd seed 43: 150 pods" in printed.err
    assert "ETA" not in printed.out and printed.out.splitlines()[0].endswith(".csv")


def test_a_missing_tqdm_means_no_bar_not_a_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "tqdm", None)  # makes `from tqdm import tqdm` fail
    stream = _Terminal()
    bar = Progress(stream)
    bar.step(1, 2)
    bar.step(2, 2)
    assert stream.getvalue() == "" and not bar.enabled
