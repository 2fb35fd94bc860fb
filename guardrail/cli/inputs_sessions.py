"""The sessions ``guardrail inputs check`` shows: the turns of the records checked
that carry a conversation id (``InputMessage.session_id``, in every input
format; with ``otlp`` and agent runs, each run is one turn), gathered by session
id with the worker's own bookkeeping (a turn once per turn id, the
``session_max_turns`` / ``session_max_bytes`` caps, turns in start-time order),
then each session as the worker judges it when it closes::

    sessions = SessionCollector(settings.sessions, version_label="model_version")
    sessions.add(message, source)          # each valid case, in the order read
    sessions.add_run(view["case"])         # each assembled agent run (inputs_runs)
    for view in sessions.views():
        view["id"], view["turns"], view["traces"]        # 'chat-7', 4, 4
        view["first_turn_at"], view["last_turn_at"]      # ISO-8601, None when unknown
        view["model_versions"], view["turn_ids"]         # ['v1'], ['t1', 't2', …]
        view["case"]["session"]                          # the transcript the judge reads
    click.echo(session_text(view))
    sessions.without_session                             # turns of no conversation

A turn's time is its event time, else the record's Kafka timestamp; a file's
record without either has none (the worker would use the time it was produced),
so its session shows no times and orders such turns by turn id.
"""

from __future__ import annotations

from typing import Any

from ..assembly.sessions.book import SessionBook, SessionHeader, SessionLimits
from ..assembly.sessions.case import session_case
from ..assembly.sessions.gathering import session_block
from ..assembly.sessions.settings import SessionSettings
from ..assembly.sessions.transcript import ordered_turns
from ..assembly.sessions.turns import Turn
from ..stream.envelope import BadInput, InputMessage, Source, message_from_case
from ..stream.session_turns import turn_of
from .inputs_runs import printable

__all__ = ["SessionCollector", "session_text", "sessions_heading"]

#: Turn ids listed per session in the text output (all of them with --json).
_SHOWN_IDS = 12


class SessionCollector:
    """Turns of sessions by session id, in the order first seen."""

    def __init__(self, sessions: SessionSettings, *, version_label: str = "model_version"
                 ) -> None:
        self.settings, self.version_label = sessions, version_label
        self.book = SessionBook(SessionLimits(
            judge_every=sessions.session_judge_every, idle_seconds=sessions.session_idle_seconds,
            max_turns=sessions.session_max_turns, max_bytes=sessions.session_max_bytes))
        self.turns: dict[str, dict[str, Turn]] = {}
        self.untimed: set[str] = set()
        self.duplicates: dict[str, int] = {}
        #: Valid cases (and runs) that carry no conversation id: judged as turns only.
        self.without_session = 0

    def add(self, message: InputMessage, source: Source | None = None) -> None:
        """One decoded case; a session judgment itself (``session`` set) is no turn."""
        if message.session is not None:
            return
        if message.session_id is None:
            self.without_session += 1
            return
        known = next((t for t in (message.event_time_ms, source and source.timestamp_ms)
                      if t is not None and t >= 0), None)
        turn = turn_of(message, None, event_ms=known or 0)
        self._apply(message.session_id, turn, timed=known is not None)

    def add_run(self, case: dict[str, Any]) -> None:
        """An assembled agent run's case (``run_case``): a turn when it names a conversation."""
        message = message_from_case(case, None)
        if not isinstance(message, BadInput):
            self.add(message)

    def _apply(self, session_id: str, turn: Turn, *, timed: bool) -> None:
        header = self.book.headers.setdefault(session_id,
                                              SessionHeader.new(session_id, now_ms=0))
        outcome = self.book.add(header, turn, now_ms=0, size=len(turn.to_bytes()))
        kept = self.turns.setdefault(session_id, {})
        if outcome == "duplicate":
            self.duplicates[session_id] = self.duplicates.get(session_id, 0) + 1
            return
        kept[turn.turn_id] = turn
        if not timed:
            self.untimed.add(session_id)
        for evicted in self.book.evicted:  # past the caps: the oldest after the first
            kept.pop(evicted, None)
        self.book.evicted.clear()

    def views(self) -> list[dict[str, Any]]:
        """Each session as its closing judgment would summarise it (see the module)."""
        return [self._view(key, list(turns.values())) for key, turns in self.turns.items()]

    def _view(self, key: str, kept: list[Turn]) -> dict[str, Any]:
        header = self.book.headers[key]
        header.status, header.judging_turns = "idle", header.turns  # as when it closes
        turns = ordered_turns(kept)
        block = session_block(key, header, turns)
        if key in self.untimed:  # a turn's time is unknown: so are the session's
            for name in ("first_turn_at", "last_turn_at"):
                block.pop(name, None)
        case = session_case(turns, session_id=key, judged_turns=header.turns,
                            max_chars=self.settings.session_max_chars)
        return {"id": key, "turns": header.turns, "traces": block["traces"],
                "first_turn_at": block.get("first_turn_at"),
                "last_turn_at": block.get("last_turn_at"), "status": block["status"],
                "model_versions": _distinct(turns, self.version_label),
                "models": _distinct(turns, "model"), "turn_ids": [t.turn_id for t in turns],
                "dropped_turns": header.dropped,
                "duplicate_turns": self.duplicates.get(key, 0), "case": case}


def _distinct(turns: list[Turn], label: str) -> list[str]:
    """A label's values over the turns, in turn order."""
    return list(dict.fromkeys(t.metadata[label] for t in turns if t.metadata.get(label)))


def sessions_heading(count: int, settings: SessionSettings) -> str:
    """The line above the sessions listed: how the worker judges them."""
    return (f"{count} session(s) from these records (each judged as a whole every "
            f"{settings.session_judge_every} turn(s), at once after a flagged turn, and once "
            f"more when quiet for {settings.session_idle_seconds:g}s):")


def session_text(view: dict[str, Any]) -> str:
    """A session as ``inputs check`` prints it: a summary line, its turns, its transcript."""
    extra = "".join(f", {view[key]} {what}" for key, what in (
        ("dropped_turns", "turns over the caps dropped"),
        ("duplicate_turns", "turns seen twice (kept once)")) if view[key])
    times = (f"first turn {view['first_turn_at']}, last turn {view['last_turn_at']}"
             if view["first_turn_at"] else "no event time (turns ordered by turn id)")
    ids = view["turn_ids"]
    shown = ", ".join(ids[:_SHOWN_IDS]) + (f", … {len(ids) - _SHOWN_IDS} more"
                                           if len(ids) > _SHOWN_IDS else "")
    transcript = view["case"]["session"]
    lines = [f"session {view['id']}: {view['turns']} turn(s) in {view['traces']} trace(s)"
             f"{extra}; {times}",
             f"  closing judgment: case_id={view['case']['case_id']} (status {view['status']})"
             f"  model_versions={','.join(view['model_versions']) or '-'}  "
             f"models={','.join(view['models']) or '-'}",
             f"  turns: {shown}",
             f"  transcript ({len(transcript):,} chars):"]
    lines.extend("    | " + line for line in transcript.split("\n"))
    return "\n".join(printable(line) for line in lines)
