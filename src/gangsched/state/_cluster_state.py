"""The cluster state: bulk re-lists, snapshots and cycles on top of the typed operations."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gangsched._frozen import FrozenDict
from gangsched.decisions import Decisions
from gangsched.errors import SnapshotError
from gangsched.model import NODE_PHASES
from gangsched.model.snapshot import Snapshot
from gangsched.session.arrays import ArraysBase, ClusterArrays
from gangsched.state._cluster_ops import ClusterOps
from gangsched.state._core import ATTRS, KIND
from gangsched.state._workload import WorkloadOps


class ClusterState(WorkloadOps, ClusterOps):
    """A mutable cluster that informer events keep current; :meth:`snapshot` gives the
    immutable :class:`Snapshot` a cycle reads, sharing what did not change.

    Build it from a snapshot (``ClusterState(snapshot)``) or empty (``ClusterState()``), then
    call the typed operations: ``add_*`` / ``update_*`` / ``remove_*`` for nodes, hypernodes,
    queues, jobs and tasks, ``set_task_phase`` for the phase changes a kubelet reports, and
    :meth:`apply` for a cycle's decisions. ``update_*`` replaces the record of that name
    (it must exist), ``add_*`` refuses a name that exists. Each operation raises
    :class:`~gangsched.errors.SnapshotError` where :class:`Snapshot` would, and leaves the
    state unchanged when it does.
    """

    # ------------------------------------------------------------------ bulk

    def sync(self, snapshot: Snapshot) -> int:
        """Bring the state to ``snapshot``'s records (a full re-list, as an informer's resync
        delivers), touching only the records that differ; returns how many it touched.

        Records keep their place in the state; new ones go last. When the changes cannot be
        made one at a time (a task moving onto room another task frees later in the order),
        the state is rebuilt from ``snapshot`` (valid by construction).
        """
        if not isinstance(snapshot, Snapshot):
            raise SnapshotError(
                f"expected a Snapshot, got {type(snapshot).__name__}", kind="state", field="sync"
            )
        if snapshot.limits != self.limits:
            # Checked whole against the state's limits before anything changes: the records
            # then make a valid state, one at a time or by the rebuild below.
            snapshot = Snapshot(**{a: getattr(snapshot, a) for a in ATTRS}, limits=self.limits)
        before = set(self._nodes)
        try:
            return self._sync(snapshot)
        except SnapshotError:
            fresh = ClusterState(snapshot)
            gen = self.generation + 1
            # Nodes gone since the last cycle: those removed before the sync, by its first
            # steps, and those the rebuild leaves out.
            removed = self._removed_nodes | (before - set(fresh._nodes))
            self.__dict__.update(fresh.__dict__)
            self.generation = gen
            self._node_gen = dict.fromkeys(self._node_gen, gen)
            self._removed_nodes = removed
            return len(snapshot.nodes) + len(snapshot.tasks)

    def _sync(self, snap: Snapshot) -> int:
        touched = 0
        want: dict[str, dict[str, Any]] = {a: {r.name: r for r in getattr(snap, a)} for a in ATTRS}
        # 1. What leaves or frees room: budgets, tasks, then jobs, hypernodes, queues, nodes.
        for name in [b for b in self._disruption_budgets if b not in want["disruption_budgets"]]:
            self.remove_disruption_budget(name)
            touched += 1
        for name, task in list(self._tasks.items()):
            new = want["tasks"].get(name)
            if new is None:
                self.remove_task(name)
                touched += 1
            elif new != task and (new.node is None or new.phase not in NODE_PHASES):
                self.update_task(new)
                touched += 1
        for name in [j for j in self._jobs if j not in want["jobs"]]:
            self.remove_job(name)
            touched += 1
        gone = [h for h in self._hypernodes if h not in want["hypernodes"]]
        for name in sorted(gone, key=lambda h: -self._hypernodes[h].tier):
            self.remove_hypernode(name)
            touched += 1
        gone = [q for q in self._queues if q not in want["queues"]]
        while gone:  # children first
            # None left without children: a queue that stays is still below one that goes
            # until step 2 moves it, so the removal is refused and sync rebuilds.
            leaf = next((q for q in gone if not self._children.get(q)), gone[0])
            self.remove_queue(leaf)
            gone.remove(leaf)
            touched += 1
        for name in [n for n in self._nodes if n not in want["nodes"]]:
            self.remove_node(name)
            touched += 1
        # 2. What arrives or changes, in dependency order.
        for node in snap.nodes:
            touched += self._upsert(node, self._nodes, self.add_node, self.update_node)
        pending = list(snap.queues)
        while pending:  # parents first
            ready = [q for q in pending if q.parent is None or q.parent in self._queues]
            if not ready:
                ready = pending[:1]  # let the check name the problem
            for q in ready:
                touched += self._upsert(q, self._queues, self.add_queue, self.update_queue)
                pending.remove(q)
        for hn in sorted(snap.hypernodes, key=lambda h: h.tier):
            touched += self._upsert(hn, self._hypernodes, self.add_hypernode, self.update_hypernode)
        for job in snap.jobs:
            touched += self._upsert(job, self._jobs, self.add_job, self.update_job)
        for task in snap.tasks:
            touched += self._upsert(task, self._tasks, self.add_task, self.update_task)
        for budget in snap.disruption_budgets:
            touched += self._upsert(
                budget,
                self._disruption_budgets,
                self.add_disruption_budget,
                self.update_disruption_budget,
            )
        return touched

    @staticmethod
    def _upsert(record: Any, store: Mapping[str, Any], add: Any, update: Any) -> int:
        old = store.get(record.name)
        if old is None:
            add(record)
            return 1
        if old is record or old == record:
            return 0
        update(record)
        return 1

    def snapshot(self) -> Snapshot:
        """The immutable snapshot of the state now, equal to
        ``Snapshot.from_dict(self.to_dict())``; kinds that did not change since the last
        snapshot share their record tuple and index with it."""
        last = self._last
        if last is not None and all(a in self._cache for a in ATTRS):
            parts = {a: self._cache[a] for a in ATTRS}
            if all(parts[a][0] is getattr(last, a) for a in ATTRS):
                return last
        parts = {a: self._records(a) for a in ATTRS}
        snap = Snapshot._trusted(
            **{a: parts[a][0] for a in ATTRS},
            indexes={KIND[a]: parts[a][1] for a in ATTRS},
            limits=self.limits,
            topology=self._topology,
        )
        if snap.hypernodes and self._topology is None:
            from gangsched.model.topology import build_topology

            self._topology = build_topology(snap)
        object.__setattr__(snap, "_arrays", self._arrays_base())
        self._last, self._last_gen = snap, self.generation
        return snap

    def _arrays_base(self) -> ArraysBase:
        """What the new snapshot's arrays may reuse: the last snapshot whose arrays were
        built (the last one, or the one its arrays would have started from), and the tasks of
        every node changed since."""
        names = frozenset(self._resource_names)
        last: Snapshot | None = self._last
        since = self._last_gen
        hint = last._arrays if last is not None else None
        if isinstance(hint, ArraysBase):
            last, since = hint.previous, hint.since
        if last is None or not isinstance(last._arrays, ClusterArrays):
            return ArraysBase(previous=None, since=0, resource_names=names, changed=FrozenDict())
        tasks, on = self._tasks, self._node_tasks
        changed = {
            name: tuple(tasks[t] for t in on[name])
            for name, gen in self._node_gen.items()
            if gen > since
        }
        return ArraysBase(
            previous=last,
            since=since,
            resource_names=names,
            changed=changed,
        )

    def schedule(self, config: Any, **kwargs: Any) -> Decisions:
        """One cycle on the state now: :func:`gangsched.schedule` on :meth:`snapshot` (same
        keyword arguments). Marks the cycle for :meth:`changed_nodes`. The decisions are not
        applied: call :meth:`apply` once the binder has acted on them."""
        from gangsched.config import Config
        from gangsched.errors import ConfigError
        from gangsched.scheduler import run_cycle

        if not isinstance(config, Config):
            raise ConfigError(
                f"expected a Config, got {type(config).__name__}", kind="state", field="config"
            )

        # The last cycle's session lends its per-template evaluations to this one where they
        # still hold (same configuration and node records; rows whose occupancy moved are
        # re-evaluated): the decisions are those of a fresh cycle.
        previous = self.__dict__.get("_last_session")
        out, ssn = run_cycle(self.snapshot(), config, previous=previous, **kwargs)
        self.__dict__["_last_session"] = ssn
        if previous is not None:
            # The new session took what the last one lends: free the last one now rather
            # than leave its reference cycles to the cyclic collector (which cost the
            # default trace replay 1.75 s of its 22 s).
            previous.release()
        self.mark_cycle()
        return out

    def to_dict(self) -> dict[str, list[dict[str, object]]]:
        """The interchange format of the state now (as :meth:`Snapshot.to_dict`)."""
        return {
            attr: [rec.to_dict() for rec in getattr(self, f"_{attr}").values()]
            for attr in ATTRS
            if attr != "disruption_budgets" or self._disruption_budgets
        }

    def __repr__(self) -> str:
        return (
            f"ClusterState(nodes={len(self._nodes)}, hypernodes={len(self._hypernodes)}, "
            f"queues={len(self._queues)}, jobs={len(self._jobs)}, tasks={len(self._tasks)}, "
            f"generation={self.generation})"
        )
