"""Hostile input to the manifest loaders and the command line: typed errors, bounded cost, no
traceback."""

from __future__ import annotations

import errno
import io
import json
import os
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
import yaml

from _builders import node_manifest
from gangsched import cli
from gangsched.cli import main
from gangsched.config import Config
from gangsched.errors import ConfigError, SnapshotError
from gangsched.io.k8s import load_files, load_objects, load_text
from gangsched.io.volcano_out import dump_manifests
from gangsched.limits import Limits
from gangsched.model import Job, Node, Queue, Resources, Task
from gangsched.model.snapshot import Snapshot
from gangsched.sim.fgd import parse_seeds, run_grid, tuned_order

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOT = str(ROOT / "examples" / "snapshot.yaml")
EXPECTED = str(ROOT / "src" / "gangsched" / "data" / "fgd_expected")


# ------------------------------------------------------------------------------------------
# builders


def node(name: str = "n0", **meta: Any) -> dict[str, Any]:
    return node_manifest(name, cpu="8", memory="16Gi", **meta)


def vcjob(name: str = "j", replicas: int = 1, task: str = "w", **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name, **meta},
        "spec": {
            "tasks": [
                {
                    "name": task,
                    "replicas": replicas,
                    "template": {
                        "spec": {
                            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]
                        }
                    },
                }
            ]
        },
    }


def hypernode(pattern: str, name: str = "s0") -> dict[str, Any]:
    return {
        "apiVersion": "topology.volcano.sh/v1alpha1",
        "kind": "HyperNode",
        "metadata": {"name": name},
        "spec": {
            "tier": 1,
            "members": [{"type": "Node", "selector": {"regexMatch": {"pattern": pattern}}}],
        },
    }


def priority_class(name: str, value: int, default: bool) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
        "globalDefault": default,
    }


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def one_error_line(err: str, prefix: str = "gangsched: error: ") -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(prefix), err
    assert "Traceback" not in err
    return lines[0]


# ------------------------------------------------------------------------------------------
# nesting


@pytest.mark.parametrize(
    "text",
    [
        "[" * 5000,
        '{"a":' * 5000 + "1" + "}" * 5000,
        "".join(" " * i + "k:\n" for i in range(100)) + " " * 100 + "k: 1\n",
        # an alias adds the depth of what it names where it is used
        "a: &a " + "[" * 40 + "]" * 40 + "\nb: " + "[" * 30 + "*a" + "]" * 30 + "\n",
    ],
    ids=["brackets", "json", "block", "alias"],
)
def test_deep_nesting_is_a_typed_error_not_recursion(text: str) -> None:
    with pytest.raises(SnapshotError, match=r"nested deeper than 64 levels.*line \d+, column"):
        load_text(text, source="deep.yaml")


def test_nesting_bound_is_configurable_and_allows_its_own_depth() -> None:
    ok = '{"nodes": ' + "[" * 63 + "]" * 63 + "}"
    with pytest.raises(SnapshotError):  # depth 64 is accepted by the parser, not the loader
        load_text(ok)
    with pytest.raises(SnapshotError, match="nested deeper than 10 levels"):
        load_text("[" * 11 + "]" * 11, limits=Limits(max_nesting=10))


def test_deeply_nested_scheduler_config_is_a_typed_error(tmp_path: Path) -> None:
    deep = "actions: " + "[" * 500 + "]" * 500
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "volcano-scheduler-configmap", "namespace": "volcano-system"},
        "data": {"volcano-scheduler.conf": deep},
    }
    with pytest.raises(ConfigError, match="nested deeper than 64"):
        load_objects([configmap])
    path = tmp_path / "conf.yaml"
    path.write_text(deep)
    status = main(["schedule", "-f", SNAPSHOT, "--config", str(path)])
    assert status == 1


def test_merge_keys_keep_their_meaning_and_stay_linear() -> None:
    base = "base: &b {x: 1, y: 2}\nd: {<<: *b, y: 3}\ne: {<<: [*b, {x: 9, z: 0}]}\n"
    (doc,) = yaml.safe_load_all(base)
    from gangsched.io._text import parse_yaml

    (ours,) = parse_yaml(base, max_nesting=64)
    assert (
        ours
        == doc
        == {
            "base": {"x": 1, "y": 2},
            "d": {"x": 1, "y": 3},
            "e": {"x": 1, "y": 2, "z": 0},
        }
    )
    # Each level merges the previous one nine times: PyYAML's default repeats entries 9**n.
    lines = ["a0: &a0 {k0: 0, k1: 1, k2: 2, k3: 3, k4: 4, k5: 5, k6: 6, k7: 7, k8: 8}"]
    lines += [f"a{i}: &a{i} {{<<: [{', '.join([f'*a{i - 1}'] * 9)}]}}" for i in range(1, 25)]
    start = time.process_time()
    (bomb,) = parse_yaml("\n".join(lines), max_nesting=64)
    assert time.process_time() - start < 2.0
    assert bomb["a24"] == bomb["a0"]


# ------------------------------------------------------------------------------------------
# replicas and pods


def test_huge_replicas_are_refused_before_expansion() -> None:
    text = yaml.safe_dump(vcjob("x", replicas=1_000_000_000, namespace="team"))
    tracemalloc.start()
    try:
        start = time.process_time()
        with pytest.raises(SnapshotError) as info:
            load_text(text)
        elapsed = time.process_time() - start
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    err = info.value
    assert (err.kind, err.name, err.field) == ("Job", "team/x", "spec.tasks[0].replicas")
    assert "Limits.max_replicas" in err.detail
    assert elapsed < 1.0 and peak < 20 * 2**20


def test_pods_in_all_are_bounded_by_max_tasks() -> None:
    limits = Limits(max_tasks=10, max_replicas=8)
    load_objects([vcjob("a", 5), vcjob("b", 5)], limits=limits)
    with pytest.raises(SnapshotError, match=r"11 pods.*Limits.max_tasks") as info:
        load_objects([vcjob("a", 5), vcjob("b", 6)], limits=limits)
    assert (info.value.name, info.value.field) == ("default/b", "spec.tasks[0].replicas")
    snapshot = {
        "tasks": [{"name": f"t{i}", "job": "j"} for i in range(11)],
        "jobs": [{"name": "j"}],
    }
    with pytest.raises(SnapshotError, match=r"Limits\.max_tasks"):
        load_objects([snapshot], limits=limits)


def test_replica_limit_is_configurable() -> None:
    with pytest.raises(SnapshotError, match="more than the limit of 5"):
        load_objects([vcjob("a", 6)], limits=Limits(max_replicas=5))
    cluster = load_objects([vcjob("a", 6)], limits=Limits(max_replicas=6))
    assert len(cluster.snapshot.tasks) == 6


# ------------------------------------------------------------------------------------------
# numbers and encodings


def test_five_thousand_digit_integers_are_typed_errors() -> None:
    digits = "1" * 5000
    for text in (f"nodes: [{{name: n0, allocatable: {{pods: {digits}}}}}]", f"[{digits}]"):
        with pytest.raises(SnapshotError, match="integer literal of 5000 characters"):
            load_text(text)
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "labels": {"volcano.sh/task-index": digits}},
        "spec": {"schedulerName": "volcano", "containers": [{"name": "c"}]},
    }
    assert load_objects([pod]).pods["p"].index == 0  # not an index: ignored as Volcano does
    pod["metadata"]["labels"] = {"volcano.sh/task-index": "²"}
    assert load_objects([pod]).pods["p"].index == 0
    pod["metadata"]["annotations"] = {"volcano.sh/task-priority": digits}
    with pytest.raises(SnapshotError, match="expected an integer below"):
        load_objects([pod])
    gpu_node = node("g0", labels={"nvidia.com/gpu.count": digits})
    with pytest.raises(SnapshotError, match="expected a device count") as info:
        load_objects([gpu_node])
    assert info.value.field == "metadata.labels[nvidia.com/gpu.count]"


def test_non_utf8_binary_and_utf16_files_are_typed_errors(tmp_path: Path) -> None:
    good = "nodes: [{name: n0, allocatable: {cpu: 1}}]\n"
    cases = {
        "latin1.yaml": ("caf\xe9: 1\n".encode("latin-1"), r"not UTF-8 text \(byte 0xe9"),
        "binary.yaml": (bytes(range(256)) * 4, "not UTF-8 text|binary data"),
        "nul.yaml": (b"a: 1\x00\n", "binary data"),
        "utf16-no-bom.yaml": (good.encode("utf-16-le"), "binary data"),
        "utf32.yaml": (good.encode("utf-32"), "UTF-32"),
    }
    for name, (data, pattern) in cases.items():
        path = tmp_path / name
        path.write_bytes(data)
        with pytest.raises(SnapshotError, match=pattern) as info:
            load_files([path])
        assert info.value.kind == "file" and info.value.name == str(path)
    for encoding in ("utf-16", "utf-8-sig"):
        path = tmp_path / f"{encoding}.yaml"
        path.write_bytes(good.encode(encoding))
        assert [n.name for n in load_files([path]).snapshot.nodes] == ["n0"]


# ------------------------------------------------------------------------------------------
# regular expressions


def test_regex_match_is_linear_time() -> None:
    objs = [node("a" * 32 + "b"), node("aaaa"), hypernode("^(a+)+$")]
    start = time.process_time()
    cluster = load_objects(objs)
    assert time.process_time() - start < 1.0  # backtracking `re`: hours at 33 characters
    (hn,) = cluster.snapshot.hypernodes
    assert hn.members == ("aaaa",)
    # unanchored patterns match anywhere in the name, as Go's regexp.MatchString does
    (hn,) = load_objects([node("rack1-n0"), node("rack2-n0"), hypernode("k1-")]).snapshot.hypernodes
    assert hn.members == ("rack1-n0",)


@pytest.mark.parametrize(
    ("pattern", "why"),
    [
        (r"(a)\1", "invalid escape sequence"),
        ("(?=a)", "invalid perl operator"),
        ("[", "missing ]"),
        ("a{1000}{1000}", "bad repetition"),
        ("x" * 5000, "longer than 4096"),
    ],
)
def test_regex_match_rejects_invalid_and_unsupported_patterns(pattern: str, why: str) -> None:
    with pytest.raises(SnapshotError, match=why) as info:
        load_objects([node(), hypernode(pattern, name="spine")])
    err = info.value
    assert (err.kind, err.name) == ("HyperNode", "spine")
    assert err.field == "spec.members[0].selector.regexMatch.pattern"


# ------------------------------------------------------------------------------------------
# names and round trips


@pytest.mark.parametrize(
    ("obj", "field"),
    [
        (vcjob("default/x"), "metadata.name"),
        (vcjob("Train"), "metadata.name"),
        (vcjob("x" * 254), "metadata.name"),
        (vcjob("ok", namespace="Team_A"), "metadata.namespace"),
        (vcjob("ok", namespace="a.b"), "metadata.namespace"),
        (vcjob("ok", task="Worker_1"), "spec.tasks[0].name"),
        (node("node/0"), "metadata.name"),
        (node("-n0"), "metadata.name"),
        (hypernode("n", name="s 0"), "metadata.name"),
        (priority_class("High", 10, False), "metadata.name"),
    ],
)
def test_names_kubernetes_rejects_are_rejected(obj: dict[str, Any], field: str) -> None:
    with pytest.raises(SnapshotError, match="invalid name") as info:
        load_objects([obj])
    assert info.value.kind == obj["kind"] and info.value.field == field


def test_valid_dns1123_names_load() -> None:
    objs = [node("node-0.rack-1"), vcjob("a.b-c", task="worker-0", namespace="team-1")]
    cluster = load_objects(objs)
    assert [j.name for j in cluster.snapshot.jobs] == ["team-1/a.b-c"]


def test_two_global_default_priority_classes_are_refused() -> None:
    objs = [priority_class("low", 1, True), priority_class("high", 100, True)]
    with pytest.raises(SnapshotError, match="second default PriorityClass") as info:
        load_objects(objs)
    assert (info.value.kind, info.value.name, info.value.field) == (
        "PriorityClass",
        "high",
        "globalDefault",
    )
    load_objects([priority_class("low", 1, True), priority_class("high", 100, False)])


def test_dump_manifests_refuses_names_that_would_not_load_back() -> None:
    def snap(job: str, task: str) -> Snapshot:
        return Snapshot(
            nodes=(Node(name="n0", allocatable=Resources({"cpu": 1000})),),
            queues=(Queue(name="default"),),
            jobs=(Job(name=job),),
            tasks=(Task(name=task, job=job, request=Resources({"cpu": 100})),),
        )

    back = load_objects(dump_manifests(snap("team/j", "team/j-0"))).snapshot
    assert [j.name for j in back.jobs] == ["team/j"]
    for job, task, kind in (("default/x", "t", "job"), ("j", "a/b/c", "task"), ("J", "t", "job")):
        with pytest.raises(SnapshotError, match="cannot be written as a Kubernetes") as info:
            dump_manifests(snap(job, task))
        assert info.value.kind == kind and info.value.field == "name"


# ------------------------------------------------------------------------------------------
# fgd options


@pytest.mark.parametrize("tune", ["nan", "inf", "-1", "11", "lots"])
def test_fgd_tune_nan_and_out_of_range_are_usage_errors(
    tune: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with pytest.raises(SystemExit) as info:
        main(["fgd", "--tune", tune, "--out", str(tmp_path)])
    assert info.value.code == 2
    assert "argument --tune" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_fgd_tune_is_validated_by_the_library() -> None:
    from gangsched.io.openb import load_nodes, load_pods
    from gangsched.sim.fgd import make_source

    nodes, pods = load_nodes(), load_pods()
    for bad in (float("nan"), float("inf"), -0.5, 1e9):
        with pytest.raises(ConfigError, match="tuning ratio"):
            run_grid(nodes, pods, ["fgd"], [1], tune=bad)
        with pytest.raises(ConfigError, match="tuning ratio"):
            tuned_order(pods, nodes.total_gpus, bad, make_source("go", 1))


def test_fgd_seed_ranges_are_bounded() -> None:
    start = time.process_time()
    with pytest.raises(ConfigError, match="at most 10000 seeds"):
        parse_seeds("0-100000000000")
    assert time.process_time() - start < 0.5
    assert parse_seeds("1-3,7") == (1, 2, 3, 7)


# ------------------------------------------------------------------------------------------
# the command line


@pytest.fixture
def deep_file(tmp_path: Path) -> str:
    path = tmp_path / "deep.yaml"
    path.write_text("[" * 5000)
    return str(path)


def test_cli_errors_are_one_line_for_every_subcommand(
    capsys: pytest.CaptureFixture[str], deep_file: str, tmp_path: Path
) -> None:
    latin = tmp_path / "latin.csv"
    latin.write_bytes(b"caf\xe9\n")
    cases = [
        ["schedule", "-f", deep_file],
        ["get", "queues", "-f", deep_file],
        ["schedule", "-f", SNAPSHOT, "--config", deep_file],
        ["schedule", "-f", "-", "--config", "-"],
        ["fgd", "--nodes", str(latin), "--out", str(tmp_path / "o")],
        ["fgd", "compare", str(latin)],
        ["fgd", "--seeds", "x", "--out", str(tmp_path / "o")],
        ["replay", "--nodes", str(tmp_path / "missing.csv")],
        ["replay", "--config", deep_file, "--limit", "5"],
        ["fgd", "demo", "--seeds", "0-100000000"],
        ["--cluster", "0x8"],  # the default run
    ]
    for argv in cases:
        status, _, err = run(capsys, *argv)
        assert status == 1, argv
        one_error_line(err)


def test_cli_internal_error_is_reported_with_a_hint(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(args: object) -> int:
        raise KeyError("surprise")

    monkeypatch.setattr(cli, "run_story_cli", broken)
    status, _, err = run(capsys, "--jobs", "1")
    assert status == 1
    line = one_error_line(err, "gangsched: internal error: KeyError: 'surprise'")
    assert "GANGSCHED_DEBUG=1" in line
    monkeypatch.setenv("GANGSCHED_DEBUG", "1")
    status, _, err = run(capsys, "--jobs", "1")
    assert status == 1 and "Traceback" in err and "raise KeyError" in err


class _FullDevice(io.StringIO):
    def __init__(self, error: OSError) -> None:
        super().__init__()
        self.error = error

    def write(self, text: str) -> int:
        raise self.error

    def flush(self) -> None:
        raise self.error


def test_cli_stdout_to_a_full_device_is_a_one_line_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stdout", _FullDevice(OSError(errno.ENOSPC, os.strerror(28))))
    status = main(["schedule", "-f", SNAPSHOT])
    err = capsys.readouterr().err
    assert status == 1
    assert one_error_line(err).endswith("cannot write the output: No space left on device")


def test_cli_broken_pipe_exits_quietly(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stdout", _FullDevice(BrokenPipeError(errno.EPIPE, "Broken pipe")))
    status = main(["fgd", "compare", EXPECTED])
    assert status == cli.EXIT_BROKEN_PIPE and capsys.readouterr().err == ""


def test_cli_schedule_reads_stdin(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    data = Path(SNAPSHOT).read_bytes()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    status, out, _ = run(capsys, "schedule", "-f", "-", "-o", "json")
    expected = main(["schedule", "-f", SNAPSHOT, "-o", "json"])
    assert status == expected == 0
    assert json.loads(out) == json.loads(capsys.readouterr().out)


def _cli(*argv: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    env.pop("GANGSCHED_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-m", "gangsched", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
        **kwargs,
    )


def test_cli_subprocess_shows_no_traceback(deep_file: str, tmp_path: Path) -> None:
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(bytes(range(256)))
    for argv in (["schedule", "-f", deep_file], ["schedule", "-f", str(binary)]):
        proc = _cli(*argv)
        assert proc.returncode == 1 and proc.stdout == ""
        one_error_line(proc.stderr)
    proc = _cli("schedule", "-f", "-", "-o", "json", input=Path(SNAPSHOT).read_text())
    assert proc.returncode == 0 and json.loads(proc.stdout)["binds"]
    if Path("/dev/full").exists():
        with open("/dev/full", "w") as full:
            env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
            done = subprocess.run(
                [sys.executable, "-m", "gangsched", "schedule", "-f", SNAPSHOT],
                stdout=full,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
                timeout=120,
                check=False,
            )
        assert done.returncode == 1
        assert one_error_line(done.stderr).endswith("No space left on device")


def test_cli_subprocess_closed_pipe_is_quiet() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gangsched", "fgd", "compare", EXPECTED],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader went away before the first line, as `| head -0` does
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == cli.EXIT_BROKEN_PIPE
    assert err == b""


def test_config_text_still_parses_after_the_bounded_reader(tmp_path: Path) -> None:
    path = tmp_path / "conf.yaml"
    path.write_text('actions: "enqueue, allocate"\ntiers:\n- plugins:\n  - name: gang\n')
    from gangsched.cli.schedule import read_config

    assert read_config(str(path)) == Config.from_volcano_yaml(path.read_text())
