"""The terminal table of ``guardrail rates``: one line per window cell, newest first.

    print(rates_table(cells.rows()))

    metric    group                     window (UTC)            seen  total  unsafe  errors   rate
    toxicity  model=m,model_version=v2  2026-11-23 10:20–10:25   160     40      12       0  30.0%

``seen`` counts every message of the window, ``total`` the judged ones
(sampling judges a share; the rate is over the judged).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

__all__ = ["rates_table"]

_HEADER = ("metric", "group", "window (UTC)", "seen", "total", "unsafe", "errors", "rate")
_NUMERIC = {3, 4, 5, 6, 7}  # right-aligned columns


def rates_table(rows: list[dict[str, Any]]) -> str:
    """Rows as ``/rates`` gives them, as an aligned text table (in their order)."""
    lines = [_HEADER] + [_line(row) for row in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(_HEADER))]
    return "\n".join(
        "  ".join(cell.rjust(w) if i in _NUMERIC else cell.ljust(w)
                  for i, (cell, w) in enumerate(zip(line, widths))).rstrip()
        for line in lines)


def _line(row: dict[str, Any]) -> tuple[str, ...]:
    window = _window_text(row["window_start"], row["window_end"])
    # A row without "seen" (from before sampling) judged all it saw.
    seen = row.get("seen", row["total"])
    return (row["metric"], row["group"] or "-", window, str(seen), str(row["total"]),
            str(row["unsafe"]), str(row["errors"]), _rate_text(row["unsafe_rate"]))


def _rate_text(rate: float | None) -> str:
    # None: nothing judged in the window (errors only), which is not a 0% rate.
    return "-" if rate is None else f"{rate:.1%}"


def _window_text(start_iso: str, end_iso: str) -> str:
    start, end = datetime.fromisoformat(start_iso), datetime.fromisoformat(end_iso)
    whole_minutes = start.second == end.second == 0 and not start.microsecond
    clock = "%H:%M" if whole_minutes else "%H:%M:%S"
    end_format = clock if start.date() == end.date() else f"%Y-%m-%d {clock}"
    return f"{start.strftime('%Y-%m-%d ' + clock)}–{end.strftime(end_format)}"
