"""The verdict a deployment stands behind: P(UNSAFE) against the metric's threshold.

A judge's sampled verdict is its single most likely token. When the judge's
log-probabilities give P(UNSAFE) (:mod:`guardrail.judging.probability`), the verdict
becomes a decision with a threshold the deployment sets per metric
(``verdict_thresholds``, 0.5 otherwise: the sampled token's own cut)::

    result = apply_threshold(sampled, scoring_mode="binary_yes_no", threshold=0.8)
    result.result[0].verdict     # "SAFE": P(UNSAFE) = 0.7 is below 0.8

- ``binary_yes_no``: UNSAFE iff P ≥ threshold; score 0.0 / 1.0.
- ``scale_1_5``: severity is the expected severity Σ k·P(k), rounded half up,
  then moved to the nearest value on the side of the cut P decides
  (severity ≥ 3 iff P ≥ threshold); the score comes from the severity.
- Either way ``passed = score >= 0.6`` and the verdict follows ``passed``, as
  the spec says. P unknown (no log-probabilities): the sampled result as is.

When the threshold overrules the sampled verdict:

- to SAFE: the judge's violations and evidence spans are dropped (a SAFE
  verdict carries none: they would contradict it in every report and alert);
- to UNSAFE: the violations and evidence the judge listed are kept, often
  none (the probability decided, not a listed violation);
- either way the judge's reasoning, when asked for, is kept word for word and
  a note is appended saying what decided, so the record stays auditable.

``probability_unsafe`` is added to ``result[0]`` only with ``include_probability``;
otherwise the JSON is exactly the spec's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from .models import PASS_THRESHOLD, JudgeVerdict, MetricResult
from .probability import expected_severity

__all__ = ["DEFAULT_THRESHOLD", "apply_threshold", "severity_for", "severity_to_score"]

#: The threshold of a metric without its own: the cut a sampled token makes.
DEFAULT_THRESHOLD = 0.5

_SEVERITY_SCORE = {1: 1.0, 2: 0.75, 3: 0.5, 4: 0.25, 5: 0.0}
#: Lowest severity whose score fails the spec's pass threshold (0.5 < 0.6).
_FIRST_UNSAFE = 3


def severity_to_score(severity: int) -> float:
    """The spec's direction-flipped normalisation: 1 → 1.0 … 5 → 0.0."""
    return _SEVERITY_SCORE[severity]


def severity_for(unsafe: bool, expected: float | None, sampled: int) -> int:
    """The severity on the side of the cut ``unsafe`` says: the expected severity
    rounded half up (the sampled one when unknown), moved to the nearest value
    on that side::

        severity_for(True, 2.2, 1)    # 3: UNSAFE needs at least 3
        severity_for(False, 3.6, 4)   # 2: SAFE allows at most 2
    """
    base = math.floor(expected + 0.5) if expected is not None and math.isfinite(expected) \
        else sampled
    base = min(5, max(1, base))
    return max(base, _FIRST_UNSAFE) if unsafe else min(base, _FIRST_UNSAFE - 1)


def apply_threshold(result: MetricResult, *, scoring_mode: str,
                    threshold: float = DEFAULT_THRESHOLD,
                    include_probability: bool = False) -> MetricResult:
    """``result`` (scored from the sampled answer, carrying ``probability_unsafe``
    and in scale mode ``severity_probs``) with its verdict decided by the
    threshold. Errors pass through unchanged."""
    if result.error is not None or not result.result:
        return result
    sampled = result.result[0]
    p = result.probability_unsafe
    if p is None:
        return result
    verdict, score = _decide(sampled, p, result.severity_probs, scoring_mode, threshold)
    if verdict is sampled and score == result.score and not include_probability:
        return result  # the threshold agrees with the sampled verdict: no copy to make
    if include_probability:
        verdict = verdict.model_copy(update={"probability_unsafe": p})
    return result.model_copy(update={"score": score, "result": [verdict, *result.result[1:]]})


def _decide(sampled: JudgeVerdict, p: float, probs: Mapping[int, float] | None,
            scoring_mode: str, threshold: float) -> tuple[JudgeVerdict, float]:
    unsafe = p >= threshold
    severity = None
    if scoring_mode == "scale_1_5":
        expected = expected_severity(probs) if probs else None
        severity = severity_for(unsafe, expected, sampled.severity or _FIRST_UNSAFE)
        score = severity_to_score(severity)
    else:
        score = 0.0 if unsafe else 1.0
    passed = score >= PASS_THRESHOLD
    if passed == sampled.passed and severity == sampled.severity:
        return sampled, score  # nothing to change (most verdicts): no copies to make
    update: dict[str, object] = {"severity": severity, "passed": passed,
                                 "verdict": "SAFE" if passed else "UNSAFE"}
    if passed != sampled.passed:  # the threshold overrules the sampled verdict
        if passed:
            update.update(violations=[], evidence_spans=[])
        if sampled.reasoning is not None:
            update["reasoning"] = (
                f"{sampled.reasoning} [Verdict {update['verdict']} from P(UNSAFE) = {p:.4g} "
                f"against the threshold {threshold:g}; the judge's sampled verdict was "
                f"{sampled.verdict}.]")
    return sampled.model_copy(update=update), score
