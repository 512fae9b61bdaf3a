"""What the victim search keeps between searches, and the vectorized forms of its rules.

The search builds its bundles in one array pass, keeps each job's victim order for the session,
keeps the gang rule's surplus count per job while the job's counters stand, and gives back the
explanation of a search that found nothing to a later preemptor that reads the same while no
task moved. Each is checked here against the plain rule it stands for, and each kept answer
against a fresh one after the change that must drop it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

import gangsched as gs
from _preemption_helpers import GPU, TIERS, config, node
from gangsched.actions import preempt as preempt_action
from gangsched.actions.victims import rules
from gangsched.actions.victims import search as victim_search
from gangsched.config import Config
from gangsched.framework.dispatch import JOB_AND_QUEUE_ORDERS
from gangsched.scheduler import open_session
from gangsched.session.core import Session, TaskState
from gangsched.session.rules.gang import spare_tasks
from gangsched.session.statement import Statement

#: Volcano's own rule (surplus on the claim's nodes) and the whole-gang rule.
NODE_RULE = config("enqueue", "allocate", "preempt", "reclaim", "backfill", whole=False)
WHOLE_RULE = config("enqueue", "allocate", "preempt", "reclaim", "backfill", whole=True)
#: Volcano's tier walk (victims a tier without the gang plugin chose pass no gang rule).
WALK_RULE = Config.from_dict(
    {
        "actions": ["enqueue", "allocate", "preempt", "reclaim", "backfill"],
        "tiers": TIERS,
        "configurations": {
            "preempt": {"allVictimRules": False},
            "reclaim": {"allVictimRules": False},
        },
    }
)
SEEDS = range(12)


def _cluster(seed: int) -> gs.Snapshot:
    """A small random cluster: two weighted queues, running gangs (some with role minimums,
    some at their minimum) and waiting gangs, several of the same shape in one queue."""
    rng = np.random.default_rng(seed)
    n_nodes = int(rng.integers(3, 7))
    nodes = [node(f"n{i}", gpus=4, cpu=16) for i in range(n_nodes)]
    queues = [{"name": "qa", "weight": 1}, {"name": "qb", "weight": int(rng.integers(1, 4))}]
    jobs: list[dict[str, Any]] = []
    tasks: list[dict[str, Any]] = []
    free = {i: list(range(4)) for i in range(n_nodes)}
    for k in range(4 * n_nodes):
        if not any(free.values()):
            break
        name = f"run{k}"
        size = int(rng.integers(1, 6))
        spots = [(i, free[i].pop()) for i in rng.permutation(n_nodes).tolist() * 4 if free[i]]
        spots = spots[:size]
        if not spots:
            break
        roles = bool(rng.random() < 0.3) and len(spots) >= 2
        minimum = int(rng.integers(1, len(spots) + 1))
        rec: dict[str, Any] = {
            "name": name,
            "queue": queues[int(rng.integers(0, 2))]["name"],
            "min_available": minimum,
            "phase": "Running",
            "priority": int(rng.integers(0, 3)),
            "creation": float(k),
        }
        if roles:
            rec["min_task_member"] = {"ps": 1, "worker": max(minimum - 1, 0)}
        jobs.append(rec)
        for t, (i, g) in enumerate(spots):
            tasks.append(
                {
                    "name": f"{name}-{t}",
                    "job": name,
                    "role": ("ps" if t == 0 else "worker") if roles else "worker",
                    "priority": int(rng.integers(0, 2)),
                    "request": {"cpu": int(rng.integers(1, 4)), GPU: 1},
                    "phase": "Running",
                    "node": f"n{i}",
                    "gpu_indices": [g],
                }
            )
    shape = int(rng.integers(1, 3))
    for k in range(int(rng.integers(4, 9))):
        name = f"wait{k}"
        same = k % 2 == 0
        size = 1 if same else int(rng.integers(1, 3))
        jobs.append(
            {
                "name": name,
                "queue": "qa" if same else queues[int(rng.integers(0, 2))]["name"],
                "min_available": size,
                "phase": "Inqueue",
                "priority": 5 if same else int(rng.integers(1, 6)),
                "creation": float(10 + k),
            }
        )
        for t in range(size):
            gpus = shape if same else int(rng.integers(1, 3))
            tasks.append({"name": f"{name}-{t}", "job": name, "request": {"cpu": 1, GPU: gpus}})
    return gs.Snapshot.from_dict(
        {"nodes": nodes, "queues": queues, "jobs": jobs, "tasks": tasks, "hypernodes": []}
    )


# ---------------------------------------------------------------------------- bundles


def _plain_bundles(
    search: Any, victims: np.ndarray, useful: np.ndarray
) -> list[tuple[int, tuple[int, ...], tuple[int, ...]]]:
    """The bundle rule written out task by task (the module docstring's definition)."""
    ssn = search.ssn
    by_job: dict[int, list[int]] = {}
    for t in victims.tolist():
        by_job.setdefault(int(ssn.task_job[t]), []).append(t)
    ranked: list[tuple[tuple[Any, ...], int, tuple[int, ...], tuple[int, ...]]] = []
    for v, tasks in by_job.items():
        tasks.sort(key=ssn.victim_key)
        on = [t for t in tasks if useful[ssn.task_node[t]]]
        if not on:
            continue
        rec = ssn.snapshot.jobs[v]
        key = (min(ssn.victim_key(t)[:-1] for t in tasks), -rec.creation, rec.name)
        if search.scope.whole:
            whole = tuple(tasks) if rules.may_go_whole(ssn, v, tasks) else ()
            surplus = tuple(spare_tasks(ssn, v, on))
            if surplus or whole:
                ranked.append((key, v, surplus, whole))
            continue
        for n in sorted({int(ssn.task_node[t]) for t in on}):
            mine = [t for t in on if ssn.task_node[t] == n]
            walked = mine[0] in search.free
            here = tuple(mine) if walked else tuple(spare_tasks(ssn, v, mine))
            room = ssn.future_idle()[n] + ssn.task_req[list(here)].sum(axis=0)
            if here and any(np.all(row <= room) for row in search.claim_req):
                ranked.append(((*key, n), v, here, ()))
    ranked.sort(key=lambda item: item[0])
    return [(v, s, w) for _, v, s, w in ranked]


def _searches(cfg: Config, seed: int) -> list[tuple[Session, Any, np.ndarray]]:
    """A search per waiting job of the cluster, with its candidate victims (every running
    task when preempt's rule leaves none)."""
    ssn = open_session(_cluster(seed), cfg)
    scope = replace(preempt_action.SCOPE, whole=rules.whole_gangs(ssn, "preempt"))
    out = []
    for j in range(len(ssn.snapshot.jobs)):
        claim = rules.needed_tasks(ssn, j)
        if not claim:
            continue
        allowed, _ = rules.preempt_candidates(ssn, j)
        if allowed.size == 0:
            allowed = np.flatnonzero(ssn.task_state == TaskState.RUNNING).astype(np.int64)
        search = victim_search._Search(ssn, scope, j, claim)
        if rules.tier_walk(ssn, "preempt"):
            allowed, search.free = victim_search._asked(ssn, scope, j, allowed)
        out.append((ssn, search, allowed))
    assert out
    return out


@pytest.mark.parametrize(
    "cfg", [NODE_RULE, WHOLE_RULE, WALK_RULE], ids=["node-rule", "whole-rule", "tier-walk"]
)
@pytest.mark.parametrize("seed", SEEDS)
def test_bundles_are_the_plain_rule(cfg: Config, seed: int) -> None:
    for ssn, search, allowed in _searches(cfg, seed):
        for useful in (np.ones(ssn.arrays.n_nodes, dtype=np.bool_), search.useful_nodes(None)):
            got = [(b.job, b.surplus, b.whole) for b in search.bundles(allowed, useful)]
            assert got == _plain_bundles(search, allowed, useful)
            ranks = [b.rank for b in search.bundles(allowed, useful)]
            assert ranks == list(range(len(ranks)))


@pytest.mark.parametrize("seed", SEEDS)
def test_bundles_are_the_plain_rule_without_kept_keys(seed: int) -> None:
    # a victim order that is not a built-in one of job and queue figures: keys read afresh
    for ssn, search, allowed in _searches(NODE_RULE, seed):
        search._keys_kept = False
        search._keys = {}
        useful = np.ones(ssn.arrays.n_nodes, dtype=np.bool_)
        got = [(b.job, b.surplus, b.whole) for b in search.bundles(allowed, useful)]
        assert got == _plain_bundles(search, allowed, useful)


def test_the_flat_arrays_and_the_bundles_agree() -> None:
    for ssn, search, allowed in _searches(WHOLE_RULE, 3) + _searches(NODE_RULE, 3):
        bundles = search.bundles(allowed, np.ones(ssn.arrays.n_nodes, dtype=np.bool_))
        tasks, sets = bundles.surplus()
        assert [tuple(tasks[sets == i].tolist()) for i in range(len(bundles))] == [
            b.surplus for b in bundles
        ]
        tasks, sets = bundles.most()
        assert [tuple(tasks[sets == i].tolist()) for i in range(len(bundles))] == [
            search._most(b)[1] for b in bundles
        ]


# ---------------------------------------------------------------------------- kept orders


def test_the_victim_orders_kept_are_the_built_in_ones_checked_here() -> None:
    # each key of these plugins is made of parts equal for every task of a job and parts read
    # from the task's own record; a plugin added to the set must be checked the same way
    assert frozenset({"priority", "gang", "drf", "proportion", "sla"}) == JOB_AND_QUEUE_ORDERS


@pytest.mark.parametrize("seed", SEEDS)
def test_a_jobs_victim_order_does_not_move_with_its_figures(seed: int) -> None:
    tiers = [[{"name": "priority"}, {"name": "gang"}, {"name": "sla"}], TIERS[1]]
    cfg = config("enqueue", "allocate", "preempt", "backfill", tiers=tiers, whole=False)
    ssn = open_session(_cluster(seed), cfg)
    assert ssn.points.victim_order_by_job_and_queue()
    charges = victim_search._Charges.of(ssn)
    running = np.flatnonzero(ssn.task_state == TaskState.RUNNING).astype(np.int64)
    before = charges.positions(ssn, running, ssn.victim_key).copy()
    # move job and queue figures: evict one task of every other running job
    stmt = Statement(ssn)
    for j in np.unique(ssn.task_job[running]).tolist()[::2]:
        stmt.evict(int(ssn.job_tasks(j)[0]), "test")
    stmt.commit()
    for j in np.unique(ssn.task_job[running]).tolist():
        mine = ssn.job_tasks(j).tolist()
        fresh = sorted(mine, key=ssn.victim_key)
        kept = sorted(mine, key=lambda t: int(charges.within[t]))
        assert fresh == kept
    assert np.array_equal(charges.positions(ssn, running, ssn.victim_key), before)


# ---------------------------------------------------------------------------- spare counts


def _job_with_spare() -> tuple[Session, int]:
    for seed in SEEDS:
        ssn = open_session(_cluster(seed), NODE_RULE)
        for j, rec in enumerate(ssn.snapshot.jobs):
            if not rec.min_task_member and spare_tasks(ssn, j, ssn.job_tasks(j).tolist()):
                return ssn, j
    raise AssertionError("no cluster with a job above its minimum")


def test_the_spare_count_kept_for_a_job_follows_its_counters() -> None:
    ssn, j = _job_with_spare()
    charges = victim_search._Charges.of(ssn)
    first = int(charges.spare_counts(ssn, np.array([j]))[0])
    assert first == len(spare_tasks(ssn, j, ssn.job_tasks(j).tolist())) > 0
    stmt = Statement(ssn)
    stmt.evict(int(ssn.job_tasks(j)[0]), "test")
    stmt.commit()
    after = int(charges.spare_counts(ssn, np.array([j, j]))[1])
    assert after == first - 1 == len(spare_tasks(ssn, j, ssn.job_tasks(j).tolist()))


def test_a_job_with_role_minimums_has_no_spare_count() -> None:
    for seed in SEEDS:
        ssn = open_session(_cluster(seed), NODE_RULE)
        roles = [j for j, rec in enumerate(ssn.snapshot.jobs) if rec.min_task_member]
        if roles:
            got = victim_search._Charges.of(ssn).spare_counts(ssn, np.array(roles))
            assert got.tolist() == [-1] * len(roles)
            return
    pytest.fail("no cluster with role minimums")


# ---------------------------------------------------------------------------- fruitless


def _no_kept_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(victim_search._Fruitless, "key", lambda self, *a: None)


def test_kept_answers_change_no_decision(monkeypatch: pytest.MonkeyPatch) -> None:
    used = 0
    answer = victim_search._Fruitless.answer

    def counted(self: Any, ssn: Session, key: Any) -> Any:
        nonlocal used
        out = answer(self, ssn, key)
        used += out is not None
        return out

    monkeypatch.setattr(victim_search._Fruitless, "answer", counted)
    for cfg in (NODE_RULE, WHOLE_RULE, WALK_RULE):
        kept = [gs.schedule(_cluster(seed), cfg).to_dict() for seed in range(40)]
        with monkeypatch.context() as m:
            _no_kept_answers(m)
            fresh = [gs.schedule(_cluster(seed), cfg).to_dict() for seed in range(40)]
        assert kept == fresh
    assert used > 0  # the answers were given back somewhere


def _three_waiting() -> gs.Snapshot:
    # a runs three one-GPU tasks (minimum 1) on the one four-GPU node, one GPU free; x and y
    # each wait for two GPUs
    nodes = [node("n0", gpus=4)]
    run = [
        {
            "name": f"a-{i}",
            "job": "a",
            "request": {"cpu": 1, GPU: 1},
            "phase": "Running",
            "node": "n0",
            "gpu_indices": [i],
        }
        for i in range(3)
    ]
    jobs = [
        {"name": "a", "queue": "default", "min_available": 1, "phase": "Running", "priority": 1},
        *[
            {"name": n, "queue": "default", "min_available": 1, "phase": "Inqueue", "priority": 5}
            for n in ("x", "y")
        ],
    ]
    waiting = [
        {"name": "x-0", "job": "x", "request": {"cpu": 1, GPU: 2}},
        {"name": "y-0", "job": "y", "request": {"cpu": 1, GPU: 2}},
    ]
    return gs.Snapshot.from_dict(
        {"nodes": nodes, "queues": [{"name": "default"}], "jobs": jobs, "tasks": run + waiting}
    )


def test_an_answer_is_given_back_to_a_preemptor_reading_the_same() -> None:
    ssn = open_session(_three_waiting(), NODE_RULE)
    fruitless = victim_search._Charges.of(ssn).fruitless
    x, y = ssn.snapshot.job_index["x"], ssn.snapshot.job_index["y"]
    allowed = np.flatnonzero(ssn.task_state == TaskState.RUNNING).astype(np.int64)
    scope = preempt_action.SCOPE
    kx = fruitless.key(ssn, scope, x, rules.needed_tasks(ssn, x), allowed, allowed)
    ky = fruitless.key(ssn, scope, y, rules.needed_tasks(ssn, y), allowed, allowed)
    assert kx is not None and kx == ky
    fruitless.keep(ssn, kx, ("X", "nothing"))
    assert fruitless.answer(ssn, ky) == ("X", "nothing")
    # narrower victims or another action read differently
    assert fruitless.key(ssn, scope, y, rules.needed_tasks(ssn, y), allowed, allowed[:1]) != kx


def test_kept_answers_are_dropped_once_a_task_moves() -> None:
    ssn = open_session(_three_waiting(), NODE_RULE)
    fruitless = victim_search._Charges.of(ssn).fruitless
    x = ssn.snapshot.job_index["x"]
    allowed = np.flatnonzero(ssn.task_state == TaskState.RUNNING).astype(np.int64)
    key = fruitless.key(ssn, preempt_action.SCOPE, x, rules.needed_tasks(ssn, x), allowed, allowed)
    assert key is not None
    fruitless.keep(ssn, key, ("X", "nothing"))
    stmt = Statement(ssn)
    stmt.evict(int(allowed[0]), "test")
    stmt.commit()
    assert fruitless.answer(ssn, key) is None
    # and an answer kept now stands until the next move
    fruitless.keep(ssn, key, ("Y", "other"))
    assert fruitless.answer(ssn, key) == ("Y", "other")


def test_no_answer_is_kept_for_a_job_with_a_placed_task() -> None:
    ssn = open_session(_cluster(2), NODE_RULE)
    fruitless = victim_search._Charges.of(ssn).fruitless
    running = np.flatnonzero(ssn.task_state == TaskState.RUNNING).astype(np.int64)
    j = int(ssn.task_job[running[0]])
    claim = [int(t) for t in ssn.job_tasks(j).tolist()]
    assert fruitless.key(ssn, preempt_action.SCOPE, j, claim, running, running) is None


def test_no_answer_is_kept_when_a_plugin_may_read_more_than_shapes() -> None:
    tiers = [TIERS[0], [*TIERS[1], {"name": "task-topology"}]]
    cfg = config("enqueue", "allocate", "preempt", "backfill", tiers=tiers, whole=False)
    ssn = open_session(_three_waiting(), cfg)
    fruitless = victim_search._Charges.of(ssn).fruitless
    x = ssn.snapshot.job_index["x"]
    allowed = np.flatnonzero(ssn.task_state == TaskState.RUNNING).astype(np.int64)
    assert not ssn.points.shape_only
    assert (
        fruitless.key(ssn, preempt_action.SCOPE, x, rules.needed_tasks(ssn, x), allowed, allowed)
        is None
    )


# ---------------------------------------------------------------------------- vectorized rules


@pytest.mark.parametrize("seed", range(40))
def test_the_most_freeing_rows_are_those_of_a_full_sort(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, r = int(rng.integers(2, 30)), int(rng.integers(1, 5))
    freed = rng.integers(0, 4, size=(n, r)) * (rng.random((n, r)) < 0.4)
    freed[rng.random(n) < 0.3] = 0
    rows = np.flatnonzero(freed.any(axis=1))
    for c in range(1, n + 1):
        top = np.argsort(-freed, axis=0, kind="stable")[:c]
        want = np.zeros(n, dtype=np.bool_)
        want[top.reshape(-1)] = True
        assert np.array_equal(victim_search._most_freeing(freed, rows, c), want)


@pytest.mark.parametrize("seed", range(20))
def test_the_room_bound_per_node_is_the_row_formula(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, r = 50, 4
    req = np.repeat(rng.integers(0, 4, size=(1, r)), n, axis=0)
    gpus = int(rng.integers(0, 3))
    same: list[int | None] = [int(x) for x in req[0]]
    if gpus:
        req[:, 3] = rng.integers(1, 5, size=n) * gpus
        same[3] = None
    count = int(rng.integers(1, 6))
    kind = victim_search._Kind(count, req, gpus, np.ones(n, np.int64), req[:, 0], req[:, 0], same)
    room = rng.integers(-2, 12, size=(n, r))
    slots = rng.integers(0, 9, size=n)
    safe = np.where(req > 0, req, 1)
    per = np.where(req > 0, room // safe, count)
    want = np.minimum(per.min(axis=1), count)
    if gpus:
        want = np.minimum(want, slots // gpus)
    want = np.where((room < 0).any(axis=1), 0, np.maximum(want, 0))
    assert np.array_equal(victim_search._Room._held(kind, room, slots), want)
    rows = rng.integers(0, n, size=17)
    got = victim_search._Room._held(kind, room[rows], slots[rows], rows)
    assert np.array_equal(got, want[rows])


@pytest.mark.parametrize("mode", ["hard", "soft"])
def test_an_answer_is_kept_for_a_job_without_a_hard_topology_only(mode: str) -> None:
    base = _three_waiting().to_dict()
    base["hypernodes"] = [{"name": "s0", "tier": 1, "members": ["n0"]}]
    for rec in base["jobs"]:
        if rec["name"] == "x":
            rec["network_topology"] = {"mode": mode, "highest_tier_allowed": 1}
    ssn = open_session(gs.Snapshot.from_dict(base), NODE_RULE)
    fruitless = victim_search._Charges.of(ssn).fruitless
    allowed = np.flatnonzero(ssn.task_state == TaskState.RUNNING).astype(np.int64)
    x = ssn.snapshot.job_index["x"]
    key = fruitless.key(ssn, preempt_action.SCOPE, x, rules.needed_tasks(ssn, x), allowed, allowed)
    assert (key is None) == (mode == "hard")


def test_an_answer_is_not_given_to_a_job_of_another_shape_or_other_tasks() -> None:
    base = _three_waiting().to_dict()
    base["jobs"] += [
        {"name": n, "queue": "default", "min_available": 1, "phase": "Inqueue", "priority": 5}
        for n in ("z", "w")
    ]
    base["tasks"] += [
        {"name": "z-0", "job": "z", "request": {"cpu": 1, GPU: 3}},
        {"name": "w-0", "job": "w", "request": {"cpu": 1, GPU: 2}},
        {"name": "w-1", "job": "w", "request": {"cpu": 1, GPU: 2}},
    ]
    ssn = open_session(gs.Snapshot.from_dict(base), NODE_RULE)
    fruitless = victim_search._Charges.of(ssn).fruitless
    allowed = np.flatnonzero(ssn.task_state == TaskState.RUNNING).astype(np.int64)
    keys = {}
    for name in ("x", "y", "z", "w"):
        j = ssn.snapshot.job_index[name]
        claim = rules.needed_tasks(ssn, j)
        assert len(claim) == 1
        keys[name] = fruitless.key(ssn, preempt_action.SCOPE, j, claim, allowed, allowed)
    assert keys["x"] == keys["y"]
    assert keys["z"] != keys["x"]  # a three-GPU claim
    assert keys["w"] != keys["x"]  # the same claim, and one more task waiting
