"""Glue between a session and a placer: one gang's pending tasks → a placement problem →
``(task, node, gpus, pipelined)`` assignments.

Theory of operation
-------------------
:func:`place_job` groups the given pending tasks by their session template; each template's
node mask is the session's verdict (``evaluate(tmpl).ok`` and the single-replica resource fit).
Request rows are the templates' rows with the GPU amount removed: GPUs are placed as devices.

The gang is first placed on what is idle now; if that fails, on the *future* idle capacity
(idle + releasing − pipelined), and every replica whose node cannot take the replicas assigned
to it from idle capacity alone is returned as ``pipelined`` (Volcano's Pipeline: a reservation
on resources being released).

Size: the gang needs ``min_available`` minus the tasks that are already ready or reserved (a
role's ``min_task_member`` is charged to that role's templates in order). When the gang is
already at its minimum, all the given tasks are placed together, all or nothing.

Topology: the job's ``network_topology`` becomes the gang's constraint. A hard job that already
has tasks on nodes must put the new ones in the same domain of its highest allowed tier; when its
placed tasks already lie in several such domains (the topology changed under it), no more are
placed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np
import numpy.typing as npt

from gangsched._types import I64
from gangsched.decisions import PlacementInfo
from gangsched.model.topology import Topology, build_topology
from gangsched.placement.greedy import GreedyPlacer
from gangsched.placement.problem import (
    GangRequest,
    HypernodeOrder,
    PlacementProblem,
    PlacementResult,
    Status,
)
from gangsched.session.core import PIPELINED_OR_READY
from gangsched.session.fit import device_free, node_free, occupancy_columns
from gangsched.session.gate import hard_cover, hard_domain
from gangsched.session.pod_constraints import pod_rules
from gangsched.session.rules.gang import pending_best_effort_of_role
from gangsched.session.statement import Statement

if TYPE_CHECKING:
    from gangsched.session.core import Session
    from gangsched.session.evaluation import Evaluation

__all__ = [
    "Assignment",
    "hard_domain",
    "place_job",
    "place_jobs_jointly",
    "placement_ground",
    "session_topology",
]

Assignment = tuple[int, int, tuple[int, ...], bool]


class _Placer(Protocol):
    def place(self, problem: PlacementProblem) -> PlacementResult: ...


def session_topology(ssn: Session) -> Topology:
    """The session's topology (built once per snapshot, which keeps it)."""
    return build_topology(ssn.snapshot)


def _gpu_free(ssn: Session, future: bool) -> I64:
    """Every node's free milli-GPU per device slot, ``(n_nodes, max_gpus)`` padded with 0 (no
    free milli), as the placement problem takes it (read-only)."""
    return _ground(ssn, future)[1]


def _ground(ssn: Session, future: bool) -> tuple[I64, I64]:
    """The free rows (:func:`~gangsched.session.fit.node_free`) and padded free device rows of every
    node, worked out again only after a change (the session's change log): the gangs tried one
    after another on the same occupancy share them. Read-only."""
    log = ssn.changes
    known = ssn.cache.gang_ground.get(future)
    if known is not None and not log.changed_since(known[0]):
        return known[1], known[2]
    free = node_free(ssn, future=future)
    devices = np.maximum(device_free(ssn, future=future), 0)
    padded: I64 = np.concatenate((np.zeros(1, dtype=np.int64), devices))[ssn.arrays.slot_layout()]
    free.flags.writeable = False
    padded.flags.writeable = False
    ssn.cache.gang_ground[future] = (log.end, free, padded)
    return free, padded


def placement_ground(ssn: Session) -> tuple[I64, I64, I64, I64]:
    """Every node's free room now and once releases finish, then its free milli-GPU per
    device slot now and later: all a fit reads of the occupancy (shared, read-only; the same
    arrays until the change log names a change)."""
    free, devices = _ground(ssn, False)
    later, devices_later = _ground(ssn, True)
    return free, later, devices, devices_later


@dataclass(frozen=True, slots=True)
class _GangInput:
    """One job's pending tasks grouped by template, ready to become a GangRequest."""

    job: int
    tmpl_ids: list[int]
    by_tmpl: dict[int, list[int]]
    counts: I64
    request: I64
    gpu_count: I64
    gpu_milli: I64
    size: int
    min_counts: I64
    restrict: npt.NDArray[np.bool_]


def _gang_input(ssn: Session, job: int, tasks: list[int]) -> _GangInput | str:
    rec = ssn.snapshot.jobs[job]
    if not tasks:
        return f"gang {rec.name!r}: no pending tasks to place"
    a = ssn.arrays
    by_tmpl: dict[int, list[int]] = {}
    for t, ti in zip(tasks, ssn.template_of[tasks].tolist(), strict=True):
        by_tmpl.setdefault(ti, []).append(int(t))
    if -1 in by_tmpl:
        name = ssn.snapshot.tasks[by_tmpl[-1][0]].name
        return f"gang {rec.name!r}: task {name!r} is not pending"
    tmpl_ids = list(by_tmpl)
    templates = [ssn.templates[i] for i in tmpl_ids]
    counts = np.array([len(by_tmpl[i]) for i in tmpl_ids], dtype=np.int64)
    request = np.stack([tm.request for tm in templates]).astype(np.int64)
    request[:, a.spec.gpu_column] = 0
    gpu_count = np.array([tm.gpu_count for tm in templates], dtype=np.int64)
    gpu_milli = np.array([tm.gpu_milli for tm in templates], dtype=np.int64)

    missing = int(ssn.job_min[job]) - ssn.count_states(job, PIPELINED_OR_READY)
    missing -= ssn.pending_best_effort(job)
    total = int(counts.sum())
    if missing > total:
        return (
            f"gang {rec.name!r}: {missing} more tasks needed for min_available "
            f"{int(ssn.job_min[job])}, only {total} pending"
        )
    size = total if missing <= 0 else missing
    min_counts = np.zeros_like(counts)
    if rec.min_task_member and rec.min_available >= sum(rec.min_task_member.values()):
        for role, need in rec.min_task_member.items():
            left = need - ssn.count_states(job, PIPELINED_OR_READY, role)
            left -= pending_best_effort_of_role(ssn, job, role)
            for k, tm in enumerate(templates):
                if tm.role == role and left > 0:
                    take = min(left, int(counts[k]))
                    min_counts[k] += take
                    left -= take
        if int(min_counts.sum()) > size:
            size = min(total, int(min_counts.sum()))

    domain = hard_domain(ssn, job)
    if isinstance(domain, str):
        return domain
    restrict = np.ones(a.n_nodes, dtype=np.bool_) if domain is None else domain
    return _GangInput(
        job, tmpl_ids, by_tmpl, counts, request, gpu_count, gpu_milli, size, min_counts, restrict
    )


def _evaluations(ssn: Session, g: _GangInput) -> list[Evaluation]:
    """The session's evaluation of each of the gang's templates (both attempts read them)."""
    return [ssn.evaluate(ssn.templates[i]) for i in g.tmpl_ids]


def _gang_request(
    ssn: Session, g: _GangInput, future: bool, evals: list[Evaluation]
) -> GangRequest:
    rec = ssn.snapshot.jobs[g.job]
    mask = np.stack(
        [ev.ok & (ev.fit_future if future else ev.fit_idle) & g.restrict for ev in evals]
    )
    nt = rec.network_topology
    return GangRequest(
        name=rec.name,
        request=g.request,
        counts=g.counts,
        mask=mask,
        size=g.size,
        min_counts=g.min_counts,
        gpu_count=g.gpu_count,
        gpu_milli=g.gpu_milli,
        mode=None if nt is None else nt.mode,
        highest_tier=None if nt is None else nt.highest_tier_allowed,
        # Slices split the gang as placed whole; a gang topping up its minimum (a size that
        # is no multiple of the slice) keeps the tier rule only.
        **(
            {"slice_size": nt.slice_size, "slice_tier": nt.slice_tier}
            if nt is not None and nt.slice_size and g.size % nt.slice_size == 0
            else {}
        ),
    )


def hypernode_order(ssn: Session) -> HypernodeOrder | None:
    """The hypernode order of the first plugin serving ``hypernode_score`` (the
    network-topology-aware plugin), once per session; ``None`` when none is configured."""
    if ssn.cache.unset(ssn.cache.hypernode_order):
        ssn.cache.hypernode_order = ssn.points.hypernode_score()
    out = ssn.cache.hypernode_order
    assert out is None or isinstance(out, HypernodeOrder)
    return out


def _problem(
    ssn: Session, gangs: tuple[GangRequest, ...], future: bool, weights: I64 | None = None
) -> PlacementProblem:
    a = ssn.arrays
    free, gpu_free = _ground(ssn, future)
    return PlacementProblem(
        weights=weights,
        used=ssn.used,
        hypernode_order=hypernode_order(ssn),
        free=free,
        allocatable=a.allocatable,
        gpu_free=gpu_free,
        gpu_capacity=a.gpu_capacity,
        gpu_count=a.gpu_count,
        gpu_sharing=a.gpu_sharing,
        topology=session_topology(ssn),
        gangs=gangs,
    )


def place_job(ssn: Session, job: int, tasks: list[int], placer: _Placer) -> list[Assignment] | str:
    """Place the pending ``tasks`` of ``job`` as one gang.

    Returns the assignments ``(task, node, gpu_indices, pipelined)`` (task order within each
    template, nodes ascending) or, when the gang cannot be placed, the reason in words.
    """
    if _pod_constrained(ssn, tasks):
        return _place_one_by_one(ssn, job, tasks, placer)
    key = _failure_key(ssn, job, tasks, placer)
    if key is not None:
        known = ssn.records.get(key)
        if known is None and ssn.evaluator.same_ground:
            known = ssn.prior_records.get(key)
        if known is not None:
            ssn.records[key] = known
            ssn.placements[job] = known[1]
            return str(known[0])
    g = _gang_input(ssn, job, tasks)
    if isinstance(g, str):
        return g
    last = ""
    evals = _evaluations(ssn, g)
    for future in (False, True):
        if future and _same_later(ssn, placer, evals):
            # The same problem again: the deterministic greedy placer answers as it did.
            break
        request = _gang_request(ssn, g, future, evals)
        result = placer.place(_problem(ssn, (request,), future))
        note_placement(ssn, job, placer, result)
        gp = result.gangs[0]
        if not gp.placed:
            last = (
                gp.reason
                or f"gang {ssn.snapshot.jobs[job].name!r}: not placed ({result.status.value})"
            )
            continue
        return _assign(ssn, gp.replicas, g.tmpl_ids, g.by_tmpl, g.request, g.gpu_count, future)
    if key is not None:
        ssn.records[key] = (last, ssn.placements[job])
    return last


def _pod_constrained(ssn: Session, tasks: list[int]) -> bool:
    """Whether pod affinity, anti-affinity or spread concerns any of ``tasks``: the placers'
    problems cannot say it (their masks are fixed while a gang is placed), so such a gang is
    placed one task at a time instead."""
    rules = pod_rules(ssn)
    if rules is None:
        return False
    seen: set[int] = set()
    for ti in ssn.template_of[tasks].tolist():
        if ti >= 0 and ti not in seen:
            seen.add(ti)
            if rules.concerns(ssn.templates[ti]):
                return True
    return False


def _place_one_by_one(
    ssn: Session, job: int, tasks: list[int], placer: _Placer
) -> list[Assignment] | str:
    """A gang under pod constraints, placed greedily one task at a time on a trial statement
    (undone before returning): each task goes to the session's best node for it, where the
    constraints are read with the gang's earlier tasks in place, inside the job's hard
    topology domain once it has one. Enough tasks for the gang's size (and each role's
    minimum) must land, else nothing does. The exact placers are not asked: their answer
    could not be claimed optimal (nor even valid) under these constraints; the job's
    placement record says ``GREEDY`` with ``fallback`` set."""
    g = _gang_input(ssn, job, tasks)
    if isinstance(g, str):
        return g
    ssn.placements[job] = PlacementInfo(
        placer=str(getattr(placer, "name", type(placer).__name__)),
        status=Status.GREEDY.value,
        gap=None,
        fallback=type(placer) is not GreedyPlacer,
    )
    want = dict(zip(g.tmpl_ids, g.min_counts.tolist(), strict=True))
    # Tasks a role minimum needs go first, then the rest in the order given.
    order = sorted(
        range(len(tasks)),
        key=lambda i: (want.get(int(ssn.template_of[tasks[i]]), 0) <= 0, i),
    )
    stmt = Statement(ssn)
    out: list[Assignment] = []
    got: dict[int, int] = {}
    last = ""
    try:
        for i in order:
            if len(out) >= g.size and all(got.get(k, 0) >= v for k, v in want.items()):
                break
            t = tasks[i]
            ti = int(ssn.template_of[t])
            tmpl = ssn.templates[ti]
            domain = hard_domain(ssn, job)
            if isinstance(domain, str):
                return domain
            among = domain if domain is not None else hard_cover(ssn, job)
            node, pipelined = ssn.best_node(tmpl, among)
            if node < 0:
                last = ssn.fit_error(tmpl, among)
                continue
            gpus = ssn.choose_gpus(t, node, future=pipelined)
            placed = (stmt.pipeline if pipelined else stmt.allocate)(t, node, gpus)
            if not placed:
                last = f"task {ssn.snapshot.tasks[t].name!r} could not be placed on its node"
                continue
            out.append((t, node, gpus, pipelined))
            got[ti] = got.get(ti, 0) + 1
    finally:
        stmt.discard()
    if len(out) < g.size or any(got.get(k, 0) < v for k, v in want.items()):
        name = ssn.snapshot.jobs[job].name
        return f"gang {name!r}: {len(out)}/{g.size} tasks placed under pod constraints: {last}"
    return out


def _same_later(ssn: Session, placer: _Placer, evals: list[Evaluation]) -> bool:
    """Whether the future-idle problem of a gang is the one its idle attempt just solved
    with the greedy placer: nothing is releasing or reserved (so the free rows are equal)
    and every template fits the same nodes later as now (so the masks are equal)."""
    if type(placer) is not GreedyPlacer:
        return False
    return (
        not ssn.releasing.any()
        and not ssn.pipelined.any()
        and not ssn.gpu_releasing.any()
        and not ssn.gpu_pipelined.any()
        and all(np.array_equal(ev.fit_idle, ev.fit_future) for ev in evals)
    )


def _failure_key(
    ssn: Session, job: int, tasks: list[int], placer: _Placer
) -> tuple[object, ...] | None:
    """What a failed greedy placement of ``job`` depends on, so that the same attempt on the
    same ground (in this cycle or, on the same nodes and configuration, the next) is answered
    from the record instead of placed again; None when the answer may depend on more (another
    placer, row plugins that read more than a template's shape).

    The greedy placer is deterministic, and its problem is built from the job's records and
    its tasks' states and nodes, the node records and topology, and the occupancy: the key
    holds the records by identity (the session that made an entry keeps them alive) and the
    occupancy by its fingerprint (:meth:`~gangsched.session.changes.ChangeLog.fingerprint`)."""
    if type(placer) is not GreedyPlacer or not ssn.points.shape_only:
        return None
    snap = ssn.snapshot
    own = ssn.job_tasks(job)
    return (
        "placement",
        id(snap.jobs[job]),
        tuple(id(snap.tasks[t]) for t in own.tolist()),
        ssn.task_state[own].tobytes(),
        ssn.task_node[own].tobytes(),
        tuple(id(snap.tasks[t]) for t in tasks),
        id(snap.nodes),
        id(snap.hypernodes),
        ssn.arrays.spec.names,
        ssn.changes.fingerprint(occupancy_columns(ssn)),
    )


def note_placement(ssn: Session, job: int, placer: object, result: PlacementResult) -> None:
    """Keep what ``placer`` answered for ``job`` (its last attempt wins) for
    ``Decisions.placements``: the status, and the gap only where the solver proved a bound
    (OPTIMAL, FEASIBLE without a fallback to greedy)."""
    status = result.status
    gap = float(result.gap)
    known = status in (Status.OPTIMAL, Status.FEASIBLE) and not result.fallback
    known = known and math.isfinite(gap) and gap >= 0.0
    ssn.placements[job] = PlacementInfo(
        placer=str(getattr(placer, "name", type(placer).__name__)),
        status=status.value if isinstance(status, Status) else str(status),
        gap=gap if known else None,
        fallback=bool(result.fallback),
    )


def place_jobs_jointly(
    ssn: Session, work: list[tuple[int, list[int]]], placer: _Placer
) -> dict[int, list[Assignment]]:
    """One placement of several gangs on what is idle now (joint mode): the placer chooses
    which gangs to place, all or nothing each. Returns assignments per placed job."""
    # A gang under pod constraints is left to place_job (placed one task at a time).
    work = [(job, tasks) for job, tasks in work if not _pod_constrained(ssn, tasks)]
    inputs = [g for job, tasks in work if not isinstance(g := _gang_input(ssn, job, tasks), str)]
    if not inputs:
        return {}
    gangs = tuple(_gang_request(ssn, g, False, _evaluations(ssn, g)) for g in inputs)
    # Priority-weighted: a gang of a higher-priority job is worth more (weights ≥ 1).
    prio = np.array([ssn.snapshot.jobs[g.job].priority for g in inputs], dtype=np.int64)
    weights = (prio - prio.min() + 1).astype(np.int64)
    result = placer.place(_problem(ssn, gangs, False, weights))
    out: dict[int, list[Assignment]] = {}
    for g, gp in zip(inputs, result.gangs, strict=True):
        note_placement(ssn, g.job, placer, result)
        if gp.placed:
            out[g.job] = _assign(
                ssn, gp.replicas, g.tmpl_ids, g.by_tmpl, g.request, g.gpu_count, False
            )
    return out


def _assign(
    ssn: Session,
    replicas: tuple[tuple[int, int, tuple[int, ...]], ...],
    tmpl_ids: list[int],
    by_tmpl: dict[int, list[int]],
    request: I64,
    gpu_count: I64,
    future: bool,
) -> list[Assignment]:
    """Replicas → tasks; on the future-idle path, mark a node's replicas pipelined unless they
    all fit what is idle there now."""
    pipelined_nodes: set[int] = set()
    if future:
        idle = ssn.idle()
        gidle = _gpu_free(ssn, False)
        need = np.zeros_like(idle)
        gneed = np.zeros_like(gidle)
        cap = ssn.arrays.gpu_capacity
        for t, node, devs in replicas:
            need[node] += request[t]
            if gpu_count[t]:
                task = by_tmpl[tmpl_ids[t]][0]
                gneed[node, list(devs)] += ssn.device_milli(task, node)
        short = (need > idle).any(axis=1) | (gneed > gidle).any(axis=1)
        whole_bad = (gneed >= cap[:, None]) & (gneed > 0) & (gidle < cap[:, None])
        pipelined_nodes = {int(n) for n in np.flatnonzero(short | whole_bad.any(axis=1))}
    nxt = dict.fromkeys(range(len(tmpl_ids)), 0)
    out: list[Assignment] = []
    for t, node, devs in replicas:
        task = by_tmpl[tmpl_ids[t]][nxt[t]]
        nxt[t] += 1
        out.append((task, node, devs, node in pipelined_nodes))
    return out
