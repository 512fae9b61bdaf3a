"""What every built-in action shares: it is made from its configured arguments."""

from __future__ import annotations

from collections.abc import Mapping

#: Volcano's switch of its predicate error cache, an argument of the actions that place tasks
#: (allocate, backfill, preempt, reclaim); accepted and not read (allocate never retries a
#: template that found no node for the job, whatever it says).
PREDICATE_ERROR_CACHE = "predicateErrorCacheEnable"


class ConfiguredAction:
    """An action made from its configured arguments, which it keeps as ``arguments``.

    A subclass names itself (``name``) and declares the argument names it reads or accepts
    (``known_arguments``, as for a plugin: :class:`gangsched.framework.extension_points.Plugin`);
    one that reads
    any extends ``__init__``."""

    name: str
    known_arguments: tuple[str, ...]

    def __init__(self, arguments: Mapping[str, object]) -> None:
        self.arguments = arguments
