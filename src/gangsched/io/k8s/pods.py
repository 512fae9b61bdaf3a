"""Pod-level manifests → job and task drafts: PodGroups and Pods, including the pods of
loaded Volcano Jobs and PyTorchJobs and pods of other schedulers that hold a node (see
:mod:`gangsched.io.k8s`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from gangsched._frozen import FrozenDict
from gangsched.io.k8s.affinity import read_task_topology
from gangsched.io.k8s.fields import (
    Ref,
    creation_seconds,
    decimal_count,
    get_int,
    get_list,
    get_map,
    get_str,
    get_str_map,
    meta_value,
    resource_map,
)
from gangsched.io.k8s.kinds import (
    GPU_INDICES_KEY,
    PodSpecInfo,
    preemptable,
    read_network_topology,
    read_pod_spec,
    read_policies,
)
from gangsched.io.k8s.records import (
    GROUP_NAME_KEYS,
    JOB_NAME_LABEL,
    KUBEFLOW_INDEX_LABEL,
    KUBEFLOW_JOB_LABEL,
    KUBEFLOW_TYPE_LABEL,
    POLICIES_KEY,
    QUEUE_NAME_KEYS,
    TASK_INDEX_LABEL,
    TASK_SPEC_LABEL,
    JobDraft,
    JobOrigin,
    qualify,
)
from gangsched.io.k8s.workloads import WorkloadReader, task_draft, task_labels
from gangsched.model import OCCUPYING_PHASES, JobPolicy, Resources, TaskPhase

__all__ = ["PodReader"]


class PodReader(WorkloadReader):
    """The pod half of the workload reader: PodGroups, Pods and the jobs they belong to."""

    def _podgroup(self, obj: Mapping[str, Any], ref: Ref) -> None:
        meta = get_map(obj, "metadata", ref, "")
        spec = get_map(obj, "spec", ref, "")
        status = get_map(obj, "status", ref, "")
        phase = get_str(status, "phase", ref, "status")
        if phase is not None and phase not in (
            "Pending",
            "Inqueue",
            "Running",
            "Unknown",
            "Completed",
        ):
            raise ref.error("status.phase", f"unknown PodGroup phase {phase!r}")
        owner = self._owner_job(meta, ref)
        if owner is not None:
            draft = self.jobs[owner]
            draft.origin = replace(draft.origin, podgroup=ref.name)
            if phase is not None:
                draft.kwargs["phase"] = phase
            topology = read_task_topology(meta, ref, "metadata")
            if topology is not None:
                draft.kwargs["task_topology"] = topology
            self._merge_kueue(draft, meta, ref)
            self.by_object[("podgroup", ref.namespace, ref.name)] = owner
            return
        min_member = get_int(spec, "minMember", ref, "spec", 1, minimum=0)
        mtm: dict[str, int] = {}
        min_task_member = get_map(spec, "minTaskMember", ref, "spec")
        for role, n in min_task_member.items():
            value = get_int(min_task_member, role, ref, "spec.minTaskMember", minimum=0)
            if value is None or not isinstance(role, str):
                raise ref.error(f"spec.minTaskMember.{role}", f"expected a count, got {n!r}")
            mtm[role] = value
        topo, notes = read_network_topology(spec, ref, "spec")
        for f, why in notes:
            self.note(ref, f, why)
        kwargs: dict[str, Any] = {
            "name": qualify(ref.namespace, ref.name),
            "queue": get_str(spec, "queue", ref, "spec", "default"),
            "min_available": min_member,
            "min_task_member": FrozenDict(mtm),
            "priority": self._priority(
                get_str(spec, "priorityClassName", ref, "spec"), ref, "spec.priorityClassName"
            ),
            "preemptable": preemptable(meta, ref, True),
            "network_topology": topo,
            "creation": creation_seconds(meta, ref),
            "task_topology": read_task_topology(meta, ref, "metadata"),
        }
        if spec.get("minResources") is not None:
            kwargs["min_resources"] = Resources(resource_map(spec, "minResources", ref, "spec"))
        if phase is not None:
            kwargs["phase"] = phase
        found = meta_value(meta, POLICIES_KEY, ref)
        if found is not None:
            kwargs["policies"], kwargs["role_policies"] = _policies_annotation(*found, ref)
        origin = JobOrigin(ref=ref, framework="podgroup", podgroup=ref.name)
        self._add_workload("podgroup", origin, kwargs, [(meta, "metadata")], [])

    def _owner_job(self, meta: Mapping[str, Any], ref: Ref) -> str | None:
        """The loaded Volcano Job / PyTorchJob this PodGroup belongs to, if any."""
        for i, o in enumerate(get_list(meta, "ownerReferences", ref, "metadata")):
            if not isinstance(o, Mapping):
                raise ref.error(f"metadata.ownerReferences[{i}]", "expected a mapping")
            key = {"Job": "vcjob", "PyTorchJob": "pytorchjob"}.get(str(o.get("kind")))
            if key is not None:
                found = self.by_object.get((key, ref.namespace, str(o.get("name"))))
                if found is not None:
                    return found
        for key in ("vcjob", "pytorchjob"):
            found = self.by_object.get((key, ref.namespace, ref.name))
            if found is not None:
                return found
        return None

    def _pod(self, obj: Mapping[str, Any], ref: Ref) -> None:
        self.reserve_pods(ref, "metadata.name", 1, "pod")
        meta = get_map(obj, "metadata", ref, "")
        spec = get_map(obj, "spec", ref, "")
        status = get_map(obj, "status", ref, "")
        info = read_pod_spec(spec, ref, "spec")
        node = get_str(spec, "nodeName", ref, "spec")
        k8s_phase = get_str(status, "phase", ref, "status", "Pending")
        deleting = meta.get("deletionTimestamp") is not None
        if k8s_phase == "Succeeded":
            phase = TaskPhase.SUCCEEDED
        elif k8s_phase == "Failed":
            phase = TaskPhase.FAILED
        elif k8s_phase not in ("Pending", "Running", "Unknown"):
            raise ref.error("status.phase", f"unknown pod phase {k8s_phase!r}")
        elif node is None:
            phase = TaskPhase.PENDING
        elif deleting:
            phase = TaskPhase.RELEASING
        else:
            phase = TaskPhase.RUNNING if k8s_phase == "Running" else TaskPhase.BOUND
        job = self._pod_job(meta, ref)
        if job is None and info.scheduler_name not in self.ours:
            if node is not None and phase in OCCUPYING_PHASES:
                self._foreign(node, info, ref)
            else:
                self._not_ours(ref, "", info.scheduler_name)
            return
        for f, why in info.notes:
            self.note(ref, f, why)
        labels = get_str_map(meta, "labels", ref, "metadata")
        name = qualify(ref.namespace, ref.name)
        if job is None:
            job = name
            queue = "default"
            for key in QUEUE_NAME_KEYS:
                found = meta_value(meta, key, ref)
                if found is not None:
                    queue = found[0]
                    break
            priority = self._task_priority(info, meta, ref, "", self.default_priority)
            kwargs: dict[str, Any] = {
                "name": job,
                "queue": queue,
                "min_available": 1,
                "priority": priority,
                "preemptable": preemptable(meta, ref, True),
                "creation": creation_seconds(meta, ref),
            }
            origin = JobOrigin(ref=ref, framework="pod", podgroup=ref.name)
            self._add_job("pod", JobDraft(ref=ref, origin=origin, kwargs=kwargs, tasks=[]))
        jd = self.jobs[job]
        if jd.origin.framework == "podgroup":
            # Kueue's plain pod groups carry the topology annotations on their pods
            self._merge_kueue(jd, meta, ref)
        previous = self.tasks.get(name)
        role = labels.get(TASK_SPEC_LABEL) or labels.get(KUBEFLOW_TYPE_LABEL, "").lower()
        if not role and previous is not None:
            role = previous.origin.role
        index = previous.origin.index if previous is not None else _index_of(labels, ref.name)
        fallback_priority = jd.kwargs.get("priority", self.default_priority)
        fallback_preempt = previous.kwargs["preemptable"] if previous else jd.kwargs["preemptable"]
        kwargs = self._task_kwargs(
            name,
            job,
            role,
            info,
            self._task_priority(info, meta, ref, "", fallback_priority),
            preemptable(meta, ref, fallback_preempt),
        )
        kwargs["phase"] = phase
        kwargs["node"] = node
        kwargs["labels"] = task_labels(labels, role)
        found_idx = meta_value(meta, GPU_INDICES_KEY, ref)
        if found_idx is not None and kwargs["gpu_request"] is not None:
            text, path = found_idx
            try:
                kwargs["gpu_indices"] = tuple(int(x) for x in text.split(",") if x.strip())
            except ValueError:
                raise ref.error(
                    path, f"expected comma-separated GPU indices, got {text!r}"
                ) from None
        draft = task_draft(ref, "", kwargs, labels, ref.name, job, role, index, created=True)
        self._add_task(draft)

    def _pod_job(self, meta: Mapping[str, Any], ref: Ref) -> str | None:
        labels = get_str_map(meta, "labels", ref, "metadata")
        ns = ref.namespace
        if JOB_NAME_LABEL in labels:
            found = self.by_object.get(("vcjob", ns, labels[JOB_NAME_LABEL]))
            if found is not None:
                return found
        if KUBEFLOW_JOB_LABEL in labels:
            found = self.by_object.get(("pytorchjob", ns, labels[KUBEFLOW_JOB_LABEL]))
            if found is not None:
                return found
        for key in GROUP_NAME_KEYS:
            hit = meta_value(meta, key, ref)
            if hit is None:
                continue
            group, path = hit
            for kind in ("podgroup", "vcjob", "pytorchjob"):
                found = self.by_object.get((kind, ns, group))
                if found is not None:
                    return found
            raise ref.error(path, f"unknown PodGroup {group!r} in namespace {ns!r}")
        return None

    def _foreign(self, node: str, info: PodSpecInfo, ref: Ref) -> None:
        use = self.foreign_use.setdefault(node, {})
        for res, amount in info.request.items():
            use[res] = use.get(res, 0) + amount
        self.foreign_gpus[node] = self.foreign_gpus.get(node, 0) + info.gpu_count
        self.foreign_pods[node] = self.foreign_pods.get(node, 0) + 1
        self.note(
            ref,
            "",
            f"scheduled by {info.scheduler_name!r}: its requests are taken off node {node!r}",
        )


def _policies_annotation(
    text: str, path: str, ref: Ref
) -> tuple[tuple[JobPolicy, ...], FrozenDict[str, tuple[JobPolicy, ...]]]:
    """Read ``event:action,role/event:action,...`` (see :data:`POLICIES_KEY`)."""
    job_level: list[dict[str, str]] = []
    by_role: dict[str, list[dict[str, str]]] = {}
    for item in (p.strip() for p in text.split(",") if p.strip()):
        head, sep, action = item.partition(":")
        if not sep:
            raise ref.error(path, f"expected [role/]event:action items, got {item!r}")
        role, slash, event = head.rpartition("/")
        entry = {"event": event.strip(), "action": action.strip()}
        (by_role.setdefault(role, []) if slash else job_level).append(entry)
    policies, _ = read_policies(job_level, ref, path)
    roles = {role: read_policies(raw, ref, path)[0] for role, raw in by_role.items()}
    return policies, FrozenDict(roles)


def _index_of(labels: Mapping[str, str], pod: str) -> int:
    for key in (TASK_INDEX_LABEL, KUBEFLOW_INDEX_LABEL):
        index = decimal_count(labels.get(key, ""))
        if index is not None:
            return index
    return decimal_count(pod.rpartition("-")[2]) or 0
