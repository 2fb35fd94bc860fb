"""Replay without a broker: where its records go, and what its summary says
(the run itself is tested on the embedded broker in test_stream.py)."""

import pytest

from guardrail.errors import ConfigError
from guardrail.kafka.replay import ReplaySummary, output_topics
from guardrail.models import CostEstimate, MetricResult, RedteamMetrics
from guardrail.settings import load_settings
from guardrail.stream.processing import Outgoing


@pytest.fixture
def settings():
    return load_settings(environ={}, results_topic="live-res", dlq_topic="live-dlq")


def test_a_replay_with_its_own_results_topic_keeps_bad_input_beside_them(settings):
    assert output_topics(settings, "R", None) == ("R", "R.dlq")
    assert output_topics(settings, "R", "mine") == ("R", "mine")


def test_a_replay_into_the_live_results_uses_the_live_dlq(settings):
    assert output_topics(settings, None, None) == ("live-res", "live-dlq")
    assert output_topics(settings, "live-res", None) == ("live-res", "live-dlq")


def test_the_dlq_cannot_be_the_results_topic(settings):
    with pytest.raises(ConfigError, match="must differ"):
        output_topics(settings, "R", "R")


def _metrics(*results):
    return RedteamMetrics(metrics=list(results), cost=CostEstimate())


def test_the_summary_counts_results_dlq_and_events_apart():
    summary = ReplaySummary(topic="in", results_topic="R", dlq_topic="R.dlq")
    summary.count([Outgoing("R", b"a", b"{}"), Outgoing("R.dlq", None, b"{}"),
                   Outgoing("judgments", b"k", b"{}"), Outgoing("R", b"b", b"{}")])
    data = summary.to_json()
    assert (data["results"], data["dlq"], data["judgment_events"]) == (2, 1, 1)


def test_the_summary_ends_with_judged_cached_and_cost():
    summary = ReplaySummary(topic="in", results_topic="R", dlq_topic="R.dlq",
                            judge_model="openai/x", cache="/tmp/c.sqlite")
    summary.tally.add(_metrics(
        MetricResult(name="a", score=1.0, input_tokens=100, output_tokens=10, cost=0.002),
        MetricResult(name="b", score=1.0, cached=True, cost=0.0)))
    data = summary.to_json()
    assert list(data)[-3:] == ["output_tokens", "cost_usd", "cost"]
    assert (data["judged"], data["cached"], data["cache"]) == (1, 1, "/tmp/c.sqlite")
    assert (data["input_tokens"], data["output_tokens"]) == (100, 10)
    assert data["cost_usd"] == 0.002 and data["cost"] == "$0.002000"


def test_an_unknown_price_is_said_as_such_not_zero():
    summary = ReplaySummary(topic="in", judge_model="openai/unpriced")
    summary.tally.add(_metrics(MetricResult(name="a", score=1.0, cost=None),
                               MetricResult(name="b", score=1.0, cost=0.001)))
    data = summary.to_json()
    assert data["cost_usd"] is None
    assert data["cost"].startswith("unknown: 1 judgments have no price")
    assert "openai/unpriced" in data["cost"] and "$0.001000" in data["cost"]
