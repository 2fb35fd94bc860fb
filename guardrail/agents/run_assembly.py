"""The run assembler: spans of AI agents' runs in, one judged case per run out.

The judging agent sends every span of an agent run (see
:mod:`guardrail.runs.routing`) to the internal topic ``<app_id>-run-spans``,
keyed by trace id, so one worker owns each run whatever partition its spans
came in on. This Faust agent reads that topic (concurrency 1: it writes a
table) and keeps each open run in the table ``agent-runs`` (changelogged:
``h/<trace>`` its header, ``s/<trace>/<span>`` each span), so runs survive
restarts and rebalances. The topic carries three kinds of records (header
``guardrail-run``; the table's keys and values are text, in Faust's JSON codec,
which its changelog recovery reads):

- ``span``: added to its run once (keyed by span id: a redelivery changes
  nothing); a span for a run already judged is counted as late, not judged.
- ``tick``: sent by this worker's sweep (every second) for a run that looks
  due; if it is (:func:`guardrail.runs.assembly.due`), the run becomes
  ``closing`` and is judged as one case, named by the tick's coordinates.
- ``done``: sent after the run's result was published; the run becomes
  ``closed`` and its spans are deleted.

Delivery: a batch's table writes are confirmed on the broker, its results
published, then its ``done`` records, and only then is it acked. A crash
before the ack redelivers the tick; the run is still ``closing`` under the
same tick, is judged again under the same name, and the window counter skips
the repeat (its position in the run-spans partition is not above the last one
counted): a run is never lost nor counted twice, its result at worst
published twice, as every result can be.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import orjson

from ..formats import CaseDecoder
from ..runs.assembly import RunBook, RunHeader, RunLimits, due
from ..runs.case import NO_FINAL_ANSWER, run_case
from ..runs.spans import RunSpan
from ..stream.envelope import Source
from ..stream.processing import MessageJudge, Outgoing, RawMessage
from .judging import (MAX_INFLIGHT_BATCHES, RAW_TOPIC, OrderedAcker, output_topics,
                      publish_records, stop_acker)
from .windows import ConfirmedTable, _stale

if TYPE_CHECKING:
    from .runtime import WorkerRuntime

__all__ = ["register", "run_spans_topic", "RUN_TABLE", "RunAssembler"]

log = logging.getLogger("guardrail.runs")

RUN_TABLE = "agent-runs"
KIND_HEADER = "guardrail-run"
TICK_HEADERS = ((KIND_HEADER, b"tick"),)
DONE_HEADERS = ((KIND_HEADER, b"done"),)
#: How often the sweep looks for due runs, and how long before it ticks a run again.
SWEEP_SECONDS = 1.0
TICK_AGAIN_MS = 5000
BATCH = 500
#: Traces whose late spans were logged (once per trace), remembered at most.
_LATE_LOGGED_MAX = 10_000


def run_spans_topic(app_id: str) -> str:
    """The internal topic of runs' spans, ticks and done records."""
    return f"{app_id}-run-spans"


def _now_ms() -> int:
    return int(time.time() * 1000)


def _kind(headers: Any) -> bytes | None:
    pairs = headers.items() if isinstance(headers, Mapping) else (headers or ())
    return next((value for name, value in pairs if name == KIND_HEADER), None)


class RunAssembler:
    """Applies run-spans records to the run table, inside the agent's stream
    iteration (Faust takes a write's changelog partition from the current event)."""

    def __init__(self, runtime: WorkerRuntime, table: Any, topic: str) -> None:
        runs = runtime.settings.runs
        self.table, self.topic, self.runs = table, topic, runs
        self.telemetry = runtime.telemetry
        self.limits = RunLimits(settle_seconds=runs.run_settle_seconds,
                                idle_seconds=runs.run_idle_seconds,
                                max_spans=runs.run_max_spans, max_bytes=runs.run_max_bytes)
        self.book = RunBook()
        self._late_logged: set[str] = set()
        #: When the sweep last ticked each run.
        self._ticked: dict[str, int] = {}
        #: Headers changed by spans in this batch, with an event of their trace
        #: (its partition is the header's changelog partition): written once at
        #: the batch's end (:meth:`write_headers`), not once per span.
        self._changed: dict[str, Any] = {}

    def apply(self, event: Any) -> RawMessage | None:
        """One record; returns the run to judge when it was a tick that closed one."""
        message = event.message
        trace = (message.key or b"").decode("ascii", "replace")
        kind = _kind(message.headers)
        if kind == b"span":
            self._span(trace, event)
        elif kind == b"tick":
            return self._tick(trace, message)
        elif kind == b"done":
            self._done(trace)
        else:
            log.warning("skipping a run-spans record of unknown kind %r at %s/%s",
                        kind, message.partition, message.offset)
        return None

    def _write(self, header: RunHeader) -> None:
        self._changed.pop(header.trace_id, None)
        self.table["h/" + header.trace_id] = header.to_bytes().decode()

    def write_headers(self, stream: Any) -> None:
        """Write the headers the batch's spans changed, each once, after its
        spans (a crash in between keeps spans without their header's update,
        which :meth:`rebuild` and a redelivery make good)."""
        for trace, event in list(self._changed.items()):
            header = self.book.headers.get(trace)
            if header is not None:
                stream._set_current_event(event)
                self._write(header)
        self._changed.clear()

    def _span(self, trace: str, event: Any) -> None:
        value = event.message.value
        try:
            span = RunSpan.from_bytes(value or b"")
        except ValueError as exc:
            log.error("skipping an unreadable run span of trace %s: %s", trace, exc)
            return
        now = _now_ms()
        header = self.book.headers.setdefault(trace, RunHeader.new(trace, now_ms=now))
        root_ms = header.root_ms
        outcome = self.book.add(header, span, now_ms=now, limits=self.limits,
                                size=len(value or b""))
        self.telemetry.run_spans.labels(outcome=outcome).inc()
        if outcome == "added":
            self.table[_span_key(trace, span.span_id)] = (value or b"").decode()
            self._changed[trace] = event
        elif outcome == "duplicate" and header.root_ms != root_ms:
            self._changed[trace] = event  # a redelivered root marked the run
        elif outcome == "dropped" and header.dropped == 1:
            self._write(header)  # truncated from now on: due at the next sweep
        elif outcome == "late":
            self.telemetry.runs.labels(outcome="late_span").inc()
            self._say_late(trace, header)

    def _say_late(self, trace: str, header: RunHeader) -> None:
        if trace in self._late_logged or len(self._late_logged) >= _LATE_LOGGED_MAX:
            return
        self._late_logged.add(trace)
        log.info("a span of agent run %s came after the run was judged (%s); counted in "
                 "guardrail_runs{outcome=\"late_span\"}, not judged", trace, header.status)

    def _tick(self, trace: str, message: Any) -> RawMessage | None:
        header = self.book.headers.get(trace)
        if header is None:
            return None
        now, at = _now_ms(), [message.partition, message.offset]
        if header.state == "open":
            status = due(header, now_ms=now, limits=self.limits)
            if status is None and message.value == b"force":
                status = "idle"  # memory ran short: judged as far as it goes
            if status is None:
                return None
            header.state, header.tick, header.status = "closing", at, status
            self._write(header)
            self.telemetry.runs.labels(outcome=status).inc()
            return self._case_message(header, message)
        if header.state == "closing" and header.tick == at:
            return self._case_message(header, message)  # redelivered: the same run, same name
        if header.state == "closed" and now - (header.closed_ms or 0) >= \
                self.limits.forget_after_ms:
            del self.table["h/" + trace]
            self.book.headers.pop(trace, None)
        return None

    def _done(self, trace: str) -> None:
        header = self.book.headers.get(trace)
        if header is None or header.state != "closing":
            return
        header.state, header.closed_ms = "closed", _now_ms()
        for span_id in self.book.forget_spans(trace):
            self.table.pop(_span_key(trace, span_id), None)
        self._write(header)

    def _case_message(self, header: RunHeader, message: Any) -> RawMessage:
        trace = header.trace_id
        spans = [RunSpan.from_bytes(text.encode())
                 for span_id in self.book.span_ids.get(trace, {})
                 if (text := self.table.get(_span_key(trace, span_id))) is not None]
        case = run_case(spans, status=header.status or "idle",
                        max_chars=self.runs.trajectory_max_chars,
                        result_max_chars=self.runs.tool_result_max_chars)
        if not case.get("output"):
            case["output"] = NO_FINAL_ANSWER
        timestamp = int(message.timestamp * 1000) if message.timestamp else None
        source = Source(message.topic, message.partition, message.offset,
                        timestamp_ms=timestamp, key=trace.encode())
        return RawMessage(value=orjson.dumps(case), source=source)

    def rebuild(self) -> None:
        """The in-memory view again from the table (after a recovery: the table
        now holds exactly this worker's partitions)."""
        headers: dict[str, RunHeader] = {}
        spans: dict[str, dict[str, int]] = {}
        for key, value in list(self.table.items()):
            kind, _, rest = str(key).partition("/")
            if kind == "h":
                try:
                    headers[rest] = RunHeader.from_bytes(str(value).encode())
                except ValueError as exc:
                    log.error("skipping an unreadable run header %r: %s", key, exc)
            elif kind == "s":
                trace, _, span_id = rest.partition("/")
                spans.setdefault(trace, {})[span_id] = len(value)
        self.book.rebuild(headers, spans, now_ms=_now_ms())
        log.info("agent runs after recovery: %d open, %d spans held",
                 self.book.open_runs, self.book.spans_held)

    def due_ticks(self, now_ms: int) -> list[tuple[str, bytes]]:
        """``(trace, tick value)`` for every run the sweep should tick now."""
        ticks = [(h.trace_id, b"") for h in self.book.headers.values()
                 if due(h, now_ms=now_ms, limits=self.limits) is not None
                 or (h.state == "closed"
                     and now_ms - (h.closed_ms or 0) >= self.limits.forget_after_ms)]
        over = self.book.bytes_held - self.runs.run_memory_bytes
        if over > 0:  # judge the quietest runs early until memory is back under the cap
            for header in self.book.quietest_open(len(self.book.headers)):
                if over <= 0:
                    break
                over -= header.bytes
                ticks.append((header.trace_id, b"force"))
        return ticks

    def ticks_to_send(self, now_ms: int) -> list[tuple[str, bytes]]:
        """:meth:`due_ticks` less the runs ticked within ``TICK_AGAIN_MS`` (a tick
        is on its way; one that found the run not due yet is sent again later)."""
        ticks = [(trace, value) for trace, value in self.due_ticks(now_ms)
                 if now_ms - self._ticked.get(trace, -TICK_AGAIN_MS) >= TICK_AGAIN_MS]
        self._ticked = {t: at for t, at in self._ticked.items()
                        if now_ms - at < TICK_AGAIN_MS}
        self._ticked.update((trace, now_ms) for trace, _ in ticks)
        return ticks

    def update_gauges(self) -> None:
        self.telemetry.open_runs.set(self.book.open_runs)
        self.telemetry.open_run_spans.set(self.book.spans_held)
        self.telemetry.open_run_bytes.set(self.book.bytes_held)


def _span_key(trace: str, span_id: str) -> str:
    return f"s/{trace}/{span_id}"


def _runs_judge(runtime: WorkerRuntime) -> MessageJudge:
    """A message judge for run cases: the worker's evaluator, sampling, budget,
    review and exporter, reading the run cases this module makes."""
    main, s = runtime.message_judge, runtime.settings
    return MessageJudge(main.evaluator, worker=s.worker, kafka=s.kafka, windows=s.windows,
                        telemetry=main.telemetry, sampler=main.sampler, budget=main.budget,
                        decoder=CaseDecoder(),
                        conversation_max_chars=s.inputs.conversation_max_chars,
                        exporter=main.exporter, review=main.review)


def register(runtime: WorkerRuntime) -> None:
    """Add the run table, the assembling agent and its sweep (``agent_runs`` with
    ``input_format=otlp`` only)."""
    app, s = runtime.app, runtime.settings
    name = run_spans_topic(s.kafka.app_id)
    source = app.topic(name, partitions=s.kafka.topic_partitions, **RAW_TOPIC)
    table = app.tables.add(ConfirmedTable(
        app, name=RUN_TABLE, default=None, beacon=app.tables.beacon,
        partitions=s.kafka.topic_partitions, extra_topic_configs={"cleanup.policy": "compact"}))
    assembler = RunAssembler(runtime, table, name)
    table.on_recover(_async(assembler.rebuild))
    runs_judge = _runs_judge(runtime)
    topics = {**output_topics(runtime, runs_judge), name: source}
    confirm = runtime.state.get("confirm_before_ack")

    async def judge_runs(messages: list[RawMessage]) -> list[Outgoing]:
        if not messages:
            return []
        records = await runs_judge.process(messages)
        return records + [Outgoing(name, m.source.key, b"", headers=DONE_HEADERS)
                          for m in messages]

    async def publish(records: list[Outgoing]) -> None:
        # Results before their done records: a done must never stand for an unpublished run.
        await publish_records(topics, [r for r in records if r.topic != name])
        await publish_records(topics, [r for r in records if r.topic == name])
        await table.confirm_changelog()
        if confirm is not None:
            await confirm()  # type: ignore[operator]

    @app.agent(source, name="guardrail.runs", concurrency=1)
    async def assemble(stream: Any) -> None:
        acker = OrderedAcker(stream, MAX_INFLIGHT_BATCHES, publish,
                             on_config_error=runtime.stop_on_config_error)
        try:
            async for events in stream.noack_take(BATCH, within=0.05):
                due_runs = []
                for event in events:
                    if _stale(app, event):
                        continue  # acked unprocessed; the partition's owner refetches it
                    stream._set_current_event(event)
                    message = assembler.apply(event)
                    if message is not None:
                        due_runs.append(message)
                assembler.write_headers(stream)
                stream._set_current_event(None)
                await acker.submit(list(events), asyncio.ensure_future(judge_runs(due_runs)))
        finally:
            await stop_acker(acker, runtime)
            log.info("run assembler stopped")

    @app.timer(SWEEP_SECONDS)
    async def sweep() -> None:
        await _send_ticks(assembler, source)
        assembler.update_gauges()

    runtime.state["run_assembler"] = assembler


async def _send_ticks(assembler: RunAssembler, topic: Any) -> None:
    for trace, value in assembler.ticks_to_send(_now_ms()):
        await topic.send(key=trace.encode(), value=value, headers=list(TICK_HEADERS))


def _async(function: Any) -> Any:
    async def call() -> None:
        function()
    return call
