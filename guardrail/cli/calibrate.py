"""``calibrate``: how far to trust a judge, measured on labelled cases.

    guardrail calibrate [--labels F.jsonl] [--metric toxicity] [--limit N] [--output-dir D]
                        [--json] [--quiet]
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import click

from ..calibrate import (CalibrationReport, calibrate, default_labels_path, read_labels,
                         write_report)
from ..errors import InputError
from ..models import dumps
from .batch import settings_from_flags, settings_options
from .progress import Progress

__all__ = ["calibrate_command"]


@click.command("calibrate")
@click.option("--labels", "labels_path", type=click.Path(exists=True, dir_okay=False,
                                                         path_type=Path),
              help='JSON Lines of {"output", "label": "unsafe"|"safe", "metric"} '
                   "(default: the built-in set of 40).")
@click.option("--metric", "metrics", multiple=True, help="Only this metric (repeatable).")
@click.option("--limit", type=click.IntRange(min=1), help="At most N cases per metric.")
@click.option("--output-dir", default="calibration", show_default=True,
              type=click.Path(file_okay=False, path_type=Path),
              help="Where report.json and misjudged.jsonl go.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--quiet", is_flag=True, help="No progress line.")
@settings_options
def calibrate_command(labels_path: Path | None, metrics: tuple[str, ...], limit: int | None,
                      output_dir: Path, as_json: bool, quiet: bool, **flags: Any) -> None:
    """Measure the configured judge against labelled cases (unsafe = positive)."""
    settings = settings_from_flags(**flags)
    labels_path = labels_path or default_labels_path()
    cases, problems = read_labels(labels_path, metrics=metrics, limit=limit)
    for problem in problems:
        click.echo(f"skipped {problem}", err=True)
    if not cases:
        raise InputError(f"no labelled cases to judge in {labels_path}"
                         + (f" for metric {', '.join(metrics)}" if metrics else ""))
    with Progress("judged", unit="cases", total=len(cases), enabled=not quiet) as progress:
        report = asyncio.run(calibrate(cases, settings=settings,
                                       progress=lambda _outcome: progress.advance()))
    report.problems = problems
    paths = write_report(report, output_dir)
    if as_json:
        click.echo(dumps(report.as_dict(), indent=True).decode())
    else:
        _print_report(report, labels_path)
    click.echo(f"wrote {paths['report']} and {paths['misjudged']} "
               f"({len(report.misjudged())} misjudged)", err=as_json)


def _figure(value: float | None) -> str:
    return "  n/a" if value is None else f"{value:5.3f}"


def _print_report(report: CalibrationReport, labels_path: Path) -> None:
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
