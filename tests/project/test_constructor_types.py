"""The constructors' declared types (what a type checker sees) follow the records' fields.

Records accept what a manifest or a test naturally writes — lists for tuples, dicts for
mappings, quantities as strings, phases by name — and normalise it in ``__post_init__``. The
fields hold the checked types, so each such record declares, for type checkers only, the
``__init__`` it really has. These tests keep that declaration in step with the fields: the
same keyword-only parameters in the same order, with a default exactly where the field has
one, and no declaration reaching the running code.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
from pathlib import Path

import pytest

import gangsched as gs
from gangsched.model import HyperNode, Job, Node, Queue, Task
from gangsched.model.pod_affinity import LabelSelector

DECLARED = [Node, HyperNode, gs.Snapshot, Task, Job, Queue, LabelSelector]


def _declared_init(cls: type) -> ast.FunctionDef:
    module = importlib.import_module(cls.__module__)
    tree = ast.parse(Path(inspect.getfile(module)).read_text())
    (node,) = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls.__name__]
    for stmt in node.body:
        if (
            isinstance(stmt, ast.If)
            and isinstance(stmt.test, ast.Name)
            and stmt.test.id == "TYPE_CHECKING"
        ):
            for inner in stmt.body:
                if isinstance(inner, ast.FunctionDef) and inner.name == "__init__":
                    return inner
    raise AssertionError(f"{cls.__name__} declares no __init__ for type checkers")


@pytest.mark.parametrize("cls", DECLARED, ids=lambda c: c.__name__)
def test_the_declared_constructor_lists_every_field_in_order(cls: type) -> None:
    declared = _declared_init(cls)
    assert not declared.args.args[1:] and declared.args.vararg is None, "keyword-only"
    params = [a.arg for a in declared.args.kwonlyargs]
    has_default = [d is not None for d in declared.args.kw_defaults]
    fields = [f for f in dataclasses.fields(cls) if f.init]
    assert params == [f.name for f in fields]
    assert has_default == [
        f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        for f in fields
    ]


@pytest.mark.parametrize("cls", DECLARED, ids=lambda c: c.__name__)
def test_the_running_constructor_is_the_dataclass_one(cls: type) -> None:
    sig = inspect.signature(cls)
    assert list(sig.parameters) == [f.name for f in dataclasses.fields(cls) if f.init]
    module_file = inspect.getfile(importlib.import_module(cls.__module__))
    init = vars(cls)["__init__"]
    assert init.__code__.co_filename != module_file  # generated, not the declaration


def test_the_natural_spellings_type_check_and_normalise() -> None:
    # Checked by mypy --strict (the typecheck step covers tests/) and by running it.
    node = Node(name="n0", allocatable={"cpu": "8", "memory": "32Gi"}, labels={"zone": "a"})
    rack = HyperNode(name="r0", tier=1, members=["n0"])
    queue = Queue(name="q", capability={"cpu": 4}, state="Open")
    job = Job(name="j", queue="q", min_task_member={"w": 1}, phase="Pending")
    task = Task(name="j-0", job="j", role="w", request={"cpu": "500m"}, labels={"app": "x"})
    snap = gs.Snapshot(nodes=[node], hypernodes=[rack], queues=[queue], jobs=[job], tasks=[task])
    assert snap.nodes == (node,) and rack.members == ("n0",)
    assert node.allocatable["cpu"] == 8000 and task.request["cpu"] == 500
    assert queue.state is gs.QueueState.OPEN and job.phase is gs.JobPhase.PENDING
    assert LabelSelector(match_labels={"app": "x"}).match_labels == {"app": "x"}
