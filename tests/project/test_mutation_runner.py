"""The mutation tools' shared runner: a mutant's time limit follows the unmutated run's."""

from __future__ import annotations

import importlib.util
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _runner() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "_mutation_runner", ROOT / "tools" / "_mutation_runner.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class _Mutant:
    id: str = "m"
    module: str = "units.py"
    line: int = 1
    description: str = "nothing changed"

    def apply(self, text: bytes) -> bytes:
        return text


def _judge(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, timeout: float | None, took: float
) -> list[float]:
    runner = _runner()
    limits: list[float] = []

    def fake_run(src: Path, tests: list[str], limit: float, root: Path) -> tuple[str, str]:
        limits.append(limit)
        if len(limits) == 1:  # the unmutated run
            time.sleep(took)
        return "survived", ""

    monkeypatch.setattr(runner, "run_tests", fake_run)
    monkeypatch.setattr(runner, "MIN_TIMEOUT", 0.01)
    # a small tree to copy: the runner copies root/src per worker
    (tmp_path / "src" / "gangsched").mkdir(parents=True)
    (tmp_path / "src" / "gangsched" / "units.py").write_text("X = 1\n")
    out = runner.judge_all(
        [_Mutant()],
        root=tmp_path,
        tests=["t"],
        workers=1,
        timeout=timeout,
        equivalent={},
        prefix="mut-",
        width=4,
    )
    assert out is not None and [r.fate for r in out] == ["survived"]
    return limits


def test_without_a_timeout_a_mutant_gets_a_multiple_of_the_unmutated_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    limits = _judge(monkeypatch, tmp_path, None, took=0.05)
    factor = _runner().TIMEOUT_FACTOR
    assert limits[1] >= factor * 0.05 and limits[1] < factor * 5


def test_a_given_timeout_is_used_as_given(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert _judge(monkeypatch, tmp_path, 7.0, took=0.0) == [7.0, 7.0]
