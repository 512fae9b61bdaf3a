"""Event streams against :class:`~gangsched.state.ClusterState`: the hostile fuzzer's attack on
the long-lived state an embedder feeds with informer events.

A stream is a sequence of operations drawn against the state as it stands, from small pools of
names so that they collide: references made out of order (a task before its job, a job before
its queue, a queue before its parent), removals under live references, phase changes in every
order (a Pending task made Releasing, a Running one Pending again), hypernodes listing nodes
that come and go, hard-topology gangs with best-effort members, queue capabilities lowered
under running work, ``sync`` to an earlier or an edited cluster, cycles whose decisions are
applied at once or much later (stale), or to another stream's state (foreign), made-up
decisions, wrong argument types, and states under small :class:`~gangsched.limits.Limits`.

Each operation is checked against the state's promises (``docs/embedding.md``):

* a refused operation raises a :class:`~gangsched.errors.GangschedError` (else ``escape``) and
  leaves ``state.to_dict()`` and the generation as they were (else ``half-applied``);
* after an accepted one, ``state.snapshot()`` equals ``Snapshot.from_dict(state.to_dict())``
  (``snapshot``), and ``changed_nodes`` / ``removed_nodes`` name every node whose record or
  tasks changed or that went since the last cycle (``change-count``);
* a cycle on the state equals, byte for byte, a cycle on the snapshot rebuilt from its
  interchange form (``equivalence``), passes the invariants of its configuration
  (:func:`~gangsched.testing.invariants.check_cycle`, ``violation``), and its decisions apply
  to the state that made them (``apply``);
* the same stream (seed) gives the same states and decisions (``nondeterminism``).

:func:`run_stream` runs one stream from a :class:`Chooser`; :func:`run_streams` runs many from
a seed and returns a :class:`StreamSummary`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gangsched.config import Config
from gangsched.config.volcano import VOLCANO_PREEMPTION_CONF
from gangsched.decisions import Bind, Decisions, Eviction, JobStatus, Pipeline
from gangsched.errors import GangschedError
from gangsched.limits import Limits
from gangsched.model import (
    NODE_PHASES,
    DisruptionBudget,
    GpuRequest,
    Gpus,
    HyperNode,
    Job,
    NetworkTopology,
    Node,
    Queue,
    Task,
    TaskPhase,
    TopologyMode,
)
from gangsched.model.snapshot import Snapshot
from gangsched.state import ClusterState
from gangsched.testing.hostile.case import Chooser, RandomChooser

__all__ = [
    "STREAM_CONFIGS",
    "VOLCANO_PREEMPT",
    "StreamFailure",
    "StreamSummary",
    "run_stream",
    "run_streams",
    "stream_configs",
]

_TIERS_HEAD = [{"name": "priority"}, {"name": "gang"}, {"name": "conformance"}]

#: The configurations a stream's cycles run under (one per stream).
STREAM_CONFIGS: tuple[str, ...] = ("default", "capacity", "preempt", "consolidate", "topology")
#: Volcano's preemption configuration read from its YAML (``preempt`` plays Volcano's own walk,
#: the tiers walked as Volcano walks them): not among :data:`STREAM_CONFIGS`, asked for by name.
VOLCANO_PREEMPT = "volcano-preempt"
_CONFIGS: dict[str, Config] = {}


def stream_configs() -> dict[str, Config]:
    """Name → configuration of :data:`STREAM_CONFIGS` and :data:`VOLCANO_PREEMPT`."""
    if not _CONFIGS:

        def tiers(*second: str, **args: Any) -> list[list[dict[str, Any]]]:
            return [_TIERS_HEAD, [{"name": n, **args.get(n, {})} for n in second]]

        _CONFIGS["default"] = Config.default()
        _CONFIGS["capacity"] = Config.from_dict(
            {
                "actions": ["enqueue", "allocate", "reclaim", "backfill"],
                "tiers": tiers("drf", "predicates", "capacity", "nodeorder"),
            }
        )
        _CONFIGS["preempt"] = Config.from_dict(
            {
                "actions": ["enqueue", "allocate", "preempt", "reclaim", "backfill"],
                "tiers": tiers(
                    "drf", "predicates", "proportion", "nodeorder", "network-topology-aware"
                ),
            }
        )
        _CONFIGS["consolidate"] = Config.from_dict(
            {
                "actions": ["enqueue", "allocate", "consolidate", "backfill"],
                "tiers": tiers("drf", "predicates", "proportion", "nodeorder"),
            }
        )
        _CONFIGS["topology"] = Config.from_dict(
            {
                "actions": ["enqueue", "allocate", "backfill"],
                "tiers": tiers(
                    "drf", "predicates", "proportion", "network-topology-aware", "nodeorder"
                ),
            }
        )
        _CONFIGS[VOLCANO_PREEMPT] = Config.from_volcano_yaml(VOLCANO_PREEMPTION_CONF)
    return _CONFIGS


# --------------------------------------------------------------------------------------------
# Vocabulary

_NODES = ("n0", "n1", "n2", "n3", "n4", "n5")
_HYPERNODES = ("h1a", "h1b", "h2")
_QUEUES = ("default", "q1", "q2", "q3")
_JOBS = ("j0", "j1", "j2", "j3", "j4")
_BUDGETS = ("b0", "b1")
_PHASES = tuple(TaskPhase)
_JOB_PHASES = ("Pending", "Inqueue", "Running", "Completed", "Unknown")
#: Values of the wrong type for any argument.
_JUNK: tuple[object, ...] = (None, 0, -1, 1.5, "", "n0", b"n0", [], ["n0"], {}, {"n0": 1}, True)


def _any(value: object) -> Any:
    """A plain value where a record's field takes its parsed form (the record parses it)."""
    return value


def _pick(c: Chooser, seq: Any) -> Any:
    seq = list(seq)
    return seq[c.below(len(seq))] if seq else None


def _node(c: Chooser, name: str) -> Node:
    cpu = _pick(c, (8, 4, 16, 2))
    gpus = Gpus(count=_pick(c, (2, 4, 1))) if c.chance(0.5) else None
    return Node(
        name=name,
        allocatable=_any({"cpu": cpu, "memory": f"{cpu * 4}Gi", "pods": _pick(c, (20, 3, 110))}),
        gpus=gpus,
        labels=_any({"zone": _pick(c, ("z0", "z1"))}),
        unschedulable=c.chance(0.1),
    )


def _queue(c: Chooser, name: str, state: ClusterState) -> Queue:
    parent = None
    if name != "default" and c.chance(0.5):
        parent = _pick(c, [q for q in _QUEUES if q != name])
    capability = {"cpu": _pick(c, (8, 2, 4, 32))} if c.chance(0.4) else {}
    deserved = {"cpu": _pick(c, (4, 8))} if c.chance(0.3) else {}
    guarantee = {"cpu": _pick(c, (2, 4))} if c.chance(0.2) else {}
    return Queue(
        name=name,
        weight=_pick(c, (1, 2, 5)),
        capability=_any(capability),
        deserved=_any(deserved),
        guarantee=_any(guarantee),
        parent=parent,
        reclaimable=not c.chance(0.2),
    )


def _job(c: Chooser, name: str) -> Job:
    topology = None
    if c.chance(0.3):
        topology = NetworkTopology(
            mode=TopologyMode.HARD if c.chance(0.7) else TopologyMode.SOFT,
            highest_tier_allowed=_pick(c, (1, 2, None)),
        )
    return Job(
        name=name,
        queue=_pick(c, _QUEUES),
        min_available=_pick(c, (1, 2, 3, 0)),
        priority=_pick(c, (0, 10, -5)),
        phase=_pick(c, ("Inqueue", "Pending", "Running")),
        network_topology=topology,
        preemptable=not c.chance(0.2),
        creation=c.below(5),
    )


def _task(c: Chooser, name: str, job: str, state: ClusterState) -> Task:
    best_effort = c.chance(0.3)
    request = {} if best_effort else {"cpu": _pick(c, (1, 2, 4, 3))}
    gpu = GpuRequest(count=1) if not best_effort and c.chance(0.25) else None
    phase = TaskPhase.PENDING
    node = None
    gpus: tuple[int, ...] = ()
    if c.chance(0.3):
        phase = _pick(c, _PHASES)
        node = _pick(c, [*state.nodes, "n9"]) if phase is not TaskPhase.PENDING else None
        if gpu is not None and isinstance(node, str) and node in state.nodes:
            devices = state.nodes[node].gpus
            if devices is not None:
                gpus = (c.below(devices.count),)
    return Task(
        name=name,
        job=job,
        request=_any(request),
        gpu_request=gpu,
        phase=phase,
        node=node,
        gpu_indices=gpus if gpu is not None else (),
        priority=_pick(c, (0, 5)),
    )


def _new_task_name(c: Chooser, job: str) -> str:
    return f"{job}-{c.below(4)}"


# --------------------------------------------------------------------------------------------
# Operations


@dataclass
class _Stream:
    """One stream's state and what the checks need between operations."""

    c: Chooser
    state: ClusterState
    config_name: str
    config: Config
    other: ClusterState | None = None
    decisions: list[Decisions] = field(default_factory=list)
    snapshots: list[Snapshot] = field(default_factory=list)
    mark: Snapshot | None = None  # the state at the last cycle
    log: list[str] = field(default_factory=list)


def _operation(s: _Stream) -> tuple[str, Callable[[], object]]:
    """One operation (its description, and a thunk that performs it)."""
    c, st = s.c, s.state
    k = c.below(100)
    if k < 4:
        n = _node(c, _pick(c, _NODES))
        return f"add_node {n.name}", lambda: st.add_node(n)
    if k < 8:
        n = _node(c, _pick(c, _NODES))
        return f"update_node {n.name}", lambda: st.update_node(n)
    if k < 11:
        name = _pick(c, _NODES)
        return f"remove_node {name}", lambda: st.remove_node(name)
    if k < 14:
        name, flag = _pick(c, _NODES), c.chance(0.5)
        return f"cordon {name} {flag}", lambda: st.cordon(name, flag)
    if k < 18:
        name = _pick(c, _HYPERNODES)
        tier = 2 if name == "h2" else 1
        pool = ["h1a", "h1b"] if tier == 2 else list(_NODES)
        members = tuple(sorted({_pick(c, pool) for _ in range(1 + c.below(3))}))
        hn = HyperNode(name=name, tier=tier, members=members)
        verb = "add" if c.chance(0.5) else "update"
        op = st.add_hypernode if verb == "add" else st.update_hypernode
        return f"{verb}_hypernode {name} {members}", lambda: op(hn)
    if k < 20:
        name = _pick(c, _HYPERNODES)
        return f"remove_hypernode {name}", lambda: st.remove_hypernode(name)
    if k < 25:
        q = _queue(c, _pick(c, _QUEUES), st)
        verb = "add" if q.name not in st.queues or c.chance(0.2) else "update"
        q_op = st.add_queue if verb == "add" else st.update_queue
        return f"{verb}_queue {q.name} parent={q.parent}", lambda: q_op(q)
    if k < 27:
        name = _pick(c, _QUEUES)
        return f"remove_queue {name}", lambda: st.remove_queue(name)
    if k < 36:
        job = _job(c, _pick(c, _JOBS))
        names = sorted({_new_task_name(c, job.name) for _ in range(c.below(4))})
        tasks = [_task(c, t, job.name, st) for t in names]
        return f"add_job {job.name} {names}", lambda: st.add_job(job, tasks)
    if k < 39:
        job = _job(c, _pick(c, _JOBS))
        return f"update_job {job.name}", lambda: st.update_job(job)
    if k < 42:
        name, whole = _pick(c, _JOBS), c.chance(0.6)
        return f"remove_job {name} {whole}", lambda: st.remove_job(name, with_tasks=whole)
    if k < 47:
        job = _pick(c, [*st.jobs, "j9"]) if c.chance(0.9) else _pick(c, _JOBS)
        t = _task(c, _new_task_name(c, job), job, st)
        if c.chance(0.5):
            return f"add_task {t.name}", lambda: st.add_task(t)
        return f"update_task {t.name} {t.phase.value} {t.node}", lambda: st.update_task(t)
    if k < 50:
        name = _pick(c, [*st.tasks, "zz"])
        return f"remove_task {name}", lambda: st.remove_task(name)
    if k < 57:
        return _squeeze_or_reserve(c, st)
    if k < 60:
        name = _pick(c, [*st.tasks, "zz"])
        phase = _pick(c, _PHASES)
        node = _pick(c, [*st.nodes, "n9"]) if c.chance(0.3) else None
        gpus = (c.below(3),) if c.chance(0.15) else None
        return (
            f"set_task_phase {name} {phase.value} node={node} gpus={gpus}",
            lambda: st.set_task_phase(name, phase, node=node, gpu_indices=gpus),
        )
    if k < 63:
        name = _pick(c, _BUDGETS)
        jobs = tuple(sorted({_pick(c, [*st.jobs, "j9"]) for _ in range(c.below(2))}))
        budget = DisruptionBudget(name=name, jobs=jobs, max_unavailable=c.below(2))
        if c.chance(0.3):
            return f"remove_disruption_budget {name}", lambda: st.remove_disruption_budget(name)
        verb = "add" if name not in st.disruption_budgets else "update"
        b_op = st.add_disruption_budget if verb == "add" else st.update_disruption_budget
        return f"{verb}_disruption_budget {name} {jobs}", lambda: b_op(budget)
    if k < 78:
        return "cycle", lambda: _cycle(s)
    if k < 82:
        if not s.decisions:
            return "cycle", lambda: _cycle(s)
        d = _pick(c, s.decisions)
        return "apply stale decisions", lambda: st.apply(d)
    if k < 85:
        d = _made_up(c, st)
        return f"apply made-up decisions {_digest(d)[:8]}", lambda: st.apply(d)
    if k < 88:
        return "apply foreign decisions", lambda: _foreign(s)
    if k < 92:
        target = _sync_target(s)
        return "sync", lambda: st.sync(target)
    return _junk(c, st)


def _squeeze_or_reserve(c: Chooser, st: ClusterState) -> tuple[str, Callable[[], object]]:
    """A queue's capability lowered under what its tasks hold (reservations included), or a
    pending task listed Pipelined on a node (a re-list showing a reservation)."""
    if c.chance(0.5):
        held: dict[str, int] = {}
        for t in st.tasks.values():
            if t.phase in NODE_PHASES and t.job in st.jobs:
                queue = st.jobs[t.job].queue
                held[queue] = held.get(queue, 0) + t.request.get("cpu", 0)
        if held:
            name = _pick(c, sorted(held))
            old = st.queues[name]
            cap = max(1, held[name] // _pick(c, (2, 3, 1)) - c.below(2) * 1000)
            q = dataclasses.replace(old, capability=_any({"cpu": f"{cap}m"}))
            return f"squeeze {name} to {cap}m", lambda: st.update_queue(q)
    pending = [t.name for t in st.tasks.values() if t.phase is TaskPhase.PENDING]
    if st.nodes and st.queues and c.chance(0.5):
        return _relist_reserved(c, st, pending)
    name = _pick(c, [*pending, "zz"])
    node = _pick(c, [*st.nodes, "n9"])
    return (
        f"reserve {name} on {node}",
        lambda: st.set_task_phase(name, TaskPhase.PIPELINED, node=node),
    )


def _relist_reserved(
    c: Chooser, st: ClusterState, pending: list[str]
) -> tuple[str, Callable[[], object]]:
    """A re-list (one sync) showing a job's tasks reserved on one node — the pending ones of a
    job of the state, or a new job's — and maybe its queue's capability cut inside them (the
    job admitted, ready with one task bound)."""
    doc: dict[str, Any] = st.to_dict()
    node = _pick(c, st.nodes)
    free = [j for j in _JOBS if j not in st.jobs]
    reserved = 0
    if free and (not pending or c.chance(0.5)):
        job, queue = _pick(c, free), _pick(c, st.queues)
        doc["jobs"].append({"name": job, "queue": queue, "min_available": 2})
        for k in range(2 + c.below(2)):
            cpu = 1000 * (1 + c.below(2))
            doc["tasks"].append(
                {"name": f"{job}-{k}", "job": job, "request": {"cpu": f"{cpu}m"},
                 "phase": "Pipelined", "node": node}
            )  # fmt: skip
            reserved += cpu
    else:
        jobs = sorted({st.tasks[t].job for t in pending})
        job = _pick(c, jobs) if jobs else _pick(c, _JOBS)
        for t in doc["tasks"]:
            waiting = t["job"] == job and t.get("phase", "Pending") == "Pending"
            if waiting and not t.get("gpu_request"):
                t.update(phase="Pipelined", node=node)
                reserved += st.tasks[t["name"]].request.get("cpu", 0)
    if reserved and c.chance(0.6):
        for j in doc["jobs"]:
            if j["name"] == job:
                j.update(phase="Inqueue", min_available=1)
                queue = j.get("queue", "default")
        others = sum(
            t.request.get("cpu", 0)
            for t in st.tasks.values()
            if t.phase in NODE_PHASES and t.job in st.jobs and st.jobs[t.job].queue == queue
        )  # what the queue holds besides: the cut falls inside the reservations
        for q in doc["queues"]:
            if q["name"] == queue:
                q["capability"] = {"cpu": f"{max(1, others + reserved // 2)}m"}
    try:
        target = Snapshot.from_dict(doc, limits=st.limits)
    except GangschedError:
        target = st.snapshot()
    return f"sync reserving {job} on {node}", lambda: st.sync(target)


def _made_up(c: Chooser, st: ClusterState) -> Decisions:
    tasks, nodes = [*st.tasks, "zz"], [*st.nodes, "n9"]
    binds = tuple(Bind(task=_pick(c, tasks), node=_pick(c, nodes)) for _ in range(c.below(3)))
    pipelined = tuple(
        Pipeline(task=_pick(c, tasks), node=_pick(c, nodes)) for _ in range(c.below(2))
    )
    evictions = tuple(Eviction(task=_pick(c, tasks), reason="made up") for _ in range(c.below(2)))
    jobs = {_pick(c, [*st.jobs, "j9"]): JobStatus(phase=_pick(c, _JOB_PHASES))}
    return Decisions(binds=binds, pipelined=pipelined, evictions=evictions, jobs=jobs)


def _foreign(s: _Stream) -> None:
    """A cycle on another cluster (the state as it was some operations ago, if kept), its
    decisions applied here."""
    if s.other is None:
        s.other = ClusterState(s.state.snapshot(), limits=s.state.limits)
    d = s.other.schedule(s.config)
    s.state.apply(d)


def _sync_target(s: _Stream) -> Snapshot:
    c, st = s.c, s.state
    k = c.below(4)
    if k == 0 and s.snapshots:
        back: Snapshot = _pick(c, s.snapshots)  # back in time
        return back
    doc: dict[str, Any] = st.to_dict()
    if k == 1 and doc.get("tasks"):  # tasks moved or finished behind the state's back
        for t in doc["tasks"]:
            if c.chance(0.3):
                t["phase"] = _pick(c, ("Succeeded", "Pending", "Running"))
                t["node"] = _pick(c, [n["name"] for n in doc["nodes"]]) if doc["nodes"] else None
                t.pop("gpu_indices", None)
                if t["phase"] == "Pending":
                    t["node"] = None
    if k == 2 and doc.get("nodes"):  # a node gone, with what named it
        gone = _pick(c, [n["name"] for n in doc["nodes"]])
        doc["nodes"] = [n for n in doc["nodes"] if n["name"] != gone]
        doc["hypernodes"] = [
            dict(h, members=[m for m in h["members"] if m != gone]) for h in doc["hypernodes"]
        ]
        doc["hypernodes"] = [h for h in doc["hypernodes"] if h["members"]]
        for t in doc["tasks"]:
            if t.get("node") == gone:
                t.update(phase="Pending", node=None, gpu_indices=[])
    try:
        # Under the default limits: a state with smaller ones must refuse it whole.
        return Snapshot.from_dict(doc)
    except GangschedError:
        return st.snapshot()


def _junk(c: Chooser, st: ClusterState) -> tuple[str, Callable[[], object]]:
    junk: Any = _pick(c, _JUNK)
    calls: list[tuple[str, Callable[[], object]]] = [
        ("cordon", lambda: st.cordon(junk)),
        ("cordon flag", lambda: st.cordon(_pick(c, [*st.nodes, "n0"]), junk)),
        ("remove_node", lambda: st.remove_node(junk)),
        ("remove_task", lambda: st.remove_task(junk)),
        ("remove_job", lambda: st.remove_job(junk)),
        ("remove_queue", lambda: st.remove_queue(junk)),
        ("remove_hypernode", lambda: st.remove_hypernode(junk)),
        ("remove_disruption_budget", lambda: st.remove_disruption_budget(junk)),
        ("add_node", lambda: st.add_node(junk)),
        ("update_queue", lambda: st.update_queue(junk)),
        ("add_job", lambda: st.add_job(Job(name="jx"), junk)),
        ("add_tasks", lambda: st.add_tasks(junk)),
        ("add_task", lambda: st.add_task(junk)),
        ("set_task_phase", lambda: st.set_task_phase(junk, "Running")),
        (
            "set_task_phase gpu_indices",
            lambda: st.set_task_phase(
                _pick(c, [*st.tasks, "zz"]),
                "Running",
                gpu_indices=junk,
            ),
        ),
        (
            "set_task_phase node",
            lambda: st.set_task_phase(_pick(c, [*st.tasks, "zz"]), "Running", node=junk),
        ),
        ("set_task_phase phase", lambda: st.set_task_phase(_pick(c, [*st.tasks, "zz"]), junk)),
        ("changed_nodes", lambda: st.changed_nodes(junk)),
        ("node_generation", lambda: st.node_generation(junk)),
        ("tasks_of", lambda: st.tasks_of(junk)),
        ("tasks_on", lambda: st.tasks_on(junk)),
        ("apply", lambda: st.apply(junk)),
        ("apply bound", lambda: st.apply(Decisions(), bound=junk)),
        ("apply binds", lambda: st.apply(Decisions(binds=junk))),
        ("sync", lambda: st.sync(junk)),
        ("schedule", lambda: st.schedule(junk)),
    ]
    what, call = _pick(c, calls)
    return f"junk {what}({junk!r})", call


# --------------------------------------------------------------------------------------------
# Checks


def _digest(obj: Any) -> str:
    text = json.dumps(obj.to_dict(), sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()


class _Broken(Exception):
    """A promise the state broke: ``category`` and the words."""

    def __init__(self, category: str, message: str) -> None:
        super().__init__(message)
        self.category = category


def _cycle(s: _Stream) -> Decisions:
    """A cycle on the state, checked against a cycle from records and the invariants, and
    its decisions applied."""
    from gangsched.scheduler import schedule
    from gangsched.testing._carried import uncarried
    from gangsched.testing.invariants import InvariantViolation, check_cycle

    st = s.state
    snap = st.snapshot()
    fresh = Snapshot.from_dict(snap.to_dict())
    decisions = st.schedule(s.config)
    again = schedule(fresh, s.config)
    # A job the state's cycle did not try again keeps its last words, marked carried (the
    # retry contract): those words are compared as the fresh cycle's, everything else byte
    # for byte.
    if _digest(uncarried(decisions, again)) != _digest(again):
        raise _Broken("equivalence", "a cycle on the state differs from one from records")
    try:
        check_cycle(fresh, decisions, s.config)
    except InvariantViolation as exc:
        raise _Broken("violation", str(exc)) from None
    s.mark = snap
    s.decisions.append(decisions)
    del s.decisions[:-4]
    s.snapshots.append(snap)
    del s.snapshots[:-4]
    bound = TaskPhase.RUNNING if s.c.chance(0.5) else TaskPhase.BOUND
    try:
        st.apply(decisions, bound=bound)
    except GangschedError as exc:
        raise _Broken("apply", f"a cycle's own decisions do not apply: {exc}") from None
    return decisions


def _per_node(snap: Snapshot) -> dict[str, tuple[object, ...]]:
    """Per node: its record and the tasks that hold room on it."""
    out: dict[str, list[object]] = {n.name: [n] for n in snap.nodes}
    for t in snap.tasks:
        if t.node is not None and t.phase in NODE_PHASES and t.node in out:
            out[t.node].append(t)
    return {name: tuple(v) for name, v in out.items()}


def _check_accepted(s: _Stream) -> None:
    st = s.state
    snap = st.snapshot()
    if snap != Snapshot.from_dict(st.to_dict()):
        raise _Broken("snapshot", "the snapshot differs from the state's interchange form")
    if s.mark is None:
        return
    was, now = _per_node(s.mark), _per_node(snap)
    removed, changed = set(st.removed_nodes()), set(st.changed_nodes())
    gone = set(was) - set(now)
    if not gone <= removed:
        raise _Broken("change-count", f"removed_nodes misses {sorted(gone - removed)}")
    moved = {n for n, v in now.items() if was.get(n) != v}
    if not moved <= changed:
        raise _Broken("change-count", f"changed_nodes misses {sorted(moved - changed)}")


# --------------------------------------------------------------------------------------------
# Running


@dataclass(frozen=True)
class StreamFailure:
    """One broken promise: the stream (seed and index), the operation, what broke."""

    seed: int
    stream: int
    step: int
    category: str
    operation: str
    message: str
    history: tuple[str, ...]


@dataclass
class StreamSummary:
    """Figures over the streams run."""

    streams: int = 0
    operations: int = 0
    accepted: int = 0
    refused: int = 0
    cycles: int = 0
    seconds: float = 0.0
    failures: list[StreamFailure] = field(default_factory=list)

    def table(self) -> str:
        rows = [
            ("streams", self.streams),
            ("operations", self.operations),
            ("accepted", self.accepted),
            ("refused (typed, nothing changed)", self.refused),
            ("cycles checked", self.cycles),
            ("failures", len(self.failures)),
            ("seconds", f"{self.seconds:.1f}"),
        ]
        lines = [f"{name:<34} {value:>10}" for name, value in rows]
        for f in self.failures[:20]:
            lines.append(f"- {f.category} at stream {f.seed}:{f.stream} step {f.step}")
            lines.append(f"  {f.operation}: {f.message.splitlines()[0][:200]}")
        return "\n".join(lines)


def _start(c: Chooser, config_name: str) -> ClusterState:
    limits = None
    if c.chance(0.15):
        limits = Limits(max_tasks=_pick(c, (3, 6)), max_queue_depth=_pick(c, (2, 3)))
    st = ClusterState(limits=limits)
    st.add_queue(Queue(name="default"))
    for name in _NODES[: 2 + c.below(3)]:
        st.add_node(_node(c, name))
    if config_name in ("topology", "preempt") or c.chance(0.3):
        nodes = list(st.nodes)
        if len(nodes) > 2 and c.chance(0.5):
            nodes.pop()  # a node no hypernode lists
        half = max(1, len(nodes) // 2)
        st.add_hypernode(HyperNode(name="h1a", tier=1, members=tuple(nodes[:half])))
        if nodes[half:]:
            st.add_hypernode(HyperNode(name="h1b", tier=1, members=tuple(nodes[half:])))
            st.add_hypernode(HyperNode(name="h2", tier=2, members=("h1a", "h1b")))
    return st


def _nothing() -> None:
    return None


def run_stream(
    c: Chooser, *, steps: int, config_name: str, seed: int = 0, index: int = 0
) -> tuple[StreamSummary, list[str]]:
    """Run one stream of ``steps`` operations; returns its figures (failures included, the
    stream stops at the first) and a trace of digests, for the determinism check."""
    out = StreamSummary(streams=1)
    s = _Stream(c=c, state=_start(c, config_name), config_name=config_name,
                config=stream_configs()[config_name])  # fmt: skip
    trace: list[str] = []
    for step in range(steps):
        try:
            what, call = _operation(s)
        except GangschedError as exc:  # a record the model refuses: nothing to send
            what, call = f"record refused: {exc}", _nothing
        s.log.append(what)
        st = s.state
        before, gen = st.to_dict(), st.generation
        out.operations += 1
        try:
            try:
                result = call()
            except _Broken:
                raise
            except GangschedError as exc:
                out.refused += 1
                trace.append(f"refused {type(exc).__name__} {exc.kind} {exc.field}")
                if st.to_dict() != before or st.generation != gen:
                    raise _Broken("half-applied", f"refused ({exc}) but changed") from None
                continue
            except Exception as exc:
                where = traceback.extract_tb(exc.__traceback__)[-1]
                raise _Broken(
                    "escape",
                    f"{type(exc).__name__}: {exc} at {where.filename}:{where.lineno}",
                ) from None
            out.accepted += 1
            if what == "cycle":
                out.cycles += 1
            if isinstance(result, Decisions):
                trace.append(_digest(result))
            _check_accepted(s)
            trace.append(str(st.generation))
        except _Broken as broken:
            out.failures.append(
                StreamFailure(
                    seed, index, step, broken.category, what, str(broken), tuple(s.log[-40:])
                )
            )
            break
    trace.append(_digest(s.state.snapshot()))
    return out, trace


def run_streams(
    *,
    streams: int,
    steps: int,
    seed: int = 0,
    determinism_every: int = 4,
    progress: Callable[[StreamSummary], None] | None = None,
    configs: tuple[str, ...] = STREAM_CONFIGS,
) -> StreamSummary:
    """Run ``streams`` streams of ``steps`` operations from ``seed`` (stream ``i`` uses
    configuration ``configs[i % len(configs)]``, names of :func:`stream_configs`); every
    ``determinism_every``-th stream runs twice and must give the same trace."""
    total = StreamSummary()
    start = time.perf_counter()
    for i in range(streams):
        name = configs[i % len(configs)]
        one, trace = run_stream(
            RandomChooser(f"{seed}:{i}"), steps=steps, config_name=name, seed=seed, index=i
        )
        if determinism_every and i % determinism_every == 0 and not one.failures:
            _, again = run_stream(
                RandomChooser(f"{seed}:{i}"), steps=steps, config_name=name, seed=seed, index=i
            )
            if again != trace:
                first = next(
                    (k for k, (a, b) in enumerate(zip(trace, again, strict=False)) if a != b),
                    min(len(trace), len(again)),
                )
                why = "the same stream gave another trace"
                one.failures.append(
                    StreamFailure(seed, i, first, "nondeterminism", "replay", why, ())
                )
        total.streams += 1
        total.operations += one.operations
        total.accepted += one.accepted
        total.refused += one.refused
        total.cycles += one.cycles
        total.failures.extend(one.failures)
        total.seconds = time.perf_counter() - start
        if progress is not None:
            progress(total)
    return total


def replay(seed: int, index: int, steps: int) -> StreamSummary:
    """Run stream ``index`` of ``seed`` again (its failure, with the operations before it)."""
    name = STREAM_CONFIGS[index % len(STREAM_CONFIGS)]
    out, _ = run_stream(
        RandomChooser(f"{seed}:{index}"), steps=steps, config_name=name, seed=seed, index=index
    )
    return out
