"""The ``sessions`` settings group: conversations judged as a whole (flat names
``session_judging``, ``session_judge_every``, ``session_idle_seconds``,
``session_max_turns``, ``session_max_bytes``, ``session_memory_bytes``,
``session_max_chars``, ``session_association_keys``); part of
:class:`guardrail.config.settings.Settings`, kept beside the session code it configures."""

from __future__ import annotations

from pydantic import BaseModel, Field, field_validator

from ..._group_config import GROUP_CONFIG

__all__ = ["SessionSettings"]


class SessionSettings(BaseModel):
    """How turns that carry a conversation id become one session, when the session
    is judged, and how much of it the judge reads."""

    model_config = GROUP_CONFIG

    session_judging: bool = True
    """Gather the turns (and agent runs) that carry a conversation id into sessions,
    each judged as a whole on the session rubrics besides every turn on its own.
    Off: turns are judged on their own only."""
    session_judge_every: int = Field(default=3, ge=1)
    """Judge an open session again after this many new turns (and at once when a
    turn's own verdict is UNSAFE or unsure)."""
    session_idle_seconds: float = Field(default=1800.0, gt=0)
    """Seconds without a new turn after which a session is judged once more and
    marked ``closed``; a later turn resumes it, judged again."""
    session_max_turns: int = Field(default=200, ge=2)
    """Most turns kept of one session; past it the oldest turns after the first are
    dropped and the session is marked ``truncated``."""
    session_max_bytes: int = Field(default=2_000_000, ge=10_000)
    """Most bytes of turns kept of one session; past it, as ``session_max_turns``."""
    session_memory_bytes: int = Field(default=512_000_000, ge=1_000_000)
    """Most bytes of open sessions one worker holds; past it the sessions quiet the
    longest are judged early and closed, so memory stays bounded whatever the traffic."""
    session_max_chars: int = Field(default=24_000, ge=1000)
    """Longest transcript the judge reads, in characters: the first turn and the
    latest ones are kept, with a marker saying how many turns between were cut."""
    session_association_keys: tuple[str, ...] = ("session_id", "conversation_id", "sessionId",
                                                 "conversationId")
    """Keys of an app's trace metadata read as a conversation id, in order, under each
    client's prefix: OpenLLMetry's association properties
    (``traceloop.association.properties.<key>``), the Vercel AI SDK's telemetry metadata
    (``ai.telemetry.metadata.<key>``), Langfuse's trace metadata
    (``langfuse.trace.metadata.<key>``) and MLflow's trace tags (``mlflow.traceTag.<key>``)."""

    @field_validator("session_association_keys", mode="before")
    @classmethod
    def _keys_from_text(cls, value: object) -> object:
        if isinstance(value, str):  # the environment's comma-separated form
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value
