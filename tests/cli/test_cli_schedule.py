"""``gangsched schedule`` and ``gangsched get``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gangsched.cli import build_parser, main
from gangsched.io.k8s import load_files
from gangsched.scheduler import schedule

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOT = str(ROOT / "examples" / "snapshot.yaml")
VOLCANO = ROOT / "examples" / "volcano"


def volcano_files(*names: str) -> list[str]:
    args: list[str] = []
    for name in ("cluster.yaml", "queues.yaml", "scheduler-configmap.yaml", *names):
        args += ["-f", str(VOLCANO / name)]
    return args


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_default_run_is_the_scheduler_comparison_and_fgd_demo_a_subcommand() -> None:
    args = build_parser().parse_args([])
    assert args.handler.__name__ == "run_story_cli"
    args = build_parser().parse_args(["fgd", "demo"])
    assert args.fgd_command == "demo" and args.seeds == "42-44" and args.out is None


def test_schedule_table(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, "schedule", "-f", SNAPSHOT)
    assert status == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == "BINDS (2)"
    assert lines[1].split() == ["POD", "NODE", "GPUS"]
    assert lines[2].split() == ["default/llm-finetune-0", "node-a0", "0,1,2,3,4,5,6,7"]
    jobs = out[out.index("JOBS") : out.index("QUEUES")]
    row = next(line for line in jobs.splitlines() if line.startswith("huge-pretrain"))
    assert row.split()[:7] == ["huge-pretrain", "batch", "Pending", "5", "0", "0", "5"]
    assert "llm-finetune" in jobs and "Scheduled" in jobs


def test_schedule_json_is_the_decisions(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "schedule", "-f", SNAPSHOT, "-o", "json")
    cluster = load_files([SNAPSHOT])
    assert status == 0
    assert json.loads(out) == json.loads(json.dumps(schedule(cluster.snapshot).to_dict()))


def test_schedule_yaml_is_kubernetes_objects(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "schedule", *volcano_files("pytorch-job.yaml"), "-o", "yaml")
    assert status == 0
    doc = yaml.safe_load(out)
    assert doc["kind"] == "List"
    kinds = [item["kind"] for item in doc["items"]]
    assert kinds.count("Binding") == 8
    assert kinds.count("PodGroup") == 1 and kinds.count("Queue") == 2
    assert kinds[-1] == "ConfigMap"  # the svc plugin's host lists
    binding = doc["items"][0]
    assert binding["metadata"]["name"] == "pytorch-8gpu-master-0"
    assert binding["target"]["kind"] == "Node"


def test_schedule_table_shows_environment_and_merges_files(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status, out, _ = run(
        capsys,
        "schedule",
        *volcano_files("pytorch-job.yaml", "running-pods.yaml", "partial-gang.yaml"),
    )
    assert status == 0
    assert out.startswith("BINDS (6)")  # the partial gang; the 8-GPU job waits
    assert "default/partial-gang-worker-0" in out
    assert "ENVIRONMENT" in out and "VC_TASK_INDEX=0" in out


def test_get_queues(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "get", "queues", *volcano_files("distributed-training.yaml"))
    assert status == 0
    lines = out.splitlines()
    assert lines[0].split() == ["NAME", "STATE", "INQUEUE", "PENDING", "RUNNING", "UNKNOWN"]
    rows = {line.split()[0]: line.split()[1:] for line in lines[1:]}
    assert rows == {
        "high-priority": ["Open", "0", "0", "0", "0"],
        "low-priority": ["Open", "0", "0", "1", "0"],
    }
    # kubectl alignment: every column starts at the same offset on every line
    start = lines[0].index("INQUEUE")
    assert all(line[start - 3 : start] == "   " for line in lines)


def test_get_jobs(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "get", "vcjob", "-f", SNAPSHOT)
    assert status == 0
    assert out.splitlines() == [
        "NAME            STATUS    MINAVAILABLE   RUNNINGS",
        "huge-pretrain   Pending   5              0",
        "llm-finetune    Running   2              2",
    ]


def test_config_option_overrides_the_configmap(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    conf = tmp_path / "volcano-scheduler.conf"
    conf.write_text('actions: "enqueue"\ntiers:\n- plugins:\n  - name: gang\n')
    status, out, _ = run(
        capsys, "schedule", *volcano_files("pytorch-job.yaml"), "--config", str(conf)
    )
    assert status == 0 and out.startswith("BINDS (0)")  # enqueue only: nothing is allocated
    # the ConfigMap manifest is accepted as --config too
    status, out, _ = run(
        capsys,
        "schedule",
        "-f",
        SNAPSHOT,
        "--config",
        str(VOLCANO / "scheduler-configmap.yaml"),
    )
    assert status == 0 and out.startswith("BINDS (2)")


def test_ignored_objects_are_noted_on_stderr(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    extra = tmp_path / "extra.yaml"
    extra.write_text("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n")
    status, out, err = run(capsys, "schedule", "-f", SNAPSHOT, "-f", str(extra), "-o", "json")
    assert status == 0
    json.loads(out)  # stdout stays machine-readable
    assert "gangsched: note: Deployment 'default/web': unsupported kind apps/v1 Deployment" in err


def test_bad_manifest_exits_1_naming_the_field(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bad = tmp_path / "job.yaml"
    text = (VOLCANO / "partial-gang.yaml").read_text().replace('cpu: "4"', 'cpu: "four"')
    bad.write_text(text)
    status, out, err = run(capsys, "schedule", *volcano_files(), "-f", str(bad))
    assert status == 1 and out == ""
    assert "Job 'default/partial-gang': spec.tasks[0].template.spec.containers[0]" in err
    assert "resources.requests.cpu: malformed quantity 'four'" in err
    assert f"{bad}, document 1" in err


def test_missing_file_and_bad_config_are_errors(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    status, _, err = run(capsys, "schedule", "-f", str(tmp_path / "nope.yaml"))
    assert status == 1 and "cannot read" in err
    conf = tmp_path / "c.conf"
    conf.write_text("actions: allocate\ntiers:\n- plugins:\n  - name: nosuch\n")
    status, _, err = run(capsys, "schedule", "-f", SNAPSHOT, "--config", str(conf))
    assert status == 1 and "nosuch" in err


def test_output_is_deterministic(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["schedule", *volcano_files("urgent-job.yaml", "partial-gang.yaml"), "-o", "yaml"]
    _, first, _ = run(capsys, *argv)
    _, second, _ = run(capsys, *argv)
    assert first == second and first


def _placements(out: str) -> list[list[str]]:
    section = out.split("\nPLACEMENTS\n", 1)[1].split("\n\n", 1)[0]
    return [line.split() for line in section.splitlines()[1:]]


@pytest.mark.parametrize(
    ("placer", "status"),
    [("greedy", "GREEDY"), ("cpsat", "OPTIMAL"), ("cpsat-joint", "OPTIMAL")],
)
def test_schedule_placer_option_shows_the_placers_status_and_gap(
    capsys: pytest.CaptureFixture[str], placer: str, status: str
) -> None:
    code, out, err = run(capsys, "schedule", "-f", SNAPSHOT, "--placer", placer)
    assert code == 0 and err == ""
    (row,) = _placements(out)
    assert row[:3] == ["llm-finetune", placer, status]
    assert row[3] == ("-" if placer == "greedy" else "0")  # the solver proved its answer optimal
    again = run(capsys, "schedule", "-f", SNAPSHOT, "--placer", placer)
    assert again == (code, out, err)  # the exact placers' defaults are deterministic


def test_get_takes_the_placer_option_too(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "get", "jobs", "-f", SNAPSHOT, "--placer", "cpsat", "-o", "json")
    assert code == 0 and json.loads(out)["llm-finetune"]["phase"] == "Running"
