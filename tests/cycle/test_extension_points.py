"""The extension points as a contract: one table, chains checked at open, one tier loop."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import gangsched as gs
from gangsched.framework.dispatch import Dispatch
from gangsched.framework.extension_points import EXTENSION_POINTS, FairSharePlugin, Kind
from gangsched.scheduler import open_session

SRC = Path(gs.__file__).resolve().parent


def _snap() -> gs.Snapshot:
    return gs.Snapshot.from_dict(
        {
            "nodes": [
                {"name": f"n{i}", "allocatable": {"cpu": 4, "memory": "8Gi", "pods": 10}}
                for i in range(3)
            ],
            "queues": [{"name": "default"}],
            "jobs": [{"name": "j", "min_available": 1, "phase": "Inqueue"}],
            "tasks": [{"name": "j-0", "job": "j", "request": {"cpu": 1}}],
        }
    )


def _config(reg: gs.Registry, *names: str) -> gs.Config:
    return gs.Config.from_dict(
        {"actions": ["allocate"], "tiers": [[{"name": "gang"}], [{"name": n} for n in names]]},
        plugins=reg.plugins,
    )


def _with(cls: type) -> tuple[gs.Registry, gs.Config]:
    reg = gs.default_registry()
    reg.register_plugin(cls.name, cls)  # type: ignore[attr-defined]
    return reg, _config(reg, cls.name)  # type: ignore[attr-defined]


def test_every_point_the_dispatcher_asks_is_in_the_table() -> None:
    """Each ``self._chains["x"]`` / ``serving("x")`` / ``_plugins["x"]`` in the dispatcher names
    a row of the table, and every row is asked somewhere (no dead point)."""
    text = (SRC / "framework/dispatch.py").read_text()
    asked = set(re.findall(r'(?:_chains|_plugins|serving)\[?\(?"(\w+)"', text))
    names = {p.name for p in EXTENSION_POINTS}
    assert asked <= names
    flags_and_providers = {p.name for p in EXTENSION_POINTS if p.kind in (Kind.FLAG, Kind.PROVIDER)}
    assert names - asked <= flags_and_providers | {"preemptable", "reclaimable"}
    for p in EXTENSION_POINTS:
        if p.kind in (Kind.CALL, Kind.ROWS, Kind.EVENT):
            assert hasattr(Dispatch, p.name) or p.name in asked, p.name


def test_no_tier_loop_outside_the_dispatcher_and_the_combiners() -> None:
    """Nothing but ``framework/dispatch.py`` / ``framework/combine.py`` walks plugins: no
    ``.serving(`` loops, no
    lookup of a plugin by name, no ``hasattr`` on plugins in the package."""
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel in (
            "framework/dispatch.py",
            "framework/combine.py",
            "session/core.py",
        ) or rel.startswith("testing/"):
            continue
        text = path.read_text()
        for pattern in (r"\.serving\(", r"ssn\.plugin\(", r"\.chains\b", r"hasattr\(p(lugin)?,"):
            if re.search(pattern, text):
                offenders.append((rel, pattern))
    assert offenders == []


def test_no_hidden_extension_point() -> None:
    """A built-in plugin's public method taking the session that code outside the plugins
    package calls with a session is a declared point (a method only the plugin itself, its
    sibling helpers or tests use is the plugin's own business)."""
    names = {p.name for p in EXTENSION_POINTS}
    names |= {m for m in dir(FairSharePlugin) if m.startswith("queue_")}
    outside = "\n".join(
        p.read_text()
        for p in sorted(SRC.rglob("*.py"))
        if "plugins" not in p.relative_to(SRC).parts
    )
    hidden = []
    for path in sorted((SRC / "plugins").glob("*.py")):
        tree = ast.parse(path.read_text())
        for cls in [n for n in tree.body if isinstance(n, ast.ClassDef)]:
            for fn in [n for n in cls.body if isinstance(n, ast.FunctionDef)]:
                args = [a.arg for a in fn.args.args]
                if fn.name.startswith("_") or args[:2] != ["self", "ssn"] or fn.name in names:
                    continue
                if re.search(rf"\.{fn.name}\(\s*(self\.)?ssn\b", outside):
                    hidden.append(f"{path.name}:{cls.name}.{fn.name}")
    assert hidden == []


def test_a_member_with_the_wrong_signature_is_refused_at_open() -> None:
    class TwoArgScore:
        name = "two-arg-score"

        def __init__(self, arguments: Any) -> None:
            pass

        def node_score(self, ssn: Any, tmpl: Any) -> Any:  # the point passes rows too
            return 0.0

    reg, config = _with(TwoArgScore)
    with pytest.raises(gs.ConfigError) as info:
        gs.schedule(_snap(), config, registry=reg)
    message = str(info.value)
    assert "two-arg-score" in message and "node_score" in message
    assert "ssn, tmpl, rows" in message


def test_a_member_that_is_not_callable_is_refused() -> None:
    class Broken:
        name = "broken-order"
        job_order = 3

        def __init__(self, arguments: Any) -> None:
            pass

    reg, config = _with(Broken)
    with pytest.raises(gs.ConfigError, match="job_order is not callable"):
        gs.schedule(_snap(), config, registry=reg)


def test_a_flag_must_be_a_bool() -> None:
    class Flag:
        name = "odd-flag"
        shape_only = "yes"

        def __init__(self, arguments: Any) -> None:
            pass

        def predicate(self, ssn: Any, tmpl: Any, rows: Any) -> Any:
            return []

    reg, config = _with(Flag)
    with pytest.raises(gs.ConfigError, match="shape_only must be a bool"):
        gs.schedule(_snap(), config, registry=reg)


def test_keyword_only_points_are_checked_with_their_keywords() -> None:
    class NoFuture:
        name = "no-future"

        def __init__(self, arguments: Any) -> None:
            pass

        def gpu_choice(self, ssn: Any, task: int, node: int) -> Any:  # lacks future=
            return None

    reg, config = _with(NoFuture)
    with pytest.raises(gs.ConfigError, match="gpu_choice"):
        gs.schedule(_snap(), config, registry=reg)


def test_a_switched_off_point_leaves_the_chain() -> None:
    reg = gs.default_registry()
    on = gs.Config.from_dict({"actions": ["allocate"], "tiers": [[{"name": "binpack"}]]})
    off = gs.Config.from_dict(
        {"actions": ["allocate"], "tiers": [[{"name": "binpack", "enableNodeOrder": False}]]}
    )
    assert [p.name for p in open_session(_snap(), on, registry=reg).points.serving("node_score")]
    assert open_session(_snap(), off, registry=reg).points.serving("node_score") == ()


def test_the_fair_share_provider_is_found_by_protocol_not_by_name() -> None:
    class Renamed:
        """A fair-share plugin under another name still serves the queue status."""

        name = "my-share"

        def __init__(self, arguments: Any) -> None:
            pass

        def queue_deserved(self, ssn: Any) -> Any:
            return np.full_like(ssn.queue_allocated, 7)

        def queue_share(self, ssn: Any, queue: int) -> float:
            return 0.25

        def queue_overused(self, ssn: Any, queue: int) -> bool:
            return False

        def queue_real_capability(self, ssn: Any, queue: int) -> Any:
            return None

        def queue_subtree_sum(self, ssn: Any, per_queue: Any) -> Any:
            return per_queue

    reg, config = _with(Renamed)
    d = gs.schedule(_snap(), config, registry=reg)
    status = d.queues["default"]
    assert status.share == 0.25
    assert status.deserved["cpu"] == 7


def test_chains_keep_tier_order_and_the_combiners_stop_where_volcano_stops() -> None:
    calls: list[str] = []

    def make(name: str, answer: bool) -> type:
        class Ready:
            def __init__(self, arguments: Any) -> None:
                self.name = name

            def job_ready(self, ssn: Any, job: int) -> bool:
                calls.append(name)
                return answer

        return Ready

    reg = gs.default_registry()
    for name, answer in (("r-a", True), ("r-b", False), ("r-c", True)):
        reg.register_plugin(name, make(name, answer))
    config = gs.Config.from_dict(
        {"actions": ["allocate"], "tiers": [[{"name": "r-a"}], [{"name": "r-b"}, {"name": "r-c"}]]},
        plugins=reg.plugins,
    )
    ssn = open_session(_snap(), config, registry=reg)
    assert [p.name for p in ssn.points.serving("job_ready")] == ["r-a", "r-b", "r-c"]
    calls.clear()
    assert ssn.points.job_ready(0) is False
    assert calls == ["r-a", "r-b"]  # all_pass stops at the first false answer
