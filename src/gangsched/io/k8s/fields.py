"""Field readers for Kubernetes manifests: every error names the manifest and the field path.

A manifest is plain data (the dict a YAML document or the API server gives). The readers here
take a :class:`Ref` (kind, namespace, name, where it came from) and a dotted field path, and
raise :class:`~gangsched.errors.SnapshotError` like::

    Job 'default/train': spec.tasks[0].template.spec.containers[1].resources.requests.cpu:
    malformed quantity 'lots' (jobs.yaml, document 2)

Pod resource requests follow Kubernetes: a container's request defaults to its limit, the pod
needs the sum over its containers (plus restartable init containers, the "sidecars") or the
largest init container, whichever is larger, plus ``spec.overhead``.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gangsched.errors import SnapshotError
from gangsched.units import parse_quantity

__all__ = [
    "DNS1123_LABEL_MAX",
    "DNS1123_SUBDOMAIN_MAX",
    "Ref",
    "annotation_bool",
    "check_dns_label",
    "check_dns_subdomain",
    "creation_seconds",
    "decimal_count",
    "dns_label_problem",
    "dns_subdomain_problem",
    "get_bool",
    "get_int",
    "get_list",
    "get_map",
    "get_mappings",
    "get_str",
    "get_str_map",
    "meta_value",
    "pod_requests",
    "require_str",
    "resource_map",
]


@dataclass(frozen=True, slots=True)
class Ref:
    """Which manifest a value belongs to: ``kind``, ``namespace`` ('' when cluster-scoped),
    ``name`` and ``source`` (``"jobs.yaml, document 2"``; '' when unknown)."""

    kind: str
    namespace: str
    name: str
    source: str = ""
    api_version: str = ""

    @property
    def label(self) -> str:
        """``namespace/name`` for namespaced objects, ``name`` otherwise."""
        if not self.name:
            return ""  # the error is about the missing name itself
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    def __str__(self) -> str:
        return f"{self.kind} {self.label!r}"

    def error(self, field: str, detail: str) -> SnapshotError:
        suffix = f" ({self.source})" if self.source else ""
        return SnapshotError(detail + suffix, kind=self.kind, name=self.label, field=field)


# ------------------------------------------------------------------------------------------
# Kubernetes object names (k8s.io/apimachinery/pkg/util/validation)

DNS1123_LABEL_MAX = 63
DNS1123_SUBDOMAIN_MAX = 253
_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_LABEL_RE = re.compile(f"{_LABEL}")
_SUBDOMAIN_RE = re.compile(rf"{_LABEL}(\.{_LABEL})*")


def _dns_problem(value: str, pattern: re.Pattern[str], limit: int, what: str) -> str | None:
    if len(value) > limit:
        return f"{len(value)} characters, more than {limit}"
    if pattern.fullmatch(value) is None:
        return f"{value!r} is not a DNS-1123 {what}"
    return None


def dns_label_problem(value: str) -> str | None:
    """Why ``value`` is not a DNS-1123 label (what Kubernetes requires of a namespace), or
    None."""
    return _dns_problem(
        value,
        _LABEL_RE,
        DNS1123_LABEL_MAX,
        "label (lower-case letters, digits and '-', starting and ending with a letter or digit)",
    )


def dns_subdomain_problem(value: str) -> str | None:
    """Why ``value`` is not a DNS-1123 subdomain (what Kubernetes requires of most object
    names), or None."""
    return _dns_problem(
        value,
        _SUBDOMAIN_RE,
        DNS1123_SUBDOMAIN_MAX,
        "subdomain (lower-case letters, digits, '-' and '.', each part starting and ending "
        "with a letter or digit)",
    )


def check_dns_label(value: str, ref: Ref, path: str) -> None:
    _raise_problem(dns_label_problem(value), ref, path)


def check_dns_subdomain(value: str, ref: Ref, path: str) -> None:
    _raise_problem(dns_subdomain_problem(value), ref, path)


def _raise_problem(problem: str | None, ref: Ref, path: str) -> None:
    if problem is not None:
        raise ref.error(path, f"invalid name: {problem}")


_COUNT_RE = re.compile("[0-9]{1,18}")


def decimal_count(text: str) -> int | None:
    """``text`` as a non-negative integer below 10**18 written in ASCII digits, else None
    (``str.isdigit`` also accepts ``'²'`` and 5,000-digit strings that ``int`` refuses)."""
    return int(text) if _COUNT_RE.fullmatch(text) else None


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def get_map(obj: Mapping[str, Any], key: str, ref: Ref, path: str) -> Mapping[str, Any]:
    """``obj[key]`` as a mapping (absent or null → empty)."""
    value = obj.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ref.error(_join(path, key), f"expected a mapping, got {type(value).__name__}")
    return value


def get_list(obj: Mapping[str, Any], key: str, ref: Ref, path: str) -> Sequence[Any]:
    """``obj[key]`` as a list (absent or null → empty)."""
    value = obj.get(key)
    if value is None:
        return ()
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Sequence):
        raise ref.error(_join(path, key), f"expected a list, got {type(value).__name__}")
    return value


def get_mappings(
    obj: Mapping[str, Any], key: str, ref: Ref, path: str
) -> Iterator[tuple[Mapping[str, Any], str]]:
    """Each item of the list ``obj[key]`` with its path (``path.key[i]``); an item that is not
    a mapping is an error."""
    for i, item in enumerate(get_list(obj, key, ref, path)):
        where = f"{_join(path, key)}[{i}]"
        if not isinstance(item, Mapping):
            raise ref.error(where, f"expected a mapping, got {type(item).__name__}")
        yield item, where


def require_str(obj: Mapping[str, Any], key: str, ref: Ref, path: str) -> str:
    """``obj[key]`` as a non-empty string; absent, null or empty is an error."""
    value = get_str(obj, key, ref, path)
    if value is None:
        raise ref.error(_join(path, key), "missing")
    return value


def get_str(
    obj: Mapping[str, Any], key: str, ref: Ref, path: str, default: str | None = None
) -> str | None:
    """``obj[key]`` as a string; ``default`` when absent, null or empty."""
    value = obj.get(key)
    if value is None or value == "":
        return default
    if not isinstance(value, str):
        raise ref.error(_join(path, key), f"expected a string, got {value!r}")
    return value


def get_int(
    obj: Mapping[str, Any],
    key: str,
    ref: Ref,
    path: str,
    default: int | None = None,
    *,
    minimum: int | None = None,
) -> int | None:
    """``obj[key]`` as an integer (a whole float is accepted); ``default`` when absent."""
    value = obj.get(key)
    if value is None:
        return default
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ref.error(_join(path, key), f"expected an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise ref.error(_join(path, key), f"must be >= {minimum}, got {value}")
    if abs(value) > 2**62:
        raise ref.error(_join(path, key), f"integer {value} out of range")
    return value


def get_bool(obj: Mapping[str, Any], key: str, ref: Ref, path: str, default: bool) -> bool:
    value = obj.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ref.error(_join(path, key), f"expected true or false, got {value!r}")
    return value


def get_str_map(obj: Mapping[str, Any], key: str, ref: Ref, path: str) -> dict[str, str]:
    """A ``{string: string}`` mapping such as labels, annotations or a node selector."""
    raw = get_map(obj, key, ref, path)
    out: dict[str, str] = {}
    for k, v in raw.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise ref.error(
                f"{_join(path, key)}[{k}]", f"keys and values must be strings, got {k!r}: {v!r}"
            )
        out[k] = v
    return out


def meta_value(
    meta: Mapping[str, Any], key: str, ref: Ref, path: str = "metadata"
) -> tuple[str, str] | None:
    """The value of ``key`` in the annotations of ``meta`` (found at ``path``), else in its
    labels, with the field path it came from; None when in neither."""
    for section in ("annotations", "labels"):
        values = get_str_map(meta, section, ref, path)
        if key in values:
            return values[key], f"{path}.{section}[{key}]"
    return None


def annotation_bool(
    meta: Mapping[str, Any], key: str, ref: Ref, default: bool, path: str = "metadata"
) -> bool:
    """A ``"true"`` / ``"false"`` annotation or label (annotations win)."""
    found = meta_value(meta, key, ref, path)
    if found is None:
        return default
    value, path = found
    text = value.strip().lower()
    if text not in ("true", "false"):
        raise ref.error(path, f'expected "true" or "false", got {value!r}')
    return text == "true"


def creation_seconds(meta: Mapping[str, Any], ref: Ref) -> int:
    """``metadata.creationTimestamp`` as whole seconds since the epoch (absent → 0)."""
    value = meta.get("creationTimestamp")
    if value is None or value == "":
        return 0
    if isinstance(value, dt.datetime):
        stamp = value
    elif isinstance(value, str):
        try:
            stamp = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise ref.error(
                "metadata.creationTimestamp", f"not an RFC 3339 time: {value!r}"
            ) from None
    else:
        raise ref.error("metadata.creationTimestamp", f"expected a time, got {value!r}")
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=dt.UTC)
    return max(0, int(stamp.timestamp()))


def resource_map(obj: Mapping[str, Any], key: str, ref: Ref, path: str) -> dict[str, int]:
    """A Kubernetes ResourceList (``{name: quantity}``) in canonical units."""
    raw = get_map(obj, key, ref, path)
    where = _join(path, key)
    out: dict[str, int] = {}
    for res, qty in raw.items():
        if not isinstance(res, str) or not res:
            raise ref.error(where, f"resource name must be a non-empty string, got {res!r}")
        try:
            out[res] = parse_quantity(qty, res)
        except SnapshotError as exc:
            raise ref.error(f"{where}.{res}", exc.detail) from None
    return out


def _container_requests(c: Mapping[str, Any], ref: Ref, path: str) -> dict[str, int]:
    resources = get_map(c, "resources", ref, path)
    rpath = _join(path, "resources")
    limits = resource_map(resources, "limits", ref, rpath)
    requests = resource_map(resources, "requests", ref, rpath)
    # A request left out defaults to the limit (API defaulting; the only way extended
    # resources such as nvidia.com/gpu are usually written).
    return {**limits, **requests}


def _add(total: dict[str, int], more: Mapping[str, int]) -> None:
    for res, amount in more.items():
        total[res] = total.get(res, 0) + amount


def pod_requests(spec: Mapping[str, Any], ref: Ref, path: str) -> dict[str, int]:
    """The effective resource request of a pod spec (see the module docstring)."""
    containers = get_list(spec, "containers", ref, path)
    total: dict[str, int] = {}
    for i, c in enumerate(containers):
        cpath = f"{_join(path, 'containers')}[{i}]"
        if not isinstance(c, Mapping):
            raise ref.error(cpath, f"expected a container mapping, got {type(c).__name__}")
        _add(total, _container_requests(c, ref, cpath))
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for i, c in enumerate(get_list(spec, "initContainers", ref, path)):
        cpath = f"{_join(path, 'initContainers')}[{i}]"
        if not isinstance(c, Mapping):
            raise ref.error(cpath, f"expected a container mapping, got {type(c).__name__}")
        req = _container_requests(c, ref, cpath)
        if c.get("restartPolicy") == "Always":
            _add(sidecars, req)
            current = dict(sidecars)
        else:
            current = dict(sidecars)
            _add(current, req)
        for res, amount in current.items():
            init_peak[res] = max(init_peak.get(res, 0), amount)
    _add(total, sidecars)
    for res, amount in init_peak.items():
        total[res] = max(total.get(res, 0), amount)
    _add(total, resource_map(spec, "overhead", ref, path))
    return dict(sorted(total.items()))
