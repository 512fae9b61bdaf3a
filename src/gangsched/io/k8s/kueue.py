"""Kueue's topology-aware scheduling vocabulary in manifests, mapped onto a job's
:class:`~gangsched.model.NetworkTopology` (the same rule Volcano's ``networkTopology`` sets).

Annotations (on the job object's metadata, a PodGroup's, or any of its pod templates — all
that carry them must agree, as gangsched keeps one topology per job):

* ``kueue.x-k8s.io/podset-required-topology: LEVEL`` — hard, ``highest_tier_allowed`` = the
  tier of LEVEL;
* ``kueue.x-k8s.io/podset-preferred-topology: LEVEL`` — soft, the same tier;
* ``kueue.x-k8s.io/podset-slice-required-topology: LEVEL`` with
  ``kueue.x-k8s.io/podset-slice-size: N`` — every domain of LEVEL's tier holds a multiple of
  N of the job's pods (``slice_tier`` / ``slice_size``).

A topology level names a node label in Kueue; gangsched's domains are HyperNode tiers. A
LEVEL becomes a tier number thus:

* a plain number (``"2"``) is that tier;
* ``kubernetes.io/hostname`` is tier 0, a single node (allowed for slices only: a required or
  preferred single node has no hypernode tier);
* any other label is looked up in the Kueue ``Topology`` objects among the inputs
  (``kueue.x-k8s.io`` ``Topology``, ``spec.levels`` listed from the broadest down): the
  lowest level that is not ``kubernetes.io/hostname`` is tier 1, the next one up tier 2, and
  so on — Volcano's numbering of HyperNode tiers, so a rack level matches tier-1 HyperNodes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gangsched.errors import SnapshotError
from gangsched.io.k8s.fields import (
    Ref,
    decimal_count,
    get_map,
    get_mappings,
    get_str_map,
    require_str,
)
from gangsched.model import NetworkTopology, TopologyMode

__all__ = [
    "HOSTNAME_LEVEL",
    "KUEUE_ANNOTATIONS",
    "PREFERRED",
    "REQUIRED",
    "SLICE_REQUIRED",
    "SLICE_SIZE",
    "collect_annotations",
    "kueue_annotations",
    "kueue_topology",
    "topology_levels",
]

REQUIRED = "kueue.x-k8s.io/podset-required-topology"
PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
SLICE_REQUIRED = "kueue.x-k8s.io/podset-slice-required-topology"
SLICE_SIZE = "kueue.x-k8s.io/podset-slice-size"
KUEUE_ANNOTATIONS = (REQUIRED, PREFERRED, SLICE_REQUIRED, SLICE_SIZE)
HOSTNAME_LEVEL = "kubernetes.io/hostname"

#: The annotations one object carries, with the path they were read at.
Found = tuple[str, dict[str, str]]


def collect_annotations(sources: Sequence[tuple[Mapping[str, Any], str]], ref: Ref) -> Found | None:
    """The Kueue topology annotations of a job: from each ``(metadata, path)`` in ``sources``
    (the job object's and its pod templates'); those that carry any must carry the same ones.
    None when none does."""
    first: Found | None = None
    for meta, path in sources:
        values = get_str_map(meta, "annotations", ref, path)
        found = {k: values[k].strip() for k in KUEUE_ANNOTATIONS if k in values}
        if not found:
            continue
        where = f"{path}.annotations"
        if first is None:
            first = (where, found)
        elif found != first[1]:
            raise ref.error(
                where,
                f"Kueue topology annotations differ from those at {first[0]}; gangsched keeps "
                "one network topology per job",
            )
    return first


def topology_levels(obj: Mapping[str, Any], ref: Ref) -> dict[str, int]:
    """A Kueue ``Topology`` object's levels → tier numbers (see the module docstring)."""
    spec = get_map(obj, "spec", ref, "")
    labels: list[str] = []
    for level, path in get_mappings(spec, "levels", ref, "spec"):
        label = require_str(level, "nodeLabel", ref, path)
        if label in labels:
            raise ref.error(f"{path}.nodeLabel", f"level {label!r} is listed twice")
        labels.append(label)
    if not labels:
        raise ref.error("spec.levels", "a Topology needs at least one level")
    if HOSTNAME_LEVEL in labels[:-1]:
        raise ref.error("spec.levels", f"{HOSTNAME_LEVEL} can only be the lowest level")
    above_nodes = [x for x in labels if x != HOSTNAME_LEVEL]
    return {label: len(above_nodes) - i for i, label in enumerate(above_nodes)}


def _tier(value: str, levels: Mapping[str, int], ref: Ref, field: str, *, node_ok: bool) -> int:
    count = decimal_count(value)
    if count is not None:
        tier = count
    elif value == HOSTNAME_LEVEL:
        tier = 0
    elif value in levels:
        tier = levels[value]
    else:
        known = ", ".join(sorted(levels)) or "none: no Kueue Topology object among the inputs"
        raise ref.error(
            field,
            f"topology level {value!r} is not known: give a tier number, {HOSTNAME_LEVEL}, or "
            f"a level of a Kueue Topology object (known levels: {known})",
        )
    if tier == 0 and not node_ok:
        raise ref.error(
            field,
            f"{value!r} is a single node, which is no hypernode tier; require tier 1 or more, "
            f"or use {SLICE_REQUIRED} with {SLICE_SIZE} for pods that must share a node",
        )
    return tier


def kueue_topology(
    found: Found, levels: Mapping[str, int], ref: Ref, min_available: int
) -> NetworkTopology:
    """The :class:`NetworkTopology` the annotations ``found`` describe; errors name the
    annotation. ``min_available`` must be a multiple of the slice size."""
    where, values = found

    def field(key: str) -> str:
        return f"{where}[{key}]"

    if REQUIRED in values and PREFERRED in values:
        raise ref.error(field(PREFERRED), f"give {REQUIRED} or {PREFERRED}, not both")
    mode: TopologyMode = TopologyMode.SOFT
    tier: int | None = None
    for key, kind in ((REQUIRED, TopologyMode.HARD), (PREFERRED, TopologyMode.SOFT)):
        if key in values:
            mode = kind
            tier = _tier(values[key], levels, ref, field(key), node_ok=False)
    slice_size = slice_tier = 0
    if (SLICE_REQUIRED in values) != (SLICE_SIZE in values):
        missing = SLICE_SIZE if SLICE_REQUIRED in values else SLICE_REQUIRED
        raise ref.error(field(missing), f"missing: {SLICE_REQUIRED} and {SLICE_SIZE} go together")
    if SLICE_SIZE in values:
        text = values[SLICE_SIZE]
        count = decimal_count(text)
        if count is None or count < 1 or len(text) > 9:
            raise ref.error(field(SLICE_SIZE), f"expected a positive pod count, got {text!r}")
        slice_size = count
        slice_tier = _tier(values[SLICE_REQUIRED], levels, ref, field(SLICE_REQUIRED), node_ok=True)
        if tier is not None and slice_tier > tier:
            raise ref.error(
                field(SLICE_REQUIRED),
                f"the slice level (tier {slice_tier}) is above the podset's level (tier {tier})",
            )
        if min_available % slice_size:
            raise ref.error(
                field(SLICE_SIZE),
                f"the gang's minimum {min_available} is not a multiple of the slice size "
                f"{slice_size}",
            )
    try:
        return NetworkTopology(
            mode=mode, highest_tier_allowed=tier, slice_size=slice_size, slice_tier=slice_tier
        )
    except SnapshotError as exc:  # pragma: no cover - the checks above come first
        raise ref.error(where, exc.detail) from None


def kueue_annotations(nt: NetworkTopology) -> dict[str, str]:
    """The Kueue annotations that load back as ``nt`` (tiers as numbers, tier 0 as
    ``kubernetes.io/hostname``); used for topologies with slices, which Volcano's
    ``networkTopology`` cannot express."""
    out: dict[str, str] = {}
    if nt.highest_tier_allowed is not None:
        key = REQUIRED if nt.mode is TopologyMode.HARD else PREFERRED
        out[key] = str(nt.highest_tier_allowed)
    if nt.slice_size:
        out[SLICE_REQUIRED] = str(nt.slice_tier) if nt.slice_tier else HOSTNAME_LEVEL
        out[SLICE_SIZE] = str(nt.slice_size)
    return out
