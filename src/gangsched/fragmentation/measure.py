"""The FGD fragmentation measure: pod requests, typical pods, per-node fragments, the fit
mask, the tie rule and the device choice (re-exported by :mod:`gangsched.fragmentation`, whose
docstring explains the measure)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from gangsched._codegen import define
from gangsched._types import BOOL as B
from gangsched._types import F64, I64
from gangsched.errors import ConfigError, PlacementError
from gangsched.model import Task
from gangsched.session.fit_rule import RULE, study_fit_source
from gangsched.units import CPU

#: The names :mod:`gangsched.fragmentation` re-exports.
__all__ = [
    "MAX_NODE_SCORE",
    "MAX_SPEC_CPU",
    "MAX_SPEC_GPU",
    "MILLI",
    "N_AFFINITY",
    "ClusterView",
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
    "typical_pods",
    "typical_pods_of_tasks",
]

MILLI = 1000
MAX_SPEC_CPU = 128_000  # millicores: the normalizer of the CPU dimension
MAX_SPEC_GPU = 8_000  # milli-GPU: the normalizer of the GPU dimension
MAX_NODE_SCORE = 100
N_AFFINITY = 9  # affinity tags: 0 = shared GPU, k = k whole GPUs (k = 1..8)


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


def typical_pods_of_tasks(
    tasks: Iterable[Task],
    models: Sequence[str],
    *,
    threshold_pct: float = 95.0,
    no_gpu_slot: bool = False,
) -> TypicalPods:
    """:func:`typical_pods` of ``tasks`` (a task asking several fractional devices is left out:
    it is no kernel shape; no task at all counts as one whole-GPU pod, so an idle GPU is a
    fragment for no one). ``models`` are the GPU-model columns of ``allowed``; with
    ``no_gpu_slot`` a last column, for nodes without GPUs, allows nothing."""
    cpu, num, milli, spec_names = [], [], [], []
    for rec in tasks:
        g = rec.gpu_request
        count = 0 if g is None else g.count
        share = 0 if g is None else min(g.milli, MILLI)
        if count > 1 and share < MILLI:
            continue
        cpu.append(rec.request.get(CPU, 0))
        num.append(count)
        milli.append(share)
        spec_names.append("|".join(g.models) if g is not None else "")
    if not cpu:
        cpu, num, milli, spec_names = [0], [1], [MILLI], [""]
    specs = sorted(set(spec_names) | {""})
    index = {s: i for i, s in enumerate(specs)}
    allowed = np.zeros((len(specs), len(models) + int(no_gpu_slot)), dtype=np.bool_)
    for i, s in enumerate(specs):
        wanted = [p for p in s.split("|") if p]
        allowed[i, : len(models)] = [not wanted or m in wanted for m in models]
    return typical_pods(
        np.array(cpu, dtype=np.int64),
        np.array(num, dtype=np.int64),
        np.array(milli, dtype=np.int64),
        np.array([index[s] for s in spec_names], dtype=np.int64),
        allowed,
        threshold_pct=threshold_pct,
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
    """Devices the pod takes on its node: the policy's device for a shared pod (it must have
    room for the take), else the first ``num_gpu`` devices with room for a whole device (the
    fully free ones) in index order."""
    if pod.num_gpu == 0:
        return ()
    if pod.is_shared:
        if share_gpu < 0 or not has_room(int(gpu_free_row[share_gpu]), pod.gpu_milli):
            raise PlacementError(
                "no device with room for the shared pod", kind="pod", field="gpu_milli"
            )
        return (int(share_gpu),)
    # a whole-device pod takes MILLI of each: the devices with room for it are the free ones
    free = np.flatnonzero(room_mask(gpu_free_row, pod.gpu_milli))
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


# ------------------------------------------------------------------ the fit rule's forms
#
# Whether a pod fits a node, and whether a device has room for a take, are the fit rule's
# (:data:`gangsched.session.fit_rule.RULE`), as for the scheduler's nodes; so is the shared
# device a pod takes (the tightest with room). Every form is rendered from the rule and
# defined in this module's namespace; the declarations give each its type.

_made = define(study_fit_source(RULE), globals(), "fit rule (FGD study)")
room_mask: Callable[[I64, int], B] = _made["room_mask"]
has_room: Callable[[int, int], bool] = _made["has_room"]
enough_rooms: Callable[[PodRequest, I64], B] = _made["enough_rooms"]
fit_rooms: Callable[[I64, I64, B | None, B | None, PodRequest], B] = _made["fit_rooms"]
fit_mask: Callable[[I64, I64, I64, I64, PodRequest], B] = _made["fit_mask"]
fit_row: Callable[[PodRequest, int, int, int, Sequence[int]], bool] = _made["fit_row"]
best_fit_devices: Callable[[I64, PodRequest], I64] = _made["best_fit_devices"]
best_fit_device: Callable[[Sequence[int], PodRequest], int] = _made["best_fit_device"]
