"""A cluster driven by hypothesis: jobs arrive and finish, nodes fail, queue weights change,
and scheduling cycles run with preempt and reclaim, their decisions applied as a cluster would.

Rules: submit a job, finish one, fail a node (its jobs restart), repair it, change a queue's
weight, run one to three cycles. Invariants, after every step: no node or GPU device over its
capacity (now, and once releases finish); every gang whole (no job runs below
``min_available``; a reservation is whole); per cycle: nothing partial committed, evictions
only for a preemptor whose gang is reserved in the same cycle, no victim gang cut below its
minimum, the same snapshot gives the same decisions byte for byte, and the victim→preemptor
graph of evictions stays acyclic while conditions are unchanged (it restarts when a job
arrives or finishes, a node fails or is repaired, or a weight changes: those legitimately
change who deserves what).

Two configurations: ``ClusterMachine`` (proportion + drf, Volcano's CI tiers) and
``CapacityClusterMachine`` (capacity with deserved amounts and a queue tree, ``d0`` over
``q0`` and ``q1``, ``q2`` at the top, ``ancestorReclaimLevel: 1``, its ``reclaimable`` in the
deciding tier). Both have the racks' hard-topology jobs. Under capacity a queue may *borrow*
idle resources beyond its deserved amount (up to its real capability), and what it borrowed may
legitimately be taken back: the cycle graph restarts after a cycle in which a queue (or ``d0``)
was placed a task beyond its deserved amount on a resource the task asks for.

Default run: ``CI_EXAMPLES`` examples × ``CI_STEPS`` steps each. ``GANGSCHED_SOAK=1`` runs
``SOAK_EXAMPLES`` examples × ``SOAK_STEPS`` steps instead.
"""

from __future__ import annotations

import os
from collections import defaultdict
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import gangsched as gs
from _preemption_helpers import BOTH, GPU, config

CI_EXAMPLES, CI_STEPS = 50, 30
SOAK_EXAMPLES, SOAK_STEPS = 10_000, 30
SOAK = os.environ.get("GANGSCHED_SOAK") == "1"

N_NODES, GPUS, CPUS = 4, 4, 16
QUEUES = ("q0", "q1", "q2")
MAX_JOBS = 8
RACKS = [
    {"name": "rack-a", "tier": 1, "members": ["n0", "n1"]},
    {"name": "rack-b", "tier": 1, "members": ["n2", "n3"]},
]


def _acyclic(edges: set[tuple[str, str]]) -> bool:
    graph: dict[str, set[str]] = defaultdict(set)
    for a, b in edges:
        graph[a].add(b)
    state: dict[str, int] = {}

    def visit(v: str) -> bool:
        state[v] = 1
        for w in graph[v]:
            if state.get(w) == 1 or (w not in state and not visit(w)):
                return False
        state[v] = 2
        return True

    return all(visit(v) for v in list(graph) if v not in state)


CAPACITY = config(
    tiers=[
        [
            {"name": "priority"},
            {"name": "gang"},
            {"name": "conformance"},
            {
                "name": "capacity",
                "enableHierarchy": True,
                "arguments": {"ancestorReclaimLevel": 1},
            },
        ],
        [{"name": "drf"}, {"name": "predicates"}, {"name": "nodeorder"}],
    ]
)
#: The capacity tree: d0 (a parent, holds no jobs) over q0 and q1; q2 at the top.
CAPACITY_QUEUES: list[dict[str, Any]] = [
    {"name": "d0", "deserved": {"cpu": 24, GPU: 6}},
    {"name": "q0", "parent": "d0", "deserved": {"cpu": 12, GPU: 3}},
    {"name": "q1", "parent": "d0", "deserved": {"cpu": 12, GPU: 3}},
    {"name": "q2", "deserved": {"cpu": 24, GPU: 6}, "guarantee": {GPU: 2}},
]


class ClusterMachine(RuleBasedStateMachine):
    """The model is the cluster itself: plain job and task records, as a snapshot lists them."""

    config = BOTH

    @initialize()
    def setup(self) -> None:
        self.nodes: list[dict[str, Any]] = [
            {
                "name": f"n{i}",
                "allocatable": {"cpu": CPUS, "memory": "64Gi", "pods": 110},
                "gpus": {"count": GPUS, "model": "A100"},
            }
            for i in range(N_NODES)
        ]
        self.weights = {q: 1 for q in QUEUES}
        self.jobs: dict[str, dict[str, Any]] = {}
        self.tasks: dict[str, dict[str, Any]] = {}
        self.serial = 0
        self.edges: set[tuple[str, str]] = set()
        self.cycles = 0

    # ------------------------------------------------------------------ the cluster

    def snapshot(self) -> gs.Snapshot:
        return gs.Snapshot.from_dict(
            {
                "nodes": self.nodes,
                "hypernodes": RACKS,
                "queues": self.queue_specs(),
                "jobs": list(self.jobs.values()),
                "tasks": list(self.tasks.values()),
            }
        )

    def queue_specs(self) -> list[dict[str, Any]]:
        return [{"name": q, "weight": w} for q, w in self.weights.items()]

    def borrowed(self, snap: gs.Snapshot, d: gs.Decisions) -> bool:
        """Whether the cycle placed a task beyond its queue's deserved amount (never here:
        proportion's allocatable keeps every queue within its deserved share)."""
        return False

    def tasks_of(self, job: str) -> list[dict[str, Any]]:
        return [t for t in self.tasks.values() if t["job"] == job]

    def restart(self, job: str) -> None:
        for t in self.tasks_of(job):
            t["phase"] = "Pending"
            t.pop("node", None)
            t.pop("gpu_indices", None)

    # ------------------------------------------------------------------ rules

    @precondition(lambda self: len(self.jobs) < MAX_JOBS)
    @rule(
        queue=st.sampled_from(QUEUES),
        priority=st.integers(0, 4),
        size=st.integers(1, 4),
        data=st.data(),
        gpus=st.sampled_from([1, 2, 2, 4]),
        preemptable=st.sampled_from([True] * 7 + [False]),
        hard=st.booleans(),
    )
    def submit(
        self,
        queue: str,
        priority: int,
        size: int,
        data: st.DataObject,
        gpus: int,
        preemptable: bool,
        hard: bool,
    ) -> None:
        self.serial += 1
        name = f"j{self.serial}"
        job: dict[str, Any] = {
            "name": name,
            "queue": queue,
            "min_available": data.draw(st.integers(1, size), label="min_available"),
            "priority": priority,
            "phase": "Pending",
            "preemptable": preemptable,
            "creation": self.serial,
        }
        if hard and size * gpus <= 2 * GPUS:
            job["network_topology"] = {"mode": "hard", "highest_tier_allowed": 1}
        self.jobs[name] = job
        for i in range(size):
            self.tasks[f"{name}-{i}"] = {
                "name": f"{name}-{i}",
                "job": name,
                "request": {"cpu": 1, GPU: gpus},
            }
        self.edges.clear()

    @precondition(lambda self: bool(self.jobs))
    @rule(data=st.data())
    def finish(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(sorted(self.jobs)), label="job")
        del self.jobs[name]
        for t in [t["name"] for t in self.tasks_of(name)]:
            del self.tasks[t]
        self.edges.clear()

    @rule(index=st.integers(0, N_NODES - 1))
    def fail_node(self, index: int) -> None:
        """The node goes away (cordoned); jobs that had tasks on it restart whole."""
        node = self.nodes[index]
        node["unschedulable"] = True
        hit = {t["job"] for t in self.tasks.values() if t.get("node") == node["name"]}
        for job in hit:
            self.restart(job)
        self.edges.clear()

    @rule(index=st.integers(0, N_NODES - 1))
    def repair_node(self, index: int) -> None:
        if self.nodes[index].pop("unschedulable", False):
            self.edges.clear()

    @rule(queue=st.sampled_from(QUEUES), weight=st.integers(1, 4))
    def change_weight(self, queue: str, weight: int) -> None:
        if self.weights[queue] != weight:
            self.weights[queue] = weight
            self.edges.clear()

    @rule(count=st.integers(1, 3))
    def run_cycles(self, count: int) -> None:
        for _ in range(count):
            self.cycle()

    # ------------------------------------------------------------------ one cycle

    def cycle(self) -> None:
        snap = self.snapshot()
        d = gs.schedule(snap, self.config)
        again = gs.schedule(gs.Snapshot.from_dict(snap.to_dict()), self.config)
        assert again.to_dict() == d.to_dict(), "same snapshot, different decisions"
        self.check_cycle(snap, d)
        if self.borrowed(snap, d):
            self.edges.clear()
        for e in d.evictions:
            self.edges.add((snap.task(e.task).job, e.preemptor))
        # Victims of the previous cycle have terminated; their pods come back Pending.
        for t in self.tasks.values():
            if t.get("phase") == "Releasing":
                t["phase"] = "Pending"
                t.pop("node", None)
                t.pop("gpu_indices", None)
        for e in d.evictions:
            self.tasks[e.task]["phase"] = "Releasing"
        for b in d.binds:
            self.tasks[b.task].update(phase="Running", node=b.node, gpu_indices=list(b.gpu_indices))
        for p in d.pipelined:
            self.tasks[p.task].update(
                phase="Pipelined", node=p.node, gpu_indices=list(p.gpu_indices)
            )
        for name, status in d.jobs.items():
            if status.phase != "Unknown":
                self.jobs[name]["phase"] = status.phase
        self.cycles += 1

    def check_cycle(self, snap: gs.Snapshot, d: gs.Decisions) -> None:
        gone = {e.task for e in d.evictions}
        bound = {b.task for b in d.binds}
        reserved = {p.task for p in d.pipelined}
        assert not (gone & bound) and not (gone & reserved) and not (bound & reserved)
        for rec in snap.jobs:
            tasks = snap.tasks_of(rec.name)
            ready = [
                t.name
                for t in tasks
                if (t.phase in (gs.TaskPhase.RUNNING, gs.TaskPhase.BOUND) and t.name not in gone)
                or t.name in bound
            ]
            held = ready + [
                t.name
                for t in tasks
                if t.name in reserved or (t.phase is gs.TaskPhase.PIPELINED and t.name not in bound)
            ]
            new = [t.name for t in tasks if t.name in bound or t.name in reserved]
            if new:  # nothing partial is committed
                assert len(held) >= rec.min_available, f"partial gang {rec.name}"
            if any(t.name in bound for t in tasks):
                assert len(ready) >= rec.min_available, f"partial bind {rec.name}"
            if any(t.name in gone for t in tasks):  # victims: whole or at least the minimum
                assert not ready or len(ready) >= rec.min_available, f"gang {rec.name} cut"
        for e in d.evictions:
            preemptor = snap.job(e.preemptor)
            mine = {t.name for t in snap.tasks_of(preemptor.name)}
            assert mine & reserved, f"{e.task} evicted but {preemptor.name} not pipelined"
            assert not (mine & bound), f"{preemptor.name} bound in the cycle that evicts for it"
            assert snap.task(e.task).job != preemptor.name

    # ------------------------------------------------------------------ invariants

    @invariant()
    def capacity(self) -> None:
        now: dict[str, int] = defaultdict(int)
        later: dict[str, int] = defaultdict(int)
        dev_now: dict[tuple[str, int], int] = defaultdict(int)
        dev_later: dict[tuple[str, int], int] = defaultdict(int)
        for t in self.tasks.values():
            phase, node = t.get("phase", "Pending"), t.get("node")
            if node is None or phase == "Pending":
                continue
            if phase in ("Running", "Releasing"):
                now[node] += 1
                for g in t["gpu_indices"]:
                    dev_now[(node, g)] += 1
            if phase in ("Running", "Pipelined"):
                later[node] += 1
                for g in t["gpu_indices"]:
                    dev_later[(node, g)] += 1
        assert all(v <= CPUS for v in (*now.values(), *later.values()))
        assert all(v <= 1 for v in (*dev_now.values(), *dev_later.values())), "GPU shared"
        assert all(0 <= g < GPUS for (_, g) in (*dev_now, *dev_later))

    @invariant()
    def gangs_are_whole(self) -> None:
        for name, job in self.jobs.items():
            phases = [t.get("phase", "Pending") for t in self.tasks_of(name)]
            running = phases.count("Running")
            reserved = phases.count("Pipelined")
            assert running == 0 or running >= job["min_available"], f"{name} runs below min"
            assert reserved == 0 or running + reserved >= job["min_available"], name

    @invariant()
    def no_preemption_cycle(self) -> None:
        assert _acyclic(self.edges), f"victim→preemptor cycle in {sorted(self.edges)}"


ClusterMachine.TestCase.settings = settings(
    max_examples=SOAK_EXAMPLES if SOAK else CI_EXAMPLES,
    stateful_step_count=SOAK_STEPS if SOAK else CI_STEPS,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
TestClusterMachine = ClusterMachine.TestCase


class CapacityClusterMachine(ClusterMachine):
    """The same cluster under capacity with a queue tree (see the module docstring)."""

    config = CAPACITY

    def queue_specs(self) -> list[dict[str, Any]]:
        return CAPACITY_QUEUES

    def borrowed(self, snap: gs.Snapshot, d: gs.Decisions) -> bool:
        placed = {b.task for b in d.binds} | {p.task for p in d.pipelined}
        alloc = {q: dict(status.allocated) for q, status in d.queues.items()}
        alloc["d0"] = {
            r: alloc.get("q0", {}).get(r, 0) + alloc.get("q1", {}).get(r, 0) for r in ("cpu", GPU)
        }
        deserved = {
            spec["name"]: {r: 1000 * int(v) for r, v in spec["deserved"].items()}
            for spec in CAPACITY_QUEUES
        }
        for name in placed:
            task = self.tasks[name]
            queue = self.jobs[task["job"]]["queue"]
            for q in (queue, "d0") if queue in ("q0", "q1") else (queue,):
                for r in task["request"]:
                    if alloc.get(q, {}).get(r, 0) > deserved[q].get(r, 0) > 0:
                        return True
        return False


CapacityClusterMachine.TestCase.settings = ClusterMachine.TestCase.settings
TestCapacityClusterMachine = CapacityClusterMachine.TestCase


def test_the_cycle_detector_sees_cycles() -> None:
    assert _acyclic({("a", "b"), ("b", "c")})
    assert not _acyclic({("a", "b"), ("b", "c"), ("c", "a")})
    assert not _acyclic({("a", "b"), ("b", "a")})


def test_a_short_replay_preempts_and_then_binds_the_reservation() -> None:
    # A fixed run of the machine: four low-priority 4-task gangs fill the cluster (spread one
    # task per node), a high-priority gang of two 2-GPU tasks arrives: two whole gangs go (the
    # newest), the gang is reserved, and binds once the victims are gone.
    m = ClusterMachine()
    m.setup()
    for i in range(N_NODES):
        m.serial += 1
        name = f"low{i}"
        m.jobs[name] = {
            "name": name,
            "queue": "q0",
            "min_available": 4,
            "priority": 0,
            "phase": "Pending",
            "creation": m.serial,
        }
        for k in range(4):
            m.tasks[f"{name}-{k}"] = {
                "name": f"{name}-{k}",
                "job": name,
                "request": {"cpu": 1, GPU: 1},
            }
    m.cycle()
    assert all(t["phase"] == "Running" for t in m.tasks.values())
    m.jobs["high"] = {
        "name": "high",
        "queue": "q0",
        "min_available": 2,
        "priority": 3,
        "phase": "Pending",
        "creation": 99,
    }
    for k in range(2):
        m.tasks[f"high-{k}"] = {"name": f"high-{k}", "job": "high", "request": {"cpu": 1, GPU: 2}}
    m.cycle()
    assert {t["phase"] for t in m.tasks_of("high")} == {"Pipelined"}
    releasing = {t["job"] for t in m.tasks.values() if t["phase"] == "Releasing"}
    assert releasing == {"low2", "low3"}
    assert all(t["phase"] == "Releasing" for j in releasing for t in m.tasks_of(j))
    m.cycle()
    m.cycle()
    assert {t["phase"] for t in m.tasks_of("high")} == {"Running"}
    m.capacity()
    m.gangs_are_whole()
    m.no_preemption_cycle()


class _Draws:
    """Stands in for ``st.data()`` when a rule is called by hand."""

    def __init__(self, *values: object) -> None:
        self.values = list(values)

    def draw(self, strategy: object, label: str | None = None) -> object:
        return self.values.pop(0)


def test_regression_a_carried_reservation_binds_with_what_allocate_placed() -> None:
    # Found by the machine: j1 (3 × 4 GPUs, min 2) carried two reservations; allocate placed
    # its third task on a free node but could not make it ready, so kept it; realising one
    # reservation then made the job ready — and the kept allocation must be bound with it,
    # or the job is bound below its minimum.
    m = ClusterMachine()
    m.setup()
    m.change_weight("q0", 3)
    m.submit("q1", 0, 3, _Draws(2), 4, True, False)
    m.run_cycles(2)
    m.change_weight("q0", 1)
    m.submit("q0", 4, 1, _Draws(1), 1, True, False)
    m.submit("q1", 3, 3, _Draws(2), 1, True, True)
    m.submit("q0", 0, 3, _Draws(1), 2, True, True)
    m.run_cycles(2)
    m.finish(_Draws("j2"))
    m.change_weight("q1", 3)
    m.run_cycles(1)
    m.finish(_Draws("j3"))
    m.run_cycles(1)  # checks every per-cycle invariant
    phases = sorted(t["phase"] for t in m.tasks_of("j1"))
    assert phases == ["Pipelined", "Running", "Running"]
    m.capacity()
    m.gangs_are_whole()
