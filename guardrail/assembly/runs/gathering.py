"""Agent runs as one kind of whole for the generic assembler
(:class:`guardrail.assembly.base.Gathering`): spans gathered by trace id, judged once
when the run is complete, idle or truncated, then closed with its spans dropped::

    gathering = RunGathering(settings.runs, telemetry)
    assembler = Assembler(gathering, table, topic)      # guardrail.agents.assembly

A span for a run already judged is counted as late, never judged as a run of
its own; a closed run is remembered for ``forget_after_ms``.
"""

from __future__ import annotations

import logging
from typing import Any

from ..base import RUN_SPAN_KIND
from .assembly import RunBook, RunHeader, RunLimits, due, durable, recount
from .case import NO_FINAL_ANSWER, run_case
from .settings import RunSettings
from .spans import RunSpan

__all__ = ["RunGathering"]

log = logging.getLogger("guardrail.runs")

#: Traces whose late spans were logged (once per trace), remembered at most.
_LATE_LOGGED_MAX = 10_000


class RunGathering:
    """The run rules: spans in, one case per run out."""

    noun = "agent run"
    kind_header, item_kind = RUN_SPAN_KIND
    item_prefix = "s"

    def __init__(self, runs: RunSettings, telemetry: Any) -> None:
        self.runs, self.telemetry = runs, telemetry
        self.limits = RunLimits(settle_seconds=runs.run_settle_seconds,
                                idle_seconds=runs.run_idle_seconds,
                                max_spans=runs.run_max_spans, max_bytes=runs.run_max_bytes)
        self.book = RunBook()
        self.memory_bytes = runs.run_memory_bytes
        self.forget_after_ms = self.limits.forget_after_ms
        self._late_logged: set[str] = set()

    def new_header(self, key: str, *, now_ms: int) -> RunHeader:
        return RunHeader.new(key, now_ms=now_ms)

    def header_from_bytes(self, raw: bytes) -> RunHeader:
        return RunHeader.from_bytes(raw)

    def read_item(self, raw: bytes) -> RunSpan:
        return RunSpan.from_bytes(raw)

    def item_id(self, item: RunSpan) -> str:
        return item.span_id

    def add(self, header: RunHeader, item: RunSpan, *, now_ms: int, size: int) -> str:
        return self.book.add(header, item, now_ms=now_ms, limits=self.limits, size=size)

    def due(self, header: RunHeader, *, now_ms: int) -> str | None:
        return due(header, now_ms=now_ms, limits=self.limits)

    def forced_status(self, header: RunHeader) -> str:
        return "idle"  # memory ran short: judged as far as it goes

    def start(self, header: RunHeader) -> None:
        """A run's judgment covers every span it holds: nothing to note."""

    def case(self, key: str, header: RunHeader, items: list[RunSpan]) -> dict[str, Any]:
        case = run_case(items, status=header.status or "idle",  # type: ignore[arg-type]
                        max_chars=self.runs.trajectory_max_chars,
                        result_max_chars=self.runs.tool_result_max_chars)
        if not case.get("output"):
            case["output"] = NO_FINAL_ANSWER
        return case

    def finish(self, key: str, header: RunHeader, *, now_ms: int) -> list[str]:
        header.state, header.closed_ms = "closed", now_ms
        return self.book.forget_items(key)

    def durable(self, header: RunHeader) -> tuple[bool, int]:
        return durable(header)

    def recount(self, header: RunHeader, ids: dict[str, int], *, now_ms: int) -> None:
        recount(header, ids, now_ms=now_ms)

    def count_item(self, outcome: str) -> None:
        self.telemetry.run_spans.labels(outcome=outcome).inc()

    def count_whole(self, outcome: str) -> None:
        self.telemetry.runs.labels(outcome=outcome).inc()

    def say_late(self, key: str, header: RunHeader) -> None:
        self.telemetry.runs.labels(outcome="late_span").inc()
        if key in self._late_logged or len(self._late_logged) >= _LATE_LOGGED_MAX:
            return
        self._late_logged.add(key)
        log.info("a span of agent run %s came after the run was judged (%s); counted in "
                 "guardrail_runs{outcome=\"late_span\"}, not judged", key, header.status)

    def update_gauges(self) -> None:
        self.telemetry.open_runs.set(self.book.open_runs)
        self.telemetry.open_run_spans.set(self.book.spans_held)
        self.telemetry.open_run_bytes.set(self.book.bytes_held)
