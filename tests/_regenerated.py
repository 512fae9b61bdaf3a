"""A fresh copy of a module whose code is generated from a rule, generated from a mutant rule:
how the rule tests show that every form reads the rule (a mutated formula must change them all
alike, and differ from the real one)."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

import pytest


def regenerated(
    module: ModuleType, rules: ModuleType, rule: object, monkeypatch: pytest.MonkeyPatch
) -> ModuleType:
    """A new copy of ``module``, executed while ``rules.RULE`` is ``rule`` (``rules``: the
    module the rule's ``RULE`` lives in); the original module and ``rules`` are left as
    they were."""
    name = f"_{module.__name__.rsplit('.', 1)[-1]}_from_{abs(hash(rule))}"
    spec = importlib.util.spec_from_file_location(name, module.__file__)
    assert spec is not None and spec.loader is not None
    copy = importlib.util.module_from_spec(spec)
    with monkeypatch.context() as m:
        m.setattr(rules, "RULE", rule)
        m.setitem(sys.modules, name, copy)
        spec.loader.exec_module(copy)
    return copy
