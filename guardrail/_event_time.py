"""Event times: epoch milliseconds read from input and printed in records::

    parse_event_time("2025-11-28T06:53:52.123Z")   # 1764312832123
    parse_event_time(1764312832.123)               # seconds or milliseconds
    utc_iso(1764312832123)                         # '2025-11-28T06:53:52.123+00:00'
"""

from __future__ import annotations

import functools
import time
from datetime import datetime, timezone
from typing import Any

__all__ = ["now_ms", "parse_event_time", "utc_iso"]

#: Epoch ms of 9999-12-31T23:59:59.999Z, the last instant datetime can show.
_MAX_EVENT_MS = 253_402_300_799_999


def utc_iso(ms: int | float) -> str:
    """``2025-11-28T06:53:52.123+00:00`` for epoch milliseconds."""
    if type(ms) is int:  # two per result: the second's text is formatted once
        second, milli = divmod(ms, 1000)
        return f"{_utc_second(second)}.{milli:03d}+00:00"
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="milliseconds")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@functools.lru_cache(maxsize=1024)
def _utc_second(second: int) -> str:
    return datetime.fromtimestamp(second, tz=timezone.utc).replace(tzinfo=None).isoformat()


def parse_event_time(value: Any) -> int:
    """Event time in epoch ms from seconds, milliseconds or an ISO-8601 string."""
    if isinstance(value, bool):
        raise ValueError("timestamp must be a number or an ISO-8601 string")
    if isinstance(value, (int, float)):
        # Seconds and milliseconds are both common; ms since 1970 passes 1e11 in 1973.
        # round(): float seconds * 1000 can land just below the intended ms.
        ms = round(value if value > 1e11 else value * 1000)
    elif isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"timestamp {value[:40]!r} is not ISO-8601") from None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=timezone.utc)
        ms = round(parsed.timestamp() * 1000)
    else:
        raise ValueError("timestamp must be a number or an ISO-8601 string")
    if not 0 <= ms <= _MAX_EVENT_MS:
        raise ValueError("timestamp is out of range (1970 to 9999)")
    return ms
