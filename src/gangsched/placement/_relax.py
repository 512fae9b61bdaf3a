"""A relaxation of joint placement that bounds the weight any placement can reach.

Theory of operation
-------------------
Each gang that is placed lies inside one *domain*: the cover of its highest allowed tier for a
hard gang, the cluster-wide top domain otherwise (see ``cpsat._joint_model._joint_domains``).
Whatever the
placement, the gangs inside a domain ``E`` take from ``E``'s nodes at least their
:func:`~gangsched.placement._common.demand_floor` in every dimension — each resource column
and the milli-GPU of device capacity. So with ``x[g, D]`` for gang ``g`` in candidate domain
``D`` (a domain whose own room and per-template capacities can hold the gang alone), every
placement satisfies, for every domain ``E`` of the laminar family of candidates::

    Σ_{g, D ⊆ E} floor_g · x[g, D] ≤ room(E)      (per dimension)
    Σ_D x[g, D] ≤ 1

and the same with ``room`` counted only on the nodes a *signature* can use (the distinct sets
of nodes where some gang's replicas fit), summed over the gangs whose usable nodes lie among
them (an 8-GPU replica takes nothing from a node with four free devices). The most weight of
that programme is a valid upper bound on the joint optimum. This module
computes its data with NumPy (domains, floors, rooms, nesting); ``cpsat`` solves it, uses the
bound to prove a placement optimal (a placement reaching it is optimal) or to report the gap,
and uses the programme's domain choice as a guide for a placement.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gangsched.placement._common import GangView, demand_floor, group_sum, split_target
from gangsched.placement.problem import PlacementProblem

I64 = npt.NDArray[np.int64]


@dataclass(slots=True, eq=False)
class Relaxation:
    """Data of the bounding programme (see the module docstring)."""

    cand: list[list[int]]  # per gang, its candidate domains (global ids)
    floor: dict[tuple[int, int], I64]  # (gang, domain) -> (n_dims,) least demand
    room: dict[int, I64]  # domain -> (n_dims,) free room of its nodes
    inside: dict[int, list[int]]  # domain -> the candidate domains inside it (itself too)
    n_nodes: dict[int, int]  # domain -> number of nodes
    # (domain, signature) -> (n_dims,) room of the domain's nodes that the signature's gangs
    # can use, and per signature the gangs whose usable nodes are among them
    sig_room: dict[tuple[int, int], I64]
    sig_gangs: list[list[int]]


def build_relaxation(
    problem: PlacementProblem, views: list[GangView], doms: list[I64]
) -> Relaxation:
    """The programme's data for gangs ``views`` whose domain ids per node are ``doms``."""
    n = problem.n_nodes
    # dimensions: every resource column, then the device capacity in milli-GPU
    room_node = np.column_stack(
        [np.clip(problem.free, 0, None), np.clip(problem.gpu_free, 0, None).sum(axis=1)]
    ).astype(np.int64)  # (n_nodes, n_dims)
    cand: list[list[int]] = []
    floor: dict[tuple[int, int], I64] = {}
    members: dict[int, npt.NDArray[np.intp]] = {}
    for gi, view in enumerate(views):
        ids = doms[gi]
        usable = view.mask.any(axis=0) & (ids >= 0)
        out: list[int] = []
        if usable.any() and split_target(view.gang, view.q.sum(axis=1)) is not None:
            uniq, inv = np.unique(ids[usable], return_inverse=True)
            inv = inv.reshape(-1)
            k = uniq.size
            qsum = group_sum(inv, view.q[:, usable].T, k)
            gang = view.gang
            assert gang.min_counts is not None
            ok = (qsum >= gang.min_counts[None, :]).all(axis=1) & (
                np.minimum(qsum, gang.counts[None, :]).sum(axis=1) >= gang.size
            )
            groups = np.zeros(n, dtype=np.int64)
            groups[usable] = inv
            res, gpu = demand_floor(view, groups, k, usable)
            fl = np.column_stack([np.tile(res, (k, 1)), gpu]).astype(np.int64)
            r_use = group_sum(inv, room_node[usable], k)
            ok &= (fl <= r_use).all(axis=1)
            for i in np.flatnonzero(ok).tolist():
                d = int(uniq[i])
                out.append(d)
                floor[(gi, d)] = fl[i]
        for d in out:
            if d not in members:
                members[d] = np.flatnonzero(ids == d)
        cand.append(out)
    room = {d: room_node[m].sum(axis=0).astype(np.int64) for d, m in members.items()}
    sizes = {d: int(m.size) for d, m in members.items()}
    node_sets = {d: np.zeros(n, dtype=np.bool_) for d in members}
    for d, m in members.items():
        node_sets[d][m] = True
    inside: dict[int, list[int]] = {}
    for big in sorted(members):
        mask = node_sets[big]
        inside[big] = [
            d for d in sorted(members) if sizes[d] <= sizes[big] and bool(mask[members[d]].all())
        ]
    # signatures: the distinct (usable nodes, device granularity) of the gangs. A gang whose
    # GPU replicas all take whole devices, ``k`` or a multiple of ``k`` at a time, can use on
    # a node at most ``floor(whole_free / k) · k`` devices; a gang counts against a
    # signature's room when its usable nodes lie among the signature's and its granularity
    # is a multiple of the signature's (or it takes no GPU)
    cap = problem.gpu_capacity
    wfree = ((problem.gpu_free >= cap[:, None]) & (cap[:, None] > 0)).sum(axis=1)
    usable_of = [np.asarray(v.mask.any(axis=0)) for v in views]
    grain: list[int] = []
    for gi, v in enumerate(views):
        gc = v.gang.gpu_count
        assert gc is not None
        gpu_t = np.flatnonzero(gc > 0)
        if gpu_t.size == 0:
            grain.append(-1)
        elif all(bool(v.whole[t][usable_of[gi]].all()) for t in gpu_t.tolist()):
            grain.append(int(np.gcd.reduce(gc[gpu_t])))
        else:
            grain.append(0)
    ratio = [_gpu_ratio(problem, v) for v in views]
    sigs: list[tuple[npt.NDArray[np.bool_], int, npt.NDArray[np.float64]]] = []
    seen: dict[tuple[bytes, int, bytes], int] = {}
    for gi, u in enumerate(usable_of):
        if not cand[gi]:
            continue
        key = (np.packbits(u).tobytes(), max(grain[gi], 0), ratio[gi].tobytes())
        if key not in seen:
            seen[key] = len(sigs)
            sigs.append((u, max(grain[gi], 0), ratio[gi]))

    def kind_in(gi: int, k: int, rho: npt.NDArray[np.float64]) -> bool:
        if grain[gi] != -1 and (ratio[gi] < rho).any():
            return False
        return k == 0 or grain[gi] == -1 or (grain[gi] > 0 and grain[gi] % k == 0)

    def counts_in(
        gi: int, sig: npt.NDArray[np.bool_], k: int, rho: npt.NDArray[np.float64]
    ) -> bool:
        return not (usable_of[gi] & ~sig).any() and kind_in(gi, k, rho)

    # and per kind (granularity, ratio; and granularity alone) the union of the usable nodes
    # of every gang of it, so that gangs whose usable nodes differ still meet in one row
    kinds = [(k, rho) for _, k, rho in sigs]
    kinds += [(k, np.zeros_like(rho)) for k, rho in kinds]
    for k, rho in kinds:
        union = np.zeros(n, dtype=np.bool_)
        for gi, u in enumerate(usable_of):
            if cand[gi] and kind_in(gi, k, rho):
                union |= u
        key = (np.packbits(union).tobytes(), k, rho.tobytes())
        if key not in seen:
            seen[key] = len(sigs)
            sigs.append((union, k, rho))

    sig_gangs = [
        [gi for gi in range(len(views)) if cand[gi] and counts_in(gi, u, k, rho)]
        for u, k, rho in sigs
    ]
    sig_room: dict[tuple[int, int], I64] = {}
    free_f = np.clip(problem.free, 0, None).astype(np.float64)
    for si, (sig, k, rho) in enumerate(sigs):
        node_room = room_node.copy()
        if k > 0:
            node_room[:, -1] = (wfree // k) * k * cap
        pos = rho > 0
        if pos.any():
            # every GPU replica of the signature's gangs takes at least rho[r] of resource r
            # per milli-GPU, so a node gives them at most free[r] / rho[r] milli-GPU
            # (in whole chunks of k devices when they take k at a time)
            lim = (free_f[:, pos] / rho[pos][None, :]).min(axis=1) * (1.0 + 1e-9)
            if k > 0:
                unit = (k * np.maximum(cap, 1)).astype(np.float64)
                lim = np.floor(lim / unit + 1e-9) * unit
            lim = np.floor(np.minimum(lim, 2.0**62))
            node_room[:, -1] = np.minimum(node_room[:, -1], lim.astype(np.int64))
        for d, m in members.items():
            sig_room[(d, si)] = node_room[m[sig[m]]].sum(axis=0).astype(np.int64)
    return Relaxation(
        cand=cand,
        floor=floor,
        room=room,
        inside=inside,
        n_nodes=sizes,
        sig_room=sig_room,
        sig_gangs=sig_gangs,
    )


def _gpu_ratio(problem: PlacementProblem, view: GangView) -> npt.NDArray[np.float64]:
    """``(n_resources,)`` the least of each resource a GPU replica of the gang takes per
    milli-GPU of device capacity, over its GPU templates and usable nodes (0 when some GPU
    template asks none of it; zeros for a gang without GPU templates)."""
    gang = view.gang
    gc = gang.gpu_count
    assert gc is not None
    n_res = problem.free.shape[1]
    gpu_t = np.flatnonzero(gc > 0)
    if gpu_t.size == 0:
        return np.zeros(n_res)
    out = np.full(n_res, np.inf)
    for t in gpu_t.tolist():
        usable = view.mask[t]
        if not usable.any():
            continue
        most = float((view.need[t][usable] * int(gc[t])).max())
        if most <= 0:
            return np.zeros(n_res)
        out = np.minimum(out, gang.request[t].astype(np.float64) / most)
    out[~np.isfinite(out)] = 0.0
    return out
