"""Kueue topology annotations written as very long digit strings are refused as snapshot
errors naming the annotation (not a bare ValueError from ``int``'s digit limit)."""

from __future__ import annotations

import pytest
from test_kueue_topology import _load, _vcjob

from gangsched.errors import SnapshotError

_LONG = "1" * 5000


def test_long_digit_topology_annotations_are_snapshot_errors() -> None:
    with pytest.raises(SnapshotError, match="podset-required-topology"):
        _load(_vcjob({"kueue.x-k8s.io/podset-required-topology": _LONG}))
    with pytest.raises(SnapshotError, match="podset-slice-size"):
        _load(
            _vcjob(
                {
                    "kueue.x-k8s.io/podset-slice-required-topology": "kubernetes.io/hostname",
                    "kueue.x-k8s.io/podset-slice-size": _LONG,
                }
            )
        )
