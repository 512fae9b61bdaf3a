"""The solver-independent oracle: does a placement respect its problem?

:func:`validate_placement` re-checks a :class:`~gangsched.placement.problem.PlacementResult`
from the problem's arrays alone — it shares no code with the placers' packing — and raises
:class:`~gangsched.errors.PlacementError` naming the gang and what broke:

* every replica names a valid template and node, on a node its template's mask allows;
* the gang is all or nothing: exactly ``size`` replicas, at most ``counts`` and at least
  ``min_counts`` per template (none at all when not placed);
* GPU devices: ``gpu_count`` distinct existing devices per replica; summed over all gangs, no
  device gives more milli-GPU than it has free, and a device taken whole was completely free
  and is used by nobody else;
* resources: summed over all gangs, no node gives more than it has free;
* topology: a hard gang lies inside one domain of tier ≤ its highest allowed tier; slices put a
  multiple of ``slice_size`` replicas in each group of
  :func:`~gangsched.placement.problem.slice_groups` (a node's largest enclosing domain of
  tier ≤ ``slice_tier``).
"""

from __future__ import annotations

import numpy as np

from gangsched.errors import PlacementError
from gangsched.model import TopologyMode
from gangsched.model.gpu_charge import exclusive
from gangsched.placement.problem import PlacementProblem, PlacementResult, slice_groups

__all__ = ["validate_placement"]


def validate_placement(problem: PlacementProblem, result: PlacementResult) -> None:
    """Raise :class:`PlacementError` unless ``result`` is a valid answer to ``problem``."""
    if len(result.gangs) != len(problem.gangs):
        raise PlacementError(
            f"{len(result.gangs)} gang placements for {len(problem.gangs)} gangs",
            kind="placement",
            field="gangs",
        )
    n = problem.n_nodes
    topo = problem.topology
    used = np.zeros_like(problem.free)
    dev_used = np.zeros_like(problem.gpu_free)
    dev_users = np.zeros(problem.gpu_free.shape, dtype=np.int64)
    dev_whole = np.zeros(problem.gpu_free.shape, dtype=np.bool_)
    cap = problem.gpu_capacity
    assert problem.gpu_count is not None
    for gang, gp in zip(problem.gangs, result.gangs, strict=True):

        def fail(detail: str, fld: str, name: str = gang.name) -> PlacementError:
            return PlacementError(detail, kind="gang", name=name, field=fld)

        if gp.gang != gang.name:
            raise fail(f"placement is for {gp.gang!r}", "gang")
        if not gp.placed:
            if gp.replicas:
                raise fail(f"not placed but {len(gp.replicas)} replicas listed", "replicas")
            continue
        counts = np.zeros((gang.n_templates, n), dtype=np.int64)
        for t, node, devs in gp.replicas:
            if not 0 <= t < gang.n_templates or not 0 <= node < n:
                raise fail(f"replica ({t}, {node}) names no template/node", "replicas")
            if not gang.mask[t, node]:
                raise fail(f"template {t} placed on node #{node} its mask forbids", "mask")
            counts[t, node] += 1
            assert gang.gpu_count is not None and gang.gpu_milli is not None
            k = int(gang.gpu_count[t])
            if len(devs) != k or len(set(devs)) != k:
                raise fail(
                    f"template {t} on node #{node}: devices {list(devs)}, need {k} distinct",
                    "gpus",
                )
            if k:
                if any(not 0 <= d < int(problem.gpu_count[node]) for d in devs):
                    raise fail(f"node #{node} has no device among {list(devs)}", "gpus")
                c = int(cap[node])
                whole = exclusive(int(gang.gpu_milli[t]), c, bool(problem.gpu_sharing[node]))
                for d in devs:
                    dev_used[node, d] += c if whole else int(gang.gpu_milli[t])
                    dev_users[node, d] += 1
                    if whole:
                        if problem.gpu_free[node, d] < c:
                            raise fail(
                                f"device {d} of node #{node} taken whole but not free", "gpus"
                            )
                        dev_whole[node, d] = True
            used[node] += gang.request[t]
        per_t = counts.sum(axis=1)
        assert gang.min_counts is not None
        if int(per_t.sum()) != gang.size:
            raise fail(f"{int(per_t.sum())} replicas placed, the gang needs {gang.size}", "size")
        if (per_t > gang.counts).any() or (per_t < gang.min_counts).any():
            raise fail(
                f"per-template counts {per_t.tolist()} outside "
                f"[{gang.min_counts.tolist()}, {gang.counts.tolist()}]",
                "counts",
            )
        nodes = np.flatnonzero(counts.sum(axis=0))
        if gang.mode is TopologyMode.HARD and nodes.size:
            cover = topo.cover(gang.allowed_rank(topo))[nodes]
            if (cover < 0).any() or np.unique(cover).size != 1:
                allowed = gang.allowed_tier(topo.tiers[-1])
                raise fail(f"replicas span more than one domain of tier <= {allowed}", "topology")
        if gang.slice_size and nodes.size:
            _, groups = np.unique(slice_groups(topo, gang), return_inverse=True)
            per_group = np.zeros(int(groups.max()) + 1, dtype=np.int64)
            np.add.at(per_group, groups.reshape(-1), counts.sum(axis=0))
            if (per_group % gang.slice_size).any():
                raise fail(
                    f"a tier-{gang.slice_tier} domain holds a partial slice of {gang.slice_size}",
                    "slice_size",
                )
    over = np.argwhere(used > problem.free)
    bad = np.argwhere((dev_used > problem.gpu_free) | (dev_whole & (dev_users > 1)))
    if over.size or bad.size:  # the first over-committed resource, else device
        node, col = (int(x) for x in (over if over.size else bad)[0])
        what, fld = (
            (
                f"resource column {col} over-committed on node #{node}: "
                f"{int(used[node, col])} > free {int(problem.free[node, col])}",
                "free",
            )
            if over.size
            else (
                f"device {col} of node #{node} over-committed ({int(dev_users[node, col])} "
                f"users, {int(dev_used[node, col])} milli of {int(problem.gpu_free[node, col])}"
                " free)",
                "gpu_free",
            )
        )
        raise PlacementError(what, kind="placement", field=fld)
