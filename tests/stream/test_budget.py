"""guardrail.stream.budget: the sliding hour of judge spend, the effective
sample rate stepping down and back up, one alert each way, and the refusal of
a USD budget over an unpriced judge."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.records import budget_governor, priced_verdict, spend_at

from guardrail.errors import ConfigError
from guardrail.config.settings import load_settings
from guardrail.stream.budget import SpendWindow, check_budget_prices

BIN = Path(sys.executable).parent


def test_the_spend_window_slides_over_the_last_hour():
    window = SpendWindow()
    window.add(10.2, 0.5, 100)
    window.add(10.7, 0.25, 50)  # same second: one bucket
    window.add(1800.0, 1.0, 10)
    assert window.totals(1800.0) == (1.75, 160)
    assert window.totals(1800.0, span=60) == (1.0, 10)
    assert window.totals(3611.0) == (1.0, 10)  # the first second is over an hour old


def test_over_budget_the_rate_halves_step_by_step_to_the_floor_with_one_alert():
    governor, clock, alerts, telemetry = budget_governor(
        budget_usd_per_hour=1.0, budget_min_sample_rate=0.2, budget_step_seconds=10)
    assert spend_at(governor, clock, 1000, 0.4) is None  # 0.4 + 0.4 this interval: within
    alert = spend_at(governor, clock, 1000, 0.2)  # 0.6 + 0.6 would pass 1.0
    assert governor.effective_rate == 0.5 and governor.factor == 0.5
    assert alerts == [alert] and alert["kind"] == "budget" and alert["state"] == "throttled"
    assert alert["spend"]["usd_last_hour"] == pytest.approx(0.6)
    assert alert["budget"]["usd_per_hour"] == 1.0
    assert (alert["previous_sample_rate"], alert["effective_sample_rate"]) == (1.0, 0.5)
    spend_at(governor, clock, 1005, 0.3)
    assert governor.effective_rate == 0.5  # one step per budget_step_seconds
    rates = []
    for at in (1010, 1020, 1030, 1040):
        spend_at(governor, clock, at, 0.3)
        rates.append(governor.effective_rate)
    assert rates == [0.25, 0.2, 0.2, 0.2]  # the floor: lowered, never stopped
    assert len(alerts) == 1
    text = telemetry.render().decode()
    assert "guardrail_effective_sample_rate 0.2" in text
    assert "guardrail_judge_spend_usd_per_hour 2.1" in text


def test_when_the_hour_allows_the_rate_climbs_back_and_alerts_once_it_is_restored():
    governor, clock, alerts, _ = budget_governor(
        sample_rate=0.8, budget_usd_per_hour=1.0, budget_min_sample_rate=0.1,
        budget_step_seconds=10)
    spend_at(governor, clock, 1000, 1.5)
    for at in (1010, 1020, 1030):
        spend_at(governor, clock, at, 0.01)
    assert governor.effective_rate == 0.1 and len(alerts) == 1
    rates = []
    for at in range(4610, 4660, 10):  # the burst is over an hour old, the pace is low
        spend_at(governor, clock, at, 0.01)
        rates.append(governor.effective_rate)
    assert rates == [0.2, 0.4, 0.8, 0.8, 0.8]  # back to sample_rate, not above
    assert [a["state"] for a in alerts] == ["throttled", "restored"]
    assert alerts[1]["effective_sample_rate"] == 0.8


def test_a_token_budget_counts_judge_calls_only_never_cache_hits():
    governor, clock, alerts, _ = budget_governor(budget_tokens_per_hour=1000,
                                           budget_step_seconds=1)
    clock.now = 1000
    governor.record([priced_verdict(None, tokens=5000, cached=True)])
    assert governor.update() is None and governor.factor == 1.0
    governor.record([priced_verdict(None, tokens=600)])  # unpriced: tokens still count
    assert governor.update()["state"] == "throttled"
    assert governor.factor == 0.5


def test_without_a_budget_nothing_steps():
    governor, clock, alerts, _ = budget_governor(sample_rate=0.3)
    assert not governor.enabled
    assert spend_at(governor, clock, 1000, 1e6) is None and governor.effective_rate == 0.3


def test_a_usd_budget_needs_a_known_or_configured_judge_price():
    def check(**settings):
        s = load_settings(environ={}, **settings)
        check_budget_prices(s.sampling, s.judge)

    with pytest.raises(ConfigError, match="budget_usd_per_hour needs the judge's price") as e:
        check(judge_model="openai/test-judge", budget_usd_per_hour=1)
    assert "\n" not in str(e.value) and "judge_input_cost_per_token" in str(e.value)
    check(judge_model="openai/test-judge", budget_usd_per_hour=1,
          judge_input_cost_per_token=1e-6, judge_output_cost_per_token=2e-6)
    check(judge_model="openai/gpt-4o-mini", budget_usd_per_hour=1)  # in the cost map
    check(judge_model="openai/test-judge", budget_tokens_per_hour=1000)  # tokens: no price


def test_the_worker_refuses_to_start_with_a_usd_budget_over_an_unpriced_judge(tmp_path):
    env = {"PATH": str(BIN), "HOME": str(tmp_path), "LITELLM_LOCAL_MODEL_COST_MAP": "True",
           "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
           "GUARDRAIL_JUDGE_MODEL": "openai/test-judge",
           "GUARDRAIL_JUDGE_API_BASE": "http://127.0.0.1:9/v1",
           "GUARDRAIL_BUDGET_USD_PER_HOUR": "0.5"}
    proc = subprocess.run([str(BIN / "guardrail"), "worker"], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.startswith("error: budget_usd_per_hour needs the judge's price")
    assert len(proc.stderr.splitlines()) == 1
