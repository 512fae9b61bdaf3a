"""Decisions out, as Kubernetes and Volcano objects.

Given the :class:`~gangsched.io.k8s.Cluster` a cycle ran on and its
:class:`~gangsched.decisions.Decisions`, this module writes what a Volcano scheduler and job
controller would post:

* :func:`bindings` — ``v1 Binding`` objects (the pods/binding subresource body). GPU device
  indices travel in the annotation ``gangsched.io/gpu-indices``, which the API server copies
  onto the pod, so the next snapshot knows which devices a pod holds;
* :func:`evictions` — ``policy/v1 Eviction`` bodies;
* :func:`podgroup_statuses` / :func:`queue_statuses` — PodGroup and Queue objects carrying only
  the status a cycle computes (phase, the ``Unschedulable`` / ``Scheduled`` condition with the
  reason in words; queue allocation and job counts). No timestamps: the output is a pure
  function of the input;
* :func:`job_actions` — lifecycle actions the job policies ask for, computed by the
  scheduler's own engine (:func:`gangsched.session.rules.policies.job_actions`);
* :func:`job_environment` — the environment Volcano's ``env``, ``svc`` and ``pytorch`` job
  plugins (or the Kubeflow training operator) give each bound pod: ``VC_TASK_INDEX``,
  ``VC_<TASK>_HOSTS``, ``MASTER_ADDR``, ``RANK``...;
* :func:`dump_manifests` — a snapshot written as Nodes, Queues, HyperNodes, PriorityClasses,
  PodGroups and Pods, which :func:`gangsched.io.k8s.load_objects` reads back to an equal
  snapshot.
"""

from __future__ import annotations

from typing import Any

from gangsched.decisions import Decisions, JobAction, JobStatus
from gangsched.io.k8s import Cluster, JobOrigin, TaskGroup, split_name
from gangsched.io.k8s.kinds import GPU_INDICES_KEY
from gangsched.io.volcano import _quantities, dump_manifests, format_quantity
from gangsched.session.rules.policies import job_actions as policy_actions

__all__ = [
    "REASON_KEY",
    "bindings",
    "dump_manifests",
    "evictions",
    "format_quantity",
    "job_actions",
    "job_environment",
    "kubernetes_output",
    "podgroup_statuses",
    "queue_statuses",
    "svc_configmaps",
]

#: Annotation on an Eviction body carrying gangsched's reason (the API server ignores it).
REASON_KEY = "gangsched.io/reason"


# ------------------------------------------------------------------------------------------
# Binds, evictions, statuses


def bindings(cluster: Cluster, decisions: Decisions) -> list[dict[str, Any]]:
    """One ``v1 Binding`` per bind, in the order the scheduler made them."""
    out: list[dict[str, Any]] = []
    for b in decisions.binds:
        ns, pod = cluster.pod_of(b.task)
        meta: dict[str, Any] = {"name": pod, "namespace": ns}
        if b.gpu_indices:
            meta["annotations"] = {GPU_INDICES_KEY: ",".join(str(i) for i in b.gpu_indices)}
        out.append(
            {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": meta,
                "target": {"apiVersion": "v1", "kind": "Node", "name": b.node},
            }
        )
    return out


def evictions(cluster: Cluster, decisions: Decisions) -> list[dict[str, Any]]:
    """One ``policy/v1 Eviction`` per eviction (post to the pod's eviction subresource)."""
    out: list[dict[str, Any]] = []
    for e in decisions.evictions:
        ns, pod = cluster.pod_of(e.task)
        annotations = {REASON_KEY: e.reason}
        if e.preemptor:
            annotations["gangsched.io/preemptor"] = e.preemptor
        out.append(
            {
                "apiVersion": "policy/v1",
                "kind": "Eviction",
                "metadata": {"name": pod, "namespace": ns, "annotations": annotations},
            }
        )
    return out


def _podgroup_ref(cluster: Cluster, job: str) -> tuple[str, str]:
    origin = cluster.jobs.get(job)
    if origin is None:
        return split_name(job)
    return origin.ref.namespace or "default", origin.podgroup


def _condition(status: JobStatus) -> dict[str, str] | None:
    if status.ready:
        return {
            "type": "Scheduled",
            "status": "True",
            "reason": "tasks in gang are ready to be scheduled",
            "message": status.message,
        }
    if status.phase in ("Running", "Completed") or not status.reason:
        return None
    reason = "NotEnoughResources" if status.reason == "Unschedulable" else status.reason
    return {"type": "Unschedulable", "status": "True", "reason": reason, "message": status.message}


def podgroup_statuses(cluster: Cluster, decisions: Decisions) -> list[dict[str, Any]]:
    """A PodGroup object per job with the status this cycle computed (sorted by job name)."""
    out: list[dict[str, Any]] = []
    for job in sorted(decisions.jobs):
        st = decisions.jobs[job]
        ns, name = _podgroup_ref(cluster, job)
        status: dict[str, Any] = {
            "phase": st.phase,
            "running": st.running,
            "succeeded": st.succeeded,
            "failed": st.failed,
        }
        cond = _condition(st)
        if cond is not None:
            status["conditions"] = [cond]
        out.append(
            {
                "apiVersion": "scheduling.volcano.sh/v1beta1",
                "kind": "PodGroup",
                "metadata": {"name": name, "namespace": ns},
                "status": status,
            }
        )
    return out


def queue_statuses(cluster: Cluster, decisions: Decisions) -> list[dict[str, Any]]:
    """A Queue object per queue with its status after the cycle (sorted by name)."""
    del cluster  # queues are cluster-scoped: the name is all we need
    out: list[dict[str, Any]] = []
    for name in sorted(decisions.queues):
        q = decisions.queues[name]
        out.append(
            {
                "apiVersion": "scheduling.volcano.sh/v1beta1",
                "kind": "Queue",
                "metadata": {"name": name},
                "status": {
                    "state": q.state,
                    "allocated": _quantities({k: v for k, v in q.allocated.items() if v}),
                    "inqueue": q.inqueue,
                    "pending": q.pending,
                    "running": q.running,
                    "unknown": q.unknown,
                    "completed": q.completed,
                },
            }
        )
    return out


# ------------------------------------------------------------------------------------------
# Policies


def job_actions(cluster: Cluster, decisions: Decisions) -> tuple[JobAction, ...]:
    """Lifecycle actions the jobs' policies ask for after this cycle.

    One engine: :func:`gangsched.session.rules.policies.job_actions` (the one the scheduler runs),
    fed with
    the cluster's snapshot, the evictions in ``decisions`` (task → reason) and each job's
    phase after the cycle (``decisions.jobs``). For the decisions :func:`gangsched.schedule`
    returned on this cluster, the result equals ``decisions.job_actions``.
    """
    evicted = {e.task: e.reason for e in decisions.evictions}
    phases = {name: status.phase for name, status in decisions.jobs.items()}
    return policy_actions(cluster.snapshot, evicted, phases)


# ------------------------------------------------------------------------------------------
# Job plugins' environment


def _env_key(task: str) -> str:
    return task.replace("-", "_").upper()


def _hosts(job_name: str, group: TaskGroup) -> list[str]:
    """Volcano's svc plugin: ``<hostname>.<subdomain>`` of each replica of a task."""
    subdomain = group.subdomain or job_name
    if group.hostname:
        return [f"{group.hostname}.{subdomain}"]
    return [f"{job_name}-{group.name}-{i}.{subdomain}" for i in range(group.replicas)]


def _flag(args: tuple[str, ...], name: str, default: str) -> str:
    for a in args:
        key, sep, value = a.lstrip("-").partition("=")
        if sep and key == name:
            return value
    return default


def _svc_env(job_name: str, groups: tuple[TaskGroup, ...]) -> dict[str, str]:
    env: dict[str, str] = {}
    for g in groups:
        hosts = _hosts(job_name, g)
        env[f"VC_{_env_key(g.name)}_HOSTS"] = ",".join(hosts)
        env[f"VC_{_env_key(g.name)}_NUM"] = str(len(hosts))
    return env


def job_environment(cluster: Cluster, decisions: Decisions) -> dict[str, dict[str, str]]:
    """Environment variables each pod bound this cycle gets from its job's plugins.

    Returns ``{task name: {variable: value}}`` (tasks in bind order, variables sorted); pods
    of jobs without such plugins are left out.
    """
    out: dict[str, dict[str, str]] = {}
    for b in decisions.binds:
        pod = cluster.pods.get(b.task)
        if pod is None:
            continue
        origin = cluster.jobs.get(pod.job)
        if origin is None:
            continue
        env = _pod_env(origin, pod.role, pod.index)
        if env:
            out[b.task] = dict(sorted(env.items()))
    return out


def _pod_env(origin: JobOrigin, role: str, index: int) -> dict[str, str]:
    name = origin.ref.name
    env: dict[str, str] = {}
    if origin.framework == "pytorchjob":
        total = sum(g.replicas for g in origin.groups)
        has_master = any(g.name == "master" for g in origin.groups)
        rank = index if role == "master" or not has_master else index + 1
        env.update(
            MASTER_ADDR=f"{name}-master-0" if has_master else f"{name}-worker-0",
            MASTER_PORT=str(origin.master_port),
            WORLD_SIZE=str(total),
            RANK=str(rank),
        )
        return env
    plugins = origin.plugins
    if "env" in plugins:
        env["VK_TASK_INDEX"] = str(index)
        env["VC_TASK_INDEX"] = str(index)
    if "svc" in plugins:
        env.update(_svc_env(name, origin.groups))
    if "pytorch" in plugins:
        args = plugins["pytorch"]
        master = _flag(args, "master", "master")
        worker = _flag(args, "worker", "worker")
        port = _flag(args, "port", "23456")
        groups = {g.name: g for g in origin.groups}
        if master in groups:
            mg = groups[master]
            host = mg.hostname or f"{name}-{master}-0"
            env["MASTER_ADDR"] = f"{host}.{mg.subdomain or name}"
            env["MASTER_PORT"] = port
            total = sum(g.replicas for g in origin.groups if g.name in (master, worker))
            env["WORLD_SIZE"] = str(total)
            if role == master:
                env["RANK"] = "0"
            elif role == worker:
                env["RANK"] = str(index + 1)
    return env


def svc_configmaps(cluster: Cluster, decisions: Decisions) -> list[dict[str, Any]]:
    """The ``<job>-svc`` ConfigMap Volcano's svc plugin keeps for each job that uses it
    (host lists per task), for jobs with a pod bound this cycle."""
    out: list[dict[str, Any]] = []
    done: set[str] = set()
    for b in decisions.binds:
        pod = cluster.pods.get(b.task)
        origin = cluster.jobs.get(pod.job) if pod is not None else None
        if origin is None or "svc" not in origin.plugins or pod is None or pod.job in done:
            continue
        done.add(pod.job)
        data: dict[str, str] = {}
        for g in origin.groups:
            data[f"{g.name.replace('-', '_')}.host"] = "\n".join(_hosts(origin.ref.name, g))
        data.update(_svc_env(origin.ref.name, origin.groups))
        out.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"{origin.ref.name}-svc", "namespace": origin.ref.namespace},
                "data": dict(sorted(data.items())),
            }
        )
    return out


def kubernetes_output(cluster: Cluster, decisions: Decisions) -> dict[str, Any]:
    """Everything above as one ``v1 List``: Bindings, Evictions, PodGroups, Queues and the
    svc ConfigMaps, in that order."""
    items = (
        bindings(cluster, decisions)
        + evictions(cluster, decisions)
        + podgroup_statuses(cluster, decisions)
        + queue_statuses(cluster, decisions)
        + svc_configmaps(cluster, decisions)
    )
    return {"apiVersion": "v1", "kind": "List", "items": items}
