"""The placement loop of the FGD study: pods placed one at a time on incrementally kept arrays.

Theory of operation
-------------------
:func:`place_sequence` places an arrival sequence onto the empty cluster under one policy. It
gives the same placements, device choices and records as scoring every node with the kernels of
:mod:`gangsched.fragmentation` for every pod, at a fraction of the cost, because after a placement
only the chosen node changes. Per node it keeps, updated on that one row:

* free CPU, memory and per-device milli-GPU; the idle milli-GPU, the number of fully free
  devices and the largest device free (so the fit test reads no device axis);
* the GPU pods held by shape (GpuClustering) and the number of shapes held;
* the fragment terms and ``F_n`` against the typical pods;
* a *state id*: nodes with the same free CPU, GPU model and device frees share one id, and a
  state, once numbered, never changes meaning.

FGD's score of a pod on a node is a function of the pod's shape (CPU, GPU count and share) and
the node's state only, so it is computed once per (shape, state) and remembered: a pod's scores
are looked up by state id, and only states not yet scored for that shape are computed, each on
one node that holds it now (:func:`gangsched.fragmentation.fgd_rows` computes every row on its
own, so the value is the one the whole-cluster kernel gives). On the default workload about
6,000 states occur and 150,000 (shape, state) pairs are scored, against 8 million node scores
for the kernel run.

A policy this module has no fast form for is scored by its kernel from
:data:`gangsched.fragmentation.POLICIES` over a :class:`~gangsched.fragmentation.ClusterView`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields

import numpy as np

from gangsched._types import BOOL as B
from gangsched._types import F64, I64
from gangsched.fragmentation.measure import (
    MAX_SPEC_GPU,
    MILLI,
    N_AFFINITY,
    ClusterView,
    FragTerms,
    IntSource,
    NodeScores,
    PodRequest,
    TypicalPods,
    _fragment,
    choose_node,
    device_indices,
    enough_rooms,
    fit_rooms,
    fragment_terms,
    node_fragment_from_terms,
    room_mask,
    typical_pods,
)
from gangsched.fragmentation.policies import (
    POLICIES,
    _best_fit_gpu,
    bestfit_raw,
    clustering_raw,
    dotprod_raw,
    fgd_rows,
    packing_raw,
    policy_kernel,
)
from gangsched.io.openb import NodeTable, PodTable

__all__ = [
    "FAST_POLICIES",
    "Arrival",
    "FastScorer",
    "Placed",
    "Records",
    "StudyArrays",
    "arrivals",
    "place_sequence",
    "workload_typical",
]

_BIG = np.iinfo(np.int64).max
_VIEW_FIELDS = tuple(f.name for f in fields(ClusterView))


class StudyArrays:
    """The per-node arrays of one run, kept current one row at a time (see the module doc)."""

    def __init__(self, nodes: NodeTable, typical: TypicalPods) -> None:
        n = len(nodes)
        width = max(nodes.max_gpus, 1)
        self.n = n
        self.typical = typical
        self.free_cpu: I64 = np.array(nodes.cpu_milli, dtype=np.int64)
        self.free_mem: I64 = np.array(nodes.memory_mib, dtype=np.int64)
        self.gpu_count: I64 = np.array(nodes.gpu_count, dtype=np.int64)
        self.model_idx: I64 = np.array(nodes.model_idx, dtype=np.int64)
        real = np.arange(width)[None, :] < self.gpu_count[:, None]
        self.gpu_cap: I64 = np.where(real, MILLI, 0).astype(np.int64)
        self.gpu_free: I64 = self.gpu_cap.copy()
        self.n_whole: I64 = room_mask(self.gpu_free, MILLI).sum(axis=1)  # whole devices free
        self.max_free: I64 = self.gpu_free.max(axis=1) if n else np.zeros(0, dtype=np.int64)
        self.affinity: I64 = np.zeros((n, N_AFFINITY), dtype=np.int64)
        self.n_tags: I64 = np.zeros(n, dtype=np.int64)
        self.terms: FragTerms = fragment_terms(self.gpu_free, typical)
        self.idle: I64 = self.terms.idle  # the same array, kept by the terms' update
        self.frag: F64 = node_fragment_from_terms(
            self.free_cpu, self.model_idx, self.terms, typical
        )
        self.idle_total = int(self.idle.sum())
        self._states: dict[tuple[int, ...], int] = {}
        self.state: I64 = np.array([self._state_of(i) for i in range(n)], dtype=np.int64)
        self._allowed: dict[int, B] = {}
        self.rank: I64 | None = None  # the tie order of the run, when it has one
        self._tm_col: I64 = typical.gpu_milli[:, None]
        n_models = int(self.model_idx.max()) + 1 if n else 0
        self._access: B = typical.access(np.arange(n_models, dtype=np.int64))

    def _state_of(self, node: int) -> int:
        key = (int(self.free_cpu[node]), int(self.model_idx[node]), *self.gpu_free[node].tolist())
        return self._states.setdefault(key, len(self._states))

    @property
    def n_states(self) -> int:
        return len(self._states)

    def view(self) -> ClusterView:
        """The kept arrays a kernel reads, under the names of the view's fields."""
        return ClusterView(**{name: getattr(self, name) for name in _VIEW_FIELDS})

    def fits(self, pod: PodRequest, spec: int) -> B:
        """The kernels' fit mask (:func:`~gangsched.fragmentation.fit_mask`) from the kept rows:
        the rule's :func:`~gangsched.fragmentation.measure.fit_rooms` over whether enough
        devices have room, read off the kept aggregates. A whole-device pod's devices with
        room are the fully free ones (``n_whole``, :func:`enough_rooms` of them); a shared pod
        asks one device, and some device has room for its take exactly when the roomiest one
        has (``max_free``: the rule's room is "at least the take")."""
        if pod.num_gpu == 0:
            return fit_rooms(self.free_cpu, self.free_mem, None, None, pod)
        allowed = None
        if pod.allowed_models is not None:
            allowed = self._allowed.get(spec)
            if allowed is None:
                allowed = self._allowed[spec] = pod.allowed_models[self.model_idx]
        if pod.is_shared:
            enough = room_mask(self.max_free, pod.gpu_milli)
        else:
            enough = enough_rooms(pod, self.n_whole)
        return fit_rooms(self.free_cpu, self.free_mem, allowed, enough, pod)

    def place(self, node: int, pod: PodRequest, devs: tuple[int, ...]) -> None:
        """Take ``pod`` onto ``node`` (devices ``devs``) and refresh that row's aggregates."""
        self.free_cpu[node] -= pod.cpu_milli
        self.free_mem[node] -= pod.memory
        t = self.terms
        if devs:
            row = self.gpu_free[node]
            row[list(devs)] -= pod.gpu_milli
            tag = pod.affinity
            if self.affinity[node, tag] == 0:
                self.n_tags[node] += 1
            self.affinity[node, tag] += 1
            self.n_whole[node] = np.count_nonzero(room_mask(row, MILLI))  # room for a whole device
            self.max_free[node] = int(row.max())
            # fragment_terms on one row, without building the (1, m, G) arrays' wrappers
            ge = row >= self._tm_col  # (m, G)
            t.fits_count[node] = ge.sum(axis=1)
            t.small_sum[node] = np.where(ge, 0, row).sum(axis=1)
            idle = int(row.sum())
            self.idle_total += idle - int(self.idle[node])
            self.idle[node] = idle
        sl = slice(node, node + 1)
        self.frag[node] = _fragment(
            self.free_cpu[sl],
            t.fits_count[sl],
            t.small_sum[sl],
            self.idle[sl],
            self._access[self.model_idx[node]][None, :],
            self.typical,
        )[0]
        self.state[node] = self._state_of(node)


#: A fast scorer: (arrays, pod, shape key, feasible, rng) -> scores. The shared device it
#: returns is used only on the chosen node, so a scorer may leave it -1 and let
#: :func:`_device` pick the tightest device there.
FastScorer = Callable[
    ["StudyArrays", PodRequest, tuple[int, int, int, int], B, IntSource], NodeScores
]


class _FgdCache:
    """FGD's scores per (pod shape, node state), computed once each (see the module doc)."""

    def __init__(self, *, exact: bool = False) -> None:
        self.tables: dict[tuple[int, int, int, int], tuple[F64, I64]] = {}
        self.exact = exact  # fgd_rows' untruncated score

    def scores(
        self, c: StudyArrays, pod: PodRequest, key: tuple[int, int, int, int]
    ) -> tuple[F64, I64]:
        """``(score, share)`` ``(n_nodes,)`` of every node (whether the pod fits or not)."""
        need = c.n_states
        key = (*key[:3], 0)  # the score does not depend on the accepted models
        tab = self.tables.get(key)
        if tab is None or tab[0].shape[0] < need:
            size = max(need, 2 * (tab[0].shape[0] if tab is not None else 0), 64)
            score = np.full(size, np.nan)
            share = np.full(size, -1, dtype=np.int64)
            if tab is not None:
                score[: tab[0].shape[0]] = tab[0]
                share[: tab[1].shape[0]] = tab[1]
            tab = self.tables[key] = (score, share)
        score, share = tab
        vals = score[c.state]
        missing = np.isnan(vals)
        if missing.any():
            states, first = np.unique(c.state[missing], return_index=True)
            reps = np.flatnonzero(missing)[first]
            s_new, d_new = fgd_rows(
                reps,
                pod,
                c.free_cpu,
                c.gpu_free,
                c.model_idx,
                c.typical,
                c.terms,
                c.frag,
                exact=self.exact,
            )
            score[states] = s_new
            share[states] = d_new
            vals = score[c.state]
        return vals, share[c.state]


def _masked(values: F64, feasible: B) -> F64:
    return np.where(feasible, values, -np.inf)


_NO_SHARE: dict[int, I64] = {}


def _no_share(n: int) -> I64:
    # One read-only "-1 everywhere" array per cluster size: only the chosen node's entry is read.
    arr = _NO_SHARE.get(n)
    if arr is None:
        arr = _NO_SHARE[n] = np.full(n, -1, dtype=np.int64)
        arr.flags.writeable = False
    return arr


def _fast_dotprod(
    c: StudyArrays, pod: PodRequest, key: tuple[int, int, int, int], f: B, rng: IntSource
) -> NodeScores:
    return NodeScores(_masked(np.trunc(dotprod_raw(pod, c.free_cpu, c.idle)), f), _no_share(c.n))


def _fast_bestfit(
    c: StudyArrays, pod: PodRequest, key: tuple[int, int, int, int], f: B, rng: IntSource
) -> NodeScores:
    return NodeScores(_masked(np.trunc(bestfit_raw(pod, c.free_cpu, c.idle)), f), _no_share(c.n))


def _fast_clustering(
    c: StudyArrays, pod: PodRequest, key: tuple[int, int, int, int], f: B, rng: IntSource
) -> NodeScores:
    tag = pod.affinity
    if tag < 0:
        return NodeScores(_masked(np.zeros(c.n), f), _no_share(c.n))
    raw = clustering_raw(c.idle, c.affinity[:, tag] > 0, c.n_tags)
    return NodeScores(_masked(raw, f), _no_share(c.n))


def _fast_packing(
    c: StudyArrays, pod: PodRequest, key: tuple[int, int, int, int], f: B, rng: IntSource
) -> NodeScores:
    if pod.num_gpu == 0:
        return NodeScores(_masked(np.zeros(c.n), f), _no_share(c.n))
    tight = np.zeros(c.n, dtype=np.int64)
    if pod.is_shared:
        room = room_mask(c.gpu_free, pod.gpu_milli)
        tight = np.where(
            room_mask(c.max_free, pod.gpu_milli), np.where(room, c.gpu_free, _BIG).min(1), 0
        )
    raw = packing_raw(pod, c.n_whole, c.gpu_count, tight)
    return NodeScores(_masked(raw, f), _no_share(c.n))


def _fast_random(
    c: StudyArrays, pod: PodRequest, key: tuple[int, int, int, int], f: B, rng: IntSource
) -> NodeScores:
    return POLICIES["random"](c.view(), pod, f, rng)


def _fgd_scorer(tie: Callable[[StudyArrays, PodRequest], F64] | None = None) -> FastScorer:
    cache = _FgdCache()

    def run(
        c: StudyArrays, pod: PodRequest, key: tuple[int, int, int, int], f: B, rng: IntSource
    ) -> NodeScores:
        vals, share = cache.scores(c, pod, key)
        score = _masked(vals, f)
        if tie is not None:
            score = np.where(f, score + tie(c, pod), score)
        return NodeScores(score, share)

    return run


def _pack_tie(c: StudyArrays, pod: PodRequest) -> F64:
    # score_fgd_pack's tie term, from the kept idle totals.
    idle_after = c.idle - pod.total_gpu_milli
    return np.asarray(
        0.999 * (1.0 - np.clip(idle_after, 0, MAX_SPEC_GPU) / (MAX_SPEC_GPU + 1.0)),
        dtype=np.float64,
    )


#: Policies with a fast form; each call makes a fresh scorer (FGD's cache is per run).
FAST_POLICIES: dict[str, Callable[[], FastScorer]] = {
    "random": lambda: _fast_random,
    "dotprod": lambda: _fast_dotprod,
    "gpu-clustering": lambda: _fast_clustering,
    "gpu-packing": lambda: _fast_packing,
    "bestfit": lambda: _fast_bestfit,
    "fgd": _fgd_scorer,
    "fgd-pack": lambda: _fgd_scorer(_pack_tie),
}


def _kernel_scorer(policy: str) -> FastScorer:
    fn = policy_kernel(policy)

    def run(
        c: StudyArrays, pod: PodRequest, key: tuple[int, int, int, int], f: B, rng: IntSource
    ) -> NodeScores:
        return fn(c.view(), pod, f, rng)

    return run


def _device(c: StudyArrays, node: int, pod: PodRequest, share: int) -> tuple[int, ...]:
    if pod.is_shared and share < 0:
        share = int(_best_fit_gpu(c.gpu_free[node : node + 1], pod)[0])
    return device_indices(c.gpu_free[node], pod, share)


@dataclass(frozen=True, slots=True)
class Placed:
    """What :func:`place_sequence` recorded (entry 0 of each record: the empty cluster)."""

    failed: int
    arrived: I64  # (k + 1,)
    used: I64
    frag: F64
    idle: I64
    placement: I64  # (k,) -1 = failed
    devices: I64  # (k,) bit i: device i
    max_gpu_used: int
    cpu_overcommit: bool


#: The records of :class:`Placed` that :class:`Records` keeps, by the same names.
_PER_ARRIVAL = ("arrived", "used", "frag", "idle", "placement", "devices")


class Records:
    """The records a placement loop keeps while it places ``k`` arrivals on ``c``: entry 0 of
    each per-state record is the cluster before any of them, entry ``i`` the state after
    arrival ``i``; :meth:`put` places an arrival and records where it went, :meth:`placed`
    turns the records into :class:`Placed` (the failed count is the arrivals never put)."""

    __slots__ = ("c", "take", *_PER_ARRIVAL)

    def __init__(self, c: StudyArrays, arrivals: list[Arrival]) -> None:
        self.c = c
        k = len(arrivals)
        self.take = np.array([a.req.total_gpu_milli for a in arrivals], dtype=np.int64)
        # milli-GPU arrived and held after each arrival: summed by placed()
        self.arrived = np.zeros(k + 1, dtype=np.int64)
        self.used = np.zeros(k + 1, dtype=np.int64)
        self.frag = np.zeros(k + 1, dtype=np.float64)
        self.idle = np.zeros(k + 1, dtype=np.int64)
        self.frag[0] = float(c.frag.sum())
        self.idle[0] = c.idle_total
        self.placement = np.full(k, -1, dtype=np.int64)
        self.devices = np.zeros(k, dtype=np.int64)

    def after(self, step: int) -> None:
        """The state after arrival ``step`` (counted from 0): the cluster's fragment and idle
        milli-GPU now."""
        self.frag[step + 1] = float(self.c.frag.sum())
        self.idle[step + 1] = self.c.idle_total

    def put(self, step: int, node: int, pod: PodRequest, devs: tuple[int, ...]) -> None:
        """Place arrival ``step`` on ``node`` (devices ``devs``) and record where it went."""
        self.c.place(node, pod, devs)
        self.placement[step] = node
        self.devices[step] = sum(1 << d for d in devs)

    def placed(self) -> Placed:
        c = self.c
        self.arrived[1:] = np.cumsum(self.take)
        self.used[1:] = np.cumsum(np.where(self.placement >= 0, self.take, 0))
        return Placed(
            failed=int((self.placement < 0).sum()),
            max_gpu_used=int((c.gpu_cap - c.gpu_free).max()) if c.n else 0,
            cpu_overcommit=bool((c.free_cpu < 0).any() or (c.free_mem < 0).any()),
            **{name: getattr(self, name) for name in _PER_ARRIVAL},
        )


def workload_typical(pods: PodTable, nodes: NodeTable) -> TypicalPods:
    """The typical pods of a workload file (every pod of it, the study's target workload)."""
    return typical_pods(
        np.asarray(pods.cpu_milli),
        np.asarray(pods.num_gpu),
        np.asarray(pods.gpu_milli),
        np.asarray(pods.spec_idx),
        pods.spec_allowed(nodes.models),
    )


@dataclass(frozen=True, slots=True)
class Arrival:
    """One arrival: its request, GPU-model spec index and shape key (the scorers' cache key)."""

    req: PodRequest
    spec: int
    key: tuple[int, int, int, int]


def arrivals(pods: PodTable, nodes: NodeTable, order: I64) -> list[Arrival]:
    """The arrivals ``pods[order]`` (one object per distinct pod index)."""
    allowed = pods.spec_allowed(nodes.models)
    uniq = np.unique(order)
    columns = (pods.cpu_milli, pods.memory_mib, pods.num_gpu, pods.gpu_milli, pods.spec_idx)
    made: dict[int, Arrival] = {}
    for i, cpu, mem, n_gpu, milli, spec in zip(
        uniq.tolist(), *(np.asarray(col)[uniq].tolist() for col in columns), strict=True
    ):
        models = None if spec == 0 and not pods.specs[0] else allowed[spec]
        req = PodRequest(cpu, mem, n_gpu, milli, models)
        made[i] = Arrival(req, spec, (cpu, n_gpu, milli, spec))
    return [made[i] for i in order.tolist()]


def place_sequence(
    nodes: NodeTable,
    pods: PodTable,
    policy: str | FastScorer,
    order: I64,
    rank: I64 | None,
    source: IntSource,
    typical: TypicalPods,
) -> Placed:
    """Place ``pods[order]`` one at a time under ``policy`` (a name or a fast scorer)."""
    if isinstance(policy, str):
        make = FAST_POLICIES.get(policy)
        scorer = make() if make is not None else _kernel_scorer(policy)
    else:
        scorer = policy
    c = StudyArrays(nodes, typical)
    c.rank = rank
    pods_in_order = arrivals(pods, nodes, order)
    records = Records(c, pods_in_order)
    for step, pod in enumerate(pods_in_order):
        req = pod.req
        feasible = c.fits(req, pod.spec)
        node = -1
        if feasible.any():
            verdict = scorer(c, req, pod.key, feasible, source)
            node = choose_node(verdict, rank)
        if node >= 0:
            records.put(step, node, req, _device(c, node, req, int(verdict.share_gpu[node])))
        records.after(step)
    return records.placed()
