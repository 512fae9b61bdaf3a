"""Decision records check their fields: a scheduler (or its interchange form) cannot build a
bind to no node, a device index that is not a number, or a job phase that does not exist."""

from __future__ import annotations

from typing import Any

import pytest

from gangsched.decisions import (
    Bind,
    Decisions,
    Eviction,
    Hold,
    JobAction,
    JobStatus,
    Pipeline,
    QueueStatus,
)
from gangsched.errors import DecisionError, SnapshotError


@pytest.mark.parametrize(
    ("make", "where"),
    [
        (lambda: Bind(task=1, node="n0"), "bind: task"),  # type: ignore[arg-type]
        (lambda: Bind(task="t", node=None), "bind: node"),  # type: ignore[arg-type]
        (lambda: Bind(task="t", node="n0", gpu_indices=[0, "x"]), "bind: gpu_indices"),  # type: ignore[arg-type]
        (lambda: Bind(task="t", node="n0", gpu_indices=(-1,)), "bind: gpu_indices"),
        (lambda: Bind(task="t", node="n0", gpu_indices=(True,)), "bind: gpu_indices"),
        (lambda: Pipeline(task="", node="n0"), "pipelined: task"),
        (lambda: Eviction(task="t", reason=None), "eviction: reason"),  # type: ignore[arg-type]
        (lambda: JobAction(job="j", action="", cause=""), "job action: action"),
        (lambda: Hold(job="j", nodes="n0n1"), "hold: nodes"),  # type: ignore[arg-type]
        (lambda: Hold(job="j", nodes=("n0",), expected_wait=-5), "hold: expected_wait"),
        (lambda: JobStatus(phase="Bogus"), "job status: phase"),
        (lambda: JobStatus(phase="Running", running=-1), "job status: running"),
        (lambda: JobStatus(phase="Running", ready="yes"), "job status: ready"),  # type: ignore[arg-type]
        (lambda: QueueStatus(state="Paused"), "queue status: state"),
        (lambda: QueueStatus(allocated={"cpu": 1.5}), "queue status: allocated"),  # type: ignore[dict-item]
        (lambda: QueueStatus(share=float("nan")), "queue status: share"),
    ],
)
def test_malformed_records_are_typed_errors_naming_the_field(make: Any, where: str) -> None:
    with pytest.raises(DecisionError, match=where):
        make()


def test_device_indices_are_kept_as_a_tuple() -> None:
    b = Bind(task="t", node="n0", gpu_indices=[1, 0])  # type: ignore[arg-type]
    assert b.gpu_indices == (1, 0)
    assert Hold(job="j", nodes=["a"]).nodes == ("a",)  # type: ignore[arg-type]


def test_interchange_form_with_a_bad_phase_is_refused() -> None:
    doc = {"jobs": {"j": {"phase": "Bogus"}}}
    with pytest.raises(SnapshotError, match="phase"):
        Decisions.from_dict(doc)
    ok = Decisions.from_dict({"binds": [{"task": "t", "node": "n0", "gpu_indices": [0]}]})
    assert ok.binds == (Bind(task="t", node="n0", gpu_indices=(0,)),)
