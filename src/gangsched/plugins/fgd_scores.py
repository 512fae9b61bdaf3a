"""The six node scorers of the FGD study as scheduler plugins.

Theory of operation
-------------------
Each plugin wraps one kernel of :mod:`gangsched.fragmentation` and serves two points:

* ``node_score(ssn, tmpl, rows)`` — the kernel's score (0..100, times the plugin's ``weight``)
  on the requested rows. Rows where the kernel itself sees no fit (free CPU, memory, GPU model,
  enough devices with room) score 0: the session masks them anyway, this only keeps the sum
  finite.
* ``gpu_choice(ssn, task, node, future=...)`` — the device a *shared* (fractional, one-device)
  task should use on ``node``, as the policy picks it, or ``None`` to leave the choice to the
  session (whole-device requests, CPU-only tasks, no device with room).
  :meth:`gangsched.session.Session.choose_gpus` asks the configured plugins in tier order and
  takes the first answer.

The kernels read plain arrays, so each call builds a view of the session over the rows it needs:
free CPU and memory (now, and not eating into reservations), per-device free milli-GPU scaled to
1000 per device (padding slots 0) and the node's GPU model index. A node without GPUs gets an
extra model index that no request accepts.

Two policies keep per-node state, refreshed incrementally: a node is recomputed only when its
``ssn.node_version`` moved since the plugin last looked at it.

* ``gpu-clustering`` counts the GPU tasks held on each node by shape (shared, 1, 2, ... 8
  whole devices) from the session's task arrays.
* ``fgd`` keeps the fragment terms and ``F_n`` of every node over its target workload, the
  *typical pods*. They are given by the ``typical-pods`` argument (a list of
  ``{cpu, gpus, milli, models, weight}``), or derived when the session opens from every task of
  the snapshot (shapes covering ``threshold`` % of the tasks, 95 by default).

Arguments (each may also be written with the plugin name as prefix, ``fgd.weight``):
``weight`` (1.0, a finite number in ``[0, 1e6]``, :data:`~gangsched.limits.MAX_ARG_WEIGHT`) for
all six, ``seed`` (0) for ``random``, ``typical-pods`` (each shape's ``weight`` in ``(0, 1e6]``)
and ``threshold`` for ``fgd``. Unknown keys and values out of range are a
:class:`~gangsched.errors.ConfigError`.

``random`` draws from a counter-based hash of (``seed``, the job and role of the template, the
node, the node's version in the session): the same snapshot and seed give the same choice, and a
node that changed during the cycle gets a fresh draw. Its device choice hashes the task's name
the same way.

What the plugins do not model: a task asking for several fractional devices (``count > 1`` with
``milli < 1000``) is scored 0 everywhere and left to the session's device choice; nodes without
GPU sharing are scored as if their devices could be shared.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from ..arrays import TaskTemplate
from ..config import arg_float, arg_int, check_arguments
from ..errors import ConfigError, PlacementError
from ..fragmentation import (
    MILLI,
    N_AFFINITY,
    FragTerms,
    NodeScores,
    PodRequest,
    TypicalPods,
    fit_mask,
    fragment_terms,
    node_fragment_from_terms,
    score_bestfit,
    score_dotprod,
    score_fgd,
    score_gpu_clustering,
    score_gpu_packing,
    typical_pods,
)
from ..limits import MAX_ARG_WEIGHT
from ..session import TaskState
from ..units import CPU, MEMORY

if TYPE_CHECKING:
    from ..session import Session

__all__ = [
    "SCORE_PLUGINS",
    "BestFitPlugin",
    "DotProdPlugin",
    "FgdPlugin",
    "GpuClusteringPlugin",
    "GpuPackingPlugin",
    "RandomPlugin",
    "typical_pods_argument",
]

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
B = npt.NDArray[np.bool_]
U64 = npt.NDArray[np.uint64]
Rows = npt.NDArray[np.intp]

#: Task states whose task sits on its node (pipelined tasks only hold a reservation).
_ON_NODE_STATES = (TaskState.ALLOCATED, TaskState.BOUND, TaskState.RUNNING, TaskState.RELEASING)


# -------------------------------------------------------------------------------- arguments


def _both(name: str, *keys: str) -> tuple[str, ...]:
    """A scorer's argument declaration: every key, bare and as ``<name>.<key>``."""
    return (*keys, *(f"{name}.{key}" for key in keys))


def _read_args(
    name: str, arguments: Mapping[str, object], known: Sequence[str]
) -> dict[str, object]:
    """``{key: value}`` with ``<name>.key`` folded onto ``key``; keys ``known`` (the plugin's
    declaration, see :func:`_both`) does not hold, or given twice, raise."""
    check_arguments(arguments, known, name=name)
    out: dict[str, object] = {}
    prefix = f"{name}."
    for raw, value in arguments.items():
        key = raw[len(prefix) :] if raw.startswith(prefix) else raw
        if key in out:
            raise ConfigError(
                f"given twice (as {key!r} and {prefix + key!r})",
                kind="plugin",
                name=name,
                field=f"arguments.{raw}",
            )
        out[key] = value
    return out


def _weight(name: str, args: Mapping[str, object]) -> float:
    return arg_float(args, "weight", 1.0, plugin=name, minimum=0.0, maximum=MAX_ARG_WEIGHT)


# -------------------------------------------------------------------------------- session view


@dataclass(frozen=True, slots=True)
class _View:
    """The kernels' inputs over some rows of the session."""

    free_cpu: I64  # (k,)
    free_mem: I64  # (k,)
    gpu_free: I64  # (k, max_gpus) milli of 1000 per device, padding 0
    gpu_count: I64  # (k,)
    model_idx: I64  # (k,) index into the session's models; n_models = no GPUs


def _models(ssn: Session) -> tuple[str, ...]:
    return ssn.arrays.gpu_models


def _view(ssn: Session, rows: Rows, *, future: bool = False) -> _View:
    a = ssn.arrays
    spec = a.spec
    idle = a.allocatable[rows] - ssn.used[rows]  # (k, n_resources)
    later = idle + ssn.releasing[rows] - ssn.pipelined[rows]
    free = later if future else np.minimum(idle, later)
    rows = np.asarray(rows, dtype=np.intp)
    idx, seg = a.devices_of(rows)
    cap = a.gpu_capacity[rows][seg]  # per device of the rows
    dev_now = cap - ssn.gpu_used[idx]
    dev_later = dev_now + ssn.gpu_releasing[idx] - ssn.gpu_pipelined[idx]
    dev = np.clip(dev_later if future else np.minimum(dev_now, dev_later), 0, None)
    dev = np.where(cap == MILLI, dev, dev * MILLI // np.maximum(cap, 1))
    dev = a.pad_rows(dev.astype(np.int64), rows, fill=0)  # (k, widest of the rows)
    model = a.gpu_model[rows]
    return _View(
        free_cpu=np.asarray(free[:, spec.index(CPU)], dtype=np.int64),
        free_mem=np.asarray(free[:, spec.index(MEMORY)], dtype=np.int64),
        gpu_free=np.asarray(dev, dtype=np.int64),
        gpu_count=np.asarray(a.gpu_count[rows], dtype=np.int64),
        model_idx=np.where(model < 0, len(_models(ssn)), model).astype(np.int64),
    )


def _allowed(ssn: Session, models: tuple[str, ...]) -> B | None:
    """Bool over the session's models plus the no-GPU slot; ``None`` for any model."""
    if not models:
        return None
    return np.array([m in models for m in _models(ssn)] + [False], dtype=np.bool_)


def _pod(
    ssn: Session, cpu: int, memory: int, count: int, milli: int, models: tuple[str, ...]
) -> PodRequest | None:
    """The kernels' pod, or ``None`` when they cannot represent the request."""
    if count == 0:
        return PodRequest(cpu_milli=cpu, memory=memory, num_gpu=0, gpu_milli=0)
    share = min(milli, MILLI)
    if count > 64 or (count > 1 and share < MILLI):
        return None
    return PodRequest(
        cpu_milli=cpu,
        memory=memory,
        num_gpu=count,
        gpu_milli=share,
        allowed_models=_allowed(ssn, models),
    )


def _template_pod(ssn: Session, tmpl: TaskTemplate) -> PodRequest | None:
    spec = ssn.arrays.spec
    return _pod(
        ssn,
        int(tmpl.request[spec.index(CPU)]),
        int(tmpl.request[spec.index(MEMORY)]),
        tmpl.gpu_count,
        tmpl.gpu_milli,
        tmpl.gpu_models,
    )


def _task_pod(ssn: Session, task: int) -> PodRequest | None:
    rec = ssn.snapshot.tasks[task]
    g = rec.gpu_request
    if g is None:
        return None
    return _pod(
        ssn, rec.request.get(CPU, 0), rec.request.get(MEMORY, 0), g.count, g.milli, g.models
    )


def _shared_device(
    ssn: Session, task: int, node: int, future: bool
) -> tuple[_View, PodRequest] | None:
    """The one-row view and pod for a device choice; ``None`` when the task does not share a
    device (the session then chooses)."""
    pod = _task_pod(ssn, task)
    if pod is None or not pod.is_shared:
        return None
    return _view(ssn, np.array([node], dtype=np.intp), future=future), pod


def _answer(share_gpu: int, view: _View, pod: PodRequest) -> tuple[int, ...] | None:
    if share_gpu < 0 or int(view.gpu_free[0, share_gpu]) < pod.gpu_milli:
        return None
    return (share_gpu,)


def _feasible(view: _View, pod: PodRequest) -> B:
    return fit_mask(view.free_cpu, view.free_mem, view.gpu_free, view.model_idx, pod)


def _finish(scores: NodeScores, weight: float) -> F64:
    s = scores.score
    return np.where(np.isfinite(s), s, 0.0) * weight


# -------------------------------------------------------------------------------- hashing


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _mix(x: U64) -> U64:
    """SplitMix64 finaliser, elementwise (uint64 arithmetic wraps)."""
    x = x + _GOLDEN
    x = (x ^ (x >> np.uint64(30))) * _M1
    x = (x ^ (x >> np.uint64(27))) * _M2
    out: U64 = x ^ (x >> np.uint64(31))
    return out


def _uniform(seed: int, key: str, a: I64, b: I64) -> F64:
    """Uniform floats in [0, 1), one per element of ``a``/``b``, from (seed, key, a, b)."""
    base = _mix(np.array([seed & (2**64 - 1)], dtype=np.uint64))
    base = _mix(base ^ np.uint64(zlib.crc32(key.encode("utf-8"))))
    h = _mix(base ^ _mix(a.astype(np.uint64)))
    h = _mix(h ^ _mix(b.astype(np.uint64) + np.uint64(0x632BE59BD9B4E019)))
    return (h >> np.uint64(11)).astype(np.float64) * (1.0 / 2**53)


# -------------------------------------------------------------------------------- plugins


class RandomPlugin:
    """``random``: a uniformly random feasible node (seeded); random device for shared tasks."""

    name = "random"
    known_arguments: tuple[str, ...] = _both("random", "weight", "seed")

    def __init__(self, arguments: Mapping[str, object]) -> None:
        args = _read_args(self.name, arguments, self.known_arguments)
        self.weight = _weight(self.name, args)
        self.seed = arg_int(args, "seed", 0, plugin=self.name)

    def node_score(self, ssn: Session, tmpl: TaskTemplate, rows: Rows) -> F64:
        key = f"{ssn.snapshot.jobs[tmpl.job].name}/{tmpl.role}"
        u = _uniform(self.seed, key, rows.astype(np.int64), ssn.node_version[rows])
        return u * (100.0 * self.weight)

    def gpu_choice(
        self, ssn: Session, task: int, node: int, *, future: bool
    ) -> tuple[int, ...] | None:
        found = _shared_device(ssn, task, node, future)
        if found is None:
            return None
        view, pod = found
        room = np.flatnonzero(view.gpu_free[0] >= pod.gpu_milli)
        if room.size == 0:
            return None
        version = np.full(room.size, int(ssn.node_version[node]), dtype=np.int64)
        u = _uniform(self.seed, ssn.snapshot.tasks[task].name, room.astype(np.int64), version)
        return (int(room[int(np.argmax(u))]),)


class _KernelScorer:
    """A scorer that is one kernel of :mod:`gangsched.fragmentation` over the nodes' free
    capacity: ``node_score`` scores the rows, ``gpu_choice`` picks the shared device."""

    name = ""
    known_arguments: tuple[str, ...] = ()  # each scorer: _both(name, "weight")

    def __init__(self, arguments: Mapping[str, object]) -> None:
        self.weight = _weight(self.name, _read_args(self.name, arguments, self.known_arguments))

    def _kernel(self, ssn: Session, rows: Rows, mask: B, pod: PodRequest, v: _View) -> NodeScores:
        """Scores of the node ``rows`` (``v`` is their view, ``mask`` where the pod fits)."""
        raise NotImplementedError

    def node_score(self, ssn: Session, tmpl: TaskTemplate, rows: Rows) -> F64:
        pod = _template_pod(ssn, tmpl)
        if pod is None or self.weight == 0:
            return np.zeros(rows.size)
        v = _view(ssn, rows)
        return _finish(self._kernel(ssn, rows, _feasible(v, pod), pod, v), self.weight)

    def gpu_choice(
        self, ssn: Session, task: int, node: int, *, future: bool
    ) -> tuple[int, ...] | None:
        found = _shared_device(ssn, task, node, future)
        if found is None:
            return None
        v, pod = found
        rows = np.array([node], dtype=np.intp)
        res = self._kernel(ssn, rows, np.ones(1, dtype=np.bool_), pod, v)
        return _answer(int(res.share_gpu[0]), v, pod)


class DotProdPlugin(_KernelScorer):
    """``dotprod``: the smallest dot product of normalized free and requested (CPU, GPU)."""

    name = "dotprod"
    known_arguments: tuple[str, ...] = _both("dotprod", "weight")

    def _kernel(self, ssn: Session, rows: Rows, mask: B, pod: PodRequest, v: _View) -> NodeScores:
        return score_dotprod(mask, pod, v.free_cpu, v.gpu_free)


class BestFitPlugin(_KernelScorer):
    """``bestfit``: the least weighted leftover (half CPU, half GPU) after placing the task."""

    name = "bestfit"
    known_arguments: tuple[str, ...] = _both("bestfit", "weight")

    def _kernel(self, ssn: Session, rows: Rows, mask: B, pod: PodRequest, v: _View) -> NodeScores:
        return score_bestfit(mask, pod, v.free_cpu, v.gpu_free)


class GpuPackingPlugin(_KernelScorer):
    """``gpu-packing``: partly used devices first, then used nodes, then idle nodes."""

    name = "gpu-packing"
    known_arguments: tuple[str, ...] = _both("gpu-packing", "weight")

    def _kernel(self, ssn: Session, rows: Rows, mask: B, pod: PodRequest, v: _View) -> NodeScores:
        return score_gpu_packing(mask, pod, v.gpu_free, v.gpu_count)


def _affinity_tag(count: int, milli: int) -> int:
    """Column of the affinity table: 0 shared device, k for k whole devices (8 and more: 8)."""
    if count == 1 and milli < MILLI:
        return 0
    return min(count, N_AFFINITY - 1)


class GpuClusteringPlugin(_KernelScorer):
    """``gpu-clustering``: nodes already hosting GPU tasks of the same shape first."""

    name = "gpu-clustering"
    known_arguments: tuple[str, ...] = _both("gpu-clustering", "weight")

    def __init__(self, arguments: Mapping[str, object]) -> None:
        super().__init__(arguments)
        self._tag: I64 = np.zeros(0, dtype=np.int64)  # (n_tasks,) -1 without GPUs
        self._counts: I64 = np.zeros((0, N_AFFINITY), dtype=np.int64)  # (n_nodes, 9)
        self._seen: I64 = np.zeros(0, dtype=np.int64)  # (n_nodes,) node_version last counted

    def on_session_open(self, ssn: Session) -> None:
        tags = []
        for rec in ssn.snapshot.tasks:
            g = rec.gpu_request
            tags.append(-1 if g is None else _affinity_tag(g.count, g.milli))
        self._tag = np.array(tags, dtype=np.int64)
        n = ssn.arrays.n_nodes
        self._counts = np.zeros((n, N_AFFINITY), dtype=np.int64)
        self._seen = ssn.node_version.copy()
        self._count(ssn, np.arange(n, dtype=np.intp))

    def _count(self, ssn: Session, rows: Rows) -> None:
        """Recount the GPU tasks on ``rows`` from the session's task arrays."""
        self._counts[rows] = 0
        on = np.isin(ssn.task_state, _ON_NODE_STATES) & (self._tag >= 0)
        on &= np.isin(ssn.task_node, rows)
        t = np.flatnonzero(on)
        np.add.at(self._counts, (ssn.task_node[t], self._tag[t]), 1)

    def affinity(self, ssn: Session) -> I64:
        """``(n_nodes, 9)`` GPU tasks on each node by shape, current with the session."""
        if self._seen.shape != ssn.node_version.shape:
            self.on_session_open(ssn)
        stale = np.flatnonzero(self._seen != ssn.node_version).astype(np.intp)
        if stale.size:
            self._count(ssn, stale)
            self._seen[stale] = ssn.node_version[stale]
        return self._counts

    def _kernel(self, ssn: Session, rows: Rows, mask: B, pod: PodRequest, v: _View) -> NodeScores:
        return score_gpu_clustering(mask, pod, v.gpu_free, self.affinity(ssn)[rows])


# -------------------------------------------------------------------------------- fgd


def typical_pods_argument(typical: TypicalPods, models: Sequence[str]) -> list[dict[str, object]]:
    """The ``typical-pods`` argument of ``fgd`` for ``typical`` (whose ``allowed`` columns are
    ``models``): one ``{cpu, gpus, milli, models, weight}`` mapping per shape, in order.

    ``models`` lists the accepted GPU models, empty when every model of ``models`` is accepted.
    """
    if typical.allowed.shape[1] != len(models):
        raise ConfigError(
            f"{typical.allowed.shape[1]} model columns but {len(models)} model names",
            kind="typical pods",
            field="models",
        )
    out: list[dict[str, object]] = []
    for i in range(len(typical)):
        allowed = typical.allowed[i]
        names = (
            [] if bool(allowed.all()) else [m for m, ok in zip(models, allowed, strict=True) if ok]
        )
        out.append(
            {
                "cpu": int(typical.cpu_milli[i]),
                "gpus": int(typical.num_gpu[i]),
                "milli": int(typical.gpu_milli[i]),
                "models": names,
                "weight": float(typical.prob[i]),
            }
        )
    return out


def _typical_from_argument(
    raw: object, name: str
) -> tuple[list[tuple[int, int, int, tuple[str, ...], float]], float]:
    """Parse the ``typical-pods`` list; returns the shapes and the weight total."""
    field = "arguments.typical-pods"
    if isinstance(raw, str | bytes) or not isinstance(raw, Sequence) or not raw:
        raise ConfigError(
            "expected a non-empty list of {cpu, gpus, milli, models, weight}",
            kind="plugin",
            name=name,
            field=field,
        )
    shapes: list[tuple[int, int, int, tuple[str, ...], float]] = []
    for i, item in enumerate(raw):
        where = f"{field}[{i}]"
        if not isinstance(item, Mapping):
            raise ConfigError("expected a mapping", kind="plugin", name=name, field=where)
        unknown = sorted(set(item) - {"cpu", "gpus", "milli", "models", "weight"})
        if unknown:
            raise ConfigError(
                "unknown key", kind="plugin", name=name, field=f"{where}.{unknown[0]}"
            )
        cpu = arg_int(item, "cpu", 0, plugin=name)
        gpus = arg_int(item, "gpus", 0, plugin=name)
        milli = arg_int(item, "milli", MILLI if gpus else 0, plugin=name)
        try:
            weight = arg_float(item, "weight", 1.0, plugin=name, maximum=MAX_ARG_WEIGHT)
        except ConfigError as exc:
            raise ConfigError(
                exc.detail, kind="plugin", name=name, field=f"{where}.weight"
            ) from None
        chosen = item.get("models", ())
        if isinstance(chosen, str | bytes) or not isinstance(chosen, Sequence):
            raise ConfigError(
                "expected a list of model names", kind="plugin", name=name, field=f"{where}.models"
            )
        try:
            PodRequest(cpu_milli=cpu, memory=0, num_gpu=gpus, gpu_milli=milli)
        except PlacementError as exc:
            raise ConfigError(exc.detail, kind="plugin", name=name, field=where) from None
        if weight <= 0:
            raise ConfigError(
                f"weight must be > 0, got {weight}", kind="plugin", name=name, field=where
            )
        shapes.append((cpu, gpus, milli, tuple(str(m) for m in chosen), weight))
    return shapes, sum(s[4] for s in shapes)


class FgdPlugin:
    """``fgd``: fragmentation gradient descent, the smallest growth of the node's fragment."""

    name = "fgd"
    known_arguments: tuple[str, ...] = _both("fgd", "weight", "typical-pods", "threshold")

    def __init__(self, arguments: Mapping[str, object]) -> None:
        args = _read_args(self.name, arguments, self.known_arguments)
        self.weight = _weight(self.name, args)
        self.threshold = arg_float(args, "threshold", 95.0, plugin=self.name)
        if not 0 < self.threshold <= 100:
            raise ConfigError(
                f"must be in (0, 100], got {self.threshold}",
                kind="plugin",
                name=self.name,
                field="arguments.threshold",
            )
        self._given = args.get("typical-pods")
        if self._given is not None:
            _typical_from_argument(self._given, self.name)  # fail at config time
        self.typical: TypicalPods | None = None
        self._terms: FragTerms | None = None
        self._frag: F64 = np.zeros(0)  # (n_nodes,)
        self._seen: I64 = np.zeros(0, dtype=np.int64)  # (n_nodes,)

    def on_session_open(self, ssn: Session) -> None:
        models = _models(ssn)
        self.typical = (
            self._typical_given(models) if self._given is not None else self._typical_derived(ssn)
        )
        rows = np.arange(ssn.arrays.n_nodes, dtype=np.intp)
        v = _view(ssn, rows)
        self._terms = fragment_terms(v.gpu_free, self.typical)
        self._frag = node_fragment_from_terms(v.free_cpu, v.model_idx, self._terms, self.typical)
        self._seen = ssn.node_version.copy()

    def _typical_given(self, models: tuple[str, ...]) -> TypicalPods:
        shapes, total = _typical_from_argument(self._given, self.name)
        # Weights that already sum to 1 (as typical_pods_argument writes them) are kept bit for
        # bit, so scores match the kernels' exactly.
        scale = 1.0 if abs(total - 1.0) <= 1e-12 else total
        allowed = np.zeros((len(shapes), len(models) + 1), dtype=np.bool_)
        for i, (_, _, _, names, _) in enumerate(shapes):
            allowed[i, : len(models)] = [not names or m in names for m in models]
        return TypicalPods(
            cpu_milli=np.array([s[0] for s in shapes], dtype=np.int64),
            num_gpu=np.array([s[1] for s in shapes], dtype=np.int64),
            gpu_milli=np.array([s[2] for s in shapes], dtype=np.int64),
            allowed=allowed,
            prob=np.array([s[4] / scale for s in shapes], dtype=np.float64),
        )

    def _typical_derived(self, ssn: Session) -> TypicalPods:
        models = _models(ssn)
        cpu, num, milli, spec_names = [], [], [], []
        for rec in ssn.snapshot.tasks:
            g = rec.gpu_request
            count = 0 if g is None else g.count
            share = 0 if g is None else min(g.milli, MILLI)
            if count > 1 and share < MILLI:
                continue  # several fractional devices: not a kernel shape
            cpu.append(rec.request.get(CPU, 0))
            num.append(count)
            milli.append(share)
            spec_names.append("|".join(g.models) if g is not None else "")
        if not cpu:  # nothing to learn from: an idle GPU counts as fragment for no one
            cpu, num, milli, spec_names = [0], [1], [MILLI], [""]
        specs = sorted(set(spec_names) | {""})
        index = {s: i for i, s in enumerate(specs)}
        allowed = np.zeros((len(specs), len(models) + 1), dtype=np.bool_)
        for i, s in enumerate(specs):
            wanted = [p for p in s.split("|") if p]
            allowed[i, : len(models)] = [not wanted or m in wanted for m in models]
        return typical_pods(
            np.array(cpu, dtype=np.int64),
            np.array(num, dtype=np.int64),
            np.array(milli, dtype=np.int64),
            np.array([index[s] for s in spec_names], dtype=np.int64),
            allowed,
            threshold_pct=self.threshold,
        )

    def _refresh(self, ssn: Session) -> tuple[TypicalPods, FragTerms]:
        """Bring terms and ``F_n`` up to date on the nodes changed since the last call."""
        if self.typical is None or self._seen.shape != ssn.node_version.shape:
            self.on_session_open(ssn)
        assert self.typical is not None and self._terms is not None
        stale = np.flatnonzero(self._seen != ssn.node_version).astype(np.intp)
        if stale.size:
            v = _view(ssn, stale)
            part = fragment_terms(v.gpu_free, self.typical)
            self._terms.fits_count[stale] = part.fits_count
            self._terms.small_sum[stale] = part.small_sum
            self._terms.idle[stale] = part.idle
            self._frag[stale] = node_fragment_from_terms(
                v.free_cpu, v.model_idx, part, self.typical
            )
            self._seen[stale] = ssn.node_version[stale]
        return self.typical, self._terms

    def node_fragment(self, ssn: Session) -> F64:
        """``F_n`` ``(n_nodes,)`` of every node, current with the session (milli-GPU)."""
        self._refresh(ssn)
        return self._frag

    def node_score(self, ssn: Session, tmpl: TaskTemplate, rows: Rows) -> F64:
        pod = _template_pod(ssn, tmpl)
        if pod is None or self.weight == 0:
            return np.zeros(rows.size)
        typical, terms = self._refresh(ssn)
        v = _view(ssn, rows)
        sub = FragTerms(
            fits_count=terms.fits_count[rows],
            small_sum=terms.small_sum[rows],
            idle=terms.idle[rows],
        )
        scores = score_fgd(
            _feasible(v, pod),
            pod,
            v.free_cpu,
            v.gpu_free,
            v.model_idx,
            typical,
            terms=sub,
            frag=self._frag[rows],
        )
        return _finish(scores, self.weight)

    def gpu_choice(
        self, ssn: Session, task: int, node: int, *, future: bool
    ) -> tuple[int, ...] | None:
        found = _shared_device(ssn, task, node, future)
        if found is None:
            return None
        v, pod = found
        typical, _ = self._refresh(ssn)
        res = score_fgd(
            np.ones(1, dtype=np.bool_), pod, v.free_cpu, v.gpu_free, v.model_idx, typical
        )
        return _answer(int(res.share_gpu[0]), v, pod)


#: The six plugins by name, ready for :meth:`gangsched.registry.Registry.register_plugin`.
SCORE_PLUGINS: Mapping[str, type] = {
    cls.name: cls
    for cls in (
        RandomPlugin,
        DotProdPlugin,
        GpuClusteringPlugin,
        GpuPackingPlugin,
        BestFitPlugin,
        FgdPlugin,
    )
}
