"""Readers for the cluster-side manifests: Node, Queue, HyperNode, PriorityClass, plus the
pieces shared by workloads (policies, network topology, pod templates).

Each reader checks the fields gangsched uses and raises through :meth:`Ref.error`, so the
message names the manifest and the field path. They return plain drafts (keyword arguments
for the model records); :mod:`gangsched.io.k8s` builds the records and the snapshot.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import re2

from gangsched.io.k8s.affinity import (
    read_node_affinity,
    read_node_group_affinity,
    read_pod_affinity,
    read_topology_spread,
)
from gangsched.io.k8s.fields import (
    Ref,
    annotation_bool,
    decimal_count,
    get_bool,
    get_int,
    get_list,
    get_map,
    get_mappings,
    get_str,
    get_str_map,
    meta_value,
    pod_requests,
    require_str,
    resource_map,
)
from gangsched.model import (
    POLICY_ACTIONS,
    POLICY_EVENTS,
    PREEMPTION_POLICIES,
    JobPolicy,
    NetworkTopology,
    NodeAffinity,
    Resources,
    Taint,
    Toleration,
    TopologyMode,
)
from gangsched.model.pod_affinity import PodAffinity, TopologySpreadConstraint
from gangsched.units import GPU

__all__ = [
    "GPU_COUNT_LABEL",
    "GPU_INDICES_KEY",
    "GPU_PRODUCT_LABEL",
    "GPU_SHARING_KEY",
    "HAMI_CORES",
    "HAMI_MEMORY",
    "PREEMPTABLE_KEY",
    "SYSTEM_PRIORITY_CLASSES",
    "TASK_PRIORITY_KEY",
    "HyperNodeDraft",
    "NodeDraft",
    "PodSpecInfo",
    "QueueDraft",
    "compile_pattern",
    "preemptable",
    "read_hypernode",
    "read_network_topology",
    "read_node",
    "read_pod_spec",
    "read_policies",
    "read_preemption_policy",
    "read_priority_class",
    "read_queue",
    "resolve_members",
    "task_priority_override",
]

PREEMPTABLE_KEY = "volcano.sh/preemptable"
TASK_PRIORITY_KEY = "volcano.sh/task-priority"
GPU_INDICES_KEY = "gangsched.io/gpu-indices"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_COUNT_LABEL = "nvidia.com/gpu.count"
#: Node annotation ``"false"``: GPUs on this node are never shared (whole devices only).
GPU_SHARING_KEY = "gangsched.io/gpu-sharing"
HAMI_CORES = "nvidia.com/gpucores"
HAMI_MEMORY = ("nvidia.com/gpumem", "nvidia.com/gpumem-percentage")

#: Kubernetes' built-in priority classes (always present in a cluster).
SYSTEM_PRIORITY_CLASSES: Mapping[str, int] = {
    "system-cluster-critical": 2_000_000_000,
    "system-node-critical": 2_000_001_000,
}

# Volcano actions that exist but gangsched does not model: noted, not rejected.
_UNMODELLED_ACTIONS = ("RestartPartition", "SyncJob", "EnqueueJob")


# ------------------------------------------------------------------------------------------
# Priority classes


def read_preemption_policy(obj: Mapping[str, Any], ref: Ref, path: str = "") -> str | None:
    """``preemptionPolicy`` of a PriorityClass (``path`` ''), or of a pod spec: one of
    Kubernetes' ``PreemptLowerPriority`` and ``Never``, None when unset."""
    value = get_str(obj, "preemptionPolicy", ref, path)
    if value is not None and value not in PREEMPTION_POLICIES:
        where = f"{path}.preemptionPolicy" if path else "preemptionPolicy"
        allowed = " or ".join(PREEMPTION_POLICIES)
        raise ref.error(where, f"expected {allowed}, got {value!r}")
    return value


def read_priority_class(obj: Mapping[str, Any], ref: Ref) -> tuple[int, bool]:
    """``(value, globalDefault)`` of a ``scheduling.k8s.io/v1 PriorityClass``."""
    value = get_int(obj, "value", ref, "")
    if value is None:
        raise ref.error("value", "missing")
    return value, get_bool(obj, "globalDefault", ref, "", False)


# ------------------------------------------------------------------------------------------
# Nodes


@dataclass(slots=True)
class NodeDraft:
    """A node before pods of other schedulers are taken off its allocatable."""

    ref: Ref
    name: str
    allocatable: dict[str, int]  # canonical, without GPUs
    gpu_count: int
    labels: dict[str, str]
    taints: tuple[Taint, ...]
    unschedulable: bool
    gpu_sharing: bool


def read_node(obj: Mapping[str, Any], ref: Ref) -> NodeDraft:
    meta = get_map(obj, "metadata", ref, "")
    spec = get_map(obj, "spec", ref, "")
    status = get_map(obj, "status", ref, "")
    labels = get_str_map(meta, "labels", ref, "metadata")
    key = "allocatable" if status.get("allocatable") is not None else "capacity"
    alloc = resource_map(status, key, ref, "status")
    gpu_milli = alloc.pop(GPU, 0)
    devices, rest = divmod(gpu_milli, 1000)
    if rest:
        raise ref.error(f"status.{key}.{GPU}", "GPU devices must be whole")
    if GPU_COUNT_LABEL in labels:
        text = labels[GPU_COUNT_LABEL]
        count = decimal_count(text)
        if count is None:
            raise ref.error(
                f"metadata.labels[{GPU_COUNT_LABEL}]", f"expected a device count, got {text!r}"
            )
        devices = count
    for res in (HAMI_CORES, *HAMI_MEMORY):
        alloc.pop(res, None)
    taints: list[Taint] = []
    for t, path in get_mappings(spec, "taints", ref, "spec"):
        tkey = require_str(t, "key", ref, path)
        effect = get_str(t, "effect", ref, path, "NoSchedule") or "NoSchedule"
        if effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            raise ref.error(f"{path}.effect", f"unknown taint effect {effect!r}")
        taints.append(
            Taint(key=tkey, value=get_str(t, "value", ref, path, "") or "", effect=effect)
        )
    sharing = annotation_bool(meta, GPU_SHARING_KEY, ref, True)
    unschedulable = get_bool(spec, "unschedulable", ref, "spec", False)
    for i, cond in enumerate(get_list(status, "conditions", ref, "status")):
        if isinstance(cond, Mapping) and cond.get("type") == "Ready":
            if cond.get("status") in ("False", "Unknown"):
                unschedulable = True
        elif not isinstance(cond, Mapping):
            raise ref.error(f"status.conditions[{i}]", "expected a mapping")
    return NodeDraft(
        ref=ref,
        name=ref.name,
        allocatable=alloc,
        gpu_count=devices,
        labels=labels,
        taints=tuple(taints),
        unschedulable=unschedulable,
        gpu_sharing=sharing,
    )


# ------------------------------------------------------------------------------------------
# Queues


@dataclass(slots=True)
class QueueDraft:
    ref: Ref
    kwargs: dict[str, Any]
    notes: list[tuple[str, str]] = field(default_factory=list)


_QUEUE_STATES = {"Open": "Open", "Closed": "Closed", "Closing": "Closing"}


def read_queue(obj: Mapping[str, Any], ref: Ref) -> QueueDraft:
    spec = get_map(obj, "spec", ref, "")
    status = get_map(obj, "status", ref, "")
    guarantee = get_map(spec, "guarantee", ref, "spec")
    kwargs: dict[str, Any] = {
        "name": ref.name,
        "weight": get_int(spec, "weight", ref, "spec", 1, minimum=1),
        "reclaimable": get_bool(spec, "reclaimable", ref, "spec", True),
        "priority": get_int(spec, "priority", ref, "spec", 0),
    }
    for attr, raw, path in (
        ("capability", spec, "spec"),
        ("deserved", spec, "spec"),
        ("guarantee", guarantee, "spec.guarantee"),
    ):
        key = "resource" if attr == "guarantee" else attr
        if raw.get(key) is not None:
            kwargs[attr] = Resources(resource_map(raw, key, ref, path))
    draft = QueueDraft(ref=ref, kwargs=kwargs)
    parent = get_str(spec, "parent", ref, "spec")
    if parent is not None:
        kwargs["parent"] = parent
    if spec.get("affinity") is not None:
        kwargs["node_group_affinity"] = read_node_group_affinity(spec, ref, "spec")
    state = get_str(status, "state", ref, "status") or get_str(spec, "state", ref, "spec")
    if state is not None:
        if state in _QUEUE_STATES:
            kwargs["state"] = _QUEUE_STATES[state]
        elif state == "Unknown":
            draft.notes.append(("status.state", "state Unknown is read as Open"))
        else:
            raise ref.error("status.state", f"unknown queue state {state!r}")
    return draft


# ------------------------------------------------------------------------------------------
# HyperNodes


@dataclass(slots=True)
class HyperNodeDraft:
    ref: Ref
    tier: int
    #: (member type, selector kind, value, field path) per spec.members entry
    selectors: list[tuple[str, str, Any, str]]


def read_hypernode(obj: Mapping[str, Any], ref: Ref) -> HyperNodeDraft:
    spec = get_map(obj, "spec", ref, "")
    tier = get_int(spec, "tier", ref, "spec", minimum=1)
    if tier is None:
        raise ref.error("spec.tier", "missing")
    selectors: list[tuple[str, str, Any, str]] = []
    for m, path in get_mappings(spec, "members", ref, "spec"):
        mtype = get_str(m, "type", ref, path)
        if mtype not in ("Node", "HyperNode"):
            raise ref.error(f"{path}.type", f"expected Node or HyperNode, got {mtype!r}")
        sel = get_map(m, "selector", ref, path)
        spath = f"{path}.selector"
        kinds = [k for k in ("exactMatch", "regexMatch", "labelMatch") if sel.get(k) is not None]
        if len(kinds) != 1:
            raise ref.error(
                spath, "exactly one of exactMatch, regexMatch, labelMatch must be given"
            )
        kind = kinds[0]
        body = get_map(sel, kind, ref, spath)
        if kind == "exactMatch":
            value: Any = get_str(body, "name", ref, f"{spath}.exactMatch")
            if value is None:
                raise ref.error(f"{spath}.exactMatch.name", "missing")
        elif kind == "regexMatch":
            pattern = get_str(body, "pattern", ref, f"{spath}.regexMatch")
            if pattern is None:
                raise ref.error(f"{spath}.regexMatch.pattern", "missing")
            value = compile_pattern(pattern, ref, f"{spath}.regexMatch.pattern")
        else:
            if body.get("matchExpressions"):
                raise ref.error(
                    f"{spath}.labelMatch.matchExpressions",
                    "matchExpressions is not supported (use matchLabels)",
                )
            value = get_str_map(body, "matchLabels", ref, f"{spath}.labelMatch")
            if not value:
                raise ref.error(f"{spath}.labelMatch.matchLabels", "empty label selector")
        if mtype == "HyperNode" and kind != "exactMatch":
            raise ref.error(spath, "a HyperNode member is selected by exactMatch only")
        selectors.append((mtype, kind, value, spath))
    return HyperNodeDraft(ref=ref, tier=tier, selectors=selectors)


#: Longest ``regexMatch`` pattern accepted (characters). RE2 also bounds the compiled program
#: (:data:`_RE2_MAX_MEM`); matching is linear in the name whatever the pattern.
MAX_PATTERN_LENGTH = 4096
_RE2_MAX_MEM = 8 << 20


def compile_pattern(pattern: str, ref: Ref, path: str) -> Any:
    """``pattern`` compiled with RE2 (linear-time matching, the syntax of Go's ``regexp``, which
    Volcano uses); a pattern RE2 rejects (invalid, or a backreference / lookaround it does not
    support, or too large) is a SnapshotError at ``path``."""
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise ref.error(
            path, f"pattern of {len(pattern)} characters is longer than {MAX_PATTERN_LENGTH}"
        )
    options = re2.Options()
    options.log_errors = False
    options.max_mem = _RE2_MAX_MEM
    try:
        return re2.compile(pattern, options=options)
    except re2.error as exc:
        why = exc.args[0] if exc.args else exc
        if isinstance(why, bytes):
            why = why.decode("utf-8", "replace")
        raise ref.error(
            path, f"invalid or unsupported regular expression (RE2 syntax): {why}"
        ) from None


def resolve_members(
    draft: HyperNodeDraft,
    node_labels: Mapping[str, Mapping[str, str]],
    hypernodes: Sequence[str],
) -> tuple[list[str], list[tuple[str, str]]]:
    """Member names of a hypernode and notes for selectors that matched nothing.

    ``regexMatch`` matches anywhere in the name (as Go's ``regexp.MatchString`` does, so anchor
    the pattern with ``^...$`` for a whole-name match).
    """
    members: list[str] = []
    notes: list[tuple[str, str]] = []
    known_hn = set(hypernodes)
    for mtype, kind, value, path in draft.selectors:
        if mtype == "HyperNode":
            found = [value] if value in known_hn else []
        elif kind == "exactMatch":
            found = [value] if value in node_labels else []
        elif kind == "regexMatch":
            found = [n for n in node_labels if value.search(n)]
        else:
            found = [
                n
                for n, labels in node_labels.items()
                if all(labels.get(k) == v for k, v in value.items())
            ]
        if not found:
            notes.append((path, f"selects no {mtype} in the input"))
        for name in found:
            if name not in members:
                members.append(name)
    return members, notes


# ------------------------------------------------------------------------------------------
# Workload pieces


def read_policies(
    raw: Sequence[Any], ref: Ref, path: str
) -> tuple[tuple[JobPolicy, ...], list[tuple[str, str]]]:
    """Volcano lifecycle policies (``event`` or ``events``, ``action``); exit-code policies and
    actions gangsched does not model become notes."""
    out: list[JobPolicy] = []
    notes: list[tuple[str, str]] = []
    for i, p in enumerate(raw):
        ppath = f"{path}[{i}]"
        if not isinstance(p, Mapping):
            raise ref.error(ppath, f"expected a mapping, got {type(p).__name__}")
        action = get_str(p, "action", ref, ppath)
        if action is None:
            raise ref.error(f"{ppath}.action", "missing")
        events: list[tuple[str, str]] = []
        event = get_str(p, "event", ref, ppath)
        if event is not None:
            events.append((event, f"{ppath}.event"))
        for j, e in enumerate(get_list(p, "events", ref, ppath)):
            if not isinstance(e, str):
                raise ref.error(f"{ppath}.events[{j}]", f"expected a string, got {e!r}")
            events.append((e, f"{ppath}.events[{j}]"))
        if p.get("exitCode") is not None:
            notes.append((f"{ppath}.exitCode", "exit-code policies are not modelled"))
            continue
        if not events:
            raise ref.error(ppath, "a policy needs an event, events or exitCode")
        for e, epath in events:
            if e not in POLICY_EVENTS:
                raise ref.error(
                    epath,
                    f"unknown policy event {e!r} (expected one of {', '.join(POLICY_EVENTS)})",
                )
        if action in _UNMODELLED_ACTIONS:
            notes.append((f"{ppath}.action", f"action {action} is not modelled"))
            continue
        if action not in POLICY_ACTIONS:
            raise ref.error(
                f"{ppath}.action",
                f"unknown policy action {action!r} (expected one of {', '.join(POLICY_ACTIONS)})",
            )
        out.extend(JobPolicy(event=e, action=action) for e, _ in events)
    return tuple(out), notes


def read_network_topology(
    spec: Mapping[str, Any], ref: Ref, path: str
) -> tuple[NetworkTopology | None, list[tuple[str, str]]]:
    raw = spec.get("networkTopology")
    if raw is None:
        return None, []
    npath = f"{path}.networkTopology"
    body = get_map(spec, "networkTopology", ref, path)
    mode = get_str(body, "mode", ref, npath, "hard")
    if mode not in ("hard", "soft"):
        raise ref.error(f"{npath}.mode", f"expected hard or soft, got {mode!r}")
    tier = get_int(body, "highestTierAllowed", ref, npath, minimum=1)
    notes: list[tuple[str, str]] = []
    if body.get("highestTierName") is not None:
        notes.append(
            (f"{npath}.highestTierName", "tier names are not modelled; use highestTierAllowed")
        )
    return NetworkTopology(mode=TopologyMode(mode), highest_tier_allowed=tier), notes


@dataclass(slots=True)
class PodSpecInfo:
    """What scheduling needs from a pod spec (of a Pod or of a workload's template)."""

    request: dict[str, int]  # canonical, without GPUs and HAMi shares
    gpu_count: int
    gpu_milli: int
    gpu_models: tuple[str, ...]
    scheduler_name: str
    priority_class: str | None
    priority: int | None  # spec.priority, when the API server already resolved it
    node_selector: dict[str, str]
    tolerations: tuple[Toleration, ...]
    hostname: str
    subdomain: str
    notes: list[tuple[str, str]]
    #: ``spec.preemptionPolicy`` when the pod sets it (else its PriorityClass decides).
    preemption_policy: str | None = None
    #: The pod's (or template's) labels, set by the caller that reads the metadata.
    labels: Mapping[str, str] = field(default_factory=dict)
    #: ``affinity.nodeAffinity`` (without a GPU model constraint, kept in ``gpu_models``).
    node_affinity: NodeAffinity | None = None
    #: ``affinity.podAffinity`` / ``podAntiAffinity`` and ``topologySpreadConstraints``.
    pod_affinity: PodAffinity | None = None
    pod_anti_affinity: PodAffinity | None = None
    topology_spread: tuple[TopologySpreadConstraint, ...] = ()


def read_pod_spec(spec: Mapping[str, Any], ref: Ref, path: str) -> PodSpecInfo:
    request = pod_requests(spec, ref, path)
    notes: list[tuple[str, str]] = []
    gpu = request.pop(GPU, 0)
    devices, rest = divmod(gpu, 1000)
    if rest:
        raise ref.error(
            f"{path}.containers",
            f"{GPU} must be a whole number of devices, got {gpu / 1000:g} "
            f"(a shared GPU is {HAMI_CORES} with {GPU}: 1)",
        )
    milli = 1000
    cores = request.pop(HAMI_CORES, None)
    if cores is not None:
        if not 1 <= cores <= 100:
            raise ref.error(f"{path}.containers", f"{HAMI_CORES} must be 1..100, got {cores}")
        if devices == 0:
            raise ref.error(f"{path}.containers", f"{HAMI_CORES} needs {GPU} >= 1")
        milli = cores * 10
    for res in HAMI_MEMORY:
        if request.pop(res, None) is not None:
            notes.append((f"{path}.containers", f"{res} (GPU memory share) is not modelled"))
    tolerations: list[Toleration] = []
    for t, tpath in get_mappings(spec, "tolerations", ref, path):
        op = get_str(t, "operator", ref, tpath, "Equal")
        if op not in ("Equal", "Exists"):
            raise ref.error(f"{tpath}.operator", f"expected Equal or Exists, got {op!r}")
        effect = get_str(t, "effect", ref, tpath, "") or ""
        if effect not in ("", "NoSchedule", "PreferNoSchedule", "NoExecute"):
            raise ref.error(f"{tpath}.effect", f"unknown toleration effect {effect!r}")
        tolerations.append(
            Toleration(
                key=get_str(t, "key", ref, tpath, "") or "",
                operator=op or "Equal",
                value=get_str(t, "value", ref, tpath, "") or "",
                effect=effect,
            )
        )
    affinity = get_map(spec, "affinity", ref, path)
    node_affinity, models = read_node_affinity(
        affinity, ref, f"{path}.affinity", gpu_label=GPU_PRODUCT_LABEL, gpu_task=devices > 0
    )
    pod_aff, pod_anti, more = read_pod_affinity(affinity, ref, f"{path}.affinity")
    spread, spread_notes = read_topology_spread(spec, ref, path)
    notes.extend(more)
    notes.extend(spread_notes)
    return PodSpecInfo(
        request=request,
        gpu_count=devices,
        gpu_milli=milli,
        scheduler_name=get_str(spec, "schedulerName", ref, path, "default-scheduler")
        or "default-scheduler",
        priority_class=get_str(spec, "priorityClassName", ref, path),
        priority=get_int(spec, "priority", ref, path),
        node_selector=get_str_map(spec, "nodeSelector", ref, path),
        gpu_models=models,
        tolerations=tuple(tolerations),
        hostname=get_str(spec, "hostname", ref, path, "") or "",
        subdomain=get_str(spec, "subdomain", ref, path, "") or "",
        notes=notes,
        preemption_policy=read_preemption_policy(spec, ref, path),
        node_affinity=node_affinity,
        pod_affinity=pod_aff,
        pod_anti_affinity=pod_anti,
        topology_spread=spread,
    )


def task_priority_override(meta: Mapping[str, Any], ref: Ref, path: str = "metadata") -> int | None:
    """Volcano's ``volcano.sh/task-priority`` annotation (an integer), if set."""
    found = meta_value(meta, TASK_PRIORITY_KEY, ref, path)
    if found is None:
        return None
    text, path = found
    body = text.strip()
    digits = body[1:] if body[:1] in ("-", "+") else body
    if decimal_count(digits) is None:
        raise ref.error(path, f"expected an integer below 10**18, got {text[:40]!r}")
    return int(body)


def preemptable(meta: Mapping[str, Any], ref: Ref, default: bool, path: str = "metadata") -> bool:
    """Volcano's ``volcano.sh/preemptable`` annotation or label."""
    return annotation_bool(meta, PREEMPTABLE_KEY, ref, default, path)
