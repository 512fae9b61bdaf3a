"""``ClusterState`` against ``Snapshot``: a hypothesis state machine.

Every step performs one informer-style operation on a :class:`ClusterState` and the same
change on the interchange form of the state. The operation must be refused exactly when
``Snapshot.from_dict`` refuses the changed form (same error type, kind and field), and a refused
operation must leave the state as it was. After every step the state's snapshot equals
``Snapshot.from_dict(state.to_dict())``. A cycle step checks that ``state.schedule(config)`` is
byte-identical to ``schedule(Snapshot.from_dict(state.snapshot().to_dict()), config)``, that
scheduling is deterministic and leaves the snapshot untouched, then applies the decisions.

Four configurations: Volcano's default, preempt + reclaim, the capacity plugin, and the
network-topology-aware plugin on clusters with a hypernode tree. Budget: ``EXAMPLES`` ×
``STEPS`` per configuration (20 × 20 by default); ``GANGSCHED_SOAK=1`` runs 2,500 × 30 each
(10,000 examples in all). ``GANGSCHED_STATE_EXAMPLES`` / ``GANGSCHED_STATE_STEPS`` override.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from _carried import uncarried
from gangsched import ClusterState, Config, Snapshot, schedule
from gangsched.errors import GangschedError, SnapshotError
from gangsched.model import (
    DisruptionBudget,
    GpuRequest,
    Gpus,
    HyperNode,
    Queue,
    QueueState,
    Taint,
    Task,
    TaskPhase,
)
from gangsched.session.arrays import ClusterArrays, TaintIndex, build_cluster_arrays
from gangsched.testing import strategies as gst

SOAK = os.environ.get("GANGSCHED_SOAK") == "1"
EXAMPLES = int(os.environ.get("GANGSCHED_STATE_EXAMPLES", "2500" if SOAK else "20"))
STEPS = int(os.environ.get("GANGSCHED_STATE_STEPS", "30" if SOAK else "20"))


def _config(actions: list[str], second: list[str]) -> Config:
    return Config.from_dict(
        {
            "actions": actions,
            "tiers": [
                [{"name": "priority"}, {"name": "gang"}, {"name": "conformance"}],
                [{"name": n} for n in second],
            ],
        }
    )


CONFIGS: dict[str, Config] = {
    "default": Config.default(),
    "preempt-reclaim": _config(
        ["enqueue", "allocate", "preempt", "reclaim", "backfill"],
        ["drf", "predicates", "proportion", "nodeorder"],
    ),
    "capacity": _config(
        ["enqueue", "allocate", "reclaim", "backfill"],
        ["drf", "predicates", "capacity", "nodeorder"],
    ),
    "topology": _config(
        ["enqueue", "allocate", "backfill"],
        ["drf", "predicates", "proportion", "network-topology-aware", "nodeorder"],
    ),
}


def assert_same_arrays(a: ClusterArrays, b: ClusterArrays) -> None:
    """Every column of two cluster arrays holds the same values."""
    for f in dataclasses.fields(ClusterArrays):
        if not f.compare:  # derived layouts worked out on demand, not columns
            continue
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and np.array_equal(x, y), f.name
        elif isinstance(x, TaintIndex):
            for g in dataclasses.fields(TaintIndex):
                u, v = getattr(x, g.name), getattr(y, g.name)
                same = (
                    np.array_equal(u, v)
                    if isinstance(u, np.ndarray)
                    else {k: list(w) for k, w in u.items()} == {k: list(w) for k, w in v.items()}
                    if isinstance(u, Mapping)
                    else u == v
                )
                assert same, f"{f.name}.{g.name}"
        elif f.name == "label_codes":
            assert x.keys() == y.keys() and all(np.array_equal(x[k], y[k]) for k in x), f.name
        else:
            assert x == y, f.name


def _dump(obj: Any) -> str:
    return json.dumps(obj.to_dict(), sort_keys=True)


def _outcome(fn: Any) -> GangschedError | None:
    try:
        fn()
    except GangschedError as exc:
        return exc
    return None


_AMOUNTS: tuple[int | str, ...] = (0, 1, "50%")


def _parents(names: list[str], name: str) -> list[str | None]:
    """The parents a queue may be given: another queue, or none when there is no other."""
    return [n for n in names if n != name] or [None]


class ClusterStateMachine(RuleBasedStateMachine):
    config: Config = CONFIGS["default"]
    topology: bool = False

    def __init__(self) -> None:
        super().__init__()
        self.state = ClusterState()
        self.serial = 0
        self.cycles = 0

    # ------------------------------------------------------------------ helpers

    def _fresh(self, prefix: str) -> str:
        self.serial += 1
        return f"{prefix}-{self.serial}"

    def _check_same(self, attr: str, change: Any, op: Any) -> None:
        """``op`` on the state is refused exactly when ``Snapshot.from_dict`` refuses the
        state's document with ``change`` applied to its ``attr`` records."""
        before = self.state.to_dict()
        doc = copy.deepcopy(before)
        change(doc.setdefault(attr, []))
        if attr == "disruption_budgets" and not doc[attr]:
            del doc[attr]  # as Snapshot.to_dict writes it
        expected = _outcome(lambda: Snapshot.from_dict(doc))
        actual = _outcome(op)
        if expected is None:
            assert actual is None, f"refused what a snapshot accepts: {actual}"
            assert self.state.to_dict() == doc
        else:
            assert actual is not None, f"accepted what a snapshot refuses: {expected}"
            assert type(actual) is type(expected), (actual, expected)
            assert (actual.kind, actual.field) == (expected.kind, expected.field), (
                str(actual),
                str(expected),
            )
            assert self.state.to_dict() == before, "a refused operation changed the state"

    def _replace(self, attr: str, record: Any) -> Any:
        def change(items: list[dict[str, Any]]) -> None:
            for i, item in enumerate(items):
                if item["name"] == record.name:
                    items[i] = record.to_dict()

        return change

    def _append(self, record: Any) -> Any:
        return lambda items: items.append(record.to_dict())

    def _drop(self, name: str) -> Any:
        def change(items: list[dict[str, Any]]) -> None:
            items[:] = [i for i in items if i["name"] != name]

        return change

    # ------------------------------------------------------------------ start

    @initialize(data=st.data())
    def start_from_snapshot(self, data: st.DataObject) -> None:
        """Start from a generated cluster (or none), as a new embedder would."""
        if data.draw(st.integers(0, 9), label="empty") == 0:
            return
        snap = data.draw(gst.snapshots(max_nodes=4, max_jobs=3, topology=self.topology))
        queues = [dataclasses.replace(q, state=QueueState.OPEN) for q in snap.queues]
        self.state = ClusterState(snap.replace(queues=queues))

    # ------------------------------------------------------------------ nodes

    @rule(data=st.data())
    def add_node(self, data: st.DataObject) -> None:
        reuse = list(self.state.hypernodes)
        if reuse and data.draw(st.integers(0, 5), label="clash") == 0:
            name = reuse[0]
        else:
            name = self._fresh("node-x")
        node = data.draw(gst.nodes(name))
        self._check_same("nodes", self._append(node), lambda: self.state.add_node(node))

    @rule(data=st.data())
    def update_node(self, data: st.DataObject) -> None:
        if not self.state.nodes:
            return
        name = data.draw(st.sampled_from(sorted(self.state.nodes)), label="node")
        old = self.state.nodes[name]
        how = data.draw(st.sampled_from(["cordon", "shrink", "labels", "taint", "gpus"]))
        if how == "cordon":
            node = dataclasses.replace(old, unschedulable=not old.unschedulable)
        elif how == "shrink":
            cpu = old.allocatable.get("cpu", 0)
            alloc = dict(old.allocatable)
            alloc["cpu"] = data.draw(st.integers(0, max(cpu, 1)), label="cpu")
            node = dataclasses.replace(old, allocatable=alloc)  # type: ignore[arg-type]
        elif how == "labels":
            labels = dict(old.labels)
            labels["zone"] = data.draw(st.sampled_from(gst.ZONES), label="zone")
            node = dataclasses.replace(old, labels=labels)  # type: ignore[arg-type]
        elif how == "taint":
            taints = () if old.taints else (Taint(key="dedicated", value="x"),)
            node = dataclasses.replace(old, taints=taints)
        else:
            count = data.draw(st.integers(0, 4), label="gpus")
            gpus = Gpus(count=count, model=old.gpus.model) if count and old.gpus else None
            if count and gpus is None:
                gpus = Gpus(count=count, model="T4")
            node = dataclasses.replace(old, gpus=gpus)
        self._check_same(
            "nodes", self._replace("nodes", node), lambda: self.state.update_node(node)
        )
        if self.state.nodes.get(name) is node:
            assert name in self.state.changed_nodes()

    @rule(data=st.data())
    def remove_node(self, data: st.DataObject) -> None:
        if not self.state.nodes:
            return
        name = data.draw(st.sampled_from(sorted(self.state.nodes)), label="node")
        self._check_same("nodes", self._drop(name), lambda: self.state.remove_node(name))

    # ------------------------------------------------------------------ hypernodes

    @rule(data=st.data())
    def change_hypernode(self, data: st.DataObject) -> None:
        hns = sorted(self.state.hypernodes)
        if not hns or not self.state.nodes:
            return
        name = data.draw(st.sampled_from(hns), label="hypernode")
        old = self.state.hypernodes[name]
        how = data.draw(st.sampled_from(["add-member", "drop-member", "remove", "new"]))
        if how == "remove":
            self._check_same(
                "hypernodes", self._drop(name), lambda: self.state.remove_hypernode(name)
            )
            return
        candidates = sorted(self.state.nodes) if old.tier == 1 else hns
        member = data.draw(st.sampled_from(candidates), label="member")
        if how == "new":
            hn = HyperNode(name=self._fresh("hn-x"), tier=old.tier, members=(member,))
            self._check_same("hypernodes", self._append(hn), lambda: self.state.add_hypernode(hn))
            return
        members = tuple(m for m in old.members if m != member)
        if how == "add-member":
            members = (*members, member)
        hn = HyperNode(name=name, tier=old.tier, members=members)
        self._check_same(
            "hypernodes", self._replace("hypernodes", hn), lambda: self.state.update_hypernode(hn)
        )

    # ------------------------------------------------------------------ queues

    @rule(data=st.data())
    def change_queue(self, data: st.DataObject) -> None:
        names = sorted(self.state.queues)
        how = data.draw(st.sampled_from(["add", "weight", "state", "parent", "remove"]))
        if how == "add" or not names:
            parent = data.draw(st.sampled_from([None, *names]), label="parent")
            if parent == "root" or parent is None:
                parent = None if "root" not in names else "root"
            weight = data.draw(st.integers(1, 4), label="weight")
            q = Queue(name=self._fresh("queue-x"), weight=weight, parent=parent)
            self._check_same("queues", self._append(q), lambda: self.state.add_queue(q))
            return
        name = data.draw(st.sampled_from(names), label="queue")
        old = self.state.queues[name]
        if how == "remove":
            self._check_same("queues", self._drop(name), lambda: self.state.remove_queue(name))
            return
        if how == "weight":
            q = dataclasses.replace(old, weight=data.draw(st.integers(1, 8), label="weight"))
        elif how == "state":
            q = dataclasses.replace(
                old, state=data.draw(st.sampled_from(list(QueueState)), label="qstate")
            )
        else:
            q = dataclasses.replace(old, parent=data.draw(st.sampled_from(_parents(names, name))))
        self._check_same("queues", self._replace("queues", q), lambda: self.state.update_queue(q))

    # ------------------------------------------------------------------ jobs and tasks

    @rule(data=st.data())
    def submit(self, data: st.DataObject) -> None:
        if not self.state.queues:
            return
        max_tier = max((h.tier for h in self.state.hypernodes.values()), default=0)
        job, tasks = data.draw(
            gst.gangs(
                tuple(self.state.queues),
                name=self._fresh("job-x"),
                max_tier=max_tier if self.topology else 0,
                creation=self.serial,
            )
        )
        before = self.state.to_dict()
        doc = copy.deepcopy(before)
        doc["jobs"].append(job.to_dict())
        doc["tasks"].extend(t.to_dict() for t in tasks)
        expected = _outcome(lambda: Snapshot.from_dict(doc))
        actual = _outcome(lambda: self.state.add_job(job, tasks))
        assert (expected is None) == (actual is None), (expected, actual)
        assert self.state.to_dict() == (doc if expected is None else before)

    @rule(data=st.data())
    def remove_job(self, data: st.DataObject) -> None:
        if not self.state.jobs:
            return
        name = data.draw(st.sampled_from(sorted(self.state.jobs)), label="job")
        if data.draw(st.booleans(), label="with_tasks"):
            tasks = {t.name for t in self.state.tasks_of(name)}
            before = self.state.to_dict()
            doc = copy.deepcopy(before)
            doc["jobs"] = [j for j in doc["jobs"] if j["name"] != name]
            doc["tasks"] = [t for t in doc["tasks"] if t["name"] not in tasks]
            expected = _outcome(lambda: Snapshot.from_dict(doc))
            actual = _outcome(lambda: self.state.remove_job(name, with_tasks=True))
            assert (expected is None) == (actual is None), (expected, actual)
            assert self.state.to_dict() == (doc if expected is None else before)
        else:
            self._check_same("jobs", self._drop(name), lambda: self.state.remove_job(name))

    @rule(data=st.data())
    def task_phase(self, data: st.DataObject) -> None:
        """What a kubelet reports: a bound task runs, a running one finishes or fails, a
        releasing one is gone; or a pod is deleted, or bound by someone else."""
        if not self.state.tasks:
            return
        name = data.draw(st.sampled_from(sorted(self.state.tasks)), label="task")
        old = self.state.tasks[name]
        how = data.draw(
            st.sampled_from(
                ["Running", "Releasing", "Succeeded", "Failed", "Pending", "bind", "del"]
            )
        )
        if how == "del":
            self._check_same("tasks", self._drop(name), lambda: self.state.remove_task(name))
            return
        try:
            if how == "bind":
                if not self.state.nodes:
                    return
                node = data.draw(st.sampled_from(sorted(self.state.nodes)), label="bind-node")
                n = old.gpu_request.count if old.gpu_request else 0
                gpus = tuple(data.draw(st.permutations(range(max(n, 4))), label="gpus")[:n])
                new = dataclasses.replace(old, phase=TaskPhase.BOUND, node=node, gpu_indices=gpus)
            elif how == "Pending":
                new = dataclasses.replace(old, phase=TaskPhase.PENDING, node=None, gpu_indices=())
            else:
                new = dataclasses.replace(old, phase=TaskPhase(how))
        except SnapshotError:
            return  # not a valid record on its own (e.g. Running without a node)
        self._check_same("tasks", self._replace("tasks", new), lambda: self.state.update_task(new))

    @rule(data=st.data())
    def add_stray_task(self, data: st.DataObject) -> None:
        """A pod that names a job (or node) the state may not know."""
        jobs = sorted(self.state.jobs) or ["ghost"]
        job = data.draw(st.sampled_from([*jobs, "ghost"]), label="job")
        gpu = GpuRequest(count=1, milli=500) if data.draw(st.booleans()) else None
        task = Task(name=self._fresh("task-x"), job=job, request={"cpu": "500m"}, gpu_request=gpu)
        self._check_same("tasks", self._append(task), lambda: self.state.add_task(task))

    @rule(data=st.data())
    def change_budget(self, data: st.DataObject) -> None:
        """A PodDisruptionBudget over some jobs and tasks (or names the state may not know)."""
        names = sorted(self.state.disruption_budgets)
        remove: bool = bool(names) and data.draw(st.booleans(), label="remove")
        if remove:
            name = names[0]
            self._check_same(
                "disruption_budgets",
                self._drop(name),
                lambda: self.state.remove_disruption_budget(name),
            )
            return
        jobs = data.draw(
            st.lists(st.sampled_from([*sorted(self.state.jobs), "ghost"]), max_size=2, unique=True)
        )
        tasks = data.draw(
            st.lists(st.sampled_from([*sorted(self.state.tasks), "ghost"]), max_size=2, unique=True)
        )
        budget = DisruptionBudget(
            name=names[0] if names else self._fresh("pdb"),
            jobs=tuple(jobs),
            tasks=tuple(tasks),
            max_unavailable=data.draw(st.sampled_from(_AMOUNTS), label="max_unavailable"),
        )
        if names:
            op = lambda: self.state.update_disruption_budget(budget)  # noqa: E731
            change = self._replace("disruption_budgets", budget)
        else:
            op = lambda: self.state.add_disruption_budget(budget)  # noqa: E731
            change = self._append(budget)
        self._check_same("disruption_budgets", change, op)

    @rule(data=st.data())
    def resync(self, data: st.DataObject) -> None:
        """A full re-list: sync to another generated cluster (or to this one changed)."""
        if data.draw(st.integers(0, 3), label="resync") != 0:
            return
        target = data.draw(gst.snapshots(max_nodes=4, max_jobs=3, topology=self.topology))
        self.state.sync(target)
        got = self.state.snapshot()
        for attr in ("nodes", "hypernodes", "queues", "jobs", "tasks", "disruption_budgets"):
            mine = sorted((r.name, repr(r)) for r in getattr(got, attr))
            assert mine == sorted((r.name, repr(r)) for r in getattr(target, attr)), attr
        assert self.state.sync(target) == 0

    # ------------------------------------------------------------------ cycles

    @rule()
    def cycle(self) -> None:
        snap = self.state.snapshot()
        frozen = _dump(snap)
        fresh = Snapshot.from_dict(snap.to_dict())
        fresh_decisions = schedule(fresh, self.config)
        want = _dump(fresh_decisions)
        assert_same_arrays(build_cluster_arrays(snap), build_cluster_arrays(fresh))
        got = self.state.schedule(self.config)
        assert _dump(uncarried(got, fresh_decisions)) == want, (
            "state.schedule differs from a snapshot built from scratch"
        )
        assert _dump(schedule(snap, self.config)) == want, "not deterministic"
        assert _dump(snap) == frozen, "scheduling changed the snapshot"
        assert self.state.changed_nodes() == ()
        self.state.apply(got)  # the state's own decisions always apply
        for b in got.binds:
            task = self.state.tasks[b.task]
            assert (task.phase, task.node, task.gpu_indices) == (
                TaskPhase.BOUND,
                b.node,
                tuple(b.gpu_indices),
            )
            assert b.node in self.state.changed_nodes()
        for e in got.evictions:
            assert self.state.tasks[e.task].phase is TaskPhase.RELEASING
        self.cycles += 1

    # ------------------------------------------------------------------ invariants

    @invariant()
    def snapshot_is_the_state(self) -> None:
        snap = self.state.snapshot()
        assert snap == Snapshot.from_dict(self.state.to_dict())
        assert snap.to_dict() == self.state.to_dict()
        assert self.state.snapshot() is snap, "an unchanged state rebuilt its snapshot"


def _run(name: str, topology: bool) -> None:
    machine = type(
        f"Machine_{name}",
        (ClusterStateMachine,),
        {"config": CONFIGS[name], "topology": topology},
    )
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=EXAMPLES,
            stateful_step_count=STEPS,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            database=None,
            derandomize=not SOAK,
        ),
    )


@pytest.mark.parametrize(
    ("name", "topology"),
    [("default", False), ("preempt-reclaim", False), ("capacity", False), ("topology", True)],
)
def test_cluster_state_matches_snapshots(name: str, topology: bool) -> None:
    _run(name, topology)
