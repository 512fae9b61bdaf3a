"""The pair search tries pairs of bundles only as far as the cheapest needs (``_Search._pairs``).

Pairs are tried in the order of a lower bound of their cost and the search stops once the
bound passes the cheapest set found. Checked here against trying every pair, in the same
searches: the sets kept are those every pair finds, in its order, as far as its cheapest.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

import gangsched as gs
from _preemption_helpers import config
from _volcano_clusters import OPENB
from gangsched.actions import reclaim as reclaim_action
from gangsched.actions.victims import rules
from gangsched.actions.victims import search as victim_search
from gangsched.scheduler import open_session
from gangsched.session.task_states import RUNNING_STATES, in_states

CONFIGS = {
    "volcano": gs.Config.from_volcano_yaml(OPENB.VOLCANO_PREEMPTION_YAML),
    "whole": config(whole=True),
    "node": config(whole=False),
}


def _every_pair(search: Any, bundles: Any, among: Any) -> list[Any]:
    """The pair search trying every pair, in order (the rule the search keeps to)."""
    found = []
    for a, b in itertools.combinations(bundles, 2):
        parts = [search._most(a), search._most(b)]
        if search._fits(parts, among):
            parts = search._shrink(search._downgrade(parts, among), among)
            if search._fits(parts, among, rule=True):
                found.append(parts)
    return found


def _clusters() -> list[dict[str, Any]]:
    return [OPENB.openb_preemption_dict(40, seed=seed) for seed in range(12)]


@pytest.mark.parametrize("cfg", ["whole", "node"])
def test_pairs_tried_as_far_as_the_cheapest_needs_find_what_every_pair_finds(
    cfg: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # in the searches of whole cycles: the same sets as every pair's, as far as its cheapest
    pairs = victim_search._Search._pairs
    seen = {"found": 0, "spared": 0}

    def checked(self: Any, bundles: Any, among: Any) -> list[Any]:
        every = _every_pair(self, bundles, among)
        got = pairs(self, bundles, among)
        _same_cheapest(self, every, got, seen)
        return got

    monkeypatch.setattr(victim_search._Search, "_pairs", checked)
    for data in _clusters():
        gs.schedule(gs.Snapshot.from_dict(data), CONFIGS[cfg])
    assert seen["found"] > 0, seen
    assert seen["spared"] > 0, seen


def _same_cheapest(search: Any, every: list[Any], got: list[Any], seen: dict[str, int]) -> None:
    if not every:
        assert got == []
        return
    seen["found"] += 1
    seen["spared"] += len(got) < len(every)
    assert min(got, key=search.cost) == min(every, key=search.cost)
    rest = iter(every)
    assert all(any(p == q for q in rest) for p in got)  # some of every pair's sets, in order


@pytest.mark.parametrize("cfg", ["whole", "node"])
def test_pairs_of_any_search_are_those_every_pair_finds_as_far_as_the_cheapest(cfg: str) -> None:
    # every search with few bundles, whatever the singles found
    seen = {"found": 0, "spared": 0}
    for data in _clusters()[:6]:
        if seen["spared"] >= 2:
            break
        ssn = open_session(gs.Snapshot.from_dict(data), CONFIGS[cfg])
        scope = replace(reclaim_action.SCOPE, whole=rules.whole_gangs(ssn, "reclaim"))
        running = np.flatnonzero(in_states(ssn.task_state, RUNNING_STATES)).astype(np.int64)
        for job in range(len(ssn.snapshot.jobs)):
            claim = rules.needed_tasks(ssn, job)
            if not claim:
                continue
            for nodes in (3, 8):  # victims on the first nodes only: few bundles
                search = victim_search._Search(ssn, scope, job, claim)
                mine = (ssn.task_job[running] != job) & (ssn.task_node[running] < nodes)
                search._room = victim_search._Room(ssn, search.claim, search.queue)
                try:
                    bundles = search.bundles(running[mine], search.useful_nodes(None))
                    if not 2 <= len(bundles) <= victim_search.PAIR_LIMIT:
                        continue
                    search._singles(bundles, None)
                    every = _every_pair(search, bundles, None)
                    _same_cheapest(search, every, search._pairs(bundles, None), seen)
                finally:
                    search._room.release()
                    search._room = None
    assert seen["found"] > 0, seen
    assert seen["spared"] > 0, seen


def _made_up_fits(alone: np.ndarray, salt: int) -> Any:
    def fits(parts: Any, among: Any, *, rule: bool = False) -> bool:
        hit = {b.rank for b, tasks, _ in parts if tasks}
        if len(hit) < 2 and not any(alone[r] for r in hit):
            return False
        victims = frozenset(t for _, tasks, _ in parts for t in tasks)
        return hash((salt, victims, rule)) % 3 != 0

    return fits


def test_pairs_on_made_up_trials_are_those_every_pair_finds() -> None:
    # Bundles of up to three running tasks of a job, and trials answered by a fixed draw per
    # set: a set within one bundle fits only if that bundle passes the room bound alone (as
    # the bound, growing with the set, has it), so a pair of bundles that do not keeps both.
    ssn = open_session(gs.Snapshot.from_dict(_clusters()[0]), CONFIGS["node"])
    running = np.flatnonzero(in_states(ssn.task_state, RUNNING_STATES)).astype(np.int64)
    waiting = next(j for j in range(len(ssn.snapshot.jobs)) if rules.needed_tasks(ssn, j))
    scope = replace(reclaim_action.SCOPE, whole=False)
    seen = {"found": 0, "spared": 0}
    for seed in range(200):
        rng = np.random.default_rng(seed)
        jobs = rng.permutation(np.unique(ssn.task_job[running]))[: int(rng.integers(3, 10))]
        made = []
        for rank, j in enumerate(jobs.tolist()):
            mine = running[ssn.task_job[running] == j][: int(rng.integers(1, 4))]
            made.append(victim_search._Bundle(j, rank, tuple(mine.tolist()), ()))
        bundles = victim_search._Bundles.of(made)
        search = victim_search._Search(ssn, scope, waiting, rules.needed_tasks(ssn, waiting))
        search._alone = alone = rng.random(len(made)) < 0.3
        search._fits = _made_up_fits(alone, int(rng.integers(1 << 30)))  # type: ignore[method-assign]
        if seed % 2:  # a claim larger than anything freed: no set frees beyond it
            search.need = np.full_like(search.need, 1 << 50)
        every = _every_pair(search, bundles, None)
        _same_cheapest(search, every, search._pairs(bundles, None), seen)
    assert seen["found"] > 100, seen
    assert seen["spared"] > 100, seen
