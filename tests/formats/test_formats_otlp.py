"""The ``otlp`` input format on real spans and on hand-written OTLP/JSON.

The real spans come from the OpenAI Python client, instrumented by each of the
three GenAI instrumentations in turn, calling the stand-in server as the app's
model; they are recorded by an SDK ``TracerProvider`` and encoded with the real
OTLP encoder (protobuf), or turned into the OTLP/JSON the Collector writes.
"""

from __future__ import annotations

import base64
import contextlib
import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from support.otel_traffic import make_instrumentor, otlp_json_dict

from guardrail.formats.base import InputDecoder, UndecodableRecord
from guardrail.formats.otlp import OtlpDecoder
from guardrail.local.rule_judge import ContentReply, JudgeServer

ANSWER = "Paris is the capital of France."
SYSTEM, QUESTION = "Answer in one sentence.", "What is the capital of France?"
TRACE_HEX, SPAN_HEX = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
END_NS = 1_732_500_000_123_456_789


# -- real instrumentations -------------------------------------------------------------

@pytest.fixture(scope="module")
def model_server() -> Iterator[JudgeServer]:
    with JudgeServer() as server:
        yield server


@contextlib.contextmanager
def _instrumented(kind: str, provider: TracerProvider) -> Iterator[None]:
    """Instrument for one test only: instrumentors are process-wide singletons."""
    instrumentor = make_instrumentor(kind)
    instrumentor.instrument(tracer_provider=provider)
    try:
        yield
    finally:
        instrumentor.uninstrument()


def _app_spans(kind: str, server: JudgeServer, answer: str = ANSWER) -> list[Any]:
    """One chat call of an instrumented app, beside a plain HTTP client span."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create(
        {"service.name": "chat-app", "service.version": "1.4.2",
         "deployment.environment.name": "staging"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    server.script(ContentReply(answer))
    with _instrumented(kind, provider):
        client = openai.OpenAI(base_url=server.api_base, api_key="sk-test", max_retries=0)
        reply = client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "system", "content": SYSTEM},
                                           {"role": "user", "content": QUESTION}])
    assert reply.choices[0].message.content == answer
    with provider.get_tracer("app").start_as_current_span(
            "HTTP GET", kind=SpanKind.CLIENT,
            attributes={"http.request.method": "GET", "url.full": "https://example.com/"}):
        pass
    provider.shutdown()
    return list(exporter.get_finished_spans())


def _genai_span(spans: list[Any]) -> Any:
    (span,) = [s for s in spans if s.name != "HTTP GET"]
    return span


def _assert_case(case: dict[str, Any], span: Any, *, messages: bool = True) -> None:
    assert case["output"] == ANSWER
    if messages:
        assert case["messages"] == [{"role": "system", "content": SYSTEM},
                                    {"role": "user", "content": QUESTION}]
    trace_id = format(span.context.trace_id, "032x")
    span_id = format(span.context.span_id, "016x")
    assert case["case_id"] == f"{trace_id}:{span_id}"
    assert case["trace"] == {"trace_id": trace_id, "span_id": span_id}
    assert case["timestamp"] == span.end_time // 1_000_000
    assert case["metadata"]["model"] == "gpt-4o-mini"
    assert case["metadata"]["model_version"] == "1.4.2"
    assert case["metadata"]["service"] == "chat-app"
    assert case["metadata"]["environment"] == "staging"
    assert case["metadata"]["provider"] == "openai"


_CAPTURE_ON = {"official": {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "span_only"},
               "openinference": {}, "openllmetry": {"TRACELOOP_TRACE_CONTENT": "true"}}
_CAPTURE_OFF = {"official": {},  # unset: no content, the default
                "openinference": {"OPENINFERENCE_HIDE_OUTPUTS": "true",
                                  "OPENINFERENCE_HIDE_INPUTS": "true"},
                "openllmetry": {"TRACELOOP_TRACE_CONTENT": "false"}}
_CAPTURE_VARS = ("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
                 "OTEL_INSTRUMENTATION_GENAI_EMIT_EVENT", "OPENINFERENCE_HIDE_OUTPUTS",
                 "OPENINFERENCE_HIDE_INPUTS", "TRACELOOP_TRACE_CONTENT")


def _capture_env(monkeypatch: pytest.MonkeyPatch, values: dict[str, str]) -> None:
    for name in _CAPTURE_VARS:
        monkeypatch.delenv(name, raising=False)
    for name, value in values.items():
        monkeypatch.setenv(name, value)


@pytest.mark.parametrize("kind", ["official", "openinference", "openllmetry"])
def test_real_spans_as_otlp_proto(kind, model_server, monkeypatch):
    _capture_env(monkeypatch, _CAPTURE_ON[kind])
    spans = _app_spans(kind, model_server)
    raw = encode_spans(spans).SerializeToString()

    decoded = OtlpDecoder().decode(raw, {})

    assert len(decoded.cases) == 1, decoded  # the HTTP span is no case
    _assert_case(decoded.cases[0], _genai_span(spans))
    assert decoded.skipped == {} and decoded.notices == ()


@pytest.mark.parametrize("kind", ["official", "openinference", "openllmetry"])
def test_real_spans_as_otlp_json(kind, model_server, monkeypatch):
    _capture_env(monkeypatch, _CAPTURE_ON[kind])
    spans = _app_spans(kind, model_server)
    record = otlp_json_dict(spans)
    raw = json.dumps(record, indent=1).encode()

    from_bytes = OtlpDecoder().decode(b"\n  " + raw, {})
    from_file_line = OtlpDecoder().decode_json(record)

    assert from_bytes == from_file_line
    _assert_case(from_bytes.cases[0], _genai_span(spans))
    assert len(from_bytes.cases) == 1


@pytest.mark.parametrize("kind", ["official", "openinference", "openllmetry"])
def test_capture_off_counts_no_content_and_names_the_service(kind, model_server, monkeypatch):
    _capture_env(monkeypatch, _CAPTURE_OFF[kind])
    spans = _app_spans(kind, model_server)

    decoded = OtlpDecoder().decode(encode_spans(spans).SerializeToString(), {})

    assert decoded.cases == []
    assert decoded.skipped == {"no_content": 1}
    (notice,) = decoded.notices
    assert notice.key == "no_content:chat-app"
    assert "'chat-app'" in notice.text
    for setting in ("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=span_only",
                    "OPENINFERENCE_HIDE_OUTPUTS", "TRACELOOP_TRACE_CONTENT=true"):
        assert setting in notice.text


def test_official_event_only_capture_leaves_the_span_without_content(model_server, monkeypatch):
    # event_only writes the content as log records (the logs API), not on the span.
    _capture_env(monkeypatch, {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "event_only"})
    spans = _app_spans("official", model_server)

    decoded = OtlpDecoder().decode(encode_spans(spans).SerializeToString(), {})

    assert decoded.cases == [] and decoded.skipped == {"no_content": 1}


def test_labels_extend_and_override_the_defaults(model_server, monkeypatch):
    _capture_env(monkeypatch, _CAPTURE_ON["openinference"])
    spans = _app_spans("openinference", model_server)
    decoder = OtlpDecoder(labels={"model": ["llm.invocation_parameters", "llm.system"],
                                  "environment": ["no.such.attribute"],
                                  "tenant": ["service.name"]})

    metadata = decoder.decode(encode_spans(spans).SerializeToString(), {}).cases[0]["metadata"]

    assert metadata["model"] == '{"model": "gpt-4o-mini"}'  # the first name present wins
    assert "environment" not in metadata
    assert metadata["tenant"] == "chat-app"                  # a resource attribute
    assert metadata["service"] == "chat-app"                 # defaults stay


def test_decoder_meets_the_interface():
    decoder = OtlpDecoder()
    assert isinstance(decoder, InputDecoder)
    assert decoder.name == "otlp" and decoder.many_per_record is True


# -- hand-written OTLP/JSON ------------------------------------------------------------------

def _any(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, list):
        return {"arrayValue": {"values": [_any(v) for v in value]}}
    if isinstance(value, dict):
        return {"kvlistValue": {"values": _kvs(value)}}
    return {"stringValue": value}


def _kvs(attributes: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"key": key, "value": _any(value)} for key, value in attributes.items()]


def _span(attributes: dict[str, Any], events: list[tuple[str, dict]] = (), *,
          span_id: str = SPAN_HEX, **fields: Any) -> dict[str, Any]:
    span = {"traceId": TRACE_HEX, "spanId": span_id, "name": "chat gpt-4o-mini",
            "kind": 3, "startTimeUnixNano": str(END_NS - 10**9), "endTimeUnixNano": str(END_NS),
            "attributes": _kvs(attributes),
            "events": [{"name": name, "timeUnixNano": str(END_NS), "attributes": _kvs(attrs)}
                       for name, attrs in events]}
    span.update(fields)
    return span


def _export(*spans: dict[str, Any], service: str = "chat-app") -> dict[str, Any]:
    return {"resourceSpans": [{
        "resource": {"attributes": _kvs({"service.name": service, "service.version": "7"})},
        "scopeSpans": [{"scope": {"name": "handwritten"}, "spans": list(spans)}]}]}


def _messages(*messages: tuple[str, str]) -> str:
    return json.dumps([{"role": role, "parts": [{"type": "text", "content": text}]}
                       for role, text in messages])


SEMCONV = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai",
           "gen_ai.request.model": "gpt-4o", "gen_ai.response.model": "gpt-4o-2024-08-06",
           "gen_ai.input.messages": _messages(("user", QUESTION)),
           "gen_ai.output.messages": json.dumps([{
               "role": "assistant", "finish_reason": "stop",
               "parts": [{"type": "reasoning", "content": "The user asks..."},
                         {"type": "text", "content": ANSWER}]}])}


def _only_case(record: dict[str, Any], **decoder_args: Any) -> dict[str, Any]:
    decoded = OtlpDecoder(**decoder_args).decode_json(record)
    assert len(decoded.cases) == 1, decoded
    return decoded.cases[0]


def test_semconv_attributes_hex_ids_and_string_int64():
    case = _only_case(_export(_span(SEMCONV)))

    assert case == {
        "output": ANSWER, "messages": [{"role": "user", "content": QUESTION}],
        "case_id": f"{TRACE_HEX}:{SPAN_HEX}", "trace": {"trace_id": TRACE_HEX, "span_id": SPAN_HEX},
        "timestamp": END_NS // 1_000_000,
        "metadata": {"model": "gpt-4o-2024-08-06", "model_version": "7", "service": "chat-app",
                     "provider": "openai"}}


def test_system_instructions_come_first_as_a_system_message():
    attrs = dict(SEMCONV, **{"gen_ai.system_instructions": json.dumps(
        [{"type": "text", "content": SYSTEM}])})

    assert _only_case(_export(_span(attrs)))["messages"] == [
        {"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]


def test_enums_as_names_or_numbers_and_int64_as_numbers_decode_alike():
    by_number = _span(SEMCONV, kind=3, status={"code": 2})
    by_name = _span(SEMCONV, kind="SPAN_KIND_CLIENT", status={"code": "STATUS_CODE_ERROR"},
                    endTimeUnixNano=END_NS)

    assert _only_case(_export(by_number)) == _only_case(_export(by_name))


def test_unknown_fields_are_ignored_and_snake_case_is_read():
    span = _span(SEMCONV, futureField={"x": 1}, droppedAttributesCount=0)
    record = _export(span)
    record["resourceSpans"][0]["schemaUrl"] = "https://opentelemetry.io/schemas/1.30.0"
    record["resourceSpans"][0]["newThing"] = [1, 2]
    record["resource_spans"] = record.pop("resourceSpans")
    record["resource_spans"][0]["scope_spans"] = record["resource_spans"][0].pop("scopeSpans")
    span["trace_id"], span["span_id"] = span.pop("traceId"), span.pop("spanId")

    assert _only_case(record)["case_id"] == f"{TRACE_HEX}:{SPAN_HEX}"


def test_int_attributes_become_string_labels():
    attrs = dict(SEMCONV, **{"gen_ai.prompt.version": 12, "app.beta": True,
                             "app.tags": ["a", "b"]})
    case = _only_case(_export(_span(attrs)),
                      labels={"beta": ["app.beta"], "tags": ["app.tags"]})

    assert case["metadata"]["prompt_version"] == "12"
    assert case["metadata"]["beta"] == "true"
    assert "tags" not in case["metadata"]  # arrays are no label


def test_older_per_message_events_with_attributes_or_a_json_body():
    events = [
        ("gen_ai.system.message", {"gen_ai.system": "openai", "content": SYSTEM}),
        # The Azure SDKs' JSON body; the agents SDK nests the text as {"text": {"value"}}.
        ("gen_ai.user.message", {"gen_ai.event.content": json.dumps(
            {"content": {"text": {"value": QUESTION}}, "role": "user"})}),
        ("gen_ai.choice", {"index": 0, "finish_reason": "stop",
                           "message": {"role": "assistant", "content": "A first choice."}}),
        ("gen_ai.choice", {"gen_ai.event.content": json.dumps(
            {"index": 1, "finish_reason": "stop", "message": {"content": ANSWER}})}),
    ]
    case = _only_case(_export(_span({"gen_ai.system": "openai",
                                     "gen_ai.request.model": "gpt-4o"}, events)))

    assert case["output"] == ANSWER  # the last assistant output
    assert case["messages"] == [{"role": "system", "content": SYSTEM},
                                {"role": "user", "content": QUESTION}]
    assert case["metadata"]["model"] == "gpt-4o"
    assert case["metadata"]["provider"] == "openai"


def test_operation_details_event_with_messages_as_kvlist_arrays():
    details = {"gen_ai.operation.name": "chat",
               "gen_ai.input.messages": [{"role": "user",
                                          "parts": [{"type": "text", "content": QUESTION}]}],
               "gen_ai.output.messages": [{"role": "assistant", "finish_reason": "stop",
                                           "parts": [{"type": "text", "content": ANSWER}]}],
               "gen_ai.system_instructions": [{"type": "text", "content": SYSTEM}]}
    span = _span({"gen_ai.operation.name": "chat", "gen_ai.provider.name": "anthropic"},
                 [("gen_ai.client.inference.operation.details", details)])

    case = _only_case(_export(span))

    assert case["output"] == ANSWER
    assert case["messages"][0] == {"role": "system", "content": SYSTEM}


def test_openinference_output_value_json_without_output_messages():
    response = {"id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-4o-mini",
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": ANSWER}}]}
    request = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": [
        {"type": "text", "text": QUESTION}]}]}
    attrs = {"openinference.span.kind": "LLM", "llm.model_name": "gpt-4o-mini",
             "llm.provider": "openai", "input.value": json.dumps(request),
             "input.mime_type": "application/json", "output.value": json.dumps(response),
             "output.mime_type": "application/json"}

    case = _only_case(_export(_span(attrs)))

    assert case["output"] == ANSWER
    assert case["messages"] == [{"role": "user", "content": QUESTION}]
    assert case["metadata"]["model"] == "gpt-4o-mini"
    assert case["metadata"]["provider"] == "openai"


def test_openinference_content_parts_and_text_output_value():
    parts = {"openinference.span.kind": "LLM",
             "llm.output_messages.0.message.role": "assistant",
             "llm.output_messages.0.message.contents.0.message_content.type": "text",
             "llm.output_messages.0.message.contents.0.message_content.text": ANSWER}
    plain = {"openinference.span.kind": "LLM", "output.value": ANSWER,
             "output.mime_type": "text/plain"}

    assert _only_case(_export(_span(parts)))["output"] == ANSWER
    assert _only_case(_export(_span(plain)))["output"] == ANSWER


def test_openllmetry_indexed_attributes():
    attrs = {"llm.request.type": "chat", "gen_ai.system": "openai",
             "gen_ai.request.model": "gpt-4o", "gen_ai.prompt.0.role": "system",
             "gen_ai.prompt.0.content": SYSTEM, "gen_ai.prompt.1.role": "user",
             "gen_ai.prompt.1.content": json.dumps([{"type": "text", "text": QUESTION}]),
             "gen_ai.completion.0.role": "assistant", "gen_ai.completion.0.content": "[1, 2]"}

    case = _only_case(_export(_span(attrs)))

    assert case["output"] == "[1, 2]"  # an answer that looks like JSON stays text
    assert case["messages"] == [{"role": "system", "content": SYSTEM},
                                {"role": "user", "content": QUESTION}]


def test_tool_calls_only_are_counted_not_judged():
    calls = dict(SEMCONV, **{"gen_ai.output.messages": json.dumps([{
        "role": "assistant", "finish_reason": "tool_call",
        "parts": [{"type": "tool_call", "id": "c1", "name": "weather",
                   "arguments": {"city": "Paris"}}]}])})
    openinference = {"openinference.span.kind": "LLM",
                     "llm.output_messages.0.message.role": "assistant",
                     "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "f"}

    decoded = OtlpDecoder().decode_json(_export(_span(calls), _span(openinference,
                                                                    span_id="00f067aa0ba902b8")))

    assert decoded.cases == [] and decoded.skipped == {"tool_calls": 2}
    assert decoded.notices == ()


def test_hidden_or_empty_content_is_no_case():
    redacted = {"openinference.span.kind": "LLM", "output.value": "__REDACTED__"}
    empty = dict(SEMCONV, **{"gen_ai.output.messages": _messages(("assistant", "  "))})
    bare = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai"}

    decoded = OtlpDecoder().decode_json(_export(*(_span(a) for a in (redacted, empty, bare))))

    assert decoded.cases == [] and decoded.skipped == {"no_content": 3}
    assert [n.key for n in decoded.notices] == ["no_content:chat-app"]  # once per service


def test_spans_that_call_no_model_for_an_answer_are_not_genai():
    spans = [_span({"gen_ai.operation.name": "embeddings", "gen_ai.provider.name": "openai"}),
             _span({"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "weather"}),
             _span({"openinference.span.kind": "CHAIN", "output.value": "x"}),
             _span({"http.request.method": "GET"}, name="HTTP GET"),
             _span({"gen_ai.prompt.version": "3", "rpc.method": "Render"})]

    decoded = OtlpDecoder().decode_json(_export(*spans))

    assert decoded.cases == [] and decoded.skipped == {"no_genai_span": 1}


def test_genai_and_other_spans_in_one_record():
    other = _span({"http.request.method": "POST"}, span_id="1111111111111111", name="HTTP")
    decoded = OtlpDecoder().decode_json(_export(other, _span(SEMCONV)))

    assert [c["case_id"] for c in decoded.cases] == [f"{TRACE_HEX}:{SPAN_HEX}"]
    assert decoded.skipped == {}


def test_base64_ids_from_protobufs_own_json_mapping_are_accepted():
    span = _span(SEMCONV, traceId=base64.b64encode(bytes.fromhex(TRACE_HEX)).decode(),
                 spanId=base64.b64encode(bytes.fromhex(SPAN_HEX)).decode())

    assert _only_case(_export(span))["case_id"] == f"{TRACE_HEX}:{SPAN_HEX}"


def test_invalid_ids_give_no_case_id():
    case = _only_case(_export(_span(SEMCONV, traceId="0" * 32)))

    assert "case_id" not in case and "trace" not in case


# -- bytes: detection and refusals ----------------------------------------------------------

def _json_to_proto(record: dict[str, Any]) -> bytes:
    from guardrail.formats.otlp import request_from_json

    return request_from_json(record).SerializeToString()


def test_content_type_header_decides_when_set():
    record = _export(_span(SEMCONV))
    as_json, as_proto = json.dumps(record).encode(), _json_to_proto(record)
    decoder = OtlpDecoder()

    assert decoder.decode(as_json, {"Content-Type": b"application/json"}).cases
    assert decoder.decode(as_proto, {"content-type": b"application/x-protobuf"}).cases
    with pytest.raises(UndecodableRecord, match="^otlp: "):
        decoder.decode(as_json, {"content-type": b"application/x-protobuf"})
    with pytest.raises(UndecodableRecord, match="^otlp: value is not valid (UTF-8|JSON)"):
        decoder.decode(as_proto, {"content-type": b"application/json"})


def test_protobuf_that_starts_like_json_is_still_read():
    # 0x0a (field 1, length-delimited) then a length of 123 = b"\n{": sniffs as JSON.
    output = json.dumps([{"parts": [{"type": "text", "content": "Hi"}]}], separators=(",", ":"))
    for pad in range(40):
        record = {"resourceSpans": [{
            "resource": {"attributes": _kvs({"p": "x" * pad})},
            "scopeSpans": [{"spans": [{"traceId": TRACE_HEX, "spanId": SPAN_HEX,
                                       "attributes": _kvs({"gen_ai.output.messages": output})}]}],
        }]}
        raw = _json_to_proto(record)
        if raw.startswith(b"\n{"):
            break
    else:
        pytest.fail("no padding gave a first ResourceSpans of 123 bytes")

    assert OtlpDecoder().decode(raw, {}).cases[0]["output"] == "Hi"


@pytest.mark.parametrize("raw, reason", [
    (b"\xff\xfe garbage \x00\x01", "neither OTLP protobuf nor OTLP/JSON"),
    (b"hello world", "neither OTLP protobuf nor OTLP/JSON"),
    (b"\x10\x05", "no resourceSpans"),  # parses: an unknown field only
    (b"", "no resourceSpans"),
    (b'{"resourceSpans": [', "not valid JSON"),
    (b'{"resourceSpans": 5}', "not an OTLP/JSON trace export"),
    (b'{"foo": 1}', "no resourceSpans"),
    (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz-not-an-id"}]}]}]}',
     "traceId 'zz-not-an-id' is neither hex nor base64"),
    (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"startTimeUnixNano": "soon"}]}]}]}',
     "not an OTLP/JSON trace export"),
])
def test_broken_records_are_undecodable(raw, reason):
    with pytest.raises(UndecodableRecord, match="^otlp: ") as raised:
        OtlpDecoder().decode(raw, {})
    assert reason in str(raised.value)


@pytest.mark.parametrize("record", [[], "text", None, {"resourceSpans": [1]}])
def test_wrong_json_shapes_are_undecodable(record):
    with pytest.raises(UndecodableRecord, match="^otlp: "):
        OtlpDecoder().decode_json(record)


def test_decode_json_leaves_the_callers_record_unchanged():
    record = _export(_span(SEMCONV))
    before = json.dumps(record, sort_keys=True)

    OtlpDecoder().decode_json(record)

    assert json.dumps(record, sort_keys=True) == before


def test_corrupted_records_raise_nothing_but_undecodable():
    import random

    record = _export(_span(SEMCONV), _span({"openinference.span.kind": "LLM",
                                            "output.value": ANSWER}, span_id="1" * 16))
    clean = [_json_to_proto(record), json.dumps(record).encode()]
    rng = random.Random(7)
    outcomes = set()
    for _ in range(400):
        raw = bytearray(rng.choice(clean))
        for _ in range(rng.randint(1, 4)):
            raw[rng.randrange(len(raw))] = rng.randrange(256)
        try:
            OtlpDecoder().decode(bytes(raw), {})
            outcomes.add("decoded")
        except UndecodableRecord:
            outcomes.add("undecodable")

    assert outcomes == {"decoded", "undecodable"}
