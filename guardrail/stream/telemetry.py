"""Prometheus metrics of one worker (its own registry, so tests can run several).

    telemetry = Telemetry()
    telemetry.expect_metrics(["bias", "toxicity"])   # series at 0 (a group's: at its first count)
    group = telemetry.groups.group_of(metadata)     # bounded: see .group_series
    telemetry.groups.count("toxicity", "unsafe", group)
    body = telemetry.render()      # text exposition format for /metrics
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, NamedTuple

from prometheus_client import (CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram,
                               generate_latest)

from .group_series import SERIES_LABELS, GroupSeries

if TYPE_CHECKING:
    from ..judging.models import RedteamMetrics

__all__ = ["Telemetry", "CONTENT_TYPE_LATEST"]


class _JudgedSeries(NamedTuple):
    """The series of :meth:`Telemetry.count_judged` that have fixed labels."""

    cases: Any
    input_tokens: Any
    output_tokens: Any


class Telemetry:
    """Every counter the worker exports on ``/metrics``."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.messages = Counter("guardrail_messages", "Input messages handled, by outcome "
                                "(judged, not_sampled, dlq; and what an input format counts "
                                "instead of judging: no_genai_span, no_content, "
                                "unreadable_content, tool_calls, content_filter, "
                                "empty_output)",
                                ["outcome"], registry=r)
        self.judgments = Counter(
            "guardrail_judgments", "Metric judgments by verdict (safe, unsafe, error), "
            "group (metadata model, model_version, prompt_version; '-' when missing; "
            "'other' beyond metrics_max_groups groups) and unit (turn: an answer or agent "
            "run; session: a whole conversation's judgment)",
            ["metric", "verdict", *SERIES_LABELS], registry=r)
        self.unsafe_rate = Gauge(
            "guardrail_unsafe_rate", "UNSAFE share of this worker's SAFE and UNSAFE verdicts "
            "of the metric and group since it started (errors left out); for a share over "
            "time or across workers use guardrail_judgments_total", ["metric", *SERIES_LABELS],
            registry=r)
        self.groups_folded = Counter(
            "guardrail_metrics_groups_folded", "Groups counted under 'other' because "
            "metrics_max_groups groups already had series (each once, up to 10000)",
            registry=r)
        #: Which group a judgment is counted under (MessageJudge sets max_groups).
        self.groups = GroupSeries(self.judgments, self.unsafe_rate, self.groups_folded)
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
        # Liveness (guardrail.stream.liveness): lag that makes no progress.
        self.stalled_partitions = Gauge(
            "guardrail_stalled_partitions", "Partitions this worker holds with lag and no "
            "committed progress for stall_seconds (0 while the judge is paused: an outage "
            "explains it)", registry=r)
        self.seconds_since_progress = Gauge(
            "guardrail_seconds_since_progress", "Seconds since the partition's committed "
            "offset last moved or its lag was last 0 (since it was assigned, at most)",
            ["topic", "partition"], registry=r)
        # Kafka trouble (guardrail.stream.kafka_trouble): the client's failures.
        self.kafka_client_errors = Counter(
            "guardrail_kafka_client_errors", "Failed Kafka client operations, by kind "
            "(connect, metadata, fetch, produce, coordinator, commit) and error name",
            ["kind", "error"], registry=r)
        self.kafka_trouble = Gauge(
            "guardrail_kafka_trouble", "1 while the last report interval "
            "(kafka_trouble_seconds) had Kafka client failures; 0 after a whole interval "
            "without", registry=r)
        self.kafka_unreachable_brokers = Gauge(
            "guardrail_kafka_unreachable_brokers", "Brokers the Kafka client could not "
            "connect to in the last report interval with failures", registry=r)
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
        # The judge against its reviewers (guardrail.agents.agreement): one series per
        # metric and group, the newest window with reviews; gone when it expires.
        self.judge_precision = Gauge(
            "guardrail_judge_precision", "The judge's precision against reviewers (weighted), "
            "newest window with reviews", ["metric", "group"], registry=r)
        self.judge_recall = Gauge(
            "guardrail_judge_recall", "The judge's recall against reviewers (weighted), "
            "newest window with reviews", ["metric", "group"], registry=r)
        self.reviewed_labels = Gauge(
            "guardrail_reviewed_labels", "Reviewers' labels in the newest window with "
            "reviews", ["metric", "group"], registry=r)
        self.agreement_alerts = Counter("guardrail_agreement_alerts", "Agreement alerts fired",
                                        ["metric"], registry=r)
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
        # A cascade (escalate_model): which stage's verdict stands.
        self.stage_judgments = Counter("guardrail_stage_judgments", "Metric judgments of a "
                                       "cascade by the stage whose verdict stands (first, "
                                       "escalated) and verdict", ["stage", "verdict"],
                                       registry=r)
        # Agent runs (guardrail.agents.run_assembly).
        self.run_spans = Counter("guardrail_run_spans", "Spans of agent runs, by outcome "
                                 "(forwarded to assembly, added to a run, duplicate, late: "
                                 "its run was judged already, dropped: past a run's caps)",
                                 ["outcome"], registry=r)
        self.runs = Counter("guardrail_runs", "Agent runs sent to judging, by status "
                            "(complete, idle, truncated), and late_span: spans that came "
                            "for a run already judged", ["outcome"], registry=r)
        self.open_runs = Gauge("guardrail_open_runs", "Agent runs being assembled on this "
                               "worker", registry=r)
        self.open_run_spans = Gauge("guardrail_open_run_spans", "Spans held by the open runs "
                                    "of this worker", registry=r)
        self.open_run_bytes = Gauge("guardrail_open_run_bytes", "Bytes of spans held by the "
                                    "open runs of this worker", registry=r)
        # Sessions (guardrail.agents.session_assembly).
        self.session_turns = Counter("guardrail_session_turns", "Turns of sessions, by "
                                     "outcome (forwarded to assembly, added to a session, "
                                     "duplicate)", ["outcome"], registry=r)
        self.session_judgments = Counter("guardrail_session_judgments", "Session judgments "
                                         "started, by trigger (every_n, turn_flagged, idle, "
                                         "resumed)", ["trigger"], registry=r)
        self.open_sessions = Gauge("guardrail_open_sessions", "Sessions held on this worker "
                                   "(open or being judged)", registry=r)
        self.open_session_turns = Gauge("guardrail_open_session_turns", "Turns held by the "
                                        "sessions of this worker", registry=r)
        self.open_session_bytes = Gauge("guardrail_open_session_bytes", "Bytes of turns held "
                                        "by the sessions of this worker", registry=r)
        # Gate mode (guardrail.agents.gate).
        self.gate_records = Counter("guardrail_gate_records", "Input records the gate placed, "
                                    "by where (approved, held, dlq) and reason (unsafe, "
                                    "invalid, judge_error, budget, unsure, session_unsafe; "
                                    "released: by a reviewer; '-': approved)",
                                    ["to", "reason"], registry=r)
        self.gate_unjudged = Counter("guardrail_gate_unjudged", "Records approved without a "
                                     "verdict (gate_on_error: pass)", registry=r)
        self.gate_waiting = Gauge("guardrail_gate_waiting", "Records read and not yet placed: "
                                  "being judged, waiting behind an earlier one, parked",
                                  registry=r)
        self.gate_parked = Gauge("guardrail_gate_parked", "Records parked behind a held "
                                 "record of their key (gate_hold_blocks_key)", registry=r)
        self.gate_order_wait = Histogram(
            "guardrail_gate_order_wait_seconds", "Seconds from a record's decision to its "
            "forward: waiting for earlier records of its key or partition, and the send",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 30), registry=r)
        self.gate_reviews = Counter("guardrail_gate_reviews", "Reviewers' answers on held "
                                    "records carried out (released, confirmed)", ["answer"],
                                    registry=r)
        self.gate_held_open = Gauge("guardrail_gate_held_open", "Held records of this "
                                    "worker's partitions waiting for a reviewer's answer",
                                    registry=r)

        # Known label values exist from the start, at 0: Prometheus only sees an
        # increase between two scrapes of a series, so a series born at its first
        # count (a burst within one scrape) would show no rate at all.
        for outcome in ("judged", "not_sampled", "dlq"):
            self.messages.labels(outcome=outcome)
        for direction in ("input", "output"):
            self.tokens.labels(direction=direction)
        # The series every judged case counts in, looked up once: a labels()
        # call per case and metric was a measurable share of a judged message.
        # Held in a tuple: the attributes that are metrics are the families.
        self._judged_series = _JudgedSeries(self.messages.labels(outcome="judged"),
                                            self.tokens.labels(direction="input"),
                                            self.tokens.labels(direction="output"))
        for state in ("throttled", "restored"):
            self.budget_alerts.labels(state=state)
        for reason in ("queue_full", "export_failed", "shutdown", "invalid"):
            self.otlp_dropped.labels(reason=reason)
        for outcome in ("forwarded", "added", "duplicate", "late", "dropped"):
            self.run_spans.labels(outcome=outcome)
        for outcome in ("complete", "idle", "truncated", "late_span"):
            self.runs.labels(outcome=outcome)
        for outcome in ("forwarded", "added", "duplicate"):
            self.session_turns.labels(outcome=outcome)
        for trigger in ("every_n", "turn_flagged", "idle", "resumed"):
            self.session_judgments.labels(trigger=trigger)
        self.effective_sample_rate.set(1.0)

    def expect_metrics(self, names: Iterable[str]) -> None:
        """Start the per-metric series of these rubric metrics at 0 (see above);
        their verdict series per group start at 0 when the group is first counted."""
        names = list(names)
        self.groups.expect_metrics(names)  # per group, from its first count
        for name in names:
            self.alerts.labels(metric=name)

    def count_judged(self, metrics: RedteamMetrics, metadata: dict[str, str], *,
                     unit: str = "turn", escalation_model: str | None = None) -> None:
        """Count one judged case: its verdicts per group and ``unit`` (``turn``, or
        ``session`` for a session judgment), tokens, cost, cache hits, and with a
        cascade (``escalation_model``) which stage decided."""
        series = self._judged_series
        series.cases.inc()
        group = self.groups.group_of(metadata, unit=unit)
        for m in metrics.metrics:
            verdict = "error" if m.error else ("unsafe" if m.unsafe else "safe")
            self.groups.count(m.name, verdict, group)
            self.dropped_spans.inc(m.dropped_spans)
            self.cache_hits.inc(m.cached)
            series.input_tokens.inc(m.input_tokens)
            series.output_tokens.inc(m.output_tokens)
            self.cached_tokens.inc(m.cached_tokens)
            if m.cost is None:
                self.unpriced.inc()
            else:
                self.cost.inc(m.cost)
            if escalation_model is not None:  # who decided: first stage or second
                stage = "escalated" if m.judge_model == escalation_model else "first"
                self.stage_judgments.labels(stage=stage, verdict=verdict).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
