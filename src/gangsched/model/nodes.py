"""Node-side records: taints, tolerations, GPU devices, nodes and hypernodes."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from gangsched._frozen import FrozenDict, plain_fields
from gangsched.errors import SnapshotError
from gangsched.model import fields as check
from gangsched.model.enums import MAX_DEVICE_MILLI, MAX_GPUS_PER_NODE
from gangsched.model.fields import ResourceInput, Resources
from gangsched.units import PODS

# --------------------------------------------------------------------------------------------
# Nodes


@dataclass(frozen=True, slots=True, kw_only=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"

    _EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")

    def validate(self, *, kind: str, name: str, field: str) -> None:
        if not check.string(self.key, kind=kind, name=name, field=f"{field}.key"):
            raise SnapshotError(
                "a taint needs a non-empty key", kind=kind, name=name, field=f"{field}.key"
            )
        check.string(self.value, kind=kind, name=name, field=f"{field}.value")
        where = f"{field}.effect"
        check.known(self.effect, self._EFFECTS, "taint effect", kind=kind, name=name, field=where)

    def to_dict(self) -> dict[str, str]:
        return cast("dict[str, str]", plain_fields(self))


@dataclass(frozen=True, slots=True, kw_only=True)
class Toleration:
    """A pod toleration: ``operator`` Equal (key and value match) or Exists (key matches; an
    empty key with Exists tolerates everything). An empty ``effect`` matches every effect."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def validate(self, *, kind: str, name: str, field: str) -> None:
        for attr in ("key", "value", "effect"):
            check.string(getattr(self, attr), kind=kind, name=name, field=f"{field}.{attr}")
        for attr, allowed in (
            ("operator", ("Equal", "Exists")),
            ("effect", ("", "NoSchedule", "PreferNoSchedule", "NoExecute")),
        ):
            value = getattr(self, attr)
            where = f"{field}.{attr}"
            check.known(value, allowed, f"toleration {attr}", kind=kind, name=name, field=where)

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if self.operator == "Exists":
            return not self.key or self.key == taint.key
        return self.key == taint.key and self.value == taint.value

    def to_dict(self) -> dict[str, str]:
        return cast("dict[str, str]", plain_fields(self))


@dataclass(frozen=True, slots=True, kw_only=True)
class Gpus:
    """A node's GPU devices: ``count`` identical devices of ``milli`` milli-GPU each.

    ``sharing`` says whether fractional requests may share a device (GPU sharing / MPS);
    when false, every GPU request takes whole devices.
    """

    count: int
    model: str = ""
    milli: int = 1000
    sharing: bool = True

    def __post_init__(self) -> None:
        check.integer_field(self, "count", kind="gpus", name=self.model, minimum=0)
        check.integer_field(self, "milli", kind="gpus", name=self.model, minimum=1)
        if self.count > MAX_GPUS_PER_NODE:
            raise SnapshotError(
                f"{self.count} devices on one node is beyond the supported {MAX_GPUS_PER_NODE}",
                kind="gpus",
                name=self.model,
                field="count",
            )
        if self.milli > MAX_DEVICE_MILLI:
            raise SnapshotError(
                f"a device of {self.milli} milli-GPU is beyond the supported "
                f"2**43 = {MAX_DEVICE_MILLI}",
                kind="gpus",
                name=self.model,
                field="milli",
            )
        check.string(self.model, kind="gpus", name=self.model, field="model")
        check.boolean(self.sharing, kind="gpus", name=self.model, field="sharing")

    def to_dict(self) -> dict[str, object]:
        return plain_fields(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class Node:
    """A schedulable machine.

    ``allocatable`` excludes GPUs (they are ``gpus``); ``pods`` in it is the pod-count limit
    (absent = no limit).
    """

    name: str
    allocatable: Resources = field(default_factory=Resources)
    gpus: Gpus | None = None
    labels: FrozenDict[str, str] = field(default_factory=FrozenDict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False

    if TYPE_CHECKING:  # what the constructor accepts; the fields hold the checked values

        def __init__(
            self,
            *,
            name: str,
            allocatable: ResourceInput = ...,
            gpus: Gpus | None = ...,
            labels: Mapping[str, str] = ...,
            taints: Iterable[Taint] = ...,
            unschedulable: bool = ...,
        ) -> None: ...

    def __post_init__(self) -> None:
        name = check.record_name(self.name, "node")
        labels = check.str_map(self.labels, kind="node", name=name, field="labels")
        check.assign(self, "labels", labels)
        alloc = Resources.parse(self.allocatable, kind="node", name=name, field="allocatable")
        alloc, gpus = check.split_devices(
            alloc,
            self.gpus,
            Gpus,
            lambda n: Gpus(count=n, model=labels.get("nvidia.com/gpu.product", "")),
            noun="gpus",
            whole="GPU devices must be whole",
            kind="node",
            name=name,
            field="allocatable",
        )
        check.assign(self, "allocatable", alloc)
        check.assign(self, "gpus", gpus if gpus is None or gpus.count > 0 else None)
        check.assign(
            self,
            "taints",
            check.records(self.taints, Taint, kind="node", name=name, field="taints"),
        )
        check.boolean(self.unschedulable, kind="node", name=name, field="unschedulable")

    @property
    def pod_limit(self) -> int | None:
        return self.allocatable.get(PODS)

    @classmethod
    def from_dict(cls, d: object, *, where: str = "") -> Node:
        m, name = check.record_mapping(d, _NODE_KEYS, kind="node", where=where)
        gpus = check.nested(
            m.get("gpus"), _GPUS_KEYS, _gpus_from, kind="node", name=name, field="gpus"
        )
        taints = [
            Taint(
                key=tm.get("key", ""),
                value=tm.get("value", ""),
                effect=tm.get("effect", "NoSchedule"),
            )
            for tm in check.sub_mappings(
                m.get("taints"),
                frozenset({"key", "value", "effect"}),
                kind="node",
                name=name,
                field="taints",
            )
        ]
        return cls(
            name=name,
            allocatable=Resources.parse(
                m.get("allocatable"), kind="node", name=name, field="allocatable"
            ),
            gpus=gpus,
            labels=check.or_empty(m.get("labels")),
            taints=tuple(taints),
            unschedulable=m.get("unschedulable", False),
        )

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"name": self.name, "allocatable": self.allocatable.to_dict()}
        if self.gpus is not None:
            out["gpus"] = self.gpus.to_dict()
        out["labels"] = dict(self.labels)
        out["taints"] = [t.to_dict() for t in self.taints]
        out["unschedulable"] = self.unschedulable
        return out


_NODE_KEYS = frozenset({"name", "allocatable", "gpus", "labels", "taints", "unschedulable"})
_GPUS_KEYS = frozenset({"count", "model", "milli", "sharing"})


def _gpus_from(g: Mapping[str, Any]) -> Gpus:
    if "count" not in g:
        raise SnapshotError("missing", kind="gpus", field="count")
    return Gpus(
        count=g["count"],
        model=g.get("model", ""),
        milli=g.get("milli", 1000),
        sharing=g.get("sharing", True),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class HyperNode:
    """A network-topology domain. Tier 1 is the closest (NVLink domain, leaf switch); tier-1
    hypernodes list nodes, higher tiers list hypernodes of lower tiers."""

    name: str
    tier: int
    members: tuple[str, ...]

    if TYPE_CHECKING:  # what the constructor accepts; the fields hold the checked values

        def __init__(self, *, name: str, tier: int, members: Iterable[str]) -> None: ...

    def __post_init__(self) -> None:
        name = check.record_name(self.name, "hypernode")
        check.integer_field(self, "tier", kind="hypernode", name=name, minimum=1)
        members = check.str_tuple(self.members, kind="hypernode", name=name, field="members")
        if len(set(members)) != len(members):
            twice = sorted(m for m in set(members) if members.count(m) > 1)
            raise SnapshotError(
                f"member {twice[0]!r} listed twice", kind="hypernode", name=name, field="members"
            )
        check.assign(self, "members", members)

    @classmethod
    def from_dict(cls, d: object, *, where: str = "") -> HyperNode:
        keys = frozenset({"name", "tier", "members"})
        m, name = check.record_mapping(d, keys, kind="hypernode", where=where)
        if "tier" not in m:
            raise SnapshotError("missing", kind="hypernode", name=name, field="tier")
        return cls(name=name, tier=m["tier"], members=m.get("members", ()))

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "tier": self.tier, "members": list(self.members)}


# --------------------------------------------------------------------------------------------
# Queues
