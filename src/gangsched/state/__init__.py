"""A long-lived, mutable cluster view fed by informer events, and cheap snapshots of it.

Theory of operation
-------------------
An embedder runs a cycle every second for days; rebuilding a
:class:`~gangsched.model.snapshot.Snapshot`
from records each time costs the whole cluster. :class:`ClusterState` keeps the records in
insertion-ordered dicts, one per kind, plus the reverse references the checks need (tasks of a
job, tasks naming a node, jobs of a queue, children of a queue, hypernodes listing a member).

Rule 1: the state is always a valid snapshot, and every operation is a transaction. An
operation checks its arguments' types (a :class:`SnapshotError` naming the argument) and what
it touches against the rules :class:`~gangsched.model.snapshot.Snapshot` checks (the same
:class:`SnapshotError`, naming the object and the field) *before* it changes anything, so a
refused operation leaves the state as it was. Batches (a job with its tasks, a cycle's
decisions) are checked whole — each node they touch once, with its final tasks — then made
(``_batch``); ``sync`` checks the snapshot against the state's limits first. Costs follow what
the operation touches: a task update re-checks the node it sits on (its few tasks), a queue
update walks its parent chain and, on a re-parent, its subtree; per-resource totals
(:func:`~gangsched.model.check_totals`) are kept as running sums. A hypernode operation
re-checks the topology (nodes and hypernodes, no tasks): topology changes are rare and global.

Rule 2: :meth:`ClusterState.snapshot` shares what did not change. Per kind, the record tuple
and its name index are cached and rebuilt (C-speed ``tuple(dict.values())``) only when a record
of that kind changed since the last snapshot; the topology is kept while neither nodes nor
hypernodes were added or removed. The snapshot is built through the trusted path of
:class:`Snapshot` (no re-validation: rule 1 already holds) and equals
``Snapshot.from_dict(state.to_dict())``.

Rule 3: changes are counted. Every operation bumps :attr:`ClusterState.generation`; each node
keeps the generation at which it, or a task on it, last changed
(:meth:`ClusterState.node_generation`), and :meth:`ClusterState.changed_nodes` names the nodes
changed since the last cycle, for cycle-to-cycle reuse of per-node work.

Records are ordered as they were added; an update keeps the record's place, a remove and an
add puts it last. The state is pure: no clock, no I/O; the same operations give the same
snapshots.
"""

from gangsched.state._cluster_state import ClusterState

__all__ = ["ClusterState"]
