"""Volcano's bin-packing resource weights, as ``binpack`` and ``network-topology-aware`` read
them under their own prefix (``binpack``, ``hypernode.binpack``): ``<prefix>.cpu`` and
``<prefix>.memory``, and for every name the comma-separated ``<prefix>.resources`` lists,
``<prefix>.resources.<name>``."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from gangsched.config import arg_str
from gangsched.framework.extension_points import argument_names

#: The argument keys, under a prefix, that weigh resources (``*``: any resource name).
KEYS = ("cpu", "memory", "resources", "resources.*")


def resource_weights(
    arguments: Mapping[str, object], prefix: str, weight: Callable[[str], float], *, plugin: str
) -> dict[str, float]:
    """``{resource: weight}``: cpu, memory, then the listed resources in their order, each
    weighted by ``weight(<its argument name>)`` (which checks and defaults it)."""
    weights = {"cpu": weight(f"{prefix}.cpu"), "memory": weight(f"{prefix}.memory")}
    extra = arg_str(arguments, f"{prefix}.resources", "", plugin=plugin)
    for name in (r.strip() for r in extra.split(",")):
        if name:
            weights[name] = weight(f"{prefix}.resources.{name}")
    return weights


def resource_weight_arguments(prefix: str) -> tuple[str, ...]:
    """The argument names of :data:`KEYS` under ``prefix``."""
    return argument_names(prefix, *KEYS)
