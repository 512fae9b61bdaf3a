"""The placement limit per node: a configuration LP by column generation, and a MILP packing.

Theory of operation
-------------------
The aggregate bound of :func:`gangsched.sim.fgd.bounds.gpu_bound` treats each class of identical
nodes
as one large node (with cuts). Here each node is packed on its own. A *configuration* of a node
class is a multiset of GPU pod shapes that fits one node of the class: summed CPU and memory
within the node's, whole-GPU pods on distinct free devices, shared pods packed onto the other
devices with at most 1000 milli-GPU each. With ``z[j]`` nodes using configuration ``j``:

    maximise   sum_j gpu(j) z[j]
    subject to sum_{j of class c} z[j] <= n_c            (nodes of the class)   dual mu_c
               sum_j a[s, j] z[j]      <= N_s            (arrived pods of shape s) dual pi_s

Every placement of the arrived pods is a solution with integer ``z``, so the LP optimum bounds
the GPU any placement can allocate. There are far too many configurations to list; *column
generation* starts from the configurations of a greedy packing and adds, per class, the
configuration of largest reduced cost ``sum_s (gpu_s - pi_s) a_s - mu_c``, found by a small
integer program over one node (per-device share variables, a binary per device taken by whole
pods), solved with HiGHS (:func:`scipy.optimize.milp`). At any iteration

    bound = master LP + sum_c n_c * max(0, best reduced cost of class c)

is a valid upper bound (Lagrangian relaxation of the shape rows with the master's duals); with
the pricing problems' proven bounds in place of their optima it stays valid when a pricing
solve stops at its time limit. When no class has a positive reduced cost the bound is the LP
optimum (``converged``).

**The packing.** The restricted master, with ``z`` integer, is solved as a MILP over the
columns found (a greedy packing is among its solutions, so it is never worse than the greedy
packing it started from, given time). Each chosen configuration is laid on a node of its class
with explicit devices and pods, and the result is checked by
:func:`gangsched.sim.fgd.bounds.validate_packing`.

CPU-only pods are left out, as in the aggregate bound.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gangsched._types import F64, I64
from gangsched.fragmentation import MILLI
from gangsched.io.openb import NodeTable, PodTable, shapes_fit_classes
from gangsched.limits import check_seconds

__all__ = ["MAX_LIMIT_SECONDS", "ConfigLimit", "config_limit"]


#: Largest time budget of one configuration limit, in seconds.
MAX_LIMIT_SECONDS = 3600.0
#: Reduced costs at or below this (milli-GPU) count as zero.
_EPS = 1e-6

# A column: class, per-shape counts (sparse) and its layout on one node: (shape, devices) per pod.
_Layout = tuple[tuple[int, tuple[int, ...]], ...]


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence the solver's own prints (HiGHS writes notes to file descriptor 1)."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no descriptor 1 to guard
        yield
        return
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


@dataclass(frozen=True, slots=True)
class ConfigLimit:
    """Bound and MILP packing of one prefix of arrivals (see the module docstring)."""

    bound_milli: float  # valid upper bound on the allocatable milli-GPU
    lp_milli: float  # restricted master LP at the last iteration
    converged: bool  # no configuration with positive reduced cost is left
    iterations: int
    columns: int
    packing_milli: int  # GPU allocated by the realised MILP packing
    capacity_milli: int
    order: I64  # pods placed (indices into the pod table)
    placement: I64  # node of each
    devices: I64  # device bit mask of each
    seconds: float

    @property
    def bound_unallocated_pct(self) -> float:
        """The least unallocated GPU % (of the capacity) any placement can leave."""
        if not self.capacity_milli:
            return 0.0
        return 100.0 - 100.0 * self.bound_milli / self.capacity_milli

    @property
    def packing_unallocated_pct(self) -> float:
        """Unallocated GPU % of the MILP packing."""
        if not self.capacity_milli:
            return 0.0
        return 100.0 - 100.0 * self.packing_milli / self.capacity_milli


@dataclass(frozen=True, slots=True)
class _Problem:
    cls_cpu: I64
    cls_mem: I64
    cls_gpu: I64
    cls_model: I64
    cls_count: I64
    cls_nodes: tuple[I64, ...]  # node indices of each class
    s_cpu: I64
    s_mem: I64
    s_num: I64
    s_milli: I64
    s_count: I64
    s_pods: tuple[I64, ...]  # arrived pod indices of each shape
    fits: npt.NDArray[np.bool_]  # (n_shapes, n_classes) one pod fits one node


def _problem(nodes: NodeTable, pods: PodTable, arrived: I64) -> _Problem:
    gpu_nodes, cls, cinv = nodes.gpu_classes()
    gp, shp, sinv = pods.gpu_shapes(arrived)
    fits = shapes_fit_classes(pods, nodes, shp, cls)
    return _Problem(*_grouped(cls, cinv, gpu_nodes), *_grouped(shp, sinv, gp), fits)


def _grouped(keys: I64, inverse: I64, rows: I64) -> tuple[I64, I64, I64, I64, I64, tuple[I64, ...]]:
    """A grouping's first four key columns, the rows per group and each group's rows, in the
    order :class:`_Problem` holds them for classes and for shapes."""
    n = keys.shape[0]
    count = np.bincount(inverse, minlength=n).astype(np.int64)
    members = tuple(rows[inverse == g] for g in range(n))
    return keys[:, 0], keys[:, 1], keys[:, 2], keys[:, 3], count, members


def _seed_columns(
    prob: _Problem, nodes: NodeTable, pods: PodTable, arrived: I64
) -> list[tuple[int, _Layout]]:
    """The node contents of greedy packings (FGD and BestFit, arrival order) as columns."""
    from gangsched.sim.fgd import run_one

    gp = arrived[pods.num_gpu[arrived] > 0]
    shape_of: dict[tuple[int, ...], int] = {}
    for s in range(prob.s_cpu.shape[0]):
        for p in prob.s_pods[s][:1]:
            shape_of[_pod_key(pods, int(p))] = s
    class_of = np.full(len(nodes), -1, dtype=np.int64)
    for c, members in enumerate(prob.cls_nodes):
        class_of[members] = c
    out: list[tuple[int, _Layout]] = []
    for policy in ("fgd", "bestfit"):
        run = run_one(nodes, pods, policy, 42, order=gp)
        devices = run.devices if run.devices is not None else np.zeros(gp.size, dtype=np.int64)
        per_node: dict[int, list[tuple[int, tuple[int, ...]]]] = {}
        for i, node in enumerate(run.placement.tolist()):
            if node < 0:
                continue
            mask = int(devices[i])
            devs = tuple(d for d in range(int(nodes.gpu_count[node])) if mask >> d & 1)
            per_node.setdefault(node, []).append((shape_of[_pod_key(pods, int(gp[i]))], devs))
        for node, items in per_node.items():
            out.append((int(class_of[node]), tuple(sorted(items))))
    return out


def _pod_key(pods: PodTable, p: int) -> tuple[int, ...]:
    return (
        int(pods.cpu_milli[p]),
        int(pods.memory_mib[p]),
        int(pods.num_gpu[p]),
        int(pods.gpu_milli[p]),
        int(pods.spec_idx[p]),
    )


def _price(
    prob: _Problem, c: int, reward: F64, seconds: float
) -> tuple[float, float, _Layout | None]:
    """Best configuration of class ``c`` for per-shape ``reward``: (value found, proven upper
    bound on the best value, its layout)."""
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_matrix

    g = int(prob.cls_gpu[c])
    ok = prob.fits[:, c] & (reward > _EPS)
    whole = np.flatnonzero(ok & (prob.s_milli == MILLI))
    shared = np.flatnonzero(ok & (prob.s_milli < MILLI))
    nw, ns = whole.size, shared.size
    if nw + ns == 0:
        return 0.0, 0.0, ()
    n_var = nw + ns * g + g
    a_of = nw  # a[s, d] at a_of + i * g + d
    u_of = nw + ns * g
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    ub: list[float] = []
    lb: list[float] = []

    def row(entries: list[tuple[int, float]], lo: float, hi: float) -> None:
        r = len(ub)
        for col, v in entries:
            rows.append(r)
            cols.append(col)
            vals.append(v)
        lb.append(lo)
        ub.append(hi)

    for d in range(g):  # device d: shares + 1000 * taken-by-whole <= 1000
        row(
            [(a_of + i * g + d, float(prob.s_milli[s])) for i, s in enumerate(shared)]
            + [(u_of + d, float(MILLI))],
            -np.inf,
            float(MILLI),
        )
    row(
        [(i, float(prob.s_num[s])) for i, s in enumerate(whole)]
        + [(u_of + d, -1.0) for d in range(g)],
        -np.inf,
        0.0,
    )
    for res, cap in ((prob.s_cpu, prob.cls_cpu[c]), (prob.s_mem, prob.cls_mem[c])):
        row(
            [(i, float(res[s])) for i, s in enumerate(whole)]
            + [(a_of + i * g + d, float(res[s])) for i, s in enumerate(shared) for d in range(g)],
            -np.inf,
            float(cap),
        )
    for i, s in enumerate(shared):
        row([(a_of + i * g + d, 1.0) for d in range(g)], -np.inf, float(prob.s_count[s]))
    for d in range(g - 1):  # whole-pod devices first (symmetry)
        row([(u_of + d, 1.0), (u_of + d + 1, -1.0)], 0.0, np.inf)
    hi = np.zeros(n_var)
    hi[:nw] = np.minimum(prob.s_count[whole], g // np.maximum(prob.s_num[whole], 1))
    per_dev = MILLI // np.maximum(prob.s_milli[shared], 1)
    hi[a_of:u_of] = np.repeat(np.minimum(per_dev, prob.s_count[shared]), g)
    hi[u_of:] = 1.0
    obj = np.zeros(n_var)
    obj[:nw] = -reward[whole]
    obj[a_of:u_of] = -np.repeat(reward[shared], g)
    a = coo_matrix((vals, (rows, cols)), shape=(len(ub), n_var)).tocsr()
    with _quiet():
        res = milp(
            obj,
            constraints=LinearConstraint(a, np.array(lb), np.array(ub)),
            bounds=Bounds(np.zeros(n_var), hi),
            integrality=np.ones(n_var),
            options={"time_limit": max(seconds, 0.05), "disp": False, "mip_rel_gap": 1e-9},
        )
    dual = getattr(res, "mip_dual_bound", None)
    proven = -float(dual) if dual is not None and math.isfinite(float(dual)) else math.inf
    if res.x is None:
        # nothing found in time: the LP relaxation's value still bounds the best column
        return 0.0, proven if math.isfinite(proven) else float(-obj @ hi), None
    x = np.rint(res.x).astype(np.int64)
    found = float(-(obj @ x))
    if res.status == 0:  # optimal (to the 1e-9 gap)
        proven = found * (1 + 1e-9)
    layout: list[tuple[int, tuple[int, ...]]] = []
    free_whole = [d for d in range(g) if x[u_of + d] == 1]
    for i, s in enumerate(whole):
        for _ in range(int(x[i])):
            k = int(prob.s_num[s])
            layout.append((int(s), tuple(free_whole[:k])))
            free_whole = free_whole[k:]
    for i, s in enumerate(shared):
        for d in range(g):
            layout.extend([(int(s), (d,))] * int(x[a_of + i * g + d]))
    return found, max(proven, found), tuple(sorted(layout))


def _master(
    prob: _Problem, cols: list[tuple[int, _Layout]], gpu: F64, integral: bool, seconds: float
) -> tuple[float, F64, F64, F64]:
    """Restricted master: (value, z, mu per class, pi per shape)."""
    from scipy.optimize import Bounds, LinearConstraint, linprog, milp
    from scipy.sparse import coo_matrix

    n_cls, n_shp, n_col = prob.cls_cpu.shape[0], prob.s_cpu.shape[0], len(cols)
    r: list[int] = []
    k: list[int] = []
    v: list[float] = []
    value = np.zeros(n_col)
    for j, (c, layout) in enumerate(cols):
        r.append(c)
        k.append(j)
        v.append(1.0)
        counts: dict[int, int] = {}
        for s, _ in layout:
            counts[s] = counts.get(s, 0) + 1
        for s, cnt in counts.items():
            r.append(n_cls + s)
            k.append(j)
            v.append(float(cnt))
            value[j] += cnt * gpu[s]
    a = coo_matrix((v, (r, k)), shape=(n_cls + n_shp, n_col)).tocsr()
    rhs = np.concatenate([prob.cls_count, prob.s_count]).astype(np.float64)
    if not integral:
        lp = linprog(-value, A_ub=a, b_ub=rhs, bounds=(0, None), method="highs")
        duals = -np.asarray(lp.ineqlin.marginals, dtype=np.float64)
        return float(-lp.fun), lp.x, np.maximum(duals[:n_cls], 0), np.maximum(duals[n_cls:], 0)
    with _quiet():
        res = milp(
            -value,
            constraints=LinearConstraint(a, -np.inf, rhs),
            bounds=Bounds(np.zeros(n_col), np.full(n_col, np.inf)),
            integrality=np.ones(n_col),
            options={"time_limit": max(seconds, 0.05), "disp": False},
        )
    if res.x is None:
        return 0.0, np.zeros(n_col), np.zeros(n_cls), np.zeros(n_shp)
    return float(-res.fun), res.x, np.zeros(n_cls), np.zeros(n_shp)


def config_limit(
    nodes: NodeTable,
    pods: PodTable,
    arrived: I64,
    *,
    seconds: float = 60.0,
    pricing_seconds: float = 2.0,
) -> ConfigLimit:
    """Column-generation bound and MILP packing of the pods ``arrived`` (indices into ``pods``)
    on ``nodes`` within about ``seconds`` (the last MILP gets a fifth of the budget).

    Each pricing solve gets ``pricing_seconds``; a round that adds no column without proving
    convergence (a solve stopped at its limit) is repeated with four times the limit.
    """
    check_seconds(seconds, MAX_LIMIT_SECONDS, what="time budget", kind="limit", field="seconds")
    start = time.perf_counter()
    arrived = pods.indices(arrived, kind="limit", field="arrived")
    capacity = int(nodes.total_gpus) * MILLI
    prob = _problem(nodes, pods, arrived)
    gpu = (prob.s_num * prob.s_milli).astype(np.float64)
    empty = np.zeros(0, dtype=np.int64)
    cols = list(dict.fromkeys(_seed_columns(prob, nodes, pods, arrived))) if prob.fits.any() else []
    if not cols:  # no arrived GPU pod fits any node: nothing can be allocated
        return ConfigLimit(
            bound_milli=0.0,
            lp_milli=0.0,
            converged=True,
            iterations=0,
            columns=0,
            packing_milli=0,
            capacity_milli=capacity,
            order=empty,
            placement=empty,
            devices=empty,
            seconds=time.perf_counter() - start,
        )
    seen = set(cols)
    deadline = start + 0.8 * seconds
    it = 0
    lp_val = bound = math.inf
    converged = False
    price_s = pricing_seconds
    while True:
        it += 1
        lp_val, _, mu, pi = _master(prob, cols, gpu, False, 10.0)
        extra = 0.0
        added = 0
        for c in range(prob.cls_cpu.shape[0]):
            left = deadline - time.perf_counter()
            found, proven, layout = _price(prob, c, gpu - pi, min(price_s, max(left, 0.05)))
            extra += float(prob.cls_count[c]) * max(0.0, proven - float(mu[c]))
            if layout is not None and found - float(mu[c]) > _EPS:
                col = (c, layout)
                if col not in seen:
                    seen.add(col)
                    cols.append(col)
                    added += 1
        bound = min(bound, lp_val + extra)
        if extra <= _EPS * max(1.0, lp_val):
            converged = True
            bound = lp_val
            break
        if time.perf_counter() >= deadline:
            break
        if added == 0:
            # nothing new, yet some pricing solve stopped at its limit before proving that no
            # column is worth adding: solve them again with more time
            price_s *= 4
    left = max(seconds - (time.perf_counter() - start), 1.0)
    _, z, _, _ = _master(prob, cols, gpu, True, left)
    order, placement, devices = _realise(prob, cols, z)
    used = int((pods.num_gpu * pods.gpu_milli)[order].sum()) if order.size else 0
    return ConfigLimit(
        bound_milli=min(bound, float(prob.s_count @ gpu)),
        lp_milli=lp_val,
        converged=converged,
        iterations=it,
        columns=len(cols),
        packing_milli=used,
        capacity_milli=capacity,
        order=order,
        placement=placement,
        devices=devices,
        seconds=time.perf_counter() - start,
    )


def _realise(prob: _Problem, cols: list[tuple[int, _Layout]], z: F64) -> tuple[I64, I64, I64]:
    """Lay the integer master's configurations on nodes: (pods, their nodes, device masks)."""
    next_node = [0] * prob.cls_cpu.shape[0]
    next_pod = [0] * prob.s_cpu.shape[0]
    order: list[int] = []
    placement: list[int] = []
    devices: list[int] = []
    for j, (c, layout) in enumerate(cols):
        for _ in range(round(float(z[j]))):
            if next_node[c] >= prob.cls_nodes[c].size:
                break
            node = int(prob.cls_nodes[c][next_node[c]])
            next_node[c] += 1
            for s, devs in layout:
                if next_pod[s] >= prob.s_pods[s].size:
                    continue
                order.append(int(prob.s_pods[s][next_pod[s]]))
                next_pod[s] += 1
                placement.append(node)
                devices.append(sum(1 << d for d in devs))
    return (
        np.asarray(order, dtype=np.int64),
        np.asarray(placement, dtype=np.int64),
        np.asarray(devices, dtype=np.int64),
    )
