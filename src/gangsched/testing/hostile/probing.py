"""Probing one hostile case in this process: the outcome categories, the configurations every
accepted snapshot is scheduled under, and the checks (typed rejection, determinism, invariants,
an unmutated snapshot, an acceptable next snapshot)."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import re
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from gangsched.testing.hostile.case import Case

if TYPE_CHECKING:
    from gangsched.config import Config

T = TypeVar("T")

# --------------------------------------------------------------------------------------------
# Probing


#: Outcome categories that are failures.
FAILURES: tuple[str, ...] = (
    "escape",
    "hang",
    "blowup",
    "violation",
    "nondeterminism",
    "late-reject",
)


@dataclass(frozen=True)
class Outcome:
    """What one probe found. ``category`` is ``accepted``, ``rejected`` or one of
    :data:`FAILURES`; ``signature`` groups failures of one cause."""

    category: str
    stage: str = ""
    signature: str = ""
    message: str = ""
    trace: str = ""
    seconds: float = 0.0


class _ProbeTimeout(BaseException):
    """Raised by the time-limit alarm inside a worker (a BaseException so that ``except
    Exception`` in the code under test does not swallow it)."""


_CONFIG_CACHE: dict[str, Config] = {}


def _configs() -> dict[str, Config]:
    """Name → one of the configurations every accepted snapshot is scheduled under."""
    if not _CONFIG_CACHE:
        from gangsched.config import BUILTIN_PLUGINS, Config
        from gangsched.fragmentation import POLICIES

        _CONFIG_CACHE["default"] = Config.default()
        _CONFIG_CACHE["preempt"] = Config.from_dict(
            {
                "actions": ["enqueue", "allocate", "preempt", "reclaim", "backfill"],
                "tiers": [
                    [{"name": "priority"}, {"name": "gang"}, {"name": "conformance"}],
                    [
                        {"name": "drf"},
                        {"name": "predicates"},
                        {"name": "proportion"},
                        {"name": "nodeorder"},
                        {"name": "binpack"},
                        {"name": "network-topology-aware"},
                    ],
                ],
            }
        )
        _CONFIG_CACHE["hierarchy"] = Config.from_dict(
            {
                "actions": ["enqueue", "allocate", "preempt", "reclaim", "backfill"],
                "tiers": [
                    [{"name": "priority"}, {"name": "gang"}],
                    [
                        {"name": "drf", "enableHierarchy": True},
                        {"name": "predicates"},
                        {"name": "capacity", "enableHierarchy": True},
                        {"name": "network-topology-aware"},
                    ],
                ],
            }
        )
        # Every GPU node scorer at once (their scores add up), on whatever the input holds:
        # clusters without GPUs, without nodes, or with devices at their bounds.
        _CONFIG_CACHE["gpu-scorers"] = Config.from_dict(
            {
                "actions": ["enqueue", "allocate", "backfill"],
                "tiers": [
                    [{"name": "priority"}, {"name": "gang"}],
                    [
                        {"name": "predicates"},
                        {"name": "proportion"},
                        *({"name": name} for name in sorted(set(POLICIES) & set(BUILTIN_PLUGINS))),
                    ],
                ],
            }
        )
    return _CONFIG_CACHE


#: Names of the configurations every accepted snapshot is scheduled under.
CONFIGS: tuple[str, ...] = ("default", "preempt", "hierarchy", "gpu-scorers")

_TESTING_DIR = os.path.dirname(os.path.abspath(__file__))
_PACKAGE_DIR = os.path.dirname(_TESTING_DIR)
_PACKAGE = __name__.rsplit(".", 2)[0]


def _is_fuzzer(path: str) -> bool:
    """Whether ``path`` is one of the fuzzer's own files (``hostile.py``, ``_hostile_*.py``)."""
    name = os.path.basename(path)
    return os.path.dirname(path) == _TESTING_DIR and name.lstrip("_").startswith("hostile")


def _innermost(frames: traceback.StackSummary) -> str:
    """``module:function`` of the innermost gangsched frame outside the fuzzer's own files."""
    best = "?"
    for frame in frames:
        path = os.path.abspath(frame.filename)
        if path.startswith(_PACKAGE_DIR) and not _is_fuzzer(path):
            rel = os.path.relpath(path, os.path.dirname(_PACKAGE_DIR))
            best = f"{rel[:-3].replace(os.sep, '.')}:{frame.name}"
    return best


def _where(tb: Any) -> str:
    """Where an exception was raised: see :func:`_innermost`."""
    return _innermost(traceback.extract_tb(tb))


def _where_stack() -> str:
    """Where the caller of the caller is now: see :func:`_innermost`."""
    return _innermost(traceback.StackSummary.from_list(traceback.extract_stack()[:-2]))


_NUM = re.compile(r"\d+")
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")


def _shape(message: str) -> str:
    return _NUM.sub("N", _QUOTED.sub("'…'", message))[:90]


#: The characters of a refusal's message an outcome keeps.
_REJECTED_TEXT = 300


def _rejected(stage: str, message: str) -> Outcome:
    """The input was refused at ``stage`` with a typed error: the expected outcome."""
    return Outcome("rejected", stage, message=message[:_REJECTED_TEXT])


def _failure(category: str, stage: str, exc: BaseException, extra: str = "") -> Outcome:
    where = _where(exc.__traceback__)
    message = f"{type(exc).__name__}: {exc}"[:2000]
    if category in ("violation", "nondeterminism", "late-reject"):
        signature = f"{category} {stage.split('[')[0]}: {_shape(str(exc))}"
    else:
        signature = f"{category} {type(exc).__name__} @ {where}"
    trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-8))
    return Outcome(category, stage, signature, message + extra, trace[-4000:])


def _next_doc(before: dict[str, Any], decisions: Any) -> dict[str, Any]:
    """The snapshot document one cycle later: binds bound, reservations pipelined, victims
    releasing."""
    doc = copy.deepcopy(before)
    by_name = {t["name"]: t for t in doc["tasks"]}
    for e in decisions.evictions:
        by_name[e.task]["phase"] = "Releasing"
    for kind, items in (("Pipelined", decisions.pipelined), ("Bound", decisions.binds)):
        for d in items:
            t = by_name[d.task]
            t["phase"] = kind
            t["node"] = d.node
            t["gpu_indices"] = list(d.gpu_indices)
    return doc


def _schedule_checked(
    snapshot: Any,
    config: Config,
    label: str,
) -> tuple[Outcome | None, Any]:
    """Schedule twice, compare, and run the invariant checks of the rules ``config``'s
    plugins enforce (:func:`~gangsched.testing.invariants.check_cycle`)."""
    from gangsched.errors import GangschedError
    from gangsched.scheduler import schedule
    from gangsched.testing.invariants import InvariantViolation, check_cycle

    stage = f"schedule[{label}]"
    try:
        first = schedule(snapshot, config)
    except GangschedError as exc:
        return _failure("late-reject", stage, exc), None
    try:
        second = schedule(snapshot, config)
    except GangschedError as exc:
        return _failure("nondeterminism", stage, exc), None
    a = json.dumps(first.to_dict(), sort_keys=True)
    b = json.dumps(second.to_dict(), sort_keys=True)
    if a != b and not first.nondeterministic:  # a wall-clock solver budget says so
        return Outcome(
            "nondeterminism",
            stage,
            f"nondeterminism {label}",
            f"two runs differ under {label}",
        ), None
    stage = f"check[{label}]"
    try:
        check_cycle(snapshot, first, config)
    except InvariantViolation as exc:
        return _failure("violation", stage, exc), None
    return None, first


class _Stage:
    """The stage a probe has reached, named in the outcome of an exception it did not expect."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


def _guarded(body: Callable[[_Stage], Outcome], first: str) -> Outcome:
    """Run one probe's stages: a time-out passes through; a MemoryError is a blow-up and any
    other exception an escape, at the stage reached."""
    stage = _Stage(first)
    try:
        return body(stage)
    except _ProbeTimeout:
        raise
    except _Finished as done:
        return done.outcome
    except MemoryError as exc:
        return _failure("blowup", stage.name, exc)
    except Exception as exc:
        return _failure("escape", stage.name, exc)


class _Finished(Exception):
    """Ends a probe's stages early with ``outcome`` (:func:`_guarded` returns it)."""

    def __init__(self, outcome: Outcome) -> None:
        super().__init__(outcome.category)
        self.outcome = outcome


def _read_input(stage: _Stage, read: Callable[[], T], *, explained: bool = False) -> T:
    """What ``read`` makes of the case's input. A typed error ends the probe with the
    expected outcome, the refusal at ``stage`` (``explained``: a refusal with an empty
    message is an escape instead)."""
    from gangsched.errors import GangschedError

    try:
        return read()
    except GangschedError as exc:
        if explained and not str(exc):
            found = Outcome("escape", stage.name, "escape empty-message", repr(exc))
        else:
            found = _rejected(stage.name, str(exc))
        raise _Finished(found) from None


def _snapshot_stages(case: Case, stage: _Stage) -> Outcome:
    """The stages of a snapshot case, each named in ``stage`` before it runs."""
    from gangsched.errors import GangschedError
    from gangsched.model.snapshot import Snapshot
    from gangsched.scheduler import explain
    from gangsched.testing.invariants import InvariantViolation, check_snapshot_unmutated

    snapshot = _read_input(stage, lambda: Snapshot.from_dict(case.doc), explained=True)
    stage.name = "to_dict"
    before = snapshot.to_dict()
    stage.name = "round-trip"
    again = Snapshot.from_dict(copy.deepcopy(before))
    if again.to_dict() != before:
        return Outcome("violation", stage.name, "violation round-trip: to_dict differs", "")
    first_decisions = None
    for label in CONFIGS:
        config = _configs()[label]
        stage.name = f"schedule[{label}]"
        bad, decisions = _schedule_checked(snapshot, config, label)
        if bad is not None:
            return bad
        if first_decisions is None:
            first_decisions = decisions
        stage.name = f"unmutated[{label}]"
        try:
            check_snapshot_unmutated(before, snapshot)
        except InvariantViolation as exc:
            return _failure("violation", stage.name, exc)
        stage.name = f"next-cycle[{label}]"
        try:
            Snapshot.from_dict(_next_doc(before, decisions))
        except GangschedError as exc:
            return _failure("violation", stage.name, exc)
    stage.name = "explain"
    pending = [t.name for t in snapshot.tasks if t.phase.value == "Pending"]
    if pending:
        try:
            explain(snapshot, pending[0])
        except GangschedError as exc:
            return _failure("late-reject", stage.name, exc)
    return Outcome("accepted", stage.name)


def _config_stages(case: Case, stage: _Stage) -> Outcome:
    """The stages of a configuration case, each named in ``stage`` before it runs."""
    from gangsched.config import Config
    from gangsched.errors import GangschedError
    from gangsched.model.snapshot import Snapshot

    config = _read_input(stage, lambda: Config.from_dict(case.config))
    stage.name = "yaml-round-trip"
    try:
        again = Config.from_volcano_yaml(config.to_volcano_yaml())
    except GangschedError as exc:
        return _failure("violation", stage.name, exc)
    if again.to_volcano_yaml() != config.to_volcano_yaml():
        return Outcome("violation", stage.name, "violation yaml-round-trip: differs", "")
    snapshot = Snapshot.from_dict(case.doc)
    stage.name = "schedule[config]"
    bad, _ = _schedule_checked(snapshot, config, "config")
    if bad is not None and bad.category == "late-reject":
        # plugin and action arguments are read when the session opens
        return _rejected(stage.name, bad.message)
    if bad is not None:
        return bad
    return Outcome("accepted", stage.name)


def _probe_text(case: Case, workdir: str) -> Outcome:
    path = os.path.join(workdir, "input.yaml")
    with open(path, "wb") as f:
        f.write(case.data)
    return _guarded(lambda stage: _text_stages(case, workdir, path, stage), case.target)


def _text_stages(case: Case, workdir: str, path: str, stage: _Stage) -> Outcome:
    """The stages of a file case (written at ``path``): the loader, the Volcano YAML reader or
    the command line."""
    from gangsched.config import Config

    if case.target == "load":
        from gangsched.io.k8s import load_files

        _read_input(stage, lambda: load_files([path]))
        return Outcome("accepted", stage.name)
    if case.target == "volcano-yaml":
        _read_input(stage, lambda: Config.from_volcano_yaml(case.data.decode("latin-1")))
        return Outcome("accepted", stage.name)
    from gangsched.cli import main as cli_main

    if case.target == "cli-config":
        snap = os.path.join(workdir, "snap.json")
        with open(snap, "w", encoding="utf-8") as f:
            json.dump({"nodes": [{"name": "n"}], "queues": [{"name": "default"}]}, f)
        argv = ["schedule", "-f", snap, "--config", path]
    else:
        argv = ["schedule", "-f", path, "-o", "json"]
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = cli_main(argv)
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else 1
    text = err.getvalue()
    if "Traceback" in text or status not in (0, 1, 2):
        return Outcome(
            "escape",
            stage.name,
            f"escape cli status {status}",
            f"status {status}: {text[-500:]}",
        )
    if status != 0 and not text.startswith("gangsched"):
        return Outcome("escape", stage.name, "escape cli message", text[-500:])
    return Outcome(
        "accepted" if status == 0 else "rejected", stage.name, message=text[-_REJECTED_TEXT:]
    )


def _probe_selftest(case: Case) -> Outcome:
    """Cases that misbehave on purpose, to test the harness: ``hang``, ``memory``, ``exit``,
    ``raise`` and ``ok``."""
    if case.target == "hang":
        while True:
            time.sleep(0.05)
    if case.target == "memory":
        import numpy as np

        try:
            # 64 GiB in 64 MiB pieces; ``np.empty`` only reserves address space, so the limit
            # is hit at once however loaded the machine is (``bytearray`` zero-fills first)
            hog = [np.empty(2**26, dtype=np.uint8) for _ in range(1 << 10)]
        except MemoryError as exc:
            return _failure("blowup", "selftest", exc)
        return Outcome("accepted", "selftest", message=f"allocated {len(hog)} pieces")
    if case.target == "exit":
        os._exit(3)
    if case.target == "raise":
        try:
            raise KeyError("selftest")
        except KeyError as exc:
            return _failure("escape", "selftest", exc)
    return Outcome("accepted", "selftest")


def probe(case: Case, *, workdir: str | None = None) -> Outcome:
    """Run one case in this process (no time or memory limit: see :class:`Runner`)."""
    start = time.perf_counter()
    with warnings.catch_warnings():
        # a float overflow inside the library is a silent wrap or an infinity: an escape
        warnings.filterwarnings("error", message="overflow encountered", category=RuntimeWarning)
        if case.kind == "selftest":
            outcome = _probe_selftest(case)
        elif case.kind == "snapshot":
            outcome = _guarded(lambda stage: _snapshot_stages(case, stage), "from_dict")
        elif case.kind == "config":
            outcome = _guarded(lambda stage: _config_stages(case, stage), "Config.from_dict")
        else:
            with tempfile.TemporaryDirectory(dir=workdir) as tmp:
                outcome = _probe_text(case, tmp)
    return Outcome(
        outcome.category,
        outcome.stage,
        outcome.signature,
        outcome.message,
        outcome.trace,
        time.perf_counter() - start,
    )
