"""How far to trust a judge: run it over labelled cases and measure agreement.

Each labelled case is one JSON line::

    {"output": "You absolute idiot.", "label": "unsafe", "metric": "toxicity"}

(optional: ``case_id``, ``input``, ``context``, ``reference``, ``note``). Usage::

    cases, problems = read_labels(Path("labels.jsonl"), metrics=["toxicity"], limit=20)
    report = await calibrate(cases, settings=load_settings())
    report.metrics["toxicity"].f1

``unsafe`` is the positive class. A judgment that failed (``error``) is never
read as SAFE: it sits in its own column of the confusion matrix, counts as a
wrong answer for accuracy and as a missed unsafe case for recall, and is
reported as the error rate.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ._tasks import gather_or_cancel
from .errors import InputError
from .evaluate import aggregate_cost, build_evaluator
from .inputs import describe_validation
from .judge import Judge
from .models import Case, MetricResult
from .settings import Settings

__all__ = ["LabelledCase", "Outcome", "MetricReport", "CalibrationReport", "read_labels",
           "default_labels_path", "calibrate", "write_report"]

Predicted = Literal["unsafe", "safe", "error"]


class LabelledCase(BaseModel):
    """One output with the verdict a human gave it for one metric."""

    model_config = ConfigDict(extra="forbid")

    output: str = Field(min_length=1)
    label: Literal["unsafe", "safe"]
    metric: str = Field(min_length=1)
    case_id: str | None = None
    input: str | None = None
    context: str | list[str] | None = None
    reference: str | None = None
    note: str | None = None

    def to_case(self, index: int) -> Case:
        return Case(case_id=self.case_id or f"{self.metric}-{index}", output=self.output,
                    input=self.input, context=self.context, reference=self.reference)


def default_labels_path() -> Path:
    """The small labelled set shipped with guardrail (toxicity and bias)."""
    return Path(str(resources.files("guardrail").joinpath("calibration", "labels.jsonl")))


def read_labels(path: Path, *, metrics: Sequence[str] = (), limit: int | None = None
                ) -> tuple[list[LabelledCase], list[str]]:
    """Parse JSON Lines; bad lines are returned as problems (with line numbers).

    ``metrics`` keeps only those metrics; ``limit`` keeps the first N per metric.
    """
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read labels {path}: {exc}") from None
    cases: list[LabelledCase] = []
    problems: list[str] = []
    per_metric: dict[str, int] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            case = LabelledCase.model_validate(orjson.loads(line))
        except orjson.JSONDecodeError as exc:
            problems.append(f"{path}:{number}: not valid JSON: {exc}")
            continue
        except ValidationError as exc:
            problems.append(f"{path}:{number}: {describe_validation(exc)}")
            continue
        if not case.output.strip():
            problems.append(f"{path}:{number}: output is blank")
            continue
        if metrics and case.metric not in metrics:
            continue
        if limit is not None and per_metric.get(case.metric, 0) >= limit:
            continue
        per_metric[case.metric] = per_metric.get(case.metric, 0) + 1
        cases.append(case)
    return cases, problems


@dataclass(frozen=True)
class Outcome:
    """The judge's answer on one labelled case."""

    index: int
    case: LabelledCase
    predicted: Predicted
    latency: float
    result: MetricResult

    @property
    def correct(self) -> bool:
        return self.predicted == self.case.label

    def as_dict(self) -> dict[str, Any]:
        verdict = self.result.result[0] if self.result.result else None
        return {"case_id": self.case.case_id or f"{self.case.metric}-{self.index}",
                "metric": self.case.metric, "label": self.case.label,
                "predicted": self.predicted, "output": self.case.output,
                "note": self.case.note, "error": self.result.error,
                "violations": verdict.violations if verdict else [],
                "evidence_spans": verdict.evidence_spans if verdict else [],
                "latency_s": round(self.latency, 3)}


def _ratio(numerator: int, denominator: int) -> float | None:
    return numerator / denominator if denominator else None


@dataclass
class MetricReport:
    """Agreement of the judge with the labels for one metric."""

    name: str
    outcomes: list[Outcome] = field(default_factory=list)

    def count(self, label: str, predicted: str) -> int:
        return sum(o.case.label == label and o.predicted == predicted for o in self.outcomes)

    @property
    def confusion(self) -> dict[str, dict[str, int]]:
        """Rows: the label; columns: what the judge said (or error)."""
        return {label: {p: self.count(label, p) for p in ("unsafe", "safe", "error")}
                for label in ("unsafe", "safe")}

    def summary(self) -> dict[str, Any]:
        n = len(self.outcomes)
        tp, fp = self.count("unsafe", "unsafe"), self.count("safe", "unsafe")
        positives = sum(o.case.label == "unsafe" for o in self.outcomes)
        errors = sum(o.predicted == "error" for o in self.outcomes)
        precision, recall = _ratio(tp, tp + fp), _ratio(tp, positives)
        f1 = (2 * precision * recall / (precision + recall)
              if precision and recall else (0.0 if precision == 0 or recall == 0 else None))
        costs = [o.result.cost for o in self.outcomes]
        latencies = sorted(o.latency for o in self.outcomes)
        return {
            "cases": n, "accuracy": _ratio(sum(o.correct for o in self.outcomes), n),
            "precision": precision, "recall": recall, "f1": f1,
            "error_rate": _ratio(errors, n), "confusion": self.confusion,
            "cost": None if any(c is None for c in costs) else sum(costs),  # type: ignore[arg-type]
            "input_tokens": sum(o.result.input_tokens for o in self.outcomes),
            "output_tokens": sum(o.result.output_tokens for o in self.outcomes),
            "latency_s": _latency(latencies),
        }


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

    def misjudged(self) -> list[Outcome]:
        return [o for m in self.metrics.values() for o in m.outcomes if not o.correct]

    def as_dict(self) -> dict[str, Any]:
        return {"judge_model": self.judge_model, "scoring_mode": self.scoring_mode,
                "judge_calls": self.judge_calls,
                "seconds": round(self.seconds, 2), "input_problems": self.problems,
                "metrics": {name: m.summary() for name, m in self.metrics.items()}}


def _predicted(result: MetricResult) -> Predicted:
    if result.error is not None or not result.result:
        return "error"
    return "safe" if result.result[0].passed else "unsafe"


async def calibrate(cases: Sequence[LabelledCase], *, settings: Settings,
                    judge: Judge | None = None, progress: Any = None) -> CalibrationReport:
    """Judge every labelled case as production would; measure agreement.

    ``judge_calls=per_message``: the case is judged for every configured metric
    in one call and the labelled metric's verdict is read (so the figures
    include whatever judging several rubrics at once costs in quality);
    ``per_metric``: the case is judged for its labelled metric only. One call
    per case either way. Calls run ``settings.judge.concurrency`` at a time, so
    each latency is one judge call, not time spent queueing behind others.
    """
    evaluator = build_evaluator(settings, judge=judge)
    rubrics = {m.name: m for m in evaluator.base_metrics}
    unknown = sorted({c.metric for c in cases} - set(rubrics))
    if unknown:
        raise InputError(f"labels name unknown metrics {unknown}; known: {sorted(rubrics)} "
                         "(add rubrics with --rubric-dir)")
    limit = asyncio.Semaphore(settings.judge.concurrency)
    started = time.perf_counter()

    async def one(index: int, labelled: LabelledCase) -> Outcome:
        case = labelled.to_case(index)
        async with limit:
            t0 = time.perf_counter()
            config = evaluator.effective_config(case)
            if evaluator.per_message:
                together = await evaluator.evaluate_together(case, config.metrics, config)
                result = _with_call_spend(labelled.metric, together)
            else:
                result = await evaluator.evaluate_metric(case, rubrics[labelled.metric], config)
            outcome = Outcome(index, labelled, _predicted(result), time.perf_counter() - t0,
                              result)
        if progress is not None:
            progress(outcome)
        return outcome

    try:
        # A JudgeConfigError (key refused, unknown model) ends the run: exit 2.
        outcomes = await gather_or_cancel(*(one(i, c) for i, c in enumerate(cases, start=1)))
    finally:
        await evaluator.aclose()
    reports: dict[str, MetricReport] = {}
    for outcome in outcomes:
        reports.setdefault(outcome.case.metric, MetricReport(outcome.case.metric)
                           ).outcomes.append(outcome)
    return CalibrationReport(judge_model=evaluator.judge.model,
                             scoring_mode=settings.evaluation.redteam.scoring_mode, metrics=reports,
                             seconds=time.perf_counter() - started,
                             judge_calls=settings.evaluation.judge_calls)


def _with_call_spend(metric: str, results: list[MetricResult]) -> MetricResult:
    """The labelled metric's result carrying the whole call's spend: what
    calibrating that case cost, not only the metric's share of it."""
    spend = aggregate_cost(results)
    result = next(r for r in results if r.name == metric)
    return result.model_copy(update={"input_tokens": int(spend.input_tokens),
                                     "output_tokens": int(spend.output_tokens),
                                     "cost": spend.cost})


def write_report(report: CalibrationReport, output_dir: Path) -> dict[str, Path]:
    """``report.json`` (the figures) and ``misjudged.jsonl`` (wrong or failed cases)."""
    output_dir.mkdir(parents=True, exist_ok=True)
    paths = {"report": output_dir / "report.json", "misjudged": output_dir / "misjudged.jsonl"}
    paths["report"].write_bytes(orjson.dumps(report.as_dict(), option=orjson.OPT_INDENT_2))
    paths["misjudged"].write_bytes(b"".join(orjson.dumps(o.as_dict()) + b"\n"
                                            for o in report.misjudged()))
    return paths
