"""Volcano's tier walk for preempt and reclaim (``allVictimRules: false``).

Volcano's ``Session.Preemptable`` / ``Reclaimable`` ask the victim plugins tier by tier about
one node's candidates and take the victims of the first tier whose plugins all answer some; a
plugin answering none sends the walk to the next tier, which then chooses alone. A
configuration read from Volcano's YAML walks so; gangsched's own default asks every victim to
pass every victim rule (priority, gang surplus, the victim queue above its deserved share)
whatever tier answers, and so does Volcano's YAML that names ``allVictimRules: true``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

import gangsched as gs
from gangsched.actions.victims import rules
from gangsched.config import Config
from gangsched.framework import dispatch
from gangsched.scheduler import open_session
from gangsched.session.core import READY_STATES, Session, TaskState
from gangsched.testing.invariants import check_cycle

TIERS = """tiers:
- plugins:
  - name: priority
  - name: gang
  - name: conformance
- plugins:
  - name: overcommit
  - name: drf
  - name: predicates
  - name: proportion
  - name: nodeorder
"""


def volcano(actions: str, **named: bool) -> Config:
    """Volcano's YAML with ``actions``; ``named``: the action -> allVictimRules it names."""
    text = f'actions: "{actions}"\n' + TIERS
    if named:
        text += "configurations:\n" + "".join(
            f"- name: {action}\n  arguments:\n    allVictimRules: {str(on).lower()}\n"
            for action, on in named.items()
        )
    return Config.from_volcano_yaml(text)


def _running(name: str, node: str, cpu: int = 4) -> dict[str, Any]:
    return {
        "name": name,
        "job": name.rsplit("-", 1)[0],
        "request": {"cpu": cpu, "memory": "1Gi"},
        "phase": "Running",
        "node": node,
    }


def _pending(name: str, cpu: int = 4) -> dict[str, Any]:
    return {"name": name, "job": name.rsplit("-", 1)[0], "request": {"cpu": cpu, "memory": "1Gi"}}


def _node(name: str, cpu: int = 8) -> dict[str, Any]:
    return {"name": name, "allocatable": {"cpu": cpu, "memory": "32Gi", "pods": 110}}


def _preempt_cluster(victim_priority: int) -> gs.Snapshot:
    # One node full with ``low``'s gang (two tasks, min_available 2: no surplus); ``high``
    # (one task, min 1) waits in the same queue.
    return gs.Snapshot.from_dict(
        {
            "nodes": [_node("n0")],
            "queues": [{"name": "q"}],
            "jobs": [
                {
                    "name": "low",
                    "queue": "q",
                    "min_available": 2,
                    "priority": victim_priority,
                    "phase": "Running",
                },
                {
                    "name": "high",
                    "queue": "q",
                    "min_available": 1,
                    "priority": 2,
                    "phase": "Inqueue",
                    "creation": 1,
                },
            ],
            "tasks": [_running("low-0", "n0"), _running("low-1", "n0"), _pending("high-0")],
        }
    )


def test_the_yaml_walks_the_tiers_unless_it_names_every_victim_rule() -> None:
    walk = volcano("enqueue, allocate, preempt, reclaim, backfill")
    assert walk.action_arguments("preempt")["allVictimRules"] is False
    assert walk.action_arguments("reclaim")["allVictimRules"] is False
    named = volcano("allocate, preempt, reclaim", preempt=True, reclaim=True)
    # naming gangsched's default leaves it out (it schedules as no entry does)
    assert named.action_arguments("preempt").get("allVictimRules", True) is True
    own = Config.from_dict({"actions": ["allocate", "preempt", "reclaim"], "tiers": [["gang"]]})
    assert "allVictimRules" not in own.action_arguments("preempt")
    # written to Volcano's YAML, gangsched's default is named, and reads back equal
    assert Config.from_volcano_yaml(own.to_volcano_yaml()) == own


def test_gang_answering_none_lets_drf_take_a_gang_below_its_minimum() -> None:
    # low runs at its minimum: gang answers no victim, so the walk goes to the next tier, where
    # drf alone keeps the task (high's share after the move stays below low's): low loses a
    # task, and with fewer ready tasks than its minimum but some still running it is Unknown.
    d = gs.schedule(_preempt_cluster(victim_priority=1), volcano("allocate, preempt"))
    assert [e.task for e in d.evictions] == ["low-0"]
    assert [(p.task, p.node) for p in d.pipelined] == [("high-0", "n0")]
    assert d.jobs["low"].phase == "Unknown"


def test_priority_answering_none_lets_drf_take_a_higher_priority_job() -> None:
    # low's priority (3) is above high's (2): priority answers no victim, and drf alone
    # chooses: high takes a task of a job that outranks it.
    d = gs.schedule(_preempt_cluster(victim_priority=3), volcano("allocate, preempt"))
    assert [e.task for e in d.evictions] == ["low-0"]
    assert "tier walk" in d.evictions[0].reason


@pytest.mark.parametrize("victim_priority", [1, 3])
def test_every_victim_rule_holds_by_default_and_when_the_yaml_names_it(
    victim_priority: int,
) -> None:
    s = _preempt_cluster(victim_priority)
    for conf in (
        Config.from_dict(
            {"actions": ["allocate", "preempt"], "tiers": volcano("allocate").to_dict()["tiers"]}
        ),
        volcano("allocate, preempt", preempt=True),
    ):
        d = gs.schedule(s, conf)
        assert d.evictions == () and d.pipelined == ()


def test_the_gang_tier_answering_decides_and_drf_is_not_asked() -> None:
    # low has a surplus task (three running, min 2) and lower priority: the first tier answers
    # (priority, gang, conformance all keep it), so drf is never asked, and low keeps its
    # minimum: exactly one task goes, as under gangsched's own rules.
    s = gs.Snapshot.from_dict(
        {
            "nodes": [_node("n0", 12)],
            "queues": [{"name": "q"}],
            "jobs": [
                {
                    "name": "low",
                    "queue": "q",
                    "min_available": 2,
                    "priority": 1,
                    "phase": "Running",
                },
                {
                    "name": "high",
                    "queue": "q",
                    "min_available": 1,
                    "priority": 2,
                    "phase": "Inqueue",
                },
            ],
            "tasks": [
                _running("low-0", "n0"),
                _running("low-1", "n0"),
                _running("low-2", "n0"),
                _pending("high-0"),
            ],
        }
    )
    walk = gs.schedule(s, volcano("allocate, preempt"))
    own = gs.schedule(s, volcano("allocate, preempt", preempt=True))
    assert len(walk.evictions) == 1 and walk.jobs["low"].phase == "Running"
    assert [e.task for e in walk.evictions] == [e.task for e in own.evictions]


def test_reclaim_takes_the_gang_surplus_of_a_queue_within_its_deserved_share() -> None:
    # qa holds all of n0 (8 cpu) and deserves 4, so it is above its deserved share and
    # proportion would agree; the point is which tier answers: a has a surplus (two running,
    # min 1), so the first tier (gang, conformance) answers and one task goes for b.
    s = gs.Snapshot.from_dict(
        {
            "nodes": [_node("n0")],
            "queues": [{"name": "qa"}, {"name": "qb"}],
            "jobs": [
                {"name": "a", "queue": "qa", "min_available": 1, "phase": "Running"},
                {"name": "b", "queue": "qb", "min_available": 1, "phase": "Inqueue"},
            ],
            "tasks": [_running("a-0", "n0"), _running("a-1", "n0"), _pending("b-0")],
        }
    )
    walk = gs.schedule(s, volcano("allocate, reclaim"))
    assert len(walk.evictions) == 1 and [p.task for p in walk.pipelined] == ["b-0"]
    assert walk.jobs["a"].phase == "Running"


def test_reclaim_with_gang_answering_none_lets_proportion_break_a_gang() -> None:
    # a runs at its minimum (two tasks, min 2) and holds all of n0 while qa deserves half of
    # it: gang answers none, proportion (next tier) keeps the tasks of a queue above its
    # deserved share, and b's reclaim takes one of a's two tasks.
    s = gs.Snapshot.from_dict(
        {
            "nodes": [_node("n0")],
            "queues": [{"name": "qa"}, {"name": "qb"}],
            "jobs": [
                {"name": "a", "queue": "qa", "min_available": 2, "phase": "Running"},
                {"name": "b", "queue": "qb", "min_available": 1, "phase": "Inqueue"},
            ],
            "tasks": [_running("a-0", "n0"), _running("a-1", "n0"), _pending("b-0")],
        }
    )
    walk = gs.schedule(s, volcano("allocate, reclaim"))
    assert len(walk.evictions) == 1 and [p.task for p in walk.pipelined] == ["b-0"]
    assert walk.jobs["a"].phase == "Unknown"
    own = gs.schedule(s, volcano("allocate, reclaim", reclaim=True))
    assert own.evictions == ()


def test_reclaim_takes_a_gang_surplus_from_a_queue_at_its_deserved_share() -> None:
    # 16 cpu; qa (weight 2) holds 8, its deserved share; qc (weight 1) holds 8, above its
    # deserved 4; qb waits with 4 cpu, below its deserved 4. On n0 the first tier answers a's
    # surplus (two running, min 1) and proportion is never asked, so qa, at its deserved
    # share, loses a task; gangsched's own rules take no task from a queue not above its
    # deserved share, and c (at its minimum) cannot give its only task.
    s = gs.Snapshot.from_dict(
        {
            "nodes": [_node("n0"), _node("n1")],
            "queues": [{"name": "qa", "weight": 2}, {"name": "qb"}, {"name": "qc"}],
            "jobs": [
                {"name": "a", "queue": "qa", "min_available": 1, "phase": "Running"},
                {"name": "c", "queue": "qc", "min_available": 1, "phase": "Running"},
                {"name": "b", "queue": "qb", "min_available": 1, "phase": "Inqueue"},
            ],
            "tasks": [
                _running("a-0", "n0"),
                _running("a-1", "n0"),
                _running("c-0", "n1", cpu=8),
                _pending("b-0"),
            ],
        }
    )
    walk = gs.schedule(s, volcano("allocate, reclaim"))
    assert [e.task[:2] for e in walk.evictions] == ["a-"]
    assert [(p.task, p.node) for p in walk.pipelined] == [("b-0", "n0")]
    assert "tier walk" in walk.evictions[0].reason
    own = gs.schedule(s, volcano("allocate, reclaim", reclaim=True))
    assert own.evictions == () and own.pipelined == ()


def _drf_alone(claim_cpu: int) -> gs.Snapshot:
    """Gang low (4 tasks of 4 cpu, at its minimum) fills a 16-cpu node; high, of the same
    priority, waits with one task of ``claim_cpu``: priority and gang answer none, drf
    chooses alone."""
    return gs.Snapshot.from_dict(
        {
            "nodes": [_node("n0", 16)],
            "queues": [{"name": "q"}],
            "jobs": [
                {"name": "low", "queue": "q", "min_available": 4, "priority": 1},
                {"name": "high", "queue": "q", "min_available": 1, "priority": 1},
            ],
            "tasks": [_running(f"low-{i}", "n0") for i in range(4)]
            + [_pending("high-0", claim_cpu)],
        }
    )


def test_drf_takes_a_jobs_candidates_away_one_after_another() -> None:
    # high's share with its claim is 12/16. Volcano's drf removes low's candidates one after
    # another: low keeps 12/16 after the first (kept: not below high's), 8/16 after the second
    # (dropped), so one 4-cpu victim is offered, too little for 12 cpu: nothing is evicted.
    # Each candidate judged alone (low keeps 12/16 every time) offered all four.
    d = gs.schedule(_drf_alone(12), volcano("enqueue, allocate, preempt, backfill"))
    assert d.evictions == () and d.pipelined == ()
    # with an 8-cpu claim (share 8/16) two candidates are offered, and two go
    d = gs.schedule(_drf_alone(8), volcano("enqueue, allocate, preempt, backfill"))
    assert sorted(e.task for e in d.evictions) == ["low-0", "low-1"]
    assert [p.task for p in d.pipelined] == ["high-0"]


# ------------------------------------------------------- the walk on every node at once


def _crowded(seed: int) -> gs.Snapshot:
    """A small random cluster for the victim walk: running jobs of several priorities and
    minimums, several tasks of one job on a node (so drf's one-after-another rule bites within
    a node), and waiting jobs of several priorities."""
    rng = np.random.default_rng(seed)
    n_nodes = int(rng.integers(2, 6))
    nodes = [_node(f"n{i}", cpu=32) for i in range(n_nodes)]
    used = [0] * n_nodes
    jobs: list[dict[str, Any]] = []
    tasks: list[dict[str, Any]] = []
    for k in range(int(rng.integers(3, 9))):
        size = int(rng.integers(1, 7))
        jobs.append(
            {
                "name": f"run{k}",
                "queue": "q",
                "min_available": int(rng.integers(1, size + 1)),
                "priority": int(rng.integers(0, 4)),
                "phase": "Running",
                "creation": k,
            }
        )
        home = int(rng.integers(0, n_nodes))
        for t in range(size):
            cpu = int(rng.integers(1, 5))
            i = home if rng.random() < 0.6 else int(rng.integers(0, n_nodes))
            if used[i] + cpu > 32:
                continue
            used[i] += cpu
            tasks.append(_running(f"run{k}-{t}", f"n{i}", cpu))
    for k in range(int(rng.integers(2, 5))):
        size = int(rng.integers(1, 4))
        jobs.append(
            {
                "name": f"wait{k}",
                "queue": "q",
                "min_available": size,
                "priority": int(rng.integers(0, 5)),
                "phase": "Inqueue",
                "creation": 10 + k,
            }
        )
        tasks += [_pending(f"wait{k}-{t}", int(rng.integers(1, 9))) for t in range(size)]
    return gs.Snapshot.from_dict(
        {"nodes": nodes, "queues": [{"name": "q"}], "jobs": jobs, "tasks": tasks}
    )


WALK = volcano("enqueue, allocate, preempt, reclaim, backfill")


def _asked(
    seed: int,
) -> Iterator[tuple[Session, int, npt.NDArray[np.int64], npt.NDArray[np.int64]]]:
    """Per cluster of ``seed``, per waiting job: the session, the job, every running task in a
    random order, and a group for each (its node, or one of two groups drawn at random)."""
    rng = np.random.default_rng(seed)
    ssn = open_session(_crowded(seed), WALK)
    running = np.flatnonzero(ssn.task_state == TaskState.RUNNING).astype(np.int64)
    for job in range(len(ssn.snapshot.jobs)):
        if ssn.snapshot.jobs[job].name.startswith("wait") and running.size:
            cands = rng.permutation(running)
            yield ssn, job, cands, ssn.task_node[cands].astype(np.int64)
            yield ssn, job, cands, rng.integers(0, 2, cands.size).astype(np.int64)


def test_drf_answers_every_group_at_once_as_each_group_alone() -> None:
    # drf's answer for many groups at once is, group by group, its answer about that group's
    # candidates alone (in the order given); and within a group a job's candidates go one
    # after another (some candidate kept alone is dropped with the others before it).
    asked = cumulative = 0
    for seed in range(60):
        for ssn, job, cands, groups in _asked(seed):
            (drf,) = [p for p in ssn.points.serving("preemptable") if p.name == "drf"]
            keep = drf.preemptable_by_group(ssn, job, cands, groups)
            for g in np.unique(groups).tolist():
                mine = cands[groups == g]
                alone = drf.preemptable(ssn, job, mine)
                assert keep[groups == g].tolist() == np.isin(mine, alone).tolist(), (seed, job)
                each = [c for c in mine.tolist() if drf.preemptable(ssn, job, np.array([c])).size]
                cumulative += len(each) > alone.size
            assert (
                drf.preemptable_by_group(ssn, job, cands, None).tolist()
                == np.isin(cands, drf.preemptable(ssn, job, cands)).tolist()
            )
            asked += 1
    assert asked >= 300
    assert cumulative >= 100


def test_the_walk_with_drf_on_every_group_at_once_chooses_as_group_by_group(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Volcano's tiers put drf in the second tier: the walk asks it once for every group, and
    # its victims are those of the walk asking each group alone (switched off by emptying the
    # sets of plugins answering for all groups at once).
    at_once = 0
    walk_by_mask = dispatch._walk_by_mask

    def counted(*args: Any) -> Any:
        nonlocal at_once
        at_once += 1
        return walk_by_mask(*args)

    decided_by_drf = partial = 0
    for seed in range(60):
        for ssn, job, cands, groups in _asked(seed):
            with monkeypatch.context() as m:
                m.setattr(dispatch, "_walk_by_mask", counted)
                fast = rules.walk(ssn, "preemptable", job, cands, groups)
            with monkeypatch.context() as m:
                m.setattr(dispatch, "ONE_BY_ONE_VICTIMS", frozenset())
                m.setattr(dispatch, "GROUP_BY_GROUP_VICTIMS", frozenset())
                m.setattr(dispatch, "_walk_by_mask", None)
                plain = rules.walk(ssn, "preemptable", job, cands, groups)
            assert fast[0].tolist() == plain[0].tolist(), (seed, job)
            assert fast[1].tolist() == plain[1].tolist(), (seed, job)
            decided_by_drf += fast[1].size > 0
            partial += 0 < fast[1].size < cands.size
    assert at_once >= 300
    assert decided_by_drf >= 100 and partial >= 100


_WALK_PREEMPTION = (
    'actions: "enqueue, allocate, preempt, reclaim, backfill"\n'
    "tiers:\n- plugins: [{name: priority}, {name: gang}, {name: conformance}]\n"
    "- plugins: [{name: overcommit}, {name: drf}, {name: predicates}, {name: proportion},"
    " {name: nodeorder}, {name: binpack}]\n"
)


def _walk_configs() -> list[Config]:
    cheapest = "configurations:\n- name: preempt\n  arguments: {victimSelection: cheapest}\n"
    return [
        Config.from_volcano_yaml(_WALK_PREEMPTION),
        Config.from_volcano_yaml(_WALK_PREEMPTION + cheapest),
    ]


def _cpu_job(name: str, min_available: int, priority: int, phase: str, creation: int) -> Any:
    return {
        "name": name,
        "min_available": min_available,
        "priority": priority,
        "phase": phase,
        "creation": creation,
    }


def test_the_walk_leaves_whole_a_gang_this_cycle_bound_a_task_for() -> None:
    # allocate binds g-2, g's third task: g reaches its minimum of 3. h (same priority) then
    # asks for victims: priority answers none, drf alone would take g-0, and the cycle would
    # bind a task of a gang left at 2 of 3. A gang the cycle binds or reserves for gives only
    # its surplus, whatever tier chooses.
    s = gs.Snapshot.from_dict(
        {
            "nodes": [{"name": "n0", "allocatable": {"cpu": 3, "memory": "32Gi"}}],
            "queues": [{"name": "default"}],
            "jobs": [_cpu_job("g", 3, 0, "Running", 1), _cpu_job("h", 1, 0, "Inqueue", 2)],
            "tasks": [
                {
                    "name": "g-0",
                    "job": "g",
                    "request": {"cpu": 1},
                    "phase": "Running",
                    "node": "n0",
                },
                {
                    "name": "g-1",
                    "job": "g",
                    "request": {"cpu": 1},
                    "phase": "Running",
                    "node": "n0",
                },
                {"name": "g-2", "job": "g", "request": {"cpu": 1}},
                {"name": "h-0", "job": "h", "request": {"cpu": 1}},
            ],
        }
    )
    for cfg in _walk_configs():
        d = gs.schedule(s, cfg)
        assert [b.task for b in d.binds] == ["g-2"] and d.evictions == ()
        check_cycle(s, d, cfg)


def test_the_walk_leaves_whole_a_gang_this_cycle_reserved_a_task_for() -> None:
    # a (min 2) evicts low-0 and reserves a-1 on n1; h (same priority as a) then finds drf
    # offering a-0 alone: taking it would leave a's reservation for a gang of 1 of 2.
    s = gs.Snapshot.from_dict(
        {
            "nodes": [
                {"name": "n0", "allocatable": {"cpu": 8, "memory": "32Gi"}},
                {"name": "n1", "allocatable": {"cpu": 8, "memory": "32Gi"}},
            ],
            "queues": [{"name": "default"}],
            "jobs": [
                _cpu_job("a", 2, 0, "Running", 1),
                _cpu_job("low", 0, -1, "Running", 2),
                _cpu_job("h", 1, 0, "Inqueue", 3),
            ],
            "tasks": [
                {
                    "name": "a-0",
                    "job": "a",
                    "request": {"cpu": 8},
                    "phase": "Running",
                    "node": "n0",
                },
                {"name": "a-1", "job": "a", "request": {"cpu": 8}},
                {
                    "name": "low-0",
                    "job": "low",
                    "request": {"cpu": 8},
                    "phase": "Running",
                    "node": "n1",
                },
                {"name": "h-0", "job": "h", "request": {"cpu": 8}},
            ],
        }
    )
    for cfg in _walk_configs():
        d = gs.schedule(s, cfg)
        assert [(e.task, e.preemptor) for e in d.evictions] == [("low-0", "a")]
        assert [(p.task, p.node) for p in d.pipelined] == [("a-1", "n1")]
        check_cycle(s, d, cfg)


class _Answer:
    """A plugin of the walk tests: its name and its answer about every candidate (whether it
    keeps each; None: it abstains)."""

    def __init__(self, name: str, keep: npt.NDArray[np.bool_] | None) -> None:
        self.name = name
        self.keep = keep

    def __call__(self) -> npt.NDArray[np.bool_] | None:
        return self.keep

    def about(self, groups: npt.NDArray[np.int64], group: int) -> Any:
        """The answer about the candidates of one group alone (the victims, or None)."""

        def answer(plugin: Any, cands: npt.NDArray[np.int64]) -> Any:
            keep = plugin.keep
            return None if keep is None else cands[keep[groups == group]]

        return answer


def test_the_walk_by_mask_chooses_as_the_walk_of_each_group_alone() -> None:
    # Random answers (None: the plugin abstains) on random groups, the marker anywhere: the
    # walk of every group at once chooses, and marks, as the walk of each group alone (and
    # chooses the same without the marks).
    rng = np.random.default_rng(7)
    names = ["a", "b", "c", "d", "e"]
    seen = {"some victims": 0, "some loose": 0, "two tiers": 0}
    for _ in range(3000):
        size = int(rng.integers(0, 12))
        groups = rng.integers(0, 4, size).astype(np.int64) * 3 - 3 * int(rng.random() < 0.3)
        cands = np.arange(size, dtype=np.int64) * 2 + 1
        tiers = [
            [
                _Answer(
                    names[int(rng.integers(0, len(names)))],
                    None if rng.random() < 0.2 else rng.random(size) < 0.6,
                )
                for _ in range(int(rng.integers(1, 4)))
            ]
            for _ in range(int(rng.integers(1, 4)))
        ]
        marker = names[int(rng.integers(0, len(names)))]
        tier_names = [[p.name for p in tier] for tier in tiers]
        chosen, loose = dispatch._walk_by_mask(tier_names, tiers, groups, marker)
        # a caller that does not read the marks (marker None): the same victims, no marks
        bare, unmarked = dispatch._walk_by_mask(tier_names, tiers, groups, None)
        assert bare.tolist() == chosen.tolist() and not unmarked.any()
        want: list[int] = []
        want_loose: list[int] = []
        for g in np.unique(groups).tolist():
            here = cands[groups == g]
            answer = _Answer("", None).about(groups, g)
            victims, marked = dispatch._walk_group(tiers, here, answer, marker)
            want += victims.tolist()
            if not marked:
                want_loose += victims.tolist()
        assert sorted(cands[chosen].tolist()) == sorted(want)
        assert sorted(cands[loose].tolist()) == sorted(want_loose)
        seen["some victims"] += 0 < len(want) < size
        seen["some loose"] += 0 < len(want_loose) < len(want)
        seen["two tiers"] += bool(want) and len(tiers) > 1
    assert min(seen.values()) >= 100, seen


def _keeps(ssn: Session, job: int) -> dict[str, Any]:
    """Answers telling which of the candidates they keep: lower job priority, the gang's
    surplus, and (as ``drf``) an arbitrary third."""
    prio = np.array([j.priority for j in ssn.snapshot.jobs], dtype=np.int64)
    ready = ssn.job_count[:, list(READY_STATES)].sum(axis=1)

    def lower(c: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        keep: npt.NDArray[np.bool_] = prio[ssn.task_job[c]] < prio[job]
        return keep

    def surplus(c: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        jobs = ssn.task_job[c]
        keep: npt.NDArray[np.bool_] = ready[jobs] > ssn.job_min[jobs]
        return keep

    def some(c: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        keep: npt.NDArray[np.bool_] = c % 3 != 0
        return keep

    return {"priority": lower, "gang": surplus, "drf": some}


def _named(keep: Any) -> Any:
    """The answer naming the candidates ``keep`` keeps, sorted."""
    return lambda c: np.sort(c[keep(c)])


def test_the_walk_reads_answers_given_as_masks_as_answers_naming_the_victims() -> None:
    # walk_victims(masks=True) with answers telling which candidates they keep chooses as
    # with answers naming the kept candidates, on every group at once and group by group
    # (a given drf answer not judging each group alone sends the walk group by group).
    paths = {"at once": 0, "group by group": 0}
    chose = 0
    for seed in range(20):
        for ssn, job, cands, groups in _asked(seed):
            every = _keeps(ssn, job)
            for path, names in (("at once", ("priority", "gang")), ("group by group", every)):
                keeps = {name: every[name] for name in names}
                named = {name: _named(keep) for name, keep in keeps.items()}
                want = ssn.points.walk_victims(
                    "preemptable", job, cands, groups, named, marker="gang"
                )
                got = ssn.points.walk_victims(
                    "preemptable", job, cands, groups, keeps, marker="gang", masks=True
                )
                assert got[0].tolist() == want[0].tolist(), (seed, job, path)
                assert got[1].tolist() == want[1].tolist(), (seed, job, path)
                if path == "at once":  # without the marks: the same victims, no marks
                    bare = ssn.points.walk_victims(
                        "preemptable",
                        job,
                        cands,
                        groups,
                        keeps,
                        marker="gang",
                        masks=True,
                        unmarked=False,
                    )
                    assert bare[0].tolist() == want[0].tolist() and bare[1].size == 0
                paths[path] += 1
                chose += 0 < want[0].size < cands.size
    assert min(paths.values()) >= 100 and chose >= 100, (paths, chose)
