"""The statement's operations that change what is already placed — a move (consolidation) and a
lift (the realisation of carried reservations) — and their undo, which is the statement's own:
a discarded statement leaves every column of the session, every plugin's running figures and
the decisions as they were, and tells the plugins in a fixed order."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import gangsched as gs
from _preemption_helpers import GPU, TIERS, config, job, node, pending, running, snap
from gangsched.scheduler import default_registry, open_session
from gangsched.session.statement import OpKind, Statement
from gangsched.session.task_states import TaskState

CFG = config("enqueue", "allocate", "consolidate", "backfill")


def _state(ssn: Any) -> dict[str, Any]:
    """Every column a placement, eviction or reservation moves, and the plugins' figures."""
    out: dict[str, Any] = {
        name: getattr(ssn, name).copy()
        for name in (
            "used",
            "releasing",
            "pipelined",
            "gpu_used",
            "gpu_releasing",
            "gpu_pipelined",
            "task_state",
            "task_node",
            "job_allocated",
            "job_count",
            "queue_allocated",
        )
    }
    out["task_gpus"] = list(ssn.task_gpus)
    out["role_count"] = {k: v.copy() for k, v in ssn.role_count.items()}
    out["drf"] = ssn.plugin("drf").shares.copy()
    out["proportion"] = ssn.plugin("proportion").shares.copy()
    out["committed"] = list(ssn.committed)
    out["kept"] = list(ssn.kept)
    return out


def _assert_same(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], np.ndarray):
            assert np.array_equal(a[key], b[key]), key
        elif isinstance(a[key], dict):
            assert a[key].keys() == b[key].keys(), key
            assert all(np.array_equal(a[key][k], b[key][k]) for k in a[key]), key
        else:
            assert a[key] == b[key], key


def _t(ssn: Any, name: str) -> int:
    return next(i for i, t in enumerate(ssn.snapshot.tasks) if t.name == name)


def _n(ssn: Any, name: str) -> int:
    return int(ssn.snapshot.node_index[name])


# ---------------------------------------------------------------------------------- moves


def _fragmented() -> gs.Snapshot:
    """Two 8-GPU nodes, each running one 4-GPU task; an 8-GPU gang waits."""
    return snap(
        [node("n0", gpus=8), node("n1", gpus=8)],
        [job("a", 1), job("b", 1, creation=1), job("big", 1, phase="Inqueue")],
        running("a", [("n0", [0, 1, 2, 3])], gpus=4)
        + running("b", [("n1", [0, 1, 2, 3])], gpus=4)
        + pending("big", 1, gpus=8),
    )


def _move_a(ssn: Any, stmt: Statement) -> None:
    """The consolidation of :func:`_fragmented`: a-0 leaves n0 for n1, big-0 takes n0."""
    a, big, n0, n1 = _t(ssn, "a-0"), _t(ssn, "big-0"), _n(ssn, "n0"), _n(ssn, "n1")
    stmt.evict(a, "consolidation: moved", "big")
    assert stmt.attempt(big, n0, tuple(range(8)), pipelined=True) is None
    assert stmt.move(a, n1, (4, 5, 6, 7)) is True


def test_a_discarded_move_leaves_every_column_and_figure_as_before() -> None:
    ssn = open_session(_fragmented(), CFG)
    before = _state(ssn)
    stmt = Statement(ssn)
    _move_a(ssn, stmt)
    a = _t(ssn, "a-0")
    assert ssn.task_state[a] == TaskState.PIPELINED and ssn.task_node[a] == _n(ssn, "n1")
    stmt.discard()
    _assert_same(before, _state(ssn))
    assert ssn.task_state[a] == TaskState.RUNNING and ssn.task_gpus[a] == (0, 1, 2, 3)


def test_a_committed_move_is_an_eviction_then_a_reservation_of_the_same_task() -> None:
    ssn = open_session(_fragmented(), CFG)
    stmt = Statement(ssn)
    _move_a(ssn, stmt)
    assert stmt.commit() is True
    kinds = [(op.kind, ssn.snapshot.tasks[op.task].name) for op in ssn.committed]
    assert kinds == [
        (OpKind.EVICT, "a-0"),
        (OpKind.PIPELINE, "big-0"),
        (OpKind.PIPELINE, "a-0"),
    ]
    moved = ssn.committed[2]
    assert moved.origin is ssn.committed[0] and moved.origin.node == _n(ssn, "n0")


def test_a_refused_move_changes_nothing_and_the_task_stays_releasing() -> None:
    ssn = open_session(_fragmented(), CFG)
    a, n1 = _t(ssn, "a-0"), _n(ssn, "n1")
    stmt = Statement(ssn)
    stmt.evict(a, "consolidation: moved", "big")
    after_evict = _state(ssn)
    assert stmt.move(a, n1, (0, 1, 2, 3)) is False  # b-0 holds those devices
    _assert_same(after_evict, _state(ssn))
    assert ssn.task_state[a] == TaskState.RELEASING and len(stmt.ops) == 1
    assert ssn.refusals == []  # a refused move is an answer, not a broken proposal


def test_only_a_task_this_statement_evicted_moves_and_a_moved_task_is_not_restored() -> None:
    ssn = open_session(_fragmented(), CFG)
    a, b, n1 = _t(ssn, "a-0"), _t(ssn, "b-0"), _n(ssn, "n1")
    stmt = Statement(ssn)
    with pytest.raises(RuntimeError, match="was not evicted"):
        stmt.move(b, n1, (4, 5, 6, 7))
    _move_a(ssn, stmt)
    with pytest.raises(RuntimeError, match="placed again since its eviction"):
        stmt.restore(a)
    with pytest.raises(RuntimeError, match="placed again since its eviction"):
        stmt.move(a, n1, (4, 5, 6, 7))


def test_consolidation_trials_leave_the_session_as_the_chosen_moves_alone_would() -> None:
    """The action's trials (many, each discarded) and its one committed set leave the same
    columns as replaying only the committed operations on a fresh session."""
    s = _fragmented()
    ran = open_session(s, CFG)
    for action in ("enqueue", "allocate", "consolidate"):
        default_registry().make_action(action, {}).execute(ran)
    assert [op.kind for op in ran.committed] == [OpKind.EVICT, OpKind.PIPELINE, OpKind.PIPELINE]
    fresh = open_session(s, CFG)
    stmt = Statement(fresh)
    for op in ran.committed:
        if op.kind is OpKind.EVICT:
            stmt.evict(op.task, op.reason, op.preemptor)
        elif op.origin is not None:
            assert stmt.move(op.task, op.node, op.gpus)
        else:
            assert stmt.attempt(op.task, op.node, op.gpus, pipelined=True) is None
    assert stmt.commit()
    _assert_same(_state(ran), _state(fresh))


# ---------------------------------------------------------------------------------- lifts


class _Recorder:
    """A plugin that writes down the allocation events it is told, in order."""

    name = "recorder"

    def __init__(self, arguments: Any = None) -> None:
        self.events: list[tuple[str, int]] = []

    def on_allocate(self, ssn: Any, task: int) -> None:
        self.events.append(("allocate", task))

    def on_deallocate(self, ssn: Any, task: int) -> None:
        self.events.append(("deallocate", task))


def _reserved(n: int = 3, *, minimum: int | None = None, idle: bool = True) -> gs.Snapshot:
    """A gang of ``n`` tasks (``minimum``: all) carried as reservations on n0 (4 GPUs); with
    ``idle`` false, a releasing task still holds two of the devices."""
    tasks: list[dict[str, Any]] = [
        {
            "name": f"r-{i}",
            "job": "r",
            "request": {"cpu": 1, GPU: 1},
            "phase": "Pipelined",
            "node": "n0",
            "gpu_indices": [i],
        }
        for i in range(n)
    ]
    jobs = [job("r", n if minimum is None else minimum, phase="Inqueue")]
    if not idle:
        jobs.append(job("old", 1))
        tasks += running("old", [("n0", [0, 1])], gpus=2, phase="Releasing")
    return snap([node("n0", gpus=4)], jobs, tasks)


def _open_recording(s: gs.Snapshot) -> tuple[Any, _Recorder]:
    reg = default_registry()
    reg.register_plugin("recorder", _Recorder)
    cfg = gs.Config.from_dict(
        {"actions": ["allocate"], "tiers": [*TIERS[:1], [*TIERS[1], {"name": "recorder"}]]},
        plugins=reg.plugins,
    )
    ssn = open_session(s, cfg, registry=reg)
    rec = ssn.plugin("recorder")
    assert isinstance(rec, _Recorder)
    return ssn, rec


def test_a_discarded_lift_puts_every_reservation_back_in_the_order_lifted() -> None:
    ssn, rec = _open_recording(_reserved())
    before = _state(ssn)
    stmt = Statement(ssn)
    order = [_t(ssn, "r-2"), _t(ssn, "r-0"), _t(ssn, "r-1")]
    for t in order:
        stmt.lift(t)
    assert all(ssn.task_state[t] == TaskState.PENDING for t in order)
    assert not ssn.pipelined.any()
    r0 = _t(ssn, "r-0")
    assert stmt.attempt(r0, 0, (0,), pipelined=False) is None
    rec.events.clear()
    stmt.discard()
    _assert_same(before, _state(ssn))
    # The bind is undone first, then the reservations go back as they were lifted.
    assert rec.events == [("deallocate", r0)] + [("allocate", t) for t in order]


def test_a_commit_binds_what_was_placed_and_gives_back_the_other_reservations() -> None:
    ssn, _ = _open_recording(_reserved(minimum=1, idle=False))
    stmt = Statement(ssn)
    tasks = [_t(ssn, f"r-{i}") for i in range(3)]
    for t in tasks:
        stmt.lift(t)
    # r-0 and r-1 are reserved on the releasing task's devices: not idle yet.
    assert stmt.attempt(tasks[0], 0, (0,), pipelined=False) is not None
    assert stmt.attempt(tasks[2], 0, (2,), pipelined=False) is None
    assert stmt.commit() is True
    assert [(op.kind, op.task) for op in ssn.committed] == [(OpKind.ALLOCATE, tasks[2])]
    assert ssn.kept == []
    states = [int(ssn.task_state[t]) for t in tasks]
    assert states == [TaskState.PIPELINED, TaskState.PIPELINED, TaskState.ALLOCATED]
    assert [ssn.task_gpus[t] for t in tasks] == [(0,), (1,), (2,)]
    assert int(ssn.pipelined[0, ssn.arrays.spec.gpu_column]) == 2000


def test_only_a_carried_reservation_is_lifted() -> None:
    ssn = open_session(_fragmented(), CFG)
    stmt = Statement(ssn)
    with pytest.raises(RuntimeError, match="holds no reservation"):
        stmt.lift(_t(ssn, "big-0"))
    with pytest.raises(RuntimeError, match="holds no reservation"):
        stmt.lift(_t(ssn, "a-0"))


def test_bind_kept_makes_the_jobs_kept_allocations_decisions_of_the_commit() -> None:
    s = snap(
        [node("n0", gpus=4)],
        [job("g", 1, phase="Inqueue"), job("h", 1, phase="Inqueue")],
        pending("g", 2) + pending("h", 1),
    )
    ssn = open_session(s, config("allocate"))
    g0, g1, h0 = _t(ssn, "g-0"), _t(ssn, "g-1"), _t(ssn, "h-0")
    held = Statement(ssn)
    assert held.pipeline(g0, 0, (0,)) and held.allocate(h0, 0, (2,))
    held.keep()
    kept = list(ssn.kept)
    # Discarded: the kept allocations stay kept.
    stmt = Statement(ssn)
    stmt.bind_kept(int(ssn.task_job[h0]))
    assert stmt.allocate(g1, 0, (1,))
    stmt.discard()
    assert ssn.kept == kept and ssn.committed == []
    # Committed: h's kept allocation is bound after the statement's own operation.
    stmt = Statement(ssn)
    stmt.bind_kept(int(ssn.task_job[h0]))
    stmt.bind_kept(int(ssn.task_job[g0]))  # g's kept operation is a reservation: stays
    assert stmt.allocate(g1, 0, (1,))
    assert stmt.commit()
    assert [(op.kind, op.task) for op in ssn.committed] == [
        (OpKind.ALLOCATE, g1),
        (OpKind.ALLOCATE, h0),
    ]
    assert [(op.kind, op.task) for op in ssn.kept] == [(OpKind.PIPELINE, g0)]


def test_realised_reservations_bind_through_one_statement_per_job() -> None:
    """The cycle's realisation: the idle reservations of a ready gang are bound, the others
    keep their node; nothing is left lifted."""
    ssn, _ = _open_recording(_reserved(n=2))
    before = _state(ssn)
    default_registry().make_action("allocate", {}).execute(ssn)
    assert ssn.messages.reservations.done
    assert [ssn.snapshot.tasks[op.task].name for op in ssn.committed] == ["r-0", "r-1"]
    assert not ssn.pipelined.any() and np.array_equal(ssn.used[0], before["pipelined"][0])
    with pytest.raises(RuntimeError, match="realised already"):
        ssn.messages.reservations.mark()


def test_realising_a_reservation_binds_what_allocate_kept_for_the_same_job() -> None:
    """A gang of two: one task carried as a reservation, one pending. ``allocate`` places the
    pending one but only keeps it (the gang is not ready on a reservation); the realisation
    then binds the reservation and, in the same commit, the kept task: the whole gang."""
    reserved = {
        "name": "r-0",
        "job": "r",
        "request": {"cpu": 1, GPU: 1},
        "phase": "Pipelined",
        "node": "n0",
        "gpu_indices": [0],
    }
    s = snap(
        [node("n0", gpus=4)],
        [job("r", 2, phase="Inqueue")],
        [reserved, *pending("r", 1, start=1)],
    )
    cfg = config("allocate")
    d = gs.schedule(s, cfg)
    assert sorted(b.task for b in d.binds) == ["r-0", "r-1"]
    assert d.pipelined == ()
    ssn = open_session(s, cfg)
    default_registry().make_action("allocate", {}).execute(ssn)
    names = [(op.kind, ssn.snapshot.tasks[op.task].name) for op in ssn.committed]
    assert names == [(OpKind.ALLOCATE, "r-0"), (OpKind.ALLOCATE, "r-1")] and ssn.kept == []
