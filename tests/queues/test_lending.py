"""Lending limits (Kueue's ``lendingLimit``) in the capacity plugin, flat and hierarchical: a
queue lends at most ``lending_limit`` of its unused deserved share, and keeps the rest for
itself."""

from __future__ import annotations

from collections import Counter

import pytest

from _builders import gpu_nodes
from gangsched.config import Config
from gangsched.errors import SnapshotError
from gangsched.model import Queue
from gangsched.model.snapshot import Snapshot
from gangsched.scheduler import schedule

Obj = dict[str, object]
GPU = "nvidia.com/gpu"


def nodes(n: int, gpus: int = 4) -> list[Obj]:
    return gpu_nodes(n, gpus=gpus)


def flood(queue: str, n: int) -> tuple[list[Obj], list[Obj]]:
    jobs: list[Obj] = [{"name": f"{queue}-{i}", "queue": queue, "creation": i} for i in range(n)]
    tasks: list[Obj] = [
        {"name": f"{queue}-{i}-0", "job": f"{queue}-{i}", "gpu_request": {"count": 1}}
        for i in range(n)
    ]
    return jobs, tasks


def config(*, hierarchy: bool) -> Config:
    return Config.from_dict(
        {
            "actions": ["enqueue", "allocate"],
            "tiers": [
                [{"name": "priority"}, {"name": "gang"}],
                [
                    {"name": "predicates"},
                    {"name": "capacity", "enableHierarchy": hierarchy},
                    {"name": "nodeorder"},
                ],
            ],
        }
    )


def gpus_bound(snap: Snapshot, cfg: Config) -> Counter[str]:
    d = schedule(snap, cfg)
    return Counter(snap.job(snap.task(b.task).job).queue for b in d.binds)


def _two_queues(lending: Obj | None) -> Snapshot:
    a: Obj = {"name": "a", "deserved": {GPU: 6}}
    if lending is not None:
        a["lending_limit"] = lending
    jobs, tasks = flood("b", 8)
    return Snapshot.from_dict(
        {
            "nodes": nodes(2),
            "queues": [a, {"name": "b", "deserved": {GPU: 2}}],
            "jobs": jobs,
            "tasks": tasks,
        }
    )


def test_a_queue_with_lending_limit_lends_no_more_than_that() -> None:
    # a deserves 6 of the 8 GPUs and sits idle, lending at most 2: b gets its own 2 and
    # borrows 2, and the 4 a keeps stay free.
    assert gpus_bound(_two_queues({GPU: 2}), config(hierarchy=False)) == Counter({"b": 4})


def test_without_a_lending_limit_the_idle_share_is_lent_in_full() -> None:
    # The control: only the limit held b back.
    assert gpus_bound(_two_queues(None), config(hierarchy=False)) == Counter({"b": 8})


def test_a_lending_limit_on_another_resource_lends_gpus_in_full() -> None:
    assert gpus_bound(_two_queues({"cpu": 1}), config(hierarchy=False)) == Counter({"b": 8})


def test_the_lender_itself_may_use_what_it_keeps() -> None:
    ja, ta = flood("a", 8)
    snap = Snapshot.from_dict(
        {
            "nodes": nodes(2),
            "queues": [
                {"name": "a", "deserved": {GPU: 6}, "lending_limit": {GPU: 2}},
                {"name": "b", "deserved": {GPU: 2}},
            ],
            "jobs": ja,
            "tasks": ta,
        }
    )
    # b is idle and lends in full: a takes all 8.
    assert gpus_bound(snap, config(hierarchy=False)) == Counter({"a": 8})


def test_hierarchical_siblings_borrow_at_most_the_lending_limit() -> None:
    # root ⊃ org ⊃ {a, b}; a deserves 6 and lends at most 1 to its sibling b. (The tree's
    # room comes from the root's capability, unlimited when unset, as in Volcano.)
    jobs, tasks = flood("b", 8)
    queues: list[Obj] = [
        {"name": "root", "capability": {GPU: 8}},
        {"name": "org", "parent": "root", "deserved": {GPU: 8}},
        {"name": "a", "parent": "org", "deserved": {GPU: 6}, "lending_limit": {GPU: 1}},
        {"name": "b", "parent": "org", "deserved": {GPU: 2}},
    ]
    snap = Snapshot.from_dict({"nodes": nodes(2), "queues": queues, "jobs": jobs, "tasks": tasks})
    assert gpus_bound(snap, config(hierarchy=True)) == Counter({"b": 3})
    queues[2].pop("lending_limit")
    snap = Snapshot.from_dict({"nodes": nodes(2), "queues": queues, "jobs": jobs, "tasks": tasks})
    assert gpus_bound(snap, config(hierarchy=True)) == Counter({"b": 8})


def test_lending_limit_round_trips_and_is_checked() -> None:
    snap = _two_queues({GPU: 2})
    assert Snapshot.from_dict(snap.to_dict()) == snap
    assert snap.queue("a").lending_limit == {GPU: 2000}
    assert "lending_limit" not in _two_queues(None).to_dict()["queues"][0]
    with pytest.raises(SnapshotError) as err:
        Queue.from_dict({"name": "q", "lending_limit": {GPU: -1}})
    assert err.value.kind == "queue" and (err.value.field or "").startswith("lending_limit")
