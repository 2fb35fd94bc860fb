"""Judged text as HTML: escaped piece by piece, with the judge's evidence marked
in place and control characters made visible::

    html, found = highlight(text, [("toxicity", "idiot")])
    merged, found = find_marks(text, spans)          # marks once, for the whole text
    html = show_range(text, merged, start, end)      # then any piece of it, marks clipped

The evidence spans are found in the raw text, and each piece between them is
escaped on its own, so a ``<mark>`` never lands inside an entity. Marks are
found once over a whole text and then drawn in any slice of it, so a quote that
runs across two steps of an agent run is marked in both. Bidirectional controls
(an RTL override could make text read backwards) and invisible characters are
replaced by visible markers, which also takes their effect away.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from html import escape

__all__ = ["highlight", "find_marks", "show_range", "show", "MAX_MARKS"]

#: Most marks drawn in one text (a one-letter "span" would mark every letter).
MAX_MARKS = 500

_CONTROLS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\u061c\u200b\u200e\u200f"
                       "\u202a-\u202e\u2060\u2066-\u2069\ufeff]")
_SHORT = {"\u202a": "LRE", "\u202b": "RLE", "\u202c": "PDF", "\u202d": "LRO", "\u202e": "RLO",
          "\u2066": "LRI", "\u2067": "RLI", "\u2068": "FSI", "\u2069": "PDI", "\u200e": "LRM",
          "\u200f": "RLM", "\u061c": "ALM", "\u200b": "ZWSP", "\u2060": "WJ", "\ufeff": "BOM"}

#: ``[start, end, {metric, ...}]``: one drawn mark over the raw text.
Mark = list


def _marker(match: re.Match[str]) -> str:
    char = match.group()
    code = f"U+{ord(char):04X}"
    name = unicodedata.name(char, "control character")
    return f'<span class="ctl" title="{code} {escape(name)}">{_SHORT.get(char, code)}</span>'


def show(raw: str) -> str:
    """Escaped text with control and bidi characters made visible (and inert)."""
    return _CONTROLS.sub(_marker, escape(raw))


def find_marks(text: str, spans: Iterable[tuple[str, str]]) -> tuple[list[Mark], set[str]]:
    """``(marks, found)``: where each ``(metric, span)`` occurs in ``text``, overlapping
    occurrences merged into one mark; ``found`` holds the spans that occur."""
    marks: list[tuple[int, int, str]] = []
    found: set[str] = set()
    for metric, span in spans:
        if not span.strip():
            continue
        start = text.find(span)
        if start != -1:
            found.add(span)
        while start != -1 and len(marks) < MAX_MARKS:
            marks.append((start, start + len(span), metric))
            start = text.find(span, start + len(span))
    merged: list[Mark] = []
    for start, end, metric in sorted(marks):
        if merged and start < merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
            merged[-1][2].add(metric)
        else:
            merged.append([start, end, {metric}])
    return merged, found


def show_range(text: str, merged: list[Mark], start: int, end: int) -> str:
    """``text[start:end]`` escaped, with the parts of ``merged`` marks inside it drawn."""
    out, pos = [], start
    for mark_start, mark_end, metrics in merged:
        lo, hi = max(mark_start, start), min(mark_end, end)
        if lo >= hi:
            continue
        title = escape("evidence for " + ", ".join(sorted(metrics)))
        out.append(f'{show(text[pos:lo])}<mark title="{title}">{show(text[lo:hi])}</mark>')
        pos = hi
    out.append(show(text[pos:end]))
    return "".join(out)


def highlight(text: str, spans: Iterable[tuple[str, str]]) -> tuple[str, set[str]]:
    """``(html, found)``: ``text`` escaped, each ``(metric, span)`` occurrence in
    ``<mark>``; ``found`` holds the spans that occur in it."""
    merged, found = find_marks(text, spans)
    return show_range(text, merged, 0, len(text)), found
