"""The Ray engine of the FGD sweep, on a local two-CPU Ray instance started here.

Skipped only when Ray is not installed (it is the optional ``ray`` extra).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from gangsched.errors import ConfigError
from gangsched.io.openb import load_nodes, load_pods
from gangsched.sim.fgd import RunResult, discrete_tables, run_grid, write_tables

ray = pytest.importorskip("ray")

from gangsched.sim.ray_engine import map_ordered, ray_available  # noqa: E402


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()


def same(a: RunResult, b: RunResult) -> None:
    for name in RunResult.__slots__:
        x, y = getattr(a, name), getattr(b, name)
        if isinstance(x, np.ndarray):
            assert np.array_equal(x, y), name
        else:
            assert x == y, name


def test_ray_grid_equals_the_sequential_grid(local_ray: None, tmp_path: Path) -> None:
    nodes, pods = load_nodes(), load_pods()
    policies, seeds = ["bestfit", "fgd", "random"], [42, 43]
    sequential = run_grid(nodes, pods, policies, seeds, limit=400)
    seen: list[tuple[int, int, str, int]] = []
    on_ray = run_grid(
        nodes,
        pods,
        policies,
        seeds,
        limit=400,
        engine="ray",
        progress=lambda done, total, run: seen.append((done, total, run.policy, run.seed)),
    )
    assert len(on_ray) == len(sequential) == 6
    for a, b in zip(sequential, on_ray, strict=True):
        same(a, b)
    # Gathered in submission order: policy, then seed.
    assert seen == [
        (i + 1, 6, p, s) for i, (p, s) in enumerate((p, s) for p in policies for s in seeds)
    ]
    write_tables([discrete_tables(r) for r in sequential], tmp_path / "seq")
    write_tables([discrete_tables(r) for r in on_ray], tmp_path / "ray")
    for name in ("analysis_allo_discrete.csv", "analysis_frag_ratio_discrete.csv"):
        assert (tmp_path / "seq" / name).read_bytes() == (tmp_path / "ray" / name).read_bytes()
    assert ray.is_initialized()  # a runtime the caller started is left running


def test_a_failing_run_raises_the_library_error(local_ray: None) -> None:
    nodes, pods = load_nodes(), load_pods()
    with pytest.raises(ConfigError, match="rng"):
        run_grid(nodes, pods, ["bestfit"], [1], limit=5, rng="mersenne", engine="ray")


def test_map_ordered_hands_common_data_to_every_task(local_ray: None) -> None:
    from gangsched.sim.fgd import _run_shared

    nodes, pods = load_nodes(), load_pods()
    specs = [("dotprod", s, 1.3, "numpy", 50) for s in (5, 3, 9)]
    runs = map_ordered(_run_shared, specs, (nodes, pods))
    assert [r.seed for r in runs] == [5, 3, 9]
    assert all(r.n_pods == 50 and r.policy == "dotprod" for r in runs)
    assert ray_available()


def test_unknown_engine_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="engine"):
        run_grid(load_nodes(), load_pods(), ["bestfit"], [1], limit=5, engine="spark")


def test_fgd_command_with_the_ray_engine(local_ray: None, tmp_path: Path) -> None:
    from gangsched.cli import main

    args = ["fgd", "--policy", "bestfit", "--seeds", "42-43", "--limit", "200"]
    assert main([*args, "--out", str(tmp_path / "ray"), "--engine", "ray"]) == 0
    assert main([*args, "--out", str(tmp_path / "proc"), "--workers", "2"]) == 0
    for name in ("analysis_allo_discrete.csv", "analysis_frag_discrete.csv"):
        assert (tmp_path / "ray" / name).read_bytes() == (tmp_path / "proc" / name).read_bytes()
