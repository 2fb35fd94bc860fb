"""A session as one judged text, the ``session`` field: its turns in order, each
fenced on its own, for the session rubrics to read::

    transcript = render_transcript(turns, max_chars=24_000)
    print(transcript.text)
    # <<<TURN 1 USER>>>
    # How do I pick a lock?
    # <<<TURN 1 ASSISTANT>>>
    # I can't help with that.
    # <<<END TURN 1>>>
    # <<<TURN 2 USER>>>
    # Summarise my inbox.
    # <<<TURN 2 AGENT STEPS>>>
    # [1] tool call read_inbox({})
    # <<<TOOL RESULT 1: read_inbox>>>
    # …
    # <<<END TOOL RESULT 1>>>
    # <<<TURN 2 ASSISTANT>>>
    # Done.
    # <<<END TURN 2>>>
    transcript.turns_shown, transcript.turns_cut      # (2, 0)

Turns are ordered by their own start time (then turn id), never by arrival; a
turn id seen twice counts once. Every text is untrusted: ``<<<`` / ``>>>`` in it
become look-alikes (:func:`guardrail.judging.trajectory.neutralise`), so no text
can close its turn's fence or open a fake one; an agent run's steps keep only
their own tool-result marks. Inside a fence the text is verbatim (stripped, not
indented), so a judge's evidence quotes are substrings of the transcript.

Prefix-stable: a turn's block depends on that turn alone and nothing comes
before the first turn, so while nothing is cut the transcript of turns 1..k is
a byte-identical prefix of that of turns 1..k+1 (a provider's prompt cache then
pays only for new turns). Past ``max_chars`` the first turn and the latest ones
are kept around a line ``[… N turns cut …]``, the cut moved in steps that free a
quarter of the budget, so the prefix holds between steps too (see ``_cut``);
each text is capped (head and tail around a note) so that the first and the
latest turn always fit.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ...judging.trajectory import FENCE_CLOSE, FENCE_OPEN, capped, neutralise
from .turns import Turn

__all__ = ["Transcript", "render_transcript", "ordered_turns", "MIN_CHARS"]

#: The least budget: the first and the latest turn must fit, however short.
MIN_CHARS = 1000
#: Room a budget keeps for the fence marks of two turns and the cut marker.
_MARKS_ROOM = 600
#: The marks render_trajectory writes around a tool result (its only ``<<<``).
_TOOL_MARK = re.compile(r"<<<(?:END )?TOOL RESULT \d+(?:: [^\n<>]*)?>>>")


@dataclass(frozen=True)
class Transcript:
    """A rendered session: ``text`` shows ``turns_shown`` turns; ``turns_cut``
    turns between the first and the latest ones were left out, as
    ``cut_marker`` (the line in ``text``) says."""

    text: str
    turns_shown: int
    turns_cut: int = 0
    cut_marker: str | None = None

    @property
    def turns(self) -> int:
        """Every turn of the session, shown or cut."""
        return self.turns_shown + self.turns_cut


def ordered_turns(turns: Iterable[Turn]) -> list[Turn]:
    """``turns`` by start time, then turn id; a repeated turn id counts once."""
    seen: set[str] = set()
    ordered = []
    for turn in sorted(turns, key=lambda t: (t.started_ms, t.turn_id)):
        if turn.turn_id not in seen:
            seen.add(turn.turn_id)
            ordered.append(turn)
    return ordered


def render_transcript(turns: Sequence[Turn], *, max_chars: int) -> Transcript:
    """The session's turns as text (see the module's docstring), at most
    ``max_chars`` long (:data:`MIN_CHARS` at the least)."""
    if max_chars < MIN_CHARS:
        raise ValueError(f"max_chars must be at least {MIN_CHARS}, got {max_chars}")
    ordered = ordered_turns(turns)
    if not ordered:
        raise ValueError("a transcript needs at least one turn")
    limit = (max_chars - _MARKS_ROOM) // 6  # 3 texts a turn, the first and the latest turn
    blocks = [_block(number, turn, limit) for number, turn in enumerate(ordered, 1)]
    cut = _cut(blocks, max_chars)
    if not cut:
        return Transcript("\n".join(blocks), turns_shown=len(blocks))
    marker = _marker(cut)
    text = "\n".join([blocks[0], marker, *blocks[1 + cut:]])
    return Transcript(text, turns_shown=len(blocks) - cut, turns_cut=cut, cut_marker=marker)


def _cut(blocks: Sequence[str], max_chars: int) -> int:
    """How many turns after the first to leave out. Replayed turn by turn from
    the start, so it depends on the turns alone: the cut stays where it is while
    the turns after it fit, and moves only when they do not, then far enough
    to free a quarter of the budget. Between two moves the transcripts of
    consecutive judgments still share their prefix through the older one's
    last turn (each move changes the marker and what follows it)."""
    ends = [0]  # ends[i]: characters of blocks[1:i+1], each with its newline
    for block in blocks[1:]:
        ends.append(ends[-1] + len(block) + 1)
    head = len(blocks[0])
    cut = 0
    for shown in range(1, len(blocks)):  # the transcript of blocks[:shown + 1]
        if _size(head, ends, cut, shown) <= max_chars:
            continue
        target = max_chars - max_chars // 4
        cut = max(cut, 1)
        while cut < shown - 1 and _size(head, ends, cut, shown) > target:
            cut += 1
    return cut


def _size(head: int, ends: Sequence[int], cut: int, shown: int) -> int:
    """Length of the first block, the marker (when ``cut``) and blocks cut+1..shown."""
    marker = len(_marker(cut)) + 1 if cut else 0
    return head + marker + ends[shown] - ends[cut]


def _marker(cut: int) -> str:
    return f"[… {cut} turn{'s' if cut != 1 else ''} cut …]"


def _block(number: int, turn: Turn, limit: int) -> str:
    """One turn: each of its texts after a mark numbered by the turn, one end mark."""
    parts = [(role, text.strip()) for role, text in
             (("USER", turn.user), ("AGENT STEPS", turn.steps), ("ASSISTANT", turn.answer))
             if text and text.strip()]
    lines = [f"{FENCE_OPEN}TURN {number}{FENCE_CLOSE}"] if not parts else []
    for role, text in parts:
        safe = _safe_steps(text) if role == "AGENT STEPS" else neutralise(text)
        lines.append(f"{FENCE_OPEN}TURN {number} {role}{FENCE_CLOSE}")
        lines.append(capped(safe, limit))
    lines.append(f"{FENCE_OPEN}END TURN {number}{FENCE_CLOSE}")
    return "\n".join(lines)


def _safe_steps(steps: str) -> str:
    """A run's rendered steps with every fence mark neutralised but its own
    tool-result marks (which can close a tool result, never a turn)."""
    pieces, start = [], 0
    for mark in _TOOL_MARK.finditer(steps):
        pieces.append(neutralise(steps[start:mark.start()]))
        pieces.append(mark.group(0))
        start = mark.end()
    pieces.append(neutralise(steps[start:]))
    return "".join(pieces)
