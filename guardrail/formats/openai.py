"""The ``openai`` input format: chat-completions request/response logs.

A record is a logged call, or the response alone (a ``chat.completion``)::

    {"request": {"model": "gpt-4o", "messages": [...]},
     "response": {"id": "chatcmpl-1", "object": "chat.completion", "created": 1718000000,
                  "model": "gpt-4o-2024-08-06", "choices": [...], "usage": {...}},
     "metadata": {"model_version": "v7"}, "case_id": "…", "timestamp": "…"}

Every choice is a case::

    OpenAIDecoder().decode(raw, headers).cases
    # [{"case_id": "chatcmpl-1", "output": "…", "messages": [...request messages],
    #   "timestamp": 1718000000, "metadata": {"model": "gpt-4o-2024-08-06", "model_version": "v7"}}]

- ``output``: the choice's message text (string content, text parts, or the
  refusal); ``messages``: the request's messages, the conversation leading up
  to it (``input`` and ``conversation`` follow, see
  :mod:`guardrail.judging.conversation`).
- ``case_id``: the record's ``case_id``, else the response ``id``; with more
  than one choice, ``:<index>`` is appended.
- ``timestamp``: the record's, else the response's ``created`` (seconds).
- ``metadata``: ``model`` (the response's, else the request's), then the
  stored-completion ``metadata`` of the request and the response, then the
  record's own labels, each winning over the ones before.
- ``conversation_id`` (the conversation the call is a turn of): the record's
  top-level ``conversation_id``, else ``conversation_id`` among the labels
  above (the record's ``metadata``, or the stored-completion ``metadata``);
  see :func:`guardrail.formats.case.conversation_id`.

The request's messages pass through as logged, tool calls with their
arguments and ``role: tool`` results included: an agent loop's log gives its
case a ``trajectory`` (see :mod:`guardrail.judging.conversation`). A choice
with text that also calls tools adds its own message after them, so the calls
it makes are part of the run judged.

Choices without text are counted, not judged: ``skipped["tool_calls"]`` (the
model only called tools), ``skipped["content_filter"]`` (the provider filtered
it), ``skipped["empty_output"]`` (anything else). Streamed chunks are not read:
log the assembled response.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from pydantic_core import PydanticCustomError

from .base import Decoded, Headers, UndecodableRecord, json_type, load_json
from ..judging.conversation import message_text

__all__ = ["OpenAIDecoder"]


def _bad(reason: str) -> UndecodableRecord:
    return UndecodableRecord(f"openai: {reason}")


def _object(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _bad(f"{where} must be an object, got {json_type(value)}")
    return value


def _split(record: Any) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    """``(request, response)`` of a record: a logged call or a bare response."""
    record = _object(record, "the record")
    if "response" in record:
        request = record.get("request")
        return (_object(request, "request") if request is not None else {},
                _object(record["response"], "response"))
    if record.get("object") == "chat.completion.chunk":
        raise _bad("streamed chunks are not read; log the assembled chat.completion")
    if "choices" in record:
        return {}, record
    keys = ", ".join(sorted(str(k) for k in record)[:8]) or "none"
    raise _bad(f"expected a chat.completion (with choices) or a {{request, response}} "
               f"record, found keys: {keys}")


def _labels(record: Mapping[str, Any], request: Mapping, response: Mapping) -> dict[str, Any]:
    """``model``, then OpenAI's stored-completion ``metadata`` (request, then
    response), then the record's own labels, each winning over the ones before:
    a producer knows better than the API."""
    own = record.get("metadata") if "response" in record else None
    if own is not None and not isinstance(own, Mapping):
        raise _bad(f"metadata must be an object of labels, got {json_type(own)}")
    model = response.get("model") or request.get("model")
    labels: dict[str, Any] = {"model": model} if isinstance(model, str) and model else {}
    for api_labels in (request.get("metadata"), response.get("metadata")):
        if isinstance(api_labels, Mapping):
            labels.update(api_labels)
    return {**labels, **(own or {})}


def _choice_text(choice: Mapping[str, Any], where: str) -> tuple[str, bool]:
    """``(text, called_tools)`` of one choice's message."""
    message = _object(choice.get("message"), f"{where}.message")
    try:
        text = message_text(message, placeholders=False)
    except PydanticCustomError as exc:
        raise _bad(f"{where}.message.{exc.message()}") from None
    audio = message.get("audio")
    if not text and isinstance(audio, Mapping) and isinstance(audio.get("transcript"), str):
        text = audio["transcript"]  # an audio answer: what it says is the output
    return text, bool(message.get("tool_calls") or message.get("function_call"))


def _skip_reason(choice: Mapping[str, Any], called_tools: bool) -> str:
    """Why a choice without text is not judged (never judge an empty output)."""
    if called_tools:
        return "tool_calls"
    if choice.get("finish_reason") == "content_filter":
        return "content_filter"
    return "empty_output"


class OpenAIDecoder:
    """Chat-completions logs: one case per choice of the response."""

    name = "openai"
    many_per_record = True

    def decode(self, raw: bytes, headers: Headers) -> Decoded:
        try:
            record = load_json(raw)
        except UndecodableRecord as exc:
            raise _bad(str(exc)) from None
        return self.decode_json(record)

    def decode_json(self, record: Any) -> Decoded:
        request, response = _split(record)
        choices = response.get("choices")
        if not isinstance(choices, list) or not choices:
            raise _bad("response has no choices" if not choices
                       else f"response.choices must be an array, got {json_type(choices)}")
        messages = request.get("messages")
        if messages is not None and not isinstance(messages, list):
            raise _bad(f"request.messages must be an array, got {json_type(messages)}")
        base = self._case_base(record, request, response, messages)
        cases, skipped = [], Counter()
        for position, choice in enumerate(choices):
            where = f"choices.{position}"
            choice = _object(choice, where)
            text, called_tools = _choice_text(choice, where)
            if not text.strip():
                skipped[_skip_reason(choice, called_tools)] += 1
                continue
            case = {**base, "output": text}
            if called_tools:  # its calls are actions of the run: the judge must see them
                said = choice["message"]
                case["messages"] = [*(messages or ()), {**said, "role": "assistant"}]
            if base.get("case_id") is not None and len(choices) > 1:
                index = choice.get("index", position)
                case["case_id"] = f"{base['case_id']}:{index}"
            cases.append(case)
        return Decoded(cases=cases, skipped=dict(skipped))

    @staticmethod
    def _case_base(record: Mapping[str, Any], request: Mapping, response: Mapping,
                   messages: list | None) -> dict[str, Any]:
        """What every choice's case shares: identity, time, labels, the conversation."""
        wrapped = "response" in record
        case_id = record.get("case_id") if wrapped else None
        if case_id is None:
            case_id = response.get("id")
        timestamp = record.get("timestamp") if wrapped else None
        if timestamp is None:
            timestamp = response.get("created")
        base: dict[str, Any] = {"metadata": _labels(record, request, response)}
        if case_id is not None:
            base["case_id"] = str(case_id)
        if timestamp is not None:
            base["timestamp"] = timestamp
        if messages:
            base["messages"] = messages
        if record.get("conversation_id") is not None:  # else the labels' one, if any
            base["conversation_id"] = record["conversation_id"]
        return base
