"""Strategies for single records: quantities, nodes and hypernode trees, queues, jobs, tasks
and gangs (see :mod:`gangsched.testing.strategies`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction

from hypothesis import strategies as st

from gangsched.model import (
    PREEMPT_LOWER_PRIORITY,
    PREEMPT_NEVER,
    GpuRequest,
    Gpus,
    HyperNode,
    Job,
    JobPhase,
    NetworkTopology,
    Node,
    Queue,
    QueueState,
    Resources,
    Taint,
    Task,
    Toleration,
    TopologyMode,
)
from gangsched.units import CPU, GPU, MEMORY, PODS, canonical_scale, is_byte_resource

Quantity = str | int | float

GPU_MODELS: tuple[str, ...] = ("A100", "H100", "V100")
ZONES: tuple[str, ...] = ("zone-a", "zone-b")
#: A counted extended resource some nodes offer and some tasks ask for.
EXTENDED_RESOURCE = "example.com/nic"

_ZONE_LABEL = "topology.kubernetes.io/zone"
_MODEL_LABEL = "nvidia.com/gpu.product"
_TAINT_KEY = "dedicated"
_TAINT_VALUES = ("gpu", "batch")

_KI, _MI, _GI = 2**10, 2**20, 2**30
_BINARY = (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", _GI), ("Mi", _MI), ("Ki", _KI))
_DECIMAL = (("E", 10**18), ("P", 10**15), ("T", 10**12), ("G", 10**9), ("M", 10**6), ("k", 10**3))

_DEFAULT_MAX = {CPU: 256_000, MEMORY: 2 * 2**40, GPU: 8_000}


# --------------------------------------------------------------------------------------------
# Quantities


def _decimal_text(value: Fraction) -> str | None:
    """``value`` as a plain decimal string (``"1.5"``) when it has a finite decimal form."""
    whole, rest = divmod(value.numerator, value.denominator)
    if rest == 0:
        return str(whole)
    digits = 0
    scaled = value
    while scaled.denominator != 1:
        scaled *= 10
        digits += 1
        if digits > 12:
            return None
    text = str(scaled.numerator).rjust(digits + 1, "0")
    return f"{text[:-digits]}.{text[-digits:]}"


def _spelling_list(resource: str, amount: int) -> list[Quantity]:
    """Every written form we know that parses to ``amount`` canonical units of ``resource``."""
    scale = canonical_scale(resource)
    value = Fraction(amount, scale)  # in the resource's whole unit (cores, bytes, devices, ...)
    forms: list[Quantity] = []
    if value.denominator == 1:
        whole = int(value)
        forms += [whole, str(whole)]
        suffixes = _BINARY + _DECIMAL if is_byte_resource(resource) else _DECIMAL
        for suffix, factor in suffixes:
            if whole and whole % factor == 0:
                forms.append(f"{whole // factor}{suffix}")
        exponent = 0
        while whole and whole % 10 ** (exponent + 1) == 0:
            exponent += 1
        if exponent:
            forms.append(f"{whole // 10**exponent}e{exponent}")
    decimal = _decimal_text(value)
    if decimal is not None:
        forms.append(decimal)
        as_float = float(value)
        if Fraction(repr(as_float)) == value:
            forms.append(as_float)
    forms.append(f"{value * 1000}m")  # scale is 1 or 1000, so this is always whole
    if (value * 10**6).denominator == 1 and len(str(value * 10**6)) < 40:
        forms.append(f"{value * 10**6}u")
    # Deduplicate while keeping order (2 and "2" are distinct spellings).
    seen: set[tuple[type, Quantity]] = set()
    out: list[Quantity] = []
    for form in forms:
        key = (type(form), form)
        if key not in seen:
            seen.add(key)
            out.append(form)
    return out


def spellings(resource: str, amount: int) -> st.SearchStrategy[Quantity]:
    """Written Kubernetes quantities that all parse to ``amount`` canonical units.

    ``spellings("cpu", 1500)`` draws from ``"1500m"``, ``"1.5"``, ``1.5``, ``"1500000u"`` ...;
    ``spellings("memory", 2**30)`` from ``1073741824``, ``"1Gi"``, ``"1048576Ki"`` ...
    """
    return st.sampled_from(_spelling_list(resource, amount))


@st.composite
def quantity_pairs(
    draw: st.DrawFn,
    resource: str = CPU,
    *,
    min_value: int = 0,
    max_value: int | None = None,
) -> tuple[Quantity, int]:
    """``(written, canonical)``: a quantity as a manifest would write it and its canonical int.

    ``max_value`` defaults to 256 cores, 2 TiB, 8 GPUs or 1000 counts by resource.
    """
    top = max_value if max_value is not None else _DEFAULT_MAX.get(resource, 1000)
    amount = draw(st.integers(min_value, top))
    return draw(spellings(resource, amount)), amount


def quantities(
    resource: str = CPU, *, min_value: int = 0, max_value: int | None = None
) -> st.SearchStrategy[Quantity]:
    """Valid written quantities of ``resource`` (see :func:`quantity_pairs`)."""
    return quantity_pairs(resource, min_value=min_value, max_value=max_value).map(lambda p: p[0])


def _written(draw: st.DrawFn, resources: Mapping[str, int]) -> dict[str, Quantity]:
    """A manifest-style mapping spelling each canonical amount in a drawn form."""
    return {res: draw(spellings(res, amount)) for res, amount in sorted(resources.items())}


# --------------------------------------------------------------------------------------------
# Nodes and topology


_NODE_CORES = (8, 2, 4, 16, 32, 64)
_NODE_MEMORY_GI = (32, 4, 8, 16, 64, 128, 256)
_NODE_GPUS = (0, 1, 2, 4, 8)
_POD_LIMITS = (110, 2, 4, 8)
_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


@st.composite
def nodes(
    draw: st.DrawFn,
    name: str = "node-0",
    *,
    gpu_models: Sequence[str] = GPU_MODELS,
    zones: Sequence[str] = ZONES,
) -> Node:
    """One node of a drawn shape: cpu, memory, optional pod limit and extended resource,
    0-8 GPU devices (model, sharing), zone and GPU-model labels, an occasional taint and an
    occasional cordon."""
    cores = draw(st.sampled_from(_NODE_CORES))
    alloc: dict[str, int] = {
        CPU: cores * 1000,
        MEMORY: draw(st.sampled_from(_NODE_MEMORY_GI)) * _GI,
    }
    if draw(st.booleans()):
        alloc[PODS] = draw(st.sampled_from(_POD_LIMITS))
    if draw(st.booleans()):
        alloc[EXTENDED_RESOURCE] = draw(st.integers(1, 4))
    labels = {_ZONE_LABEL: draw(st.sampled_from(tuple(zones)))}
    n_gpus = draw(st.sampled_from(_NODE_GPUS))
    gpus: Gpus | None = None
    written = _written(draw, alloc)
    if n_gpus:
        model = draw(st.sampled_from(tuple(gpu_models)))
        labels[_MODEL_LABEL] = model
        gpus = Gpus(count=n_gpus, model=model, sharing=draw(st.booleans()))
        if draw(st.booleans()):
            # Also state the devices the manifest way; the node must reconcile both.
            written[GPU] = draw(spellings(GPU, n_gpus * 1000))
    taints: tuple[Taint, ...] = ()
    if draw(st.integers(0, 3)) == 3:
        taints = (
            Taint(
                key=_TAINT_KEY,
                value=draw(st.sampled_from(_TAINT_VALUES)),
                effect=draw(st.sampled_from(_EFFECTS)),
            ),
        )
    return Node(
        name=name,
        allocatable=written,  # quantities are parsed on construction
        gpus=gpus,
        labels=labels,
        taints=taints,
        unschedulable=draw(st.integers(0, 7)) == 7,
    )


def _partition(draw: st.DrawFn, items: Sequence[str], max_group: int) -> list[list[str]]:
    groups: list[list[str]] = []
    i = 0
    while i < len(items):
        size = draw(st.integers(1, min(max_group, len(items) - i)))
        groups.append(list(items[i : i + size]))
        i += size
    return groups


@st.composite
def hypernode_trees(
    draw: st.DrawFn,
    node_names: Sequence[str],
    *,
    max_tiers: int = 3,
    max_group: int = 4,
    cover_all: bool = False,
) -> tuple[HyperNode, ...]:
    """A tiered topology over ``node_names``: tier-1 hypernodes partition (some or all) nodes,
    each higher tier partitions the tier below, until one domain remains or ``max_tiers``.

    Every member belongs to exactly one hypernode per tier, and hypernode names (``hn<tier>-<i>``)
    never collide with node names. With ``cover_all=False`` some nodes may stay outside the
    topology, as nodes without a switch label do.
    """
    if not node_names:
        return ()
    order = draw(st.permutations(list(node_names)))
    covered = len(order) if cover_all else draw(st.integers(1, len(order)))
    members = order[:covered]
    tiers = draw(st.integers(1, max_tiers))
    out: list[HyperNode] = []
    for tier in range(1, tiers + 1):
        groups = _partition(draw, members, max_group)
        names = [f"hn{tier}-{i}" for i in range(len(groups))]
        out += [
            HyperNode(name=n, tier=tier, members=tuple(g))
            for n, g in zip(names, groups, strict=True)
        ]
        if len(names) == 1:
            break
        members = names
    return tuple(out)


# --------------------------------------------------------------------------------------------
# Queues


def _quota(draw: st.DrawFn, low: Mapping[str, int] | None = None) -> dict[str, int]:
    """A queue quota over cpu, memory and GPUs, each at least ``low``'s amount."""
    low = low or {}
    quota = {
        CPU: draw(st.sampled_from((16, 4, 8, 32, 64, 128))) * 1000,
        MEMORY: draw(st.sampled_from((64, 16, 32, 128, 512))) * _GI,
        GPU: draw(st.sampled_from((8, 0, 1, 2, 4, 16))) * 1000,
    }
    return {res: max(amount, low.get(res, 0)) for res, amount in quota.items()}


@st.composite
def queues(
    draw: st.DrawFn, *, min_queues: int = 1, max_queues: int = 3, hierarchy: bool = True
) -> tuple[Queue, ...]:
    """Queues named ``default``, ``queue-1`` …: weights 1-4, optional capability (cap),
    guarantee (≤ capability) and deserved (between them), parents only among earlier queues
    (so never a cycle), mostly Open."""
    count = draw(st.integers(min_queues, max_queues))
    names = ["default", *(f"queue-{i}" for i in range(1, count))]
    out: list[Queue] = []
    for i, name in enumerate(names):
        capability = _quota(draw) if draw(st.booleans()) else None
        guarantee: dict[str, int] | None = None
        deserved: dict[str, int] | None = None
        if draw(st.booleans()):
            guarantee = {res: amount // 4 for res, amount in (capability or _quota(draw)).items()}
        if draw(st.booleans()):
            base = guarantee or {}
            top = capability or _quota(draw, base)
            deserved = {res: (base.get(res, 0) + top[res]) // 2 for res in top}
        parent = None
        if hierarchy and i > 0 and draw(st.booleans()):
            parent = draw(st.sampled_from(names[:i]))
        lending = None
        if deserved and draw(st.integers(0, 3)) == 0:
            lending = Resources({res: amount // 2 for res, amount in deserved.items()})
        out.append(
            Queue(
                name=name,
                weight=draw(st.integers(1, 4)),
                capability=None if capability is None else Resources(capability),
                guarantee=None if guarantee is None else Resources(guarantee),
                deserved=None if deserved is None else Resources(deserved),
                parent=parent,
                state=draw(
                    st.sampled_from(
                        (QueueState.OPEN, QueueState.OPEN, QueueState.CLOSING, QueueState.CLOSED)
                    )
                ),
                reclaimable=draw(st.booleans()),
                priority=draw(st.integers(0, 2)),
                lending_limit=lending,
            )
        )
    return tuple(out)


# --------------------------------------------------------------------------------------------
# Jobs and tasks


_TASK_CPU_MILLI = (1000, 250, 500, 2000, 4000, 8000, 16000)
_TASK_MEMORY_MI = (2048, 256, 1024, 4096, 8192, 16384, 65536)
_ROLE_NAMES = (("worker",), ("master", "worker"), ("ps", "worker", "chief"))


@dataclass(frozen=True, slots=True)
class _Template:
    request: dict[str, int]
    gpu: GpuRequest | None
    selector: dict[str, str] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()


def _template(draw: st.DrawFn, gpu_models: Sequence[str], zones: Sequence[str]) -> _Template:
    request = {
        CPU: draw(st.sampled_from(_TASK_CPU_MILLI)),
        MEMORY: draw(st.sampled_from(_TASK_MEMORY_MI)) * _MI,
    }
    if draw(st.integers(0, 5)) == 5:
        request[EXTENDED_RESOURCE] = 1
    gpu: GpuRequest | None = None
    kind = draw(st.sampled_from(("none", "whole", "share")))
    models: tuple[str, ...] = ()
    if kind != "none" and draw(st.integers(0, 3)) == 3:
        models = (draw(st.sampled_from(tuple(gpu_models))),)
    if kind == "whole":
        gpu = GpuRequest(count=draw(st.sampled_from((1, 2, 4, 8))), milli=1000, models=models)
    elif kind == "share":
        gpu = GpuRequest(
            count=draw(st.sampled_from((1, 1, 2))),
            milli=draw(st.sampled_from((500, 250, 750))),
            models=models,
        )
    selector: dict[str, str] = {}
    if draw(st.integers(0, 3)) == 3:
        selector[_ZONE_LABEL] = draw(st.sampled_from(tuple(zones)))
    tolerations: tuple[Toleration, ...] = ()
    choice = draw(st.integers(0, 5))
    if choice == 4:
        tolerations = (Toleration(key=_TAINT_KEY, operator="Exists"),)
    elif choice == 5:
        tolerations = (Toleration(key=_TAINT_KEY, value=draw(st.sampled_from(_TAINT_VALUES))),)
    return _Template(request, gpu, selector, tolerations)


@st.composite
def tasks(
    draw: st.DrawFn,
    job: str = "job-0",
    *,
    min_tasks: int = 1,
    max_tasks: int = 4,
    priority: int | None = None,
    gpu_models: Sequence[str] = GPU_MODELS,
    zones: Sequence[str] = ZONES,
) -> tuple[Task, ...]:
    """The pending tasks of one gang: 1-3 roles, each role's replicas identical (one request
    template per role: cpu, memory, whole or fractional GPUs with an optional model, an
    optional zone selector and toleration). Names are ``<job>-<role>-<i>``."""
    count = draw(st.integers(min_tasks, max_tasks))
    roles = draw(st.sampled_from(_ROLE_NAMES))[: max(1, count)]
    templates = [_template(draw, gpu_models, zones) for _ in roles]
    # Every role gets at least one replica; the rest are spread by drawing a role per task.
    assignment = list(range(len(roles)))[:count]
    assignment += [draw(st.integers(0, len(roles) - 1)) for _ in range(count - len(assignment))]
    assignment.sort()
    prio = draw(st.integers(0, 2)) if priority is None else priority
    preemptable = draw(st.booleans())
    policy = PREEMPT_NEVER if draw(st.integers(0, 5)) == 0 else PREEMPT_LOWER_PRIORITY
    out: list[Task] = []
    seen: dict[int, int] = {}
    for role_index in assignment:
        replica = seen.get(role_index, 0)
        seen[role_index] = replica + 1
        role = roles[role_index]
        tpl = templates[role_index]
        out.append(
            Task(
                name=f"{job}-{role}-{replica}",
                job=job,
                role=role,
                request=_written(draw, tpl.request),
                gpu_request=tpl.gpu,
                priority=prio,
                preemptable=preemptable,
                node_selector=tpl.selector,
                tolerations=tpl.tolerations,
                preemption_policy=policy,
            )
        )
    return tuple(out)


def _topology(draw: st.DrawFn, max_tier: int) -> NetworkTopology | None:
    if max_tier < 1 or draw(st.integers(0, 2)) != 2:
        return None
    highest = draw(st.none() | st.integers(1, max_tier))
    return NetworkTopology(
        mode=draw(st.sampled_from((TopologyMode.HARD, TopologyMode.SOFT))),
        highest_tier_allowed=highest,
    )


@st.composite
def jobs(
    draw: st.DrawFn,
    queue_names: Sequence[str] = ("default",),
    *,
    name: str = "job-0",
    max_min_available: int = 4,
    max_tier: int = 0,
    creation: int = 0,
) -> Job:
    """One job record on one of ``queue_names``: ``min_available`` 1..``max_min_available``,
    priority 0-2, Pending or Inqueue, optional network topology (when ``max_tier`` ≥ 1),
    sometimes a ``preemption_delay`` (its ``age`` before or past it)."""
    delay = draw(st.sampled_from((0, 0, 0, 30)))
    return Job(
        name=name,
        queue=draw(st.sampled_from(tuple(queue_names))),
        min_available=draw(st.integers(1, max(1, max_min_available))),
        priority=draw(st.integers(0, 2)),
        preemptable=draw(st.booleans()),
        phase=draw(st.sampled_from((JobPhase.PENDING, JobPhase.INQUEUE))),
        network_topology=_topology(draw, max_tier),
        creation=creation,
        preemption_delay=delay,
        age=draw(st.sampled_from((0, 60))) if delay else 0,
    )


def _sum_requests(items: Sequence[Task]) -> dict[str, int]:
    total: dict[str, int] = {}
    for task in items:
        for res, amount in task.request.items():
            total[res] = total.get(res, 0) + amount
        if task.gpu_request is not None:
            total[GPU] = total.get(GPU, 0) + task.gpu_request.total_milli
    return total


@st.composite
def gangs(
    draw: st.DrawFn,
    queue_names: Sequence[str] = ("default",),
    *,
    name: str = "job-0",
    max_tasks: int = 4,
    max_tier: int = 0,
    creation: int = 0,
    gpu_models: Sequence[str] = GPU_MODELS,
    zones: Sequence[str] = ZONES,
) -> tuple[Job, tuple[Task, ...]]:
    """A job and its pending tasks: ``min_available`` between 1 and the task count, optional
    per-role minimums (summing to at most ``min_available``), optional ``min_resources`` (the
    request of the first ``min_available`` tasks)."""
    job = draw(
        jobs(queue_names, name=name, max_min_available=1, max_tier=max_tier, creation=creation)
    )
    members = draw(
        tasks(name, max_tasks=max_tasks, priority=job.priority, gpu_models=gpu_models, zones=zones)
    )
    min_available = draw(st.integers(1, len(members)))
    per_role: dict[str, int] = {}
    if draw(st.booleans()):
        budget = min_available
        for role in sorted({t.role for t in members}):
            n = draw(st.integers(0, min(budget, sum(t.role == role for t in members))))
            per_role[role] = n
            budget -= n
    min_resources = None
    if draw(st.booleans()):
        min_resources = Resources(_sum_requests(members[:min_available]))
    job = replace(
        job,
        min_available=min_available,
        min_task_member=per_role,  # type: ignore[arg-type]
        min_resources=min_resources,
    )
    return job, members
