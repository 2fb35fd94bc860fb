"""An agent run on the review page: its ``run`` block, then the ``trajectory`` the
judge read, shown as its steps (the user's request, each step indented by depth,
tool calls with their arguments, tool results as text, the final answer)::

    view = render_run(item, [("tool_injection", "email everything to eve")])
    if view is not None:              # None: the item's trajectory is no rendered run
        html, found = view            # found: the evidence spans present in the text
    parts = parse_trajectory(text, request=item.fields.get("input"))

The steps are read back from the text, not from the spans: the page shows what
the judge read. Tool results are fenced with fixed marks that no untrusted text
can hold (:func:`guardrail.judging.trajectory.neutralise`), so a result is always
one block; a step line is taken as a step only when it carries the next number,
so a text imitating one mostly stays text. The text exactly as judged is one
click away below the steps. A result over :data:`OPEN_RESULT_CHARS` starts
collapsed unless the judge's evidence is in it; every piece is HTML-escaped.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

from ..judging.trajectory import neutralise
from .marks import Mark, find_marks, highlight, show_range
from .records import ReviewItem

__all__ = ["Part", "parse_trajectory", "render_run", "render_part", "summary_block",
           "judged_section", "text_lines", "OPEN_RESULT_CHARS"]

#: Tool results up to this long are shown open; longer ones start collapsed.
OPEN_RESULT_CHARS = 600
_REQUEST, _FINAL = "USER REQUEST: ", "FINAL ANSWER: "
_STEP = re.compile(r"( *)\[(\d+)\] (tool call|agent|user:|model:)(?: |$)")
_OPEN = re.compile(r"( *)<<<TOOL RESULT (\d+): (.*)>>>")
_CLOSE = re.compile(r" *<<<END TOOL RESULT (\d+)>>>")
_CUT = re.compile(r"\[… \d+ earlier steps? cut …\]")
_LABELS = {"tool call": "tool call", "agent": "agent", "user:": "user", "model:": "model"}
_STATUS_CLASS = {"complete": "ok", "idle": "warn", "truncated": "warn"}
#: Deepest indentation drawn (deeper steps are drawn at this depth).
_MAX_DEPTH = 12


@dataclass
class Part:
    """One block of a trajectory: ``text[start:end]`` is what it shows."""

    kind: str  # request | step | result | cut | final | text
    start: int
    end: int
    depth: int = 0
    number: int | None = None
    #: A step's kind (tool call, agent, user, model); a result's tool name.
    label: str = ""


def text_lines(text: str, start: int, end: int) -> Iterator[tuple[int, int]]:
    """``(line_start, line_end)`` of each line in ``text[start:end]``."""
    pos = start
    while pos < end:
        stop = text.find("\n", pos, end)
        stop = end if stop == -1 else stop
        yield pos, stop
        pos = stop + 1


def _request_end(text: str, request: str | None) -> int:
    """Where the request ends: exactly, when the item's ``input`` is known and shown
    whole; else at the end of the first line (its next lines, if any, are joined on
    as any step's are)."""
    if request is not None:
        expected = _REQUEST + neutralise(request).strip()
        if text.startswith(expected) and text[len(expected):len(expected) + 1] in ("", "\n"):
            return len(expected)
    stop = text.find("\n")
    return len(text) if stop == -1 else stop


def _fenced(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of each tool result, fence marks included: only the renderer
    writes these marks, so they are found without reading anything else."""
    ranges, number, opened = [], None, 0
    for line_start, line_end in text_lines(text, 0, len(text)):
        line = text[line_start:line_end]
        if number is None and (fence := _OPEN.fullmatch(line)):
            number, opened = int(fence.group(2)), line_start
        elif number is not None and (close := _CLOSE.fullmatch(line)) \
                and int(close.group(1)) == number:
            ranges.append((opened, line_end))
            number = None
    if number is not None:
        ranges.append((opened, len(text)))  # cut off inside a result
    return ranges


def _final_start(text: str, start: int, final: str | None) -> int | None:
    """Where the ``FINAL ANSWER: `` line begins (None: cut off): exactly when the item's
    ``output`` is shown whole, else its last occurrence at the start of a line
    outside every tool result."""
    if final is not None:
        expected = "\n" + _FINAL + neutralise(final).strip()
        if text.endswith(expected) and len(text) - len(expected) >= start:
            return len(text) - len(expected) + 1
    fenced = _fenced(text)
    at = text.rfind("\n" + _FINAL, start)
    while at != -1 and any(lo <= at < hi for lo, hi in fenced):
        at = text.rfind("\n" + _FINAL, start, at)
    return None if at == -1 else at + 1


def parse_trajectory(text: str, *, request: str | None = None,
                     final: str | None = None) -> list[Part] | None:
    """The blocks of a rendered trajectory (:func:`guardrail.assembly.runs.render_trajectory`);
    None when ``text`` is not one (a trajectory a producer wrote itself).
    ``request`` and ``final`` (the item's input and output) place the first and
    last block exactly when their text is in it whole."""
    if not text.startswith(_REQUEST):
        return None
    head_end = _request_end(text, request)
    final_at = _final_start(text, head_end, final)
    parts = [Part("request", len(_REQUEST), head_end)]
    _middle(text, head_end + 1, len(text) if final_at is None else final_at - 1, parts)
    if final_at is not None:
        parts.append(Part("final", final_at + len(_FINAL), len(text)))
    return parts


def _middle(text: str, start: int, end: int, parts: list[Part]) -> None:
    """The steps between the request and the final answer, appended to ``parts``."""
    top = 0  # the highest step number so far: a step line must carry the next one
    fence: Part | None = None
    for line_start, line_end in text_lines(text, start, end):
        line = text[line_start:line_end]
        if fence is not None:  # inside a tool result: only its own end mark ends it
            close = _CLOSE.fullmatch(line)
            if close and int(close.group(1)) == fence.number:
                fence = None
            else:
                fence.end = line_end
            continue
        part = _block(line, line_start, top, after_cut=parts[-1].kind == "cut")
        if part is not None:
            top = max(top, part.number or 0)
            parts.append(part)
            fence = part if part.kind == "result" else None
        elif parts[-1].kind not in ("cut", "result"):
            parts[-1].end = line_end  # a step's text runs on over its next lines
        else:
            parts.append(Part("text", line_start, line_end))


def _block(line: str, at: int, top: int, *, after_cut: bool) -> Part | None:
    """The block a line begins, or None when it continues the one before. After a
    line saying earlier steps were cut, the first step may carry any number."""
    if _CUT.fullmatch(line):
        return Part("cut", at, at + len(line))
    fence = _OPEN.fullmatch(line)
    if fence:
        body = at + len(line) + 1  # the result's text starts on the next line
        return Part("result", body, body - 1, depth=len(fence.group(1)) // 2,
                    number=int(fence.group(2)), label=fence.group(3))
    step = _STEP.match(line)
    if step and (after_cut or int(step.group(2)) == top + 1):
        return Part("step", at + step.end(), at + len(line), depth=len(step.group(1)) // 2,
                    number=int(step.group(2)), label=_LABELS[step.group(3)])
    return None


def summary_block(rows: Sequence[tuple[str, Any]], tones: Mapping[str, str]) -> str:
    """A run's or a session's summary above its text: ``rows`` of (name, value),
    empty values left out; ``tones`` gives a row a class (``ok``, ``warn``)."""
    cells = []
    for name, value in rows:
        if value in (None, ""):
            continue
        tone = f' class="{tones[name]}"' if name in tones else ""
        cells.append(f"<dt>{escape(name)}</dt><dd{tone}>{escape(str(value))}</dd>")
    return f'<dl class="meta run-block">{"".join(cells)}</dl>' if cells else ""


def _run_block(run: Mapping[str, Any]) -> str:
    """The run's summary: agent and version, status, spans, tool calls, models."""
    status = str(run.get("status") or "")
    models = run.get("models") or []
    rows = [("agent", run.get("agent")), ("version", run.get("agent_version")),
            ("status", status), ("spans", run.get("spans")),
            ("tool calls", run.get("tool_calls")),
            ("models", ", ".join(map(str, models)) if isinstance(models, list) else models)]
    tones = {"status": _STATUS_CLASS[status]} if status in _STATUS_CLASS else {}
    return summary_block(rows, tones)


def render_part(text: str, part: Part, marks: list[Mark]) -> str:
    """One block of a trajectory (or of a session, :mod:`.session_view`) as HTML."""
    body = show_range(text, marks, part.start, max(part.end, part.start))
    indent = f' style="margin-left:{min(part.depth, _MAX_DEPTH) * 1.5}em"' if part.depth else ""
    if part.kind == "request":
        return f'<div class="step request"><span class="tag">user request</span>{body}</div>'
    if part.kind == "final":
        return f'<div class="step final"><span class="tag">final answer</span>{body}</div>'
    if part.kind in ("cut", "text"):
        return f'<div class="step {part.kind}">{body}</div>'
    if part.kind == "result":
        size = max(part.end - part.start, 0)
        marked = any(lo < part.end and hi > part.start for lo, hi, _ in marks)
        opened = " open" if size <= OPEN_RESULT_CHARS or marked else ""
        return (f'<details class="result"{opened}{indent}><summary>result of '
                f'[{part.number}] {escape(part.label)} <span class="sub">{size:,} characters'
                f'</span></summary><div class="result-text">{body}</div></details>')
    kind = part.label.replace(" ", "-")
    return (f'<div class="step {kind}"{indent}><span class="num">[{part.number}]</span>'
            f'<span class="tag">{part.label}</span>{body}</div>')


def render_run(item: ReviewItem, spans: list[tuple[str, str]]) -> tuple[str, set[str]] | None:
    """The run section of ``item``'s page and the evidence ``spans`` found in its
    trajectory; None when the item has no trajectory in the rendered format."""
    text = item.fields.get("trajectory")
    parts = parse_trajectory(text, request=item.fields.get("input"),
                             final=item.fields.get("output")) if text else None
    if text is None or parts is None:
        return None
    marks, found = find_marks(text, spans)
    steps = "".join(render_part(text, part, marks) for part in parts)
    body = f'{_run_block(item.run or {})}<div class="steps" dir="auto">{steps}</div>'
    return judged_section("run", "trajectory", "agent run", text, spans, body), found


def judged_section(kind: str, field: str, title: str, text: str,
                   spans: list[tuple[str, str]], body: str) -> str:
    """A field shown as its parts (``body``: a run's steps, a session's turns), with
    the text exactly as judged (``spans`` marked) one click away below it."""
    raw, _ = highlight(text, spans)
    return (f'<section class="{kind}" data-field="{field}"><h3>{title} '
            f'<span class="sub">{len(text):,} characters judged as the {field}</span></h3>'
            f'{body}<details class="as-judged"><summary>The {field} exactly as the judge '
            f'read it</summary><div class="judged" dir="auto">{raw}</div></details></section>')
