"""What a GPU request charges its queue: one rule, whatever the device size.

A node may carry devices smaller than a whole GPU (``gpus: {count: 4, milli: 500}``, a
half-size slice) or larger (2000 milli). A whole-GPU task on such a device takes the device
(:func:`~gangsched.model.gpu_charge.device_take`), but its *queue* is charged the request as
written: 1000 milli-GPU per device, whatever the device's size; a fractional request charges
its milli. :func:`~gangsched.model.gpu_charge.queue_gpu_charge` is the one owner of that rule: the
session (``task_req``, ``job_allocated``, ``queue_allocated``), the templates the queue plugins
read (proportion, capacity, drf), enqueue's words, ``QueueStatus.allocated``, the reference
scheduler and the invariant checker all call it. Before, the session charged queues what the
devices held (500 for a whole GPU on a 500-milli device), so a queue capped at 2 GPUs took
four whole-GPU tasks and the checker reported ``nvidia.com/gpu 4000 over its capability
2000``.

Mutation check (run by hand on a copy of the source tree): replacing the body of
``queue_gpu_charge`` with ``count * milli`` (no cap at a whole GPU), ``count * 1000``
(fractional requests charged whole) or ``count * max(milli, 1000)``, or charging jobs and
queues ``Session.row_on`` again (what the devices hold), makes
:func:`test_queue_charge_property` fail, on its pinned examples already: the expected charge
is written out in this file (:func:`_expected`), not read from the function.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gangsched.config import Config
from gangsched.decisions import Bind, Decisions
from gangsched.model.gpu_charge import queue_gpu_charge
from gangsched.model.snapshot import Snapshot
from gangsched.scheduler import open_session, schedule
from gangsched.testing import reference
from gangsched.testing.invariants import InvariantViolation, check_all, check_queue_capability

Obj = dict[str, Any]
GPU = "nvidia.com/gpu"
DEVICE_SIZES = (1, 250, 500, 1000, 2000)


def _capacity(hierarchy: bool) -> Config:
    return Config.from_dict(
        {
            "actions": ["enqueue", "allocate", "preempt", "reclaim", "backfill"],
            "tiers": [
                [{"name": "priority"}, {"name": "gang"}],
                [
                    {"name": "drf", "enableHierarchy": hierarchy},
                    {"name": "predicates"},
                    {"name": "capacity", "enableHierarchy": hierarchy},
                    {"name": "nodeorder"},
                ],
            ],
        }
    )


#: name -> (config, whether queue parents' capabilities bind)
CONFIGS: dict[str, tuple[Config, bool]] = {
    "default": (Config.default(), False),
    "proportion": (
        Config.from_dict(
            {
                "actions": ["enqueue", "allocate", "preempt", "reclaim", "backfill"],
                "tiers": [
                    [{"name": "priority"}, {"name": "gang"}, {"name": "conformance"}],
                    [
                        {"name": "drf"},
                        {"name": "predicates"},
                        {"name": "proportion"},
                        {"name": "nodeorder"},
                        {"name": "binpack"},
                    ],
                ],
            }
        ),
        False,
    ),
    "capacity": (_capacity(False), False),
    "capacity-tree": (_capacity(True), True),
}


def _expected(count: int, milli: int | None) -> int:
    """The rule written out independently of the code: a whole GPU (milli absent or ≥ 1000)
    is 1000 per device, a fractional request its milli per device."""
    per_device = 1000 if milli is None or milli >= 1000 else milli
    return count * per_device


def _doc(
    *,
    milli: int,
    sharing: bool = True,
    devices: int = 4,
    n_nodes: int = 2,
    request: Obj | None = None,
    capability: str | None = "2",
    n_tasks: int = 6,
) -> Obj:
    caps: Obj = {} if capability is None else {"capability": {GPU: capability}}
    return {
        "nodes": [
            {
                "name": f"n{i}",
                "allocatable": {"cpu": 64, "memory": "256Gi"},
                "gpus": {"count": devices, "milli": milli, "sharing": sharing},
            }
            for i in range(n_nodes)
        ],
        "queues": [{"name": "q0", **caps}],
        "jobs": [{"name": f"j{i}", "queue": "q0", "creation": i} for i in range(n_tasks)],
        "tasks": [
            {"name": f"j{i}-0", "job": f"j{i}", "gpu_request": request or {"count": 1}}
            for i in range(n_tasks)
        ],
    }


def _held_charge(snap: Snapshot, d: Decisions, queue: str) -> int:
    """The queue's GPU after the cycle, per :func:`_expected`: tasks holding (Bound, Running,
    Pipelined, not evicted) plus the new binds and reservations."""
    evicted = {e.task for e in d.evictions}
    placed = {b.task for b in d.binds} | {p.task for p in d.pipelined}
    total = 0
    for t in snap.tasks:
        holds = t.phase.value in ("Bound", "Running", "Pipelined") and t.name not in evicted
        if (holds or t.name in placed) and snap.job(t.job).queue == queue:
            g = t.gpu_request
            if g is not None:
                total += _expected(g.count, g.milli)
    return total


def _next_doc(doc: Obj, d: Decisions) -> Obj:
    """The snapshot one cycle later: binds bound, reservations pipelined, victims releasing."""
    out = copy.deepcopy(doc)
    by_name = {t["name"]: t for t in out["tasks"]}
    for e in d.evictions:
        by_name[e.task]["phase"] = "Releasing"
    for phase, items in (("Pipelined", d.pipelined), ("Bound", d.binds)):
        for p in items:
            by_name[p.task].update(phase=phase, node=p.node, gpu_indices=list(p.gpu_indices))
    return out


# ------------------------------------------------------------------------------ reproduction


@pytest.mark.parametrize("config_name", sorted(CONFIGS))
@pytest.mark.parametrize("milli", [1, 250, 500])
@pytest.mark.parametrize("sharing", [True, False])
def test_whole_gpu_on_a_shared_size_device_charges_its_queue_one_gpu(
    config_name: str, milli: int, sharing: bool
) -> None:
    """Two nodes of four small devices, a queue capped at 2 GPUs, six whole-GPU tasks: the
    queue takes two tasks (2000 milli-GPU), not one per 500 (or 250, or 1) of device held."""
    config, hierarchical = CONFIGS[config_name]
    snap = Snapshot.from_dict(_doc(milli=milli, sharing=sharing))
    d = schedule(snap, config)
    check_all(snap, d, hierarchical=hierarchical)
    if config_name in ("default", "proportion", "capacity") and milli == 1:
        # Flat quotas are capped by the cluster total (8 milli-GPU here): nothing fits.
        assert not d.binds
    else:
        assert len(d.binds) == 2
    status = d.queues["q0"]
    assert status.allocated.get(GPU, 0) == 1000 * len(d.binds)
    assert status.allocated_gpu == len(d.binds)
    # The next cycle (the binds now Bound on their devices) validates and takes no more.
    again = Snapshot.from_dict(_next_doc(_doc(milli=milli, sharing=sharing), d))
    d2 = schedule(again, config)
    check_all(again, d2, hierarchical=hierarchical)
    assert not d2.binds
    assert d2.queues["q0"].allocated.get(GPU, 0) == 1000 * len(d.binds)


@pytest.mark.parametrize("config_name", sorted(CONFIGS))
def test_whole_gpu_on_a_large_device_charges_one_gpu_not_the_device(config_name: str) -> None:
    """A whole-GPU task on a 2000-milli device takes the device but charges its queue 1000:
    a queue capped at 2 GPUs holds two such tasks (it held one when charged 2000)."""
    config, hierarchical = CONFIGS[config_name]
    snap = Snapshot.from_dict(_doc(milli=2000))
    d = schedule(snap, config)
    check_all(snap, d, hierarchical=hierarchical)
    assert len(d.binds) == 2
    assert d.queues["q0"].allocated.get(GPU, 0) == 2000


@pytest.mark.parametrize("config_name", sorted(CONFIGS))
def test_fractional_request_on_an_unshared_device_charges_its_milli(config_name: str) -> None:
    """Without GPU sharing a 300-milli task takes a whole 500-milli device; its queue is
    charged 300, so a 2-GPU cap admits six of them on the eight devices."""
    config, hierarchical = CONFIGS[config_name]
    doc = _doc(milli=500, sharing=False, request={"count": 1, "milli": 300})
    snap = Snapshot.from_dict(doc)
    d = schedule(snap, config)
    check_all(snap, d, hierarchical=hierarchical)
    assert len(d.binds) == 6
    assert d.queues["q0"].allocated.get(GPU, 0) == 1800


def test_session_charges_queues_the_request_and_nodes_the_devices() -> None:
    """The node's used GPU column follows the devices (500 per whole GPU on a 500-milli
    device); the job and queue follow queue_gpu_charge (1000)."""
    doc = _doc(milli=500, n_tasks=1)
    doc["tasks"][0].update(phase="Running", node="n0", gpu_indices=[2])
    ssn = open_session(Snapshot.from_dict(doc), Config.default())
    gpu = ssn.arrays.spec.gpu_column
    assert int(ssn.used[0, gpu]) == 500
    assert int(ssn.task_req[0, gpu]) == queue_gpu_charge(1, 1000) == 1000
    assert int(ssn.job_allocated[0, gpu]) == 1000
    assert int(ssn.queue_allocated[0, gpu]) == 1000


def test_reference_scheduler_charges_queues_the_same_way() -> None:
    """The plain reference scheduler agrees on the reproduction (binds and queue charge)."""
    for milli in DEVICE_SIZES:
        snap = Snapshot.from_dict(_doc(milli=milli))
        fast, plain = schedule(snap), reference.schedule(snap)
        assert fast.binds == plain.binds
        assert dict(fast.queues["q0"].allocated) == dict(plain.queues["q0"].allocated)


@pytest.mark.parametrize("config_name", sorted(CONFIGS))
def test_guarantee_above_capability_does_not_lift_the_gpu_ceiling(config_name: str) -> None:
    """A queue guaranteed 2 GPUs but capped at 1: proportion floors its deserved share at the
    guarantee (as Volcano does), yet the queue takes one whole-GPU task, not two."""
    config, hierarchical = CONFIGS[config_name]
    doc = _doc(milli=1000, capability="1")
    doc["queues"][0]["guarantee"] = {GPU: 2}
    snap = Snapshot.from_dict(doc)
    d = schedule(snap, config)
    check_all(snap, d, hierarchical=hierarchical)
    assert len(d.binds) == 1
    assert d.queues["q0"].allocated.get(GPU, 0) == 1000


def _over_capability_with_reservations(milli: int) -> Obj:
    """A queue capped at 1 GPU that holds two whole-GPU reservations (its capability was
    lowered since they were made) and has one more task pending."""
    doc = _doc(milli=milli, capability="1", n_tasks=3)
    for i, t in enumerate(doc["tasks"][:2]):
        t.update(phase="Pipelined", node="n0", gpu_indices=[i])
    return doc


@pytest.mark.parametrize("config_name", sorted(CONFIGS))
@pytest.mark.parametrize("milli", [500, 1000])
def test_carried_reservations_in_a_queue_over_its_capability_are_not_bound(
    config_name: str, milli: int
) -> None:
    """A queue over its capability binds nothing — its carried reservations included (they
    stay reserved, and say why) — and the pending task is not placed either."""
    config, hierarchical = CONFIGS[config_name]
    snap = Snapshot.from_dict(_over_capability_with_reservations(milli))
    d = schedule(snap, config)
    check_all(snap, d, hierarchical=hierarchical)
    assert d.binds == () and d.pipelined == ()
    for t in ("j0-0", "j1-0"):
        assert "reservation not bound" in d.task_reasons[t]
        assert "would exceed its capability" in d.task_reasons[t]
    assert d.queues["q0"].allocated.get(GPU, 0) == 2000


def test_a_carried_reservation_binds_once_its_queue_is_within_capability() -> None:
    doc = _over_capability_with_reservations(1000)
    doc["tasks"][1].update(phase="Pending")
    del doc["tasks"][1]["node"], doc["tasks"][1]["gpu_indices"]
    snap = Snapshot.from_dict(doc)
    d = schedule(snap, CONFIGS[sorted(CONFIGS)[0]][0])
    assert [b.task for b in d.binds] == ["j0-0"]


def test_checker_flags_any_bind_in_a_queue_over_its_capability() -> None:
    """Binding a carried reservation where it was made is growth too."""
    snap = Snapshot.from_dict(_over_capability_with_reservations(1000))
    realised = (Bind(task="j0-0", node="n0", gpu_indices=(0,)),)
    with pytest.raises(InvariantViolation, match=r"nvidia\.com/gpu 2000 over its capability 1000"):
        check_queue_capability(snap, Decisions(binds=realised))
    moved = (Bind(task="j0-0", node="n1", gpu_indices=(0,)),)
    with pytest.raises(InvariantViolation, match=r"nvidia\.com/gpu 2000 over its capability 1000"):
        check_queue_capability(snap, Decisions(binds=moved))
    new = (*realised, Bind(task="j2-0", node="n1", gpu_indices=(0,)))
    with pytest.raises(InvariantViolation, match=r"nvidia\.com/gpu 3000 over its capability 1000"):
        check_queue_capability(snap, Decisions(binds=new))


@pytest.mark.parametrize(
    ("count", "milli", "charge"),
    [(1, 1000, 1000), (4, 1000, 4000), (2, 2000, 2000), (1, 500, 500), (3, 100, 300)],
)
def test_queue_gpu_charge_is_the_request_whatever_the_device(
    count: int, milli: int, charge: int
) -> None:
    assert queue_gpu_charge(count, milli) == charge == _expected(count, milli)


# ------------------------------------------------------------------------------ property

_requests = st.one_of(
    st.builds(
        lambda count, milli: (
            {"count": count} if milli is None else {"count": count, "milli": milli}
        ),
        st.integers(1, 4),
        st.sampled_from((None, 1000, 2000)),
    ),
    st.builds(lambda milli: {"count": 1, "milli": milli}, st.integers(1, 9).map(lambda k: k * 100)),
)


@st.composite
def gpu_queue_docs(draw: st.DrawFn) -> Obj:
    """Small clusters of one device size, capped and uncapped queues, GPU gangs."""
    milli = draw(st.sampled_from(DEVICE_SIZES))
    nodes = [
        {
            "name": f"n{i}",
            "allocatable": {"cpu": 64, "memory": "256Gi"},
            "gpus": {
                "count": draw(st.sampled_from((1, 2, 4, 8))),
                "milli": milli,
                "sharing": draw(st.booleans()),
            },
        }
        for i in range(draw(st.integers(1, 3)))
    ]
    queues: list[Obj] = []
    for q in range(draw(st.integers(1, 2))):
        cap = draw(st.sampled_from((None, 500, 1000, 1500, 2000, 3000, 4000)))
        queue: Obj = {"name": f"q{q}", "weight": draw(st.integers(1, 3))}
        if cap is not None:
            queue["capability"] = {GPU: f"{cap / 1000:g}"}
        guarantee = draw(st.sampled_from((None, None, 1000, 2000)))
        if guarantee is not None:  # at times above the capability: accepted, not a ceiling
            queue["guarantee"] = {GPU: f"{guarantee / 1000:g}"}
        queues.append(queue)
    jobs: list[Obj] = []
    tasks: list[Obj] = []
    for j in range(draw(st.integers(1, 5))):
        n = draw(st.integers(1, 3))
        jobs.append(
            {
                "name": f"j{j}",
                "queue": f"q{draw(st.integers(0, len(queues) - 1))}",
                "creation": j,
                "priority": draw(st.integers(0, 2)),
                "min_available": draw(st.integers(1, n)),
            }
        )
        request = draw(_requests)
        tasks += [
            {"name": f"j{j}-{k}", "job": f"j{j}", "gpu_request": request, "request": {"cpu": 1}}
            for k in range(n)
        ]
    return {"nodes": nodes, "queues": queues, "jobs": jobs, "tasks": tasks}


def _check_cycle(snap: Snapshot, d: Decisions, hierarchical: bool) -> None:
    check_all(snap, d, hierarchical=hierarchical)
    placed = {b.task for b in d.binds} | {p.task for p in d.pipelined}
    for queue in snap.queues:
        held = _held_charge(snap, d, queue.name)
        status = d.queues[queue.name]
        assert status.allocated.get(GPU, 0) == held, queue.name
        assert status.allocated_gpu == held / 1000
        limit = queue.capability_limits().get(GPU)
        grew = any(snap.job(snap.task(t).job).queue == queue.name for t in placed)
        if limit is not None and grew:
            assert held <= limit, f"queue {queue.name!r}: {held} over {limit}"


@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(doc=gpu_queue_docs(), config_name=st.sampled_from(sorted(CONFIGS)))
@example(doc=_doc(milli=500), config_name="default")
@example(doc=_doc(milli=2000, request={"count": 1, "milli": 2000}), config_name="capacity")
@example(
    doc=_doc(milli=500, sharing=False, request={"count": 1, "milli": 300}), config_name="default"
)
def test_queue_charge_property(doc: Obj, config_name: str) -> None:
    """Over device sizes × request shapes × queue GPU capabilities, for two cycles (the second
    opens with the first one's binds Bound and its reservations Pipelined): every invariant
    holds, ``QueueStatus.allocated`` is the rule's charge of what each queue holds, and a
    queue that gains tasks stays within its GPU capability."""
    config, hierarchical = CONFIGS[config_name]
    for _ in range(2):
        snap = Snapshot.from_dict(doc)
        d = schedule(snap, config)
        _check_cycle(snap, d, hierarchical)
        doc = _next_doc(doc, d)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(doc=gpu_queue_docs())
def test_reference_agrees_on_gpu_queue_charges(doc: Obj) -> None:
    """The reference scheduler (default configuration) binds the same tasks and reports the
    same queue charge."""
    snap = Snapshot.from_dict(doc)
    fast, plain = schedule(snap), reference.schedule(snap)
    assert (fast.binds, fast.pipelined) == (plain.binds, plain.pipelined)
    for name, status in fast.queues.items():
        assert dict(status.allocated) == dict(plain.queues[name].allocated)
