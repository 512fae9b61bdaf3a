"""What evicting victim sets gives back, as the room bound reads it (``_Room._entries``).

One set is summed per node and per device without sorting (``_Room._entries_of_one``); many
sets are sorted by (set, node) and (set, device). Both forms are checked against each other
on openb clusters (shared GPUs: a task's devices and milli-GPU matter), and the answer the room
keeps for the last many-set question against a fresh one for other arrays.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

import gangsched as gs
from _preemption_helpers import GPU, config, job, node, pending, running, snap
from _volcano_clusters import OPENB
from gangsched.actions import preempt as preempt_action
from gangsched.actions import reclaim as reclaim_action
from gangsched.actions.victims import rules
from gangsched.actions.victims import search as victim_search
from gangsched.scheduler import open_session
from gangsched.session.core import TaskState
from gangsched.session.task_states import RUNNING_STATES, in_states

CONFIG = gs.Config.from_volcano_yaml(OPENB.VOLCANO_PREEMPTION_YAML)


def _room(seed: int) -> tuple[Any, np.ndarray]:
    """A room for a waiting GPU job of an openb cluster, and the running tasks."""
    data = OPENB.openb_preemption_dict(40, seed=seed)
    ssn = open_session(gs.Snapshot.from_dict(data), CONFIG)
    running = np.flatnonzero(in_states(ssn.task_state, RUNNING_STATES)).astype(np.int64)
    pending = np.flatnonzero(ssn.task_state == TaskState.PENDING).tolist()
    gpu = ssn.arrays.spec.gpu_column
    task = next(t for t in pending if ssn.task_req[t, gpu] > 0)
    job = int(ssn.task_job[task])
    scope = replace(reclaim_action.SCOPE, whole=False)
    search = victim_search._Search(ssn, scope, job, [task])
    room = victim_search._Room(ssn, search.claim, search.queue)
    assert room.gpu_kinds
    return room, running


def _same(a: tuple[np.ndarray, ...], b: tuple[np.ndarray, ...]) -> bool:
    return all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("seed", range(4))
def test_one_set_summed_per_node_and_device_is_the_sorted_sum(seed: int) -> None:
    room, running = _room(seed)
    rng = np.random.default_rng(seed)
    n = room.ssn.arrays.n_nodes
    devices = 0
    for _ in range(12):
        tasks = rng.permutation(running)[: int(rng.integers(0, running.size + 1))]
        for among in (None, rng.random(n) < 0.6):
            want = room._entries(tasks, np.zeros_like(tasks), among)
            got = room._entries_of_one(tasks, among)
            assert _same(got, want)
            devices += want[3].size
            # the bound of the set alone, and of the set twice over (read as many sets)
            one = room.fits_sets(tasks, np.zeros_like(tasks), 1, among).tolist()
            twice = np.repeat(np.arange(2), tasks.size)
            assert room.fits_sets(np.r_[tasks, tasks], twice, 2, among).tolist() == one * 2
    assert devices > 0


def test_the_many_set_answer_kept_is_for_the_same_arrays_only() -> None:
    room, running = _room(0)
    rng = np.random.default_rng(1)
    n = room.ssn.arrays.n_nodes
    tasks = rng.permutation(running)[:30]
    sets = rng.integers(0, 5, size=tasks.size)
    first = room._entries_of(tasks, sets, 5, None)
    assert _same(first, room._entries(tasks, sets, None))
    assert room._entries_of(tasks, sets, 5, None) is first  # given back
    # other tasks, other sets, other nodes: read again
    fewer = tasks[:10]
    assert _same(room._entries_of(fewer, sets[:10], 5, None), room._entries(fewer, sets[:10], None))
    room._entries_of(tasks, sets, 5, None)
    others = rng.permutation(running)[: tasks.size]
    assert not np.array_equal(others, tasks)
    assert _same(room._entries_of(others, sets, 5, None), room._entries(others, sets, None))
    room._entries_of(tasks, sets, 5, None)
    other = (sets + 1) % 5
    assert _same(room._entries_of(tasks, other, 5, None), room._entries(tasks, other, None))
    room._entries_of(tasks, sets, 5, None)
    among = rng.random(n) < 0.5
    assert _same(room._entries_of(tasks, sets, 5, among), room._entries(tasks, sets, among))


def test_what_every_victim_gives_back_is_kept_for_the_same_victims_nodes_and_claim() -> None:
    # One cache per session, asked by rooms of a GPU claim and of a claim without GPUs,
    # inside every node or some: each answer is the one read afresh.
    data = OPENB.openb_preemption_dict(40, seed=0)
    ssn = open_session(gs.Snapshot.from_dict(data), CONFIG)
    running = np.flatnonzero(in_states(ssn.task_state, RUNNING_STATES)).astype(np.int64)
    gpu = ssn.arrays.spec.gpu_column
    pending = np.flatnonzero(ssn.task_state == TaskState.PENDING).tolist()
    rooms = []
    for wants_gpu in (True, False):
        task = next(t for t in pending if (ssn.task_req[t, gpu] > 0) == wants_gpu)
        room = victim_search._Room(ssn, [task], int(ssn.job_queue[ssn.task_job[task]]))
        assert room.gpu_kinds == wants_gpu
        rooms.append(room)
    charges = victim_search._Charges.of(ssn)
    rng = np.random.default_rng(0)
    masks = [None, rng.random(ssn.arrays.n_nodes) < 0.5]
    sets = [running, running[:-5], rng.permutation(running)[: running.size // 2]]
    for _ in range(30):
        room = rooms[int(rng.integers(2))]
        victims = sets[int(rng.integers(len(sets)))]
        among = masks[int(rng.integers(2))]
        got = room.fits_all(victims, among)
        assert charges.all_victims is not None
        want = room._entries(victims, np.zeros_like(victims), among)
        assert _same(charges.all_victims[1], want)
        assert got == bool(room.fits_sets(victims, np.zeros_like(victims), 1, among)[0])
    # other victims on the very same nodes: read again
    fewer = running[:-5]
    out = next(int(t) for t in running[-5:] if ssn.task_node[t] in ssn.task_node[fewer])
    swapped = fewer.copy()
    swapped[int(np.flatnonzero(ssn.task_node[fewer] == ssn.task_node[out])[0])] = out
    assert ssn.task_node[swapped].tobytes() == ssn.task_node[fewer].tobytes()
    for victims in (fewer, swapped):
        rooms[0].fits_all(victims, None)
        want = rooms[0]._entries(victims, np.zeros_like(victims), None)
        assert charges.all_victims is not None
        assert _same(charges.all_victims[1], want)
    # a victim on another node (as if it had moved): read again
    victims = sets[0]
    rooms[0].fits_all(victims, None)
    t = int(victims[0])
    home = int(ssn.task_node[t])
    ssn.task_node[t] = (home + 1) % ssn.arrays.n_nodes
    try:
        rooms[0].fits_all(victims, None)
        want = rooms[0]._entries(victims, np.zeros_like(victims), None)
        assert charges.all_victims is not None
        assert _same(charges.all_victims[1], want)
    finally:
        ssn.task_node[t] = home


def test_run_sums_are_numpys_sums_over_runs() -> None:
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(1, 40))
        starts = victim_search._starts(rng.integers(0, 4, size=n).cumsum())
        for rows in (rng.integers(0, 1 << 40, size=(n, 3)), rng.integers(0, 9, size=n)):
            want = np.add.reduceat(rows, starts, axis=0)
            assert np.array_equal(victim_search._run_sums(rows, starts), want)


def test_the_claims_queue_asked_as_it_is_answers_as_after_the_evictions() -> None:
    # When neither the victims nor the evictions held take from the claim's queue, the queue
    # is asked without holding the victims: the answer is the one after holding them.
    # (a refusal asked as it is: test_victim_search_edges' queue with a capability)
    seen = {"as it is": 0, "held": 0}
    for seed in range(3):
        data = OPENB.openb_preemption_dict(40, seed=seed)
        ssn = open_session(gs.Snapshot.from_dict(data), CONFIG)
        running = np.flatnonzero(in_states(ssn.task_state, RUNNING_STATES)).astype(np.int64)
        rng = np.random.default_rng(seed)
        for j in range(len(ssn.snapshot.jobs)):
            claim = rules.needed_tasks(ssn, j)
            if not claim:
                continue
            search = victim_search._Search(
                ssn, replace(reclaim_action.SCOPE, whole=False), j, claim
            )
            room = search._room = victim_search._Room(ssn, search.claim, search.queue)
            assert room.by_holdings
            tmpl = ssn.templates[int(ssn.template_of[claim[0]])]
            try:
                for _ in range(4):
                    victims = rng.permutation(running)[: int(rng.integers(0, 12))].tolist()
                    quiet = room.frees_none(victims)
                    got = search._refuses(victims)
                    room.hold(victims, "test", "test")
                    assert got == (not ssn.points.allocatable(search.queue, tmpl))
                    seen["as it is" if quiet else "held"] += 1
            finally:
                search._room = None
                room.release()
    assert min(seen.values()) > 0, seen


def test_the_claims_queue_is_asked_after_the_evictions_that_take_from_it() -> None:
    # The queue (capability 2 GPUs) holds them: hi's GPU is refused unless one of low's tasks
    # (the queue's own) goes; far's tasks (another queue) change nothing the queue judges by.
    nodes = [node(f"n{i}", gpus=2) for i in range(2)]
    queues: list[dict[str, Any]] = [{"name": "default", "capability": {GPU: 2}}, {"name": "other"}]
    jobs = [job("low", 1, priority=1), job("far", 1, priority=1, queue="other")]
    tasks = running("low", [("n0", [0]), ("n0", [1])]) + running("far", [("n1", [0])])
    jobs.append(job("hi", 1, priority=9, phase="Inqueue"))
    tasks += pending("hi", 1, gpus=1)
    ssn = open_session(snap(nodes, jobs, tasks, queues), config("enqueue", "allocate", "preempt"))
    hi = ssn.snapshot.job_index["hi"]
    search = victim_search._Search(
        ssn, replace(preempt_action.SCOPE, whole=False), hi, rules.needed_tasks(ssn, hi)
    )
    room = search._room = victim_search._Room(ssn, search.claim, search.queue)
    low, far = ssn.snapshot.task_index["low-0"], ssn.snapshot.task_index["far-0"]
    try:
        assert room.by_holdings
        assert room.frees_none([far]) and search._refuses([far])
        assert not room.frees_none([low]) and not search._refuses([low])
        # low-0 held: asking about far alone gives it back first
        assert not room.frees_none([far]) and search._refuses([far])
    finally:
        search._room = None
        room.release()
