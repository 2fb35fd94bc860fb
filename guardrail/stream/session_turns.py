"""Turns on their way to their session, and sessions in the windows.

A judged case that carries a conversation id is also one turn of its session:
after its own judgment it is sent, keyed by the session id, to the internal
topic the session assembler reads (:mod:`guardrail.agents.session_assembly`)::

    value = turn_record_value(message, verdict, event_ms=1_700_000_000_000)
    turn = turn_of(message, verdict, event_ms=1_700_000_000_000)   # the Turn it holds

A session judgment counts in the windows apart from turns (the group label
``unit=session``), once per session and life: at its closing judgment (trigger
``idle``), with that judgment's verdicts. Judgments while it goes on are
published as results (and alerts on them come from the results), not counted
again, so a rate per unit is a share of conversations, not of judgments.

A session of one turn is not judged again: its closing case carries the turn's
verdicts (``session_block.turn_verdicts``) and :func:`standing_verdicts` gives
them, counted under ``unit=session`` without a judge call and without a result.
"""

from __future__ import annotations

from ..assembly.base import TURN_HEADERS
from ..judging.models import RedteamMetrics
from ..assembly.sessions.turns import Turn
from .envelope import InputMessage
from .events import UNIT_LABEL

__all__ = ["turn_of", "turn_record_value", "TURN_HEADERS", "UNIT_LABEL", "counts_in_windows",
           "window_labels", "message_unit", "standing_verdicts"]


def turn_of(message: InputMessage, verdict: RedteamMetrics | None, *, event_ms: int) -> Turn:
    """The turn a judged (or unsampled: ``verdict`` None) case adds to its session
    (``guardrail inputs check`` makes the same turns, unjudged)."""
    case = message.case
    flagged = tuple(m.name for m in verdict.metrics if m.unsafe or m.unsure) if verdict else ()
    verdicts = {m.name: "error" if m.error else ("unsafe" if m.unsafe else "safe")
                for m in verdict.metrics} if verdict else {}
    trace = message.trace or {}
    return Turn(turn_id=case.case_id or "", started_ms=event_ms, user=case.input or "",
                answer=case.output or "", steps=case.trajectory, flagged=bool(flagged),
                flagged_metrics=flagged, verdicts=verdicts, trace_id=trace.get("trace_id"),
                span_id=trace.get("span_id"), metadata=dict(message.metadata))


def turn_record_value(message: InputMessage, verdict: RedteamMetrics | None, *,
                      event_ms: int) -> bytes:
    """:func:`turn_of` as the value of a session-turns record."""
    return turn_of(message, verdict, event_ms=event_ms).to_bytes()


def counts_in_windows(message: InputMessage) -> bool:
    """Do this case's verdicts count in the windows? Every turn's do; a session
    judgment's only when it closes the session."""
    return message.session is None or message.session.get("trigger") == "idle"


def standing_verdicts(message: InputMessage) -> list[tuple[str, str, tuple[str, ...]]] | None:
    """``(metric, status, evidence)`` of the one turn that stands for its session
    (counted, not judged); None for a case to judge."""
    found = (message.session or {}).get("turn_verdicts")
    if not isinstance(found, dict) or not found:
        return None
    return [(str(metric), status if status in ("safe", "unsafe", "error") else "error", ())
            for metric, status in found.items()]


def message_unit(message: InputMessage) -> str:
    """What a judged case is: a ``session`` judgment, or a ``turn`` (an answer, an
    agent run); the ``unit`` of its window cells and Prometheus series."""
    return "turn" if message.session is None else "session"


def window_labels(message: InputMessage, labels: dict[str, str]) -> dict[str, str]:
    """A case's group labels, with ``unit=session`` for a session judgment (a
    turn's cells keep the keys they always had)."""
    unit = message_unit(message)
    return labels if unit == "turn" else {**labels, UNIT_LABEL: unit}
