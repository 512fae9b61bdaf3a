"""Bounds on sums over a snapshot's records: no per-resource total passes MAX_TOTAL."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from gangsched.errors import SnapshotError
from gangsched.limits import MAX_TOTAL
from gangsched.model.fields import Resources
from gangsched.model.jobs import Job
from gangsched.model.nodes import Node
from gangsched.model.queues import Queue
from gangsched.model.tasks import Task
from gangsched.units import canonical_unit

# --------------------------------------------------------------------------------------------
# Totals over a snapshot


def check_totals(
    nodes: Sequence[Node], queues: Sequence[Queue], jobs: Sequence[Job], tasks: Sequence[Task]
) -> None:
    """Reject records whose amounts add up past :data:`~gangsched.limits.MAX_TOTAL`.

    Per resource, the nodes' allocatable (GPUs: devices × milli), the tasks' requests (GPUs:
    ``gpu_request.count × milli``), the queues' guarantees, the queues' deserved amounts and
    the jobs' min_resources each sum to at most 2**60, as do the queues' weights; so any sum the
    scheduler forms over the cluster, and a few of them added together, stays inside int64.
    The error names the record at which a running total first passes the bound.
    """
    node_gpu = sum(map(_node_gpu, nodes))
    if _over(_distinct(n.allocatable for n in nodes), node_gpu):
        _locate("node", "allocatable", nodes, lambda n: n.allocatable, _node_gpu)
    task_gpu = sum(map(_task_gpu, tasks))
    if _over(_distinct(t.request for t in tasks), task_gpu):
        _locate("task", "request", tasks, lambda t: t.request, _task_gpu)
    if _over(_distinct(q.guarantee for q in queues), 0):
        _locate("queue", "guarantee", queues, lambda q: q.guarantee, _no_gpu)
    if _over(_distinct(q.deserved for q in queues), 0):
        _locate("queue", "deserved", queues, lambda q: q.deserved, _no_gpu)
    if _over(_distinct(j.min_resources for j in jobs), 0):
        _locate("job", "min_resources", jobs, lambda j: j.min_resources, _no_gpu)
    weights = 0
    for q in queues:
        weights += q.weight
        if weights > MAX_TOTAL:
            raise SnapshotError(
                f"the queues' weights add up past 2**60 = {MAX_TOTAL} at this queue",
                kind="queue",
                name=q.name,
                field="weight",
            )


V = TypeVar("V")


def _distinct(values: Iterable[V]) -> list[tuple[V, int]]:
    """Each distinct object of ``values`` (by identity) and how often it occurs: records of one
    shape share one interned mapping, so each mapping is summed once."""
    items = list(values)
    counts = Counter(map(id, items))
    first = dict(zip(map(id, items), items, strict=True))
    return [(first[key], times) for key, times in counts.items()]


def _over(groups: list[tuple[Resources | None, int]], gpu: int) -> bool:
    totals: dict[str, int] = {}
    for amounts, times in groups:
        for res, value in (amounts or {}).items():
            totals[res] = totals.get(res, 0) + value * times
    return gpu > MAX_TOTAL or any(v > MAX_TOTAL for v in totals.values())


def _node_gpu(node: Node) -> int:
    return node.gpus.count * node.gpus.milli if node.gpus else 0


def _task_gpu(task: Task) -> int:
    return task.gpu_request.total_milli if task.gpu_request else 0


def _no_gpu(record: object) -> int:
    return 0


def _locate(
    kind: str,
    field: str,
    records: Sequence[Any],
    amounts: Callable[[Any], Resources | None],
    gpu: Callable[[Any], int],
) -> None:
    """Raise at the record where a running total of ``field`` first passes the bound."""
    running: dict[str, int] = {}
    gpu_running = 0
    for rec in records:
        for res, value in (amounts(rec) or {}).items():
            running[res] = running.get(res, 0) + value
            if running[res] > MAX_TOTAL:
                raise SnapshotError(
                    f"the {kind}s' {field} {res} adds up past 2**60 = {MAX_TOTAL} "
                    f"{canonical_unit(res)} at this {kind}",
                    kind=kind,
                    name=rec.name,
                    field=f"{field}.{res}",
                )
        gpu_running += gpu(rec)
        if gpu_running > MAX_TOTAL:
            where = "gpus" if kind == "node" else "gpu_request"
            raise SnapshotError(
                f"the {kind}s' GPUs add up past 2**60 = {MAX_TOTAL} milli-GPU at this {kind}",
                kind=kind,
                name=rec.name,
                field=where,
            )
