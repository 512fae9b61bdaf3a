"""Decision records under hostile field values.

Every field of every record gets values of the wrong kind (booleans for counts, NaN, infinity,
negative and 64-bit-overflowing integers, ``str`` and ``int`` subclasses, lists for tuples,
None): the record is either made, keeping a value its field's type allows, or refused with a
:class:`DecisionError` whose ``kind`` is the record's name and whose ``field`` is that field.
``dataclasses.replace`` checks again; pickling keeps equality; ``Decisions.from_dict`` reads
back the interchange form of real cycles' decisions, to the same form.
"""

from __future__ import annotations

import dataclasses
import json
import math
import pickle
import types
import typing
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gangsched import Config, schedule
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
from gangsched.errors import DecisionError
from gangsched.testing import strategies as gst


class _Str(str):
    pass


class _Int(int):
    pass


#: Hashable hostile values (any field), then the unhashable ones (fields with no fixed set).
SCALARS: list[Any] = [
    None,
    True,
    False,
    0,
    -1,
    2**63,
    -(2**63),
    0.5,
    -0.0,
    math.nan,
    math.inf,
    -math.inf,
    "",
    "x",
    _Str("x"),
    _Str(""),
    _Int(3),
    _Int(-1),
    b"x",
    (0,),
    (-1,),
    (True,),
    ("n",),
    ("",),
]
UNHASHABLE: list[Any] = [
    [],
    [0, 1],
    [-1],
    [0.0],
    ["n"],
    [""],
    {},
    {"cpu": 1},
    {"cpu": True},
    {"cpu": 1.5},
    {1: 1},
]

#: Each record with the smallest valid arguments, and its name in errors.
RECORDS: list[tuple[type[Any], dict[str, Any], str]] = [
    (Bind, {"task": "t", "node": "n"}, "bind"),
    (Pipeline, {"task": "t", "node": "n"}, "pipelined"),
    (Eviction, {"task": "t", "reason": "r"}, "eviction"),
    (JobAction, {"job": "j", "action": "a", "cause": "c"}, "job action"),
    (Hold, {"job": "j", "nodes": ("n",)}, "hold"),
    (JobStatus, {"phase": "Pending"}, "job status"),
    (QueueStatus, {}, "queue status"),
]
#: Fields checked against a fixed set of names.
ONE_OF = {"phase", "state"}

CASES = [(cls, kw, record, f.name) for cls, kw, record in RECORDS for f in dataclasses.fields(cls)]


def _allowed(value: Any, hint: Any) -> bool:
    """Whether a kept ``value`` is of the kind the field's declared type ``hint`` names."""
    options = typing.get_args(hint) if typing.get_origin(hint) is types.UnionType else (hint,)
    if value is None:
        return type(None) in options
    kind = options[0]
    origin = typing.get_origin(kind) or kind
    if origin is tuple:
        return isinstance(value, tuple)
    if origin is Mapping:
        return isinstance(value, Mapping)
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0
    if kind is float:
        return (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and not math.isnan(value)
            and value >= 0
        )
    return kind is str and isinstance(value, str)


@pytest.mark.parametrize(
    ("cls", "kw", "record", "name"), CASES, ids=[f"{c[0].__name__}.{c[3]}" for c in CASES]
)
def test_a_hostile_field_is_kept_as_its_type_or_refused_naming_record_and_field(
    cls: type[Any], kw: dict[str, Any], record: str, name: str
) -> None:
    hint = typing.get_type_hints(cls)[name]
    values = SCALARS if name in ONE_OF else SCALARS + UNHASHABLE
    good = cls(**kw)
    for value in values:
        try:
            made = cls(**{**kw, name: value})
        except DecisionError as e:
            assert (e.kind, e.field) == (record, name), (value, e)
            with pytest.raises(DecisionError) as again:
                dataclasses.replace(good, **{name: value})
            assert (again.value.kind, again.value.field) == (record, name)
            continue
        kept = getattr(made, name)
        assert _allowed(kept, hint), (name, value, kept)
        assert pickle.loads(pickle.dumps(made)) == made
        json.dumps(made.to_dict())  # the interchange form stays JSON


def test_the_first_bad_field_in_declaration_order_is_the_error() -> None:
    with pytest.raises(DecisionError) as e:
        QueueStatus(share=-1, real_capability=5)  # type: ignore[arg-type]
    assert e.value.field == "share"
    with pytest.raises(DecisionError) as e:
        JobStatus(phase="Running", failed=-1, ready=1)  # type: ignore[arg-type]
    assert e.value.field == "ready"


CONFIG = Config.from_dict(
    {
        "actions": ["enqueue", "allocate", "preempt", "reclaim", "backfill"],
        "tiers": [
            [{"name": "priority"}, {"name": "gang"}, {"name": "conformance"}],
            [{"name": "drf"}, {"name": "predicates"}, {"name": "proportion"}],
        ],
    }
)


@settings(max_examples=20)
@given(gst.snapshots(max_nodes=4, max_jobs=4, max_tasks_per_job=3), st.booleans())
def test_real_decisions_read_back_from_their_interchange_form(snap: Any, via_json: bool) -> None:
    d = schedule(snap, CONFIG)
    plain = d.to_dict()
    if via_json:
        plain = json.loads(json.dumps(plain))
    back = Decisions.from_dict(plain)  # equal as interchange forms (to_dict rounds a share)
    assert json.dumps(back.to_dict(), sort_keys=True) == json.dumps(d.to_dict(), sort_keys=True)
