"""Task-side records: GPU requests and tasks (pods)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gangsched._frozen import FrozenDict, copied, plain_fields
from gangsched.errors import SnapshotError
from gangsched.limits import MAX_QUANTITY
from gangsched.model import fields as check
from gangsched.model.affinity import NodeAffinity
from gangsched.model.enums import (
    MAX_GPUS_PER_NODE,
    NODE_PHASES,
    PREEMPT_LOWER_PRIORITY,
    PREEMPTION_POLICIES,
    TaskPhase,
)
from gangsched.model.fields import ResourceInput, Resources
from gangsched.model.nodes import Toleration
from gangsched.model.pod_affinity import ROLE_LABEL, PodAffinity, TopologySpreadConstraint
from gangsched.units import PODS, parse_quantity

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
        check.assign(
            self,
            "count",
            check.integer(self.count, kind="gpu_request", name="", field="count", minimum=0),
        )
        check.assign(
            self,
            "milli",
            check.integer(self.milli, kind="gpu_request", name="", field="milli", minimum=1),
        )
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
        check.assign(
            self,
            "models",
            check.str_tuple(self.models, kind="gpu_request", name="", field="models"),
        )

    @property
    def total_milli(self) -> int:
        return self.count * self.milli

    @property
    def fractional(self) -> bool:
        return self.milli < 1000

    def to_dict(self) -> dict[str, object]:
        return plain_fields(self)


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
    #: Kubernetes' ``affinity.nodeAffinity`` (:mod:`gangsched.model.affinity`): required terms
    #: filter nodes (the ``predicates`` plugin), preferred terms score them (``nodeorder``).
    node_affinity: NodeAffinity | None = None
    #: The pod's labels (what other pods' selectors read) and namespace.
    labels: FrozenDict[str, str] = field(default_factory=FrozenDict)
    namespace: str = "default"
    #: Kubernetes' ``affinity.podAffinity`` / ``podAntiAffinity`` and
    #: ``topologySpreadConstraints`` (:mod:`gangsched.model.pod_affinity`).
    pod_affinity: PodAffinity | None = None
    pod_anti_affinity: PodAffinity | None = None
    topology_spread: tuple[TopologySpreadConstraint, ...] = ()

    if TYPE_CHECKING:  # what the constructor accepts; the fields hold the checked values

        def __init__(
            self,
            *,
            name: str,
            job: str,
            role: str = ...,
            request: ResourceInput = ...,
            gpu_request: GpuRequest | None = ...,
            phase: TaskPhase | str = ...,
            node: str | None = ...,
            gpu_indices: Iterable[int] = ...,
            priority: int = ...,
            preemptable: bool = ...,
            node_selector: Mapping[str, str] = ...,
            tolerations: Iterable[Toleration] = ...,
            preemption_policy: str = ...,
            node_affinity: NodeAffinity | None = ...,
            labels: Mapping[str, str] = ...,
            namespace: str = ...,
            pod_affinity: PodAffinity | None = ...,
            pod_anti_affinity: PodAffinity | None = ...,
            topology_spread: Iterable[TopologySpreadConstraint] = ...,
        ) -> None: ...

    def __post_init__(self) -> None:
        name = check.record_name(self.name, "task")
        check.string(self.job, kind="task", name=name, field="job")
        check.string(self.role, kind="task", name=name, field="role")
        req = Resources.parse(self.request, kind="task", name=name, field="request")
        req, gpu = check.split_devices(
            req,
            self.gpu_request,
            GpuRequest,
            lambda n: GpuRequest(count=n),
            noun="gpu_request",
            whole="a GPU request in devices must be whole (use gpu_request.milli for a share)",
            kind="task",
            name=name,
            field="request",
        )
        if gpu is not None and gpu.count == 0:
            gpu = None
        # count > 1 with a fractional milli is several shares of distinct devices: allowed.
        check.assign(self, "request", req)
        check.assign(self, "gpu_request", gpu)
        self._check_placement(name)
        check.assign(
            self, "priority", check.integer(self.priority, kind="task", name=name, field="priority")
        )
        check.boolean(self.preemptable, kind="task", name=name, field="preemptable")
        check.assign(
            self,
            "node_selector",
            check.str_map(self.node_selector, kind="task", name=name, field="node_selector"),
        )
        tols = check.records(
            self.tolerations, Toleration, kind="task", name=name, field="tolerations"
        )
        check.assign(self, "tolerations", tols)
        if self.preemption_policy not in PREEMPTION_POLICIES:
            raise SnapshotError(
                f"unknown preemption policy {self.preemption_policy!r} (expected one of "
                f"{', '.join(repr(p) for p in PREEMPTION_POLICIES)})",
                kind="task",
                name=name,
                field="preemption_policy",
            )
        if self.node_affinity is not None:
            if not isinstance(self.node_affinity, NodeAffinity):
                raise SnapshotError(
                    f"expected a NodeAffinity, got {type(self.node_affinity).__name__}",
                    kind="task",
                    name=name,
                    field="node_affinity",
                )
            self.node_affinity.check(kind="task", name=name, field="node_affinity")
        check.assign(
            self, "labels", check.str_map(self.labels, kind="task", name=name, field="labels")
        )
        if not isinstance(self.namespace, str) or not self.namespace:
            raise SnapshotError(
                f"expected a non-empty namespace, got {self.namespace!r}",
                kind="task",
                name=name,
                field="namespace",
            )
        for attr in ("pod_affinity", "pod_anti_affinity"):
            value = getattr(self, attr)
            if value is None:
                continue
            if not isinstance(value, PodAffinity):
                raise SnapshotError(
                    f"expected a PodAffinity, got {type(value).__name__}",
                    kind="task",
                    name=name,
                    field=attr,
                )
            value.check(kind="task", name=name, field=attr)
        spread = self.topology_spread
        if isinstance(spread, list):
            spread = tuple(spread)
            check.assign(self, "topology_spread", spread)
        if not isinstance(spread, tuple):
            raise SnapshotError(
                "expected a list of topology spread constraints",
                kind="task",
                name=name,
                field="topology_spread",
            )
        for i, c in enumerate(spread):
            if not isinstance(c, TopologySpreadConstraint):
                raise SnapshotError(
                    f"expected a TopologySpreadConstraint, got {type(c).__name__}",
                    kind="task",
                    name=name,
                    field=f"topology_spread[{i}]",
                )
            c.check(kind="task", name=name, field=f"topology_spread[{i}]")

    def _check_placement(self, name: str) -> None:
        """Check (and normalise) the phase, node and GPU indices against the GPU request."""
        check.assign(
            self,
            "phase",
            check.member(TaskPhase, self.phase, kind="task", name=name, field="phase"),
        )
        check.string(self.node, kind="task", name=name, field="node", optional=True)
        indices = tuple(
            check.integer(idx, kind="task", name=name, field=f"gpu_indices[{i}]", minimum=0)
            for i, idx in enumerate(
                check.sequence(self.gpu_indices, kind="task", name=name, field="gpu_indices")
            )
        )
        if len(set(indices)) != len(indices):
            raise SnapshotError(
                f"repeated GPU index in {list(indices)}",
                kind="task",
                name=name,
                field="gpu_indices",
            )
        check.assign(self, "gpu_indices", indices)
        gpu = self.gpu_request
        n_devices = gpu.count if gpu is not None else 0
        placed = self.phase in NODE_PHASES
        if placed and self.node is None:
            raise SnapshotError(
                f"a {self.phase.value} task must name its node",
                kind="task",
                name=name,
                field="node",
            )
        if (placed or indices) and len(indices) != n_devices:
            raise SnapshotError(
                f"{len(indices)} GPU indices for a request of {n_devices} devices",
                kind="task",
                name=name,
                field="gpu_indices",
            )

    def placed(
        self, phase: TaskPhase | str, node: str | None, gpu_indices: Iterable[int] = ()
    ) -> Task:
        """This task in ``phase`` on ``node`` and its ``gpu_indices``: the record
        ``dataclasses.replace(self, phase=..., node=..., gpu_indices=...)`` makes, equal to
        it field by field, with only those three checked again (with the same errors) —
        every other field is this record's, checked when it was made. For a simulator or a
        binder that moves many tasks through their phases."""
        new = copied(self)
        object.__setattr__(new, "phase", phase)
        object.__setattr__(new, "node", node)
        object.__setattr__(new, "gpu_indices", gpu_indices)
        new._check_placement(self.name)
        return new

    @property
    def pod_labels(self) -> Mapping[str, str]:
        """The labels selectors see: ``labels`` and the role as ``volcano.sh/task-spec``."""
        if not self.role:
            return self.labels
        return {**self.labels, ROLE_LABEL: self.role}

    @property
    def pod_constrained(self) -> bool:
        """Whether the task carries pod affinity, anti-affinity or spread constraints."""
        return (
            self.pod_affinity is not None
            or self.pod_anti_affinity is not None
            or bool(self.topology_spread)
        )

    @property
    def best_effort(self) -> bool:
        """No resource request at all (Volcano's BestEffort): handled by backfill."""
        return self.gpu_request is None and not any(
            v > 0 for k, v in self.request.items() if k != PODS
        )

    @classmethod
    def from_dict(cls, d: object, *, where: str = "") -> Task:
        m, name = check.record_mapping(d, _TASK_KEYS, kind="task", where=where)
        if "job" not in m:
            raise SnapshotError("missing", kind="task", name=name, field="job")
        gpu = check.nested(
            m.get("gpu_request"),
            frozenset({"count", "milli", "models"}),
            lambda g: GpuRequest(
                count=g.get("count", 1), milli=g.get("milli", 1000), models=g.get("models", ())
            ),
            kind="task",
            name=name,
            field="gpu_request",
        )
        tols = [
            Toleration(
                key=tm.get("key", ""),
                operator=tm.get("operator", "Equal"),
                value=tm.get("value", ""),
                effect=tm.get("effect", ""),
            )
            for tm in check.sub_mappings(
                m.get("tolerations"),
                frozenset({"key", "operator", "value", "effect"}),
                kind="task",
                name=name,
                field="tolerations",
            )
        ]
        return cls(
            name=name,
            job=m["job"],
            role=m.get("role", ""),
            request=Resources.parse(m.get("request"), kind="task", name=name, field="request"),
            gpu_request=gpu,
            phase=m.get("phase", "Pending"),
            node=m.get("node"),
            gpu_indices=tuple(
                check.sequence(m.get("gpu_indices"), kind="task", name=name, field="gpu_indices")
            ),
            priority=m.get("priority", 0),
            preemptable=m.get("preemptable", True),
            node_selector=check.or_empty(m.get("node_selector")),
            tolerations=tuple(tols),
            preemption_policy=m.get("preemption_policy", PREEMPT_LOWER_PRIORITY),
            node_affinity=None
            if m.get("node_affinity") is None
            else NodeAffinity.from_dict(
                m["node_affinity"], kind="task", name=name, field="node_affinity"
            ),
            labels=check.or_empty(m.get("labels")),
            namespace=m.get("namespace", "default"),
            pod_affinity=_pod_affinity(m, name, "pod_affinity"),
            pod_anti_affinity=_pod_affinity(m, name, "pod_anti_affinity"),
            topology_spread=tuple(
                TopologySpreadConstraint.from_dict(
                    c, kind="task", name=name, field=f"topology_spread[{i}]"
                )
                for i, c in enumerate(
                    check.sequence(
                        m.get("topology_spread") or (),
                        kind="task",
                        name=name,
                        field="topology_spread",
                    )
                )
            ),
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
        if self.node_affinity is not None:
            out["node_affinity"] = self.node_affinity.to_dict()
        if self.labels:
            out["labels"] = dict(self.labels)
        if self.namespace != "default":
            out["namespace"] = self.namespace
        if self.pod_affinity is not None:
            out["pod_affinity"] = self.pod_affinity.to_dict()
        if self.pod_anti_affinity is not None:
            out["pod_anti_affinity"] = self.pod_anti_affinity.to_dict()
        if self.topology_spread:
            out["topology_spread"] = [c.to_dict() for c in self.topology_spread]
        return out


def _pod_affinity(m: Mapping[str, object], name: str, key: str) -> PodAffinity | None:
    value = m.get(key)
    return (
        None if value is None else PodAffinity.from_dict(value, kind="task", name=name, field=key)
    )


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
        "node_affinity",
        "labels",
        "namespace",
        "pod_affinity",
        "pod_anti_affinity",
        "topology_spread",
    }
)


def quantity(value: object, resource: str) -> int:
    """Shorthand for :func:`gangsched.units.parse_quantity` without object context."""
    return parse_quantity(value, resource)
