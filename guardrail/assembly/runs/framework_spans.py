"""What the spans of Langfuse, MLflow Tracing and the Vercel AI SDK say about an
agent run: each names its spans' kinds itself, and keeps a tool's call and an
agent's request and answer in attributes of its own (Google ADK's spans are OTel
GenAI ones, read by :mod:`.spans`). Pure functions over unwrapped attributes::

    framework_kind({"ai.operationId": "ai.toolCall"})             # 'tool'
    framework_kind({"langfuse.observation.type": "agent"})         # 'agent'
    framework_signal({"mlflow.spanType": "TOOL"})                  # True: a run
    framework_tool({"ai.operationId": "ai.toolCall", "ai.toolCall.name": "get_weather",
                    "ai.toolCall.args": '{"city": "Lisbon"}', "ai.toolCall.result": '"Sunny"'},
                   "ai.toolCall")
    # ToolCall(name='get_weather', arguments='{"city":"Lisbon"}', result='Sunny', id=None)

Where (read from langfuse 5.0, mlflow-tracing 3.17 and the ``ai`` package 6.0):

- Langfuse: ``langfuse.observation.type`` ``agent`` / ``tool`` / ``generation``
  (else ``other``: spans, chains, retrievers …); a tool's or an agent's
  ``langfuse.observation.input`` / ``.output`` hold what the app passed, as JSON.
- MLflow: ``mlflow.spanType`` ``AGENT`` / ``TOOL`` / ``CHAT_MODEL`` / ``LLM``;
  ``mlflow.spanInputs`` / ``mlflow.spanOutputs``.
- Vercel AI SDK: ``ai.generateText`` / ``ai.streamText`` (the call around a
  run's steps: its ``ai.prompt`` and ``ai.response.text``) are the agent,
  ``ai.toolCall`` spans the tools (``ai.toolCall.name`` / ``.args`` / ``.result``
  / ``.id``), ``doGenerate`` / ``doStream`` the model calls. A trace is a run when
  a tool was called, or a model call asked for one (``ai.response.toolCalls``):
  a plain ``generateText`` stays one judged model call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from ...formats.otlp_content import ContentReading
from ...formats.otlp_frameworks import VERCEL_MODEL_CALLS, request_messages
from ...judging.steps import as_text, json_value, plain_text
from .span_reading import ToolCall, text_turns, tool_name, unwrap_entity

__all__ = ["framework_kind", "framework_signal", "framework_tool", "framework_request",
           "framework_answer"]

Attrs = Mapping[str, Any]
Kind = Literal["agent", "tool", "llm", "other"]
_VERCEL_AGENTS = frozenset({"ai.generateText", "ai.streamText"})
_LANGFUSE_KINDS: dict[str, Kind] = {"agent": "agent", "tool": "tool", "generation": "llm"}
_MLFLOW_KINDS: dict[str, Kind] = {"AGENT": "agent", "TOOL": "tool", "CHAT_MODEL": "llm",
                                  "LLM": "llm"}
#: (input, output) attributes of each client's tool and agent spans.
_PAYLOADS = (("langfuse.observation.input", "langfuse.observation.output"),
             ("mlflow.spanInputs", "mlflow.spanOutputs"))


def framework_kind(attrs: Attrs) -> Kind | None:
    """The span's kind as its client names it; None for a span of none of them."""
    if "langfuse.observation.type" in attrs:
        return _LANGFUSE_KINDS.get(str(attrs["langfuse.observation.type"]).lower(), "other")
    if "mlflow.spanType" in attrs:
        return _MLFLOW_KINDS.get(str(attrs["mlflow.spanType"]).upper(), "other")
    operation = attrs.get("ai.operationId")
    if operation is not None:
        if operation in _VERCEL_AGENTS:
            return "agent"
        if operation == "ai.toolCall":
            return "tool"
        return "llm" if operation in VERCEL_MODEL_CALLS else "other"
    return None


def framework_signal(attrs: Attrs) -> bool:
    """The span says its trace is an agent run: an agent or a tool span, or a
    Vercel AI model call that asked for tools."""
    kind = framework_kind(attrs)
    if kind in ("agent", "tool") and attrs.get("ai.operationId") not in _VERCEL_AGENTS:
        return True
    return kind == "llm" and bool(attrs.get("ai.response.toolCalls"))


def _text(value: Any) -> str | None:
    """A payload as text: a JSON string's text, an object or array as compact JSON,
    the arguments of a decorated function (Langfuse's ``{"args", "kwargs"}``) unwrapped."""
    text = unwrap_entity(value)
    return plain_text(text) if text else None


def framework_tool(attrs: Attrs, span_name: str) -> ToolCall | None:
    """A tool span's call, as these clients write it; None for another span (the
    tool's name is the span's where the client names it by its function)."""
    if attrs.get("ai.operationId") == "ai.toolCall":
        return ToolCall(as_text(attrs.get("ai.toolCall.name")) or tool_name(attrs, span_name),
                        _text(attrs.get("ai.toolCall.args")),
                        _text(attrs.get("ai.toolCall.result")),
                        as_text(attrs.get("ai.toolCall.id")))
    for inputs, outputs in _PAYLOADS:
        if inputs in attrs or outputs in attrs:
            return ToolCall(tool_name(attrs, span_name), _text(attrs.get(inputs)),
                            _text(attrs.get(outputs)), None)
    return None


def framework_request(attrs: Attrs) -> list[dict[str, str]] | None:
    """An agent span's request as turns (its system prompt first, where the span
    names one); None for a span of none of these clients."""
    names = ("ai.prompt", *(inputs for inputs, _ in _PAYLOADS))
    name = next((n for n in names if n in attrs), None)
    if name is None:
        return None
    parsed = json_value(attrs[name])
    if not isinstance(parsed, Mapping) or set(parsed) <= {"args", "kwargs"}:
        parsed = _text(attrs[name]) or ""  # text, or a decorated function's one argument
    system = parsed.get("system") if isinstance(parsed, Mapping) else None
    messages = request_messages(parsed, name, ContentReading())
    if not messages and parsed:
        messages = [{"role": "user", "content": as_text(parsed)}]  # whatever the app passed
    return text_turns(([{"role": "system", "content": system}] if isinstance(system, str)
                       else []) + messages)


def framework_answer(attrs: Attrs) -> str | None:
    """An agent span's final answer as text, from these clients' attributes."""
    text = attrs.get("ai.response.text")
    if isinstance(text, str) and text:
        return text
    for _, outputs in _PAYLOADS:
        if outputs in attrs:
            return _text(attrs.get(outputs))
    return None
