"""What the spans of Langfuse, MLflow Tracing and the Vercel AI SDK say about an
agent run: each names its spans' kinds itself, and keeps a tool's call and an
agent's request and answer in attributes of its own (Google ADK's spans are OTel
GenAI ones, read by :mod:`.spans`). Pure functions over unwrapped attributes::

    framework_kind({"ai.operationId": "ai.toolCall"})             # 'tool'
    framework_kind({"langfuse.observation.type": "agent"})         # 'agent'
    framework_signal({"mlflow.spanType": "TOOL"})                  # True: a run
    framework_tool({"ai.toolCall.name": "get_weather", "ai.toolCall.args": '{"city": "Lisbon"}',
                    "ai.toolCall.result": '"Sunny"'})
    # ('get_weather', '{"city": "Lisbon"}', 'Sunny', None)

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

import orjson

from ...formats.otlp_content import ContentReading
from ...formats.otlp_frameworks import VERCEL_MODEL_CALLS, request_messages
from ...judging.steps import as_text, json_value, plain_text

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
    """A payload as text: a JSON string's text, an object or array as compact JSON."""
    if isinstance(value, str) and value.startswith('"'):
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError:
            pass
    data = json_value(value)
    return as_text(value if data is None else data)


def framework_tool(attrs: Attrs) -> tuple[str | None, str | None, str | None, str | None] | None:
    """``(name, arguments, result, call id)`` of a tool span of these clients (the
    name None where the span's own name is the tool's); None for another span."""
    if attrs.get("ai.operationId") == "ai.toolCall":
        result = _text(attrs.get("ai.toolCall.result"))
        return (as_text(attrs.get("ai.toolCall.name")), _text(attrs.get("ai.toolCall.args")),
                plain_text(result) if result else None, as_text(attrs.get("ai.toolCall.id")))
    for inputs, outputs in _PAYLOADS:
        if inputs in attrs or outputs in attrs:
            result = _text(attrs.get(outputs))
            return None, _text(attrs.get(inputs)), plain_text(result) if result else None, None
    return None


def framework_request(attrs: Attrs) -> list[Any] | None:
    """An agent span's request as messages (its system prompt first, where the span
    names one); None for a span of none of these clients."""
    names = ("ai.prompt", *(inputs for inputs, _ in _PAYLOADS))
    name = next((n for n in names if n in attrs), None)
    if name is None:
        return None
    parsed = json_value(attrs[name])
    if parsed is None:
        parsed = _text(attrs[name]) or ""
    system = parsed.get("system") if isinstance(parsed, Mapping) else None
    messages = request_messages(parsed, name, ContentReading())
    if not messages and parsed:
        messages = [{"role": "user", "content": as_text(parsed)}]  # whatever the app passed
    return ([{"role": "system", "content": system}] if isinstance(system, str) else []) + messages


def framework_answer(attrs: Attrs) -> str | None:
    """An agent span's final answer as text, from these clients' attributes."""
    text = attrs.get("ai.response.text")
    if isinstance(text, str) and text:
        return text
    for _, outputs in _PAYLOADS:
        if outputs in attrs:
            return _text(attrs.get(outputs))
    return None
