"""What travels on the review and labels topics, typed on both sides.

A *review item* (review topic, key ``case_id``) is one judged result with what
a reviewer needs: the judged text, and for each metric chosen for review its
rubric, the judge's verdict, violations, evidence and P(UNSAFE), and why and
at which rate it was chosen (the weight that makes agreement estimates
unbiased). A *label* (labels topic, compacted, key ``<case_id>|<metric>``,
the latest wins) is one reviewer's verdict on one metric of one item::

    item = ReviewItem.decode(value)                 # SchemaError on anything else
    label = LabelRecord.from_choice(item, "toxicity", "disagree_safe", reviewer="ana")
    producer.send(labels_topic, key=label.key(), value=label.encode())
    label.calibrate_row()    # {"output": ..., "label": "safe", "metric": "toxicity", ...}

In gate mode (:mod:`guardrail.gate`) a record held back carries ``gate`` (a
:class:`GateHold`: why, and where the held record came from), and the reviewer's
answer on it, release or keep, is a :class:`GateAnswer` on the labels topic, key
``<case_id>|@gate`` (no metric name starts with ``@``)::

    answer = GateAnswer.from_item(item, "release", reviewer="ana")
    producer.send(labels_topic, key=answer.key(), value=answer.encode())

Every record carries ``schema_version``; a reader skips (and counts) versions
and kinds it does not know instead of failing, so workers of two releases can
share the topics during a rolling upgrade.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timezone
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..judging.models import MetricRubric

__all__ = ["SCHEMA_VERSION", "Slice", "Choice", "ReviewMetric", "ReviewItem", "LabelRecord",
           "SchemaError", "rubric_version", "label_key", "CHOICES", "GateHold", "GateAnswer",
           "GATE_ANSWERS", "GATE_LABEL", "gate_key", "decode_label"]

SCHEMA_VERSION = 1

#: Why a metric was sent to review: the judge erred, said UNSAFE, was unsure
#: (P(UNSAFE) near the threshold), or said SAFE (a random slice, for recall).
Slice = Literal["error", "unsafe", "band", "safe"]
#: What a reviewer says of the judge's verdict on one metric.
Choice = Literal["agree", "disagree_safe", "disagree_unsafe"]
CHOICES: tuple[str, ...] = ("agree", "disagree_safe", "disagree_unsafe")
#: What a reviewer says of a record the gate held: forward it to the approved
#: topic, or keep it held (which also lets the records waiting behind it go).
GateAnswerKind = Literal["release", "keep"]
GATE_ANSWERS: tuple[str, ...] = ("release", "keep")
#: The labels topic key's last part for a gate answer (never a metric's name).
GATE_LABEL = "@gate"

_FROZEN = ConfigDict(frozen=True, extra="ignore")


class SchemaError(ValueError):
    """A value that is not a record of this kind and schema version."""


def rubric_version(rubric: MetricRubric) -> str:
    """A short digest of the rubric text: labels name the rubric they judged by."""
    data = rubric.model_dump(mode="json", exclude={"examples"})
    return hashlib.sha256(orjson.dumps(data, option=orjson.OPT_SORT_KEYS)).hexdigest()[:12]


def label_key(case_id: str, metric: str) -> bytes:
    return f"{case_id}|{metric}".encode()


def gate_key(case_id: str) -> bytes:
    """The labels topic key of the gate answer on ``case_id``'s item."""
    return label_key(case_id, GATE_LABEL)


def _now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


class ReviewMetric(BaseModel):
    """One metric of a review item: the rubric, the judge's verdict, the choice."""

    model_config = _FROZEN

    name: str = Field(description="The rubric metric's name.")
    goal: str = Field(description="The rubric's goal.")
    violations: tuple[str, ...] = Field(default=(), description="The rubric's violations.")
    non_violations: tuple[str, ...] = Field(default=(), description=(
        "What the rubric says is not a violation."))
    item_fields: tuple[str, ...] = Field(default=("output",), description=(
        "The case fields the judge read."))
    rubric_version: str = Field(description="Digest of the rubric text (12 hex digits).")
    verdict: Literal["SAFE", "UNSAFE"] | None = Field(description=(
        "The judge's verdict; null when the judge failed (``error`` says why)."))
    error: str | None = Field(default=None, description="Why the judge failed, else null.")
    judge_violations: tuple[str, ...] = Field(default=(), description=(
        "The violations the judge found."))
    evidence_spans: tuple[str, ...] = Field(default=(), description=(
        "The quotes behind an UNSAFE verdict."))
    probability_unsafe: float | None = Field(default=None, description=(
        "P(UNSAFE) from the judge's token probabilities; null when unknown."))
    threshold: float = Field(default=0.5, description=(
        "The metric's ``verdict_thresholds`` entry (0.5 without one)."))
    slice: Slice = Field(description=(
        "Why it was chosen: a judge ``error``, an ``unsafe`` verdict, P(UNSAFE) within "
        "``review_band`` of the threshold (``band``) or a ``safe`` verdict."))
    rate: float = Field(gt=0, le=1, description=(
        "The probability it was chosen at; agreement estimates weigh each review by "
        "1 / rate."))


class GateHold(BaseModel):
    """Why the gate held a record back, on its review item (gate mode)."""

    model_config = _FROZEN

    kind: Literal["record", "session"] = Field(default="record", description=(
        "``record``: an input record on the held topic, which a release forwards to the "
        "approved topic; ``session``: a session judged UNSAFE whose later turns are held "
        "(``gate_session_hold``), which a release lets through again."))
    reason: str = Field(description=(
        "The hold reason: unsafe, unsure, judge_error, invalid, budget or session_unsafe."))
    source: str | None = Field(default=None, description=(
        "``topic/partition/offset`` of the held input record (its ``guardrail.source``); "
        "null for a session."))
    session_id: str | None = Field(default=None, description=(
        "The held session's id (kind ``session``), else null."))
    blocks_key: bool = Field(default=False, description=(
        "Later records of its key wait until it is answered (``gate_hold_blocks_key``)."))
    held_by: tuple[dict[str, Any], ...] = Field(default=(), description=(
        "The metrics (verdict, P(UNSAFE), error, evidence) and cases that held it."))


class _Record(BaseModel):
    model_config = _FROZEN

    schema_version: int = Field(default=SCHEMA_VERSION, description=(
        "A reader skips (and counts) versions it does not know."))

    def encode(self) -> bytes:
        return orjson.dumps(self.model_dump(mode="json"))

    @classmethod
    def decode(cls, raw: bytes | None) -> Any:
        """Read a topic value; :class:`SchemaError` for another kind or version."""
        kind = cls.model_fields["kind"].default
        try:
            data = orjson.loads(raw or b"null")
        except orjson.JSONDecodeError as exc:
            raise SchemaError(f"not JSON: {exc}") from None
        if not isinstance(data, dict) or data.get("kind") != kind:
            raise SchemaError(f"not a {kind} record")
        if data.get("schema_version") != SCHEMA_VERSION:
            raise SchemaError(f"{kind} schema_version {data.get('schema_version')!r} "
                              f"is not {SCHEMA_VERSION}")
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise SchemaError(f"invalid {kind}: {exc.errors()[0]['msg']}") from None


class ReviewItem(_Record):
    """One judged result offered to reviewers (review topic, key ``case_id``)."""

    kind: Literal["review_item"] = Field(default="review_item", description="The record kind.")
    case_id: str = Field(description="The judged case's id (also the Kafka key).")
    fields: dict[str, str] = Field(description=(
        "The judged text by field name (output, input, context, reference, conversation, "
        "an agent run's trajectory, and a session's transcript as ``session``)."))
    metrics: tuple[ReviewMetric, ...] = Field(description="The metrics chosen for review.")
    labels: dict[str, str] = Field(default_factory=dict, description=(
        "The result's metadata labels (model, model_version, …)."))
    trace: dict[str, str] | None = Field(default=None, description=(
        "``trace_id`` and ``span_id`` when the result's trace is known, else null."))
    run: dict[str, Any] | None = Field(default=None, description=(
        "An agent run's summary, as in its result (agent, agent_version, spans, "
        "tool_calls, models, status); null for a case that is no assembled run."))
    session: dict[str, Any] | None = Field(default=None, description=(
        "A session judgment's summary, its result's ``session`` block "
        "([SessionSummary](#sessionsummary): id, turns, traces, first_turn_at, "
        "last_turn_at, status, trigger, flagged_turns); null for a case that is no "
        "session. The page shows the ``session`` field as its turns, the flagged ones "
        "marked."))
    judge_model: str = Field(description="The configured judge model.")
    event_time_ms: int = Field(description="The result's event time, epoch ms.")
    judged_at: str = Field(default_factory=_now_iso, description=(
        "When the item was built, UTC ISO-8601 with milliseconds."))
    gate: GateHold | None = Field(default=None, description=(
        "In gate mode, why the gate held the record (or the session) back: the item "
        "then also asks release or keep; null otherwise."))

    def key(self) -> bytes:
        return self.case_id.encode()

    def metric(self, name: str) -> ReviewMetric:
        for metric in self.metrics:
            if metric.name == name:
                return metric
        raise KeyError(name)


class LabelRecord(_Record):
    """A reviewer's verdict on one metric of one item (labels topic)."""

    kind: Literal["label"] = Field(default="label", description="The record kind.")
    case_id: str = Field(description="The reviewed case's id.")
    metric: str = Field(description="The reviewed metric.")
    label: Literal["unsafe", "safe"] = Field(description=(
        "The human verdict, ``unsafe`` being the positive class (as in calibrate)."))
    choice: Choice = Field(description="What the reviewer said of the judge's verdict.")
    reviewer: str = Field(description="The signed-in reviewer's name.")
    labelled_at: str = Field(default_factory=_now_iso, description=(
        "When, UTC ISO-8601 with milliseconds."))
    note: str | None = Field(default=None, description="The reviewer's note, else null.")
    judge_verdict: Literal["SAFE", "UNSAFE"] | None = Field(description=(
        "The judge's verdict; null when it failed."))
    judge_error: str | None = Field(default=None, description="Why the judge failed, else null.")
    probability_unsafe: float | None = Field(default=None, description=(
        "The judge's P(UNSAFE), null when unknown."))
    judge_model: str = Field(description="The judge model of the reviewed item.")
    rubric_version: str = Field(description="Digest of the rubric the judge used.")
    slice: Slice = Field(description="Why the metric was chosen for review (as in the item).")
    rate: float = Field(gt=0, le=1, description="The probability it was chosen at.")
    labels: dict[str, str] = Field(default_factory=dict, description=(
        "The result's metadata labels (its alerting group)."))
    event_time_ms: int = Field(description="The result's event time, epoch ms.")
    fields: dict[str, str] = Field(default_factory=dict, description=(
        "The judged text, as in the item (``calibrate --labels`` reads it)."))

    def key(self) -> bytes:
        return label_key(self.case_id, self.metric)

    @classmethod
    def from_choice(cls, item: ReviewItem, metric: str, choice: Choice, *, reviewer: str,
                    note: str | None = None) -> LabelRecord:
        """The label for ``choice``; ``agree`` on a failed judgment has no verdict
        to agree with (ValueError)."""
        judged = item.metric(metric)
        if choice == "agree":
            if judged.verdict is None:
                raise ValueError("the judge gave no verdict to agree with; say safe or unsafe")
            label = "unsafe" if judged.verdict == "UNSAFE" else "safe"
        else:
            label = "safe" if choice == "disagree_safe" else "unsafe"
        return cls(case_id=item.case_id, metric=metric, label=label, choice=choice,
                   reviewer=reviewer, note=note or None, judge_verdict=judged.verdict,
                   judge_error=judged.error, probability_unsafe=judged.probability_unsafe,
                   judge_model=item.judge_model, rubric_version=judged.rubric_version,
                   slice=judged.slice, rate=judged.rate, labels=item.labels,
                   event_time_ms=item.event_time_ms, fields=item.fields)

    def calibrate_row(self) -> dict[str, Any]:
        """The line ``calibrate --labels`` reads (its extra columns carried along)."""
        row: dict[str, Any] = {"case_id": self.case_id, "metric": self.metric,
                               "label": self.label}
        row.update({k: v for k, v in self.fields.items()
                    if k in ("output", "input", "context", "reference", "trajectory", "session")})
        if self.note:
            row["note"] = self.note
        row.update({"reviewer": self.reviewer, "labelled_at": self.labelled_at,
                    "judge_verdict": self.judge_verdict,
                    "judge_probability_unsafe": self.probability_unsafe,
                    "judge_model": self.judge_model, "rubric_version": self.rubric_version})
        return row


class GateAnswer(_Record):
    """A reviewer's answer on a record the gate held (labels topic, key
    ``<case_id>|@gate``): ``release`` forwards it to the approved topic once (or,
    for a session, lets its later turns through), ``keep`` confirms the hold."""

    kind: Literal["gate_answer"] = Field(default="gate_answer", description="The record kind.")
    case_id: str = Field(description="The reviewed item's case id.")
    answer: GateAnswerKind = Field(description="``release`` or ``keep``.")
    gate: GateHold = Field(description="The hold answered, as on the item.")
    reviewer: str = Field(description="The signed-in reviewer's name.")
    answered_at: str = Field(default_factory=_now_iso, description=(
        "When, UTC ISO-8601 with milliseconds."))
    note: str | None = Field(default=None, description="The reviewer's note, else null.")

    def key(self) -> bytes:
        return gate_key(self.case_id)

    @classmethod
    def from_item(cls, item: ReviewItem, answer: GateAnswerKind, *, reviewer: str,
                  note: str | None = None) -> GateAnswer:
        """The answer on ``item``'s hold; ValueError for an item the gate did not hold."""
        if item.gate is None:
            raise ValueError("the gate did not hold this item: nothing to release or keep")
        return cls(case_id=item.case_id, answer=answer, gate=item.gate, reviewer=reviewer,
                   note=note or None)


def decode_label(raw: bytes | None) -> LabelRecord | GateAnswer:
    """A labels topic value: a label or a gate answer; :class:`SchemaError` otherwise
    (the label's reason, unless the value is a gate answer of another version)."""
    try:
        return LabelRecord.decode(raw)
    except SchemaError as label_error:
        try:
            return GateAnswer.decode(raw)
        except SchemaError as gate_error:
            if str(gate_error).startswith("not a "):
                raise label_error from None
            raise
