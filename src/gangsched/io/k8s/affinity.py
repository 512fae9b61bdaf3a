"""A pod spec's ``affinity.nodeAffinity``, read into and written from
:class:`~gangsched.model.affinity.NodeAffinity`.

The manifest's camelCase paths map onto the record's fields::

    requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[i] -> required[i]
    preferredDuringSchedulingIgnoredDuringExecution[i]                  -> preferred[i]
    matchExpressions, matchFields -> match_expressions, match_fields

and an invalid expression is refused with the manifest's own path. A GPU task's model
constraint (``nvidia.com/gpu.product In [...]`` in the single required term) is kept as the
task's GPU models, as before; the rest of the affinity stays node affinity.
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

__all__ = [
    "TOPOLOGY_AFFINITY_KEY",
    "TOPOLOGY_ANTI_AFFINITY_KEY",
    "TOPOLOGY_ORDER_KEY",
    "node_affinity_manifest",
    "node_group_affinity_manifest",
    "read_node_affinity",
    "read_node_group_affinity",
    "read_task_topology",
    "task_topology_annotations",
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
