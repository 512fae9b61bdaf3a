"""The six FGD-study scorers as scheduler plugins: choices on hand-built nodes through
``schedule()``, agreement with the kernels of ``gangsched.fragmentation``, the device hook."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gangsched as gs
from gangsched.fragmentation import (
    PodRequest,
    TypicalPods,
    fit_mask,
    score_bestfit,
    score_dotprod,
    score_fgd,
    score_gpu_clustering,
    score_gpu_packing,
)
from gangsched.plugins.fgd_scores import SCORE_PLUGINS, typical_pods_argument
from gangsched.session.arrays import TaskTemplate
from gangsched.session.core import Session

I64 = npt.NDArray[np.int64]
POLICIES = ("random", "dotprod", "gpu-clustering", "gpu-packing", "bestfit", "fgd")


def config(policy: str, **arguments: object) -> gs.Config:
    return gs.Config.from_dict(
        {
            "actions": ["allocate"],
            "tiers": [[{"name": "predicates"}, {"name": policy, "arguments": arguments}]],
        }
    )


def res(value: Mapping[str, object]) -> gs.Resources:
    return gs.Resources.parse(value, kind="test", name="", field="resources")


def node(name: str, *, cpu: int = 32, gpus: int = 2, model: str = "T4") -> gs.Node:
    return gs.Node(
        name=name,
        allocatable=res({"cpu": cpu, "memory": "256Gi"}),
        gpus=gs.Gpus(count=gpus, model=model),
    )


def running(name: str, on: str, device: int, milli: int, *, cpu: str = "1") -> gs.Task:
    return gs.Task(
        name=name,
        job=name,
        request=res({"cpu": cpu}),
        gpu_request=gs.GpuRequest(count=1, milli=milli),
        phase=gs.TaskPhase.RUNNING,
        node=on,
        gpu_indices=(device,),
    )


def pending(name: str, *, milli: int = 1000, count: int = 1, cpu: str = "1") -> gs.Task:
    return gs.Task(
        name=name,
        job=name,
        request=res({"cpu": cpu}),
        gpu_request=gs.GpuRequest(count=count, milli=milli),
    )


def snapshot(nodes: list[gs.Node], run: list[gs.Task], pend: list[gs.Task]) -> gs.Snapshot:
    jobs = [gs.Job(name=t.job, phase=gs.JobPhase.RUNNING) for t in run]
    jobs += [gs.Job(name=t.job, phase=gs.JobPhase.INQUEUE) for t in pend]
    return gs.Snapshot(
        nodes=tuple(nodes),
        queues=(gs.Queue(name="default"),),
        jobs=tuple(jobs),
        tasks=(*run, *pend),
    )


def bound(out: gs.Decisions, task: str) -> tuple[str, tuple[int, ...]]:
    (b,) = [b for b in out.binds if b.task == task]
    return b.node, b.gpu_indices


def test_registered_by_default_and_listed_in_config() -> None:
    reg = gs.default_registry()
    for name in POLICIES:
        assert reg.plugins[name] is SCORE_PLUGINS[name]
        assert (
            name in gs.Config.from_dict({"actions": ["allocate"], "tiers": [[name]]}).plugin_names
        )


# ---------------------------------------------------------------------------- node choices
# Every pair below is built so that the policy picks the *second* node: the tie rule (lowest
# index) cannot explain the choice.


def test_dotprod_prefers_the_node_with_less_free() -> None:
    snap = snapshot([node("big", cpu=64, gpus=8), node("small", cpu=8, gpus=2)], [], [pending("p")])
    assert bound(gs.schedule(snap, config("dotprod")), "p")[0] == "small"


def test_bestfit_prefers_the_least_leftover() -> None:
    snap = snapshot(
        [node("roomy", cpu=64, gpus=4), node("tight", cpu=4, gpus=2)],
        [running("r", "tight", 0, 1000, cpu="2")],
        [pending("p", cpu="2")],
    )
    assert bound(gs.schedule(snap, config("bestfit")), "p") == ("tight", (1,))


def test_gpu_packing_prefers_a_partly_used_device() -> None:
    snap = snapshot(
        [node("idle"), node("shared")],
        [running("r", "shared", 1, 500)],
        [pending("p", milli=300)],
    )
    assert bound(gs.schedule(snap, config("gpu-packing")), "p") == ("shared", (1,))


def test_gpu_clustering_follows_the_shape_already_on_the_node() -> None:
    nodes = [node("whole"), node("shares")]
    run = [running("w", "whole", 0, 1000), running("s", "shares", 0, 400)]
    shared = snapshot(nodes, run, [pending("p", milli=300)])
    assert bound(gs.schedule(shared, config("gpu-clustering")), "p") == ("shares", (0,))
    # The same nodes with the shapes swapped: a whole-GPU task goes where whole GPUs are.
    run = [running("s", "whole", 0, 400), running("w", "shares", 0, 1000)]
    whole = snapshot(nodes, run, [pending("p")])
    assert bound(gs.schedule(whole, config("gpu-clustering")), "p") == ("shares", (1,))


def test_fgd_picks_the_smallest_fragment_growth() -> None:
    # Target workload: whole one-GPU pods. Node "a" is idle (F = 0); on node "b" both devices
    # hold 400 so nothing typical fits (F = 1200). A 300 share on "a" would leave (700, 1000):
    # F 0 -> 700, score trunc(100 sigmoid(-0.7)) = 33. On "b": F 1200 -> 900, score 57.
    typical = [{"cpu": 0, "gpus": 1, "milli": 1000, "weight": 1.0}]
    snap = snapshot(
        [node("a"), node("b")],
        [running("r0", "b", 0, 400), running("r1", "b", 1, 400)],
        [pending("p", milli=300)],
    )
    cfg = config("fgd", **{"typical-pods": typical})
    assert bound(gs.schedule(snap, cfg), "p")[0] == "b"
    ex = gs.explain(snap, "p", cfg)
    assert [n.scores["fgd"] for n in ex.nodes] == [33.0, 57.0]


def test_fgd_device_choice_differs_from_best_fit() -> None:
    # Devices free (800, 600); target workload 500-milli shares; a 300 share arrives.
    # Best fit takes the tighter device 1 -> (800, 300): a 500 share still fits on device 0,
    # but device 1 is now fragment (F 0 -> 300). FGD takes device 0 -> (500, 600): F stays 0.
    snap = snapshot(
        [node("a")],
        [running("r0", "a", 0, 200), running("r1", "a", 1, 400)],
        [pending("p", milli=300)],
    )
    typical = [{"gpus": 1, "milli": 500, "weight": 1.0}]
    assert bound(gs.schedule(snap, config("fgd", **{"typical-pods": typical})), "p") == ("a", (0,))
    assert bound(gs.schedule(snap, config("bestfit")), "p") == ("a", (1,))


def test_random_is_seeded_and_spreads_over_feasible_nodes() -> None:
    nodes = [node("a"), node("b"), node("full", gpus=1)]
    snap = snapshot(nodes, [running("r", "full", 0, 1000)], [pending("p")])
    picks = [bound(gs.schedule(snap, config("random", seed=s)), "p")[0] for s in range(200)]
    again = [bound(gs.schedule(snap, config("random", seed=s)), "p")[0] for s in range(200)]
    assert picks == again
    assert "full" not in picks
    assert 70 <= picks.count("a") <= 130  # uniform over two nodes: 100 +- 4.2 sigma


def test_random_device_choice_is_seeded_and_has_room() -> None:
    snap = snapshot(
        [node("a", gpus=4)],
        [running("r0", "a", 0, 900), running("r1", "a", 2, 100)],
        [pending("p", milli=300)],
    )
    devices = [bound(gs.schedule(snap, config("random", seed=s)), "p")[1] for s in range(60)]
    assert {d[0] for d in devices} == {1, 2, 3}  # device 0 has only 100 left
    assert devices == [
        bound(gs.schedule(snap, config("random", seed=s)), "p")[1] for s in range(60)
    ]


def test_weight_scales_the_score_and_zero_abstains() -> None:
    snap = snapshot([node("a"), node("b", cpu=8)], [], [pending("p")])
    one = gs.explain(snap, "p", config("bestfit"))
    three = gs.explain(snap, "p", config("bestfit", weight=3))
    assert [n.scores["bestfit"] * 3 for n in one.nodes] == [
        n.scores["bestfit"] for n in three.nodes
    ]
    zero = gs.explain(snap, "p", config("bestfit", **{"bestfit.weight": 0}))
    assert [n.scores["bestfit"] for n in zero.nodes] == [0.0, 0.0]


@pytest.mark.parametrize(
    ("policy", "arguments", "field"),
    [
        ("dotprod", {"seed": 1}, "arguments.seed"),
        ("bestfit", {"weight": -1}, "arguments.weight"),
        ("random", {"seed": "x"}, "arguments.seed"),
        ("fgd", {"weight": 1, "fgd.weight": 2}, "arguments.weight"),
        ("fgd", {"typical-pods": []}, "arguments.typical-pods"),
        ("fgd", {"typical-pods": [{"gpus": 2, "milli": 500}]}, "arguments.typical-pods[0]"),
        ("fgd", {"typical-pods": [{"gpus": 1, "size": 3}]}, "arguments.typical-pods[0].size"),
        ("fgd", {"threshold": 0}, "arguments.threshold"),
    ],
)
def test_bad_arguments_name_the_plugin_and_field(
    policy: str, arguments: dict[str, object], field: str
) -> None:
    snap = snapshot([node("a")], [], [pending("p")])
    with pytest.raises(gs.ConfigError) as info:
        gs.schedule(snap, config(policy, **arguments))
    assert info.value.name == policy
    assert info.value.field == field


# ---------------------------------------------------------------------------- the device hook


class Pin:
    """Answers ``gpu_choice`` with a fixed device list (or nothing)."""

    def __init__(self, arguments: Mapping[str, object]) -> None:
        raw = arguments.get("devices")
        self.devices = None if raw is None else tuple(int(str(d)) for d in raw)  # type: ignore[attr-defined]
        self.name = str(arguments.get("name", "pin"))

    def gpu_choice(
        self, ssn: Session, task: int, node: int, *, future: bool
    ) -> tuple[int, ...] | None:
        return self.devices


def test_session_takes_the_first_gpu_choice_that_answers() -> None:
    reg = gs.default_registry()
    reg.register_plugin("pin-a", Pin)
    reg.register_plugin("pin-b", Pin)
    snap = snapshot([node("a", gpus=4)], [], [pending("p", milli=300)])

    def run(a: object, b: object) -> tuple[int, ...]:
        tiers: list[list[dict[str, Any]]] = [
            [{"name": "pin-a", "arguments": {} if a is None else {"devices": a}}],
            [{"name": "pin-b", "arguments": {} if b is None else {"devices": b}}],
        ]
        cfg = gs.Config.from_dict({"actions": ["allocate"], "tiers": tiers}, plugins=reg.plugins)
        return bound(gs.schedule(snap, cfg, registry=reg), "p")[1]

    assert run([2], [3]) == (2,)  # first tier wins
    assert run(None, [3]) == (3,)  # an abstaining plugin passes the question on
    assert run([1, 2], [3]) == (3,)  # a wrong number of devices is not an answer
    assert run(None, None) == (0,)  # nobody answers: the session's own best fit


# ---------------------------------------------------------------------------- agreement


@st.composite
def clusters(draw: st.DrawFn) -> tuple[gs.Snapshot, dict[str, Any]]:
    """A few nodes with running shares / whole GPUs on them and one pending task."""
    n_nodes = draw(st.integers(2, 5))
    nodes, run = [], []
    free_cpu, gpu_free, models, aff = [], [], [], []
    width = 4
    for i in range(n_nodes):
        count = draw(st.sampled_from([1, 2, 4]))
        model = draw(st.sampled_from(["A", "B"]))
        cpu = draw(st.sampled_from([4, 16, 64]))
        nodes.append(node(f"n{i}", cpu=cpu, gpus=count, model=model))
        row = [0] * width
        left = cpu * 1000
        shapes = [0] * 9
        for d in range(count):
            used = draw(st.sampled_from([0, 0, 250, 500, 750, 1000]))
            if used == 0 or left < 1000:
                row[d] = 1000
                continue
            run.append(running(f"r{i}-{d}", f"n{i}", d, used))
            left -= 1000
            row[d] = 1000 - used
            shapes[0 if used < 1000 else 1] += 1
        free_cpu.append(left)
        gpu_free.append(row)
        models.append(0 if model == "A" else 1)
        aff.append(shapes)
    count = draw(st.sampled_from([0, 1, 1, 2]))
    milli = draw(st.sampled_from([250, 500, 1000])) if count == 1 else 1000
    wanted = draw(st.sampled_from([(), ("A",), ("B",)]))
    cpu = draw(st.sampled_from([1, 2, 8]))
    task = gs.Task(
        name="p",
        job="p",
        request=res({"cpu": cpu, "memory": "1Gi"}),
        gpu_request=gs.GpuRequest(count=count, milli=milli, models=wanted) if count else None,
    )
    allowed = None if not wanted else np.array([m in wanted for m in ("A", "B")])
    pod = PodRequest(
        cpu_milli=cpu * 1000,
        memory=1 << 30,
        num_gpu=count,
        gpu_milli=milli if count else 0,
        allowed_models=allowed,
    )
    arrays: dict[str, Any] = {
        "free_cpu": np.array(free_cpu, dtype=np.int64),
        "free_mem": np.full(n_nodes, 256 << 30, dtype=np.int64),
        "gpu_free": np.array(gpu_free, dtype=np.int64),
        "gpu_count": np.array([nd.gpus.count for nd in nodes if nd.gpus], dtype=np.int64),
        "model": np.array(models, dtype=np.int64),
        "affinity": np.array(aff, dtype=np.int64),
        "pod": pod,
    }
    # Padding slots of nodes with fewer devices are 0, not 1000.
    for i, nd in enumerate(nodes):
        assert nd.gpus is not None
        arrays["gpu_free"][i, nd.gpus.count :] = 0
    return snapshot(nodes, run, [task]), arrays


TYPICAL = TypicalPods(
    cpu_milli=np.array([1000, 2000, 0], dtype=np.int64),
    num_gpu=np.array([1, 1, 0], dtype=np.int64),
    gpu_milli=np.array([500, 1000, 0], dtype=np.int64),
    allowed=np.array([[True, True], [True, False], [True, True]]),
    prob=np.array([0.5, 0.3, 0.2]),
)


@settings(max_examples=40, deadline=None)
@given(clusters())
def test_plugin_scores_equal_the_kernels(case: tuple[gs.Snapshot, dict[str, Any]]) -> None:
    snap, a = case
    pod = a["pod"]
    feasible = fit_mask(a["free_cpu"], a["free_mem"], a["gpu_free"], a["model"], pod)
    kernels = {
        "dotprod": score_dotprod(feasible, pod, a["free_cpu"], a["gpu_free"]),
        "bestfit": score_bestfit(feasible, pod, a["free_cpu"], a["gpu_free"]),
        "gpu-packing": score_gpu_packing(feasible, pod, a["gpu_free"], a["gpu_count"]),
        "gpu-clustering": score_gpu_clustering(feasible, pod, a["gpu_free"], a["affinity"]),
        "fgd": score_fgd(feasible, pod, a["free_cpu"], a["gpu_free"], a["model"], TYPICAL),
    }
    typical_arg = typical_pods_argument(TYPICAL, ("A", "B"))
    for policy, expected in kernels.items():
        arguments = {"typical-pods": typical_arg} if policy == "fgd" else {}
        cfg = config(policy, **arguments)
        ex = gs.explain(snap, "p", cfg)
        fits = np.array([n.fits for n in ex.nodes])
        assert np.array_equal(fits, feasible), policy
        got = np.array([n.scores[policy] for n in ex.nodes])
        assert np.array_equal(got[feasible], expected.score[feasible]), policy
        out = gs.schedule(snap, cfg)
        if not feasible.any():
            assert not out.binds
            continue
        best = int(np.argmax(expected.score))
        assert bound(out, "p")[0] == f"n{best}", policy
        if pod.is_shared:
            assert bound(out, "p")[1] == (int(expected.share_gpu[best]),), policy


def test_template_scores_cover_only_the_rows_asked() -> None:
    snap = snapshot([node("a"), node("b"), node("c")], [running("r", "b", 0, 500)], [pending("p")])
    for policy in POLICIES:
        ssn = gs.open_session(snap, config(policy))
        tmpl: TaskTemplate = ssn.templates[0]
        (plugin,) = [p for tier in ssn.plugins for p in tier if p.name == policy]
        full = plugin.node_score(ssn, tmpl, np.arange(3, dtype=np.intp))
        part = plugin.node_score(ssn, tmpl, np.array([2, 0], dtype=np.intp))
        assert part.shape == (2,)
        assert np.array_equal(part, full[[2, 0]]), policy
