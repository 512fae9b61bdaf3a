"""A queue status worked out again from the same queue record as the last cycle's is made
without its constructor when every count and figure is one the record's checks let through
as it is; any other value still goes through the record's checks, which name the field."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

import gangsched as gs
from _carried import uncarried
from _state_cases import zoned_cluster
from gangsched.decisions import QueueStatus
from gangsched.errors import DecisionError
from gangsched.plugins.proportion import ProportionPlugin


def _state() -> gs.ClusterState:
    queues = [{"name": "q0", "weight": 1}, {"name": "q1", "weight": 3}]
    return gs.ClusterState(gs.Snapshot.from_dict(zoned_cluster(4, 12, queues=queues)))


def _canon(d: gs.Decisions) -> str:
    return json.dumps(d.to_dict(), sort_keys=True)


def _queues_checked(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A list that grows by one for each queue status made through the record's checks from
    now on."""
    checked: list[str] = []
    post_init = QueueStatus.__post_init__

    def counting(self: QueueStatus) -> None:
        checked.append(self._record)
        post_init(self)

    monkeypatch.setattr(QueueStatus, "__post_init__", counting)
    return checked


def test_a_queue_status_made_again_equals_a_fresh_one(monkeypatch: pytest.MonkeyPatch) -> None:
    state = _state()
    config = gs.Config.default()
    first = state.schedule(config)
    state.apply(first)
    for q in ("q0", "q1"):  # a job too big to place comes to each queue
        job = gs.model.Job(name=f"wide-{q}", queue=q, min_available=1)
        task = gs.model.Task(
            name=f"wide-{q}-0", job=job.name, request=gs.model.Resources({"cpu": 64_000})
        )
        state.add_job(job, [task])
    checked = _queues_checked(monkeypatch)
    second = state.schedule(config)
    # both statuses are made again (their pending figures moved), without the checks
    assert all(second.queues[q] != first.queues[q] for q in ("q0", "q1"))
    assert checked == []
    fresh = gs.schedule(gs.Snapshot.from_dict(state.snapshot().to_dict()), config)
    assert len(checked) == 2  # (a fresh cycle checks every one)
    for name, status in second.queues.items():
        assert status == fresh.queues[name]
        assert status == QueueStatus(**{f: getattr(status, f) for f in status.__slots__})
    assert _canon(uncarried(second, fresh)) == _canon(fresh)


@pytest.mark.parametrize(
    ("share", "error"),
    [
        (float("nan"), "queue status: share"),
        (-1.0, "queue status: share"),
        (np.float64(0.25), None),  # a number, not a plain float: checked, and kept
        (1, None),  # an integer >= 0: checked, and kept
    ],
    ids=repr,
)
def test_a_share_not_a_plain_float_goes_through_the_checks(
    monkeypatch: pytest.MonkeyPatch, share: Any, error: str | None
) -> None:
    state = _state()
    config = gs.Config.default()
    state.apply(state.schedule(config))
    checked = _queues_checked(monkeypatch)
    monkeypatch.setattr(ProportionPlugin, "queue_share", lambda self, ssn, queue: share)
    if error is not None:
        with pytest.raises(DecisionError, match=error):
            state.schedule(config)
        return
    d = state.schedule(config)
    assert len(checked) == 2
    assert all(s.share == share and type(s.share) is type(share) for s in d.queues.values())


def test_a_count_below_zero_goes_through_the_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    state = _state()
    config = gs.Config.default()
    state.apply(state.schedule(config))
    import gangsched.session.close as close

    made = close._queue_status

    def wrong(known: bool, /, **values: Any) -> QueueStatus:
        return made(known, **{**values, "running": -1})

    monkeypatch.setattr(close, "_queue_status", wrong)
    with pytest.raises(DecisionError, match="queue status: running"):
        state.schedule(config)
