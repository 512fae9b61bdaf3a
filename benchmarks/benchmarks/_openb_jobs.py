"""The openb GPU cluster with a few thousand pending jobs, each of its own shape, and a stream
of informer changes of every kind for a long-lived ``ClusterState``.

Seeded generator (``np.random.default_rng``), never changed once released -- only appended:

* Nodes: the 1,213 GPU nodes of the vendored openb trace (``gangsched.io.openb.load_nodes``:
  CPU, memory, 1 to 8 GPUs of seven models), in the file's order, racks of 64 (``rack``
  label), and the GPU model as a label (``gpu-model``). About 30 % of the nodes run one task
  of a Running job (``run-<node>``) holding part of the node's CPU, memory and GPUs.
* Pending jobs: ``n_jobs`` gangs of 1 to 8 tasks (sizes 1, 2, 4, 8; small ones more
  frequent). Each job draws a pod row of the vendored openb pod list (CPU in millicores,
  memory in MiB, 0 to 8 GPUs, a share of one GPU) and moves its CPU and memory by a random
  amount of its own, so nearly every job is a template of its own; about a quarter of the
  GPU jobs name the GPU models they accept (one or two of the cluster's), and about one job
  in eight selects a rack half (``node_selector``). Jobs are Inqueue over five queues of
  weights 1 to 5, with ``min_available`` = gang size.

:class:`StreamChanges` makes ten informer changes per call on a ``ClusterState`` built from
it: node cordons, a node removed or added back, jobs added and finished, tasks reported
Running after their bind (the binds themselves come from applying a cycle's decisions).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np

from gangsched import ClusterState, Job, Snapshot, Task, TaskPhase
from gangsched.io.openb import load_nodes, load_pods

__all__ = ["StreamChanges", "openb_jobs_cluster", "openb_jobs_cluster_dict"]

#: Gang sizes and their relative frequency (mean ≈ 2 tasks per gang).
JOB_GANGS = ((1, 2, 4, 8), (60, 20, 12, 8))
QUEUES = (("q0", 1), ("q1", 2), ("q2", 3), ("q3", 4), ("q4", 5))
RACK = 64


def _node_dicts(
    rng: np.random.Generator, n_nodes: int | None
) -> tuple[list[Any], list[Any], list[Any]]:
    table = load_nodes()
    nodes: list[Any] = []
    jobs: list[Any] = []
    tasks: list[Any] = []
    for i in range(len(table) if n_nodes is None else min(n_nodes, len(table))):
        name = table.names[i]
        cpu, mem, gpus = int(table.cpu_milli[i]), int(table.memory_mib[i]), int(table.gpu_count[i])
        model = table.model_of(i)
        node: dict[str, Any] = {
            "name": name,
            "allocatable": {"cpu": f"{cpu}m", "memory": f"{mem}Mi", "pods": 110},
            "labels": {"rack": f"rack-{i // RACK:03d}", "gpu-model": model or "none"},
        }
        if gpus:
            node["gpus"] = {"count": gpus, "model": model}
        nodes.append(node)
        if rng.random() < 0.3:
            held = int(rng.integers(0, gpus + 1)) if gpus else 0
            share = float(rng.uniform(0.1, 0.6))
            job = f"run-{name}"
            jobs.append({"name": job, "queue": "q0", "min_available": 1, "phase": "Running"})
            task: dict[str, Any] = {
                "name": f"{job}-0",
                "job": job,
                "phase": "Running",
                "node": name,
                "request": {"cpu": f"{int(cpu * share)}m", "memory": f"{int(mem * share)}Mi"},
            }
            if held:
                task["gpu_request"] = {"count": held, "milli": 1000}
                task["gpu_indices"] = list(range(held))
            tasks.append(task)
    return nodes, jobs, tasks


def _job_dicts(
    rng: np.random.Generator, n_jobs: int, first: int, models: tuple[str, ...], racks: int
) -> tuple[list[Any], list[Any]]:
    """``n_jobs`` pending jobs named from ``job-<first>`` on (module docstring)."""
    pods = _pods()
    sizes, weights = JOB_GANGS
    p = np.array(weights, dtype=np.float64) / sum(weights)
    jobs: list[Any] = []
    tasks: list[Any] = []
    for j in range(first, first + n_jobs):
        row = int(rng.integers(0, len(pods)))
        size = int(rng.choice(sizes, p=p))
        count, milli = int(pods.num_gpu[row]), int(pods.gpu_milli[row])
        cpu = max(int(pods.cpu_milli[row] * rng.uniform(0.5, 1.5)), 100)
        mem = max(int(pods.memory_mib[row] * rng.uniform(0.5, 1.5)), 64)
        name = f"job-{j:05d}"
        jobs.append(
            {
                "name": name,
                "queue": QUEUES[int(rng.integers(0, len(QUEUES)))][0],
                "min_available": size,
                "priority": int(rng.integers(0, 3)),
                "phase": "Inqueue",
                "creation": j,
            }
        )
        gpu: dict[str, Any] | None = None
        if count:
            gpu = {"count": count, "milli": milli if count == 1 else 1000}
            if rng.random() < 0.25:
                k = int(rng.integers(1, 3))
                gpu["models"] = sorted(rng.choice(models, size=k, replace=False).tolist())
        selector = None
        if rng.random() < 0.125:
            half = int(rng.integers(0, 2))
            selector = {"rack": f"rack-{int(rng.integers(0, racks)) // 2 * 2 + half:03d}"}
        for k in range(size):
            task: dict[str, Any] = {
                "name": f"{name}-{k}",
                "job": name,
                "role": "worker",
                "request": {"cpu": f"{cpu}m", "memory": f"{mem}Mi"},
            }
            if gpu is not None:
                task["gpu_request"] = gpu
            if selector is not None and selector["rack"] < f"rack-{racks:03d}":
                task["node_selector"] = selector
            tasks.append(task)
    return jobs, tasks


@functools.cache
def _pods() -> Any:
    return load_pods()


@functools.cache
def _models() -> tuple[str, ...]:
    return tuple(m for m in load_nodes().models if m)


def openb_jobs_cluster_dict(
    n_jobs: int = 5_000, seed: int = 0, n_nodes: int | None = None
) -> dict[str, Any]:
    """The interchange form of the cluster (module docstring); ``n_nodes``: only the first
    nodes of the list (all by default)."""
    rng = np.random.default_rng(seed)
    nodes, run_jobs, run_tasks = _node_dicts(rng, n_nodes)
    racks = (len(nodes) + RACK - 1) // RACK
    jobs, tasks = _job_dicts(rng, n_jobs, 0, _models(), racks)
    return {
        "nodes": nodes,
        "queues": [{"name": q, "weight": w} for q, w in QUEUES],
        "jobs": run_jobs + jobs,
        "tasks": run_tasks + tasks,
    }


@functools.lru_cache(maxsize=2)
def openb_jobs_cluster(n_jobs: int = 5_000, seed: int = 0) -> Snapshot:
    """:func:`openb_jobs_cluster_dict` as a validated snapshot (cached per process)."""
    return Snapshot.from_dict(openb_jobs_cluster_dict(n_jobs, seed))


class StreamChanges:
    """Ten informer changes per :meth:`apply` on ``state`` (made for
    :func:`openb_jobs_cluster_dict`'s cluster; on another, new jobs go to its queues): three
    nodes cordoned or uncordoned (toggled), one cordoned node of the middle of the list
    removed or added back (toggled: the node order moves), two new pending jobs of one task
    each, two Running jobs of the generator finished (removed with their tasks; none once
    they are all gone), and two Bound tasks reported Running (fewer when fewer are Bound)."""

    def __init__(self, state: ClusterState, seed: int = 1) -> None:
        self.state = state
        self.rng = np.random.default_rng(seed)
        nodes = list(state.nodes)
        self.cordons = nodes[5:8]
        # The node removed and added back is drained first: its tasks go back to Pending,
        # and it stays cordoned.
        spare = nodes[len(nodes) // 2]
        for task in [t for t in state.tasks.values() if t.node == spare]:
            state.set_task_phase(task.name, TaskPhase.PENDING)
        state.cordon(spare)
        self.spare = state.nodes[spare]
        self.finishing = [
            j.name
            for j in state.jobs.values()
            if j.name.startswith("run-") and j.name != f"run-{spare}"
        ]
        self.racks = (len(nodes) + RACK - 1) // RACK
        self.next_job = 1_000_000
        self.flip = False

    def apply(self) -> None:
        state = self.state
        self.flip = not self.flip
        for name in self.cordons:
            state.cordon(name, self.flip)
        if self.flip:
            state.remove_node(self.spare.name)
        else:
            state.add_node(self.spare)
        jobs, tasks = _job_dicts(self.rng, 2, self.next_job, _models(), self.racks)
        self.next_job += 2
        queues = list(state.queues)
        for job in jobs:
            if job["queue"] not in state.queues:  # another generator's cluster: its queues
                job["queue"] = queues[int(job["queue"][1:]) % len(queues)]
            state.add_job(
                Job.from_dict(job), [Task.from_dict(t) for t in tasks if t["job"] == job["name"]]
            )
        for _ in range(2):
            if self.finishing:
                state.remove_job(self.finishing.pop(), with_tasks=True)
        bound = [t for t in state.tasks.values() if t.phase is TaskPhase.BOUND][:2]
        for task in bound:
            state.update_task(dataclasses.replace(task, phase=TaskPhase.RUNNING))
