"""The FGD protocol through the general engine: one allocate cycle with every pod pending gives
the fast path's placements, devices and records, for every policy but ``random``."""

from __future__ import annotations

import numpy as np
import pytest

import gangsched as gs
from gangsched.errors import ConfigError
from gangsched.io.openb import NodeTable, PodTable, load_nodes, load_pods
from gangsched.model import TaskPhase
from gangsched.sim.fgd import RunResult, discrete_tables
from gangsched.sim.openb_trace import (
    fgd_config,
    fgd_snapshot,
    node_subset,
    openb_typical,
    replay_fgd,
)

DETERMINISTIC = ("dotprod", "gpu-clustering", "gpu-packing", "bestfit", "fgd")
FIELDS = ("placement", "devices", "order", "arrived", "used", "frag", "idle")


@pytest.fixture(scope="module")
def openb() -> tuple[NodeTable, PodTable]:
    nodes = load_nodes()
    return node_subset(nodes, np.arange(0, len(nodes), 40)), load_pods()


def general_and_fast(nodes: NodeTable, pods: PodTable, policy: str) -> tuple[RunResult, RunResult]:
    """The seed-42 replay of ``policy`` through the general engine and through the fast path."""
    return (
        replay_fgd(nodes, pods, policy, 42, engine="schedule"),
        replay_fgd(nodes, pods, policy, 42, engine="fast"),
    )


def _same(a: RunResult, b: RunResult) -> None:
    for field in FIELDS:
        assert np.array_equal(getattr(a, field), getattr(b, field)), field
    assert (a.failed, a.max_gpu_used, a.cpu_overcommit, a.total_gpus, a.n_pods) == (
        b.failed,
        b.max_gpu_used,
        b.cpu_overcommit,
        b.total_gpus,
        b.n_pods,
    )


@pytest.mark.parametrize("policy", DETERMINISTIC)
def test_one_cycle_gives_the_fast_paths_placements_and_records(
    openb: tuple[NodeTable, PodTable], policy: str
) -> None:
    nodes, pods = openb
    general, fast = general_and_fast(nodes, pods, policy)
    assert general.failed > 0  # tuned to 130 % of the slice: dropped pods are exercised
    assert general.devices is not None and (general.devices != 0).any()  # devices compared too
    _same(general, fast)  # bit for bit, fragment sums included
    assert discrete_tables(general) == discrete_tables(fast)


@pytest.mark.parametrize("policy", ["bestfit", "gpu-clustering", "random"])
def test_one_cycle_places_as_one_cycle_per_arrival(
    openb: tuple[NodeTable, PodTable], policy: str
) -> None:
    # The per-arrival replay and the one cycle see the same session state before each pod;
    # random's hash reads the node's version in the session, so it agrees only per seed.
    nodes, pods = openb
    one = replay_fgd(nodes, pods, policy, 42, engine="schedule", limit=150)
    per_pod = replay_fgd(nodes, pods, policy, 42, engine="replay", limit=150)
    assert one.failed == per_pod.failed
    if policy != "random":
        assert np.array_equal(one.placement, per_pod.placement)
        assert np.array_equal(one.used, per_pod.used)


def test_fgd_snapshot_lists_the_pods_as_jobs_in_arrival_order(
    openb: tuple[NodeTable, PodTable],
) -> None:
    nodes, pods = openb
    order = np.array([5, 3, 5, 0], dtype=np.int64)  # a clone arrives twice
    snap = fgd_snapshot(nodes, pods, order)
    assert [j.creation for j in snap.jobs] == [1, 2, 3, 4]
    assert [t.job for t in snap.tasks] == [j.name for j in snap.jobs]
    assert all(
        t.phase is TaskPhase.PENDING and j.min_available == 1
        for j, t in zip(snap.jobs, snap.tasks, strict=True)
    )
    assert (
        snap.tasks[0].request == snap.tasks[2].request and snap.tasks[0].name != snap.tasks[2].name
    )


def test_unknown_engine_is_a_config_error(openb: tuple[NodeTable, PodTable]) -> None:
    nodes, pods = openb
    with pytest.raises(ConfigError, match="engine"):
        replay_fgd(nodes, pods, "bestfit", 1, engine="quick", limit=5)


@pytest.mark.parametrize("policy", ["bestfit", "fgd", "gpu-packing"])
def test_gpu_scorers_carried_across_cycles_decide_as_a_fresh_cycle(
    openb: tuple[NodeTable, PodTable], policy: str
) -> None:
    # The scorers declare shape_only, so a cluster state's next cycle keeps their evaluations
    # of the rows that did not change: the decisions must be those of a cycle from records.
    nodes, pods = openb
    typical, models = openb_typical(pods, nodes)
    config = fgd_config(policy, typical=typical, models=models)
    snap = fgd_snapshot(nodes, pods, np.arange(0, 600, 7, dtype=np.int64))
    state = gs.ClusterState(gs.Snapshot(nodes=snap.nodes, queues=snap.queues))
    batches = [range(0, 30), range(30, 55), range(55, len(snap.jobs))]
    carried: list[int] = []
    for i, batch in enumerate(batches):
        for j in batch:
            state.add_job(snap.jobs[j], [snap.tasks[j]])
        if i == 2:  # a pod finishes: its node gets room back
            done = next(t.name for t in state.tasks.values() if t.node is not None)
            state.set_task_phase(done, TaskPhase.SUCCEEDED)
        fresh = gs.schedule(gs.Snapshot.from_dict(state.snapshot().to_dict()), config)
        out = state.schedule(config)
        assert out.binds == fresh.binds and out.task_reasons == fresh.task_reasons
        carried.append(state.__dict__["_last_session"].evaluator.carried)
        assert out.binds  # every batch places pods
        state.apply(out)
    assert carried[0] == 0 and min(carried[1:]) > 0  # later cycles did reuse evaluations


@pytest.mark.parametrize("policy", ["bestfit", "fgd", "dotprod", "gpu-packing"])
def test_kept_views_and_remembered_scores_follow_each_placement(
    openb: tuple[NodeTable, PodTable], policy: str
) -> None:
    # The scorers keep the session's kernel view (and fgd its scores per node state) across
    # calls; after every placement their scores and device choices must be what the kernels
    # give on a view computed afresh.
    from gangsched.fragmentation import NodeScores, score_fgd
    from gangsched.plugins._gpu_common import _feasible, _task_pod, _template_pod, _view
    from gangsched.scheduler import open_session
    from gangsched.session.statement import Statement

    nodes, pods = openb
    typical, models = openb_typical(pods, nodes)
    snap = fgd_snapshot(nodes, pods, np.arange(0, 400, 3, dtype=np.int64))
    ssn = open_session(snap, fgd_config(policy, typical=typical, models=models))
    plugin = ssn.points.serving("node_score")[-1]
    every = np.arange(len(snap.nodes), dtype=np.intp)
    placed = shared = 0
    for t, tmpl_index in enumerate(ssn.template_of.tolist()):
        tmpl = ssn.templates[tmpl_index]
        node, pipelined = ssn.best_node(tmpl)
        if node < 0 or pipelined:
            continue
        pod = _template_pod(ssn, tmpl)
        assert pod is not None
        fresh = _view(ssn, every)
        feasible = _feasible(fresh, pod)
        if policy == "fgd":
            kernel = score_fgd(
                feasible, pod, fresh.free_cpu, fresh.gpu_free, fresh.model_idx, plugin.typical
            )
        else:
            kernel = NodeScores(plugin._kernel(ssn, every, feasible, pod, fresh).score, every)
        want = np.where(np.isfinite(kernel.score), kernel.score, 0.0)
        assert np.array_equal(ssn.points.node_score(tmpl, every), want)
        gpus = ssn.choose_gpus(t, node, future=False)
        task_pod = _task_pod(ssn, t)
        if task_pod is not None and task_pod.is_shared:
            one = _view(ssn, np.array([node], dtype=np.intp))
            assert gpus == plugin.choose_device(ssn, t, node, one, task_pod)
            shared += 1
        stmt = Statement(ssn)
        assert stmt.allocate(t, node, gpus)
        stmt.commit()
        placed += 1
    assert placed > 50 and shared > 10


def test_fgd_snapshot_records_equal_the_checked_constructors(
    openb: tuple[NodeTable, PodTable],
) -> None:
    """The protocol's jobs and tasks, built without the constructors' checks, are the records
    the checked constructors build, field for field (and so give the same plain form)."""
    from gangsched.model import GpuRequest, Job, Resources, Task
    from gangsched.units import CPU, MEMORY

    nodes, pods = openb
    order = np.arange(0, len(pods), 7, dtype=np.int64)
    snap = fgd_snapshot(nodes, pods, order)
    assert any(t.gpu_request is not None for t in snap.tasks)
    for k, (job, task) in enumerate(zip(snap.jobs, snap.tasks, strict=True), start=1):
        row = int(order[k - 1])
        name = f"{k:06d}-{pods.names[row]}"
        count = int(pods.num_gpu[row])
        gpu = None
        if count:
            models = pods.spec_models(int(pods.spec_idx[row]))
            gpu = GpuRequest(count=count, milli=int(pods.gpu_milli[row]), models=models)
        request = {CPU: int(pods.cpu_milli[row]), MEMORY: int(pods.memory_mib[row]) << 20}
        want_task = Task(name=name, job=name, request=Resources(request), gpu_request=gpu)
        want_job = Job(name=name, queue="default", min_available=1, creation=k)
        for got, want in ((task, want_task), (job, want_job)):
            assert got == want
            assert got.to_dict() == want.to_dict()
            assert hash(got) == hash(want)


def test_fgd_snapshot_of_a_table_the_checks_refuse_raises_their_error(
    openb: tuple[NodeTable, PodTable],
) -> None:
    """A pod row asking GPUs with no share is refused by the task checks, as before."""
    import dataclasses

    from gangsched.errors import SnapshotError

    nodes, pods = openb
    row = int(np.flatnonzero(pods.num_gpu > 0)[0])
    milli = pods.gpu_milli.copy()
    milli[row] = 0
    bad = dataclasses.replace(pods, gpu_milli=milli)
    with pytest.raises(SnapshotError, match="milli"):
        fgd_snapshot(nodes, bad, np.array([row], dtype=np.int64))


def test_one_row_view_is_the_array_view_of_that_row(openb: tuple[NodeTable, PodTable]) -> None:
    """The scalar numbers of one node (the kept view's refresh after a placement) are the
    numbers the array view of that row holds, on every node, before and after placements."""
    from gangsched.plugins._gpu_common import _row_numbers, _view
    from gangsched.scheduler import open_session
    from gangsched.session.statement import Statement

    nodes, pods = openb
    snap = fgd_snapshot(nodes, pods, np.arange(0, 600, 2, dtype=np.int64))
    ssn = open_session(snap, fgd_config("bestfit"))

    def check() -> None:
        for row in range(len(snap.nodes)):
            want = _view(ssn, np.array([row], dtype=np.intp))
            cpu, mem, dev = _row_numbers(ssn, row)
            assert (cpu, mem) == (int(want.free_cpu[0]), int(want.free_mem[0])), row
            assert dev == want.gpu_free[0].tolist(), row

    check()
    for t, tmpl_index in enumerate(ssn.template_of.tolist()):
        node, pipelined = ssn.best_node(ssn.templates[tmpl_index])
        if node >= 0 and not pipelined:
            stmt = Statement(ssn)
            assert stmt.allocate(t, node, ssn.choose_gpus(t, node, future=False))
            stmt.commit()
    assert ssn.used.any() and ssn.gpu_used.any()
    check()


def test_fit_of_a_few_rows_is_the_array_fit(openb: tuple[NodeTable, PodTable]) -> None:
    """Resource fit of a few rows in scalar arithmetic answers as the array fit, for every
    template, on a cluster partly filled (shared and whole devices)."""
    from gangsched.scheduler import open_session
    from gangsched.session import fit
    from gangsched.session.statement import Statement

    nodes, pods = openb
    snap = fgd_snapshot(nodes, pods, np.arange(0, 900, 2, dtype=np.int64))
    ssn = open_session(snap, fgd_config("bestfit"))
    for t, tmpl_index in enumerate(ssn.template_of.tolist()[:300]):
        node, pipelined = ssn.best_node(ssn.templates[tmpl_index])
        if node >= 0 and not pipelined:
            stmt = Statement(ssn)
            assert stmt.allocate(t, node, ssn.choose_gpus(t, node, future=False))
            stmt.commit()
    rng = np.random.default_rng(7)
    n = len(snap.nodes)
    answers: set[bool] = set()
    for tmpl in ssn.templates[:: max(1, len(ssn.templates) // 60)]:
        for _ in range(10):
            rows = rng.choice(n, size=int(rng.integers(1, fit._FEW + 1)), replace=False)
            rows = rows.astype(np.intp)
            few = fit._fit_few(ssn, tmpl, rows, None)
            full = fit.resource_fit(ssn, tmpl, np.arange(n, dtype=np.intp), None)
            assert np.array_equal(few[0], full[0][rows]) and np.array_equal(few[1], full[1][rows])
            answers.update(few[0].tolist())
    assert answers == {True, False}


def test_kept_failure_wording_is_what_a_fresh_evaluation_words(
    openb: tuple[NodeTable, PodTable],
) -> None:
    """A template's fit_error, kept while no node's reason moves, is the wording a fresh
    evaluator gives at every step of a cycle that fills the cluster."""
    from gangsched.scheduler import open_session
    from gangsched.session.evaluation import Evaluator
    from gangsched.session.statement import Statement

    nodes, pods = openb
    snap = fgd_snapshot(nodes, pods, np.arange(0, 3000, 3, dtype=np.int64))
    ssn = open_session(snap, fgd_config("bestfit"))
    worded = 0
    for t, tmpl_index in enumerate(ssn.template_of.tolist()):
        tmpl = ssn.templates[tmpl_index]
        node, pipelined = ssn.best_node(tmpl)
        if node < 0:
            assert ssn.fit_error(tmpl) == Evaluator(ssn).fit_error(tmpl)
            worded += 1
        elif not pipelined:
            stmt = Statement(ssn)
            assert stmt.allocate(t, node, ssn.choose_gpus(t, node, future=False))
            stmt.commit()
    assert worded > 20
