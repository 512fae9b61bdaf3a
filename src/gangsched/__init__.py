"""gangsched: the brain of a batch/AI scheduler as a pure, vectorized Python library."""

from typing import TYPE_CHECKING, Any

from gangsched.config import Config
from gangsched.decisions import (
    Bind,
    Decisions,
    Eviction,
    Hold,
    JobAction,
    JobStatus,
    Pipeline,
    PlacementInfo,
    QueueStatus,
)
from gangsched.errors import (
    ConfigError,
    DecisionError,
    GangschedError,
    PlacementError,
    SnapshotError,
    SolverError,
)
from gangsched.framework.combine import Vote
from gangsched.framework.registry import Registry
from gangsched.model import (
    DisruptionBudget,
    GpuRequest,
    Gpus,
    HyperNode,
    Job,
    JobPhase,
    JobPolicy,
    LabelSelector,
    LabelSelectorRequirement,
    NetworkTopology,
    Node,
    NodeAffinity,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PodAffinity,
    PodAffinityTerm,
    PreferredSchedulingTerm,
    Queue,
    QueueState,
    Resources,
    Taint,
    Task,
    TaskPhase,
    Toleration,
    TopologyMode,
    TopologySpreadConstraint,
    WeightedPodAffinityTerm,
)
from gangsched.model.snapshot import Snapshot
from gangsched.placement import GreedyPlacer, validate_placement
from gangsched.scheduler import (
    Explanation,
    NodeExplanation,
    default_registry,
    explain,
    open_session,
    schedule,
)
from gangsched.session.arrays import TaskTemplate
from gangsched.session.core import Session
from gangsched.session.gate import Refusal, Rule
from gangsched.session.statement import Statement
from gangsched.state import ClusterState
from gangsched.units import ResourceSpec, parse_quantity

__version__ = "0.1.0"

if TYPE_CHECKING:
    from gangsched.placement.cpsat import CpSatPlacer, JointCpSatPlacer

__all__ = [
    "Bind",
    "ClusterState",
    "Config",
    "ConfigError",
    "CpSatPlacer",
    "DecisionError",
    "Decisions",
    "DisruptionBudget",
    "Eviction",
    "Explanation",
    "GangschedError",
    "GpuRequest",
    "Gpus",
    "GreedyPlacer",
    "Hold",
    "HyperNode",
    "Job",
    "JobAction",
    "JobPhase",
    "JobPolicy",
    "JobStatus",
    "JointCpSatPlacer",
    "LabelSelector",
    "LabelSelectorRequirement",
    "NetworkTopology",
    "Node",
    "NodeAffinity",
    "NodeExplanation",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "Pipeline",
    "PlacementError",
    "PlacementInfo",
    "PodAffinity",
    "PodAffinityTerm",
    "PreferredSchedulingTerm",
    "Queue",
    "QueueState",
    "QueueStatus",
    "Refusal",
    "Registry",
    "ResourceSpec",
    "Resources",
    "Rule",
    "Session",
    "Snapshot",
    "SnapshotError",
    "SolverError",
    "Statement",
    "Taint",
    "Task",
    "TaskPhase",
    "TaskTemplate",
    "Toleration",
    "TopologyMode",
    "TopologySpreadConstraint",
    "Vote",
    "WeightedPodAffinityTerm",
    "__version__",
    "default_registry",
    "explain",
    "open_session",
    "parse_quantity",
    "schedule",
    "validate_placement",
]


def __getattr__(name: str) -> Any:
    # The CP-SAT placers load OR-Tools on first use, not at ``import gangsched``.
    if name in ("CpSatPlacer", "JointCpSatPlacer"):
        from gangsched import placement

        return getattr(placement, name)
    raise AttributeError(f"module 'gangsched' has no attribute {name!r}")
