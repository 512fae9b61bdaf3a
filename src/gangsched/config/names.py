"""The names a configuration may use: actions, plugins, extension points and their switches.

Volcano's per-plugin ``enableXxx`` flags map onto gangsched's snake_case switch names through
:data:`VOLCANO_FLAGS`; ``job_enqueued`` is gated by the ``job_enqueueable`` switch, as Volcano
gates both on ``enableJobEnqueued``."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

BUILTIN_ACTIONS: tuple[str, ...] = (
    "enqueue",
    "allocate",
    "backfill",
    "preempt",
    "reclaim",
    "consolidate",
    "gangpreempt",
    "gangreclaim",
)

BUILTIN_PLUGINS: tuple[str, ...] = (
    "priority",
    "gang",
    "conformance",
    "drf",
    "proportion",
    "capacity",
    "predicates",
    "nodeorder",
    "binpack",
    "overcommit",
    "network-topology-aware",
    "sla",
    "random",
    "dotprod",
    "gpu-clustering",
    "gpu-packing",
    "bestfit",
    "fgd",
    "nodegroup",
    "task-topology",
)

UNIMPLEMENTED_ACTIONS: Mapping[str, str] = MappingProxyType(
    {
        "shuffle": "running tasks that plugins mark for rescheduling (Volcano's "
        "rescheduling plugin, a descheduler) are not evicted; to defragment, use the "
        "consolidate action",
    }
)

UNIMPLEMENTED_PLUGINS: Mapping[str, str] = MappingProxyType(
    {
        "deviceshare": "gangsched does this job another way: GPUs are per-device capacity "
        "(Node.gpus, whole devices or milli-GPU shares) placed device by device by every "
        "action; what is lost is vGPU memory isolation (HAMi), MIG and other device kinds",
        "numaaware": "NUMA and CPU-manager topology policies are not checked; CPU and memory "
        "fit per node only",
        "tdm": "time-division multiplexing of revocable nodes is not modelled; revocable-zone "
        "nodes are used as ordinary nodes at all times",
        "pdb": "gangsched does this job another way: PodDisruptionBudgets (policy/v1 manifests, "
        "the snapshot's disruption budgets) bind every evicting action without a plugin; "
        "preempt and reclaim prefer victims that break none",
        "usage": "nodes' measured usage is not used for filtering or scoring; requests only",
        "resourcequota": "namespaces' ResourceQuotas are not checked at enqueue; queue "
        "capability and capacity are the only limits",
        "extender": "HTTP scheduler extenders are not called (gangsched reads no sockets); "
        "their filters and scores are lost",
        "cdp": "cooldown protection of preemptable pods is not applied; they may be evicted "
        "as soon as they start",
        "rescheduling": "the descheduling of running pods by node usage is not done",
        "resource-strategy-fit": "per-resource scoring strategies are not applied; use "
        "binpack or nodeorder weights",
    }
)
"""Volcano plugins gangsched knows of but does not implement → what is lost without them (or
how gangsched does their job another way). A configuration naming one is accepted with an
:class:`~gangsched.errors.UnimplementedPluginWarning` unless ``strict``."""

EXTENSION_POINTS: tuple[str, ...] = (
    "job_order",
    "queue_order",
    "task_order",
    "subjob_order",
    "cluster_order",
    "job_valid",
    "job_enqueueable",
    "job_enqueued",
    "job_ready",
    "subjob_ready",
    "job_pipelined",
    "subjob_pipelined",
    "job_starving",
    "overused",
    "allocatable",
    "preemptive",
    "preemptable",
    "reclaimable",
    "victim_order",
    "predicate",
    "node_score",
    "best_node",
    "hypernode_score",
    "hypernode_gradient",
    "gpu_choice",
    "target_job",
    "reserved_nodes",
    "on_allocate",
    "on_deallocate",
)
"""Every extension point a plugin may implement, in snake_case."""

VOLCANO_FLAGS: Mapping[str, str] = MappingProxyType(
    {
        "enableJobOrder": "job_order",
        "enableQueueOrder": "queue_order",
        "enableTaskOrder": "task_order",
        "enabledSubJobOrder": "subjob_order",
        "enabledClusterOrder": "cluster_order",
        "enableJobEnqueued": "job_enqueueable",
        "enableJobReady": "job_ready",
        "enabledSubJobReady": "subjob_ready",
        "enableJobPipelined": "job_pipelined",
        "enabledSubJobPipelined": "subjob_pipelined",
        "enableJobStarving": "job_starving",
        "enabledOverused": "overused",
        "enabledAllocatable": "allocatable",
        "enablePreemptive": "preemptive",
        "enablePreemptable": "preemptable",
        "enableReclaimable": "reclaimable",
        "enabledVictim": "victim_order",
        "enablePredicate": "predicate",
        "enableNodeOrder": "node_score",
        "enableBestNode": "best_node",
        "enabledHyperNodeOrder": "hypernode_score",
        "enabledHyperNodeGradient": "hypernode_gradient",
        "enableTargetJob": "target_job",
        "enableReservedNodes": "reserved_nodes",
    }
)
"""Volcano's per-plugin YAML flag → gangsched switch name (each defaults to on)."""

SWITCHES: tuple[str, ...] = tuple(sorted(set(VOLCANO_FLAGS.values())))
"""The switch names accepted in ``PluginOption.disabled`` and ``{"switches": {...}}``."""

_FLAG_OF_SWITCH: Mapping[str, str] = {point: flag for flag, point in VOLCANO_FLAGS.items()}

# Extension point → the switch that gates it; None: the point cannot be switched off.
_GATE: Mapping[str, str | None] = {
    point: ("job_enqueueable" if point == "job_enqueued" else point if point in SWITCHES else None)
    for point in EXTENSION_POINTS
}

_HIERARCHY_KEY = "enableHierarchy"
_PLUGIN_KEYS = ("name", "arguments", "switches", "hierarchy", _HIERARCHY_KEY, *VOLCANO_FLAGS)
_TOP_KEYS = ("actions", "tiers", "configurations", "strict")
