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
           "SchemaError", "rubric_version", "label_key", "CHOICES"]

SCHEMA_VERSION = 1

#: Why a metric was sent to review: the judge erred, said UNSAFE, was unsure
#: (P(UNSAFE) near the threshold), or said SAFE (a random slice, for recall).
Slice = Literal["error", "unsafe", "band", "safe"]
#: What a reviewer says of the judge's verdict on one metric.
Choice = Literal["agree", "disagree_safe", "disagree_unsafe"]
CHOICES: tuple[str, ...] = ("agree", "disagree_safe", "disagree_unsafe")

_FROZEN = ConfigDict(frozen=True, extra="ignore")


class SchemaError(ValueError):
    """A value that is not a record of this kind and schema version."""


def rubric_version(rubric: MetricRubric) -> str:
    """A short digest of the rubric text: labels name the rubric they judged by."""
    data = rubric.model_dump(mode="json", exclude={"examples"})
    return hashlib.sha256(orjson.dumps(data, option=orjson.OPT_SORT_KEYS)).hexdigest()[:12]


def label_key(case_id: str, metric: str) -> bytes:
    return f"{case_id}|{metric}".encode()


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
