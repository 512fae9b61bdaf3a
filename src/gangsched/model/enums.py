"""The model's enumerations and the constants its records check against."""

from __future__ import annotations

import enum

from gangsched.limits import MAX_QUANTITY

#: Devices tracked per node (per-device arrays are ``n_nodes × max devices``); real nodes carry
#: at most a few dozen accelerators. A task's devices sit on one node, so a GPU request asks
#: for at most this many too.
MAX_GPUS_PER_NODE = 1024
#: Largest size of one device in milli-GPU (``gpus.milli``): a node's or a task's devices
#: together then hold at most :data:`~gangsched.limits.MAX_QUANTITY` milli-GPU.
MAX_DEVICE_MILLI = MAX_QUANTITY // MAX_GPUS_PER_NODE


class QueueState(enum.Enum):
    OPEN = "Open"
    CLOSING = "Closing"
    CLOSED = "Closed"


class JobPhase(enum.Enum):
    PENDING = "Pending"
    INQUEUE = "Inqueue"
    RUNNING = "Running"
    UNKNOWN = "Unknown"
    COMPLETED = "Completed"


class TaskPhase(enum.Enum):
    PENDING = "Pending"
    PIPELINED = "Pipelined"
    BOUND = "Bound"
    RUNNING = "Running"
    RELEASING = "Releasing"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


#: Phases whose task holds resources on its node.
OCCUPYING_PHASES = frozenset({TaskPhase.BOUND, TaskPhase.RUNNING, TaskPhase.RELEASING})
#: Phases in which a task must name its node.
NODE_PHASES = OCCUPYING_PHASES | {TaskPhase.PIPELINED}


class TopologyMode(enum.Enum):
    HARD = "hard"
    SOFT = "soft"


POLICY_EVENTS = (
    "PodEvicted",
    "PodFailed",
    "PodPending",
    "PodRunning",
    "TaskCompleted",
    "TaskFailed",
    "Unknown",
    "*",
)
POLICY_ACTIONS = (
    "RestartJob",
    "AbortJob",
    "CompleteJob",
    "TerminateJob",
    "RestartTask",
    "RestartPod",
    "ResumeJob",
)


#: A task's ``preemption_policy`` values (Kubernetes' names); the first is the default.
PREEMPT_LOWER_PRIORITY = "PreemptLowerPriority"
PREEMPT_NEVER = "Never"
PREEMPTION_POLICIES = (PREEMPT_LOWER_PRIORITY, PREEMPT_NEVER)
