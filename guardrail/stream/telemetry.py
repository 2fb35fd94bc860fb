"""Prometheus metrics of one worker (its own registry, so tests can run several).

    telemetry = Telemetry()
    telemetry.expect_metrics(["bias", "toxicity"])   # their series start at 0
    telemetry.judgments.labels(metric="toxicity", verdict="unsafe").inc()
    body = telemetry.render()      # text exposition format for /metrics
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import (CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram,
                               generate_latest)

__all__ = ["Telemetry", "CONTENT_TYPE_LATEST"]


class Telemetry:
    """Every counter the worker exports on ``/metrics``."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.messages = Counter("guardrail_messages", "Input messages handled, by outcome "
                                "(judged, not_sampled, dlq)", ["outcome"], registry=r)
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
        self.unknown_records = Counter(
            "guardrail_unknown_records", "Records of a kind or schema version this release "
            "does not know (a newer worker's, during a rolling upgrade): skipped",
            ["topic", "kind", "schema_version"], registry=r)
        self.alerts = Counter("guardrail_alerts", "Alerts fired", ["metric"], registry=r)
        self.review_items = Counter("guardrail_review_items", "Judged results sent to the "
                                    "human review queue", registry=r)
        self.in_flight = Gauge("guardrail_in_flight_messages", "Messages being judged",
                               registry=r)
        # Sampling and the judge budget (per worker: see guardrail.stream.budget).
        self.effective_sample_rate = Gauge(
            "guardrail_effective_sample_rate", "Sample rate in force: sample_rate, lowered "
            "while the judge budget is short", registry=r)
        self.spend_usd_per_hour = Gauge(
            "guardrail_judge_spend_usd_per_hour", "This worker's judge spend over the last "
            "hour (USD, known prices)", registry=r)
        self.spend_tokens_per_hour = Gauge(
            "guardrail_judge_spend_tokens_per_hour", "This worker's judge tokens over the "
            "last hour", registry=r)
        self.budget_alerts = Counter("guardrail_budget_alerts", "Budget alerts fired, by "
                                     "state (throttled, restored)", ["state"], registry=r)
        # Evaluation results sent as OTLP log records (see guardrail.stream.otel_export).
        self.otlp_exported = Counter("guardrail_otlp_exported_records", "Evaluation log "
                                     "records the OTLP endpoint accepted", registry=r)
        self.otlp_failures = Counter("guardrail_otlp_export_failures", "OTLP log export "
                                     "requests that failed (error answer, unreachable)",
                                     registry=r)
        self.otlp_dropped = Counter("guardrail_otlp_dropped_records", "Evaluation log records "
                                    "not delivered, by reason (queue_full, export_failed, "
                                    "shutdown, invalid)", ["reason"], registry=r)

        # Known label values exist from the start, at 0: Prometheus only sees an
        # increase between two scrapes of a series, so a series born at its first
        # count (a burst within one scrape) would show no rate at all.
        for outcome in ("judged", "not_sampled", "dlq"):
            self.messages.labels(outcome=outcome)
        for direction in ("input", "output"):
            self.tokens.labels(direction=direction)
        for state in ("throttled", "restored"):
            self.budget_alerts.labels(state=state)
        for reason in ("queue_full", "export_failed", "shutdown", "invalid"):
            self.otlp_dropped.labels(reason=reason)
        self.effective_sample_rate.set(1.0)

    def expect_metrics(self, names: Iterable[str]) -> None:
        """Start the per-metric series of these rubric metrics at 0 (see above)."""
        for name in names:
            for verdict in ("safe", "unsafe", "error"):
                self.judgments.labels(metric=name, verdict=verdict)
            self.alerts.labels(metric=name)

    def render(self) -> bytes:
        return generate_latest(self.registry)
