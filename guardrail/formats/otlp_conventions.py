"""Where GenAI spans keep the conversation: seven conventions in use today.

Pure functions over a span's attributes and events as plain Python values
(AnyValue already unwrapped: ``str``, ``int``, ``list``, ``dict`` for a kvlist),
so they are testable without protobuf::

    attrs = {"gen_ai.operation.name": "chat",
             "gen_ai.output.messages": '[{"role": "assistant", "parts":'
                                       ' [{"type": "text", "content": "Hi!"}]}]'}
    is_genai(attrs, ())                     # True
    read_exchange(attrs, ()).output         # 'Hi!'
    read_exchange(attrs, ()).convention     # 'otel_genai'

The conventions, tried in this order (the first that holds the answer's text
wins; its conversation comes with it):

1. ``otel_genai``: OpenTelemetry GenAI semantic conventions, span attributes:
   ``gen_ai.output.messages``, ``gen_ai.input.messages``,
   ``gen_ai.system_instructions`` (JSON strings of messages with ``parts``).
   OpenLLMetry >= 0.4x writes the same attributes.
2. ``openinference``: ``llm.output_messages.N.message.{role,content}`` (or
   ``...message.contents.M.message_content.text``), ``llm.input_messages.N...``,
   else ``output.value`` / ``input.value`` (a raw OpenAI response/request
   when the mime type is JSON).
3. ``openllmetry``, before it moved to (1): ``gen_ai.completion.N.{role,content}``
   and ``gen_ai.prompt.N.{role,content}``.
4. ``langfuse``, ``mlflow``, ``vercel_ai``, ``google_adk``: tracing clients' own
   attributes (Langfuse generations' ``langfuse.observation.input`` / ``.output``,
   MLflow's ``mlflow.spanInputs`` / ``.spanOutputs``, the Vercel AI SDK's
   ``ai.prompt.messages`` / ``ai.response.text``, ADK's ``call_llm``
   ``gcp.vertex.agent.llm_request`` / ``llm_response``): :mod:`.otlp_frameworks`.
5. ``otel_genai_events``, span events: ``gen_ai.client.inference.operation.details``
   (attributes as in 1, as JSON strings or arrays of kvlists); the older per-message
   events ``gen_ai.{system,user,assistant,tool}.message`` and ``gen_ai.choice``
   (content in the attributes ``content`` / ``message``, or a JSON body in
   ``gen_ai.event.content`` as the Azure SDKs write it); and the oldest
   ``gen_ai.content.prompt`` / ``gen_ai.content.completion`` events
   (attributes ``gen_ai.prompt`` / ``gen_ai.completion``).

Content an instrumentation hid (OpenInference's ``__REDACTED__``, ADK's ``{}``)
counts as absent. Content there that cannot be read (JSON that is not, or not of
the convention's shape) is told apart from it: see :mod:`.otlp_content`.

The conversation a span is a turn of (:func:`span_conversation_id`), the first
present of :func:`conversation_id_attributes`: ``gen_ai.conversation.id`` (OTel
GenAI), ``session.id`` (OpenInference, Langfuse v3+, MLflow's root spans),
``langfuse.session.id`` (older Langfuse), ``gcp.vertex.agent.session_id`` (ADK),
then per association key an app's metadata: OpenLLMetry's
``traceloop.association.properties.<key>``, the Vercel AI SDK's
``ai.telemetry.metadata.<key>``, Langfuse's ``langfuse.trace.metadata.<key>``,
MLflow's trace tags ``mlflow.traceTag.<key>``; then LangSmith's metadata
``langsmith.metadata.{session_id,conversation_id,thread_id}``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import orjson

from .case import conversation_id_text
from .otlp_content import REDACTED, ContentReading, Exchange, Unreadable, exchange_of, text_of
from .otlp_frameworks import (FRAMEWORK_READERS, RESPONSE_SHAPE, framework_genai,
                              openai_response_message)

__all__ = ["Exchange", "SpanEvent", "is_genai", "read_exchange", "NOT_INFERENCE_OPERATIONS",
           "text_of", "conversation_id_attributes", "span_conversation_id",
           "DEFAULT_ASSOCIATION_KEYS"]

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


#: Conversation id attributes read before OpenLLMetry's association properties.
#: Langfuse reads ``langfuse.session.id`` first, but a span that carries the
#: OTel or OpenInference name was tagged by its instrumentation on purpose.
_CONVERSATION_ATTRIBUTES = ("gen_ai.conversation.id", "session.id", "langfuse.session.id",
                            "gcp.vertex.agent.session_id")
#: Where a client keeps an app's metadata, read per association key: OpenLLMetry's
#: association properties, the Vercel AI SDK's telemetry metadata, Langfuse's
#: trace metadata (JSON-encoded values) and MLflow's trace tags.
_ASSOCIATION_PREFIXES = ("traceloop.association.properties.", "ai.telemetry.metadata.",
                         "langfuse.trace.metadata.", "mlflow.traceTag.")
#: LangSmith's OTel export writes run metadata as ``langsmith.metadata.<key>``
#: (langsmith-sdk ``_otel_exporter``); its threads are keyed by these metadata keys.
#: ``langsmith.trace.session_id`` is the tracing project, not a conversation.
_LANGSMITH_THREAD_KEYS = ("session_id", "conversation_id", "thread_id")
#: OpenLLMetry association keys read when none are given: the default of the
#: ``session_association_keys`` setting (not imported from it: the settings
#: import the judging core, which imports formats; a test keeps the two equal).
DEFAULT_ASSOCIATION_KEYS: tuple[str, ...] = ("session_id", "conversation_id", "sessionId",
                                             "conversationId")


def conversation_id_attributes(association_keys: Sequence[str] = DEFAULT_ASSOCIATION_KEYS,
                               ) -> tuple[str, ...]:
    """The attribute names a span's conversation id is read from, in order::

        conversation_id_attributes(["chat_id"])
        # ('gen_ai.conversation.id', 'session.id', 'langfuse.session.id',
        #  'gcp.vertex.agent.session_id', 'traceloop.association.properties.chat_id',
        #  'ai.telemetry.metadata.chat_id', …, 'langsmith.metadata.session_id', …)
    """
    return (*_CONVERSATION_ATTRIBUTES,
            *(prefix + key for prefix in _ASSOCIATION_PREFIXES for key in association_keys),
            *(f"langsmith.metadata.{key}" for key in _LANGSMITH_THREAD_KEYS))


def span_conversation_id(attrs: Attrs, names: Sequence[str]) -> str | None:
    """The first of ``names`` on the span with an id (a non-empty string or a
    number, as text, trimmed); None when none has. Empty values are passed over:
    Pydantic AI writes ``gen_ai.conversation.id: ""`` on runs without one. A JSON
    string (``'"chat-7"'``: Langfuse's metadata, MLflow's attributes) is its text."""
    for name in names:
        found = conversation_id_text(_unquoted(attrs.get(name)))
        if found is not None:
            return found
    return None


def _unquoted(value: Any) -> Any:
    if isinstance(value, str) and len(value) > 2 and value[0] == value[-1] == '"':
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            return value
    return value


@dataclass(frozen=True)
class SpanEvent:
    """A span event: its name and unwrapped attributes."""

    name: str
    attributes: Attrs


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
    framework = framework_genai(attrs)  # Langfuse, MLflow and Vercel AI name theirs too
    if framework is not None:
        return framework
    if operation is not None or any(key in attrs for key in _GENAI_KEYS):
        return True
    if any(key.startswith(_GENAI_PREFIXES) and _INDEXED_MESSAGE.match(key) for key in attrs):
        return True
    return any(name in _GENAI_EVENTS for name in event_names)


def read_exchange(attrs: Attrs, events: Sequence[SpanEvent]) -> Exchange | None:
    """The answer and conversation of a GenAI span. None when no content was
    captured; an exchange without output nor tool calls, naming what is
    ``unreadable``, when content is there and cannot be read."""
    readers: list[tuple[str, Callable[[ContentReading], Exchange | None]]] = [
        ("otel_genai", partial(_semconv_attributes, attrs)),
        ("openinference", partial(_openinference, attrs)),
        ("openllmetry", partial(_openllmetry_indexed, attrs)),
        *((name, partial(reader, attrs)) for name, reader in FRAMEWORK_READERS),
        ("otel_genai_events", partial(_details_event, events)),
        ("otel_genai_events", partial(_message_events, events)),
        ("otel_genai_events", partial(_content_events, events))]
    found: list[Exchange] = []
    problems: list[Unreadable] = []
    for name, reader in readers:
        reading = ContentReading()
        exchange = reader(reading)
        if exchange is not None and exchange.output:
            return replace(exchange, unreadable=tuple(reading.problems), convention=name)
        problems.extend(reading.problems)
        if exchange is not None:
            found.append(replace(exchange, convention=name))
    tool_calls = next((e for e in found if e.tool_calls), None)
    if tool_calls is not None or not problems:
        return tool_calls
    return Exchange(output=None, unreadable=tuple(problems))


# -- 1. GenAI semantic conventions: span attributes (and the details event) --------------

def _semconv_attributes(attrs: Attrs, reading: ContentReading) -> Exchange | None:
    outputs = reading.messages("gen_ai.output.messages", attrs.get("gen_ai.output.messages"))
    if outputs is None:
        return None
    inputs = reading.messages("gen_ai.input.messages", attrs.get("gen_ai.input.messages"))
    system = reading.json("gen_ai.system_instructions", attrs.get("gen_ai.system_instructions"),
                          (list, dict, str), "an array of parts")
    return exchange_of(outputs, inputs or [], text_of(system).strip())


def _details_event(events: Sequence[SpanEvent], reading: ContentReading) -> Exchange | None:
    for event in reversed(events):
        if event.name == _DETAILS_EVENT:
            return _semconv_attributes(event.attributes, reading.in_event(_DETAILS_EVENT))
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
    if not isinstance(content, str) or content == REDACTED:
        texts = sorted((int(m[1]), v) for k, v in fields.items()
                       if (m := _CONTENTS_TEXT.fullmatch(k)) and isinstance(v, str))
        content = "\n".join(v for _, v in texts if v != REDACTED)
    tool_calls = any(key.startswith("tool_calls.") for key in fields)
    return {"role": fields.get("role"), "content": content, "tool_calls": tool_calls}


def _openinference(attrs: Attrs, reading: ContentReading) -> Exchange | None:
    if "openinference.span.kind" not in attrs and not any(
            key.startswith(("llm.output_messages.", "output.value")) for key in attrs):
        return None
    sides = _indexed(attrs, _OPENINFERENCE_KEY, "llm.")
    inputs = [_openinference_message(f) for f in sides.get("input", ())] \
        or _request_messages(attrs.get("input.value"), attrs.get("input.mime_type"), reading)
    outputs = [_openinference_message(f) for f in sides.get("output", ())]
    exchange = exchange_of(outputs, inputs)
    if exchange.output or exchange.tool_calls:
        return exchange
    response = _response_message(attrs.get("output.value"), attrs.get("output.mime_type"),
                                 reading)
    return exchange_of([response], inputs) if response else exchange


def _request_messages(value: Any, mime_type: Any, reading: ContentReading) -> list[Any]:
    """Input messages from OpenInference's ``input.value``: an OpenAI request's
    ``messages`` when it is JSON, else the text as one user message."""
    if not isinstance(value, str) or not value or value == REDACTED:
        return []
    if mime_type != "application/json":
        return [{"role": "user", "content": value}]
    request = reading.json("input.value", value, dict, "an OpenAI request object")
    messages = request.get("messages") if request is not None else None
    if request is not None and not isinstance(messages, list):
        reading.note("input.value", 'wrong shape: expected an OpenAI request with "messages"')
    return messages if isinstance(messages, list) else []


def _response_message(value: Any, mime_type: Any,
                      reading: ContentReading) -> dict[str, Any] | None:
    """The answer in OpenInference's ``output.value``: a raw OpenAI chat or
    Responses API response when JSON (``choices[0].message``), else the text."""
    if not isinstance(value, str) or not value or value == REDACTED:
        return None
    if mime_type != "application/json":
        return {"role": "assistant", "content": value}
    response = reading.json("output.value", value, dict, RESPONSE_SHAPE)
    if response is None:
        return None
    message = openai_response_message(response)
    if message is None:
        reading.note("output.value", f"wrong shape: expected {RESPONSE_SHAPE}")
    return message


def _openllmetry_content(value: Any, side: str, reading: ContentReading) -> Any:
    """OpenLLMetry writes list contents as JSON text; a plain answer that merely
    looks like JSON (``[1, 2]``) stays text."""
    if isinstance(value, str) and value.startswith("["):
        parts = reading.object_list(f"gen_ai.{side}.*.content", value)
        if parts is not None and all("type" in p for p in parts):
            return parts
    return value


def _openllmetry_indexed(attrs: Attrs, reading: ContentReading) -> Exchange | None:
    sides = _indexed(attrs, _OPENLLMETRY_KEY, "gen_ai.")
    if "completion" not in sides:
        return None

    def message(fields: Mapping[str, Any], side: str) -> dict[str, Any]:
        return {"role": fields.get("role"),
                "content": _openllmetry_content(fields.get("content"), side, reading),
                "tool_calls": any(k.startswith("tool_calls.") for k in fields)}

    return exchange_of([message(f, "completion") for f in sides["completion"]],
                       [message(f, "prompt") for f in sides.get("prompt", ())])


# -- 4. Older span events ------------------------------------------------------------------

def _event_body(event: SpanEvent, reading: ContentReading) -> dict[str, Any]:
    """An event's attributes, with a JSON body in ``gen_ai.event.content`` merged in."""
    body = dict(event.attributes)
    content = reading.in_event(event.name).json(
        "gen_ai.event.content", body.pop("gen_ai.event.content", None), (dict, str),
        "a JSON object")
    if isinstance(content, Mapping):
        body.update(content)
    elif isinstance(content, str):
        body.setdefault("content", content)
    return body


def _message_events(events: Sequence[SpanEvent], reading: ContentReading) -> Exchange | None:
    inputs: list[dict[str, Any]] = []
    outputs: list[Any] = []
    for event in events:
        if event.name in _MESSAGE_EVENTS:
            body = _event_body(event, reading)
            inputs.append({"role": _MESSAGE_EVENTS[event.name], "content": body.get("content")})
        elif event.name == "gen_ai.choice":
            body = _event_body(event, reading)
            message = reading.in_event(event.name).json("message", body.get("message"), dict,
                                                        "a message object")
            outputs.append(dict(message) if message is not None
                           else {"content": body.get("content"),
                                 "tool_calls": body.get("tool_calls")})
    return exchange_of(outputs, inputs) if outputs else None


def _content_events(events: Sequence[SpanEvent], reading: ContentReading) -> Exchange | None:
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
    outputs = reading.in_event("gen_ai.content.completion").object_list(
        "gen_ai.completion", completion)
    inputs = reading.in_event("gen_ai.content.prompt").object_list("gen_ai.prompt", prompt)
    if outputs is None:
        outputs = [{"role": "assistant", "content": completion}]
    if inputs is None:
        inputs = [{"role": "user", "content": prompt}] if prompt else []
    return exchange_of(outputs, inputs)
