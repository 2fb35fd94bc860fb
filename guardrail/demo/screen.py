"""The demo's terminal in reading order: an alert comes after the answers it names.

Results and alerts travel on two topics, so an alert can arrive before the
results of the answers it gives as examples; printed then, it would name
answers the reader has not seen. :class:`Screen` prints each result at once and
holds an alert until every example has its line::

    screen = Screen(say=print)
    screen.show("alert", alert)     # held: its examples have no line yet
    screen.show("result", record)   # the result's line, then the alert if now complete
    screen.flush()                  # at the end: what is still held, with the
                                    # examples narrowed to the answers shown
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .display import alert_lines, example_ids, result_line

__all__ = ["Screen"]


class Screen:
    """Prints results and alerts through ``say``; see the module docstring."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say
        #: Case ids whose result line has been printed.
        self.shown: set[str] = set()
        self.held: list[dict[str, Any]] = []

    def show(self, kind: str, record: dict[str, Any]) -> None:
        """``kind`` is "result" or "alert" (the demo stream's ``show`` callback)."""
        if kind == "alert":
            self.held.append(record)
        else:
            self.say(result_line(record))
            self.shown.add(str(record.get("case_id")))
        self._release(complete_only=True)

    def flush(self) -> None:
        """Print every alert still held (the run ended before all its examples did)."""
        self._release(complete_only=False)

    def _release(self, *, complete_only: bool) -> None:
        for alert in list(self.held):
            if complete_only and not self.shown.issuperset(example_ids(alert)):
                continue
            self.held.remove(alert)
            for line in alert_lines(alert, shown=self.shown):
                self.say(line)
