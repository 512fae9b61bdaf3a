"""What evicting victim sets gives back, as the room bound reads it (``_Room._entries``).

One set is summed per node and per device without sorting (``_Room._entries_of_one``); many
sets are sorted by (set, node) and (set, device). Both forms are checked against each other
on openb clusters (shared GPUs: a task's devices and milli-GPU matter), and the answer the room
keeps for the last many-set question against a fresh one for other arrays.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import gangsched as gs
from gangsched.actions import reclaim as reclaim_action
from gangsched.actions.victims import search as victim_search
from gangsched.scheduler import open_session
from gangsched.session.core import TaskState
from gangsched.session.task_states import RUNNING_STATES, in_states

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


OPENB = _load("preemption_clusters", ROOT / "benchmarks" / "preemption_clusters.py")
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
