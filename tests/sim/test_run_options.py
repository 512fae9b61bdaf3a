"""The FGD run options (tune, rng, limit, workload) are one record shared by run_one and
replay_fgd: the same defaults, the same refusal of a key that is not an option."""

from __future__ import annotations

from typing import Any

import pytest

from gangsched.io.openb import load_nodes, load_pods
from gangsched.sim.fgd import RunSettings, run_one, run_options
from gangsched.sim.openb_trace import replay_fgd


def test_run_options_fill_in_the_protocol_defaults() -> None:
    pods = load_pods(None)
    got = run_options(pods, {}, caller="run_one")
    assert got == RunSettings(tune=1.3, rng="go", limit=None, workload="openb_pod_list_default")
    given = run_options(pods, {"tune": 2.0, "rng": "numpy", "limit": 5, "workload": ""}, caller="x")
    assert given == RunSettings(tune=2.0, rng="numpy", limit=5, workload="")


@pytest.mark.parametrize("run", [run_one, replay_fgd])
def test_a_misspelt_run_option_is_a_type_error(run: Any) -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'tunes'"):
        run(load_nodes(None), load_pods(None), "bestfit", 1, tunes=2.0)


def test_replay_fgd_fast_passes_its_options_to_run_one() -> None:
    nodes, pods = load_nodes(None), load_pods(None)
    fast = replay_fgd(nodes, pods, "bestfit", 3, engine="fast", limit=40, tune=0.5)
    direct = run_one(nodes, pods, "bestfit", 3, limit=40, tune=0.5)
    assert fast.workload == direct.workload == "openb_pod_list_default"
    assert fast.tune == 0.5 and fast.n_pods == direct.n_pods == 40
    assert (fast.placement == direct.placement).all()
