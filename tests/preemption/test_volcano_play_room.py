"""What Volcano's preempt loop (``victimSelection: volcano``) works out without evicting.

The loop reads, per node, whether a task could fit once releases finish with some of the
node's tasks evicted (:class:`~gangsched.actions.victims.volcano_play._Room`), keeps each
node's room with every candidate evicted across a job's tasks and brings it up to date
through the change log (``_View``), and takes the nodes in score order a batch at a time by
partition. Each must give what the plain computation gives: evicting for real and asking the
session's evaluation, the view worked out afresh, a full stable sort.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import gangsched as gs
from _volcano_clusters import CONFIG, clusters
from gangsched.actions.victims import search
from gangsched.actions.victims import volcano_play as vp
from gangsched.framework import dispatch
from gangsched.scheduler import open_session
from gangsched.session.core import TaskState
from gangsched.session.statement import Statement
from gangsched.session.task_states import RUNNING_STATES, in_states

# ------------------------------------------------------------------ the room of a node


@pytest.mark.parametrize(("name", "data"), clusters(), ids=[n for n, _ in clusters()])
def test_the_room_is_the_fit_after_evicting(name: str, data: dict[str, Any]) -> None:
    # For pending tasks and nodes, the node's running tasks evicted one after another: the
    # fewest after which the task fits once releases finish (first_fit), whether it fits with
    # all of them gone and with none (fits_with) are what the session's evaluation says
    # after evicting them for real.
    ssn = open_session(gs.Snapshot.from_dict(data), CONFIG)
    pool = vp._Pool(ssn)
    pending = np.flatnonzero(ssn.task_state == TaskState.PENDING).tolist()
    running = np.flatnonzero(in_states(ssn.task_state, RUNNING_STATES))
    seen = {"fits": 0, "later": 0, "never": 0, "gpu": 0}
    for task in pending[:12]:
        job = int(ssn.task_job[task])
        play = vp._TaskPlay(ssn, "preempt", job, task, pool, own_job=False)
        room = play._room()
        tmpl = play.tmpl
        for node in range(min(ssn.arrays.n_nodes, 6)):
            here = [int(t) for t in running[ssn.task_node[running] == node]]
            stmt = Statement(ssn)
            fit = [bool(ssn.evaluate(tmpl).fit_future[node])]
            for t in here:
                stmt.evict(t, "test", "test")
                fit.append(bool(ssn.evaluate(tmpl).fit_future[node]))
            stmt.discard()
            want = fit.index(True) if True in fit else None
            assert room.first_fit(node, here) == want, (name, task, node)
            nodes = np.asarray([node], dtype=np.int64)
            tasks = np.asarray(here, dtype=np.int64)
            freed = play._freed(nodes, tasks)
            every, bare = room.fits_with(nodes, freed, play._dev_freed(tasks))
            assert (bool(every[0]), bool(bare[0])) == (fit[-1], fit[0] and fit[-1])
            seen["fits" if want == 0 else "never" if want is None else "later"] += 1
            seen["gpu"] += bool(tmpl.gpu_count and here)
    if name.startswith("openb"):  # shared GPUs: the device arithmetic is read
        assert seen["gpu"] > 0


def test_the_room_answers_cover_every_case_across_the_clusters() -> None:
    # The clusters above reach a fit without evicting, after evicting some, and never.
    kinds: set[str] = set()
    for _, data in clusters()[:6] + clusters()[-2:]:
        ssn = open_session(gs.Snapshot.from_dict(data), CONFIG)
        pool = vp._Pool(ssn)
        running = np.flatnonzero(in_states(ssn.task_state, RUNNING_STATES))
        for task in np.flatnonzero(ssn.task_state == TaskState.PENDING).tolist()[:8]:
            play = vp._TaskPlay(ssn, "preempt", int(ssn.task_job[task]), task, pool, own_job=False)
            for node in range(min(ssn.arrays.n_nodes, 4)):
                here = [int(t) for t in running[ssn.task_node[running] == node]]
                got = play._room().first_fit(node, here)
                kinds.add("none" if got is None else "bare" if got == 0 else "some")
    assert kinds == {"none", "bare", "some"}


# ------------------------------------------------------------------ the view


@pytest.mark.parametrize(("name", "data"), clusters(), ids=[n for n, _ in clusters()])
def test_the_view_kept_across_tasks_is_the_view_worked_out_afresh(
    name: str, data: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every time a task reads its view (brought up to date through the change log, handed
    # from job to job), it equals the view a fresh run worked out on every node.
    kept = vp._TaskPlay._view
    asked = {"views": 0, "kept": 0}

    def checked(self: vp._TaskPlay) -> vp._View:
        given = self.pool._views.get((self.queue, self.own_job, -1))
        asked["kept"] += given is not None and given.lineage is not None
        view = kept(self)
        fresh = vp._TaskPlay(
            self.ssn, self.action, self.job, self.task, vp._Pool(self.ssn), own_job=self.own_job
        )
        again = kept(fresh)
        assert np.array_equal(view.covered, again.covered), name
        assert np.array_equal(view.roomy, again.roomy), name
        # and what evicting every candidate gives back, per node and per device
        mine = self.pool._views[self.queue, self.own_job, -1]
        afresh = fresh.pool._views[self.queue, self.own_job, -1]
        assert np.array_equal(mine.freed, afresh.freed), name
        assert np.array_equal(mine.dev_freed, afresh.dev_freed), name
        asked["views"] += 1
        return view

    monkeypatch.setattr(vp._TaskPlay, "_view", checked)
    gs.schedule(gs.Snapshot.from_dict(data), CONFIG)
    assert asked["views"] >= asked["kept"]


def test_a_view_handed_to_another_job_is_worked_out_again_where_either_job_runs() -> None:
    # a and b wait for a task of 8 cpu each and run one of 4 (n0, n1); c runs one of 4 on
    # each node. a's candidates on n0 are c's alone (4 cpu: not enough), b's are a's and c's
    # (8 cpu): the view a leaves must be worked out again on n0 for b, though nothing changed.
    def task(name: str, cpu: int, node: str | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {"name": name, "job": name[0], "request": {"cpu": cpu}}
        return {**out, "phase": "Running", "node": node} if node else out

    def job(name: str, priority: int, minimum: int) -> dict[str, Any]:
        return {"name": name, "queue": "q", "min_available": minimum, "priority": priority}

    snap = gs.Snapshot.from_dict(
        {
            "nodes": [{"name": n, "allocatable": {"cpu": 8, "pods": 110}} for n in ("n0", "n1")],
            "queues": [{"name": "q"}],
            "jobs": [job("a", 5, 2), job("b", 5, 2), job("c", 0, 1)],
            "tasks": [
                task("a0", 4, "n0"),
                task("a1", 8),
                task("b0", 4, "n1"),
                task("b1", 8),
                task("c0", 4, "n0"),
                task("c1", 4, "n1"),
            ],
        }
    )
    ssn = open_session(snap, CONFIG)
    pool = vp._Pool(ssn)
    a, b = snap.job_index["a"], snap.job_index["b"]
    a1, b1 = snap.task_index["a1"], snap.task_index["b1"]
    kept_a = vp._TaskPlay(ssn, "preempt", a, a1, pool, own_job=False)._view().covered.copy()
    kept_b = vp._TaskPlay(ssn, "preempt", b, b1, pool, own_job=False)._view().covered
    fresh_b = vp._TaskPlay(ssn, "preempt", b, b1, vp._Pool(ssn), own_job=False)._view().covered
    assert kept_a.tolist() == [False, True]
    assert kept_b.tolist() == fresh_b.tolist() == [True, False]


def test_views_are_kept_and_handed_between_jobs_in_these_clusters(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The view test above reads kept views: some tasks find their queue's view kept from an
    # earlier task, some of them from another job.
    kept = vp._TaskPlay._rows_since
    seen = {"kept": 0, "other_job": 0}

    def counted(self: vp._TaskPlay, view: vp._View) -> Any:
        if view.lineage is not None:
            seen["kept"] += 1
            seen["other_job"] += view.job != self.job
        return kept(self, view)

    monkeypatch.setattr(vp._TaskPlay, "_rows_since", counted)
    for _, data in clusters():
        gs.schedule(gs.Snapshot.from_dict(data), CONFIG)
    assert seen["kept"] >= 50 and seen["other_job"] >= 5


# ------------------------------------------------------------------ score order, membership


@given(
    st.lists(st.sampled_from([0.0, -1.5, -3.0, 2.0, float("nan"), -0.0]), max_size=60),
    st.integers(1, 9),
)
def test_score_order_batches_are_the_stable_sort(scores: list[float], first: int) -> None:
    # The batches, joined, are the nodes by ascending negated score then index (NaN last,
    # as a stable sort puts it), ``first`` nodes then four times as many each time.
    nodes = np.arange(len(scores), dtype=np.int64) * 3
    neg = np.asarray(scores, dtype=np.float64)
    batches = list(vp._in_score_order(nodes, neg, first))
    joined = np.concatenate([b for b, _ in batches]) if batches else nodes[:0]
    want = nodes[np.argsort(neg, kind="stable")]
    assert joined.tolist() == want.tolist()
    for (batch, where), size in zip(batches[:-1], (first * 4**i for i in range(99)), strict=False):
        assert batch.size == size
        assert np.array_equal(where, neg[batch // 3], equal_nan=True)


@given(
    st.sets(st.integers(0, 40), max_size=20),
    st.lists(st.integers(-3, 45), max_size=25),
)
def test_walk_membership_is_isin(cands: set[int], got: list[int]) -> None:
    # The walk's membership test over ascending candidates answers as np.isin, values
    # outside the candidates and repeated ones included; unsorted candidates too.
    c = np.asarray(sorted(cands), dtype=np.int64)
    g = np.asarray(got, dtype=np.int64)
    assert np.array_equal(dispatch._membership(c)(g), np.isin(c, g))
    shuffled = c[::-1].copy()
    assert np.array_equal(dispatch._membership(shuffled)(g), np.isin(shuffled, g))


def test_asking_only_the_queue_where_the_fit_is_known_decides_as_asking_the_fit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # With predicates that read the task's shape alone and no pod constraints, a try asks
    # only the queue once the room says the task fits; asking the session's evaluation each
    # time instead gives the same decisions, best-effort victims (which free nothing but a
    # pod slot) included.
    made = vp._Pool.__init__
    asked = {"queue alone": 0}
    queue_takes = vp._TaskPlay.queue_takes

    def counted(self: vp._TaskPlay) -> bool:
        asked["queue alone"] += 1
        return queue_takes(self)

    def evaluated(self: vp._Pool, ssn: Any) -> None:
        made(self, ssn)
        self.predicates_by_shape = False

    monkeypatch.setattr(vp._TaskPlay, "queue_takes", counted)
    for name, data in clusters():
        snap = gs.Snapshot.from_dict(data)
        known = gs.schedule(snap, CONFIG).to_dict()
        with monkeypatch.context() as m:
            m.setattr(vp._Pool, "__init__", evaluated)
            assert gs.schedule(snap, CONFIG).to_dict() == known, name
    assert asked["queue alone"] >= 20


def test_what_evicting_gives_back_is_each_tasks_row_and_devices_on_its_node() -> None:
    # search.given_back / devices_given_back, read for many tasks at once (half of them
    # first), are Session.row_on, the task's devices and its milli-GPU on each, task by task;
    # on shared GPUs a node's charge differs from the request's (the queue's charge)
    differs = 0
    for _, data in clusters():
        for node in data["nodes"][1::2]:  # devices of 2,000 milli-GPU: a whole GPU takes all
            if "gpus" in node:
                node["gpus"] = {**node["gpus"], "milli": 2000}
        ssn = open_session(gs.Snapshot.from_dict(data), CONFIG)
        placed = np.flatnonzero(ssn.task_node >= 0).astype(np.int64)
        search.given_back(ssn, placed[::2])
        rows = search.given_back(ssn, placed)
        devices, milli = search.devices_given_back(ssn, placed)
        for k, t in enumerate(placed.tolist()):
            node = int(ssn.task_node[t])
            assert rows[k].tolist() == ssn.row_on(t, node).tolist(), t
            held = ssn.arrays.device_index(node, ssn.task_gpus[t])
            assert devices[k].tolist() == held + [-1] * (devices.shape[1] - len(held)), t
            assert int(milli[k]) == ssn.device_milli(t, node), t
            differs += rows[k].tolist() != ssn.task_req[t].tolist()
    assert differs >= 20, differs
