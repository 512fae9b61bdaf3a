"""nodegroup: Volcano's queue-to-node-group affinity.

Nodes belong to the group named by their ``volcano.sh/nodegroup-name`` label; a queue names
the groups it may use or prefers (:class:`~gangsched.model.affinity.NodeGroupAffinity`, read
from the Queue's ``spec.affinity``). For a task of a queue, node by node, as Volcano's plugin
decides:

* **filter** — a node without the label is refused ("node group label not found"), unless
  ``strict`` is false and the queue has no affinity; a labelled node is refused when the queue
  has no affinity ("node group affinity not specified"); otherwise the group must be in the
  required or the preferred list and not in the anti-required one, except that a group in the
  anti-preferred list is always allowed ("node does not satisfy the node group affinity");
* **score** — on a labelled node of a queue with an affinity: +100 when the group is
  required; +50 when it is preferred (with ``enablePreferredOrder``, ``50 · (n − i) / n`` for
  the ``i``-th of ``n`` preferred groups, so earlier groups score higher); exactly −1 when it
  is anti-preferred. Other nodes score 0.

Arguments: ``strict`` (true), ``enablePreferredOrder`` (false). With ``enableHierarchy`` on
the plugin's tier entry, a queue without an affinity takes its nearest ancestor's (a queue
without a parent hangs under the queue named ``root``, when there is one, as in Volcano).

Not modelled: the per-group resource limits of the queue annotation
``volcano.sh/nodegroup-resource-limits``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from gangsched._types import BOOL, F64
from gangsched.config import arg_bool
from gangsched.model.affinity import NodeGroupAffinity
from gangsched.session.arrays import TaskTemplate

if TYPE_CHECKING:
    from gangsched.session.core import Session

__all__ = ["NODE_GROUP_LABEL", "NodeGroupPlugin"]

#: The node label naming a node's group.
NODE_GROUP_LABEL = "volcano.sh/nodegroup-name"
_BASE = 100.0


class NodeGroupPlugin:
    name = "nodegroup"
    known_arguments = ("strict", "enablePreferredOrder")

    def __init__(self, arguments: Mapping[str, object]) -> None:
        self.strict = arg_bool(arguments, "strict", True, plugin=self.name)
        self.ordered = arg_bool(arguments, "enablePreferredOrder", False, plugin=self.name)
        self._affinity: list[NodeGroupAffinity | None] = []
        self._rejects: dict[int, list[tuple[BOOL, str]]] = {}
        self._scores: dict[int, F64] = {}

    def on_session_open(self, ssn: Session) -> None:
        queues = ssn.snapshot.queues
        own = [q.node_group_affinity for q in queues]
        option = ssn.config.plugin(self.name)
        if option is not None and option.hierarchy:
            index = ssn.snapshot.queue_index
            inherited: list[NodeGroupAffinity | None] = []
            for q in queues:
                found, seen, cur = own[index[q.name]], {q.name}, q
                while found is None:
                    parent = _parent(cur.name, cur.parent, index)
                    if parent is None or parent in seen:  # the top, or a cycle
                        break
                    seen.add(parent)
                    cur = queues[index[parent]]
                    found = own[index[parent]]
                inherited.append(found)
            own = inherited
        self._affinity = own
        self._rejects = {}
        self._scores = {}

    def _groups(self, ssn: Session) -> tuple[npt.NDArray[np.int64], dict[str, int]]:
        a = ssn.arrays
        codes = a.label_codes.get(NODE_GROUP_LABEL)
        if codes is None:
            return np.full(a.n_nodes, -1, dtype=np.int64), {}
        return codes, dict(a.label_values[NODE_GROUP_LABEL])

    def _queue(self, ssn: Session, tmpl: TaskTemplate) -> int:
        return int(ssn.job_queue[tmpl.job])

    def _reject(self, ssn: Session, queue: int) -> list[tuple[BOOL, str]]:
        found = self._rejects.get(queue)
        if found is not None:
            return found
        codes, values = self._groups(ssn)
        aff = self._affinity[queue]
        unset = aff is None or aff.empty
        labelled = codes >= 0
        out: list[tuple[BOOL, str]] = []
        if self.strict or not unset:
            out.append((~labelled, "node group label not found"))
        if unset:
            out.append((labelled, "node group affinity not specified"))
        else:
            assert aff is not None
            allowed = np.zeros(len(values) + 1, dtype=np.bool_)  # slot 0: no label
            for group, code in values.items():
                flag = group in aff.required or group in aff.preferred
                if group in aff.anti_required:
                    flag = False
                if group in aff.anti_preferred:
                    flag = True
                allowed[code + 1] = flag
            allowed[0] = True  # unlabelled nodes are the label rule's
            out.append((~allowed[codes + 1], "node does not satisfy the node group affinity"))
        self._rejects[queue] = out
        return out

    def _score(self, ssn: Session, queue: int) -> F64:
        found = self._scores.get(queue)
        if found is not None:
            return found
        codes, values = self._groups(ssn)
        aff = self._affinity[queue]
        per = np.zeros(len(values) + 1, dtype=np.float64)  # slot 0: no label
        if aff is not None:
            n_pref = len(aff.preferred)
            for group, code in values.items():
                score = 0.0
                if group in aff.required:
                    score += _BASE
                if group in aff.preferred:
                    if self.ordered:
                        i = aff.preferred.index(group)
                        score += 0.5 * _BASE * (n_pref - i) / n_pref
                    else:
                        score += 0.5 * _BASE
                if group in aff.anti_preferred:
                    score = -1.0
                per[code + 1] = score
        found = self._scores[queue] = per[codes + 1]
        return found

    def predicate(
        self, ssn: Session, tmpl: TaskTemplate, rows: npt.NDArray[np.intp]
    ) -> list[tuple[BOOL, str]]:
        return [(mask[rows], why) for mask, why in self._reject(ssn, self._queue(ssn, tmpl))]

    def node_score(self, ssn: Session, tmpl: TaskTemplate, rows: npt.NDArray[np.intp]) -> F64:
        out: F64 = self._score(ssn, self._queue(ssn, tmpl))[rows]
        return out


def _parent(name: str, parent: str | None, index: Mapping[str, int]) -> str | None:
    """A queue's parent in Volcano's tree: its own, else ``root`` (for every other queue)."""
    if parent is not None:
        return parent if parent in index else None
    return "root" if name != "root" and "root" in index else None
