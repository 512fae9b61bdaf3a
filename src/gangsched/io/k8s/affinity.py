"""A pod spec's ``affinity.nodeAffinity``, read into and written from
:class:`~gangsched.model.affinity.NodeAffinity`.

The manifest's camelCase paths map onto the record's fields::

    requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[i] -> required[i]
    preferredDuringSchedulingIgnoredDuringExecution[i]                  -> preferred[i]
    matchExpressions, matchFields -> match_expressions, match_fields

and an invalid expression is refused with the manifest's own path. A GPU task's model
constraint (``nvidia.com/gpu.product In [...]`` in the single required term) is kept as the
task's GPU models, as before; the rest of the affinity stays node affinity.

``podAffinity`` / ``podAntiAffinity`` (``labelSelector``, ``topologyKey``, ``namespaces``;
weighted ``podAffinityTerm`` for preferred terms) and ``topologySpreadConstraints``
(``maxSkew``, ``topologyKey``, ``whenUnsatisfiable``, ``labelSelector``, ``minDomains``) are
read into :mod:`gangsched.model.pod_affinity` records the same way; ``namespaceSelector``,
``matchLabelKeys``, ``mismatchLabelKeys``, ``nodeAffinityPolicy`` and ``nodeTaintsPolicy``
are read but not modelled (a note says so).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gangsched.errors import SnapshotError
from gangsched.io.k8s.fields import Ref, meta_value
from gangsched.model.affinity import (
    NodeAffinity,
    NodeGroupAffinity,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    TaskTopology,
)
from gangsched.model.pod_affinity import (
    LabelSelector,
    PodAffinity,
    PodAffinityTerm,
    TopologySpreadConstraint,
)

__all__ = [
    "TOPOLOGY_AFFINITY_KEY",
    "TOPOLOGY_ANTI_AFFINITY_KEY",
    "TOPOLOGY_ORDER_KEY",
    "node_affinity_manifest",
    "node_group_affinity_manifest",
    "pod_affinity_manifest",
    "read_node_affinity",
    "read_node_group_affinity",
    "read_pod_affinity",
    "read_task_topology",
    "read_topology_spread",
    "task_topology_annotations",
    "topology_spread_manifest",
]

_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
_PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
_PATHS = (
    ("required[", f"{_REQUIRED}.nodeSelectorTerms["),
    ("preferred[", f"{_PREFERRED}["),
    ("match_expressions", "matchExpressions"),
    ("match_fields", "matchFields"),
)


def _manifest_path(field: str) -> str:
    for ours, theirs in _PATHS:
        field = field.replace(ours, theirs)
    return field


def _term(raw: object, ref: Ref, path: str) -> object:
    if not isinstance(raw, Mapping):
        return raw  # the record's reading reports the type
    known = {"matchExpressions", "matchFields"}
    unknown = sorted(str(k) for k in raw if k not in known)
    if unknown:
        raise ref.error(path, f"unknown field(s) {', '.join(unknown)}")
    return {
        "match_expressions": raw.get("matchExpressions"),
        "match_fields": raw.get("matchFields"),
    }


def read_node_affinity(
    affinity: Mapping[str, Any], ref: Ref, path: str, *, gpu_label: str, gpu_task: bool
) -> tuple[NodeAffinity | None, tuple[str, ...]]:
    """The node affinity of a pod spec's ``affinity`` (at ``path``), and the GPU models taken
    out of it for a GPU task (``gpu_task``): an ``In`` on ``gpu_label`` in the one required
    term. Raises :class:`~gangsched.errors.SnapshotError` naming the manifest path."""
    node_aff = affinity.get("nodeAffinity")
    if node_aff is None:
        return None, ()
    npath = f"{path}.nodeAffinity"
    if not isinstance(node_aff, Mapping):
        raise ref.error(npath, f"expected a mapping, got {type(node_aff).__name__}")
    unknown = sorted(str(k) for k in node_aff if k not in (_REQUIRED, _PREFERRED))
    if unknown:
        raise ref.error(npath, f"unknown field(s) {', '.join(unknown)}")
    doc: dict[str, Any] = {}
    required = node_aff.get(_REQUIRED)
    if required is not None:
        rpath = f"{npath}.{_REQUIRED}"
        if not isinstance(required, Mapping):
            raise ref.error(rpath, f"expected a mapping, got {type(required).__name__}")
        terms = required.get("nodeSelectorTerms")
        if not isinstance(terms, list) or not terms:
            raise ref.error(f"{rpath}.nodeSelectorTerms", "expected at least one term")
        doc["required"] = [
            _term(t, ref, f"{rpath}.nodeSelectorTerms[{i}]") for i, t in enumerate(terms)
        ]
    preferred = node_aff.get(_PREFERRED)
    if preferred is not None:
        ppath = f"{npath}.{_PREFERRED}"
        if not isinstance(preferred, list):
            raise ref.error(ppath, f"expected a list, got {type(preferred).__name__}")
        doc["preferred"] = [
            {
                "weight": p.get("weight"),
                "preference": _term(p.get("preference"), ref, f"{ppath}[{i}].preference"),
            }
            if isinstance(p, Mapping)
            else p
            for i, p in enumerate(preferred)
        ]
    if not doc:
        return None, ()
    try:
        aff = NodeAffinity.from_dict(doc, kind="", name="", field="")
        models: tuple[str, ...] = ()
        if gpu_task and len(aff.required) == 1:
            aff, models = _take_models(aff, gpu_label)
        if aff.required or aff.preferred:
            aff.check(kind="", name="", field="")
            return aff, models
        return None, models
    except SnapshotError as exc:
        raise ref.error(f"{npath}{_manifest_path(exc.field)}", exc.detail) from None


def _take_models(aff: NodeAffinity, gpu_label: str) -> tuple[NodeAffinity, tuple[str, ...]]:
    """Move an ``In`` on ``gpu_label`` out of the single required term."""
    term = aff.required[0]
    found = [
        e for e in term.match_expressions if e.key == gpu_label and e.operator == "In" and e.values
    ]
    if len(found) != 1:
        return aff, ()
    rest = tuple(e for e in term.match_expressions if e is not found[0])
    if rest or term.match_fields:
        required: tuple[NodeSelectorTerm, ...] = (
            NodeSelectorTerm(match_expressions=rest, match_fields=term.match_fields),
        )
    else:
        required = ()
    return NodeAffinity(required=required, preferred=aff.preferred), found[0].values


def _expression(r: NodeSelectorRequirement) -> dict[str, Any]:
    out: dict[str, Any] = {"key": r.key, "operator": r.operator}
    if r.values:
        out["values"] = list(r.values)
    return out


def _term_manifest(term: NodeSelectorTerm) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if term.match_expressions:
        out["matchExpressions"] = [_expression(r) for r in term.match_expressions]
    if term.match_fields:
        out["matchFields"] = [_expression(r) for r in term.match_fields]
    return out


def node_affinity_manifest(
    aff: NodeAffinity | None, gpu_models: tuple[str, ...], gpu_label: str
) -> dict[str, Any] | None:
    """A pod spec's ``nodeAffinity`` for ``aff`` and the GPU models (an ``In`` on
    ``gpu_label`` added to every required term, or the one term when there is none)."""
    required = list(aff.required) if aff is not None else []
    preferred = list(aff.preferred) if aff is not None else []
    if gpu_models:
        model = NodeSelectorRequirement(key=gpu_label, operator="In", values=gpu_models)
        required = [
            NodeSelectorTerm(
                match_expressions=(*t.match_expressions, model), match_fields=t.match_fields
            )
            for t in required
        ] or [NodeSelectorTerm(match_expressions=(model,))]
    if not required and not preferred:
        return None
    out: dict[str, Any] = {}
    if required:
        out[_REQUIRED] = {"nodeSelectorTerms": [_term_manifest(t) for t in required]}
    if preferred:
        out[_PREFERRED] = [
            {"weight": p.weight, "preference": _term_manifest(p.preference)} for p in preferred
        ]
    return out


def read_node_group_affinity(spec: Mapping[str, Any], ref: Ref, path: str) -> NodeGroupAffinity:
    """A Queue's ``spec.affinity`` (``nodeGroupAffinity`` and ``nodeGroupAntiAffinity``, each
    with required and preferred lists of group names)."""
    apath = f"{path}.affinity"
    body = spec.get("affinity")
    if not isinstance(body, Mapping):
        raise ref.error(apath, f"expected a mapping, got {type(body).__name__}")
    lists: dict[str, tuple[str, ...]] = {}
    for key, prefix in (("nodeGroupAffinity", ""), ("nodeGroupAntiAffinity", "anti_")):
        part = body.get(key)
        if part is None:
            continue
        ppath = f"{apath}.{key}"
        if not isinstance(part, Mapping):
            raise ref.error(ppath, f"expected a mapping, got {type(part).__name__}")
        for field, ours in ((_REQUIRED, "required"), (_PREFERRED, "preferred")):
            raw = part.get(field)
            if raw is None:
                continue
            if not isinstance(raw, list) or not all(isinstance(g, str) and g for g in raw):
                raise ref.error(f"{ppath}.{field}", "expected a list of node group names")
            lists[prefix + ours] = tuple(raw)
    return NodeGroupAffinity(**lists)


def node_group_affinity_manifest(aff: NodeGroupAffinity) -> dict[str, Any]:
    """A Queue's ``spec.affinity`` for ``aff``."""
    out: dict[str, Any] = {}
    for key, prefix in (("nodeGroupAffinity", ""), ("nodeGroupAntiAffinity", "anti_")):
        part = {
            field: list(getattr(aff, prefix + ours))
            for field, ours in ((_REQUIRED, "required"), (_PREFERRED, "preferred"))
            if getattr(aff, prefix + ours)
        }
        if part:
            out[key] = part
    return out


#: The PodGroup (or Volcano Job) annotations of the task-topology plugin.
TOPOLOGY_AFFINITY_KEY = "volcano.sh/task-topology-affinity"
TOPOLOGY_ANTI_AFFINITY_KEY = "volcano.sh/task-topology-anti-affinity"
TOPOLOGY_ORDER_KEY = "volcano.sh/task-topology-task-order"


def _groups(text: str) -> tuple[tuple[str, ...], ...]:
    out = []
    for part in text.split(";"):
        roles = tuple(r.strip() for r in part.split(",") if r.strip())
        if roles:
            out.append(roles)
    return tuple(out)


def read_task_topology(meta: Mapping[str, Any], ref: Ref, path: str) -> TaskTopology | None:
    """A job's task topology from the annotations of its metadata (at ``path``): groups
    ``;``-separated, roles ``,``-separated; None when none of the three is set."""
    found = {key: meta_value(meta, key, ref, path) for key in _TOPOLOGY_KEYS}
    if all(v is None for v in found.values()):
        return None
    aff = found[TOPOLOGY_AFFINITY_KEY]
    anti = found[TOPOLOGY_ANTI_AFFINITY_KEY]
    order = found[TOPOLOGY_ORDER_KEY]
    topo = TaskTopology(
        affinity=_groups(aff[0]) if aff else (),
        anti_affinity=_groups(anti[0]) if anti else (),
        task_order=tuple(r.strip() for r in order[0].split(",") if r.strip()) if order else (),
    )
    try:
        topo.check(kind="", name="", field="")
    except SnapshotError as exc:
        key = {
            ".affinity": TOPOLOGY_AFFINITY_KEY,
            ".anti_affinity": TOPOLOGY_ANTI_AFFINITY_KEY,
            ".task_order": TOPOLOGY_ORDER_KEY,
        }
        which = next(v for k, v in key.items() if exc.field.startswith(k))
        where = found[which]
        raise ref.error(where[1] if where else path, exc.detail) from None
    return topo


_TOPOLOGY_KEYS = (TOPOLOGY_AFFINITY_KEY, TOPOLOGY_ANTI_AFFINITY_KEY, TOPOLOGY_ORDER_KEY)


def task_topology_annotations(topo: TaskTopology) -> dict[str, str]:
    """The annotations that :func:`read_task_topology` reads back as ``topo``."""
    out: dict[str, str] = {}
    if topo.affinity:
        out[TOPOLOGY_AFFINITY_KEY] = ";".join(",".join(g) for g in topo.affinity)
    if topo.anti_affinity:
        out[TOPOLOGY_ANTI_AFFINITY_KEY] = ";".join(",".join(g) for g in topo.anti_affinity)
    if topo.task_order:
        out[TOPOLOGY_ORDER_KEY] = ",".join(topo.task_order)
    return out


# ------------------------------------------------------------------------------------------
# Pod affinity, pod anti-affinity and topology spread

#: Record paths -> manifest paths, in the order they are replaced.
_POD_PATHS = (
    (".term", ".podAffinityTerm"),
    ("required[", f"{_REQUIRED}["),
    ("preferred[", f"{_PREFERRED}["),
    ("label_selector", "labelSelector"),
    ("match_labels", "matchLabels"),
    ("match_expressions", "matchExpressions"),
    ("topology_key", "topologyKey"),
    ("max_skew", "maxSkew"),
    ("when_unsatisfiable", "whenUnsatisfiable"),
    ("min_domains", "minDomains"),
)
_TERM_KEYS = ("labelSelector", "topologyKey", "namespaces")
#: Fields of a term or constraint that are read but not modelled: (field, what is kept).
_TERM_NOTES = {
    "namespaceSelector": "not modelled: the term looks in its namespaces (or the pod's own)",
    "matchLabelKeys": "not modelled: the selector is used as written",
    "mismatchLabelKeys": "not modelled: the selector is used as written",
}
_SPREAD_KEYS = ("maxSkew", "topologyKey", "whenUnsatisfiable", "labelSelector", "minDomains")
_SPREAD_NOTES = {
    "matchLabelKeys": "not modelled: the selector is used as written",
    "nodeAffinityPolicy": "not modelled: the pod's node affinity and selector are honoured",
    "nodeTaintsPolicy": "not modelled: node taints are ignored when counting domains",
}


def _pod_manifest_path(field: str) -> str:
    for ours, theirs in _POD_PATHS:
        field = field.replace(ours, theirs)
    return field


def _selector_doc(raw: object, ref: Ref, path: str) -> object:
    if raw is None or not isinstance(raw, Mapping):
        return raw
    unknown = sorted(str(k) for k in raw if k not in ("matchLabels", "matchExpressions"))
    if unknown:
        raise ref.error(path, f"unknown field(s) {', '.join(unknown)}")
    return {
        "match_labels": raw.get("matchLabels"),
        "match_expressions": raw.get("matchExpressions"),
    }


def _term_doc(raw: object, ref: Ref, path: str, notes: list[tuple[str, str]]) -> object:
    if not isinstance(raw, Mapping):
        return raw
    unknown = sorted(str(k) for k in raw if k not in _TERM_KEYS and k not in _TERM_NOTES)
    if unknown:
        raise ref.error(path, f"unknown field(s) {', '.join(unknown)}")
    notes.extend((f"{path}.{k}", why) for k, why in _TERM_NOTES.items() if raw.get(k) is not None)
    out: dict[str, Any] = {"topology_key": raw.get("topologyKey")}
    if raw.get("labelSelector") is not None:
        out["label_selector"] = _selector_doc(raw["labelSelector"], ref, f"{path}.labelSelector")
    if raw.get("namespaces") is not None:
        out["namespaces"] = raw["namespaces"]
    return out


def read_pod_affinity(
    affinity: Mapping[str, Any], ref: Ref, path: str
) -> tuple[PodAffinity | None, PodAffinity | None, list[tuple[str, str]]]:
    """A pod spec's ``affinity.podAffinity`` and ``affinity.podAntiAffinity`` (at ``path``),
    with notes on fields read but not modelled. Raises
    :class:`~gangsched.errors.SnapshotError` naming the manifest path."""
    notes: list[tuple[str, str]] = []
    out: list[PodAffinity | None] = []
    for key in ("podAffinity", "podAntiAffinity"):
        body = affinity.get(key)
        kpath = f"{path}.{key}"
        if body is None:
            out.append(None)
            continue
        if not isinstance(body, Mapping):
            raise ref.error(kpath, f"expected a mapping, got {type(body).__name__}")
        unknown = sorted(str(k) for k in body if k not in (_REQUIRED, _PREFERRED))
        if unknown:
            raise ref.error(kpath, f"unknown field(s) {', '.join(unknown)}")
        doc: dict[str, Any] = {}
        required = body.get(_REQUIRED)
        if required is not None:
            if not isinstance(required, list):
                raise ref.error(f"{kpath}.{_REQUIRED}", "expected a list of terms")
            doc["required"] = [
                _term_doc(t, ref, f"{kpath}.{_REQUIRED}[{i}]", notes)
                for i, t in enumerate(required)
            ]
        preferred = body.get(_PREFERRED)
        if preferred is not None:
            if not isinstance(preferred, list):
                raise ref.error(f"{kpath}.{_PREFERRED}", "expected a list of weighted terms")
            doc["preferred"] = [
                {
                    "weight": p.get("weight"),
                    "term": _term_doc(
                        p.get("podAffinityTerm"),
                        ref,
                        f"{kpath}.{_PREFERRED}[{i}].podAffinityTerm",
                        notes,
                    ),
                }
                if isinstance(p, Mapping)
                else p
                for i, p in enumerate(preferred)
            ]
        if not doc.get("required") and not doc.get("preferred"):
            out.append(None)  # an empty podAffinity asks for nothing
            continue
        try:
            aff = PodAffinity.from_dict(doc, kind="", name="", field="")
            aff.check(kind="", name="", field="")
        except SnapshotError as exc:
            raise ref.error(f"{kpath}{_pod_manifest_path(exc.field)}", exc.detail) from None
        out.append(aff)
    return out[0], out[1], notes


def read_topology_spread(
    spec: Mapping[str, Any], ref: Ref, path: str
) -> tuple[tuple[TopologySpreadConstraint, ...], list[tuple[str, str]]]:
    """A pod spec's ``topologySpreadConstraints``, with notes on fields not modelled."""
    raw = spec.get("topologySpreadConstraints")
    spath = f"{path}.topologySpreadConstraints"
    if raw is None:
        return (), []
    if not isinstance(raw, list):
        raise ref.error(spath, f"expected a list, got {type(raw).__name__}")
    notes: list[tuple[str, str]] = []
    out: list[TopologySpreadConstraint] = []
    for i, c in enumerate(raw):
        cpath = f"{spath}[{i}]"
        if not isinstance(c, Mapping):
            raise ref.error(cpath, f"expected a mapping, got {type(c).__name__}")
        unknown = sorted(str(k) for k in c if k not in _SPREAD_KEYS and k not in _SPREAD_NOTES)
        if unknown:
            raise ref.error(cpath, f"unknown field(s) {', '.join(unknown)}")
        notes.extend(
            (f"{cpath}.{k}", why) for k, why in _SPREAD_NOTES.items() if c.get(k) is not None
        )
        doc: dict[str, Any] = {
            "max_skew": c.get("maxSkew"),
            "topology_key": c.get("topologyKey"),
            "when_unsatisfiable": c.get("whenUnsatisfiable", "DoNotSchedule"),
        }
        if c.get("labelSelector") is not None:
            doc["label_selector"] = _selector_doc(c["labelSelector"], ref, f"{cpath}.labelSelector")
        if c.get("minDomains") is not None:
            doc["min_domains"] = c["minDomains"]
        try:
            constraint = TopologySpreadConstraint.from_dict(doc, kind="", name="", field="")
            constraint.check(kind="", name="", field="")
        except SnapshotError as exc:
            raise ref.error(f"{cpath}{_pod_manifest_path(exc.field)}", exc.detail) from None
        out.append(constraint)
    return tuple(out), notes


def _selector_manifest(sel: LabelSelector) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if sel.match_labels:
        out["matchLabels"] = dict(sel.match_labels)
    if sel.match_expressions:
        out["matchExpressions"] = [r.to_dict() for r in sel.match_expressions]
    return out


def _pod_term_manifest(term: PodAffinityTerm) -> dict[str, Any]:
    out: dict[str, Any] = {"topologyKey": term.topology_key}
    if term.label_selector is not None:
        out["labelSelector"] = _selector_manifest(term.label_selector)
    if term.namespaces:
        out["namespaces"] = list(term.namespaces)
    return out


def pod_affinity_manifest(aff: PodAffinity) -> dict[str, Any]:
    """A pod spec's ``podAffinity`` (or ``podAntiAffinity``) for ``aff``."""
    out: dict[str, Any] = {}
    if aff.required:
        out[_REQUIRED] = [_pod_term_manifest(t) for t in aff.required]
    if aff.preferred:
        out[_PREFERRED] = [
            {"weight": p.weight, "podAffinityTerm": _pod_term_manifest(p.term)}
            for p in aff.preferred
        ]
    return out


def topology_spread_manifest(
    constraints: tuple[TopologySpreadConstraint, ...],
) -> list[dict[str, Any]]:
    """A pod spec's ``topologySpreadConstraints``."""
    out = []
    for c in constraints:
        item: dict[str, Any] = {
            "maxSkew": c.max_skew,
            "topologyKey": c.topology_key,
            "whenUnsatisfiable": c.when_unsatisfiable,
        }
        if c.label_selector is not None:
            item["labelSelector"] = _selector_manifest(c.label_selector)
        if c.min_domains is not None:
            item["minDomains"] = c.min_domains
        out.append(item)
    return out
