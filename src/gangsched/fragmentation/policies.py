"""The node-scoring policies of the FGD study as whole-cluster kernels (re-exported by
:mod:`gangsched.fragmentation`, whose docstring lists what each one scores)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from gangsched._types import BOOL as B
from gangsched._types import F64, I64
from gangsched.errors import ConfigError
from gangsched.fragmentation.measure import (
    MAX_NODE_SCORE,
    MAX_SPEC_CPU,
    MAX_SPEC_GPU,
    MILLI,
    ClusterView,
    FragTerms,
    IntSource,
    NodeScores,
    PodRequest,
    TypicalPods,
    _fragment,
    best_fit_devices,
    fit_mask,
    fragment_terms,
    room_mask,
)

#: A float array or a float: the policies' formulas are written once for both.
_Real = TypeVar("_Real", F64, float)

#: The names :mod:`gangsched.fragmentation` re-exports.
__all__ = [
    "PAPER_POLICIES",
    "POLICIES",
    "score_bestfit",
    "score_dotprod",
    "score_fgd",
    "score_fgd_pack",
    "score_gpu_clustering",
    "score_gpu_packing",
    "score_nodes",
    "score_random",
]


def _trunc_score(values: F64, feasible: B) -> F64:
    return np.where(feasible, np.trunc(values), -np.inf)


#: The tightest device with room per node (the fit rule's, generated in
#: :mod:`~gangsched.fragmentation.measure`: :func:`best_fit_devices`, one node's
#: :func:`best_fit_device`).
_best_fit_gpu = best_fit_devices


def trunc_one(value: float) -> float:
    """``np.trunc`` of one finite number (the sign of a zero kept)."""
    return math.copysign(float(math.trunc(value)), value)


def score_random(feasible: B, pod: PodRequest, gpu_free: I64, rng: IntSource) -> NodeScores:
    """One feasible node drawn uniformly gets 100, the others 0.

    With exactly one feasible node no number is drawn (the scheduler skips scoring then). For a
    shared pod the device on the drawn node is chosen by reservoir sampling over the devices with
    room, in index order (one draw per such device).
    """
    n = feasible.shape[0]
    score = np.where(feasible, 0.0, -np.inf)
    share = np.full(n, -1, dtype=np.int64)
    cand = np.flatnonzero(feasible)
    if cand.size == 0:
        return NodeScores(score=score, share_gpu=share)
    pick = int(cand[rng.intn(int(cand.size))]) if cand.size > 1 else int(cand[0])
    score[pick] = float(MAX_NODE_SCORE)
    if pod.is_shared:
        chosen = -1
        for seen, dev in enumerate(np.flatnonzero(room_mask(gpu_free[pick], pod.gpu_milli)), 1):
            if rng.intn(seen) == 0:
                chosen = int(dev)
        share[pick] = chosen
    return NodeScores(score=score, share_gpu=share)


def _dotprod(pod: PodRequest, free_cpu: _Real, idle: _Real) -> _Real:
    """DotProd's formula over float free CPU and idle milli-GPU (arrays or numbers)."""
    node_cpu = free_cpu / MAX_SPEC_CPU
    node_gpu = idle / MAX_SPEC_GPU
    pod_cpu = float(pod.cpu_milli) / MAX_SPEC_CPU
    pod_gpu = float(pod.total_gpu_milli) / MAX_SPEC_GPU
    dot = (node_cpu * pod_cpu + node_gpu * pod_gpu) / 2.0
    return float(MAX_NODE_SCORE) * (1.0 - dot)


def dotprod_raw(pod: PodRequest, free_cpu: I64, idle: I64) -> F64:
    """DotProd's score before truncation, from free CPU and idle milli-GPU ``(n_nodes,)``."""
    raw = _dotprod(pod, free_cpu.astype(np.float64), idle.astype(np.float64))
    return np.asarray(raw, dtype=np.float64)


def dotprod_one(pod: PodRequest, free_cpu: int, idle: int) -> float:
    """:func:`dotprod_raw` of one node, in scalar arithmetic (the same operations)."""
    return float(_dotprod(pod, float(free_cpu), float(idle)))


def score_dotprod(feasible: B, pod: PodRequest, free_cpu: I64, gpu_free: I64) -> NodeScores:
    """Dot product of normalized free and requested (CPU, total GPU); smaller product wins."""
    return _cpu_gpu_score(dotprod_raw, feasible, pod, free_cpu, gpu_free)


def _cpu_gpu_score(
    raw: Callable[[PodRequest, I64, I64], F64],
    feasible: B,
    pod: PodRequest,
    free_cpu: I64,
    gpu_free: I64,
) -> NodeScores:
    """A policy scored from free CPU and idle milli-GPU (DotProd, BestFit): its ``raw`` score
    truncated, the tightest device for a shared pod."""
    score = _trunc_score(raw(pod, free_cpu, gpu_free.sum(axis=1)), feasible)
    return NodeScores(score=score, share_gpu=_best_fit_gpu(gpu_free, pod))


def _bestfit(pod: PodRequest, free_cpu: _Real, idle: _Real) -> _Real:
    """BestFit's formula over float free CPU and idle milli-GPU (arrays or numbers): the
    weighted CPU and GPU left after the pod."""
    waste = (free_cpu - float(pod.cpu_milli)) / MAX_SPEC_CPU * 0.5
    waste = waste + (idle - float(pod.total_gpu_milli)) / MAX_SPEC_GPU * 0.5
    return (1.0 - waste) * float(MAX_NODE_SCORE)


def bestfit_raw(pod: PodRequest, free_cpu: I64, idle: I64) -> F64:
    """BestFit's score before truncation, from free CPU and idle milli-GPU ``(n_nodes,)``."""
    raw = _bestfit(pod, free_cpu.astype(np.float64), idle.astype(np.float64))
    return np.asarray(raw, dtype=np.float64)


def bestfit_one(pod: PodRequest, free_cpu: int, idle: int) -> float:
    """:func:`bestfit_raw` of one node, in scalar arithmetic (the same operations)."""
    return float(_bestfit(pod, float(free_cpu), float(idle)))


def score_bestfit(feasible: B, pod: PodRequest, free_cpu: I64, gpu_free: I64) -> NodeScores:
    """Least weighted leftover (0.5 CPU / 128 cores + 0.5 GPU / 8 devices) wins."""
    return _cpu_gpu_score(bestfit_raw, feasible, pod, free_cpu, gpu_free)


def clustering_raw(idle: I64, same: B, n_tags: I64) -> F64:
    """GpuClustering's score of a GPU pod: ``same`` the nodes holding its shape already,
    ``n_tags`` how many shapes each node holds, ``idle`` its idle milli-GPU."""
    fill = (MAX_NODE_SCORE // 4) * (MAX_SPEC_GPU - idle) // MAX_SPEC_GPU
    band = np.where(
        same,
        np.where(n_tags == 1, 3 * MAX_NODE_SCORE // 4, 2 * MAX_NODE_SCORE // 4),
        np.where(n_tags == 0, MAX_NODE_SCORE // 4, 0),
    )
    return (fill + band).astype(np.float64)


def score_gpu_clustering(feasible: B, pod: PodRequest, gpu_free: I64, affinity: I64) -> NodeScores:
    """Prefer nodes already hosting pods of the same GPU shape.

    ``affinity`` ``(n_nodes, 9)`` int64 counts the GPU pods on each node by shape: column 0 shared
    GPU, column k pods of k whole GPUs.
    """
    n = feasible.shape[0]
    tag = pod.affinity
    if tag < 0:
        return NodeScores(
            score=np.where(feasible, 0.0, -np.inf), share_gpu=np.full(n, -1, dtype=np.int64)
        )
    raw = clustering_raw(gpu_free.sum(axis=1), affinity[:, tag] > 0, (affinity > 0).sum(axis=1))
    return NodeScores(
        score=np.where(feasible, raw, -np.inf), share_gpu=_best_fit_gpu(gpu_free, pod)
    )


def packing_raw(pod: PodRequest, n_free: I64, gpu_count: I64, tight: I64) -> F64:
    """GpuPacking's score of a GPU pod: ``n_free`` the fully free devices of each node,
    ``tight`` (shared pods) the free milli-GPU of the device the pod would take."""
    idle_node = n_free == gpu_count
    idle_score = np.maximum(MAX_NODE_SCORE // 3 - n_free, n_free)
    if pod.is_shared:
        used_free_dev = np.maximum(MAX_NODE_SCORE // 2 - 1, MAX_NODE_SCORE // 3)
        shared_dev = np.maximum(MAX_NODE_SCORE - (tight * 100 // MILLI) // 10, MAX_NODE_SCORE // 2)
        busy_score = np.where(tight == MILLI, used_free_dev, shared_dev)
    else:
        busy_score = np.full(
            n_free.shape[0],
            max(MAX_NODE_SCORE // 2 - pod.num_gpu, MAX_NODE_SCORE // 3),
            dtype=np.int64,
        )
    return np.where(idle_node, idle_score, busy_score).astype(np.float64)


def score_gpu_packing(feasible: B, pod: PodRequest, gpu_free: I64, gpu_count: I64) -> NodeScores:
    """Prefer partly used devices, then used nodes, then idle nodes (three score bands)."""
    n = feasible.shape[0]
    share = _best_fit_gpu(gpu_free, pod)
    if pod.num_gpu == 0:
        return NodeScores(score=np.where(feasible, 0.0, -np.inf), share_gpu=share)
    tight = np.zeros(n, dtype=np.int64)
    if pod.is_shared and gpu_free.shape[1]:  # without devices anywhere, no node fits
        rows = np.arange(n)
        tight = np.where(share >= 0, gpu_free[rows, np.maximum(share, 0)], 0)
    raw = packing_raw(pod, (gpu_free == MILLI).sum(axis=1), gpu_count, tight)
    return NodeScores(score=np.where(feasible, raw, -np.inf), share_gpu=share)


def _sigmoid_exact(delta: F64) -> F64:
    return np.asarray(1.0 / (1.0 + np.exp(-(delta / 1000.0))) * float(MAX_NODE_SCORE))


def _sigmoid_score(delta: F64) -> F64:
    return np.trunc(_sigmoid_exact(delta))


def fgd_rows(
    rows: npt.NDArray[np.intp] | I64,
    pod: PodRequest,
    free_cpu: I64,
    gpu_free: I64,
    model_idx: I64,
    typical: TypicalPods,
    terms: FragTerms,
    frag: F64,
    *,
    exact: bool = False,
) -> tuple[F64, I64]:
    """FGD's score and shared device on ``rows`` (``terms`` and ``frag``: every node's current
    :class:`FragTerms` and ``F_n``). Each row is computed on its own: a row's value does not
    depend on which other rows are asked with it. Rows where the pod does not fit get a value
    that means nothing (a shared pod without a device with room: ``-inf``). ``exact``: the
    sigmoid score before truncation."""
    sig = _sigmoid_exact if exact else _sigmoid_score
    access = typical.access(model_idx[rows])  # (k, m)
    fits, small, idle = terms.fits_count[rows], terms.small_sum[rows], terms.idle[rows]
    cpu_after = free_cpu[rows] - pod.cpu_milli
    before = frag[rows]
    tm = typical.gpu_milli  # (m,)
    if pod.is_shared:
        g = gpu_free[rows]  # (k, G)
        g2 = g - pod.gpu_milli
        room = room_mask(g, pod.gpu_milli)  # (k, G)
        g3, g23 = g[:, :, None], g2[:, :, None]  # (k, G, 1)
        fits2 = fits[:, None, :] - (g3 >= tm) + (g23 >= tm)  # (k, G, m)
        small2 = small[:, None, :] - np.where(g3 < tm, g3, 0) + np.where(g23 < tm, g23, 0)
        idle2 = np.broadcast_to((idle - pod.gpu_milli)[:, None], g.shape)
        cpu2 = np.broadcast_to(cpu_after[:, None], g.shape)
        after = _fragment(cpu2, fits2, small2, idle2, access[:, None, :], typical)  # (k, G)
        dev_score = np.where(room, sig(before[:, None] - after), -np.inf)
        best = np.argmax(dev_score, axis=1).astype(np.int64)
        return np.asarray(dev_score[np.arange(len(rows)), best], dtype=np.float64), best
    k = pod.num_gpu
    # Whole devices: k fully free devices (g = 1000) drop to 0.
    fits2 = fits - k * (tm <= MILLI) + k * (tm <= 0)
    after = _fragment(cpu_after, fits2, small, idle - k * MILLI, access, typical)
    return sig(before - after), np.full(len(rows), -1, dtype=np.int64)


def score_fgd(
    feasible: B,
    pod: PodRequest,
    free_cpu: I64,
    gpu_free: I64,
    model_idx: I64,
    typical: TypicalPods,
    *,
    terms: FragTerms | None = None,
    frag: F64 | None = None,
) -> NodeScores:
    """Fragmentation gradient descent: the smallest growth of ``F_n`` wins.

    ``terms`` and ``frag`` (the current :class:`FragTerms` and ``F_n``) may be passed in by a caller
    that maintains them incrementally; otherwise they are computed here.
    """
    n = feasible.shape[0]
    score = np.full(n, -np.inf)
    share = np.full(n, -1, dtype=np.int64)
    cand = np.flatnonzero(feasible)
    if cand.size == 0:
        return NodeScores(score=score, share_gpu=share)
    if terms is None:
        terms = fragment_terms(gpu_free, typical)
    if frag is None:
        frag = _fragment(
            free_cpu,
            terms.fits_count,
            terms.small_sum,
            terms.idle,
            typical.access(model_idx),
            typical,
        )
    score[cand], share[cand] = fgd_rows(
        cand, pod, free_cpu, gpu_free, model_idx, typical, terms, frag
    )
    return NodeScores(score=score, share_gpu=share)


def _run_random(v: ClusterView, pod: PodRequest, feas: B, rng: IntSource | None) -> NodeScores:
    if rng is None:
        raise ConfigError("policy 'random' needs a random source", kind="policy", name="random")
    return score_random(feas, pod, v.gpu_free, rng)


def score_fgd_pack(
    feasible: B, pod: PodRequest, free_cpu: I64, gpu_free: I64, *args: object, **kwargs: object
) -> NodeScores:
    """FGD whose ties go to the node left with the least idle GPU.

    The FGD score is an integer, so many nodes tie and FGD then takes the lowest index. Here a
    fraction below 1 is added that grows as the node's idle milli-GPU after the placement
    shrinks, so among equal FGD scores the fullest node wins (the lowest index still breaks the
    remaining ties); the FGD order between different scores is unchanged. The arguments are
    :func:`score_fgd`'s.
    """
    base = score_fgd(feasible, pod, free_cpu, gpu_free, *args, **kwargs)  # type: ignore[arg-type]
    idle_after = gpu_free.sum(axis=1) - pod.total_gpu_milli
    tie = 0.999 * (1.0 - np.clip(idle_after, 0, MAX_SPEC_GPU) / (MAX_SPEC_GPU + 1.0))
    score = np.where(np.isfinite(base.score), base.score + tie, base.score)
    return NodeScores(score=score, share_gpu=base.share_gpu)


#: A policy's kernel over a cluster view: (view, pod, feasible mask, random source) -> scores.
PolicyKernel = Callable[[ClusterView, PodRequest, B, IntSource | None], NodeScores]


def _run_on_typical(name: str, kernel: Callable[..., NodeScores]) -> PolicyKernel:
    """Policy ``name``'s kernel over a view: ``kernel`` takes :func:`score_fgd`'s arguments,
    the view's current fragment terms and ``F_n`` among them; the view must carry typical
    pods."""

    def run(v: ClusterView, pod: PodRequest, feas: B, rng: IntSource | None) -> NodeScores:
        if v.typical is None:
            raise ConfigError(f"policy {name!r} needs typical pods", kind="policy", name=name)
        return kernel(
            feas, pod, v.free_cpu, v.gpu_free, v.model_idx, v.typical, terms=v.terms, frag=v.frag
        )

    return run


#: The six policies of the FGD paper, in its order.
PAPER_POLICIES = ("random", "dotprod", "gpu-clustering", "gpu-packing", "bestfit", "fgd")

POLICIES: Mapping[str, PolicyKernel] = {
    "random": _run_random,
    "dotprod": lambda v, p, f, r: score_dotprod(f, p, v.free_cpu, v.gpu_free),
    "gpu-clustering": lambda v, p, f, r: score_gpu_clustering(f, p, v.gpu_free, v.affinity),
    "gpu-packing": lambda v, p, f, r: score_gpu_packing(f, p, v.gpu_free, v.gpu_count),
    "bestfit": lambda v, p, f, r: score_bestfit(f, p, v.free_cpu, v.gpu_free),
    "fgd": _run_on_typical("fgd", score_fgd),
    "fgd-pack": _run_on_typical("fgd-pack", score_fgd_pack),
}


def policy_kernel(policy: str) -> PolicyKernel:
    """The kernel of ``policy`` (one of :data:`POLICIES`); another name is a
    :class:`~gangsched.errors.ConfigError` listing them."""
    try:
        return POLICIES[policy]
    except KeyError:
        raise ConfigError(
            f"unknown policy; expected one of {', '.join(POLICIES)}", kind="policy", name=policy
        ) from None


def score_nodes(
    policy: str,
    view: ClusterView,
    pod: PodRequest,
    *,
    feasible: B | None = None,
    rng: IntSource | None = None,
) -> NodeScores:
    """Score every node for ``pod`` under ``policy`` (one of :data:`POLICIES`)."""
    fn = policy_kernel(policy)
    if feasible is None:
        feasible = fit_mask(view.free_cpu, view.free_mem, view.gpu_free, view.model_idx, pod)
    return fn(view, pod, feasible, rng)
