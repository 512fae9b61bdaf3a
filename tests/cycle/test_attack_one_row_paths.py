"""The one-node answers (what a refresh after one placement asks) equal the every-node answers
of the same session, node by node: the predicates (``predicate_ok_one``), the summed scores
(``node_score_one`` and ``node_score`` on one row) and the resource fit (``fit_one`` and
``resource_fit`` on a few rows). Checked at session open and at the end of a cycle, for the
node scorers that have a one-row path.

The formulas themselves are one statement each, read by both forms
(``tests/cycle/test_score_rules.py`` and ``tests/cycle/test_fit_rule.py`` mutate them); what
this checks on top is what the forms read: the views the one-row forms keep (the GPU
scorers' row lists and FGD memo, nodeorder's columns) current with the cycle's placements and
evictions, as the arrays the every-row forms read."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings

from gangsched import Config, open_session
from gangsched.scheduler import run_cycle
from gangsched.session.fit import fit_one, resource_fit
from gangsched.testing import strategies as gst

_FIRST = [{"name": "priority"}, {"name": "gang"}, {"name": "conformance"}]
_SCORERS: dict[str, list[dict[str, Any]]] = {
    "nodeorder": [
        {
            "name": "nodeorder",
            "arguments": {"mostrequested.weight": 2, "leastrequested.weight": 1},
        },
        {"name": "binpack", "arguments": {"binpack.resources": "nvidia.com/gpu"}},
    ],
    "bestfit-dotprod": [{"name": "bestfit"}, {"name": "dotprod", "arguments": {"weight": 2}}],
    "gpu-packing-clustering": [{"name": "gpu-packing"}, {"name": "gpu-clustering"}],
    "fgd": [{"name": "fgd"}],
    "topology": [
        {"name": "nodeorder"},
        {"name": "network-topology-aware", "arguments": {"hypernode.binpack.cpu": 2}},
    ],
}


def _config(scorers: list[dict[str, Any]]) -> Config:
    return Config.from_dict(
        {
            "actions": ["enqueue", "allocate", "preempt", "reclaim", "backfill"],
            "tiers": [
                _FIRST,
                [{"name": "drf"}, {"name": "predicates"}, {"name": "proportion"}],
                scorers,
            ],
        }
    )


def _compare(ssn: Any) -> None:
    n = ssn.arrays.n_nodes
    every = np.arange(n, dtype=np.intp)
    for tmpl in ssn.templates:
        ok = ssn.points.predicate_ok(tmpl, every)
        score = ssn.points.node_score(tmpl, every)
        idle, later = resource_fit(ssn, tmpl, every)
        for i in range(n):
            row = np.array([i], dtype=np.intp)
            assert ssn.points.predicate_ok_one(tmpl, row) == bool(ok[i])
            assert ssn.points.node_score_one(tmpl, row) == score[i]
            assert ssn.points.node_score(tmpl, row)[0] == score[i]
            assert fit_one(ssn, tmpl, i) == (bool(idle[i]), bool(later[i]))
        few = every[::-1][:3].copy()
        few_idle, few_later = resource_fit(ssn, tmpl, few)
        assert few_idle.tolist() == idle[few].tolist()
        assert few_later.tolist() == later[few].tolist()


@pytest.mark.parametrize("scorers", sorted(_SCORERS))
@settings(max_examples=15)
@given(snap=gst.snapshots(max_nodes=6, max_jobs=5, max_tasks_per_job=3, max_queues=3))
def test_one_node_answers_equal_every_node_answers(scorers: str, snap: Any) -> None:
    config = _config(_SCORERS[scorers])
    _compare(open_session(snap, config))
    _decisions, ssn = run_cycle(snap, config)
    _compare(ssn)


@pytest.mark.parametrize("scorers", ["bestfit-dotprod", "gpu-packing-clustering", "fgd"])
@settings(max_examples=5)
@given(snap=gst.snapshots(min_nodes=33, max_nodes=36, max_jobs=6, max_tasks_per_job=4))
def test_one_node_answers_equal_array_answers_past_the_few_rows(scorers: str, snap: Any) -> None:
    """Over more nodes than the GPU scorers answer in scalar arithmetic: every node's
    score is the array formula's, a one-row refresh the scalar one."""
    config = _config(_SCORERS[scorers])
    _compare(open_session(snap, config))
    _decisions, ssn = run_cycle(snap, config)
    _compare(ssn)
