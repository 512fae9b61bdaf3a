"""enqueue: admission that checks the gang's shape against free capacity, not only quota."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from _builders import gpu_node
from gangsched.actions.enqueue import ShapeCheck
from gangsched.config import Config
from gangsched.errors import ConfigError
from gangsched.model.snapshot import Snapshot
from gangsched.scheduler import open_session, schedule
from gangsched.session.statement import Statement

Obj = dict[str, object]


def node(name: str, gpus: int = 8, **extra: Any) -> Obj:
    return gpu_node(name, gpus=gpus, memory="512Gi", **extra)


def fragmented(n_nodes: int = 8, *, phase: str = "Running", preemptable: bool = True) -> list[Obj]:
    """Tasks holding 7 of the 8 GPUs of every node: 8 GPUs free, one per node."""
    return [
        {
            "name": f"filler-{i}",
            "job": "filler",
            "gpu_request": {"count": 7},
            "phase": phase,
            "node": f"n{i}",
            "gpu_indices": list(range(7)),
            "preemptable": preemptable,
        }
        for i in range(n_nodes)
    ]


def one_gpu_filler() -> Obj:
    """A running task holding the one GPU of node ``n0``."""
    return {
        "name": "filler-0",
        "job": "filler",
        "gpu_request": {"count": 1},
        "phase": "Running",
        "node": "n0",
        "gpu_indices": [0],
    }


def gang(name: str, size: int, gpus: int, **extra: object) -> tuple[Obj, list[Obj]]:
    job: Obj = {"name": name, "queue": "q", "min_available": size, **extra}
    tasks: list[Obj] = [
        {"name": f"{name}-{i}", "job": name, "gpu_request": {"count": gpus}} for i in range(size)
    ]
    return job, tasks


def snapshot(
    fillers: list[Obj], *gangs: tuple[Obj, list[Obj]], node_list: list[Obj] | None = None
) -> Snapshot:
    filler_job: Obj = {"name": "filler", "queue": "q", "phase": "Running", "min_available": 1}
    return Snapshot.from_dict(
        {
            "nodes": node_list if node_list is not None else [node(f"n{i}") for i in range(8)],
            "queues": [{"name": "q"}],
            "jobs": [filler_job, *(g[0] for g in gangs)],
            "tasks": [*fillers, *(t for g in gangs for t in g[1])],
        }
    )


def config(actions: tuple[str, ...] = ("enqueue", "allocate"), **enqueue: object) -> Config:
    return Config.from_dict(
        {
            "actions": list(actions),
            "tiers": [
                [{"name": "priority"}, {"name": "gang"}, {"name": "conformance"}],
                [
                    {"name": "overcommit"},
                    {"name": "drf"},
                    {"name": "predicates"},
                    {"name": "proportion"},
                    {"name": "nodeorder"},
                ],
            ],
            "configurations": {"enqueue": enqueue} if enqueue else {},
        }
    )


def test_eight_free_gpus_one_per_node_do_not_admit_an_eight_gpu_pod() -> None:
    snap = snapshot(fragmented(), gang("wide", 1, 8), gang("narrow", 1, 1))
    d = schedule(snap, config())
    wide = d.jobs["wide"]
    assert wide.phase == "Pending"
    assert wide.reason == "NotEnqueued"
    assert wide.message == (
        "minimum gang of 1 task × 8 nvidia.com/gpu does not fit on any node: "
        "largest free is 1 GPU per node"
    )
    # quota sums alone would have let it in: 8 GPUs are free
    assert d.queues["q"].real_capability["nvidia.com/gpu"] == 64_000
    narrow = d.jobs["narrow"]
    assert narrow.phase == "Running"
    assert [b.task for b in d.binds] == ["narrow-0"]


def test_shape_check_can_be_switched_off() -> None:
    snap = snapshot(fragmented(), gang("wide", 1, 8))
    d = schedule(snap, config(shapeCheckEnable=False))
    assert d.jobs["wide"].phase == "Inqueue"  # admitted, then unschedulable in allocate
    assert d.binds == ()


def test_bad_argument_is_a_config_error() -> None:
    snap = snapshot(fragmented(), gang("wide", 1, 8))
    with pytest.raises(ConfigError, match=r"action 'enqueue'.*shapeCheckEnable"):
        schedule(snap, config(shapeCheckEnable="sometimes"))


def test_gang_that_fits_only_partly_names_how_far_it_got() -> None:
    # two nodes have 4 GPUs free, the rest 1: a gang of 3 × 4 GPUs places two of its three
    nodes = [node(f"n{i}") for i in range(4)]
    fillers = fragmented(4)
    for f in fillers[:2]:
        f["gpu_request"] = {"count": 4}
        f["gpu_indices"] = [0, 1, 2, 3]
    snap = snapshot(fillers, gang("g", 3, 4), gang("pair", 2, 4), node_list=nodes)
    d = schedule(snap, config())
    assert d.jobs["g"].phase == "Pending"
    assert d.jobs["g"].message == (
        "minimum gang of 3 tasks × 4 nvidia.com/gpu does not fit: only 2 of 3 tasks can be "
        "placed at once; then largest free is 1 GPU per node"
    )
    assert d.jobs["pair"].phase == "Running"


def test_mixed_roles_describe_each_shape() -> None:
    job: Obj = {"name": "mix", "queue": "q", "min_available": 2}
    tasks: list[Obj] = [
        {"name": "mix-ps", "job": "mix", "role": "ps", "request": {"cpu": 4}},
        {"name": "mix-w", "job": "mix", "role": "worker", "gpu_request": {"count": 8}},
    ]
    snap = snapshot(fragmented(), (job, tasks))
    d = schedule(snap, config())
    message = d.jobs["mix"].message
    assert message.startswith("minimum gang of 2 tasks (1 × 4 cpu + 1 × 8 nvidia.com/gpu)")
    assert message.endswith("largest free is 1 GPU per node")


def test_cpu_shape_reports_the_largest_free_cores() -> None:
    nodes: list[Obj] = [
        {"name": f"c{i}", "allocatable": {"cpu": 16, "memory": "64Gi"}} for i in range(3)
    ]
    job: Obj = {"name": "fat", "queue": "q"}
    tasks: list[Obj] = [{"name": "fat-0", "job": "fat", "request": {"cpu": 24}}]
    snap = snapshot([], (job, tasks), node_list=nodes)
    d = schedule(snap, config())
    assert d.jobs["fat"].message == (
        "minimum gang of 1 task × 24 cpu does not fit on any node: largest free cpu is 16 per node"
    )


def test_resources_being_released_count_as_free() -> None:
    # the fillers are leaving: a pod that fits once they are gone is admitted and pipelined
    snap = snapshot(fragmented(phase="Releasing"), gang("wide", 1, 8))
    d = schedule(snap, config())
    assert d.jobs["wide"].phase == "Inqueue"
    assert [p.task for p in d.pipelined] == ["wide-0"]


@pytest.mark.parametrize("action", ["preempt", "reclaim"])
def test_with_preemption_configured_evictable_capacity_counts(action: str) -> None:
    # with preempt the fillers (same queue, preemptable) could be evicted: admit the job
    # and leave it to that action. Reclaim takes only from other queues: not these fillers.
    snap = snapshot(fragmented(), gang("wide", 1, 8, priority=10))
    ssn = open_session(snap, config(("enqueue", "allocate", action)))
    why = ShapeCheck(ssn).check(snap.job_index["wide"])
    if action == "preempt":
        assert why is None
    else:
        assert why is not None and "counting what preempt/reclaim could free" in why


def test_non_preemptable_work_is_not_counted_as_freeable() -> None:
    snap = snapshot(fragmented(preemptable=False), gang("wide", 1, 8))
    ssn = open_session(snap, config(("enqueue", "allocate", "preempt")))
    why = ShapeCheck(ssn).check(snap.job_index["wide"])
    assert why is not None and why.endswith("largest free is 1 GPU per node")


def test_dry_run_leaves_the_session_untouched() -> None:
    snap = snapshot(fragmented(), gang("wide", 1, 8), gang("narrow", 2, 1))
    ssn = open_session(snap, config(("enqueue", "allocate", "preempt")))
    names = ("used", "releasing", "pipelined", "gpu_used", "task_state", "queue_allocated")
    before = {n: getattr(ssn, n).copy() for n in names}
    shares = ssn.plugin("proportion").shares.copy()  # type: ignore[union-attr]
    check = ShapeCheck(ssn)
    assert check.check(snap.job_index["narrow"]) is None
    assert check.check(snap.job_index["wide"]) is None  # preempt could free a node
    for n in names:
        assert np.array_equal(getattr(ssn, n), before[n]), n
    assert np.array_equal(ssn.plugin("proportion").shares, shares)  # type: ignore[union-attr]


def test_equal_shapes_are_checked_once() -> None:
    gangs = [gang(f"w{i}", 1, 8) for i in range(5)]
    snap = snapshot(fragmented(), *gangs)
    ssn = open_session(snap, config())
    check = ShapeCheck(ssn)
    answers = {check.check(snap.job_index[f"w{i}"]) for i in range(5)}
    assert len(answers) == 1 and None not in answers
    assert len(check._cache) == 1


def test_a_one_task_gang_is_answered_without_a_trial_placement() -> None:
    """A gang that one more task makes enough is answered from where its first task would
    go: nothing is placed and undone, so the change log (which some plugins draw from) is
    untouched; a wider gang still tries its tasks, and leaves entries."""
    snap = snapshot(fragmented(), gang("one", 1, 1), gang("two", 2, 1))
    ssn = open_session(snap, config())
    check = ShapeCheck(ssn)
    start = ssn.changes.end
    assert check.check(snap.job_index["one"]) is None
    assert ssn.changes.end == start
    assert check.check(snap.job_index["two"]) is None
    assert ssn.changes.end > start


@pytest.mark.parametrize("cordoned", [False, True])
@pytest.mark.parametrize("gpus", [1, 8])
def test_the_answer_without_a_trial_is_the_trial_s(
    monkeypatch: pytest.MonkeyPatch, cordoned: bool, gpus: int
) -> None:
    """The shortcut answers as the trial would: a task that fits (one GPU), one that does
    not (eight), and one whose best node the gate refuses (every node cordoned, under a
    configuration without the predicates that would have left them out: the trial then
    runs and words its failure)."""
    nodes = [node(f"n{i}", unschedulable=cordoned) for i in range(8)]
    snap = snapshot(fragmented(), gang("one", 1, gpus), node_list=nodes)
    cfg = Config.from_dict(
        {
            "actions": ["enqueue", "allocate"],
            "tiers": [[{"name": "gang"}], [{"name": "proportion"}, {"name": "nodeorder"}]],
        }
    )
    answers = []
    for shortcut in (True, False):
        if not shortcut:
            monkeypatch.setattr(ShapeCheck, "_first_fits", lambda self, t: False)
        ssn = open_session(snap, cfg)
        answers.append(ShapeCheck(ssn).check(snap.job_index["one"]))
    assert answers[0] == answers[1]
    assert (answers[0] is None) is (gpus == 1 and not cordoned)


def test_a_node_affinity_is_part_of_the_shape_an_answer_is_shared_by() -> None:
    """Two one-GPU pods, one of them held by its node affinity to the full node: the first
    one's answer (it fits on the free node) is not the second's."""
    zone_a: Obj = {
        "required": [{"match_expressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]
    }
    nodes = [node("n0", gpus=1, labels={"zone": "a"}), node("n1", gpus=1, labels={"zone": "b"})]
    filler = one_gpu_filler()
    free = gang("free", 1, 1)
    pinned = gang("pinned", 1, 1)
    pinned[1][0]["node_affinity"] = zone_a
    snap = snapshot([filler], free, pinned, node_list=nodes)
    ssn = open_session(snap, config())
    check = ShapeCheck(ssn)
    assert check.check(snap.job_index["free"]) is None
    assert check.check(snap.job_index["pinned"]) == (
        "minimum gang of 1 task × 1 nvidia.com/gpu does not fit on any node: "
        "largest free is 0 GPUs per node"
    )
    d = schedule(snap, config())
    assert (d.jobs["free"].phase, d.jobs["pinned"].phase) == ("Running", "Pending")


def test_the_largest_free_slot_is_worded_once_per_shape_until_something_moves() -> None:
    """Two refused gangs of one shape and different sizes (two answers) share the words of
    the largest free slot while the change log stands still; a placement moves the log,
    and the next refusal words the cluster as it now is (node n0 had 2 GPUs free, then 1)."""
    fillers = fragmented()
    fillers[0]["gpu_request"] = {"count": 6}
    fillers[0]["gpu_indices"] = list(range(6))
    fat: Obj = {"name": "fat", "queue": "q", "min_available": 2}
    fat_tasks: list[Obj] = [
        {"name": f"fat-{i}", "job": "fat", "request": {"cpu": 100}} for i in range(2)
    ]
    snap = snapshot(
        fillers,
        gang("w2", 2, 8),
        gang("w3", 3, 8),
        gang("w4", 4, 8),
        gang("x", 1, 1),
        (fat, fat_tasks),
    )
    ssn = open_session(snap, config())
    check = ShapeCheck(ssn)
    two = "largest free is 2 GPUs per node"
    assert (check.check(snap.job_index["w2"]) or "").endswith(two)
    assert (check.check(snap.job_index["w3"]) or "").endswith(two)
    assert len(check._cache) == 2 and len(check._largest) == 1
    why = check.check(snap.job_index["fat"])  # another shape, its own words
    assert why is not None and why.endswith("largest free cpu is 64 per node"), why
    stmt = Statement(ssn)
    x = int(ssn.job_tasks(snap.job_index["x"])[0])
    assert stmt.allocate(x, 0, (6,))
    stmt.commit()
    why = check.check(snap.job_index["w4"])
    assert why is not None and why.endswith("largest free is 1 GPU per node"), why


_GROUP = "volcano.sh/nodegroup-name"


def _node_groups_snapshot() -> Snapshot:
    """Queue ``qa`` may use node ``n0`` only (full), ``qb`` node ``n1`` only (free); a job
    of each waits with the same one-GPU pod."""
    return Snapshot.from_dict(
        {
            "nodes": [
                gpu_node("n0", gpus=1, labels={_GROUP: "a"}),
                gpu_node("n1", gpus=1, labels={_GROUP: "b"}),
            ],
            "queues": [
                {"name": "qa", "node_group_affinity": {"required": ["a"]}},
                {"name": "qb", "node_group_affinity": {"required": ["b"]}},
            ],
            "jobs": [
                {"name": "filler", "queue": "qa", "phase": "Running", "min_available": 1},
                {"name": "free", "queue": "qb", "min_available": 1},
                {"name": "pinned", "queue": "qa", "min_available": 1},
            ],
            "tasks": [
                one_gpu_filler(),
                {"name": "free-0", "job": "free", "gpu_request": {"count": 1}},
                {"name": "pinned-0", "job": "pinned", "gpu_request": {"count": 1}},
            ],
        }
    )


def test_a_predicate_that_reads_the_queue_keeps_each_jobs_answer_its_own() -> None:
    """``nodegroup`` filters nodes by the job's queue, so two jobs of one shape may get
    different answers: the job whose queue's nodes are full is not admitted on the answer
    of a job of the same shape in another queue checked before it."""
    snap = _node_groups_snapshot()
    cfg = Config.from_dict(
        {
            "actions": ["enqueue", "allocate"],
            "tiers": [[{"name": "gang"}], [{"name": "nodegroup"}, {"name": "proportion"}]],
        }
    )
    alone = ShapeCheck(open_session(snap, cfg)).check(snap.job_index["pinned"])
    assert alone is not None and "does not fit on any node" in alone
    check = ShapeCheck(open_session(snap, cfg))
    assert check.check(snap.job_index["free"]) is None
    assert check.check(snap.job_index["pinned"]) == alone
    d = schedule(snap, cfg)
    assert (d.jobs["pinned"].phase, d.jobs["pinned"].reason) == ("Pending", "NotEnqueued")
    assert [(b.task, b.node) for b in d.binds] == [("free-0", "n1")]
