"""What the local judge is doing before its first verdict.

On a small CPU the local model reads its first prompt for half a minute or more
(later prompts reuse its cached start). Without a word about it the terminal
shows only "0/8 results so far", which reads like a hang. :class:`JudgeWatch`
polls the judge's ``/metrics`` (:func:`guardrail.local.server.judge_activity`)
until the first result is on screen and says what it sees::

    watch = JudgeWatch(read=lambda: judge_activity(api_base), say=print,
                       done=lambda: bool(screen.shown)).start()
    ...
    watch.stop()

    … local judge: reading its first prompt, 512 tokens of it so far (for 14s; later …)

A figure is shown when llama.cpp reports one (it counts per batch of prompt
tokens); before that, and with a llama.cpp that reports none, the line says how
long the judge has been at it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["JudgeWatch", "status_line"]

Activity = dict[str, Any]


def _phase(activity: Activity) -> str:
    if activity.get("prompt_tokens_read"):
        return "writing"  # a first prompt is read: its verdict is being written
    return "reading" if activity.get("requests_processing") else "idle"


def status_line(activity: Activity, busy_seconds: float | None) -> str:
    """One line on the judge's state; ``busy_seconds``: since it got its first call."""
    phase = _phase(activity)
    busy = "just started" if (busy_seconds or 0) < 1 else f"for {busy_seconds:.0f}s"
    if phase == "idle":
        return "… local judge: idle, no judge call from the worker yet"
    if phase == "writing":
        return (f"… local judge: first prompt read ({activity['prompt_tokens_read']:.0f} "
                f"tokens in {activity.get('prompt_seconds') or 0:.0f}s); writing its first "
                "verdicts")
    tokens = activity.get("tokens_in_slot")
    if tokens:
        return (f"… local judge: reading its first prompt, {tokens:.0f} tokens of it so far "
                f"({busy}; later prompts reuse its cached start)")
    return (f"… local judge: processing its first prompt ({busy}; no progress figure yet, "
            "later prompts reuse its cached start)")


@dataclass
class JudgeWatch:
    """Says the judge's state on every change of phase and at least every
    ``every`` seconds, until ``done()`` (a result is on screen) or :meth:`stop`."""

    read: Callable[[], Activity | None]
    say: Callable[[str], None]
    done: Callable[[], bool]
    every: float = 10.0
    poll: float = 1.0
    clock: Callable[[], float] = time.monotonic
    _busy_since: float | None = field(default=None, init=False)
    _last_phase: str = field(default="idle", init=False)
    _said_at: float | None = field(default=None, init=False)
    _stop: threading.Event = field(default_factory=threading.Event, init=False)
    _thread: threading.Thread | None = field(default=None, init=False)

    def start(self) -> JudgeWatch:
        self._said_at = self.clock()  # no idle line before `every` seconds have passed
        self._thread = threading.Thread(target=self._run, name="judge-watch", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self.poll) and self.step():
            pass

    def step(self) -> bool:
        """One poll; False once there is nothing more to watch."""
        if self.done():
            return False
        activity = self.read()
        if activity is None:  # /metrics did not answer: nothing true to say
            return True
        now, phase = self.clock(), _phase(activity)
        if self._busy_since is None and phase != "idle":
            self._busy_since = now
        changed, self._last_phase = phase != self._last_phase, phase
        if changed or self._said_at is None or now - self._said_at >= self.every:
            self._said_at = now
            self.say(status_line(activity, None if self._busy_since is None
                                 else now - self._busy_since))
        return True
