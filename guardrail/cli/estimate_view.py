"""How ``estimate redteam`` shows an :class:`~guardrail.batch.estimate.EstimateReport`.

    print_estimate(report, settings, click.echo)     # the table and the totals
    estimate_json(report, settings)                  # the same as a JSON-ready dict
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from ..batch.estimate import OPENAI_MIN_CACHED_PROMPT, EscalationEstimate, EstimateReport
from ..batch.estimate_guard import NOT_PRICED_BY_TOKEN
from ..config.settings import Settings

__all__ = ["estimate_json", "print_estimate"]


def estimate_json(report: EstimateReport, settings: Settings) -> dict[str, Any]:
    return {
        "judge_model": report.model,
        "scoring_mode": settings.evaluation.redteam.scoring_mode,
        "judge_calls": report.judge_calls,
        "sample_rate": report.sample_rate,
        "cases": [asdict(c) for c in report.cases],
        "calls": report.calls,
        "cost": report.total.model_dump(),
        "price_known": report.price_known,
        "cached_prefix": {"input_tokens": report.cached_prefix_tokens,
                          "share": report.prefix_share, "cost": report.cost_cached,
                          "cached_rate_per_token": report.cached_rate},
        "warnings": report.warnings,
        "escalation": None if report.escalation is None else asdict(report.escalation),
        "protocol": report.protocol,
        "stages": [asdict(stage) for stage in report.stages],
        "guard": None if report.guard_output_tokens is None else {
            "output_tokens_per_call": report.guard_output_tokens,
            "priced_by_token": report.priced_by_token,
            "note": None if report.priced_by_token else NOT_PRICED_BY_TOKEN},
        "escalation_uncovered": _uncovered_json(report.escalation_uncovered),
    }


def _uncovered_json(part: EscalationEstimate | None) -> dict[str, Any] | None:
    """What a guard-first cascade always escalates (no band: it is not a ceiling)."""
    if part is None:
        return None
    return {k: v for k, v in asdict(part).items() if k != "band"}


def _money(value: float | None) -> str:
    return "unknown" if value is None else f"${value:.6f}"


def print_estimate(report: EstimateReport, settings: Settings,
                   echo: Callable[[str], Any]) -> None:
    redteam = settings.evaluation.redteam
    protocol = "" if report.protocol == "rubric" else f"protocol={report.protocol}  "
    echo(f"redteam estimate  judge={report.model}  {protocol}scoring_mode={redteam.scoring_mode}  "
         f"include_reasoning={str(redteam.include_reasoning).lower()}  "
         f"judge_calls={report.judge_calls}  sample_rate={report.sample_rate:g}")
    echo(f"{'case_id':<32} {'calls':>5} {'input_tokens':>12} {'output_tokens':>13}")
    for c in report.cases:
        note = f"  (skipped: {c.skipped})" if c.skipped else ""
        echo(f"{c.case_id[:32]:<32} {c.calls:>5} {c.input_tokens:>12} "
             f"{c.output_tokens:>13}{note}")
    total = report.total
    if not report.priced_by_token:
        cost = (f"{_money(total.cost)} ({NOT_PRICED_BY_TOKEN}; set judge_input_cost_per_token "
                "and judge_output_cost_per_token to price them)")
    elif report.price_known:
        cost = _money(total.cost)
    else:
        cost = (f"unknown (no price for '{report.model}' in litellm's cost map; set "
                "judge_input_cost_per_token and judge_output_cost_per_token)")
    sampled = (f" (a sample of {report.sample_rate:.0%} of the cases)"
               if report.sample_rate < 1 else "")
    echo(f"total: {len(report.cases)} cases, {report.calls} judge calls{sampled}, "
         f"{total.input_tokens:.0f} input tokens, {total.output_tokens:.0f} "
         f"output tokens (expected), estimated cost {cost}")
    if report.protocol != "rubric":
        _print_guard(report, settings, echo)
        return
    _print_prefix(report, echo, hosted_openai=settings.judge.api_base is None and (
        report.model.startswith(("openai/", "gpt-"))))
    _print_escalation(report, echo)


def _print_guard(report: EstimateReport, settings: Settings,
                 echo: Callable[[str], Any]) -> None:
    """A guard first: how it was counted, what each stage covers, what stage 2 costs."""
    if report.priced_by_token:
        echo(f"guard {report.protocol}: input tokens are the messages the protocol sends (not "
             "counted: what the server's chat template adds, the model card's own text and "
             f"any chat_template_kwargs); {report.guard_output_tokens} output tokens "
             "expected per call")
    for number, stage in enumerate(report.stages, 1):
        missing = ", ".join(stage.uncovered) or "-"
        if stage.uncovered:
            missing += (" (always escalated to stage 2)" if len(report.stages) > 1 else
                        " (reported as errors, never SAFE: set escalate_model to judge them)")
        echo(f"stage {number}: {stage.judge} ({stage.protocol}) covers "
             f"{', '.join(stage.covers) or 'no metric'}; not covered: {missing}")
    always, ceiling = report.escalation_uncovered, report.escalation
    if always is None or ceiling is None:
        return
    echo(f"stage 2, always (the metrics stage 1 does not cover): {_spend(always)}")
    echo(f"stage 2, ceiling (every metric of every case escalated): at most "
         f"{_spend(ceiling)}; escalate_on={settings.escalation.on} escalates only the "
         "guard's flagged or unsure verdicts besides, a share only a run shows")


def _spend(part: EscalationEstimate) -> str:
    cost = ("unknown (no price in litellm's cost map)" if part.cost is None
            else _money(part.cost))
    return (f"{part.calls:g} judge calls, {part.input_tokens:.0f} input and "
            f"{part.output_tokens:.0f} output tokens, {cost}")


def _print_prefix(report: EstimateReport, echo: Callable[[str], Any], *,
                  hosted_openai: bool) -> None:
    share = report.prefix_share
    if share is None:
        return
    echo(f"cacheable prefix: {report.cached_prefix_tokens:.0f} of "
         f"{report.total.input_tokens:.0f} input tokens ({share:.0%}) are the same in every "
         "call (system text, rubrics, answer instructions)")
    if not report.price_known:
        return
    if report.cached_rate is None:
        echo(f"  no cached-token price for '{report.model}' in litellm's cost map: cached "
             f"tokens are priced in full, so {_money(report.cost_cached)} as above")
    else:
        echo(f"  with that prefix read from the provider's prompt cache (at "
             f"${report.cached_rate:.3g}/token): {_money(report.cost_cached)}; estimated "
             f"range {_money(report.cost_cached)} … {_money(report.total.cost)}")
    calls = sum(c.calls for c in report.cases)
    per_call = sum(c.input_tokens for c in report.cases) / calls if calls else 0
    if hosted_openai and per_call < OPENAI_MIN_CACHED_PROMPT:
        echo(f"  note: OpenAI caches prompts of {OPENAI_MIN_CACHED_PROMPT:,}+ tokens only; "
             f"these calls average {per_call:.0f}, so expect the full price")
    if report.model.startswith(("anthropic/", "claude")):
        echo("  note: Anthropic caches only behind a cache_control breakpoint, which guardrail "
             "does not send: expect the full price")


def _print_escalation(report: EstimateReport, echo: Callable[[str], Any]) -> None:
    ceiling = report.escalation
    if ceiling is None:
        return
    cost = ("unknown (no price in litellm's cost map)" if ceiling.cost is None
            else _money(ceiling.cost))
    low, high = ceiling.band
    echo(f"escalation to {ceiling.model}: at most {ceiling.calls:g} more judge calls, "
         f"{ceiling.input_tokens:.0f} input and {ceiling.output_tokens:.0f} output tokens, "
         f"{cost} more, if every first P(UNSAFE) fell inside the band {low:g}-{high:g}; "
         "a run escalates only those (calibrate's curve shows how many fall there)")
