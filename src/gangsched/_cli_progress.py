"""Progress of long command-line work on stderr: done/total, elapsed time and an ETA.

On a terminal the line is redrawn in place (at most twice a second) and finished with a
newline; elsewhere (a log, a pipe, a test) it stays quiet apart from the first step, the last
one and at most one line every :data:`QUIET_EVERY_S` seconds, so CI logs are not flooded.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

__all__ = ["QUIET_EVERY_S", "Progress", "format_duration"]

#: Seconds between two progress lines when stderr is not a terminal.
QUIET_EVERY_S = 10.0
_TTY_EVERY_S = 0.5


def format_duration(seconds: float) -> str:
    """``42s``, ``3m05s``, ``1h02m``: short, for a progress line."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


class Progress:
    """Report ``step(done, total, what)`` calls as one progress line on ``stream``.

    ``clock`` is injectable for tests; the ETA is the mean time per step so far times the
    steps left.
    """

    def __init__(
        self,
        stream: TextIO,
        prefix: str = "",
        *,
        clock: Callable[[], float] = time.perf_counter,
        tty: bool | None = None,
    ) -> None:
        self._stream = stream
        self._prefix = prefix
        self._clock = clock
        self._start = clock()
        self._last = -float("inf")
        self._open = False
        if tty is None:
            isatty = getattr(stream, "isatty", None)
            tty = bool(isatty()) if callable(isatty) else False
        self._tty = tty

    def line(self, done: int, total: int, what: str = "") -> str:
        """The text of the progress line after ``done`` of ``total`` steps."""
        elapsed = self._clock() - self._start
        text = f"{self._prefix}[{done}/{total}]"
        if what:
            text += f" {what}"
        text += f" ({format_duration(elapsed)} elapsed"
        if 0 < done < total:
            text += f", ETA {format_duration(elapsed / done * (total - done))}"
        return text + ")"

    def step(self, done: int, total: int, what: str = "") -> None:
        now = self._clock()
        final = done >= total
        every = _TTY_EVERY_S if self._tty else QUIET_EVERY_S
        if not final and done > 1 and now - self._last < every:
            return
        self._last = now
        text = self.line(done, total, what)
        try:
            if self._tty:
                self._stream.write("\r\x1b[2K" + text + ("\n" if final else ""))
                self._open = not final
            else:
                self._stream.write(text + "\n")
            self._stream.flush()
        except (OSError, ValueError):
            pass  # a stderr that cannot be written is given up on quietly

    def close(self) -> None:
        """End an open terminal line (after an interruption or an error)."""
        if self._open:
            try:
                self._stream.write("\n")
                self._stream.flush()
            except (OSError, ValueError):
                pass
            self._open = False
