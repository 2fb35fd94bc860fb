"""This worker's judge spend and verdict counts, read from its telemetry
(the same registry ``/metrics`` renders)::

    spend = spend_of(telemetry)     # a guardrail.stream.telemetry.Telemetry
    spend.cost_usd, spend.input_tokens, spend.verdicts["error"], spend.judge_paused
    spend.effective_sample_rate, spend.budget_alerts["throttled"]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Spend", "spend_of"]


@dataclass(frozen=True)
class Spend:
    """This worker's judge spend and verdict counters since it started."""

    cost_usd: float
    input_tokens: int
    output_tokens: int
    unpriced_calls: int
    verdicts: dict[str, int]
    messages: dict[str, int]
    judge_paused: bool
    #: The share of messages judged now: ``sample_rate``, lowered while the
    #: judge budget is short (guardrail.stream.budget).
    effective_sample_rate: float = 1.0
    #: Budget alerts fired, by state (``throttled``, ``restored``).
    budget_alerts: dict[str, int] | None = None


def _samples(registry: Any, name: str) -> list[tuple[dict[str, str], float]]:
    return [(dict(s.labels), s.value) for family in registry.collect()
            for s in family.samples if s.name == name]


def _sum_by(registry: Any, name: str, label: str) -> dict[str, int]:
    totals: dict[str, int] = {}
    for labels, value in _samples(registry, name):
        key = labels.get(label, "")
        totals[key] = totals.get(key, 0) + int(value)
    return totals


def spend_of(telemetry: Any) -> Spend:
    """Read a :class:`~guardrail.stream.telemetry.Telemetry` registry."""
    registry = telemetry.registry
    tokens = _sum_by(registry, "guardrail_judge_tokens_total", "direction")
    return Spend(
        cost_usd=sum(v for _, v in _samples(registry, "guardrail_judge_cost_usd_total")),
        input_tokens=tokens.get("input", 0), output_tokens=tokens.get("output", 0),
        unpriced_calls=int(sum(v for _, v in _samples(
            registry, "guardrail_judge_unpriced_calls_total"))),
        verdicts=_sum_by(registry, "guardrail_judgments_total", "verdict"),
        messages=_sum_by(registry, "guardrail_messages_total", "outcome"),
        judge_paused=any(v == 1 for _, v in _samples(registry, "guardrail_judge_paused")),
        effective_sample_rate=next((v for _, v in _samples(
            registry, "guardrail_effective_sample_rate")), 1.0),
        budget_alerts=_sum_by(registry, "guardrail_budget_alerts_total", "state"))
