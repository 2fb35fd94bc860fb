"""What the Kafka client failed at, summed per interval, so a worker cut off
from its cluster says why once per interval instead of a line per retry.

With two brokers of three down, the Kafka client logs every failed connect,
fetch and heartbeat: thousands of ERROR lines a minute that bury the reason.
This module sorts the client's log records (by their message template, not
their text) into kinds, lets the first of each kind, broker and error through
per interval, and sums the rest into one report (no Kafka here: the worker's
wiring in :mod:`guardrail.agents.kafka_trouble` feeds it)::

    trouble = KafkaTrouble(interval=30)
    trouble.note(Failure("connect", node=2, error="ConnectionRefusedError"), now=t)  # True: log it
    report = trouble.report(now=t + 30)     # None when nothing failed in the interval
    report.summary()    # "could not reach broker(s) 2 (1,204 connection errors); ..."
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any

__all__ = ["Failure", "KafkaTrouble", "TroubleReport", "classify"]


@dataclass(frozen=True)
class Failure:
    """One failed client operation: its kind, the broker if known, the error's name."""

    kind: str
    node: int | None = None
    error: str = ""


#: Message templates of the Kafka client (aiokafka) → the kind of failure and
#: the argument that names the broker (None: no broker named).
_TEMPLATES: dict[str, tuple[str, int | None]] = {
    "Unable connect to node with id %s: %s": ("connect", 0),
    "Unable to request metadata from node with id %s: %r": ("metadata", 0),
    'Unable to request metadata from "%s:%s": %s': ("metadata", None),
    "Failed fetch messages from %s: %s": ("fetch", 0),
    "Got error produce response: %s": ("produce", None),
    "Heartbeat session expired - marking coordinator dead": ("coordinator", None),
    "Marking the coordinator dead (node %s)for group %s.": ("coordinator", 0),
    "Group Coordinator Request failed: %s": ("coordinator", None),
    "Heartbeat failed for group %s: coordinator (node %s) is either not started or not valid":
        ("coordinator", 1),
    "Heartbeat failed: %r": ("coordinator", None),
}
#: Templates that start so: the rest of the message varies between releases.
_PREFIXES = {"OffsetCommit failed": "commit",
             "Got error produce response on topic-partition": "produce"}
#: A group's own churn, not trouble: every join or leave makes the members
#: rejoin (a heartbeat or commit told "rebalancing", "generation not current").
_CHURN = ("Heartbeat failed for group %s because it is rebalancing",
          "Heartbeat failed for group %s: generation id is not  current.",
          "Heartbeat failed: local member_id was not recognized;",
          "OffsetCommit failed for group %s due to group error (%s), will rejoin")

_ERROR_NAME = re.compile(r"\b([A-Z][A-Za-z]*(?:Error|Exception))\b")

#: How each kind reads in a report, with its unit.
_DESCRIBED = {"connect": "connection errors", "metadata": "metadata requests failed",
              "fetch": "fetches failed", "produce": "produce requests failed",
              "coordinator": "group coordinator errors", "commit": "offset commits failed"}


def classify(template: Any, args: Any) -> Failure | None:
    """The failure a client log record (``record.msg``, ``record.args``) tells of;
    None for every other record."""
    if not isinstance(template, str) or template.startswith(_CHURN):
        return None
    args = args if isinstance(args, tuple) else ()
    kind, node_arg = _TEMPLATES.get(template, (None, None))
    if kind is None:
        kind = next((k for p, k in _PREFIXES.items() if template.startswith(p)), None)
    if kind is None:
        return None
    node = _as_node(args[node_arg]) if node_arg is not None and len(args) > node_arg else None
    return Failure(kind, node, _error_name(args))


def _as_node(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _error_name(args: tuple[Any, ...]) -> str:
    for arg in args:
        if isinstance(arg, BaseException):
            return type(arg).__name__
    found = _ERROR_NAME.search(" ".join(map(str, args)))
    return found.group(1) if found else ""


@dataclass(frozen=True)
class TroubleReport:
    """The failures of one interval."""

    seconds: float
    counts: dict[Failure, int]
    held_back: int

    @property
    def unreachable(self) -> tuple[int, ...]:
        """Brokers the client could not connect to."""
        return tuple(sorted({f.node for f in self.counts
                             if f.kind == "connect" and f.node is not None}))

    def by_kind(self) -> Counter[tuple[str, str]]:
        """Failures per (kind, error name)."""
        sums: Counter[tuple[str, str]] = Counter()
        for failure, count in self.counts.items():
            sums[failure.kind, failure.error] += count
        return sums

    def summary(self) -> str:
        """One line: what failed, how often, and which brokers were out of reach."""
        kinds: Counter[str] = Counter()
        errors: dict[str, set[str]] = {}
        for (kind, error), count in self.by_kind().items():
            kinds[kind] += count
            errors.setdefault(kind, set()).update([error] if error else [])
        parts = []
        if self.unreachable:
            parts.append("could not reach broker(s) " + ", ".join(map(str, self.unreachable)))
        for kind, count in kinds.most_common():
            names = ", ".join(sorted(errors[kind]))
            parts.append(f"{count:,} {_DESCRIBED[kind]}" + (f" ({names})" if names else ""))
        return "; ".join(parts)


class KafkaTrouble:
    """Counts client failures; one report per ``interval`` seconds with any.
    Thread-safe: the worker's consumer runs the Kafka client on a thread of its own."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._lock = threading.Lock()
        self._counts: Counter[Failure] = Counter()
        self._started: float | None = None
        self._last: float | None = None
        self._held_back = 0

    def note(self, failure: Failure, now: float) -> bool:
        """Count ``failure``; True for the first of its kind, broker and error in
        this interval (log that one), False for the repeats (held back)."""
        with self._lock:
            if self._started is None:
                self._started = now
            self._last = now
            first = failure not in self._counts
            self._counts[failure] += 1
            self._held_back += not first
            return first

    def report(self, now: float) -> TroubleReport | None:
        """The failures since the last report, once ``interval`` has passed since
        the first of them; None while nothing failed or the interval runs."""
        with self._lock:
            if self._started is None or now - self._started < self.interval:
                return None
            report = TroubleReport(now - self._started, dict(self._counts), self._held_back)
            self._counts, self._started, self._held_back = Counter(), None, 0
            return report

    def quiet_for(self, now: float) -> float:
        """Seconds since the last failure (infinite before any)."""
        return float("inf") if self._last is None else now - self._last
