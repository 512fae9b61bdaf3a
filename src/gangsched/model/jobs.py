"""Job-side records: network topology, policies, jobs (gangs) and disruption budgets."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from gangsched._frozen import FrozenDict, copied, plain_fields
from gangsched.errors import SnapshotError
from gangsched.model import fields as check
from gangsched.model.affinity import TaskTopology
from gangsched.model.enums import POLICY_ACTIONS, POLICY_EVENTS, JobPhase, TopologyMode
from gangsched.model.fields import ResourceInput, Resources

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
        check.assign(
            self,
            "mode",
            check.member(TopologyMode, self.mode, kind="network_topology", name="", field="mode"),
        )
        if self.highest_tier_allowed is not None:
            check.assign(
                self,
                "highest_tier_allowed",
                check.integer(
                    self.highest_tier_allowed,
                    kind="network_topology",
                    name="",
                    field="highest_tier_allowed",
                    minimum=1,
                ),
            )
        for key in ("slice_size", "slice_tier"):
            value = check.integer(
                getattr(self, key), kind="network_topology", name="", field=key, minimum=0
            )
            check.assign(self, key, value)
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


@dataclass(frozen=True, slots=True, kw_only=True)
class JobPolicy:
    event: str
    action: str

    def validate(self, *, kind: str, name: str, field: str) -> None:
        for attr, allowed in (("event", POLICY_EVENTS), ("action", POLICY_ACTIONS)):
            value = getattr(self, attr)
            check.known(
                value, allowed, f"policy {attr}", kind=kind, name=name, field=f"{field}.{attr}"
            )

    def to_dict(self) -> dict[str, str]:
        return cast("dict[str, str]", plain_fields(self))


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
    #: Volcano's task topology (:class:`~gangsched.model.affinity.TaskTopology`): roles kept
    #: together or apart by the ``task-topology`` plugin.
    task_topology: TaskTopology | None = None

    if TYPE_CHECKING:  # what the constructor accepts; the fields hold the checked values

        def __init__(
            self,
            *,
            name: str,
            queue: str = ...,
            min_available: int = ...,
            min_task_member: Mapping[str, int] = ...,
            priority: int = ...,
            preemptable: bool = ...,
            phase: JobPhase | str = ...,
            min_resources: ResourceInput | None = ...,
            network_topology: NetworkTopology | None = ...,
            policies: Iterable[JobPolicy] = ...,
            creation: int = ...,
            role_policies: Mapping[str, Iterable[JobPolicy]] = ...,
            age: int = ...,
            walltime: int | None = ...,
            preemption_delay: int = ...,
            task_topology: TaskTopology | None = ...,
        ) -> None: ...

    def __post_init__(self) -> None:
        name = check.record_name(self.name, "job")
        check.string(self.queue, kind="job", name=name, field="queue")
        check.assign(
            self,
            "min_available",
            check.integer(
                self.min_available, kind="job", name=name, field="min_available", minimum=0
            ),
        )

        def count(n: object, where: str) -> int:
            return check.integer(n, kind="job", name=name, field=where, minimum=0)

        def policy_list(items: object, where: str) -> tuple[JobPolicy, ...]:
            return check.records(items, JobPolicy, kind="job", name=name, field=where)

        check.assign(
            self, "min_task_member", check.by_role(self, "min_task_member", "count", count)
        )
        check.assign(
            self, "priority", check.integer(self.priority, kind="job", name=name, field="priority")
        )
        check.boolean(self.preemptable, kind="job", name=name, field="preemptable")
        check.assign(
            self, "phase", check.member(JobPhase, self.phase, kind="job", name=name, field="phase")
        )
        if self.min_resources is not None:
            check.assign(
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
        policies = check.records(self.policies, JobPolicy, kind="job", name=name, field="policies")
        check.assign(self, "policies", policies)
        check.assign(
            self,
            "creation",
            check.integer(self.creation, kind="job", name=name, field="creation", minimum=0),
        )
        check.assign(
            self, "role_policies", check.by_role(self, "role_policies", "policies", policy_list)
        )
        check.assign(
            self, "age", check.integer(self.age, kind="job", name=name, field="age", minimum=0)
        )
        check.assign(
            self,
            "preemption_delay",
            check.integer(
                self.preemption_delay, kind="job", name=name, field="preemption_delay", minimum=0
            ),
        )
        if self.walltime is not None:
            check.assign(
                self,
                "walltime",
                check.integer(self.walltime, kind="job", name=name, field="walltime", minimum=0),
            )
        if self.task_topology is not None:
            if not isinstance(self.task_topology, TaskTopology):
                raise SnapshotError(
                    f"expected a TaskTopology, got {type(self.task_topology).__name__}",
                    kind="job",
                    name=name,
                    field="task_topology",
                )
            self.task_topology.check(kind="job", name=name, field="task_topology")

    def in_phase(self, phase: JobPhase | str, *, creation: int | None = None) -> Job:
        """This job in ``phase`` (and with ``creation``, when given): the record
        ``dataclasses.replace`` makes, equal to it field by field, with only those checked
        again (with the same errors) — every other field is this record's, checked when it
        was made. For a simulator that moves many jobs through their phases."""
        new = copied(self)
        name = self.name
        check.assign(
            new, "phase", check.member(JobPhase, phase, kind="job", name=name, field="phase")
        )
        if creation is not None:
            check.assign(
                new,
                "creation",
                check.integer(creation, kind="job", name=name, field="creation", minimum=0),
            )
        return new

    @classmethod
    def from_dict(cls, d: object, *, where: str = "") -> Job:
        m, name = check.record_mapping(d, _JOB_KEYS, kind="job", where=where)
        topo = check.nested(
            m.get("network_topology"),
            _TOPOLOGY_KEYS,
            _network_topology_from,
            kind="job",
            name=name,
            field="network_topology",
        )
        policies = [
            _policy_from(p, name=name, field=f"policies[{i}]")
            for i, p in enumerate(
                check.sequence(m.get("policies"), kind="job", name=name, field="policies")
            )
        ]
        role_policies: dict[str, tuple[JobPolicy, ...]] = {}
        rp = check.mapping(
            check.or_empty(m.get("role_policies")), kind="job", name=name, field="role_policies"
        )
        for role, items in rp.items():
            where_r = f"role_policies.{role}"
            role_policies[role] = tuple(
                _policy_from(p, name=name, field=f"{where_r}[{i}]")
                for i, p in enumerate(check.sequence(items, kind="job", name=name, field=where_r))
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
            task_topology=None
            if m.get("task_topology") is None
            else TaskTopology.from_dict(
                m["task_topology"], kind="job", name=name, field="task_topology"
            ),
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
        if self.task_topology is not None:
            out["task_topology"] = self.task_topology.to_dict()
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
        "task_topology",
    }
)


def _policy_from(p: object, *, name: str, field: str) -> JobPolicy:
    pm = check.mapping(p, kind="job", name=name, field=field)
    check.only_keys(pm, frozenset({"event", "action"}), kind="job", name=name, field=field)
    return JobPolicy(
        event=check.string(pm.get("event"), kind="job", name=name, field=f"{field}.event"),
        action=check.string(pm.get("action"), kind="job", name=name, field=f"{field}.action"),
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
    return check.integer(value, kind="disruption_budget", name=name, field=field, minimum=0)


@dataclass(frozen=True, slots=True, kw_only=True)
class DisruptionBudget:
    """A PodDisruptionBudget: the tasks it covers (every task of the ``jobs`` named, and the
    ``tasks`` named) and either ``min_available`` or ``max_unavailable``, each a count or a
    percentage ``"N%"`` of the covered tasks that have not finished (rounded up, as
    Kubernetes does). :mod:`gangsched.session.rules.disruption` counts evictions against it."""

    name: str
    jobs: tuple[str, ...] = ()
    tasks: tuple[str, ...] = ()
    min_available: int | str | None = None
    max_unavailable: int | str | None = None

    def __post_init__(self) -> None:
        name = check.record_name(self.name, "disruption_budget")
        for attr in ("jobs", "tasks"):
            value = check.str_tuple(
                getattr(self, attr), kind="disruption_budget", name=name, field=attr
            )
            check.assign(self, attr, value)
        for attr in ("min_available", "max_unavailable"):
            check.assign(self, attr, _budget_amount(getattr(self, attr), name=name, field=attr))
        if (self.min_available is None) == (self.max_unavailable is None):
            raise SnapshotError(
                "set exactly one of min_available and max_unavailable",
                kind="disruption_budget",
                name=name,
                field="min_available",
            )

    @classmethod
    def from_dict(cls, d: object, *, where: str = "") -> DisruptionBudget:
        m, name = check.record_mapping(d, _BUDGET_KEYS, kind="disruption_budget", where=where)
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
