"""The resource mappings of a queue's status: the close step makes them from a row over the
session's columns in their final (sorted) order at once; each is the mapping the session's
``as_mapping`` gives, frozen — the same items in the same order, or the same error."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import gangsched as gs
from gangsched._frozen import FrozenDict
from gangsched.scheduler import open_session
from gangsched.session.close import _finite, _frozen
from gangsched.session.core import Session


def _session() -> Session:
    # resource columns: cpu, memory, nvidia.com/gpu, then the other names sorted (pods among
    # them), which is not the sorted order of all the names
    snap = gs.Snapshot.from_dict(
        {
            "nodes": [
                {
                    "name": "n0",
                    "allocatable": {
                        "cpu": 8,
                        "memory": "8Gi",
                        "pods": 10,
                        "example.com/fpga": 2,
                        "aaa.io/x": 1,
                        "zzz.io/y": 3,
                    },
                }
            ],
            "queues": [{"name": "q0"}],
        }
    )
    return open_session(snap, gs.Config.default())


_SSN = _session()
_WIDTH = len(_SSN.arrays.spec.names)


def _same(row: npt.NDArray[Any]) -> None:
    try:
        want = FrozenDict(_SSN.as_mapping(row))
    except (OverflowError, ValueError) as exc:
        with pytest.raises(type(exc)):
            _frozen(_SSN, row)
        return
    got = _frozen(_SSN, row)
    assert list(got.items()) == list(want.items())
    assert got == want and hash(got) == hash(want)
    assert all(type(v) is int for v in got.values())


def test_the_columns_are_not_in_name_order() -> None:
    names = list(_SSN.arrays.spec.names)
    assert names != sorted(names) and "pods" in names


@given(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=_WIDTH, max_size=_WIDTH))
@example([0] * _WIDTH)
@example([2**53 + 1, -(2**63), 2**63 - 1, 0, 1, 7, -1][:_WIDTH] + [3] * max(0, _WIDTH - 7))
def test_an_integer_row_maps_as_the_session_maps_it(values: list[int]) -> None:
    _same(np.array(values, dtype=np.int64))


@given(
    st.lists(
        st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.0, -0.0])),
        min_size=_WIDTH,
        max_size=_WIDTH,
    )
)
@example([0.5, 1.5, 2.5, -0.0, 1e300, 3.0, 0.0][:_WIDTH] + [1.0] * max(0, _WIDTH - 7))
@example([math.nan] + [1.0] * (_WIDTH - 1))
@example([math.inf] + [1.0] * (_WIDTH - 1))
def test_a_float_row_maps_as_the_session_maps_it(values: list[float]) -> None:
    _same(np.array(values, dtype=np.float64))


@given(
    st.lists(st.one_of(st.floats(0, 2**60), st.just(math.inf)), min_size=_WIDTH, max_size=_WIDTH)
)
def test_a_capability_row_leaves_unlimited_columns_out(values: list[float]) -> None:
    row = np.array(values, dtype=np.float64)
    want = FrozenDict(_SSN.as_mapping(np.where(np.isfinite(row), row, 0.0)))
    got = _finite(_SSN, row)
    assert list(got.items()) == list(want.items())
    assert _finite(_SSN, None) == {}


def test_a_status_shows_its_mappings_in_name_order() -> None:
    snap = _SSN.snapshot
    jobs = [{"name": "j", "queue": "q0", "min_available": 1}]
    tasks = [{"name": "j-0", "job": "j", "request": {"cpu": 1, "zzz.io/y": 1, "aaa.io/x": 1}}]
    data = {**snap.to_dict(), "jobs": jobs, "tasks": tasks}
    d = gs.schedule(gs.Snapshot.from_dict(data), gs.Config.default())
    status = d.queues["q0"]
    assert list(status.allocated) == ["aaa.io/x", "cpu", "zzz.io/y"]
    assert list(status.request) == ["aaa.io/x", "cpu", "zzz.io/y"]
    assert list(status.deserved) == sorted(status.deserved) and "aaa.io/x" in status.deserved
