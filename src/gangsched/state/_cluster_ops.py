"""Operations on the cluster's shape: nodes (incl. cordon), hypernodes and queues."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from gangsched.model import HyperNode, Node, Queue
from gangsched.model.checks import (
    check_hypernode_name,
    check_node_tasks,
    check_queue_parent,
    queue_cycle_error,
    queue_depth_error,
)
from gangsched.model.snapshot import Snapshot
from gangsched.state._args import flag_arg
from gangsched.state._core import StateCore, check_known, check_new, known, node_gpu, unreferenced


class ClusterOps(StateCore):
    """Add, update and remove nodes, hypernodes and queues."""

    # ------------------------------------------------------------------ nodes

    def add_node(self, node: Node) -> None:
        """A new node. Its name must not be a node's or a hypernode's."""
        check_new(node, Node, "node", self._nodes)
        check_hypernode_name(node.name, self._hypernodes)
        self._index_node(node)
        self._bump("nodes", node.name)
        self._topology = None

    def update_node(self, node: Node) -> None:
        """Replace the node of that name (allocatable, devices, labels, taints, cordon): its
        tasks must still fit."""
        old = check_known(node, Node, "node", self._nodes)
        totals = self._totals["node"]
        amounts = (old.allocatable, node.allocatable, node_gpu(old), node_gpu(node))
        totals.move(node.name, *amounts, commit=False)
        check_node_tasks(node, self._task_records(self._node_tasks[node.name]))
        totals.move(node.name, *amounts, commit=True)
        self._nodes[node.name] = node
        self._bump("nodes", node.name)

    def cordon(self, name: str, unschedulable: bool = True) -> None:
        """Mark node ``name`` unschedulable (or schedulable again)."""
        old = self._node(name)
        flag_arg(unschedulable, "node", "unschedulable")
        if old.unschedulable != unschedulable:
            self.update_node(dataclasses.replace(old, unschedulable=unschedulable))

    def remove_node(self, name: str) -> None:
        """Remove a node no task names and no hypernode lists."""
        self._node(name)
        self._check_unlisted(name)
        held = self._node_tasks[name]
        unreferenced(held, f"unknown node {name!r}", "task", "node")
        old = self._nodes.pop(name)
        self._totals["node"].move(name, old.allocatable, None, node_gpu(old), 0, commit=True)
        del self._node_tasks[name]
        del self._node_gen[name]
        self._node_loads.pop(name, None)
        self._removed_nodes.add(name)
        self._bump("nodes")
        self._topology = None

    def _check_unlisted(self, name: str) -> None:
        """No hypernode lists ``name`` (else removing it breaks the hypernode's members)."""
        unreferenced(self._owners.get(name), f"unknown member {name!r}", "hypernode", "members")

    def _node(self, name: str) -> Node:
        return known(self._nodes, "node", name)

    # ------------------------------------------------------------------ hypernodes

    def add_hypernode(self, hypernode: HyperNode) -> None:
        check_new(hypernode, HyperNode, "hypernode", self._hypernodes)
        self._set_hypernode(hypernode)

    def update_hypernode(self, hypernode: HyperNode) -> None:
        check_known(hypernode, HyperNode, "hypernode", self._hypernodes)
        self._set_hypernode(hypernode)

    def remove_hypernode(self, name: str) -> None:
        """Remove a hypernode no other hypernode lists."""
        old = self._hypernode(name)
        self._check_unlisted(name)
        hns = dict(self._hypernodes)
        del hns[name]
        topology = self._check_topology(hns)
        del self._hypernodes[name]
        self._unlist(old)
        self._topology = topology
        self._bump("hypernodes")

    def _set_hypernode(self, hn: HyperNode) -> None:
        hns = dict(self._hypernodes)
        hns[hn.name] = hn
        topology = self._check_topology(hns)
        old = self._hypernodes.get(hn.name)
        if old is not None:
            self._unlist(old)
        self._hypernodes[hn.name] = hn
        self._list_members(hn)
        self._topology = topology
        self._bump("hypernodes")

    def _unlist(self, hn: HyperNode) -> None:
        for m in hn.members:
            owners = self._owners[m]
            owners.pop(hn.name, None)
            if not owners:
                del self._owners[m]

    def _check_topology(self, hns: Mapping[str, HyperNode]) -> object:
        """Check the hypernode rules and build the topology of ``hns`` over the current nodes
        (Snapshot's own checks, on the nodes and hypernodes only)."""
        nodes, index = self._records("nodes")
        records = tuple(hns.values())
        probe = Snapshot._trusted(
            nodes=nodes,
            hypernodes=records,
            indexes={"node": index, "hypernode": {n: i for i, n in enumerate(hns)}},
            limits=self.limits,
        )
        probe._check_hypernodes()
        if not records:
            return None
        from gangsched.model.topology import build_topology

        return build_topology(probe)

    def _hypernode(self, name: str) -> HyperNode:
        return known(self._hypernodes, "hypernode", name)

    # ------------------------------------------------------------------ queues

    def add_queue(self, queue: Queue) -> None:
        """A new queue; its parent must exist already."""
        check_new(queue, Queue, "queue", self._queues)
        self._check_queue(queue, None)
        self._index_queue(queue)
        self._bump("queues")

    def update_queue(self, queue: Queue) -> None:
        """Replace the queue of that name (weight, capability, state, parent, ...)."""
        old = check_known(queue, Queue, "queue", self._queues)
        self._check_queue(queue, old)
        self._queue_totals(queue.name, old, queue, commit=True)
        if old.parent != queue.parent:
            if old.parent is not None:
                self._children[old.parent].pop(queue.name, None)
            if queue.parent is not None:
                self._children[queue.parent][queue.name] = None
        self._queues[queue.name] = queue
        self._bump("queues")

    def remove_queue(self, name: str) -> None:
        """Remove a queue no job and no child queue names."""
        old = self._queue(name)
        unreferenced(self._children.get(name), f"unknown parent queue {name!r}", "queue", "parent")
        unreferenced(self._queue_jobs[name], f"unknown queue {name!r}", "job", "queue")
        self._queue_totals(name, old, None, commit=True)
        del self._queues[name]
        del self._queue_jobs[name]
        self._children.pop(name, None)
        if old.parent is not None:
            self._children[old.parent].pop(name, None)
        self._bump("queues")

    def _queue(self, name: str) -> Queue:
        return known(self._queues, "queue", name)

    def _check_queue(self, q: Queue, old: Queue | None) -> None:
        """The parent exists, the root has none, no cycle, depth within the limit."""
        check_queue_parent(q, self._queues)
        if old is not None and old.parent == q.parent:
            return
        # Walk up from the new parent: O(depth).
        above = 0
        cur = q.parent
        while cur is not None:
            if cur == q.name:
                raise queue_cycle_error(q.name, cur)
            above += 1
            cur = self._queues[cur].parent
        # The subtree under q (its own children, unchanged): O(subtree).
        limit = self.limits.max_queue_depth
        frontier = [(q.name, above + 1)]
        while frontier:
            name, depth = frontier.pop()
            if depth > limit:
                raise queue_depth_error(name, depth, limit)
            if old is not None:
                frontier.extend((c, depth + 1) for c in self._children.get(name, ()))
