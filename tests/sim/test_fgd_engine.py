"""The incremental placement loop gives the kernels' placements, devices and records exactly."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from gangsched.fragmentation import PAPER_POLICIES
from gangsched.io.openb import load_nodes, load_pods
from gangsched.sim.fgd import make_source, node_ranks, run_one, tuned_order
from gangsched.sim.fgd.engine import Placed, _kernel_scorer, place_sequence, workload_typical

#: Digests of seed 42's full run on the default workload (placement, devices, used, idle; and
#: the fragment record) as the whole-cluster kernels gave them before the incremental loop.
GOLDEN = {
    "random": ("8c4be34235144361", "026d481ba02d4f79"),
    "dotprod": ("eddf9eb74890c126", "ffd4f5c8f26220b0"),
    "gpu-clustering": ("e12803efbef560f7", "0b7afa6f865d236d"),
    "gpu-packing": ("00b69f2acdd01db2", "1e6eb10948d3a9b7"),
    "bestfit": ("4959735b71fefc61", "263471e9e185d186"),
    "fgd": ("841ab542f49a2563", "63f835c4587fc5dc"),
    "fgd-pack": ("06663f56438e5eac", "685c25ce7000d7fa"),
}


def _digest(*arrays: np.ndarray) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]


@pytest.mark.parametrize("policy", sorted(GOLDEN))
def test_incremental_run_keeps_the_kernel_runs_placements(policy: str) -> None:
    r = run_one(load_nodes(None), load_pods(None), policy, 42)
    assert r.devices is not None
    got = (_digest(r.placement, r.devices, r.used, r.idle), _digest(r.frag))
    assert got == GOLDEN[policy]


def _both(policy: str, workload: str | None, seed: int, limit: int) -> tuple[Placed, Placed]:
    nodes = load_nodes(None)
    pods = load_pods(workload)
    out = []
    for fast in (True, False):
        src = make_source("go", seed)
        order = tuned_order(pods, nodes.total_gpus, 1.3, src)[:limit]
        rank = node_ranks(nodes, src)
        scorer = policy if fast else _kernel_scorer(policy)
        out.append(
            place_sequence(nodes, pods, scorer, order, rank, src, workload_typical(pods, nodes))
        )
    return out[0], out[1]


@pytest.mark.parametrize("policy", PAPER_POLICIES)
def test_fast_scorers_equal_the_kernels_on_another_seed(policy: str) -> None:
    fast, slow = _both(policy, None, 44, 2500)
    for name in ("placement", "devices", "used", "idle", "frag", "arrived"):
        assert np.array_equal(getattr(fast, name), getattr(slow, name)), name
    assert fast.failed == slow.failed


def test_fgd_cache_scores_each_shape_state_pair_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from gangsched.fragmentation import PodRequest
    from gangsched.sim.fgd import engine as fgd_engine

    nodes, pods = load_nodes(None), load_pods(None)
    arrays = fgd_engine.StudyArrays(nodes, workload_typical(pods, nodes))
    rows_asked: list[int] = []
    real = fgd_engine.fgd_rows  # type: ignore[attr-defined]

    def counting(rows, *args, **kwargs):  # type: ignore[no-untyped-def]
        rows_asked.append(len(rows))
        return real(rows, *args, **kwargs)

    monkeypatch.setattr(fgd_engine, "fgd_rows", counting)
    cache = fgd_engine._FgdCache()
    pod = PodRequest(cpu_milli=4000, memory=0, num_gpu=1, gpu_milli=500)
    key = (4000, 1, 500, 0)
    first, _ = cache.scores(arrays, pod, key)
    assert rows_asked == [arrays.n_states]  # one node per distinct state, not one per node
    assert arrays.n_states < arrays.n // 10
    arrays.place(0, pod, (0,))
    second, _ = cache.scores(arrays, pod, key)
    assert rows_asked == [arrays.n_states - 1, 1]  # only node 0's new state is scored
    assert np.array_equal(first[1:], second[1:])
