"""The FGD variants tried against FGD: their choice on hand-built node pairs, whole runs valid."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_quality import write_cluster

from gangsched.fragmentation import PodRequest
from gangsched.fragmentation.measure import NodeScores
from gangsched.io.openb import NodeTable, PodTable
from gangsched.sim.fgd import run_one
from gangsched.sim.fgd.bounds import validate_packing
from gangsched.sim.fgd.engine import StudyArrays, workload_typical
from gangsched.sim.fgd.variants import VARIANTS, make_variant


class _NoDraw:
    def intn(self, n: int) -> int:  # pragma: no cover - the variants draw nothing
        raise AssertionError("no draw expected")


def typical_cluster(
    tmp_path: Path, nodes: list[tuple[int, int, int, str]], pods: list[tuple[int, int, int, int]]
) -> tuple[NodeTable, PodTable, StudyArrays]:
    """The written node and pod tables and the idle cluster arrays with their typical pods."""
    node_table, pod_table = write_cluster(tmp_path, nodes, pods)
    return node_table, pod_table, StudyArrays(node_table, workload_typical(pod_table, node_table))


def variant_scores(
    name: str, nodes: NodeTable, pods: PodTable, arrays: StudyArrays, pod: PodRequest
) -> NodeScores:
    """Variant ``name``'s node scores for ``pod`` on ``arrays`` (the variants draw nothing)."""
    key = (pod.cpu_milli, pod.num_gpu, pod.gpu_milli, 0)
    return make_variant(name, nodes, pods)(arrays, pod, key, arrays.fits(pod, 0), _NoDraw())


def test_fgd_cpu_sends_a_cpu_only_pod_to_the_node_with_cpu_to_spare(tmp_path: Path) -> None:
    # Node 0: 8 cores for 2 idle GPUs; node 1: 32 cores for 2 idle GPUs. The typical GPU pod
    # asks 4 cores per GPU, so node 0 needs all 8 of its cores and node 1 has 24 to spare.
    # FGD scores the 1-core CPU-only pod 50 on both (no typical pod stops fitting); FGD breaks
    # the tie by node order (node 0), fgd-cpu by CPU surplus (node 1).
    nodes, pods, arrays = typical_cluster(
        tmp_path,
        [(8000, 1000, 2, "T4"), (32000, 1000, 2, "T4")],
        [(4000, 10, 1, 1000)] * 3 + [(1000, 10, 0, 0)],
    )
    pod = PodRequest(cpu_milli=1000, memory=10, num_gpu=0, gpu_milli=0)
    fgd = variant_scores("fgd-exact", nodes, pods, arrays, pod)
    cpu = variant_scores("fgd-cpu", nodes, pods, arrays, pod)
    assert fgd.score[0] == fgd.score[1]  # FGD sees no difference
    assert cpu.score[1] > cpu.score[0]
    assert int(np.trunc(cpu.score[0])) == int(np.trunc(cpu.score[1])) == 50  # only a tie term


def test_fgd_exact_keeps_the_fraction_fgd_truncates(tmp_path: Path) -> None:
    nodes, pods, arrays = typical_cluster(
        tmp_path,
        [(8000, 1000, 2, "T4"), (8000, 1000, 1, "T4")],
        [(1000, 10, 1, 600)] * 3 + [(1000, 10, 1, 500)],
    )
    # 500 milli on an idle device leaves 500, too small for the 600 share: the fragment grows
    # by 0.75 * 500 and FGD's 100 * sigmoid(-0.375) = 40.73 is truncated to 40.
    pod = PodRequest(cpu_milli=1000, memory=10, num_gpu=1, gpu_milli=500)
    got = variant_scores("fgd-exact", nodes, pods, arrays, pod)
    assert got.score == pytest.approx([40.73, 40.73], abs=0.01)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_each_variant_places_a_valid_run(variant: str) -> None:
    from gangsched.io.openb import load_nodes, load_pods

    nodes, pods = load_nodes(None), load_pods(None)
    r = run_one(nodes, pods, variant, 42, limit=1500)
    assert r.devices is not None
    assert validate_packing(nodes, pods, r.order, r.placement, r.devices) == []
    assert r.used[-1] > 0 and not r.cpu_overcommit
