"""The terminal table of ``guardrail rates``: one line per window cell, newest first.

    print(rates_table(cells.rows()))

    metric    group                 unit     window (UTC)            seen  total  unsafe  …   rate
    toxicity  model=m               turn     2026-11-23 10:20–10:25   160     40      12  …  30.0%
    toxicity  model=m,unit=session  session  2026-11-23 10:20–10:25    12     12       1  …   8.3%

``seen`` counts every message of the window, ``total`` the judged ones
(sampling judges a share; the rate is over the judged). ``unit`` says what a
row counts: ``turn`` (answers and agent runs) or ``session`` (conversations,
once each, from the group label ``unit=session``); the two are separate rows.

When reviewers have labelled some of the window's results (the labels topic
of the review queue), ``rates_table(rows, agreement)`` adds the judge's
agreement with them and the corrected rate::

    reviewed  precision  recall  corrected
          24      83.3%   71.4%  23.3% (12.1%-41.0%)

(``-`` where a window has no review, or too few for a figure.)
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..stream.events import labels_of, unit_of

__all__ = ["rates_table"]

_HEADER = ("metric", "group", "unit", "window (UTC)", "seen", "total", "unsafe", "errors",
           "rate")
_NUMERIC = {4, 5, 6, 7, 8}  # right-aligned columns


_AGREEMENT_HEADER = ("reviewed", "precision", "recall", "corrected")


def rates_table(rows: list[dict[str, Any]],
                agreement: list[dict[str, Any]] | None = None) -> str:
    """Rows as ``/rates`` gives them, as an aligned text table (in their order);
    with ``agreement`` rows (``/agreement``'s shape), their columns beside."""
    header, numeric = _HEADER, set(_NUMERIC)
    lines = [_line(row) for row in rows]
    if agreement:
        by_window = {(a["metric"], a["group"], a["window_start"]): a for a in agreement}
        header = _HEADER + _AGREEMENT_HEADER
        numeric |= set(range(len(_HEADER), len(header)))
        lines = [line + _agreement_cells(by_window.get((row["metric"], row["group"],
                                                        row["window_start"])))
                 for line, row in zip(lines, rows)]
    lines = [header] + lines
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.rjust(w) if i in numeric else cell.ljust(w)
                  for i, (cell, w) in enumerate(zip(line, widths))).rstrip()
        for line in lines)


def _agreement_cells(row: dict[str, Any] | None) -> tuple[str, ...]:
    if row is None:
        return ("0", "-", "-", "-")
    enough = row.get("enough_reviews", True)
    figures = [_rate_text(row[name]["value"]) if enough and row.get(name) else "-"
               for name in ("precision", "recall")]
    corrected = row.get("corrected_unsafe_rate")
    corrected_text = "-" if not corrected else (
        f"{corrected['value']:.1%} ({corrected['low']:.1%}-{corrected['high']:.1%})")
    return (str(row["reviewed"]), *figures, corrected_text)


def _line(row: dict[str, Any]) -> tuple[str, ...]:
    window = _window_text(row["window_start"], row["window_end"])
    # A row without "seen" (from before sampling) judged all it saw.
    seen = row.get("seen", row["total"])
    # A row without "unit" (from before sessions) reads it from its group.
    unit = row.get("unit") or unit_of(labels_of(row["group"]))
    return (row["metric"], row["group"] or "-", unit, window, str(seen), str(row["total"]),
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
