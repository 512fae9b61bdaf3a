"""Discrete-event replay of a trace through :func:`gangsched.schedule`.

Theory of operation
-------------------
A :class:`Trace` is a cluster (nodes, optional hypernodes, queues), jobs that arrive at given
times with their tasks and a run time, and node failures. :func:`replay` keeps one event heap
ordered by ``(time, kind, seq)``; at equal times, kinds run in this order:

====  ==========  ===========================================================================
0     ``END``     a job's run time is over: its tasks succeed and free their resources
1     ``RELEASE`` an evicted task has left its node (``eviction_grace`` after the eviction);
                  its job restarts: every task it still holds is freed, it queues again
2     ``FAIL``    a failure window of a node opens: the node turns unschedulable; jobs with
                  a task on it restart (``on_node_failure="requeue"``) or fail (``"fail"``)
3     ``RECOVER`` a failure window closes; the node is schedulable again once none of its
                  windows is open (windows of one node may overlap; a failure without
                  ``until`` keeps the node down for good)
4     ``ARRIVE``  a job's tasks become pending
5     ``CYCLE``   a scheduling tick (only with ``period > 0``)
====  ==========  ===========================================================================

``seq`` is the order in which events were created, so ties never depend on anything else.
After all events of one time are applied, a scheduling cycle runs if something changed since
the last one (an arrival, freed resources, a node coming or going) and a job is waiting. With
``period = 0`` (the default) that is at the event's time; with ``period > 0`` at the next
multiple of ``period``. The engine keeps a :class:`~gangsched.state.ClusterState` of the live
jobs (arrived, not finished) current event by event; a cycle takes its snapshot (which shares
whatever did not change since the last cycle), calls :func:`~gangsched.scheduler.schedule`
with the configured ``config``, ``placer`` and ``registry``, and applies the decisions:

* a **bind** makes the task Running on its node and devices. The engine keeps its own books of
  CPU, memory and per-device milli-GPU and raises :class:`~gangsched.errors.PlacementError` on a
  bind that overfills a node or lands on a failed node: the replay checks the scheduler.
* a job *starts* when ``min_available`` of its tasks run; it ends ``duration`` later (never when
  ``duration`` is ``None``). Tasks bound after the start run until the job ends.
* an **eviction** marks the task Releasing; it leaves ``eviction_grace`` seconds later and its
  job restarts from scratch (gang semantics: the whole job queues again).
* **pipelined** tasks are counted, not carried over: as in Volcano, a reservation lives for
  one cycle and the next cycle decides again.
* a job the enqueue action admitted is Inqueue in the next snapshot.
* with ``drop_unplaced`` (the FGD protocol), a job still waiting after the cycle that follows
  its arrival is dropped and counted as failed.

After every time step the engine records one row of metrics; the first row is the empty
cluster before any event. Jobs that never started by the end are *queued*.

Metrics (all NumPy arrays, see :class:`ReplayResult`): allocated milli-GPU and millicores,
the FGD fragment of every node over a target workload of typical pods (given, or derived from
all tasks of the trace) and the idle milli-GPU, the GPU demand that has arrived, waiting and
running job counts, binds / evictions / pipelined tasks per step, and per queue the allocated
GPU, the demand (allocated + waiting) and the weighted max-min fair share of the cluster's GPUs
for that demand. Per job: arrival, first start, end, final state and restarts.

The engine is deterministic: no clock, no unseeded randomness; the same trace and options give
identical arrays.
"""

from __future__ import annotations

from collections.abc import Callable

from gangsched.errors import ConfigError
from gangsched.sim.replay.engine import Engine
from gangsched.sim.replay.result import ReplayResult, fair_share
from gangsched.sim.replay.trace import (
    JobState,
    NodeFailure,
    ReplayOptions,
    ReplayProgress,
    Trace,
    TraceJob,
    derive_typical,
    trace_models,
)

__all__ = [
    "JobState",
    "NodeFailure",
    "ReplayOptions",
    "ReplayProgress",
    "ReplayResult",
    "Trace",
    "TraceJob",
    "derive_typical",
    "fair_share",
    "replay",
    "trace_models",
]


def replay(
    trace: Trace,
    options: ReplayOptions,
    *,
    progress: Callable[[ReplayProgress], None] | None = None,
) -> ReplayResult:
    """Replay ``trace`` under ``options`` (see the module docstring).

    Parameters
    ----------
    trace:
        The cluster, the jobs with arrival times and run times, the node failures.
    options:
        The scheduler configuration (and placer, registry) and the engine's rules.
    progress:
        Called after every time step with a :class:`ReplayProgress`.

    Returns
    -------
    ReplayResult
        Metrics over time and per job.

    Raises
    ------
    PlacementError
        A decision over-allocates a node or device, binds onto a failed node, or names a task
        that is not waiting.
    """
    if not isinstance(trace, Trace):
        raise ConfigError(
            f"expected a Trace, got {type(trace).__name__}", kind="replay", field="trace"
        )
    if not isinstance(options, ReplayOptions):
        raise ConfigError(
            f"expected ReplayOptions, got {type(options).__name__}", kind="replay", field="options"
        )
    return Engine(trace, options, progress).run()
