"""The ranks of the victim jobs the search keeps between searches (``_Search._every_rank``).

A search ranks its victim jobs by the victim key of each job's first task; when it ranks most
of them it reads the ranks of every victim job, and keeps them for the next search of the
session. They are given back only for the same first tasks (and so the same jobs) and the very
key objects read then (a key whose figures move is read again, a new object). Each part of
that condition is checked here by a change that must drop the kept ranks. So is the one read a
search keeps for its explanation: the useful nodes, per set of nodes allowed.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

import gangsched as gs
from _preemption_helpers import GPU, config, node
from gangsched.actions import preempt as preempt_action
from gangsched.actions.victims import rules
from gangsched.actions.victims import search as victim_search
from gangsched.scheduler import open_session
from gangsched.session.core import Session
from gangsched.session.statement import Statement

NODE_RULE = config("enqueue", "allocate", "preempt", "reclaim", "backfill", whole=False)


def _snapshot() -> gs.Snapshot:
    """Two running jobs of one priority above their minimum: ``a`` holds more GPUs (a larger
    share: ranked first by its low-priority task) and has a task of higher priority; and a
    waiting job."""
    jobs: list[dict[str, Any]] = []
    tasks: list[dict[str, Any]] = []
    for name, gpus in (("a", 3), ("b", 1)):
        jobs.append(
            {"name": name, "queue": "q", "min_available": 1, "phase": "Running", "creation": 1.0}
        )
        for t, prio in enumerate((5, 0)):
            tasks.append(
                {
                    "name": f"{name}-{t}",
                    "job": name,
                    "priority": prio,
                    "request": {"cpu": 1, GPU: gpus},
                    "phase": "Running",
                    "node": f"n{t}",
                    "gpu_indices": list(range(gpus)) if name == "a" else [3],
                }
            )
    jobs.append({"name": "w", "queue": "q", "min_available": 1, "phase": "Inqueue"})
    tasks.append({"name": "w-0", "job": "w", "request": {"cpu": 1, GPU: 4}})
    return gs.Snapshot.from_dict(
        {
            "nodes": [node("n0"), node("n1")],
            "queues": [{"name": "q", "weight": 1}],
            "jobs": jobs,
            "tasks": tasks,
            "hypernodes": [],
        }
    )


def _search(ssn: Session) -> Any:
    job = ssn.snapshot.job_index["w"]
    scope = replace(preempt_action.SCOPE, whole=False)
    return victim_search._Search(ssn, scope, job, rules.needed_tasks(ssn, job))


def _task(ssn: Session, name: str) -> int:
    return next(i for i, t in enumerate(ssn.snapshot.tasks) if t.name == name)


def _setup() -> tuple[Session, np.ndarray]:
    ssn = open_session(_snapshot(), NODE_RULE)
    assert ssn.points.victim_order_by_job_and_queue()
    jobs = np.array([ssn.snapshot.job_index["a"], ssn.snapshot.job_index["b"]], dtype=np.int64)
    return ssn, jobs


def _leads(ssn: Session, *names: str) -> np.ndarray:
    return np.array([_task(ssn, n) for n in names], dtype=np.int64)


def test_the_kept_ranks_are_those_read_afresh_and_are_kept() -> None:
    ssn, jobs = _setup()
    search = _search(ssn)
    leads = _leads(ssn, "a-1", "b-1")
    got = search._every_rank(jobs, leads)
    assert got.tolist() == search._ranks(jobs, leads).tolist() == [0, 1]
    assert victim_search._Charges.of(ssn).job_order is not None
    assert _search(ssn)._every_rank(jobs, leads) is got  # given back, not read again


def test_the_kept_ranks_are_read_again_once_a_key_they_read_moves() -> None:
    ssn, jobs = _setup()
    leads = _leads(ssn, "a-1", "b-1")
    before = _search(ssn)._every_rank(jobs, leads).tolist()
    assert before == [0, 1]
    # ``a`` falls to its minimum: the gang plugin's key of its tasks moves, ``a`` goes last
    stmt = Statement(ssn)
    stmt.evict(_task(ssn, "a-0"), "test")
    stmt.commit()
    search = _search(ssn)
    after = search._every_rank(jobs, leads).tolist()
    assert after == search._ranks(jobs, leads).tolist() == [1, 0]


def test_the_kept_ranks_are_for_the_same_first_tasks_only() -> None:
    ssn, jobs = _setup()
    search = _search(ssn)
    assert search._every_rank(jobs, _leads(ssn, "a-1", "b-1")).tolist() == [0, 1]
    # ``a`` led by its task of higher priority goes last
    leads = _leads(ssn, "a-0", "b-1")
    assert search._every_rank(jobs, leads).tolist() == search._ranks(jobs, leads).tolist()
    assert search._every_rank(jobs, leads).tolist() == [1, 0]


def test_the_kept_ranks_are_for_the_same_jobs_only() -> None:
    # the first job alone: its key is the first one kept, the ranks are not those kept
    ssn, jobs = _setup()
    search = _search(ssn)
    assert search._every_rank(jobs, _leads(ssn, "a-1", "b-1")).tolist() == [0, 1]
    assert search._every_rank(jobs[:1], _leads(ssn, "a-1")).tolist() == [0]
    assert search._every_rank(jobs[1:], _leads(ssn, "b-1")).tolist() == [0]


def test_ranks_among_some_jobs_are_their_order_among_every_one() -> None:
    ssn, jobs = _setup()
    search = _search(ssn)
    leads = _leads(ssn, "a-0", "b-1")
    every = search._ranks(jobs, leads)
    for at in ([0, 1], [0], [1]):
        at_ = np.array(at, dtype=np.int64)
        want = np.argsort(np.argsort(every[at_]))
        assert search._ranks_among(jobs, leads, at_).tolist() == want.tolist()


def test_the_useful_nodes_kept_for_a_search_are_per_nodes_allowed() -> None:
    ssn, _ = _setup()
    search = _search(ssn)
    every = search.useful_nodes(None)
    assert every.tolist() == [True, True]
    assert search.useful_nodes(None) is every  # read once
    inside = np.array([False, True])
    assert search.useful_nodes(inside).tolist() == [False, True]
    assert search.useful_nodes(None).tolist() == [True, True]
