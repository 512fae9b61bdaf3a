"""A fake Kubernetes API client answering from recorded objects (tests/data/k8s_api_objects.json),
shared by the manifest example tests and the ClusterState example test."""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any


class NotFound(Exception):
    status = 404


class Forbidden(Exception):
    status = 403


class Recorded:
    """Fake CoreV1Api / SchedulingV1Api / CustomObjectsApi answering from a recording and
    recording every write."""

    def __init__(self, data: dict[str, Any], missing: type[Exception] = NotFound) -> None:
        self.data = data
        self.missing = missing
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def list_node(self) -> SimpleNamespace:
        return SimpleNamespace(items=copy.deepcopy(self.data["nodes"]))

    def list_pod_for_all_namespaces(self) -> SimpleNamespace:
        return SimpleNamespace(items=copy.deepcopy(self.data["pods"]))

    def list_priority_class(self) -> SimpleNamespace:
        return SimpleNamespace(items=copy.deepcopy(self.data["priorityclasses"]))

    def list_cluster_custom_object(self, group: str, version: str, plural: str) -> Any:
        listed = self.data["custom"][plural]
        if listed is None:
            raise self.missing()
        return copy.deepcopy(listed)

    def __getattr__(self, name: str) -> Any:
        if not name.startswith(("create_", "patch_")):
            raise AttributeError(name)

        def record(*args: Any, **kwargs: Any) -> None:
            self.calls.append((name, args, kwargs))

        return record
