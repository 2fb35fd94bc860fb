"""A session judgment on the review page: its ``session`` block, then the transcript
the judge read (the ``session`` field), one block per turn: the user's message, an
agent run's steps (drawn as :mod:`.run_view` draws a run), the answer. The turns
whose own verdict was UNSAFE or unsure (the block's ``flagged_turns``) are marked,
in words too; a line saying turns were cut stands where they were::

    view = render_session(item, [("multi_turn_jailbreak", "step two: the script")])
    if view is not None:          # None: the item's session is no rendered transcript
        html, found = view        # found: the evidence spans present in the text
    blocks = parse_transcript(text)   # [TurnBlock(1, …), Part("cut", …), TurnBlock(9, …)]

The turns are read back from the text with the fixed marks the transcript is
written with (:func:`guardrail.assembly.sessions.render_transcript`): ``<<<TURN n USER>>>``,
``<<<TURN n AGENT STEPS>>>``, ``<<<TURN n ASSISTANT>>>``, ``<<<END TURN n>>>``.
Untrusted text cannot hold them (``<<<`` is neutralised), and a line that looks
like one counts only when it carries the number the next mark must carry (the next
turn; after ``[… N turns cut …]``, N further on) and, inside a turn, comes in the
order the renderer writes; anything else is text of the turn it stands in. The
text exactly as judged is one click away, every piece HTML-escaped.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from html import escape
from typing import Any

from .marks import Mark, find_marks, show_range
from .records import ReviewItem
from .run_view import (Part, judged_section, parse_trajectory, render_part, summary_block,
                       text_lines)

__all__ = ["TurnBlock", "parse_transcript", "render_session", "flagged_turns"]

_MARK = re.compile(r"<<<(END )?TURN (\d+)(?: (USER|AGENT STEPS|ASSISTANT))?>>>")
_TURNS_CUT = re.compile(r"\[… (\d+) turns? cut …\]")
#: A turn's sections, in the order the renderer writes them.
_SECTIONS = {"USER": "user", "AGENT STEPS": "steps", "ASSISTANT": "answer"}
_ORDER = ("user", "steps", "answer")
_TAGS = {"user": "user", "answer": "assistant"}
_STATUS_TONES = {"open": "ok", "closed": "ok", "truncated": "warn"}
_FLAGGED = "flagged: its own verdict was UNSAFE or unsure"


@dataclass
class TurnBlock:
    """One turn of a transcript: ``text[start:end]`` holds it, marks included;
    each section is a :class:`Part` of kind user, steps or answer."""

    number: int
    start: int
    end: int
    sections: list[Part] = field(default_factory=list)
    #: Its end mark was read (False: the text stops inside the turn).
    closed: bool = False


def _mark(line: str) -> tuple[bool, int, str | None] | None:
    """``(is_end, number, section)`` of a mark line, or None for any other line."""
    found = _MARK.fullmatch(line)
    if found is None:
        return None
    return bool(found.group(1)), int(found.group(2)), _SECTIONS.get(found.group(3) or "")


def _continues(turn: TurnBlock, mark: tuple[bool, int, str | None] | None) -> bool:
    """Does a line with ``mark`` (None: no mark) belong to ``turn``'s text? A mark
    counts only with the turn's number and a section after the last one."""
    if mark is None:
        return True
    is_end, number, section = mark
    if number != turn.number:
        return True
    if is_end:
        return False
    last = turn.sections[-1].kind if turn.sections else "text"  # an empty turn stays so
    return section is None or last not in _ORDER or _ORDER.index(section) <= _ORDER.index(last)


def parse_transcript(text: str) -> list[TurnBlock | Part] | None:
    """The turns of a rendered transcript, and a ``cut`` :class:`Part` where turns
    were cut (``text`` parts for lines outside every turn, which the renderer never
    writes); None when ``text`` does not open with turn 1 (a producer's own text)."""
    blocks: list[TurnBlock | Part] = []
    want = 1  # the number the next turn's mark must carry
    turn: TurnBlock | None = None
    for start, end in text_lines(text, 0, len(text)):
        line = text[start:end]
        mark = _mark(line)
        cut = _TURNS_CUT.fullmatch(line)
        if turn is not None:
            turn = _within(turn, mark, start, end)
        elif mark is not None and not mark[0] and mark[1] == want:
            turn = TurnBlock(want, start, end)
            if mark[2] is not None:
                turn.sections.append(Part(mark[2], end + 1, end + 1))
            blocks.append(turn)
            want += 1
        elif cut and blocks and isinstance(blocks[-1], TurnBlock):
            want += int(cut.group(1))
            blocks.append(Part("cut", start, end))
        elif blocks and isinstance(blocks[-1], Part) and blocks[-1].kind == "text":
            blocks[-1].end = end
        else:
            blocks.append(Part("text", start, end))
    if not blocks or not isinstance(blocks[0], TurnBlock) or blocks[0].start != 0:
        return None
    return blocks


def _within(turn: TurnBlock, mark: tuple[bool, int, str | None] | None, start: int,
            end: int) -> TurnBlock | None:
    """Read the line ``start:end`` of an open turn: the turn, or None once it ends."""
    if _continues(turn, mark):
        if not turn.sections:  # text in a turn marked empty: shown, as text
            turn.sections.append(Part("text", start, end))
        turn.sections[-1].end = end
    elif mark is not None and mark[0]:
        turn.closed = True
    elif mark is not None:
        turn.sections.append(Part(str(mark[2]), end + 1, end + 1))
    turn.end = end
    return None if turn.closed else turn


def flagged_turns(session: Mapping[str, Any] | None) -> set[int]:
    """The turn numbers the session block says were flagged (junk left out)."""
    numbers = (session or {}).get("flagged_turns") or []
    return {n for n in numbers if isinstance(n, int)} if isinstance(numbers, list) else set()


def _session_block(session: Mapping[str, Any]) -> str:
    """The session's summary: id, turns, traces, status, trigger, times, flagged turns."""
    status = str(session.get("status") or "")
    flagged = ", ".join(map(str, sorted(flagged_turns(session))))
    rows = [("session", session.get("id")), ("turns", session.get("turns")),
            ("traces", session.get("traces")), ("status", status),
            ("trigger", session.get("trigger")), ("first turn", session.get("first_turn_at")),
            ("last turn", session.get("last_turn_at")), ("flagged turns", flagged)]
    tones = {"status": _STATUS_TONES[status]} if status in _STATUS_TONES else {}
    if flagged:
        tones["flagged turns"] = "warn"
    return summary_block(rows, tones)


def _steps(text: str, section: Part, turn: TurnBlock, marks: list[Mark]) -> str:
    """An agent run's steps within a turn, as a run's; its request and final answer
    left out when they only repeat the turn's user message and answer."""
    said = {s.kind: text[s.start:s.end] for s in turn.sections if s.kind != "steps"}
    parts = parse_trajectory(text[section.start:section.end], request=said.get("user"),
                             final=said.get("answer"))
    if parts is None:  # not a rendered run: its text as one block
        return render_part(text, Part("text", section.start, section.end), marks)
    shown = []
    for part in parts:
        part.start, part.end = part.start + section.start, part.end + section.start
        if part.kind not in ("request", "final") or \
                text[part.start:part.end] not in said.values():
            shown.append(render_part(text, part, marks))
    return (f'<div class="turn-steps"><span class="tag">agent steps</span>'
            f'{"".join(shown)}</div>')


def _turn_head(turn: TurnBlock, flagged: bool, metrics: list[str]) -> tuple[str, str]:
    """``(heading, label)``: what a turn's heading shows, and its name for screen
    readers (the number, flagged, the metrics with evidence in the turn)."""
    notes = [_FLAGGED] if flagged else []
    badges = '<span class="flag">flagged</span>' if flagged else ""
    if metrics:
        notes.append("evidence for " + ", ".join(metrics))
        badges += f'<span class="sub">evidence for {escape(", ".join(metrics))}</span>'
    if not turn.closed:
        badges += '<span class="sub">the text stops inside this turn</span>'
    label = escape(f"Turn {turn.number}" + "".join(f"; {note}" for note in notes))
    return f'<div class="turn-head">turn {turn.number}{badges}</div>', label


def _turn(text: str, turn: TurnBlock, marks: list[Mark], flagged: bool) -> str:
    """One turn's block: its heading, then its sections."""
    metrics = sorted({m for lo, hi, names in marks if lo < turn.end and hi > turn.start
                      for m in names})
    head, label = _turn_head(turn, flagged, metrics)
    body = []
    for section in turn.sections:
        if section.kind == "steps":
            body.append(_steps(text, section, turn, marks))
        elif section.kind == "text":
            body.append(render_part(text, section, marks))
        else:
            shown = show_range(text, marks, section.start, max(section.end, section.start))
            body.append(f'<div class="step {section.kind}"><span class="tag">'
                        f'{_TAGS[section.kind]}</span>{shown}</div>')
    tone = " flagged" if flagged else ""
    return (f'<div class="turn{tone}" role="group" aria-label="{label}" '
            f'data-turn="{turn.number}">{head}{"".join(body)}</div>')


def _cut(text: str, part: Part, before: int, marks: list[Mark], flagged: set[int]) -> str:
    """The cut marker, which turns it stands for and which of them were flagged."""
    count = _TURNS_CUT.fullmatch(text[part.start:part.end])
    cut = int(count.group(1)) if count else 0
    which = f"turn {before + 1}" if cut == 1 else f"turns {before + 1}–{before + cut}"
    among = sorted(n for n in flagged if before < n <= before + cut)
    if among:
        which += f" (flagged: {', '.join(map(str, among))})"
    return (f'<div class="step cut" role="note">{show_range(text, marks, part.start, part.end)}'
            f' <span class="sub">{which} left out of the judged text</span></div>')


def render_session(item: ReviewItem,
                   spans: list[tuple[str, str]]) -> tuple[str, set[str]] | None:
    """The session section of ``item``'s page and the evidence ``spans`` found in its
    transcript; None when the item has no transcript in the rendered format."""
    text = item.fields.get("session")
    blocks = parse_transcript(text) if text else None
    if text is None or blocks is None:
        return None
    marks, found = find_marks(text, spans)
    flagged = flagged_turns(item.session)
    shown, last = [], 0
    for block in blocks:
        if isinstance(block, TurnBlock):
            shown.append(_turn(text, block, marks, block.number in flagged))
            last = block.number
        elif block.kind == "cut":
            shown.append(_cut(text, block, last, marks, flagged))
        else:
            shown.append(render_part(text, block, marks))
    body = (f'{_session_block(item.session or {})}'
            f'<div class="steps turns" dir="auto">{"".join(shown)}</div>')
    return judged_section("session", "session", "conversation", text, spans, body), found
