"""The cluster model: frozen, slotted, keyword-only records validated on construction.

Theory of operation
-------------------
An invalid record cannot exist. Each constructor normalises its inputs (quantities into
canonical ints, lists into tuples, mappings into :class:`FrozenDict`) and raises
:class:`~gangsched.errors.SnapshotError` naming the record and the field on anything it cannot
accept. Resource amounts given as a plain mapping are read as Kubernetes quantities
(``{"cpu": 2}`` is two cores); a :class:`Resources` value is already canonical and is taken as
is, so ``Node(allocatable=node.allocatable)`` round-trips.

Cross-record rules (a task's job exists, running tasks fit their node, …) live in
:mod:`gangsched.model.snapshot`, which owns the whole picture.

Every amount and every integer a record holds is at most
:data:`~gangsched.limits.MAX_QUANTITY` (2**53) in size, so it is exact as a float64;
:func:`check_totals` (called by the snapshot) bounds each per-resource sum over the records of
one kind by :data:`~gangsched.limits.MAX_TOTAL` (2**60), so no sum over the cluster wraps int64.

GPUs are devices: a node has ``gpus.count`` devices of ``gpus.milli`` milli-GPU each (1000 =
one whole device), a task asks for ``gpu_request.count`` devices with ``gpu_request.milli``
milli-GPU on each. ``count=1, milli=500`` is half a GPU (shared); ``count=4, milli=1000`` is four
whole GPUs. In a manifest-style mapping ``"nvidia.com/gpu": 8`` means 8 whole devices, both in a
node's allocatable and in a task's request.

The records live in private modules by kind (fields, nodes, jobs, tasks, totals); this module
is their public face.
"""

from __future__ import annotations

from gangsched.model.affinity import (
    NodeAffinity,
    NodeGroupAffinity,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PreferredSchedulingTerm,
    TaskTopology,
)
from gangsched.model.enums import MAX_DEVICE_MILLI as MAX_DEVICE_MILLI
from gangsched.model.enums import MAX_GPUS_PER_NODE as MAX_GPUS_PER_NODE
from gangsched.model.enums import NODE_PHASES as NODE_PHASES
from gangsched.model.enums import OCCUPYING_PHASES as OCCUPYING_PHASES
from gangsched.model.enums import POLICY_ACTIONS as POLICY_ACTIONS
from gangsched.model.enums import POLICY_EVENTS as POLICY_EVENTS
from gangsched.model.enums import PREEMPT_LOWER_PRIORITY as PREEMPT_LOWER_PRIORITY
from gangsched.model.enums import PREEMPT_NEVER as PREEMPT_NEVER
from gangsched.model.enums import PREEMPTION_POLICIES as PREEMPTION_POLICIES
from gangsched.model.enums import JobPhase, QueueState, TaskPhase, TopologyMode
from gangsched.model.fields import Resources
from gangsched.model.jobs import DisruptionBudget, Job, JobPolicy, NetworkTopology
from gangsched.model.nodes import Gpus, HyperNode, Node, Taint, Toleration
from gangsched.model.pod_affinity import (
    LabelSelector,
    LabelSelectorRequirement,
    PodAffinity,
    PodAffinityTerm,
    TopologySpreadConstraint,
    WeightedPodAffinityTerm,
)
from gangsched.model.queues import Queue
from gangsched.model.tasks import GpuRequest, Task
from gangsched.model.tasks import quantity as quantity
from gangsched.model.totals import check_totals as check_totals

__all__ = [
    "DisruptionBudget",
    "GpuRequest",
    "Gpus",
    "HyperNode",
    "Job",
    "JobPhase",
    "JobPolicy",
    "LabelSelector",
    "LabelSelectorRequirement",
    "NetworkTopology",
    "Node",
    "NodeAffinity",
    "NodeGroupAffinity",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "PodAffinity",
    "PodAffinityTerm",
    "PreferredSchedulingTerm",
    "Queue",
    "QueueState",
    "Resources",
    "Taint",
    "Task",
    "TaskPhase",
    "TaskTopology",
    "Toleration",
    "TopologyMode",
    "TopologySpreadConstraint",
    "WeightedPodAffinityTerm",
]
