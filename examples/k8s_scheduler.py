"""A small custom Kubernetes scheduler built on gangsched.

Pods that set ``spec.schedulerName: gangsched`` are scheduled by this loop; a pod joins a gang
through the ``scheduling.k8s.io/group-name`` annotation naming a Volcano PodGroup (when the
Volcano CRDs are installed), otherwise it is a gang of one. Each cycle:

1. list Nodes, Pods, PriorityClasses and, when their CRDs exist, Volcano Queues, PodGroups and
   HyperNodes (:func:`collect`);
2. turn them into records, bring a long-lived :class:`gangsched.ClusterState` up to date with
   them (only the records that changed are touched) and run one gangsched cycle on it
   (:func:`plan`, pure: no API calls);
3. post a Binding per placed pod, an Eviction per victim, and the PodGroup status
   (:func:`apply`);
4. wait for a pod event (watch on unscheduled pods of this scheduler) or the period, and repeat.

Running it against a cluster (docs/volcano.md, "Running the example scheduler", has the RBAC):

    pip install kubernetes            # or: pip install 'gangsched[k8s]' where that extra exists
    python examples/k8s_scheduler.py --once --dry-run     # print what it would do
    python examples/k8s_scheduler.py                      # schedule until interrupted

It reads ``~/.kube/config`` (``--kubeconfig`` to choose another, in-cluster config when run as
a pod). The ``kubernetes`` package is imported only by :func:`connect` and :func:`main`, so the
translation logic imports and tests without it.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from gangsched.config import Config
from gangsched.decisions import Decisions
from gangsched.errors import GangschedError
from gangsched.io.k8s import Cluster, load_objects
from gangsched.io.volcano_out import bindings, evictions, podgroup_statuses
from gangsched.state import ClusterState

SCHEDULER_NAME = "gangsched"

#: Volcano custom resources read when installed: (group, version, plural, kind).
VOLCANO_RESOURCES: tuple[tuple[str, str, str, str], ...] = (
    ("scheduling.volcano.sh", "v1beta1", "queues", "Queue"),
    ("scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup"),
    ("topology.volcano.sh", "v1alpha1", "hypernodes", "HyperNode"),
)


# ------------------------------------------------------------------------------------------
# Reading the cluster


def _typed(
    items: Iterable[Any], api_version: str, kind: str, sanitize: Callable[[Any], Any]
) -> list[dict[str, Any]]:
    """Typed-client list items carry no apiVersion/kind: add them to the plain-data form."""
    out: list[dict[str, Any]] = []
    for item in items:
        obj = dict(sanitize(item))
        obj["apiVersion"] = api_version
        obj["kind"] = kind
        out.append(obj)
    return out


def collect(
    core: Any, scheduling: Any, custom: Any, sanitize: Callable[[Any], Any]
) -> list[dict[str, Any]]:
    """Every object a cycle needs, as plain manifests (``kubectl get -o json`` shapes).

    ``core`` is a ``CoreV1Api``, ``scheduling`` a ``SchedulingV1Api``, ``custom`` a
    ``CustomObjectsApi`` and ``sanitize`` ``ApiClient().sanitize_for_serialization``. A Volcano
    resource whose CRD is missing (HTTP 404) is skipped.
    """
    objects = _typed(core.list_node().items, "v1", "Node", sanitize)
    objects += _typed(core.list_pod_for_all_namespaces().items, "v1", "Pod", sanitize)
    objects += _typed(
        scheduling.list_priority_class().items, "scheduling.k8s.io/v1", "PriorityClass", sanitize
    )
    for group, version, plural, kind in VOLCANO_RESOURCES:
        try:  # across all namespaces for the namespaced ones
            listed = custom.list_cluster_custom_object(group, version, plural)
        except Exception as exc:  # the client raises ApiException; only 404 means "no CRD"
            if getattr(exc, "status", None) == 404:
                continue
            raise
        for item in listed.get("items", []):
            item.setdefault("apiVersion", f"{group}/{version}")
            item.setdefault("kind", kind)
            objects.append(item)
    return objects


# ------------------------------------------------------------------------------------------
# Deciding (pure)


@dataclass(frozen=True)
class Plan:
    """What one cycle will post: bodies ready for the API calls, plus the cycle's inputs."""

    cluster: Cluster
    decisions: Decisions
    bindings: list[dict[str, Any]]
    evictions: list[dict[str, Any]]
    podgroups: list[dict[str, Any]]


def plan(
    objects: Sequence[dict[str, Any]],
    *,
    scheduler_name: str = SCHEDULER_NAME,
    config: Config | None = None,
    state: ClusterState | None = None,
) -> Plan:
    """Run one cycle on listed objects. Pods of other schedulers only take capacity.

    ``state`` is the cluster as the previous cycles saw it: it is synced to the listed objects
    (touching only what changed) and the cycle runs on it; without one, a new state is built.
    """
    cluster = load_objects(objects, scheduler_names=(scheduler_name,))
    if state is None:
        state = ClusterState(cluster.snapshot)
    else:
        state.sync(cluster.snapshot)
    decisions = state.schedule(config or cluster.config or Config.default())
    created = {t for t, origin in cluster.pods.items() if origin.created}
    # Only pods that exist can be bound (replicas a controller has not created yet are
    # placed in the cycle's reasoning but not posted).
    keep = dataclasses.replace(
        decisions,
        binds=tuple(b for b in decisions.binds if b.task in created),
        evictions=tuple(e for e in decisions.evictions if e.task in created),
    )
    groups = {
        (o.ref.namespace, o.podgroup)
        for o in cluster.jobs.values()
        if o.framework in ("podgroup", "volcano", "pytorchjob")
    }
    statuses = [
        pg
        for pg in podgroup_statuses(cluster, keep)
        if (pg["metadata"]["namespace"], pg["metadata"]["name"]) in groups
    ]
    return Plan(
        cluster=cluster,
        decisions=keep,
        bindings=bindings(cluster, keep),
        evictions=evictions(cluster, keep),
        podgroups=statuses,
    )


# ------------------------------------------------------------------------------------------
# Acting


def apply(p: Plan, core: Any, custom: Any, *, dry_run: bool = False) -> list[str]:
    """Post the plan; returns one log line per call (and only logs when ``dry_run``)."""
    log: list[str] = []
    for body in p.evictions:
        meta = body["metadata"]
        log.append(f"evict {meta['namespace']}/{meta['name']}: {meta['annotations']}")
        if not dry_run:
            core.create_namespaced_pod_eviction(meta["name"], meta["namespace"], body)
    for body in p.bindings:
        meta = body["metadata"]
        log.append(f"bind {meta['namespace']}/{meta['name']} -> {body['target']['name']}")
        if not dry_run:
            # The generated client cannot deserialize the Binding it gets back; skip that.
            core.create_namespaced_binding(meta["namespace"], body, _preload_content=False)
    for pg in p.podgroups:
        meta = pg["metadata"]
        log.append(f"podgroup {meta['namespace']}/{meta['name']}: {pg['status']['phase']}")
        if not dry_run:
            custom.patch_namespaced_custom_object_status(
                "scheduling.volcano.sh",
                "v1beta1",
                meta["namespace"],
                "podgroups",
                meta["name"],
                {"status": pg["status"]},
            )
    return log


# ------------------------------------------------------------------------------------------
# The loop (needs the kubernetes package and a cluster)


def connect(kubeconfig: str | None) -> tuple[Any, Any, Any, Any, Any]:
    """``(core, scheduling, custom, sanitize, watch module)`` for the current context."""
    try:
        import kubernetes  # type: ignore[import-not-found, import-untyped, unused-ignore]
    except ImportError:
        sys.exit("this example needs the Kubernetes client: pip install kubernetes")
    client, kube_config, watch = kubernetes.client, kubernetes.config, kubernetes.watch
    try:
        kube_config.load_incluster_config()
    except kube_config.ConfigException:
        kube_config.load_kube_config(config_file=kubeconfig)
    api = client.ApiClient()
    return (
        client.CoreV1Api(api),
        client.SchedulingV1Api(api),
        client.CustomObjectsApi(api),
        api.sanitize_for_serialization,
        watch,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scheduler-name", default=SCHEDULER_NAME)
    parser.add_argument("--config", help="volcano-scheduler.conf text file")
    parser.add_argument("--kubeconfig", default=None)
    parser.add_argument("--period", type=float, default=5.0, help="seconds between cycles")
    parser.add_argument("--once", action="store_true", help="run one cycle and exit")
    parser.add_argument("--dry-run", action="store_true", help="print, do not post")
    args = parser.parse_args(argv)
    config = None
    if args.config:
        with open(args.config, encoding="utf-8") as f:
            config = Config.from_volcano_yaml(f.read())
    core, scheduling, custom, sanitize, watch = connect(args.kubeconfig)
    selector = f"spec.schedulerName={args.scheduler_name},spec.nodeName="
    state = ClusterState()  # kept across cycles: each one touches only what changed
    while True:
        try:
            p = plan(
                collect(core, scheduling, custom, sanitize),
                scheduler_name=args.scheduler_name,
                config=config,
                state=state,
            )
        except GangschedError as exc:  # a bad object in the cluster: report, retry later
            print(f"cycle skipped: {exc}", file=sys.stderr, flush=True)
        else:
            for line in apply(p, core, custom, dry_run=args.dry_run):
                print(line, flush=True)
        if args.once:
            return 0
        # Sleep until an unscheduled pod of ours is added or changed, or the period ends. The
        # watch starts at the current resource version, so it reports only what happens next.
        version = core.list_pod_for_all_namespaces(
            field_selector=selector, limit=1
        ).metadata.resource_version
        w = watch.Watch()
        for _event in w.stream(
            core.list_pod_for_all_namespaces,
            field_selector=selector,
            resource_version=version,
            timeout_seconds=max(1, int(args.period)),
        ):
            w.stop()


if __name__ == "__main__":
    raise SystemExit(main())
