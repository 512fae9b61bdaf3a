"""Queue status as Prometheus text: the gauges Volcano's scheduler and controllers export.

:func:`to_prometheus_text` renders ``Decisions.queues`` in the Prometheus text exposition
format (version 0.0.4), ready to be served by any HTTP handler or written to a textfile
collector; nothing here opens a socket or a file.

The names follow Volcano's (``volcano_queue_allocated_milli_cpu``,
``volcano_queue_deserved_scalar_resources{resource="nvidia.com/gpu"}``,
``volcano_queue_pod_group_pending_count`` ...), with values in Volcano's units (millicores,
bytes, milli-units for other resources), plus whole-GPU gauges (``volcano_queue_allocated_gpu``,
``volcano_queue_pending_gpu``, ``volcano_queue_inqueue_gpu``, ``volcano_queue_deserved_gpu``,
``volcano_queue_capacity_gpu``). Output is sorted, so equal decisions give equal text.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from gangsched.units import CPU, MEMORY, PODS

if TYPE_CHECKING:
    from gangsched.decisions import Decisions, QueueStatus

__all__ = ["to_prometheus_text"]

_Resources = Callable[["QueueStatus"], Mapping[str, int] | None]

#: (name stem, help, how to read the mapping of resources from a status)
_RESOURCE_FAMILIES: tuple[tuple[str, str, _Resources], ...] = (
    ("allocated", "allocated to the queue", lambda s: s.allocated),
    ("request", "requested by the queue (allocated plus pending)", lambda s: s.request),
    ("deserved", "the queue deserves", lambda s: s.deserved),
    ("capacity", "the queue's capability", lambda s: s.capability or None),
    ("real_capacity", "the queue may hold at most", lambda s: s.real_capability or None),
    ("inqueue", "reserved by the queue's admitted jobs", lambda s: s.inqueue_resources),
)

_COUNTS: tuple[tuple[str, str, Callable[[QueueStatus], float]], ...] = (
    ("queue_pod_group_inqueue_count", "Jobs of the queue in phase Inqueue", lambda s: s.inqueue),
    ("queue_pod_group_pending_count", "Jobs of the queue in phase Pending", lambda s: s.pending),
    ("queue_pod_group_running_count", "Jobs of the queue in phase Running", lambda s: s.running),
    ("queue_pod_group_unknown_count", "Jobs of the queue in phase Unknown", lambda s: s.unknown),
    (
        "queue_pod_group_completed_count",
        "Jobs of the queue in phase Completed",
        lambda s: s.completed,
    ),
    ("queue_share", "Share of the queue (allocated over deserved)", lambda s: s.share),
    ("queue_weight", "Weight of the queue", lambda s: s.weight),
    ("queue_overused", "1 if the queue is overused", lambda s: 1 if s.overused else 0),
    ("queue_allocated_gpu", "GPUs allocated to the queue", lambda s: s.allocated_gpu),
    ("queue_pending_gpu", "GPUs requested by pending tasks of the queue", lambda s: s.pending_gpu),
    ("queue_inqueue_gpu", "GPUs reserved by admitted jobs of the queue", lambda s: s.inqueue_gpu),
    ("queue_deserved_gpu", "GPUs the queue deserves", lambda s: s.deserved_gpu),
)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "+Inf" if value > 0 else "-Inf"
        if value.is_integer() and abs(value) < 2**53:
            return str(int(value))
        return repr(value)
    return str(value)


def _labels(pairs: Iterable[tuple[str, str]]) -> str:
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in pairs)
    return "{" + inner + "}"


def _family(out: list[str], name: str, help_text: str, samples: list[tuple[str, float]]) -> None:
    out.append(f"# HELP {name} {help_text}")
    out.append(f"# TYPE {name} gauge")
    out.extend(f"{name}{labels} {_number(value)}" for labels, value in samples)


def to_prometheus_text(decisions: Decisions, *, prefix: str = "volcano") -> str:
    """The queue gauges of ``decisions`` in the Prometheus text exposition format.

    Parameters
    ----------
    decisions:
        The output of :func:`gangsched.schedule`.
    prefix:
        Metric name prefix (Volcano's ``volcano``).

    Returns
    -------
    str
        One ``# HELP`` / ``# TYPE`` header per family and one sample per queue (and resource),
        newline-terminated; queues and resources sorted by name.
    """
    queues = sorted(decisions.queues.items())
    out: list[str] = []
    for stem, words, read in _RESOURCE_FAMILIES:
        cpu: list[tuple[str, float]] = []
        mem: list[tuple[str, float]] = []
        scalar: list[tuple[str, float]] = []
        for name, status in queues:
            res = read(status)
            if res is None:
                continue
            label = _labels([("queue_name", name)])
            cpu.append((label, res.get(CPU, 0)))
            mem.append((label, res.get(MEMORY, 0)))
            for r in sorted(res):
                if r not in (CPU, MEMORY, PODS):
                    scalar.append((_labels([("queue_name", name), ("resource", r)]), res[r]))
        base = f"{prefix}_queue_{stem}"
        _family(out, f"{base}_milli_cpu", f"CPU (millicores) {words}", cpu)
        _family(out, f"{base}_memory_bytes", f"Memory (bytes) {words}", mem)
        _family(out, f"{base}_scalar_resources", f"Other resources (milli-units) {words}", scalar)
    for stem, words, get in _COUNTS:
        samples = [(_labels([("queue_name", n)]), get(s)) for n, s in queues]
        _family(out, f"{prefix}_{stem}", words, samples)
    caps = [
        (_labels([("queue_name", n)]), s.capability_gpu)
        for n, s in queues
        if s.capability_gpu is not None
    ]
    _family(out, f"{prefix}_queue_capacity_gpu", "GPUs the queue's capability allows", caps)
    return "\n".join(out) + "\n"
