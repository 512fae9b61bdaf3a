"""Resource names and Kubernetes quantities.

Theory of operation
-------------------
Kubernetes writes quantities as ``<number><suffix>``: ``"500m"``, ``"2"``, ``"1.5"``, ``"4Gi"``,
``"1G"``, ``"1e3"``. gangsched converts each one *exactly* (with :class:`fractions.Fraction`)
into an int64 in a canonical unit chosen by the resource name:

========================  ===================  ========================================
resource                  canonical unit       example
========================  ===================  ========================================
``cpu``                   millicores           ``"500m"`` → 500, ``2`` → 2000
``memory``, storage,      bytes                ``"4Gi"`` → 4294967296
``hugepages-*``
``nvidia.com/gpu``        milli-GPU            ``1`` → 1000, ``"0.5"`` → 500
``pods`` and any other    counts               ``"10"`` → 10
extended resource
========================  ===================  ========================================

Like Kubernetes, a value finer than the unit is rounded *up* (``"0.1m"`` of cpu is 1
millicore, ``"1.5"`` bytes is 2 bytes). Counts must be whole. Negative values, NaN,
infinities, booleans, malformed strings and canonical amounts beyond
:data:`~gangsched.limits.MAX_QUANTITY` (2**53: 8 PiB of memory, 9 billion cores) raise
:class:`~gangsched.errors.SnapshotError` naming the object and field, so every amount converts
to float64 and back exactly.
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from gangsched.errors import SnapshotError
from gangsched.limits import MAX_QUANTITY, MAX_TOTAL

__all__ = [
    "CPU",
    "GPU",
    "MEMORY",
    "PODS",
    "ResourceSpec",
    "canonical_scale",
    "cluster_total",
    "format_quantity",
    "parse_quantity",
    "parse_resources",
    "show_amount",
    "show_value",
    "to_amounts",
]

CPU = "cpu"
MEMORY = "memory"
GPU = "nvidia.com/gpu"
PODS = "pods"

INT64_MAX = 2**63 - 1

_BYTE_RESOURCES = frozenset({"memory", "ephemeral-storage", "storage"})

#: Quantity suffixes: the decimal SI prefixes n .. E (powers of 1000) and the binary Ki .. Ei
#: (powers of 1024).
_SUFFIXES: dict[str, Fraction] = {
    **{
        s: Fraction(10) ** e
        for s, e in zip(("n", "u", "m", "", *"kMGTPE"), range(-9, 19, 3), strict=True)
    },
    **{f"{s}i": Fraction(2) ** (10 * k) for k, s in enumerate("KMGTPE", 1)},
}

_QUANTITY_RE = re.compile(
    r"^(?P<sign>[+-]?)(?P<num>(?:\d+\.?\d*|\.\d+))"
    r"(?:(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])|[eE](?P<exp>[+-]?\d+))?$",
    re.ASCII,
)

#: Longest quantity text accepted; anything longer is rejected before any arithmetic, so a
#: hostile input cannot make parsing slow (int64 needs at most 19 digits, plus a fraction).
_MAX_TEXT = 64


def show_value(value: object) -> str:
    """``repr`` of a rejected value, shortened so huge inputs keep the message readable."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 256:
        return f"<integer of {value.bit_length()} bits>"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def canonical_unit(resource: str) -> str:
    """Name of the canonical unit of ``resource``, for messages."""
    if resource == CPU:
        return "millicores"
    if resource == GPU:
        return "milli-GPU"
    return "bytes" if is_byte_resource(resource) else "units"


def canonical_scale(resource: str) -> int:
    """How many canonical units one whole unit of ``resource`` is (cpu → 1000 millicores)."""
    if resource in (CPU, GPU):
        return 1000
    return 1


def is_byte_resource(resource: str) -> bool:
    """Whether ``resource`` is measured in bytes (memory, storage, hugepages)."""
    return resource in _BYTE_RESOURCES or resource.startswith("hugepages-")


def _error(where: tuple[str, str, str], detail: str) -> SnapshotError:
    kind, name, field = where
    return SnapshotError(detail, kind=kind, name=name, field=field)


def _to_fraction(value: object, where: tuple[str, str, str]) -> Fraction:
    if isinstance(value, bool):
        raise _error(where, f"expected a quantity, got boolean {value!r}")
    if isinstance(value, numbers.Integral):
        return Fraction(int(value))
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise _error(where, f"not a finite quantity {value!r}")
        # Interpret the float as the decimal a person wrote (0.1 → 1/10), as YAML would.
        return Fraction(repr(float(value)))
    if isinstance(value, str):
        text = value.strip()
        if len(text) > _MAX_TEXT:
            raise _error(
                where, f"quantity text longer than {_MAX_TEXT} characters: {show_value(value)}"
            )
        match = _QUANTITY_RE.match(text)
        if match is None:
            raise _error(where, f"malformed quantity {show_value(value)}")
        number = Fraction(match["num"])
        if match["exp"] is not None:
            exponent = int(match["exp"])
            if abs(exponent) > 40:
                raise _error(where, f"quantity {value!r} out of range")
            number *= Fraction(10) ** exponent
        else:
            number *= _SUFFIXES[match["suffix"] or ""]
        return -number if match["sign"] == "-" else number
    raise _error(where, f"expected a quantity (string or number), got {type(value).__name__}")


def parse_quantity(
    value: object, resource: str, *, kind: str = "", name: str = "", field: str = ""
) -> int:
    """Parse a Kubernetes quantity into the canonical int64 unit of ``resource``.

    Parameters
    ----------
    value:
        ``"500m"``, ``"4Gi"``, ``2``, ``0.5`` ...
    resource:
        The resource name; it selects the unit (see the module docstring).
    kind, name, field:
        The object and field the value belongs to, for the error message.

    Raises
    ------
    SnapshotError
        Malformed, negative, non-finite, non-whole count or beyond
        :data:`~gangsched.limits.MAX_QUANTITY` canonical units.

    Examples
    --------
    >>> parse_quantity("500m", "cpu"), parse_quantity("1Gi", "memory")
    (500, 1073741824)
    >>> parse_quantity(2, "nvidia.com/gpu"), parse_quantity(0.5, "cpu")
    (2000, 500)
    """
    where = (kind, name, field or resource)
    amount = _to_fraction(value, where) * canonical_scale(resource)
    if amount < 0:
        raise _error(where, f"negative quantity {show_value(value)}")
    if amount.denominator != 1:
        if resource in (CPU, GPU) or is_byte_resource(resource):
            amount = Fraction(math.ceil(amount))
        else:
            raise _error(
                where, f"quantity {show_value(value)} must be a whole number of {resource}"
            )
    result = int(amount)
    if result > MAX_QUANTITY:
        raise _error(
            where,
            f"quantity {show_value(value)} is beyond the largest supported amount, "
            f"2**53 = {MAX_QUANTITY} {canonical_unit(resource)}",
        )
    return result


def format_quantity(amount: int, resource: str) -> str | int:
    """Canonical interchange form of a canonical amount: the inverse of :func:`parse_quantity`.

    cpu and GPU amounts become ``"<n>m"`` strings unless whole (then a plain int of cores /
    devices); bytes and counts stay plain ints.
    """
    scale = canonical_scale(resource)
    if scale == 1:
        return amount
    whole, rest = divmod(amount, scale)
    if rest == 0:
        return whole
    return f"{amount}m"


def show_amount(amount: float, resource: str) -> str:
    """A canonical amount as a user writes it, for messages: ``7500m`` / ``8`` cpu, ``16Gi``
    memory (binary suffix when exact), ``1.5`` / ``2`` GPUs, plain counts otherwise."""
    value = round(float(amount))
    if is_byte_resource(resource) and value:
        for scale, suffix in ((2**40, "Ti"), (2**30, "Gi"), (2**20, "Mi"), (2**10, "Ki")):
            if value % scale == 0:
                return f"{value // scale}{suffix}"
        return str(value)
    if resource == GPU and value % 1000:
        return f"{value / 1000:g}"
    return str(format_quantity(value, resource))


def check_resource_name(res: object, *, kind: str, name: str, field: str) -> None:
    """Reject a resource name that is not a non-empty string."""
    if not isinstance(res, str) or not res:
        raise SnapshotError(
            f"resource name must be a non-empty string, got {res!r}",
            kind=kind,
            name=name,
            field=field,
        )


def parse_resources(value: object, *, kind: str, name: str, field: str) -> dict[str, int]:
    """Parse a ``{resource: quantity}`` mapping into canonical ints (sorted by name)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise SnapshotError(
            f"expected a mapping of resource to quantity, got {type(value).__name__}",
            kind=kind,
            name=name,
            field=field,
        )
    out: dict[str, int] = {}
    for res, qty in value.items():
        check_resource_name(res, kind=kind, name=name, field=field)
        out[res] = parse_quantity(qty, res, kind=kind, name=name, field=f"{field}.{res}")
    return dict(sorted(out.items()))


def format_resources(values: Mapping[str, int]) -> dict[str, str | int]:
    """Interchange form of a canonical resource mapping (sorted keys)."""
    return {res: format_quantity(amount, res) for res, amount in sorted(values.items())}


@dataclass(frozen=True, slots=True)
class ResourceSpec:
    """The ordered resource columns of a cluster's arrays.

    ``cpu`` and ``memory`` come first, then every other resource name sorted. ``nvidia.com/gpu``
    is always present (in milli-GPU) so GPU accounting and GPU quotas have a column even when
    the devices themselves are tracked per index.
    """

    names: tuple[str, ...]

    @classmethod
    def from_names(cls, names: Iterable[str]) -> ResourceSpec:
        rest = sorted(set(names) - {CPU, MEMORY, GPU})
        return cls(names=(CPU, MEMORY, GPU, *rest))

    def index(self, resource: str) -> int:
        """Column of ``resource``; raises :class:`SnapshotError` for an unknown name."""
        try:
            return self.names.index(resource)
        except ValueError:
            raise SnapshotError(
                f"unknown resource {resource!r}", kind="resource", name=resource
            ) from None

    def __len__(self) -> int:
        return len(self.names)

    @property
    def gpu_column(self) -> int:
        return 2


def cluster_total(allocatable: npt.NDArray[np.int64], pods: int) -> npt.NDArray[np.float64]:
    """The ``(n_nodes, n_resources)`` allocatable summed per resource, column ``pods`` at 0.

    Summed in int64 over every column but ``pods`` (a snapshot keeps each such sum within
    :data:`~gangsched.limits.MAX_TOTAL`; the pods column of nodes without a pod limit holds a
    large sentinel that could wrap), then converted to float64 once."""
    cols = np.arange(allocatable.shape[1]) != pods
    total = np.zeros(allocatable.shape[1])
    total[cols] = allocatable[:, cols].sum(axis=0, dtype=np.int64)
    return total


def to_amounts(values: npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
    """Float amounts as canonical int64: rounded, NaN as 0, clipped to ``[0, MAX_TOTAL]`` (an
    ``inf`` or an out-of-range float never wraps)."""
    clean = np.nan_to_num(values, nan=0.0, posinf=float(MAX_TOTAL), neginf=0.0)
    out: npt.NDArray[np.int64] = np.rint(np.clip(clean, 0.0, float(MAX_TOTAL))).astype(np.int64)
    return out
