"""gangsched: the brain of a batch/AI scheduler as a pure, vectorized Python library."""

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
from .snapshot import Snapshot
from .units import ResourceSpec, parse_quantity

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "GangschedError",
    "GpuRequest",
    "Gpus",
    "HyperNode",
    "Job",
    "JobPhase",
    "JobPolicy",
    "NetworkTopology",
    "Node",
    "PlacementError",
    "Queue",
    "QueueState",
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
    "parse_quantity",
]
