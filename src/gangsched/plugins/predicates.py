"""predicates: the node filters that do not depend on free resources.

Unschedulable (cordoned) nodes, node selectors, required node affinity (Kubernetes'
NodeAffinity filter: :mod:`gangsched.model.affinity`), NoSchedule/NoExecute taints without a
matching toleration, and GPU model constraints. A node refused by node affinity is explained
by the requirement it misses: with one required term, the term's first expression the node
fails (``node affinity: zone In [a, b]``); with several, the terms together. Resource fit
(cpu, memory, GPU devices, pod count) is checked by the session for every action, as in
Volcano. These masks depend only on the template, so each template's full mask is computed
once and sliced by row afterwards.
Arguments (Volcano's): ``predicate.NodeAffinityEnable``, ``predicate.TaintTolerationEnable``
(both default true). ``predicate.PodAffinityEnable`` and ``predicate.PodTopologySpreadEnable``
(default true) switch the pod affinity / anti-affinity and the topology spread filters, which
read where other pods are and so are applied on top of these cached masks
(:mod:`gangsched.session.pod_constraints`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from gangsched._types import BOOL
from gangsched.config import arg_bool
from gangsched.framework.extension_points import argument_names
from gangsched.model.affinity import NodeAffinity, NodeSelectorRequirement
from gangsched.session.affinity_masks import required_mask, requirement_mask
from gangsched.session.arrays import ClusterArrays, TaskTemplate

if TYPE_CHECKING:
    from gangsched.session.core import Session


class PredicatesPlugin:
    name = "predicates"
    known_arguments = (
        *argument_names(
            "predicate",
            # Read here: node affinity / selector and taints.
            "NodeAffinityEnable",
            "TaintTolerationEnable",
            # Read by gangsched.session.pod_constraints: PodAffinityEnable,
            # PodTopologySpreadEnable. Volcano's other switches and settings (its other
            # filters are not modelled).
            "CacheEnable",
            "DiskPressureEnable",
            "DynamicResourceAllocationEnable",
            "GPUNumberEnable",
            "GPUSharingEnable",
            "MemoryPressureEnable",
            "NodeLockEnable",
            "NodePortsEnable",
            "NodeVolumeLimitsEnable",
            "PIDPressureEnable",
            "PodAffinityEnable",
            "PodTopologySpreadEnable",
            "ProportionalEnable",
            "VGPUEnable",
            "VolumeBindingEnable",
            "VolumeZoneEnable",
            "resources",
            "resources.*",
        ),
        "dynamicresources.filterTimeoutSeconds",
        *argument_names("volumebinding", "bindTimeoutSeconds", "shape", "weight"),
    )
    #: Answers depend only on a template's shape (request, GPUs, selector, tolerations) and
    #: the nodes' state, so templates of equal shape may share one evaluation.
    shape_only = True

    def __init__(self, arguments: Mapping[str, object]) -> None:
        self.node_affinity = arg_bool(
            arguments, "predicate.NodeAffinityEnable", True, plugin=self.name
        )
        self.taints = arg_bool(arguments, "predicate.TaintTolerationEnable", True, plugin=self.name)
        self._cache: dict[tuple[object, ...], list[tuple[BOOL, str]]] = {}
        self._parts: dict[tuple[object, ...], BOOL] = {}

    def _full(self, ssn: Session, tmpl: TaskTemplate) -> list[tuple[BOOL, str]]:
        found = self._cache.get(tmpl.shape)
        if found is not None:
            return found
        a = ssn.arrays
        out: list[tuple[BOOL, str]] = [(a.unschedulable, "node(s) were unschedulable")]
        if self.node_affinity and tmpl.node_selector:
            selector = tmpl.node_selector
            out.append(
                (
                    self._part(("selector", *selector.items()), lambda: ~a.selector_mask(selector)),
                    "node(s) didn't match Pod's node affinity/selector",
                )
            )
        affinity = tmpl.node_affinity
        if self.node_affinity and affinity is not None and affinity.required:
            out.extend(self._affinity(ssn, affinity))
        if self.taints:
            tolerations = tmpl.tolerations
            untolerated = self._part(
                ("tolerations", tolerations), lambda: a.untolerated_mask(tolerations)
            )
            out.append((untolerated, "node(s) had untolerated taint"))
        if tmpl.gpu_count and tmpl.gpu_models:
            models = tmpl.gpu_models
            out.append(
                (
                    self._part(
                        ("models", models), lambda: ~a.model_mask(models) & (a.gpu_count > 0)
                    ),
                    "node(s) didn't have the requested GPU model",
                )
            )
        self._cache[tmpl.shape] = out
        return out

    def _affinity(self, ssn: Session, affinity: NodeAffinity) -> list[tuple[BOOL, str]]:
        """The required terms' rejections: one per expression of a single term (a node is
        named by the first it fails), or one for several terms together."""
        a = ssn.arrays
        prefix = "node(s) didn't match Pod's node affinity: "
        if len(affinity.required) > 1:
            mask = self._part(("affinity", affinity), lambda: ~required_mask(a, affinity))
            return [(mask, prefix + affinity.describe_required())]
        term = affinity.required[0]
        out: list[tuple[BOOL, str]] = []
        for field, reqs in ((False, term.match_expressions), (True, term.match_fields)):
            for req in reqs:
                out.append((self._miss(a, req, field), prefix + req.describe()))
        return out

    def _miss(self, a: ClusterArrays, req: NodeSelectorRequirement, field: bool) -> BOOL:
        """Nodes missing one requirement (shared by every shape that has it)."""
        key = ("requirement", field, req)
        found = self._parts.get(key)
        if found is None:
            found = self._parts[key] = ~requirement_mask(a, req, field=field)
        return found

    def _part(self, key: tuple[object, ...], make: Callable[[], BOOL]) -> BOOL:
        """One filter's mask, shared by every shape with the same selector, tolerations or
        GPU models (``key``)."""
        found = self._parts.get(key)
        if found is None:
            found = self._parts[key] = make()
        return found

    def predicate(
        self, ssn: Session, tmpl: TaskTemplate, rows: npt.NDArray[np.intp]
    ) -> list[tuple[BOOL, str]]:
        return [(mask[rows], reason) for mask, reason in self._full(ssn, tmpl)]
