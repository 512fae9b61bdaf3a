"""A snapshot written as Kubernetes and Volcano manifests (:func:`dump_manifests`), and
canonical amounts as Kubernetes quantity strings (see :mod:`gangsched.io.volcano_out`)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from gangsched.errors import SnapshotError
from gangsched.io.k8s import GROUP_NAME_KEYS, POLICIES_KEY, TASK_SPEC_LABEL, qualify, split_name
from gangsched.io.k8s.affinity import (
    node_affinity_manifest,
    node_group_affinity_manifest,
    pod_affinity_manifest,
    task_topology_annotations,
    topology_spread_manifest,
)
from gangsched.io.k8s.fields import dns_label_problem, dns_subdomain_problem
from gangsched.io.k8s.kinds import (
    GPU_INDICES_KEY,
    GPU_PRODUCT_LABEL,
    GPU_SHARING_KEY,
    HAMI_CORES,
    PREEMPTABLE_KEY,
)
from gangsched.io.k8s.kueue import kueue_annotations
from gangsched.model import Resources, Task, TaskPhase
from gangsched.model.snapshot import Snapshot
from gangsched.units import GPU, canonical_scale, is_byte_resource

_BINARY = (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))


def format_quantity(resource: str, amount: int) -> str:
    """A canonical amount as a Kubernetes quantity string (``"8"``, ``"500m"``, ``"4Gi"``)."""
    scale = canonical_scale(resource)
    if scale != 1:
        whole, rest = divmod(amount, scale)
        return str(whole) if rest == 0 else f"{amount}m"
    if is_byte_resource(resource) and amount:
        for suffix, size in _BINARY:
            if amount % size == 0:
                return f"{amount // size}{suffix}"
    return str(amount)


def _quantities(values: Mapping[str, int]) -> dict[str, str]:
    return {res: format_quantity(res, amount) for res, amount in sorted(values.items())}


# ------------------------------------------------------------------------------------------
# Snapshot → manifests


def _priority_class(value: int) -> str:
    return f"priority-{value}" if value >= 0 else f"priority-minus-{-value}"


#: 9999-12-31T23:59:59Z, the last time RFC 3339 can write.
_LAST_TIMESTAMP = 253402300799


def _timestamp(seconds: int) -> str:
    return dt.datetime.fromtimestamp(seconds, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _phase(task: Task) -> tuple[str, bool, bool]:
    """(pod phase, keeps its node, being deleted)."""
    if task.phase is TaskPhase.SUCCEEDED:
        return "Succeeded", True, False
    if task.phase is TaskPhase.FAILED:
        return "Failed", True, False
    if task.phase is TaskPhase.RUNNING:
        return "Running", True, False
    if task.phase is TaskPhase.RELEASING:
        return "Running", True, True
    if task.phase is TaskPhase.BOUND:
        return "Pending", True, False
    return "Pending", False, False


def _requests(task: Task) -> dict[str, str]:
    req = dict(task.request)
    gpu = task.gpu_request
    if gpu is not None:
        req[GPU] = gpu.count * 1000
        if gpu.fractional:
            req[HAMI_CORES] = gpu.milli // 10
    return _quantities(req)


def _k8s_name(kind: str, name: str) -> str:
    """``name`` as the metadata.name of a cluster-scoped object; a name Kubernetes would
    reject is a SnapshotError (the manifests would not load back)."""
    problem = dns_subdomain_problem(name)
    if problem is not None:
        raise SnapshotError(
            f"cannot be written as a Kubernetes name: {problem}", kind=kind, name=name, field="name"
        )
    return name


def _k8s_namespaced(kind: str, qualified: str) -> tuple[str, str]:
    """``(namespace, name)`` of a namespaced object, checked to load back as ``qualified``."""
    ns, name = split_name(qualified)
    problem = dns_label_problem(ns) or dns_subdomain_problem(name)
    if problem is None and qualify(ns, name) != qualified:
        problem = f"{qualified!r} would load back as {qualify(ns, name)!r}"
    if problem is not None:
        raise SnapshotError(
            f"cannot be written as a Kubernetes namespace/name: {problem}",
            kind=kind,
            name=qualified,
            field="name",
        )
    return ns, name


def dump_manifests(snapshot: Snapshot) -> list[dict[str, Any]]:
    """Write a snapshot as Kubernetes / Volcano manifests (PriorityClasses, Nodes, Queues,
    HyperNodes, PodGroups, Pods).

    Loading the result gives an equal snapshot for every snapshot that came from manifests.
    Not representable, and so changed on the way: a GPU model given without the
    ``nvidia.com/gpu.product`` label (the label is added), per-device ``milli`` other than
    1000, a share that is not a whole percent, the node of a Pipelined task, GPU models of
    a task whose node affinity has several required terms (the model is written into each
    term, and read back as node affinity), and a task's ``namespace`` (a Pod's namespace is
    the one of its name; a task with a role gains the role's label).

    Raises
    ------
    SnapshotError
        A name that Kubernetes would reject (not a DNS-1123 subdomain; a namespace that is not
        a DNS-1123 label) or that would load back as another name (``default/x``).
    """
    out: list[dict[str, Any]] = []
    values = sorted({j.priority for j in snapshot.jobs} | {t.priority for t in snapshot.tasks})
    for v in values:
        if v != 0:
            out.append(
                {
                    "apiVersion": "scheduling.k8s.io/v1",
                    "kind": "PriorityClass",
                    "metadata": {"name": _priority_class(v)},
                    "value": v,
                }
            )
    for n in snapshot.nodes:
        labels = dict(n.labels)
        alloc = dict(n.allocatable)
        if n.gpus is not None:
            alloc[GPU] = n.gpus.count * 1000
            if n.gpus.model and labels.get(GPU_PRODUCT_LABEL) != n.gpus.model:
                labels[GPU_PRODUCT_LABEL] = n.gpus.model
        node_meta: dict[str, Any] = {"name": _k8s_name("node", n.name), "labels": labels}
        if n.gpus is not None and not n.gpus.sharing:
            node_meta["annotations"] = {GPU_SHARING_KEY: "false"}
        spec: dict[str, Any] = {}
        if n.taints:
            spec["taints"] = [t.to_dict() for t in n.taints]
        if n.unschedulable:
            spec["unschedulable"] = True
        out.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": node_meta,
                "spec": spec,
                "status": {"allocatable": _quantities(alloc)},
            }
        )
    for q in snapshot.queues:
        qspec: dict[str, Any] = {
            "weight": q.weight,
            "reclaimable": q.reclaimable,
            "priority": q.priority,
        }
        for attr in ("capability", "deserved"):
            value: Resources | None = getattr(q, attr)
            if value is not None:
                qspec[attr] = _quantities(value)
        if q.guarantee is not None:
            qspec["guarantee"] = {"resource": _quantities(q.guarantee)}
        if q.parent is not None:
            qspec["parent"] = q.parent
        if q.node_group_affinity is not None:
            qspec["affinity"] = node_group_affinity_manifest(q.node_group_affinity)
        out.append(
            {
                "apiVersion": "scheduling.volcano.sh/v1beta1",
                "kind": "Queue",
                "metadata": {"name": _k8s_name("queue", q.name)},
                "spec": qspec,
                "status": {"state": q.state.value},
            }
        )
    for hn in snapshot.hypernodes:
        members = [
            {
                "type": "Node" if m in snapshot.node_index else "HyperNode",
                "selector": {"exactMatch": {"name": m}},
            }
            for m in hn.members
        ]
        out.append(
            {
                "apiVersion": "topology.volcano.sh/v1alpha1",
                "kind": "HyperNode",
                "metadata": {"name": _k8s_name("hypernode", hn.name)},
                "spec": {"tier": hn.tier, "members": members},
            }
        )
    for j in snapshot.jobs:
        ns, name = _k8s_namespaced("job", j.name)
        meta: dict[str, Any] = {
            "name": name,
            "namespace": ns,
            "annotations": {PREEMPTABLE_KEY: "true" if j.preemptable else "false"},
        }
        if j.task_topology is not None:
            meta["annotations"].update(task_topology_annotations(j.task_topology))
        items = [f"{p.event}:{p.action}" for p in j.policies] + [
            f"{role}/{p.event}:{p.action}" for role, ps in j.role_policies.items() for p in ps
        ]
        if items:
            meta["annotations"][POLICIES_KEY] = ",".join(items)
        if j.creation:
            if not 0 < j.creation <= _LAST_TIMESTAMP:
                raise SnapshotError(
                    f"{j.creation} is not a time Kubernetes can write (0..{_LAST_TIMESTAMP})",
                    kind="job",
                    name=j.name,
                    field="creation",
                )
            meta["creationTimestamp"] = _timestamp(j.creation)
        pspec: dict[str, Any] = {"minMember": j.min_available, "queue": j.queue}
        if j.min_task_member:
            pspec["minTaskMember"] = dict(j.min_task_member)
        if j.priority:
            pspec["priorityClassName"] = _priority_class(j.priority)
        if j.min_resources is not None:
            pspec["minResources"] = _quantities(j.min_resources)
        nt = j.network_topology
        if nt is not None and nt.slice_size:
            # Volcano's networkTopology has no slices: say it all in Kueue's annotations
            meta["annotations"].update(kueue_annotations(nt))
        elif nt is not None:
            topo: dict[str, Any] = {"mode": nt.mode.value}
            if nt.highest_tier_allowed is not None:
                topo["highestTierAllowed"] = nt.highest_tier_allowed
            pspec["networkTopology"] = topo
        out.append(
            {
                "apiVersion": "scheduling.volcano.sh/v1beta1",
                "kind": "PodGroup",
                "metadata": meta,
                "spec": pspec,
                "status": {"phase": j.phase.value},
            }
        )
    for t in snapshot.tasks:
        ns, name = _k8s_namespaced("task", t.name)
        _, group = split_name(t.job)
        phase, keeps_node, deleting = _phase(t)
        annotations = {
            GROUP_NAME_KEYS[0]: group,
            PREEMPTABLE_KEY: "true" if t.preemptable else "false",
        }
        if t.gpu_indices:
            annotations[GPU_INDICES_KEY] = ",".join(str(i) for i in t.gpu_indices)
        tmeta: dict[str, Any] = {"name": name, "namespace": ns, "annotations": annotations}
        if t.role or t.labels:
            tmeta["labels"] = {**t.labels, **({TASK_SPEC_LABEL: t.role} if t.role else {})}
        if deleting:
            tmeta["deletionTimestamp"] = _timestamp(0)
        container: dict[str, Any] = {"name": "main", "image": "none"}
        requests = _requests(t)
        if requests:
            container["resources"] = {"requests": requests}
        tspec: dict[str, Any] = {
            "schedulerName": "volcano",
            "priority": t.priority,
            "containers": [container],
        }
        if keeps_node and t.node is not None:
            tspec["nodeName"] = t.node
        if t.preemption_policy != "PreemptLowerPriority":
            tspec["preemptionPolicy"] = t.preemption_policy
        if t.node_selector:
            tspec["nodeSelector"] = dict(t.node_selector)
        if t.tolerations:
            tspec["tolerations"] = [tol.to_dict() for tol in t.tolerations]
        models = t.gpu_request.models if t.gpu_request is not None else ()
        node_affinity = node_affinity_manifest(t.node_affinity, models, GPU_PRODUCT_LABEL)
        affinity: dict[str, Any] = {}
        if node_affinity is not None:
            affinity["nodeAffinity"] = node_affinity
        if t.pod_affinity is not None:
            affinity["podAffinity"] = pod_affinity_manifest(t.pod_affinity)
        if t.pod_anti_affinity is not None:
            affinity["podAntiAffinity"] = pod_affinity_manifest(t.pod_anti_affinity)
        if affinity:
            tspec["affinity"] = affinity
        if t.topology_spread:
            tspec["topologySpreadConstraints"] = topology_spread_manifest(t.topology_spread)
        out.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": tmeta,
                "spec": tspec,
                "status": {"phase": phase},
            }
        )
    return out
