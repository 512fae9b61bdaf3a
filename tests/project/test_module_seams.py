"""Modules split along their seams keep their public face, and what moved still works.

``gangsched.model``, ``gangsched.config``, ``gangsched.io.k8s``, ``gangsched.io.volcano_out``
and ``gangsched.testing.{hostile,strategies,reference}`` are facades over private modules;
every name they exported before the split is still importable from them, and is the same
object as the one in the private module that owns it.
"""

from __future__ import annotations

import copy
import importlib
import pickle

import pytest

from gangsched.config import Config, FrozenArgs, PluginOption, Tier

#: Facade → names importers use from it (its ``__all__`` and the extra names other modules,
#: tests and docs import from it).
FACADES: dict[str, tuple[str, ...]] = {
    "gangsched.model": (
        "MAX_DEVICE_MILLI",
        "MAX_GPUS_PER_NODE",
        "NODE_PHASES",
        "OCCUPYING_PHASES",
        "POLICY_ACTIONS",
        "POLICY_EVENTS",
        "PREEMPTION_POLICIES",
        "PREEMPT_LOWER_PRIORITY",
        "PREEMPT_NEVER",
        "check_totals",
        "quantity",
    ),
    "gangsched.config": (),
    "gangsched.io.k8s": (),
    "gangsched.io.volcano_out": (),
    "gangsched.testing.hostile": (
        "FAILURES",
        "hostile_config_docs",
        "hostile_snapshot_docs",
        "seeded_cases",
    ),
    "gangsched.testing.strategies": ("Quantity",),
    "gangsched.testing.reference": (
        "DEFAULT_CPU",
        "DEFAULT_MEMORY",
        "EPS",
        "HOLDING",
        "NO_LIMIT",
        "SLACK",
        "SUPPORTED",
    ),
}


@pytest.mark.parametrize("facade", sorted(FACADES))
def test_facade_exports_its_names(facade: str) -> None:
    module = importlib.import_module(facade)
    names = (*module.__all__, *FACADES[facade])
    missing = [n for n in names if not hasattr(module, n)]
    assert not missing, f"{facade} no longer exports {missing}"


def test_split_records_are_one_class_each() -> None:
    import gangsched
    from gangsched import model
    from gangsched.model import nodes as _model_nodes
    from gangsched.model import tasks as _model_tasks

    assert model.Node is _model_nodes.Node is gangsched.Node
    assert model.Task is _model_tasks.Task is gangsched.Task


def test_config_survives_deepcopy_and_pickle() -> None:
    # FrozenArgs refused the attribute assignment copy and pickle rebuild it with, so a
    # configuration with arguments could be neither deep-copied nor sent to a worker process.
    config = Config(
        actions=("allocate",),
        tiers=(Tier(plugins=(PluginOption(name="binpack", arguments={"binpack.weight": 3}),)),),
        configurations={"allocate": {"placer": "greedy"}},
    )
    for again in (copy.deepcopy(config), pickle.loads(pickle.dumps(config))):
        assert again == config
        assert again.to_volcano_yaml() == config.to_volcano_yaml()
        assert isinstance(again.tiers[0].plugins[0].arguments, FrozenArgs)
    args = FrozenArgs({"b": 1, "a": (1, 2)})
    assert copy.copy(args) == args and list(copy.deepcopy(args)) == ["a", "b"]
    with pytest.raises(AttributeError, match="FrozenArgs is immutable"):
        args.x = 1
