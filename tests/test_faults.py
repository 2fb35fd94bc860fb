"""The fault suite at CI size: each guarantee, asserted on the real worker.

``bench/faults.py`` runs the same scenarios at full size and prints the table.
"""

import pytest

from guardrail.testing.faults import (crash_scenario, outage_scenario, rebalance_scenario,
                                      secrets_scenario)

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture
def judge(thread_judge):
    thread_judge.reset()
    thread_judge.latency = 0.0
    thread_judge.responder = None
    yield thread_judge
    thread_judge.reset()
    thread_judge.latency = 0.0
    thread_judge.responder = None


def _explain(figures):
    return {k: v for k, v in figures.items() if k != "logs"}, figures["logs"][-4000:]


def test_crash_loses_nothing(kafka_bootstrap, judge, tmp_path):
    figures = crash_scenario(kafka_bootstrap, judge, tmp_path, cases=1500, kills=3)
    assert figures["finished"] and figures["lost"] == 0, _explain(figures)
    assert figures["unexpected"] == 0
    assert figures["unique"] == 1500
    # Redelivered judgments are never counted twice by the windows. (Known gap,
    # issue 4: a partition handover can drop an increment, so this is <=.)
    assert 0 < figures["window_total"] <= figures["unique_judgments"], _explain(figures)


def test_judge_outage_pauses_and_never_says_safe(kafka_bootstrap, judge, tmp_path):
    figures = outage_scenario(kafka_bootstrap, judge, tmp_path, cases=400, outage_seconds=16)
    assert figures["finished"] and figures["lost"] == 0, _explain(figures)
    assert figures["safe_without_success"] == 0
    assert figures["worker_alive"] and figures["restarts"] == 0
    assert figures["results_at_recovery"] < 400  # it paused instead of burning through
    assert figures["unexpected"] == 0


def test_rebalance_loses_no_result_and_windows_never_double_count(kafka_bootstrap, judge,
                                                                   tmp_path):
    figures = rebalance_scenario(kafka_bootstrap, judge, tmp_path, cases=1000)
    assert figures["finished"] and figures["lost"] == 0, _explain(figures)
    assert figures["unexpected"] == 0
    # Known gap (issue 4, scenario 7): when the second worker really takes
    # partitions, Faust's table handover can lose a few window increments, so
    # the windows are checked for never counting a judgment twice; the exact
    # figure is reported by bench/faults.py.
    assert 0 < figures["window_total"] <= figures["unique_judgments"], _explain(figures)


def test_api_key_never_leaks(kafka_bootstrap, judge, tmp_path):
    secret = "sk-LEAKCHECK-7f3a9c2e41b8d605"
    figures = secrets_scenario(kafka_bootstrap, judge, tmp_path, secret=secret)
    assert figures["lost"] == 0
    assert figures["bytes_checked"] > 10_000
    assert figures["leaks"] == 0, figures["leaks_by_place"]
