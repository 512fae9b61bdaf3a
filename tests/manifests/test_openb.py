"""Loader for the openb trace: the vendored files, the short format, and bad rows."""

from __future__ import annotations

import collections
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gangsched.errors import SnapshotError
from gangsched.io.openb import MISSING_TIME, load_nodes, load_pods

POD_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time"
)


def test_vendored_nodes() -> None:
    nodes = load_nodes()
    assert len(nodes) == 1213
    assert nodes.total_gpus == 6212
    per_node = collections.Counter(nodes.gpu_count.tolist())
    assert per_node == {8: 617, 2: 518, 4: 54, 1: 24}
    models = collections.Counter(nodes.model_of(i) for i in range(len(nodes)))
    assert models == {
        "G2": 549,
        "T4": 404,
        "P100": 134,
        "V100M16": 55,
        "G3": 39,
        "V100M32": 30,
        "A10": 2,
    }
    assert nodes.names[0] == "openb-node-0000"
    assert not nodes.cpu_milli.flags.writeable


def test_vendored_default_pods() -> None:
    pods = load_pods()
    assert len(pods) == 8152
    assert pods.has_times
    num = pods.num_gpu
    assert int((num == 0).sum()) == 1088
    assert int((num == 1).sum()) == 6989
    assert int(((num == 1) & (pods.gpu_milli < 1000)).sum()) == 3078
    assert [int((num == k).sum()) for k in (2, 4, 8)] == [16, 15, 44]
    assert round(pods.total_gpu_milli / 1000) == 6087
    assert collections.Counter(pods.qos) == {
        "LS": 4647,
        "BE": 3398,
        "Burstable": 100,
        "Guaranteed": 7,
    }
    phases = collections.Counter(pods.phase)
    assert phases == {"Running": 5193, "Failed": 1870, "Pending": 897, "Succeeded": 192}
    pending = np.asarray([p == "Pending" for p in pods.phase])
    assert bool((pods.scheduled_time[pending] == MISSING_TIME).all())
    assert bool((pods.scheduled_time[~pending] >= 0).all())
    assert pods.specs == ("",)


def test_short_multigpu_format_and_specs(tmp_path: Path) -> None:
    path = tmp_path / "short.csv"
    path.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np1,1000,512,2,1000\np0,500,256,0,0\n"
    )
    pods = load_pods(path)
    assert pods.names == ("p1", "p0")
    assert not pods.has_times
    assert pods.creation_time.tolist() == [MISSING_TIME, MISSING_TIME]
    assert pods.num_gpu.tolist() == [2, 0]

    spec = tmp_path / "spec.csv"
    spec.write_text(
        POD_HEADER + "\na,1000,1,1,500,V100M32|T4,LS,Running,0,5,1\n"
        "b,1000,1,1,500,,BE,Pending,3,9,\n"
    )
    pods = load_pods(spec)
    assert pods.specs == ("", "V100M32|T4")
    assert pods.spec_idx.tolist() == [1, 0]
    allowed = pods.spec_allowed(("A10", "T4", "V100M32"))
    assert allowed.tolist() == [[True, True, True], [False, True, True]]
    assert pods.scheduled_time.tolist() == [1, MISSING_TIME]


@pytest.mark.parametrize(
    ("row", "column"),
    [
        ("p,abc,1,1,1000,,LS,Running,0,1,0", "cpu_milli"),
        ("p,1000,1,1,1500,,LS,Running,0,1,0", "gpu_milli"),
        ("p,1000,1,2,500,,LS,Running,0,1,0", "gpu_milli"),
        ("p,1000,1,0,500,,LS,Running,0,1,0", "gpu_milli"),
        ("p,1000,1,9,1000,,LS,Running,0,1,0", "num_gpu"),
        ("p,1000,-5,1,1000,,LS,Running,0,1,0", "memory_mib"),
        ("p,1000,1,1,1000,,LS,Running,x,1,0", "creation_time"),
    ],
)
def test_bad_pod_row_names_file_row_column(tmp_path: Path, row: str, column: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(POD_HEADER + "\nok,1000,1,1,1000,,LS,Running,0,1,0\n" + row + "\n")
    with pytest.raises(SnapshotError) as info:
        load_pods(path)
    msg = str(info.value)
    assert str(path) in msg and "row 3" in msg and column in msg


def test_bad_structure(tmp_path: Path) -> None:
    missing = tmp_path / "missing.csv"
    missing.write_text("name,cpu_milli,num_gpu,gpu_milli\np,1,0,0\n")
    with pytest.raises(SnapshotError, match="memory_mib"):
        load_pods(missing)
    dup = tmp_path / "dup.csv"
    dup.write_text("sn,cpu_milli,memory_mib,gpu,model\nn,1,1,1,T4\nn,1,1,1,T4\n")
    with pytest.raises(SnapshotError, match="duplicate node name"):
        load_nodes(dup)
    nomodel = tmp_path / "nomodel.csv"
    nomodel.write_text("sn,cpu_milli,memory_mib,gpu,model\nn,1,1,2,\n")
    with pytest.raises(SnapshotError, match="model"):
        load_nodes(nomodel)
    ragged = tmp_path / "ragged.csv"
    ragged.write_text("sn,cpu_milli,memory_mib,gpu,model\nn,1,1\n")
    with pytest.raises(SnapshotError, match="row 2"):
        load_nodes(ragged)
    with pytest.raises(SnapshotError, match="cannot read"):
        load_nodes(tmp_path / "absent.csv")


pod_rows = st.lists(
    st.tuples(
        st.integers(0, 128_000),
        st.integers(0, 1 << 20),
        st.sampled_from([(0, 0), (1, 1000), (2, 1000), (8, 1000), (1, 1), (1, 999)]),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=30, deadline=None)
@given(rows=pod_rows)
def test_roundtrip_random_rows(
    tmp_path_factory: pytest.TempPathFactory, rows: list[tuple[int, int, tuple[int, int]]]
) -> None:
    path = tmp_path_factory.mktemp("rt") / "pods.csv"
    lines = ["name,cpu_milli,memory_mib,num_gpu,gpu_milli"]
    lines += [f"p{i},{c},{m},{g[0]},{g[1]}" for i, (c, m, g) in enumerate(rows)]
    path.write_text("\n".join(lines) + "\n")
    pods = load_pods(path)
    assert pods.cpu_milli.tolist() == [c for c, _, _ in rows]
    assert pods.memory_mib.tolist() == [m for _, m, _ in rows]
    assert pods.num_gpu.tolist() == [g[0] for _, _, g in rows]
    assert pods.total_gpu_milli == sum(g[0] * g[1] for _, _, g in rows)
