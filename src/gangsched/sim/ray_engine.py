"""Run the runs of a sweep as Ray tasks: one machine or a Ray cluster, the same call.

Theory of operation
-------------------
:func:`map_ordered` submits one Ray task per item (``fn(common, item)``), then gathers the
results *in submission order*, so the output is the list a sequential loop would build, whatever
the cluster finishes first. ``common`` (for the FGD sweep: the node and pod tables) is stored in
Ray's object store once and handed to every task by reference instead of being pickled per task.

Ray is optional (``pip install 'gangsched[ray]'``) and imported only when this engine is used.
When no Ray runtime is initialised, :func:`map_ordered` starts one (``address=None``: a local
instance using this machine's CPUs, or the cluster named by ``RAY_ADDRESS``; ``"auto"`` or
``"ray://host:10001"``: an existing cluster) and shuts it down afterwards; a runtime the caller
started is used as is and left running. On a cluster, every node needs ``gangsched`` importable
(installed, or shipped with a ``runtime_env``).

Each run is seeded and independent, so results are identical to the sequential and process-pool
engines, bit for bit.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any, TypeVar

from gangsched.errors import ConfigError, GangschedError

__all__ = ["map_ordered", "ray_available"]

C = TypeVar("C")
T = TypeVar("T")
R = TypeVar("R")


def ray_available() -> bool:
    """Whether ``import ray`` works here."""
    try:
        importlib.import_module("ray")
    except ImportError:
        return False
    return True


def _ray() -> ModuleType:
    try:
        return importlib.import_module("ray")
    except ImportError:
        raise ConfigError(
            "the 'ray' engine needs Ray: pip install 'gangsched[ray]'",
            kind="option",
            name="--engine",
        ) from None


def _unwrap(exc: BaseException) -> BaseException:
    """The library error behind a failed Ray task, if there is one."""
    cause: Any = getattr(exc, "cause", None)
    if isinstance(exc, GangschedError):
        return exc
    if isinstance(cause, GangschedError):
        return cause
    return exc


def map_ordered(
    fn: Callable[[C, T], R],
    items: Sequence[T],
    common: C,
    *,
    address: str | None = None,
    progress: Callable[[int, int, R], None] | None = None,
) -> list[R]:
    """``[fn(common, item) for item in items]``, each call a Ray task (module docstring).

    Parameters
    ----------
    fn:
        A module-level function (Ray ships it to the workers by reference).
    items:
        One task per item.
    common:
        Data every call needs; put in the object store once.
    address:
        Where to start or find Ray when it is not initialised yet (``ray.init(address=...)``).
    progress:
        Called as ``progress(done, total, result)`` while results are gathered, in order.

    Raises
    ------
    ConfigError
        Ray is not installed.
    GangschedError
        A run failed with a library error (re-raised as itself).
    """
    ray: Any = _ray()
    started = False
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False)
        started = True
    try:
        remote = ray.remote(fn)
        shared = ray.put(common)
        refs = [remote.remote(shared, item) for item in items]
        results: list[R] = []
        for ref in refs:
            try:
                result: R = ray.get(ref)
            except Exception as exc:  # a task's error comes back wrapped by Ray
                cause = _unwrap(exc)
                if cause is exc:
                    raise
                raise cause from None
            results.append(result)
            if progress is not None:
                progress(len(results), len(refs), result)
        return results
    finally:
        if started:
            ray.shutdown()
