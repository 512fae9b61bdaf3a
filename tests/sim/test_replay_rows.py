"""The replay's fragment and idle rows, worked out once at the end from what each row noted,
and its allocated GPU and CPU rows, kept as holds and frees move them, are those of the
cluster as it stood at that row."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_sim_replay import SIMPLE, gpu_node, job, trace, traces

from gangsched.fragmentation import node_fragment
from gangsched.sim.replay import ReplayOptions, Trace
from gangsched.sim.replay.engine import Engine


class _Watched(Engine):
    """An engine that also sums the fragment and idle GPU of every node at every row."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.seen_frag: list[float] = []
        self.seen_idle: list[int] = []
        self.seen_gpu: list[int] = []
        self.seen_cpu: list[int] = []

    def record(self, time: float) -> None:
        super().record(time)
        every = np.arange(len(self.cap_cpu), dtype=np.intp)
        free = self._gpu_free(every)
        frag = node_fragment(self.cap_cpu - self.used_cpu, free, self.model_idx, self.typical)
        self.seen_frag.append(float(frag.sum()))
        self.seen_idle.append(int(free.sum()))
        self.seen_gpu.append(int(self.queue_alloc.sum()))
        self.seen_cpu.append(int(self.used_cpu.sum()))


@settings(max_examples=25, deadline=None)
@given(traces(), st.sampled_from([1 << 20, 1, 8]))
def test_fragment_and_idle_rows_are_the_cluster_s_at_each_row(tr: Trace, cells: int) -> None:
    # (``cells``: the rows worked out all at once, one at a time, a few at a time)
    engine = _Watched(tr, ReplayOptions(config=SIMPLE), None)
    engine.settle_cells = cells
    res = engine.run()
    assert res.idle.tolist() == engine.seen_idle
    assert res.gpu_alloc.tolist() == engine.seen_gpu
    assert res.cpu_alloc.tolist() == engine.seen_cpu
    # (the measure is exact per node: measured with the whole cluster, the same figures)
    assert res.frag.tolist() == engine.seen_frag


@pytest.mark.parametrize("cells", [1 << 20, 1])
def test_rows_of_nodes_that_move_in_turn(cells: int) -> None:
    # Shared devices half held on one node, then the other: each row's sums read both nodes,
    # one of them as an earlier row left it.
    nodes = [gpu_node("a"), gpu_node("b"), gpu_node("c", gpus=4)]
    jobs = [
        job("A", 0, 100, milli=500),
        job("B", 10, 100, gpus=2),
        job("C", 20, 50, milli=500),
        job("D", 30, 40, gpus=3),
        job("E", 40, 20, milli=250, tasks=2),
    ]
    engine = _Watched(trace(jobs, nodes), ReplayOptions(config=SIMPLE), None)
    engine.settle_cells = cells
    res = engine.run()
    assert len(set(engine.seen_frag)) > 2  # the fragment moves, row after row
    assert res.idle.tolist() == engine.seen_idle
    assert res.gpu_alloc.tolist() == engine.seen_gpu
    assert res.cpu_alloc.tolist() == engine.seen_cpu
    assert res.frag.tolist() == engine.seen_frag
