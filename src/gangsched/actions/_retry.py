"""Gang-aware retry: which waiting jobs ``allocate`` need not try again this cycle.

Theory of operation
-------------------
A job whose attempt failed is remembered (:class:`Failure`): its records, the cycle's
context, the change-log cursor taken just before the attempt and the free room of every node
then (now and once releases finish, per resource and per GPU device: the placement ground of
:mod:`gangsched.actions._gang_placement`), and the words the attempt left. The memory lives
in the session's ``records`` and reaches the next cycle through ``prior_records`` (a
:class:`~gangsched.state.ClusterState` opens each cycle with the last session).

In a later ``allocate`` run, a job is *carried* — not tried, and given its last words back,
prefixed with :data:`CARRIED` — when all of these hold:

* the session may skip at all (:func:`skipping_allowed`): predicates and node scores answer by
  a task's shape (``shape_only``), the ``allocatable``, ``job_ready``, ``job_pipelined`` and
  ``job_valid`` points are served by the package's own plugins (readiness by ``gang`` alone),
  gangs go through the greedy placer, not the joint one; no task of the snapshot carries a
  pod (anti-)affinity or topology spread constraint (those read where other pods are);
* the job's pending tasks share one template and none of its tasks runs;
* its records (job, every task) and its tasks' states are those of the failed attempt, and
  the hypernode and queue records, the configuration and the resource names too (checked at
  the run's start);
* and its attempt would fail: at the run's start, its queue refuses the template; otherwise
  at its turn in its queue, on the room and holdings of then, one of: its queue refuses the
  template; no place the gang may use has room for the tasks it still needs
  (:func:`room_short` over every node), whatever the last attempt's cause; or the attempt
  failed for room alone (the queue took every task the attempt asked it for), the change log
  still knows the attempt's cursor, and no node gained room since the cursor in a column the
  template asks for (or in one where the node was short), nor in a GPU device when the
  template asks for GPUs, nor had its record changed (:func:`renewed`: it may admit the
  template now) — or every place the gang may use that holds such a node has room for fewer
  of its tasks than it still needs (:func:`room_short`).

The node records may differ from the attempt's (:func:`same_but_nodes`): the queue's verdict
and the room are read now, and the rows the log names since the attempt include every node
whose record changed. The room proofs wait for the job's turn: most jobs held there are
refused by their queue, having cost none.

Why that is exact (the contract in ``docs/scheduling.md``): inside one ``allocate`` run room
only shrinks (a placement takes, a discarded attempt gives back exactly what it took) and a
queue's holdings only grow, so a job that fails on the room and holdings of a moment of the
run fails at its turn too; a failing attempt changes nothing another job reads. With one template,
how many of the job's tasks fit is the sum over nodes of how many copies fit each node, which
no node's smaller room can raise; the built-in queue verdicts (``alloc + request <= limit``)
only refuse more as holdings grow. So the attempt would fail, and leaving it out changes no
bind, eviction, reservation or phase. An answer worked out earlier in the run (per queue and
shape, per shape and size, per failure ground) still proves what it proved later in it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import numpy as np
import numpy.typing as npt

from gangsched._types import BOOL, I64
from gangsched.actions._gang_placement import placement_ground
from gangsched.decisions import PlacementInfo
from gangsched.model import Job, Task, TopologyMode
from gangsched.model.topology import build_topology
from gangsched.placement import GreedyPlacer
from gangsched.session.core import PIPELINED_OR_READY, TaskState
from gangsched.session.fit import gpu_need
from gangsched.session.pod_constraints import pod_rules

if TYPE_CHECKING:
    from gangsched.session.arrays import TaskTemplate
    from gangsched.session.core import Session

__all__ = [
    "CARRIED",
    "MEMORY_KEY",
    "Failure",
    "Ground",
    "context_of",
    "copies_bound",
    "gained",
    "renewed",
    "room_short",
    "same_but_nodes",
    "skipping_allowed",
]

#: What every carried word starts with (a job's message, its tasks' reasons).
CARRIED = "carried: "

#: Where the memory sits in ``Session.records`` (a job name -> :class:`Failure` dict).
MEMORY_KEY: tuple[object, ...] = ("allocate", "failed attempts")

#: The free room of every node: now, once releases finish, then the same per GPU device slot.
Ground = tuple[I64, I64, I64, I64]

_RUNS = (TaskState.RUNNING, TaskState.BOUND)
_MANY = 2**40

_NodeRows = npt.NDArray[np.intp]


@dataclass(slots=True, eq=False)
class Failure:
    """One failed attempt of a job, and what it left (see the module docstring)."""

    job: Job
    tasks: tuple[Task, ...]
    states: bytes
    context: tuple[object, ...]
    lineage: object
    cursor: int
    #: Whether the queue took every task the attempt asked it for (the attempt failed for
    #: room alone).
    capacity: bool
    ground: Ground
    #: The template's request per resource column, and whether it asks for GPUs.
    request: I64
    gpu: bool
    #: The attempt's words, already marked carried: the job's, then its tasks' (by place in
    #: the job), and what the placer said.
    reason: tuple[str, str] | None
    task_words: tuple[tuple[int, str], ...]
    placement: PlacementInfo | None


def context_of(ssn: Session) -> tuple[object, ...]:
    """What every remembered attempt of a session shares: the configuration, the node,
    hypernode and queue records, the resource names."""
    snap = ssn.snapshot
    return (ssn.config, snap.nodes, snap.hypernodes, snap.queues, ssn.arrays.spec.names)


def same_context(a: tuple[object, ...], b: tuple[object, ...]) -> bool:
    """Whether two contexts are the same records (by identity: a long-lived state shares the
    records that did not change), the resource names equal."""
    return all(x is y for x, y in zip(a[:-1], b[:-1], strict=True)) and a[-1] == b[-1]


def same_but_nodes(a: tuple[object, ...], b: tuple[object, ...]) -> bool:
    """Whether two contexts differ at most in their node records (:func:`same_context`
    otherwise): the configuration, hypernode and queue records the same, the resource names
    equal."""
    return a[0] is b[0] and a[2] is b[2] and a[3] is b[3] and a[-1] == b[-1]


def renewed(then: tuple[object, ...], now: tuple[object, ...], rows: _NodeRows) -> _NodeRows:
    """The nodes of ``rows`` whose record is not the one of context ``then`` (contexts of one
    node order: the change log continued between them). A node whose labels, taints or cordon
    changed may admit a template it refused, with no more room."""
    if then[1] is now[1] or rows.size == 0:
        return rows[:0]
    old, new = cast("tuple[object, ...]", then[1]), cast("tuple[object, ...]", now[1])
    out: _NodeRows = rows[[old[r] is not new[r] for r in rows.tolist()]]
    return out


def skipping_allowed(ssn: Session, placer: object, joint: bool) -> bool:
    """Whether a failed attempt may be carried in this session (see the module docstring)."""
    points = ssn.points
    if joint or type(placer) is not GreedyPlacer or not points.shape_only:
        return False
    if not all(points.built_in(p) for p in ("allocatable", "job_valid", "job_ready")):
        return False
    if pod_rules(ssn) is not None:
        # Pod (anti-)affinity and spread read where other pods are, not only free room: a
        # pod placed or gone elsewhere can make a job fit with no node gaining room.
        return False
    return points.served_only_by(("job_ready", "job_pipelined"), frozenset({"gang"}))


def runs_nothing(ssn: Session, job: int) -> bool:
    """Whether none of ``job``'s tasks runs (a running job's phase reads its failures)."""
    return ssn.count_states(job, _RUNS) == 0


def gained(then: Ground, now: Ground, rows: _NodeRows, request: I64, gpu: bool) -> _NodeRows:
    """The nodes of ``rows`` with more room ``now`` than ``then`` where it matters to a task
    asking for ``request``: a column it asks for, a column where the node was short (a fit
    reads every column), a GPU device when it asks for GPUs."""
    if rows.size == 0:
        return rows
    asks: BOOL = request > 0
    more = np.zeros(rows.size, dtype=np.bool_)
    for k in (0, 1):
        before, after = then[k][rows], now[k][rows]
        more |= ((after > before) & (asks | (before < 0))).any(axis=1)
    if gpu:
        for k in (2, 3):
            more |= (now[k][rows] > then[k][rows]).any(axis=1)
    out: _NodeRows = rows[more]
    return out


def copies_bound(ssn: Session, tmpl: TaskTemplate, now: Ground) -> I64:
    """Per node, at most how many tasks of ``tmpl`` it could take, now or once releases
    finish, on its own (0 where the template fails a predicate or does not fit once): each
    task takes its request in every column and ``gpu_count`` devices of at least the
    template's per-device charge, so no more fit than the room divided by them."""
    ev = ssn.feasible(tmpl)
    out: I64 = np.zeros(ev.ok.size, dtype=np.int64)
    rows = np.flatnonzero(ev.ok & ev.fit_future)  # elsewhere none fits
    if rows.size == 0:
        return out
    later = now[1][rows]
    request = tmpl.request.copy()
    request[ssn.arrays.spec.gpu_column] = 0
    cols = np.flatnonzero(request > 0)
    bound = np.full(rows.size, _MANY, dtype=np.int64)
    if cols.size:
        bound = (np.maximum(later[:, cols], 0) // request[cols]).min(axis=1)
    if tmpl.gpu_count:
        take = ev.gpu_need if ev.gpu_need is not None else gpu_need(ssn.arrays, tmpl)
        need = np.maximum(take[rows], 1) * tmpl.gpu_count
        bound = np.minimum(bound, now[3][rows].sum(axis=1) // need)
    out[rows] = bound
    return out


def room_short(
    ssn: Session,
    job: int,
    waiting: int,
    tmpl: TaskTemplate,
    bounds: dict[object, I64],
    rows: _NodeRows | None = None,
    size: int | None = None,
) -> bool:
    """Whether every place the gang of ``job`` may use that holds one of ``rows`` (None:
    any node) has room for fewer tasks than the gang still needs (``waiting``: its pending
    tasks, all of template ``tmpl``): the whole cluster, or for a hard network topology each
    domain of its highest allowed tier. ``bounds``: :func:`copies_bound` per template shape
    (what it reads of a template, when predicates and scores answer by shape), worked
    out on the room of now and kept there (room only shrinks during a run). ``size``: the
    tasks the gang still needs, when the caller has counted them (its minimum less its
    tasks placed, reserved or pending best-effort, else ``waiting``)."""
    if size is None:
        missing = int(ssn.job_min[job]) - ssn.count_states(job, PIPELINED_OR_READY)
        missing -= ssn.pending_best_effort(job)
        size = waiting if missing <= 0 else missing
    nt = ssn.snapshot.jobs[job].network_topology
    hard = nt is not None and nt.mode is TopologyMode.HARD
    if size <= 1 and not hard:
        # One task: short when no node could take it at all.
        ev = ssn.feasible(tmpl)
        return not bool((ev.ok & ev.fit_future).any())
    bound = bounds.get(tmpl.shape)
    if bound is None:
        bound = bounds[tmpl.shape] = copies_bound(ssn, tmpl, placement_ground(ssn))
    if nt is None or not hard:
        return int(bound.sum()) < size
    topo = build_topology(ssn.snapshot)
    tier = nt.highest_tier_allowed
    cover = topo.cover(topo.top_tier if tier is None else topo.rank_of(tier))
    inside = cover >= 0
    sums = np.bincount(cover[inside], weights=bound[inside]) if inside.any() else np.zeros(0)
    domains = cover if rows is None else cover[rows]
    domains = domains[domains >= 0]
    return not bool((sums[domains] >= size).any())
