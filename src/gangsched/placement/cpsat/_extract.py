"""From a solution to replica records (classes expanded, devices assigned), and applying a
placement to the free state."""

from __future__ import annotations

import numpy as np
from ortools.sat.python import cp_model

from gangsched.placement._common import GangView, Replica, pack_node
from gangsched.placement.cpsat._vars import I64, _Units, _Vars
from gangsched.placement.problem import PlacementProblem


def _apply(
    problem: PlacementProblem,
    gi: int,
    replicas: tuple[Replica, ...],
    free: I64,
    gpu_free: I64,
    sign: int = 1,
) -> None:
    """Take the room of gang ``gi``'s ``replicas`` from ``free`` / ``gpu_free`` (give it back
    with ``sign=-1``)."""
    gang = problem.gangs[gi]
    need, _ = problem.per_device_need(gang)
    for t, node, devs in replicas:
        free[node] -= sign * gang.request[t]
        if devs:
            gpu_free[node, list(devs)] -= sign * need[t, node]


def _extract(
    problem: PlacementProblem,
    views: list[GangView],
    vs: _Vars,
    units_all: list[_Units],
    solver: cp_model.CpSolver,
    free: I64,
    gpu_free: I64,
    dev_nodes: set[int],
) -> list[list[Replica]] | None:
    """Per gang, replica records from a solution: counts per node (classes expanded in node
    order), then devices — from the per-device variables where the node has them, else by the
    deterministic packing of :func:`pack_node`, which is exact on such nodes."""
    counts = [np.zeros((v.gang.n_templates, problem.n_nodes), dtype=np.int64) for v in views]
    cell_val: dict[tuple[int, int, int], int] = {}
    for cell in vs.cells:
        val = int(solver.value(cell.var))
        if val:
            cell_val[(cell.g, cell.t, cell.u)] = val
    for (g, u), m in vs.used.items():
        n_used = int(solver.value(m))
        if n_used == 0:
            continue
        mem = units_all[g].members[u]
        for t in range(views[g].gang.n_templates):
            left = cell_val.get((g, t, u), 0)
            if not left:
                continue
            q = int(views[g].q[t, mem[0]])
            for i in range(n_used):
                give = min(q, left - (n_used - i - 1))
                counts[g][t, mem[i]] += give
                left -= give
    return _records(problem, views, vs, counts, solver, free, gpu_free, dev_nodes)


def _records(
    problem: PlacementProblem,
    views: list[GangView],
    vs: _Vars,
    counts: list[I64],
    solver: cp_model.CpSolver,
    free: I64,
    gpu_free: I64,
    dev_nodes: set[int],
) -> list[list[Replica]] | None:
    """Per gang, replica records from ``counts`` (per gang, ``(n_templates, n_nodes)``
    replicas per node; consumed): devices from the solution's per-device variables on
    ``dev_nodes``, else by :func:`pack_node`; ``None`` if a node's count does not pack."""
    n_g = len(views)
    work_free = free.copy()
    work_gpu = gpu_free.copy()
    recs: list[list[Replica]] = [[] for _ in range(n_g)]
    # per-device nodes first, from the solver's shares
    cap = problem.gpu_capacity
    for node in sorted(dev_nodes):
        whole_devs = [d for (n, d), w in vs.whole.items() if n == node and solver.value(w)]
        for g in range(n_g):
            gang = views[g].gang
            for t in range(gang.n_templates):
                k = int(counts[g][t, node])
                if not k:
                    continue
                gc = int(gang.gpu_count[t])  # type: ignore[index]
                work_free[node] -= gang.request[t] * k
                if gc == 0:
                    recs[g].extend((t, node, ()) for _ in range(k))
                elif views[g].whole[t, node]:
                    for _ in range(k):
                        devs = tuple(sorted(whole_devs[:gc]))
                        whole_devs = whole_devs[gc:]
                        work_gpu[node, list(devs)] -= int(cap[node])
                        recs[g].append((t, node, devs))
                else:
                    flat: list[int] = []
                    for d in range(problem.gpu_free.shape[1]):
                        x = vs.shares.get((g, t, node, d))
                        if x is not None:
                            flat.extend([d] * int(solver.value(x)))
                    per = [sorted(flat[i::k]) for i in range(k)]
                    need = int(views[g].need[t, node])
                    for devs_l in per:
                        work_gpu[node, devs_l] -= need
                        recs[g].append((t, node, tuple(devs_l)))
                counts[g][t, node] = 0
    for g in range(n_g):
        for node in np.flatnonzero(counts[g].sum(axis=0)).tolist():
            rem = counts[g][:, node].copy()
            got, r = pack_node(problem, views[g], node, rem, work_free, work_gpu)
            if not (got == rem).all():
                return None
            recs[g].extend(r)
    return recs
