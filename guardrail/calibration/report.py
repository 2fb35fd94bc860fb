"""The figures of a calibration run: agreement per metric, and where to put the threshold.

Built by :func:`guardrail.calibration.calibrate.calibrate` from one :class:`Outcome` per
labelled case; readable without running anything::

    report = CalibrationReport("openai/gpt-4o-mini", "binary_yes_no",
                               {"toxicity": MetricReport("toxicity", outcomes)},
                               target=Target.parse("precision=0.9"))
    report.metrics["toxicity"].summary()["f1"]
    report.recommended()            # {"toxicity": 0.71}: what thresholds.yaml holds
    report.as_dict()                # report.json

``unsafe`` is the positive class. A judgment that failed (``error``) is never
read as SAFE: it sits in its own column of the confusion matrix, counts as a
wrong answer for accuracy and as a missed unsafe case for recall, at the
configured threshold and at every threshold of the curve.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Literal

from .labels import LabelledCase
from ..judging.models import MetricResult
from .thresholds import (DEFAULT_THRESHOLD, Choice, Judged, Point, Target, curve, figures,
                         point_at, recommend)

__all__ = ["Outcome", "MetricReport", "CalibrationReport", "NO_PROBABILITIES", "Predicted"]

Predicted = Literal["unsafe", "safe", "error"]

#: Said once, in the terminal and in report.json, when no curve can be drawn.
NO_PROBABILITIES = ("the judge returned no token probabilities: verdicts are the sampled ones, "
                    "no curve")


@dataclass(frozen=True)
class Outcome:
    """The judge's answer on one labelled case. ``latency`` is the judge call's
    own time (see :attr:`MetricResult.judge_seconds`)."""

    index: int
    case: LabelledCase
    predicted: Predicted
    latency: float
    result: MetricResult

    @property
    def correct(self) -> bool:
        return self.predicted == self.case.label

    @property
    def probability(self) -> float | None:
        """P(UNSAFE) from the judge's token probabilities (None: failed or not given)."""
        return None if self.predicted == "error" else self.result.probability_unsafe

    def judged(self) -> Judged:
        """The case as the curve sees it. Without a probability the sampled
        verdict stands at every threshold (P taken as 1 for UNSAFE, 0 for SAFE)."""
        if self.predicted == "error":
            return Judged(self.case.label, None)
        if self.probability is not None:
            return Judged(self.case.label, self.probability)
        return Judged(self.case.label, 1.0 if self.predicted == "unsafe" else 0.0)

    def as_dict(self) -> dict[str, Any]:
        """A ``misjudged.jsonl`` line: the label file's own extra columns first,
        then the report's fields (which win over an extra of the same name); a
        labelled conversation keeps its ``turns``."""
        verdict = self.result.result[0] if self.result.result else None
        probability = self.probability
        return {**self.case.extras,
                "case_id": self.case.case_id or f"{self.case.metric}-{self.index}",
                "metric": self.case.metric, "label": self.case.label,
                "predicted": self.predicted, "output": self.case.output,
                # A conversation stays one, so the line can be fed back as --labels.
                **({"turns": [t.model_dump(exclude_none=True) for t in self.case.turns]}
                   if self.case.turns is not None else {}),
                "note": self.case.note, "error": self.result.error,
                "probability_unsafe": None if probability is None else round(probability, 4),
                "violations": verdict.violations if verdict else [],
                "evidence_spans": verdict.evidence_spans if verdict else [],
                "latency_s": round(self.latency, 3)}


@dataclass
class MetricReport:
    """Agreement of the judge with the labels for one metric, at the configured
    threshold and along the P(UNSAFE) curve."""

    name: str
    outcomes: list[Outcome] = field(default_factory=list)
    target: Target = field(default_factory=Target)
    #: The threshold the judged verdicts were given at (``verdict_thresholds``).
    configured: float = DEFAULT_THRESHOLD

    def count(self, label: str, predicted: str) -> int:
        return sum(o.case.label == label and o.predicted == predicted for o in self.outcomes)

    @property
    def confusion(self) -> dict[str, dict[str, int]]:
        """Rows: the label; columns: what the judge said (or error)."""
        return {label: {p: self.count(label, p) for p in ("unsafe", "safe", "error")}
                for label in ("unsafe", "safe")}

    @property
    def with_probability(self) -> int:
        return sum(o.probability is not None for o in self.outcomes)

    def curve(self) -> list[Point] | None:
        """The figures at every threshold worth trying; None without probabilities."""
        if not self.with_probability:
            return None
        return curve([o.judged() for o in self.outcomes], extra=[self.configured])

    def choice(self) -> Choice | None:
        points = self.curve()
        return None if points is None else recommend(points, self.target)

    def summary(self) -> dict[str, Any]:
        n = len(self.outcomes)
        tp, fp = self.count("unsafe", "unsafe"), self.count("safe", "unsafe")
        positives = sum(o.case.label == "unsafe" for o in self.outcomes)
        costs = [o.result.cost for o in self.outcomes]
        timed = sorted(o.latency for o in self.outcomes if not o.result.cached)
        return {
            "cases": n, **figures(tp, fp, positives - tp, n, sum(o.correct for o in self.outcomes)),
            "error_rate": sum(o.predicted == "error" for o in self.outcomes) / n if n else None,
            "confusion": self.confusion,
            "cost": None if any(c is None for c in costs) else sum(costs),  # type: ignore[arg-type]
            "input_tokens": sum(o.result.input_tokens for o in self.outcomes),
            "output_tokens": sum(o.result.output_tokens for o in self.outcomes),
            "latency_s": _latency(timed), "cached": n - len(timed),
            "thresholds": self.thresholds(),
        }

    def thresholds(self) -> dict[str, Any]:
        """The curve, the recommendation for the target, and the figures at the
        configured threshold (as the curve computes them) for comparison."""
        points = self.curve()
        section: dict[str, Any] = {"target": str(self.target), "configured": self.configured,
                                   "with_probability": self.with_probability}
        if points is None:
            return {**section, "recommended": None, "note": NO_PROBABILITIES}
        choice = recommend(points, self.target)
        at = choice.point
        return {**section, "recommended": at.threshold if at else None,
                "at_recommended": at.as_dict() if at else None, "unreached": choice.reason,
                "at_configured": point_at(self.configured, [o.judged() for o in self.outcomes]
                                          ).as_dict(),
                "curve": [p.as_dict() for p in points]}


def _latency(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    p95 = values[min(len(values) - 1, round(0.95 * (len(values) - 1)))]
    return {"mean": round(statistics.fmean(values), 3),
            "p50": round(statistics.median(values), 3), "p95": round(p95, 3),
            "max": round(values[-1], 3)}


@dataclass
class CalibrationReport:
    judge_model: str
    scoring_mode: str
    metrics: dict[str, MetricReport]
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0
    judge_calls: str = "per_metric"
    target: Target = field(default_factory=Target)
    #: ``verdict_thresholds`` as configured for this run (metrics not named: 0.5).
    configured_thresholds: dict[str, float] = field(default_factory=dict)
    #: Where the labelled cases came from, for the record.
    labels: str = ""

    def misjudged(self) -> list[Outcome]:
        return [o for m in self.metrics.values() for o in m.outcomes if not o.correct]

    @property
    def has_probabilities(self) -> bool:
        return any(m.with_probability for m in self.metrics.values())

    def recommended(self) -> dict[str, float]:
        """Metric → recommended threshold, for the metrics that have one."""
        found = {}
        for name, metric in self.metrics.items():
            choice = metric.choice()
            if choice is not None and choice.point is not None:
                found[name] = choice.point.threshold
        return found

    def notes(self) -> list[str]:
        """What a reader must know to trust the curve (empty when nothing to say)."""
        if not self.has_probabilities:
            return [NO_PROBABILITIES]
        notes = []
        for name, metric in self.metrics.items():
            judged = sum(o.predicted != "error" for o in metric.outcomes)
            missing = judged - metric.with_probability
            if missing and missing == judged:
                notes.append(f"{name}: the judge returned no token probabilities for this "
                             "metric: no curve")
            elif missing:
                notes.append(f"{name}: {missing} of {judged} judgments carried no token "
                             "probability; their sampled verdict counts at every threshold")
        return notes

    def as_dict(self) -> dict[str, Any]:
        return {"judge_model": self.judge_model, "scoring_mode": self.scoring_mode,
                "judge_calls": self.judge_calls,
                "seconds": round(self.seconds, 2), "labels": self.labels,
                "input_problems": self.problems, "target": str(self.target),
                "configured_thresholds": self.configured_thresholds,
                "recommended_thresholds": self.recommended(), "notes": self.notes(),
                "metrics": {name: m.summary() for name, m in self.metrics.items()}}
