"""Queue plugins at scale: ``proportion`` + ``drf`` between 100 and 1,000 queues.

Each queue holds 50 pending single-task jobs (5,000 and 50,000 jobs) of 1, 2, 4 or 8 GPUs
(and one core per GPU) on 500 eight-GPU nodes, so the queues contend for 4,000 GPUs. Weights
are 1–4; a third of the queues have a GPU capability. Everything is generated here from a seed.

* ``time_open_session`` — session opening with the plugins: water-filling of ``deserved``
  over the queues, per-queue inqueue / elastic accounting, DRF shares;
* ``time_water_fill`` — the water-filling kernel alone;
* ``time_order_queues`` / ``time_order_jobs`` — one sort of every queue / job by the plugins'
  order keys;
* ``time_enqueue`` — the enqueue action, with the shape check;
* ``time_cycle`` — one whole cycle (enqueue + allocate);
* ``track_gpus_allocated`` — GPUs handed out by the cycle (quality beside speed).

``HdrfCycle`` does the same with hierarchical DRF over a two-level queue tree (10 groups).
"""

from __future__ import annotations

import numpy as np

from gangsched.actions.enqueue import EnqueueAction
from gangsched.config import Config
from gangsched.model import GpuRequest, Gpus, Job, Node, Queue, Resources, Task
from gangsched.model.snapshot import Snapshot
from gangsched.plugins.proportion import water_fill
from gangsched.scheduler import open_session, schedule
from gangsched.session.core import Session

QUEUES = [100, 1000]
JOBS_PER_QUEUE = 50
NODES = 500
SEED = 0
GPU = "nvidia.com/gpu"

PROPORTION_DRF = Config.from_dict(
    {
        "actions": ["enqueue", "allocate"],
        "tiers": [
            [{"name": "priority"}, {"name": "gang"}],
            [{"name": "drf"}, {"name": "predicates"}, {"name": "proportion"}],
        ],
    }
)
HDRF = Config.from_dict(
    {
        "actions": ["enqueue", "allocate"],
        "tiers": [
            [{"name": "priority"}, {"name": "gang"}],
            [{"name": "drf", "enableHierarchy": True}, {"name": "predicates"}],
        ],
    }
)


def build(n_queues: int, *, tree: bool = False, seed: int = SEED) -> Snapshot:
    """The benchmark cluster: ``NODES`` 8-GPU nodes, ``n_queues`` queues with
    ``JOBS_PER_QUEUE`` pending single-task jobs each. With ``tree``, the queues hang under 10
    group queues."""
    rng = np.random.default_rng(seed)
    nodes = tuple(
        Node(
            name=f"n{i}",
            allocatable=Resources({"cpu": 64_000, "memory": 512 * 2**30}),
            gpus=Gpus(count=8, model="A100"),
        )
        for i in range(NODES)
    )
    weights = rng.integers(1, 5, n_queues)
    capped = rng.random(n_queues) < 1 / 3
    caps = rng.integers(4, 64, n_queues)
    groups: list[Queue] = []
    if tree:
        groups = [Queue(name=f"g{k}", weight=int(rng.integers(1, 5))) for k in range(10)]
    queues = tuple(groups) + tuple(
        Queue(
            name=f"q{i}",
            weight=int(weights[i]),
            capability=Resources({GPU: int(caps[i]) * 1000}) if capped[i] else None,
            parent=f"g{i % 10}" if tree else None,
        )
        for i in range(n_queues)
    )
    n_jobs = n_queues * JOBS_PER_QUEUE
    queue_of = rng.integers(0, n_queues, n_jobs)
    gpus = rng.choice(np.array([1, 1, 1, 2, 4, 8]), n_jobs)
    jobs = tuple(Job(name=f"j{k}", queue=f"q{queue_of[k]}", creation=k) for k in range(n_jobs))
    tasks = tuple(
        Task(
            name=f"j{k}-0",
            job=f"j{k}",
            request=Resources({"cpu": 1000 * int(gpus[k])}),
            gpu_request=GpuRequest(count=int(gpus[k])),
        )
        for k in range(n_jobs)
    )
    return Snapshot(nodes=nodes, queues=queues, jobs=jobs, tasks=tasks)


class ProportionDrfCycle:
    """proportion + drf (flat), Volcano's default pairing."""

    params = (QUEUES,)
    param_names = ("queues",)
    timeout = 1800
    number = 1
    repeat = (1, 3, 120.0)
    warmup_time = 0.0
    config = PROPORTION_DRF
    tree = False

    def setup(self, queues: int) -> None:
        self.snap = build(queues, tree=self.tree)
        self.ssn: Session = open_session(self.snap, self.config)

    def time_open_session(self, queues: int) -> None:
        open_session(self.snap, self.config)

    def time_order_queues(self, queues: int) -> None:
        sorted(range(len(self.snap.queues)), key=self.ssn.queue_key)

    def time_order_jobs(self, queues: int) -> None:
        sorted(range(len(self.snap.jobs)), key=self.ssn.job_key)

    def time_enqueue(self, queues: int) -> None:
        EnqueueAction({}).execute(open_session(self.snap, self.config))

    def time_cycle(self, queues: int) -> None:
        schedule(self.snap, self.config)

    def track_gpus_allocated(self, queues: int) -> float:
        d = schedule(self.snap, self.config)
        return float(sum(q.allocated_gpu for q in d.queues.values()))

    track_gpus_allocated.unit = "GPUs"  # type: ignore[attr-defined]


class WaterFill:
    """The water-filling kernel on the benchmark's queue matrices."""

    params = (QUEUES,)
    param_names = ("queues",)

    def setup(self, queues: int) -> None:
        ssn = open_session(build(queues), PROPORTION_DRF)
        plugin = ssn.plugin("proportion")
        assert plugin is not None
        self.total = ssn.arrays.allocatable.sum(axis=0).astype(np.float64)
        self.total[ssn.arrays.spec.index("pods")] = 0.0
        self.weights = np.array([q.weight for q in ssn.snapshot.queues], dtype=np.float64)
        self.request = plugin.request
        self.guarantee = np.zeros_like(plugin.request)
        self.real = plugin.real_capability

    def time_water_fill(self, queues: int) -> None:
        water_fill(self.total, self.weights, self.request, self.guarantee, self.real)


class HdrfCycle(ProportionDrfCycle):
    """Hierarchical DRF over 10 group queues (no proportion: the two conflict)."""

    config = HDRF
    tree = True
