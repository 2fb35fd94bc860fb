"""Where GenAI spans keep the conversation: three conventions in use today.

Pure functions over a span's attributes and events as plain Python values
(AnyValue already unwrapped: ``str``, ``int``, ``list``, ``dict`` for a kvlist),
so they are testable without protobuf::

    attrs = {"gen_ai.operation.name": "chat",
             "gen_ai.output.messages": '[{"role": "assistant", "parts":'
                                       ' [{"type": "text", "content": "Hi!"}]}]'}
    is_genai(attrs, ())                     # True
    read_exchange(attrs, ()).output         # 'Hi!'

The conventions, tried in this order (the first that holds the answer's text
wins; its conversation comes with it):

1. OpenTelemetry GenAI semantic conventions, span attributes:
   ``gen_ai.output.messages``, ``gen_ai.input.messages``,
   ``gen_ai.system_instructions`` (JSON strings of messages with ``parts``).
   OpenLLMetry >= 0.4x writes the same attributes.
2. OpenInference: ``llm.output_messages.N.message.{role,content}`` (or
   ``...message.contents.M.message_content.text``), ``llm.input_messages.N...``,
   else ``output.value`` / ``input.value`` (a raw OpenAI response/request
   when the mime type is JSON).
3. OpenLLMetry before it moved to (1): ``gen_ai.completion.N.{role,content}``
   and ``gen_ai.prompt.N.{role,content}``.
4. Span events: ``gen_ai.client.inference.operation.details`` (attributes as in
   1, as JSON strings or arrays of kvlists); the older per-message events
   ``gen_ai.{system,user,assistant,tool}.message`` and ``gen_ai.choice``
   (content in the attributes ``content`` / ``message``, or a JSON body in
   ``gen_ai.event.content`` as the Azure SDKs write it); and the oldest
   ``gen_ai.content.prompt`` / ``gen_ai.content.completion`` events
   (attributes ``gen_ai.prompt`` / ``gen_ai.completion``).

Content an instrumentation hid (OpenInference's ``__REDACTED__``) counts as
absent.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

__all__ = ["Exchange", "SpanEvent", "is_genai", "read_exchange", "NOT_INFERENCE_OPERATIONS",
           "text_of"]

Attrs = Mapping[str, Any]

#: ``gen_ai.operation.name`` values whose spans produce no answer to judge:
#: embeddings and tools have no assistant text, and an agent's answer is the
#: output of its last chat span, which is judged already (judging the
#: ``invoke_agent`` span too would judge the same text twice).
NOT_INFERENCE_OPERATIONS = frozenset({
    "embeddings", "execute_tool", "create_agent", "invoke_agent", "invoke_workflow",
    "retrieval"})
_NOT_INFERENCE_REQUEST_TYPES = frozenset({"embedding", "rerank"})  # OpenLLMetry llm.request.type
#: Any of these on a span marks it as a GenAI span.
_GENAI_KEYS = ("gen_ai.system", "gen_ai.provider.name", "gen_ai.input.messages",
               "gen_ai.output.messages", "llm.request.type")
_GENAI_PREFIXES = ("gen_ai.prompt.", "gen_ai.completion.")
#: OpenLLMetry's indexed messages (``gen_ai.prompt.0.content``), not ``gen_ai.prompt.version``.
_INDEXED_MESSAGE = re.compile(r"gen_ai\.(?:prompt|completion)\.\d")
_DETAILS_EVENT = "gen_ai.client.inference.operation.details"
_MESSAGE_EVENTS = {"gen_ai.system.message": "system", "gen_ai.user.message": "user",
                   "gen_ai.assistant.message": "assistant", "gen_ai.tool.message": "tool"}
_GENAI_EVENTS = frozenset({_DETAILS_EVENT, "gen_ai.choice", "gen_ai.content.completion"})

#: OpenInference writes this where content capture was turned off.
_REDACTED = "__REDACTED__"
#: Part types whose text a user reads (reasoning and tool calls are not the answer).
_TEXT_PARTS = frozenset({"text", "refusal", "output_text", "input_text"})
_ROLES = {"developer": "system", "model": "assistant", "human": "user", "ai": "assistant"}
#: JSON bodies nest a few levels (message → content → parts → text); deeper is not text.
_MAX_DEPTH = 8


@dataclass(frozen=True)
class SpanEvent:
    """A span event: its name and unwrapped attributes."""

    name: str
    attributes: Attrs


@dataclass(frozen=True)
class Exchange:
    """What one GenAI span says: the answer's text and the conversation before it."""

    #: The last assistant output message's text parts, joined; None when there is none.
    output: str | None
    #: System instructions, then the input messages: ``{"role", "content"}`` with text.
    messages: list[dict[str, str]] = field(default_factory=list)
    #: The answer holds tool calls and no text (nothing to judge yet).
    tool_calls: bool = False


def is_genai(attrs: Attrs, event_names: Iterable[str]) -> bool:
    """A span that called a model for an answer, in any of the three conventions."""
    operation = attrs.get("gen_ai.operation.name")
    if isinstance(operation, str) and operation.lower() in NOT_INFERENCE_OPERATIONS:
        return False
    request_type = attrs.get("llm.request.type")
    if isinstance(request_type, str) and request_type.lower() in _NOT_INFERENCE_REQUEST_TYPES:
        return False
    kind = attrs.get("openinference.span.kind")
    if kind is not None:  # OpenInference names every span's kind; only LLM spans call a model
        return str(kind).upper() == "LLM"
    if operation is not None or any(key in attrs for key in _GENAI_KEYS):
        return True
    if any(key.startswith(_GENAI_PREFIXES) and _INDEXED_MESSAGE.match(key) for key in attrs):
        return True
    return any(name in _GENAI_EVENTS for name in event_names)


def read_exchange(attrs: Attrs, events: Sequence[SpanEvent]) -> Exchange | None:
    """The answer and conversation of a GenAI span; None when no content was captured."""
    found: list[Exchange] = []
    for reader in (_semconv_attributes, _openinference, _openllmetry_indexed):
        exchange = reader(attrs)
        if exchange is not None and exchange.output:
            return exchange
        if exchange is not None:
            found.append(exchange)
    for event_reader in (_details_event, _message_events, _content_events):
        exchange = event_reader(events)
        if exchange is not None and exchange.output:
            return exchange
        if exchange is not None:
            found.append(exchange)
    return next((e for e in found if e.tool_calls), None)


# -- text of messages and parts ---------------------------------------------------------

def text_of(value: Any, depth: int = 0) -> str:
    """The readable text of a content value: a string, a part, a list of parts,
    or a body (``{"content": ...}``, ``{"text": {"value": ...}}``)."""
    if isinstance(value, str):
        return "" if value == _REDACTED else value
    if depth >= _MAX_DEPTH:
        return ""
    if isinstance(value, Mapping):
        kind = value.get("type")
        if kind == "tool_call_response":
            return _stringify(value.get("response"))
        if kind is not None and kind not in _TEXT_PARTS:
            return ""
        for key in ("content", "text", "value"):
            if key in value:
                return text_of(value[key], depth + 1)
        return ""
    if isinstance(value, list):
        return "\n".join(t for t in (text_of(v, depth + 1) for v in value) if t)
    return ""


def _stringify(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return str(value)


def _json(value: Any) -> Any:
    """A JSON string's value; anything else (already a list or dict) as it is."""
    if isinstance(value, (str, bytes)):
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            return None
    return value


def _message_text(message: Mapping) -> str:
    if "parts" in message:
        return text_of(message["parts"]).strip()
    return text_of(message.get("content")).strip()


def _has_tool_calls(message: Mapping) -> bool:
    if message.get("tool_calls"):
        return True
    parts = message.get("parts")
    return isinstance(parts, list) and any(
        isinstance(p, Mapping) and p.get("type") == "tool_call" for p in parts)


def _chat_message(message: Any) -> dict[str, str] | None:
    """``{"role", "content"}`` of an input message; None when it has no text
    (an assistant turn of tool calls only)."""
    if not isinstance(message, Mapping):
        return None
    text = _message_text(message)
    if not text:
        return None
    role = str(message.get("role") or "user").lower()
    return {"role": _ROLES.get(role, role), "content": text}


def _exchange(outputs: Sequence[Any], inputs: Sequence[Any], system: str = "") -> Exchange:
    """The answer (the last assistant message of ``outputs``) and its conversation."""
    answers = [m for m in outputs if isinstance(m, Mapping)
               and str(m.get("role") or "assistant").lower() == "assistant"]
    answer = answers[-1] if answers else {}
    text = _message_text(answer)
    messages = [{"role": "system", "content": system}] if system else []
    messages.extend(m for m in map(_chat_message, inputs) if m is not None)
    return Exchange(output=text or None, messages=messages,
                    tool_calls=not text and _has_tool_calls(answer))


# -- 1. GenAI semantic conventions: span attributes (and the details event) --------------

def _semconv_attributes(attrs: Attrs) -> Exchange | None:
    outputs = _json(attrs.get("gen_ai.output.messages"))
    if not isinstance(outputs, list):
        return None
    inputs = _json(attrs.get("gen_ai.input.messages"))
    system = text_of(_json(attrs.get("gen_ai.system_instructions"))).strip()
    return _exchange(outputs, inputs if isinstance(inputs, list) else [], system)


def _details_event(events: Sequence[SpanEvent]) -> Exchange | None:
    for event in reversed(events):
        if event.name == _DETAILS_EVENT:
            return _semconv_attributes(event.attributes)
    return None


# -- 2. OpenInference and 3. OpenLLMetry: indexed, flattened attributes ------------------

_OPENINFERENCE_KEY = re.compile(r"llm\.(input|output)_messages\.(\d+)\.message\.(.+)")
_OPENLLMETRY_KEY = re.compile(r"gen_ai\.(prompt|completion)\.(\d+)\.(.+)")
_CONTENTS_TEXT = re.compile(r"contents\.(\d+)\.message_content\.text")


def _indexed(attrs: Attrs, pattern: re.Pattern, prefix: str) -> dict[str, list[dict]]:
    """Flattened messages (``<side>.<N>.<field>``) as lists of field dicts, by side."""
    sides: dict[str, dict[int, dict[str, Any]]] = {}
    for key, value in attrs.items():
        if not key.startswith(prefix):
            continue
        match = pattern.fullmatch(key)
        if match:
            side, index, name = match.groups()
            sides.setdefault(side, {}).setdefault(int(index), {})[name] = value
    return {side: [fields for _, fields in sorted(by_index.items())]
            for side, by_index in sides.items()}


def _openinference_message(fields: Mapping[str, Any]) -> dict[str, Any]:
    """One OpenInference message as a ``{"role", "content", "tool_calls"}`` dict."""
    content = fields.get("content")
    if not isinstance(content, str) or content == _REDACTED:
        texts = sorted((int(m[1]), v) for k, v in fields.items()
                       if (m := _CONTENTS_TEXT.fullmatch(k)) and isinstance(v, str))
        content = "\n".join(v for _, v in texts if v != _REDACTED)
    tool_calls = any(key.startswith("tool_calls.") for key in fields)
    return {"role": fields.get("role"), "content": content, "tool_calls": tool_calls}


def _openinference(attrs: Attrs) -> Exchange | None:
    if "openinference.span.kind" not in attrs and not any(
            key.startswith(("llm.output_messages.", "output.value")) for key in attrs):
        return None
    sides = _indexed(attrs, _OPENINFERENCE_KEY, "llm.")
    inputs = [_openinference_message(f) for f in sides.get("input", ())] \
        or _request_messages(attrs.get("input.value"), attrs.get("input.mime_type"))
    outputs = [_openinference_message(f) for f in sides.get("output", ())]
    exchange = _exchange(outputs, inputs)
    if exchange.output or exchange.tool_calls:
        return exchange
    response = _response_message(attrs.get("output.value"), attrs.get("output.mime_type"))
    return _exchange([response], inputs) if response else exchange


def _request_messages(value: Any, mime_type: Any) -> list[Any]:
    """Input messages from OpenInference's ``input.value``: an OpenAI request's
    ``messages`` when it is JSON, else the text as one user message."""
    if not isinstance(value, str) or not value or value == _REDACTED:
        return []
    if mime_type == "application/json":
        request = _json(value)
        if isinstance(request, Mapping):
            messages = request.get("messages")
            return messages if isinstance(messages, list) else []
    return [{"role": "user", "content": value}]


def _response_message(value: Any, mime_type: Any) -> dict[str, Any] | None:
    """The answer in OpenInference's ``output.value``: a raw OpenAI chat or
    Responses API response when JSON (``choices[0].message``), else the text."""
    if not isinstance(value, str) or not value or value == _REDACTED:
        return None
    if mime_type != "application/json":
        return {"role": "assistant", "content": value}
    response = _json(value)
    if not isinstance(response, Mapping):
        return None
    choices = response.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], Mapping):
        choice = choices[0]
        message = choice.get("message")
        return dict(message) if isinstance(message, Mapping) else {"content": choice.get("text")}
    if isinstance(response.get("output_text"), str):
        return {"role": "assistant", "content": response["output_text"]}
    output = response.get("output")  # Responses API: message items with output_text parts
    if isinstance(output, list):
        items = [o for o in output if isinstance(o, Mapping) and o.get("type") == "message"]
        if items:
            return {"role": "assistant", "content": items[-1].get("content")}
    return None


def _openllmetry_content(value: Any) -> Any:
    """OpenLLMetry writes list contents as JSON text; a plain answer that merely
    looks like JSON (``[1, 2]``) stays text."""
    if isinstance(value, str) and value.startswith("["):
        parsed = _json(value)
        if isinstance(parsed, list) and parsed and all(
                isinstance(p, Mapping) and "type" in p for p in parsed):
            return parsed
    return value


def _openllmetry_indexed(attrs: Attrs) -> Exchange | None:
    sides = _indexed(attrs, _OPENLLMETRY_KEY, "gen_ai.")
    if "completion" not in sides:
        return None

    def message(fields: Mapping[str, Any]) -> dict[str, Any]:
        return {"role": fields.get("role"),
                "content": _openllmetry_content(fields.get("content")),
                "tool_calls": any(k.startswith("tool_calls.") for k in fields)}

    return _exchange([message(f) for f in sides["completion"]],
                     [message(f) for f in sides.get("prompt", ())])


# -- 4. Older span events ------------------------------------------------------------------

def _event_body(event: SpanEvent) -> dict[str, Any]:
    """An event's attributes, with a JSON body in ``gen_ai.event.content`` merged in."""
    body = dict(event.attributes)
    content = _json(body.pop("gen_ai.event.content", None))
    if isinstance(content, Mapping):
        body.update(content)
    elif isinstance(content, str):
        body.setdefault("content", content)
    return body


def _message_events(events: Sequence[SpanEvent]) -> Exchange | None:
    inputs: list[dict[str, Any]] = []
    outputs: list[Any] = []
    for event in events:
        if event.name in _MESSAGE_EVENTS:
            body = _event_body(event)
            inputs.append({"role": _MESSAGE_EVENTS[event.name], "content": body.get("content")})
        elif event.name == "gen_ai.choice":
            body = _event_body(event)
            message = _json(body.get("message"))
            outputs.append(dict(message) if isinstance(message, Mapping)
                           else {"content": body.get("content"),
                                 "tool_calls": body.get("tool_calls")})
    return _exchange(outputs, inputs) if outputs else None


def _content_events(events: Sequence[SpanEvent]) -> Exchange | None:
    """``gen_ai.content.prompt`` / ``.completion``: messages as JSON, or plain text."""
    prompt: Any = None
    completion: Any = None
    for event in events:
        if event.name == "gen_ai.content.prompt":
            prompt = event.attributes.get("gen_ai.prompt")
        elif event.name == "gen_ai.content.completion":
            completion = event.attributes.get("gen_ai.completion")
    if completion is None:
        return None
    outputs, inputs = _messages_or_none(completion), _messages_or_none(prompt)
    if outputs is None:
        outputs = [{"role": "assistant", "content": completion}]
    if inputs is None:
        inputs = [{"role": "user", "content": prompt}] if prompt else []
    return _exchange(outputs, inputs)


def _messages_or_none(value: Any) -> list[Any] | None:
    """A list of message objects (given or as JSON text); None for plain text."""
    parsed = _json(value)
    if isinstance(parsed, list) and parsed and all(isinstance(m, Mapping) for m in parsed):
        return parsed
    return None
