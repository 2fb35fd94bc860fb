"""Sessions as one kind of whole for the generic assembler
(:class:`guardrail.assembly.base.Gathering`): turns gathered by conversation id,
judged while the conversation goes on and once more when it goes quiet::

    gathering = SessionGathering(settings.sessions, telemetry)
    assembler = Assembler(gathering, table, topic)      # guardrail.agents.assembly

After a judgment a session keeps its turns: it is ``open`` again, or ``closed``
when the judgment was its ``idle`` one (a later turn resumes it). A closed
session is forgotten after ``forget_after_ms``.
"""

from __future__ import annotations

from typing import Any

from ..base import SESSION_TURN_KIND
from ..._event_time import utc_iso
from .book import SessionBook, SessionHeader, SessionLimits, due, recount, stands_in
from .settings import SessionSettings
from .transcript import ordered_turns
from .turns import Turn

__all__ = ["SessionGathering", "session_block"]


class SessionGathering:
    """The session rules: turns in, a judged case per trigger out."""

    noun = "session"
    kind_header, item_kind = SESSION_TURN_KIND
    item_prefix = "t"

    def __init__(self, sessions: SessionSettings, telemetry: Any, *,
                 judge_flagged_first_turn: bool = False) -> None:
        self.sessions, self.telemetry = sessions, telemetry
        self.limits = SessionLimits(judge_every=sessions.session_judge_every,
                                    idle_seconds=sessions.session_idle_seconds,
                                    max_turns=sessions.session_max_turns,
                                    max_bytes=sessions.session_max_bytes,
                                    judge_flagged_first_turn=judge_flagged_first_turn)
        self.book = SessionBook(self.limits)
        self.memory_bytes = sessions.session_memory_bytes
        self.forget_after_ms = self.limits.forget_after_ms

    def new_header(self, key: str, *, now_ms: int) -> SessionHeader:
        return SessionHeader.new(key, now_ms=now_ms)

    def header_from_bytes(self, raw: bytes) -> SessionHeader:
        return SessionHeader.from_bytes(raw)

    def read_item(self, raw: bytes) -> Turn:
        return Turn.from_bytes(raw)

    def item_id(self, item: Turn) -> str:
        return item.turn_id

    def add(self, header: SessionHeader, item: Turn, *, now_ms: int, size: int) -> str:
        return self.book.add(header, item, now_ms=now_ms, size=size)

    def due(self, header: SessionHeader, *, now_ms: int) -> str | None:
        return due(header, now_ms=now_ms, limits=self.limits)

    def forced_status(self, header: SessionHeader) -> str:
        return "idle"  # memory ran short: judged as it stands, and closed

    def start(self, header: SessionHeader) -> None:
        """A judgment starts: it covers the turns so far and the flags they raised
        (a turn during the judgment raises them again)."""
        header.judging_turns, header.flagged, header.resumed = header.turns, False, False

    def case(self, key: str, header: SessionHeader, items: list[Turn]) -> dict[str, Any]:
        from .case import session_case  # the transcript and the judged fields

        turns = ordered_turns(items)
        case = session_case(turns, session_id=key, judged_turns=header.judging_turns,
                            max_chars=self.sessions.session_max_chars)
        latest = turns[-1] if turns else None
        if latest is not None:
            case["metadata"] = dict(latest.metadata)
            case["timestamp"] = latest.started_ms
            if latest.trace_id and latest.span_id:
                case["trace"] = {"trace_id": latest.trace_id, "span_id": latest.span_id}
        case["session_block"] = session_block(key, header, turns)
        if (stands_in(header) and latest is not None and latest.verdicts
                and not (self.limits.judge_flagged_first_turn and latest.flagged)):
            # One turn: its verdict is counted for the session, no judge call
            # (a turn without verdicts, from an older release, is judged as before).
            case["session_block"]["turn_verdicts"] = dict(latest.verdicts)
        return case

    def finish(self, key: str, header: SessionHeader, *, now_ms: int) -> list[str]:
        header.judged_turns = header.judging_turns
        header.judgments += 1
        if header.status == "idle":  # published as closed and counted in the windows
            header.state, header.closed_ms = "closed", now_ms
            if header.turns > header.judged_turns:
                # A turn came during this closing judgment: the session resumes, as
                # after a turn that came later (a second "idle" would count it twice).
                header.state, header.resumed, header.closed_ms = "open", True, None
        else:  # turns that came during the judgment make it due again as they say
            header.state = "open"
        header.tick = None
        return []

    def durable(self, header: SessionHeader) -> bytes:
        """All of it: a turn moves the session's turn count and triggers, which
        its table's turns cannot tell after evictions, so every change is written."""
        return header.to_bytes()

    def recount(self, header: SessionHeader, ids: dict[str, int], *, now_ms: int) -> None:
        recount(header, ids)  # the header was written with its turns: its times hold

    def count_item(self, outcome: str) -> None:
        self.telemetry.session_turns.labels(outcome=outcome).inc()

    def count_whole(self, outcome: str) -> None:
        self.telemetry.session_judgments.labels(trigger=outcome).inc()

    def say_late(self, key: str, header: SessionHeader) -> None:
        """Sessions take every turn (a closed one resumes): nothing is late."""

    def update_gauges(self) -> None:
        self.telemetry.open_sessions.set(self.book.open_count)
        self.telemetry.open_session_turns.set(self.book.items_held)
        self.telemetry.open_session_bytes.set(self.book.bytes_held)


def session_block(session_id: str, header: SessionHeader, turns: list[Turn]) -> dict[str, Any]:
    """The ``session`` block of a session judgment's result."""
    trigger = header.status or "idle"
    if header.dropped:
        status = "truncated"
    else:
        status = "closed" if trigger == "idle" else "open"
    block: dict[str, Any] = {
        "id": session_id, "turns": header.judging_turns,
        "traces": len({t.trace_id for t in turns if t.trace_id}),
        "status": status, "trigger": trigger}
    if turns:
        block["first_turn_at"] = utc_iso(turns[0].started_ms)
        block["last_turn_at"] = utc_iso(turns[-1].started_ms)
    flagged = [number for number, turn in enumerate(turns, 1) if turn.flagged]
    if flagged:
        block["flagged_turns"] = flagged
    return block
