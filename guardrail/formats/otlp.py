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
"""

from __future__ import annotations

import base64
import binascii
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from .base import Decoded, Headers, Notice, UndecodableRecord, json_type, load_json
from .otlp_content import Unreadable, unreadable_notice
from .otlp_conventions import Exchange, SpanEvent, is_genai, read_exchange

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
#: The metadata labels read by default: label → attribute names, tried in order
#: (each on the span, then on the resource); the decoder's ``labels`` extend it.
DEFAULT_LABELS: dict[str, tuple[str, ...]] = {
    "model": ("gen_ai.response.model", "gen_ai.request.model", "llm.model_name",
              "llm.response.model_name", "llm.request.model_name"),
    "model_version": ("service.version",),
    "prompt_version": ("gen_ai.prompt.version", "llm.prompt_template.version",
                       "prompt.version", "prompt_version"),
    "service": ("service.name",),
    "environment": ("deployment.environment.name", "deployment.environment"),
    "provider": ("gen_ai.provider.name", "gen_ai.system", "llm.provider", "llm.system"),
}

_JSON_TYPES = ("json",)
_PROTO_TYPES = ("protobuf", "x-protobuf", "proto")
_LEADING_SPACE = re.compile(rb"[ \t\r\n]*")  # JSON's whitespace
_UNKNOWN_SERVICE = "unknown_service"


class OtlpDecoder:
    """Decodes OTLP trace exports into cases, one per GenAI span.

    ``labels`` maps a metadata label to attribute names, tried in order, each
    on the span first and then on its resource; the first present wins. It
    extends :data:`DEFAULT_LABELS` and overrides a label named in both.
    """

    name = "otlp"
    many_per_record = True

    def __init__(self, labels: Mapping[str, Sequence[str]] | None = None) -> None:
        merged = dict(DEFAULT_LABELS)
        for label, names in (labels or {}).items():
            merged[str(label)] = (names,) if isinstance(names, str) else tuple(map(str, names))
        self.labels: dict[str, tuple[str, ...]] = merged

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
        notices: dict[str, Notice] = {}  # by key: one per service and kind
        genai_spans = 0
        for resource_spans in request.resource_spans:
            resource = _attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    attrs = _attributes(span.attributes)
                    if not is_genai(attrs, (e.name for e in span.events)):
                        continue
                    genai_spans += 1
                    outcome, unreadable = self._span_case(span, attrs, resource)
                    notice = _span_notice(outcome, _service(resource), unreadable)
                    if notice is not None:
                        notices.setdefault(notice.key, notice)
                    if isinstance(outcome, dict):
                        cases.append(outcome)
                    else:
                        skipped[outcome] += 1
        if not genai_spans:
            skipped["no_genai_span"] += 1
        return Decoded(cases=cases, skipped=dict(skipped), notices=tuple(notices.values()))

    def _span_case(self, span: Any, attrs: dict[str, Any], resource: dict[str, Any],
                   ) -> tuple[dict[str, Any] | str, tuple[Unreadable, ...]]:
        """The span's case, or why it has none (``no_content``, ``tool_calls``,
        ``unreadable_content``); with the content of it that could not be read."""
        events = [SpanEvent(e.name, _attributes(e.attributes)) for e in span.events]
        exchange = read_exchange(attrs, events)
        if exchange is None:
            return "no_content", ()
        if exchange.output:
            return self._case(span, attrs, resource, exchange), exchange.unreadable
        if exchange.tool_calls:
            return "tool_calls", ()
        return ("unreadable_content" if exchange.unreadable else "no_content",
                exchange.unreadable)

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


# -- wire: bytes and JSON → ExportTraceServiceRequest --------------------------------------

def request_from_bytes(raw: bytes, headers: Headers) -> ExportTraceServiceRequest:
    """One Kafka record value as a request, by content-type header or by sniffing."""
    declared = _declared_encoding(headers)
    if declared == "proto":
        return _parse_proto(raw)
    if declared == "json":
        return request_from_json(_load_json(raw))
    start = _LEADING_SPACE.match(raw).end()  # type: ignore[union-attr]  # * always matches
    if raw[start:start + 1] != b"{":
        return _parse_proto(raw)
    try:
        return request_from_json(_load_json(raw))
    except UndecodableRecord as json_problem:
        try:  # protobuf whose first bytes happen to read as whitespace and '{'
            return _parse_proto(raw)
        except UndecodableRecord:
            raise json_problem from None


def request_from_json(record: Any) -> ExportTraceServiceRequest:
    """An OTLP/JSON ``ExportTraceServiceRequest`` (already parsed) as a request."""
    if not isinstance(record, dict):
        raise UndecodableRecord(
            f"otlp: OTLP/JSON must be an ExportTraceServiceRequest object, got {json_type(record)}")
    prepared = _with_binary_ids(record)
    request = ExportTraceServiceRequest()
    try:
        json_format.ParseDict(prepared, request, ignore_unknown_fields=True)
    except json_format.ParseError as exc:
        raise UndecodableRecord(f"otlp: not an OTLP/JSON trace export: {str(exc)[:300]}") from None
    except (ValueError, TypeError, RecursionError) as exc:  # e.g. nesting past the parser's limit
        raise UndecodableRecord(f"otlp: not an OTLP/JSON trace export: {type(exc).__name__}") \
            from None
    return _checked(request)


def _declared_encoding(headers: Headers) -> str | None:
    """``json`` / ``proto`` from a content-type header, None when absent or neither."""
    value = next((v for k, v in headers.items() if k.lower() == "content-type"), None)
    if not value:
        return None
    kind = value.decode("latin-1").split(";")[0].strip().lower()
    if kind.endswith(_JSON_TYPES):
        return "json"
    if kind.endswith(_PROTO_TYPES):
        return "proto"
    return None


def _load_json(raw: bytes) -> Any:
    try:
        return load_json(raw)
    except UndecodableRecord as exc:
        raise UndecodableRecord(f"otlp: {exc}") from None


def _parse_proto(raw: bytes) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(raw)
    except Exception as exc:  # DecodeError, or the C parser's other complaints
        raise UndecodableRecord(
            f"otlp: value is neither OTLP protobuf nor OTLP/JSON ({str(exc)[:200]})") from None
    return _checked(request)


def _checked(request: ExportTraceServiceRequest) -> ExportTraceServiceRequest:
    """A request with no resourceSpans is not a trace export: the Collector
    never sends empty ones, while stray bytes or JSON parse as exactly that."""
    if not request.resource_spans:
        raise UndecodableRecord("otlp: no resourceSpans: not an OTLP trace export")
    return request


def _with_binary_ids(record: dict[str, Any]) -> dict[str, Any]:
    """A copy of the request with every span and link id as base64, which
    ``ParseDict`` reads for bytes fields (OTLP/JSON writes them as hex)."""
    return _mapped(record, ("resourceSpans", "resource_spans"), lambda rs: _mapped(
        rs, ("scopeSpans", "scope_spans"), lambda ss: _mapped(
            ss, ("spans",), _span_ids)))


def _span_ids(span: Any) -> Any:
    span = _ids(span, ("traceId", "trace_id", "spanId", "span_id", "parentSpanId",
                       "parent_span_id"))
    return _mapped(span, ("links",), lambda link: _ids(link, ("traceId", "trace_id",
                                                              "spanId", "span_id")))


def _mapped(obj: Any, keys: tuple[str, ...], change: Any) -> Any:
    """``obj`` with ``change`` applied to each item of its list under any of
    ``keys``; anything of the wrong shape passes unchanged for ParseDict to name."""
    if not isinstance(obj, dict):
        return obj
    copy = obj
    for key in keys:
        items = obj.get(key)
        if isinstance(items, list):
            copy = dict(copy) if copy is obj else copy
            copy[key] = [change(item) for item in items]
    return copy


def _ids(obj: Any, keys: tuple[str, ...]) -> Any:
    if not isinstance(obj, dict):
        return obj
    copy = dict(obj)
    for key in keys:
        if isinstance(copy.get(key), str):
            copy[key] = _id_base64(copy[key], key)
    return copy


def _id_base64(text: str, key: str) -> str:
    """A hex id (the OTLP/JSON spec) as base64; base64 itself (protobuf's JSON
    mapping, from non-conforming producers) is accepted as it is."""
    try:
        return base64.b64encode(bytes.fromhex(text)).decode()
    except ValueError:
        pass
    try:
        base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise UndecodableRecord(f"otlp: {key} {text[:40]!r} is neither hex nor base64") from None
    return text


# -- attributes ----------------------------------------------------------------------------

def _value_of(value: AnyValue) -> Any:
    """An ``AnyValue`` as Python: str, bool, int, float, bytes, list, or dict (kvlist)."""
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [_value_of(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value_of(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind)


def _attributes(key_values: Any) -> dict[str, Any]:
    """Repeated ``KeyValue`` as a dict (the last of a repeated key wins)."""
    return {kv.key: _value_of(kv.value) for kv in key_values}


def _label_values(labels: Mapping[str, Sequence[str]], attrs: Mapping[str, Any],
                 resource: Mapping[str, Any]) -> dict[str, str]:
    """Metadata labels: per label, the first of its names present on the span,
    else on the resource; scalars as strings, arrays and maps skipped."""
    found: dict[str, str] = {}
    for label, names in labels.items():
        for name in names:
            value = _label(attrs.get(name))
            if value is None:
                value = _label(resource.get(name))
            if value is not None:
                found[label] = value
                break
    return found


def _label(value: Any) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str) and value:
        return value
    return None


def _trace(trace_id: bytes, span_id: bytes) -> dict[str, str] | None:
    """Hex ids, when both are of W3C size and not all zero (the invalid ids)."""
    if len(trace_id) != 16 or len(span_id) != 8 or not any(trace_id) or not any(span_id):
        return None
    return {"trace_id": trace_id.hex(), "span_id": span_id.hex()}


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
