"""GPU fragmentation (the FGD measure) and six node-scoring policies, as whole-cluster kernels.

Theory of operation
-------------------
A cluster is described by plain arrays, one row per node:

* ``free_cpu`` ``(n_nodes,)`` int64 millicores, ``free_mem`` ``(n_nodes,)`` int64 (any unit, the
  pod's memory request uses the same);
* ``gpu_free`` ``(n_nodes, max_gpus)`` int64 free milli-GPU of each device. A node with fewer GPUs
  than ``max_gpus`` is padded with **0** at the end; ``gpu_count`` ``(n_nodes,)`` says how many
  columns are real devices. A padded 0 never fits a GPU request and adds nothing to any sum;
* ``model_idx`` ``(n_nodes,)`` int64 index of the node's GPU model in the caller's model list.

A pod is a :class:`PodRequest`: CPU, memory, ``num_gpu`` devices of ``gpu_milli`` each (below 1000
only for one shared device), and the models it accepts.

**Fragmentation** (Weng et al., ATC'23). The target workload is a set of *typical pods* ``m`` with
frequencies ``p_m`` (:func:`typical_pods`: the most popular resource shapes covering 95 % of the
workload, renormalized). For node ``n`` with free CPU ``c`` and device frees ``g[]``:

* ``m`` asks for no GPU, or may not use the node's model, or needs more CPU than ``c``, or
  fewer than ``num_gpu_m`` devices have ``g[i] >= gpu_milli_m``: every idle milli-GPU of the
  node is fragment, ``F_n(m) = sum(g)``;
* otherwise (``m`` fits): only the devices too small for ``m`` are fragment,
  ``F_n(m) = sum(g[i] for g[i] < gpu_milli_m)``.

``F_n = sum_m p_m F_n(m)``; the cluster fragment is ``sum_n F_n`` and the fragmentation ratio is the
cluster fragment over all idle milli-GPU, in %.

**Policies.** Each ``score_*`` kernel returns a :class:`NodeScores`: one float per node (``-inf``
where the pod does not fit) and, for a shared-GPU pod, the device it would use on that node. The
scheduler picks the highest score; ties go to the node of the smallest rank the caller gives, or to
the lowest index (the reference simulator breaks ties by the smallest node name, after renaming the
nodes with a seeded random prefix: see ``gangsched.sim.fgd.node_ranks``). The scores reproduce the
reference simulator's integer scores (0..100, truncated toward zero), because truncation creates
ties and the tie rule then decides the placement:

===============  ==========================================================================
``random``       one feasible node drawn uniformly (one ``intn`` draw); random shared device
``dotprod``      ``100 * (1 - (c/128000 * cr/128000 + G/8000 * gr/8000) / 2)``, c, G node free
                 CPU and total free GPU, cr, gr the pod's; the smallest product wins
``gpu-clustering`` band by the pod's GPU shape ("share", "1-gpu", "2-gpu", ...) among the shapes
                 already on the node: 75..100 only that shape, 50..75 mixed with it, 25..50 an
                 idle node, 0..25 other shapes only; inside a band the fuller node wins
``gpu-packing``  a partly used device: 50..100 (fuller device higher); whole free devices on a
                 used node: 33..50; a fully idle node: ``max(33 - n_gpus, n_gpus)``
``bestfit``      ``100 * (1 - (0.5 (c - cr)/128000 + 0.5 (G - gr)/8000))``
``fgd``          ``100 * sigmoid((F_n - F_n') / 1000)``, F_n' the fragment after placing the pod;
                 a shared pod tries every device with room and keeps the best
``fgd-pack``     ``fgd``, ties (equal integer scores) to the node with the least idle GPU left
                 (not one of the paper's policies)
===============  ==========================================================================

The device inside the node: a whole-GPU pod takes the first ``num_gpu`` fully free devices in index
order; a shared pod takes the device its policy names (``fgd``: best fragment score, ``random``:
uniform among devices with room, every other policy: the tightest device with room, lowest index
first). Nothing here reads a clock, a file or an unseeded random source: ``random`` draws from the
:class:`IntSource` it is handed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from .errors import ConfigError, PlacementError

__all__ = [
    "MAX_NODE_SCORE",
    "MAX_SPEC_CPU",
    "MAX_SPEC_GPU",
    "MILLI",
    "PAPER_POLICIES",
    "POLICIES",
    "FragTerms",
    "IntSource",
    "NodeScores",
    "PodRequest",
    "TypicalPods",
    "choose_node",
    "cluster_fragment",
    "device_indices",
    "fit_mask",
    "fragment_terms",
    "node_fragment",
    "node_fragment_from_terms",
    "score_bestfit",
    "score_dotprod",
    "score_fgd",
    "score_fgd_pack",
    "score_gpu_clustering",
    "score_gpu_packing",
    "score_nodes",
    "score_random",
    "typical_pods",
]

MILLI = 1000
MAX_SPEC_CPU = 128_000  # millicores: the normalizer of the CPU dimension
MAX_SPEC_GPU = 8_000  # milli-GPU: the normalizer of the GPU dimension
MAX_NODE_SCORE = 100
N_AFFINITY = 9  # affinity tags: 0 = shared GPU, k = k whole GPUs (k = 1..8)

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
B = npt.NDArray[np.bool_]


class IntSource(Protocol):
    """A seeded source of uniform integers: ``intn(n)`` returns an int in ``[0, n)``."""

    def intn(self, n: int) -> int: ...


@dataclass(frozen=True, slots=True)
class PodRequest:
    """What one pod asks for.

    ``allowed_models`` is a bool mask over the caller's model list, or ``None`` for any model.
    """

    cpu_milli: int
    memory: int
    num_gpu: int
    gpu_milli: int
    allowed_models: B | None = None  # (n_models,)

    def __post_init__(self) -> None:
        if self.cpu_milli < 0 or self.memory < 0:
            raise PlacementError("negative request", kind="pod", field="cpu_milli/memory")
        if not 0 <= self.num_gpu <= 64:
            raise PlacementError(
                f"num_gpu {self.num_gpu} out of range", kind="pod", field="num_gpu"
            )
        if not 0 <= self.gpu_milli <= MILLI or (self.num_gpu == 0) != (self.gpu_milli == 0):
            raise PlacementError(
                f"gpu_milli {self.gpu_milli} does not match num_gpu {self.num_gpu}",
                kind="pod",
                field="gpu_milli",
            )
        if self.num_gpu > 1 and self.gpu_milli != MILLI:
            raise PlacementError(
                "a multi-GPU pod must use whole devices", kind="pod", field="gpu_milli"
            )

    @property
    def is_shared(self) -> bool:
        return self.num_gpu == 1 and self.gpu_milli < MILLI

    @property
    def total_gpu_milli(self) -> int:
        return self.num_gpu * self.gpu_milli

    @property
    def affinity(self) -> int:
        """-1 for a CPU-only pod, 0 for a shared GPU, k for k whole GPUs."""
        if self.num_gpu == 0:
            return -1
        return 0 if self.is_shared else self.num_gpu


@dataclass(frozen=True, slots=True)
class TypicalPods:
    """The target workload of the fragmentation measure (``m`` shapes)."""

    cpu_milli: I64  # (m,)
    num_gpu: I64  # (m,)
    gpu_milli: I64  # (m,)
    allowed: B  # (m, n_models)
    prob: F64  # (m,) sums to 1

    def __len__(self) -> int:
        return int(self.prob.shape[0])

    def access(self, model_idx: I64) -> B:
        """``(n_nodes, m)``: may typical pod ``m`` use node ``n``'s model."""
        return np.ascontiguousarray(self.allowed[:, model_idx].T)


@dataclass(frozen=True, slots=True)
class FragTerms:
    """Per-node, per-typical-pod aggregates from which fragments follow without the device axis."""

    fits_count: I64  # (n_nodes, m) devices with g >= gpu_milli_m
    small_sum: I64  # (n_nodes, m) sum of device frees below gpu_milli_m
    idle: I64  # (n_nodes,) total free milli-GPU


@dataclass(frozen=True, slots=True)
class NodeScores:
    """A policy's verdict: ``score`` ``(n_nodes,)`` (``-inf`` = does not fit) and, for a shared
    pod, ``share_gpu`` ``(n_nodes,)`` the device it would use (-1 otherwise)."""

    score: F64
    share_gpu: I64


def typical_pods(
    cpu_milli: I64,
    num_gpu: I64,
    gpu_milli: I64,
    spec_idx: I64,
    spec_allowed: B,
    *,
    threshold_pct: float = 95.0,
) -> TypicalPods:
    """Most popular pod shapes covering ``threshold_pct`` % of the pods, renormalized.

    Parameters
    ----------
    cpu_milli, num_gpu, gpu_milli, spec_idx:
        ``(n_pods,)`` the workload. ``spec_idx`` numbers the GPU-model constraints so that a
        larger id means a later string in sorted order (the tie rule needs it).
    spec_allowed:
        ``(n_specs, n_models)`` bool, which models each spec accepts.

    Notes
    -----
    Shapes are ranked by count, descending; equal counts are ranked by (cpu, gpu_milli, num_gpu,
    spec) descending. Shapes are taken one by one until they cover at least the threshold.
    """
    n = int(cpu_milli.shape[0])
    if n == 0:
        raise ConfigError("no pods to derive typical pods from", kind="workload")
    if not 0 < threshold_pct <= 100:
        raise ConfigError(
            f"threshold {threshold_pct} not in (0, 100]", kind="typical pods", field="threshold_pct"
        )
    keys = np.stack([cpu_milli, gpu_milli, num_gpu, spec_idx], axis=1)  # (n_pods, 4)
    shapes, counts = np.unique(keys, axis=0, return_counts=True)
    # lexsort: last key is primary. Descending on (count, cpu, milli, num, spec).
    order = np.lexsort((-shapes[:, 3], -shapes[:, 2], -shapes[:, 1], -shapes[:, 0], -counts))
    shapes, counts = shapes[order], counts[order].astype(np.float64)
    cum = np.cumsum(counts)
    needed = threshold_pct * n / 100.0
    k = int(np.searchsorted(cum, needed, side="left")) + 1
    k = min(k, len(counts))
    kept, kept_counts = shapes[:k], counts[:k]
    prob = (kept_counts / n) / (cum[k - 1] / n)
    return TypicalPods(
        cpu_milli=kept[:, 0].astype(np.int64),
        num_gpu=kept[:, 2].astype(np.int64),
        gpu_milli=kept[:, 1].astype(np.int64),
        allowed=np.asarray(spec_allowed, dtype=np.bool_)[kept[:, 3]],
        prob=prob,
    )


def fragment_terms(gpu_free: I64, typical: TypicalPods) -> FragTerms:
    """Aggregates of :class:`FragTerms` for every node. ``gpu_free`` ``(n_nodes, max_gpus)``."""
    tm = typical.gpu_milli[None, :, None]  # (1, m, 1)
    g = gpu_free[:, None, :]  # (n, 1, G)
    ge = g >= tm  # (n, m, G)
    fits = ge.sum(axis=2, dtype=np.int64)
    small = np.where(ge, 0, g).sum(axis=2, dtype=np.int64)
    return FragTerms(fits_count=fits, small_sum=small, idle=gpu_free.sum(axis=1, dtype=np.int64))


def _fragment(
    free_cpu: I64, fits: I64, small: I64, idle: I64, access: B, typical: TypicalPods
) -> F64:
    # free_cpu, idle: (...,); fits, small, access: (..., m). Returns (...,).
    q3 = (
        (typical.num_gpu > 0)
        & access
        & (fits >= typical.num_gpu)
        & (free_cpu[..., None] >= typical.cpu_milli)
    )
    per_pod = np.where(q3, small, idle[..., None]).astype(np.float64)
    # An elementwise product and a sum over the last axis, not a matrix-vector product: a BLAS
    # product's last bits depend on how many rows are computed together, and FGD compares a
    # node's fragment before and after a placement, so the reduction must be per-row exact.
    return np.asarray((per_pod * typical.prob).sum(axis=-1), dtype=np.float64)


def node_fragment_from_terms(
    free_cpu: I64, model_idx: I64, terms: FragTerms, typical: TypicalPods
) -> F64:
    """``F_n`` ``(n_nodes,)`` from precomputed :class:`FragTerms`."""
    return _fragment(
        free_cpu, terms.fits_count, terms.small_sum, terms.idle, typical.access(model_idx), typical
    )


def node_fragment(free_cpu: I64, gpu_free: I64, model_idx: I64, typical: TypicalPods) -> F64:
    """``F_n`` for every node, ``(n_nodes,)`` float64 milli-GPU."""
    return node_fragment_from_terms(free_cpu, model_idx, fragment_terms(gpu_free, typical), typical)


def cluster_fragment(
    free_cpu: I64, gpu_free: I64, model_idx: I64, typical: TypicalPods
) -> tuple[float, int, float]:
    """``(fragment milli-GPU, idle milli-GPU, fragmentation ratio in %)`` of the whole cluster.

    The ratio is NaN when nothing is idle.
    """
    frag = float(node_fragment(free_cpu, gpu_free, model_idx, typical).sum())
    idle = int(gpu_free.sum())
    ratio = 100.0 * frag / idle if idle > 0 else float("nan")
    return frag, idle, ratio


def fit_mask(free_cpu: I64, free_mem: I64, gpu_free: I64, model_idx: I64, pod: PodRequest) -> B:
    """``(n_nodes,)`` bool: CPU, memory, GPU model and enough devices with room."""
    ok = (free_cpu >= pod.cpu_milli) & (free_mem >= pod.memory)
    if pod.num_gpu == 0:
        return np.asarray(ok, dtype=np.bool_)
    if pod.allowed_models is not None:
        ok &= pod.allowed_models[model_idx]
    ok &= (gpu_free >= pod.gpu_milli).sum(axis=1) >= pod.num_gpu
    return np.asarray(ok, dtype=np.bool_)


def _trunc_score(values: F64, feasible: B) -> F64:
    return np.where(feasible, np.trunc(values), -np.inf)


def _best_fit_gpu(gpu_free: I64, pod: PodRequest) -> I64:
    """Tightest device with room per node (lowest index on ties), -1 if none or not shared."""
    n = gpu_free.shape[0]
    if not pod.is_shared:
        return np.full(n, -1, dtype=np.int64)
    room = gpu_free >= pod.gpu_milli
    masked = np.where(room, gpu_free, np.iinfo(np.int64).max)
    idx = np.argmin(masked, axis=1).astype(np.int64)
    return np.where(room.any(axis=1), idx, -1)


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
        for seen, dev in enumerate(np.flatnonzero(gpu_free[pick] >= pod.gpu_milli), start=1):
            if rng.intn(seen) == 0:
                chosen = int(dev)
        share[pick] = chosen
    return NodeScores(score=score, share_gpu=share)


def score_dotprod(feasible: B, pod: PodRequest, free_cpu: I64, gpu_free: I64) -> NodeScores:
    """Dot product of normalized free and requested (CPU, total GPU); smaller product wins."""
    node_cpu = free_cpu.astype(np.float64) / MAX_SPEC_CPU
    node_gpu = gpu_free.sum(axis=1).astype(np.float64) / MAX_SPEC_GPU
    pod_cpu = float(pod.cpu_milli) / MAX_SPEC_CPU
    pod_gpu = float(pod.total_gpu_milli) / MAX_SPEC_GPU
    dot = (node_cpu * pod_cpu + node_gpu * pod_gpu) / 2.0
    raw = float(MAX_NODE_SCORE) * (1.0 - dot)
    return NodeScores(score=_trunc_score(raw, feasible), share_gpu=_best_fit_gpu(gpu_free, pod))


def score_bestfit(feasible: B, pod: PodRequest, free_cpu: I64, gpu_free: I64) -> NodeScores:
    """Least weighted leftover (0.5 CPU / 128 cores + 0.5 GPU / 8 devices) wins."""
    left_cpu = (free_cpu - pod.cpu_milli).astype(np.float64)
    left_gpu = (gpu_free.sum(axis=1) - pod.total_gpu_milli).astype(np.float64)
    waste = left_cpu / MAX_SPEC_CPU * 0.5
    waste = waste + left_gpu / MAX_SPEC_GPU * 0.5
    raw = (1.0 - waste) * float(MAX_NODE_SCORE)
    return NodeScores(score=_trunc_score(raw, feasible), share_gpu=_best_fit_gpu(gpu_free, pod))


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
    fill = (MAX_NODE_SCORE // 4) * (MAX_SPEC_GPU - gpu_free.sum(axis=1)) // MAX_SPEC_GPU
    same = affinity[:, tag] > 0
    n_tags = (affinity > 0).sum(axis=1)
    band = np.where(
        same,
        np.where(n_tags == 1, 3 * MAX_NODE_SCORE // 4, 2 * MAX_NODE_SCORE // 4),
        np.where(n_tags == 0, MAX_NODE_SCORE // 4, 0),
    )
    raw = (fill + band).astype(np.float64)
    return NodeScores(
        score=np.where(feasible, raw, -np.inf), share_gpu=_best_fit_gpu(gpu_free, pod)
    )


def score_gpu_packing(feasible: B, pod: PodRequest, gpu_free: I64, gpu_count: I64) -> NodeScores:
    """Prefer partly used devices, then used nodes, then idle nodes (three score bands)."""
    n = feasible.shape[0]
    share = _best_fit_gpu(gpu_free, pod)
    if pod.num_gpu == 0:
        return NodeScores(score=np.where(feasible, 0.0, -np.inf), share_gpu=share)
    n_free = (gpu_free == MILLI).sum(axis=1)
    idle_node = n_free == gpu_count
    idle_score = np.maximum(MAX_NODE_SCORE // 3 - n_free, n_free)
    if pod.is_shared:
        rows = np.arange(n)
        tight = np.where(share >= 0, gpu_free[rows, np.maximum(share, 0)], 0)
        used_free_dev = np.maximum(MAX_NODE_SCORE // 2 - 1, MAX_NODE_SCORE // 3)
        shared_dev = np.maximum(MAX_NODE_SCORE - (tight * 100 // MILLI) // 10, MAX_NODE_SCORE // 2)
        busy_score = np.where(tight == MILLI, used_free_dev, shared_dev)
    else:
        busy_score = np.full(
            n, max(MAX_NODE_SCORE // 2 - pod.num_gpu, MAX_NODE_SCORE // 3), dtype=np.int64
        )
    raw = np.where(idle_node, idle_score, busy_score).astype(np.float64)
    return NodeScores(score=np.where(feasible, raw, -np.inf), share_gpu=share)


def _sigmoid_score(delta: F64) -> F64:
    return np.trunc(1.0 / (1.0 + np.exp(-(delta / 1000.0))) * float(MAX_NODE_SCORE))


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
    access = typical.access(model_idx[cand])  # (k, m)
    fits, small, idle = terms.fits_count[cand], terms.small_sum[cand], terms.idle[cand]
    cpu_after = free_cpu[cand] - pod.cpu_milli
    if frag is None:
        before = _fragment(free_cpu[cand], fits, small, idle, access, typical)  # (k,)
    else:
        before = frag[cand]
    tm = typical.gpu_milli  # (m,)
    if pod.is_shared:
        g = gpu_free[cand]  # (k, G)
        g2 = g - pod.gpu_milli
        room = g >= pod.gpu_milli  # (k, G)
        g3, g23 = g[:, :, None], g2[:, :, None]  # (k, G, 1)
        fits2 = fits[:, None, :] - (g3 >= tm) + (g23 >= tm)  # (k, G, m)
        small2 = small[:, None, :] - np.where(g3 < tm, g3, 0) + np.where(g23 < tm, g23, 0)
        idle2 = np.broadcast_to((idle - pod.gpu_milli)[:, None], g.shape)
        cpu2 = np.broadcast_to(cpu_after[:, None], g.shape)
        after = _fragment(cpu2, fits2, small2, idle2, access[:, None, :], typical)  # (k, G)
        dev_score = np.where(room, _sigmoid_score(before[:, None] - after), -np.inf)
        best = np.argmax(dev_score, axis=1)
        score[cand] = dev_score[np.arange(cand.size), best]
        share[cand] = best
    else:
        k = pod.num_gpu
        # Whole devices: k fully free devices (g = 1000) drop to 0.
        fits2 = fits - k * (tm <= MILLI) + k * (tm <= 0)
        small2 = small
        idle2 = idle - k * MILLI
        after = _fragment(cpu_after, fits2, small2, idle2, access, typical)
        score[cand] = _sigmoid_score(before - after)
    return NodeScores(score=score, share_gpu=share)


def choose_node(scores: NodeScores, rank: I64 | None = None) -> int:
    """Index of the highest score; -1 if no node fits.

    Ties go to the node with the smallest ``rank`` (``(n_nodes,)`` distinct integers), or to the
    lowest index when ``rank`` is ``None``.
    """
    if scores.score.size == 0:
        return -1
    best = int(np.argmax(scores.score))
    if not np.isfinite(scores.score[best]):
        return -1
    if rank is None:
        return best
    tied = np.flatnonzero(scores.score == scores.score[best])
    return int(tied[np.argmin(rank[tied])]) if tied.size > 1 else best


def device_indices(gpu_free_row: I64, pod: PodRequest, share_gpu: int) -> tuple[int, ...]:
    """Devices the pod takes on its node: the policy's device for a shared pod, else the first
    ``num_gpu`` fully free devices in index order."""
    if pod.num_gpu == 0:
        return ()
    if pod.is_shared:
        if share_gpu < 0 or gpu_free_row[share_gpu] < pod.gpu_milli:
            raise PlacementError(
                "no device with room for the shared pod", kind="pod", field="gpu_milli"
            )
        return (int(share_gpu),)
    free = np.flatnonzero(gpu_free_row == MILLI)
    if free.size < pod.num_gpu:
        raise PlacementError(
            f"{pod.num_gpu} free devices needed, {free.size} found", kind="pod", field="num_gpu"
        )
    return tuple(int(i) for i in free[: pod.num_gpu])


@dataclass(frozen=True, slots=True)
class ClusterView:
    """The arrays one scoring call needs (no state of its own; built by the caller)."""

    free_cpu: I64  # (n_nodes,)
    free_mem: I64  # (n_nodes,)
    gpu_free: I64  # (n_nodes, max_gpus)
    gpu_count: I64  # (n_nodes,)
    model_idx: I64  # (n_nodes,)
    affinity: I64  # (n_nodes, 9)
    typical: TypicalPods | None = None
    terms: FragTerms | None = None
    frag: F64 | None = None


def _run_random(v: ClusterView, pod: PodRequest, feas: B, rng: IntSource | None) -> NodeScores:
    if rng is None:
        raise ConfigError("policy 'random' needs a random source", kind="policy", name="random")
    return score_random(feas, pod, v.gpu_free, rng)


def _run_fgd(v: ClusterView, pod: PodRequest, feas: B, rng: IntSource | None) -> NodeScores:
    if v.typical is None:
        raise ConfigError("policy 'fgd' needs typical pods", kind="policy", name="fgd")
    return score_fgd(
        feas, pod, v.free_cpu, v.gpu_free, v.model_idx, v.typical, terms=v.terms, frag=v.frag
    )


def score_fgd_pack(
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
    """FGD whose ties go to the node left with the least idle GPU.

    The FGD score is an integer, so many nodes tie and FGD then takes the lowest index. Here a
    fraction below 1 is added that grows as the node's idle milli-GPU after the placement
    shrinks, so among equal FGD scores the fullest node wins (the lowest index still breaks the
    remaining ties); the FGD order between different scores is unchanged.
    """
    base = score_fgd(feasible, pod, free_cpu, gpu_free, model_idx, typical, terms=terms, frag=frag)
    idle_after = gpu_free.sum(axis=1) - pod.total_gpu_milli
    tie = 0.999 * (1.0 - np.clip(idle_after, 0, MAX_SPEC_GPU) / (MAX_SPEC_GPU + 1.0))
    score = np.where(np.isfinite(base.score), base.score + tie, base.score)
    return NodeScores(score=score, share_gpu=base.share_gpu)


def _run_fgd_pack(v: ClusterView, pod: PodRequest, feas: B, rng: IntSource | None) -> NodeScores:
    if v.typical is None:
        raise ConfigError("policy 'fgd-pack' needs typical pods", kind="policy", name="fgd-pack")
    return score_fgd_pack(
        feas, pod, v.free_cpu, v.gpu_free, v.model_idx, v.typical, terms=v.terms, frag=v.frag
    )


#: The six policies of the FGD paper, in its order.
PAPER_POLICIES = ("random", "dotprod", "gpu-clustering", "gpu-packing", "bestfit", "fgd")

POLICIES: Mapping[str, Callable[[ClusterView, PodRequest, B, IntSource | None], NodeScores]] = {
    "random": _run_random,
    "dotprod": lambda v, p, f, r: score_dotprod(f, p, v.free_cpu, v.gpu_free),
    "gpu-clustering": lambda v, p, f, r: score_gpu_clustering(f, p, v.gpu_free, v.affinity),
    "gpu-packing": lambda v, p, f, r: score_gpu_packing(f, p, v.gpu_free, v.gpu_count),
    "bestfit": lambda v, p, f, r: score_bestfit(f, p, v.free_cpu, v.gpu_free),
    "fgd": _run_fgd,
    "fgd-pack": _run_fgd_pack,
}


def score_nodes(
    policy: str,
    view: ClusterView,
    pod: PodRequest,
    *,
    feasible: B | None = None,
    rng: IntSource | None = None,
) -> NodeScores:
    """Score every node for ``pod`` under ``policy`` (one of :data:`POLICIES`)."""
    try:
        fn = POLICIES[policy]
    except KeyError:
        raise ConfigError(
            f"unknown policy; expected one of {', '.join(POLICIES)}", kind="policy", name=policy
        ) from None
    if feasible is None:
        feasible = fit_mask(view.free_cpu, view.free_mem, view.gpu_free, view.model_idx, pod)
    return fn(view, pod, feasible, rng)
