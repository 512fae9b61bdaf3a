"""Kubernetes and Volcano manifests in: a :class:`~gangsched.model.snapshot.Snapshot` out.

Theory of operation
-------------------
A Volcano user already has YAML: Volcano Jobs, Queues, PodGroups, HyperNodes, the scheduler
ConfigMap, Kubernetes Nodes, Pods and PriorityClasses, Kubeflow PyTorchJobs. :func:`load_text`,
:func:`load_files` and :func:`load_objects` read any mix of them (multi-document YAML, JSON,
``kind: List``, or the dicts the API server returns) and build one :class:`Cluster`: the
snapshot, the scheduler configuration found in the input (if any), where every job and task
came from (so decisions can be written back as Kubernetes objects, see
:mod:`gangsched.io.volcano_out`), and what was ignored and why. Nothing is dropped silently:
an unsupported kind, a pod of another scheduler, a field gangsched does not model, each lands
in :attr:`Cluster.ignored`. Invalid input raises :class:`~gangsched.errors.SnapshotError`
naming the manifest (kind, namespace/name), the field path and the document it came from.

Mapping (docs/volcano.md has the full table):

* ``batch.volcano.sh/v1alpha1 Job`` → one gangsched job (the PodGroup the Volcano controller
  would create) with one task per replica, named ``<job>-<task>-<index>`` like Volcano's pods,
  ``role`` = task name. Pods that already exist replace the replicas of the same name.
* ``scheduling.volcano.sh/v1beta1 PodGroup`` → a job whose tasks are the pods naming it in the
  ``scheduling.k8s.io/group-name`` annotation. A PodGroup owned by (or named like) a loaded
  Volcano Job or PyTorchJob is that job's group: its ``status.phase`` becomes the job phase.
* ``kubeflow.org/v1 PyTorchJob`` (scheduled by Volcano) → a job, tasks
  ``<job>-<replica type>-<index>``.
* A pod of our schedulers outside any group → a job of its own (min 1), as Volcano does.
* A pod of another scheduler that holds a node → its requests come off that node's
  allocatable; a pending one is ignored (noted).
* Names: objects in namespace ``default`` keep their names; others become ``ns/name``.
* The queue ``default`` is created when a job names it and no Queue manifest defines it
  (Volcano always has it).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import yaml

from gangsched.errors import SnapshotError
from gangsched.io._text import (
    IntegerTooLong,
    NestingTooDeep,
    parse_yaml,
    read_source,
    yaml_error_detail,
)
from gangsched.io.k8s.fields import Ref
from gangsched.io.k8s.loader import _Loader, is_manifest
from gangsched.io.k8s.records import (
    DEFAULT_SCHEDULERS,
    GROUP_NAME_KEYS,
    JOB_NAME_LABEL,
    POLICIES_KEY,
    SCHEDULER_CONF_KEY,
    TASK_SPEC_LABEL,
    Cluster,
    Ignored,
    JobOrigin,
    PodOrigin,
    TaskGroup,
    qualify,
    split_name,
)
from gangsched.limits import DEFAULT_LIMITS, Limits

__all__ = [
    "DEFAULT_SCHEDULERS",
    "GROUP_NAME_KEYS",
    "JOB_NAME_LABEL",
    "POLICIES_KEY",
    "SCHEDULER_CONF_KEY",
    "TASK_SPEC_LABEL",
    "Cluster",
    "Ignored",
    "JobOrigin",
    "PodOrigin",
    "Ref",
    "TaskGroup",
    "is_manifest",
    "load_files",
    "load_objects",
    "load_text",
    "parse_documents",
    "qualify",
    "split_name",
]


def parse_documents(
    text: str, *, source: str = "", limits: Limits | None = None
) -> list[tuple[object, str]]:
    """Split YAML (or JSON) text into ``(document, where)`` pairs, skipping empty documents.

    Nesting deeper than ``limits.max_nesting`` levels is a :class:`SnapshotError` (checked while
    parsing, so a hostile document never recurses far).
    """
    lim = limits if limits is not None else DEFAULT_LIMITS
    try:
        docs = parse_yaml(text, max_nesting=lim.max_nesting)
    except yaml.YAMLError as exc:
        prefix = "" if isinstance(exc, NestingTooDeep | IntegerTooLong) else "not valid YAML: "
        raise SnapshotError(f"{prefix}{yaml_error_detail(exc)}", kind="file", name=source) from None
    out: list[tuple[object, str]] = []
    for i, doc in enumerate(docs):
        if doc is None:
            continue
        where = f"{source}, document {i + 1}" if source else f"document {i + 1}"
        out.append((doc, where))
    return out


def load_text(
    text: str,
    *,
    source: str = "",
    scheduler_names: Sequence[str] = DEFAULT_SCHEDULERS,
    limits: Limits | None = None,
) -> Cluster:
    """Load manifests (and/or interchange snapshots) from YAML or JSON text."""
    docs = parse_documents(text, source=source, limits=limits)
    return load_objects(
        [d for d, _ in docs],
        sources=[w for _, w in docs],
        scheduler_names=scheduler_names,
        limits=limits,
    )


def load_files(
    paths: Iterable[str | Path],
    *,
    scheduler_names: Sequence[str] = DEFAULT_SCHEDULERS,
    limits: Limits | None = None,
) -> Cluster:
    """Load every file (each may hold several documents) into one cluster.

    A path ``-`` reads standard input (once). Files must be UTF-8 (or UTF-16 with a byte-order
    mark); anything else is a :class:`SnapshotError` naming the file.
    """
    objects: list[object] = []
    sources: list[str] = []
    stdin_read = False
    for path in paths:
        if str(path) == "-":
            if stdin_read:
                raise SnapshotError("standard input given twice", kind="file", name="-")
            stdin_read = True
        text, source = read_source(path)
        for doc, where in parse_documents(text, source=source, limits=limits):
            objects.append(doc)
            sources.append(where)
    return load_objects(objects, sources=sources, scheduler_names=scheduler_names, limits=limits)


def load_objects(
    objects: Iterable[object],
    *,
    sources: Sequence[str] | None = None,
    scheduler_names: Sequence[str] = DEFAULT_SCHEDULERS,
    limits: Limits | None = None,
) -> Cluster:
    """Load manifests given as plain data (dicts as YAML or the API server gives them).

    Parameters
    ----------
    objects:
        Kubernetes objects, ``kind: List`` objects, or gangsched interchange snapshots
        (mappings with keys ``nodes``, ``hypernodes``, ``queues``, ``jobs``, ``tasks``).
    sources:
        Where each object came from (``"jobs.yaml, document 2"``), for error messages.
    scheduler_names:
        ``schedulerName`` values that mean "scheduled by gangsched".
    limits:
        Bounds on the input (:class:`~gangsched.limits.Limits`; default
        :data:`~gangsched.limits.DEFAULT_LIMITS`): replicas per role and pods in all, checked
        before any replica is expanded, and the nesting of embedded configuration text.

    Raises
    ------
    SnapshotError
        Invalid manifest: the message names kind, namespace/name, field path and source.
    ConfigError
        The scheduler ConfigMap holds an invalid configuration.
    """
    loader = _Loader(tuple(scheduler_names), limits if limits is not None else DEFAULT_LIMITS)
    for i, obj in enumerate(objects):
        where = sources[i] if sources is not None and i < len(sources) else f"object {i + 1}"
        loader.add(obj, where)
    return loader.build()
