"""nodeorder's LeastAllocated and MostAllocated scores at the edges of the amounts a node may
hold: allocatable around ``2**53 / 101`` (where a float quotient stops being exact) and up to
the largest supported amount, 2**53, zero requests (kube's defaults) and requests that do not
fit, and running pods that request none of a resource (kube's ``NonZeroRequested`` counts them
at the defaults). Every node's score, as :func:`gangsched.explain` reports it over the whole
cluster, is kube's integer formula computed here with Python integers."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gangsched import Config, Snapshot, explain

EDGE = (1 << 53) // 101
TOP = 1 << 53
DEFAULT_CPU = 100  # milli
DEFAULT_MEMORY = 200 * 1024 * 1024

ALLOCATABLE = st.one_of(
    st.sampled_from([1, 2, 3, 7, 100, 1000, EDGE - 1, EDGE, EDGE + 1, TOP - 1, TOP, 3 * EDGE]),
    st.integers(1, TOP),
)
REQUEST = st.one_of(st.sampled_from([0, 1, 3, 100, EDGE, TOP]), st.integers(0, TOP))


def _cluster(nodes: list[dict[str, Any]], tasks: list[dict[str, Any]]) -> dict[str, Any]:
    """The snapshot of ``nodes`` with one running and one pending job holding ``tasks``."""
    return {
        "nodes": nodes,
        "queues": [{"name": "default"}],
        "jobs": [
            {"name": "running", "queue": "default", "min_available": 1, "phase": "Running"},
            {"name": "pending", "queue": "default", "min_available": 1, "phase": "Inqueue"},
        ],
        "tasks": tasks,
    }


def _config(least: float, most: float) -> Config:
    args = {
        "leastrequested.weight": least,
        "mostrequested.weight": most,
        "balancedresource.weight": 0,
        "tainttoleration.weight": 0,
    }
    return Config.from_dict(
        {
            "actions": ["allocate"],
            "tiers": [[{"name": "nodeorder", "arguments": args}]],
        }
    )


def _least(alloc: int, requested: int) -> int:
    return (alloc - requested) * 100 // alloc if alloc > 0 and requested <= alloc else 0


def _most(alloc: int, requested: int) -> int:
    return min(requested, alloc) * 100 // alloc if alloc > 0 else 0


@st.composite
def clusters(draw: st.DrawFn) -> tuple[dict[str, Any], list[tuple[int, int, int, int]]]:
    """A snapshot of 2-5 nodes, some partly used by a running task, with one pending task
    ``p``; and per node (cpu allocatable, cpu requested, memory allocatable, memory
    requested) as the scores read them."""
    n = draw(st.integers(2, 5))
    req_cpu, req_mem = draw(REQUEST), draw(REQUEST)
    nodes, tasks, figures = [], [], []
    for i in range(n):
        cpu, mem = draw(ALLOCATABLE), draw(ALLOCATABLE)
        nodes.append(
            {"name": f"n{i}", "allocatable": {"cpu": f"{cpu}m", "memory": str(mem), "pods": 110}}
        )
        used_cpu = used_mem = 0
        if draw(st.booleans()):
            used_cpu, used_mem = draw(st.integers(0, cpu)), draw(st.integers(0, mem))
            # kube's NonZeroRequested: a pod on the node that requests none of a resource
            # counts as the default
            nz_cpu, nz_mem = used_cpu or DEFAULT_CPU, used_mem or DEFAULT_MEMORY
            tasks.append(
                {
                    "name": f"r{i}",
                    "job": "running",
                    "request": {"cpu": f"{used_cpu}m", "memory": str(used_mem)},
                    "phase": "Running",
                    "node": f"n{i}",
                }
            )
        want_cpu = req_cpu or DEFAULT_CPU
        want_mem = req_mem or DEFAULT_MEMORY
        if not any(t["name"] == f"r{i}" for t in tasks):
            nz_cpu = nz_mem = 0
        figures.append((cpu, nz_cpu + want_cpu, mem, nz_mem + want_mem))
    tasks.append(
        {
            "name": "p",
            "job": "pending",
            "request": {"cpu": f"{req_cpu}m", "memory": str(req_mem)},
            "phase": "Pending",
        }
    )
    snap = _cluster(nodes, tasks)
    return snap, figures


@settings(max_examples=150)
@given(clusters(), st.sampled_from([(1.0, 0.0), (0.0, 1.0), (2.0, 3.0)]))
def test_least_and_most_allocated_are_kube_integer_formulas_at_every_amount(
    cluster: tuple[dict[str, Any], list[tuple[int, int, int, int]]], weights: tuple[float, float]
) -> None:
    plain, figures = cluster
    least_w, most_w = weights
    got = explain(Snapshot.from_dict(plain), "p", _config(least_w, most_w)).to_dict()
    scores = {n["node"]: n["scores"]["nodeorder"] for n in got["nodes"]}
    for i, (cpu, cpu_req, mem, mem_req) in enumerate(figures):
        least = (_least(cpu, cpu_req) + _least(mem, mem_req)) // 2
        most = (_most(cpu, cpu_req) + _most(mem, mem_req)) // 2
        assert scores[f"n{i}"] == least_w * least + most_w * most, (i, figures[i])


#: (allocatable, allocatable - requested) pairs, allocatable above ``2**53 / 101``, where the
#: float quotient ``rest * 100.0 / allocatable`` floors one above the integer division.
FLOAT_TRAPS = [
    (3114955137957494, 1464028914840022),
    (7941656637706311, 7623990372198058),
    (5839889506538803, 4087922654577162),
    (6506088804333356, 5920540811943353),
]


def test_least_allocated_floors_as_integers_where_floats_would_round_up() -> None:
    nodes, tasks, figures = [], [], []
    for i, (alloc, rest) in enumerate(FLOAT_TRAPS):
        used = alloc - rest - DEFAULT_CPU  # the pending task asks no cpu: kube's default
        nodes.append(
            {"name": f"n{i}", "allocatable": {"cpu": f"{alloc}m", "memory": "10Gi", "pods": 9}}
        )
        tasks.append(
            {
                "name": f"r{i}",
                "job": "running",
                "request": {"cpu": f"{used}m", "memory": "0"},
                "phase": "Running",
                "node": f"n{i}",
            }
        )
        # memory: the running pod and the pending task both ask none: two defaults
        figures.append((alloc, alloc - rest, 10 << 30, 2 * DEFAULT_MEMORY))
        assert int(rest * 100.0 / alloc) != rest * 100 // alloc  # a trap indeed
    tasks.append({"name": "p", "job": "pending", "request": {"memory": "0"}, "phase": "Pending"})
    plain = _cluster(nodes, tasks)
    got = explain(Snapshot.from_dict(plain), "p", _config(1.0, 0.0)).to_dict()
    scores = {n["node"]: n["scores"]["nodeorder"] for n in got["nodes"]}
    for i, (cpu, cpu_req, mem, mem_req) in enumerate(figures):
        assert scores[f"n{i}"] == (_least(cpu, cpu_req) + _least(mem, mem_req)) // 2
