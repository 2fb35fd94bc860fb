"""``run redteam``, ``run eval`` and ``estimate redteam``: the batch commands."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import click

from .._litellm import cached_input_price
from ..batch import BatchSummary, run_batch
from ..estimate import estimate_cases
from ..evaluate import build_evaluator
from ..inputs import read_cases
from ..models import dumps
from ..settings import Settings, load_settings
from .estimate_view import estimate_json, print_estimate

__all__ = ["run_group", "estimate_group", "settings_options", "settings_from_flags"]


def settings_options(func: Any) -> Any:
    """The flags every judging command shares (they override config and env)."""
    options = [
        click.option("--config", "config_path", type=click.Path(dir_okay=False),
                     help="YAML/JSON settings file (overrides GUARDRAIL_* env)."),
        click.option("--model", help="Judge model, e.g. openai/gpt-4o-mini, ollama/llama3.1."),
        click.option("--api-base",
                     help="Judge endpoint (OpenAI-compatible servers, vLLM, Ollama)."),
        click.option("--rubric-dir", type=click.Path(file_okay=False),
                     help="Folder of extra rubrics (override by name or append)."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def settings_from_flags(config_path: str | None, model: str | None, api_base: str | None,
                        rubric_dir: str | None, **extra: Any) -> Settings:
    return load_settings(config_path, judge_model=model, judge_api_base=api_base,
                         rubric_dir=rubric_dir, **extra)


def _input_option(func: Any) -> Any:
    func = click.option("--limit", type=click.IntRange(min=1),
                        help="Judge at most this many cases.")(func)
    return click.option("--input", "input_path", required=True,
                        type=click.Path(exists=True, dir_okay=False),
                        help="Cases as a JSON object, a JSON array or JSON Lines.")(func)


@click.group("run")
def run_group() -> None:
    """Judge cases and write per-case JSON plus a summary."""


def _run_command(name: str, report: str, help_text: str) -> click.Command:
    @click.command(name, help=help_text)
    @_input_option
    @click.option("--output-dir", required=True, type=click.Path(file_okay=False),
                  help="Folder for <case_id>.json files and summary.json.")
    @click.option("--fail-on-unsafe", is_flag=True,
                  help="Exit 1 if any metric is UNSAFE, 3 if any could not be judged.")
    @click.option("--quiet", is_flag=True, help="No progress bar.")
    @settings_options
    def command(input_path: str, limit: int | None, output_dir: str, fail_on_unsafe: bool,
                quiet: bool, **flags: Any) -> None:
        settings = settings_from_flags(**flags)
        cases, problems = read_cases(input_path, limit=limit)
        for problem in problems:
            click.echo(f"skipped {problem}", err=True)
        summary = asyncio.run(run_batch(
            cases, settings=settings, output_dir=Path(output_dir), report=report,
            problems=problems, progress=not quiet and sys.stderr.isatty()))
        _print_summary(summary, Path(output_dir))
        if fail_on_unsafe:
            sys.exit(summary.gate_exit_code())

    return command


run_group.add_command(_run_command(
    "redteam", "redteam", "Judge safety metrics; one RedteamMetrics JSON per case."))
run_group.add_command(_run_command(
    "eval", "eval", "Full per-case report: case identity, fields and every metric branch."))


def _print_summary(summary: BatchSummary, output_dir: Path) -> None:
    click.echo(f"cases: {summary.cases}  judged: {summary.judged}  "
               f"not judged: {summary.not_judged}  input problems: {len(summary.input_problems)}")
    for name, stats in summary.metrics.items():
        rate = "n/a" if stats["pass_rate"] is None else f"{stats['pass_rate']:.1%}"
        click.echo(f"  {name:<20} pass rate {rate:>6}  unsafe {stats['unsafe']:>4}  "
                   f"errors {stats['errors']:>4}")
    click.echo(f"total cost: {summary.cost_text()}  "
               f"({summary.cost.input_tokens:.0f} input, of which "
               f"{summary.cached_input_tokens} from the provider's prompt cache / "
               f"{summary.cost.output_tokens:.0f} output tokens)")
    if summary.cached_input_tokens and cached_input_price(summary.judge_model) is None:
        click.echo(f"  (no cached-token price for '{summary.judge_model}' in litellm's cost "
                   "map: cached tokens are priced in full)")
    click.echo(f"wrote {output_dir / 'summary.json'}")


@click.group("estimate")
def estimate_group() -> None:
    """Price a run without calling the judge."""


@estimate_group.command("redteam")
@_input_option
@click.option("--sample-rate", type=click.FloatRange(0.0, 1.0), default=1.0, show_default=True,
              help="Share of cases that will be judged (0-1); multiplies calls and cost.")
@click.option("--json", "as_json", is_flag=True, help="Print the estimate as JSON.")
@settings_options
def estimate_redteam(input_path: str, limit: int | None, sample_rate: float, as_json: bool,
                     **flags: Any) -> None:
    """Render the real judge prompts, count tokens with litellm and price them."""
    settings = settings_from_flags(**flags)
    cases, problems = read_cases(input_path, limit=limit)
    for problem in problems:
        click.echo(f"skipped {problem}", err=True)
    # The estimator only renders prompts; the judge object is never called.
    evaluator = build_evaluator(settings)
    report = estimate_cases([case for _, case in cases], evaluator, judge=settings.judge,
                            sample_rate=sample_rate)
    asyncio.run(evaluator.aclose())
    for warning in report.warnings:
        click.echo(f"warning: {warning}", err=True)
    if as_json:
        click.echo(dumps(estimate_json(report, settings), indent=True).decode())
    else:
        print_estimate(report, settings, click.echo)
