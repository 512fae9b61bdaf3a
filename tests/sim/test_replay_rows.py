"""The replay's fragment and idle rows, worked out once at the end from what each row noted,
are those of the cluster as it stood at that row."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from test_sim_replay import SIMPLE, traces

from gangsched.fragmentation import node_fragment
from gangsched.sim.replay import ReplayOptions, Trace
from gangsched.sim.replay.engine import Engine


class _Watched(Engine):
    """An engine that also sums the fragment and idle GPU of every node at every row."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.seen_frag: list[float] = []
        self.seen_idle: list[int] = []

    def record(self, time: float) -> None:
        super().record(time)
        every = np.arange(len(self.cap_cpu), dtype=np.intp)
        free = self._gpu_free(every)
        frag = node_fragment(self.cap_cpu - self.used_cpu, free, self.model_idx, self.typical)
        self.seen_frag.append(float(frag.sum()))
        self.seen_idle.append(int(free.sum()))


@settings(max_examples=25, deadline=None)
@given(traces())
def test_fragment_and_idle_rows_are_the_cluster_s_at_each_row(tr: Trace) -> None:
    engine = _Watched(tr, ReplayOptions(config=SIMPLE), None)
    res = engine.run()
    assert res.idle.tolist() == engine.seen_idle
    # (the measure is exact per node: measured with the whole cluster, the same figures)
    assert res.frag.tolist() == engine.seen_frag
