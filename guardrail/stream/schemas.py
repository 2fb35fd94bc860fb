"""Typed descriptions of the records the worker writes as plain dicts.

The producers stay as they are (:func:`.envelope.result_record`,
:func:`.envelope.dlq_record`, :func:`.events.encode_bundle`, and the
alerts in :mod:`.alert_schemas`); these models say what each of them writes,
field by field. They forbid unknown keys, so ``tests/reference/test_reference_records.py``,
which validates records of the real producers against them, fails as soon as a
producer writes a key that is not described here. The records reference
(:mod:`guardrail.reference.records`) is generated from them::

    ResultRecord.model_validate_json(value, strict=True)    # a results-topic value
    DlqRecord.model_validate_json(value, strict=True)       # a DLQ value
    JudgmentBundle.model_validate_json(value, strict=True)  # a judgments-topic value

The review and labels topics carry :class:`~guardrail.review.records.ReviewItem`
and :class:`~guardrail.review.records.LabelRecord`, which are models already.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..judging.models import RedteamMetrics
from .envelope import DLQ_MAX_ORIGINAL
from .events import Status

__all__ = ["WireRecord", "SourceCoordinates", "TraceContext", "ResultRecord", "SessionSummary",
           "DlqSource",
           "DlqRecord", "JudgmentRecord", "JudgmentBundle"]


class WireRecord(BaseModel):
    """A record (or part of one) described here: unknown keys are an error, and
    a field with a default may be absent from the record but is never null."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    @model_validator(mode="before")
    @classmethod
    def _absent_not_null(cls, data: Any) -> Any:
        if isinstance(data, dict):
            nulls = [name for name, field in cls.model_fields.items()
                     if not field.is_required() and name in data and data[name] is None]
            if nulls:
                raise ValueError(f"{', '.join(nulls)}: left out, never null, when unknown")
        return data



class SourceCoordinates(WireRecord):
    """Where the input record was read."""

    topic: str
    """The input topic."""
    partition: int
    """The input partition."""
    offset: int
    """The input record's offset."""
    index: int | None = None
    """The case's position inside its record; present only for input formats that
    carry several cases per record (``otlp``)."""


class TraceContext(WireRecord):
    """The trace the judged output belongs to."""

    trace_id: str = Field(pattern=r"^[0-9a-f]{32}$")
    """32 lowercase hex digits."""
    span_id: str = Field(pattern=r"^[0-9a-f]{16}$")
    """16 lowercase hex digits."""


class RunSummary(WireRecord):
    """An agent run judged as one case (``otlp`` input with ``agent_runs``)."""

    agent: str | None = None
    """The agent's name (``gen_ai.agent.name``, OpenInference ``agent.name``,
    OpenLLMetry's entity name); null when no span named it."""
    agent_version: str | None = None
    """``gen_ai.agent.version``, else the resource's ``service.version``."""
    spans: int
    """Spans the run was judged with."""
    tool_calls: int
    """Tool calls in the run."""
    models: list[str]
    """The models the run's model calls used, sorted."""
    status: Literal["complete", "idle", "truncated"]
    """``complete``: judged ``run_settle_seconds`` after its root span arrived;
    ``idle``: judged after ``run_idle_seconds`` without a root (or early, when the
    worker's open runs passed ``run_memory_bytes``); ``truncated``: past
    ``run_max_spans`` / ``run_max_bytes``, judged as far as it goes."""


class SessionSummary(WireRecord):
    """A conversation judged as a whole (its turns carried one conversation id)."""

    id: str
    """The session (conversation) id."""
    turns: int
    """Turns of the session this judgment covers (also the ``#n`` of ``case_id``)."""
    traces: int
    """Distinct traces among the turns the worker held."""
    first_turn_at: str | None = None
    """The first held turn's start time, UTC ISO-8601 with milliseconds."""
    last_turn_at: str | None = None
    """The latest turn's start time, UTC ISO-8601 with milliseconds."""
    flagged_turns: list[int] | None = None
    """The turns (numbered as in the judged transcript, from 1) whose own verdict
    was UNSAFE or unsure; absent when none was."""
    status: Literal["open", "closed", "truncated"]
    """``open``: judged while it goes on; ``closed``: judged once more after
    ``session_idle_seconds`` without a turn (a later turn resumes it);
    ``truncated``: past ``session_max_turns`` / ``session_max_bytes``, its oldest
    turns after the first were dropped."""
    trigger: Literal["every_n", "turn_flagged", "idle", "resumed"]
    """Why it was judged now: ``session_judge_every`` new turns, a new turn's own
    verdict UNSAFE or unsure, quiet for ``session_idle_seconds`` (or early, when
    the worker's sessions passed ``session_memory_bytes``), or a turn after it closed."""


class ResultRecord(RedteamMetrics, WireRecord):
    """A judged case: the spec's ``RedteamMetrics`` (``metrics`` and ``cost``)
    plus the fields that name the case and join it back to its input."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    case_id: str
    """The case's id: its own ``case_id``, else the input's Kafka key (when it is
    UTF-8), else the input's coordinates ``topic/partition/offset`` (``/index``
    inside a many-case record). Also the record's Kafka key."""
    metadata: dict[str, str]
    """The input's ``metadata`` labels, as strings (null labels left out; names
    and values cut to 200 characters)."""
    judge_model: str
    """The configured judge model (``judge_model``). With a cascade the model whose
    verdict stands is ``metrics[].result[0].judge_model``."""
    event_time: str
    """The case's event time, UTC ISO-8601 with milliseconds: its ``timestamp``,
    else the input record's Kafka timestamp, else when it was judged."""
    judged_at: str
    """When the record was built, UTC ISO-8601 with milliseconds."""
    source: SourceCoordinates
    """Where the input was read."""
    key: str | None
    """The input's Kafka key as text; ``b64:`` + base64 when it is not UTF-8 (or
    itself starts with ``b64:``); null when the input had no key."""
    headers: dict[str, str | None]
    """The input's Kafka headers, name → value, encoded as ``key`` is (a name sent
    twice keeps its last value). The record is also sent with the input's
    headers as Kafka headers, so ``traceparent`` propagates."""
    trace: TraceContext | None = None
    """Present when the trace is known: the judged span (``otlp`` input), the
    case's own ``trace``, or the input's W3C ``traceparent`` header. For an agent
    run: its root span."""
    run: RunSummary | None = None
    """Present when the case is a whole agent run (then ``case_id`` is
    ``<trace_id>:<root span id>``)."""
    session: SessionSummary | None = None
    """Present when the case is a whole session (then ``case_id`` is
    ``<session id>#<turns>``; ``metadata`` and ``trace`` are its latest turn's)."""


class DlqSource(WireRecord):
    """Where the refused record was read."""

    topic: str
    """The input topic."""
    partition: int
    """The input partition."""
    offset: int
    """The input record's offset."""
    index: int | None = None
    """The case's position inside a many-case record (``otlp``), when only that
    case was refused; absent when the whole record was."""
    timestamp: int | None
    """The input record's Kafka timestamp (epoch ms), null when unknown."""
    key: str | None
    """The input's Kafka key as plain base64 (kept for readers older than the
    top-level ``key``); null without a key."""


class DlqRecord(WireRecord):
    """An input record, or one case of it, that could not be judged."""

    reason: str
    """Why it was refused (not JSON, no output, too large, a tombstone, an
    invalid field …)."""
    source: DlqSource
    """Where it was read."""
    key: str | None
    """The input's Kafka key, encoded as in result records; null without a key."""
    headers: dict[str, str | None]
    """The input's Kafka headers, encoded as in result records."""
    size: int
    """Size of the original value in bytes (0 for a tombstone)."""
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    """SHA-256 of the original value, hex."""
    failed_at: str
    """When it was refused, UTC ISO-8601 with milliseconds."""
    value_base64: str | None = Field(default=None, description=(
        f"The original value, base64; present when it is at most {DLQ_MAX_ORIGINAL} "
        "bytes, else ``value_excerpt`` is."))
    value_excerpt: str | None = Field(default=None, description=(
        f"Only for values over {DLQ_MAX_ORIGINAL} bytes: their first 2048 bytes "
        "as text (undecodable bytes replaced)."))

    @model_validator(mode="after")
    def _one_value(self) -> DlqRecord:
        if (self.value_base64 is None) == (self.value_excerpt is None):
            raise ValueError("exactly one of value_base64 and value_excerpt is present")
        return self


class JudgmentRecord(WireRecord):
    """One metric's verdict on one case, as the window counter reads it."""

    kind: Literal["judgment"]
    """The record kind; a reader skips (and counts) kinds it does not know."""
    schema_version: Literal[1]
    """Raised when a reader of this version could misread a record; a reader
    skips (and counts) newer versions. Records without ``kind`` and
    ``schema_version`` (older workers) are read as version 1 judgments."""
    metric: str
    """The rubric metric's name."""
    group: dict[str, str]
    """The case's alerting group: each of ``group_labels`` → the case's metadata
    value, ``-`` where it has none."""
    table_key: str
    """``metric|label=value,…``: the window-table key, redundant with ``metric`` and
    ``group`` (a reader refuses a record where they disagree)."""
    status: Status
    """The verdict; ``not_sampled``: seen but not judged (sampling)."""
    case_id: str | None
    """The judged case's id."""
    event_time_ms: int
    """The case's event time, epoch ms (also the record's Kafka timestamp)."""
    evidence_spans: list[str]
    """Up to three spans quoted by an ``unsafe`` verdict; empty otherwise."""
    source: SourceCoordinates | None
    """The input's coordinates (de-duplication of redelivered events)."""
    origin: str
    """``live``, or ``replay-<id>`` for the events of one replay run."""


class JudgmentBundle(WireRecord):
    """The judgment events of one partition key and one window, from one batch
    of the judging agent, in input order: one record where there were one per
    event. (A single :class:`JudgmentRecord` as the whole value, as workers of
    earlier releases wrote it, is read too.)"""

    kind: Literal["judgments"]
    """The record kind; a reader that does not know it skips (and counts) the record."""
    schema_version: Literal[1]
    """As in the events: raised when a reader of this version could misread it."""
    events: list[JudgmentRecord]
    """The events, oldest input position first (the window counter's
    de-duplication relies on this order)."""
