"""gangsched: the brain of a batch/AI scheduler as a pure, vectorized Python library."""

from .config import Config
from .decisions import (
    Bind,
    Decisions,
    Eviction,
    Hold,
    JobAction,
    JobStatus,
    Pipeline,
    QueueStatus,
)
from .errors import ConfigError, GangschedError, PlacementError, SnapshotError, SolverError
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
from .registry import Registry
from .scheduler import default_registry, explain, open_session, schedule
from .snapshot import Snapshot
from .units import ResourceSpec, parse_quantity

__version__ = "0.1.0"

__all__ = [
    "Bind",
    "Config",
    "ConfigError",
    "Decisions",
    "Eviction",
    "GangschedError",
    "GpuRequest",
    "Gpus",
    "Hold",
    "HyperNode",
    "Job",
    "JobAction",
    "JobPhase",
    "JobPolicy",
    "JobStatus",
    "NetworkTopology",
    "Node",
    "Pipeline",
    "PlacementError",
    "Queue",
    "QueueState",
    "QueueStatus",
    "Registry",
    "ResourceSpec",
    "Resources",
    "Snapshot",
    "SnapshotError",
    "SolverError",
    "Taint",
    "Task",
    "TaskPhase",
    "Toleration",
    "TopologyMode",
    "__version__",
    "default_registry",
    "explain",
    "open_session",
    "parse_quantity",
    "schedule",
]
