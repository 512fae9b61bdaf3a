"""Records and names shared by the manifest loader and the output writers.

:class:`Cluster` is what :func:`gangsched.io.k8s.load_objects` returns: the snapshot plus,
for every job and task, the Kubernetes object it came from (:class:`JobOrigin`,
:class:`PodOrigin`), and what was ignored (:class:`Ignored`). The label and annotation keys
are Volcano's, Kubeflow's and gangsched's own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gangsched._frozen import FrozenDict
from gangsched.config import Config
from gangsched.io.k8s.fields import Ref
from gangsched.model.snapshot import Snapshot

__all__ = [
    "DEFAULT_SCHEDULERS",
    "GROUP_NAME_KEYS",
    "JOB_NAME_LABEL",
    "KUBEFLOW_INDEX_LABEL",
    "KUBEFLOW_JOB_LABEL",
    "KUBEFLOW_TYPE_LABEL",
    "POLICIES_KEY",
    "PYTORCH_DEFAULT_PORT",
    "QUEUE_NAME_KEYS",
    "SCHEDULER_CONF_KEY",
    "TASK_INDEX_LABEL",
    "TASK_SPEC_LABEL",
    "Cluster",
    "Ignored",
    "JobDraft",
    "JobOrigin",
    "PodOrigin",
    "TaskDraft",
    "TaskGroup",
    "qualify",
    "split_name",
]

#: Pods and workloads with one of these ``schedulerName`` values are scheduled by gangsched.
DEFAULT_SCHEDULERS: tuple[str, ...] = ("volcano", "gangsched")
#: The key of Volcano's scheduler ConfigMap that holds ``volcano-scheduler.conf``.
SCHEDULER_CONF_KEY = "volcano-scheduler.conf"

GROUP_NAME_KEYS = ("scheduling.k8s.io/group-name", "scheduling.volcano.sh/group-name")
QUEUE_NAME_KEYS = ("scheduling.volcano.sh/queue-name", "volcano.sh/queue-name")
JOB_NAME_LABEL = "volcano.sh/job-name"
TASK_SPEC_LABEL = "volcano.sh/task-spec"
TASK_INDEX_LABEL = "volcano.sh/task-index"
KUBEFLOW_JOB_LABEL = "training.kubeflow.org/job-name"
KUBEFLOW_TYPE_LABEL = "training.kubeflow.org/replica-type"
KUBEFLOW_INDEX_LABEL = "training.kubeflow.org/replica-index"
PYTORCH_DEFAULT_PORT = 23456
#: gangsched's annotation carrying job policies on a PodGroup (``event:action,...``), so a
#: snapshot written out as PodGroups keeps them.
POLICIES_KEY = "gangsched.io/policies"


def qualify(namespace: str, name: str) -> str:
    """gangsched's name for a namespaced object: ``name`` in ``default``, else ``ns/name``."""
    return name if namespace in ("", "default") else f"{namespace}/{name}"


def split_name(qualified: str) -> tuple[str, str]:
    """Inverse of :func:`qualify`: ``(namespace, name)``."""
    ns, sep, name = qualified.partition("/")
    return (ns, name) if sep else ("default", qualified)


# ------------------------------------------------------------------------------------------
# Result records


@dataclass(frozen=True, slots=True)
class Ignored:
    """Something in the input gangsched did not use: a whole object (``field`` '') or a field."""

    ref: Ref
    field: str
    reason: str

    def __str__(self) -> str:
        where = f"{self.ref}" + (f": {self.field}" if self.field else "")
        src = f" ({self.ref.source})" if self.ref.source else ""
        return f"{where}: {self.reason}{src}"


@dataclass(frozen=True, slots=True)
class TaskGroup:
    """One Volcano task spec (or PyTorchJob replica type): ``name`` is the role."""

    name: str
    replicas: int
    hostname: str = ""
    subdomain: str = ""


@dataclass(frozen=True, slots=True)
class JobOrigin:
    """Where a gangsched job came from.

    ``framework`` is ``volcano`` (a Volcano Job), ``pytorchjob``, ``podgroup`` or ``pod``;
    ``podgroup`` names the PodGroup object that stands for it (same namespace as ``ref``).
    """

    ref: Ref
    framework: str
    podgroup: str
    groups: tuple[TaskGroup, ...] = ()
    plugins: FrozenDict[str, tuple[str, ...]] = field(default_factory=FrozenDict)
    master_port: int = PYTORCH_DEFAULT_PORT


@dataclass(frozen=True, slots=True)
class PodOrigin:
    """The pod behind a gangsched task. ``created`` is False for a replica the job controller
    has not created yet (synthesized from the job's template)."""

    namespace: str
    name: str
    job: str
    role: str
    index: int
    created: bool


@dataclass(frozen=True, slots=True)
class Cluster:
    """Everything read from a set of manifests."""

    snapshot: Snapshot
    config: Config | None
    jobs: Mapping[str, JobOrigin]
    pods: Mapping[str, PodOrigin]
    ignored: tuple[Ignored, ...]

    def pod_of(self, task: str) -> tuple[str, str]:
        """``(namespace, pod name)`` of a task (tasks from interchange input: from its name)."""
        origin = self.pods.get(task)
        return (origin.namespace, origin.name) if origin else split_name(task)


# ------------------------------------------------------------------------------------------
# Drafts


@dataclass(slots=True)
class JobDraft:
    """A job while the loader assembles it: the model's keyword arguments so far."""

    ref: Ref
    origin: JobOrigin
    kwargs: dict[str, Any]
    tasks: list[str]  # gangsched task names, in order


@dataclass(slots=True)
class TaskDraft:
    """A task while the loader assembles it; ``path`` is the template's field path for a
    replica synthesized from a workload ('' for a Pod)."""

    ref: Ref
    path: str
    kwargs: dict[str, Any]
    origin: PodOrigin
    #: The pod's labels (a replica's: its template's), matched by PodDisruptionBudgets.
    labels: Mapping[str, str] = field(default_factory=dict)
