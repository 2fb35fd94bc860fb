"""The ``runs`` settings group: agent runs assembled from OTLP spans (flat names
``agent_runs``, ``run_settle_seconds``, ``run_idle_seconds``, ``run_max_spans``,
``run_max_bytes``, ``run_memory_bytes``, ``trajectory_max_chars``,
``tool_result_max_chars``); part of :class:`guardrail.config.settings.Settings`, kept
beside the run assembly it configures."""

from __future__ import annotations

from pydantic import BaseModel, Field, model_validator

from ..._group_config import GROUP_CONFIG

__all__ = ["RunSettings"]


class RunSettings(BaseModel):
    """How spans of one trace become one agent run, when it counts as finished,
    and how much of it the judge reads."""

    model_config = GROUP_CONFIG

    agent_runs: bool = True
    """With ``input_format=otlp``: group the spans of a trace that holds an agent
    span into one run, judged once (``trajectory`` and the final answer) with its
    verdict on the root span. Off: every LLM span is judged on its own. Gate mode
    turns it off unless it is set: a run is judged once complete, after its spans
    went through the gate (as verdict ``NONE``)."""
    run_settle_seconds: float = Field(default=5.0, gt=0)
    """Seconds after a run's root span arrived, with no new span since, before the
    run is judged as ``complete``."""
    run_idle_seconds: float = Field(default=180.0, gt=0)
    """Seconds after a run's last span, when no root span was seen, before the run is
    judged as far as it goes, marked ``idle``."""
    run_max_spans: int = Field(default=1000, ge=2)
    """Most spans kept of one run; later ones are dropped and the run is judged as far
    as it goes, marked ``truncated``."""
    run_max_bytes: int = Field(default=4_000_000, ge=10_000)
    """Most bytes of spans kept of one run; past it, as ``run_max_spans``."""
    run_memory_bytes: int = Field(default=512_000_000, ge=1_000_000)
    """Most bytes of open runs one worker holds; past it the runs quiet the longest
    are judged early, marked ``idle``, so memory stays bounded whatever the traffic."""
    trajectory_max_chars: int = Field(default=16_000, ge=1000)
    """Longest ``trajectory`` the judge reads, in characters: the user's request and
    the latest steps are kept, with a note of how many earlier steps were cut."""
    tool_result_max_chars: int = Field(default=2000, ge=100)
    """Longest tool result (and tool-call arguments) shown in a ``trajectory``, in
    characters; the rest is cut with a note."""

    @model_validator(mode="after")
    def _idle_after_settle(self) -> RunSettings:
        if self.run_idle_seconds < self.run_settle_seconds:
            raise ValueError("run_idle_seconds must be at least run_settle_seconds")
        return self
