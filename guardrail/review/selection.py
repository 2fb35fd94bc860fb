"""Which judged results go to human review, chosen the same way every time.

Per metric of a result: a judge error or an UNSAFE verdict at
``review_rate_unsafe``, a SAFE verdict at ``review_rate_safe``, and always when
P(UNSAFE) lies within ``review_band`` of the metric's threshold. The draw is a
keyed hash of ``case_id`` and metric (:func:`guardrail.judging.draws.is_sampled`),
so a redelivered or replayed result chooses exactly what it chose before::

    item = review_item(case, metrics, rubrics, review=settings.review,
                       thresholds=settings.evaluation.verdict_thresholds,
                       judge_model="openai/gpt-4o-mini", event_time_ms=ms,
                       labels={"model_version": "v2"}, run=message.run,  # a run: its block
                       session=message.session)  # a session judgment: its block
    item is None            # nothing of this result is for review
    item.metrics[0].rate    # the chance it had: agreement weighs it by 1 / rate
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..judging.models import Case, MetricResult, MetricRubric, RedteamMetrics
from ..judging.draws import is_sampled
from ..judging.verdicts import DEFAULT_THRESHOLD
from .records import ReviewItem, ReviewMetric, Slice, rubric_version
from .settings import ReviewSettings

__all__ = ["review_item", "review_choice", "review_fields"]

_TEXT_FIELDS = ("output", "input", "context", "reference", "conversation", "trajectory",
                "session")


def review_choice(case_id: str, result: MetricResult, *, review: ReviewSettings,
                  threshold: float) -> tuple[Slice, float] | None:
    """``(slice, rate)`` when this metric of this case goes to review, else None."""
    p = result.probability_unsafe
    if p is not None and review.review_band > 0 and abs(p - threshold) <= review.review_band:
        return "band", 1.0
    if result.error is not None:
        slice_, rate = "error", review.review_rate_unsafe
    elif result.unsafe:
        slice_, rate = "unsafe", review.review_rate_unsafe
    else:
        slice_, rate = "safe", review.review_rate_safe
    if rate <= 0 or not is_sampled(f"review|{case_id}|{result.name}", rate):
        return None
    return slice_, rate  # type: ignore[return-value]


def review_item(case: Case, metrics: RedteamMetrics, rubrics: Sequence[MetricRubric], *,
                review: ReviewSettings, thresholds: Mapping[str, float], judge_model: str,
                event_time_ms: int, labels: Mapping[str, str] | None = None,
                trace: Mapping[str, str] | None = None,
                run: Mapping[str, Any] | None = None,
                session: Mapping[str, Any] | None = None) -> ReviewItem | None:
    """The review item of one judged result, or None when no metric of it is chosen;
    ``run`` is an agent run's summary (the result's ``run`` block), shown above its
    steps, and ``session`` a session judgment's (its ``session`` block), above its turns."""
    case_id = case.case_id or ""
    by_name = {r.name: r for r in rubrics}
    chosen = []
    for result in metrics.metrics:
        rubric = by_name.get(result.name)
        threshold = thresholds.get(result.name, DEFAULT_THRESHOLD)
        choice = review_choice(case_id, result, review=review, threshold=threshold)
        if rubric is not None and choice is not None:
            chosen.append(_metric(rubric, result, threshold, *choice))
    if not chosen:
        return None
    return ReviewItem(case_id=case_id, fields=review_fields(case), metrics=tuple(chosen),
                      labels=dict(labels or {}), trace=dict(trace) if trace else None,
                      run=dict(run) if run else None,
                      session=dict(session) if session else None,
                      judge_model=judge_model, event_time_ms=event_time_ms)


def review_fields(case: Case) -> dict[str, str]:
    """The judged text a review item shows, by field name."""
    return {name: text for name in _TEXT_FIELDS if (text := case.field_text(name))}


def _metric(rubric: MetricRubric, result: MetricResult, threshold: float, slice_: Slice,
            rate: float) -> ReviewMetric:
    verdict = result.result[0] if result.result and result.error is None else None
    return ReviewMetric(
        name=rubric.name, goal=rubric.goal, violations=rubric.violations,
        non_violations=rubric.non_violations, item_fields=rubric.item_fields,
        rubric_version=rubric_version(rubric),
        verdict=None if verdict is None else verdict.verdict, error=result.error,
        judge_violations=tuple(verdict.violations) if verdict else (),
        evidence_spans=tuple(verdict.evidence_spans) if verdict else (),
        probability_unsafe=result.probability_unsafe, threshold=threshold,
        slice=slice_, rate=rate)
