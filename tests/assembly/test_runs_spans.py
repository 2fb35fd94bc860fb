"""Agent runs' spans read from OTLP: each convention's agent, tool and LLM spans, the
run signal, invalid ids, and the compact form the run assembly keeps.

Spans are recorded by the real OpenTelemetry SDK with the attributes (and events) each
instrumentation writes (read from their sources: strands-agents 1.62, google-adk 2.13,
pydantic-ai 2.68, openinference-instrumentation-openai-agents 2.6, OpenLLMetry 0.62),
encoded by the real OTLP encoder and decoded as the worker decodes a record.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import orjson
import pytest
from opentelemetry.sdk.trace import TracerProvider

from support.otel_traffic import openai_app_spans, otlp_proto, recording_provider

from guardrail.formats.otlp import _attributes, request_from_bytes
from guardrail.local.rule_judge import ContentReply, JudgeServer
from guardrail.assembly.runs import AGENT_SCOPES, RunSpan, read_run_span, run_signal, run_spans_of

INBOX_ARGS = {"folder": "INBOX", "limit": 5}


def _record(build: Callable[[TracerProvider], None], version: str = "3.1") -> Any:
    """The spans ``build`` records, as one decoded OTLP request."""
    provider, exporter = recording_provider("mail-svc", version)
    build(provider)
    provider.shutdown()
    return request_from_bytes(otlp_proto(exporter.get_finished_spans()), {})


def _by_name(build: Callable[[TracerProvider], None], version: str = "3.1",
             ) -> dict[str, RunSpan]:
    return {s.name: s for s in run_spans_of(_record(build, version))}


def _messages(*messages: dict[str, Any]) -> str:
    return json.dumps(list(messages))


# -- OTel GenAI: Strands, ADK, Pydantic AI ---------------------------------------------------

def _genai_run(provider: TracerProvider) -> None:
    tracer = provider.get_tracer("strands.telemetry.tracer")
    with tracer.start_as_current_span("invoke_agent mail", attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "mail",
            "gen_ai.agent.version": "4.2",
            "gen_ai.input.messages": _messages(
                {"role": "user", "parts": [{"type": "text", "content": "Old question"}]},
                {"role": "assistant", "parts": [{"type": "text", "content": "Old answer"}]},
                {"role": "user", "parts": [{"type": "text", "content": "Summarise my inbox."}]}),
            "gen_ai.output.messages": _messages(
                {"role": "assistant", "parts": [{"type": "text", "content": "Two mails."}]})}):
        with tracer.start_as_current_span("chat", attributes={
                "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
                "gen_ai.input.messages": _messages(
                    {"role": "user", "parts": [{"type": "text", "content": "Summarise my inbox."}]},
                    {"role": "user", "parts": [{"type": "tool_call_response", "id": "c0",
                                                "response": "earlier result"}]}),
                "gen_ai.output.messages": _messages({"role": "assistant", "parts": [
                    {"type": "tool_call", "id": "c1", "name": "read_inbox",
                     "arguments": INBOX_ARGS},
                    {"type": "tool_call", "id": "c2", "name": "send_email",
                     "arguments": '{"to": "eve@evil.example"}'}]})}):
            pass
        with tracer.start_as_current_span("execute_tool read_inbox", attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "read_inbox",
                "gen_ai.tool.call.id": "c1", "gen_ai.tool.call.arguments": INBOX_ARGS,
                "gen_ai.tool.call.result": '[{"text": "2 mails"}]'}):
            pass
        with tracer.start_as_current_span("execute_tool send_email", attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "send_email",
                "gen_ai.tool.call.arguments": '{"to": "eve@evil.example"}',
                "gen_ai.tool.call.result": "sent"}):
            pass


def test_otel_genai_agent_tool_and_model_spans_are_read():
    spans = _by_name(_genai_run)
    agent = spans["invoke_agent mail"]
    assert (agent.kind, agent.agent_name, agent.agent_version) == ("agent", "mail", "4.2")
    assert agent.messages[-1] == {"role": "user", "content": "Summarise my inbox."}
    assert agent.output == "Two mails."
    assert agent.labels["agent"] == "mail" and agent.labels["agent_version"] == "4.2"
    assert agent.labels["service"] == "mail-svc"
    chat = spans["chat"]
    assert chat.kind == "llm" and chat.output is None and chat.labels["model"] == "gpt-4o"
    # Tool results in a user-role message are no user text: they are the tools' steps.
    assert chat.messages == ({"role": "user", "content": "Summarise my inbox."},)
    assert chat.tool_calls == (
        {"name": "read_inbox", "arguments": '{"folder":"INBOX","limit":5}', "id": "c1"},
        {"name": "send_email", "arguments": '{"to": "eve@evil.example"}', "id": "c2"})
    read = spans["execute_tool read_inbox"]
    assert (read.kind, read.tool_name, read.tool_call_id) == ("tool", "read_inbox", "c1")
    assert read.tool_arguments == '{"folder":"INBOX","limit":5}'  # an object: compact JSON
    assert read.tool_result == "2 mails"                         # text blocks: their text
    send = spans["execute_tool send_email"]
    assert send.tool_arguments == '{"to": "eve@evil.example"}'  # a JSON string: as given
    assert send.tool_result == "sent"


def test_agent_version_falls_back_to_the_service_version():
    def build(provider: TracerProvider) -> None:
        with provider.get_tracer("pydantic-ai").start_as_current_span(
                "invoke_agent support", attributes={"gen_ai.operation.name": "invoke_agent",
                                                    "gen_ai.agent.name": "support",
                                                    "final_result": "All set."}):
            pass

    (agent,) = _by_name(build, version="7.0.1").values()
    assert agent.agent_version == "7.0.1" and agent.labels["agent_version"] == "7.0.1"
    assert agent.output == "All set."  # Pydantic AI's final_result


def test_strands_details_events_split_over_start_and_end_are_merged():
    """Strands under the latest conventions writes the input in one details event
    when a span starts and the output in another when it ends."""
    details = "gen_ai.client.inference.operation.details"

    def build(provider: TracerProvider) -> None:
        tracer = provider.get_tracer("strands.telemetry.tracer")
        with tracer.start_as_current_span("chat", attributes={
                "gen_ai.operation.name": "chat"}) as span:
            span.add_event(details, {"gen_ai.input.messages": _messages(
                {"role": "user", "parts": [{"type": "text", "content": "Find flights"}]})})
            span.add_event(details, {"gen_ai.output.messages": _messages(
                {"role": "assistant", "parts": [{"type": "text", "content": "Booked."}]})})
        with tracer.start_as_current_span("execute_tool search", attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search"}) as span:
            span.add_event(details, {"gen_ai.input.messages": _messages({"role": "tool", "parts": [
                {"type": "tool_call", "name": "search", "arguments": {"to": "OSL"}}]})})
            span.add_event(details, {"gen_ai.output.messages": _messages({"role": "tool", "parts": [
                {"type": "tool_call_response", "response": [{"text": "3 flights"}]}]})})

    spans = _by_name(build)
    assert spans["chat"].messages == ({"role": "user", "content": "Find flights"},)
    assert spans["chat"].output == "Booked."
    assert spans["execute_tool search"].tool_arguments == '{"to":"OSL"}'
    assert spans["execute_tool search"].tool_result == "3 flights"


def test_strands_legacy_events_are_read():
    def build(provider: TracerProvider) -> None:
        tracer = provider.get_tracer("strands.telemetry.tracer")
        with tracer.start_as_current_span("chat", attributes={
                "gen_ai.operation.name": "chat", "gen_ai.system": "strands-agents"}) as span:
            span.add_event("gen_ai.user.message", {"content": '[{"text": "Wipe the disk"}]'})
            span.add_event("gen_ai.choice", {"message": json.dumps([
                {"text": "Running it."},
                {"toolUse": {"toolUseId": "t1", "name": "run_shell",
                             "input": {"cmd": "rm -rf /"}}}])})
        with tracer.start_as_current_span("execute_tool run_shell", attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "run_shell",
                "gen_ai.tool.call.id": "t1"}) as span:
            span.add_event("gen_ai.tool.message", {"role": "tool", "id": "t1",
                                                   "content": '{"cmd": "rm -rf /"}'})
            span.add_event("gen_ai.choice", {"message": '[{"text": "removed"}]', "id": "t1"})

        with tracer.start_as_current_span("invoke_agent ops", attributes={
                "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "ops"}) as span:
            span.add_event("gen_ai.user.message", {"content": '[{"text": "Wipe the disk"}]'})
            span.add_event("gen_ai.choice", {"message": "Disk wiped.", "finish_reason": "end"})
        with tracer.start_as_current_span("chat empty", attributes={
                "gen_ai.operation.name": "chat", "gen_ai.system": "strands-agents"}) as span:
            span.add_event("gen_ai.choice", {"message": "[]", "finish_reason": "end_turn"})

    spans = _by_name(build)
    agent = spans["invoke_agent ops"]
    assert agent.messages == ({"role": "user", "content": "Wipe the disk"},)
    assert agent.output == "Disk wiped."  # the agent's answer: plain text, not blocks
    assert spans["chat empty"].output is None  # no blocks: no answer (not the text "[]")
    chat = spans["chat"]
    assert chat.messages == ({"role": "user", "content": "Wipe the disk"},)
    assert chat.output == "Running it."
    assert chat.tool_calls == ({"name": "run_shell", "arguments": '{"cmd":"rm -rf /"}',
                                "id": "t1"},)
    shell = spans["execute_tool run_shell"]
    assert (shell.tool_arguments, shell.tool_result) == ('{"cmd": "rm -rf /"}', "removed")


def test_adk_and_pydantic_ai_older_attributes_are_read():
    def build(provider: TracerProvider) -> None:
        with provider.get_tracer("gcp.vertex.agent").start_as_current_span(
                "execute_tool grant_role", attributes={
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "grant_role",
                    "gcp.vertex.agent.tool_call_args": '{"user": "eve", "role": "admin"}',
                    "gcp.vertex.agent.tool_response": '{"result": "granted"}'}):
            pass
        with provider.get_tracer("pydantic-ai").start_as_current_span(
                "running tool", attributes={
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup",
                    "tool_arguments": '{"q": "x"}', "tool_response": "found"}):
            pass

    spans = _by_name(build)
    grant = spans["execute_tool grant_role"]
    assert grant.tool_arguments == '{"user": "eve", "role": "admin"}'
    assert grant.tool_result == '{"result": "granted"}'
    assert (spans["running tool"].tool_arguments, spans["running tool"].tool_result) == \
        ('{"q": "x"}', "found")


# -- OpenInference (OpenAI Agents SDK) -------------------------------------------------------

def test_openinference_agent_tool_llm_and_chain_spans_are_read():
    def build(provider: TracerProvider) -> None:
        tracer = provider.get_tracer("openinference.instrumentation.openai_agents")
        with tracer.start_as_current_span("Agent workflow", attributes={
                "openinference.span.kind": "AGENT"}):
            with tracer.start_as_current_span("Mail agent", attributes={
                    "openinference.span.kind": "AGENT", "agent.name": "Mail agent",
                    "graph.node.id": "Mail agent"}):
                with tracer.start_as_current_span("response", attributes={
                        "openinference.span.kind": "LLM", "llm.model_name": "gpt-4.1",
                        "llm.input_messages.0.message.role": "system",
                        "llm.input_messages.0.message.content": "Be helpful.",
                        "llm.input_messages.1.message.role": "user",
                        "llm.input_messages.1.message.content": "Pay the invoice.",
                        "llm.output_messages.0.message.role": "assistant",
                        "llm.output_messages.0.message.tool_calls.0.tool_call.id": "call_9",
                        "llm.output_messages.0.message.tool_calls.0.tool_call.function.name":
                            "transfer_funds",
                        "llm.output_messages.0.message.tool_calls.0.tool_call.function."
                        "arguments": '{"amount": 9000, "to": "IBAN-EVE"}'}):
                    pass
                with tracer.start_as_current_span("transfer_funds", attributes={
                        "openinference.span.kind": "TOOL", "tool.name": "transfer_funds",
                        "input.value": '{"amount": 9000, "to": "IBAN-EVE"}',
                        "input.mime_type": "application/json", "output.value": "ok: sent"}):
                    pass
                with tracer.start_as_current_span("guard", attributes={
                        "openinference.span.kind": "CHAIN"}):
                    pass

    spans = _by_name(build)
    assert spans["Agent workflow"].kind == "agent" and spans["Agent workflow"].agent_name is None
    mail = spans["Mail agent"]
    assert (mail.kind, mail.agent_name, mail.labels["agent"]) == ("agent", "Mail agent",
                                                                   "Mail agent")
    response = spans["response"]
    assert response.kind == "llm" and response.labels["model"] == "gpt-4.1"
    assert response.messages == ({"role": "system", "content": "Be helpful."},
                                 {"role": "user", "content": "Pay the invoice."})
    assert response.tool_calls == ({"name": "transfer_funds",
                                    "arguments": '{"amount": 9000, "to": "IBAN-EVE"}',
                                    "id": "call_9"},)
    tool = spans["transfer_funds"]
    assert (tool.kind, tool.tool_name, tool.tool_arguments, tool.tool_result) == \
        ("tool", "transfer_funds", '{"amount": 9000, "to": "IBAN-EVE"}', "ok: sent")
    assert spans["guard"].kind == "other"
    assert tool.parent_id == mail.span_id and mail.parent_id == spans["Agent workflow"].span_id


# -- OpenLLMetry -----------------------------------------------------------------------------

def test_openllmetry_workflow_agent_tool_task_and_llm_spans_are_read():
    def build(provider: TracerProvider) -> None:
        tracer = provider.get_tracer("traceloop.tracer")
        with tracer.start_as_current_span("mail_flow.workflow", attributes={
                "traceloop.span.kind": "workflow", "traceloop.entity.name": "mail_flow",
                "traceloop.entity.input": json.dumps({"args": ["Tidy my inbox"], "kwargs": {}}),
                "traceloop.entity.output": json.dumps("Inbox tidied.")}):
            with tracer.start_as_current_span("sorter.agent", attributes={
                    "traceloop.span.kind": "agent", "traceloop.entity.name": "sorter"}):
                with tracer.start_as_current_span("openai.chat", attributes={
                        "llm.request.type": "chat", "gen_ai.system": "openai",
                        "gen_ai.request.model": "gpt-4o-mini",
                        "gen_ai.prompt.0.role": "user", "gen_ai.prompt.0.content": "Tidy",
                        "gen_ai.completion.0.role": "assistant",
                        "gen_ai.completion.0.tool_calls.0.id": "t7",
                        "gen_ai.completion.0.tool_calls.0.name": "delete_mail",
                        "gen_ai.completion.0.tool_calls.0.arguments": '{"ids": [1, 2]}'}):
                    pass
                with tracer.start_as_current_span("delete_mail.tool", attributes={
                        "traceloop.span.kind": "tool", "traceloop.entity.name": "delete_mail",
                        "traceloop.entity.input": json.dumps({"args": [],
                                                              "kwargs": {"ids": [1, 2]}}),
                        "traceloop.entity.output": json.dumps({"deleted": 2})}):
                    pass
                with tracer.start_as_current_span("search.tool", attributes={
                        "traceloop.span.kind": "tool", "traceloop.entity.name": "search",
                        "traceloop.entity.input": json.dumps({"inputs": {"query": "spam"},
                                                              "tags": []}),
                        "traceloop.entity.output": json.dumps({"outputs": "no spam"})}):
                    pass
                with tracer.start_as_current_span("parse.task", attributes={
                        "traceloop.span.kind": "task", "traceloop.entity.name": "parse"}):
                    pass

    spans = _by_name(build)
    flow = spans["mail_flow.workflow"]
    assert (flow.kind, flow.agent_name) == ("agent", "mail_flow")
    assert flow.messages == ({"role": "user", "content": "Tidy my inbox"},)
    assert flow.output == "Inbox tidied."
    assert (spans["sorter.agent"].kind, spans["sorter.agent"].agent_name) == ("agent", "sorter")
    chat = spans["openai.chat"]
    assert chat.kind == "llm" and chat.tool_calls == (
        {"name": "delete_mail", "arguments": '{"ids": [1, 2]}', "id": "t7"},)
    delete = spans["delete_mail.tool"]
    assert (delete.tool_name, delete.tool_arguments, delete.tool_result) == \
        ("delete_mail", '{"ids":[1,2]}', '{"deleted": 2}')  # unwrapped kwargs; output as given
    search = spans["search.tool"]
    assert (search.tool_arguments, search.tool_result) == ('{"query":"spam"}', "no spam")
    assert spans["parse.task"].kind == "other"


# -- the run signal --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def plain_chat_span() -> Iterator[tuple[dict[str, Any], str]]:
    """A chat span of the real opentelemetry-instrumentation-openai-v2 (no agent)."""
    with JudgeServer() as server:
        server.script(ContentReply("Hello!"))
        spans = openai_app_spans(server.api_base, ["hi"])
    request = request_from_bytes(otlp_proto(spans), {})
    (scope_spans,) = request.resource_spans[0].scope_spans
    yield _attributes(scope_spans.spans[0].attributes), scope_spans.scope.name


def test_a_plain_chat_span_is_not_bound_to_a_run(plain_chat_span):
    attrs, scope = plain_chat_span
    assert attrs["gen_ai.operation.name"] == "chat"
    assert run_signal(attrs, scope) is False
    assert run_signal({"http.request.method": "GET"}, "opentelemetry.instrumentation.httpx") \
        is False


@pytest.mark.parametrize("attrs", [
    {"gen_ai.operation.name": "invoke_agent"}, {"gen_ai.operation.name": "create_agent"},
    {"gen_ai.operation.name": "invoke_workflow"}, {"gen_ai.operation.name": "execute_tool"},
    {"openinference.span.kind": "AGENT"}, {"openinference.span.kind": "TOOL"},
    {"traceloop.span.kind": "agent"}, {"traceloop.span.kind": "workflow"},
    {"traceloop.span.kind": "tool"},
    {"gen_ai.operation.name": "chat", "gen_ai.agent.name": "mail"},
    {"gen_ai.operation.name": "chat", "gen_ai.agent.id": "a-1"},
    {"openinference.span.kind": "LLM", "agent.name": "mail"},
    {"llm.request.type": "chat", "traceloop.workflow.name": "flow"},
])
def test_agent_and_tool_spans_and_agent_attributes_signal_a_run(attrs):
    assert run_signal(attrs, "some.library") is True


@pytest.mark.parametrize("attrs", [
    {"gen_ai.operation.name": "chat"}, {"openinference.span.kind": "LLM"},
    {"openinference.span.kind": "CHAIN"}, {"traceloop.span.kind": "task"},
    {"llm.request.type": "chat"}, {"gen_ai.agent.name": ""},
])
def test_model_calls_alone_do_not_signal_a_run(attrs):
    assert run_signal(attrs, "opentelemetry.instrumentation.openai.v1") is False


def test_agent_framework_scopes_signal_a_run():
    chat = {"gen_ai.operation.name": "chat"}
    for scope in ("strands.telemetry.tracer", "gcp.vertex.agent", "pydantic-ai",
                  "openinference.instrumentation.openai_agents",
                  "opentelemetry.instrumentation.openai_agents",
                  "openinference.instrumentation.crewai._event_listener"):
        assert run_signal(chat, scope) is True, scope
    for scope in ("strands", "pydantic-ai-extras", "opentelemetry.util.genai.handler",
                  "openinference.instrumentation.openai", ""):
        assert run_signal(chat, scope) is False, scope
    assert "openinference.instrumentation.openai_agents" in AGENT_SCOPES


# -- ids and the compact form ----------------------------------------------------------------

def test_spans_with_invalid_ids_are_none_and_an_invalid_parent_is_no_parent():
    request = _record(_genai_run)
    resource = _attributes(request.resource_spans[0].resource.attributes)
    span = request.resource_spans[0].scope_spans[0].spans[0]
    attrs = _attributes(span.attributes)
    assert read_run_span(span, attrs, resource, "x") is not None
    span.parent_span_id = b"\x00" * 8
    assert read_run_span(span, attrs, resource, "x").parent_id is None
    span.parent_span_id = b"\x01\x02"
    assert read_run_span(span, attrs, resource, "x").parent_id is None
    span.span_id = b"\x00" * 8
    assert read_run_span(span, attrs, resource, "x") is None
    span.span_id, span.trace_id = b"\x01" * 8, b"\x01" * 15
    assert read_run_span(span, attrs, resource, "x") is None


def test_run_spans_round_trip_through_bytes():
    spans = list(run_spans_of(_record(_genai_run)))
    assert len(spans) == 4
    for span in spans:
        raw = span.to_bytes()
        assert RunSpan.from_bytes(raw) == span
        assert span.size == len(raw)
    assert b" " not in spans[0].to_bytes().split(b'"name"')[0]  # compact
    bare = RunSpan(spans[0].trace_id, spans[0].span_id, None, "x", "llm", 1, 2)
    assert set(orjson.loads(bare.to_bytes())) == {  # fields at their defaults left out
        "trace_id", "span_id", "name", "kind", "start_ns", "end_ns"}


@pytest.mark.parametrize("raw, problem", [
    (b"\x00garbage", "not JSON"),
    (b"[1, 2]", "expected a JSON object"),
    (b'{"trace_id": "ab"}', "missing"),
    (b'{"trace_id": "zz", "span_id": "0011223344556677", "name": "s", "kind": "llm",'
     b' "start_ns": 1, "end_ns": 2}', "trace_id must be 32 lowercase hex"),
    (b'{"trace_id": "00112233445566778899aabbccddeeff", "span_id": "0011223344556677",'
     b' "name": "s", "kind": "robot", "start_ns": 1, "end_ns": 2}', "kind must be one of"),
    (b'{"trace_id": "00112233445566778899aabbccddeeff", "span_id": "0011223344556677",'
     b' "name": "s", "kind": "llm", "start_ns": "1", "end_ns": 2}', "start_ns must be"),
    (b'{"trace_id": "00112233445566778899aabbccddeeff", "span_id": "0011223344556677",'
     b' "name": "s", "kind": "llm", "start_ns": 1, "end_ns": 2, "messages": [3]}',
     "messages must hold objects"),
    (b'{"trace_id": "00112233445566778899aabbccddeeff", "span_id": "0011223344556677",'
     b' "name": "s", "kind": "llm", "start_ns": 1, "end_ns": 2, "colour": "red"}',
     "unknown fields"),
])
def test_bad_run_span_bytes_raise_a_clear_value_error(raw, problem):
    with pytest.raises(ValueError, match=f"run span: .*{problem}"):
        RunSpan.from_bytes(raw)
