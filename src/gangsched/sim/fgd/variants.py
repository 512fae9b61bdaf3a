"""Attempts to beat FGD under the study's online protocol (one pod at a time, never moved).

Theory of operation
-------------------
Each variant is FGD (:mod:`gangsched.sim.fgd.engine`'s cached scores) with one change. None is
a paper policy; each is measured in ``docs/fgd.md`` against gangsched's FGD on the same seeds.

``fgd-cpu``
    CPU-aware ties. FGD's integer scores tie often (a CPU-only pod scores 50 on most nodes) and
    the renamed-node order decides. Here, among equal FGD scores, the pod goes to the node with
    the largest *CPU surplus* left: free CPU minus the CPU its idle GPU will need, at the
    typical GPU pods' CPU per GPU. A node that keeps GPUs but not the CPU to use them is what
    strands GPU; this steers CPU away from such nodes.
``fgd-exact``
    The score before truncation: ``100 * sigmoid(delta / 1000)`` without the ``trunc``, so the
    smallest fragment growth wins outright instead of tying with every node within one point.
``fgd-future``
    Fragmentation against the pods still to come. Every ``REFRESH`` pods the typical pods are
    re-derived from the workload's shapes minus those already seen (the study's first pass
    through the workload is a permutation of it; when fewer than 5 % of it remain, the whole
    workload's shapes again, as the tuning clones are drawn from it), and every node's fragment
    is recomputed against them.
``fgd-gpuw``
    The typical pods weighted by their GPU request (count x milli-GPU) rather than their pod
    count, CPU-only shapes dropped: fragment is weighed by the GPU it would cost.
``fgd-look``
    A two-step lookahead among FGD's ties: of the first ``LOOK_K`` tied nodes in tie order, the
    one after which the expected best FGD score of the next pod (over the typical pods: on this
    node once the pod is there, or on the best other node) is highest; equal values keep FGD's
    tie order (:func:`gangsched.sim.fgd.online.lookahead_scorer`, vectorized).
``fgd-price``
    FGD's score less three prices (:mod:`gangsched.sim.fgd.online`): the device hole a share
    spoils (a cutting-stock LP's duals), the GPUs a node leaves short of CPU, the GPUs of a
    model that model-bound pods need.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from gangsched.fragmentation import (
    MILLI,
    FragTerms,
    IntSource,
    NodeScores,
    PodRequest,
    TypicalPods,
    fragment_terms,
    node_fragment_from_terms,
    typical_pods,
)
from gangsched.io.openb import NodeTable, PodTable
from gangsched.sim.fgd.engine import FastScorer, StudyArrays, _FgdCache, workload_typical
from gangsched.sim.fgd.online import PRICE, LookParams, lookahead_scorer

__all__ = ["REFRESH", "VARIANTS", "gpu_weighted", "make_variant"]

B = npt.NDArray[np.bool_]

#: Millicores of CPU surplus (either sign) over which ``fgd-cpu``'s tie term ranges.
CPU_SPAN = 128_000
#: Whether ``fgd-cpu``'s tie rule applies to GPU pods too (measured worse; off).
ALL_PODS = False
#: Most tied nodes the lookahead (``fgd-look``) compares.
LOOK_K = 4
#: ``fgd-look``: the lookahead of :mod:`gangsched.sim.fgd.online` among FGD's first ties only.
LOOK = LookParams(limit=LOOK_K)
#: Pods between two re-derivations of the typical pods (``fgd-future``).
REFRESH = 256


def _cpu_ties(nodes: NodeTable, pods: PodTable) -> FastScorer:
    cache = _FgdCache()
    typ = workload_typical(pods, nodes)
    gpu_pods = typ.num_gpu > 0
    # CPU a typical GPU pod brings per whole GPU it asks for (millicores per 1000 milli-GPU)
    per_gpu = float(
        (typ.prob * typ.cpu_milli)[gpu_pods].sum()
        / max(float((typ.prob * typ.num_gpu * typ.gpu_milli)[gpu_pods].sum()) / MILLI, 1e-9)
    )

    def run(
        c: StudyArrays, pod: PodRequest, key: tuple[int, int, int, int], f: B, rng: IntSource
    ) -> NodeScores:
        vals, share = cache.scores(c, pod, key)
        score = np.where(f, vals, -np.inf)
        if pod.num_gpu > 0 and not ALL_PODS:
            return NodeScores(score, share)
        # CPU left beyond what the node's idle GPU will need: the most surplus wins a tie
        idle_after = c.idle - pod.total_gpu_milli
        surplus = (c.free_cpu - pod.cpu_milli) - idle_after / MILLI * per_gpu
        tie = 0.999 * (np.clip(surplus, -CPU_SPAN, CPU_SPAN) + CPU_SPAN) / (2 * CPU_SPAN + 1)
        return NodeScores(np.where(f, score + tie, score), share)

    return run


def _exact(nodes: NodeTable, pods: PodTable) -> FastScorer:
    cache = _FgdCache(exact=True)

    def run(
        c: StudyArrays, pod: PodRequest, key: tuple[int, int, int, int], f: B, rng: IntSource
    ) -> NodeScores:
        vals, share = cache.scores(c, pod, key)
        return NodeScores(np.where(f, vals, -np.inf), share)

    return run


def _remaining_typical(
    pods: PodTable, nodes: NodeTable, seen: dict[tuple[int, int, int, int], int]
) -> TypicalPods:
    keys = list(
        zip(
            pods.cpu_milli.tolist(),
            pods.num_gpu.tolist(),
            pods.gpu_milli.tolist(),
            pods.spec_idx.tolist(),
            strict=True,
        )
    )
    left: dict[tuple[int, int, int, int], int] = {}
    for k in keys:
        left[k] = left.get(k, 0) + 1
    for k, n in seen.items():
        if k in left:
            left[k] = max(0, left[k] - n)
    total = sum(left.values())
    if total < 0.05 * len(keys):
        left = {}
        for k in keys:
            left[k] = left.get(k, 0) + 1
    shapes = sorted(k for k, n in left.items() if n > 0)
    counts = np.array([left[k] for k in shapes], dtype=np.int64)
    arr = np.repeat(np.array(shapes, dtype=np.int64).reshape(-1, 4), counts, axis=0)
    return typical_pods(arr[:, 0], arr[:, 1], arr[:, 2], arr[:, 3], pods.spec_allowed(nodes.models))


def _retarget(c: StudyArrays, typical: TypicalPods) -> None:
    terms = fragment_terms(c.gpu_free, typical)
    c.typical = typical
    c.terms = FragTerms(fits_count=terms.fits_count, small_sum=terms.small_sum, idle=c.idle)
    c.frag[:] = node_fragment_from_terms(c.free_cpu, c.model_idx, c.terms, typical)
    c._tm_col = typical.gpu_milli[:, None]
    n_models = c._access.shape[0]
    c._access = typical.access(np.arange(n_models, dtype=np.int64))


def _future(nodes: NodeTable, pods: PodTable) -> FastScorer:
    state = {"cache": _FgdCache(), "calls": 0}
    seen: dict[tuple[int, int, int, int], int] = {}

    def run(
        c: StudyArrays, pod: PodRequest, key: tuple[int, int, int, int], f: B, rng: IntSource
    ) -> NodeScores:
        calls = int(state["calls"])  # type: ignore[call-overload]
        if calls and calls % REFRESH == 0:
            _retarget(c, _remaining_typical(pods, nodes, seen))
            state["cache"] = _FgdCache()
        state["calls"] = calls + 1
        seen[key] = seen.get(key, 0) + 1
        cache = state["cache"]
        assert isinstance(cache, _FgdCache)
        vals, share = cache.scores(c, pod, key)
        return NodeScores(np.where(f, vals, -np.inf), share)

    return run


def gpu_weighted(typical: TypicalPods) -> TypicalPods:
    """``typical`` with each shape weighted by its GPU request (count x milli-GPU) instead of its
    pod count; CPU-only shapes drop out."""
    w = typical.prob * typical.num_gpu * typical.gpu_milli
    keep = w > 0
    return TypicalPods(
        cpu_milli=typical.cpu_milli[keep],
        num_gpu=typical.num_gpu[keep],
        gpu_milli=typical.gpu_milli[keep],
        allowed=typical.allowed[keep],
        prob=w[keep] / w[keep].sum(),
    )


def _gpu_weight(nodes: NodeTable, pods: PodTable) -> FastScorer:
    target = gpu_weighted(workload_typical(pods, nodes))
    state: dict[str, _FgdCache] = {}

    def run(
        c: StudyArrays, pod: PodRequest, key: tuple[int, int, int, int], f: B, rng: IntSource
    ) -> NodeScores:
        cache = state.get("cache")
        if cache is None:
            _retarget(c, target)
            cache = state["cache"] = _FgdCache()
        vals, share = cache.scores(c, pod, key)
        return NodeScores(np.where(f, vals, -np.inf), share)

    return run


#: The variants by name: each builds a fresh scorer for one run from the workload.
VARIANTS: dict[str, Callable[[NodeTable, PodTable], FastScorer]] = {
    "fgd-cpu": _cpu_ties,
    "fgd-exact": _exact,
    "fgd-future": _future,
    "fgd-gpuw": _gpu_weight,
    "fgd-look": lambda nodes, pods: lookahead_scorer(nodes, pods, LOOK),
    "fgd-price": lambda nodes, pods: lookahead_scorer(nodes, pods, PRICE),
}


def make_variant(name: str, nodes: NodeTable, pods: PodTable) -> FastScorer:
    """A fresh scorer of variant ``name`` for one run."""
    return VARIANTS[name](nodes, pods)
