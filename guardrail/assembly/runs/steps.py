"""An agent run's steps from its spans: the model's turns, tool calls with their
arguments, tool results, sub-agents nested under whoever invoked them::

    steps = steps_from_spans(run_spans, root_id="00f067aa0ba902b7")

The steps are :class:`guardrail.judging.steps.Step` s, as raw chat messages give
them (:func:`~guardrail.judging.steps.steps_from_messages`); a tool call and its
result share a ``ref`` (the tool span's id), so the rendering
(:mod:`guardrail.judging.trajectory`) numbers the result as its call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import orjson

from ...judging.steps import Step, StepKind, has_tool_activity, steps_from_messages
from .spans import RunSpan

__all__ = ["Step", "StepKind", "steps_from_spans", "steps_from_messages", "has_tool_activity"]

_NESTING = ("agent", "tool")  # the kinds whose children are shown indented under them


# -- from spans -----------------------------------------------------------------------------

def _start(span: RunSpan) -> tuple[int, int, str]:
    return span.start_ns, span.end_ns, span.span_id


def steps_from_spans(spans: Sequence[RunSpan], root_id: str | None) -> list[Step]:
    """The run's steps, depth-first from the root, siblings by start time. A span whose
    parent is not in the run is shown under the root; spans of other kinds (chains,
    event-loop cycles) show nothing themselves but their children."""
    by_id = {s.span_id: s for s in spans}
    by_id = {i: s for i, s in by_id.items() if not _echo(s, by_id)}
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


def _echo(span: RunSpan, by_id: Mapping[str, RunSpan]) -> bool:
    """A model call recorded twice: a span without content under the model call
    span that has it (ADK's legacy ``call_llm`` over its ``generate_content``)."""
    parent = by_id.get(span.parent_id or "")
    return (span.kind == "llm" and parent is not None and parent.kind == "llm"
            and not (span.output or span.messages or span.tool_calls))


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
