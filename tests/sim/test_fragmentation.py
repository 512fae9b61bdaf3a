"""Fragmentation measure and the six policies' kernels, checked on hand-worked nodes."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gangsched.errors import ConfigError, PlacementError
from gangsched.fragmentation import (
    ClusterView,
    PodRequest,
    TypicalPods,
    choose_node,
    cluster_fragment,
    device_indices,
    fit_mask,
    fragment_terms,
    node_fragment,
    score_bestfit,
    score_dotprod,
    score_fgd,
    score_gpu_clustering,
    score_gpu_packing,
    score_nodes,
    score_random,
    typical_pods,
)

I64 = npt.NDArray[np.int64]


def arr(values: object) -> I64:
    return np.asarray(values, dtype=np.int64)


def three_typical(n_models: int = 1) -> TypicalPods:
    # m1: CPU-only, 1 core, p = 0.5; m2: one GPU x 500, 2 cores, p = 0.3;
    # m3: two whole GPUs, 4 cores, p = 0.2. Every model allowed.
    return TypicalPods(
        cpu_milli=arr([1000, 2000, 4000]),
        num_gpu=arr([0, 1, 2]),
        gpu_milli=arr([0, 500, 1000]),
        allowed=np.ones((3, n_models), dtype=np.bool_),
        prob=np.asarray([0.5, 0.3, 0.2]),
    )


def test_node_fragment_by_hand() -> None:
    typical = three_typical()
    free_cpu = arr([8000, 1000])
    gpu_free = arr([[1000, 300, 600, 0], [1000, 1000, 0, 0]])
    model = arr([0, 0])
    frag = node_fragment(free_cpu, gpu_free, model, typical)
    # Node A: idle = 1000 + 300 + 600 = 1900.
    #   m1 (no GPU): all idle counts, 0.5 * 1900 = 950.
    #   m2: devices >= 500 are 1000 and 600 (2 >= 1) and 8000 >= 2000 cores: satisfied; only the
    #       devices below 500 are fragment (300 + padded 0): 0.3 * 300 = 90.
    #   m3: one device >= 1000, needs two: lacks GPU, all idle: 0.2 * 1900 = 380.
    #   F_A = 950 + 90 + 380 = 1420.
    # Node B: idle = 2000, 1 core free.
    #   m1: 0.5 * 2000 = 1000; m2 fits the GPUs but lacks CPU: 0.3 * 2000 = 600;
    #   m3 fits the GPUs, lacks CPU: 0.2 * 2000 = 400. F_B = 2000.
    assert frag.tolist() == pytest.approx([1420.0, 2000.0])
    total, idle, ratio = cluster_fragment(free_cpu, gpu_free, model, typical)
    assert total == pytest.approx(3420.0)
    assert idle == 3900
    assert ratio == pytest.approx(100 * 3420 / 3900)


def test_no_access_counts_all_idle() -> None:
    typical = TypicalPods(
        cpu_milli=arr([0]),
        num_gpu=arr([1]),
        gpu_milli=arr([500]),
        allowed=np.asarray([[True, False]]),
        prob=np.asarray([1.0]),
    )
    gpu_free = arr([[1000, 200], [1000, 200]])
    frag = node_fragment(arr([10, 10]), gpu_free, arr([0, 1]), typical)
    # model 0: the pod fits, only the 200 device is fragment; model 1: no access, all 1200.
    assert frag.tolist() == [200.0, 1200.0]
    _, idle, _ = cluster_fragment(arr([10]), arr([[0, 0]]), arr([0]), typical)
    assert idle == 0
    assert math.isnan(cluster_fragment(arr([10]), arr([[0, 0]]), arr([0]), typical)[2])


def test_typical_pods_threshold_and_ties() -> None:
    # shapes: A (1 core, CPU-only) x5, B (2 cores, 1 GPU) x3, C (3 cores) x1, D (4 cores) x1.
    cpu = arr([1000] * 5 + [2000] * 3 + [3000, 4000])
    num = arr([0] * 5 + [1] * 3 + [0, 0])
    milli = arr([0] * 5 + [1000] * 3 + [0, 0])
    spec = arr([0] * 10)
    allowed = np.ones((1, 2), dtype=np.bool_)
    t80 = typical_pods(cpu, num, milli, spec, allowed, threshold_pct=80)
    # 80 % of 10 pods = 8: A (5) + B (3) reach it; renormalized 5/8, 3/8.
    assert t80.cpu_milli.tolist() == [1000, 2000]
    assert t80.prob.tolist() == pytest.approx([5 / 8, 3 / 8])
    t90 = typical_pods(cpu, num, milli, spec, allowed, threshold_pct=90)
    # 9 needed: a third shape; C and D tie at one pod, the larger CPU (D) ranks first.
    assert t90.cpu_milli.tolist() == [1000, 2000, 4000]
    assert t90.prob.sum() == pytest.approx(1.0)
    with pytest.raises(ConfigError):
        typical_pods(cpu, num, milli, spec, allowed, threshold_pct=0)


# A hand-built pair: node 0 is big and idle, node 1 is small and partly used.
FREE_CPU = arr([32000, 8000])
FREE_MEM = arr([1 << 20, 1 << 16])
MODEL = arr([0, 0])
COUNT = arr([8, 2])


def test_bestfit_and_dotprod_by_hand() -> None:
    gpu_free = arr([[1000] * 8, [1000, 1000, 0, 0, 0, 0, 0, 0]])
    pod = PodRequest(cpu_milli=4000, memory=1, num_gpu=1, gpu_milli=1000)
    feas = fit_mask(FREE_CPU, FREE_MEM, gpu_free, MODEL, pod)
    assert feas.tolist() == [True, True]
    bf = score_bestfit(feas, pod, FREE_CPU, gpu_free)
    # node 0: 1 - (28000/128000 * 0.5 + 7000/8000 * 0.5) = 1 - (0.109375 + 0.4375) -> 45
    # node 1: 1 - (4000/128000 * 0.5 + 1000/8000 * 0.5) = 1 - (0.015625 + 0.0625) -> 92
    assert bf.score.tolist() == [45.0, 92.0]
    dp = score_dotprod(feas, pod, FREE_CPU, gpu_free)
    # node 0: (0.25 * 0.03125 + 1.0 * 0.125) / 2 = 0.06640625 -> 100 * 0.93359375 -> 93
    # node 1: (0.0625 * 0.03125 + 0.25 * 0.125) / 2 = 0.0166015625 -> 98.33... -> 98
    assert dp.score.tolist() == [93.0, 98.0]
    assert choose_node(bf) == 1 and choose_node(dp) == 1
    assert device_indices(gpu_free[1], pod, -1) == (0,)


def test_packing_and_clustering_by_hand() -> None:
    gpu_free = arr([[1000] * 8, [400, 700, 0, 0, 0, 0, 0, 0]])
    share = PodRequest(cpu_milli=1000, memory=1, num_gpu=1, gpu_milli=500)
    feas = fit_mask(FREE_CPU, FREE_MEM, gpu_free, MODEL, share)
    pk = score_gpu_packing(feas, share, gpu_free, COUNT)
    # node 0 idle: max(33 - 8, 8) = 25. node 1: tightest device with room is 700 (index 1),
    # partly used: 100 - (700 * 100 // 1000) // 10 = 100 - 7 = 93.
    assert pk.score.tolist() == [25.0, 93.0]
    assert pk.share_gpu[1] == 1
    whole = PodRequest(cpu_milli=1000, memory=1, num_gpu=2, gpu_milli=1000)
    gpu_free2 = arr([[1000] * 8, [1000, 1000, 1000, 300, 0, 0, 0, 0]])
    count2 = arr([8, 4])
    feas2 = fit_mask(FREE_CPU, FREE_MEM, gpu_free2, MODEL, whole)
    # node 1 is used (one device partly taken): 50 - 2 fully free devices used = 48.
    assert score_gpu_packing(feas2, whole, gpu_free2, count2).score.tolist() == [25.0, 48.0]

    affinity = np.zeros((2, 9), dtype=np.int64)
    affinity[0, 0] = 2  # node 0 hosts two shared-GPU pods (yet shows all devices free here)
    affinity[1, 1] = 1  # node 1 hosts one whole-GPU pod
    cl = score_gpu_clustering(feas, share, gpu_free, affinity)
    # node 0: same shape only: 25 * (8000 - 8000) // 8000 + 75 = 75.
    # node 1: other shape only: 25 * (8000 - 1100) // 8000 + 0 = 21.
    assert cl.score.tolist() == [75.0, 21.0]
    cpu_pod = PodRequest(cpu_milli=1000, memory=1, num_gpu=0, gpu_milli=0)
    cl0 = score_gpu_clustering(np.asarray([True, True]), cpu_pod, gpu_free, affinity)
    assert cl0.score.tolist() == [0.0, 0.0] and choose_node(cl0) == 0


def test_fgd_prefers_the_device_that_keeps_room() -> None:
    # One typical pod: one GPU x 500, no CPU, p = 1.
    typical = TypicalPods(
        cpu_milli=arr([0]),
        num_gpu=arr([1]),
        gpu_milli=arr([500]),
        allowed=np.ones((1, 1), dtype=np.bool_),
        prob=np.asarray([1.0]),
    )
    gpu_free = arr([[600, 1000]])
    pod = PodRequest(cpu_milli=0, memory=0, num_gpu=1, gpu_milli=500)
    feas = np.asarray([True])
    res = score_fgd(feas, pod, arr([100]), gpu_free, arr([0]), typical)
    # F before: both devices >= 500, F = 0. On device 0: [100, 1000], F' = 100, score
    # trunc(100 * sigmoid(-0.1)) = trunc(47.50) = 47. On device 1: [600, 500], F' = 0, score 50.
    assert res.score.tolist() == [50.0]
    assert res.share_gpu.tolist() == [1]
    # Best fit would have taken the tighter device 0.
    assert score_bestfit(feas, pod, arr([100]), gpu_free).share_gpu.tolist() == [0]


class Scripted:
    def __init__(self, values: list[int]) -> None:
        self.values = list(values)
        self.calls: list[int] = []

    def intn(self, n: int) -> int:
        self.calls.append(n)
        return self.values.pop(0) % n


def test_random_draws_node_then_device() -> None:
    gpu_free = arr([[1000, 200, 800], [900, 900, 900], [1000, 1000, 1000]])
    feas = np.asarray([True, False, True])
    pod = PodRequest(cpu_milli=0, memory=0, num_gpu=1, gpu_milli=700)
    rng = Scripted([1, 0, 1, 0])
    res = score_random(feas, pod, gpu_free, rng)
    # feasible nodes [0, 2]: draw 1 -> node 2; devices with room on node 2: 0, 1, 2, drawn with
    # intn(1), intn(2), intn(3); a device replaces the choice when its draw is 0: 0, then 2.
    assert choose_node(res) == 2
    assert rng.calls == [2, 1, 2, 3]
    assert res.share_gpu[2] == 2
    one = Scripted([])
    res1 = score_random(
        np.asarray([False, True, False]),
        PodRequest(cpu_milli=0, memory=0, num_gpu=0, gpu_milli=0),
        gpu_free,
        one,
    )
    assert choose_node(res1) == 1 and one.calls == []


def test_fit_mask_models_memory_and_errors() -> None:
    gpu_free = arr([[1000, 1000], [1000, 1000]])
    pod = PodRequest(
        cpu_milli=1, memory=100, num_gpu=2, gpu_milli=1000, allowed_models=np.asarray([False, True])
    )
    mask = fit_mask(arr([10, 10]), arr([1000, 50]), gpu_free, arr([1, 1]), pod)
    assert mask.tolist() == [True, False]
    mask = fit_mask(arr([10, 10]), arr([1000, 1000]), gpu_free, arr([0, 1]), pod)
    assert mask.tolist() == [False, True]
    with pytest.raises(PlacementError):
        PodRequest(cpu_milli=1, memory=1, num_gpu=2, gpu_milli=500)
    with pytest.raises(PlacementError):
        device_indices(arr([1000, 0]), pod, -1)
    view = ClusterView(
        free_cpu=arr([1]),
        free_mem=arr([1]),
        gpu_free=arr([[0]]),
        gpu_count=arr([1]),
        model_idx=arr([0]),
        affinity=np.zeros((1, 9), dtype=np.int64),
    )
    with pytest.raises(ConfigError):
        score_nodes("nope", view, pod)
    with pytest.raises(ConfigError):
        score_nodes("random", view, pod)


def brute_fragment(cpu: int, gpus: list[int], model: int, t: TypicalPods) -> float:
    idle = sum(gpus)
    total = 0.0
    for m in range(len(t)):
        if t.num_gpu[m] == 0 or not t.allowed[m, model]:
            total += t.prob[m] * idle
            continue
        fits = sum(1 for g in gpus if g >= t.gpu_milli[m]) >= t.num_gpu[m]
        if fits and cpu >= t.cpu_milli[m]:
            total += t.prob[m] * sum(g for g in gpus if g < t.gpu_milli[m])
        else:
            total += t.prob[m] * idle
    return total


gpu_values = st.sampled_from([0, 100, 250, 400, 500, 750, 1000])
nodes_strategy = st.lists(
    st.tuples(
        st.integers(0, 16000), st.lists(gpu_values, min_size=4, max_size=4), st.integers(0, 1)
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=60, deadline=None)
@given(
    nodes=nodes_strategy,
    pod_shape=st.sampled_from([(0, 0), (1, 300), (1, 500), (1, 1000), (2, 1000)]),
    pod_cpu=st.integers(0, 4000),
)
def test_kernels_match_brute_force(
    nodes: list[tuple[int, list[int], int]], pod_shape: tuple[int, int], pod_cpu: int
) -> None:
    typical = TypicalPods(
        cpu_milli=arr([1000, 2000, 4000, 500]),
        num_gpu=arr([0, 1, 2, 1]),
        gpu_milli=arr([0, 500, 1000, 250]),
        allowed=np.asarray([[True, True], [True, True], [True, True], [True, False]]),
        prob=np.asarray([0.25, 0.35, 0.25, 0.15]),
    )
    free_cpu = arr([n[0] for n in nodes])
    gpu_free = arr([n[1] for n in nodes])
    model = arr([n[2] for n in nodes])
    frag = node_fragment(free_cpu, gpu_free, model, typical)
    expected = [brute_fragment(c, g, m, typical) for c, g, m in nodes]
    assert frag.tolist() == pytest.approx(expected)
    assert bool((frag <= gpu_free.sum(axis=1) + 1e-9).all())

    pod = PodRequest(cpu_milli=pod_cpu, memory=0, num_gpu=pod_shape[0], gpu_milli=pod_shape[1])
    feas = fit_mask(free_cpu, arr([0] * len(nodes)), gpu_free, model, pod)
    res = score_fgd(
        feas, pod, free_cpu, gpu_free, model, typical, terms=fragment_terms(gpu_free, typical)
    )
    for i, (c, g, m) in enumerate(nodes):
        if not feas[i]:
            assert res.score[i] == -np.inf
            continue
        devs = device_indices(gpu_free[i], pod, int(res.share_gpu[i]))
        after = list(g)
        for d in devs:
            after[d] -= pod.gpu_milli
        delta = brute_fragment(c, g, m, typical) - brute_fragment(c - pod_cpu, after, m, typical)
        assert res.score[i] == math.trunc(100 / (1 + math.exp(-delta / 1000)))
        if pod.is_shared:  # the chosen device is the best one
            for best in np.flatnonzero(gpu_free[i] >= pod.gpu_milli):
                other = list(g)
                other[best] -= pod.gpu_milli
                alt = brute_fragment(c, g, m, typical) - brute_fragment(
                    c - pod_cpu, other, m, typical
                )
                assert math.trunc(100 / (1 + math.exp(-alt / 1000))) <= res.score[i]


def test_the_measure_counts_room_for_a_typical_pod_as_the_rule_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A device counts as holding a typical pod's take exactly where the fit rule's room_mask
    says it does — also under a mutant rule whose least take is 600 milli-GPU (a measure
    comparing the take with the room by hand would keep the real counts)."""
    from dataclasses import replace

    from gangsched._codegen import define
    from gangsched.fragmentation import measure
    from gangsched.session.fit_rule import RULE, study_fit_source

    typical = measure.TypicalPods(
        cpu_milli=arr([1000, 2000, 4000]),
        num_gpu=arr([1, 1, 2]),
        gpu_milli=arr([250, 500, 1000]),
        allowed=np.ones((3, 1), dtype=np.bool_),
        prob=np.array([0.5, 0.3, 0.2]),
    )
    gpu_free = arr([[1000, 700, 300, 0], [250, 249, 1000, 1000], [500, 600, 0, 0]])

    def counts() -> list[list[int]]:
        terms = measure.fragment_terms(gpu_free, typical)
        for j, take in enumerate(typical.gpu_milli.tolist()):
            by_rule = measure.room_mask(gpu_free, take).sum(axis=1)
            assert terms.fits_count[:, j].tolist() == by_rule.tolist()
            small = np.where(measure.room_mask(gpu_free, take), 0, gpu_free).sum(axis=1)
            assert terms.small_sum[:, j].tolist() == small.tolist()
        return [list(map(int, row)) for row in terms.fits_count]

    real = counts()
    mutant = define(study_fit_source(replace(RULE, least_take=600)), {"np": np}, "measure test")
    monkeypatch.setattr(measure, "room_mask", mutant["room_mask"])
    monkeypatch.setattr(measure, "typical_rooms", mutant["typical_rooms"])
    assert counts() != real
