"""The cluster model: frozen, slotted, keyword-only records validated on construction.

Theory of operation
-------------------
An invalid record cannot exist. Each constructor normalises its inputs (quantities into
canonical ints, lists into tuples, mappings into :class:`FrozenDict`) and raises
:class:`~gangsched.errors.SnapshotError` naming the record and the field on anything it cannot
accept. Resource amounts given as a plain mapping are read as Kubernetes quantities
(``{"cpu": 2}`` is two cores); a :class:`Resources` value is already canonical and is taken as
is, so ``Node(allocatable=node.allocatable)`` round-trips.

Cross-record rules (a task's job exists, running tasks fit their node, …) live in
:mod:`gangsched.snapshot`, which owns the whole picture.

Every amount and every integer a record holds is at most
:data:`~gangsched.limits.MAX_QUANTITY` (2**53) in size, so it is exact as a float64;
:func:`check_totals` (called by the snapshot) bounds each per-resource sum over the records of
one kind by :data:`~gangsched.limits.MAX_TOTAL` (2**60), so no sum over the cluster wraps int64.

GPUs are devices: a node has ``gpus.count`` devices of ``gpus.milli`` milli-GPU each (1000 =
one whole device), a task asks for ``gpu_request.count`` devices with ``gpu_request.milli``
milli-GPU on each. ``count=1, milli=500`` is half a GPU (shared); ``count=4, milli=1000`` is four
whole GPUs. In a manifest-style mapping ``"nvidia.com/gpu": 8`` means 8 whole devices, both in a
node's allocatable and in a task's request.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ._frozen import FrozenDict
from .errors import SnapshotError
from .limits import MAX_QUANTITY, MAX_TOTAL
from .units import (
    CPU,
    GPU,
    MEMORY,
    PODS,
    canonical_unit,
    format_resources,
    parse_quantity,
    parse_resources,
    show_value,
)

__all__ = [
    "DisruptionBudget",
    "GpuRequest",
    "Gpus",
    "HyperNode",
    "Job",
    "JobPhase",
    "JobPolicy",
    "NetworkTopology",
    "Node",
    "Queue",
    "QueueState",
    "Resources",
    "Taint",
    "Task",
    "TaskPhase",
    "Toleration",
    "TopologyMode",
]


class Resources(FrozenDict[str, int]):
    """Canonical resource amounts (``{name: int}``, sorted): millicores, bytes, milli-GPU, counts.

    Build one from quantities with :meth:`parse`; a plain ``Resources(...)`` trusts its ints.
    """

    __slots__ = ()

    @classmethod
    def parse(cls, value: object, *, kind: str, name: str, field: str) -> Resources:
        if isinstance(value, Resources):
            for res, amount in value.items():
                if not isinstance(res, str) or not res:
                    raise SnapshotError(
                        f"resource name must be a non-empty string, got {res!r}",
                        kind=kind,
                        name=name,
                        field=field,
                    )
                if (
                    isinstance(amount, bool)
                    or not isinstance(amount, int)
                    or not 0 <= amount <= MAX_QUANTITY
                ):
                    raise SnapshotError(
                        f"canonical amount must be an int in [0, 2**53], got {show_value(amount)}",
                        kind=kind,
                        name=name,
                        field=f"{field}.{res}",
                    )
            return value
        return _intern(cls(parse_resources(value, kind=kind, name=name, field=field)))

    def to_dict(self) -> dict[str, str | int]:
        return format_resources(self)


#: Devices tracked per node (per-device arrays are ``n_nodes × max devices``); real nodes carry
#: at most a few dozen accelerators. A task's devices sit on one node, so a GPU request asks
#: for at most this many too.
MAX_GPUS_PER_NODE = 1024
#: Largest size of one device in milli-GPU (``gpus.milli``): a node's or a task's devices
#: together then hold at most :data:`~gangsched.limits.MAX_QUANTITY` milli-GPU.
MAX_DEVICE_MILLI = MAX_QUANTITY // MAX_GPUS_PER_NODE


class QueueState(enum.Enum):
    OPEN = "Open"
    CLOSING = "Closing"
    CLOSED = "Closed"


class JobPhase(enum.Enum):
    PENDING = "Pending"
    INQUEUE = "Inqueue"
    RUNNING = "Running"
    UNKNOWN = "Unknown"
    COMPLETED = "Completed"


class TaskPhase(enum.Enum):
    PENDING = "Pending"
    PIPELINED = "Pipelined"
    BOUND = "Bound"
    RUNNING = "Running"
    RELEASING = "Releasing"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


#: Phases whose task holds resources on its node.
OCCUPYING_PHASES = frozenset({TaskPhase.BOUND, TaskPhase.RUNNING, TaskPhase.RELEASING})
#: Phases in which a task must name its node.
NODE_PHASES = OCCUPYING_PHASES | {TaskPhase.PIPELINED}


class TopologyMode(enum.Enum):
    HARD = "hard"
    SOFT = "soft"


E = TypeVar("E", bound=enum.Enum)


def _enum(cls: type[E], value: object, *, kind: str, name: str, field: str) -> E:
    if isinstance(value, cls):
        return value
    for member in cls:
        if member.value == value:
            return member
    allowed = ", ".join(repr(m.value) for m in cls)
    raise SnapshotError(
        f"unknown value {value!r} (expected one of {allowed})", kind=kind, name=name, field=field
    )


def _check_name(value: object, kind: str, where: str = "") -> str:
    if not isinstance(value, str) or not value:
        detail = "missing" if value is None else f"must be a non-empty string, got {value!r}"
        raise SnapshotError(detail, kind=kind, name=where, field="name")
    return value


def _str(value: object, *, kind: str, name: str, field: str, optional: bool = False) -> Any:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise SnapshotError(
            f"expected a string, got {type(value).__name__}", kind=kind, name=name, field=field
        )
    return value


def _int(
    value: object,
    *,
    kind: str,
    name: str,
    field: str,
    minimum: int | None = None,
) -> int:
    """An integer field, at least ``minimum``; every integer of a record is at most
    :data:`~gangsched.limits.MAX_QUANTITY` in size, so it is exact as a float64 too."""
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise SnapshotError(
                f"expected an integer, got {show_value(value)}", kind=kind, name=name, field=field
            )
    if abs(value) > MAX_QUANTITY:
        raise SnapshotError(
            f"integer {show_value(value)} out of range (at most 2**53 = {MAX_QUANTITY} in size)",
            kind=kind,
            name=name,
            field=field,
        )
    if minimum is not None and value < minimum:
        raise SnapshotError(f"must be >= {minimum}, got {value}", kind=kind, name=name, field=field)
    return value


def _bool(value: object, *, kind: str, name: str, field: str) -> bool:
    if not isinstance(value, bool):
        raise SnapshotError(f"expected a boolean, got {value!r}", kind=kind, name=name, field=field)
    return value


#: Equal small immutable mappings are shared between records (thousands of tasks of one job
#: carry the same request, nodes of one shape the same labels): a memo that changes no value,
#: only memory. Bounded; cleared when full.
_INTERNED: dict[tuple[object, ...], FrozenDict[Any, Any]] = {}
_INTERN_LIMIT = 1 << 16

FD = TypeVar("FD", bound=FrozenDict[Any, Any])


def _intern(value: FD) -> FD:
    key = (type(value), *value.items())
    found = _INTERNED.get(key)
    if found is not None:
        return found  # type: ignore[return-value]
    if len(_INTERNED) >= _INTERN_LIMIT:
        _INTERNED.clear()
    _INTERNED[key] = value
    return value


def _str_map(value: object, *, kind: str, name: str, field: str) -> FrozenDict[str, str]:
    if value is None:
        return _intern(FrozenDict())
    if not isinstance(value, Mapping):
        raise SnapshotError(
            f"expected a mapping of strings, got {type(value).__name__}",
            kind=kind,
            name=name,
            field=field,
        )
    for k, v in value.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise SnapshotError(
                f"keys and values must be strings, got {k!r}: {v!r}",
                kind=kind,
                name=name,
                field=field,
            )
    if isinstance(value, FrozenDict):
        return _intern(value)
    return _intern(FrozenDict(value))


def _str_tuple(value: object, *, kind: str, name: str, field: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise SnapshotError(
            f"expected a list of strings, got {type(value).__name__}",
            kind=kind,
            name=name,
            field=field,
        )
    for i, item in enumerate(value):
        if not isinstance(item, str) or not item:
            raise SnapshotError(
                f"expected a non-empty string, got {item!r}",
                kind=kind,
                name=name,
                field=f"{field}[{i}]",
            )
    return tuple(value)


def _seq(value: object, *, kind: str, name: str, field: str) -> Sequence[Any]:
    if value is None:
        return ()
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Sequence):
        raise SnapshotError(
            f"expected a list, got {type(value).__name__}", kind=kind, name=name, field=field
        )
    return value


def _mapping(value: object, *, kind: str, name: str, field: str = "") -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise SnapshotError(
            f"expected a mapping, got {type(value).__name__}", kind=kind, name=name, field=field
        )
    return value


def _or_empty(value: object) -> Any:
    """``value``, or an empty mapping when it is absent (``None``); wrong types pass through
    so the record's own check reports them."""
    return FrozenDict() if value is None else value


def _set(obj: object, attr: str, value: object) -> None:
    object.__setattr__(obj, attr, value)


def _check_keys(
    d: Mapping[str, Any], allowed: frozenset[str], *, kind: str, name: str, field: str = ""
) -> None:
    unknown = sorted(str(k) for k in d if k not in allowed)
    if unknown:
        prefix = f"{field}." if field else ""
        raise SnapshotError(
            f"unknown key (allowed: {', '.join(sorted(allowed))})",
            kind=kind,
            name=name,
            field=prefix + unknown[0],
        )


# --------------------------------------------------------------------------------------------
# Nodes


@dataclass(frozen=True, slots=True, kw_only=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"

    _EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")

    def validate(self, *, kind: str, name: str, field: str) -> None:
        if not _str(self.key, kind=kind, name=name, field=f"{field}.key"):
            raise SnapshotError(
                "a taint needs a non-empty key", kind=kind, name=name, field=f"{field}.key"
            )
        _str(self.value, kind=kind, name=name, field=f"{field}.value")
        if self.effect not in self._EFFECTS:
            raise SnapshotError(
                f"unknown taint effect {self.effect!r}",
                kind=kind,
                name=name,
                field=f"{field}.effect",
            )

    def to_dict(self) -> dict[str, str]:
        return {"key": self.key, "value": self.value, "effect": self.effect}


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
            _str(getattr(self, attr), kind=kind, name=name, field=f"{field}.{attr}")
        if self.operator not in ("Equal", "Exists"):
            raise SnapshotError(
                f"unknown toleration operator {self.operator!r}",
                kind=kind,
                name=name,
                field=f"{field}.operator",
            )
        if self.effect not in ("", "NoSchedule", "PreferNoSchedule", "NoExecute"):
            raise SnapshotError(
                f"unknown toleration effect {self.effect!r}",
                kind=kind,
                name=name,
                field=f"{field}.effect",
            )

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if self.operator == "Exists":
            return not self.key or self.key == taint.key
        return self.key == taint.key and self.value == taint.value

    def to_dict(self) -> dict[str, str]:
        return {
            "key": self.key,
            "operator": self.operator,
            "value": self.value,
            "effect": self.effect,
        }


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
        _set(
            self, "count", _int(self.count, kind="gpus", name=self.model, field="count", minimum=0)
        )
        _set(
            self, "milli", _int(self.milli, kind="gpus", name=self.model, field="milli", minimum=1)
        )
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
        _str(self.model, kind="gpus", name=self.model, field="model")
        _bool(self.sharing, kind="gpus", name=self.model, field="sharing")

    def to_dict(self) -> dict[str, object]:
        return {
            "count": self.count,
            "model": self.model,
            "milli": self.milli,
            "sharing": self.sharing,
        }


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

    def __post_init__(self) -> None:
        name = _check_name(self.name, "node")
        labels = _str_map(self.labels, kind="node", name=name, field="labels")
        _set(self, "labels", labels)
        alloc = Resources.parse(self.allocatable, kind="node", name=name, field="allocatable")
        gpus = self.gpus
        if gpus is not None and not isinstance(gpus, Gpus):
            raise SnapshotError("expected Gpus", kind="node", name=name, field="gpus")
        if GPU in alloc:
            devices, rest = divmod(alloc[GPU], 1000)
            if rest:
                raise SnapshotError(
                    "GPU devices must be whole", kind="node", name=name, field=f"allocatable.{GPU}"
                )
            if gpus is None:
                try:
                    gpus = Gpus(count=devices, model=labels.get("nvidia.com/gpu.product", ""))
                except SnapshotError as exc:
                    raise SnapshotError(
                        exc.detail, kind="node", name=name, field=f"allocatable.{GPU}"
                    ) from None
            elif gpus.count != devices:
                raise SnapshotError(
                    f"allocatable says {devices} GPUs but gpus.count is {gpus.count}",
                    kind="node",
                    name=name,
                    field=f"allocatable.{GPU}",
                )
            alloc = Resources({k: v for k, v in alloc.items() if k != GPU})
        _set(self, "allocatable", alloc)
        _set(self, "gpus", gpus if gpus is None or gpus.count > 0 else None)
        taints = tuple(_seq(self.taints, kind="node", name=name, field="taints"))
        for i, taint in enumerate(taints):
            if not isinstance(taint, Taint):
                raise SnapshotError(
                    "expected a Taint", kind="node", name=name, field=f"taints[{i}]"
                )
            taint.validate(kind="node", name=name, field=f"taints[{i}]")
        _set(self, "taints", taints)
        _bool(self.unschedulable, kind="node", name=name, field="unschedulable")

    @property
    def pod_limit(self) -> int | None:
        return self.allocatable.get(PODS)

    @classmethod
    def from_dict(cls, d: object, *, where: str = "") -> Node:
        m = _mapping(d, kind="node", name=where)
        name = _check_name(m.get("name"), "node", where)
        _check_keys(m, _NODE_KEYS, kind="node", name=name)
        gpus = None
        if m.get("gpus") is not None:
            g = _mapping(m["gpus"], kind="node", name=name, field="gpus")
            _check_keys(
                g,
                frozenset({"count", "model", "milli", "sharing"}),
                kind="node",
                name=name,
                field="gpus",
            )
            if "count" not in g:
                raise SnapshotError("missing", kind="node", name=name, field="gpus.count")
            try:
                gpus = Gpus(
                    count=g["count"],
                    model=g.get("model", ""),
                    milli=g.get("milli", 1000),
                    sharing=g.get("sharing", True),
                )
            except SnapshotError as exc:
                raise SnapshotError(
                    exc.detail, kind="node", name=name, field=f"gpus.{exc.field}"
                ) from None
        taints = []
        for i, t in enumerate(_seq(m.get("taints"), kind="node", name=name, field="taints")):
            tm = _mapping(t, kind="node", name=name, field=f"taints[{i}]")
            _check_keys(
                tm,
                frozenset({"key", "value", "effect"}),
                kind="node",
                name=name,
                field=f"taints[{i}]",
            )
            taints.append(
                Taint(
                    key=tm.get("key", ""),
                    value=tm.get("value", ""),
                    effect=tm.get("effect", "NoSchedule"),
                )
            )
        return cls(
            name=name,
            allocatable=Resources.parse(
                m.get("allocatable"), kind="node", name=name, field="allocatable"
            ),
            gpus=gpus,
            labels=_or_empty(m.get("labels")),
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


@dataclass(frozen=True, slots=True, kw_only=True)
class HyperNode:
    """A network-topology domain. Tier 1 is the closest (NVLink domain, leaf switch); tier-1
    hypernodes list nodes, higher tiers list hypernodes of lower tiers."""

    name: str
    tier: int
    members: tuple[str, ...]

    def __post_init__(self) -> None:
        name = _check_name(self.name, "hypernode")
        _set(self, "tier", _int(self.tier, kind="hypernode", name=name, field="tier", minimum=1))
        members = _str_tuple(self.members, kind="hypernode", name=name, field="members")
        if len(set(members)) != len(members):
            twice = sorted(m for m in set(members) if members.count(m) > 1)
            raise SnapshotError(
                f"member {twice[0]!r} listed twice", kind="hypernode", name=name, field="members"
            )
        _set(self, "members", members)

    @classmethod
    def from_dict(cls, d: object, *, where: str = "") -> HyperNode:
        m = _mapping(d, kind="hypernode", name=where)
        name = _check_name(m.get("name"), "hypernode", where)
        _check_keys(m, frozenset({"name", "tier", "members"}), kind="hypernode", name=name)
        if "tier" not in m:
            raise SnapshotError("missing", kind="hypernode", name=name, field="tier")
        return cls(name=name, tier=m["tier"], members=m.get("members", ()))

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "tier": self.tier, "members": list(self.members)}


# --------------------------------------------------------------------------------------------
# Queues


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

    def __post_init__(self) -> None:
        name = _check_name(self.name, "queue")
        _set(self, "weight", _int(self.weight, kind="queue", name=name, field="weight", minimum=1))
        for attr in ("capability", "guarantee", "deserved", "lending_limit"):
            value = getattr(self, attr)
            if value is not None:
                _set(self, attr, Resources.parse(value, kind="queue", name=name, field=attr))
        _str(self.parent, kind="queue", name=name, field="parent", optional=True)
        if self.parent == name:
            raise SnapshotError("queue is its own parent", kind="queue", name=name, field="parent")
        _set(self, "state", _enum(QueueState, self.state, kind="queue", name=name, field="state"))
        _bool(self.reclaimable, kind="queue", name=name, field="reclaimable")
        _set(self, "priority", _int(self.priority, kind="queue", name=name, field="priority"))

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
        m = _mapping(d, kind="queue", name=where)
        name = _check_name(m.get("name"), "queue", where)
        _check_keys(m, _QUEUE_KEYS, kind="queue", name=name)
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
    }
)


# --------------------------------------------------------------------------------------------
# Jobs


@dataclass(frozen=True, slots=True, kw_only=True)
class NetworkTopology:
    """Volcano's job ``networkTopology``: hard = every task inside one hypernode of tier ≤
    ``highest_tier_allowed``; soft = prefer the lowest tier, widen if needed.

    Kueue's vocabulary is the same rule: a *required* tier ``t`` is hard with
    ``highest_tier_allowed=t`` (:attr:`required_tier`), a *preferred* tier is soft
    (:attr:`preferred_tier`). ``slice_size`` with ``slice_tier`` (Kueue's
    ``podset-slice-size`` / ``podset-slice-required-topology``) adds that every domain of
    ``slice_tier`` (0: a node) hosts a multiple of ``slice_size`` of the gang's tasks; the
    slice tier may not be above ``highest_tier_allowed``.
    """

    mode: TopologyMode = TopologyMode.HARD
    highest_tier_allowed: int | None = None
    slice_size: int = 0
    slice_tier: int = 0

    def __post_init__(self) -> None:
        _set(
            self,
            "mode",
            _enum(TopologyMode, self.mode, kind="network_topology", name="", field="mode"),
        )
        if self.highest_tier_allowed is not None:
            _set(
                self,
                "highest_tier_allowed",
                _int(
                    self.highest_tier_allowed,
                    kind="network_topology",
                    name="",
                    field="highest_tier_allowed",
                    minimum=1,
                ),
            )
        for key in ("slice_size", "slice_tier"):
            value = _int(getattr(self, key), kind="network_topology", name="", field=key, minimum=0)
            _set(self, key, value)
        if self.slice_tier and not self.slice_size:
            raise SnapshotError(
                "slice_tier without slice_size", kind="network_topology", field="slice_tier"
            )
        top = self.highest_tier_allowed
        if self.slice_size and top is not None and self.slice_tier > top:
            raise SnapshotError(
                f"slice tier {self.slice_tier} is above the highest tier allowed ({top})",
                kind="network_topology",
                field="slice_tier",
            )

    @property
    def required_tier(self) -> int | None:
        """Kueue's required tier: ``highest_tier_allowed`` of a hard topology."""
        return self.highest_tier_allowed if self.mode is TopologyMode.HARD else None

    @property
    def preferred_tier(self) -> int | None:
        """Kueue's preferred tier: ``highest_tier_allowed`` of a soft topology."""
        return self.highest_tier_allowed if self.mode is TopologyMode.SOFT else None

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"mode": self.mode.value}
        if self.highest_tier_allowed is not None:
            out["highest_tier_allowed"] = self.highest_tier_allowed
        if self.slice_size:
            out["slice_size"] = self.slice_size
            out["slice_tier"] = self.slice_tier
        return out


POLICY_EVENTS = (
    "PodEvicted",
    "PodFailed",
    "PodPending",
    "PodRunning",
    "TaskCompleted",
    "TaskFailed",
    "Unknown",
    "*",
)
POLICY_ACTIONS = (
    "RestartJob",
    "AbortJob",
    "CompleteJob",
    "TerminateJob",
    "RestartTask",
    "RestartPod",
    "ResumeJob",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class JobPolicy:
    event: str
    action: str

    def validate(self, *, kind: str, name: str, field: str) -> None:
        if self.event not in POLICY_EVENTS:
            raise SnapshotError(
                f"unknown policy event {self.event!r}", kind=kind, name=name, field=f"{field}.event"
            )
        if self.action not in POLICY_ACTIONS:
            raise SnapshotError(
                f"unknown policy action {self.action!r}",
                kind=kind,
                name=name,
                field=f"{field}.action",
            )

    def to_dict(self) -> dict[str, str]:
        return {"event": self.event, "action": self.action}


@dataclass(frozen=True, slots=True, kw_only=True)
class Job:
    """A gang (Volcano's PodGroup).

    ``min_available`` tasks must be placed together or none. It may exceed the number of tasks
    the snapshot lists (as in Volcano, where pods are created later): such a job is simply not
    valid yet, reported with a reason, never an error. ``min_task_member`` sets per-role
    minimums. ``creation`` orders otherwise equal jobs (then the name).

    ``role_policies`` maps a role to its own policies, which take precedence over the job's
    for events raised by tasks of that role. Times are seconds on the caller's clock (the
    core reads none): ``age`` is how long ago the job was submitted; ``walltime`` is how long
    it may still run — its declared limit while it waits, what is left of it once running —
    or ``None`` when not declared.
    """

    name: str
    queue: str = "default"
    min_available: int = 1
    min_task_member: FrozenDict[str, int] = field(default_factory=FrozenDict)
    priority: int = 0
    preemptable: bool = True
    phase: JobPhase = JobPhase.PENDING
    min_resources: Resources | None = None
    network_topology: NetworkTopology | None = None
    policies: tuple[JobPolicy, ...] = ()
    creation: int = 0
    role_policies: FrozenDict[str, tuple[JobPolicy, ...]] = field(default_factory=FrozenDict)
    age: int = 0
    walltime: int | None = None
    #: Seconds: the job may make preempt or reclaim evict only once ``age`` reaches it.
    preemption_delay: int = 0

    def __post_init__(self) -> None:
        name = _check_name(self.name, "job")
        _str(self.queue, kind="job", name=name, field="queue")
        _set(
            self,
            "min_available",
            _int(self.min_available, kind="job", name=name, field="min_available", minimum=0),
        )
        if not isinstance(self.min_task_member, Mapping):
            raise SnapshotError(
                "expected a mapping of role to count",
                kind="job",
                name=name,
                field="min_task_member",
            )
        members: dict[str, int] = {}
        for role, n in self.min_task_member.items():
            _str(role, kind="job", name=name, field="min_task_member")
            members[role] = _int(
                n, kind="job", name=name, field=f"min_task_member.{role}", minimum=0
            )
        _set(self, "min_task_member", FrozenDict(members))
        _set(self, "priority", _int(self.priority, kind="job", name=name, field="priority"))
        _bool(self.preemptable, kind="job", name=name, field="preemptable")
        _set(self, "phase", _enum(JobPhase, self.phase, kind="job", name=name, field="phase"))
        if self.min_resources is not None:
            _set(
                self,
                "min_resources",
                Resources.parse(self.min_resources, kind="job", name=name, field="min_resources"),
            )
        if self.network_topology is not None and not isinstance(
            self.network_topology, NetworkTopology
        ):
            raise SnapshotError(
                "expected NetworkTopology", kind="job", name=name, field="network_topology"
            )
        nt = self.network_topology
        if nt is not None and nt.slice_size and self.min_available % nt.slice_size:
            raise SnapshotError(
                f"min_available {self.min_available} is not a multiple of the slice size "
                f"{nt.slice_size}",
                kind="job",
                name=name,
                field="network_topology.slice_size",
            )
        policies = tuple(_seq(self.policies, kind="job", name=name, field="policies"))
        for i, p in enumerate(policies):
            if not isinstance(p, JobPolicy):
                raise SnapshotError(
                    "expected a JobPolicy", kind="job", name=name, field=f"policies[{i}]"
                )
            p.validate(kind="job", name=name, field=f"policies[{i}]")
        _set(self, "policies", policies)
        _set(
            self,
            "creation",
            _int(self.creation, kind="job", name=name, field="creation", minimum=0),
        )
        if not isinstance(self.role_policies, Mapping):
            raise SnapshotError(
                "expected a mapping of role to policies",
                kind="job",
                name=name,
                field="role_policies",
            )
        by_role: dict[str, tuple[JobPolicy, ...]] = {}
        for role, items in self.role_policies.items():
            _str(role, kind="job", name=name, field="role_policies")
            where = f"role_policies.{role}"
            checked = tuple(_seq(items, kind="job", name=name, field=where))
            for i, p in enumerate(checked):
                if not isinstance(p, JobPolicy):
                    raise SnapshotError(
                        "expected a JobPolicy", kind="job", name=name, field=f"{where}[{i}]"
                    )
                p.validate(kind="job", name=name, field=f"{where}[{i}]")
            by_role[role] = checked
        _set(self, "role_policies", FrozenDict(by_role))
        _set(self, "age", _int(self.age, kind="job", name=name, field="age", minimum=0))
        _set(
            self,
            "preemption_delay",
            _int(self.preemption_delay, kind="job", name=name, field="preemption_delay", minimum=0),
        )
        if self.walltime is not None:
            _set(
                self,
                "walltime",
                _int(self.walltime, kind="job", name=name, field="walltime", minimum=0),
            )

    @classmethod
    def from_dict(cls, d: object, *, where: str = "") -> Job:
        m = _mapping(d, kind="job", name=where)
        name = _check_name(m.get("name"), "job", where)
        _check_keys(m, _JOB_KEYS, kind="job", name=name)
        topo = None
        if m.get("network_topology") is not None:
            t = _mapping(m["network_topology"], kind="job", name=name, field="network_topology")
            _check_keys(
                t,
                _TOPOLOGY_KEYS,
                kind="job",
                name=name,
                field="network_topology",
            )
            try:
                topo = _network_topology_from(t)
            except SnapshotError as exc:
                raise SnapshotError(
                    exc.detail, kind="job", name=name, field=f"network_topology.{exc.field}"
                ) from None
        policies = []
        for i, p in enumerate(_seq(m.get("policies"), kind="job", name=name, field="policies")):
            pm = _mapping(p, kind="job", name=name, field=f"policies[{i}]")
            _check_keys(
                pm, frozenset({"event", "action"}), kind="job", name=name, field=f"policies[{i}]"
            )
            policies.append(
                JobPolicy(
                    event=_str(
                        pm.get("event"), kind="job", name=name, field=f"policies[{i}].event"
                    ),
                    action=_str(
                        pm.get("action"), kind="job", name=name, field=f"policies[{i}].action"
                    ),
                )
            )
        role_policies: dict[str, tuple[JobPolicy, ...]] = {}
        rp = _mapping(
            _or_empty(m.get("role_policies")), kind="job", name=name, field="role_policies"
        )
        for role, items in rp.items():
            where_r = f"role_policies.{role}"
            role_policies[role] = tuple(
                _policy_from(p, name=name, field=f"{where_r}[{i}]")
                for i, p in enumerate(_seq(items, kind="job", name=name, field=where_r))
            )
        mtm = m.get("min_task_member")
        if mtm is not None and not isinstance(mtm, Mapping):
            raise SnapshotError(
                "expected a mapping of role to count",
                kind="job",
                name=name,
                field="min_task_member",
            )
        return cls(
            name=name,
            queue=m.get("queue", "default"),
            min_available=m.get("min_available", 1),
            min_task_member=FrozenDict(mtm or {}),
            priority=m.get("priority", 0),
            preemptable=m.get("preemptable", True),
            phase=m.get("phase", "Pending"),
            min_resources=m.get("min_resources"),
            network_topology=topo,
            policies=tuple(policies),
            creation=m.get("creation", 0),
            role_policies=FrozenDict(role_policies),
            age=m.get("age", 0),
            walltime=m.get("walltime"),
            preemption_delay=m.get("preemption_delay", 0),
        )

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "name": self.name,
            "queue": self.queue,
            "min_available": self.min_available,
        }
        if self.min_task_member:
            out["min_task_member"] = dict(self.min_task_member)
        out.update(priority=self.priority, preemptable=self.preemptable, phase=self.phase.value)
        if self.min_resources is not None:
            out["min_resources"] = self.min_resources.to_dict()
        if self.network_topology is not None:
            out["network_topology"] = self.network_topology.to_dict()
        if self.policies:
            out["policies"] = [p.to_dict() for p in self.policies]
        out["creation"] = self.creation
        if self.role_policies:
            out["role_policies"] = {
                role: [p.to_dict() for p in items] for role, items in self.role_policies.items()
            }
        if self.age:
            out["age"] = self.age
        if self.walltime is not None:
            out["walltime"] = self.walltime
        if self.preemption_delay:
            out["preemption_delay"] = self.preemption_delay
        return out


_TOPOLOGY_KEYS = frozenset(
    {"mode", "highest_tier_allowed", "slice_size", "slice_tier", "required_tier", "preferred_tier"}
)


def _network_topology_from(t: Mapping[str, object]) -> NetworkTopology:
    """``network_topology`` from plain data: Volcano's ``mode`` / ``highest_tier_allowed``, or
    Kueue's ``required_tier`` / ``preferred_tier`` (one of the three ways), and the slice."""
    kueue = [k for k in ("required_tier", "preferred_tier") if t.get(k) is not None]
    volcano = [k for k in ("mode", "highest_tier_allowed") if t.get(k) is not None]
    if len(kueue) > 1 or (kueue and volcano):
        raise SnapshotError(
            f"give either mode/highest_tier_allowed or one of required_tier/preferred_tier, "
            f"not {' and '.join(kueue + volcano)}",
            kind="network_topology",
            field=kueue[-1],
        )
    slices: dict[str, Any] = {k: t[k] for k in ("slice_size", "slice_tier") if t.get(k) is not None}
    if kueue:
        mode = TopologyMode.HARD if kueue[0] == "required_tier" else TopologyMode.SOFT
        return NetworkTopology(mode=mode, highest_tier_allowed=t[kueue[0]], **slices)  # type: ignore[arg-type]
    return NetworkTopology(
        mode=t.get("mode", "hard"),  # type: ignore[arg-type]
        highest_tier_allowed=t.get("highest_tier_allowed"),  # type: ignore[arg-type]
        **slices,
    )


_JOB_KEYS = frozenset(
    {
        "name",
        "queue",
        "min_available",
        "min_task_member",
        "priority",
        "preemptable",
        "phase",
        "min_resources",
        "network_topology",
        "policies",
        "creation",
        "role_policies",
        "age",
        "walltime",
        "preemption_delay",
    }
)


def _policy_from(p: object, *, name: str, field: str) -> JobPolicy:
    pm = _mapping(p, kind="job", name=name, field=field)
    _check_keys(pm, frozenset({"event", "action"}), kind="job", name=name, field=field)
    return JobPolicy(
        event=_str(pm.get("event"), kind="job", name=name, field=f"{field}.event"),
        action=_str(pm.get("action"), kind="job", name=name, field=f"{field}.action"),
    )


# --------------------------------------------------------------------------------------------
# Tasks


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuRequest:
    """``count`` devices with ``milli`` milli-GPU on each; ``models`` restricts the GPU model
    (empty = any)."""

    count: int = 0
    milli: int = 1000
    models: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _set(self, "count", _int(self.count, kind="gpu_request", name="", field="count", minimum=0))
        _set(self, "milli", _int(self.milli, kind="gpu_request", name="", field="milli", minimum=1))
        if self.count > MAX_GPUS_PER_NODE:
            raise SnapshotError(
                f"{self.count} devices: a task's devices sit on one node, which carries at most "
                f"{MAX_GPUS_PER_NODE}",
                kind="gpu_request",
                name="",
                field="count",
            )
        if self.count * self.milli > MAX_QUANTITY:
            raise SnapshotError(
                f"{self.count} devices of {self.milli} milli-GPU is beyond the supported "
                f"2**53 = {MAX_QUANTITY} milli-GPU",
                kind="gpu_request",
                name="",
                field="milli",
            )
        _set(self, "models", _str_tuple(self.models, kind="gpu_request", name="", field="models"))

    @property
    def total_milli(self) -> int:
        return self.count * self.milli

    @property
    def fractional(self) -> bool:
        return self.milli < 1000

    def to_dict(self) -> dict[str, object]:
        return {"count": self.count, "milli": self.milli, "models": list(self.models)}


@dataclass(frozen=True, slots=True, kw_only=True)
class Task:
    """A pod. ``request`` excludes GPUs (they are ``gpu_request``). A task in phase Bound,
    Running, Releasing or Pipelined names its ``node`` (and its ``gpu_indices``, if it uses
    GPUs)."""

    name: str
    job: str
    role: str = ""
    request: Resources = field(default_factory=Resources)
    gpu_request: GpuRequest | None = None
    phase: TaskPhase = TaskPhase.PENDING
    node: str | None = None
    gpu_indices: tuple[int, ...] = ()
    priority: int = 0
    preemptable: bool = True
    node_selector: FrozenDict[str, str] = field(default_factory=FrozenDict)
    tolerations: tuple[Toleration, ...] = ()
    #: ``"PreemptLowerPriority"`` or ``"Never"`` (Kubernetes' ``preemptionPolicy``): a Never
    #: task keeps its priority for ordering but never makes preempt or reclaim evict.
    preemption_policy: str = "PreemptLowerPriority"

    def __post_init__(self) -> None:
        name = _check_name(self.name, "task")
        _str(self.job, kind="task", name=name, field="job")
        _str(self.role, kind="task", name=name, field="role")
        req = Resources.parse(self.request, kind="task", name=name, field="request")
        gpu = self.gpu_request
        if gpu is not None and not isinstance(gpu, GpuRequest):
            raise SnapshotError("expected GpuRequest", kind="task", name=name, field="gpu_request")
        if GPU in req:
            devices, rest = divmod(req[GPU], 1000)
            if rest:
                raise SnapshotError(
                    "a GPU request in devices must be whole (use gpu_request.milli for a share)",
                    kind="task",
                    name=name,
                    field=f"request.{GPU}",
                )
            if gpu is not None and gpu.count != devices:
                raise SnapshotError(
                    f"request says {devices} GPUs but gpu_request.count is {gpu.count}",
                    kind="task",
                    name=name,
                    field=f"request.{GPU}",
                )
            if gpu is None:
                try:
                    gpu = GpuRequest(count=devices)
                except SnapshotError as exc:
                    raise SnapshotError(
                        exc.detail, kind="task", name=name, field=f"request.{GPU}"
                    ) from None
            req = Resources({k: v for k, v in req.items() if k != GPU})
        if gpu is not None and gpu.count == 0:
            gpu = None
        # count > 1 with a fractional milli is several shares of distinct devices: allowed.
        _set(self, "request", req)
        _set(self, "gpu_request", gpu)
        _set(self, "phase", _enum(TaskPhase, self.phase, kind="task", name=name, field="phase"))
        _str(self.node, kind="task", name=name, field="node", optional=True)
        indices = tuple(
            _int(idx, kind="task", name=name, field=f"gpu_indices[{i}]", minimum=0)
            for i, idx in enumerate(
                _seq(self.gpu_indices, kind="task", name=name, field="gpu_indices")
            )
        )
        if len(set(indices)) != len(indices):
            raise SnapshotError(
                f"repeated GPU index in {list(indices)}",
                kind="task",
                name=name,
                field="gpu_indices",
            )
        _set(self, "gpu_indices", indices)
        n_devices = gpu.count if gpu is not None else 0
        if self.phase in NODE_PHASES:
            if self.node is None:
                raise SnapshotError(
                    f"a {self.phase.value} task must name its node",
                    kind="task",
                    name=name,
                    field="node",
                )
            if len(indices) != n_devices:
                raise SnapshotError(
                    f"{len(indices)} GPU indices for a request of {n_devices} devices",
                    kind="task",
                    name=name,
                    field="gpu_indices",
                )
        elif indices and len(indices) != n_devices:
            raise SnapshotError(
                f"{len(indices)} GPU indices for a request of {n_devices} devices",
                kind="task",
                name=name,
                field="gpu_indices",
            )
        _set(self, "priority", _int(self.priority, kind="task", name=name, field="priority"))
        _bool(self.preemptable, kind="task", name=name, field="preemptable")
        _set(
            self,
            "node_selector",
            _str_map(self.node_selector, kind="task", name=name, field="node_selector"),
        )
        tols = tuple(_seq(self.tolerations, kind="task", name=name, field="tolerations"))
        for i, tol in enumerate(tols):
            if not isinstance(tol, Toleration):
                raise SnapshotError(
                    "expected a Toleration", kind="task", name=name, field=f"tolerations[{i}]"
                )
            tol.validate(kind="task", name=name, field=f"tolerations[{i}]")
        _set(self, "tolerations", tols)
        if self.preemption_policy not in PREEMPTION_POLICIES:
            raise SnapshotError(
                f"unknown preemption policy {self.preemption_policy!r} (expected one of "
                f"{', '.join(repr(p) for p in PREEMPTION_POLICIES)})",
                kind="task",
                name=name,
                field="preemption_policy",
            )

    @property
    def best_effort(self) -> bool:
        """No resource request at all (Volcano's BestEffort): handled by backfill."""
        return self.gpu_request is None and not any(
            v > 0 for k, v in self.request.items() if k != PODS
        )

    @classmethod
    def from_dict(cls, d: object, *, where: str = "") -> Task:
        m = _mapping(d, kind="task", name=where)
        name = _check_name(m.get("name"), "task", where)
        _check_keys(m, _TASK_KEYS, kind="task", name=name)
        if "job" not in m:
            raise SnapshotError("missing", kind="task", name=name, field="job")
        gpu = None
        if m.get("gpu_request") is not None:
            g = _mapping(m["gpu_request"], kind="task", name=name, field="gpu_request")
            _check_keys(
                g,
                frozenset({"count", "milli", "models"}),
                kind="task",
                name=name,
                field="gpu_request",
            )
            try:
                gpu = GpuRequest(
                    count=g.get("count", 1), milli=g.get("milli", 1000), models=g.get("models", ())
                )
            except SnapshotError as exc:
                raise SnapshotError(
                    exc.detail, kind="task", name=name, field=f"gpu_request.{exc.field}"
                ) from None
        tols = []
        for i, t in enumerate(
            _seq(m.get("tolerations"), kind="task", name=name, field="tolerations")
        ):
            tm = _mapping(t, kind="task", name=name, field=f"tolerations[{i}]")
            _check_keys(
                tm,
                frozenset({"key", "operator", "value", "effect"}),
                kind="task",
                name=name,
                field=f"tolerations[{i}]",
            )
            tols.append(
                Toleration(
                    key=tm.get("key", ""),
                    operator=tm.get("operator", "Equal"),
                    value=tm.get("value", ""),
                    effect=tm.get("effect", ""),
                )
            )
        return cls(
            name=name,
            job=m["job"],
            role=m.get("role", ""),
            request=Resources.parse(m.get("request"), kind="task", name=name, field="request"),
            gpu_request=gpu,
            phase=m.get("phase", "Pending"),
            node=m.get("node"),
            gpu_indices=tuple(
                _seq(m.get("gpu_indices"), kind="task", name=name, field="gpu_indices")
            ),
            priority=m.get("priority", 0),
            preemptable=m.get("preemptable", True),
            node_selector=_or_empty(m.get("node_selector")),
            tolerations=tuple(tols),
            preemption_policy=m.get("preemption_policy", PREEMPT_LOWER_PRIORITY),
        )

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "name": self.name,
            "job": self.job,
            "role": self.role,
            "request": self.request.to_dict(),
        }
        if self.gpu_request is not None:
            out["gpu_request"] = self.gpu_request.to_dict()
        out["phase"] = self.phase.value
        if self.node is not None:
            out["node"] = self.node
        if self.gpu_indices:
            out["gpu_indices"] = list(self.gpu_indices)
        out.update(
            priority=self.priority,
            preemptable=self.preemptable,
            node_selector=dict(self.node_selector),
            tolerations=[t.to_dict() for t in self.tolerations],
        )
        if self.preemption_policy != PREEMPT_LOWER_PRIORITY:
            out["preemption_policy"] = self.preemption_policy
        return out


_TASK_KEYS = frozenset(
    {
        "name",
        "job",
        "role",
        "request",
        "gpu_request",
        "phase",
        "node",
        "gpu_indices",
        "priority",
        "preemptable",
        "node_selector",
        "tolerations",
        "preemption_policy",
    }
)

#: A task's ``preemption_policy`` values (Kubernetes' names); the first is the default.
PREEMPT_LOWER_PRIORITY = "PreemptLowerPriority"
PREEMPT_NEVER = "Never"
PREEMPTION_POLICIES = (PREEMPT_LOWER_PRIORITY, PREEMPT_NEVER)


def quantity(value: object, resource: str) -> int:
    """Shorthand for :func:`gangsched.units.parse_quantity` without object context."""
    return parse_quantity(value, resource)


# --------------------------------------------------------------------------------------------
# Totals over a snapshot


def check_totals(
    nodes: Sequence[Node], queues: Sequence[Queue], jobs: Sequence[Job], tasks: Sequence[Task]
) -> None:
    """Reject records whose amounts add up past :data:`~gangsched.limits.MAX_TOTAL`.

    Per resource, the nodes' allocatable (GPUs: devices × milli), the tasks' requests (GPUs:
    ``gpu_request.count × milli``), the queues' guarantees, the queues' deserved amounts and
    the jobs' min_resources each sum to at most 2**60, as do the queues' weights; so any sum the
    scheduler forms over the cluster, and a few of them added together, stays inside int64.
    The error names the record at which a running total first passes the bound.
    """
    node_gpu = sum(map(_node_gpu, nodes))
    if _over(_distinct(n.allocatable for n in nodes), node_gpu):
        _locate("node", "allocatable", nodes, lambda n: n.allocatable, _node_gpu)
    task_gpu = sum(map(_task_gpu, tasks))
    if _over(_distinct(t.request for t in tasks), task_gpu):
        _locate("task", "request", tasks, lambda t: t.request, _task_gpu)
    if _over(_distinct(q.guarantee for q in queues), 0):
        _locate("queue", "guarantee", queues, lambda q: q.guarantee, _no_gpu)
    if _over(_distinct(q.deserved for q in queues), 0):
        _locate("queue", "deserved", queues, lambda q: q.deserved, _no_gpu)
    if _over(_distinct(j.min_resources for j in jobs), 0):
        _locate("job", "min_resources", jobs, lambda j: j.min_resources, _no_gpu)
    weights = 0
    for q in queues:
        weights += q.weight
        if weights > MAX_TOTAL:
            raise SnapshotError(
                f"the queues' weights add up past 2**60 = {MAX_TOTAL} at this queue",
                kind="queue",
                name=q.name,
                field="weight",
            )


V = TypeVar("V")


def _distinct(values: Iterable[V]) -> list[tuple[V, int]]:
    """Each distinct object of ``values`` (by identity) and how often it occurs: records of one
    shape share one interned mapping, so each mapping is summed once."""
    items = list(values)
    counts = Counter(map(id, items))
    first = dict(zip(map(id, items), items, strict=True))
    return [(first[key], times) for key, times in counts.items()]


def _over(groups: list[tuple[Resources | None, int]], gpu: int) -> bool:
    totals: dict[str, int] = {}
    for amounts, times in groups:
        for res, value in (amounts or {}).items():
            totals[res] = totals.get(res, 0) + value * times
    return gpu > MAX_TOTAL or any(v > MAX_TOTAL for v in totals.values())


def _node_gpu(node: Node) -> int:
    return node.gpus.count * node.gpus.milli if node.gpus else 0


def _task_gpu(task: Task) -> int:
    return task.gpu_request.total_milli if task.gpu_request else 0


def _no_gpu(record: object) -> int:
    return 0


def _locate(
    kind: str,
    field: str,
    records: Sequence[Any],
    amounts: Callable[[Any], Resources | None],
    gpu: Callable[[Any], int],
) -> None:
    """Raise at the record where a running total of ``field`` first passes the bound."""
    running: dict[str, int] = {}
    gpu_running = 0
    for rec in records:
        for res, value in (amounts(rec) or {}).items():
            running[res] = running.get(res, 0) + value
            if running[res] > MAX_TOTAL:
                raise SnapshotError(
                    f"the {kind}s' {field} {res} adds up past 2**60 = {MAX_TOTAL} "
                    f"{canonical_unit(res)} at this {kind}",
                    kind=kind,
                    name=rec.name,
                    field=f"{field}.{res}",
                )
        gpu_running += gpu(rec)
        if gpu_running > MAX_TOTAL:
            where = "gpus" if kind == "node" else "gpu_request"
            raise SnapshotError(
                f"the {kind}s' GPUs add up past 2**60 = {MAX_TOTAL} milli-GPU at this {kind}",
                kind=kind,
                name=rec.name,
                field=where,
            )


# --------------------------------------------------------------------------------------------
# Disruption budgets


def _budget_amount(value: object, *, name: str, field: str) -> int | str | None:
    """A budget amount: a count (int >= 0) or a percentage ``"N%"`` with 0 <= N <= 100."""
    if value is None:
        return None
    if isinstance(value, str):
        digits = value[:-1]
        ok = value.endswith("%") and digits.isascii() and digits.isdigit()
        if ok and len(digits) <= 3 and int(digits) <= 100:
            return f"{int(digits)}%"
        raise SnapshotError(
            f"expected a count or a percentage such as '50%', got {value!r}",
            kind="disruption_budget",
            name=name,
            field=field,
        )
    return _int(value, kind="disruption_budget", name=name, field=field, minimum=0)


@dataclass(frozen=True, slots=True, kw_only=True)
class DisruptionBudget:
    """A PodDisruptionBudget: the tasks it covers (every task of the ``jobs`` named, and the
    ``tasks`` named) and either ``min_available`` or ``max_unavailable``, each a count or a
    percentage ``"N%"`` of the covered tasks that have not finished (rounded up, as
    Kubernetes does). :mod:`gangsched.disruption` counts evictions against it."""

    name: str
    jobs: tuple[str, ...] = ()
    tasks: tuple[str, ...] = ()
    min_available: int | str | None = None
    max_unavailable: int | str | None = None

    def __post_init__(self) -> None:
        name = _check_name(self.name, "disruption_budget")
        for attr in ("jobs", "tasks"):
            value = _str_tuple(getattr(self, attr), kind="disruption_budget", name=name, field=attr)
            _set(self, attr, value)
        for attr in ("min_available", "max_unavailable"):
            _set(self, attr, _budget_amount(getattr(self, attr), name=name, field=attr))
        if (self.min_available is None) == (self.max_unavailable is None):
            raise SnapshotError(
                "set exactly one of min_available and max_unavailable",
                kind="disruption_budget",
                name=name,
                field="min_available",
            )

    @classmethod
    def from_dict(cls, d: object, *, where: str = "") -> DisruptionBudget:
        m = _mapping(d, kind="disruption_budget", name=where)
        name = _check_name(m.get("name"), "disruption_budget", where)
        _check_keys(m, _BUDGET_KEYS, kind="disruption_budget", name=name)
        return cls(
            name=name,
            jobs=m.get("jobs", ()),
            tasks=m.get("tasks", ()),
            min_available=m.get("min_available"),
            max_unavailable=m.get("max_unavailable"),
        )

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"name": self.name}
        if self.jobs:
            out["jobs"] = list(self.jobs)
        if self.tasks:
            out["tasks"] = list(self.tasks)
        if self.min_available is not None:
            out["min_available"] = self.min_available
        if self.max_unavailable is not None:
            out["max_unavailable"] = self.max_unavailable
        return out


_BUDGET_KEYS = frozenset({"name", "jobs", "tasks", "min_available", "max_unavailable"})
