"""overcommit: admit a job at enqueue only while the cluster, inflated by
``overcommit-factor`` (default 1.2), still has room for its ``min_resources`` beside every job
already admitted but not yet running. While the enqueue action counts what the job may
preempt (:meth:`~gangsched.session.core.Session.preemptable_for`), that counts as idle too.

``overcommit-factor`` is a finite number at most 1e6 (:data:`~gangsched.limits.MAX_ARG_WEIGHT`,
so the inflated cluster total stays far inside float64); below 1 it is taken as 1.2, as in
Volcano. Anything else is a :class:`~gangsched.errors.ConfigError` naming the argument."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from gangsched.config import arg_float
from gangsched.framework.combine import Vote
from gangsched.limits import MAX_ARG_WEIGHT
from gangsched.model import JobPhase
from gangsched.plugins._cluster_figures import cluster_figures

if TYPE_CHECKING:
    from gangsched.session.core import Session


class OvercommitPlugin:
    name = "overcommit"
    known_arguments: tuple[str, ...] = ("overcommit-factor",)

    def __init__(self, arguments: Mapping[str, object]) -> None:
        factor = arg_float(
            arguments, "overcommit-factor", 1.2, plugin=self.name, maximum=MAX_ARG_WEIGHT
        )
        self.factor = factor if factor >= 1.0 else 1.2
        self._idle = np.zeros(0)
        self._inqueue = np.zeros(0, dtype=np.int64)

    def on_session_open(self, ssn: Session) -> None:
        a = ssn.arrays
        total, _ = cluster_figures(ssn)
        # (the nodes' use summed per column over the transposed rows: exact integers)
        self._idle = total * self.factor - np.ascontiguousarray(ssn.used.T).sum(axis=1)
        inqueue = np.zeros(len(a.spec), dtype=np.int64)
        jobs = ssn.snapshot.jobs
        for j in np.flatnonzero(ssn.columns.job_minimums).tolist():  # (min_resources set)
            job = jobs[j]
            if job.min_resources is None:
                continue
            if ssn.job_phase[j] is JobPhase.INQUEUE:
                inqueue += ssn.vector(job.min_resources)
            elif ssn.job_phase[j] is JobPhase.RUNNING:
                inqueue += np.maximum(ssn.vector(job.min_resources) - ssn.job_allocated[j], 0)
        self._inqueue = inqueue

    def job_enqueueable(self, ssn: Session, job: int) -> Vote:
        rec = ssn.snapshot.jobs[job]
        if rec.min_resources is None:
            return Vote.PERMIT
        need = ssn.vector(rec.min_resources)
        dims = need > 0
        idle = self._idle + ssn.preemptable_for(job)
        if np.all(self._inqueue[dims] + need[dims] <= idle[dims]):
            return Vote.PERMIT
        short = [
            ssn.arrays.spec.names[c] for c in np.flatnonzero(dims & (self._inqueue + need > idle))
        ]
        ssn.note_job(
            job,
            "NotEnqueued",
            f"overcommit: cluster (x{self.factor:g}) cannot admit min_resources; "
            f"short of {', '.join(short)}",
        )
        return Vote.REJECT

    def job_enqueued(self, ssn: Session, job: int) -> None:
        rec = ssn.snapshot.jobs[job]
        if rec.min_resources is not None:
            self._inqueue += ssn.vector(rec.min_resources)
