"""Send verdicts back into the team's tracing as OTLP log records.

Each metric of a result becomes one ``gen_ai.evaluation.result`` event (GenAI
semantic conventions): a log record with the judged span's trace and span id,
so a backend shows the verdict on that span::

    exporter = EvaluationExporter(endpoint="http://collector:4318", telemetry=telemetry,
                                  service_name="guardrail", judge_model="openai/gpt-4o-mini")
    exporter.export(metrics, {"trace_id": "4bf9...4736", "span_id": "00f0...02b7"},
                    case_id="c1", event_time_ms=1_700_000_000_000)   # never blocks or raises
    exporter.export_result(metrics, message, event_time_ms=1_700_000_000_000)  # a judged case
    await exporter.aclose()           # or exporter.shutdown(timeout_s): bounded flush

Attributes: ``gen_ai.evaluation.name``, ``.score.value`` and ``.score.label``
(``SAFE``/``UNSAFE``; both absent on error), ``gen_ai.evaluation.explanation``
(violations joined by ``"; "``, else the reasoning), ``error.type``
(``judge_error``/``judge_unavailable``; the message is the body); extras under
``guardrail.*``. A result without a valid trace is still exported, without
trace context (findable by ``guardrail.case_id``).

Conversations (:func:`conversation_attributes`): a turn that carries a
conversation id, and a session judgment, carry it as ``gen_ai.conversation.id``
(the GenAI registry's id of a conversation, session or thread); a session
judgment's events go on its latest turn's span (its ``trace``) and carry its
session block as ``guardrail.session.trigger`` (``every_n``, ``turn_flagged``,
``idle``, ``resumed``), ``.status`` (``open``, ``closed``, ``truncated``),
``.turns`` and ``.traces``. So the conversation's verdict is found from its
latest trace, and from any other of its traces through the conversation id. Delivery is best effort,
from the SDK's batch thread, counted on ``/metrics`` (``guardrail_otlp_*``):
records beyond the bounded queue are dropped, never waited on.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from opentelemetry._logs import SeverityNumber
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.sdk._logs import LoggerProvider, ReadableLogRecord
from opentelemetry.sdk._logs.export import (BatchLogRecordProcessor, LogRecordExporter,
                                            LogRecordExportResult)
from opentelemetry.sdk.resources import Resource
from opentelemetry.trace import (INVALID_SPAN, NonRecordingSpan, SpanContext, TraceFlags,
                                 set_span_in_context)

from ..judging.models import MetricResult, RedteamMetrics
from ..formats.settings import InputSettings
from ..judges.settings import JudgeSettings
from .telemetry import Telemetry

if TYPE_CHECKING:
    from .envelope import InputMessage

__all__ = ["EvaluationExporter", "EVENT_NAME", "logs_url", "evaluation_exporter",
           "conversation_attributes"]

log = logging.getLogger("guardrail.otel_export")

EVENT_NAME = "gen_ai.evaluation.result"
#: OTel GenAI's id of the conversation (session, thread) a result belongs to.
CONVERSATION_ID = "gen_ai.conversation.id"
#: The session block's fields a session judgment's events carry (``guardrail.session.*``).
_SESSION_FIELDS = ("trigger", "status", "turns", "traces")
_HEX_TRACE, _HEX_SPAN = re.compile(r"[0-9a-fA-F]{32}"), re.compile(r"[0-9a-fA-F]{16}")
#: Seconds to wait after giving up on a flush, for the sender to notice.
_ABANDON_GRACE_S = 1.0


def logs_url(endpoint: str) -> str:
    """``http://collector:4318`` or ``.../v1/logs`` -> the OTLP/HTTP logs URL."""
    endpoint = endpoint.rstrip("/")
    return endpoint if endpoint.endswith("/v1/logs") else f"{endpoint}/v1/logs"


class _CountingExporter(LogRecordExporter):
    """Counts export outcomes and the queue's fill around the OTLP exporter.

    ``pending`` (records handed to the processor, not yet to an export call) is
    never below the processor's queue length; admitting only below the queue
    size means the SDK never drops silently (a full queue evicts its oldest).
    """

    def __init__(self, inner: LogRecordExporter, telemetry: Telemetry, max_queue: int) -> None:
        self.inner, self.telemetry, self.max_queue = inner, telemetry, max_queue
        self.pending, self._lock = 0, threading.Lock()
        self._abandoned = self._shut = False

    def admit(self, count: int) -> bool:
        with self._lock:
            if self.pending + count > self.max_queue:
                return False
            self.pending += count
            return True

    def release(self, count: int) -> None:
        with self._lock:
            self.pending -= count

    def export(self, batch: Sequence[ReadableLogRecord]) -> LogRecordExportResult:
        try:
            if self._abandoned:  # shutdown gave up: fail fast, do not hold the exit
                self.telemetry.otlp_dropped.labels(reason="shutdown").inc(len(batch))
                return LogRecordExportResult.FAILURE
            try:
                result = self.inner.export(batch)
            except Exception:  # the processor would swallow it uncounted
                log.exception("OTLP log export raised")
                result = LogRecordExportResult.FAILURE
            if result is LogRecordExportResult.SUCCESS:
                self.telemetry.otlp_exported.inc(len(batch))
            else:
                self.telemetry.otlp_failures.inc()
                self.telemetry.otlp_dropped.labels(reason="export_failed").inc(len(batch))
            return result
        finally:
            self.release(len(batch))

    def abandon(self) -> None:
        """Stop waiting on the endpoint: aborts retry back-offs, fails the rest."""
        self._abandoned = True
        self.shutdown()

    def shutdown(self) -> None:
        # Called by the processor and by abandon(); the inner exporter warns twice.
        with self._lock:
            if self._shut:
                return
            self._shut = True
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True  # nothing is buffered here


class EvaluationExporter:
    """Emits one ``gen_ai.evaluation.result`` log record per judged metric."""

    def __init__(self, endpoint: str, telemetry: Telemetry | None = None, *,
                 service_name: str = "guardrail", judge_model: str | None = None,
                 headers: Mapping[str, str] | None = None, timeout_s: float = 5.0,
                 max_queue_size: int = 2048, schedule_delay_ms: int = 1000) -> None:
        self.telemetry = telemetry or Telemetry()
        self.judge_model = judge_model
        self.url = logs_url(endpoint)
        # timeout_s bounds one export including the exporter's retries (it
        # stops retrying when the next back-off would pass it).
        inner = OTLPLogExporter(endpoint=self.url, headers=dict(headers or {}),
                                timeout=timeout_s, compression=Compression.Gzip)
        self._exporter = _CountingExporter(inner, self.telemetry, max_queue_size)
        # Our own provider, never the global one, and no atexit hook: its
        # unbounded (30 s per processor) shutdown must not hold the exit.
        self._provider = LoggerProvider(resource=Resource.create({"service.name": service_name}),
                                        shutdown_on_exit=False)
        self._provider.add_log_record_processor(BatchLogRecordProcessor(
            self._exporter, schedule_delay_millis=schedule_delay_ms,
            max_queue_size=max_queue_size, max_export_batch_size=min(512, max_queue_size)))
        self._logger = self._provider.get_logger("guardrail.evaluation")
        self._closed = False

    def export_result(self, metrics: RedteamMetrics, message: InputMessage, *,
                      event_time_ms: int | None) -> None:
        """:meth:`export` a judged case's result: on its span, named by its case
        id, with its conversation's attributes (:func:`conversation_attributes`)."""
        self.export(metrics, message.trace, case_id=message.case.case_id or "",
                    event_time_ms=event_time_ms, attributes=conversation_attributes(message))

    def export(self, metrics: RedteamMetrics, trace: Mapping[str, object] | None, *,
               case_id: str | None, event_time_ms: int | None,
               attributes: Mapping[str, str | int] | None = None) -> None:
        """Queue one record per metric of ``metrics``; never blocks, never raises."""
        try:
            # (body, attributes): the body is the metric's error message, if any.
            records = [(m.error, self._attributes(m)) for m in metrics.metrics]
            context = _trace_context(trace)
            extras = _extras(case_id, event_time_ms, attributes)
        except Exception:  # judging goes on whatever the result's fault
            log.exception("cannot build the evaluation records of case %s", case_id)
            self.telemetry.otlp_dropped.labels(reason="invalid").inc(
                len(getattr(metrics, "metrics", None) or ()))
            return
        if self._closed:
            self.telemetry.otlp_dropped.labels(reason="shutdown").inc(len(records))
        elif not self._exporter.admit(len(records)):
            self.telemetry.otlp_dropped.labels(reason="queue_full").inc(len(records))
        else:
            self._emit(records, context, extras)

    def _emit(self, records: list[tuple[str | None, dict]], context: Context,
              extras: dict[str, str | int]) -> None:
        # The event is the verdict, so it happens now; the judged output's own
        # time travels as guardrail.event_time_ms.
        now = time.time_ns()
        for body, attrs in records:
            try:
                self._logger.emit(timestamp=now, observed_timestamp=now, context=context,
                                  severity_number=SeverityNumber.INFO, severity_text="INFO",
                                  body=body, event_name=EVENT_NAME,
                                  attributes={**extras, **attrs})
            except Exception:  # an SDK fault must not reach the judging loop
                log.exception("cannot emit an evaluation record")
                self.telemetry.otlp_dropped.labels(reason="invalid").inc()
                self._exporter.release(1)  # it never reached the queue

    def _attributes(self, metric: MetricResult) -> dict[str, str | float | int]:
        attrs: dict[str, str | float | int] = {"gen_ai.evaluation.name": metric.name}
        judge_model = metric.judge_model or self.judge_model
        if judge_model:
            attrs["guardrail.judge_model"] = judge_model
        if metric.error is not None or not metric.result:
            attrs["error.type"] = "judge_unavailable" if metric.unavailable else "judge_error"
            return attrs
        verdict = metric.result[0]
        if metric.score is not None:
            attrs["gen_ai.evaluation.score.value"] = float(metric.score)
        attrs["gen_ai.evaluation.score.label"] = verdict.verdict
        explanation = "; ".join(verdict.violations) or verdict.reasoning
        if explanation:
            attrs["gen_ai.evaluation.explanation"] = explanation
        if metric.probability_unsafe is not None:
            attrs["guardrail.probability_unsafe"] = float(metric.probability_unsafe)
        if verdict.severity is not None:
            attrs["guardrail.severity"] = verdict.severity
        return attrs

    def shutdown(self, timeout_s: float = 5.0) -> None:
        """Flush what is queued, giving up after about ``timeout_s`` (+1 s)."""
        if self._closed:
            return
        self._closed = True
        # The SDK's shutdown waits up to 30 s per processor and cannot be told
        # less, so it runs on a thread we stop waiting for.
        closer = threading.Thread(target=self._provider.shutdown, daemon=True,
                                  name="guardrail-otlp-shutdown")
        closer.start()
        closer.join(timeout_s)
        if closer.is_alive():
            log.warning("OTLP endpoint %s: giving up on %d queued evaluation records",
                        self.url, self._exporter.pending)
            self._exporter.abandon()
            closer.join(_ABANDON_GRACE_S)

    async def aclose(self, timeout_s: float = 5.0) -> None:
        """:meth:`shutdown` off the event loop."""
        await asyncio.to_thread(self.shutdown, timeout_s)


def _trace_context(trace: Mapping[str, object] | None) -> Context:
    """A context holding the judged span (or none) for the record's ids."""
    span, trace = INVALID_SPAN, trace or {}
    trace_id, span_id = trace.get("trace_id"), trace.get("span_id")
    if (isinstance(trace_id, str) and isinstance(span_id, str)
            and _HEX_TRACE.fullmatch(trace_id) and _HEX_SPAN.fullmatch(span_id)):
        flags = trace.get("trace_flags")
        # The judged span reached us, so it was sampled unless told otherwise.
        flags = TraceFlags(flags if isinstance(flags, int) else TraceFlags.SAMPLED)
        context = SpanContext(int(trace_id, 16), int(span_id, 16), is_remote=True,
                              trace_flags=flags)
        if context.is_valid:
            span = NonRecordingSpan(context)
    elif trace:
        log.debug("no valid trace context in %r; exporting without", trace)
    # Never an empty Context: the SDK treats it as "none given" and would stamp
    # the record with whatever span is current on this thread.
    return set_span_in_context(span, Context())


def conversation_attributes(message: InputMessage) -> dict[str, str | int]:
    """The conversation a judged case belongs to, as its events' attributes::

        conversation_attributes(turn)      # {'gen_ai.conversation.id': 'chat-7'}
        conversation_attributes(session)   # {'gen_ai.conversation.id': 'chat-7',
        #  'guardrail.session.trigger': 'idle', 'guardrail.session.status': 'closed',
        #  'guardrail.session.turns': 4, 'guardrail.session.traces': 4}
    """
    block = message.session or {}
    conversation = block.get("id") or message.session_id
    attrs: dict[str, str | int] = {CONVERSATION_ID: str(conversation)} if conversation else {}
    for field in _SESSION_FIELDS:
        value = block.get(field)
        if isinstance(value, (str, int)) and not isinstance(value, bool):
            attrs[f"guardrail.session.{field}"] = value
    return attrs


def _extras(case_id: str | None, event_time_ms: int | None,
            attributes: Mapping[str, str | int] | None) -> dict[str, str | int]:
    """The caller's attributes (integers kept, the rest as text), kept out of the
    semconv namespaces we set but the conversation id."""
    extras: dict[str, str | int] = {}
    for key, value in (attributes or {}).items():
        name = (key if key == CONVERSATION_ID or key.startswith(("guardrail.", "gen_ai.response."))
                else f"guardrail.{key}")
        whole = isinstance(value, int) and not isinstance(value, bool)
        extras[name] = value if whole else str(value)
    if case_id is not None:
        extras["guardrail.case_id"] = case_id
    if event_time_ms is not None:
        extras["guardrail.event_time_ms"] = int(event_time_ms)
    return extras


def evaluation_exporter(inputs: InputSettings, judge: JudgeSettings,
                        telemetry: Telemetry | None = None) -> EvaluationExporter | None:
    """The exporter ``otlp_endpoint`` asks for, or None when it is unset."""
    if not inputs.otlp_endpoint:
        return None
    return EvaluationExporter(inputs.otlp_endpoint, telemetry, judge_model=judge.model)
