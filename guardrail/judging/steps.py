"""An agent run as steps: the model's turns, tool calls with their arguments, tool
results, as raw chat messages show them (a run's spans give steps too:
:func:`guardrail.assembly.runs.steps.steps_from_spans`)::

    steps = steps_from_messages([
        {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
         "function": {"name": "read_inbox", "arguments": '{"folder": "INBOX"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "3 new mails"}])
    [s.kind for s in steps]          # ['model', 'tool_call', 'tool_result']
    has_tool_activity(messages)      # True

A tool call and its result share a ``ref`` (the tool span's id, or the call id),
so the rendering (:mod:`.trajectory`) numbers the result as its call. Values are
read as text by :func:`as_text`: content an instrumentation hid (:data:`REDACTED`)
counts as absent.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import orjson

__all__ = ["Step", "StepKind", "steps_from_messages", "has_tool_activity", "as_text",
           "plain_text", "json_value", "message_calls", "REDACTED"]

#: What OpenInference writes in place of content it was told to hide.
REDACTED = "__REDACTED__"

StepKind = Literal["user", "agent", "model", "tool_call", "tool_result"]


@dataclass(frozen=True)
class Step:
    """One step of a run, as plain text (untrusted: the rendering fences and neutralises it)."""

    kind: StepKind
    depth: int = 0
    #: user/model: the text; agent: its task when it has one; tool_call: the
    #: arguments; tool_result: the result.
    text: str = ""
    #: The agent's or the tool's name.
    name: str = ""
    #: Joins a tool_call and its tool_result.
    ref: str = ""
    #: model: the names of the tools this turn asks for.
    calls: tuple[str, ...] = ()


# -- values as text -------------------------------------------------------------------------

def as_text(value: Any) -> str | None:
    """A value as text: a string as it is, an object or array as compact JSON;
    None when absent, empty or hidden (OpenInference's ``__REDACTED__``)."""
    if value is None or value == "" or value == REDACTED:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, bool):
        return "true" if value else "false"
    try:
        return orjson.dumps(value, default=str).decode()
    except TypeError:  # past orjson's nesting limit: nothing anyone reads as text
        return None


def json_value(text: Any) -> Any:
    """A text that holds a JSON object or array, parsed; None for any other value."""
    if not isinstance(text, str) or not text.lstrip().startswith(("{", "[")):
        return None
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return None


def _text_block(block: Any) -> bool:
    return (isinstance(block, Mapping) and isinstance(block.get("text"), str)
            and set(block) <= {"text", "type"} and block.get("type", "text") == "text")


def plain_text(text: str) -> str:
    """Text that is a JSON array of text blocks (``[{"text": "…"}]``, as Strands and
    MCP tools return results) as the text itself; any other text as it is."""
    blocks = json_value(text) if text.startswith("[") else None
    if isinstance(blocks, list) and blocks and all(map(_text_block, blocks)):
        return "\n".join(block["text"] for block in blocks)
    return text


# -- from chat messages ---------------------------------------------------------------------

def _role(message: Mapping[str, Any]) -> str:
    role = message.get("role")
    return role.strip().lower() if isinstance(role, str) else ""


def _content_text(content: Any) -> str:
    """Text of a message's content: a string, or the text of its text parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(t for p in content if isinstance(p, Mapping)
                         and p.get("type") in ("text", "input_text", "output_text", None)
                         and isinstance(t := p.get("text", p.get("content")), str))
    return ""


def _result_text(value: Any) -> str:
    if isinstance(value, list) and all(isinstance(p, Mapping) and "text" in p for p in value):
        return _content_text(value)
    text = as_text(value)
    return plain_text(text) if text else ""


def message_calls(message: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """``(name, arguments, id)`` of the tool calls an assistant message makes: OpenAI
    ``tool_calls`` / ``function_call``, OTel ``tool_call`` parts, ``tool_use`` blocks."""
    calls = []
    listed = message.get("tool_calls")
    for call in listed if isinstance(listed, (list, tuple)) else ():  # junk: no calls
        function = call.get("function") if isinstance(call, Mapping) else None
        if isinstance(function, Mapping):
            calls.append((function.get("name"), function.get("arguments"), call.get("id")))
    function = message.get("function_call")
    if isinstance(function, Mapping):
        calls.append((function.get("name"), function.get("arguments"), None))
    for part in _parts(message):
        if part.get("type") == "tool_call":
            calls.append((part.get("name"), part.get("arguments"), part.get("id")))
        elif part.get("type") == "tool_use":
            calls.append((part.get("name"), part.get("input"), part.get("id")))
    return [(name, as_text(args) or "", str(cid or "")) for name, args, cid in calls
            if isinstance(name, str) and name]


def _message_results(message: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(call id, result)`` of the tool results a message carries: OTel
    ``tool_call_response`` parts and ``tool_result`` blocks."""
    results = []
    for part in _parts(message):
        if part.get("type") == "tool_call_response":
            results.append((part.get("id"), part.get("response", part.get("result"))))
        elif part.get("type") == "tool_result":
            results.append((part.get("tool_use_id"), part.get("content")))
    return [(str(cid or ""), _result_text(value)) for cid, value in results]


def _parts(message: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    parts = message.get("parts")
    if not isinstance(parts, list):
        parts = message.get("content")
    return [p for p in parts if isinstance(p, Mapping)] if isinstance(parts, list) else []


def steps_from_messages(messages: Sequence[Mapping]) -> list[Step]:
    """The steps of raw chat messages (OpenAI chat-completion logs, case JSON, OTel
    ``parts`` messages, Responses API items); system messages are left out."""
    steps: list[Step] = []
    names: dict[str, str] = {}  # call id → tool name, for the results
    for message in messages:
        if isinstance(message, Mapping):
            steps.extend(_message_steps(message, names))
    return steps


def _message_steps(message: Mapping[str, Any], names: dict[str, str]) -> Iterable[Step]:
    kind, role = message.get("type"), _role(message)
    if kind == "function_call":  # Responses API items
        return _calls([(message.get("name") or "tool", as_text(message.get("arguments")) or "",
                        str(message.get("call_id") or ""))], names)
    if kind == "function_call_output":
        return _results([(str(message.get("call_id") or ""),
                          _result_text(message.get("output")))], names)
    if role in ("system", "developer"):
        return []
    if role in ("tool", "function"):
        call_id = str(message.get("tool_call_id") or "")
        if message.get("name") and call_id not in names:
            names[call_id] = str(message["name"])
        results = _message_results(message) or [(call_id, _result_text(message.get("content")))]
        return _results(results, names)
    text = _content_text(message.get("parts") if "parts" in message else message.get("content"))
    calls = message_calls(message)
    steps = _results(_message_results(message), names)
    if role == "user" and text.strip():
        steps.append(Step("user", 0, text))
    elif role != "user" and (text.strip() or calls):
        steps.append(Step("model", 0, text, calls=tuple(name for name, _, _ in calls)))
        steps.extend(_calls(calls, names))
    return steps


def _calls(calls: list[tuple[str, str, str]], names: dict[str, str]) -> list[Step]:
    steps = []
    for name, arguments, call_id in calls:
        ref = call_id or f"call:{len(names)}"
        names[ref] = name
        steps.append(Step("tool_call", 0, arguments, name, ref))
    return steps


def _results(results: list[tuple[str, str]], names: Mapping[str, str]) -> list[Step]:
    return [Step("tool_result", 0, text, names.get(call_id, "tool"), call_id)
            for call_id, text in results]


def has_tool_activity(messages: Sequence[Mapping]) -> bool:
    """Whether raw chat messages hold any tool call or tool result."""
    return any(step.kind in ("tool_call", "tool_result")
               for step in steps_from_messages(messages))
