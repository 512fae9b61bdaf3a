"""The queue figures the fair-share plugins read at open (``job_figures``) equal the counts
their docstring states, worked job by job and task by task: request (what a queue holds plus
what its pending and returning tasks ask), inqueue (what admitted jobs still miss of their
``min_resources``) and elastic (what each job holds beyond its ``min_resources``), on random
snapshots with and without ``min_resources`` and with running gangs."""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import given, settings

from gangsched.model import JobPhase
from gangsched.model.snapshot import Snapshot
from gangsched.scheduler import open_session
from gangsched.session.core import Session, TaskState
from gangsched.session.rules.fairshare import job_figures
from gangsched.testing.strategies import snapshots
from gangsched.units import PODS

_HOLDING = (TaskState.ALLOCATED, TaskState.BOUND, TaskState.RUNNING)


def _reference(ssn: Session) -> tuple[list[list[int]], list[list[int]], list[list[int]]]:
    snap = ssn.snapshot
    n_q, n_r = len(snap.queues), len(ssn.arrays.spec)
    pods = ssn.arrays.spec.index(PODS)
    request = [[0] * n_r for _ in range(n_q)]
    inqueue = [[0] * n_r for _ in range(n_q)]
    elastic = [[0] * n_r for _ in range(n_q)]
    for j, job in enumerate(snap.jobs):
        q = int(ssn.job_queue[j])
        held = [int(x) for x in ssn.job_allocated[j]]
        need = [0] * n_r
        if job.min_resources is not None:
            need = [int(x) for x in ssn.vector(job.min_resources)]
            holding = sum(int(ssn.job_count[j][s]) for s in _HOLDING)
            phase = ssn.job_phase[j]
            if phase is JobPhase.INQUEUE or (
                phase is JobPhase.RUNNING and holding >= int(ssn.job_min[j])
            ):
                for c in range(n_r):
                    if need[c] > 0:
                        inqueue[q][c] += max(need[c] - held[c], 0)
        for c in range(n_r):
            request[q][c] += held[c]
            elastic[q][c] += max(held[c] - need[c], 0)
    for t in range(len(snap.tasks)):
        j = int(ssn.task_job[t])
        state = int(ssn.task_state[t])
        returning = state == TaskState.RELEASING and ssn.job_phase[j] is not JobPhase.COMPLETED
        if state == TaskState.PENDING or returning:
            q = int(ssn.job_queue[j])
            for c in range(n_r):
                request[q][c] += int(ssn.task_req[t][c])
    for rows in (request, inqueue, elastic):
        for row in rows:
            row[pods] = 0
    return request, inqueue, elastic


def _check(snap: Snapshot) -> None:
    ssn = open_session(snap)
    request, inqueue, elastic, has_jobs = job_figures(ssn)
    want = _reference(ssn)
    for got, expected in zip((request, inqueue, elastic), want, strict=True):
        assert got.dtype == np.float64
        assert got.tolist() == [[float(x) for x in row] for row in expected]
    assert has_jobs.tolist() == [
        any(int(q) == k for q in ssn.job_queue) for k in range(len(snap.queues))
    ]


@settings(max_examples=60, deadline=None)
@given(snapshots(max_jobs=5, max_tasks_per_job=4, max_queues=3))
def test_figures_count_every_job_and_task(snap: Snapshot) -> None:
    _check(snap)
    # the same cluster with no minimum of resources at all: what every job holds is elastic
    _check(
        dataclasses.replace(
            snap, jobs=tuple(dataclasses.replace(j, min_resources=None) for j in snap.jobs)
        )
    )
