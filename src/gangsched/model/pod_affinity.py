"""Pod affinity, pod anti-affinity and topology spread: constraints between pods.

Kubernetes lets a pod ask to run near other pods (``podAffinity``), away from them
(``podAntiAffinity``) or evenly spread over a topology (``topologySpreadConstraints``). Each
names the other pods by a :class:`LabelSelector` over pod labels, in some namespaces, and
the topology by a node label key (``topology_key``): two nodes are in the same domain when
they carry the key with the same value; a node without the key is in no domain.

* :class:`PodAffinityTerm` — a selector, the namespaces it looks in (empty: the pod's own)
  and a topology key. A *required* term must hold where the pod lands, a *preferred* one
  (:class:`WeightedPodAffinityTerm`, weight 1..100) adds to or takes from a node's score.
* :class:`PodAffinity` — the required and preferred terms of ``podAffinity`` or of
  ``podAntiAffinity`` (the same shape; the task field says which).
* :class:`TopologySpreadConstraint` — ``max_skew``, ``topology_key``,
  ``when_unsatisfiable`` (``DoNotSchedule``: a filter; ``ScheduleAnyway``: a score), a
  selector and an optional ``min_domains``.

The selector's operators are ``In``, ``NotIn``, ``Exists`` and ``DoesNotExist``. A term or
constraint without a selector matches no pod; an empty selector (``{}``) matches every pod
(Kubernetes' rule). Malformed input — an unknown operator, a term without a topology key,
``max_skew`` below 1, a weight outside 1..100, an empty list of required terms — is refused
with a :class:`~gangsched.errors.SnapshotError` naming the task and the field path
(``pod_anti_affinity.required[0].topology_key``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gangsched._frozen import FrozenDict
from gangsched.errors import SnapshotError
from gangsched.model.affinity import (
    _describe,
    _is,
    _list,
    _mapping,
    _requirement_dict,
    _tuple_fields,
)

__all__ = [
    "LABEL_SELECTOR_OPERATORS",
    "ROLE_LABEL",
    "UNSATISFIABLE_ACTIONS",
    "LabelSelector",
    "LabelSelectorRequirement",
    "PodAffinity",
    "PodAffinityTerm",
    "TopologySpreadConstraint",
    "WeightedPodAffinityTerm",
]

#: Operators of a label selector's expression, in Kubernetes' spelling.
LABEL_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
#: The pod label that names a task's role (Volcano's job controller sets it on every pod of
#: a task): selectors see a task's role under this key (:attr:`Task.pod_labels`).
ROLE_LABEL = "volcano.sh/task-spec"
#: ``when_unsatisfiable`` of a spread constraint: a filter, or a score.
UNSATISFIABLE_ACTIONS = ("DoNotSchedule", "ScheduleAnyway")


def _fail(detail: str, kind: str, name: str, field: str) -> SnapshotError:
    return SnapshotError(detail, kind=kind, name=name, field=field)


def _strings(value: object, kind: str, name: str, where: str) -> tuple[str, ...]:
    items = tuple(_list(value, kind, name, where))
    for i, v in enumerate(items):
        if not isinstance(v, str):
            raise _fail(f"expected a string, got {type(v).__name__}", kind, name, f"{where}[{i}]")
    return items


@dataclass(frozen=True, slots=True, kw_only=True)
class LabelSelectorRequirement:
    """One expression of a selector: ``key`` ``operator`` ``values``."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _tuple_fields(self, "values")

    def check(self, *, kind: str, name: str, field: str) -> None:
        if not isinstance(self.key, str) or not self.key:
            raise _fail(f"expected a non-empty key, got {self.key!r}", kind, name, f"{field}.key")
        if not isinstance(self.values, tuple) or not all(isinstance(v, str) for v in self.values):
            raise _fail(f"expected a list of strings, got {self.values!r}", kind, name, field)
        op = self.operator
        if op not in LABEL_SELECTOR_OPERATORS:
            raise _fail(
                f"unknown operator {op!r} (expected one of {', '.join(LABEL_SELECTOR_OPERATORS)})",
                kind,
                name,
                f"{field}.operator",
            )
        if op in ("In", "NotIn") and not self.values:
            raise _fail(f"{op} needs at least one value", kind, name, f"{field}.values")
        if op in ("Exists", "DoesNotExist") and self.values:
            raise _fail(f"{op} takes no values", kind, name, f"{field}.values")

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        op = self.operator
        if op == "In":
            return value is not None and value in self.values
        if op == "NotIn":
            return value is None or value not in self.values
        if op == "Exists":
            return value is not None
        return value is None

    def describe(self) -> str:
        return _describe(self.key, self.operator, self.values)

    def to_dict(self) -> dict[str, object]:
        return _requirement_dict(self.key, self.operator, self.values)

    @classmethod
    def from_dict(cls, d: object, *, kind: str, name: str, field: str) -> LabelSelectorRequirement:
        m = _mapping(d, frozenset({"key", "operator", "values"}), kind, name, field)
        return cls(
            key=m.get("key", ""),
            operator=m.get("operator", ""),
            values=_strings(m.get("values"), kind, name, f"{field}.values"),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class LabelSelector:
    """Pods whose labels hold every ``match_labels`` pair and meet every expression (an
    empty selector matches every pod)."""

    match_labels: FrozenDict[str, str] = field(default_factory=FrozenDict)
    match_expressions: tuple[LabelSelectorRequirement, ...] = ()

    if TYPE_CHECKING:  # what the constructor accepts; the fields hold the checked values

        def __init__(
            self,
            *,
            match_labels: Mapping[str, str] = ...,
            match_expressions: Iterable[LabelSelectorRequirement] = ...,
        ) -> None: ...

    def __post_init__(self) -> None:
        if isinstance(self.match_labels, dict):
            object.__setattr__(self, "match_labels", FrozenDict(self.match_labels))
        _tuple_fields(self, "match_expressions")

    def check(self, *, kind: str, name: str, field: str) -> None:
        labels = self.match_labels
        if not isinstance(labels, Mapping):
            raise _fail("expected a mapping of labels", kind, name, f"{field}.match_labels")
        for k, v in labels.items():
            if not isinstance(k, str) or not k or not isinstance(v, str):
                raise _fail(
                    f"expected a non-empty string key and a string value, got {k!r}: {v!r}",
                    kind,
                    name,
                    f"{field}.match_labels",
                )
        if not isinstance(self.match_expressions, tuple):
            raise _fail("expected a list", kind, name, f"{field}.match_expressions")
        for i, r in enumerate(self.match_expressions):
            _is(r, LabelSelectorRequirement, kind, name, f"{field}.match_expressions[{i}]")
            r.check(kind=kind, name=name, field=f"{field}.match_expressions[{i}]")

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.match_labels.items()) and all(
            r.matches(labels) for r in self.match_expressions
        )

    def describe(self) -> str:
        parts = [f"{k}={v}" for k, v in sorted(self.match_labels.items())]
        parts += [r.describe() for r in self.match_expressions]
        return ", ".join(parts) if parts else "any pod"

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {}
        if self.match_labels:
            out["match_labels"] = dict(self.match_labels)
        if self.match_expressions:
            out["match_expressions"] = [r.to_dict() for r in self.match_expressions]
        return out

    @classmethod
    def from_dict(cls, d: object, *, kind: str, name: str, field: str) -> LabelSelector:
        m = _mapping(d, frozenset({"match_labels", "match_expressions"}), kind, name, field)
        labels = m.get("match_labels") or {}
        if not isinstance(labels, Mapping):
            raise _fail("expected a mapping of labels", kind, name, f"{field}.match_labels")
        exprs = tuple(
            LabelSelectorRequirement.from_dict(
                x, kind=kind, name=name, field=f"{field}.match_expressions[{i}]"
            )
            for i, x in enumerate(
                _list(m.get("match_expressions"), kind, name, f"{field}.match_expressions")
            )
        )
        return cls(match_labels=FrozenDict(labels), match_expressions=exprs)


def _selector(value: object, kind: str, name: str, field: str) -> LabelSelector | None:
    return (
        None if value is None else LabelSelector.from_dict(value, kind=kind, name=name, field=field)
    )


def _check_key(key: object, kind: str, name: str, field: str) -> None:
    if not isinstance(key, str) or not key:
        raise _fail(f"expected a non-empty topology key, got {key!r}", kind, name, field)


@dataclass(frozen=True, slots=True, kw_only=True)
class PodAffinityTerm:
    """Pods matching ``label_selector`` in ``namespaces`` (empty: the pod's own namespace),
    in the domain of ``topology_key``."""

    topology_key: str
    label_selector: LabelSelector | None = None
    namespaces: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _tuple_fields(self, "namespaces")

    def check(self, *, kind: str, name: str, field: str) -> None:
        _check_key(self.topology_key, kind, name, f"{field}.topology_key")
        if self.label_selector is not None:
            _is(self.label_selector, LabelSelector, kind, name, f"{field}.label_selector")
            self.label_selector.check(kind=kind, name=name, field=f"{field}.label_selector")
        if not isinstance(self.namespaces, tuple) or not all(
            isinstance(n, str) and n for n in self.namespaces
        ):
            raise _fail(
                f"expected a list of namespace names, got {self.namespaces!r}",
                kind,
                name,
                f"{field}.namespaces",
            )

    def namespaces_for(self, own: str) -> frozenset[str]:
        """The namespaces the term looks in, for a pod of namespace ``own``."""
        return frozenset(self.namespaces) if self.namespaces else frozenset((own,))

    def matches(
        self, namespaces: frozenset[str], namespace: str, labels: Mapping[str, str]
    ) -> bool:
        """Whether a pod of ``namespace`` with ``labels`` is one the term names (its
        namespaces resolved to ``namespaces``)."""
        sel = self.label_selector
        return sel is not None and namespace in namespaces and sel.matches(labels)

    def describe(self) -> str:
        sel = "no pod" if self.label_selector is None else self.label_selector.describe()
        return f"pods {sel} on topology {self.topology_key}"

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"topology_key": self.topology_key}
        if self.label_selector is not None:
            out["label_selector"] = self.label_selector.to_dict()
        if self.namespaces:
            out["namespaces"] = list(self.namespaces)
        return out

    @classmethod
    def from_dict(cls, d: object, *, kind: str, name: str, field: str) -> PodAffinityTerm:
        keys = frozenset({"topology_key", "label_selector", "namespaces"})
        m = _mapping(d, keys, kind, name, field)
        if not m.get("topology_key"):
            raise _fail("missing topology key", kind, name, f"{field}.topology_key")
        return cls(
            topology_key=m["topology_key"],
            label_selector=_selector(
                m.get("label_selector"), kind, name, f"{field}.label_selector"
            ),
            namespaces=_strings(m.get("namespaces"), kind, name, f"{field}.namespaces"),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class WeightedPodAffinityTerm:
    """A preferred term: ``weight`` (1..100) for each matching pod in the node's domain."""

    weight: int
    term: PodAffinityTerm

    def check(self, *, kind: str, name: str, field: str) -> None:
        w = self.weight
        if isinstance(w, bool) or not isinstance(w, int) or not 1 <= w <= 100:
            raise _fail(
                f"expected an integer weight in 1..100, got {w!r}", kind, name, f"{field}.weight"
            )
        _is(self.term, PodAffinityTerm, kind, name, f"{field}.term")
        self.term.check(kind=kind, name=name, field=f"{field}.term")

    def to_dict(self) -> dict[str, object]:
        return {"weight": self.weight, "term": self.term.to_dict()}

    @classmethod
    def from_dict(cls, d: object, *, kind: str, name: str, field: str) -> WeightedPodAffinityTerm:
        m = _mapping(d, frozenset({"weight", "term"}), kind, name, field)
        if "term" not in m:
            raise _fail("missing", kind, name, f"{field}.term")
        term = PodAffinityTerm.from_dict(m["term"], kind=kind, name=name, field=f"{field}.term")
        return cls(weight=m.get("weight", 0), term=term)


@dataclass(frozen=True, slots=True, kw_only=True)
class PodAffinity:
    """``required`` terms (all must hold) and ``preferred`` weighted terms of
    ``podAffinity`` or ``podAntiAffinity``."""

    required: tuple[PodAffinityTerm, ...] = ()
    preferred: tuple[WeightedPodAffinityTerm, ...] = ()

    def __post_init__(self) -> None:
        _tuple_fields(self, "required", "preferred")

    def check(self, *, kind: str, name: str, field: str) -> None:
        if not isinstance(self.required, tuple) or not isinstance(self.preferred, tuple):
            raise _fail("expected lists of terms", kind, name, field)
        if not self.required and not self.preferred:
            raise _fail(
                "empty pod (anti-)affinity (give required or preferred terms, or leave it out)",
                kind,
                name,
                field,
            )
        for i, t in enumerate(self.required):
            _is(t, PodAffinityTerm, kind, name, f"{field}.required[{i}]")
            t.check(kind=kind, name=name, field=f"{field}.required[{i}]")
        for i, p in enumerate(self.preferred):
            _is(p, WeightedPodAffinityTerm, kind, name, f"{field}.preferred[{i}]")
            p.check(kind=kind, name=name, field=f"{field}.preferred[{i}]")

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {}
        if self.required:
            out["required"] = [t.to_dict() for t in self.required]
        if self.preferred:
            out["preferred"] = [p.to_dict() for p in self.preferred]
        return out

    @classmethod
    def from_dict(cls, d: object, *, kind: str, name: str, field: str) -> PodAffinity:
        m = _mapping(d, frozenset({"required", "preferred"}), kind, name, field)
        required = tuple(
            PodAffinityTerm.from_dict(x, kind=kind, name=name, field=f"{field}.required[{i}]")
            for i, x in enumerate(_list(m.get("required"), kind, name, f"{field}.required"))
        )
        preferred = tuple(
            WeightedPodAffinityTerm.from_dict(
                x, kind=kind, name=name, field=f"{field}.preferred[{i}]"
            )
            for i, x in enumerate(_list(m.get("preferred"), kind, name, f"{field}.preferred"))
        )
        return cls(required=required, preferred=preferred)


@dataclass(frozen=True, slots=True, kw_only=True)
class TopologySpreadConstraint:
    """Matching pods (``label_selector``, the pod's own namespace) spread over the domains of
    ``topology_key``: a domain may hold at most ``max_skew`` more of them than the emptiest
    eligible domain. ``min_domains`` (only with ``DoNotSchedule``): while fewer domains are
    eligible, the emptiest counts as 0."""

    max_skew: int
    topology_key: str
    when_unsatisfiable: str = "DoNotSchedule"
    label_selector: LabelSelector | None = None
    min_domains: int | None = None

    def check(self, *, kind: str, name: str, field: str) -> None:
        skew = self.max_skew
        if isinstance(skew, bool) or not isinstance(skew, int) or skew < 1:
            raise _fail(
                f"max_skew must be an integer >= 1, got {skew!r}", kind, name, f"{field}.max_skew"
            )
        _check_key(self.topology_key, kind, name, f"{field}.topology_key")
        if self.when_unsatisfiable not in UNSATISFIABLE_ACTIONS:
            raise _fail(
                f"unknown when_unsatisfiable {self.when_unsatisfiable!r} (expected "
                f"{' or '.join(UNSATISFIABLE_ACTIONS)})",
                kind,
                name,
                f"{field}.when_unsatisfiable",
            )
        if self.label_selector is not None:
            _is(self.label_selector, LabelSelector, kind, name, f"{field}.label_selector")
            self.label_selector.check(kind=kind, name=name, field=f"{field}.label_selector")
        md = self.min_domains
        if md is not None:
            if isinstance(md, bool) or not isinstance(md, int) or md < 1:
                raise _fail(
                    f"min_domains must be an integer >= 1, got {md!r}",
                    kind,
                    name,
                    f"{field}.min_domains",
                )
            if self.when_unsatisfiable != "DoNotSchedule":
                raise _fail(
                    "min_domains needs when_unsatisfiable DoNotSchedule",
                    kind,
                    name,
                    f"{field}.min_domains",
                )

    @property
    def hard(self) -> bool:
        return self.when_unsatisfiable == "DoNotSchedule"

    def matches(self, namespace: str, own: str, labels: Mapping[str, str]) -> bool:
        """Whether a pod of ``namespace`` with ``labels`` counts for a pod of namespace
        ``own``."""
        sel = self.label_selector
        return sel is not None and namespace == own and sel.matches(labels)

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "max_skew": self.max_skew,
            "topology_key": self.topology_key,
            "when_unsatisfiable": self.when_unsatisfiable,
        }
        if self.label_selector is not None:
            out["label_selector"] = self.label_selector.to_dict()
        if self.min_domains is not None:
            out["min_domains"] = self.min_domains
        return out

    @classmethod
    def from_dict(cls, d: object, *, kind: str, name: str, field: str) -> TopologySpreadConstraint:
        keys = frozenset(
            {"max_skew", "topology_key", "when_unsatisfiable", "label_selector", "min_domains"}
        )
        m = _mapping(d, keys, kind, name, field)
        if "max_skew" not in m:
            raise _fail("missing", kind, name, f"{field}.max_skew")
        if not m.get("topology_key"):
            raise _fail("missing topology key", kind, name, f"{field}.topology_key")
        return cls(
            max_skew=m["max_skew"],
            topology_key=m["topology_key"],
            when_unsatisfiable=m.get("when_unsatisfiable", "DoNotSchedule"),
            label_selector=_selector(
                m.get("label_selector"), kind, name, f"{field}.label_selector"
            ),
            min_domains=m.get("min_domains"),
        )
