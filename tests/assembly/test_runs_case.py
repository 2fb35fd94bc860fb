"""An agent run as one case: named by its root span, its request, final answer,
conversation, trajectory, metadata and ``run`` block; and which span is the root."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from opentelemetry import trace

from support.otel_traffic import otlp_proto, recording_provider

from guardrail.formats.otlp import request_from_bytes
from guardrail.assembly.runs import RunSpan, root_span, run_case, run_spans_of

OI = "openinference.instrumentation.openai_agents"


def _run(build: Callable[[trace.Tracer], None], scope: str, version: str = "5.0",
         ) -> list[RunSpan]:
    provider, exporter = recording_provider("billing", version)
    build(provider.get_tracer(scope))
    provider.shutdown()
    return list(run_spans_of(request_from_bytes(otlp_proto(exporter.get_finished_spans()), {})))


def _response(tracer: trace.Tracer, model: str, *, text: str = "", call: tuple = (),
              inputs: tuple = ()) -> None:
    attributes = {"openinference.span.kind": "LLM", "llm.model_name": model,
                  "llm.output_messages.0.message.role": "assistant"}
    for index, (role, content) in enumerate(inputs):
        attributes[f"llm.input_messages.{index}.message.role"] = role
        attributes[f"llm.input_messages.{index}.message.content"] = content
    if text:
        attributes["llm.output_messages.0.message.content"] = text
    if call:
        prefix = "llm.output_messages.0.message.tool_calls.0.tool_call."
        attributes[prefix + "function.name"], attributes[prefix + "function.arguments"] = call
    with tracer.start_as_current_span("response", attributes=attributes):
        pass


def _tool(tracer: trace.Tracer, name: str, args: str, result: str) -> None:
    with tracer.start_as_current_span(name, attributes={
            "openinference.span.kind": "TOOL", "tool.name": name, "input.value": args,
            "output.value": result}):
        pass


def _openai_agents_run(tracer: trace.Tracer) -> None:
    """The shape openinference-instrumentation-openai-agents gives a run: a root AGENT
    span named after the trace, an AGENT span per agent, LLM and TOOL spans under it."""
    with tracer.start_as_current_span("Agent workflow",
                                      attributes={"openinference.span.kind": "AGENT"}):
        with tracer.start_as_current_span("Billing agent", attributes={
                "openinference.span.kind": "AGENT", "agent.name": "Billing agent"}):
            _response(tracer, "gpt-4.1", call=("pay_invoice", '{"invoice": "INV-7"}'), inputs=(
                ("system", "You pay invoices."), ("user", "Hi"), ("assistant", "Hello!"),
                ("user", "Pay the invoice from Bob.")))
            _tool(tracer, "pay_invoice", '{"invoice": "INV-7"}', "paid 120 EUR")
            _response(tracer, "gpt-4.1-mini", text="Checking the balance.",
                      call=("get_balance", "{}"))
            _tool(tracer, "get_balance", "{}", "880 EUR")
            _response(tracer, "gpt-4.1", text="Paid 120 EUR to Bob.")


def test_an_openai_agents_run_becomes_one_case_on_its_root_span():
    spans = _run(_openai_agents_run, OI)
    root = next(s for s in spans if s.name == "Agent workflow")
    case = run_case(spans, status="complete", max_chars=4000)
    assert case["case_id"] == f"{root.trace_id}:{root.span_id}"
    assert case["trace"] == {"trace_id": root.trace_id, "span_id": root.span_id}
    assert case["input"] == "Pay the invoice from Bob."  # the last user turn, not history
    assert case["output"] == "Paid 120 EUR to Bob."
    assert case["messages"] == [{"role": "user", "content": "Pay the invoice from Bob."},
                                {"role": "assistant", "content": "Checking the balance."}]
    assert case["timestamp"] == root.end_ns // 1_000_000
    assert case["metadata"] == {"model": "gpt-4.1", "model_version": "5.0",
                                "service": "billing", "environment": "test",
                                "agent": "Billing agent", "agent_version": "5.0"}
    assert case["run"] == {"agent": "Billing agent", "agent_version": "5.0", "spans": 7,
                           "tool_calls": 2, "models": ["gpt-4.1", "gpt-4.1-mini"],
                           "status": "complete"}
    assert case["trajectory"] == """\
USER REQUEST: Pay the invoice from Bob.
[1] agent Agent workflow
  [2] agent Billing agent
    [3] model: (calls tool pay_invoice)
    [4] tool call pay_invoice({"invoice": "INV-7"})
    <<<TOOL RESULT 4: pay_invoice>>>
paid 120 EUR
    <<<END TOOL RESULT 4>>>
    [5] model: Checking the balance. (calls tool get_balance)
    [6] tool call get_balance({})
    <<<TOOL RESULT 6: get_balance>>>
880 EUR
    <<<END TOOL RESULT 6>>>
    [7] model: (final answer below)
FINAL ANSWER: Paid 120 EUR to Bob."""


def test_the_root_agent_span_gives_the_request_and_the_final_answer():
    def build(tracer: trace.Tracer) -> None:
        with tracer.start_as_current_span("invoke_agent support", attributes={
                "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support",
                "gen_ai.agent.version": "v4",
                "gen_ai.input.messages": json.dumps([
                    {"role": "user", "parts": [{"type": "text", "content": "Earlier"}]},
                    {"role": "user", "parts": [{"type": "text", "content": "Refund order 7"}]}]),
                "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [
                    {"type": "text", "content": "Refunded."}]}])}):
            with tracer.start_as_current_span("chat", attributes={
                    "gen_ai.operation.name": "chat", "gen_ai.request.model": "claude-x",
                    "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [
                        {"type": "text", "content": "Refunded order 7 (internal)."}]}])}):
                pass

    case = run_case(_run(build, "pydantic-ai"), status="idle")
    assert (case["input"], case["output"]) == ("Refund order 7", "Refunded.")
    assert case["metadata"]["agent_version"] == "v4" and case["metadata"]["model"] == "claude-x"
    assert case["run"]["status"] == "idle" and case["run"]["tool_calls"] == 0
    assert case["messages"] == [{"role": "user", "content": "Refund order 7"},
                                {"role": "assistant", "content": "Refunded order 7 (internal)."}]


def _span(span_id: str, parent: str | None, kind: str, start: int) -> RunSpan:
    return RunSpan(trace_id="ab" * 16, span_id=span_id * 16, parent_id=parent and parent * 16,
                   name=f"s{span_id}", kind=kind, start_ns=start, end_ns=start + 5)


def test_the_root_is_the_parentless_span_else_the_first_agent_entered_from_elsewhere():
    parentless = _span("1", None, "other", 50)
    assert root_span([_span("2", "1", "agent", 10), parentless]) is parentless
    foreign_tool = _span("3", "9", "tool", 1)
    later_agent, first_agent = _span("4", "9", "agent", 30), _span("5", "8", "agent", 20)
    inner_agent = _span("6", "5", "agent", 5)  # earliest, but its parent is in the run
    assert root_span([foreign_tool, later_agent, first_agent, inner_agent]) is first_agent
    assert root_span([_span("7", "9", "llm", 9), foreign_tool]) is foreign_tool
    assert root_span([]) is None


def test_a_run_without_its_root_is_named_by_its_first_agent_span():
    spans = [s for s in _run(_openai_agents_run, OI) if s.name != "Agent workflow"]
    agent = next(s for s in spans if s.name == "Billing agent")
    case = run_case(spans, status="truncated")
    assert case["case_id"] == f"{agent.trace_id}:{agent.span_id}"
    assert case["run"]["spans"] == 6 and case["run"]["status"] == "truncated"
    assert case["trajectory"].split("\n")[1] == "[1] agent Billing agent"


def test_a_run_needs_spans():
    with pytest.raises(ValueError, match="at least one span"):
        run_case([], status="complete")
