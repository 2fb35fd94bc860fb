"""The fault suite at CI size: each guarantee, asserted on the real worker.

``bench/cluster_faults/faults.py`` runs the same scenarios at full size and prints the table.
"""

import pytest
from support.faults import crash_scenario, outage_scenario, rebalance_scenario, secrets_scenario
from support.otel_traffic import chunks, genai_spans, otlp_proto, span_ids

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


@pytest.mark.both_brokers
def test_crash_loses_nothing(kafka_bootstrap, judge, tmp_path):
    figures = crash_scenario(kafka_bootstrap, judge, tmp_path, cases=1000, kills=3)
    assert figures["finished"] and figures["lost"] == 0, _explain(figures)
    assert figures["unexpected"] == 0
    assert figures["unique"] == 1000
    # Every judgment counted once: redeliveries are not counted twice, and a
    # table partition moved by a restart is recovered to its last write.
    assert figures["window_total"] == figures["unique_judgments"], _explain(figures)


@pytest.mark.both_brokers
def test_crash_mid_batch_of_multi_span_records_judges_every_span_once(kafka_bootstrap, judge,
                                                                     tmp_path):
    """OTLP records of 10 spans: a record's offset commits only after all its
    cases are published, so SIGKILLs mid-record lose no span and the windows
    count each span once (positions inside a record are distinct)."""
    outputs = [("you idiot" if i % 10 == 0 else f"helpful answer {i}") for i in range(400)]
    spans = genai_spans(outputs, service_version="v1")
    inputs = ([(None, otlp_proto(chunk), None) for chunk in chunks(spans, 10)],
              [":".join(span_ids(s)) for s in spans])
    figures = crash_scenario(kafka_bootstrap, judge, tmp_path, cases=0, kills=2, inputs=inputs,
                             input_format="otlp")
    assert figures["finished"] and figures["lost"] == 0, _explain(figures)
    assert figures["unexpected"] == 0 and figures["unique"] == 400
    assert figures["window_total"] == figures["unique_judgments"] == 800, _explain(figures)
    assert figures["out_of_order"] == 0


@pytest.mark.both_brokers
def test_judge_outage_pauses_and_never_says_safe(kafka_bootstrap, judge, tmp_path):
    # 0.5 s per judge call: the worker must still be busy when the outage starts.
    figures = outage_scenario(kafka_bootstrap, judge, tmp_path, cases=400, outage_seconds=16,
                              latency=0.5)
    assert figures["finished"] and figures["lost"] == 0, _explain(figures)
    assert figures["safe_without_success"] == 0
    # Batches straddling the outage's start or end are retried, not published
    # as errors: the outage costs time, not verdicts.
    assert figures["metric_errors_published"] == 0, _explain(figures)
    assert figures["worker_alive"] and figures["restarts"] == 0
    assert figures["results_at_recovery"] < 400  # it paused instead of burning through
    assert figures["unexpected"] == 0


@pytest.mark.both_brokers
def test_rebalance_loses_no_result_and_windows_count_every_judgment_once(kafka_bootstrap, judge,
                                                                   tmp_path):
    # Eight partitions: with two, a partition revoked and given back to the same
    # worker at a leave (where inputs were once lost) hardly ever happens.
    figures = rebalance_scenario(kafka_bootstrap, judge, tmp_path, cases=1000,
                                 topic_partitions=8)
    assert figures["finished"] and figures["lost"] == 0, _explain(figures)
    assert figures["unexpected"] == 0
    assert figures["window_total"] == figures["unique_judgments"], _explain(figures)
    # Against the inputs too: a lost input has no judgment event either.
    assert figures["window_total"] == 2 * 1000, _explain(figures)  # bias and toxicity


def test_api_key_never_leaks(kafka_bootstrap, judge, tmp_path):
    secret = "sk-LEAKCHECK-7f3a9c2e41b8d605"
    figures = secrets_scenario(kafka_bootstrap, judge, tmp_path, secret=secret)
    assert figures["config_error_exit"] == 78  # the key-echoing 401 stopped the first worker
    assert figures["lost"] == 0
    assert figures["bytes_checked"] > 10_000
    assert figures["leaks"] == 0, figures["leaks_by_place"]
