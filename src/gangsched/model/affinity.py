"""Node affinity: Kubernetes' ``nodeAffinity`` as frozen records.

A :class:`NodeAffinity` has ``required`` terms (a node qualifies when it matches *any* term)
and ``preferred`` weighted terms (a node's preference is the sum of the weights of the terms
it matches). A term matches a node when *every* requirement of it does; a requirement reads
one node label (``match_expressions``) or the node's name (``match_fields`` on
``metadata.name``). The operators and their rules are Kubernetes' (its label selector and its
node-affinity helpers):

========================  ==================================================================
``In``                    the label is present and its value is one of ``values``
``NotIn``                 the label is absent, or its value is none of ``values``
``Exists``                the label is present (``values`` empty)
``DoesNotExist``          the label is absent (``values`` empty)
``Gt`` / ``Lt``           the label is present, its value is an integer, and it is greater
                          (less) than the one integer of ``values``
========================  ==================================================================

``match_fields`` accept only the key ``metadata.name`` with ``In`` or ``NotIn`` and exactly
one value. A term with neither expressions nor fields would match no node; it is refused, as
are an unknown operator, a ``Gt``/``Lt`` value that is not an integer, ``In``/``NotIn``
without values, ``Exists``/``DoesNotExist`` with values and a preferred weight outside
1..100 (Kubernetes' API validation). Errors are :class:`~gangsched.errors.SnapshotError`\\ s
naming the task and the field path (``node_affinity.required[0].match_expressions[1]``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gangsched.errors import SnapshotError

__all__ = [
    "NODE_NAME_FIELD",
    "NODE_SELECTOR_OPERATORS",
    "NodeAffinity",
    "NodeGroupAffinity",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "PreferredSchedulingTerm",
    "TaskTopology",
    "parse_int64",
]

#: Operators of a node selector requirement, in Kubernetes' spelling.
NODE_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
#: The one field a ``match_fields`` requirement may read: the node's name.
NODE_NAME_FIELD = "metadata.name"
_FIELD_OPERATORS = ("In", "NotIn")
_INT64 = 1 << 63


def parse_int64(text: str) -> int | None:
    """``text`` as Go's ``strconv.ParseInt(text, 10, 64)`` reads it (an optional sign, then
    decimal digits, within int64), else None."""
    body = text[1:] if text[:1] in ("+", "-") else text
    if not body or not body.isascii() or not body.isdigit():
        return None
    value = int(text)
    return value if -_INT64 <= value < _INT64 else None


def _describe(key: str, operator: str, values: tuple[str, ...]) -> str:
    """A requirement in words (node or label selector): ``zone In [a, b]``, ``gpu Exists``,
    ``rank Gt 3``."""
    if operator in ("Exists", "DoesNotExist"):
        return f"{key} {operator}"
    if operator in ("Gt", "Lt"):
        return f"{key} {operator} {values[0]}"
    return f"{key} {operator} [{', '.join(values)}]"


def _requirement_dict(key: str, operator: str, values: tuple[str, ...]) -> dict[str, object]:
    """A requirement's interchange form (node or label selector): ``values`` only when any."""
    out: dict[str, object] = {"key": key, "operator": operator}
    if values:
        out["values"] = list(values)
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeSelectorRequirement:
    """One requirement: ``key``, ``operator`` and ``values`` (see the module's table)."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _tuple_fields(self, "values")

    def check(self, *, kind: str, name: str, field: str, on_field: bool = False) -> None:
        """Refuse what Kubernetes refuses, naming ``field``."""

        def fail(detail: str, sub: str = "") -> SnapshotError:
            return SnapshotError(detail, kind=kind, name=name, field=f"{field}{sub}")

        if not isinstance(self.key, str) or not self.key:
            raise fail(f"expected a non-empty key, got {self.key!r}", ".key")
        if not isinstance(self.values, tuple) or not all(isinstance(v, str) for v in self.values):
            raise fail(f"expected a list of strings, got {self.values!r}", ".values")
        op = self.operator
        if on_field:
            if self.key != NODE_NAME_FIELD:
                raise fail(f"unknown field {self.key!r} (only {NODE_NAME_FIELD!r})", ".key")
            if op not in _FIELD_OPERATORS:
                raise fail(f"unknown operator {op!r} for a field (In or NotIn)", ".operator")
            if len(self.values) != 1:
                raise fail(f"a field's {op} takes exactly one value", ".values")
            return
        if op not in NODE_SELECTOR_OPERATORS:
            raise fail(
                f"unknown operator {op!r} (expected one of {', '.join(NODE_SELECTOR_OPERATORS)})",
                ".operator",
            )
        if op in ("In", "NotIn") and not self.values:
            raise fail(f"{op} needs at least one value", ".values")
        if op in ("Exists", "DoesNotExist") and self.values:
            raise fail(f"{op} takes no values", ".values")
        if op in ("Gt", "Lt"):
            if len(self.values) != 1:
                raise fail(f"{op} takes exactly one value", ".values")
            if parse_int64(self.values[0]) is None:
                raise fail(f"{op} needs an integer, got {self.values[0]!r}", ".values[0]")

    def matches(self, value: str | None) -> bool:
        """Whether a node whose label (or name) is ``value`` (None: absent) meets it."""
        op = self.operator
        if op == "In":
            return value is not None and value in self.values
        if op == "NotIn":
            return value is None or value not in self.values
        if op == "Exists":
            return value is not None
        if op == "DoesNotExist":
            return value is None
        have = parse_int64(value) if value is not None else None
        want = parse_int64(self.values[0])
        if have is None or want is None:
            return False
        return have > want if op == "Gt" else have < want

    def describe(self) -> str:
        """``zone In [a, b]``, ``gpu Exists``, ``rank Gt 3``."""
        return _describe(self.key, self.operator, self.values)

    def to_dict(self) -> dict[str, object]:
        return _requirement_dict(self.key, self.operator, self.values)

    @classmethod
    def from_dict(cls, d: object, *, kind: str, name: str, field: str) -> NodeSelectorRequirement:
        m = _mapping(d, frozenset({"key", "operator", "values"}), kind, name, field)
        values = m.get("values")
        if values is None:
            values = ()
        if isinstance(values, str) or not isinstance(values, Sequence):
            raise SnapshotError(
                f"expected a list of strings, got {type(values).__name__}",
                kind=kind,
                name=name,
                field=f"{field}.values",
            )
        return cls(key=m.get("key", ""), operator=m.get("operator", ""), values=tuple(values))


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeSelectorTerm:
    """Requirements that must all hold: on labels (``match_expressions``) and on the node's
    name (``match_fields``)."""

    match_expressions: tuple[NodeSelectorRequirement, ...] = ()
    match_fields: tuple[NodeSelectorRequirement, ...] = ()

    def __post_init__(self) -> None:
        _tuple_fields(self, "match_expressions", "match_fields")

    def check(self, *, kind: str, name: str, field: str) -> None:
        if not self.match_expressions and not self.match_fields:
            raise SnapshotError(
                "an empty term matches no node (give match_expressions or match_fields)",
                kind=kind,
                name=name,
                field=field,
            )
        for i, r in enumerate(self.match_expressions):
            _is(r, NodeSelectorRequirement, kind, name, f"{field}.match_expressions[{i}]")
            r.check(kind=kind, name=name, field=f"{field}.match_expressions[{i}]")
        for i, r in enumerate(self.match_fields):
            _is(r, NodeSelectorRequirement, kind, name, f"{field}.match_fields[{i}]")
            r.check(kind=kind, name=name, field=f"{field}.match_fields[{i}]", on_field=True)

    def matches(self, node_name: str, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels.get(r.key)) for r in self.match_expressions) and all(
            r.matches(node_name) for r in self.match_fields
        )

    def describe(self) -> str:
        return " and ".join(r.describe() for r in (*self.match_expressions, *self.match_fields))

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {}
        if self.match_expressions:
            out["match_expressions"] = [r.to_dict() for r in self.match_expressions]
        if self.match_fields:
            out["match_fields"] = [r.to_dict() for r in self.match_fields]
        return out

    @classmethod
    def from_dict(cls, d: object, *, kind: str, name: str, field: str) -> NodeSelectorTerm:
        m = _mapping(d, frozenset({"match_expressions", "match_fields"}), kind, name, field)
        parts = []
        for key in ("match_expressions", "match_fields"):
            parts.append(
                tuple(
                    NodeSelectorRequirement.from_dict(
                        x, kind=kind, name=name, field=f"{field}.{key}[{i}]"
                    )
                    for i, x in enumerate(_list(m.get(key), kind, name, f"{field}.{key}"))
                )
            )
        return cls(match_expressions=parts[0], match_fields=parts[1])


@dataclass(frozen=True, slots=True, kw_only=True)
class PreferredSchedulingTerm:
    """A preferred term: nodes matching ``preference`` gain ``weight`` (1..100)."""

    weight: int
    preference: NodeSelectorTerm

    def check(self, *, kind: str, name: str, field: str) -> None:
        w = self.weight
        if isinstance(w, bool) or not isinstance(w, int) or not 1 <= w <= 100:
            raise SnapshotError(
                f"expected an integer weight in 1..100, got {w!r}",
                kind=kind,
                name=name,
                field=f"{field}.weight",
            )
        _is(self.preference, NodeSelectorTerm, kind, name, f"{field}.preference")
        self.preference.check(kind=kind, name=name, field=f"{field}.preference")

    def to_dict(self) -> dict[str, object]:
        return {"weight": self.weight, "preference": self.preference.to_dict()}

    @classmethod
    def from_dict(cls, d: object, *, kind: str, name: str, field: str) -> PreferredSchedulingTerm:
        m = _mapping(d, frozenset({"weight", "preference"}), kind, name, field)
        if "preference" not in m:
            raise SnapshotError("missing", kind=kind, name=name, field=f"{field}.preference")
        pref = NodeSelectorTerm.from_dict(
            m["preference"], kind=kind, name=name, field=f"{field}.preference"
        )
        return cls(weight=m.get("weight", 0), preference=pref)


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeAffinity:
    """``required``: terms OR-ed (empty: no requirement); ``preferred``: weighted terms
    summed in scoring."""

    required: tuple[NodeSelectorTerm, ...] = ()
    preferred: tuple[PreferredSchedulingTerm, ...] = ()

    def __post_init__(self) -> None:
        _tuple_fields(self, "required", "preferred")

    def check(self, *, kind: str, name: str, field: str) -> None:
        """Refuse a malformed requirement, naming ``kind`` ``name`` and the path below
        ``field``."""
        if not isinstance(self.required, tuple) or not isinstance(self.preferred, tuple):
            raise SnapshotError("expected lists of terms", kind=kind, name=name, field=field)
        if not self.required and not self.preferred:
            raise SnapshotError(
                "empty node affinity (give required or preferred terms, or leave it out)",
                kind=kind,
                name=name,
                field=field,
            )
        for i, t in enumerate(self.required):
            _is(t, NodeSelectorTerm, kind, name, f"{field}.required[{i}]")
            t.check(kind=kind, name=name, field=f"{field}.required[{i}]")
        for i, p in enumerate(self.preferred):
            _is(p, PreferredSchedulingTerm, kind, name, f"{field}.preferred[{i}]")
            p.check(kind=kind, name=name, field=f"{field}.preferred[{i}]")

    def allows(self, node_name: str, labels: Mapping[str, str]) -> bool:
        """Whether the required terms let a node with this name and labels in."""
        return not self.required or any(t.matches(node_name, labels) for t in self.required)

    def preference(self, node_name: str, labels: Mapping[str, str]) -> int:
        """The summed weights of the preferred terms the node matches."""
        return sum(p.weight for p in self.preferred if p.preference.matches(node_name, labels))

    def describe_required(self) -> str:
        """The required terms in words: ``zone In [a, b]``, or ``(a) or (b)``."""
        if len(self.required) == 1:
            return self.required[0].describe()
        return " or ".join(f"({t.describe()})" for t in self.required)

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {}
        if self.required:
            out["required"] = [t.to_dict() for t in self.required]
        if self.preferred:
            out["preferred"] = [p.to_dict() for p in self.preferred]
        return out

    @classmethod
    def from_dict(cls, d: object, *, kind: str, name: str, field: str) -> NodeAffinity:
        m = _mapping(d, frozenset({"required", "preferred"}), kind, name, field)
        if "required" in m and m["required"] is not None and not m["required"]:
            raise SnapshotError(
                "an empty list of required terms matches no node",
                kind=kind,
                name=name,
                field=f"{field}.required",
            )
        required = tuple(
            NodeSelectorTerm.from_dict(x, kind=kind, name=name, field=f"{field}.required[{i}]")
            for i, x in enumerate(_list(m.get("required"), kind, name, f"{field}.required"))
        )
        preferred = tuple(
            PreferredSchedulingTerm.from_dict(
                x, kind=kind, name=name, field=f"{field}.preferred[{i}]"
            )
            for i, x in enumerate(_list(m.get("preferred"), kind, name, f"{field}.preferred"))
        )
        return cls(required=required, preferred=preferred)


def _tuple_fields(record: object, *attrs: str) -> None:
    """Lists given for tuple fields become tuples (the records stay hashable)."""
    for attr in attrs:
        value = getattr(record, attr)
        if isinstance(value, list):
            object.__setattr__(record, attr, tuple(value))


def _mapping(
    d: object, keys: frozenset[str], kind: str, name: str, field: str
) -> Mapping[str, Any]:
    if not isinstance(d, Mapping):
        raise SnapshotError(
            f"expected a mapping, got {type(d).__name__}", kind=kind, name=name, field=field
        )
    unknown = sorted(str(k) for k in d if k not in keys)
    if unknown:
        raise SnapshotError(
            f"unknown field(s) {', '.join(unknown)} (known: {', '.join(sorted(keys))})",
            kind=kind,
            name=name,
            field=field,
        )
    return d


def _list(value: object, kind: str, name: str, field: str) -> Sequence[Any]:
    if value is None:
        return ()
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Sequence):
        raise SnapshotError(
            f"expected a list, got {type(value).__name__}", kind=kind, name=name, field=field
        )
    return value


def _is(value: object, cls: type, kind: str, name: str, field: str) -> None:
    if not isinstance(value, cls):
        raise SnapshotError(
            f"expected a {cls.__name__}, got {type(value).__name__}",
            kind=kind,
            name=name,
            field=field,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeGroupAffinity:
    """A queue's affinity to node groups (Volcano's Queue ``spec.affinity``): nodes carry
    their group in the ``volcano.sh/nodegroup-name`` label. ``required`` and ``preferred``
    (in order of preference) are ``nodeGroupAffinity``'s lists, ``anti_required`` and
    ``anti_preferred`` ``nodeGroupAntiAffinity``'s. Read by the ``nodegroup`` plugin; a queue
    with an affinity whose four lists are all empty counts as having none, but still stops
    inheriting one from its ancestors."""

    required: tuple[str, ...] = ()
    preferred: tuple[str, ...] = ()
    anti_required: tuple[str, ...] = ()
    anti_preferred: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _tuple_fields(self, "required", "preferred", "anti_required", "anti_preferred")

    def check(self, *, kind: str, name: str, field: str) -> None:
        for attr in ("required", "preferred", "anti_required", "anti_preferred"):
            value = getattr(self, attr)
            if not isinstance(value, tuple):
                raise SnapshotError(
                    f"expected a list of group names, got {type(value).__name__}",
                    kind=kind,
                    name=name,
                    field=f"{field}.{attr}",
                )
            for i, group in enumerate(value):
                if not isinstance(group, str) or not group:
                    raise SnapshotError(
                        f"expected a non-empty group name, got {group!r}",
                        kind=kind,
                        name=name,
                        field=f"{field}.{attr}[{i}]",
                    )

    @property
    def empty(self) -> bool:
        return not (self.required or self.preferred or self.anti_required or self.anti_preferred)

    def to_dict(self) -> dict[str, object]:
        return {
            attr: list(getattr(self, attr))
            for attr in ("required", "preferred", "anti_required", "anti_preferred")
            if getattr(self, attr)
        }

    @classmethod
    def from_dict(cls, d: object, *, kind: str, name: str, field: str) -> NodeGroupAffinity:
        keys = frozenset({"required", "preferred", "anti_required", "anti_preferred"})
        m = _mapping(d, keys, kind, name, field)
        lists = {k: tuple(_list(m.get(k), kind, name, f"{field}.{k}")) for k in keys}
        return cls(**lists)


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskTopology:
    """Volcano's task topology of one job (the ``task-topology`` plugin): groups of roles to
    keep together (``affinity``) or apart (``anti_affinity``), and an order of roles
    (``task_order``, first = placed first). A group of one role is that role's self-affinity
    (its replicas together) or self-anti-affinity (its replicas apart). Read from the
    PodGroup's (or Volcano Job's) annotations ``volcano.sh/task-topology-affinity``,
    ``volcano.sh/task-topology-anti-affinity`` (groups ``;``-separated, roles
    ``,``-separated) and ``volcano.sh/task-topology-task-order``."""

    affinity: tuple[tuple[str, ...], ...] = ()
    anti_affinity: tuple[tuple[str, ...], ...] = ()
    task_order: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _tuple_fields(self, "task_order")
        for attr in ("affinity", "anti_affinity"):
            groups = getattr(self, attr)
            if isinstance(groups, list | tuple):
                fixed = tuple(tuple(g) if isinstance(g, list) else g for g in groups)
                object.__setattr__(self, attr, fixed)

    def check(self, *, kind: str, name: str, field: str) -> None:
        for attr in ("affinity", "anti_affinity"):
            groups = getattr(self, attr)
            if not isinstance(groups, tuple):
                raise SnapshotError(
                    "expected a list of role groups", kind=kind, name=name, field=f"{field}.{attr}"
                )
            for i, group in enumerate(groups):
                _roles(group, kind, name, f"{field}.{attr}[{i}]")
        _roles(self.task_order, kind, name, f"{field}.task_order", allow_empty=True)

    @property
    def roles(self) -> frozenset[str]:
        """Every role the topology names."""
        named = {r for g in (*self.affinity, *self.anti_affinity) for r in g}
        return frozenset(named | set(self.task_order))

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {}
        if self.affinity:
            out["affinity"] = [list(g) for g in self.affinity]
        if self.anti_affinity:
            out["anti_affinity"] = [list(g) for g in self.anti_affinity]
        if self.task_order:
            out["task_order"] = list(self.task_order)
        return out

    @classmethod
    def from_dict(cls, d: object, *, kind: str, name: str, field: str) -> TaskTopology:
        m = _mapping(d, frozenset({"affinity", "anti_affinity", "task_order"}), kind, name, field)
        groups = {
            k: tuple(
                tuple(_list(g, kind, name, f"{field}.{k}[{i}]"))
                for i, g in enumerate(_list(m.get(k), kind, name, f"{field}.{k}"))
            )
            for k in ("affinity", "anti_affinity")
        }
        order = tuple(_list(m.get("task_order"), kind, name, f"{field}.task_order"))
        return cls(
            affinity=groups["affinity"], anti_affinity=groups["anti_affinity"], task_order=order
        )


def _roles(group: object, kind: str, name: str, field: str, *, allow_empty: bool = False) -> None:
    if not isinstance(group, tuple) or (not group and not allow_empty):
        raise SnapshotError("expected a non-empty list of roles", kind=kind, name=name, field=field)
    seen: set[str] = set()
    for i, role in enumerate(group):
        if not isinstance(role, str) or not role:
            raise SnapshotError(
                f"expected a non-empty role name, got {role!r}",
                kind=kind,
                name=name,
                field=f"{field}[{i}]",
            )
        if role in seen:
            raise SnapshotError(
                f"role {role!r} named twice", kind=kind, name=name, field=f"{field}[{i}]"
            )
        seen.add(role)
