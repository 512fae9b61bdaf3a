"""Joint placement on aggregate capacities, for gangs whose replicas are interchangeable."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from gangsched.placement._common import GangView, replica_capacity
from gangsched.placement.cpsat._vars import I64
from gangsched.placement.problem import PlacementProblem


@dataclass(slots=True, eq=False)
class _Aggregate:
    """Joint problem on aggregate capacities, for gangs whose replicas are interchangeable.

    When every gang has one template with the same request and device need, and each gang
    may use every node of its domains that has room, a node holds any mix of ``cap[n]``
    replicas whatever gangs they belong to. Gangs assigned to domains of a laminar family
    (domains nest or are disjoint) then fit iff, for every domain ``D`` in use, the sizes of
    the gangs assigned to domains inside ``D`` sum to at most ``cap(D) = Σ_{n ∈ D} cap[n]``
    (Hall's condition; for a laminar family the unions of domains split into their maximal
    members, so the domains themselves are the only sets to check). Gangs are grouped into
    *kinds* (same domain family, size and weight), which are interchangeable, so the model
    has one count per (kind, domain).
    """

    kinds: list[tuple[int, int, int]]  # (family, size, weight)
    members: list[list[int]]  # per kind, its gangs in index order
    cand: list[list[int]]  # per kind, the domains (global ids) that can hold one gang
    cap: dict[int, int]  # per candidate domain, its replica capacity
    n_nodes: dict[int, int]  # per candidate domain, its node count
    inside: dict[int, list[int]]  # per candidate domain, the candidate domains inside it
    node_cap: I64  # (n_nodes,) replicas a node holds
    covered: I64  # (n_nodes,) 1 where some candidate domain covers the node

    def upper_bound(self, problem: PlacementProblem) -> int:
        """Most weight that fits into the summed capacity of all candidate domains (a 0/1
        knapsack over the gangs that fit into some domain; NumPy dynamic programme)."""
        del problem
        room = int((self.node_cap * self.covered).sum())
        best = np.zeros(room + 1, dtype=np.int64)
        for k, (_, size, weight) in enumerate(self.kinds):
            if not self.cand[k] or size > room:
                continue
            for _ in self.members[k]:
                best[size:] = np.maximum(best[size:], best[:-size] + weight)
        return int(best[-1])

    def assign(self, counts: dict[tuple[int, int], int], g_dom: list[int]) -> list[int]:
        """Per gang a chosen domain (-1: not placed) from the counts per (kind, domain):
        gangs keep greedy's domain where the counts allow it, the rest go in index order."""
        out = [-1] * len(g_dom)
        for k, gangs in enumerate(self.members):
            left = {d: counts.get((k, d), 0) for d in self.cand[k]}
            rest: list[int] = []
            for gi in gangs:
                d = g_dom[gi]
                if d >= 0 and left.get(d, 0) > 0:
                    out[gi] = d
                    left[d] -= 1
                else:
                    rest.append(gi)
            slots = [d for d in sorted(left) for _ in range(left[d])]
            for gi, d in zip(rest, slots, strict=False):
                out[gi] = d
        return out


def _aggregate(
    problem: PlacementProblem, views: list[GangView], doms: list[I64]
) -> _Aggregate | None:
    """The aggregate form of a joint problem, or ``None`` when its replicas are not all
    interchangeable (templates, requests or device needs differ, slices, or a gang's mask
    leaves out a node of its domains that has room)."""
    first = views[0].gang
    for view in views:
        g = view.gang
        if (
            g.n_templates != 1
            or g.slice_size
            or not np.array_equal(g.request, first.request)
            or not np.array_equal(g.gpu_count, first.gpu_count)  # type: ignore[arg-type]
            or not np.array_equal(g.gpu_milli, first.gpu_milli)  # type: ignore[arg-type]
        ):
            return None
    total = sum(v.gang.size for v in views)
    everywhere = np.ones((1, problem.n_nodes), dtype=np.bool_)
    node_cap = replica_capacity(
        problem, first, problem.free, problem.gpu_free, everywhere, clip=False
    )[0]
    node_cap = np.minimum(node_cap, total)
    # masks folded into the capacities: a node no gang may use (cordoned, or left out by
    # every gang's selectors) holds nothing; only masks that differ between gangs (or leave
    # out a node some gang's domain needs) rule the aggregate form out
    anyone = np.zeros(problem.n_nodes, dtype=np.bool_)
    for view in views:
        anyone |= view.gang.mask[0]
    node_cap = np.where(anyone, node_cap, 0)
    room = node_cap > 0
    families: dict[bytes, int] = {}
    fam_arrays: list[I64] = []
    kinds: dict[tuple[int, int, int], list[int]] = {}
    weights = problem.weights
    assert weights is not None
    for gi, view in enumerate(views):
        ids = doms[gi]
        if (room & (ids >= 0) & ~view.gang.mask[0]).any():
            return None
        key = ids.tobytes()
        if key not in families:
            families[key] = len(fam_arrays)
            fam_arrays.append(ids)
        if view.gang.size == 0:
            return None
        kinds.setdefault((families[key], view.gang.size, int(weights[gi])), []).append(gi)
    cap: dict[int, int] = {}
    n_nodes: dict[int, int] = {}
    rep: dict[int, int] = {}
    # a domain id names the same nodes in every family it appears in (laminarity), so each
    # family lists all of its domains, shared or not
    fam_doms: list[set[int]] = [set() for _ in fam_arrays]
    covered = np.zeros(problem.n_nodes, dtype=np.int64)
    for f, ids in enumerate(fam_arrays):
        sel = ids >= 0
        covered[sel] = 1
        uniq, first_at, inv = np.unique(ids[sel], return_index=True, return_inverse=True)
        caps = np.bincount(inv.reshape(-1), weights=node_cap[sel], minlength=uniq.size)
        cnts = np.bincount(inv.reshape(-1), minlength=uniq.size)
        nodes = np.flatnonzero(sel)
        for i, d in enumerate(uniq.tolist()):
            cap[d] = int(caps[i])
            n_nodes[d] = int(cnts[i])
            rep[d] = int(nodes[first_at[i]])
            fam_doms[f].add(d)
    kind_list = sorted(kinds)
    cand = [
        [d for d in sorted(cap) if d in fam_doms[f] and cap[d] >= size] for f, size, _ in kind_list
    ]
    cand_fams: dict[int, int] = {}
    for k, (f, _, _) in enumerate(kind_list):
        for d in cand[k]:
            cand_fams[d] = f
    used = sorted(cand_fams)
    inside: dict[int, list[int]] = {}
    for big in used:
        arr = fam_arrays[cand_fams[big]]
        inside[big] = [d for d in used if n_nodes[d] <= n_nodes[big] and int(arr[rep[d]]) == big]
    return _Aggregate(
        kinds=kind_list,
        members=[kinds[k] for k in kind_list],
        cand=cand,
        cap=cap,
        n_nodes=n_nodes,
        inside=inside,
        node_cap=node_cap,
        covered=covered,
    )


def _build_aggregate(
    problem: PlacementProblem, agg: _Aggregate, g_dom: list[int]
) -> tuple[cp_model.CpModel, dict[tuple[int, int], cp_model.IntVar]]:
    """``n[k, d]`` gangs of kind ``k`` in domain ``d``; Σ_d n[k, d] ≤ |kind|; per domain
    ``D``: Σ over domains inside ``D`` of size·n ≤ cap(D); maximise Σ weight·n. Hinted with
    greedy's domains."""
    del problem
    model = cp_model.CpModel()
    n_vars: dict[tuple[int, int], cp_model.IntVar] = {}
    by_dom: dict[int, list[tuple[int, int, cp_model.IntVar]]] = {}
    objective: list[cp_model.LinearExprT] = []
    hint: dict[tuple[int, int], int] = {}
    for k, gangs in enumerate(agg.members):
        for gi in gangs:
            if g_dom[gi] >= 0:
                hint[(k, g_dom[gi])] = hint.get((k, g_dom[gi]), 0) + 1
    for k, (_, size, weight) in enumerate(agg.kinds):
        row = []
        for d in agg.cand[k]:
            ub = min(len(agg.members[k]), agg.cap[d] // size)
            v = model.new_int_var(0, ub, f"n_{k}_{d}")
            n_vars[(k, d)] = v
            by_dom.setdefault(d, []).append((size, ub, v))
            row.append(v)
            model.add_hint(v, hint.get((k, d), 0))
        if row:
            model.add(sum(row) <= len(agg.members[k]))
            objective.append(weight * sum(row))
    for big, inner in sorted(agg.inside.items()):
        terms = [t for d in inner for t in by_dom.get(d, [])]
        if sum(s * ub for s, ub, _ in terms) > agg.cap[big]:
            model.add(sum(s * v for s, _, v in terms) <= agg.cap[big])
    model.maximize(sum(objective))
    return model, n_vars
