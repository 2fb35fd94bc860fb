"""An agent run as steps: the model's turns, tool calls with their arguments, tool
results, sub-agents nested under whoever invoked them; from a run's spans or from
raw chat messages::

    steps = steps_from_spans(run_spans, root_id="00f067aa0ba902b7")
    steps = steps_from_messages([
        {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
         "function": {"name": "read_inbox", "arguments": '{"folder": "INBOX"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "3 new mails"}])
    [s.kind for s in steps]          # ['model', 'tool_call', 'tool_result']
    has_tool_activity(messages)      # True

A tool call and its result share a ``ref`` (the tool span's id, or the call id),
so the rendering (:mod:`.trajectory`) numbers the result as its call.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from .span_reading import as_text, plain_text
from .spans import RunSpan

__all__ = ["Step", "StepKind", "steps_from_spans", "steps_from_messages", "has_tool_activity"]

StepKind = Literal["user", "agent", "model", "tool_call", "tool_result"]
_NESTING = ("agent", "tool")  # the kinds whose children are shown indented under them


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


# -- from spans -----------------------------------------------------------------------------

def _start(span: RunSpan) -> tuple[int, int, str]:
    return span.start_ns, span.end_ns, span.span_id


def steps_from_spans(spans: Sequence[RunSpan], root_id: str | None) -> list[Step]:
    """The run's steps, depth-first from the root, siblings by start time. A span whose
    parent is not in the run is shown under the root; spans of other kinds (chains,
    event-loop cycles) show nothing themselves but their children."""
    by_id = {s.span_id: s for s in spans}
    root_id = root_id if root_id in by_id else None
    children: dict[str | None, list[RunSpan]] = {}
    for span in by_id.values():
        if span.span_id != root_id:
            parent = span.parent_id if span.parent_id in by_id else root_id
            children.setdefault(parent, []).append(span)
    for siblings in children.values():
        siblings.sort(key=_start)
    shown = _calls_shown_by_tools(list(by_id.values()))
    tops = [by_id[root_id]] if root_id else children.get(None, [])
    steps: list[Step] = []
    seen: set[str] = set()
    _walk(tops, 0, children, shown, seen, steps)
    # Spans caught in a parent cycle are reachable from nowhere: shown at the end, flat.
    _walk(sorted((s for s in by_id.values() if s.span_id not in seen), key=_start), 0,
          children, shown, seen, steps)
    return steps


def _walk(tops: Sequence[RunSpan], depth: int, children: Mapping[str | None, list[RunSpan]],
          shown: set[tuple[str, int]], seen: set[str], steps: list[Step]) -> None:
    """Depth first without recursion (a run may nest as deep as its span cap)."""
    stack: list[tuple[RunSpan, int, bool]] = [(s, depth, False) for s in reversed(tops)]
    while stack:
        span, at, after_children = stack.pop()
        if after_children:
            steps.append(Step("tool_result", at, span.tool_result or "", _tool(span),
                              span.span_id))
            continue
        if span.span_id in seen:
            continue
        seen.add(span.span_id)
        steps.extend(_span_steps(span, at, shown))
        if span.kind == "tool" and span.tool_result is not None:
            stack.append((span, at, True))
        inner = at + (span.kind in _NESTING)
        stack.extend((child, inner, False) for child in reversed(children.get(span.span_id, ())))


def _tool(span: RunSpan) -> str:
    return span.tool_name or span.name


def _span_steps(span: RunSpan, depth: int, shown: set[tuple[str, int]]) -> list[Step]:
    if span.kind == "agent":
        users = [m["content"] for m in span.messages if m.get("role") == "user"]
        return [Step("agent", depth, users[-1] if users else "", span.agent_name or span.name)]
    if span.kind == "tool":
        return [Step("tool_call", depth, span.tool_arguments or "", _tool(span), span.span_id)]
    if span.kind != "llm":
        return []
    names = tuple(call["name"] for call in span.tool_calls)
    steps = [Step("model", depth, span.output or "", calls=names)]
    steps.extend(Step("tool_call", depth, call.get("arguments", ""), call["name"],
                      f"{span.span_id}:{index}")
                 for index, call in enumerate(span.tool_calls)
                 if (span.span_id, index) not in shown)
    return steps


def _normal(arguments: str | None) -> str:
    text = (arguments or "").strip()
    try:
        return orjson.dumps(orjson.loads(text), option=orjson.OPT_SORT_KEYS).decode()
    except (orjson.JSONDecodeError, TypeError):
        return text


def _calls_shown_by_tools(spans: Sequence[RunSpan]) -> set[tuple[str, int]]:
    """The (LLM span id, call index) of the calls a model asked for that a tool span
    shows too: the tool span is shown (it has the result), the request is not. Tool
    spans match requests by call id first, then by name and arguments, then by name
    alone (each starting no earlier than the model turn); each tool span matches once."""
    tools = sorted((s for s in spans if s.kind == "tool"), key=_start)
    requests = [(llm, index, call)
                for llm in sorted((s for s in spans if s.kind == "llm"), key=_start)
                for index, call in enumerate(llm.tool_calls)]
    used: set[str] = set()
    shown: set[tuple[str, int]] = set()
    for matches in (_by_call_id, _by_name_and_arguments, _by_name):
        for llm, index, call in requests:
            if (llm.span_id, index) in shown:
                continue
            match = next((t for t in tools if t.span_id not in used and matches(t, llm, call)),
                         None)
            if match is not None:
                used.add(match.span_id)
                shown.add((llm.span_id, index))
    return shown


def _by_call_id(tool: RunSpan, llm: RunSpan, call: Mapping[str, str]) -> bool:
    return bool(call.get("id")) and tool.tool_call_id == call.get("id")


def _by_name(tool: RunSpan, llm: RunSpan, call: Mapping[str, str]) -> bool:
    return tool.start_ns >= llm.start_ns and _tool(tool) == call["name"]


def _by_name_and_arguments(tool: RunSpan, llm: RunSpan, call: Mapping[str, str]) -> bool:
    return _by_name(tool, llm, call) and \
        _normal(tool.tool_arguments) == _normal(call.get("arguments"))


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


def _message_calls(message: Mapping[str, Any]) -> list[tuple[str, str, str]]:
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
    calls = _message_calls(message)
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
