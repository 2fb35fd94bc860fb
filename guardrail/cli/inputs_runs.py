"""The agent runs ``guardrail inputs check`` shows: the spans of agent runs in the
records checked, grouped by trace id with the worker's own bookkeeping (a span
once per span id, the ``run_max_spans`` / ``run_max_bytes`` caps, the root rule),
then each run as the one case the worker would judge::

    runs = RunCollector(settings.runs)
    runs.add(decoded.run_spans)              # per record, in the order read
    for view in runs.views():
        view["trace_id"], view["root_span_id"], view["spans"], view["root_seen"]
        view["status"]                       # complete | idle | truncated
        view["case"]["trajectory"]           # the run case, as the worker judges it
    click.echo(run_text(view))

The status is the one the run would get on the worker once quiet: ``truncated``
when spans went over a cap, ``complete`` when its root span came (a parentless
span, or an agent span whose parent is not in the run), else ``idle`` (judged
after ``run_idle_seconds`` as far as it goes).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from ..assembly.runs.assembly import RunBook, RunHeader, RunLimits
from ..assembly.runs.case import NO_FINAL_ANSWER, root_span, run_case
from ..assembly.runs.settings import RunSettings
from ..assembly.runs.spans import RunSpan

__all__ = ["RunCollector", "run_text", "span_counts", "printable"]

#: C0 and C1 controls but newline and tab: a tool result could hold terminal
#: escape sequences; they are printed as escapes, not sent to the terminal.
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


class RunCollector:
    """Spans of agent runs by trace, in the order first seen."""

    def __init__(self, runs: RunSettings) -> None:
        self.settings = runs
        self.limits = RunLimits(settle_seconds=runs.run_settle_seconds,
                                idle_seconds=runs.run_idle_seconds,
                                max_spans=runs.run_max_spans, max_bytes=runs.run_max_bytes)
        self.book = RunBook()
        self.spans: dict[str, list[RunSpan]] = {}
        self.duplicates: dict[str, int] = {}

    def add(self, run_spans: Iterable[RunSpan]) -> None:
        """Apply spans as the worker's run assembly does (arrival order matters for
        the root rule, as it does there)."""
        for span in run_spans:
            trace = span.trace_id
            header = self.book.headers.setdefault(trace, RunHeader.new(trace, now_ms=0))
            outcome = self.book.add(header, span, now_ms=0, limits=self.limits, size=span.size)
            if outcome == "added":
                self.spans.setdefault(trace, []).append(span)
            elif outcome == "duplicate":
                self.duplicates[trace] = self.duplicates.get(trace, 0) + 1

    def views(self) -> list[dict[str, Any]]:
        """Each run: its ids, span counts, whether its root came, its status and case."""
        return [self._view(trace, spans) for trace, spans in self.spans.items()]

    def _view(self, trace: str, spans: list[RunSpan]) -> dict[str, Any]:
        header = self.book.headers[trace]
        status = ("truncated" if header.truncated
                  else "complete" if header.root_ms is not None else "idle")
        case = run_case(spans, status=status, max_chars=self.settings.trajectory_max_chars,
                        result_max_chars=self.settings.tool_result_max_chars)
        if not case.get("output"):
            case["output"] = NO_FINAL_ANSWER  # as the worker judges it
        root = root_span(spans)
        assert root is not None  # a run here has at least one span
        return {"trace_id": trace, "root_span_id": root.span_id,
                "root_seen": root.parent_id is None, "spans": len(spans),
                "dropped_spans": header.dropped, "duplicate_spans": self.duplicates.get(trace, 0),
                "status": status, "case": case}


def span_counts(run_spans: Iterable[RunSpan]) -> dict[str, int]:
    """Spans of agent runs in one record, by trace id."""
    counts: dict[str, int] = {}
    for span in run_spans:
        counts[span.trace_id] = counts.get(span.trace_id, 0) + 1
    return counts


def printable(text: str) -> str:
    """``text`` with control characters as escapes (newline and tab kept)."""
    return _CONTROLS.sub(lambda m: repr(m.group())[1:-1], text)


def _root_note(view: dict[str, Any]) -> str:
    if view["root_seen"]:
        return "root span seen"
    if view["status"] == "complete":
        return "root: its outermost agent span (the trace's root is not among these spans)"
    return "no root span: judged after run_idle_seconds, as far as it goes"


def run_text(view: dict[str, Any]) -> str:
    """A run as ``inputs check`` prints it: a summary line, then its trajectory."""
    case, run = view["case"], view["case"]["run"]
    extra = "".join(f", {view[key]} {what}" for key, what in (
        ("dropped_spans", "spans over the caps dropped"),
        ("duplicate_spans", "spans seen twice (kept once)")) if view[key])
    lines = [f"run {view['trace_id']}: {view['spans']} span(s){extra}; "
             f"{_root_note(view)}; status {view['status']}",
             f"  case_id={case['case_id']}  agent={run.get('agent') or '-'}  "
             f"agent_version={run.get('agent_version') or '-'}  "
             f"tool_calls={run['tool_calls']}  models={','.join(run['models']) or '-'}",
             f"  trajectory ({len(case['trajectory']):,} chars):"]
    lines.extend("    | " + line for line in printable(case["trajectory"]).split("\n"))
    return "\n".join(printable(line) for line in lines)
