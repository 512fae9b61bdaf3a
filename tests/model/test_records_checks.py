"""Every field of a checked decision record is checked: a value of no accepted type in any one
field is a DecisionError naming the record and that field."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import pytest

from gangsched.decisions import Bind, Eviction, Hold, JobAction, JobStatus, Pipeline, QueueStatus
from gangsched.errors import DecisionError

#: Each checked record, its name in errors and the fewest fields that make a valid one.
_VALID: list[tuple[type[Any], str, dict[str, Any]]] = [
    (Bind, "bind", {"task": "t", "node": "n0"}),
    (Pipeline, "pipelined", {"task": "t", "node": "n0"}),
    (Eviction, "eviction", {"task": "t", "reason": ""}),
    (JobAction, "job action", {"job": "j", "action": "restart", "cause": ""}),
    (Hold, "hold", {"job": "j", "nodes": ("n0",)}),
    (JobStatus, "job status", {"phase": "Running"}),
    (QueueStatus, "queue status", {}),
]

_CASES = [
    pytest.param(cls, record, valid, f.name, id=f"{record}.{f.name}")
    for cls, record, valid in _VALID
    for f in dataclasses.fields(cls)
]


@pytest.mark.parametrize(("cls", "record", "valid", "name"), _CASES)
def test_each_field_is_checked(
    cls: type[Any], record: str, valid: dict[str, Any], name: str
) -> None:
    cls(**valid)
    with pytest.raises(DecisionError, match=f"{record}: {name}"):
        cls(**{**valid, name: object()})


def test_optional_fields_take_none() -> None:
    assert Hold(job="j", nodes=(), expected_wait=None).expected_wait is None
    assert QueueStatus(capability_gpu=None).capability_gpu is None


def test_the_first_bad_field_is_the_one_named() -> None:
    with pytest.raises(DecisionError, match="job status: phase"):
        JobStatus(phase="Bogus", running=-1)
    with pytest.raises(DecisionError, match="queue status: state"):
        QueueStatus(state="Paused", share=float("nan"))


if TYPE_CHECKING:
    from collections import OrderedDict as OnlyForTypes


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _NotedBind(Bind):
    note: OnlyForTypes[str, str] | None = None  # not importable at run time


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _PlainStatus(JobStatus):
    running: int = 0  # redeclared with a plain type


def test_a_subclass_made_elsewhere_keeps_the_records_checks() -> None:
    assert _NotedBind(task="t", node="n0", gpu_indices=[1]).gpu_indices == (1,)  # type: ignore[arg-type]
    with pytest.raises(DecisionError, match="bind: node"):
        _NotedBind(task="t", node="")
    with pytest.raises(DecisionError, match="job status: running"):
        _PlainStatus(phase="Running", running=-5)


@pytest.mark.parametrize(
    ("plain", "field"),
    [
        ({"task_reasons": ["ab"]}, "task_reasons"),
        ({"task_reasons": {"t": 3}}, "task_reasons.t"),
        ({"preemption_reasons": {"j": {"preempt": "x"}}}, "preemption_reasons.j"),
        ({"jobs": {1: {"phase": "Running"}}}, "jobs"),
        ({"queues": []}, "queues"),
        ({"binds": "x"}, "binds"),
        ({"holds": "x"}, "holds"),
    ],
)
def test_decisions_from_dict_refuses_a_malformed_collection(plain: Any, field: str) -> None:
    from gangsched.decisions import Decisions
    from gangsched.errors import SnapshotError

    with pytest.raises(SnapshotError, match=f"decisions: {field}: "):
        Decisions.from_dict(plain)


def test_a_hold_read_back_does_not_split_a_node_name() -> None:
    from gangsched.decisions import Decisions

    with pytest.raises(DecisionError, match="hold: nodes"):
        Decisions.from_dict({"holds": [{"job": "j", "nodes": "abc"}]})


@pytest.mark.parametrize("cls", [JobStatus, QueueStatus])
def test_an_unhashable_phase_is_refused_naming_the_field(cls: type[Any]) -> None:
    field = "phase" if cls is JobStatus else "state"
    with pytest.raises(DecisionError, match=f": {field}: expected one of"):
        cls(**{field: []})


@pytest.mark.parametrize(
    "amounts",
    [{1: 2}, {"cpu": True}, {"cpu": 1.0}, {"cpu": "1"}, {"cpu": 1, 2: 3}],
    ids=repr,
)
@pytest.mark.parametrize("frozen", [False, True], ids=["dict", "FrozenDict"])
def test_a_resource_mapping_of_other_types_is_refused(amounts: Any, frozen: bool) -> None:
    """Plain names and plain integers are accepted by type alone; a name that is not a string
    or an amount that is not a plain integer (a bool, a float, a string) is still refused,
    whether the mapping is a dict or a FrozenDict."""
    from gangsched._frozen import FrozenDict

    value = FrozenDict(amounts) if frozen else amounts
    with pytest.raises(DecisionError, match="queue status: allocated"):
        QueueStatus(allocated=value)
    assert QueueStatus(allocated=FrozenDict({"cpu": 1}) if frozen else {"cpu": 1}).allocated == {
        "cpu": 1
    }


@pytest.mark.parametrize("value", [True, -1, 1.0, float("nan"), float("-inf")], ids=repr)
def test_counts_and_numbers_of_other_values_are_refused(value: object) -> None:
    """Counts accept plain non-negative integers, numbers plain non-negative ints and floats
    (infinity included): a bool, a negative, a NaN are refused by either."""
    with pytest.raises(DecisionError, match="job status: running"):
        JobStatus(phase="Running", running=value)  # type: ignore[arg-type]
    if not isinstance(value, float) or value != 1.0:
        with pytest.raises(DecisionError, match="queue status: share"):
            QueueStatus(share=value)  # type: ignore[arg-type]
    assert QueueStatus(share=float("inf")).share == float("inf")
