"""How far to trust a judge: run it over labelled cases, measure agreement, choose thresholds.

Labelled cases are JSON lines (see :mod:`guardrail.calibration.labels`)::

    {"output": "You absolute idiot.", "label": "unsafe", "metric": "toxicity"}

Usage::

    cases, problems = read_labels(Path("labels.jsonl"), metrics=["toxicity"], limit=20)
    report = await calibrate(cases, settings=load_settings(),
                             target=Target.parse("precision=0.9"))
    report.metrics["toxicity"].summary()["f1"]
    report.recommended()                     # {"toxicity": 0.71}
    write_report(report, Path("calibration"))
    # report.json, misjudged.jsonl, curves.html, thresholds.yaml

The figures (and the rule that a failed judgment is never SAFE) live in
:mod:`guardrail.calibration.report`, the curve math in :mod:`guardrail.calibration.thresholds`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import orjson
import yaml

from .._tasks import gather_or_cancel
from .report import (NO_PROBABILITIES, CalibrationReport, MetricReport, Outcome,
                                 Predicted)
from .curves import Panel, render_curves
from ..errors import InputError
from ..judges.build import build_evaluator
from ..judging.evaluate import aggregate_cost
from ..judging.judge import Judge
from .labels import LabelledCase, default_labels_path, read_labels
from ..judging.metric_sets import MetricSets, case_kind
from ..judging.models import MetricResult
from ..config.settings import Settings
from .thresholds import (DEFAULT_THRESHOLD, Choice, Point, Target, display_rows, point_at,
                         recommend)

__all__ = ["LabelledCase", "Outcome", "MetricReport", "CalibrationReport", "Target",
           "read_labels", "default_labels_path", "calibrate", "write_report",
           "thresholds_file_text", "NO_PROBABILITIES"]


def _predicted(result: MetricResult) -> Predicted:
    if result.error is not None or not result.result:
        return "error"
    return "safe" if result.result[0].passed else "unsafe"


async def calibrate(cases: Sequence[LabelledCase], *, settings: Settings,
                    judge: Judge | None = None, progress: Any = None,
                    target: Target | None = None, labels: str = "") -> CalibrationReport:
    """Judge every labelled case as production would; measure agreement.

    ``judge_calls=per_message``: the case is judged for every configured metric
    in one call and the labelled metric's verdict is read (so the figures
    include whatever judging several rubrics at once costs in quality);
    ``per_metric``: the case is judged for its labelled metric only. One call
    per case either way. Each latency is the judge's transport time, measured
    inside its concurrency limit (wall time only for a judge that does not
    measure it); cache hits are left out of latency figures.
    """
    evaluator = build_evaluator(settings, judge=judge)
    max_chars = settings.sessions.session_max_chars
    _check_metrics(cases, evaluator.metric_sets, max_chars)
    limit = asyncio.Semaphore(settings.judge.calls_in_flight())
    started = time.perf_counter()

    async def one(index: int, labelled: LabelledCase) -> Outcome:
        case = labelled.to_case(index, session_max_chars=max_chars)
        async with limit:  # no more prompts rendered at once than the judge takes
            t0 = time.perf_counter()
            config = evaluator.effective_config(case)
            if evaluator.per_message:
                together = await evaluator.evaluate_together(case, config.metrics, config)
                result = _with_call_spend(labelled.metric, together)
            else:
                # By name from the case's own set: a conversation's bias is the
                # session rubric over its transcript, not the message rubric.
                rubric = next(m for m in config.metrics if m.name == labelled.metric)
                result = await evaluator.evaluate_metric(case, rubric, config)
            wall = time.perf_counter() - t0
        outcome = Outcome(index, labelled, _predicted(result), result.judge_seconds or wall,
                          result)
        if progress is not None:
            progress(outcome)
        return outcome

    try:
        # A JudgeConfigError (key refused, unknown model) ends the run: exit 2.
        outcomes = await gather_or_cancel(*(one(i, c) for i, c in enumerate(cases, start=1)))
    finally:
        await evaluator.aclose()
    return _report(outcomes, settings, evaluator.judge.model, target or Target(), labels,
                   time.perf_counter() - started)


def _report(outcomes: Sequence[Outcome], settings: Settings, judge_model: str, target: Target,
            labels: str, seconds: float) -> CalibrationReport:
    configured = dict(settings.evaluation.verdict_thresholds)
    reports: dict[str, MetricReport] = {}
    for outcome in outcomes:
        name = outcome.case.metric
        reports.setdefault(name, MetricReport(
            name, target=target, configured=configured.get(name, DEFAULT_THRESHOLD),
        )).outcomes.append(outcome)
    return CalibrationReport(judge_model=judge_model,
                             scoring_mode=settings.evaluation.redteam.scoring_mode,
                             metrics=reports, seconds=seconds,
                             judge_calls=settings.evaluation.judge_calls, target=target,
                             configured_thresholds=configured, labels=labels)


#: What a case must carry for a metric only some kinds of case are judged on.
_NEEDS = {"run": "reads an agent run's trajectory but have none (give messages with tool "
                 "calls, or a trajectory)",
          "session": "reads a conversation's transcript but have no turns (give turns: "
                     '[{"user": …, "assistant": …}, …])'}


def _check_metrics(cases: Sequence[LabelledCase], sets: MetricSets, max_chars: int) -> None:
    """Every label's metric must be one its case is judged on: an unknown name,
    an agent metric on a case that is no run, a session metric on a case without
    turns, or a conversation labelled for a metric sessions are not judged on is
    a labelling mistake. Say which, before any judge call."""
    names = {kind: {m.name for m in sets.for_kind(kind)} for kind in ("base", "run", "session")}
    unknown = sorted({c.metric for c in cases} - set().union(*names.values()))
    if unknown:
        raise InputError(f"labels name unknown metrics {unknown}; known: "
                         f"{sorted(set().union(*names.values()))} (add rubrics with --rubric-dir)")
    wrong: dict[str, list[str]] = {}
    for index, labelled in enumerate(cases, start=1):
        kind = case_kind(labelled.to_case(index, session_max_chars=max_chars))
        if labelled.metric not in names[kind]:
            needs = "conversation" if kind == "session" else (
                "session" if labelled.metric in names["session"] - names["run"] else "run")
            wrong.setdefault(needs, []).append(labelled.case_id or f"line {index}")
    for needs, ids in wrong.items():
        what = (f"name a metric that {_NEEDS[needs]}" if needs in _NEEDS else
                f"give turns but name a metric a conversation is not judged on (session "
                f"metrics: {', '.join(sorted(names['session']))})")
        raise InputError(f"{len(ids)} label(s) {what}: {', '.join(ids[:5])}")


def _with_call_spend(metric: str, results: list[MetricResult]) -> MetricResult:
    """The labelled metric's result carrying the whole call's spend and time:
    what calibrating that case cost, not only the metric's share of it."""
    spend = aggregate_cost(results)
    result = next(r for r in results if r.name == metric)
    return result.model_copy(update={"input_tokens": int(spend.input_tokens),
                                     "output_tokens": int(spend.output_tokens),
                                     "cost": spend.cost,
                                     "judge_seconds": sum(r.judge_seconds for r in results)})


def write_report(report: CalibrationReport, output_dir: Path) -> dict[str, Path]:
    """``report.json`` (the figures), ``misjudged.jsonl`` (wrong or failed cases),
    and, when the judge gave probabilities, ``curves.html`` and (when a threshold
    was recommended) ``thresholds.yaml``. A stale plot or thresholds file from
    an earlier run in the same folder is removed rather than left beside
    figures it does not match. Returns the paths written."""
    output_dir.mkdir(parents=True, exist_ok=True)
    paths = {"report": output_dir / "report.json", "misjudged": output_dir / "misjudged.jsonl"}
    paths["report"].write_bytes(orjson.dumps(report.as_dict(), option=orjson.OPT_INDENT_2))
    paths["misjudged"].write_bytes(b"".join(orjson.dumps(o.as_dict()) + b"\n"
                                            for o in report.misjudged()))
    optional = {"curves": (output_dir / "curves.html", report.has_probabilities, _curves_page),
                "thresholds": (output_dir / "thresholds.yaml", bool(report.recommended()),
                               thresholds_file_text)}
    for key, (path, wanted, render) in optional.items():
        if wanted:
            path.write_text(render(report), encoding="utf-8")
            paths[key] = path
        else:
            path.unlink(missing_ok=True)
    return paths


def _show(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _brief(point: Point) -> str:
    """One threshold's figures in words, for captions and file comments."""
    return (f"precision {_show(point.precision)}, recall {_show(point.recall)}, "
            f"accuracy {_show(point.accuracy)}, F1 {_show(point.f1)}, "
            f"{point.tp + point.fp} of {point.cases} flagged")


def _caption(metric: MetricReport, choice: Choice) -> str:
    if choice.point is not None:
        said = (f"Target {metric.target}: recommended {choice.point.threshold:g} "
                f"({_brief(choice.point)})")
    else:
        said = f"{choice.reason}; no threshold recommended"
    at = point_at(metric.configured, [o.judged() for o in metric.outcomes])
    return (f"{said}. At the configured {metric.configured:g}: {_brief(at)}. "
            f"{metric.with_probability} of {len(metric.outcomes)} cases carried a probability; "
            "failed judgments count as wrong at every threshold.")


def _curves_page(report: CalibrationReport) -> str:
    panels = []
    for metric in report.metrics.values():
        points = metric.curve()
        if points is None:
            continue
        choice = recommend(points, metric.target)
        recommended = choice.point.threshold if choice.point else None
        judged = [o.judged() for o in metric.outcomes if o.probability is not None]
        panels.append(Panel(metric.name, points, judged, configured=metric.configured,
                            recommended=recommended, caption=_caption(metric, choice),
                            rows=display_rows(points, recommended=recommended,
                                              configured=metric.configured)))
    lines = [f"Judge {report.judge_model}, scoring_mode {report.scoring_mode}, judge_calls "
             f"{report.judge_calls}; labels {report.labels or 'given in code'}; target "
             f"{report.target}.", *report.notes()]
    return render_curves(panels, title="guardrail calibrate: verdict thresholds", lines=lines)


def thresholds_file_text(report: CalibrationReport) -> str:
    """A settings file holding ``verdict_thresholds``: the recommended ones, and
    the configured ones of metrics without a recommendation (so that loading
    the file does not quietly reset them to 0.5). Load it with ``--config``."""
    recommended = report.recommended()
    kept = {k: v for k, v in report.configured_thresholds.items() if k not in recommended}
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    # One line each: a newline in a model name or path must not end a comment.
    model, labels = (" ".join(text.split()) for text in (report.judge_model, report.labels))
    lines = [f"# Written by guardrail calibrate at {stamp}, target {report.target}.",
             f"# Judge {model}, scoring_mode {report.scoring_mode}, judge_calls "
             f"{report.judge_calls}; labels {labels or 'given in code'}.",
             "# Valid for that judge, its settings and the rubrics of that run only.",
             "verdict_thresholds:"]
    for name in sorted({*recommended, *kept}):
        entry = yaml.safe_dump({name: recommended.get(name, kept.get(name))},
                               default_flow_style=False).strip()
        lines.append(f"  {entry}  # {_why(report, name, name in recommended)}")
    return "\n".join(lines) + "\n"


def _why(report: CalibrationReport, name: str, recommended: bool) -> str:
    metric = report.metrics.get(name)
    if metric is None:
        return "as configured: not calibrated in this run"
    choice = metric.choice()
    if recommended and choice is not None and choice.point is not None:
        return _brief(choice.point)
    reason = choice.reason if choice is not None else NO_PROBABILITIES
    return f"as configured: {reason}"
