"""The session assembler: turns of conversations in, session judgments out.

The judging agent (and the run assembler, for agent runs) sends every judged
case that carries a conversation id, after its own judgment, to the internal
topic ``<app_id>-session-turns`` keyed by the session id
(:mod:`guardrail.stream.session_turns`); the generic assembler
(:mod:`.assembly`) keeps each session in the table ``sessions``
(``h/<session>`` its header, ``t/<session>/<turn>`` each turn) with the rules
of :class:`guardrail.assembly.sessions.gathering.SessionGathering`: a turn is added once,
the session is judged every ``session_judge_every`` turns, at once when a turn
was flagged, once more when it goes quiet (closed), and again when it resumes
(records marked by the header ``guardrail-session``: ``turn``, ``tick``, ``done``).
In gate mode with ``gate_session_hold``, a session judged UNSAFE also holds its
later turns (:mod:`.gate_sessions`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..assembly.sessions.gathering import SessionGathering
from ..config.settings import Settings
from ..gate.sessions import held_sessions_topic
from .assembly import register_assembly
from .gate_sessions import HoldingSessionJudge
from .run_assembly import assembled_judge

if TYPE_CHECKING:
    from .runtime import WorkerRuntime

__all__ = ["register", "session_turns_topic", "SESSION_TABLE", "sessions_assembled"]

SESSION_TABLE = "sessions"


def session_turns_topic(app_id: str) -> str:
    """The internal topic of sessions' turns, ticks and done records."""
    return f"{app_id}-session-turns"


def sessions_assembled(settings: Settings) -> bool:
    """Are turns that carry a conversation id gathered into sessions?"""
    return settings.sessions.session_judging


def register(runtime: WorkerRuntime) -> None:
    """Add the session table, the assembling agent and its sweep (``session_judging``)."""
    s = runtime.settings
    holds = s.gate.gate and s.gate.gate_session_hold
    gathering = SessionGathering(s.sessions, runtime.telemetry, judge_flagged_first_turn=holds)
    judge: Any = assembled_judge(runtime, session_turns=False)
    if holds:  # a session judged UNSAFE holds its later turns at the gate
        judge = HoldingSessionJudge(judge, runtime)
    runtime.state["session_assembler"] = register_assembly(
        runtime, gathering, topic_name=session_turns_topic(s.kafka.app_id),
        table_name=SESSION_TABLE, agent_name="guardrail.sessions", judge=judge,
        extra_topics=[held_sessions_topic(s.kafka.app_id)] if holds else [])
