"""Command line: ``gangsched fgd``, ``gangsched fgd compare`` and ``gangsched fgd demo``."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from gangsched.cli import main
from gangsched.io.openb import load_pods


def small_pods(tmp_path: Path) -> Path:
    pods = load_pods()
    lines = ["name,cpu_milli,memory_mib,num_gpu,gpu_milli"]
    for i in range(0, 8152, 40):  # 204 pods of the default workload
        lines.append(
            f"{pods.names[i]},{pods.cpu_milli[i]},{pods.memory_mib[i]},"
            f"{pods.num_gpu[i]},{pods.gpu_milli[i]}"
        )
    path = tmp_path / "pods.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_fgd_writes_tables_and_compares(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    status = main(
        [
            "fgd",
            "--pods",
            str(small_pods(tmp_path)),
            "--policy",
            "bestfit",
            "--policy",
            "gpu-packing",
            "--seeds",
            "42-43",
            "--out",
            str(out),
            "--limit",
            "400",
        ]
    )
    assert status == 0
    with (out / "analysis_allo_discrete.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [(r["sc_policy"], r["seed"]) for r in rows] == [
        ("05-BestFit", "42"),
        ("05-BestFit", "43"),
        ("04-GpuPacking", "42"),
        ("04-GpuPacking", "43"),
    ]
    assert rows[0]["workload"] == "pods" and rows[0]["total_gpus"] == "6212"
    assert rows[0]["tune"] == "1.3" and 0.0 <= float(rows[0]["0"]) < 1.0
    for name in ("analysis_frag_discrete.csv", "analysis_frag_ratio_discrete.csv"):
        header = (out / name).read_text().splitlines()[0].split(",")
        assert header[:4] == ["workload", "sc_policy", "tune", "seed"]
        assert header[4] == "0" and header[-1] == "130"
    printed = capsys.readouterr()
    assert "analysis_allo_discrete.csv" in printed.out
    assert "ETA" not in printed.err  # stderr is not a terminal: no progress bar
    assert main(["fgd", "compare", str(out)]) == 0
    table = capsys.readouterr().out
    assert "05-BestFit" in table and "04-GpuPacking" in table and "largest |diff|" in table


def test_fgd_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,1,2000\n")
    assert main(["fgd", "--pods", str(bad), "--out", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err
    assert "bad.csv" in err and "row 2" in err and "gpu_milli" in err
    assert main(["fgd", "--seeds", "x", "--out", str(tmp_path / "o")]) == 1
    assert main(["fgd", "--policy", "fgd"]) == 2
    with pytest.raises(SystemExit):
        main(["fgd", "--policy", "nope", "--out", "x"])


def test_fgd_demo_reduced(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "demo"
    assert (
        main(
            ["fgd", "demo", "--seeds", "42", "--limit", "300", "--out", str(out), "--workers", "1"]
        )
        == 0
    )
    printed = capsys.readouterr()
    assert "06-FGD" in printed.out and "05-BestFit" in printed.out
    assert (out / "analysis_allo_discrete.csv").is_file()
    plot = out / "fgd_fig9a.png"
    assert (f"plot: {plot}" in printed.out and plot.stat().st_size > 1000) or (
        "plot skipped" in printed.err and "plot skipped" not in printed.out
    )
    assert "ETA" not in printed.err  # stderr is not a terminal: no progress bar
