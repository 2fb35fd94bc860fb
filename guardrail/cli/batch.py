"""``run redteam``, ``run eval`` and ``estimate redteam``: the batch commands."""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path
from typing import Any

import click
import orjson

from ..providers.litellm import cached_input_price
from ..batch.run import (EXIT_PASS, GATE_EXIT_CODES, NOTHING_JUDGED_EXIT, BatchSummary,
                     report_folder, run_batch)
from ..batch.estimate import estimate_cases
from ..judges.build import build_evaluator
from ..formats import build_decoder
from ..formats.settings import INPUT_FORMATS
from ..formats.reader import InputRead, read_inputs
from ..judging.models import dumps
from ..config.settings import Settings, load_settings
from .estimate_view import estimate_json, print_estimate
from .progress import Progress

__all__ = ["run_group", "estimate_group", "settings_options", "settings_from_flags",
           "batch_api_options",
           "not_judged_line", "input_format_options", "read_input_file"]


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


def _mapping_flag(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    if value is None:
        return None
    try:
        mapping = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        raise click.BadParameter(f"not valid JSON: {exc}") from None
    if not isinstance(mapping, dict):
        raise click.BadParameter("must be a JSON object: case field -> JMESPath expression")
    return mapping


def input_format_options(func: Any) -> Any:
    """``--input-format`` and ``--input-mapping`` (settings ``input_format``,
    ``input_mapping``) for the commands that read input records."""
    func = click.option("--input-mapping", callback=_mapping_flag,
                        help='JSON object of case field -> JMESPath expression, e.g. '
                        '\'{"output": "response.text"}\' (implies --input-format mapping).')(func)
    return click.option("--input-format", type=click.Choice(INPUT_FORMATS),
                        help="How input records are read: case (guardrail's case JSON, the "
                        "default), otlp (OpenTelemetry spans), openai (chat-completions "
                        "logs), mapping (any JSON, with --input-mapping).")(func)


def read_input_file(input_path: str, settings: Settings, *, limit: int | None) -> InputRead:
    """The file's cases in the configured input format; what was skipped or
    could not be read is said on stderr."""
    read = read_inputs(input_path, decoder=build_decoder(settings.inputs), limit=limit,
                       conversation_max_chars=settings.inputs.conversation_max_chars)
    for problem in read.problems:
        click.echo(f"skipped {problem}", err=True)
    if read.skipped:
        counts = ", ".join(f"{count} {outcome}" for outcome, count in read.skipped.items())
        click.echo(f"not judged (nothing to judge): {counts}", err=True)
    return read


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


@click.group("run", short_help="Judge a file of cases; write results and a summary.")
def run_group() -> None:
    """Judge cases and write per-case JSON plus a summary."""


def _exit_codes_help() -> str:
    """The exit codes, shown under ``run redteam|eval --help`` (\\b: click keeps the lines)."""
    lines = {EXIT_PASS: f"finished; with --fail-on-unsafe: {GATE_EXIT_CODES[EXIT_PASS]}",
             2: "usage, settings or input file error"}
    lines.update({code: f"{text} (--fail-on-unsafe)" for code, text in GATE_EXIT_CODES.items()
                  if code != EXIT_PASS})
    code, text = NOTHING_JUDGED_EXIT
    lines[code] += f"; without it: {text}"
    return "\n".join(["\b", "Exit codes:", *(f"  {code}  {lines[code]}" for code in sorted(lines)),
                      "When several apply, the first of 1, 3, 4 wins."])


def _run_command(name: str, report: str, short_help: str, help_text: str) -> click.Command:
    @click.command(name, short_help=short_help, help=help_text, epilog=_exit_codes_help())
    @_input_option
    @click.option("--output-dir", required=True, type=click.Path(file_okay=False),
                  help="Folder for <case_id>.json files and summary.json (run eval writes "
                       "into its eval/ subfolder, so both runs can share one folder).")
    @click.option("--fail-on-unsafe", is_flag=True,
                  help="Deployment gate: exit 1 if any metric is UNSAFE, else 3 if any could "
                       "not be judged, else 4 if input records were skipped or the input held "
                       "no case; 0 only when every case was read and judged SAFE. Without it, "
                       "a run exits 0 once finished, or 3 when it judged none of its cases.")
    @click.option("--quiet", is_flag=True, help="No progress line.")
    @batch_api_options
    @input_format_options
    @settings_options
    def command(input_path: str, limit: int | None, output_dir: str, fail_on_unsafe: bool,
                quiet: bool, batch_api: bool, batch_state: str | None, **flags: Any) -> None:
        settings = settings_from_flags(**flags)
        read = read_input_file(input_path, settings, limit=limit)
        cases, problems = read.cases, read.problems
        folder = report_folder(Path(output_dir), report)
        with Progress("judged", unit="cases", total=len(cases), missed_label="not judged",
                      enabled=not quiet and bool(cases)) as progress:
            def update(judged: int, not_judged: int, total: int) -> None:
                progress.update(judged, total, missed=not_judged)

            if batch_api:
                summary = _run_batch_api(cases, settings, folder, report, problems,
                                         batch_state, update)
            else:
                summary = asyncio.run(run_batch(
                    cases, settings=settings, output_dir=folder, report=report,
                    problems=problems, progress=update))
        _print_summary(summary, folder)
        _exit(summary, fail_on_unsafe)

    return command


def batch_api_options(func: Any) -> Any:
    """``--batch-api`` and ``--batch-state`` of ``run redteam|eval`` and ``replay``."""
    func = click.option("--batch-state", type=click.Path(dir_okay=False),
                        help="With --batch-api: the state file a stopped run resumes from "
                             "(default: run: OUTPUT_DIR/.batch-api-state.json; replay: "
                             "~/.cache/guardrail/replay-batch-state.json).")(func)
    return click.option("--batch-api", is_flag=True,
                        help="Send the judge requests through the provider's batch API "
                             "(Anthropic's Message Batches for an anthropic/ judge, else "
                             "OpenAI-compatible /files + /batches) at the batch price; "
                             "results come when each batch finishes (up to 24 h). A rerun "
                             "resumes the batches already submitted.")(func)


def _run_batch_api(cases: Any, settings: Settings, folder: Path, report: str, problems: Any,
                   batch_state: str | None, update: Any) -> BatchSummary:
    from ..batch.batch_api import run_batch_api  # only a batch run needs it

    summary, stats = asyncio.run(run_batch_api(
        cases, settings=settings, output_dir=folder, report=report, problems=problems,
        state_path=Path(batch_state) if batch_state else None,
        say=lambda line: click.echo(line, err=True), progress=update))
    click.echo(f"batch API: {stats.requests} requests, {stats.submitted} chunk(s) submitted, "
               f"{stats.resumed} resumed; state {stats.state_path}", err=True)
    return summary


def _exit(summary: BatchSummary, fail_on_unsafe: bool) -> None:
    """The gate's exit code with --fail-on-unsafe; without it, 0 unless the run
    judged none of its cases."""
    if fail_on_unsafe:
        code, reason = summary.gate()
        click.echo(f"gate: exit {code}: {reason}", err=True)
        sys.exit(code)
    nothing = summary.nothing_judged()
    if nothing is not None:
        code, reason = nothing
        click.echo(f"exit {code}: {reason}", err=True)
        sys.exit(code)


run_group.add_command(_run_command(
    "redteam", "redteam", "Judge cases; one RedteamMetrics JSON per case.",
    "Judge safety metrics; one RedteamMetrics JSON per case."))
run_group.add_command(_run_command(
    "eval", "eval", "Judge cases into full per-case reports.",
    "Full per-case report: case identity, fields and every metric branch."))

#: Reasons longer than this are cut on the console (summary.json keeps them whole).
REASON_WIDTH = 90
#: Reason groups shown on the console; the rest are counted.
REASON_GROUPS = 4
#: What a cut must not split: a URL, or a host:port (IPv4, a name, [IPv6]).
_ADDRESS = re.compile(r"[a-z][a-z0-9+.-]*://\S+|(?:\[[0-9a-fA-F:]+\]|[\w.-]+):\d{1,5}\b")


def _reason_text(reason: str) -> str:
    """The reason, cut to about REASON_WIDTH characters; an address the cut would
    split is kept whole (``127.0.0.…`` names no judge to check)."""
    text = reason.removeprefix("not judged: ")  # the line already says so
    if len(text) <= REASON_WIDTH:
        return text
    cut = REASON_WIDTH - 1
    for address in _ADDRESS.finditer(text):
        if address.start() < cut < address.end():
            cut = address.end()
            break
    return text if cut >= len(text) else text[:cut].rstrip() + "…"


def not_judged_line(reasons: dict[str, int]) -> str:
    """``metrics not judged: 2 (judge unavailable after 4 attempts: …), 1 (output is …)``"""
    groups = [f"{count} ({_reason_text(reason)})"
              for reason, count in list(reasons.items())[:REASON_GROUPS]]
    rest = len(reasons) - REASON_GROUPS
    if rest > 0:
        groups.append(f"{sum(list(reasons.values())[REASON_GROUPS:])} for {rest} other "
                      "reasons (see summary.json)")
    return "metrics not judged: " + ", ".join(groups)


def _print_summary(summary: BatchSummary, output_dir: Path) -> None:
    click.echo(f"cases: {summary.cases}  judged: {summary.judged}  "
               f"not judged: {summary.not_judged}  "
               f"skipped input records: {len(summary.input_problems)}")
    for name, stats in summary.metrics.items():
        rate = "n/a" if stats["pass_rate"] is None else f"{stats['pass_rate']:.1%}"
        click.echo(f"  {name:<20} pass rate {rate:>6}  unsafe {stats['unsafe']:>4}  "
                   f"not judged {stats['errors']:>4}")
    reasons = summary.not_judged_reasons()
    if reasons:
        click.echo(not_judged_line(reasons))
    if not summary.cases:
        click.echo("nothing judged: the input holds no valid case")
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


@estimate_group.command("redteam", short_help="Price judging a file of cases, offline.")
@_input_option
@click.option("--sample-rate", type=click.FloatRange(0.0, 1.0), default=1.0, show_default=True,
              help="Share of cases that will be judged (0-1); multiplies calls and cost.")
@click.option("--json", "as_json", is_flag=True, help="Print the estimate as JSON.")
@click.option("--batch-api", is_flag=True,
              help="Price the run at the batch API price (as run --batch-api would pay).")
@input_format_options
@settings_options
def estimate_redteam(input_path: str, limit: int | None, sample_rate: float, as_json: bool,
                     batch_api: bool, **flags: Any) -> None:
    """Render the real judge prompts, count tokens with litellm and price them."""
    settings = settings_from_flags(**flags)
    if batch_api:
        from ..batch.batch_api import batch_settings

        settings = batch_settings(settings)
        judge = settings.judge
        click.echo("priced at the batch API price" + (
            f": ${judge.input_cost_per_token:g} / ${judge.output_cost_per_token:g} per input / "
            "output token, cached tokens in full" if judge.input_cost_per_token is not None
            else " (none known for this model)"), err=True)
    cases = read_input_file(input_path, settings, limit=limit).cases
    # The estimator only renders prompts; the judge object is never called.
    evaluator = build_evaluator(settings)
    report = estimate_cases([case for _, case in cases], evaluator, judge=settings.judge,
                            sample_rate=sample_rate, escalation=settings.escalation)
    asyncio.run(evaluator.aclose())
    for warning in report.warnings:
        click.echo(f"warning: {warning}", err=True)
    if as_json:
        click.echo(dumps(estimate_json(report, settings), indent=True).decode())
    else:
        print_estimate(report, settings, click.echo)
