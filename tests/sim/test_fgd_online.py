"""The online policy that beats FGD (``fgd-price``): its choice on hand-built node pairs, its
device prices on a tiny workload, the vectorized typical-pod table against FGD's kernel, and the
fast lookahead against ``fgd-look``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_fgd_variants import typical_cluster, variant_scores
from test_quality import write_cluster

from gangsched.errors import ConfigError
from gangsched.fragmentation import PodRequest
from gangsched.fragmentation.policies import fgd_rows
from gangsched.sim.fgd import run_one
from gangsched.sim.fgd.duals import device_duals
from gangsched.sim.fgd.engine import StudyArrays, workload_typical
from gangsched.sim.fgd.online import PRICE, LookParams, TypicalTable, cpu_per_gpu
from gangsched.sim.fgd.variants import make_variant


def test_fgd_price_keeps_cpu_for_the_idle_gpus_of_a_cpu_poor_node(tmp_path: Path) -> None:
    # Node 0: 24 cores for 2 idle GPUs; node 1: 64 cores for 2 idle GPUs. The GPU pods ask 11.5
    # cores per GPU on average, so node 0 is already short of CPU for its GPUs (2 x 1.1 x 11.5 =
    # 25.3 cores). An 8-core CPU-only pod leaves every typical pod fitting on either node: FGD
    # scores both 50 and takes node 0 (the first); fgd-price sees node 0's GPUs lose the CPU
    # they need and takes node 1.
    nodes, pods, arrays = typical_cluster(
        tmp_path,
        [(24000, 1000, 2, "T4"), (64000, 1000, 2, "T4")],
        [(10000, 10, 1, 1000)] * 3 + [(16000, 10, 1, 1000), (8000, 10, 0, 0)],
    )
    assert cpu_per_gpu(pods) == pytest.approx(11500.0)
    pod = PodRequest(cpu_milli=8000, memory=10, num_gpu=0, gpu_milli=0)
    fgd = variant_scores("fgd-exact", nodes, pods, arrays, pod)
    price = variant_scores("fgd-price", nodes, pods, arrays, pod)
    assert fgd.score[0] == fgd.score[1]  # FGD sees no difference
    # node 0 goes from 1.3 to 9.3 cores short: 8 cores, 8 / 12.65 GPUs' worth
    short = 8000 / (1.1 * 11500)
    assert price.score[0] == pytest.approx(50 - PRICE.beta * short)
    assert price.score[1] == 50.0
    assert int(np.argmax(price.score)) == 1


def test_fgd_price_puts_a_share_in_the_hole_an_optimal_pattern_completes(tmp_path: Path) -> None:
    # Shares of 650, 550, 320, 230 and 220 pack perfectly as 650+320 and 550+230+220. Node 0's
    # device holds a 650 (350 free), node 1's a 550 (450 free). A 230 in the 350 hole leaves 120
    # that nothing fills (the 320 it was for has no other home); in the 450 hole it leaves the
    # 220 the pattern needs. fgd-price takes node 1 whatever FGD's fragment says.
    nodes, pods = write_cluster(
        tmp_path,
        [(64000, 1000, 1, "T4"), (64000, 1000, 1, "T4")],
        [(1000, 10, 1, 650), (1000, 10, 1, 320)] * 4
        + [(1000, 10, 1, 550), (1000, 10, 1, 230), (1000, 10, 1, 220)] * 4,
    )
    duals = device_duals(pods, 8)
    assert duals.loss(230)[450] == pytest.approx(0.0)
    assert duals.loss(320)[350] == pytest.approx(0.0)
    assert duals.loss(230)[350] > 50.0
    arrays = StudyArrays(nodes, workload_typical(pods, nodes))
    for node, share in ((0, 650), (1, 550)):
        first = PodRequest(cpu_milli=1000, memory=10, num_gpu=1, gpu_milli=share)
        arrays.place(node, first, (0,))
    pod = PodRequest(cpu_milli=1000, memory=10, num_gpu=1, gpu_milli=230)
    price = variant_scores("fgd-price", nodes, pods, arrays, pod)
    assert int(np.argmax(price.score)) == 1
    assert price.share_gpu[1] == 0


def test_typical_table_matches_fgd_kernel_on_every_typical_pod() -> None:
    from gangsched.io.openb import load_nodes, load_pods

    nodes, pods = load_nodes(None), load_pods(None)
    r = run_one(nodes, pods, "fgd", 42, limit=3000)
    typ = workload_typical(pods, nodes)
    arrays = StudyArrays(nodes, typ)
    assert r.devices is not None
    for step, node in enumerate(r.placement.tolist()):
        if node < 0:
            continue
        p = int(r.order[step])
        req = PodRequest(
            cpu_milli=int(pods.cpu_milli[p]),
            memory=int(pods.memory_mib[p]),
            num_gpu=int(pods.num_gpu[p]),
            gpu_milli=int(pods.gpu_milli[p]),
        )
        devs = tuple(d for d in range(8) if int(r.devices[step]) >> d & 1)
        arrays.place(node, req, devs)
    table = TypicalTable(typ)
    some = np.arange(0, len(nodes), 7)
    keys = [
        (int(arrays.free_cpu[i]), int(arrays.model_idx[i]), *arrays.gpu_free[i].tolist())
        for i in some
    ]
    got = table.values(keys)
    for m in range(len(typ)):
        req = PodRequest(
            cpu_milli=int(typ.cpu_milli[m]),
            memory=0,
            num_gpu=int(typ.num_gpu[m]),
            gpu_milli=int(typ.gpu_milli[m]),
        )
        fits = arrays.fits(req, -1 - m)[some] & typ.allowed[m][arrays.model_idx[some]]
        want, _ = fgd_rows(
            some,
            req,
            arrays.free_cpu,
            arrays.gpu_free,
            arrays.model_idx,
            typ,
            arrays.terms,
            arrays.frag,
        )
        np.testing.assert_array_equal(got[:, m], np.where(fits, want, -np.inf))


def test_fgd_look_places_as_its_unvectorized_form_did() -> None:
    # Digest of the first 1500 placements and devices of seed 42 under fgd-look when it looped
    # over tied nodes and typical pods in Python (33 s a full run; the vectorized one is 5 s).
    import hashlib

    from gangsched.io.openb import load_nodes, load_pods
    from gangsched.sim.fgd import make_source, node_ranks, tuned_order
    from gangsched.sim.fgd.engine import place_sequence

    nodes, pods = load_nodes(None), load_pods(None)
    src = make_source("go", 42)
    order = tuned_order(pods, nodes.total_gpus, 1.3, src)[:1500]
    rank = node_ranks(nodes, src)
    typ = workload_typical(pods, nodes)
    r = place_sequence(nodes, pods, make_variant("fgd-look", nodes, pods), order, rank, src, typ)
    digest = hashlib.sha256(r.placement.tobytes() + r.devices.tobytes()).hexdigest()
    assert (r.failed, int(r.used[-1])) == (0, 1143520)
    assert digest == "c7db056b5610cbb7b980d23b5ade8cfa4adca15f6de5d1881e5695ef5a98b079"


def test_lookahead_knobs_out_of_range_are_a_config_error() -> None:
    with pytest.raises(ConfigError, match="knobs"):
        LookParams(beta=-1.0)
    with pytest.raises(ConfigError, match="knobs"):
        LookParams(limit=-2)


def test_fgd_default_grid_runs_fgd_price_beside_the_paper_six(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from test_cli_fgd import small_pods

    from gangsched.cli import main

    out = tmp_path / "out"
    args = ["fgd", "--pods", str(small_pods(tmp_path)), "--seeds", "42", "--limit", "150"]
    assert main([*args, "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["fgd", "compare", str(out)]) == 0
    table = capsys.readouterr().out
    policies = [line.split()[0] for line in table.splitlines() if line[:2].isdigit()]
    assert policies == [
        "01-Random",
        "02-DotProd",
        "03-GpuClustering",
        "04-GpuPacking",
        "05-BestFit",
        "06-FGD",
        "13-FGD-Price",
    ]
