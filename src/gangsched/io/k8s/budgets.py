"""``policy/v1 PodDisruptionBudget`` manifests → :class:`~gangsched.model.DisruptionBudget`.

A budget's ``spec.selector`` (``matchLabels`` and ``matchExpressions`` with ``In``, ``NotIn``,
``Exists``, ``DoesNotExist``) is matched against the labels of the pods of its namespace — a
Pod's own labels, a replica synthesized from a workload's template the template's labels — and
becomes the list of task names the budget covers. An empty selector covers every pod of the
namespace (policy/v1). ``minAvailable`` / ``maxUnavailable`` are an integer or a percentage
string; exactly one must be set.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gangsched.errors import SnapshotError
from gangsched.io.k8s.fields import Ref, get_list, get_map, get_mappings, get_str, get_str_map
from gangsched.io.k8s.records import qualify
from gangsched.model import DisruptionBudget

__all__ = ["BudgetDraft", "read_budget", "resolve_budgets"]

_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


@dataclass(frozen=True, slots=True)
class BudgetDraft:
    ref: Ref
    match_labels: Mapping[str, str]
    expressions: tuple[tuple[str, str, frozenset[str]], ...]
    min_available: int | str | None
    max_unavailable: int | str | None

    def matches(self, labels: Mapping[str, str]) -> bool:
        if any(labels.get(k) != v for k, v in self.match_labels.items()):
            return False
        for key, op, values in self.expressions:
            has = key in labels
            if op == "In" and not (has and labels[key] in values):
                return False
            if op == "NotIn" and has and labels[key] in values:
                return False
            if op == "Exists" and not has:
                return False
            if op == "DoesNotExist" and has:
                return False
        return True


def _amount(spec: Mapping[str, Any], key: str, ref: Ref) -> int | str | None:
    value = spec.get(key)
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        raise ref.error(f"spec.{key}", f"expected an integer or a percentage, got {value!r}")
    return value


def read_budget(obj: Mapping[str, Any], ref: Ref) -> BudgetDraft:
    """Read one PodDisruptionBudget (its selector and amounts; checked again as a record)."""
    spec = get_map(obj, "spec", ref, "")
    selector = get_map(spec, "selector", ref, "spec")
    labels = get_str_map(selector, "matchLabels", ref, "spec.selector")
    exprs = []
    for e, path in get_mappings(selector, "matchExpressions", ref, "spec.selector"):
        key = get_str(e, "key", ref, path)
        op = get_str(e, "operator", ref, path)
        if not key:
            raise ref.error(f"{path}.key", "missing")
        if op not in _OPERATORS:
            raise ref.error(f"{path}.operator", f"expected one of {', '.join(_OPERATORS)}")
        values = get_list(e, "values", ref, path)
        if not all(isinstance(v, str) for v in values):
            raise ref.error(f"{path}.values", "expected a list of strings")
        exprs.append((key, op, frozenset(values)))
    return BudgetDraft(
        ref=ref,
        match_labels=labels,
        expressions=tuple(exprs),
        min_available=_amount(spec, "minAvailable", ref),
        max_unavailable=_amount(spec, "maxUnavailable", ref),
    )


def resolve_budgets(
    drafts: Sequence[BudgetDraft], pods: Iterable[tuple[str, str, Mapping[str, str]]]
) -> list[DisruptionBudget]:
    """The budgets, each covering the tasks (``(task name, namespace, labels)`` of ``pods``, in
    that order) its selector matches in its namespace."""
    pods = list(pods)
    out = []
    for d in drafts:
        ns = d.ref.namespace
        tasks = [name for name, pod_ns, labels in pods if pod_ns == ns and d.matches(labels)]
        try:
            out.append(
                DisruptionBudget(
                    name=qualify(ns, d.ref.name),
                    tasks=tuple(tasks),
                    min_available=d.min_available,
                    max_unavailable=d.max_unavailable,
                )
            )
        except SnapshotError as exc:
            field = {"min_available": "spec.minAvailable", "max_unavailable": "spec.maxUnavailable"}
            raise d.ref.error(field.get(exc.field or "", "spec"), exc.detail) from None
    return out
