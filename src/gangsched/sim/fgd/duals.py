"""Device prices for shared-GPU pods: which hole a share should fill, from a cutting-stock LP.

Theory of operation
-------------------
Seen one device at a time, the GPU side of the study is bin packing: every device is a bin of
1000 milli-GPU, a shared pod an item of its share, a whole-GPU pod an item of 1000. Given the
expected number ``N_s`` of items of each size among the arrivals (the workload file's GPU pods,
scaled so that their total is the cluster's GPU capacity: the 100 % point) and ``D`` devices,
the LP over *patterns* (multisets of sizes summing to at most 1000)::

    maximise sum_j size(j) x_j   s.t.  sum_j a_sj x_j <= N_s  (dual pi_s),  sum_j x_j <= D  (mu)

is solved with HiGHS. With ``d_s = s - pi_s``, the net worth of an item of size ``s``, every
pattern satisfies ``sum_s a_sj d_s <= mu`` and the patterns of the optimum reach it. The worth
of a hole of ``g`` free milli-GPU is the best completion ``C(g) = max sum_{s in M} d_s`` over
multisets ``M`` that fit in ``g`` (an unbounded knapsack over 0..1000), and putting an item
of size ``s`` into a hole ``g`` *loses*::

    loss_s(g) = C(g) - d_s - C(g - s)  >= 0

which is zero exactly when the hole can still end in an optimal pattern. On the default
workload the optimum pairs 650 with 320, 470 with 470 or 460, 590 with 370, 550 with 230 + 220,
810 with 160 or 110, and prefers rejecting 810s to rejecting whole GPUs (``pi_810 = 0``).
CPU, memory and models are not in this LP: it prices holes only, the FGD score keeps the node
side.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import numpy.typing as npt
from scipy.optimize import linprog
from scipy.sparse import csc_matrix

from gangsched.fragmentation.measure import MILLI
from gangsched.io.openb import NodeTable, PodTable

__all__ = ["DeviceDuals", "device_duals", "model_scarcity"]

F64 = npt.NDArray[np.float64]
#: Most patterns the device LP enumerates (beyond it, the smallest sizes are dropped).
MAX_PATTERNS = 200_000


class DeviceDuals:
    """``loss(s)``: the ``(1001,)`` loss of an item of size ``s`` in each hole size."""

    def __init__(self, worth: dict[int, float], completion: F64) -> None:
        self.worth = worth
        self.completion = completion
        self._loss: dict[int, F64] = {}

    def loss(self, size: int) -> F64:
        out = self._loss.get(size)
        if out is None:
            g = np.arange(MILLI + 1)
            c = self.completion
            d = self.worth.get(size, 0.0)
            raw = c - d - c[np.maximum(g - size, 0)]
            out = self._loss[size] = np.where(g >= size, np.maximum(raw, 0.0), np.inf)
        return out


def _patterns(sizes: list[int]) -> list[tuple[int, ...]]:
    out: list[tuple[int, ...]] = []
    cur: list[int] = []

    def rec(i: int, left: int) -> None:
        if cur:
            out.append(tuple(cur))
        if len(out) > MAX_PATTERNS:
            return
        for j in range(i, len(sizes)):
            if sizes[j] <= left:
                cur.append(j)
                rec(j, left - sizes[j])
                cur.pop()

    rec(0, MILLI)
    return out


def _counts(pods: PodTable) -> Counter[int]:
    cnt: Counter[int] = Counter()
    for n, g in zip(pods.num_gpu.tolist(), pods.gpu_milli.tolist(), strict=True):
        if n == 0:
            continue
        if g >= MILLI:
            cnt[MILLI] += n
        else:
            cnt[g] += 1
    return cnt


def device_duals(pods: PodTable, devices: int) -> DeviceDuals:
    """The device LP of ``pods`` (see the module doc) on ``devices`` devices."""
    cnt = _counts(pods)
    total = sum(s * c for s, c in cnt.items())
    if not cnt or devices <= 0 or total <= 0:
        return DeviceDuals({}, np.zeros(MILLI + 1))
    scale = devices * MILLI / total
    sizes = sorted(cnt, reverse=True)
    pats = _patterns(sizes)
    while len(pats) > MAX_PATTERNS and len(sizes) > 1:
        sizes = sizes[:-1]
        pats = _patterns(sizes)
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    obj = np.zeros(len(pats))
    for j, p in enumerate(pats):
        for s, k in Counter(p).items():
            rows.append(s)
            cols.append(j)
            vals.append(float(k))
        rows.append(len(sizes))
        cols.append(j)
        vals.append(1.0)
        obj[j] = -float(sum(sizes[s] for s in p))
    a = csc_matrix((vals, (rows, cols)), shape=(len(sizes) + 1, len(pats)))
    b = np.array([cnt[s] * scale for s in sizes] + [float(devices)])
    res = linprog(obj, A_ub=a, b_ub=b, bounds=(0, None), method="highs")
    if res.status != 0:  # pragma: no cover - a bounded feasible LP
        return DeviceDuals({}, np.zeros(MILLI + 1))
    pi = -np.asarray(res.ineqlin.marginals, dtype=np.float64)[: len(sizes)]
    worth = {s: float(s) - float(p) for s, p in zip(sizes, pi, strict=True)}
    comp = np.zeros(MILLI + 1)
    for g in range(1, MILLI + 1):
        best = comp[g - 1]
        for s in sizes:
            if s <= g:
                best = max(best, comp[g - s] + worth[s])
        comp[g] = best
    return DeviceDuals(worth, comp)


def model_scarcity(nodes: NodeTable, pods: PodTable) -> F64:
    """``(n_models,)`` how much of each model's GPUs the pods that need it want, 0 to 1.

    The GPU demand of every GPU-model constraint other than "any model" is spread over the
    models it accepts in proportion to their GPU counts; a model's scarcity is the demand it
    receives over its GPU count, capped at 1. A pod that could run elsewhere and takes a GPU of
    a scarce model takes it from a pod that cannot.
    """
    n_models = len(nodes.models)
    cap = np.zeros(n_models)
    np.add.at(cap, nodes.model_idx, nodes.gpu_count.astype(np.float64))
    gpu = pods.num_gpu.astype(np.float64) * pods.gpu_milli / MILLI
    demand = np.zeros(len(pods.specs))
    np.add.at(demand, pods.spec_idx, gpu)
    allowed = pods.spec_allowed(nodes.models) & (cap > 0)[None, :]  # (n_specs, n_models)
    want = np.zeros(n_models)
    for spec in range(len(pods.specs)):
        ok = allowed[spec]
        if not pods.spec_models(spec) or not ok.any() or demand[spec] <= 0:
            continue
        want[ok] += demand[spec] * cap[ok] / cap[ok].sum()
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(cap > 0, want / cap, 0.0)
    return np.asarray(np.clip(out, 0.0, 1.0), dtype=np.float64)
