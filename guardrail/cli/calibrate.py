"""``calibrate``: how far to trust a judge, measured on labelled cases, and
where to put each metric's verdict threshold.

    guardrail calibrate [--labels F.jsonl | --labels-topic [TOPIC]] [--metric toxicity]
                        [--limit N] [--output-dir D] [--target accuracy|precision=P|recall=R]
                        [--json] [--quiet]

``--labels-topic`` reads the reviewers' labels straight from the labels topic
(default: the ``labels_topic`` setting); each label becomes the line
``guardrail labels export`` would write and goes through the same reader as a
file (:func:`guardrail.calibration.labels.read_label_rows`), so both give one report.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import click

from ..calibration.calibrate import (CalibrationReport, LabelledCase, MetricReport, calibrate,
                         default_labels_path, read_labels, write_report)
from ..errors import InputError
from ..formats import build_decoder
from ..calibration.labels import read_label_rows
from ..judging.models import dumps
from ..calibration.thresholds import Target, display_rows, recommend
from .batch import input_format_options, settings_from_flags, settings_options
from .progress import Progress

__all__ = ["calibrate_command"]


def _parse_target(_ctx: click.Context, _param: click.Parameter, value: str) -> Target:
    try:
        return Target.parse(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


@click.command("calibrate", short_help="Measure a judge on labelled cases; set thresholds.")
@click.option("--labels", "labels_path", type=click.Path(exists=True, dir_okay=False,
                                                         path_type=Path),
              help='JSON Lines of {"output", "label": "unsafe"|"safe", "metric"}, or of '
                   '{"turns": [{"user", "assistant"}, …], "label", "metric"} for a '
                   "conversation judged as a session (default: the built-in set of 40).")
@click.option("--labels-topic", "labels_topic", is_flag=False, flag_value="", default=None,
              metavar="[TOPIC]",
              help="Read the reviewers' labels from this Kafka topic (alone: the labels_topic "
                   "setting), as `guardrail labels export` would write them.")
@click.option("--bootstrap-servers", help="Kafka bootstrap servers for --labels-topic "
              "(default: GUARDRAIL_BOOTSTRAP_SERVERS, else the embedded broker).")
@click.option("--metric", "metrics", multiple=True, help="Only this metric (repeatable).")
@click.option("--limit", type=click.IntRange(min=1),
              help="N cases per metric, half unsafe and half safe where the file has them "
                   "(a fixed draw: the same N picks the same cases).")
@click.option("--target", default="accuracy", show_default=True, callback=_parse_target,
              help="Which threshold to recommend: accuracy (the best), precision=P (the best "
                   "recall with precision >= P) or recall=R (the best precision with "
                   "recall >= R).")
@click.option("--output-dir", default="calibration", show_default=True,
              type=click.Path(file_okay=False, path_type=Path),
              help="Where report.json, misjudged.jsonl, curves.html and thresholds.yaml go.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--quiet", is_flag=True, help="No progress line.")
@input_format_options
@settings_options
def calibrate_command(labels_path: Path | None, labels_topic: str | None,
                      bootstrap_servers: str | None, metrics: tuple[str, ...],
                      limit: int | None, target: Target, output_dir: Path, as_json: bool,
                      quiet: bool, **flags: Any) -> None:
    """Measure the configured judge against labelled cases (unsafe = positive) and
    recommend each metric's verdict threshold from the judge's P(UNSAFE)."""
    if labels_topic is not None and labels_path is not None:
        raise click.UsageError("--labels and --labels-topic exclude each other")
    settings = settings_from_flags(bootstrap_servers=bootstrap_servers, **flags)
    if labels_topic is not None:
        source, (cases, problems) = _topic_labels(settings, labels_topic, metrics, limit)
    else:
        source = str(labels_path or default_labels_path())
        cases, problems = read_labels(labels_path or default_labels_path(), metrics=metrics,
                                      limit=limit, decoder=build_decoder(settings.inputs))
    for problem in problems:
        click.echo(f"skipped {problem}", err=True)
    if not cases:
        raise InputError(f"no labelled cases to judge in {source}"
                         + (f" for metric {', '.join(metrics)}" if metrics else ""))
    with Progress("judged", unit="cases", total=len(cases), enabled=not quiet) as progress:
        report = asyncio.run(calibrate(cases, settings=settings, target=target,
                                       labels=source,
                                       progress=lambda _outcome: progress.advance()))
    report.problems = problems
    paths = write_report(report, output_dir)
    if as_json:
        click.echo(dumps(report.as_dict(), indent=True).decode())
    else:
        _print_report(report, source)
        _print_thresholds(report)
    _print_written(report, paths, err=as_json)


def _topic_labels(settings: Any, topic: str, metrics: tuple[str, ...], limit: int | None
                  ) -> tuple[str, tuple[list[LabelledCase], list[str]]]:
    """The labels topic's labels through the file reader (always in the case
    format: ``--input-format`` is for files)."""
    from ..review.labels_topic import label_rows, read_labels_topic

    topic = topic or settings.review.labels_topic
    fold = asyncio.run(read_labels_topic(
        settings.kafka, settings.review, topic=topic,
        fetch_wait_ms=settings.worker.consumer_fetch_wait_ms))
    assert fold is not None
    return f"topic:{topic}", read_label_rows(label_rows(fold.records(), topic),
                                             metrics=metrics, limit=limit)


def _figure(value: float | None) -> str:
    return "  n/a" if value is None else f"{value:5.3f}"


def _print_report(report: CalibrationReport, labels_path: str) -> None:
    click.echo(f"calibration  judge={report.judge_model}  scoring_mode={report.scoring_mode}  "
               f"judge_calls={report.judge_calls}  labels={labels_path}  "
               f"({report.seconds:.1f}s)")
    click.echo(f"{'metric':<14} {'cases':>5} {'acc':>5} {'prec':>5} {'recall':>6} {'f1':>5} "
               f"{'errors':>6} {'cost':>10} {'p50 s':>6} {'p95 s':>6}")
    for name, metric in report.metrics.items():
        s = metric.summary()
        cost = "unknown" if s["cost"] is None else f"${s['cost']:.6f}"
        latency = s["latency_s"] or {}
        click.echo(f"{name:<14} {s['cases']:>5} {_figure(s['accuracy'])} "
                   f"{_figure(s['precision'])} {_figure(s['recall']):>6} {_figure(s['f1'])} "
                   f"{s['error_rate']:>6.1%} {cost:>10} {latency.get('p50', 0):>6.2f} "
                   f"{latency.get('p95', 0):>6.2f}")
        matrix = s["confusion"]
        click.echo(f"{'':<14} confusion (label → judged unsafe/safe/error): "
                   f"unsafe → {matrix['unsafe']['unsafe']}/{matrix['unsafe']['safe']}/"
                   f"{matrix['unsafe']['error']}, safe → {matrix['safe']['unsafe']}/"
                   f"{matrix['safe']['safe']}/{matrix['safe']['error']}")


def _print_thresholds(report: CalibrationReport) -> None:
    """Per metric: the curve at round thresholds, the recommendation, the configured one."""
    for note in report.notes():
        click.echo(f"note: {note}")
    for name, metric in report.metrics.items():
        points = metric.curve()
        if points is None:
            continue
        choice = recommend(points, metric.target)
        chosen = choice.point.threshold if choice.point else None
        click.echo(f"\n{name}: verdict UNSAFE when P(UNSAFE) >= threshold; target {metric.target}")
        click.echo(f"  {'threshold':>9} {'prec':>6} {'recall':>6} {'acc':>6} {'f1':>6} "
                   f"{'flagged':>7}")
        for point, mark in display_rows(points, recommended=chosen,
                                        configured=metric.configured):
            arrow = "→" if mark.startswith("recommended") else " "
            click.echo(f"{arrow} {point.threshold:>9g} {_figure(point.precision):>6} "
                       f"{_figure(point.recall):>6} {_figure(point.accuracy):>6} "
                       f"{_figure(point.f1):>6} {point.tp + point.fp:>7}  {mark}".rstrip())
        click.echo(f"  {_verdict_line(name, metric, choice.reason, chosen)}")


def _verdict_line(name: str, metric: MetricReport, reason: str | None,
                  chosen: float | None) -> str:
    if chosen is None:
        return f"{name}: {reason}; no threshold recommended (stays {metric.configured:g})"
    if chosen == metric.configured:
        return f"{name}: the configured {chosen:g} is already the best for {metric.target}"
    return f"{name}: recommended {chosen:g} (configured: {metric.configured:g})"


def _print_written(report: CalibrationReport, paths: dict[str, Path], *, err: bool) -> None:
    """Where the files went and, when thresholds were written, the one line that uses them."""
    others = [paths[k].name for k in ("curves", "thresholds") if k in paths]
    click.echo(f"wrote {paths['report']} and {paths['misjudged']} "
               f"({len(report.misjudged())} misjudged)"
               + (f", {' and '.join(others)}" if others else ""), err=err)
    if "thresholds" in paths:
        inline = dumps(report.recommended()).decode()
        click.echo(f"use them: guardrail worker --config {paths['thresholds']}   (run redteam "
                   f"and replay take it too; or GUARDRAIL_VERDICT_THRESHOLDS='{inline}' beside "
                   "a config of your own)", err=err)
