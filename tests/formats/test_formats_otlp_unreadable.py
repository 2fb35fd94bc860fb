"""GenAI spans whose content is there but cannot be read: counted as
``unreadable_content`` and named (attribute, what is wrong), never mistaken for
content capture being off (``no_content``, whose advice stays its own).

The spans are recorded by the OpenTelemetry SDK and encoded by the real OTLP
encoder (:mod:`support.otel_traffic`); only their content is made wrong.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from support.otel_traffic import chat_span, genai_spans, otlp_json, otlp_proto

from guardrail.formats.otlp import CAPTURE_HINT, OtlpDecoder
from guardrail.formats.otlp_content import MAX_DEPTH, ContentReading, nested_deeper_than
from guardrail.stream.envelope import Source
from guardrail.stream.processing import MessageJudge, RawMessage

ANSWER = "Paris is the capital of France."
CHAT = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-4o-mini"}
OPENINFERENCE = {"openinference.span.kind": "LLM", "llm.model_name": "gpt-4o-mini",
                 "output.mime_type": "application/json"}
DETAILS = "gen_ai.client.inference.operation.details"
DEEP_BRACKETS = "[" * 5000 + "]" * 5000  # past orjson's 1,024 levels


def _messages(text: str = ANSWER, role: str = "assistant") -> str:
    return json.dumps([{"role": role, "parts": [{"type": "text", "content": text}]}])


def _nested(depth: int, inner: Any) -> Any:
    for _ in range(depth):
        inner = [inner]
    return inner


def _deep_tool_result(depth: int) -> str:
    """An answer whose one part is a tool result nested ``depth`` levels: JSON
    orjson reads, and Python's repr of it raises RecursionError."""
    response = "[" * depth + '"x"' + "]" * depth  # as text: json.dumps would recurse
    return ('[{"role": "assistant", "parts": [{"type": "tool_call_response", "id": "c1", '
            f'"response": {response}}}]}}]')


# (span attributes, span events, what the notice must say)
UNREADABLE = {
    "not-json": ({**CHAT, "gen_ai.output.messages": ANSWER}, [],
                 "gen_ai.output.messages: not JSON"),
    "object-not-array": ({**CHAT, "gen_ai.output.messages": json.dumps(
        {"role": "assistant", "parts": [{"type": "text", "content": ANSWER}]})}, [],
        "gen_ai.output.messages: wrong shape: expected an array of messages, got an object"),
    "strings-not-messages": ({**CHAT, "gen_ai.output.messages": json.dumps([ANSWER])}, [],
                             "wrong shape: expected message objects, item 1 is a string"),
    "message-without-parts": ({**CHAT, "gen_ai.output.messages": json.dumps(
        [{"role": "assistant", "text": ANSWER}])}, [],
        'wrong shape: expected "parts" or "content" in message 1'),
    "5000-deep": ({**CHAT, "gen_ai.output.messages": DEEP_BRACKETS}, [],
                  f"gen_ai.output.messages: nested too deep (more than {MAX_DEPTH} levels)"),
    "deep-tool-result": ({**CHAT, "gen_ai.output.messages": _deep_tool_result(1000)}, [],
                         "gen_ai.output.messages: nested too deep"),
    "openinference-not-json": ({**OPENINFERENCE, "output.value": ANSWER}, [],
                               "output.value: not JSON"),
    "openinference-not-a-response": ({**OPENINFERENCE, "output.value": '{"answer": "Paris"}'},
                                     [], "output.value: wrong shape: expected an OpenAI chat"),
    "details-event": ({"gen_ai.operation.name": "chat"},
                      [(DETAILS, {"gen_ai.output.messages": "Paris"})],
                      f"gen_ai.output.messages (event {DETAILS}): not JSON"),
    "azure-event-body": ({"gen_ai.system": "az.ai.inference"},
                         [("gen_ai.choice", {"gen_ai.event.content": "{'message': 'Paris'}"})],
                         "gen_ai.event.content (event gen_ai.choice): not JSON"),
    "completion-event-5000-deep": ({"gen_ai.system": "openai"},
                                   [("gen_ai.content.completion",
                                     {"gen_ai.completion": DEEP_BRACKETS})],
                                   "gen_ai.completion (event gen_ai.content.completion): "
                                   "nested too deep"),
}


@pytest.mark.parametrize("encode", [otlp_proto, otlp_json], ids=["proto", "json"])
@pytest.mark.parametrize("name", list(UNREADABLE))
def test_unreadable_content_is_counted_and_named_not_called_missing(name, encode):
    attributes, events, problem = UNREADABLE[name]
    span = chat_span(attributes, events=events)

    decoded = OtlpDecoder().decode(encode([span]), {})

    assert decoded.cases == []
    assert decoded.skipped == {"unreadable_content": 1}
    (notice,) = decoded.notices
    assert notice.key == "unreadable_content:chat-app"
    assert "'chat-app'" in notice.text and problem in notice.text, notice.text
    assert CAPTURE_HINT not in notice.text and "capture" not in notice.text


def test_missing_and_unreadable_content_are_told_apart_once_per_service():
    spans = [chat_span({**CHAT, "gen_ai.output.messages": "Paris"}, service="broken-app"),
             chat_span({**CHAT, "gen_ai.output.messages": DEEP_BRACKETS}, service="broken-app"),
             chat_span(CHAT, service="quiet-app"),  # capture off: no content attributes
             *genai_spans([ANSWER], service="good-app")]

    decoded = OtlpDecoder().decode(otlp_proto(spans), {})

    assert [c["output"] for c in decoded.cases] == [ANSWER]
    assert decoded.skipped == {"unreadable_content": 2, "no_content": 1}
    notices = {n.key: n.text for n in decoded.notices}
    assert set(notices) == {"unreadable_content:broken-app", "no_content:quiet-app"}
    assert "gen_ai.output.messages: not JSON" in notices["unreadable_content:broken-app"]
    assert CAPTURE_HINT in notices["no_content:quiet-app"]  # missing keeps its advice
    assert "unreadable" not in notices["no_content:quiet-app"]


def test_an_answer_read_beside_unreadable_input_is_judged_and_the_gap_named():
    span = chat_span({**CHAT, "gen_ai.input.messages": "What is the capital?",
                      "gen_ai.output.messages": _messages()})

    decoded = OtlpDecoder().decode(otlp_proto([span]), {})

    (case,) = decoded.cases
    assert case["output"] == ANSWER and "messages" not in case
    assert decoded.skipped == {}
    (notice,) = decoded.notices
    assert notice.key == "judged_without_unreadable:chat-app"
    assert "judged without" in notice.text
    assert "gen_ai.input.messages: not JSON" in notice.text


def test_deep_nesting_everywhere_neither_crashes_nor_takes_long():
    deep = {**CHAT, "gen_ai.output.messages": DEEP_BRACKETS,
            "gen_ai.input.messages": DEEP_BRACKETS,
            "gen_ai.system_instructions": DEEP_BRACKETS}
    # Just inside orjson's limit: parsed, then refused before anything recurses.
    inside = {**CHAT, "gen_ai.output.messages": _deep_tool_result(1020)}
    spans = [chat_span(deep) for _ in range(50)] + [chat_span(inside) for _ in range(50)]
    raw = otlp_proto(spans)

    started = time.perf_counter()
    decoded = OtlpDecoder().decode(raw, {})
    elapsed = time.perf_counter() - started

    assert decoded.skipped == {"unreadable_content": 100}
    assert elapsed < 5, elapsed  # milliseconds here; generous for a loaded machine


def test_nesting_is_measured_without_recursion():
    assert nested_deeper_than(_nested(100_000, 1), 64)  # far past the recursion limit
    assert not nested_deeper_than(_nested(64, {"a": "text"}), 65)
    assert nested_deeper_than(_nested(64, {"a": "text"}), 64)
    reading = ContentReading()
    assert reading.messages("gen_ai.output.messages", orjson.dumps(
        _nested(MAX_DEPTH + 1, "x"))) is None
    assert [str(p) for p in reading.problems] == [
        f"gen_ai.output.messages: nested too deep (more than {MAX_DEPTH} levels)"]


# -- the worker's counts and log, and `guardrail inputs check` ---------------------------

async def test_the_worker_counts_unreadable_content_and_logs_it_once_per_service(
        make_settings, evaluators, caplog):
    settings = make_settings(input_format="otlp")
    judge = MessageJudge.from_settings(evaluators(settings), settings)
    record = otlp_proto([chat_span({**CHAT, "gen_ai.output.messages": "Paris"}),
                         chat_span({**CHAT, "gen_ai.output.messages": DEEP_BRACKETS}),
                         chat_span(CHAT, service="quiet-app")])
    batch = [RawMessage(record, Source("in", 0, offset)) for offset in range(3)]

    with caplog.at_level(logging.WARNING, logger="guardrail.worker"):
        outgoing = await judge.process(batch)

    assert not [o for o in outgoing if o.topic == settings.kafka.dlq_topic]
    metrics = judge.telemetry.render().decode()
    assert 'guardrail_messages_total{outcome="unreadable_content"} 6.0' in metrics
    assert 'guardrail_messages_total{outcome="no_content"} 3.0' in metrics
    unreadable = [r.getMessage() for r in caplog.records if "unreadable" in r.getMessage()]
    assert len(unreadable) == 1, caplog.text
    assert "'chat-app'" in unreadable[0] and "gen_ai.output.messages: not JSON" in unreadable[0]
    assert "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT" not in unreadable[0]
    assert caplog.text.count("quiet-app") == 1  # the missing content's own advice


def test_the_reference_names_the_outcome():
    from guardrail.reference.metrics import metric_families

    (messages,) = [f for f in metric_families() if f.name == "guardrail_messages"]
    assert "unreadable_content" in messages.help


def test_inputs_check_names_unreadable_content_apart_from_missing(tmp_path):
    path = tmp_path / "spans.jsonl"
    path.write_bytes(otlp_json([chat_span({**CHAT, "gen_ai.output.messages": "Paris"})])
                     + b"\n" + otlp_json([chat_span(CHAT)]) + b"\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GUARDRAIL_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"

    proc = subprocess.run(["guardrail", "inputs", "check", str(path), "--input-format", "otlp"],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)

    assert proc.returncode == 0, proc.stderr  # counted, nothing for the DLQ
    first, second = proc.stdout.split("line 2:")
    assert "line 1: 0 case(s); not judged: 1 unreadable_content" in first
    assert "gen_ai.output.messages: not JSON" in first and "CAPTURE" not in first
    assert "0 case(s); not judged: 1 no_content" in second
    assert "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT" in second
