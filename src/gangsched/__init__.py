"""gangsched: the brain of a batch/AI scheduler as a pure, vectorized Python library."""

from typing import TYPE_CHECKING, Any

from .arrays import TaskTemplate
from .combine import Vote
from .config import Config
from .decisions import (
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
from .errors import (
    ConfigError,
    DecisionError,
    GangschedError,
    PlacementError,
    SnapshotError,
    SolverError,
)
from .gate import Refusal, Rule
from .model import (
    GpuRequest,
    Gpus,
    HyperNode,
    Job,
    JobPhase,
    JobPolicy,
    NetworkTopology,
    Node,
    Queue,
    QueueState,
    Resources,
    Taint,
    Task,
    TaskPhase,
    Toleration,
    TopologyMode,
)
from .placement import GreedyPlacer, validate_placement
from .registry import Registry
from .scheduler import (
    Explanation,
    NodeExplanation,
    default_registry,
    explain,
    open_session,
    schedule,
)
from .session import Session
from .snapshot import Snapshot
from .state import ClusterState
from .statement import Statement
from .units import ResourceSpec, parse_quantity

__version__ = "0.1.0"

if TYPE_CHECKING:
    from .placement.cpsat import CpSatPlacer, JointCpSatPlacer

__all__ = [
    "Bind",
    "ClusterState",
    "Config",
    "ConfigError",
    "CpSatPlacer",
    "DecisionError",
    "Decisions",
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
    "NetworkTopology",
    "Node",
    "NodeExplanation",
    "Pipeline",
    "PlacementError",
    "PlacementInfo",
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
    "Vote",
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
        from . import placement

        return getattr(placement, name)
    raise AttributeError(f"module 'gangsched' has no attribute {name!r}")
