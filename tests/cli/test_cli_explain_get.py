"""``gangsched explain`` and ``gangsched get -o table|json|yaml``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

import gangsched as gs
from gangsched.cli import main

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOT = str(ROOT / "examples" / "snapshot.yaml")
VOLCANO = [
    str(ROOT / "examples" / "volcano" / f)
    for f in (
        "cluster.yaml",
        "queues.yaml",
        "scheduler-configmap.yaml",
        "running-pods.yaml",
        "partial-gang.yaml",
    )
]


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out = capsys.readouterr()
    return status, out.out, out.err


def test_get_jobs_json_is_the_decisions_job_records(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = _run(capsys, "get", "jobs", "-f", SNAPSHOT, "-o", "json")
    assert status == 0
    snap = gs.Snapshot.from_dict(yaml.safe_load(Path(SNAPSHOT).read_text(encoding="utf-8")))
    assert json.loads(out) == json.loads(json.dumps(gs.schedule(snap).to_dict()["jobs"]))
    assert set(json.loads(out)) == {"huge-pretrain", "llm-finetune"}


def test_get_queues_yaml_and_table_agree(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = _run(capsys, "get", "queues", "-f", SNAPSHOT, "-o", "yaml")
    assert status == 0
    queues = yaml.safe_load(out)
    assert set(queues) == {"batch", "research"}
    _, table, _ = _run(capsys, "get", "queues", "-f", SNAPSHOT)
    for name, q in queues.items():
        row = next(line.split() for line in table.splitlines() if line.startswith(name + " "))
        assert row[1:] == [
            q["state"],
            str(q["inqueue"]),
            str(q["pending"]),
            str(q["running"]),
            str(q["unknown"]),
        ]


def test_get_output_is_deterministic(capsys: pytest.CaptureFixture[str]) -> None:
    first = _run(capsys, "get", "jobs", "-f", SNAPSHOT, "-o", "yaml")
    assert _run(capsys, "get", "jobs", "-f", SNAPSHOT, "-o", "yaml") == first


def test_explain_table_shows_every_node_and_the_best(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = _run(capsys, "explain", "llm-finetune-0", "-f", SNAPSHOT)
    assert status == 0
    lines = out.splitlines()
    assert lines[0].startswith("task 'llm-finetune-0': 4/4 nodes fit now; best node: node-a0")
    assert lines[1].split()[:3] == ["NODE", "FITS", "AFTER-RELEASE"]
    assert lines[1].split()[-2:] == ["TOTAL", "REASON"]
    assert [line.split()[0] for line in lines[2:]] == ["*node-a0", "node-a1", "node-b0", "node-b1"]


def test_explain_json_is_the_api_explanation(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = _run(capsys, "explain", "llm-finetune-0", "-f", SNAPSHOT, "-o", "json")
    assert status == 0
    snap = gs.Snapshot.from_dict(yaml.safe_load(Path(SNAPSHOT).read_text(encoding="utf-8")))
    assert json.loads(out) == json.loads(json.dumps(gs.explain(snap, "llm-finetune-0").to_dict()))


def test_explain_names_a_pod_of_the_manifests_and_its_reasons(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status, out, _ = _run(
        capsys, "explain", "default/partial-gang-worker-0", *[a for f in VOLCANO for a in ("-f", f)]
    )
    assert status == 0
    assert "nodes fit now" in out.splitlines()[0]
    assert "insufficient resources" in out
    status, _, _ = _run(
        capsys, "explain", "partial-gang-worker-0", *[a for f in VOLCANO for a in ("-f", f)]
    )
    assert status == 0


def test_explain_of_an_unknown_task_is_one_error_line(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = _run(capsys, "explain", "nope", "-f", SNAPSHOT)
    assert status == 1 and out == ""
    assert err.strip() == "gangsched: error: task 'nope': no such task or pod in the -f files"


def test_explain_of_a_running_task_says_it_is_not_pending(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snap = {
        "nodes": [{"name": "n0", "allocatable": {"cpu": 4}}],
        "queues": [{"name": "default"}],
        "jobs": [{"name": "j", "phase": "Running"}],
        "tasks": [
            {"name": "t", "job": "j", "request": {"cpu": 1}, "phase": "Running", "node": "n0"}
        ],
    }
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(snap), encoding="utf-8")
    status, _, err = _run(capsys, "explain", "t", "-f", str(path))
    assert status == 1 and "not Pending" in err and "Traceback" not in err
