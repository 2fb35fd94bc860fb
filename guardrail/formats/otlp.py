"""The ``otlp`` input format: OpenTelemetry trace exports, one case per GenAI span.

Reads the records the OpenTelemetry Collector's ``kafka`` exporter writes to
its traces topic (``otlp_spans`` by default): an ``ExportTraceServiceRequest``
as protobuf (``encoding: otlp_proto``, the default) or as OTLP/JSON
(``otlp_json``); and, through :meth:`OtlpDecoder.decode_json`, a line of the
Collector's ``file`` exporter::

    decoder = OtlpDecoder(labels={"tenant": ["app.tenant", "tenant.id"]})
    decoded = decoder.decode(record.value, {})      # protobuf or OTLP/JSON
    decoded.cases[0]
    # {'case_id': '4bf92f3577b34da6a3ce929d0e0e4736:00f067aa0ba902b7',
    #  'output': 'Paris is the capital.',
    #  'messages': [{'role': 'user', 'content': 'Capital of France?'}],
    #  'timestamp': 1732500000123,
    #  'trace': {'trace_id': '4bf9…4736', 'span_id': '00f0…02b7'},
    #  'metadata': {'model': 'gpt-4o-mini', 'service': 'chat-app', ...}}
    decoded.skipped    # {'no_content': 2} – GenAI spans captured without content

**Encoding.** The kafka exporter sets no content-type header (its headers are
only ``include_metadata_keys`` and static ``record_headers``), so a
``content-type`` header is honoured when someone sets one (``…json`` or
``…protobuf``) and the value is sniffed otherwise: JSON when its first
non-whitespace byte is ``{``, protobuf else. A protobuf record can start with
``0x0a 0x7b`` (a first ``ResourceSpans`` of 123 bytes), which sniffs as JSON,
so a sniffed record that is not JSON is tried as protobuf before it is
refused. Decoding uses the real ``opentelemetry-proto`` classes; OTLP/JSON is
the OTLP spec's JSON (hex ``traceId``/``spanId``, which protobuf's own JSON
mapping would read as base64, so they are turned into bytes first; enums as
numbers or names; int64 as numbers or strings; unknown fields ignored).

**Outcomes per record.** A record that is neither protobuf nor OTLP/JSON raises
:class:`UndecodableRecord` (``otlp: …``, to the DLQ), and so does one that
holds no ``resourceSpans`` at all (wrong shape, or bytes that parse as an
empty message). Otherwise every
GenAI span (see :func:`~.otlp_conventions.is_genai`) is one case, or one count
in ``skipped``: ``no_content`` (content capture was off: a :class:`Notice` per
service says how to turn it on), ``unreadable_content`` (content is there but
cannot be read: not JSON, the wrong shape, nested too deep; the notice per
service names the attribute and what is wrong with it, see
:mod:`.otlp_content`) or ``tool_calls`` (the answer is tool calls only). A
record without any GenAI span counts ``no_genai_span: 1``; other spans beside
GenAI ones (HTTP, database …) are ignored and counted nowhere.

**Conversations.** A case carries ``conversation_id`` when its span, or another
span of its trace, names the conversation it is a turn of (attributes and order
in :mod:`.otlp_conventions`, traces remembered across records in
:mod:`.otlp_sessions`); so does a span of an agent run (``RunSpan.conversation_id``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from .base import Decoded, Headers, Notice, UndecodableRecord
from .otlp_content import Unreadable, unreadable_notice
from .otlp_attributes import DEFAULT_LABELS, _attributes, _label_values, _trace
from .otlp_sessions import TraceConversations
from .otlp_wire import request_from_bytes, request_from_json
from .otlp_conventions import Exchange, SpanEvent, is_genai, read_exchange
from .otlp_frameworks import plain_attributes

__all__ = ["OtlpDecoder", "DEFAULT_LABELS", "CAPTURE_HINT", "request_from_bytes",
           "request_from_json"]

#: How to turn content capture on, per instrumentation (read from their sources:
#: opentelemetry-instrumentation-openai-v2 2.4b0 with opentelemetry-util-genai,
#: openinference-instrumentation 0.1.x, opentelemetry-instrumentation-openai 0.62).
CAPTURE_HINT = (
    "OpenTelemetry instrumentations: OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT="
    "span_only (or span_and_event; event_only and the legacy 'true' write log records, "
    "which guardrail does not read); OpenInference: unset OPENINFERENCE_HIDE_OUTPUTS, "
    "OPENINFERENCE_HIDE_OUTPUT_MESSAGES and OPENINFERENCE_HIDE_OUTPUT_TEXT; "
    "OpenLLMetry: TRACELOOP_TRACE_CONTENT=true")
_UNKNOWN_SERVICE = "unknown_service"


class OtlpDecoder:
    """Decodes OTLP trace exports into cases, one per GenAI span.

    ``labels`` maps a metadata label to attribute names, tried in order, each
    on the span first and then on its resource; the first present wins. It
    extends :data:`DEFAULT_LABELS` and overrides a label named in both.
    ``association_keys`` are the OpenLLMetry association properties read as a
    conversation id (``session_association_keys``; its default when None).
    """

    name = "otlp"
    many_per_record = True

    def __init__(self, labels: Mapping[str, Sequence[str]] | None = None, *,
                 runs: Any = None, association_keys: Sequence[str] | None = None) -> None:
        merged = dict(DEFAULT_LABELS)
        for label, names in (labels or {}).items():
            merged[str(label)] = (names,) if isinstance(names, str) else tuple(map(str, names))
        self.labels: dict[str, tuple[str, ...]] = merged
        #: With a :class:`guardrail.assembly.runs.routing.RunRouter`, spans of agent runs
        #: come out as ``run_spans`` (not judged span by span).
        self.runs = runs
        #: Each span's conversation id, remembered per trace across records.
        self.conversations = TraceConversations(association_keys)

    def decode(self, raw: bytes, headers: Headers) -> Decoded:
        return self._decoded(request_from_bytes(raw, headers))

    def decode_json(self, record: Any) -> Decoded:
        return self._decoded(request_from_json(record))

    def _decoded(self, request: ExportTraceServiceRequest) -> Decoded:
        try:
            return self._cases(request)
        except Exception as exc:  # a span shaped like nothing foreseen: DLQ it, keep running
            raise UndecodableRecord(
                f"otlp: spans could not be read ({type(exc).__name__}: {str(exc)[:200]})") \
                from None

    def _cases(self, request: ExportTraceServiceRequest) -> Decoded:
        cases: list[dict[str, Any]] = []
        skipped: Counter[str] = Counter()
        conventions: Counter[str] = Counter()
        notices: dict[str, Notice] = {}  # by key: one per service and kind
        genai_spans = 0
        spans = list(_spans_of(request))
        ids = self.conversations.resolve([(s[0].trace_id.hex(), s[1]) for s in spans])
        for entry, conversation_id in zip(spans, ids):
            entry.append(conversation_id)
        run_spans = self._run_spans(spans)
        for span, attrs, resource, _scope, conversation_id in spans:
            if span is None:  # claimed by a run
                continue
            if not is_genai(attrs, (e.name for e in span.events)):
                continue
            genai_spans += 1
            outcome, unreadable, convention = self._span_case(span, attrs, resource)
            if convention is not None:
                conventions[convention] += 1
            if isinstance(outcome, dict) and conversation_id is not None:
                outcome["conversation_id"] = conversation_id
            notice = _span_notice(outcome, _service(resource), unreadable)
            if notice is not None:
                notices.setdefault(notice.key, notice)
            if isinstance(outcome, dict):
                cases.append(outcome)
            else:
                skipped[outcome] += 1
        if not genai_spans and not run_spans:
            skipped["no_genai_span"] += 1
        conventions.update(s.convention for s in run_spans if s.convention)
        return Decoded(cases=cases, skipped=dict(skipped), notices=tuple(notices.values()),
                       run_spans=tuple(run_spans), conventions=dict(conventions))

    def _run_spans(self, spans: list[list[Any]]) -> list[Any]:
        """Take the spans of agent runs out of ``spans`` (their slot set to None)
        as :class:`~guardrail.assembly.runs.RunSpan`: two passes, so an agent span later
        in the record claims the earlier spans of its trace too."""
        if self.runs is None:
            return []
        for span, attrs, _resource, scope, _conversation in spans:
            self.runs.see(span.trace_id.hex(), attrs, scope)
        taken = []
        for entry in spans:
            span, attrs, resource, scope, conversation_id = entry
            if self.runs.claims(span.trace_id.hex()):
                entry[0] = None
                run_span = self.runs.read(span, attrs, resource, scope, self.labels,
                                          conversation_id=conversation_id)
                if run_span is not None:
                    taken.append(run_span)
        return taken

    def _span_case(self, span: Any, attrs: dict[str, Any], resource: dict[str, Any],
                   ) -> tuple[dict[str, Any] | str, tuple[Unreadable, ...], str | None]:
        """The span's case, or why it has none (``no_content``, ``tool_calls``,
        ``unreadable_content``); with the content of it that could not be read, and
        the convention that held its answer."""
        events = [SpanEvent(e.name, _attributes(e.attributes)) for e in span.events]
        exchange = read_exchange(attrs, events)
        if exchange is None:
            return "no_content", (), None
        if exchange.output:
            return (self._case(span, attrs, resource, exchange), exchange.unreadable,
                    exchange.convention)
        if exchange.tool_calls:
            return "tool_calls", (), exchange.convention
        return ("unreadable_content" if exchange.unreadable else "no_content",
                exchange.unreadable, None)

    def _case(self, span: Any, attrs: dict[str, Any], resource: dict[str, Any],
              exchange: Exchange) -> dict[str, Any]:
        case: dict[str, Any] = {"output": exchange.output}
        if exchange.messages:
            case["messages"] = exchange.messages
        trace = _trace(span.trace_id, span.span_id)
        if trace is not None:
            case["case_id"] = f"{trace['trace_id']}:{trace['span_id']}"
            case["trace"] = trace
        nanos = span.end_time_unix_nano or span.start_time_unix_nano
        if nanos:
            case["timestamp"] = nanos // 1_000_000
        metadata = _label_values(self.labels, attrs, resource)
        if metadata:
            case["metadata"] = metadata
        return case


def _spans_of(request: ExportTraceServiceRequest) -> Any:
    """``[span, attributes, resource attributes, scope name]`` of every span (a list:
    the decoder appends the span's conversation id, and a run claims its span)."""
    for resource_spans in request.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                yield [span, plain_attributes(_attributes(span.attributes)), resource,
                       scope_spans.scope.name]


def _service(resource: Mapping[str, Any]) -> str:
    name = resource.get("service.name")
    return name if isinstance(name, str) and name else _UNKNOWN_SERVICE


def _span_notice(outcome: dict[str, Any] | str, service: str,
                 unreadable: tuple[Unreadable, ...]) -> Notice | None:
    """What the worker logs once per service about a span: how to turn capture
    on, or what is there and cannot be read (judged without it, or not at all)."""
    if outcome == "no_content":
        return _no_content_notice(service)
    if unreadable:
        return unreadable_notice(service, unreadable, judged=isinstance(outcome, dict))
    return None


def _no_content_notice(service: str) -> Notice:
    return Notice(
        key=f"no_content:{service}",
        text=(f"otlp: GenAI spans of service {service!r} carry no message content, so "
              f"they are not judged; turn content capture on in that service: {CAPTURE_HINT}"))
