"""A GenAI span's content as text, and content that is there but cannot be read.

The lower half of :mod:`.otlp_conventions`: the text of messages and parts,
the :class:`Exchange` a span yields, and :class:`ContentReading`, which parses
the attributes the conventions write as JSON and keeps what is wrong with each.
Content that is present but unreadable (not JSON, JSON of another shape, or
nested past any conversation) is counted as ``unreadable_content``, apart from
``no_content``: capture is on for such a span, so the advice to turn it on
would send the user the wrong way::

    reading = ContentReading()
    reading.messages("gen_ai.output.messages", "Paris.")    # None: not JSON
    str(reading.problems[0])
    # 'gen_ai.output.messages: not JSON (unexpected character, expected a JSON value: ...)'

Nesting is bounded before anything walks a value recursively: orjson refuses
JSON deeper than 1,024 levels, and a reading refuses a value deeper than
:data:`MAX_DEPTH` (Python's repr of a list 1,000 levels deep, which turning a
tool result into text can reach, raises RecursionError).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from ..judging.steps import REDACTED
from .base import Notice, json_type

__all__ = ["Exchange", "Unreadable", "ContentReading", "MAX_DEPTH", "REDACTED", "text_of",
           "nested_deeper_than", "exchange_of", "unreadable_notice"]

#: Messages nest about six levels (array → message → parts → part → content),
#: tool results a few more; deeper than this is no conversation anyone wrote.
MAX_DEPTH = 64
#: Part types whose text a user reads (reasoning and tool calls are not the answer).
_TEXT_PARTS = frozenset({"text", "refusal", "output_text", "input_text"})
_ROLES = {"developer": "system", "model": "assistant", "human": "user", "ai": "assistant"}
_TOO_DEEP = f"nested too deep (more than {MAX_DEPTH} levels)"
#: Keys one of which a message holds its content under (OpenAI's format: ``tool_calls``).
_MESSAGE_KEYS = ("parts", "content", "tool_calls")


@dataclass(frozen=True)
class Unreadable:
    """A content attribute that is there and cannot be read, and what is wrong with it."""

    attribute: str
    problem: str

    def __str__(self) -> str:
        return f"{self.attribute}: {self.problem}"


@dataclass(frozen=True)
class Exchange:
    """What one GenAI span says: the answer's text and the conversation before it."""

    #: The last assistant output message's text parts, joined; None when there is none.
    output: str | None
    #: System instructions, then the input messages: ``{"role", "content"}`` with text.
    messages: list[dict[str, str]] = field(default_factory=list)
    #: The answer holds tool calls and no text (nothing to judge yet).
    tool_calls: bool = False
    #: Content the span holds that could not be read: why there is no answer
    #: when ``output`` is None, else what the answer is judged without.
    unreadable: tuple[Unreadable, ...] = ()
    #: The tool calls the answer asks for, where a convention's reader parsed them:
    #: ``{"name", "arguments"[, "id"]}`` (agent runs show them as steps).
    calls: tuple[dict[str, str], ...] = ()
    #: The convention that held the answer (``otel_genai``, ``langfuse`` …), which
    #: ``guardrail inputs check`` names.
    convention: str | None = None


class ContentReading:
    """Reads a span's JSON content attributes and keeps each one's problem."""

    def __init__(self, event: str = "", problems: list[Unreadable] | None = None) -> None:
        self._event = event
        self.problems: list[Unreadable] = [] if problems is None else problems

    def in_event(self, name: str) -> ContentReading:
        """The same reading, naming attributes as those of the span event ``name``."""
        return ContentReading(name, self.problems)

    def note(self, attribute: str, problem: str) -> None:
        where = f"{attribute} (event {self._event})" if self._event else attribute
        self.problems.append(Unreadable(where, problem))

    def json(self, attribute: str, value: Any, expected: type | tuple[type, ...],
             shape: str) -> Any:
        """``value`` (JSON text, or a value the span already holds structured)
        when it is ``expected``; None when it is absent, or unreadable (noted)."""
        if value is None or (isinstance(value, (str, bytes)) and not value.strip()):
            return None
        parsed = value
        if isinstance(value, (str, bytes)):
            try:
                parsed = orjson.loads(value)
            except orjson.JSONDecodeError as exc:
                self.note(attribute, _TOO_DEEP if _past_orjson_depth(exc)
                          else f"not JSON ({str(exc)[:120]})")
                return None
        if nested_deeper_than(parsed, MAX_DEPTH):
            self.note(attribute, _TOO_DEEP)
            return None
        if not isinstance(parsed, expected):
            self.note(attribute, f"wrong shape: expected {shape}, got {json_type(parsed)}")
            return None
        return parsed

    def messages(self, attribute: str, value: Any) -> list[Any] | None:
        """A JSON array of messages; None when absent or unreadable. Items of
        the wrong shape are noted (the first) and left for the caller to skip."""
        messages = self.json(attribute, value, list, "an array of messages")
        for number, message in enumerate(messages or (), start=1):
            if not isinstance(message, Mapping):
                self.note(attribute, f"wrong shape: expected message objects, item {number} "
                                     f"is {json_type(message)}")
                break
            if not any(key in message for key in _MESSAGE_KEYS):
                self.note(attribute, f'wrong shape: expected "parts" or "content" in '
                                     f"message {number}")
                break
        return messages

    def object_list(self, attribute: str, value: Any) -> list[Mapping] | None:
        """Where a convention allows plain text or a JSON array of objects: the
        objects; None for text (also text that merely looks like JSON, ``[1]``);
        ``[]`` for JSON nested too deep to read, which is noted."""
        parsed = value
        if isinstance(value, (str, bytes)):
            try:
                parsed = orjson.loads(value)
            except orjson.JSONDecodeError as exc:
                if not _past_orjson_depth(exc):
                    return None
                self.note(attribute, _TOO_DEEP)
                return []
        if nested_deeper_than(parsed, MAX_DEPTH):
            self.note(attribute, _TOO_DEEP)
            return []
        if isinstance(parsed, list) and parsed and all(isinstance(m, Mapping) for m in parsed):
            return parsed
        return None


def _past_orjson_depth(exc: orjson.JSONDecodeError) -> bool:
    return "depth limit" in str(exc)


def nested_deeper_than(value: Any, limit: int) -> bool:
    """Whether arrays and objects nest more than ``limit`` levels in ``value``
    (walked with a stack: asking about any depth is safe)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def unreadable_notice(service: str, unreadable: Sequence[Unreadable], *, judged: bool) -> Notice:
    """The log line, once per service, naming what cannot be read and why
    (never the advice to turn capture on: the content is there)."""
    problems = "; ".join(map(str, unreadable))
    if judged:
        return Notice(key=f"judged_without_unreadable:{service}",
                      text=(f"otlp: GenAI spans of service {service!r} are judged without "
                            f"content that cannot be read: {problems}"))
    return Notice(key=f"unreadable_content:{service}",
                  text=(f"otlp: GenAI spans of service {service!r} carry message content "
                        f"that cannot be read, so they are counted as unreadable_content and "
                        f"not judged: {problems}"))


# -- text of messages and parts ---------------------------------------------------------

def text_of(value: Any, depth: int = 0) -> str:
    """The readable text of a content value: a string, a part, a list of parts,
    or a body (``{"content": ...}``, ``{"text": {"value": ...}}``)."""
    if isinstance(value, str):
        return "" if value == REDACTED else value
    if depth >= MAX_DEPTH:
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
        return orjson.dumps(value, default=_scalar_text).decode()
    except TypeError:  # orjson's own nesting limit: a result no one reads as text
        return ""


def _scalar_text(value: Any) -> str:
    """What orjson cannot write itself (bytes from an AnyValue) as text."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


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


def exchange_of(outputs: Sequence[Any], inputs: Sequence[Any], system: str = "") -> Exchange:
    """The answer (the last assistant message of ``outputs``) and its conversation."""
    answers = [m for m in outputs if isinstance(m, Mapping)
               and str(m.get("role") or "assistant").lower() == "assistant"]
    answer = answers[-1] if answers else {}
    text = _message_text(answer)
    messages = [{"role": "system", "content": system}] if system else []
    messages.extend(m for m in map(_chat_message, inputs) if m is not None)
    return Exchange(output=text or None, messages=messages,
                    tool_calls=not text and _has_tool_calls(answer))
