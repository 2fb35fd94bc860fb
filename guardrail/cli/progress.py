"""One progress reporter for the long commands (``run``, ``replay``, ``calibrate``).

It shows done/total, the rate and an ETA on stderr::

    with Progress("judged", unit="cases", total=len(cases), enabled=not quiet) as progress:
        for done, _ in enumerate(work, 1):
            progress.update(done)            # or update(done, total) when total grows

Items tried and not done (``run``: cases the judge could not judge) are counted
apart, so the line never calls them done::

    with Progress("judged", unit="cases", total=2, missed_label="not judged") as progress:
        progress.update(0, missed=2)         # judged 0/2 cases (0%, 2 not judged) ...

On a terminal it redraws a single line (at most ``redraw`` times a second).
Elsewhere (CI logs, ``nohup``, a pipe) it writes a plain line every ``interval``
seconds, so a long run still shows it is alive, plus one closing line with the
count and the time taken; ``enabled=False`` (``--quiet``) writes nothing.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

__all__ = ["Progress", "format_duration"]


def format_duration(seconds: float) -> str:
    """``0:07``, ``12:30``, ``1:02:03``."""
    whole = max(0, round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed or not a real file
        return False


class Progress:
    """Progress of ``total`` items; see the module docstring for what it prints."""

    def __init__(self, label: str, *, unit: str = "", total: int | None = None,
                 enabled: bool = True, stream: TextIO | None = None, interval: float = 5.0,
                 redraw: float = 0.1, clock: Callable[[], float] = time.monotonic,
                 missed_label: str = "missed") -> None:
        self.label, self.unit, self.total = label, unit, total
        #: Items tried and not done, shown as "N <missed_label>" once there are any.
        self.missed, self.missed_label = 0, missed_label
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr
        self.tty = enabled and _isatty(self.stream)
        # A terminal gets frequent redraws of one line; a log file a line now and then.
        self.every = redraw if self.tty else interval
        self.clock = clock
        self.started = clock()
        self.done = 0
        self._last_shown = self.started
        self._width = 0
        self._finished = False

    def __enter__(self) -> Progress:
        if self.tty:
            self._draw(self.line())
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        self.finish(failed=exc_type is not None)

    def update(self, done: int, total: int | None = None, *, missed: int | None = None) -> None:
        """``done`` items of ``total`` (kept from before when not given), and
        ``missed``: items tried and not done (kept from before when not given)."""
        self.done = done
        if total is not None:
            self.total = total
        if missed is not None:
            self.missed = missed
        if not self.enabled or self._finished:
            return
        now = self.clock()
        complete = self.total is not None and self._tried >= self.total
        if self.tty and (complete or now - self._last_shown >= self.every):
            self._last_shown = now
            self._draw(self.line(now))
        elif not self.tty and not complete and now - self._last_shown >= self.every:
            # (A log's last word is the closing line of finish().)
            self._last_shown = now
            self.stream.write(self.line(now) + "\n")
            self.stream.flush()

    def advance(self, step: int = 1) -> None:
        self.update(self.done + step)

    def finish(self, *, failed: bool = False) -> None:
        """End the line on a terminal; elsewhere write the closing line (once).
        After a failure only the terminal line is ended: the error speaks next."""
        if not self.enabled or self._finished:
            return
        self._finished = True
        if self.tty:
            self._draw(self.line())
            self.stream.write("\n")
        elif not failed:
            self.stream.write(self.closing_line() + "\n")
        self.stream.flush()

    @property
    def _tried(self) -> int:
        return self.done + self.missed

    def rate(self, now: float | None = None) -> float | None:
        """Items tried per second so far (None before any item); missed ones count:
        they took the time too, so the ETA holds."""
        elapsed = (self.clock() if now is None else now) - self.started
        return self._tried / elapsed if elapsed > 0 and self._tried else None

    def _missed_text(self) -> str:
        return f"{self.missed} {self.missed_label}" if self.missed else ""

    def line(self, now: float | None = None) -> str:
        """``judged 12/40 cases (30%)  2.4/s  ETA 0:12``"""
        now = self.clock() if now is None else now
        unit = f" {self.unit}" if self.unit else ""
        notes = [f"{self.done / self.total:.0%}"] if self.total else []
        notes += [self._missed_text()] if self.missed else []
        notes_text = f" ({', '.join(notes)})" if notes else ""
        total = "" if self.total is None else f"/{self.total}"
        count = f"{self.done}{total}{unit}{notes_text}"
        rate = self.rate(now)
        if rate is None:
            return f"{self.label} {count}  ETA --"
        eta = "" if self.total is None else \
            f"  ETA {format_duration(max(0, self.total - self._tried) / rate)}"
        return f"{self.label} {count}  {rate:.1f}/s{eta}"

    def closing_line(self) -> str:
        """``judged 40/40 cases in 0:17 (2.4/s)``; ``judged 0/2 cases (2 not judged) in …``"""
        elapsed = self.clock() - self.started
        unit = f" {self.unit}" if self.unit else ""
        total = "" if self.total is None else f"/{self.total}"
        missed = f" ({self._missed_text()})" if self.missed else ""
        rate = self.rate()
        speed = f" ({rate:.1f}/s)" if rate is not None else ""
        return (f"{self.label} {self.done}{total}{unit}{missed} in "
                f"{format_duration(elapsed)}{speed}")

    def _draw(self, text: str) -> None:
        # Pad over a longer previous line instead of a terminal escape code.
        self.stream.write("\r" + text.ljust(self._width))
        self._width = max(self._width, len(text))
        self.stream.flush()
