"""The trials of one explanation (why a search found nothing).

An explanation plays each victim set once (a set listed in another order is the same set).
Checked against the explanation with every trial played, and the answers kept per set
against the topology domain they were played in.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from test_victim_search_reuse import NODE_RULE, WALK_RULE, WHOLE_RULE, _cluster

import gangsched as gs
from _preemption_helpers import GPU, PREEMPT, config, job, node, pending, running, snap
from gangsched.actions import preempt as preempt_action
from gangsched.actions.victims import rules
from gangsched.actions.victims import search as victim_search
from gangsched.scheduler import open_session
from gangsched.session.core import TaskState


def _every_trial_played(self: Any, victims: list[int], among: Any = None) -> bool:
    # each trial played afresh on the explanation's opening occupancy: nothing held, a
    # statement of its own, discarded
    search = self.search
    room, search._room = search._room, None
    if room is not None:
        room.release()
    try:
        out: bool = search.attempt(victims, among, rule=False)
    finally:
        search._room = room
    return out


def test_explanations_are_those_with_every_trial_played(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # every fruitless search is explained afresh
    monkeypatch.setattr(victim_search._Fruitless, "key", lambda self, *a: None)
    known_given = 0
    play = victim_search._Trials.play

    def counted(self: Any, victims: list[int], among: Any = None) -> bool:
        known, attempt = len(self._known), self.search._explain_trial
        calls = 0

        def attempted(*a: Any, **k: Any) -> bool:
            nonlocal calls
            calls += 1
            out: bool = attempt(*a, **k)
            return out

        self.search._explain_trial = attempted
        try:
            out = play(self, victims, among)
        finally:
            del self.search._explain_trial
        nonlocal known_given
        known_given += calls == 0
        assert len(self._known) == known + calls
        return out

    cfgs = (NODE_RULE, WHOLE_RULE, WALK_RULE)
    monkeypatch.setattr(victim_search._Trials, "play", counted)
    kept = [gs.schedule(_cluster(s), c).to_dict() for c in cfgs for s in range(30)]
    monkeypatch.setattr(victim_search._Trials, "play", _every_trial_played)
    fresh = [gs.schedule(_cluster(s), c).to_dict() for c in cfgs for s in range(30)]
    assert kept == fresh
    assert known_given > 0


def test_a_set_is_played_once_whatever_its_order() -> None:
    ssn = open_session(_cluster(0), NODE_RULE)
    scope = replace(preempt_action.SCOPE, whole=False)
    waiting = [j for j in range(len(ssn.snapshot.jobs)) if rules.needed_tasks(ssn, j)]
    search = victim_search._Search(ssn, scope, waiting[0], rules.needed_tasks(ssn, waiting[0]))
    running_tasks = np.flatnonzero(ssn.task_state == TaskState.RUNNING).tolist()
    trials = victim_search._Trials(search)
    first = trials.play(running_tasks)
    assert trials.play(list(reversed(running_tasks))) is first
    assert len(trials._known) == 1


def test_an_answer_is_kept_per_topology_domain() -> None:
    """A set that makes room anywhere but not inside a domain is played again there."""
    nodes = [node(f"n{i}", gpus=2) for i in range(4)]
    racks = [
        {"name": "rack-a", "tier": 1, "members": ["n0", "n1"]},
        {"name": "rack-b", "tier": 1, "members": ["n2", "n3"]},
    ]
    jobs = [job("low", 1, priority=1)]
    tasks = running("low", [(f"n{i}", [0, 1]) for i in range(4)], gpus=2)
    jobs.append(
        job("hi", 3, priority=9, network_topology={"mode": "hard", "highest_tier_allowed": 1})
    )
    tasks += pending("hi", 3, gpus=2)
    ssn = open_session(snap(nodes, jobs, tasks, hypernodes=racks), PREEMPT)
    hi = ssn.snapshot.job_index["hi"]
    scope = replace(preempt_action.SCOPE, whole=rules.whole_gangs(ssn, "preempt"))
    search = victim_search._Search(ssn, scope, hi, rules.needed_tasks(ssn, hi))
    every = np.flatnonzero(ssn.task_state == TaskState.RUNNING).tolist()
    trials = victim_search._Trials(search)
    assert trials.play(every)  # anywhere: three of the four nodes
    domain = next(d for d in rules.domains(ssn, hi) if d is not None)
    assert not trials.play(every, domain)  # one rack holds two of the three tasks


def test_the_queue_refusal_is_read_from_the_first_trial_even_when_no_node_has_room() -> None:
    """Evicting everything leaves room in total but on no single node, and the queue refuses
    the claim anyway: the first trial is played, and its refusal is the answer."""
    nodes = [node(f"n{i}", gpus=1) for i in range(4)]
    queues = [{"name": "default", "capability": {GPU: 1}}]
    jobs = [job(f"low{i}", 1, priority=1) for i in range(4)]
    tasks = [t for i in range(4) for t in running(f"low{i}", [(f"n{i}", [0])], gpus=1)]
    jobs.append(job("hi", 1, priority=9, phase="Inqueue"))
    tasks += pending("hi", 1, gpus=2)
    whole = config("enqueue", "allocate", "preempt", "backfill", whole=True)
    d = gs.schedule(snap(nodes, jobs, tasks, queues), whole)
    assert d.evictions == ()
    assert d.preemption_reasons["hi"].startswith("preempt: BeyondDeserved"), d.preemption_reasons


def test_explanations_take_the_search_bundles_back_as_made_afresh(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A search makes its bundles on its opening occupancy and undoes every trial, so the
    # explanation after it takes them back; made afresh every time, the decisions (and the
    # reasons given) are the same.
    made = victim_search._Search.bundles
    taken_back = 0
    once = victim_search._Search.bundles_once

    def counted(self: Any, victims: Any, useful: Any) -> Any:
        nonlocal taken_back
        before = len(self._made)
        out = once(self, victims, useful)
        taken_back += len(self._made) == before
        return out

    cfgs = (NODE_RULE, WHOLE_RULE, WALK_RULE)
    monkeypatch.setattr(victim_search._Search, "bundles_once", counted)
    kept = [gs.schedule(_cluster(s), c).to_dict() for c in cfgs for s in range(30)]
    monkeypatch.setattr(victim_search._Search, "bundles_once", made)
    fresh = [gs.schedule(_cluster(s), c).to_dict() for c in cfgs for s in range(30)]
    assert kept == fresh
    assert taken_back >= 5


def test_the_gang_surplus_trial_of_an_explanation_reads_the_opening_occupancy() -> None:
    # hi's 4-GPU task may go only to n0 or n1 (pool "main"). n0 is full with crit's two 2-GPU
    # tasks, which the victim plugins refuse (system-critical: conformance answers none, and
    # drf, asked next, finds crit would keep a smaller share than hi's with its claim), though
    # crit runs a third task on n2, above its minimum; n1 holds low's two surplus tasks and a
    # task that may not be evicted, so low alone never frees 4 GPUs there. Evicting crit's n0
    # tasks would make room and the gang rule allows it: the plugins are what refused. (Read
    # with the explanation's last trial still held, crit and low would have no surplus left,
    # and the gang rule would be blamed.)
    main = {"pool": "main"}
    nodes = [node("n0", labels=main), node("n1", labels=main), node("n2")]
    jobs = [
        job("crit", 1, priority=1),
        job("low", 1, priority=1),
        job("pin", 1, priority=1),
        job("hi", 1, priority=9, phase="Inqueue"),
    ]
    tasks = running("crit", [("n0", [0, 1]), ("n0", [2, 3]), ("n2", [0, 1])], gpus=2)
    for t in tasks:
        t["priority"] = 2_000_000_000
    tasks += running("low", [("n1", [0]), ("n1", [1]), ("n2", [2])])
    tasks += running("pin", [("n1", [2])], preemptable=False)
    tasks += pending("hi", 1, gpus=4, node_selector=main)
    d = gs.schedule(snap(nodes, jobs, tasks), WALK_RULE)
    assert d.evictions == ()
    reason = d.preemption_reasons["hi"]
    assert reason.startswith("preempt: VictimsNotPreemptable"), reason
    assert "refused by the preemptable plugins" in reason, reason


def test_bundles_made_while_an_explanation_holds_evictions_read_the_opening_occupancy() -> None:
    # An explanation keeps its trials' evictions between trials; bundles it makes meanwhile
    # (a hard topology's domains) are those of the cluster as it is.
    from test_victim_search_reuse import _searches

    compared = 0
    for seed in range(8):
        for ssn, search, allowed in _searches(NODE_RULE, seed):
            useful = search.useful_nodes(None)
            expected = [(b.job, b.surplus) for b in search.bundles(allowed, useful)]
            search._room = victim_search._Room(ssn, search.claim, search.queue)
            try:
                search._room.hold(allowed.tolist(), "trial", search.name)
                got = [(b.job, b.surplus) for b in search.bundles_once(allowed, useful)]
            finally:
                search._room.release()
                search._room = None
            assert got == expected, seed
            compared += bool(expected)
    assert compared >= 5
