"""A PodGroup's bad ``minTaskMember`` count is reported at ``spec.minTaskMember.<role>``."""

from __future__ import annotations

import pytest
from test_io_k8s import podgroup, queue

from gangsched.errors import SnapshotError
from gangsched.io.k8s import load_objects


@pytest.mark.parametrize("count", ["two", -1, 2.5])
def test_bad_min_task_member_names_its_role_field(count: object) -> None:
    with pytest.raises(SnapshotError, match=r"spec\.minTaskMember\.w: "):
        load_objects([queue("q"), podgroup("g", 2, queue="q", minTaskMember={"w": count})])
