"""A stop in every state takes at most 5 s, exits 0 without a traceback, and
loses nothing: after a restart every input has one result and the windows are
exact (the fault suite's checks)."""

import pprint

import pytest
from support.faults import stop_scenario

pytestmark = [pytest.mark.kafka, pytest.mark.both_brokers,
              pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture
def judge(thread_judge):
    thread_judge.reset()
    thread_judge.latency, thread_judge.responder = 0.0, None
    yield thread_judge
    thread_judge.reset()
    thread_judge.set_outage(False)
    thread_judge.latency, thread_judge.responder = 0.0, None


@pytest.mark.parametrize("state", ["outage", "mid_batch", "budget", "rebalance"])
def test_sigterm_stops_within_5s_and_loses_nothing(state, kafka_bootstrap, judge, tmp_path):
    figures = stop_scenario(kafka_bootstrap, judge, tmp_path, state=state, cases=80)
    shown = {k: v for k, v in figures.items() if k != "logs"}
    # What the consumer did about offsets, for a window count that comes short.
    shown["reads_again"] = [line[-160:] for line in figures["logs"].splitlines()
                            if "reading again" in line or "committed offset" in line]
    # A string, not a tuple: pytest cuts a non-string message to one line, which
    # left a rare failure (14 duplicates after a stop in the budget state, once
    # on Apache Kafka in a fresh-clone run) with nothing to read but its count.
    why = pprint.pformat(shown, width=100) + "\n--- worker logs, end ---\n" + figures["logs"][-6000:]
    assert figures["in_state"], why
    assert figures["exit_code"] == 0 and figures["stop_seconds"] <= 5.0, why
    assert figures["tracebacks"] == 0, why
    assert figures["finished"] and figures["unexpected"] == 0 and figures["duplicates"] == 0, why
    if state != "budget":  # every input judged: one result each (else some are not sampled)
        assert figures["lost"] == 0 and figures["unique"] == figures["produced"], why
    # Every input counted once per metric in the windows, judged or not sampled.
    assert figures["window_seen"] == figures["unique_judgments"] == 2 * figures["produced"], why
    assert figures["window_total"] == figures["unique_judged"], why
