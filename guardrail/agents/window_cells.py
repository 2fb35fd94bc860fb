"""The window table's cells as its changelog records them, and the ``/rates`` rows.

Faust writes every change of a window cell to the table's changelog topic
(``<app_id>-window-counts-changelog``) with its JSON codec. Captured from a
running worker (see ``tests/agents/test_window_cells.py``)::

    key   b'["toxicity|model=m,model_version=v1,prompt_version=-",[1795429200.0,1795429499.9]]'
    value b'{"total":6,"unsafe":1,"errors":0,"examples":[...],"marks":{"live|in|1":3},
             "ledgers":{"live|in|1":[2,[2,3]]}}'

The key is ``[window key, [window start, start + size - 0.1]]`` (a Faust
window range ends 0.1 s before the next one starts); the value is the cell
(:class:`~guardrail.stream.alerts.WindowCounts` as a dict), or absent (a
tombstone: the cell was deleted). Since sampling a value also carries
``seen`` (messages seen, judged or not; absent in older cells: the total),
and now ``ledgers``, the de-duplication's positions (:mod:`guardrail.stream.dedup`).
The newest record of a key is the cell::

    cells = WindowCells(window_seconds=300, expires_seconds=3600)
    cells.apply(record.key, record.value, where="partition 0 offset 12")
    cells.rows(metric="toxicity")       # the /rates rows, newest window first
    cells.malformed, cells.last_error   # records that were not a window cell

Only the counts are kept (not the examples or duplicate marks), so a cell
costs a few dozen bytes.

A row's ``unit`` says what its cell counts: ``session`` for a group with the
label ``unit=session`` (session judgments, once per session), else ``turn``
(answers and agent runs, whose groups have no such label): the two are always
separate cells, never summed.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

import orjson

from ..stream.alerts import WindowCounts
from .._event_time import utc_iso
from ..stream.events import labels_of, parse_window_key, unit_of

__all__ = ["WINDOW_TABLE", "changelog_topic", "ChangelogRecordError", "Cell", "decode_record",
           "window_row", "sort_rows", "stale_before", "live_horizon_seconds", "WindowCells"]

log = logging.getLogger("guardrail.rates")

#: The window table's name (``guardrail.agents.windows.TABLE_NAME``; a test
#: checks the two agree, since this wing must not import the Faust one).
WINDOW_TABLE = "window-counts"

#: ``(window key, window start, window end)``, as in the changelog key.
Cell = tuple[str, float, float]

# Window bounds must be times ``utc_iso`` can print (years 1970..9999).
_MAX_SECONDS = 253_402_300_799.0
_COUNT_FIELDS = ("total", "unsafe", "errors")


def changelog_topic(app_id: str) -> str:
    """The window table's changelog topic, named as Faust names it."""
    return f"{app_id}-{WINDOW_TABLE}-changelog"


class ChangelogRecordError(ValueError):
    """A changelog record that is not a window cell; the message says why."""


def decode_record(key: bytes | None, value: bytes | None) -> tuple[Cell, WindowCounts | None]:
    """``(cell, counts)`` of one changelog record; counts None for a tombstone.

    Raises :class:`ChangelogRecordError` for anything Faust would not have
    written for this table."""
    return _decode_key(key), (None if value is None else _decode_value(value))


def _decode_key(key: bytes | None) -> Cell:
    if key is None:
        raise ChangelogRecordError("record has no key")
    try:
        data = orjson.loads(key)
    except orjson.JSONDecodeError:
        raise ChangelogRecordError(f"key is not JSON: {key[:120]!r}") from None
    if not (isinstance(data, list) and len(data) == 2 and isinstance(data[0], str)
            and isinstance(data[1], list) and len(data[1]) == 2):
        raise ChangelogRecordError(f"key is not [window key, [start, end]]: {key[:120]!r}")
    window, (start, end) = data
    if not all(_is_number(t) and 0 <= t <= _MAX_SECONDS for t in (start, end)) or end <= start:
        raise ChangelogRecordError(f"key has no valid window range: {key[:120]!r}")
    if "|" not in window:
        raise ChangelogRecordError(f"window key has no 'metric|' prefix: {window[:120]!r}")
    return window, float(start), float(end)


def _decode_value(value: bytes) -> WindowCounts:
    try:
        data = orjson.loads(value)
    except orjson.JSONDecodeError:
        raise ChangelogRecordError(f"value is not JSON: {value[:120]!r}") from None
    if not isinstance(data, dict):
        raise ChangelogRecordError(f"value is not a JSON object: {value[:120]!r}")
    # Absent counts read as 0, as the table itself reads them (WindowCounts.from_dict);
    # a cell from before sampling has no "seen": all it counted was judged.
    counts = {name: data.get(name, 0) for name in _COUNT_FIELDS}
    counts["seen"] = data.get("seen", counts["total"])
    if not all(_is_count(n) for n in counts.values()):
        raise ChangelogRecordError(f"counts must be non-negative integers: {counts}")
    if counts["unsafe"] + counts["errors"] > counts["total"]:
        raise ChangelogRecordError(f"unsafe + errors exceed total: {counts}")
    if counts["total"] > counts["seen"]:
        raise ChangelogRecordError(f"total (judged) exceeds seen: {counts}")
    return WindowCounts(**counts)


def _is_number(value: Any) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def window_row(window: str, start: float, end: float, counts: WindowCounts) -> dict[str, Any]:
    """One ``/rates`` row: a window cell as JSON-ready values (``unit``: ``turn``
    or ``session``, read from the group)."""
    metric, group = parse_window_key(window)
    return {"metric": metric, "group": group, "unit": unit_of(labels_of(group)),
            "window_start": utc_iso(start * 1000),
            "window_end": utc_iso(round(end) * 1000), "seen": counts.seen,
            "total": counts.total, "unsafe": counts.unsafe, "errors": counts.errors,
            "unsafe_rate": counts.rate}


def sort_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Newest window first; within a window by metric, then group (both descending,
    as ``/rates`` has always listed them)."""
    rows.sort(key=lambda r: (r["window_start"], r["metric"], r["group"]), reverse=True)
    return rows


#: Slack for clocks and late writes in :func:`live_horizon_seconds`.
HORIZON_SLACK_SECONDS = 120.0


def live_horizon_seconds(window_seconds: float, expires_seconds: float) -> float:
    """How far back a changelog record can still hold a live window cell.

    A cell's last write happens while its window is open or later (a late
    event), and a window is live until ``expires`` after it ends: so a record
    written more than ``window + expires`` (plus some slack for clocks) ago
    holds only expired cells, and readers may start at the first record after
    that time (Kafka's ``offsets_for_times``) instead of at the beginning,
    whatever the changelog's age or compaction."""
    return window_seconds + expires_seconds + HORIZON_SLACK_SECONDS


def stale_before(now: float, window_seconds: float, expires_seconds: float) -> float:
    """A cell whose window ends at or before this time has expired.

    Faust's rule for a tumbling table with ``expires`` (``Window.stale``): the
    start of the window that holds ``now - expires``."""
    return math.floor((now - expires_seconds) / window_seconds) * window_seconds


class WindowCells:
    """The newest counts of every window cell, from changelog records in order."""

    def __init__(self, *, window_seconds: float, expires_seconds: float) -> None:
        self.window_seconds = window_seconds
        self.expires_seconds = expires_seconds
        self.cells: dict[Cell, WindowCounts] = {}
        self.records = 0
        self.malformed = 0
        self.last_error: str | None = None

    def apply(self, key: bytes | None, value: bytes | None, *, where: str = "") -> None:
        """Take one record: a cell's newest value, or its deletion. A record
        that is not a window cell is counted, logged and otherwise ignored."""
        self.records += 1
        try:
            cell, counts = decode_record(key, value)
        except ChangelogRecordError as exc:
            self.malformed += 1
            self.last_error = f"{where}: {exc}" if where else str(exc)
            # A topic full of foreign records must not flood the log: the first
            # few, then one in a thousand (the count is in the view's status).
            if self.malformed <= 10 or self.malformed % 1000 == 0:
                log.warning("window changelog record skipped (%d so far): %s",
                            self.malformed, self.last_error)
            return
        if counts is None:
            self.cells.pop(cell, None)
        else:
            self.cells[cell] = counts

    def prune(self, now: float | None = None) -> int:
        """Forget expired cells; returns how many."""
        limit = self._stale_before(now)
        expired = [cell for cell in self.cells if cell[2] <= limit]
        for cell in expired:
            del self.cells[cell]
        return len(expired)

    def rows(self, *, metric: str | None = None, now: float | None = None
             ) -> list[dict[str, Any]]:
        """Every unexpired cell (of ``metric``, if given) as a ``/rates`` row,
        newest window first."""
        limit = self._stale_before(now)
        return sort_rows([window_row(window, start, end, counts)
                          for (window, start, end), counts in list(self.cells.items())
                          if end > limit and (metric is None
                                              or parse_window_key(window)[0] == metric)])

    def _stale_before(self, now: float | None) -> float:
        return stale_before(time.time() if now is None else now, self.window_seconds,
                            self.expires_seconds)
