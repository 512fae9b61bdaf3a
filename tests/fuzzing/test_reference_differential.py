"""The fast scheduler and the plain reference scheduler make the same decisions.

Both run the same cycle (enqueue, allocate, backfill) with the same plugins; the reference
does it with Python loops over tasks and nodes. On random small clusters they must bind and
pipeline the same tasks to the same nodes and GPU devices, and leave every job in the same
state, under Volcano's default configuration and with binpack scoring added.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangsched.config import Config, PluginOption, Tier
from gangsched.decisions import Decisions
from gangsched.model import GpuRequest, Job, JobPhase, Node, Queue, QueueState, Resources, Task
from gangsched.model.snapshot import Snapshot
from gangsched.scheduler import schedule
from gangsched.testing import reference
from gangsched.testing.strategies import gangs, nodes, snapshots
from gangsched.units import CPU, MEMORY, PODS

DEFAULT = Config.default()
BINPACK = Config(
    actions=DEFAULT.actions,
    tiers=(
        DEFAULT.tiers[0],
        Tier(
            plugins=(
                *DEFAULT.tiers[1].plugins,
                PluginOption(
                    name="binpack",
                    arguments={
                        "binpack.weight": 2,
                        "binpack.resources": "nvidia.com/gpu",
                        "binpack.resources.nvidia.com/gpu": 3,
                    },
                ),
            )
        ),
    ),
)
NO_ENQUEUE = Config(actions=("allocate", "backfill"), tiers=BINPACK.tiers)

SETTINGS = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _filler(draw: st.DrawFn, node: Node, job: str, i: int) -> Task | None:
    """A task already on ``node`` taking a drawn fraction of it (Running, Bound or
    Releasing), so pending gangs meet full nodes and resources being released."""
    quarter = draw(st.integers(0, 4))
    if quarter == 0 or node.pod_limit == 0:
        return None
    request = {res: node.allocatable.get(res, 0) * quarter // 4 for res in (CPU, MEMORY)}
    gpu: GpuRequest | None = None
    indices: tuple[int, ...] = ()
    if node.gpus is not None and draw(st.booleans()):
        count = draw(st.integers(1, node.gpus.count))
        milli = draw(st.sampled_from((1000, 500, 250)))
        gpu = GpuRequest(count=count, milli=milli)
        indices = tuple(range(count))
    phase = draw(st.sampled_from(("Running", "Bound", "Releasing", "Releasing")))
    return Task(
        name=f"{job}-{i}",
        job=job,
        request=Resources(request),
        gpu_request=gpu,
        phase=phase,  # parsed on construction
        node=node.name,
        gpu_indices=indices,
        priority=draw(st.integers(0, 2)),
    )


@st.composite
def busy_snapshots(draw: st.DrawFn) -> Snapshot:
    """Small clusters under contention: nodes partly held by running or releasing tasks,
    open and closed queues, pending gangs (some with best-effort members) and elastic jobs."""
    node_list = [draw(nodes(f"node-{i}")) for i in range(draw(st.integers(1, 7)))]
    n_queues = draw(st.integers(1, 3))
    queue_list = tuple(
        Queue(
            name="default" if q == 0 else f"queue-{q}",
            weight=draw(st.integers(1, 4)),
            capability=draw(
                st.none() | st.just(Resources({CPU: 24_000, MEMORY: 96 * 2**30, PODS: 6}))
            ),
            state=draw(st.sampled_from((QueueState.OPEN,) * 4 + (QueueState.CLOSED,))),
            priority=draw(st.integers(0, 1)),
        )
        for q in range(n_queues)
    )
    names = [q.name for q in queue_list]
    job_list: list[Job] = []
    task_list: list[Task] = []
    fillers = [
        t for i, node in enumerate(node_list) if (t := _filler(draw, node, "busy", i)) is not None
    ]
    if fillers:
        job_list.append(
            Job(name="busy", queue=draw(st.sampled_from(names)), phase=JobPhase.RUNNING)
        )
        task_list += fillers
    for j in range(draw(st.integers(1, 6))):
        job, members = draw(gangs(names, name=f"job-{j}", max_tasks=5, creation=j))
        task_list += members
        for b in range(draw(st.integers(0, 2)) if draw(st.booleans()) else 0):
            task_list.append(Task(name=f"job-{j}-be-{b}", job=job.name, role="be"))
        job_list.append(job)
    return Snapshot(
        nodes=tuple(node_list), queues=queue_list, jobs=tuple(job_list), tasks=tuple(task_list)
    )


def _view(d: Decisions) -> dict[str, Any]:
    return {
        "binds": [(b.task, b.node, b.gpu_indices) for b in d.binds],
        "pipelined": [(p.task, p.node, p.gpu_indices) for p in d.pipelined],
        "jobs": {
            name: (s.phase, s.ready, s.running, s.allocated, s.pipelined, s.pending)
            for name, s in d.jobs.items()
        },
        "queues": {
            name: (dict(s.allocated), dict(s.deserved), s.inqueue, s.pending, s.running)
            for name, s in d.queues.items()
        },
    }


def _agree(snapshot: Snapshot, config: Config) -> Decisions:
    fast = schedule(snapshot, config)
    plain = reference.schedule(snapshot, config)
    assert _view(fast) == _view(plain)
    for name, queue in fast.queues.items():
        assert abs(queue.share - plain.queues[name].share) < 1e-9
    return fast


@SETTINGS
@given(busy_snapshots())
def test_default_config_agrees(snapshot: Snapshot) -> None:
    _agree(snapshot, DEFAULT)


@SETTINGS
@given(busy_snapshots())
def test_binpack_config_agrees(snapshot: Snapshot) -> None:
    _agree(snapshot, BINPACK)


@settings(SETTINGS, max_examples=60)
@given(busy_snapshots())
def test_without_enqueue_agrees(snapshot: Snapshot) -> None:
    _agree(snapshot, NO_ENQUEUE)


@settings(SETTINGS, max_examples=60)
@given(snapshots(max_nodes=5, max_jobs=4, topology=False))
def test_library_strategy_agrees(snapshot: Snapshot) -> None:
    _agree(snapshot, DEFAULT)


def test_ties_go_to_the_lowest_node_index() -> None:
    same = [Node(name=f"n{i}", allocatable={CPU: 4, MEMORY: "8Gi"}) for i in range(3)]
    snap = Snapshot(
        nodes=(same[2].__class__(name="n-last", allocatable=same[0].allocatable), *same),
        queues=(Queue(name="default"),),
        jobs=(Job(name="j", min_available=2, phase=JobPhase.INQUEUE),),
        tasks=tuple(
            Task(name=f"j-{i}", job="j", request={CPU: 1, MEMORY: "1Gi"}) for i in range(2)
        ),
    )
    fast = _agree(snap, DEFAULT)
    # Equal nodes score equally; the first task takes the first node in snapshot order, the
    # second avoids it (least-requested prefers the emptier nodes).
    assert [(b.task, b.node) for b in fast.binds] == [("j-0", "n-last"), ("j-1", "n0")]


def test_the_gang_job_order_counts_tasks_in_both_schedulers() -> None:
    # gang's job order reads readiness by count (ready and pending best-effort tasks against
    # min_available, role minimums not read), as Volcano's JobOrderFn. b's two best-effort
    # workers make its count of 2 although its master role is short, so both jobs count as
    # ready, the order falls to creation, and a takes the node's only room. Ordered by full
    # readiness (roles included), b came first and took it.
    snap = Snapshot(
        nodes=(Node(name="n0", allocatable={CPU: 4, MEMORY: "8Gi"}),),
        queues=(Queue(name="default"),),
        jobs=(
            Job(name="a", min_available=1, phase=JobPhase.INQUEUE),
            Job(
                name="b",
                min_available=2,
                creation=1,
                phase=JobPhase.INQUEUE,
                min_task_member={"master": 1, "worker": 1},
            ),
        ),
        tasks=(
            Task(name="a-0", job="a", request={CPU: 4, MEMORY: "1Gi"}),
            Task(name="a-1", job="a"),
            Task(name="b-0", job="b", role="master", request={CPU: 4, MEMORY: "1Gi"}),
            Task(name="b-1", job="b", role="worker"),
            Task(name="b-2", job="b", role="worker"),
        ),
    )
    for config in (DEFAULT, NO_ENQUEUE):
        fast = _agree(snap, config)
        bound = {b.task for b in fast.binds}
        assert "a-0" in bound and "b-0" not in bound
