"""The tenant queue record (Volcano's Queue): weight, capability, guarantee, deserved share,
parent, state, reclaimable, priority and lending limit."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gangsched.errors import SnapshotError
from gangsched.model import fields as check
from gangsched.model.affinity import NodeGroupAffinity
from gangsched.model.enums import QueueState
from gangsched.model.fields import ResourceInput, Resources
from gangsched.units import CPU, MEMORY, PODS


@dataclass(frozen=True, slots=True, kw_only=True)
class Queue:
    """A tenant queue (Volcano's Queue). ``capability`` caps, ``guarantee`` reserves,
    ``deserved`` is the explicit share used by the capacity plugin."""

    name: str
    weight: int = 1
    capability: Resources | None = None
    guarantee: Resources | None = None
    deserved: Resources | None = None
    parent: str | None = None
    state: QueueState = QueueState.OPEN
    reclaimable: bool = True
    priority: int = 0
    #: Kueue's ``lendingLimit``: at most this much of the queue's unused deserved share is
    #: lent to other queues (capacity plugin); a resource it does not name is lent in full.
    lending_limit: Resources | None = None
    #: Volcano's ``spec.affinity``: which node groups (``volcano.sh/nodegroup-name``) the
    #: queue's tasks may use or prefer (the ``nodegroup`` plugin).
    node_group_affinity: NodeGroupAffinity | None = None

    if TYPE_CHECKING:  # what the constructor accepts; the fields hold the checked values

        def __init__(
            self,
            *,
            name: str,
            weight: int = ...,
            capability: ResourceInput | None = ...,
            guarantee: ResourceInput | None = ...,
            deserved: ResourceInput | None = ...,
            parent: str | None = ...,
            state: QueueState | str = ...,
            reclaimable: bool = ...,
            priority: int = ...,
            lending_limit: ResourceInput | None = ...,
            node_group_affinity: NodeGroupAffinity | None = ...,
        ) -> None: ...

    def __post_init__(self) -> None:
        name = check.record_name(self.name, "queue")
        check.integer_field(self, "weight", kind="queue", name=name, minimum=1)
        for attr in ("capability", "guarantee", "deserved", "lending_limit"):
            value = getattr(self, attr)
            if value is not None:
                check.assign(
                    self, attr, Resources.parse(value, kind="queue", name=name, field=attr)
                )
        check.string(self.parent, kind="queue", name=name, field="parent", optional=True)
        if self.parent == name:
            raise SnapshotError("queue is its own parent", kind="queue", name=name, field="parent")
        check.assign(
            self,
            "state",
            check.member(QueueState, self.state, kind="queue", name=name, field="state"),
        )
        check.boolean(self.reclaimable, kind="queue", name=name, field="reclaimable")
        check.integer_field(self, "priority", kind="queue", name=name)
        if self.node_group_affinity is not None:
            if not isinstance(self.node_group_affinity, NodeGroupAffinity):
                raise SnapshotError(
                    f"expected a NodeGroupAffinity, got {type(self.node_group_affinity).__name__}",
                    kind="queue",
                    name=name,
                    field="node_group_affinity",
                )
            self.node_group_affinity.check(kind="queue", name=name, field="node_group_affinity")

    def capability_limits(self, *, flat: bool = True) -> dict[str, int]:
        """The capability as enforced: resource → the most this queue may hold.

        The one owner of how a capability reads. Resources it does not name are unlimited,
        and so is ``pods``. With ``flat`` (Volcano's proportion, and capacity without
        hierarchy) cpu and memory at or below zero are unlimited too, as Volcano reads an
        unset quantity; the hierarchical capacity plugin passes ``flat=False`` and enforces
        a zero.
        """
        if self.capability is None:
            return {}
        return {
            res: amount
            for res, amount in self.capability.items()
            if res != PODS and not (flat and res in (CPU, MEMORY) and amount <= 0)
        }

    @classmethod
    def from_dict(cls, d: object, *, where: str = "") -> Queue:
        m, name = check.record_mapping(d, _QUEUE_KEYS, kind="queue", where=where)
        return cls(
            name=name,
            weight=m.get("weight", 1),
            capability=m.get("capability"),
            guarantee=m.get("guarantee"),
            deserved=m.get("deserved"),
            parent=m.get("parent"),
            state=m.get("state", "Open"),
            reclaimable=m.get("reclaimable", True),
            priority=m.get("priority", 0),
            lending_limit=m.get("lending_limit"),
            node_group_affinity=None
            if m.get("node_group_affinity") is None
            else NodeGroupAffinity.from_dict(
                m["node_group_affinity"], kind="queue", name=name, field="node_group_affinity"
            ),
        )

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"name": self.name, "weight": self.weight}
        for attr in ("capability", "guarantee", "deserved"):
            value = getattr(self, attr)
            if value is not None:
                out[attr] = value.to_dict()
        if self.parent is not None:
            out["parent"] = self.parent
        out.update(state=self.state.value, reclaimable=self.reclaimable, priority=self.priority)
        if self.lending_limit is not None:
            out["lending_limit"] = self.lending_limit.to_dict()
        if self.node_group_affinity is not None:
            out["node_group_affinity"] = self.node_group_affinity.to_dict()
        return out


_QUEUE_KEYS = frozenset(
    {
        "name",
        "weight",
        "capability",
        "guarantee",
        "deserved",
        "parent",
        "state",
        "reclaimable",
        "priority",
        "lending_limit",
        "node_group_affinity",
    }
)
