"""Progress bars of long command-line work on stderr, drawn by tqdm: done/total, elapsed time
and an ETA.

A bar is drawn only when its stream is a terminal; in a log, a pipe or a test it says nothing
(the commands print their own summary when they finish). ``GANGSCHED_PROGRESS=1`` draws the bar
on any stream and ``GANGSCHED_PROGRESS=0`` never draws it. tqdm is imported only when a bar is
drawn.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from gangsched.sim.replay import ReplayProgress

__all__ = ["BAR_FORMAT", "PROGRESS_ENV", "Progress", "format_duration", "replay_progress"]

#: Environment variable forcing the bars on (``1``) or off (``0``) whatever the stream is.
PROGRESS_ENV = "GANGSCHED_PROGRESS"
#: tqdm's layout: ``fgd:  40%|████      | 2/5 [00:20 elapsed, ETA 00:30, bestfit seed 42]``.
BAR_FORMAT = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed} elapsed, ETA {remaining}{postfix}]"
#: Seconds between two redraws of a bar.
REDRAW_S = 0.5


def format_duration(seconds: float) -> str:
    """``42s``, ``3m05s``, ``1h02m``: short, for a progress line."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def _wanted(stream: TextIO, tty: bool | None) -> bool:
    if tty is not None:
        return tty
    forced = os.environ.get(PROGRESS_ENV, "").strip()
    if forced in ("0", "1"):
        return forced == "1"
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty()) if callable(isatty) else False
    except (OSError, ValueError):
        return False


class Progress:
    """A progress bar fed by ``step(done, total, what)`` calls (``what`` is shown after the
    ETA), on ``stream`` when it is a terminal (``tty`` overrides the test, for tests).

    The bar is made at the first step, so a command that fails before any work draws nothing;
    :meth:`close` ends it (it is idempotent, and called by the last step too).
    """

    def __init__(
        self, stream: TextIO, prefix: str = "", *, unit: str = "run", tty: bool | None = None
    ) -> None:
        self._stream = stream
        self._prefix = prefix.strip()
        self._unit = unit
        self._on = _wanted(stream, tty)
        self._bar: Any = None

    @property
    def enabled(self) -> bool:
        """Whether this progress draws a bar at all."""
        return self._on

    def step(self, done: int, total: int, what: str = "") -> None:
        """``done`` of ``total`` steps are finished; ``what`` describes the last one."""
        if not self._on:
            return
        try:
            if self._bar is None:
                from tqdm import tqdm

                self._bar = tqdm(
                    total=total,
                    desc=self._prefix or None,
                    unit=self._unit,
                    file=self._stream,
                    bar_format=BAR_FORMAT,
                    mininterval=REDRAW_S,
                    dynamic_ncols=True,
                    leave=True,
                )
            bar = self._bar
            if bar.total != total:
                bar.total = total
            if what:
                bar.set_postfix_str(what, refresh=False)
            bar.update(max(0, min(done, total) - bar.n))
            if done >= total:
                self.close()
        except ImportError:
            self._on = False  # tqdm removed from the environment: no bar, the work goes on
        except (OSError, ValueError):
            self._on = False  # a stderr that cannot be written is given up on quietly

    def close(self) -> None:
        """End the bar (after the last step, an interruption or an error)."""
        bar, self._bar = self._bar, None
        if bar is not None:
            with contextlib.suppress(OSError, ValueError):
                bar.close()


def replay_progress(
    stream: TextIO, *, tty: bool | None = None
) -> tuple[Callable[[ReplayProgress], None], Callable[[], None]]:
    """The progress callback of a replay (jobs finished of all jobs, with the replay clock,
    jobs running and waiting and the event rate after the ETA), and a function closing it."""
    bar = Progress(stream, "replay", unit="job", tty=tty)

    def show(p: ReplayProgress) -> None:
        bar.step(
            p.finished,
            p.n_jobs,
            f"t={p.time:,.0f}s, {p.running:,} running, {p.waiting:,} waiting",
        )

    return show, bar.close
