"""Kubernetes manifests for the disruption controls: PriorityClass and pod
``preemptionPolicy``, and ``policy/v1 PodDisruptionBudget``."""

from __future__ import annotations

from typing import Any

import pytest

import gangsched as gs
from _builders import node_manifest
from gangsched.io.k8s import load_objects


def node(name: str = "n0") -> dict[str, Any]:
    return node_manifest(name)


def pod(name: str, labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": labels or {}},
        "spec": {
            "schedulerName": "volcano",
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
            **spec,
        },
        "status": {"phase": "Pending"},
    }


def priority_class(name: str, value: int, **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
        **extra,
    }


def pdb(name: str, selector: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"selector": selector, **spec},
    }


def vcjob(name: str, labels: dict[str, str]) -> dict[str, Any]:
    template = {
        "metadata": {"labels": labels},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
    }
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "schedulerName": "volcano",
            "tasks": [{"name": "w", "replicas": 2, "template": template}],
        },
    }


def policy_of(c: Any, task: str) -> str:
    return str(c.snapshot.task(task).preemption_policy)


def test_a_never_priority_class_makes_its_pods_never_preempt() -> None:
    c = load_objects(
        [
            node(),
            priority_class("no-preempt", 1000, preemptionPolicy="Never"),
            priority_class("normal", 10),
            pod("a", priorityClassName="no-preempt"),
            pod("b", priorityClassName="normal"),
            pod("c"),
        ]
    )
    assert policy_of(c, "a") == "Never"
    assert c.snapshot.task("a").priority == 1000  # keeps its priority
    assert policy_of(c, "b") == "PreemptLowerPriority"
    assert policy_of(c, "c") == "PreemptLowerPriority"


def test_the_pod_field_wins_and_the_default_class_applies() -> None:
    c = load_objects(
        [
            node(),
            priority_class("dflt", 5, globalDefault=True, preemptionPolicy="Never"),
            priority_class("normal", 10),
            pod("a"),
            pod("b", priorityClassName="normal", preemptionPolicy="Never"),
            pod("c", priorityClassName="dflt", preemptionPolicy="PreemptLowerPriority"),
        ]
    )
    assert [policy_of(c, t) for t in "abc"] == ["Never", "Never", "PreemptLowerPriority"]


@pytest.mark.parametrize(
    "doc",
    [
        priority_class("x", 1, preemptionPolicy="Sometimes"),
        pod("p", preemptionPolicy="never"),
    ],
)
def test_an_unknown_preemption_policy_names_the_field(doc: dict[str, Any]) -> None:
    with pytest.raises(gs.SnapshotError) as err:
        load_objects([node(), doc])
    assert (err.value.field or "").endswith("preemptionPolicy")


def test_a_pdb_covers_the_pods_its_selector_matches() -> None:
    c = load_objects(
        [
            node(),
            pod("web-0", {"app": "web", "tier": "front"}),
            pod("web-1", {"app": "web"}),
            pod("db-0", {"app": "db"}),
            pdb("web", {"matchLabels": {"app": "web"}}, minAvailable=1),
            pdb(
                "front",
                {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["front"]}]},
                maxUnavailable="50%",
            ),
            pdb(
                "not-db",
                {"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["db"]}]},
                maxUnavailable=0,
            ),
            pdb("all", {}, minAvailable="100%"),
        ]
    )
    budgets = {b.name: b for b in c.snapshot.disruption_budgets}
    assert budgets["web"].tasks == ("web-0", "web-1") and budgets["web"].min_available == 1
    assert budgets["front"].tasks == ("web-0",) and budgets["front"].max_unavailable == "50%"
    assert budgets["not-db"].tasks == ("web-0", "web-1")
    assert budgets["all"].tasks == ("web-0", "web-1", "db-0")


def test_a_pdb_matches_replicas_by_their_template_labels() -> None:
    c = load_objects(
        [
            node(),
            vcjob("train", {"app": "train"}),
            pdb("t", {"matchLabels": {"app": "train"}}, maxUnavailable=1),
        ]
    )
    (budget,) = c.snapshot.disruption_budgets
    assert budget.tasks == ("train-w-0", "train-w-1")


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"minAvailable": 1, "maxUnavailable": 1}, "spec.minAvailable"),
        ({}, "spec.minAvailable"),
        ({"minAvailable": "lots"}, "spec.minAvailable"),
        ({"maxUnavailable": 1.5}, "spec.maxUnavailable"),
    ],
)
def test_bad_pdb_amounts_name_the_field(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(gs.SnapshotError) as err:
        load_objects([node(), pod("a"), pdb("b", {}, **spec)])
    assert err.value.kind == "PodDisruptionBudget" and err.value.field == field


def test_an_unknown_selector_operator_is_refused() -> None:
    bad = pdb("b", {"matchExpressions": [{"key": "a", "operator": "Gt"}]}, minAvailable=1)
    with pytest.raises(gs.SnapshotError) as err:
        load_objects([node(), pod("a"), bad])
    assert err.value.field == "spec.selector.matchExpressions[0].operator"
