"""Disruption budgets (Kubernetes' PodDisruptionBudget): the one owner of how evictions count.

Theory of operation
-------------------
A :class:`~gangsched.model.DisruptionBudget` covers every task of the jobs it names and the
tasks it names. Of its covered tasks, *expected* are those that have not finished (phase not
Succeeded or Failed in the snapshot), *healthy* those running or bound now (in the session:
a task evicted earlier in the cycle is no longer healthy). The budget *desires*

* ``min_available``: that count, or ``ceil(N% × expected)``;
* ``max_unavailable``: ``expected −`` that count, or ``expected − ceil(N% × expected)``;

and allows ``healthy − desired`` more disruptions (none when that is zero or less), as the
Kubernetes disruption controller computes ``disruptionsAllowed``. An eviction set *breaks* a
budget when it takes more healthy covered tasks than the budget allows; because healthy counts
come from the session, evictions made earlier in the same cycle (by any action) already count.

Every action that evicts asks :func:`would_break` before it commits: ``preempt`` and
``reclaim`` (through ``actions/victims/``) prefer a victim set that breaks none and name
the budgets they break when no other set exists; ``consolidate`` never breaks one.

Vectorised: each budget's covered tasks are one index array, built once per session; a check
touches only the budgets that cover a victim.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from gangsched.model import DisruptionBudget, TaskPhase
from gangsched.session.task_states import RUNNING_STATES, in_states

if TYPE_CHECKING:
    from gangsched.session.core import Session

__all__ = ["Budgets", "allowed", "budgets", "desired_count", "exhausted", "would_break"]

I64 = npt.NDArray[np.int64]
BOOL = npt.NDArray[np.bool_]

_FINISHED = (TaskPhase.SUCCEEDED, TaskPhase.FAILED)


def desired_count(budget: DisruptionBudget, expected: int) -> int:
    """How many covered tasks ``budget`` wants healthy when ``expected`` have not finished.
    Percentages round up (Kubernetes: ``GetScaledValueFromIntOrPercent(..., roundUp=true)``)."""

    def scaled(value: int | str) -> int:
        if isinstance(value, str):
            pct = int(value[:-1])
            return -(-pct * expected // 100)
        return value

    if budget.min_available is not None:
        return scaled(budget.min_available)
    assert budget.max_unavailable is not None
    return max(expected - scaled(budget.max_unavailable), 0)


@dataclass(frozen=True, slots=True)
class Budgets:
    """The snapshot's budgets resolved to task indices: ``members[b]`` are budget ``b``'s
    covered tasks, ``desired[b]`` its desired healthy count; ``of_task`` maps a task to the
    budgets that cover it (CSR: ``ptr``, ``ids``)."""

    names: tuple[str, ...]
    members: tuple[I64, ...]
    desired: I64
    ptr: I64
    ids: I64

    def covering(self, tasks: Sequence[int] | I64) -> I64:
        """The budgets (sorted, distinct) that cover any of ``tasks``."""
        arr = np.asarray(tasks, dtype=np.int64)
        if arr.size == 0:
            return np.zeros(0, dtype=np.int64)
        parts = [self.ids[self.ptr[t] : self.ptr[t + 1]] for t in arr.tolist()]
        out: I64 = np.unique(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)
        return out


def budgets(ssn: Session) -> Budgets | None:
    """The session's budgets, built once; ``None`` when the snapshot has none."""
    snap = ssn.snapshot
    if not snap.disruption_budgets:
        return None
    cached = ssn.cache.disruption_budgets
    if isinstance(cached, Budgets):
        return cached
    n_tasks = len(snap.tasks)
    finished = np.array([t.phase in _FINISHED for t in snap.tasks], dtype=np.bool_)
    members: list[I64] = []
    desired: list[int] = []
    for budget in snap.disruption_budgets:
        mask = np.zeros(n_tasks, dtype=np.bool_)
        if budget.jobs:
            jobs = np.array([snap.job_index[j] for j in budget.jobs], dtype=np.int64)
            mask |= np.isin(ssn.task_job, jobs)
        for name in budget.tasks:
            mask[snap.task_index[name]] = True
        members.append(np.flatnonzero(mask).astype(np.int64))
        desired.append(desired_count(budget, int((mask & ~finished).sum())))
    # task → budgets, as CSR
    owners = np.concatenate(
        [np.full(m.size, b, dtype=np.int64) for b, m in enumerate(members)]
        or [np.zeros(0, dtype=np.int64)]
    )
    tasks = np.concatenate(members or [np.zeros(0, dtype=np.int64)])
    order = np.lexsort((owners, tasks))
    counts = np.bincount(tasks, minlength=n_tasks)
    ptr = np.zeros(n_tasks + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    out = Budgets(
        names=tuple(b.name for b in snap.disruption_budgets),
        members=tuple(members),
        desired=np.array(desired, dtype=np.int64),
        ptr=ptr,
        ids=owners[order],
    )
    ssn.cache.disruption_budgets = out
    return out


def _healthy(ssn: Session, tasks: I64) -> BOOL:
    out: BOOL = in_states(ssn.task_state[tasks], RUNNING_STATES)
    return out


def allowed(ssn: Session) -> I64:
    """Disruptions each budget allows now (``healthy − desired``, at least 0)."""
    b = budgets(ssn)
    if b is None:
        return np.zeros(0, dtype=np.int64)
    healthy = np.array([int(_healthy(ssn, m).sum()) for m in b.members], dtype=np.int64)
    out: I64 = np.maximum(healthy - b.desired, 0)
    return out


def would_break(ssn: Session, victims: Sequence[int]) -> list[str]:
    """The budgets evicting ``victims`` (from the session state now) would break, by name in
    snapshot order; empty when every budget holds."""
    b = budgets(ssn)
    if b is None or not victims:
        return []
    vic = np.asarray(victims, dtype=np.int64)
    vic = vic[_healthy(ssn, vic)]
    out = []
    for k in b.covering(vic).tolist():
        members = b.members[k]
        healthy = int(_healthy(ssn, members).sum())
        hit = int(np.isin(vic, members).sum())
        if hit > max(healthy - int(b.desired[k]), 0):
            out.append(b.names[k])
    return out


def exhausted(ssn: Session, tasks: I64) -> BOOL:
    """Which of ``tasks`` no eviction may take without breaking a budget now (a budget that
    covers them allows no disruption)."""
    b = budgets(ssn)
    out = np.zeros(tasks.size, dtype=np.bool_)
    if b is None or tasks.size == 0:
        return out
    free = allowed(ssn)
    for k in b.covering(tasks).tolist():
        if free[k] <= 0:
            out |= np.isin(tasks, b.members[k])
    return out
