"""Gang-aware retry against retrying every job: the same binds, evictions, reservations and
phases after every cycle (the contract in ``docs/scheduling.md``, "Retrying waiting jobs").

Two :class:`~gangsched.ClusterState` receive the same event stream — gangs of one template
and of two (with and without a hard one-node topology, fractional and whole GPUs), jobs that
finish, tasks that fail under a running job, evicted tasks that leave, cordons, queue
weights and capabilities — and run their cycles under one configuration that differs only
in ``allocate``'s ``retry`` argument (``on-change``, the default, and ``always``). After
every cycle the decisions must agree, save the words of carried jobs; both states then apply
the same decisions.

Default run: ``STREAMS`` seeded streams per configuration and a derandomized hypothesis run
(whose draws shrink a failure). The soak (``GANGSCHED_SOAK=1``) runs
``GANGSCHED_RETRY_SOAK_STREAMS`` (10,000) seeded streams of ``GANGSCHED_RETRY_SOAK_STEPS``
events (40) from seed ``GANGSCHED_RETRY_SOAK_SEED`` (10,000) and prints the figures.
"""

from __future__ import annotations

import dataclasses
import os
import random
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gangsched.actions.allocate as allocate_module
from gangsched import Config, Decisions, Snapshot
from gangsched._frozen import FrozenDict
from gangsched.actions._retry import CARRIED
from gangsched.model import (
    GpuRequest,
    Job,
    JobPhase,
    NetworkTopology,
    Node,
    Queue,
    Resources,
    Task,
    TaskPhase,
    TopologyMode,
)
from gangsched.plugins.priority import PriorityPlugin
from gangsched.scheduler import default_registry
from gangsched.session.task_states import TaskState
from gangsched.state import ClusterState

SOAK = os.environ.get("GANGSCHED_SOAK") == "1"
STREAMS = 12
SOAK_STREAMS = int(os.environ.get("GANGSCHED_RETRY_SOAK_STREAMS", "10000"))
STEPS = 40

_HEAD = [{"name": "priority"}, {"name": "gang"}, {"name": "conformance"}]
_CONFIGS: dict[str, dict[str, Any]] = {
    "default": {
        "actions": ["enqueue", "allocate", "backfill"],
        "tiers": [
            _HEAD,
            [{"name": n} for n in ("overcommit", "drf", "predicates", "proportion", "nodeorder")],
        ],
    },
    "preempt": {
        "actions": ["enqueue", "allocate", "preempt", "reclaim", "backfill"],
        "tiers": [
            _HEAD,
            [{"name": n} for n in ("drf", "predicates", "proportion", "nodeorder", "binpack")],
        ],
    },
    "no-fair-share": {
        "actions": ["enqueue", "allocate", "backfill"],
        "tiers": [_HEAD, [{"name": n} for n in ("drf", "predicates", "nodeorder", "binpack")]],
    },
    "capacity": {
        "actions": ["enqueue", "allocate", "reclaim", "backfill"],
        "tiers": [_HEAD, [{"name": n} for n in ("drf", "predicates", "capacity", "nodeorder")]],
    },
}
CONFIG_NAMES = tuple(_CONFIGS)


def config(name: str, retry: str) -> Config:
    data = dict(_CONFIGS[name])
    data["configurations"] = {"allocate": {"retry": retry}}
    return Config.from_dict(data)


Choose = Callable[[Sequence[Any]], Any]

_NODES = [
    {
        "name": "n0",
        "allocatable": {"cpu": 16, "memory": "64Gi"},
        "gpus": {"count": 4},
        "labels": {"pool": "a"},
    },
    {
        "name": "n1",
        "allocatable": {"cpu": 16, "memory": "64Gi"},
        "gpus": {"count": 4},
        "labels": {"pool": "b"},
    },
    {
        "name": "n2",
        "allocatable": {"cpu": 8, "memory": "32Gi"},
        "gpus": {"count": 2, "model": "T4"},
        "labels": {"pool": "b"},
    },
    {"name": "n3", "allocatable": {"cpu": 8, "memory": "32Gi"}, "labels": {"pool": "b"}},
]
_QUEUES = [{"name": "qa", "weight": 2}, {"name": "qb", "weight": 1}, {"name": "qc", "weight": 1}]


def _cluster() -> Snapshot:
    hypernodes = [{"name": f"h-{n['name']}", "tier": 1, "members": [n["name"]]} for n in _NODES]
    return Snapshot.from_dict({"nodes": _NODES, "queues": _QUEUES, "hypernodes": hypernodes})


class Stream:
    """Two states fed the same events; :meth:`cycle` compares their decisions."""

    def __init__(self, config_name: str, choose: Choose) -> None:
        snap = _cluster()
        self.states = (ClusterState(snap), ClusterState(snap))
        self.configs = (config(config_name, "on-change"), config(config_name, "always"))
        self.choose = choose
        self.n = 0
        self.cycles = 0
        self.carried = 0

    def both(self, op: str, *args: Any, **kwargs: Any) -> None:
        for state in self.states:
            getattr(state, op)(*args, **kwargs)

    # ------------------------------------------------------------------ events

    def arrive(self) -> None:
        c = self.choose
        self.n += 1
        name = f"j{self.n}"
        size = c([1, 1, 2, 3, 4, 6])
        shapes = [self._shape()] if c([True, True, False]) else [self._shape(), self._shape()]
        topology = c([None, None, NetworkTopology(mode=TopologyMode.HARD, highest_tier_allowed=1)])
        selector = c([{}, {}, {"pool": "a"}])
        tasks = []
        for i in range(size):
            cpu, gpus, milli = shapes[i % len(shapes)]
            tasks.append(
                Task(
                    name=f"{name}-{i}",
                    job=name,
                    role=f"r{i % len(shapes)}",
                    request=Resources({"cpu": cpu * 1000, "memory": cpu * 2**30}),
                    gpu_request=GpuRequest(count=gpus, milli=milli) if gpus else None,
                    priority=c([0, 0, 1]),
                    node_selector=selector,
                )
            )
        job = Job(
            name=name,
            queue=c(["qa", "qb", "qc"]),
            min_available=c(list(range(1, size + 1))),
            priority=c([0, 0, 1, 2]),
            network_topology=topology,
            creation=self.n,
        )
        self.both("add_job", job, tasks)

    def _shape(self) -> tuple[int, int, int]:
        c = self.choose
        return c([2, 4, 6, 8]), c([0, 1, 1, 2]), c([1000, 1000, 500])

    def finish(self) -> None:
        """A job whose tasks all run ends (its tasks and the job leave)."""
        state = self.states[0]
        done = [
            j
            for j in state.jobs
            if state.tasks_of(j)
            and all(t.phase in (TaskPhase.RUNNING, TaskPhase.BOUND) for t in state.tasks_of(j))
        ]
        if done:
            self.both("remove_job", self.choose(done), with_tasks=True)

    def lose(self) -> None:
        """A running task fails and is re-created Pending (its job restores its minimum)."""
        state = self.states[0]
        running = [t.name for t in state.tasks.values() if t.phase is TaskPhase.RUNNING]
        if running:
            self.both("set_task_phase", self.choose(running), TaskPhase.PENDING)

    def leave(self) -> None:
        """Evicted tasks are gone: their jobs queue again from scratch."""
        state = self.states[0]
        jobs = sorted({t.job for t in state.tasks.values() if t.phase is TaskPhase.RELEASING})
        for j in jobs:
            for t in state.tasks_of(j):
                if t.phase is not TaskPhase.PENDING:
                    self.both("set_task_phase", t.name, TaskPhase.PENDING)
            rec = state.jobs[j]
            if rec.phase is not JobPhase.PENDING:
                self.both("update_job", dataclasses.replace(rec, phase=JobPhase.PENDING))

    def cordon(self) -> None:
        state = self.states[0]
        name = self.choose(list(state.nodes))
        self.both("cordon", name, not state.nodes[name].unschedulable)

    def relabel(self) -> None:
        """A node moves to the other pool: a job selecting the pool may fit where no node
        gained room."""
        state = self.states[0]
        node = state.nodes[self.choose(list(state.nodes))]
        pool = "b" if node.labels.get("pool") == "a" else "a"
        self.both("update_node", dataclasses.replace(node, labels=FrozenDict({"pool": pool})))

    def grow(self) -> None:
        """A node joins (the node set changes)."""
        self.n += 1
        node = Node(
            name=f"x{self.n}",
            allocatable=Resources({"cpu": 8000, "memory": 32 * 2**30}),
            labels={"pool": self.choose(["a", "b"])},
        )
        self.both("add_node", node)

    def shrink(self) -> None:
        """A joined node without tasks leaves (the node set changes)."""
        state = self.states[0]
        held = {t.node for t in state.tasks.values()}
        idle = [n for n in state.nodes if n.startswith("x") and n not in held]
        if idle:
            self.both("remove_node", self.choose(idle))

    def queue(self) -> None:
        state = self.states[0]
        name = self.choose(list(state.queues))
        rec = state.queues[name]
        cap = self.choose([None, {"cpu": 8000}, {"cpu": 24000, "nvidia.com/gpu": 4000}])
        new = dataclasses.replace(
            rec, weight=self.choose([1, 2, 3]), capability=Resources(cap or {})
        )
        self.both("update_queue", new)

    def cycle(self) -> Decisions:
        fast, every = (
            state.schedule(cfg) for state, cfg in zip(self.states, self.configs, strict=True)
        )
        assert_equivalent(fast, every)
        # ``always`` tries every job: it never carries words.
        assert not any(s.message.startswith(CARRIED) for s in every.jobs.values())
        assert not any(text.startswith(CARRIED) for text in every.task_reasons.values())
        self.carried += sum(s.message.startswith(CARRIED) for s in fast.jobs.values())
        for state in self.states:
            state.apply(fast, bound=TaskPhase.RUNNING)
        self.cycles += 1
        return fast

    EVENTS = ("arrive", "arrive", "arrive", "arrive", "cycle", "cycle", "cycle", "finish",
              "lose", "leave", "cordon", "queue", "relabel", "grow", "shrink")  # fmt: skip

    def run(self, steps: int) -> None:
        for _ in range(steps):
            getattr(self, self.choose(self.EVENTS))()
        self.cycle()


def assert_equivalent(fast: Decisions, every: Decisions) -> None:
    """Binds, evictions, reservations, job phases and every count of a job's status agree;
    a job's words agree unless the gang-aware side carried them."""
    assert fast.binds == every.binds
    assert fast.evictions == every.evictions
    assert fast.pipelined == every.pipelined
    assert fast.jobs.keys() == every.jobs.keys()
    for name, status in fast.jobs.items():
        other = every.jobs[name]
        if status.message.startswith(CARRIED):
            status = dataclasses.replace(status, reason=other.reason, message=other.message)
        assert status == other, name
    assert fast.queues == every.queues


def run_seeded(config_name: str, seed: int, steps: int = STEPS) -> Stream:
    rng = random.Random(seed)
    stream = Stream(config_name, lambda options: options[rng.randrange(len(options))])
    stream.run(steps)
    return stream


@pytest.mark.parametrize("config_name", CONFIG_NAMES)
def test_seeded_streams_decide_alike(config_name: str) -> None:
    carried = cycles = 0
    for seed in range(STREAMS):
        stream = run_seeded(config_name, seed)
        carried += stream.carried
        cycles += stream.cycles
    assert cycles > STREAMS * 5
    # Not vacuous: the gang-aware side did carry jobs.
    assert carried > 0


@settings(max_examples=30, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data(), config_name=st.sampled_from(CONFIG_NAMES))
def test_drawn_streams_decide_alike(data: st.DataObject, config_name: str) -> None:
    stream = Stream(config_name, lambda options: data.draw(st.sampled_from(list(options))))
    stream.run(30)


@pytest.mark.parametrize(
    ("rule", "blind"),
    [
        ("gained", lambda then, now, rows, *rest: rows[:0]),  # no node ever gains room
        ("room_short", lambda *args, **kwargs: True),  # no place ever has room enough
    ],
)
def test_a_carry_that_ignores_freed_room_is_caught(
    monkeypatch: pytest.MonkeyPatch, rule: str, blind: Callable[..., Any]
) -> None:
    """The comparison can fail: a retry rule blind to freed room binds differently."""
    monkeypatch.setattr(allocate_module, rule, blind)
    with pytest.raises(AssertionError):
        for seed in range(60):
            run_seeded("default", seed)


def test_a_failed_attempt_is_remembered_with_the_room_it_saw(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The room a failed attempt is remembered with is read after its discard: it must be
    the room of the attempt's start, every node and device, though the attempt placed some
    of its gang's tasks before failing."""
    from gangsched.actions._gang_placement import placement_ground
    from gangsched.actions._retry import MEMORY_KEY

    seen: dict[str, tuple[Any, ...]] = {}
    allocate_job = allocate_module.AllocateAction._allocate_job

    def watched(self: Any, ssn: Any, run: Any, stmt: Any, j: int, *rest: Any) -> bool:
        seen[ssn.snapshot.jobs[j].name] = tuple(part.copy() for part in placement_ground(ssn))
        placed: bool = allocate_job(self, ssn, run, stmt, j, *rest)
        return placed

    monkeypatch.setattr(allocate_module.AllocateAction, "_allocate_job", watched)
    state = ClusterState(_cluster())
    state.add_job(
        Job(name="big", queue="qa", min_available=8, phase=JobPhase.INQUEUE),
        [
            Task(name=f"big-{i}", job="big", request=Resources({"cpu": 7000, "memory": 2**30}))
            for i in range(8)
        ],
    )
    state.schedule(config("default", "on-change"))
    memory = state.__dict__["_last_session"].records[MEMORY_KEY]
    failure = memory["big"]
    before = seen["big"]
    assert failure.ground[0].sum() > 0
    for kept, then in zip(failure.ground, before, strict=True):
        assert np.array_equal(kept, then)


@pytest.mark.parametrize("blind", [False, True])
def test_a_job_waiting_for_a_label_is_tried_once_a_node_is_relabelled(
    monkeypatch: pytest.MonkeyPatch, blind: bool
) -> None:
    """A node whose record changes gains no room, yet it may now admit a job that selects
    its new label: the job must be tried again (and placed). Ignoring the renewed records
    (``blind``) carries it instead, and the comparison fails."""
    if blind:
        monkeypatch.setattr(allocate_module, "renewed", lambda then, now, rows: rows[:0])
    nodes = [
        {"name": "a", "allocatable": {"cpu": 4, "memory": "8Gi"}, "labels": {"pool": "a"}},
        {"name": "b", "allocatable": {"cpu": 16, "memory": "32Gi"}, "labels": {"pool": "b"}},
    ]
    snap = Snapshot.from_dict({"nodes": nodes, "queues": [{"name": "q"}]})
    cfg = {
        "actions": ["enqueue", "allocate", "backfill"],
        "tiers": [_HEAD, [{"name": "predicates"}, {"name": "proportion"}, {"name": "nodeorder"}]],
    }
    task = Task(
        name="j-0",
        job="j",
        request=Resources({"cpu": 8000, "memory": 2**30}),
        node_selector={"pool": "a"},
    )
    decided: dict[str, list[Decisions]] = {}
    for retry in ("on-change", "always"):
        state = ClusterState(snap)
        config = Config.from_dict({**cfg, "configurations": {"allocate": {"retry": retry}}})
        state.add_job(Job(name="j", queue="q", min_available=1, phase=JobPhase.INQUEUE), [task])
        out = decided[retry] = []
        for step in range(4):
            if step == 2:  # b joins pool a: no node gained room
                state.update_node(
                    dataclasses.replace(state.nodes["b"], labels=FrozenDict({"pool": "a"}))
                )
            d = state.schedule(config)
            out.append(d)
            state.apply(d, bound=TaskPhase.RUNNING)
    placed = [any(b.task == "j-0" for b in d.binds) for d in decided["always"]]
    assert placed == [False, False, True, False]
    assert decided["on-change"][1].jobs["j"].message.startswith(CARRIED)  # carried before
    pairs = zip(decided["on-change"], decided["always"], strict=True)
    if blind:
        with pytest.raises(AssertionError):
            for fast, every in pairs:
                assert_equivalent(fast, every)
    else:
        for fast, every in pairs:
            assert_equivalent(fast, every)


@pytest.mark.soak
@pytest.mark.no_invariant_hook  # the default run checks the invariants of these cycles
@pytest.mark.skipif(not SOAK, reason="soak: set GANGSCHED_SOAK=1")
def test_soak_streams_decide_alike() -> None:
    steps = int(os.environ.get("GANGSCHED_RETRY_SOAK_STEPS", str(STEPS)))
    first = int(os.environ.get("GANGSCHED_RETRY_SOAK_SEED", "10000"))
    carried = cycles = 0
    for seed in range(first, first + SOAK_STREAMS):
        stream = run_seeded(CONFIG_NAMES[seed % len(CONFIG_NAMES)], seed, steps)
        carried += stream.carried
        cycles += stream.cycles
    print(
        f"\n{SOAK_STREAMS} streams of {steps} events from seed {first}: {cycles} cycles "
        f"compared, {carried} carried job statuses"
    )
    assert carried > 0


def test_a_job_waiting_for_an_affine_pod_is_tried_once_that_pod_lands_elsewhere() -> None:
    """Pod affinity reads where other pods are: the pod it waits for lands on another node of
    its rack and no node gains room, yet the job must be tried again (and placed)."""
    from gangsched.model import LabelSelector, PodAffinity, PodAffinityTerm

    nodes = [
        {"name": n, "allocatable": {"cpu": 16, "memory": "32Gi"}, "labels": {"rack": "r1"}}
        for n in ("a", "b")
    ]
    snap = Snapshot.from_dict({"nodes": nodes, "queues": [{"name": "q"}]})
    cfg = {
        "actions": ["enqueue", "allocate", "backfill"],
        "tiers": [_HEAD, [{"name": "predicates"}, {"name": "proportion"}, {"name": "nodeorder"}]],
    }
    states = {r: ClusterState(snap) for r in ("on-change", "always")}
    configs = {
        r: Config.from_dict({**cfg, "configurations": {"allocate": {"retry": r}}}) for r in states
    }
    near_db = PodAffinity(
        required=(
            PodAffinityTerm(
                topology_key="rack", label_selector=LabelSelector(match_labels={"app": "db"})
            ),
        )
    )
    app = Task(
        name="app-0",
        job="app",
        request=Resources({"cpu": 2000, "memory": 2**30}),
        labels={"app": "web"},
        pod_affinity=near_db,
    )
    # the filler and db take room on both nodes, so no node gains room when db lands
    filler = Task(name="f-0", job="f", request=Resources({"cpu": 14000, "memory": 2**30}))
    db = Task(name="db-0", job="db", request=Resources({"cpu": 8000}), labels={"app": "db"})
    decided: dict[str, list[Decisions]] = {r: [] for r in states}
    for retry, state in states.items():
        state.add_job(Job(name="app", queue="q", min_available=1, creation=1), [app])
        state.add_job(Job(name="f", queue="q", min_available=1, creation=0), [filler])
        for _ in range(2):
            d = state.schedule(configs[retry])
            decided[retry].append(d)
            state.apply(d, bound=TaskPhase.RUNNING)
        state.add_job(Job(name="db", queue="q", min_available=1, creation=2), [db])
        for _ in range(2):
            d = state.schedule(configs[retry])
            decided[retry].append(d)
            state.apply(d, bound=TaskPhase.RUNNING)
    placed = [any(b.task == "app-0" for b in d.binds) for d in decided["always"]]
    assert placed == [False, False, False, True]  # db lands in the third cycle, after app's turn
    for fast, every in zip(decided["on-change"], decided["always"], strict=True):
        assert_equivalent(fast, every)


def test_a_job_held_by_spread_is_tried_once_a_pod_lands_in_the_other_zone() -> None:
    """Topology spread reads where other pods are: a matching pod landing in the emptier zone
    lets a waiting job onto a node that had room all along and gained none, so only trying the
    job again places it."""
    from gangsched.model import LabelSelector, TopologySpreadConstraint

    web = {"app": "web"}
    nodes = [
        {"name": "a", "allocatable": {"cpu": 16, "memory": "32Gi"}, "labels": {"zone": "z1"}},
        {"name": "b", "allocatable": {"cpu": 4, "memory": "32Gi"}, "labels": {"zone": "z2"}},
    ]
    snap = Snapshot.from_dict({"nodes": nodes, "queues": [{"name": "q"}]})
    cfg = {
        "actions": ["enqueue", "allocate", "backfill"],
        "tiers": [_HEAD, [{"name": "predicates"}, {"name": "proportion"}, {"name": "nodeorder"}]],
    }
    spread = (
        TopologySpreadConstraint(
            max_skew=2, topology_key="zone", label_selector=LabelSelector(match_labels=web)
        ),
    )

    def task(name: str, job: str, cpu: int, zone: str | None = None, **kw: Any) -> Task:
        return Task(
            name=name,
            job=job,
            request=Resources({"cpu": cpu * 1000, "memory": 2**30}),
            node_selector={"zone": zone} if zone else {},
            **kw,
        )

    decided: dict[str, list[Decisions]] = {}
    for retry in ("on-change", "always"):
        state = ClusterState(snap)
        # the shape check off (as in a configuration read from Volcano's YAML): app reaches
        # allocate and fails there
        args = {"allocate": {"retry": retry}, "enqueue": {"shapeCheckEnable": False}}
        config = Config.from_dict({**cfg, "configurations": args})
        out = decided[retry] = []

        def cycle(
            state: ClusterState = state, config: Config = config, out: list[Any] = out
        ) -> None:
            d = state.schedule(config)
            out.append(d)
            state.apply(d, bound=TaskPhase.RUNNING)

        # two web pods in z1, two of b's four cpus taken: z1 holds 2, z2 none
        olds = [task(f"old-{i}", "old", 1, "z1", labels=web) for i in range(2)]
        state.add_job(Job(name="old", queue="q", min_available=2, creation=0), olds)
        state.add_job(
            Job(name="fill", queue="q", min_available=1, creation=1),
            [task("fill-0", "fill", 2, "z2")],
        )
        cycle()
        # app (4 cpu) may not go to z1 (skew 3 > 2) and does not fit b's two free cpus
        app = task("app-0", "app", 4, labels=web, topology_spread=spread)
        state.add_job(Job(name="app", queue="q", min_available=1, creation=2), [app])
        cycle()
        # a web pod lands on b (z2 holds 1): z1 is allowed again, a gained no room
        state.add_job(
            Job(name="w2", queue="q", min_available=1, creation=3),
            [task("w2-0", "w2", 2, "z2", labels=web)],
        )
        cycle()
        cycle()
    placed = [any(b.task == "app-0" for b in d.binds) for d in decided["always"]]
    assert placed == [False, False, False, True]
    for fast, every in zip(decided["on-change"], decided["always"], strict=True):
        assert_equivalent(fast, every)


def test_jobs_of_one_shape_are_judged_by_their_own_queue_and_size() -> None:
    """The checks at allocate's start are shared by the jobs of one template shape; what
    differs between such jobs must still tell them apart: the queue (one refuses the shape,
    another takes it), the tasks the gang still needs (room for one task, not for two) and a
    hard topology (two tasks inside one node never fit; on two nodes they do). Room frees
    and a queue opens while the jobs wait; both sides must place the same jobs, in the
    same cycles."""
    nodes = [{"name": f"n{i}", "allocatable": {"cpu": 8, "memory": "32Gi"}} for i in range(3)]
    hypernodes = [{"name": f"h-n{i}", "tier": 1, "members": [f"n{i}"]} for i in range(3)]
    queues = [{"name": "qa", "capability": {"cpu": 4}}, {"name": "qb", "capability": {"cpu": 99}}]
    snap = Snapshot.from_dict({"nodes": nodes, "queues": queues, "hypernodes": hypernodes})
    shape = Resources({"cpu": 8000, "memory": 2**30})
    one_node = NetworkTopology(mode=TopologyMode.HARD, highest_tier_allowed=1)

    def job(name: str, queue: str, size: int, topology: Any = None) -> tuple[Job, list[Task]]:
        rec = Job(
            name=name,
            queue=queue,
            min_available=size,
            network_topology=topology,
            phase=JobPhase.INQUEUE,  # admitted: allocate's turn, not enqueue's
        )
        return rec, [Task(name=f"{name}-{i}", job=name, request=shape) for i in range(size)]

    decided: dict[str, list[Decisions]] = {}
    for retry in ("on-change", "always"):
        cfg = Config.from_dict(
            {
                "actions": _CONFIGS["capacity"]["actions"],
                "tiers": _CONFIGS["capacity"]["tiers"],
                "configurations": {"allocate": {"retry": retry}},
            }
        )
        state = ClusterState(snap)
        for i in range(3):  # the cluster is full
            state.add_job(*job(f"r{i}", "qb", 1))
        out = decided[retry] = [state.schedule(cfg)]
        state.apply(out[-1], bound=TaskPhase.RUNNING)
        # Waiting jobs of one shape, in this order: in a queue that refuses it, two tasks
        # inside one node, two tasks anywhere, one task.
        for rec, tasks in (
            job("refused", "qa", 1),
            job("inside", "qb", 2, one_node),
            job("pair", "qb", 2),
            job("single", "qb", 1),
        ):
            state.add_job(rec, tasks)
        for step in range(8):
            if step == 2:
                state.remove_job("r0", with_tasks=True)  # room for one task
            if step == 4:
                state.remove_job("r1", with_tasks=True)  # room for two, on two nodes
                state.remove_job("r2", with_tasks=True)
            if step == 6:
                queue = state.queues["qa"]
                state.update_queue(dataclasses.replace(queue, capability=Resources({})))
                state.remove_job("single", with_tasks=True)
            out.append(state.schedule(cfg))
            state.apply(out[-1], bound=TaskPhase.RUNNING)
    for fast, every in zip(decided["on-change"], decided["always"], strict=True):
        assert_equivalent(fast, every)
    bound = [sorted({b.task.rsplit("-", 1)[0] for b in d.binds}) for d in decided["always"]]
    assert bound[1:] == [[], [], ["single"], [], ["pair"], [], ["refused"], []]
    carried = [
        sorted(n for n, s in d.jobs.items() if s.message.startswith(CARRIED))
        for d in decided["on-change"]
    ]
    assert "pair" in carried[3] and "inside" in carried[5]  # the shared checks were asked


@pytest.mark.parametrize("proofs_at_turn", [True, False])
def test_a_job_whose_room_went_to_a_job_ahead_is_carried_at_its_turn(
    monkeypatch: pytest.MonkeyPatch, proofs_at_turn: bool
) -> None:
    """Room frees where a waiting job could use it, so the run's start cannot prove that job
    would fail; a job ahead of it in the queue then takes that room. At its turn the room
    proofs hold, so it is carried (its last words, marked) instead of tried, and both sides
    still bind the same tasks in every cycle. Without the room proofs
    (``proofs_at_turn=False``: only the queue's verdict is asked at the turn) the job is
    tried, and its words are an attempt's."""
    if not proofs_at_turn:

        def queue_only(self: Any, ssn: Any, run: Any, j: int, q: int, held: Any) -> bool:
            return not self._takes(ssn, run, q, ssn.templates[held[1]])

        monkeypatch.setattr(allocate_module.AllocateAction, "_fails_now", queue_only)
    snap = Snapshot.from_dict(
        {
            "nodes": [
                {"name": "n0", "allocatable": {"cpu": 8, "memory": "32Gi"}},
                # room the queue counts and no task may use: the queue keeps taking
                {
                    "name": "n1",
                    "allocatable": {"cpu": 64, "memory": "256Gi"},
                    "taints": [{"key": "reserved", "effect": "NoSchedule"}],
                },
            ],
            "queues": [{"name": "q"}],
        }
    )
    shape = Resources({"cpu": 8000, "memory": 2**30})

    def job(name: str, creation: int) -> tuple[Job, list[Task]]:
        rec = Job(name=name, queue="q", min_available=1, phase=JobPhase.INQUEUE, creation=creation)
        return rec, [Task(name=f"{name}-0", job=name, request=shape)]

    decided: dict[str, list[Decisions]] = {}
    for retry in ("on-change", "always"):
        cfg = config("default", retry)
        state = ClusterState(snap)
        state.add_job(*job("holder", 0))
        state.add_job(*job("waiter", 5))
        out = decided[retry] = []
        for step in range(3):
            if step == 1:  # the holder finishes; a job created before the waiter arrives
                state.remove_job("holder", with_tasks=True)
                state.add_job(*job("early", 1))
            out.append(state.schedule(cfg))
            state.apply(out[-1], bound=TaskPhase.RUNNING)
    for fast, every in zip(decided["on-change"], decided["always"], strict=True):
        assert_equivalent(fast, every)
    bound = [sorted(b.task for b in d.binds) for d in decided["always"]]
    assert bound == [["holder-0"], ["early-0"], []]
    waiter = [d.jobs["waiter"].message for d in decided["on-change"]]
    assert not waiter[0].startswith(CARRIED)  # its first attempt
    # (and then while nothing changes for it: no room, the same gang)
    assert [m.startswith(CARRIED) for m in waiter[1:]] == [proofs_at_turn] * 2


class _QueuesWithFewerUnschedulableFirst:
    """A queue order from outside the package that reads what carrying changes (the jobs
    found unschedulable so far in the cycle)."""

    name = "fewer-unschedulable-first"

    def __init__(self, arguments: Any = None) -> None:
        self.arguments = arguments

    def queue_order(self, ssn: Any, queue: int) -> tuple[int]:
        jq = ssn.job_queue
        return (sum(1 for j in ssn.unschedulable_jobs if int(jq[j]) == queue),)


@pytest.mark.parametrize("retry", ["on-change", "always"])
def test_a_queue_order_from_elsewhere_is_asked_again_after_a_job_carried_at_its_turn(
    retry: str,
) -> None:
    """With the package's queue orders a job carried at its turn moves nothing they read, and
    the next job of its queue is tried in the same turn; a queue order from elsewhere may read
    what carrying changed, so it is asked again before the next job is tried. Both retry modes
    bind the same tasks (qa's a0, then qb's b0: qa now holds an unschedulable job)."""
    from gangsched.scheduler import default_registry

    registry = default_registry()
    registry.register_plugin("fewer-unschedulable-first", _QueuesWithFewerUnschedulableFirst)
    cfg = Config.from_dict(
        {
            "actions": ["allocate"],
            "tiers": [
                [{"name": "gang"}, {"name": "fewer-unschedulable-first"}],
                [{"name": "predicates"}],
            ],
            "configurations": {"allocate": {"retry": retry}},
        },
        plugins=registry.plugins,
    )
    state = ClusterState()
    state.add_node(Node.from_dict({"name": "n0", "allocatable": {"cpu": "4", "memory": "8Gi"}}))
    for q in ("qa", "qb"):
        state.add_queue(Queue.from_dict({"name": q}))

    def job(name: str, queue: str, creation: int, cpu: int, size: int = 1, **task: Any) -> None:
        state.add_job(
            Job(
                name=name,
                queue=queue,
                min_available=size,
                phase=JobPhase.INQUEUE,
                creation=creation,
            ),
            [
                Task(name=f"{name}-{i}", job=name, request=Resources({"cpu": cpu * 1000}), **task)
                for i in range(size)
            ],
        )

    job("x", "qb", 9, 2, phase=TaskPhase.RUNNING, node="n0")
    job("a1", "qa", 1, 1, size=3)
    first = state.schedule(cfg, registry=registry)
    state.apply(first)
    state.set_task_phase("x-0", TaskPhase.SUCCEEDED)  # room for a1, which a0 takes first
    job("a0", "qa", 0, 2)
    job("a2", "qa", 2, 2)
    job("b0", "qb", 3, 2)
    second = state.schedule(cfg, registry=registry)
    assert sorted(b.task for b in second.binds) == ["a0-0", "b0-0"]
    assert second.jobs["a1"].message.startswith(CARRIED) is (retry == "on-change")


def test_a_gang_held_for_its_turn_places_its_tasks_in_task_order() -> None:
    """A gang whose memory holds and whose queue takes its template waits for its turn with
    its tasks unsorted; room then frees, so it is tried, and its tasks go out in task order
    (index suffix: 1, 2, 10), not in the snapshot's order (10, 2, 1): the same task on the
    same node as when every job is tried."""
    snap = Snapshot.from_dict(
        {
            "nodes": [
                {"name": f"n{i}", "allocatable": {"cpu": 8 * (i + 1), "memory": "64Gi"}}
                for i in range(3)
            ],
            "queues": [{"name": "q"}, {"name": "other"}],
        }
    )
    decided: dict[str, list[Decisions]] = {}
    for retry in ("on-change", "always"):
        cfg = config("default", retry)
        state = ClusterState(snap)
        for i in range(3):  # each node full, from another queue
            name = f"holder{i}"
            state.add_job(
                Job(name=name, queue="other", min_available=1, phase=JobPhase.RUNNING),
                [
                    Task(
                        name=f"{name}-0",
                        job=name,
                        request=Resources({"cpu": 8000 * (i + 1), "memory": 2**30}),
                        phase=TaskPhase.RUNNING,
                        node=f"n{i}",
                    )
                ],
            )
        state.add_job(
            Job(name="g", queue="q", min_available=3, phase=JobPhase.INQUEUE, creation=1),
            [
                Task(name=f"g-{k}", job="g", request=Resources({"cpu": 8000, "memory": 2**30}))
                for k in (10, 2, 1)
            ],
        )
        out = decided[retry] = []
        for step in range(3):
            if step == 2:  # room frees everywhere
                for i in range(3):
                    state.remove_job(f"holder{i}", with_tasks=True)
            out.append(state.schedule(cfg))
            state.apply(out[-1], bound=TaskPhase.RUNNING)
    for fast, every in zip(decided["on-change"], decided["always"], strict=True):
        assert_equivalent(fast, every)
    placed = {b.task: b.node for b in decided["on-change"][2].binds}
    assert set(placed) == {"g-1", "g-2", "g-10"}
    # the first task in task order takes the emptiest node
    assert placed["g-1"] == "n2"
    assert decided["on-change"][1].jobs["g"].message.startswith(CARRIED)


class _StatefulPriority(PriorityPlugin):
    """A task order from outside the package, named ``priority`` by inheritance, that reads
    the session: how many tasks are placed so far turns its order around."""

    def task_order(self, ssn: Any, task: int) -> tuple[Any, ...]:
        placed = int((ssn.task_state == TaskState.ALLOCATED).sum())
        key = sum(map(ord, ssn.snapshot.tasks[task].name))
        return (key if placed % 2 == 0 else -key,)


def test_a_task_order_from_elsewhere_named_priority_orders_a_held_job_at_the_start() -> None:
    """The tasks of a job held for its turn are sorted at its attempt only under the
    package's own record-reading task order: a subclass from elsewhere (it inherits the name
    ``priority``) that reads the session orders them at the run's start, as when every job is
    tried. Here the held job's tasks then go to other nodes."""
    registry = default_registry()
    registry.register_plugin("stateprio", _StatefulPriority)
    decided: dict[str, list[Decisions]] = {}
    for retry in ("on-change", "always"):
        cfg = Config.from_dict(
            {
                "actions": ["enqueue", "allocate", "backfill"],
                "tiers": [
                    [{"name": "stateprio"}, {"name": "gang"}],
                    [{"name": "predicates"}, {"name": "proportion"}, {"name": "nodeorder"}],
                ],
                "configurations": {"allocate": {"retry": retry}},
            },
            plugins=registry.plugins,
        )
        state = ClusterState()
        for i in range(3):
            state.add_node(
                Node.from_dict(
                    {
                        "name": f"n{i}",
                        "allocatable": {"cpu": 1, "memory": "8Gi", "pods": 110},
                        **({"labels": {"only": "b"}} if i == 2 else {}),
                    }
                )
            )
        state.add_queue(Queue.from_dict({"name": "default", "weight": 1}))
        state.add_job(
            Job(name="a", queue="default", min_available=2, priority=1, phase=JobPhase.INQUEUE),
            [Task(name=f"a-{k}", job="a", request=Resources({"cpu": 2000})) for k in range(2)],
        )
        out = decided[retry] = []
        for step in range(3):
            if step == 1:  # room appears for a; a job ahead of it arrives
                for i in (0, 1):
                    node = state.nodes[f"n{i}"].to_dict()
                    allocatable = node["allocatable"]
                    assert isinstance(allocatable, dict)
                    node["allocatable"] = {**allocatable, "cpu": 2}
                    state.update_node(Node.from_dict(node))
                state.add_job(
                    Job(
                        name="b",
                        queue="default",
                        min_available=1,
                        priority=9,
                        phase=JobPhase.INQUEUE,
                    ),
                    [
                        Task(
                            name="b-0",
                            job="b",
                            request=Resources({"cpu": 1000}),
                            node_selector={"only": "b"},
                        )
                    ],
                )
            out.append(state.schedule(cfg, registry=registry))
            state.apply(out[-1], bound=TaskPhase.RUNNING)
    for fast, every in zip(decided["on-change"], decided["always"], strict=True):
        assert_equivalent(fast, every)
    placed = {b.task: b.node for d in decided["on-change"] for b in d.binds}
    assert placed["a-0"] == "n0" and placed["a-1"] == "n1"
