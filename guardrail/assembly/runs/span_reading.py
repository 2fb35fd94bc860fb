"""What an agent run's spans hold besides a chat exchange, in the three conventions:
a tool span's call and result, the tool calls a model asked for, an agent's request
and answer. Pure functions over unwrapped attributes and :class:`SpanEvent` s::

    attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "read_inbox",
             "gen_ai.tool.call.arguments": {"folder": "INBOX"},
             "gen_ai.tool.call.result": '[{"text": "3 new mails"}]'}
    tool_call_of(attrs, [], "execute_tool read_inbox")
    # ToolCall(name='read_inbox', arguments='{"folder":"INBOX"}', result='3 new mails', id=None)

Where each convention keeps them (read from the instrumentations' sources):

- OTel GenAI (Strands, Google ADK, Pydantic AI, opentelemetry-instrumentation-openai-agents):
  ``gen_ai.tool.call.arguments`` / ``.result`` / ``.id``; ``tool_call`` and
  ``tool_call_response`` message parts, on the span or in
  ``gen_ai.client.inference.operation.details`` events (Strands writes one such event
  when a span starts and one when it ends: they are merged, see :func:`merged_events`).
- OpenInference: TOOL spans' ``input.value`` / ``output.value``; an LLM span's
  ``llm.output_messages.N.message.tool_calls.M.tool_call.function.{name,arguments}``.
- OpenLLMetry: ``traceloop.entity.input`` / ``.output`` (JSON wrappers
  ``{"args", "kwargs"}``, ``{"inputs"}``, ``{"outputs"}``, unwrapped);
  ``gen_ai.completion.N.tool_calls.M.{name,arguments}``.
- Older framework attributes: Pydantic AI's ``tool_arguments`` / ``tool_response``
  (instrumentation version 2), ADK's ``gcp.vertex.agent.tool_call_args`` /
  ``.tool_response`` (schema 1), Strands' legacy events (``gen_ai.tool.message``,
  ``gen_ai.choice`` with Bedrock content blocks as JSON).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import orjson

from ...formats.otlp_conventions import SpanEvent
from ...judging.steps import REDACTED, as_text, json_value, plain_text

__all__ = ["ToolCall", "as_text", "plain_text", "unwrap_entity", "merged_events", "tool_name",
           "tool_call_of", "requested_calls", "text_turns", "agent_request", "agent_answer",
           "legacy_exchange", "DETAILS_EVENT"]

Attrs = Mapping[str, Any]
DETAILS_EVENT = "gen_ai.client.inference.operation.details"
_INPUT, _OUTPUT = "gen_ai.input.messages", "gen_ai.output.messages"
_ROLES = {"developer": "system", "model": "assistant", "human": "user", "ai": "assistant"}
_TURN_ROLES = frozenset({"system", "user", "assistant"})
_TEXT_PARTS = frozenset({"text", "input_text", "output_text", "refusal"})
_LEGACY_MESSAGE_EVENTS = {"gen_ai.system.message": "system", "gen_ai.user.message": "user",
                          "gen_ai.assistant.message": "assistant"}
_OPENINFERENCE_CALL = re.compile(
    r"llm\.output_messages\.(\d+)\.message\.tool_calls\.(\d+)\.tool_call\."
    r"(function\.name|function\.arguments|id)")
_OPENLLMETRY_CALL = re.compile(r"gen_ai\.completion\.(\d+)\.tool_calls\.(\d+)\.(name|arguments|id)")
_FIELD = {"function.name": "name", "function.arguments": "arguments"}


class ToolCall(NamedTuple):
    name: str
    arguments: str | None
    result: str | None
    id: str | None


# -- values as text -------------------------------------------------------------------------

def unwrap_entity(value: Any) -> str | None:
    """OpenLLMetry's ``traceloop.entity.input`` / ``.output``: the payload inside its
    JSON wrapper (decorators write ``{"args", "kwargs"}``, LangChain ``{"inputs"}`` /
    ``{"outputs"}``), as text."""
    data = json_value(value)
    if data is None and isinstance(value, str) and value.startswith('"'):
        try:  # the decorators' json.dumps of a returned string
            data = orjson.loads(value)
        except orjson.JSONDecodeError:
            pass
    if not isinstance(data, Mapping):
        return as_text(value if data is None else data)
    for key in ("inputs", "outputs"):
        if data.get(key) is not None:
            return as_text(_langchain_content(data[key]))
    if data and set(data) <= {"args", "kwargs"}:
        args, kwargs = data.get("args") or [], data.get("kwargs") or {}
        if not kwargs and isinstance(args, list) and len(args) == 1:
            return as_text(args[0])
        if not args:
            return as_text(kwargs)
    return as_text(value)


def _langchain_content(value: Any) -> Any:
    """A serialized LangChain message (``{"lc": 1, "kwargs": {"content": …}}``) as its content."""
    if isinstance(value, Mapping) and "lc" in value and isinstance(value.get("kwargs"), Mapping):
        return value["kwargs"].get("content", value)
    return value


# -- events and message parts ---------------------------------------------------------------

def merged_events(events: Sequence[SpanEvent]) -> list[SpanEvent]:
    """The events with every ``…operation.details`` event merged into one (later keys
    win): Strands writes the input messages in one and the output in another."""
    details = [e for e in events if e.name == DETAILS_EVENT]
    if len(details) < 2:
        return list(events)
    merged: dict[str, Any] = {}
    for event in details:
        merged.update(event.attributes)
    return [e for e in events if e.name != DETAILS_EVENT] + [SpanEvent(DETAILS_EVENT, merged)]


def _semconv(attrs: Attrs, events: Sequence[SpanEvent], key: str) -> list[Mapping] | None:
    """The messages of ``key`` (input or output) on the span, else in a details event."""
    value = attrs.get(key)
    if value is None:
        value = next((e.attributes.get(key) for e in events
                      if e.name == DETAILS_EVENT and key in e.attributes), None)
    messages = json_value(value) if isinstance(value, str) else value
    if not isinstance(messages, list):
        return None
    return [m for m in messages if isinstance(m, Mapping)]


def _parts(messages: Iterable[Mapping], kind: str) -> list[Mapping]:
    return [part for message in messages if isinstance(message.get("parts"), list)
            for part in message["parts"] if isinstance(part, Mapping) and part.get("type") == kind]


def _blocks(value: Any) -> list[Mapping] | None:
    """Bedrock content blocks (Strands' legacy events) from their JSON text; None
    when the text is no JSON array (Strands writes an agent's answer as plain text)."""
    blocks = json_value(value)
    return [b for b in blocks if isinstance(b, Mapping)] if isinstance(blocks, list) else None


def _blocks_text(blocks: Sequence[Mapping]) -> str:
    return "\n".join(b["text"] for b in blocks if isinstance(b.get("text"), str)).strip()


# -- tool spans -----------------------------------------------------------------------------

def tool_name(attrs: Attrs, span_name: str) -> str:
    for key in ("gen_ai.tool.name", "tool.name"):
        if isinstance(attrs.get(key), str) and attrs[key]:
            return attrs[key]
    if attrs.get("traceloop.span.kind") == "tool" and attrs.get("traceloop.entity.name"):
        return str(attrs["traceloop.entity.name"])
    name = span_name.removeprefix("execute_tool ").removesuffix(".tool")  # Strands, OpenLLMetry
    return name.strip() or "tool"


def tool_call_of(attrs: Attrs, events: Sequence[SpanEvent], span_name: str) -> ToolCall:
    """A tool span's call: the tool's name, its arguments and its result as text."""
    arguments = (as_text(attrs.get("gen_ai.tool.call.arguments"))
                 or as_text(attrs.get("input.value"))
                 or unwrap_entity(attrs.get("traceloop.entity.input"))
                 or as_text(attrs.get("tool_arguments"))
                 or as_text(attrs.get("gcp.vertex.agent.tool_call_args")))
    if arguments is None:
        calls = _parts(_semconv(attrs, events, _INPUT) or (), "tool_call")
        arguments = as_text(calls[0].get("arguments")) if calls else None
    if arguments is None:
        arguments = next((as_text(e.attributes.get("content")) for e in events
                          if e.name == "gen_ai.tool.message"), None)
    result = (as_text(attrs.get("gen_ai.tool.call.result")) or as_text(attrs.get("output.value"))
              or unwrap_entity(attrs.get("traceloop.entity.output"))
              or as_text(attrs.get("tool_response"))
              or as_text(attrs.get("gcp.vertex.agent.tool_response")))
    if result is None:
        responses = _parts(_semconv(attrs, events, _OUTPUT) or (), "tool_call_response")
        result = as_text(responses[0].get("response", responses[0].get("result"))) \
            if responses else None
    if result is None:
        result = next((as_text(e.attributes.get("message")) for e in events
                       if e.name == "gen_ai.choice"), None)
    call_id = as_text(attrs.get("gen_ai.tool.call.id"))
    return ToolCall(tool_name(attrs, span_name), arguments,
                    plain_text(result) if result is not None else None, call_id)


# -- the tool calls a model asked for -------------------------------------------------------

def requested_calls(attrs: Attrs, events: Sequence[SpanEvent]) -> tuple[dict[str, str], ...]:
    """The tool calls in an LLM span's answer: ``{"name", "arguments"[, "id"]}`` each."""
    parts = _parts(_semconv(attrs, events, _OUTPUT) or (), "tool_call")
    calls = [_call(p.get("name"), p.get("arguments"), p.get("id")) for p in parts]
    if not calls:
        calls = _indexed_calls(attrs, _OPENINFERENCE_CALL, "llm.output_messages.")
    if not calls:
        calls = _indexed_calls(attrs, _OPENLLMETRY_CALL, "gen_ai.completion.")
    if not calls:
        for event in events:
            if event.name == "gen_ai.choice":
                calls = [_call(use.get("name"), use.get("input"), use.get("toolUseId"))
                         for block in _blocks(event.attributes.get("message")) or ()
                         if isinstance(use := block.get("toolUse"), Mapping)]
    return tuple(c for c in calls if c)


def _call(name: Any, arguments: Any, call_id: Any) -> dict[str, str]:
    if not isinstance(name, str) or not name:
        return {}
    call = {"name": name, "arguments": as_text(arguments) or ""}
    if as_text(call_id):
        call["id"] = str(call_id)
    return call


def _indexed_calls(attrs: Attrs, pattern: re.Pattern, prefix: str) -> list[dict[str, str]]:
    found: dict[tuple[int, int], dict[str, Any]] = {}
    for key, value in attrs.items():
        if key.startswith(prefix) and (match := pattern.fullmatch(key)):
            message, index, field = match.groups()
            found.setdefault((int(message), int(index)), {})[_FIELD.get(field, field)] = value
    return [_call(f.get("name"), f.get("arguments"), f.get("id")) for _, f in sorted(found.items())]


# -- conversation turns, an agent's request and answer --------------------------------------

def _turn(role: Any, text: str) -> dict[str, str] | None:
    role = str(role or "user").lower()
    role = _ROLES.get(role, role)
    return {"role": role, "content": text} if text and role in _TURN_ROLES else None


def _message_text(message: Mapping) -> str:
    """Only the text a person wrote or reads: tool calls and tool results are steps
    of their own (and a user-role message of tool results has no text)."""
    parts = message.get("parts")
    if isinstance(parts, list):
        return "\n".join(p.get("content") for p in parts if isinstance(p, Mapping)
                         and p.get("type") in _TEXT_PARTS
                         and isinstance(p.get("content"), str)).strip()
    content = message.get("content")
    if isinstance(content, str):
        return "" if content == REDACTED else plain_text(content).strip()
    if isinstance(content, list):
        return "\n".join(t for p in content if isinstance(p, Mapping) and p.get("type") in
                         (*_TEXT_PARTS, None) and isinstance(t := p.get("text"), str)).strip()
    return ""


def text_turns(messages: Iterable[Any]) -> list[dict[str, str]]:
    """``{"role", "content"}`` of the system, user and assistant messages with text."""
    turns = (_turn(m.get("role"), _message_text(m)) for m in messages if isinstance(m, Mapping))
    return [t for t in turns if t is not None]


def semconv_turns(attrs: Attrs, events: Sequence[SpanEvent]) -> list[dict[str, str]] | None:
    """The input turns in the GenAI conventions' ``gen_ai.input.messages``; None without."""
    inputs = _semconv(attrs, events, _INPUT)
    return None if inputs is None else text_turns(inputs)


def agent_request(attrs: Attrs, events: Sequence[SpanEvent]) -> list[dict[str, str]]:
    """An agent span's input as turns, from whichever convention holds it."""
    turns = semconv_turns(attrs, events)
    if turns:
        return turns
    history = json_value(attrs.get("pydantic_ai.all_messages"))
    if isinstance(history, list) and (turns := text_turns(history)):
        return [t for t in turns if t["role"] != "assistant"]
    value = attrs.get("input.value")
    data = json_value(value)
    if isinstance(data, Mapping) and isinstance(data.get("messages"), list):
        data = data["messages"]
    if isinstance(data, list) and (turns := text_turns(data)):
        return turns
    text = as_text(value) or unwrap_entity(attrs.get("traceloop.entity.input"))
    if text:
        return [{"role": "user", "content": plain_text(text)}]
    return legacy_exchange(events)[0]


def agent_answer(attrs: Attrs, events: Sequence[SpanEvent]) -> str | None:
    """An agent span's final answer, from whichever convention holds it."""
    outputs = _semconv(attrs, events, _OUTPUT)
    answers = [t for t in text_turns(outputs or ()) if t["role"] == "assistant"]
    if answers:
        return answers[-1]["content"]
    for text in (as_text(attrs.get("final_result")), as_text(attrs.get("output.value")),
                 unwrap_entity(attrs.get("traceloop.entity.output"))):
        if text:
            return plain_text(text)
    return legacy_exchange(events)[1]


def legacy_exchange(events: Sequence[SpanEvent]) -> tuple[list[dict[str, str]], str | None]:
    """Strands' legacy events: input turns (``gen_ai.{system,user,assistant}.message``,
    content as Bedrock blocks) and the answer (the last ``gen_ai.choice`` message)."""
    turns: list[dict[str, str]] = []
    answer: str | None = None
    for event in events:
        content = event.attributes.get("content")
        if event.name in _LEGACY_MESSAGE_EVENTS and isinstance(content, str):
            blocks = _blocks(content)
            turn = _turn(_LEGACY_MESSAGE_EVENTS[event.name],
                         content.strip() if blocks is None else _blocks_text(blocks))
            if turn is not None:
                turns.append(turn)
        elif event.name == "gen_ai.choice" and isinstance(event.attributes.get("message"), str):
            message = event.attributes["message"]
            blocks = _blocks(message)
            answer = (message.strip() if blocks is None else _blocks_text(blocks)) or answer
    return turns, answer
