"""The placement limit: the GPU bound against brute force and every policy; offline packings."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from gangsched.errors import ConfigError
from gangsched.io.openb import NodeTable, PodTable, load_nodes, load_pods
from gangsched.sim.fgd import POLICY_IDS, run_one
from gangsched.sim.fgd.bounds import arrived_prefix, gpu_bound, offline_packing, validate_packing


def write_cluster(
    tmp_path: Path, nodes: list[tuple[int, int, int, str]], pods: list[tuple[int, int, int, int]]
) -> tuple[NodeTable, PodTable]:
    node_lines = ["sn,cpu_milli,memory_mib,gpu,model"]
    node_lines += [f"n{i:03d},{c},{m},{g},{model}" for i, (c, m, g, model) in enumerate(nodes)]
    pod_lines = ["name,cpu_milli,memory_mib,num_gpu,gpu_milli"]
    pod_lines += [f"p{i:03d},{c},{m},{n},{g}" for i, (c, m, n, g) in enumerate(pods)]
    (tmp_path / "nodes.csv").write_text("\n".join(node_lines) + "\n")
    (tmp_path / "pods.csv").write_text("\n".join(pod_lines) + "\n")
    return load_nodes(tmp_path / "nodes.csv"), load_pods(tmp_path / "pods.csv")


def brute_force_best(nodes: NodeTable, pods: PodTable) -> int:
    """Most milli-GPU any placement (any subset, any devices) allocates: full enumeration."""
    best = 0
    n = len(nodes)

    def rec(i: int, cpu: list[int], mem: list[int], dev: list[list[int]], used: int) -> None:
        nonlocal best
        if i == len(pods):
            best = max(best, used)
            return
        rec(i + 1, cpu, mem, dev, used)  # reject pod i
        c, m = int(pods.cpu_milli[i]), int(pods.memory_mib[i])
        k, g = int(pods.num_gpu[i]), int(pods.gpu_milli[i])
        for node in range(n):
            if cpu[node] < c or mem[node] < m:
                continue
            for devs in itertools.combinations(range(int(nodes.gpu_count[node])), k):
                if any(dev[node][d] < g for d in devs):
                    continue
                if g == 1000 and any(dev[node][d] != 1000 for d in devs):
                    continue
                cpu[node] -= c
                mem[node] -= m
                for d in devs:
                    dev[node][d] -= g
                rec(i + 1, cpu, mem, dev, used + k * g)
                cpu[node] += c
                mem[node] += m
                for d in devs:
                    dev[node][d] += g

    rec(
        0,
        [int(x) for x in nodes.cpu_milli],
        [int(x) for x in nodes.memory_mib],
        [[1000] * int(g) for g in nodes.gpu_count],
        0,
    )
    return best


def test_bound_equals_brute_force_optimum_on_a_tiny_node(tmp_path: Path) -> None:
    # One node, 2 GPUs: a whole GPU (1000) plus the 600 share fills 1600; every other mix is
    # smaller or does not fit (600 + 500 > one device, three pods above 500 > two devices).
    nodes, pods = write_cluster(
        tmp_path,
        [(8000, 1000, 2, "T4")],
        [(1000, 10, 1, 1000), (1000, 10, 1, 600), (1000, 10, 1, 600), (1000, 10, 1, 500)],
    )
    assert brute_force_best(nodes, pods) == 1600
    everything = np.arange(len(pods), dtype=np.int64)
    bound = gpu_bound(nodes, pods, everything)
    assert bound.status == "optimal"
    assert bound.bound_milli == pytest.approx(1600)
    assert bound.lp_milli >= bound.bound_milli - 1e-6  # the LP relaxation is never tighter


def test_bound_counts_cpu_per_node_cuts(tmp_path: Path) -> None:
    # Two 1-GPU nodes with 4 cores: three pods of 3 cores cannot share a node, so at most two run.
    nodes, pods = write_cluster(
        tmp_path,
        [(4000, 1000, 1, "T4"), (4000, 1000, 1, "T4")],
        [(3000, 10, 1, 300), (3000, 10, 1, 300), (3000, 10, 1, 300)],
    )
    assert brute_force_best(nodes, pods) == 600
    bound = gpu_bound(nodes, pods, np.arange(3, dtype=np.int64))
    assert bound.bound_milli == pytest.approx(600)


@pytest.mark.parametrize("case", range(6))
def test_bound_is_above_brute_force_and_every_policy(tmp_path: Path, case: int) -> None:
    rng = np.random.default_rng(case)
    node_rows = [
        (int(rng.choice([4000, 8000])), 4000, int(rng.choice([1, 2])), str(rng.choice(["A", "B"])))
        for _ in range(2)
    ]
    pod_rows = []
    for _ in range(6):
        kind = rng.integers(4)
        cpu = int(rng.choice([0, 1000, 2000, 3000, 5000]))
        if kind == 0:
            pod_rows.append((cpu, 500, 0, 0))
        elif kind == 1:
            pod_rows.append((cpu, 500, int(rng.choice([1, 2])), 1000))
        else:
            pod_rows.append((cpu, 500, 1, int(rng.choice([200, 450, 500, 650, 900]))))
    nodes, pods = write_cluster(tmp_path, node_rows, pod_rows)
    everything = np.arange(len(pods), dtype=np.int64)
    bound = gpu_bound(nodes, pods, everything)
    best = brute_force_best(nodes, pods)
    assert bound.bound_milli >= best - 1e-6
    for policy in POLICY_IDS:
        run = run_one(nodes, pods, policy, 42, order=everything)
        assert run.used[-1] <= best <= bound.bound_milli + 1e-6
        assert run.devices is not None
        assert validate_packing(nodes, pods, everything, run.placement, run.devices) == []
    packing = offline_packing(nodes, pods, everything)
    assert packing.problems == ()
    assert packing.used_milli <= best


def test_offline_packing_on_the_bundled_sample_is_valid_and_below_the_bound() -> None:
    nodes, pods = load_nodes(), load_pods()
    keep = np.arange(0, len(nodes), 25)
    small = NodeTable(
        source="sample",
        names=tuple(nodes.names[i] for i in keep),
        cpu_milli=nodes.cpu_milli[keep],
        memory_mib=nodes.memory_mib[keep],
        gpu_count=nodes.gpu_count[keep],
        model_idx=nodes.model_idx[keep],
        models=nodes.models,
    )
    arrived = np.arange(0, len(pods), 31, dtype=np.int64)
    packing = offline_packing(small, pods, arrived, policies=("bestfit",))
    assert packing.problems == ()
    bound = gpu_bound(small, pods, arrived)
    assert 0 < packing.used_milli <= bound.bound_milli + 1e-6
    online = run_one(small, pods, "bestfit", 42, order=arrived)
    assert online.used[-1] <= bound.bound_milli + 1e-6


def test_validate_packing_finds_each_kind_of_violation(tmp_path: Path) -> None:
    nodes, pods = write_cluster(
        tmp_path,
        [(4000, 1000, 2, "T4"), (4000, 1000, 1, "T4")],
        [(3000, 10, 1, 600), (3000, 10, 1, 600), (100, 10, 2, 1000)],
    )
    order = np.arange(3, dtype=np.int64)
    ok = validate_packing(nodes, pods, order[:1], np.array([0]), np.array([1]))
    assert ok == []
    cpu = validate_packing(nodes, pods, order[:2], np.array([0, 0]), np.array([1, 2]))
    assert any("CPU" in p for p in cpu)
    dev = validate_packing(nodes, pods, order[1:3], np.array([0, 0]), np.array([1, 3]))
    assert any("GPU over capacity" in p for p in dev)
    count = validate_packing(nodes, pods, order[2:], np.array([0]), np.array([1]))
    assert any("number of devices" in p for p in count)
    beyond = validate_packing(nodes, pods, order[:1], np.array([1]), np.array([2]))
    assert any("does not have" in p for p in beyond)
    wide = validate_packing(nodes, pods, order[:1], np.array([0]), np.array([4]))
    assert any("beyond the widest" in p for p in wide)
    shared = validate_packing(nodes, pods, order[1:3], np.array([0, 0]), np.array([1, 3]))
    assert any("whole GPU shared" in p for p in shared)


def test_arrived_prefix_and_bad_arguments(tmp_path: Path) -> None:
    nodes, pods = write_cluster(
        tmp_path, [(8000, 1000, 2, "T4")], [(1000, 10, 1, 1000), (1000, 10, 1, 500), (100, 1, 0, 0)]
    )
    order = np.array([0, 2, 1], dtype=np.int64)
    assert (
        arrived_prefix(pods, order, nodes.total_gpus, 50) == 2
    )  # 1000 of 2000 milli, then a CPU pod
    assert arrived_prefix(pods, order, nodes.total_gpus, 75) == 3
    with pytest.raises(ConfigError, match="time limit"):
        gpu_bound(nodes, pods, order, time_limit=0)
    with pytest.raises(ConfigError, match="out of range"):
        gpu_bound(nodes, pods, np.array([7]))
    with pytest.raises(ConfigError, match="arrived %"):
        arrived_prefix(pods, order, nodes.total_gpus, -1)


def test_fgd_pack_breaks_fgd_ties_toward_the_fuller_node() -> None:
    from gangsched.fragmentation import (
        PodRequest,
        TypicalPods,
        choose_node,
        score_fgd,
        score_fgd_pack,
    )

    # Two 2-GPU nodes with plenty of CPU; node 1 has one device fully used. A CPU-only pod
    # changes neither node's fragment: FGD scores both 50 and takes node 0, FGD-Pack takes the
    # node with less idle GPU left (node 1), which keeps node 0's two free GPUs together.
    typical = TypicalPods(
        cpu_milli=np.array([1000], dtype=np.int64),
        num_gpu=np.array([1], dtype=np.int64),
        gpu_milli=np.array([1000], dtype=np.int64),
        allowed=np.ones((1, 1), dtype=np.bool_),
        prob=np.array([1.0]),
    )
    free_cpu = np.array([64000, 64000], dtype=np.int64)
    gpu_free = np.array([[1000, 1000], [0, 1000]], dtype=np.int64)
    model = np.zeros(2, dtype=np.int64)
    feasible = np.ones(2, dtype=np.bool_)
    cpu_pod = PodRequest(cpu_milli=4000, memory=0, num_gpu=0, gpu_milli=0)
    fgd = score_fgd(feasible, cpu_pod, free_cpu, gpu_free, model, typical)
    assert list(fgd.score) == [50.0, 50.0] and choose_node(fgd) == 0
    pack = score_fgd_pack(feasible, cpu_pod, free_cpu, gpu_free, model, typical)
    assert choose_node(pack) == 1
    # A whole GPU adds no fragment on either node: FGD takes node 0 and splits its free pair,
    # FGD-Pack completes node 1. The integer part of every score is FGD's.
    gpu_pod = PodRequest(cpu_milli=1000, memory=0, num_gpu=1, gpu_milli=1000)
    a = score_fgd(feasible, gpu_pod, free_cpu, gpu_free, model, typical)
    b = score_fgd_pack(feasible, gpu_pod, free_cpu, gpu_free, model, typical)
    assert (choose_node(a), choose_node(b)) == (0, 1)
    assert np.array_equal(np.floor(b.score), a.score)
    # With a typical pod of two GPUs, splitting node 0's pair costs fragment: both avoid it.
    pair = TypicalPods(
        cpu_milli=np.array([1000], dtype=np.int64),
        num_gpu=np.array([2], dtype=np.int64),
        gpu_milli=np.array([1000], dtype=np.int64),
        allowed=np.ones((1, 1), dtype=np.bool_),
        prob=np.array([1.0]),
    )
    a = score_fgd(feasible, gpu_pod, free_cpu, gpu_free, model, pair)
    b = score_fgd_pack(feasible, gpu_pod, free_cpu, gpu_free, model, pair)
    assert a.score[1] > a.score[0] and choose_node(a) == choose_node(b) == 1


def test_reproduced_policies_match_the_authors_on_the_bundled_sample() -> None:
    # Medians over seeds 42-44 of unallocated GPU % at 100 % arrived, default workload, against
    # the authors' medians over the same seeds.
    from gangsched.sim.fgd import discrete_tables
    from gangsched.sim.fgd.compare import read_allo_table

    nodes, pods = load_nodes(), load_pods()
    theirs = read_allo_table(None)
    seeds = (42, 43, 44)
    for policy in ("bestfit", "dotprod", "gpu-packing", "gpu-clustering"):
        ours = [100 - discrete_tables(run_one(nodes, pods, policy, s)).alloc[100] for s in seeds]
        ref = [100 - theirs[POLICY_IDS[policy]][s][100] for s in seeds]
        assert abs(float(np.median(ours)) - float(np.median(ref))) <= 0.35, policy


def test_ties_go_to_the_reference_renamed_node_order(tmp_path: Path) -> None:
    # The reference renames node i (in name order) "%04d-" % perm[i] + name, perm = rand.Perm(n)
    # drawn after tuning, and breaks ties by the smallest name. With CPU-only pods every node
    # ties under GpuPacking, so each pod goes to the feasible node of the smallest perm value.
    from gangsched.sim.fgd import make_source, node_ranks, tuned_order

    nodes, pods = write_cluster(
        tmp_path,
        [(4000, 1000, 1, "T4")] * 6,
        [(3000, 10, 0, 0)] * 4,
    )
    source = make_source("go", 7)
    order = tuned_order(pods, nodes.total_gpus, 0.0, source)
    rank = node_ranks(nodes, source)
    assert sorted(rank.tolist()) == list(range(6))
    run = run_one(nodes, pods, "gpu-packing", 7, tune=0.0)
    assert np.array_equal(run.order, order)
    expected = np.argsort(rank)[:4]  # one 3-core pod per 4-core node, smallest ranks first
    assert run.placement.tolist() == expected.tolist()
    assert expected.tolist() != [0, 1, 2, 3]  # the seed's order is not the file order


def test_node_ranks_follow_go_perm() -> None:
    class Draws:
        def __init__(self) -> None:
            self.asked: list[int] = []

        def intn(self, n: int) -> int:
            self.asked.append(n)
            return n - 1 if n % 2 else 0

    from gangsched.sim.fgd import node_ranks

    nodes = load_nodes()
    src = Draws()
    rank = node_ranks(nodes, src)  # type: ignore[arg-type]
    assert src.asked == list(range(1, len(nodes) + 1))  # Intn(i + 1) for i = 0..n-1
    assert sorted(rank.tolist()) == list(range(len(nodes)))


def test_fgd_compare_bound_prints_the_distance_to_the_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from gangsched.cli import main

    write_cluster(
        tmp_path,
        [(16000, 64000, 2, "T4"), (16000, 64000, 2, "T4"), (32000, 64000, 4, "G2")],
        [(2000, 100, 1, 500), (4000, 100, 1, 1000), (1000, 100, 2, 1000), (500, 100, 0, 0)] * 3
        + [(3000, 100, 1, 300), (8000, 100, 4, 1000)],
    )
    common = ["fgd", "--nodes", str(tmp_path / "nodes.csv"), "--pods", str(tmp_path / "pods.csv")]
    out = tmp_path / "out"
    assert main([*common, "--policy", "bestfit", "--seeds", "42", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main([*common, "compare", str(out), "--bound", "--bound-seeds", "42"]) == 0
    printed = capsys.readouterr().out
    assert "limit at 100% arrived" in printed and "05-BestFit" in printed
    row = [line for line in printed.splitlines() if line.startswith("05-BestFit")][-1]
    ours, to_bound = float(row.split()[1]), float(row.split()[2])
    assert to_bound >= -1e-9  # no policy leaves less unallocated than the bound
    assert ours >= 0
