"""proportion: weighted fair share of the cluster between queues (Volcano's proportion).

Theory of operation
-------------------
At open, every queue that holds at least one job takes part in a weighted water-filling of the
cluster total (:func:`water_fill`). A round hands what is left to the queues not yet satisfied,
in proportion to their weights; each queue's ``deserved`` is then capped at its
``realCapability`` (its capability, and what the other queues' guarantees leave:
``max(total − Σ guarantees, 0) + own guarantee``), capped at its request (allocated + pending)
and floored at its guarantee. A queue whose request is met, or whose deserved did not move,
leaves the pool. Rounds stop when nothing is left or nothing changes.

One correction to Volcano: its pool pays for a guarantee floor only after the fact, so when
a guaranteed queue's weighted grant is below its guarantee the pool can be overdrawn (the
deficit is clipped away) and the deserved amounts add up to more than the cluster — a promise
that cannot be kept, and a guarantee that reclaim cannot restore (the other queues are within
their deserved). On a dimension where Volcano's rounds overdraw, deserved is instead the exact
weighted water level, ``max(min(λ·weight, realCapability, request), guarantee)`` with ``λ``
chosen so the queues hold exactly the total. Elsewhere the result is Volcano's, to the round.

Then, per queue: *share* = max over the dimensions of ``deserved`` (≥ 0.1 canonical units) of
allocated / deserved; queue order = higher priority, then lower share; *overused* when deserved
≤ allocated on every dimension; a task is *allocatable* when the queue is Open and allocated +
request ≤ deserved on the dimensions the task asks for (a GPU-only job is not blocked by an
exhausted cpu share) and ≤ realCapability (a guarantee above the capability floors deserved
past it; Volcano then binds beyond the capability, gangsched does not); a job is *enqueueable*
when its queue is Open and min_resources + allocated + inqueue − elastic ≤ realCapability on
min_resources' dimensions, where inqueue is what admitted jobs have reserved and elastic what
running jobs hold beyond their minimum; what the job may preempt in its queue
(:meth:`~gangsched.session.core.Session.preemptable_for`, beyond the victims' elastic part) is
subtracted from allocated.
``on_allocate`` / ``on_deallocate`` keep every queue's share current within the cycle.

As victims (``reclaimable``): tasks of queues holding more than their deserved share on some
resource (the reclaim action adds its own rule on the shares after the move).
``victim_order``: tasks of the queue with the larger share first.

``pods`` takes no part in any of it.

Arithmetic: the snapshot bounds every amount by 2**53 and every per-resource sum over the
cluster by 2**60 (:mod:`gangsched.limits`), so the cluster total is summed exactly in int64
(:func:`~gangsched.units.cluster_total`) and the float64 deserved amounts go back to int64
clipped to ``[0, 2**60]`` (:func:`~gangsched.units.to_amounts`), never wrapped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from gangsched._types import BOOL, F64
from gangsched.framework.combine import Vote
from gangsched.limits import MAX_TOTAL
from gangsched.model import QueueState
from gangsched.plugins._exact_shares import as_floats, exact_water_fill, water_fill_figures
from gangsched.plugins._queue_amounts import (
    EPS,
    SLACK,
    capability_matrix,
    fits,
    names_of,
    resource_matrix,
)
from gangsched.plugins._queue_reasons import over_limit
from gangsched.session.arrays import TaskTemplate
from gangsched.session.rules.fairshare import QueueShares, enqueue_need, job_figures
from gangsched.units import PODS, cluster_total, to_amounts

if TYPE_CHECKING:
    from gangsched.session.core import Session

__all__ = ["EPS", "ProportionPlugin", "water_fill"]


def water_fill(
    total: F64,
    weights: F64,
    request: F64,
    guarantee: F64,
    real_capability: F64,
    *,
    participating: BOOL | None = None,
) -> F64:
    """Weighted water-filling of ``total`` between queues (see the module docstring).

    Parameters
    ----------
    total:
        ``(n_resources,)`` the cluster's allocatable total.
    weights:
        ``(n_queues,)`` queue weights (> 0).
    request, guarantee, real_capability:
        ``(n_queues, n_resources)``; ``real_capability`` may hold ``inf``.
    participating:
        ``(n_queues,)`` queues taking part (Volcano: those with jobs); all when omitted.
        The others deserve nothing.

    Returns
    -------
    ``(n_queues, n_resources)`` float64 deserved amounts.
    """
    part = np.ones(weights.size, dtype=np.bool_) if participating is None else participating
    exact = exact_water_fill(total, weights, request, guarantee, real_capability, part)
    return as_floats(exact, total.size)


def volcano_rounds(
    total: F64, weights: F64, request: F64, guarantee: F64, real_capability: F64, part: BOOL
) -> F64:
    """Volcano's rounds, exactly: grant ``remaining · w / Σw`` to every queue not yet met, cap
    at realCapability and request, floor at guarantee; a queue is met when its request is
    covered or its deserved did not move; the pool takes back what queues gave up and pays for
    what they gained, clipped at zero."""
    n = weights.size
    deserved = np.zeros_like(request, dtype=np.float64)
    remaining = total.astype(np.float64).copy()
    meet = ~part
    for _ in range(8 * n + 64):
        active = ~meet
        w_total = float(weights[active].sum())
        if w_total <= 0.0:
            break
        old = deserved
        grant = np.outer(np.where(active, weights / w_total, 0.0), remaining)
        new = np.minimum(np.minimum(old + grant, real_capability), request)
        new = np.maximum(new, guarantee)
        new = np.where(active[:, None], new, old)
        satisfied = np.all((request < new) | (np.abs(request - new) < EPS), axis=1)
        unchanged = np.all(new == old, axis=1)
        meet = meet | (active & (satisfied | unchanged))
        left = np.maximum(remaining - (new - old).sum(axis=0), 0.0)
        deserved = new
        if np.all(left < EPS) or np.array_equal(left, remaining):
            break
        remaining = left
    return deserved


def level_fill(
    total: F64, weights: F64, request: F64, guarantee: F64, real_capability: F64, part: BOOL
) -> F64:
    """The exact weighted water level per dimension: ``deserved = max(min(λ·w, cap), g)``
    with ``cap = min(realCapability, request)`` and ``λ`` the level at which the queues hold
    exactly the total (or everything they can use, when that is less)."""
    cap = np.where(part[:, None], np.minimum(real_capability, request), 0.0)
    g = np.where(part[:, None], guarantee, 0.0)
    w = np.where(part, weights, 1.0)[:, None]
    top = np.maximum(cap, g)

    def held(lam: F64) -> F64:
        out: F64 = np.maximum(np.minimum(lam[None, :] * w, cap), g).sum(axis=0)
        return out

    lo = np.zeros(total.size)
    hi = (cap / w).max(axis=0, initial=0.0) + 1.0
    enough = top.sum(axis=0) <= total
    for _ in range(200):
        mid = (lo + hi) / 2
        fits = held(mid) <= total
        lo = np.where(fits, mid, lo)
        hi = np.where(fits, hi, mid)
    lam = np.where(enough, np.inf, lo)
    out: F64 = np.where(part[:, None], np.maximum(np.minimum(lam[None, :] * w, cap), g), 0.0)
    return out


def share_of(alloc: F64, inv_deserved: F64) -> F64:
    """``max_r alloc / deserved`` over the dimensions with a deserved amount.

    ``alloc`` is ``(..., n_resources)``; ``inv_deserved`` the matching inverse (0 where
    deserved is empty)."""
    out: F64 = (alloc * inv_deserved).max(axis=-1, initial=0.0)
    return out


def inverse(deserved: F64, pods: int) -> F64:
    """``1 / deserved`` where deserved is at least :data:`EPS`, 0 elsewhere and on pods."""
    inv = np.zeros_like(deserved, dtype=np.float64)
    np.divide(1.0, deserved, out=inv, where=deserved >= EPS)
    inv[..., pods] = 0.0
    return inv


def _amounts_of(deserved: F64) -> npt.NDArray[np.int64]:
    """:func:`~gangsched.units.to_amounts` of the deserved figures, read directly when they
    are all within ``[0, MAX_TOTAL]`` (no NaN, nothing to clip: the rounding alone)."""
    if deserved.size and not (deserved.min() >= 0.0 and deserved.max() <= _TOP):
        return to_amounts(deserved)
    out: npt.NDArray[np.int64] = np.rint(deserved).astype(np.int64)
    return out


_TOP = float(MAX_TOTAL)


#: The last opening's figures read from the queue records and the nodes' allocatable alone
#: (:func:`_queue_figures`), with the very objects they were read from: a record tuple or
#: an array held here cannot be another with the same identity, and both are immutable.
_LAST_QUEUE_FIGURES: list[tuple[tuple[Any, ...], npt.NDArray[np.int64], Any, tuple[F64, ...]]] = []


def _queue_figures(ssn: Session, pods: int) -> tuple[F64, ...]:
    """``(total, guarantee, real_capability, weights)``: the cluster total, every queue's
    guarantee, its realCapability (its capability, and what the other queues' guarantees
    leave) and its weight -- read-only, and taken from the last opening when its queue
    records, allocatable array and resource columns are the very same objects."""
    snap, a = ssn.snapshot, ssn.arrays
    for queues, allocatable, spec, figures in _LAST_QUEUE_FIGURES:
        if queues is snap.queues and allocatable is a.allocatable and spec is a.spec:
            return figures
    total = cluster_total(a.allocatable, pods)
    guarantee = resource_matrix(ssn, "guarantee")
    capability, _ = capability_matrix(ssn)
    capability[:, pods] = np.inf
    real = np.maximum(total - guarantee.sum(axis=0), 0.0) + guarantee
    real_capability = np.minimum(real, capability)
    weights = np.array([q.weight for q in snap.queues], dtype=np.float64)
    figures = (total, guarantee, real_capability, weights)
    for array in figures:
        array.flags.writeable = False
    _LAST_QUEUE_FIGURES[:] = [(snap.queues, a.allocatable, a.spec, figures)]
    return figures


class ProportionPlugin(QueueShares):
    """Weighted fair share between queues; see the module docstring."""

    name = "proportion"
    known_arguments: tuple[str, ...] = ()

    def on_session_open(self, ssn: Session) -> None:
        a = ssn.arrays
        self._pods = pods = a.spec.index(PODS)
        total, guarantee, self.real_capability, weights = _queue_figures(ssn, pods)
        request, self.inqueue, self.elastic, has_jobs = job_figures(ssn)
        self.request = request
        # deserved ≤ realCapability except where a guarantee is above the capability (floored
        # there, as Volcano does); the capability stays a ceiling even then. The limits are
        # whole units, rounded down from the exact amounts: the admission test compares
        # exactly.
        self.deserved, self._limit = water_fill_figures(
            total, weights, request, guarantee, self.real_capability, has_jobs
        )
        self.deserved_amounts = _amounts_of(self.deserved)
        self._limit_rows: list[list[int]] = self._limit.tolist()
        self._asks: dict[bytes, tuple[tuple[int, int], ...]] = {}
        self._inv = inverse(self.deserved, pods)
        self.shares = share_of(ssn.queue_allocated.astype(np.float64), self._inv)

    # ------------------------------------------------------------------ shares

    def _refresh(self, ssn: Session, task: int) -> None:
        q = int(ssn.job_queue[ssn.task_job[task]])
        self.shares[q] = share_of(ssn.queue_allocated[q].astype(np.float64), self._inv[q])

    def queue_overused(self, ssn: Session, queue: int) -> bool:
        """For status: holds something and is overused."""
        return bool(ssn.queue_allocated[queue].any()) and self.overused(ssn, queue)

    def on_allocate(self, ssn: Session, task: int) -> None:
        self._refresh(ssn, task)

    def on_deallocate(self, ssn: Session, task: int) -> None:
        self._refresh(ssn, task)

    # ------------------------------------------------------------------ extension points

    def queue_order(self, ssn: Session, queue: int) -> tuple[Any, ...]:
        return (-ssn.snapshot.queues[queue].priority, float(self.shares[queue]))

    def overused(self, ssn: Session, queue: int) -> bool:
        d = self.deserved[queue]
        alloc = ssn.queue_allocated[queue]
        # Every resource but pods: what it holds is at or above what it deserves (in float64,
        # as the array comparison would; a few columns, so plain floats are faster).
        pods = self._pods
        for c, (due, held) in enumerate(
            zip(d.tolist(), alloc.astype(np.float64).tolist(), strict=True)
        ):
            if c != pods and not (due < held or abs(due - held) < EPS):
                return False
        return True

    def allocatable(self, ssn: Session, queue: int, tmpl: TaskTemplate) -> bool:
        if ssn.snapshot.queues[queue].state is not QueueState.OPEN:
            return False
        # The columns the template asks for (pods aside) and its amounts, as plain ints: a
        # few columns, compared exactly (amounts below 2**53, limits up to 2**60).
        key = tmpl.request.tobytes()
        asks = self._asks.get(key)
        if asks is None:
            pods = self._pods
            asks = self._asks[key] = tuple(
                (c, r) for c, r in enumerate(tmpl.request.tolist()) if r > 0 and c != pods
            )
        alloc = ssn.queue_allocated[queue].tolist()
        limit = self._limit_rows[queue]
        return all(alloc[c] + r <= limit[c] for c, r in asks)

    def allocatable_reason(self, ssn: Session, queue: int, tmpl: TaskTemplate) -> str | None:
        """Why :meth:`allocatable` refuses (None when it does not), in the words that follow
        "queue 'q' cannot take this task now:": the queue's state, or each resource past its
        limit (the capability, the realCapability — what the other queues' guarantees leave —
        or the deserved share) with the numbers."""
        rec = ssn.snapshot.queues[queue]
        if rec.state is not QueueState.OPEN:
            return f"the queue is {rec.state.value}"
        if self.allocatable(ssn, queue, tmpl):
            return None
        dims = tmpl.request > 0
        dims[self._pods] = False
        alloc = ssn.queue_allocated[queue].astype(np.float64)
        real = self.real_capability[queue]
        cap = np.full(real.size, np.inf)
        for res, amount in rec.capability_limits(flat=True).items():
            cap[ssn.arrays.spec.index(res)] = float(amount)

        def ceiling(c: int) -> str:
            return "capability" if cap[c] <= real[c] else "realCapability"

        phrases = over_limit(ssn, alloc, tmpl.request, real, dims, ceiling, SLACK)
        within = dims & ~(alloc + tmpl.request > real + SLACK)
        phrases += over_limit(
            ssn, alloc, tmpl.request, self.deserved[queue], within, lambda _: "deserved", SLACK
        )
        return "; ".join(phrases) or "over its deserved share"

    def job_enqueueable(self, ssn: Session, job: int) -> Vote:
        got = enqueue_need(ssn, job, self._pods)
        if isinstance(got, Vote):
            return got
        # What the job may preempt is held in this queue and would be freed for it.
        need, dims, freed = got
        q = int(ssn.job_queue[job])
        queue = ssn.snapshot.queues[q]
        base = ssn.queue_allocated[q] + self.inqueue[q] - self.elastic[q] - freed
        if fits(base, need, self.real_capability[q], dims):
            return Vote.PERMIT
        over = dims & (base + need > self.real_capability[q] + SLACK)
        ssn.note_job(
            job,
            "NotEnqueued",
            f"queue {queue.name!r} resource quota insufficient: {names_of(ssn, over)}",
        )
        return Vote.REJECT

    def job_enqueued(self, ssn: Session, job: int) -> None:
        rec = ssn.snapshot.jobs[job]
        if rec.min_resources is not None:
            need = ssn.vector(rec.min_resources).astype(np.float64)
            need[self._pods] = 0.0
            self.inqueue[ssn.job_queue[job]] += need

    def reclaimable(
        self, ssn: Session, preemptor: int, candidates: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.int64]:
        dims = np.arange(self.deserved.shape[1]) != self._pods
        over = np.any(ssn.queue_allocated[:, dims] > self.deserved[:, dims] + EPS, axis=1)
        out: npt.NDArray[np.int64] = candidates[over[ssn.job_queue[ssn.task_job[candidates]]]]
        return out

    def victim_order(self, ssn: Session, task: int) -> tuple[Any, ...]:
        return (-float(self.shares[int(ssn.job_queue[ssn.task_job[task]])]),)
