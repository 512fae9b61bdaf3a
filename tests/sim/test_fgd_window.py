"""The windowed batch protocol of the FGD study: valid, never below the greedy answer when the
solver proves its optimum, deterministic, and bad window sizes rejected by name."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
from test_quality import write_cluster

from gangsched.errors import ConfigError
from gangsched.io.openb import NodeTable, PodTable
from gangsched.sim.fgd import run_one
from gangsched.sim.fgd.bounds import validate_packing
from gangsched.sim.fgd.engine import StudyArrays, workload_typical
from gangsched.sim.fgd.window import (
    MAX_WINDOW,
    WindowParams,
    WindowPod,
    base_scorer,
    check_window,
    parse_window_policy,
    solve_window,
    window_arrivals,
    window_policy_id,
)


class _NoDraw:
    def intn(self, n: int) -> int:  # pragma: no cover - FGD draws nothing
        raise AssertionError("no draw expected")


def _window(
    tmp_path: Path,
    node_rows: list[tuple[int, int, int, str]],
    pod_rows: list[tuple[int, int, int, int]],
) -> tuple[NodeTable, PodTable, StudyArrays, list[WindowPod], npt.NDArray[np.int64]]:
    nodes, pods = write_cluster(tmp_path, node_rows, pod_rows)
    c = StudyArrays(nodes, workload_typical(pods, nodes))
    order = np.arange(len(pods), dtype=np.int64)
    return nodes, pods, c, window_arrivals(pods, nodes, order), order


def test_window_places_more_gpu_than_fgd_one_at_a_time_when_proven_optimal(
    tmp_path: Path,
) -> None:
    # Two nodes of one GPU each; the window is a 500-milli share, then two whole GPUs. FGD one
    # at a time puts the share on a device, the first whole GPU on the other, and drops the
    # second (1500 milli). Jointly, dropping the share places both whole GPUs (2000 milli).
    nodes, pods, c, window, order = _window(
        tmp_path,
        [(16000, 64000, 1, "T4"), (16000, 64000, 1, "T4")],
        [(1000, 10, 1, 500), (1000, 10, 1, 1000), (1000, 10, 1, 1000)],
    )
    params = WindowParams(window=3)
    got = solve_window(c, window, base_scorer("fgd", nodes, pods), _NoDraw(), params)
    assert got.status == "OPTIMAL"
    assert got.greedy_nodes.count(-1) == 1 and got.greedy_gpu == 1500
    assert got.gpu >= got.greedy_gpu
    assert got.gpu == 2000 and got.nodes[0] == -1 and sorted(got.nodes[1:]) == [0, 1]
    assert check_window(c, window, list(got.nodes), list(got.devices)) == []
    masks = np.array([sum(1 << d for d in devs) for devs in got.devices], dtype=np.int64)
    assert validate_packing(nodes, pods, order, np.array(got.nodes), masks) == []
    assert int(c.free_cpu.sum()) == 32000  # the state is left as it was


def test_window_solver_keeps_fgd_answer_when_fgd_places_everything(tmp_path: Path) -> None:
    # Every pod fits one at a time: the solver (forced to run) proves the optimum, places as
    # much GPU as FGD, and its tie-break keeps FGD's nodes and devices.
    nodes, pods, c, window, _ = _window(
        tmp_path,
        [(16000, 64000, 2, "T4"), (16000, 64000, 2, "T4"), (8000, 64000, 1, "T4")],
        [(2000, 10, 1, 300), (1000, 10, 1, 700), (1000, 10, 2, 1000), (4000, 10, 0, 0)],
    )
    scorer = base_scorer("fgd", nodes, pods)
    got = solve_window(c, window, scorer, _NoDraw(), WindowParams(window=4), force=True)
    assert got.status == "OPTIMAL"
    assert all(n >= 0 for n in got.greedy_nodes)
    assert got.gpu >= got.greedy_gpu == 3000
    assert got.nodes == got.greedy_nodes
    assert check_window(c, window, list(got.nodes), list(got.devices)) == []


def test_check_window_finds_an_overfull_device(tmp_path: Path) -> None:
    _, _, c, window, _ = _window(
        tmp_path, [(16000, 64000, 1, "T4")], [(1000, 10, 1, 600), (1000, 10, 1, 600)]
    )
    problems = check_window(c, window, [0, 0], [(0,), (0,)])
    assert problems and "milli-GPU" in problems[0]
    assert check_window(c, window, [0, -1], [(0,), (0,)]) == ["a dropped pod holds devices"]


def test_windowed_run_is_valid_and_places_at_least_fgd_on_a_tight_cluster(tmp_path: Path) -> None:
    shapes = [(1000, 10, 1, 500), (1000, 10, 1, 1000), (2000, 10, 2, 1000), (3000, 10, 0, 0)]
    nodes, pods = write_cluster(
        tmp_path,
        [(16000, 64000, 2, "T4"), (8000, 64000, 1, "T4"), (16000, 64000, 4, "V100")],
        [shapes[i % 4] for i in range(14)],
    )
    runs = {p: run_one(nodes, pods, p, seed=3, tune=0) for p in ("fgd", "fgd-window4")}
    win = runs["fgd-window4"]
    assert win.devices is not None
    assert validate_packing(nodes, pods, win.order, win.placement, win.devices) == []
    assert not win.cpu_overcommit and win.max_gpu_used <= 1000
    assert int(win.used[-1]) >= int(runs["fgd"].used[-1])


def test_windowed_runs_are_deterministic(tmp_path: Path) -> None:
    shapes = [(1000, 10, 1, 450), (1000, 10, 1, 650), (2000, 10, 2, 1000), (3000, 10, 1, 1000)]
    nodes, pods = write_cluster(
        tmp_path,
        [(16000, 64000, 2, "T4"), (8000, 64000, 1, "T4"), (16000, 64000, 4, "V100")] * 2,
        [shapes[(i * 7) % 4] for i in range(30)],
    )
    for policy in ("fgd-window8", "fgd-price-window8"):
        a = run_one(nodes, pods, policy, seed=5, tune=0)
        b = run_one(nodes, pods, policy, seed=5, tune=0)
        assert a.failed > 0  # the solver was asked
        assert a.placement.tobytes() == b.placement.tobytes()
        assert a.devices is not None and b.devices is not None
        assert a.devices.tobytes() == b.devices.tobytes()
        assert a.frag.tobytes() == b.frag.tobytes() and a.used.tobytes() == b.used.tobytes()


@pytest.mark.parametrize(
    "name", ["fgd-window0", "fgd-window-3", "fgd-window1000000000", "fgd-windowx", "fgd-window"]
)
def test_bad_window_size_is_a_config_error_naming_the_field(name: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        parse_window_policy(name)
    assert err.value.field == "window" and "window" in str(err.value)
    nodes, pods = write_cluster(tmp_path, [(16000, 64000, 1, "T4")], [(1000, 10, 1, 500)])
    with pytest.raises(ConfigError, match="window"):
        run_one(nodes, pods, name, seed=1, tune=0)


@pytest.mark.parametrize("k", [0, -1, MAX_WINDOW + 1, 10**12, True, 2.5])
def test_bad_window_parameter_is_a_config_error(k: object) -> None:
    with pytest.raises(ConfigError) as err:
        WindowParams(window=k)  # type: ignore[arg-type]
    assert err.value.field == "window"


def test_window_policy_names_and_ids() -> None:
    assert parse_window_policy("fgd") is None
    assert parse_window_policy("fgd-price-window32") == WindowParams(32, "fgd-price")
    assert window_policy_id("fgd-window16") == "14-FGD-BatchWindow16"
    assert window_policy_id("fgd-price-window8") == "15-FGD-Price-BatchWindow8"
    with pytest.raises(ConfigError, match="candidates"):
        WindowParams(window=8, candidates=0)


def test_fgd_command_runs_a_windowed_policy_under_its_batch_id(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from gangsched.cli import main

    write_cluster(
        tmp_path,
        [(16000, 64000, 2, "T4"), (16000, 64000, 2, "T4"), (32000, 64000, 4, "G2")],
        [(2000, 100, 1, 500), (4000, 100, 1, 1000), (1000, 100, 2, 1000), (500, 100, 0, 0)] * 3,
    )
    common = ["fgd", "--nodes", str(tmp_path / "nodes.csv"), "--pods", str(tmp_path / "pods.csv")]
    out = tmp_path / "out"
    assert main([*common, "--policy", "fgd-window8", "--seeds", "42", "--out", str(out)]) == 0
    table = (out / "analysis_allo_discrete.csv").read_text(encoding="utf-8")
    assert ",14-FGD-BatchWindow8,1.3,42," in table
    capsys.readouterr()
    assert main([*common, "compare", str(out)]) == 0
    assert "14-FGD-BatchWindow8" in capsys.readouterr().out
