"""What a reviewer sees of a record the gate held, and what their answer does.

Every held record becomes a review item (when review is on) with a ``gate`` block:
why it was held, where it came from, whether its key waits for it. Its metrics
are the ones that held it, at rate 1 (every held record is reviewed, so the
agreement estimates weigh them by 1), and the SAFE ones sampled as usual::

    item = held_item(judgment, decision, review=settings.review, thresholds={},
                     judge_model="openai/gpt-4o-mini", blocks_key=False)
    item.gate.reason, item.gate.source            # "unsafe", "model-outputs/0/41"
    outgoing = with_item(outgoing, item, review_topic="redteam-review")

The item of a record of many cases (an OTLP batch) shows the case that names
the hold; ``gate.held_by`` lists every case and metric that held it. A case that
could not be read shows the record's text as it came (``record``).

A session judged UNSAFE (``gate_session_hold``) holds its later turns; its
judgment's item (:func:`session_item`, kind ``session``) asks whether to let them
through again.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from ..review.records import GateHold, ReviewItem
from ..review.selection import review_fields, review_item
from ..review.settings import ReviewSettings
from ..stream.processing import CaseOutcome, Outgoing, RecordJudgment
from .decision import Decision
from .records import source_of

__all__ = ["held_item", "session_item", "with_item", "parse_source", "RECORD_TEXT_CHARS"]

#: Most characters of an unreadable record's text shown to a reviewer.
RECORD_TEXT_CHARS = 20_000
#: ``held_by`` entries kept on an item.
_HELD_BY = 20


def parse_source(source: str) -> tuple[str, int, int]:
    """``(topic, partition, offset)`` of a ``guardrail.source`` value (ValueError)."""
    topic, partition, offset = source.rsplit("/", 2)
    return topic, int(partition), int(offset)


def held_item(judgment: RecordJudgment, decision: Decision, *, review: ReviewSettings,
              thresholds: Mapping[str, float], judge_model: str,
              blocks_key: bool) -> ReviewItem | None:
    """The review item of a held record; None for one approved or sent to the DLQ."""
    if decision.approved or decision.dlq_only or decision.reason is None:
        return None
    case = _naming_case(judgment, decision)
    gate = GateHold(reason=decision.reason, source=source_of(judgment.raw),
                    blocks_key=blocks_key, held_by=decision.held_by[:_HELD_BY])
    message = case.message if case is not None else None
    event_ms = (case.event_time_ms if case is not None and case.event_time_ms is not None
                else judgment.raw.source.timestamp_ms or int(time.time() * 1000))
    item = None
    if message is not None and case is not None and case.metrics is not None:
        # Every held metric is reviewed (rate 1); SAFE ones are sampled as always.
        every_held = review.model_copy(update={"review_rate_unsafe": 1.0})
        item = review_item(message.case, case.metrics, case.rubrics, review=every_held,
                           thresholds=thresholds, judge_model=judge_model,
                           event_time_ms=event_ms, labels=message.metadata,
                           trace=message.trace, run=message.run, session=message.session)
    if item is None:
        item = ReviewItem(
            case_id=case.case_id if case is not None else source_of(judgment.raw),
            fields=review_fields(message.case) if message is not None else _record_text(judgment),
            metrics=(), labels=dict(message.metadata) if message is not None else {},
            trace=dict(message.trace) if message is not None and message.trace else None,
            judge_model=judge_model, event_time_ms=event_ms)
    return item.model_copy(update={"gate": gate})


def session_item(case: CaseOutcome, held_by: tuple[dict[str, Any], ...], *,
                 review: ReviewSettings, thresholds: Mapping[str, float],
                 judge_model: str) -> ReviewItem | None:
    """The review item of a session judgment that holds its session (None for a
    case that is no judged session)."""
    message = case.message
    if message is None or message.session is None or case.metrics is None:
        return None
    session_id = str(message.session.get("id") or message.session_id or case.case_id)
    gate = GateHold(kind="session", reason="session_unsafe", session_id=session_id,
                    held_by=held_by[:_HELD_BY])
    every_held = review.model_copy(update={"review_rate_unsafe": 1.0})
    event_ms = case.event_time_ms if case.event_time_ms is not None else int(time.time() * 1000)
    item = review_item(message.case, case.metrics, case.rubrics, review=every_held,
                       thresholds=thresholds, judge_model=judge_model, event_time_ms=event_ms,
                       labels=message.metadata, trace=message.trace, session=message.session)
    if item is None:
        item = ReviewItem(case_id=case.case_id, fields=review_fields(message.case), metrics=(),
                          labels=dict(message.metadata), session=dict(message.session),
                          judge_model=judge_model, event_time_ms=event_ms)
    return item.model_copy(update={"gate": gate})


def with_item(outgoing: list[Outgoing], item: ReviewItem, *, review_topic: str) -> list[Outgoing]:
    """``outgoing`` with ``item`` in place of the review item of the same case (the
    judging made one when the case was sampled for review), else added."""
    key = item.key()
    kept = [out for out in outgoing if not (out.topic == review_topic and out.key == key)]
    return kept + [Outgoing(review_topic, key, item.encode())]


def _naming_case(judgment: RecordJudgment, decision: Decision) -> CaseOutcome | None:
    """The case whose metric or outcome names the hold (the first in ``held_by``)."""
    first: Any = decision.held_by[0].get("case_id") if decision.held_by else None
    for case in judgment.cases:
        if case.case_id == first:
            return case
    return judgment.cases[0] if judgment.cases else None


def _record_text(judgment: RecordJudgment) -> dict[str, str]:
    value = judgment.raw.value or b""
    text = value[:RECORD_TEXT_CHARS * 4].decode("utf-8", "replace")[:RECORD_TEXT_CHARS]
    return {"record": text}
