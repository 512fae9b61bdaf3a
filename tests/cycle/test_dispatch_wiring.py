"""The dispatcher resolves which plugins serve which points once per configuration of plugin
types and switched-off points, when the types decide it; a plugin whose own instance decides
(a member set in ``__init__``, a property) is resolved for every session. Each wiring below
must equal the one resolved with every remembered answer forgotten."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import gangsched as gs
from gangsched.framework import dispatch
from gangsched.scheduler import open_session

NAME = "toggle"
SNAPSHOT = gs.Snapshot.from_dict(
    {
        "nodes": [{"name": "n0", "allocatable": {"cpu": 8, "memory": "8Gi", "pods": 10}}],
        "queues": [{"name": "default"}],
        "jobs": [{"name": "j", "min_available": 1, "phase": "Inqueue"}],
        "tasks": [{"name": "j-0", "job": "j", "request": {"cpu": 1}}],
    }
)


class ByInstance:
    """Serves ``job_ready`` unless its arguments say no (then its instance hides the member);
    its ``shape_only`` flag is a property of the instance."""

    name = NAME

    def __init__(self, arguments: Any) -> None:
        self.ready_too = bool(arguments.get("ready", True))
        if not self.ready_too:
            setattr(self, "job_ready", None)  # noqa: B010 (the instance hides the member)

    def job_ready(self, ssn: Any, job: int) -> bool:
        return True

    @property
    def shape_only(self) -> bool:
        return self.ready_too

    def node_score(self, ssn: Any, tmpl: Any, rows: Any) -> Any:
        return np.zeros(rows.size)


def _registry() -> gs.Registry:
    reg = gs.default_registry()
    reg.register_plugin(NAME, ByInstance, arguments=None)
    return reg


def _config(reg: gs.Registry, *, ready: bool, off: tuple[str, ...] = ()) -> gs.Config:
    gang: dict[str, Any] = {"name": "gang"}
    if off:
        gang["switches"] = {s: False for s in off}
    return gs.Config.from_dict(
        {
            "actions": ["enqueue", "allocate"],
            "tiers": [
                [{"name": "priority"}, gang, {"name": NAME, "arguments": {"ready": ready}}],
                [{"name": "predicates"}, {"name": "proportion"}, {"name": "nodeorder"}],
            ],
        },
        plugins=reg.plugins,
    )


def _wiring(points: dispatch.Dispatch) -> tuple[dict[str, Any], dict[str, bool]]:
    served = {
        point: [[getattr(p, "name", "?") for p in tier] for tier in tiers]
        for point, tiers in points._plugins.items()
    }
    return served, dict(points._flags)


def _forgotten(ssn: Any) -> tuple[dict[str, Any], dict[str, bool]]:
    """The session's wiring resolved again with every remembered answer dropped."""
    kept = (dict(dispatch._WIRING), dict(dispatch._SERVES), dict(dispatch._BY_TYPE))
    dispatch._WIRING.clear()
    dispatch._SERVES.clear()
    dispatch._BY_TYPE.clear()
    try:
        opened = [
            list(zip(tier.plugins, plugins, strict=True))
            for tier, plugins in zip(ssn.config.tiers, ssn.plugins, strict=True)
        ]
        return _wiring(dispatch.Dispatch(ssn, opened))
    finally:
        dispatch._WIRING.clear()
        dispatch._SERVES.clear()
        dispatch._BY_TYPE.clear()
        dispatch._WIRING.update(kept[0])
        dispatch._SERVES.update(kept[1])
        dispatch._BY_TYPE.update(kept[2])


@pytest.mark.parametrize(
    "sequence",
    [
        [(True, ()), (False, ()), (True, ())],
        [(True, ()), (True, ("job_order",)), (True, ()), (False, ("job_ready",))],
        [(False, ("job_ready", "job_order")), (True, ()), (False, ())],
    ],
)
def test_each_session_is_wired_as_if_resolved_afresh(
    sequence: list[tuple[bool, tuple[str, ...]]],
) -> None:
    reg = _registry()
    for ready, off in sequence:
        ssn = open_session(SNAPSHOT, _config(reg, ready=ready, off=off), registry=reg)
        got = _wiring(ssn.points)
        assert got == _forgotten(ssn)
        ready_chain = [p.name for p in ssn.points.serving("job_ready")]
        assert (NAME in ready_chain) is ready
        assert ("gang" in ready_chain) is ("job_ready" not in off)
        assert [p.name for p in ssn.points.serving("job_order")].count("gang") == (
            "job_order" not in off
        )
        assert ssn.points.shape_only is ready  # the instance's property, read each session


def test_a_type_whose_class_decides_is_remembered_per_point() -> None:
    """Built-in plugins are decided by their types; a point read through a property (drf's
    ``queue_order_global``) is not."""
    ssn = open_session(SNAPSHOT, gs.Config.default())
    gang = ssn.plugin("gang")
    assert dispatch._BY_TYPE[type(gang), "job_ready"] is True
    drf = ssn.plugin("drf")
    if drf is not None:
        assert dispatch._BY_TYPE[type(drf), "queue_order_global"] is False


@pytest.mark.parametrize("point", ["job_order", "task_order"])
def test_enqueue_asks_a_foreign_order_even_for_one_job_of_one_task(point: str) -> None:
    """With the package's orders, a queue with one waiting job needs no job order (its key is
    never compared) and the shape check of a job with one pending task no task order; a
    plugin from elsewhere is asked anyway, so that its wrong answer is reported whatever the
    queue holds."""
    from gangsched.errors import ConfigError
    from gangsched.scheduler import default_registry

    class BadOrder:
        name = "badorder"
        known_arguments = ()

        def __init__(self, arguments: object) -> None:
            pass

    def wrong(self: object, ssn: object, item: int) -> object:
        return 7  # not a tuple sort key

    setattr(BadOrder, point, wrong)
    reg = default_registry()
    reg.register_plugin("badorder", BadOrder)
    cfg = gs.Config.from_dict(
        {
            "actions": ["enqueue"],
            "tiers": [
                [{"name": "badorder"}, {"name": "gang"}],
                [{"name": "predicates"}, {"name": "proportion"}],
            ],
        },
        plugins=reg.plugins,
    )
    snap = gs.Snapshot.from_dict(
        {
            "nodes": [{"name": "n0", "allocatable": {"cpu": 4, "memory": "8Gi"}}],
            "queues": [{"name": "default"}],
            "jobs": [{"name": "a", "min_available": 1}],
            "tasks": [{"name": "a0", "job": "a", "request": {"cpu": 1}}],
        }
    )
    with pytest.raises(ConfigError, match=point):
        gs.schedule(snap, cfg, registry=reg)
