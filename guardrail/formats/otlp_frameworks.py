"""Where tracing clients of their own keep the conversation: Langfuse, MLflow
Tracing, the Vercel AI SDK and Google ADK's legacy ``call_llm`` spans.

The lower half of :mod:`.otlp_conventions` for these four: pure functions over a
span's unwrapped attributes, each returning the :class:`~.otlp_content.Exchange`
of a span of its client (None when the span is not one, or its content is absent
or hidden)::

    attrs = {"langfuse.observation.type": "generation",
             "langfuse.observation.input": '[{"role": "user", "content": "Hi"}]',
             "langfuse.observation.output": '{"role": "assistant", "content": "Hello!"}'}
    langfuse_exchange(attrs, ContentReading()).output     # 'Hello!'
    framework_genai(attrs)                                # True: a generation
    framework_genai({"langfuse.observation.type": "span"})   # False: never judged

What each reads (from the clients' sources: langfuse 5.0, mlflow-tracing 3.17,
the ``ai`` package 6.0, google-adk 2.13):

- Langfuse (Python SDK v3+, JS ``@langfuse/otel``): generations only
  (``langfuse.observation.type: generation``); ``langfuse.observation.input`` /
  ``.output`` hold JSON: the request's messages (or ``{"messages"}``), the answer's
  message (or a chat response, or text). Other observation types hold whatever the
  app passed: they are no model call.
- MLflow Tracing: ``mlflow.spanType`` ``CHAT_MODEL`` / ``LLM``; ``mlflow.spanInputs``
  (an OpenAI-style request, or text) and ``mlflow.spanOutputs`` (a chat or Responses
  API response, or text). MLflow writes *every* attribute JSON-encoded (a string as
  ``'"CHAT_MODEL"'``): :func:`plain_attributes` decodes those strings first.
- Vercel AI SDK: the model calls ``ai.generateText.doGenerate`` / ``ai.streamText.doStream``
  (``ai.operationId``), not the ``ai.generateText`` / ``ai.streamText`` spans around
  them, which repeat the last step's answer; ``ai.prompt.messages``, ``ai.response.text``,
  ``ai.response.toolCalls``.
- Google ADK's legacy spans (schema 1, every ADK 1.x; ``call_llm``):
  ``gcp.vertex.agent.llm_request`` / ``llm_response`` (Gemini ``contents`` with
  ``parts``); ``"{}"`` is content capture turned off. ADK's schema 2 spans are OTel GenAI.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import orjson

from ..judging.steps import message_calls
from .otlp_content import REDACTED, ContentReading, Exchange, exchange_of

__all__ = ["FRAMEWORK_READERS", "framework_genai", "plain_attributes", "langfuse_exchange",
           "mlflow_exchange", "vercel_exchange", "adk_exchange", "answer_messages",
           "request_messages", "openai_response_message", "VERCEL_MODEL_CALLS", "RESPONSE_SHAPE"]

Attrs = Mapping[str, Any]
#: The Vercel AI SDK's spans of one model call each (judged), by ``ai.operationId``.
VERCEL_MODEL_CALLS = frozenset({"ai.generateText.doGenerate", "ai.streamText.doStream"})
_MLFLOW_MODEL_TYPES = frozenset({"CHAT_MODEL", "LLM"})
_ADK_REQUEST, _ADK_RESPONSE = "gcp.vertex.agent.llm_request", "gcp.vertex.agent.llm_response"
RESPONSE_SHAPE = "an OpenAI chat or Responses API response (choices, output_text or output)"
_ANSWER_SHAPE = f"a message, text or {RESPONSE_SHAPE}"
_REQUEST_SHAPE = "messages, a request with messages, or text"


def _word(value: Any) -> str:
    return value.strip('"') if isinstance(value, str) else ""


def framework_genai(attrs: Attrs) -> bool | None:
    """Whether a span of one of these clients called a model; None when the span
    carries none of their markers (the other conventions decide)."""
    if "langfuse.observation.type" in attrs:
        return _word(attrs["langfuse.observation.type"]).lower() == "generation"
    if "mlflow.spanType" in attrs:
        return _word(attrs["mlflow.spanType"]).upper() in _MLFLOW_MODEL_TYPES
    if "ai.operationId" in attrs:
        return attrs["ai.operationId"] in VERCEL_MODEL_CALLS
    return None


def plain_attributes(attrs: dict[str, Any]) -> dict[str, Any]:
    """MLflow's attributes with its JSON-encoded strings decoded (``'"chat-7"'`` →
    ``'chat-7'``); any other span's attributes as they are (the same dict)."""
    if "mlflow.spanType" not in attrs and "mlflow.traceRequestId" not in attrs:
        return attrs
    plain = dict(attrs)
    for key, value in attrs.items():
        if isinstance(value, str) and len(value) >= 2 and value[0] == value[-1] == '"':
            try:
                plain[key] = orjson.loads(value)
            except orjson.JSONDecodeError:
                pass
    return plain


# -- payloads: JSON of several shapes, or plain text ----------------------------------------

def _payload(reading: ContentReading, attribute: str, value: Any) -> Any:
    """A JSON payload parsed, or the text itself when it is no JSON (plain text is
    allowed; a JSON string is its text); None when absent or hidden, and None (noted)
    for an object or array that cannot be read: broken, or nested too deep."""
    if not isinstance(value, str) or not value.strip() or value == REDACTED:
        return None
    first = value.lstrip()[:1]
    if first == '"':
        try:
            parsed = orjson.loads(value)
        except orjson.JSONDecodeError:
            return value  # text that merely starts with a quote
        return None if parsed == REDACTED else parsed
    if first not in ("{", "["):
        return value
    return reading.json(attribute, value, (dict, list), "a JSON object or array")


def openai_response_message(response: Mapping[str, Any]) -> dict[str, Any] | None:
    """The answer of an OpenAI chat (``choices[0].message``) or Responses API
    (``output_text``, message items of ``output``) response; None for another shape."""
    choices = response.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], Mapping):
        choice = choices[0]
        message = choice.get("message")
        return dict(message) if isinstance(message, Mapping) else {"content": choice.get("text")}
    if isinstance(response.get("output_text"), str):
        return {"role": "assistant", "content": response["output_text"]}
    output = response.get("output")
    if isinstance(output, list):
        items = [o for o in output if isinstance(o, Mapping) and o.get("type") == "message"]
        if items:
            return {"role": "assistant", "content": items[-1].get("content")}
    return None


def _is_message(value: Any) -> bool:
    return isinstance(value, Mapping) and any(k in value for k in ("content", "tool_calls",
                                                                   "parts"))


def answer_messages(parsed: Any, attribute: str, reading: ContentReading) -> list[Any] | None:
    """The answer a payload holds as messages: text, a message, a list of messages,
    a chat response, or LangChain's ``generations``; None (noted) for another shape."""
    if isinstance(parsed, str):
        return [{"role": "assistant", "content": parsed}]
    if isinstance(parsed, list) and parsed and all(map(_is_message, parsed)):
        return list(parsed)
    if isinstance(parsed, Mapping):
        if _is_message(parsed):
            return [dict(parsed)]
        message = openai_response_message(parsed)
        if message is not None:
            return [message]
        generations = parsed.get("generations")
        if isinstance(generations, list) and generations and isinstance(generations[0], list) \
                and generations[0] and isinstance(generations[0][0], Mapping):
            return [{"role": "assistant", "content": generations[0][0].get("text")}]
    reading.note(attribute, f"wrong shape: expected {_ANSWER_SHAPE}")
    return None


def request_messages(parsed: Any, attribute: str, reading: ContentReading) -> list[Any]:
    """The conversation a request payload holds: text (one user message), messages,
    a request with ``messages``, or one with a ``prompt`` / ``input`` text."""
    if isinstance(parsed, str):
        return [{"role": "user", "content": parsed}] if parsed else []
    if isinstance(parsed, list) and all(map(_is_message, parsed)):
        return list(parsed)
    if isinstance(parsed, Mapping):
        if isinstance(parsed.get("messages"), list):
            return request_messages(parsed["messages"], attribute, reading)
        for key in ("prompt", "input", "query", "question"):
            if isinstance(parsed.get(key), (str, list)):
                return request_messages(parsed[key], attribute, reading)
        if _is_message(parsed):
            return [dict(parsed)]
    if parsed is not None:
        reading.note(attribute, f"wrong shape: expected {_REQUEST_SHAPE}")
    return []


def _payload_exchange(attrs: Attrs, reading: ContentReading, inputs_key: str,
                      outputs_key: str) -> Exchange | None:
    output = _payload(reading, outputs_key, attrs.get(outputs_key))
    if output is None or output == "":
        return None
    outputs = answer_messages(output, outputs_key, reading)
    inputs = request_messages(_payload(reading, inputs_key, attrs.get(inputs_key)),
                              inputs_key, reading)
    return None if outputs is None else _with_calls(exchange_of(outputs, inputs), outputs)


def _with_calls(exchange: Exchange, outputs: list[Any]) -> Exchange:
    answer = next((m for m in reversed(outputs) if isinstance(m, Mapping)), None)
    calls = message_calls(answer) if answer is not None else []
    if not calls:
        return exchange
    found = tuple({"name": n, "arguments": a, **({"id": i} if i else {})} for n, a, i in calls)
    return replace(exchange, calls=found)


# -- the four clients -----------------------------------------------------------------------

def langfuse_exchange(attrs: Attrs, reading: ContentReading) -> Exchange | None:
    """A Langfuse generation's exchange (other observation types: None)."""
    if _word(attrs.get("langfuse.observation.type")).lower() != "generation":
        return None
    return _payload_exchange(attrs, reading, "langfuse.observation.input",
                             "langfuse.observation.output")


def mlflow_exchange(attrs: Attrs, reading: ContentReading) -> Exchange | None:
    """An MLflow ``CHAT_MODEL`` / ``LLM`` span's exchange."""
    if _word(attrs.get("mlflow.spanType")).upper() not in _MLFLOW_MODEL_TYPES:
        return None
    return _payload_exchange(attrs, reading, "mlflow.spanInputs", "mlflow.spanOutputs")


def vercel_exchange(attrs: Attrs, reading: ContentReading) -> Exchange | None:
    """A Vercel AI SDK model call's exchange: ``ai.response.text`` (plain text) or
    the tool calls of ``ai.response.toolCalls``, after ``ai.prompt.messages``."""
    if attrs.get("ai.operationId") not in VERCEL_MODEL_CALLS:
        return None
    text = attrs.get("ai.response.text")
    listed = reading.json("ai.response.toolCalls", attrs.get("ai.response.toolCalls"), list,
                          "an array of tool calls")
    calls = tuple({"name": c["toolName"], "arguments": _text(c.get("input", c.get("args"))),
                   **({"id": str(c["toolCallId"])} if c.get("toolCallId") else {})}
                  for c in listed or () if isinstance(c, Mapping)
                  and isinstance(c.get("toolName"), str))
    if not (isinstance(text, str) and text and text != REDACTED) and not calls:
        return None
    inputs = reading.messages("ai.prompt.messages", attrs.get("ai.prompt.messages")) or []
    exchange = exchange_of([{"role": "assistant", "content": text or ""}], inputs)
    return replace(exchange, tool_calls=not exchange.output and bool(calls), calls=calls)


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return "" if value is None else orjson.dumps(value).decode()


def adk_exchange(attrs: Attrs, reading: ContentReading) -> Exchange | None:
    """A Google ADK ``call_llm`` span's exchange (``"{}"``: capture was off)."""
    response = reading.json(_ADK_RESPONSE, attrs.get(_ADK_RESPONSE), dict, "an LlmResponse")
    if not response:
        return None
    content = response.get("content")
    if not isinstance(content, Mapping):
        if "error_code" not in response and "error_message" not in response:
            reading.note(_ADK_RESPONSE, 'wrong shape: expected "content" with "parts"')
        return None
    parts = [p for p in content.get("parts") or () if isinstance(p, Mapping)]
    calls = tuple({"name": call["name"], "arguments": _text(call.get("args")),
                   **({"id": str(call["id"])} if call.get("id") else {})}
                  for p in parts if isinstance(call := p.get("function_call"), Mapping)
                  and isinstance(call.get("name"), str))
    request = reading.json(_ADK_REQUEST, attrs.get(_ADK_REQUEST), dict, "an LlmRequest") or {}
    config = request.get("config") if isinstance(request.get("config"), Mapping) else {}
    system = config.get("system_instruction")
    inputs = [{"role": "system", "content": system} if isinstance(system, str)
              else {**system, "role": "system"} if isinstance(system, Mapping) else None,
              *(c for c in request.get("contents") or () if isinstance(c, Mapping))]
    exchange = exchange_of([{"role": "assistant", "parts": parts}], [m for m in inputs if m])
    return replace(exchange, tool_calls=not exchange.output and bool(calls), calls=calls)


#: ``(convention name, reader)`` in the order they are tried, after OTel GenAI,
#: OpenInference and OpenLLMetry's attributes (see :mod:`.otlp_conventions`).
FRAMEWORK_READERS = (("langfuse", langfuse_exchange), ("mlflow", mlflow_exchange),
                     ("vercel_ai", vercel_exchange), ("google_adk", adk_exchange))
