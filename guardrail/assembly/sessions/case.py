"""A session as the case the judge reads: the transcript for the rubric judge, the
turns as chat messages for a guard model::

    case = session_case(turns, session_id="conv-42", max_chars=24_000)
    case["case_id"]      # "conv-42#5": the session and how many turns it had when judged
    case["session"]      # the transcript (render_transcript), read by the session rubrics
    case["messages"]     # user and assistant turns in order, the latest answer last
    case["output"], case["input"]    # the latest answer and its user message
    metrics = await evaluator.evaluate(Case.model_validate(case))

A guard reads ``messages`` (:meth:`guardrail.judges.protocols.GuardInput.from_case`):
each turn's user message as a ``user`` turn and its answer as an ``assistant``
turn, so the guard judges the latest answer in the conversation, not as a
prompt. An agent run's steps are in the transcript only. ``messages`` hold the
latest turns within ``max_chars`` (the latest always), ending at the latest answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .transcript import ordered_turns, render_transcript
from .turns import Turn

__all__ = ["session_case"]


def session_case(turns: Sequence[Turn], *, session_id: str, judged_turns: int | None = None,
                 max_chars: int = 24_000) -> dict[str, Any]:
    """The case dict of one session judgment (see the module's docstring).

    ``judged_turns``: how many turns the session had when judged (default: the
    turns given; more when the assembler already dropped some), the case id's
    suffix. ``max_chars``: the transcript's budget (``session_max_chars``)."""
    ordered = ordered_turns(turns)
    if not ordered:
        raise ValueError("a session case needs at least one turn")
    answered = [i for i, turn in enumerate(ordered) if turn.answer.strip()]
    latest = ordered[answered[-1]] if answered else ordered[-1]
    upto = ordered[: answered[-1] + 1] if answered else ordered
    transcript = render_transcript(ordered, max_chars=max_chars)
    return {
        "case_id": f"{session_id}#{judged_turns if judged_turns is not None else len(ordered)}",
        "session_id": session_id,
        "session": transcript.text,
        "messages": _messages(upto, max_chars),
        "output": latest.answer,
        "input": latest.user or None,
    }


def _messages(turns: Sequence[Turn], budget: int) -> list[dict[str, str]]:
    """The latest turns' user and assistant messages within ``budget`` characters
    (the latest turn always), in order."""
    kept: list[list[dict[str, str]]] = []
    used = 0
    for turn in reversed(turns):
        pair = [{"role": role, "content": text} for role, text in
                (("user", turn.user), ("assistant", turn.answer)) if text.strip()]
        size = sum(len(m["content"]) for m in pair)
        if kept and used + size > budget:
            break
        kept.append(pair)
        used += size
    return [message for pair in reversed(kept) for message in pair]
