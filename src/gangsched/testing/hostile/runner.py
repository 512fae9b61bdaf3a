"""Running probes in worker processes under time and address-space limits, and shrinking a
failing case."""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing
import pickle
import signal
import sys
import time
import traceback
from collections.abc import Iterator
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING, Any

from gangsched.testing.hostile.case import Case
from gangsched.testing.hostile.probing import (
    _PACKAGE,
    Outcome,
    _configs,
    _failure,
    _ProbeTimeout,
    _where_stack,
    probe,
)

if TYPE_CHECKING:
    pass

# --------------------------------------------------------------------------------------------
# Workers


def _vm_size() -> int:
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _on_alarm(signum: int, frame: Any) -> None:
    raise _ProbeTimeout(_where_stack())


def _preload() -> None:
    """Import what a probe uses and build its configurations; an import that fails here fails
    again inside the probe, where it is reported with the input."""
    for module in ("scheduler", "cli", "io.k8s", "testing.invariants"):
        with contextlib.suppress(Exception):
            importlib.import_module(f"{_PACKAGE}.{module}")
    with contextlib.suppress(Exception):
        _configs()


def _worker(conn: Connection, time_limit: float, memory_limit: int) -> None:
    import resource

    _preload()  # before measuring the baseline
    base = _vm_size()
    if memory_limit > 0 and base:
        limit = base + memory_limit
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    signal.signal(signal.SIGALRM, _on_alarm)
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 1000))
    conn.send("ready")
    while True:
        try:
            case = conn.recv()
        except EOFError:
            return
        if case is None:
            return
        start = time.perf_counter()
        signal.setitimer(signal.ITIMER_REAL, time_limit)
        try:
            outcome = probe(case)
        except _ProbeTimeout as exc:
            where = str(exc.args[0]) if exc.args else "?"
            outcome = Outcome(
                "hang",
                "?",
                f"hang @ {where}",
                f"more than {time_limit:g} s",
                "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-4000:],
                time.perf_counter() - start,
            )
        except MemoryError as exc:
            outcome = _failure("blowup", "?", exc)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        try:
            conn.send(outcome)
        except Exception:  # an outcome that does not pickle
            conn.send(Outcome(outcome.category, outcome.stage, outcome.signature, "unpicklable"))
        if outcome.category in ("hang", "blowup"):
            return  # the interpreter may be in a bad state: the parent starts a fresh worker


def _dumps(case: Case) -> bytes:
    """Pickle a case; deep documents need more than the default recursion limit."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 20_000))
    try:
        return pickle.dumps(case, protocol=pickle.HIGHEST_PROTOCOL)
    finally:
        sys.setrecursionlimit(limit)


class _Slot:
    def __init__(self, ctx: Any, time_limit: float, memory_limit: int) -> None:
        self.parent, child = ctx.Pipe()
        self.process = ctx.Process(
            target=_worker, args=(child, time_limit, memory_limit), daemon=True
        )
        self.process.start()
        child.close()
        self.case: Case | None = None
        self.deadline = 0.0
        self.ready = False

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.parent.send(None)
        self.process.join(1)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.parent.close()


class Runner:
    """Runs cases in worker processes, each probe under a time and an address-space limit.

    ``time_limit`` seconds per probe (the worker's own alarm first, then a hard kill after
    twice the limit plus a margin); ``memory_limit`` bytes of address space above what the
    worker holds after importing gangsched. A worker that hangs, dies or blows up is replaced.
    """

    def __init__(
        self, *, workers: int = 1, time_limit: float = 10.0, memory_limit: int = 2**30
    ) -> None:
        method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
        if method == "fork":  # import once here, so that a restarted worker starts at once
            _preload()
        self._ctx = multiprocessing.get_context(method)
        self.time_limit = time_limit
        self.memory_limit = memory_limit
        self._slots = [self._start() for _ in range(max(1, workers))]

    def _start(self) -> _Slot:
        slot = _Slot(self._ctx, self.time_limit, self.memory_limit)
        try:
            if not slot.parent.poll(120):
                raise RuntimeError("fuzz worker did not start within 120 s")
            slot.parent.recv()
        except EOFError:
            raise RuntimeError(
                f"fuzz worker died on start (exit {slot.process.exitcode})"
            ) from None
        return slot

    def close(self) -> None:
        for slot in self._slots:
            slot.stop()

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run(self, cases: Iterator[Case]) -> Iterator[tuple[Case, Outcome]]:
        """Yield ``(case, outcome)`` as probes finish (not necessarily in input order)."""
        source = iter(cases)
        exhausted = False
        hard = self.time_limit * 2 + 5
        while True:
            for slot in self._slots:
                while slot.case is None and not exhausted:
                    case = next(source, None)
                    if case is None:
                        exhausted = True
                        break
                    try:
                        payload = _dumps(case)
                    except (RecursionError, pickle.PicklingError, TypeError) as exc:
                        yield case, Outcome("skipped", "send", "", f"cannot send: {exc!r}")
                        continue
                    slot.case = case
                    slot.deadline = time.monotonic() + hard
                    slot.parent.send_bytes(payload)
            busy = [s for s in self._slots if s.case is not None]
            if not busy:
                return
            timeout = max(0.0, min(s.deadline for s in busy) - time.monotonic())
            ready = wait([s.parent for s in busy], timeout=timeout)
            now = time.monotonic()
            for i, slot in enumerate(self._slots):
                if slot.case is None:
                    continue
                case = slot.case
                outcome: Outcome | None = None
                restart = False
                if slot.parent in ready:
                    try:
                        outcome = slot.parent.recv()
                    except (EOFError, OSError):
                        code = slot.process.exitcode
                        slot.process.join(5)
                        code = slot.process.exitcode
                        outcome = Outcome(
                            "blowup",
                            "?",
                            f"blowup worker died (exit {code})",
                            f"the worker process died with exit code {code}",
                        )
                        restart = True
                elif now >= slot.deadline:
                    slot.process.kill()
                    outcome = Outcome(
                        "hang", "?", "hang (killed)", f"no answer within {hard:g} s", ""
                    )
                    restart = True
                if outcome is None:
                    continue
                if outcome.category in ("hang", "blowup"):
                    restart = True
                slot.case = None
                if restart:
                    slot.stop()
                    self._slots[i] = self._start()
                yield case, outcome

    def probe(self, case: Case) -> Outcome:
        """One case, under the limits."""
        for _, outcome in self.run(iter([case])):
            return outcome
        raise RuntimeError("no outcome")


# --------------------------------------------------------------------------------------------
# Shrinking


def _smaller_docs(doc: Any) -> Iterator[Any]:
    """Documents one step smaller than ``doc``: a record list halved, a record removed, a key
    of a record removed, an element of a nested list removed."""
    if not isinstance(doc, dict):
        return
    for key in list(doc):
        value = doc[key]
        if isinstance(value, list) and len(value) > 1:
            for part in (value[: len(value) // 2], value[len(value) // 2 :]):
                yield {**doc, key: part}
    for key in list(doc):
        yield {k: v for k, v in doc.items() if k != key}
    for key in list(doc):
        value = doc[key]
        if not isinstance(value, list):
            continue
        for i in reversed(range(len(value))):
            yield {**doc, key: value[:i] + value[i + 1 :]}
        for i, record in enumerate(value):
            if not isinstance(record, dict):
                continue
            for field_name in list(record):
                if field_name == "name":
                    continue
                smaller = {k: v for k, v in record.items() if k != field_name}
                yield {**doc, key: [*value[:i], smaller, *value[i + 1 :]]}
                inner = record[field_name]
                if isinstance(inner, list) and inner:
                    for j in reversed(range(len(inner))):
                        cut = {**record, field_name: inner[:j] + inner[j + 1 :]}
                        yield {**doc, key: [*value[:i], cut, *value[i + 1 :]]}
                elif isinstance(inner, dict) and len(inner) > 1:
                    for sub in list(inner):
                        cut = {**record, field_name: {k: v for k, v in inner.items() if k != sub}}
                        yield {**doc, key: [*value[:i], cut, *value[i + 1 :]]}


def shrink(case: Case, signature: str, runner: Runner, *, budget: int = 300) -> Case:
    """A smaller case that still fails with ``signature`` (greedy, at most ``budget`` probes).
    Text cases are returned as they are."""
    if case.kind not in ("snapshot", "config"):
        return case
    best = case
    spent = 0
    progress = True
    while progress and spent < budget:
        progress = False
        fields = ("config", "doc") if case.kind == "config" else ("doc",)
        for name in fields:
            for smaller in _smaller_docs(getattr(best, name)):
                spent += 1
                candidate = Case(**{**best.__dict__, name: smaller})
                if runner.probe(candidate).signature == signature:
                    best = candidate
                    progress = True
                    break
                if spent >= budget:
                    break
            if progress or spent >= budget:
                break
    return best
