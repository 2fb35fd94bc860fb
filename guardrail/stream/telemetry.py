"""Prometheus metrics of one worker (its own registry, so tests can run several).

    telemetry = Telemetry()
    telemetry.judgments.labels(metric="toxicity", verdict="unsafe").inc()
    body = telemetry.render()      # text exposition format for /metrics
"""

from __future__ import annotations

from prometheus_client import (CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram,
                               generate_latest)

__all__ = ["Telemetry", "CONTENT_TYPE_LATEST"]


class Telemetry:
    """Every counter the worker exports on ``/metrics``."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.messages = Counter("guardrail_messages", "Input messages handled, by outcome "
                                "(judged, dlq)", ["outcome"], registry=r)
        self.judgments = Counter("guardrail_judgments", "Metric judgments by verdict "
                                 "(safe, unsafe, error)", ["metric", "verdict"], registry=r)
        self.judge_latency = Histogram(
            "guardrail_judge_latency_seconds", "Time to judge all metrics of one message",
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60), registry=r)
        self.tokens = Counter("guardrail_judge_tokens", "Judge tokens", ["direction"],
                              registry=r)
        self.cached_tokens = Counter(
            "guardrail_judge_cached_prompt_tokens", "Judge input tokens the provider served "
            "from its prompt cache (part of the input tokens)", registry=r)
        self.cost = Counter("guardrail_judge_cost_usd", "Judge spend in USD (known prices)",
                            registry=r)
        self.unpriced = Counter("guardrail_judge_unpriced_calls",
                                "Judgments whose price is unknown", registry=r)
        self.dropped_spans = Counter("guardrail_dropped_evidence_spans", "Evidence spans not "
                                     "found in the judged text", registry=r)
        self.cache_hits = Counter("guardrail_cache_hits", "Judgments served from the cache",
                                  registry=r)
        self.paused = Gauge("guardrail_judge_paused", "1 while paused on a judge outage",
                            registry=r)
        self.outage_pauses = Counter("guardrail_outage_pauses", "Batches held back because "
                                     "the judge was unavailable", registry=r)
        self.lag = Gauge("guardrail_consumer_lag", "Messages not yet committed",
                         ["topic", "partition"], registry=r)
        self.duplicate_judgments = Counter(
            "guardrail_duplicate_judgments", "Redelivered judgment events not counted again",
            registry=r)
        self.alerts = Counter("guardrail_alerts", "Alerts fired", ["metric"], registry=r)
        self.in_flight = Gauge("guardrail_in_flight_messages", "Messages being judged",
                               registry=r)

    def render(self) -> bytes:
        return generate_latest(self.registry)
