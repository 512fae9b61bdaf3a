"""sla: a waiting-time bound, and a reservation that keeps the head-of-line job from starving.

Theory of operation
-------------------
``sla-waiting-time`` (seconds, or a duration such as ``"90s"``, ``"10m"``, ``"1h30m"``) is the
longest a job should wait. A job is *overdue* when its ``age`` (seconds since submission, on
the caller's clock) reached it. As in Volcano, overdue jobs are admitted (``job_enqueueable``
permits) and their reservations kept (``job_pipelined`` permits); ``job_order`` puts overdue
jobs first, oldest first, and leaves the others to the next plugins.

Reservation (``sla.reservation``, default on). Of the admitted, valid, starving, overdue jobs —
oldest first — the first that can ever fit is the *head* job; nodes are **held** for it:

1. every task on a node ends at a known time: releasing tasks at 0, running tasks after their
   job's ``walltime`` (time left), tasks of jobs without a walltime never (nor do
   reservations of other jobs);
2. for each of those end times ``T`` in increasing order (then "never"), the head's missing
   gang (the pending tasks up to ``min_available``, short roles first) is fitted, greedily and
   by counts, on the capacity free at ``T`` — inside one allowed domain for a hard topology
   (lowest tier first); the first ``T`` that fits is the head's *expected wait*, the nodes it
   used are held;
3. a ``predicate`` rejects held nodes for every task that could delay the head: a task of
   another job may use them only if it is best-effort (no request; such tasks are also
   evicted first, see ``victim_order``), or its job declares a ``walltime`` no longer than the
   expected wait (Slurm's backfill rule: it ends before the head can start). When the wait is
   unknown (the head must outlast a job without a walltime) only best-effort tasks may use them.

The held nodes and the expected wait are reported in ``Decisions.holds``, and in words in the
reasons of the head job (nodes held for it, expected wait) and of every job a held node was
refused to (which job holds it and why this one may not use it). Allocate, backfill,
preempt and reclaim all place through the predicates, so none of them can use held nodes
against the rule. There is one reservation per cycle (Slurm's conservative backfill reserves
for every queued job; here only the head's start is protected). The reservation is recomputed
each cycle from the snapshot, so it needs no state beyond the jobs' ``age`` and ``walltime``.
The fit is an estimate (counts per node, GPU devices per node); the real placement is still
done by the actions.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from gangsched._types import BOOL, I64
from gangsched.config import arg_bool
from gangsched.errors import ConfigError
from gangsched.framework.combine import Vote
from gangsched.model import JobPhase, TopologyMode
from gangsched.model.gpu_charge import device_take
from gangsched.model.topology import build_topology
from gangsched.session.arrays import TaskTemplate
from gangsched.session.core import TaskState
from gangsched.session.rules.gang import needed_tasks
from gangsched.session.task_states import in_states
from gangsched.units import show_value

if TYPE_CHECKING:
    from gangsched.session.core import Session

__all__ = ["MAX_WAITING_TIME", "Reservation", "SlaPlugin", "parse_duration"]

NEVER = np.iinfo(np.int64).max

_DURATION = re.compile(r"^(?:([0-9]+)h)?(?:([0-9]+)m)?(?:([0-9]+)s)?$")

#: Longest ``sla-waiting-time``, in seconds: 2**53 (exact as a float, far beyond any job age).
MAX_WAITING_TIME = 2**53
#: Longest text read as a waiting time (a valid one needs far fewer characters).
_MAX_DURATION_TEXT = 64


def parse_duration(value: object, *, key: str = "sla-waiting-time") -> int:
    """Seconds in ``value``: a number in ``[0, 2**53]`` (a fraction is cut off), or
    ``"<h>h<m>m<s>s"`` in ASCII digits (any part optional) of at most 2**53 seconds.

    Anything else (NaN, infinities, negative numbers, booleans, other text, a text longer than
    64 characters) is a :class:`~gangsched.errors.ConfigError` naming the plugin and ``key``.
    """
    seconds: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        seconds = value
    elif isinstance(value, float) and math.isfinite(value) and value >= 0:
        seconds = int(value)
    elif isinstance(value, str) and len(value) <= _MAX_DURATION_TEXT:
        text = value.strip()
        if text and text.isascii():
            if text.isdigit():
                seconds = int(text)
            elif (m := _DURATION.match(text)) is not None:
                h, mi, s = (int(g) if g else 0 for g in m.groups())
                seconds = h * 3600 + mi * 60 + s
    if seconds is None or seconds < 0:
        raise ConfigError(
            f"expected seconds or a duration like '10m', got {show_value(value)}",
            kind="plugin",
            name="sla",
            field=key,
        )
    if seconds > MAX_WAITING_TIME:
        raise ConfigError(
            f"{show_value(seconds)} seconds is beyond the limit of 2**53 = {MAX_WAITING_TIME}",
            kind="plugin",
            name="sla",
            field=key,
        )
    return seconds


@dataclass(frozen=True, slots=True)
class Reservation:
    """Nodes held for the head-of-line job (indices) and its expected wait (None: unknown)."""

    job: int
    nodes: tuple[int, ...]
    mask: BOOL  # (n_nodes,)
    expected_wait: int | None


class SlaPlugin:
    name = "sla"
    known_arguments: tuple[str, ...] = ("sla-waiting-time", "sla.reservation")

    def __init__(self, arguments: Mapping[str, object]) -> None:
        raw = arguments.get("sla-waiting-time")
        self.waiting: int | None = None if raw is None else parse_duration(raw)
        self.reserve = arg_bool(arguments, "sla.reservation", True, plugin=self.name)
        self._hold: Reservation | None = None
        self._done = False
        self._blocked: dict[int, str] = {}  # job → why the held nodes are closed to it

    def on_session_open(self, ssn: Session) -> None:
        self._hold = None
        self._done = False
        self._blocked = {}

    # ------------------------------------------------------------------ waiting time

    def overdue(self, ssn: Session, job: int) -> bool:
        return self.waiting is not None and ssn.snapshot.jobs[job].age >= self.waiting

    def job_order(self, ssn: Session, job: int) -> tuple[Any, ...]:
        if self.overdue(ssn, job):
            return (0, -ssn.snapshot.jobs[job].age)
        return (1, 0)

    def job_enqueueable(self, ssn: Session, job: int) -> Vote:
        return Vote.PERMIT if self.overdue(ssn, job) else Vote.ABSTAIN

    def job_pipelined(self, ssn: Session, job: int) -> Vote:
        return Vote.PERMIT if self.overdue(ssn, job) else Vote.ABSTAIN

    def victim_order(self, ssn: Session, task: int) -> tuple[Any, ...]:
        return (0 if ssn.snapshot.tasks[task].best_effort else 1,)

    # ------------------------------------------------------------------ reservation

    def predicate(
        self, ssn: Session, tmpl: TaskTemplate, rows: npt.NDArray[np.intp]
    ) -> list[tuple[BOOL, str]]:
        hold = self.hold(ssn)
        if hold is None or tmpl.job == hold.job or tmpl.best_effort:
            return []
        walltime = ssn.snapshot.jobs[tmpl.job].walltime
        wait = hold.expected_wait
        if walltime is not None and wait is not None and walltime <= wait:
            return []
        name = ssn.snapshot.jobs[hold.job].name
        why = _closed_because(walltime, wait)
        reject = hold.mask[rows]
        if reject.any():
            self._blocked.setdefault(tmpl.job, why)
        return [(reject, _held_for(name, why))]

    def reason_notes(self, ssn: Session) -> dict[int, str]:
        """What the cycle's reservation means for each job it touched, in words: for the head
        job, that nodes are held for it (and when it should fit); for every job a held node
        was refused to, which job holds them and why this one may not use them (the
        predicate's word, so a reason that shows it already is not told twice). Empty when
        nothing was held."""
        hold = self._hold
        if hold is None:
            return {}
        jobs = ssn.snapshot.jobs
        names = ssn.arrays.node_names
        nodes = ", ".join(names[n] for n in hold.nodes)
        head = jobs[hold.job]
        when = (
            f"expected to fit in {hold.expected_wait} s"
            if hold.expected_wait is not None
            else "expected start unknown (a job on them declares no walltime)"
        )
        out = {
            hold.job: (
                f"sla: waited {head.age} s (sla-waiting-time {self.waiting} s); "
                f"node(s) {nodes} held for it, {when}"
            )
        }
        for j, why in sorted(self._blocked.items()):
            out[j] = _held_for(head.name, why)
        return out

    def hold(self, ssn: Session) -> Reservation | None:
        """The cycle's reservation, computed on first use (after every plugin has opened)."""
        if not self._done:
            self._done = True
            self._hold = self._reserve(ssn) if self.reserve and self.waiting is not None else None
            if self._hold is not None:
                ssn.holds.append((self._hold.job, self._hold.nodes, self._hold.expected_wait))
        return self._hold

    def _reserve(self, ssn: Session) -> Reservation | None:
        enqueue_on = ssn.config.has_action("enqueue")
        heads = []
        for j, job in enumerate(ssn.snapshot.jobs):
            if not self.overdue(ssn, j) or (ssn.job_phase[j] is JobPhase.PENDING and enqueue_on):
                continue
            if ssn.points.job_valid(j) is not None or not ssn.points.job_starving(j):
                continue
            heads.append((-job.age, ssn.job_key(j), j))
        heads.sort()
        for _, _, j in heads:
            claim = needed_tasks(ssn, j)
            if claim:
                found = self._fit_in_time(ssn, j, claim)
                if found is not None:
                    return found
        return None

    def _fit_in_time(self, ssn: Session, job: int, claim: list[int]) -> Reservation | None:
        a = ssn.arrays
        jobs = ssn.snapshot.jobs
        held = np.flatnonzero(
            in_states(ssn.task_state, (TaskState.RUNNING, TaskState.BOUND, TaskState.RELEASING))
            & (ssn.task_node >= 0)
        )
        ends = np.array(
            [
                0
                if ssn.task_state[t] == TaskState.RELEASING
                else (w if (w := jobs[int(ssn.task_job[t])].walltime) is not None else NEVER)
                for t in held.tolist()
            ],
            dtype=np.int64,
        )
        base = a.allocatable - ssn.used - ssn.pipelined  # (n_nodes, n_resources)
        gbase = a.gpu_capacity[a.gpu_node] - ssn.gpu_used - ssn.gpu_pipelined  # per device
        groups: dict[int, list[int]] = {}
        for t in claim:
            groups.setdefault(int(ssn.template_of[t]), []).append(t)
        masks = {i: self._static_ok(ssn, ssn.templates[i]) for i in groups}
        domains = _domains(ssn, job)
        for when in sorted({0, *ends.tolist()}):
            done = ends <= when
            free = base.copy()
            gfree = gbase.copy()
            for t in held[done].tolist():
                n = int(ssn.task_node[t])
                free[n] += ssn.row_on(t, n)
                if ssn.task_gpus[t]:
                    gfree[a.device_index(n, ssn.task_gpus[t])] += ssn.device_milli(t, n)
            for among in domains:
                nodes = _count_fit(ssn, groups, masks, among, free, gfree)
                if nodes is not None:
                    mask = np.zeros(a.n_nodes, dtype=np.bool_)
                    mask[nodes] = True
                    wait = None if when == NEVER else int(when)
                    return Reservation(job=job, nodes=tuple(nodes), mask=mask, expected_wait=wait)
        return None

    def _static_ok(self, ssn: Session, tmpl: TaskTemplate) -> BOOL:
        rows = np.arange(ssn.arrays.n_nodes, dtype=np.intp)
        return ssn.points.predicate_ok(tmpl, rows, without=self)


def _held_for(head: str, why: str) -> str:
    """The words for a node held for job ``head`` and closed to a task for reason ``why``
    (the predicate's word and, for jobs it blocked, the note in their reasons alike)."""
    return f"node(s) held for starving job {head!r} ({why})"


def _closed_because(walltime: int | None, wait: int | None) -> str:
    """Why a job that is not best-effort may not use the held nodes."""
    if wait is None:
        return "its start time is unknown; only best-effort tasks may use them"
    if walltime is None:
        return f"it should start in {wait} s and this job declares no walltime"
    return f"it should start in {wait} s, before this job's walltime of {walltime} s ends"


def _domains(ssn: Session, job: int) -> list[BOOL | None]:
    nt = ssn.snapshot.jobs[job].network_topology
    if nt is None or nt.mode is not TopologyMode.HARD:
        return [None]
    topo = build_topology(ssn.snapshot)  # built once per snapshot, which keeps it
    return list(topo.domain_masks(nt.highest_tier_allowed))


def _count_fit(
    ssn: Session,
    groups: Mapping[int, list[int]],
    masks: Mapping[int, BOOL],
    among: BOOL | None,
    free: I64,
    gfree: I64,
) -> list[int] | None:
    """Nodes that take every task of ``groups`` (template → tasks) on capacity ``free``
    (n_nodes, n_resources) and per-device ``gfree`` (n_devices,), filling the roomiest
    nodes first; None when they do not all fit. ``free`` and ``gfree`` are consumed."""
    a = ssn.arrays
    used: set[int] = set()
    for i, tasks in groups.items():
        tmpl = ssn.templates[i]
        req = tmpl.request.copy()
        cap = a.gpu_capacity
        milli = device_take(tmpl.gpu_milli, cap, a.gpu_sharing)
        dims = req > 0
        if tmpl.gpu_count:
            dims[a.spec.gpu_column] = False
        per = np.where(dims, free // np.where(dims, req, 1), np.iinfo(np.int64).max).min(axis=1)
        if tmpl.gpu_count:
            per_dev = gfree // np.maximum(milli, 1)[a.gpu_node]
            slots = np.bincount(a.gpu_node, weights=per_dev, minlength=a.n_nodes).astype(np.int64)
            per = np.minimum(per, slots // tmpl.gpu_count)
        ok = masks[i] if among is None else masks[i] & among
        per = np.where(ok, np.maximum(per, 0), 0)
        if int(per.sum()) < len(tasks):
            return None
        left = len(tasks)
        for n in np.lexsort((np.arange(per.size), -per)).tolist():
            if left == 0 or per[n] == 0:
                break
            take = int(min(per[n], left))
            left -= take
            used.add(n)
            free[n] -= take * req
            for _ in range(take * tmpl.gpu_count):
                dev = a.devices(n)
                g = dev.start + int(np.argmax(gfree[dev]))
                gfree[g] -= int(milli[n])
    return sorted(used)
