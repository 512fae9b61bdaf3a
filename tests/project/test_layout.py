"""The package layout: public names stay where users import them, packages name the layers,
and every name means one thing.

The layers themselves are checked by ``tests/project/test_layers.py``; ARCHITECTURE.md
describes them.
"""

from __future__ import annotations

import ast
import importlib
import re
from collections import defaultdict
from pathlib import Path

import pytest

import gangsched

SRC = Path(gangsched.__file__).resolve().parent
ROOT = SRC.parent.parent

#: Every public name these packages offered before their modules moved into subpackages.
PUBLIC_NAMES: dict[str, tuple[str, ...]] = {
    "gangsched": (
        "Bind",
        "ClusterState",
        "Config",
        "ConfigError",
        "CpSatPlacer",
        "DecisionError",
        "Decisions",
        "Eviction",
        "Explanation",
        "GangschedError",
        "GpuRequest",
        "Gpus",
        "GreedyPlacer",
        "Hold",
        "HyperNode",
        "Job",
        "JobAction",
        "JobPhase",
        "JobPolicy",
        "JobStatus",
        "JointCpSatPlacer",
        "NetworkTopology",
        "Node",
        "NodeExplanation",
        "Pipeline",
        "PlacementError",
        "PlacementInfo",
        "Queue",
        "QueueState",
        "QueueStatus",
        "Refusal",
        "Registry",
        "ResourceSpec",
        "Resources",
        "Rule",
        "Session",
        "Snapshot",
        "SnapshotError",
        "SolverError",
        "Statement",
        "Taint",
        "Task",
        "TaskPhase",
        "TaskTemplate",
        "Toleration",
        "TopologyMode",
        "Vote",
        "__version__",
        "default_registry",
        "explain",
        "open_session",
        "parse_quantity",
        "schedule",
        "validate_placement",
    ),
    "gangsched.testing": (
        "ALL_CHECKS",
        "Check",
        "InvariantViolation",
        "SchedulerAdapter",
        "SchedulerMachine",
        "check_all",
        "check_capacity",
        "check_consolidation",
        "check_cycle",
        "check_deterministic",
        "check_evictions",
        "check_gang_atomicity",
        "check_known_objects",
        "check_node_affinity",
        "check_queue_capability",
        "check_reasons",
        "check_schedulable_nodes",
        "check_snapshot_unmutated",
        "check_topology",
        "find_cycle",
    ),
    "gangsched.sim": (),
    "gangsched.io": (
        "NodeTable",
        "PodTable",
        "load_nodes",
        "load_pods",
    ),
    "gangsched.placement": (
        "CpSatPlacer",
        "GangPlacement",
        "GangRequest",
        "GreedyPlacer",
        "JointCpSatPlacer",
        "PlacementProblem",
        "PlacementResult",
        "Placer",
        "Status",
        "placement_objective",
        "validate_placement",
    ),
    "gangsched.state": ("ClusterState",),
}


@pytest.mark.parametrize("package", sorted(PUBLIC_NAMES))
def test_public_names_are_still_importable_from_their_package(package: str) -> None:
    module = importlib.import_module(package)
    missing = [name for name in PUBLIC_NAMES[package] if not hasattr(module, name)]
    assert not missing, f"{package} lost {missing}"
    declared = getattr(module, "__all__", ())
    assert all(hasattr(module, name) for name in declared), "__all__ names a missing name"


def _packages() -> list[Path]:
    return sorted(p.parent for p in SRC.rglob("__init__.py"))


def _family(stem: str) -> str | None:
    """The prefix an underscore module shares with its siblings: ``_model_jobs`` → ``_model``."""
    if not stem.startswith("_") or stem.startswith("__"):
        return None
    head, sep, _ = stem[1:].partition("_")
    return "_" + head if sep else None


def test_no_package_holds_a_family_of_underscore_siblings() -> None:
    """Three or more ``_prefix_*`` modules side by side are a package waiting to happen."""
    offenders = []
    for pkg in _packages():
        families: dict[str, list[str]] = defaultdict(list)
        for path in pkg.glob("*.py"):
            family = _family(path.stem)
            if family:
                families[family].append(path.stem)
        offenders += [
            f"{pkg.relative_to(SRC.parent)}: {sorted(members)}"
            for members in families.values()
            if len(members) >= 3
        ]
    assert not offenders, offenders


def test_family_detection() -> None:
    assert _family("_model_jobs") == "_model"
    assert _family("_frozen") is None
    assert _family("__init__") is None
    assert _family("model") is None


_ALIAS_VALUE = (ast.Subscript, ast.BinOp, ast.Attribute)


def _public_types(tree: ast.Module) -> list[str]:
    """Top-level public classes and type aliases (``Name = tuple[str, str]``) of a module."""
    out = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            out.append(node.name)
        elif (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and re.fullmatch(r"[A-Z][a-z]\w*", node.targets[0].id)
            and isinstance(node.value, ast.Subscript)
        ):
            out.append(node.targets[0].id)
    return out


def test_no_two_public_types_share_a_name() -> None:
    owners: dict[str, list[str]] = defaultdict(list)
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for name in _public_types(tree):
            owners[name].append(str(path.relative_to(SRC)))
    shared = {name: paths for name, paths in owners.items() if len(paths) > 1}
    assert not shared, shared


def test_public_type_finder_sees_classes_and_aliases() -> None:
    tree = ast.parse("class A: ...\nclass _B: ...\nRefusal = tuple[str, str]\nLIMIT = 3\n")
    assert _public_types(tree) == ["A", "Refusal"]


def test_no_module_re_exports_private_names() -> None:
    """``from x import _name as _name`` keeps an old private name alive for old importers;
    import from the owner instead."""
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                offenders += [
                    f"{path.relative_to(SRC)}:{node.lineno} {a.name}"
                    for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__") and a.asname == a.name
                ]
    assert not offenders, offenders


def test_modules_cite_files_the_repository_has() -> None:
    """Docstrings point at ARCHITECTURE.md, not at a design document the repository lacks."""
    assert (ROOT / "ARCHITECTURE.md").is_file()
    cited = [
        str(p.relative_to(SRC))
        for p in SRC.rglob("*.py")
        if "design.md" in p.read_text(encoding="utf-8")
    ]
    assert not cited, cited


def _rule_homes() -> list[tuple[str, str]]:
    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    section = text.split("## Where each rule lives", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "---" not in line]
    out = []
    for row in rows[1:]:
        rule, home = row.strip("|").split("|", 1)
        out.append((rule.strip(), home))
    return out


@pytest.mark.parametrize(
    "needle", ["placement gate", "the fit rule", "victim rules", "fair-share figures"]
)
def test_architecture_names_the_home_of_each_rule(needle: str) -> None:
    """A newcomer finds each rule's module in one step: its row names files that exist."""
    rows = [(rule, home) for rule, home in _rule_homes() if needle in rule]
    assert rows, f"ARCHITECTURE.md has no row for {needle!r}"
    for _, home in rows:
        paths = re.findall(r"`([\w/]+\.py)`", home)
        assert paths, home
        for rel in paths:
            assert (SRC / rel).is_file(), f"ARCHITECTURE.md names {rel}, which does not exist"
