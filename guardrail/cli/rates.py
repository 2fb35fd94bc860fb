"""The terminal table of ``guardrail rates``: one line per window cell, newest first.

    print(rates_table(cells.rows()))

    metric    group                    window (UTC)             total  unsafe  errors   rate
    toxicity  model=m,model_version=v2  2026-11-23 10:20–10:25       40      12       0  30.0%
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

__all__ = ["rates_table"]

_HEADER = ("metric", "group", "window (UTC)", "total", "unsafe", "errors", "rate")
_NUMERIC = {3, 4, 5, 6}  # right-aligned columns


def rates_table(rows: list[dict[str, Any]]) -> str:
    """Rows as ``/rates`` gives them, as an aligned text table (in their order)."""
    lines = [_HEADER] + [
        (row["metric"], row["group"] or "-", _window_text(row["window_start"], row["window_end"]),
         str(row["total"]), str(row["unsafe"]), str(row["errors"]), _rate_text(row["unsafe_rate"]))
        for row in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(_HEADER))]
    return "\n".join(
        "  ".join(cell.rjust(w) if i in _NUMERIC else cell.ljust(w)
                  for i, (cell, w) in enumerate(zip(line, widths))).rstrip()
        for line in lines)


def _rate_text(rate: float | None) -> str:
    # None: nothing judged in the window (errors only), which is not a 0% rate.
    return "-" if rate is None else f"{rate:.1%}"


def _window_text(start_iso: str, end_iso: str) -> str:
    start, end = datetime.fromisoformat(start_iso), datetime.fromisoformat(end_iso)
    whole_minutes = start.second == end.second == 0 and not start.microsecond
    clock = "%H:%M" if whole_minutes else "%H:%M:%S"
    end_format = clock if start.date() == end.date() else f"%Y-%m-%d {clock}"
    return f"{start.strftime('%Y-%m-%d ' + clock)}–{end.strftime(end_format)}"
