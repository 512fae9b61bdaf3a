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


def _partly_used(arrays: object) -> None:
    """Place a mix of shared, whole-device and CPU-only pods on the first nodes that fit, so
    devices sit at several frees (half used among them)."""
    from gangsched.fragmentation import PodRequest
    from gangsched.fragmentation.measure import best_fit_device, device_indices
    from gangsched.sim.fgd.engine import StudyArrays

    assert isinstance(arrays, StudyArrays)
    shapes = [
        PodRequest(cpu_milli=1000, memory=100, num_gpu=1, gpu_milli=500),
        PodRequest(cpu_milli=1000, memory=100, num_gpu=1, gpu_milli=300),
        PodRequest(cpu_milli=2000, memory=100, num_gpu=2, gpu_milli=1000),
        PodRequest(cpu_milli=500, memory=100, num_gpu=0, gpu_milli=0),
    ]
    for i in range(400):
        pod = shapes[i % len(shapes)]
        fit = np.flatnonzero(arrays.fits(pod, -1))
        node = int(fit[(i * 7919) % fit.size])  # spread over the nodes that fit
        share = best_fit_device(arrays.gpu_free[node].tolist(), pod)
        arrays.place(node, pod, device_indices(arrays.gpu_free[node], pod, share))


def test_the_engines_fit_is_the_rules_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine's fit over its kept counts (fully free devices, the roomiest device) is the
    rule's ``fit_mask`` over the device table — with the real rule and with a mutant whose
    least take is 600 milli-GPU (a copy of the old comparison would keep the real answers)."""
    from dataclasses import replace

    from gangsched._codegen import define
    from gangsched.fragmentation import PodRequest, fit_mask
    from gangsched.session.fit_rule import RULE, study_fit_source
    from gangsched.sim.fgd import engine as fgd_engine

    nodes, pods = load_nodes(None), load_pods(None)
    arrays = fgd_engine.StudyArrays(nodes, workload_typical(pods, nodes))
    _partly_used(arrays)
    asked = [
        PodRequest(cpu_milli=4000, memory=1000, num_gpu=1, gpu_milli=500),
        PodRequest(cpu_milli=4000, memory=1000, num_gpu=1, gpu_milli=1000),
        PodRequest(cpu_milli=4000, memory=1000, num_gpu=4, gpu_milli=1000),
        PodRequest(cpu_milli=64000, memory=1000, num_gpu=0, gpu_milli=0),
    ]

    def answers(study_fit: object) -> list[list[bool]]:
        got = []
        for pod in asked:
            kept = arrays.fits(pod, -1).tolist()
            table = study_fit(  # type: ignore[operator]
                arrays.free_cpu, arrays.free_mem, arrays.gpu_free, arrays.model_idx, pod
            )
            assert kept == table.tolist()
            got.append(kept)
        return got

    real = answers(fit_mask)
    assert any(any(r) for r in real) and not all(all(r) for r in real)
    mutant = define(study_fit_source(replace(RULE, least_take=600)), {"np": np}, "engine test")
    monkeypatch.setattr(fgd_engine, "fit_rooms", mutant["fit_rooms"])
    monkeypatch.setattr(fgd_engine, "room_mask", mutant["room_mask"])
    monkeypatch.setattr(fgd_engine, "enough_rooms", mutant["enough_rooms"])
    assert answers(mutant["fit_mask"]) != real
