"""Whole conversations: chat messages in, the case's judged fields out.

A case may carry ``messages`` instead of (or besides) ``output``. Each message
is ``{"role": ..., "content": ...}`` with content a string or OpenAI content
parts, or ``{"role": ..., "parts": [...]}`` as OpenTelemetry GenAI writes it.
Both become :class:`ChatMessage` (``role``, ``text``); parts that are not text
show as a placeholder (``[image]``, ``[tool call: get_weather]``)::

    ChatMessage.model_validate({"role": "user", "content": [
        {"type": "text", "text": "What is this?"}, {"type": "image_url", "image_url": {}}]})
    # ChatMessage(role='user', text='What is this?\\n[image]')

:func:`derive_fields` fills a case's fields from its messages (it runs in
``Case`` validation, so every input format gets the same rules):

- no ``output``: the last assistant message is the output (its text parts
  only; a message of tool calls alone leaves the case without output), the
  messages before it are the conversation leading up to it; messages after
  it are not part of the case.
- ``output`` given: all messages lead up to it.
- ``input`` absent: the last user message leading up to the output.
- ``conversation``: the turns before the input message, one ``role: text``
  line each (:func:`render_turns`), the latest kept within a budget of
  characters (``conversation_max_chars``, default 8000). None without any.

A given ``input`` that is not the text of the last user message is taken as a
message of its own, after all of them: every message is an earlier turn.
Turns between the input and the output (tool calls and their results) are
kept in ``messages`` but are not part of ``conversation``, which holds the
turns before the input only. ``conversation`` is never read from the input.

The budget comes from the validation context: ``Case.model_validate(data,
context={"conversation_max_chars": 4000})`` (:data:`CONTEXT_KEY`).

``trajectory`` (an agent run as text, issue 30): when the case does not give
one and its raw messages after the input hold tool activity (OpenAI
``tool_calls`` with their arguments, ``role: tool`` messages, OTel GenAI
``tool_call`` / ``tool_call_response`` parts), :func:`derive_trajectory`
renders the input, those steps and the output with
:func:`guardrail.judging.trajectory.render_trajectory`. It reads the raw
messages: :class:`ChatMessage` keeps a tool call's name only. Its budgets come
from the context too (:data:`TRAJECTORY_CONTEXT_KEY`, default 16000
characters; :data:`RESULT_CONTEXT_KEY`, each tool result's, default 2000).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator
from pydantic_core import PydanticCustomError


__all__ = ["ChatMessage", "DEFAULT_CONVERSATION_CHARS", "CONTEXT_KEY", "message_text",
           "derive_fields", "render_turns", "conversation_budget", "TRAJECTORY_CONTEXT_KEY",
           "RESULT_CONTEXT_KEY", "DEFAULT_TRAJECTORY_CHARS", "DEFAULT_TOOL_RESULT_CHARS",
           "trajectory_budget", "derive_trajectory", "json_type"]

#: The default budget, in characters, of the ``conversation`` field.
DEFAULT_CONVERSATION_CHARS = 8000
#: The pydantic validation context key that sets the budget:
#: ``Case.model_validate(data, context={CONTEXT_KEY: 4000})``.
CONTEXT_KEY = "conversation_max_chars"
#: The context keys of the trajectory's budgets (settings of the same names)
#: and their defaults: the whole rendering, and each tool result or arguments.
TRAJECTORY_CONTEXT_KEY, RESULT_CONTEXT_KEY = "trajectory_max_chars", "tool_result_max_chars"
DEFAULT_TRAJECTORY_CHARS, DEFAULT_TOOL_RESULT_CHARS = 16_000, 2000

# Non-text parts are named, not dropped silently: "[image]" tells the judge
# (and a reader) that the turn showed something it cannot see.
_PLACEHOLDERS = {"image_url": "[image]", "input_image": "[image]", "input_audio": "[audio]",
                 "file": "[file]", "input_file": "[file]"}


def json_type(value: Any) -> str:
    """How a JSON value is named in errors: ``an array``, ``a string`` …"""
    return {list: "an array", str: "a string", bool: "a boolean", int: "a number",
            float: "a number", type(None): "null", dict: "an object"}.get(
        type(value), type(value).__name__)


def _bad(message: str) -> PydanticCustomError:
    # A custom error keeps the message free of pydantic's "Value error, " prefix.
    return PydanticCustomError("chat_message", message)


def _openai_part(part: Any, where: str, placeholders: bool) -> str:
    """One OpenAI content part (``{"type": "text", "text": ...}``, image, audio…)."""
    if isinstance(part, str):  # some SDKs log plain strings inside the list
        return part
    if not isinstance(part, Mapping):
        raise _bad(f"{where} must be a content part object, got {json_type(part)}")
    kind = part.get("type")
    if kind in ("text", "input_text", "output_text"):
        text = part.get("text")
        if not isinstance(text, str):
            raise _bad(f"{where}.text must be a string, got {json_type(text)}")
        return text
    if kind == "refusal":
        return part.get("refusal") if isinstance(part.get("refusal"), str) else ""
    if not placeholders:
        return ""
    return _PLACEHOLDERS.get(kind, f"[{kind}]" if isinstance(kind, str) and kind else "[part]")


def _otel_part(part: Any, where: str, placeholders: bool) -> str:
    """One OTel GenAI part: text, tool_call, tool_call_response, blob/uri/file, reasoning."""
    if not isinstance(part, Mapping):
        raise _bad(f"{where} must be a part object, got {json_type(part)}")
    kind = part.get("type")
    if kind == "text":
        text = part.get("content")
        if not isinstance(text, str):
            raise _bad(f"{where}.content must be a string, got {json_type(text)}")
        return text
    if kind == "reasoning" or not placeholders:  # the model's own notes, never shown
        return ""
    if kind == "tool_call":
        return f"[tool call: {part.get('name') or '?'}]"
    if kind == "tool_call_response":  # what the tool said is content the model read
        response = part.get("response")
        return response if isinstance(response, str) else orjson.dumps(response).decode()
    modality = part.get("modality")
    return f"[{modality}]" if isinstance(modality, str) and modality else f"[{kind or 'part'}]"


def _tool_calls(message: Mapping) -> list[str]:
    """``[tool call: name]`` for an OpenAI message's ``tool_calls`` / ``function_call``."""
    calls = message.get("tool_calls") or []
    if message.get("function_call"):
        calls = [*calls, {"function": message["function_call"]}]
    names = []
    for call in calls if isinstance(calls, list) else []:
        function = call.get("function") if isinstance(call, Mapping) else None
        name = function.get("name") if isinstance(function, Mapping) else None
        names.append(f"[tool call: {name or '?'}]")
    return names


def message_text(message: Mapping, *, placeholders: bool = True) -> str:
    """The text of one raw message, its parts joined by newlines.

    ``placeholders=False`` keeps what the speaker said only (text and
    refusals): the judged ``output`` is never a placeholder. Raises
    ``PydanticCustomError`` (a ``ValueError``) naming a badly shaped part.
    """
    content, parts = message.get("content"), message.get("parts")
    if content is None and parts is None and isinstance(message.get("text"), str):
        texts = [message["text"]]  # the normalised form, as a Case serialises it
    elif parts is not None and content is None:
        if not isinstance(parts, list):
            raise _bad(f"parts must be an array of parts, got {json_type(parts)}")
        texts = [_otel_part(p, f"parts.{i}", placeholders) for i, p in enumerate(parts)]
    elif isinstance(content, list):
        texts = [_openai_part(p, f"content.{i}", placeholders) for i, p in enumerate(content)]
    elif isinstance(content, str) or content is None:
        texts = [content or ""]
    else:
        raise _bad("content must be a string or an array of content parts, "
                   f"got {json_type(content)}")
    if not content and isinstance(message.get("refusal"), str):
        texts.append(message["refusal"])
    if placeholders:
        texts.extend(_tool_calls(message))
    return "\n".join(text for text in texts if text)


class ChatMessage(BaseModel):
    """One turn of a conversation, normalised: who spoke and the text of it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    role: str
    text: str = ""

    @model_validator(mode="before")
    @classmethod
    def _from_any_shape(cls, data: Any) -> Any:
        if isinstance(data, ChatMessage):
            return data
        if not isinstance(data, Mapping):
            raise _bad("a message must be an object with role and content, "
                       f"got {json_type(data)}")
        role = data.get("role")
        if not isinstance(role, str) or not role.strip():
            raise _bad("role is missing" if role is None
                       else f"role must be a non-empty string, got {json_type(role)}")
        return {"role": role.strip(), "text": message_text(data)}


def _budget(context: Any, key: str, default: int) -> int:
    value = context.get(key) if isinstance(context, Mapping) else None
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{key} must be a positive integer, got {value!r}")
    return value


def conversation_budget(context: Any) -> int:
    """The budget from a validation context (``{CONTEXT_KEY: N}``), else the default."""
    return _budget(context, CONTEXT_KEY, DEFAULT_CONVERSATION_CHARS)


def trajectory_budget(context: Any) -> tuple[int, int]:
    """``(trajectory_max_chars, tool_result_max_chars)`` from a validation
    context, else the defaults."""
    return (_budget(context, TRAJECTORY_CONTEXT_KEY, DEFAULT_TRAJECTORY_CHARS),
            _budget(context, RESULT_CONTEXT_KEY, DEFAULT_TOOL_RESULT_CHARS))


def _cut_turn(message: ChatMessage, max_chars: int) -> str:
    """A turn over the whole budget: its end (the part next to the input) stays."""
    text = message.text
    # The marker costs characters too; sized with the longest count it can
    # show, the line fits whatever the count turns out to be.
    widest = f"{message.role}: [… {len(text)} characters cut] "
    keep = max(0, min(len(text), max_chars - len(widest)))
    head = f"{message.role}: [… {len(text) - keep} characters cut] "
    return head + text[len(text) - keep:] if keep else head.rstrip()


def render_turns(turns: Sequence[ChatMessage], max_chars: int) -> str | None:
    """``role: text`` lines of ``turns`` (empty turns left out), the latest
    whole turns that fit in ``max_chars``; a first line ``[… N earlier turns
    cut]`` (on top of the budget) says how many did not. When not even the
    latest turn fits, its end is kept (:func:`_cut_turn`). None without turns."""
    lines = [(m, f"{m.role}: {m.text}") for m in turns if m.text.strip()]
    if not lines:
        return None
    kept: list[str] = []
    used = 0
    for _message, line in reversed(lines):
        cost = len(line) + (1 if kept else 0)  # the newline joining it to the next
        if used + cost > max_chars:
            break
        kept.append(line)
        used += cost
    if not kept:
        kept = [_cut_turn(lines[-1][0], max_chars)]
    kept.reverse()
    cut = len(lines) - len(kept)
    if cut:
        kept.insert(0, f"[… {cut} earlier turn{'s' if cut != 1 else ''} cut]")
    return "\n".join(kept)


def _last(messages: Sequence[ChatMessage], role: str) -> int | None:
    return next((i for i in range(len(messages) - 1, -1, -1) if messages[i].role == role), None)


def derive_fields(data: dict[str, Any], max_chars: int) -> dict[str, Any]:
    """``data`` with ``messages`` normalised and ``output``, ``input`` and
    ``conversation`` derived from them (the rules are in the module docstring).

    Messages that do not validate are left as they are: the ``messages``
    field's own validation then reports each bad one by its index.
    """
    raw = data.get("messages")
    if not isinstance(raw, (list, tuple)):
        return data
    try:
        messages = [ChatMessage.model_validate(m) for m in raw]
    except ValidationError:
        return data
    out = dict(data)
    if data.get("output") is None:
        at = _last(messages, "assistant")
        if at is not None:
            spoken = raw[at].text if isinstance(raw[at], ChatMessage) else message_text(
                raw[at], placeholders=False)
            out["output"] = spoken or None
            messages = messages[:at]
    user = _last(messages, "user")
    if data.get("input") is None:
        if user is not None:
            out["input"] = messages[user].text
    elif user is None or messages[user].text.strip() != str(data["input"]).strip():
        user = len(messages)  # the given input is none of the messages: it comes after them
    out["messages"] = tuple(messages)
    out["conversation"] = render_turns(messages[:user if user is not None else len(messages)],
                                       max_chars)
    return out


def _role(message: Any) -> str | None:
    role = message.role if isinstance(message, ChatMessage) else (
        message.get("role") if isinstance(message, Mapping) else None)
    return role.strip() if isinstance(role, str) else None


# Every shape guardrail.assembly.runs.steps reads a tool call or result from (OpenAI
# chat and Responses items, OTel GenAI parts, Anthropic blocks). Checked first
# so a plain chat case costs a dict lookup per message, not a parse into steps.
_TOOL_ROLES = ("tool", "function")
_TOOL_ITEMS = ("function_call", "function_call_output")
_TOOL_PARTS = ("tool_call", "tool_call_response", "tool_use", "tool_result")


def _tool_shaped(message: Any) -> bool:
    """Whether a raw message may hold a tool call or result (never a false no)."""
    if not isinstance(message, Mapping):
        return False
    role = message.get("role")
    if (isinstance(role, str) and role.strip().lower() in _TOOL_ROLES
            or message.get("type") in _TOOL_ITEMS
            or message.get("tool_calls") or message.get("function_call")):
        return True
    return any(isinstance(parts, list) and any(
        isinstance(p, Mapping) and p.get("type") in _TOOL_PARTS for p in parts)
        for parts in (message.get("parts"), message.get("content")))


def run_messages(raw: Sequence[Any], *, output_given: bool) -> list[Any]:
    """The raw messages of the run that ends the conversation: those after the
    last user message (the request), up to the output. When the output is the
    last assistant message (not given), that message is a step too if it
    called tools: its calls are actions the judge must see."""
    end = len(raw)
    if not output_given:
        at = next((i for i in range(end - 1, -1, -1) if _role(raw[i]) == "assistant"), None)
        if at is not None:
            end = at + 1 if _tool_shaped(raw[at]) else at
    start = next((i + 1 for i in range(end - 1, -1, -1) if _role(raw[i]) == "user"), 0)
    return list(raw[start:end])


def derive_trajectory(data: Mapping[str, Any], derived: Mapping[str, Any],
                      budget: tuple[int, int]) -> str | None:
    """The ``trajectory`` of a case (``data`` as given, ``derived`` its fields
    after :func:`derive_fields`) whose run holds tool activity, else None::

        derive_trajectory(data, derive_fields(data, 8000), trajectory_budget(context))

    ``budget`` is ``(trajectory_max_chars, tool_result_max_chars)``."""
    raw = data.get("messages")
    if not isinstance(raw, (list, tuple)):
        return None
    run = run_messages(raw, output_given=data.get("output") is not None)
    if not any(_tool_shaped(message) for message in run):
        return None  # plain chat: no parse, no import
    from .trajectory import render_trajectory, steps_from_messages  # runs imports formats

    steps = steps_from_messages(run)
    # has_tool_activity's test, on the steps at hand rather than a second parse.
    if not any(step.kind in ("tool_call", "tool_result") for step in steps):
        return None
    max_chars, result_max_chars = budget
    return render_trajectory(derived.get("input"), steps, derived.get("output"),
                             max_chars=max_chars, result_max_chars=result_max_chars)
