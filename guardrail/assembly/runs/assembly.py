"""An agent run's bookkeeping while its spans arrive: pure state, no Kafka.

A run moves ``open`` → ``closing`` → ``closed``. Spans are added to an open
run, once each (keyed by span id: a redelivered record changes nothing).
A tick asks whether the run is due; a due run becomes ``closing`` with the
tick's coordinates (the run's judgment is named by them, so a redelivered
tick re-judges the same run under the same name and the window counter
skips it); once its result is published, ``done`` makes it ``closed`` and
its spans are dropped. A closed run is remembered for a while so that a late
span is counted instead of starting a run of its own::

    header = RunHeader.new("4bf9…", now_ms=1000)
    book = RunBook()
    book.add(header, span, now_ms=1000, limits=RunLimits())   # "added" | "duplicate" | ...
    due(header, now_ms=7000, limits=RunLimits())               # "complete" after the settle time

Times are the worker's wall clock when a span was applied (arrival), not the
spans' own timestamps: settle and idle measure quiet on the stream.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal

import orjson

from ..base import AddOutcome, Book, State
from .spans import RunSpan

__all__ = ["RunHeader", "RunLimits", "RunBook", "RunStatus", "AddOutcome", "due", "durable",
           "recount", "FORGET_AFTER_MIN_SECONDS"]

RunStatus = Literal["complete", "idle", "truncated"]
#: A closed run is remembered at least this long (late spans are counted, not
#: judged as runs of their own), and at least twice the idle time.
FORGET_AFTER_MIN_SECONDS = 3600.0


@dataclass(frozen=True)
class RunLimits:
    """The run settings the bookkeeping needs (see :class:`~.settings.RunSettings`)."""

    settle_seconds: float = 5.0
    idle_seconds: float = 180.0
    max_spans: int = 1000
    max_bytes: int = 4_000_000

    @property
    def forget_after_ms(self) -> int:
        return int(max(FORGET_AFTER_MIN_SECONDS, 2 * self.idle_seconds) * 1000)


@dataclass
class RunHeader:
    """What the run table keeps about a run besides its spans (one changelog value)."""

    trace_id: str
    state: State = "open"
    first_ms: int = 0
    last_ms: int = 0
    #: When a root span arrived (a parentless span, or an outermost agent span).
    root_ms: int | None = None
    spans: int = 0
    bytes: int = 0
    #: Spans past the caps, not kept: the run is judged as far as it goes.
    dropped: int = 0
    #: ``[partition, offset]`` of the tick that closed it (its judgment's name).
    tick: list[int] | None = None
    status: RunStatus | None = None
    closed_ms: int | None = None
    late: int = 0

    @classmethod
    def new(cls, trace_id: str, *, now_ms: int) -> RunHeader:
        return cls(trace_id=trace_id, first_ms=now_ms, last_ms=now_ms)

    @property
    def truncated(self) -> bool:
        return self.dropped > 0

    def to_bytes(self) -> bytes:
        # Read field by field: asdict deep-copies, and a header is written per span.
        return orjson.dumps({k: v for k in _HEADER_FIELDS
                             if (v := getattr(self, k)) not in (None, 0)
                             or k in ("trace_id", "state")})

    @classmethod
    def from_bytes(cls, raw: bytes) -> RunHeader:
        try:
            data = orjson.loads(raw)
            return cls(**data)
        except (orjson.JSONDecodeError, TypeError) as exc:
            raise ValueError(f"not a run header: {exc}") from None


#: RunHeader's fields in order, read once (see RunHeader.to_bytes).
_HEADER_FIELDS = tuple(f.name for f in fields(RunHeader))


def due(header: RunHeader, *, now_ms: int, limits: RunLimits) -> RunStatus | None:
    """Whether an open run is to be judged now, and as what.

    ``truncated`` once its root is in (more would only be dropped), or after
    the settle time without any span, dropped ones too (the root, which carries
    the verdict, is often exported last), or at the latest the idle time after
    its first span (a runaway run that never stops sending); ``complete`` once
    the root arrived and nothing new came for the settle time; ``idle`` after
    the idle time without a root."""
    if header.state != "open":
        return None
    quiet_ms = now_ms - header.last_ms
    if header.truncated:
        settled = header.root_ms is not None or quiet_ms >= limits.settle_seconds * 1000 \
            or now_ms - header.first_ms >= limits.idle_seconds * 1000
        return "truncated" if settled else None
    if header.root_ms is not None and quiet_ms >= limits.settle_seconds * 1000:
        return "complete"
    if quiet_ms >= limits.idle_seconds * 1000:
        return "idle"
    return None


class RunBook(Book[RunHeader]):
    """The worker's in-memory view of its open runs: headers and span ids per
    trace (see :class:`~guardrail.assembly.base.Book`)."""

    @property
    def span_ids(self) -> dict[str, dict[str, int]]:
        return self.item_ids

    @property
    def open_runs(self) -> int:
        return self.open_count

    @property
    def spans_held(self) -> int:
        return self.items_held

    def add(self, header: RunHeader, span: RunSpan, *, now_ms: int, limits: RunLimits,
            size: int) -> AddOutcome:
        """Apply one span to its run's header and index (the caller writes the
        table when the outcome is ``added``)."""
        if header.state != "open":
            header.late += 1
            return "late"
        ids = self.item_ids.setdefault(header.trace_id, {})
        if span.span_id in ids:
            # Redelivered after a crash that kept the span but not its header's
            # last write: the root must still mark the run (else it waits idle).
            if header.root_ms is None and _is_root(span, ids):
                header.root_ms = now_ms
            return "duplicate"
        over = len(ids) >= limits.max_spans or header.bytes + size > limits.max_bytes
        if over and span.parent_id is not None:  # the root is kept: the verdict goes on it
            header.dropped += 1
            header.last_ms = now_ms  # still busy: a truncated run waits for its root
            return "dropped"
        ids[span.span_id] = size
        header.spans += 1
        header.bytes += size
        header.last_ms = now_ms
        if _is_root(span, ids):
            header.root_ms = now_ms
        return "added"


def durable(header: RunHeader) -> tuple[bool, int]:
    """What of an open run's header a recovery cannot recount from its spans:
    whether its root came, and how many spans were dropped. A span that changes
    neither is not followed by a header write (its count, bytes and arrival time
    come back from the table's spans through :func:`recount`)."""
    return header.root_ms is not None, header.dropped


def recount(header: RunHeader, ids: dict[str, int], *, now_ms: int) -> None:
    """An open run's counts from the spans the recovered table holds. Its quiet
    time starts again at the recovery (the last span's arrival may postdate the
    header's last write): a run is never judged early for a restart, at worst a
    settle or idle time late."""
    header.spans = max(header.spans, len(ids))
    header.bytes = max(header.bytes, sum(ids.values()))
    header.last_ms = max(header.last_ms, now_ms)


def _is_root(span: RunSpan, ids: dict[str, int]) -> bool:
    """A parentless span, or an agent span whose parent is not in the run."""
    return span.parent_id is None or (span.kind == "agent" and span.parent_id not in ids)
