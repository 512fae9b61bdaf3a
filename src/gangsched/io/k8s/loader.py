"""The manifest loader: objects sorted by kind, then read into drafts and built into one
snapshot whose errors name the manifest they came from (see :mod:`gangsched.io.k8s`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from gangsched._frozen import FrozenDict
from gangsched.config import Config
from gangsched.errors import ConfigError, SnapshotError
from gangsched.io._text import bound_violation
from gangsched.io.k8s.budgets import read_budget, resolve_budgets
from gangsched.io.k8s.fields import Ref, check_dns_label, check_dns_subdomain, get_map
from gangsched.io.k8s.kinds import (
    GPU_INDICES_KEY,
    GPU_PRODUCT_LABEL,
    SYSTEM_PRIORITY_CLASSES,
    HyperNodeDraft,
    NodeDraft,
    QueueDraft,
    read_hypernode,
    read_node,
    read_preemption_policy,
    read_priority_class,
    read_queue,
    resolve_members,
)
from gangsched.io.k8s.kueue import kueue_topology, topology_levels
from gangsched.io.k8s.pods import PodReader
from gangsched.io.k8s.records import SCHEDULER_CONF_KEY, Cluster, Ignored, JobDraft, TaskDraft
from gangsched.io.k8s.workloads import KUEUE_KWARG
from gangsched.limits import Limits
from gangsched.model import (
    OCCUPYING_PHASES,
    DisruptionBudget,
    GpuRequest,
    Gpus,
    HyperNode,
    Job,
    Node,
    Queue,
    Resources,
    Task,
)
from gangsched.model.snapshot import Snapshot
from gangsched.units import PODS

# (API group, kind) → internal key, with the versions understood.
_SUPPORTED: Mapping[tuple[str, str], tuple[str, tuple[str, ...]]] = {
    ("batch.volcano.sh", "Job"): ("vcjob", ("v1alpha1",)),
    ("scheduling.volcano.sh", "Queue"): ("queue", ("v1beta1",)),
    ("scheduling.volcano.sh", "PodGroup"): ("podgroup", ("v1beta1",)),
    ("topology.volcano.sh", "HyperNode"): ("hypernode", ("v1alpha1",)),
    ("scheduling.k8s.io", "PriorityClass"): ("priorityclass", ("v1", "v1beta1")),
    ("policy", "PodDisruptionBudget"): ("pdb", ("v1",)),
    ("", "Node"): ("node", ("v1",)),
    ("", "Pod"): ("pod", ("v1",)),
    ("", "ConfigMap"): ("configmap", ("v1",)),
    ("kubeflow.org", "PyTorchJob"): ("pytorchjob", ("v1",)),
    ("kueue.x-k8s.io", "Topology"): ("kueuetopology", ("v1alpha1", "v1beta1")),
}
_CLUSTER_SCOPED = frozenset({"queue", "hypernode", "priorityclass", "node", "kueuetopology"})
_INTERCHANGE_KEYS = frozenset({"nodes", "hypernodes", "queues", "jobs", "tasks"})
_ORDER = (
    "priorityclass",
    "node",
    "queue",
    "vcjob",
    "pytorchjob",
    "podgroup",
    "pod",
    "hypernode",
    "kueuetopology",
    "pdb",
)


def is_manifest(doc: object) -> bool:
    """Whether ``doc`` looks like a Kubernetes object (has ``apiVersion`` or ``kind``)."""
    return isinstance(doc, Mapping) and ("apiVersion" in doc or "kind" in doc)


class _Loader(PodReader):
    def __init__(self, scheduler_names: tuple[str, ...], limits: Limits) -> None:
        self.ours = frozenset(scheduler_names)
        self.limits = limits
        self.pod_count = 0
        self.by_kind: dict[str, list[tuple[Mapping[str, Any], Ref]]] = {k: [] for k in _ORDER}
        self.seen: dict[tuple[str, str, str], str] = {}
        self.interchange: list[tuple[Mapping[str, Any], str]] = []
        self.ignored: list[Ignored] = []
        self.config: Config | None = None
        self.config_ref: Ref | None = None
        # filled by build()
        self.priorities: dict[str, int] = dict(SYSTEM_PRIORITY_CLASSES)
        self.default_priority = 0
        self.preemption_policies: dict[str, str] = {}
        self.default_class: str | None = None
        self.jobs: dict[str, JobDraft] = {}
        self.tasks: dict[str, TaskDraft] = {}
        self.by_object: dict[tuple[str, str, str], str] = {}  # (key, ns, name) → job name
        self.node_drafts: dict[str, NodeDraft] = {}
        self.foreign_use: dict[str, dict[str, int]] = {}
        self.foreign_gpus: dict[str, int] = {}
        self.foreign_pods: dict[str, int] = {}
        self.kueue_levels: dict[str, int] = {}

    # -- intake ------------------------------------------------------------------------------

    def add(self, obj: object, where: str) -> None:
        if not isinstance(obj, Mapping):
            raise SnapshotError(
                f"expected a mapping, got {type(obj).__name__} ({where})", kind="document"
            )
        if not is_manifest(obj):
            unknown = sorted(str(k) for k in obj if k not in _INTERCHANGE_KEYS)
            if unknown:
                raise SnapshotError(
                    "neither a Kubernetes object (apiVersion, kind) nor a gangsched snapshot "
                    f"(nodes, hypernodes, queues, jobs, tasks) ({where})",
                    kind="document",
                    field=unknown[0],
                )
            self.interchange.append((obj, where))
            return
        api_version = obj.get("apiVersion")
        kind = obj.get("kind")
        for key, value in (("apiVersion", api_version), ("kind", kind)):
            if not isinstance(value, str) or not value:
                raise SnapshotError(
                    f"missing or not a string ({where})", kind="document", field=key
                )
        assert isinstance(api_version, str) and isinstance(kind, str)
        if kind.endswith("List") and "items" in obj:
            items = obj.get("items") or []
            if not isinstance(items, list):
                raise SnapshotError(f"expected a list ({where})", kind=kind, field="items")
            for i, item in enumerate(items):
                self.add(item, f"{where}, items[{i}]")
            return
        group, _, version = api_version.rpartition("/")
        meta = obj.get("metadata")
        meta = meta if isinstance(meta, Mapping) else {}
        raw_name = meta.get("name")
        raw_ns = meta.get("namespace")
        supported = _SUPPORTED.get((group, kind))
        scoped = supported is not None and supported[0] in _CLUSTER_SCOPED
        namespace = "" if scoped else (raw_ns if isinstance(raw_ns, str) and raw_ns else "default")
        name = raw_name if isinstance(raw_name, str) else ""
        ref = Ref(kind=kind, namespace=namespace, name=name, source=where, api_version=api_version)
        if supported is None:
            self.note(ref, "", f"unsupported kind {api_version} {kind}")
            return
        key, versions = supported
        if version not in versions:
            self.note(ref, "apiVersion", f"unsupported version {api_version} of {kind}")
            return
        if not name:
            raise ref.error("metadata.name", "missing")
        check_dns_subdomain(name, ref, "metadata.name")
        if not scoped:
            check_dns_label(namespace, ref, "metadata.namespace")
        seen_key = (key, namespace, name)
        if seen_key in self.seen:
            raise ref.error("metadata.name", f"defined twice (first in {self.seen[seen_key]})")
        self.seen[seen_key] = where
        if key == "configmap":
            self._configmap(obj, ref)
            return
        self.by_kind[key].append((obj, ref))

    def _configmap(self, obj: Mapping[str, Any], ref: Ref) -> None:
        data = get_map(obj, "data", ref, "")
        if SCHEDULER_CONF_KEY not in data:
            self.note(ref, "", f"a ConfigMap without {SCHEDULER_CONF_KEY} (not a scheduler config)")
            return
        if self.config_ref is not None:
            raise ref.error(
                f"data.{SCHEDULER_CONF_KEY}",
                f"a second scheduler configuration (the first is {self.config_ref})",
            )
        text = data[SCHEDULER_CONF_KEY]
        if not isinstance(text, str):
            raise ref.error(f"data.{SCHEDULER_CONF_KEY}", "expected the configuration text")
        bad = bound_violation(text, max_nesting=self.limits.max_nesting)
        if bad is not None:
            raise ConfigError(
                f"{bad} ({ref.source})",
                kind=ref.kind,
                name=ref.label,
                field=f"data[{SCHEDULER_CONF_KEY}]",
            )
        try:
            self.config = Config.from_volcano_yaml(text)
        except ConfigError as exc:
            sub = f".{exc.field}" if exc.field else ""
            raise ConfigError(
                f"{exc.detail} ({ref.source})",
                kind=ref.kind,
                name=ref.label,
                field=f"data[{SCHEDULER_CONF_KEY}]{sub}",
            ) from None
        self.config_ref = ref

    # -- build -------------------------------------------------------------------------------

    def build(self) -> Cluster:
        default_ref: Ref | None = None
        for obj, ref in self.by_kind["priorityclass"]:
            value, default = read_priority_class(obj, ref)
            self.priorities[ref.name] = value
            policy = read_preemption_policy(obj, ref)
            if policy is not None:
                self.preemption_policies[ref.name] = policy
            if default:
                if default_ref is not None:
                    # The API server admits one default PriorityClass only.
                    raise ref.error(
                        "globalDefault",
                        f"a second default PriorityClass ({default_ref} is already the default)",
                    )
                default_ref = ref
                self.default_priority = value
                self.default_class = ref.name
        extra = self._interchange()
        self._kueue_levels()
        for obj, ref in self.by_kind["node"]:
            self.node_drafts[ref.name] = read_node(obj, ref)
        queues = [read_queue(obj, ref) for obj, ref in self.by_kind["queue"]]
        for obj, ref in self.by_kind["vcjob"]:
            self._vcjob(obj, ref)
        for obj, ref in self.by_kind["pytorchjob"]:
            self._pytorchjob(obj, ref)
        for obj, ref in self.by_kind["podgroup"]:
            self._podgroup(obj, ref)
        for obj, ref in self.by_kind["pod"]:
            self._pod(obj, ref)
        origins: dict[tuple[str, str], tuple[Ref, str]] = {}
        nodes = self._nodes(origins)
        extra["nodes"] = [self._interchange_node(n) for n in extra["nodes"]]
        node_labels: dict[str, Mapping[str, str]] = {n.name: n.labels for n in nodes}
        node_labels.update({n.name: n.labels for n in extra["nodes"]})
        hypernodes = self._hypernodes(node_labels, origins)
        queue_records = self._queues(queues, origins)
        jobs = self._jobs(origins)
        tasks = self._tasks(nodes + list(extra["nodes"]), origins)
        all_jobs = jobs + list(extra["jobs"])
        all_queues = queue_records + list(extra["queues"])
        if any(j.queue == "default" for j in all_jobs) and not any(
            q.name == "default" for q in all_queues
        ):
            all_queues.append(Queue(name="default"))
        try:
            snapshot = Snapshot(
                nodes=(*nodes, *extra["nodes"]),
                hypernodes=(*hypernodes, *extra["hypernodes"]),
                queues=tuple(all_queues),
                jobs=tuple(all_jobs),
                tasks=(*tasks, *extra["tasks"]),
                disruption_budgets=tuple(self._budgets()),
            )
        except SnapshotError as exc:
            raise _rethrow(exc, origins) from None
        return Cluster(
            snapshot=snapshot,
            config=self.config,
            jobs=FrozenDict({name: d.origin for name, d in self.jobs.items()}),
            pods=FrozenDict({name: d.origin for name, d in self.tasks.items()}),
            ignored=tuple(self.ignored),
        )

    def _budgets(self) -> list[DisruptionBudget]:
        """PodDisruptionBudgets, their selectors matched against the pods' labels."""
        drafts = [read_budget(obj, ref) for obj, ref in self.by_kind["pdb"]]
        if not drafts:
            return []
        pods = [(name, d.origin.namespace, d.labels) for name, d in self.tasks.items()]
        return resolve_budgets(drafts, pods)

    def _interchange(self) -> dict[str, list[Any]]:
        out: dict[str, list[Any]] = {k: [] for k in _INTERCHANGE_KEYS}
        classes: dict[str, Any] = {
            "nodes": Node,
            "hypernodes": HyperNode,
            "queues": Queue,
            "jobs": Job,
            "tasks": Task,
        }
        for doc, where in self.interchange:
            for key in ("nodes", "hypernodes", "queues", "jobs", "tasks"):
                raw = doc.get(key) or []
                if not isinstance(raw, list):
                    raise SnapshotError(f"expected a list ({where})", kind="snapshot", field=key)
                if key == "tasks":
                    self.pod_count += len(raw)
                    if self.pod_count > self.limits.max_tasks:
                        raise SnapshotError(
                            f"the input would hold {self.pod_count} tasks, more than the limit "
                            f"of {self.limits.max_tasks} (Limits.max_tasks) ({where})",
                            kind="snapshot",
                            field=key,
                        )
                for i, item in enumerate(raw):
                    try:
                        out[key].append(classes[key].from_dict(item, where=f"#{i}"))
                    except SnapshotError as exc:
                        raise SnapshotError(
                            f"{exc.detail} ({where}, {key}[{i}])",
                            kind=exc.kind,
                            name=exc.name,
                            field=exc.field,
                        ) from None
        return out

    # -- records -----------------------------------------------------------------------------

    def _free(self, name: str, allocatable: Mapping[str, int]) -> dict[str, int]:
        """``allocatable`` less what pods of other schedulers hold on node ``name``."""
        alloc = dict(allocatable)
        for res, amount in self.foreign_use.get(name, {}).items():
            alloc[res] = max(0, alloc.get(res, 0) - amount)
        if name in self.foreign_pods and PODS in alloc:
            alloc[PODS] = max(0, alloc[PODS] - self.foreign_pods[name])
        return alloc

    def _interchange_node(self, n: Node) -> Node:
        if n.name not in self.foreign_pods:
            return n
        gpus = n.gpus
        if gpus is not None:
            count = max(0, gpus.count - self.foreign_gpus.get(n.name, 0))
            gpus = Gpus(count=count, model=gpus.model, milli=gpus.milli, sharing=gpus.sharing)
        return Node(
            name=n.name,
            allocatable=Resources(self._free(n.name, n.allocatable)),
            gpus=gpus,
            labels=n.labels,
            taints=n.taints,
            unschedulable=n.unschedulable,
        )

    def _nodes(self, origins: dict[tuple[str, str], tuple[Ref, str]]) -> list[Node]:
        out: list[Node] = []
        for name, d in self.node_drafts.items():
            alloc = self._free(name, d.allocatable)
            count = max(0, d.gpu_count - self.foreign_gpus.get(name, 0))
            gpus = None
            if count:
                model = d.labels.get(GPU_PRODUCT_LABEL, "")
                gpus = Gpus(count=count, model=model, sharing=d.gpu_sharing)
            origins[("node", name)] = (d.ref, "")
            out.append(
                _built(
                    Node,
                    origins,
                    name=name,
                    allocatable=Resources(alloc),
                    gpus=gpus,
                    labels=FrozenDict(d.labels),
                    taints=d.taints,
                    unschedulable=d.unschedulable,
                )
            )
        return out

    def _hypernodes(
        self,
        node_labels: Mapping[str, Mapping[str, str]],
        origins: dict[tuple[str, str], tuple[Ref, str]],
    ) -> list[HyperNode]:
        drafts: list[HyperNodeDraft] = [read_hypernode(o, r) for o, r in self.by_kind["hypernode"]]
        names = [d.ref.name for d in drafts]
        out: list[HyperNode] = []
        for d in drafts:
            members, notes = resolve_members(d, node_labels, names)
            for f, why in notes:
                self.note(d.ref, f, why)
            origins[("hypernode", d.ref.name)] = (d.ref, "")
            out.append(
                _built(HyperNode, origins, name=d.ref.name, tier=d.tier, members=tuple(members))
            )
        return out

    def _queues(
        self, drafts: list[QueueDraft], origins: dict[tuple[str, str], tuple[Ref, str]]
    ) -> list[Queue]:
        names = {d.ref.name for d in drafts}
        out: list[Queue] = []
        for d in drafts:
            for f, why in d.notes:
                self.note(d.ref, f, why)
            kwargs = dict(d.kwargs)
            if kwargs.get("parent") == "root" and "root" not in names:
                del kwargs["parent"]  # Volcano's implicit root queue
            origins[("queue", d.ref.name)] = (d.ref, "")
            out.append(_built(Queue, origins, **kwargs))
        return out

    def _kueue_levels(self) -> None:
        """Topology level (node label) → tier, from the Kueue Topology objects."""
        seen: dict[str, tuple[int, Ref]] = {}
        for obj, ref in self.by_kind["kueuetopology"]:
            for label, tier in topology_levels(obj, ref).items():
                if label in seen and seen[label][0] != tier:
                    raise ref.error(
                        "spec.levels",
                        f"level {label!r} is tier {tier} here but tier {seen[label][0]} in "
                        f"{seen[label][1]}",
                    )
                seen.setdefault(label, (tier, ref))
        self.kueue_levels = {label: tier for label, (tier, _) in seen.items()}

    def _jobs(self, origins: dict[tuple[str, str], tuple[Ref, str]]) -> list[Job]:
        out: list[Job] = []
        for name, d in self.jobs.items():
            kwargs = dict(d.kwargs)
            found = kwargs.pop(KUEUE_KWARG, None)
            if found is not None:
                if kwargs.get("network_topology") is not None:
                    raise d.ref.error(
                        found[0],
                        "Kueue topology annotations and spec.networkTopology both set the "
                        "job's topology; keep one",
                    )
                kwargs["network_topology"] = kueue_topology(
                    found, self.kueue_levels, d.ref, int(kwargs.get("min_available", 1))
                )
            if "phase" not in kwargs and any(
                self.tasks[t].kwargs.get("phase") in OCCUPYING_PHASES for t in d.tasks
            ):
                kwargs["phase"] = "Running"
            origins[("job", name)] = (d.ref, "")
            out.append(_built(Job, origins, **kwargs))
        return out

    def _tasks(
        self, nodes: Sequence[Node], origins: dict[tuple[str, str], tuple[Ref, str]]
    ) -> list[Task]:
        drafts = [self.tasks[t] for d in self.jobs.values() for t in d.tasks]
        _assign_gpu_indices(drafts, {n.name: n for n in nodes})
        out: list[Task] = []
        for d in drafts:
            origins[("task", d.kwargs["name"])] = (d.ref, d.path)
            out.append(_built(Task, origins, **d.kwargs))
        return out


def _assign_gpu_indices(drafts: Sequence[TaskDraft], nodes: Mapping[str, Node]) -> None:
    """Give every occupying GPU task without known indices the lowest free devices of its node
    (Kubernetes does not record which devices a pod holds)."""
    free: dict[str, list[int]] = {}
    for d in drafts:
        kw = d.kwargs
        node = nodes.get(kw.get("node") or "")
        if node is None or node.gpus is None or kw.get("phase") not in OCCUPYING_PHASES:
            continue
        left = free.setdefault(node.name, [node.gpus.milli] * node.gpus.count)
        gpu: GpuRequest | None = kw.get("gpu_request")
        for idx in kw.get("gpu_indices", ()):
            if gpu is not None and 0 <= idx < len(left):
                left[idx] -= gpu.milli if gpu.fractional else left[idx]
    for d in drafts:
        kw = d.kwargs
        gpu = kw.get("gpu_request")
        if gpu is None or kw.get("phase") not in OCCUPYING_PHASES or kw.get("gpu_indices"):
            continue
        node = nodes.get(kw.get("node") or "")
        if node is None or node.gpus is None:
            where = "spec.nodeName" if d.path == "" else d.path
            raise d.ref.error(where, f"holds {gpu.count} GPU(s) on a node without free GPUs")
        left = free.setdefault(node.name, [node.gpus.milli] * node.gpus.count)
        need = gpu.milli if gpu.fractional else node.gpus.milli
        chosen = [i for i, m in enumerate(left) if m >= need][: gpu.count]
        if len(chosen) < gpu.count:
            raise d.ref.error(
                "spec.nodeName",
                f"holds {gpu.count} GPU(s) but node {node.name!r} has only {len(chosen)} free",
            )
        for i in chosen:
            left[i] -= need
        kw["gpu_indices"] = tuple(chosen)


_FIELD_PATHS: Mapping[str, Mapping[str, str]] = {
    "job": {
        "queue": "spec.queue",
        "min_available": "spec.minAvailable",
        "min_task_member": "spec.minTaskMember",
        "name": "metadata.name",
    },
    "task": {
        "node": "spec.nodeName",
        "gpu_indices": f"metadata.annotations[{GPU_INDICES_KEY}]",
        "name": "metadata.name",
        "job": "metadata",
    },
    "node": {"allocatable": "status.allocatable", "name": "metadata.name", "gpus": "status"},
    "hypernode": {"members": "spec.members", "tier": "spec.tier", "name": "metadata.name"},
    "queue": {"parent": "spec.parent", "weight": "spec.weight", "name": "metadata.name"},
}


R = TypeVar("R")


def _built(
    record: Callable[..., R], origins: Mapping[tuple[str, str], tuple[Ref, str]], **kwargs: Any
) -> R:
    """``record(**kwargs)``, its error re-expressed in terms of the manifest (:func:`_rethrow`)."""
    try:
        return record(**kwargs)
    except SnapshotError as exc:
        raise _rethrow(exc, origins) from None


def _rethrow(
    exc: SnapshotError, origins: Mapping[tuple[str, str], tuple[Ref, str]]
) -> SnapshotError:
    """Re-express a model / snapshot error in terms of the manifest it came from."""
    hit = origins.get((exc.kind, exc.name))
    if hit is None:
        return exc
    ref, base = hit
    head, _, rest = exc.field.partition(".")
    mapped = _FIELD_PATHS.get(exc.kind, {}).get(head)
    if base and exc.kind == "task":
        # A replica synthesized from a workload template: point at the template.
        path = base
        detail = f"{exc.detail} (replica {exc.name!r}, field {exc.field})"
    else:
        path = (mapped + (f".{rest}" if rest else "")) if mapped else exc.field
        detail = exc.detail
    if exc.kind == "job" and ref.kind == "PyTorchJob" and head == "queue":
        path = "spec.runPolicy.schedulingPolicy.queue"
    return ref.error(path, detail)
