"""The output of one scheduling cycle: plain, frozen, ordered records.

``Decisions.to_dict()`` is the interchange form (JSON-able, stable ordering: binds, evictions
and pipelined tasks in the order the scheduler made them; jobs and queues sorted by name), so
the same snapshot and config give byte-identical JSON.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Annotated, Any, ClassVar, Self, get_type_hints

from gangsched._frozen import FrozenDict, plain_fields
from gangsched.errors import DecisionError, SnapshotError
from gangsched.model import JobPhase, QueueState
from gangsched.units import show_value

__all__ = [
    "PLACEMENT_STATUSES",
    "Bind",
    "Decisions",
    "Eviction",
    "Hold",
    "JobAction",
    "JobStatus",
    "Pipeline",
    "PlacementInfo",
    "QueueStatus",
]

#: The statuses a placer reports (:class:`gangsched.placement.Status` values).
PLACEMENT_STATUSES = ("OPTIMAL", "FEASIBLE", "INFEASIBLE", "TIMED_OUT", "GREEDY")
#: The statuses under which a placer's gap to its bound is known.
_GAP_STATUSES = ("OPTIMAL", "FEASIBLE")


# ---------------------------------------------------------------- field checks

_JOB_PHASES = frozenset(p.value for p in JobPhase)
_QUEUE_STATES = frozenset(s.value for s in QueueState)


def _bad(record: str, field_name: str, detail: str, value: object) -> DecisionError:
    return DecisionError(f"{detail}, got {show_value(value)}", kind=record, field=field_name)


#: A field check: given the record's name, the field's name and its value, it raises a
#: :class:`DecisionError` naming both or returns the value the record keeps (a list of
#: indices or names as a tuple, any other value as it is).
_Check = Callable[[str, str, Any], object]


def _need_name(record: str, field_name: str, v: object) -> object:
    if not isinstance(v, str) or not v:
        raise _bad(record, field_name, "expected a non-empty string", v)
    return v


def _need_text(record: str, field_name: str, v: object) -> object:
    if not isinstance(v, str):
        raise _bad(record, field_name, "expected a string", v)
    return v


def _need_count(record: str, field_name: str, v: object) -> object:
    if type(v) is int and v >= 0:  # (the usual case: no bool is an int by type)
        return v
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise _bad(record, field_name, "expected an integer >= 0", v)
    return v


def _need_flag(record: str, field_name: str, v: object) -> object:
    if not isinstance(v, bool):
        raise _bad(record, field_name, "expected true or false", v)
    return v


def _need_number(record: str, field_name: str, v: object) -> object:
    """A number >= 0 (infinity allowed: a share over an empty deserved amount), not NaN."""
    if (type(v) is float or type(v) is int) and v >= 0:  # (NaN is not >= 0)
        return v
    if isinstance(v, bool) or not isinstance(v, int | float) or math.isnan(v) or v < 0:
        raise _bad(record, field_name, "expected a number >= 0", v)
    return v


def _indices(record: str, field_name: str, v: object) -> tuple[int, ...]:
    """A tuple of device indices (integers >= 0); a list is accepted."""
    if not isinstance(v, tuple | list) or any(
        isinstance(g, bool) or not isinstance(g, int) or g < 0 for g in v
    ):
        raise _bad(record, field_name, "expected a list of integers >= 0", v)
    return tuple(v)  # a repeated index is the invariant checker's finding, not a type error


def _node_names(record: str, field_name: str, v: object) -> tuple[str, ...]:
    """A tuple of node names; a list is accepted."""
    if not isinstance(v, tuple | list):
        raise _bad(record, field_name, "expected a list of node names", v)
    for n in v:
        _need_name(record, field_name, n)
    return tuple(v)


def _amounts(record: str, field_name: str, v: object) -> object:
    # (the usual case, plain names and plain integers, told by type alone: no bool is a plain
    # int by type)
    if (type(v) is FrozenDict or type(v) is dict) and (
        {*map(type, v)} <= _NAMES and {*map(type, v.values())} <= _INTEGERS
    ):
        return v
    if not isinstance(v, Mapping) or any(
        not isinstance(k, str) or isinstance(a, bool) or not isinstance(a, int)
        for k, a in v.items()
    ):
        raise _bad(record, field_name, "expected a mapping of resource names to integers", v)
    return v


#: The types of a resource mapping's keys and amounts that need no closer look.
_NAMES = frozenset({str})
_INTEGERS = frozenset({int})


def _one_of(allowed: frozenset[str]) -> _Check:
    """The check that a value is one of ``allowed``."""
    detail = f"expected one of {sorted(allowed)}"

    def check(record: str, field_name: str, v: object) -> object:
        if not isinstance(v, str) or v not in allowed:
            raise _bad(record, field_name, detail, v)
        return v

    return check


def _optional(check: _Check) -> _Check:
    """``check``, with None (unknown, unlimited) also accepted."""

    def maybe(record: str, field_name: str, v: object) -> object:
        return v if v is None else check(record, field_name, v)

    return maybe


#: Per record class, its checked fields and their checks, in field order (read once).
_CHECKS: dict[type, tuple[tuple[str, _Check], ...]] = {}


def _checks_of(cls: type) -> tuple[tuple[str, _Check], ...]:
    """The checks of the record ``cls`` is: those declared by the nearest record class of this
    module (a subclass made elsewhere keeps them and adds none; its own annotations are never
    evaluated)."""
    found = _CHECKS.get(cls)
    if found is None:
        declared = next(c for c in cls.__mro__ if c.__module__ == __name__)
        if declared is not cls:
            found = _checks_of(declared)
        else:
            hints = get_type_hints(cls, include_extras=True)
            found = tuple(
                (f.name, check)
                for f in fields(cls)
                for check in getattr(hints[f.name], "__metadata__", ())[:1]
            )
        _CHECKS[cls] = found
    return found


class _Record:
    """A decision record; ``to_dict()`` is its interchange form: its fields in declaration
    order, tuples as lists and mappings as dicts.

    A record is checked when it is made: each field whose type is ``Annotated[type, check]``
    goes through its check, in field order (the first bad field is the error, naming
    ``_record`` and the field), and keeps the value the check returns."""

    __slots__ = ()
    __dataclass_fields__: ClassVar[dict[str, Any]]
    _record: ClassVar[str]

    def __post_init__(self) -> None:
        for name, check in _checks_of(type(self)):
            value = getattr(self, name)
            kept = check(self._record, name, value)
            if kept is not value:
                object.__setattr__(self, name, kept)

    def to_dict(self) -> dict[str, object]:
        return plain_fields(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class _TaskOnNode(_Record):
    """A task on a node and its GPU device indices (a bind or a pipelined reservation)."""

    _record: ClassVar[str] = "task on node"

    task: Annotated[str, _need_name]
    node: Annotated[str, _need_name]
    gpu_indices: Annotated[tuple[int, ...], _indices] = ()

    @classmethod
    def _from_plain(cls, d: Mapping[str, Any]) -> Self:
        """The record back from its interchange form (``gpu_indices`` may be left out)."""
        return cls(task=d["task"], node=d["node"], gpu_indices=tuple(d.get("gpu_indices", ())))


@dataclass(frozen=True, slots=True, kw_only=True)
class Bind(_TaskOnNode):
    """Bind ``task`` to ``node`` (and these GPU device indices)."""

    _record: ClassVar[str] = "bind"


@dataclass(frozen=True, slots=True, kw_only=True)
class Eviction(_Record):
    """Evict ``task``; ``preemptor`` is the job whose pipelined tasks take its place."""

    _record: ClassVar[str] = "eviction"

    task: Annotated[str, _need_name]
    reason: Annotated[str, _need_text]
    preemptor: Annotated[str, _need_text] = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Pipeline(_TaskOnNode):
    """``task`` holds a reservation on ``node``: it binds there once resources are released."""

    _record: ClassVar[str] = "pipelined"


@dataclass(frozen=True, slots=True, kw_only=True)
class JobAction(_Record):
    """A lifecycle action a job policy asks the job controller to take."""

    _record: ClassVar[str] = "job action"

    job: Annotated[str, _need_name]
    action: Annotated[str, _need_name]
    cause: Annotated[str, _need_text]


@dataclass(frozen=True, slots=True, kw_only=True)
class Hold(_Record):
    """``nodes`` are held for the starving head-of-line ``job``: only tasks that cannot delay
    it may use them. ``expected_wait`` is when it should fit, in seconds from now (from the
    jobs' walltimes), or None when unknown."""

    _record: ClassVar[str] = "hold"

    job: Annotated[str, _need_name]
    nodes: Annotated[tuple[str, ...], _node_names]
    expected_wait: Annotated[int | None, _optional(_need_count)] = None


@dataclass(frozen=True, slots=True, kw_only=True)
class PlacementInfo(_Record):
    """What the placer said about one job's gang in the cycle (its last attempt).

    ``placer`` is the placer's name (``greedy``, ``cpsat``, ``cpsat-joint`` or a custom
    placer's ``name``); ``status`` one of :data:`PLACEMENT_STATUSES`: OPTIMAL / FEASIBLE (the
    solver's answer), INFEASIBLE (proven: the gang fits nowhere), TIMED_OUT (the solver ran
    out of time) or GREEDY (the heuristic's answer). ``gap`` is the relative distance of the
    answer to the solver's bound, known only for OPTIMAL (0.0) and FEASIBLE answers, else None
    (no bound was proven: a greedy answer, a time-out). ``fallback`` says the solver's answer
    was replaced by the greedy one (after a time-out, or when greedy did better).
    """

    placer: str
    status: str
    gap: float | None = None
    fallback: bool = False

    @classmethod
    def from_dict(cls, v: object, *, job: str) -> PlacementInfo:
        """The interchange form back, checked: a known status, a gap only where one is known
        (a finite number ≥ 0), a boolean ``fallback``."""
        where = f"placements[{job}]"
        if not isinstance(v, Mapping):
            raise SnapshotError("expected a mapping", kind="decisions", field=where)
        unknown = sorted(set(v) - {"placer", "status", "gap", "fallback"})
        if unknown:
            raise SnapshotError(
                f"unknown key(s) {', '.join(map(repr, unknown))}", kind="decisions", field=where
            )
        placer = v.get("placer")
        if not isinstance(placer, str) or not placer:
            raise SnapshotError("expected a placer name", kind="decisions", field=f"{where}.placer")
        status = v.get("status")
        if status not in PLACEMENT_STATUSES:
            raise SnapshotError(
                f"expected one of {', '.join(PLACEMENT_STATUSES)}, got {show_value(status)}",
                kind="decisions",
                field=f"{where}.status",
            )
        gap = v.get("gap")
        if gap is not None:
            if (
                isinstance(gap, bool)
                or not isinstance(gap, int | float)
                or not math.isfinite(gap)
                or gap < 0
            ):
                raise SnapshotError(
                    "expected a finite number >= 0 or null", kind="decisions", field=f"{where}.gap"
                )
            if status not in _GAP_STATUSES:
                raise SnapshotError(
                    f"a {status} placement has no gap (null expected)",
                    kind="decisions",
                    field=f"{where}.gap",
                )
            gap = float(gap)
        fallback = v.get("fallback", False)
        if not isinstance(fallback, bool):
            raise SnapshotError(
                "expected true or false", kind="decisions", field=f"{where}.fallback"
            )
        return cls(placer=placer, status=str(status), gap=gap, fallback=fallback)


@dataclass(frozen=True, slots=True, kw_only=True)
class JobStatus(_Record):
    """A job's state after the cycle (Volcano's PodGroup status).

    ``phase`` is Pending, Inqueue, Running, Unknown or Completed; ``reason`` a short machine
    word (``Scheduled``, ``Unschedulable``, ``NotEnqueued`` ...); ``message`` says why in words.
    """

    _record: ClassVar[str] = "job status"

    phase: Annotated[str, _one_of(_JOB_PHASES)]
    reason: Annotated[str, _need_text] = ""
    message: Annotated[str, _need_text] = ""
    ready: Annotated[bool, _need_flag] = False
    min_available: Annotated[int, _need_count] = 0
    running: Annotated[int, _need_count] = 0
    allocated: Annotated[int, _need_count] = 0
    pipelined: Annotated[int, _need_count] = 0
    pending: Annotated[int, _need_count] = 0
    succeeded: Annotated[int, _need_count] = 0
    failed: Annotated[int, _need_count] = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueStatus(_Record):
    """A queue after the cycle, as ``kubectl get queue`` and Volcano's metrics show it.

    Resource mappings are canonical amounts (millicores, bytes, milli-GPU, counts).
    ``real_capability`` is the ceiling the queue plugin enforces (capability and what other
    queues' guarantees leave; unlimited dimensions are absent); ``request`` is allocated plus
    pending, as Volcano's ``queue_request`` metric. The ``*_gpu`` fields are the GPU gauges
    Volcano exports, in whole GPUs; ``capability_gpu`` is None when unlimited.
    """

    _record: ClassVar[str] = "queue status"

    state: Annotated[str, _one_of(_QUEUE_STATES)] = "Open"
    allocated: Annotated[Mapping[str, int], _amounts] = field(default_factory=FrozenDict)
    deserved: Annotated[Mapping[str, int], _amounts] = field(default_factory=FrozenDict)
    guarantee: Annotated[Mapping[str, int], _amounts] = field(default_factory=FrozenDict)
    capability: Annotated[Mapping[str, int], _amounts] = field(default_factory=FrozenDict)
    inqueue_resources: Annotated[Mapping[str, int], _amounts] = field(default_factory=FrozenDict)
    pending_resources: Annotated[Mapping[str, int], _amounts] = field(default_factory=FrozenDict)
    share: Annotated[float, _need_number] = 0.0
    inqueue: Annotated[int, _need_count] = 0
    pending: Annotated[int, _need_count] = 0
    running: Annotated[int, _need_count] = 0
    unknown: Annotated[int, _need_count] = 0
    completed: Annotated[int, _need_count] = 0
    weight: Annotated[int, _need_count] = 1
    real_capability: Annotated[Mapping[str, int], _amounts] = field(default_factory=FrozenDict)
    request: Annotated[Mapping[str, int], _amounts] = field(default_factory=FrozenDict)
    overused: Annotated[bool, _need_flag] = False
    allocated_gpu: Annotated[float, _need_number] = 0.0
    pending_gpu: Annotated[float, _need_number] = 0.0
    inqueue_gpu: Annotated[float, _need_number] = 0.0
    deserved_gpu: Annotated[float, _need_number] = 0.0
    capability_gpu: Annotated[float | None, _optional(_need_number)] = None

    def to_dict(self) -> dict[str, object]:
        out = plain_fields(self)
        out["share"] = round(self.share, 9)
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class Decisions:
    """Everything one cycle decided. Plain data; apply it with any client.

    ``nondeterministic`` names the placer options in effect in the cycle under which the same
    snapshot and configuration may give different decisions (CP-SAT with ``workers`` above 1
    or a wall-clock ``time_limit_s``, e.g. the allocate action's ``placer.workers`` /
    ``placer.time-limit``); empty (and :attr:`deterministic` true) otherwise.

    ``placements`` holds, per job whose gang went through a placer (every topology job; every
    gang with a CP-SAT placer), the placer's status and gap (:class:`PlacementInfo`).
    """

    binds: tuple[Bind, ...] = ()
    evictions: tuple[Eviction, ...] = ()
    pipelined: tuple[Pipeline, ...] = ()
    jobs: Mapping[str, JobStatus] = field(default_factory=FrozenDict)
    queues: Mapping[str, QueueStatus] = field(default_factory=FrozenDict)
    task_reasons: Mapping[str, str] = field(default_factory=FrozenDict)
    job_actions: tuple[JobAction, ...] = ()
    preemption_reasons: Mapping[str, str] = field(default_factory=FrozenDict)
    holds: tuple[Hold, ...] = ()
    nondeterministic: tuple[str, ...] = ()
    placements: Mapping[str, PlacementInfo] = field(default_factory=FrozenDict)

    @property
    def deterministic(self) -> bool:
        """Whether no nondeterministic placer option was in effect in the cycle."""
        return not self.nondeterministic

    def to_dict(self) -> dict[str, object]:
        return {
            "binds": [b.to_dict() for b in self.binds],
            "evictions": [e.to_dict() for e in self.evictions],
            "pipelined": [p.to_dict() for p in self.pipelined],
            "jobs": {name: self.jobs[name].to_dict() for name in sorted(self.jobs)},
            "queues": {name: self.queues[name].to_dict() for name in sorted(self.queues)},
            "task_reasons": {name: self.task_reasons[name] for name in sorted(self.task_reasons)},
            "job_actions": [a.to_dict() for a in self.job_actions],
            "preemption_reasons": {
                name: self.preemption_reasons[name] for name in sorted(self.preemption_reasons)
            },
            "holds": [h.to_dict() for h in self.holds],
            "nondeterministic": list(self.nondeterministic),
            "placements": {
                name: self.placements[name].to_dict() for name in sorted(self.placements)
            },
        }

    @classmethod
    def from_dict(cls, d: object) -> Decisions:
        """Inverse of :meth:`to_dict`: lets any scheduler express its output for checking."""
        if not isinstance(d, Mapping):
            raise SnapshotError("expected a mapping", kind="decisions")
        try:
            return cls(
                binds=tuple(Bind._from_plain(b) for b in _list(d, "binds")),
                evictions=tuple(
                    Eviction(
                        task=e["task"], reason=e.get("reason", ""), preemptor=e.get("preemptor", "")
                    )
                    for e in _list(d, "evictions")
                ),
                pipelined=tuple(Pipeline._from_plain(p) for p in _list(d, "pipelined")),
                jobs=FrozenDict(
                    {name: JobStatus(**_fields(v)) for name, v in _by_name(d, "jobs").items()}
                ),
                queues=FrozenDict(
                    {
                        name: QueueStatus(**_queue_fields(v))
                        for name, v in _by_name(d, "queues").items()
                    }
                ),
                task_reasons=_texts(d, "task_reasons"),
                job_actions=tuple(
                    JobAction(job=a["job"], action=a["action"], cause=a.get("cause", ""))
                    for a in _list(d, "job_actions")
                ),
                preemption_reasons=_texts(d, "preemption_reasons"),
                holds=tuple(
                    Hold(
                        job=h["job"], nodes=h.get("nodes", ()), expected_wait=h.get("expected_wait")
                    )
                    for h in _list(d, "holds")
                ),
                nondeterministic=_strings(d.get("nondeterministic", ()), "nondeterministic"),
                placements=_placements(d.get("placements", {})),
            )
        except (KeyError, TypeError, AttributeError) as exc:
            raise SnapshotError(f"malformed decisions: {exc!r}", kind="decisions") from None


def _placements(v: object) -> FrozenDict[str, PlacementInfo]:
    if not isinstance(v, Mapping):
        raise SnapshotError("expected a mapping", kind="decisions", field="placements")
    out: dict[str, PlacementInfo] = {}
    for job, info in v.items():
        if not isinstance(job, str):
            raise SnapshotError("expected job names as keys", kind="decisions", field="placements")
        out[job] = PlacementInfo.from_dict(info, job=job)
    return FrozenDict(out)


def _list(d: Mapping[str, Any], field: str) -> list[Any] | tuple[Any, ...]:
    """The list under ``field`` of the interchange form (absent: empty)."""
    v = d.get(field, ())
    if not isinstance(v, list | tuple):
        raise SnapshotError(f"expected a list, got {show_value(v)}", kind="decisions", field=field)
    return v


def _by_name(d: Mapping[str, Any], field: str) -> Mapping[str, Any]:
    """The mapping under ``field`` of the interchange form, keyed by names (absent: empty)."""
    v = d.get(field, {})
    if not isinstance(v, Mapping) or not all(isinstance(k, str) and k for k in v):
        raise SnapshotError(
            f"expected a mapping keyed by names, got {show_value(v)}", kind="decisions", field=field
        )
    return v


def _texts(d: Mapping[str, Any], field: str) -> FrozenDict[str, str]:
    """The name-to-text mapping under ``field`` of the interchange form (absent: empty)."""
    v = _by_name(d, field)
    bad = next((k for k, text in v.items() if not isinstance(text, str)), None)
    if bad is not None:
        raise SnapshotError(
            f"expected a string, got {show_value(v[bad])}", kind="decisions", field=f"{field}.{bad}"
        )
    return FrozenDict(v)


def _strings(v: object, field: str) -> tuple[str, ...]:
    """A list of strings of the interchange form, as a tuple."""
    if isinstance(v, str | bytes) or not isinstance(v, list | tuple):
        raise SnapshotError("expected a list of strings", kind="decisions", field=field)
    if not all(isinstance(x, str) for x in v):
        raise SnapshotError("expected a list of strings", kind="decisions", field=field)
    return tuple(v)


def _fields(v: Any) -> dict[str, Any]:
    if not isinstance(v, Mapping):
        raise TypeError("job status must be a mapping")
    return dict(v)


def _queue_fields(v: Any) -> dict[str, Any]:
    out = _fields(v)
    for key, check in _checks_of(QueueStatus):
        if check is _amounts and key in out:  # the resource mappings, frozen
            out[key] = FrozenDict(out[key])
    return out
