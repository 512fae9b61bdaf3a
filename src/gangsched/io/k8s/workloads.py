"""Workload manifests → job and task drafts: Volcano Jobs, Kubeflow PyTorchJobs, PodGroups
and Pods (see :mod:`gangsched.io.k8s` for the mapping and docs/volcano.md for the details).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gangsched._frozen import FrozenDict
from gangsched.io.k8s.affinity import read_task_topology
from gangsched.io.k8s.fields import (
    Ref,
    check_dns_label,
    creation_seconds,
    get_int,
    get_list,
    get_map,
    get_str,
    get_str_map,
    resource_map,
)
from gangsched.io.k8s.kinds import (
    PodSpecInfo,
    preemptable,
    read_network_topology,
    read_pod_spec,
    read_policies,
    task_priority_override,
)
from gangsched.io.k8s.kueue import collect_annotations
from gangsched.io.k8s.records import (
    PYTORCH_DEFAULT_PORT,
    TASK_SPEC_LABEL,
    Ignored,
    JobDraft,
    JobOrigin,
    PodOrigin,
    TaskDraft,
    TaskGroup,
    qualify,
    split_name,
)
from gangsched.limits import Limits
from gangsched.model import PREEMPT_LOWER_PRIORITY, GpuRequest, JobPolicy, Resources

__all__ = ["KUEUE_KWARG", "WorkloadReader"]

# Volcano JobSpec / TaskSpec fields that are read elsewhere or deliberately not modelled
# (volumes, TTLs, retries...): anything else in spec is noted as unknown.
_VCJOB_SPEC_KEYS = frozenset(
    {
        "schedulerName",
        "minAvailable",
        "volumes",
        "tasks",
        "policies",
        "plugins",
        "runningEstimate",
        "queue",
        "maxRetry",
        "ttlSecondsAfterFinished",
        "priorityClassName",
        "minSuccess",
        "networkTopology",
    }
)
_VCTASK_KEYS = frozenset(
    {"name", "replicas", "minAvailable", "template", "policies", "topologyPolicy", "maxRetry"}
)
_ENV_PLUGINS = frozenset({"env", "svc", "pytorch", "ssh"})


#: Key under which a job draft carries its Kueue topology annotations until the loader,
#: knowing every Kueue Topology object, turns them into the job's network topology.
KUEUE_KWARG = "_kueue_topology"


class WorkloadReader:
    """The workload half of the loader: Volcano Jobs, PyTorchJobs, PodGroups and Pods.

    Subclassed by the loader in :mod:`gangsched.io.k8s`, which owns the state declared here.
    """

    ours: frozenset[str]
    priorities: dict[str, int]
    default_priority: int
    #: PriorityClass name → its ``preemptionPolicy``; the globalDefault class's name.
    preemption_policies: dict[str, str]
    default_class: str | None
    jobs: dict[str, JobDraft]
    tasks: dict[str, TaskDraft]
    by_object: dict[tuple[str, str, str], str]
    foreign_use: dict[str, dict[str, int]]
    foreign_gpus: dict[str, int]
    foreign_pods: dict[str, int]
    ignored: list[Ignored]
    limits: Limits
    pod_count: int

    def reserve_pods(self, ref: Ref, path: str, count: int, what: str = "replicas") -> None:
        """Count ``count`` more pods against :attr:`Limits.max_tasks` (before building any),
        and, for a role's ``replicas``, against :attr:`Limits.max_replicas`."""
        if what == "replicas" and count > self.limits.max_replicas:
            raise ref.error(
                path,
                f"{count} replicas is more than the limit of {self.limits.max_replicas} per "
                "role (Limits.max_replicas)",
            )
        self.pod_count += count
        if self.pod_count > self.limits.max_tasks:
            raise ref.error(
                path,
                f"the input would hold {self.pod_count} pods, more than the limit of "
                f"{self.limits.max_tasks} (Limits.max_tasks)",
            )

    def note(self, ref: Ref, field: str, reason: str) -> None:
        """Record something the input holds that gangsched does not use."""
        self.ignored.append(Ignored(ref=ref, field=field, reason=reason))

    def _not_ours(self, ref: Ref, field: str, scheduler: str) -> None:
        self.note(ref, field, f"scheduled by {scheduler!r}, not by {', '.join(sorted(self.ours))}")

    # -- priorities --------------------------------------------------------------------------

    def _priority(self, class_name: str | None, ref: Ref, path: str) -> int:
        if class_name is None:
            return self.default_priority
        if class_name not in self.priorities:
            known = ", ".join(sorted(self.priorities))
            raise ref.error(
                path, f"unknown PriorityClass {class_name!r} (known: {known}); add its manifest"
            )
        return self.priorities[class_name]

    def _task_priority(
        self, info: PodSpecInfo, meta: Mapping[str, Any], ref: Ref, path: str, fallback: int
    ) -> int:
        override = task_priority_override(meta, ref, f"{path}.metadata" if path else "metadata")
        if override is not None:
            return override
        if info.priority is not None:
            return info.priority
        if info.priority_class is not None:
            return self._priority(
                info.priority_class, ref, f"{path}.spec.priorityClassName".lstrip(".")
            )
        return fallback

    # -- workloads ---------------------------------------------------------------------------

    def _add_job(self, key: str, draft: JobDraft) -> None:
        name = draft.kwargs["name"]
        if name in self.jobs:
            other = self.jobs[name].ref
            raise draft.ref.error("metadata.name", f"job name {name!r} is already used by {other}")
        self.jobs[name] = draft
        self.by_object[(key, draft.ref.namespace, draft.ref.name)] = name

    def _add_workload(
        self,
        key: str,
        origin: JobOrigin,
        kwargs: dict[str, Any],
        kueue_sources: list[tuple[Mapping[str, Any], str]],
        drafts: list[TaskDraft],
    ) -> None:
        """Add a workload's job (with the Kueue topology annotations found in
        ``kueue_sources``) and its task drafts."""
        kueue = collect_annotations(kueue_sources, origin.ref)
        if kueue is not None:
            kwargs[KUEUE_KWARG] = kueue
        self._add_job(key, JobDraft(ref=origin.ref, origin=origin, kwargs=kwargs, tasks=[]))
        for d in drafts:
            self._add_task(d)

    def _merge_kueue(self, draft: JobDraft, meta: Mapping[str, Any], ref: Ref) -> None:
        """Give ``draft`` the Kueue topology annotations of ``meta`` (an object of the same
        job); annotations that differ from the ones it has are an error."""
        kueue = collect_annotations([(meta, "metadata")], ref)
        if kueue is None:
            return
        mine = draft.kwargs.get(KUEUE_KWARG)
        if mine is not None and mine[1] != kueue[1]:
            raise ref.error(
                kueue[0],
                f"Kueue topology annotations differ from those of {draft.ref} ({mine[0]}); "
                "gangsched keeps one network topology per job",
            )
        draft.kwargs.setdefault(KUEUE_KWARG, kueue)

    def _add_task(self, draft: TaskDraft) -> None:
        name = draft.kwargs["name"]
        previous = self.tasks.get(name)
        if previous is not None and (
            previous.origin.created or previous.kwargs["job"] != draft.kwargs["job"]
        ):
            raise draft.ref.error("metadata.name", f"pod {name!r} is also {previous.ref}")
        if name not in self.tasks:
            self.jobs[draft.kwargs["job"]].tasks.append(name)
        self.tasks[name] = draft

    def _replica_drafts(
        self,
        ref: Ref,
        path: str,
        job: str,
        role: str,
        info: PodSpecInfo,
        priority: int,
        preempt: bool,
        replicas: int,
    ) -> list[TaskDraft]:
        """The drafts of a role's ``replicas`` pods, named ``<job>-<role>-<index>`` as the
        job controllers name them."""
        out = []
        for idx in range(replicas):
            pod = f"{ref.name}-{role}-{idx}"
            kwargs = self._task_kwargs(
                qualify(ref.namespace, pod), job, role, info, priority, preempt
            )
            out.append(
                task_draft(ref, path, kwargs, info.labels, pod, job, role, idx, created=False)
            )
        return out

    def _task_kwargs(
        self, name: str, job: str, role: str, info: PodSpecInfo, priority: int, preempt: bool
    ) -> dict[str, Any]:
        gpu = (
            GpuRequest(count=info.gpu_count, milli=info.gpu_milli, models=info.gpu_models)
            if info.gpu_count > 0
            else None
        )
        return {
            "name": name,
            "job": job,
            "role": role,
            "request": Resources(info.request),
            "gpu_request": gpu,
            "priority": priority,
            "preemptable": preempt,
            "node_selector": FrozenDict(info.node_selector),
            "tolerations": info.tolerations,
            "node_affinity": info.node_affinity,
            "preemption_policy": self._preemption_policy(info),
            "labels": task_labels(info.labels, role),
            "namespace": split_name(name)[0],
            "pod_affinity": info.pod_affinity,
            "pod_anti_affinity": info.pod_anti_affinity,
            "topology_spread": info.topology_spread,
        }

    def _preemption_policy(self, info: PodSpecInfo) -> str:
        """The pod's ``spec.preemptionPolicy``, else its PriorityClass's (the globalDefault
        class when it names none), as the API server's admission fills it in."""
        if info.preemption_policy is not None:
            return info.preemption_policy
        name = info.priority_class or self.default_class
        return self.preemption_policies.get(name or "", PREEMPT_LOWER_PRIORITY)

    def _vcjob(self, obj: Mapping[str, Any], ref: Ref) -> None:
        meta = get_map(obj, "metadata", ref, "")
        spec = get_map(obj, "spec", ref, "")
        sched = get_str(spec, "schedulerName", ref, "spec", "volcano") or "volcano"
        if sched not in self.ours:
            self._not_ours(ref, "", sched)
            return
        for key in sorted(str(k) for k in spec if k not in _VCJOB_SPEC_KEYS):
            self.note(ref, f"spec.{key}", "unknown field")
        job = qualify(ref.namespace, ref.name)
        job_priority = self._priority(
            get_str(spec, "priorityClassName", ref, "spec"), ref, "spec.priorityClassName"
        )
        job_preempt = preemptable(meta, ref, True)
        policies, notes = read_policies(
            get_list(spec, "policies", ref, "spec"), ref, "spec.policies"
        )
        topo, more = read_network_topology(spec, ref, "spec")
        for f, why in notes + more:
            self.note(ref, f, why)
        plugins: dict[str, tuple[str, ...]] = {}
        for pname, args in get_map(spec, "plugins", ref, "spec").items():
            ppath = f"spec.plugins.{pname}"
            if args is None:
                args = []
            if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
                raise ref.error(ppath, "expected a list of argument strings")
            plugins[str(pname)] = tuple(args)
            if pname not in _ENV_PLUGINS:
                self.note(ref, ppath, "job plugin not modelled (no environment computed)")
        raw_tasks = get_list(spec, "tasks", ref, "spec")
        if not raw_tasks:
            raise ref.error("spec.tasks", "a Volcano Job needs at least one task")
        groups: list[TaskGroup] = []
        min_task_member: dict[str, int] = {}
        role_policies: dict[str, tuple[JobPolicy, ...]] = {}
        task_drafts: list[TaskDraft] = []
        seen: dict[str, int] = {}
        kueue_sources: list[tuple[Mapping[str, Any], str]] = [(meta, "metadata")]
        for i, t in enumerate(raw_tasks):
            tpath = f"spec.tasks[{i}]"
            if not isinstance(t, Mapping):
                raise ref.error(tpath, f"expected a mapping, got {type(t).__name__}")
            for key in sorted(str(k) for k in t if k not in _VCTASK_KEYS):
                self.note(ref, f"{tpath}.{key}", "unknown field")
            tname = get_str(t, "name", ref, tpath, f"default{i}") or f"default{i}"
            check_dns_label(tname, ref, f"{tpath}.name")
            if tname in seen:
                raise ref.error(
                    f"{tpath}.name", f"task name {tname!r} repeats spec.tasks[{seen[tname]}]"
                )
            seen[tname] = i
            replicas = get_int(t, "replicas", ref, tpath, 1, minimum=0)
            assert replicas is not None
            self.reserve_pods(ref, f"{tpath}.replicas", replicas)
            tmin = get_int(t, "minAvailable", ref, tpath, minimum=0)
            if tmin is not None and tmin > replicas:
                raise ref.error(
                    f"{tpath}.minAvailable", f"{tmin} is more than the task's {replicas} replicas"
                )
            template = get_map(t, "template", ref, tpath)
            tmeta = get_map(template, "metadata", ref, f"{tpath}.template")
            kueue_sources.append((tmeta, f"{tpath}.template.metadata"))
            tspec = get_map(template, "spec", ref, f"{tpath}.template")
            if not get_list(tspec, "containers", ref, f"{tpath}.template.spec"):
                raise ref.error(
                    f"{tpath}.template.spec.containers", "a task template needs a container"
                )
            info = read_pod_spec(tspec, ref, f"{tpath}.template.spec")
            info.labels = get_str_map(tmeta, "labels", ref, f"{tpath}.template.metadata")
            for f, why in info.notes:
                self.note(ref, f, why)
            tpolicies, notes = read_policies(
                get_list(t, "policies", ref, tpath), ref, f"{tpath}.policies"
            )
            for f, why in notes:
                self.note(ref, f, why)
            if tpolicies:
                role_policies[tname] = tpolicies
            priority = self._task_priority(info, tmeta, ref, f"{tpath}.template", job_priority)
            t_preempt = preemptable(tmeta, ref, job_preempt, f"{tpath}.template.metadata")
            groups.append(
                TaskGroup(
                    name=tname,
                    replicas=replicas,
                    hostname=info.hostname,
                    subdomain=info.subdomain,
                )
            )
            min_task_member[tname] = tmin if tmin is not None else replicas
            task_drafts += self._replica_drafts(
                ref, tpath, job, tname, info, priority, t_preempt, replicas
            )
        total = sum(g.replicas for g in groups)
        min_available = get_int(spec, "minAvailable", ref, "spec", minimum=0) or sum(
            min_task_member.values()
        )
        if min_available > total:
            raise ref.error(
                "spec.minAvailable", f"{min_available} is more than the {total} replicas of the job"
            )
        kwargs: dict[str, Any] = {
            "name": job,
            "queue": get_str(spec, "queue", ref, "spec", "default"),
            "min_available": min_available,
            "min_task_member": FrozenDict(min_task_member),
            "priority": job_priority,
            "preemptable": job_preempt,
            "network_topology": topo,
            "policies": policies,
            "role_policies": FrozenDict(role_policies),
            "creation": creation_seconds(meta, ref),
            "task_topology": read_task_topology(meta, ref, "metadata"),
        }
        origin = JobOrigin(
            ref=ref,
            framework="volcano",
            podgroup=ref.name,
            groups=tuple(groups),
            plugins=FrozenDict(plugins),
        )
        self._add_workload("vcjob", origin, kwargs, kueue_sources, task_drafts)

    def _pytorchjob(self, obj: Mapping[str, Any], ref: Ref) -> None:
        meta = get_map(obj, "metadata", ref, "")
        spec = get_map(obj, "spec", ref, "")
        replica_specs = get_map(spec, "pytorchReplicaSpecs", ref, "spec")
        if not replica_specs:
            raise ref.error("spec.pytorchReplicaSpecs", "no replica specs")
        run_policy = get_map(spec, "runPolicy", ref, "spec")
        sp = get_map(run_policy, "schedulingPolicy", ref, "spec.runPolicy")
        sp_path = "spec.runPolicy.schedulingPolicy"
        if spec.get("elasticPolicy") is not None:
            self.note(ref, "spec.elasticPolicy", "elastic training is not modelled")
        types = sorted((str(k) for k in replica_specs), key=lambda k: (k.lower() != "master", k))
        job = qualify(ref.namespace, ref.name)
        job_priority = self._priority(
            get_str(sp, "priorityClass", ref, sp_path), ref, f"{sp_path}.priorityClass"
        )
        job_preempt = preemptable(meta, ref, True)
        groups: list[TaskGroup] = []
        drafts: list[TaskDraft] = []
        port = PYTORCH_DEFAULT_PORT
        kueue_sources: list[tuple[Mapping[str, Any], str]] = [(meta, "metadata")]
        for rtype in types:
            rpath = f"spec.pytorchReplicaSpecs.{rtype}"
            rspec = get_map(replica_specs, rtype, ref, "spec.pytorchReplicaSpecs")
            replicas = get_int(rspec, "replicas", ref, rpath, 1, minimum=0)
            assert replicas is not None
            self.reserve_pods(ref, f"{rpath}.replicas", replicas)
            template = get_map(rspec, "template", ref, rpath)
            tmeta = get_map(template, "metadata", ref, f"{rpath}.template")
            kueue_sources.append((tmeta, f"{rpath}.template.metadata"))
            tspec = get_map(template, "spec", ref, f"{rpath}.template")
            info = read_pod_spec(tspec, ref, f"{rpath}.template.spec")
            info.labels = get_str_map(tmeta, "labels", ref, f"{rpath}.template.metadata")
            if info.scheduler_name not in self.ours:
                self._not_ours(ref, f"{rpath}.template.spec.schedulerName", info.scheduler_name)
                return
            for f, why in info.notes:
                self.note(ref, f, why)
            port = _pytorch_port(tspec, port)
            role = rtype.lower()
            priority = self._task_priority(info, tmeta, ref, f"{rpath}.template", job_priority)
            t_preempt = preemptable(tmeta, ref, job_preempt, f"{rpath}.template.metadata")
            groups.append(TaskGroup(name=role, replicas=replicas))
            drafts += self._replica_drafts(
                ref, rpath, job, role, info, priority, t_preempt, replicas
            )
        total = sum(g.replicas for g in groups)
        min_available = get_int(sp, "minAvailable", ref, sp_path, minimum=1) or total
        if min_available > total:
            raise ref.error(
                f"{sp_path}.minAvailable", f"{min_available} is more than the {total} replicas"
            )
        kwargs: dict[str, Any] = {
            "name": job,
            "queue": get_str(sp, "queue", ref, sp_path, "default"),
            "min_available": min_available,
            "priority": job_priority,
            "preemptable": job_preempt,
            "creation": creation_seconds(meta, ref),
        }
        if sp.get("minResources") is not None:
            kwargs["min_resources"] = Resources(resource_map(sp, "minResources", ref, sp_path))
        origin = JobOrigin(
            ref=ref,
            framework="pytorchjob",
            podgroup=ref.name,
            groups=tuple(groups),
            master_port=port,
        )
        self._add_workload("pytorchjob", origin, kwargs, kueue_sources, drafts)


def _pytorch_port(spec: Mapping[str, Any], default: int) -> int:
    for c in spec.get("containers") or []:
        if not isinstance(c, Mapping):
            continue
        for p in c.get("ports") or []:
            if isinstance(p, Mapping) and p.get("name") == "pytorchjob-port":
                port = p.get("containerPort")
                if isinstance(port, int) and not isinstance(port, bool):
                    return port
    return default


def task_labels(labels: Mapping[str, str], role: str) -> FrozenDict[str, str]:
    """A pod's labels as its task keeps them: the role's ``volcano.sh/task-spec`` label is
    the task's role (:attr:`~gangsched.model.Task.pod_labels` gives it back)."""
    if role and labels.get(TASK_SPEC_LABEL) == role:
        return FrozenDict({k: v for k, v in labels.items() if k != TASK_SPEC_LABEL})
    return FrozenDict(labels)


def task_draft(
    ref: Ref,
    path: str,
    kwargs: dict[str, Any],
    labels: Mapping[str, str],
    pod: str,
    job: str,
    role: str,
    index: int,
    *,
    created: bool,
) -> TaskDraft:
    """The draft of pod ``pod`` (in ``ref``'s namespace) of role ``role`` of ``job``:
    ``created`` when the pod exists, else a replica the job's controller would create."""
    origin = PodOrigin(
        namespace=ref.namespace, name=pod, job=job, role=role, index=index, created=created
    )
    return TaskDraft(ref=ref, path=path, kwargs=kwargs, origin=origin, labels=labels)
