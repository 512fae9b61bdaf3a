"""The per-node limit: the configuration bound against brute force; the MILP packing's validity."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_quality import brute_force_best, write_cluster

from gangsched.errors import ConfigError
from gangsched.sim.fgd.bounds import gpu_bound, validate_packing
from gangsched.sim.fgd.limit import config_limit


def test_config_bound_is_exact_where_the_aggregate_bound_is_loose(tmp_path: Path) -> None:
    # Two 2-GPU nodes with 4 cores; four 1-GPU pods of 3 cores: one per node for CPU, so at
    # most 2000 milli-GPU. The aggregate model sees 8 cores and 4 GPUs for 12 cores of pods and
    # the per-node cuts allow two pods above half a node, so it cannot rule out more than two.
    nodes, pods = write_cluster(
        tmp_path,
        [(4000, 1000, 2, "T4"), (4000, 1000, 2, "T4")],
        [(3000, 10, 1, 1000), (3000, 10, 1, 1000), (1500, 10, 1, 1000), (1500, 10, 1, 1000)],
    )
    everything = np.arange(len(pods), dtype=np.int64)
    best = brute_force_best(nodes, pods)
    limit = config_limit(nodes, pods, everything, seconds=20)
    assert limit.converged
    assert limit.bound_milli == pytest.approx(best)
    assert limit.packing_milli == best
    assert gpu_bound(nodes, pods, everything).bound_milli >= limit.bound_milli - 1e-6


@pytest.mark.parametrize("case", range(6))
def test_config_bound_and_packing_bracket_brute_force(tmp_path: Path, case: int) -> None:
    rng = np.random.default_rng(100 + case)
    node_rows = [
        (int(rng.choice([4000, 8000])), 4000, int(rng.choice([1, 2])), str(rng.choice(["A", "B"])))
        for _ in range(2)
    ]
    pod_rows = []
    for _ in range(6):
        cpu = int(rng.choice([0, 1000, 2000, 3000, 5000]))
        if rng.integers(3) == 0:
            pod_rows.append((cpu, 500, int(rng.choice([1, 2])), 1000))
        else:
            pod_rows.append((cpu, 500, 1, int(rng.choice([200, 450, 500, 650, 900]))))
    nodes, pods = write_cluster(tmp_path, node_rows, pod_rows)
    everything = np.arange(len(pods), dtype=np.int64)
    best = brute_force_best(nodes, pods)
    limit = config_limit(nodes, pods, everything, seconds=20)
    assert limit.packing_milli <= best <= limit.bound_milli + 1e-6
    assert limit.converged and limit.bound_milli == pytest.approx(best)
    assert validate_packing(nodes, pods, limit.order, limit.placement, limit.devices) == []


def test_config_limit_on_the_bundled_sample_is_valid_and_beats_the_greedy_packing() -> None:
    from gangsched.io.openb import load_nodes, load_pods
    from gangsched.sim.fgd import make_source, tuned_order
    from gangsched.sim.fgd.bounds import arrived_prefix, offline_packing

    nodes, pods = load_nodes(None), load_pods(None)
    order = tuned_order(pods, nodes.total_gpus, 1.3, make_source("go", 42))
    prefix = order[: arrived_prefix(pods, order, nodes.total_gpus, 60)]
    limit = config_limit(nodes, pods, prefix, seconds=60)
    assert validate_packing(nodes, pods, limit.order, limit.placement, limit.devices) == []
    assert set(limit.order.tolist()) <= set(prefix.tolist())
    assert limit.packing_milli >= offline_packing(nodes, pods, prefix).used_milli
    assert limit.packing_milli <= limit.bound_milli + 1e-6


def test_config_limit_refuses_a_bad_budget_and_bad_indices(tmp_path: Path) -> None:
    nodes, pods = write_cluster(tmp_path, [(4000, 1000, 1, "T4")], [(1000, 10, 1, 500)])
    with pytest.raises(ConfigError, match="time budget"):
        config_limit(nodes, pods, np.zeros(1, dtype=np.int64), seconds=0)
    with pytest.raises(ConfigError, match="out of range"):
        config_limit(nodes, pods, np.array([5], dtype=np.int64))


def test_config_limit_without_a_placeable_gpu_pod_is_zero_not_a_solver_error(
    tmp_path: Path,
) -> None:
    # CPU-only pods, no pod at all, no GPU node, a GPU pod too big for every node: the master
    # would have no column (scipy's linprog refuses an empty problem with a bare ValueError).
    cases = [
        ([(4000, 1000, 1, "T4")], [(1000, 10, 0, 0), (1000, 10, 0, 0)], 2),
        ([(4000, 1000, 1, "T4")], [(1000, 10, 0, 0)], 0),
        ([(4000, 1000, 0, "")], [(1000, 10, 1, 500)], 1),
        ([(4000, 1000, 1, "T4")], [(9000, 10, 1, 500)], 1),
    ]
    for node_rows, pod_rows, n in cases:
        nodes, pods = write_cluster(tmp_path, node_rows, pod_rows)
        limit = config_limit(nodes, pods, np.arange(n, dtype=np.int64), seconds=5)
        assert limit.bound_milli == 0.0 and limit.packing_milli == 0 and limit.converged
        assert limit.order.size == 0 and 0.0 <= limit.bound_unallocated_pct <= 100.0
