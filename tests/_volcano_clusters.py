"""Clusters for the tests of Volcano's preempt loop: the whole-GPU random clusters of the
Volcano differential campaign (``tools/volcano_differential.py``) and openb clusters with
shared GPUs (``benchmarks/preemption_clusters.py``), with the campaign's preemption
configuration read from Volcano's YAML."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import gangsched as gs

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


V = _load("volcano_differential", ROOT / "tools" / "volcano_differential.py")
OPENB = _load("preemption_clusters", ROOT / "benchmarks" / "preemption_clusters.py")
CONFIG = gs.Config.from_volcano_yaml(V.CONFIGS["preemption"])


def clusters() -> list[tuple[str, dict[str, Any]]]:
    """Whole-GPU clusters of the differential campaign and openb clusters (shared GPUs)."""
    out = [(f"random-{seed}", V.random_cluster(seed)) for seed in range(12)]
    out += [(f"openb-{seed}", OPENB.openb_preemption_dict(40, seed=seed)) for seed in range(3)]
    return out
