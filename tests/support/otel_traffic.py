"""OpenTelemetry test traffic made by the real SDK and the real OTLP encoder.

Spans are recorded by an SDK ``TracerProvider`` into memory and encoded as the
Collector's kafka exporter sends them: an ``ExportTraceServiceRequest`` in
protobuf (``otlp_proto``) or OTLP/JSON (``otlp_json``, hex ids)::

    spans = genai_spans(["hello", "you idiot"], service_version="v2")
    value = otlp_proto(spans)                       # one Kafka record
    records = [otlp_proto(chunk) for chunk in chunks(spans, 10)]

:func:`openai_app_spans` instead drives the real OpenAI client, instrumented
by an OpenTelemetry OpenAI instrumentation, against an OpenAI-compatible
server (the stand-in judge plays the app's model).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator, Sequence
from typing import Any

from google.protobuf.json_format import MessageToDict
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

__all__ = ["genai_spans", "chat_span", "http_span", "otlp_proto", "otlp_json",
           "otlp_json_dict", "otlp_json_of", "chunks", "span_ids", "recording_provider",
           "openai_app_spans", "make_instrumentor"]


def recording_provider(service: str = "chat-app", version: str = "v1",
                       ) -> tuple[TracerProvider, InMemorySpanExporter]:
    """A provider whose finished spans land in the returned exporter."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create(
        {"service.name": service, "service.version": version,
         "deployment.environment.name": "test"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def genai_spans(outputs: Sequence[str], *, model: str = "gpt-test", service: str = "chat-app",
                service_version: str = "v1", question: str = "How do I reset my password?",
                ) -> list[ReadableSpan]:
    """One ``chat`` span per output, in the GenAI semantic conventions'
    attributes (``gen_ai.input.messages`` / ``gen_ai.output.messages``)."""
    provider, exporter = recording_provider(service, service_version)
    tracer = provider.get_tracer("guardrail-tests")
    for text in outputs:
        attributes = {
            "gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai",
            "gen_ai.request.model": model, "gen_ai.response.model": model,
            "gen_ai.input.messages": json.dumps(
                [{"role": "user", "parts": [{"type": "text", "content": question}]}]),
            "gen_ai.output.messages": json.dumps(
                [{"role": "assistant", "parts": [{"type": "text", "content": text}],
                  "finish_reason": "stop"}])}
        with tracer.start_as_current_span(f"chat {model}", kind=SpanKind.CLIENT,
                                          attributes=attributes):
            pass
    provider.shutdown()
    return list(exporter.get_finished_spans())


def chat_span(attributes: dict[str, Any], *, events: Sequence[tuple[str, dict[str, Any]]] = (),
              service: str = "chat-app", version: str = "v1") -> ReadableSpan:
    """One client span with exactly these attributes and events: content of
    whatever shape a test needs, recorded and encoded by the real SDK."""
    provider, exporter = recording_provider(service, version)
    with provider.get_tracer("guardrail-tests").start_as_current_span(
            "chat", kind=SpanKind.CLIENT, attributes=attributes) as span:
        for name, event_attributes in events:
            span.add_event(name, event_attributes)
    provider.shutdown()
    return exporter.get_finished_spans()[0]


def http_span(service: str = "chat-app", version: str = "v1") -> ReadableSpan:
    """A span that is no GenAI span: an HTTP client call."""
    provider, exporter = recording_provider(service, version)
    with provider.get_tracer("guardrail-tests").start_as_current_span(
            "GET", kind=SpanKind.CLIENT,
            attributes={"http.request.method": "GET", "url.full": "http://example.test/x",
                        "http.response.status_code": 200}):
        pass
    provider.shutdown()
    return exporter.get_finished_spans()[0]


def otlp_proto(spans: Sequence[ReadableSpan]) -> bytes:
    """The spans as one ``ExportTraceServiceRequest`` in protobuf."""
    return encode_spans(list(spans)).SerializeToString()


def otlp_json_dict(spans: Sequence[ReadableSpan]) -> dict[str, Any]:
    """The spans as OTLP/JSON the way the Collector writes it: protobuf's JSON
    mapping (lowerCamelCase, int64 values as strings) with the span and link
    ids as hex instead of base64."""
    return _collector_json(encode_spans(list(spans)))


def otlp_json_of(record: bytes) -> bytes:
    """One protobuf ``ExportTraceServiceRequest`` (a Kafka record) as the same
    request in OTLP/JSON, as :func:`otlp_json` writes it."""
    request = ExportTraceServiceRequest.FromString(record)
    return json.dumps(_collector_json(request)).encode()


def _collector_json(request: Any) -> dict[str, Any]:
    data = MessageToDict(request)

    def hexed(obj: dict[str, Any], keys: tuple[str, ...]) -> None:
        for key in keys:
            if obj.get(key):
                obj[key] = base64.b64decode(obj[key]).hex()

    for resource_spans in data.get("resourceSpans", []):
        for scope_spans in resource_spans.get("scopeSpans", []):
            for span in scope_spans.get("spans", []):
                hexed(span, ("traceId", "spanId", "parentSpanId"))
                for link in span.get("links", ()):
                    hexed(link, ("traceId", "spanId"))
    return data


def otlp_json(spans: Sequence[ReadableSpan]) -> bytes:
    """:func:`otlp_json_dict` as the bytes of one Kafka record."""
    return json.dumps(otlp_json_dict(spans)).encode()


def chunks(items: Sequence[Any], size: int) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield list(items[start:start + size])


def span_ids(span: ReadableSpan) -> tuple[str, str]:
    """``(trace_id, span_id)`` as lowercase hex, as results carry them."""
    context = span.get_span_context()
    return f"{context.trace_id:032x}", f"{context.span_id:016x}"


def openai_app_spans(api_base: str, prompts: Sequence[str], *, instrumentation: str = "official",
                     service: str = "chat-app", version: str = "v1",
                     model: str = "app-model") -> list[ReadableSpan]:
    """Spans of a real app: the OpenAI client, instrumented (``official``:
    opentelemetry-instrumentation-openai-v2 with content on the span;
    ``openinference``; ``openllmetry``), asks ``api_base`` each prompt."""
    import openai

    provider, exporter = recording_provider(service, version)
    instrumentor = make_instrumentor(instrumentation)
    instrumentor.instrument(tracer_provider=provider)
    try:
        client = openai.OpenAI(base_url=api_base, api_key="sk-app-test", max_retries=0)
        for prompt in prompts:
            client.chat.completions.create(
                model=model, messages=[{"role": "system", "content": "You are a shop assistant."},
                                       {"role": "user", "content": prompt}])
    finally:
        instrumentor.uninstrument()
    provider.shutdown()
    return list(exporter.get_finished_spans())


def make_instrumentor(name: str) -> Any:
    """A new OpenAI instrumentor: ``official``, ``openinference`` or ``openllmetry``."""
    if name == "official":
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

        return OpenAIInstrumentor()
    if name == "openinference":
        from openinference.instrumentation.openai import OpenAIInstrumentor as OIInstrumentor

        return OIInstrumentor()
    if name == "openllmetry":
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor as TLInstrumentor

        return TLInstrumentor()
    raise ValueError(f"unknown instrumentation {name!r}")
