"""The Kafka trouble report: the client's failures sorted by kind, the first of
each per interval let through, the rest summed into one WARNING per interval,
exported, and cleared after a quiet interval."""

from __future__ import annotations

import inspect
import logging
from types import SimpleNamespace

import aiokafka.client
import aiokafka.consumer.fetcher
import aiokafka.consumer.group_coordinator
import aiokafka.producer.sender
import pytest

from guardrail.agents import kafka_trouble as wiring
from guardrail.stream.kafka_trouble import _CHURN, _TEMPLATES, Failure, KafkaTrouble, classify
from guardrail.stream.telemetry import Telemetry

REFUSED = ConnectionRefusedError(111, "Connect call failed ('127.0.0.1', 43171)")


def test_every_template_is_one_the_installed_kafka_client_logs():
    """An upgrade of the client that rewords a line would silently end the count."""
    sources = "".join(inspect.getsource(m) for m in (
        aiokafka.client, aiokafka.consumer.fetcher, aiokafka.producer.sender,
        aiokafka.consumer.group_coordinator))
    def logged(template: str) -> bool:  # aiokafka splits long ones over two literals
        words = template.replace("%s", " ").replace("%r", " ").split()
        return all(word in sources for word in words)

    missing = [t for t in [*_TEMPLATES, *_CHURN] if not logged(t)]
    assert missing == []


def test_client_lines_are_sorted_by_kind_broker_and_error():
    assert classify("Unable connect to node with id %s: %s", (2, REFUSED)) == Failure(
        "connect", 2, "ConnectionRefusedError")
    assert classify("Failed fetch messages from %s: %s", (
        3, "NodeNotReadyError: Attempt to send a request to node which is not ready")) == \
        Failure("fetch", 3, "NodeNotReadyError")
    assert classify("Got error produce response: %s", ("NotEnoughReplicasError",)) == \
        Failure("produce", None, "NotEnoughReplicasError")
    assert classify("OffsetCommit failed for group %s because group is initializing (%s), "
                    "will retry", ("g", "GroupLoadInProgressError")).kind == "commit"
    assert classify("Heartbeat failed for group %s: coordinator (node %s) is either not "
                    "started or not valid", ("g", 3)) == Failure("coordinator", 3, "")
    assert classify("Timer commit is overlapping (interval=%r runtime=%r)", (1.0, 2.0)) is None
    # A rebalance's rejoining is the group at work, not trouble.
    assert classify("Heartbeat failed for group %s because it is rebalancing", ("g",)) is None
    assert classify("OffsetCommit failed for group %s due to group error (%s), will rejoin",
                    ("g", "RebalanceInProgressError")) is None
    assert classify(ValueError("not a template"), ()) is None


def test_the_first_of_each_failure_per_interval_passes_and_a_report_sums_the_rest():
    trouble = KafkaTrouble(interval=30)
    refused = Failure("connect", 2, "ConnectionRefusedError")
    assert trouble.note(refused, now=100.0)
    assert not any(trouble.note(refused, now=100.0 + i) for i in range(1, 500))
    assert trouble.note(Failure("connect", 3, "ConnectionRefusedError"), now=101.0)
    assert trouble.note(Failure("produce", None, "NotEnoughReplicasError"), now=102.0)
    assert trouble.report(now=129.0) is None  # the interval still runs
    report = trouble.report(now=130.0)
    assert report is not None and report.unreachable == (2, 3)
    assert report.held_back == 499 and report.counts[refused] == 500
    assert report.summary() == ("could not reach broker(s) 2, 3; 501 connection errors "
                                "(ConnectionRefusedError); 1 produce requests failed "
                                "(NotEnoughReplicasError)")
    assert trouble.report(now=200.0) is None  # nothing since
    assert trouble.note(refused, now=201.0)  # a new interval lets the first through again
    assert trouble.quiet_for(211.0) == 10.0


def _runtime(interval: float) -> SimpleNamespace:
    return SimpleNamespace(settings=SimpleNamespace(worker=SimpleNamespace(
        kafka_trouble_seconds=interval)), telemetry=Telemetry(), state={},
        services=[], app=SimpleNamespace(timer=lambda seconds: lambda fn: fn))


@pytest.fixture
def runtime():
    runtime = _runtime(30)
    wiring.register(runtime)
    yield runtime
    for service in runtime.services:  # the loggers' filters off again
        service.uninstall()


def _gauge(telemetry: Telemetry, name: str) -> float | None:
    return telemetry.registry.get_sample_value(name)


def test_a_flood_of_client_errors_is_one_line_through_and_one_warning_per_interval(
        runtime, caplog):
    caplog.set_level(logging.INFO)
    client = logging.getLogger("aiokafka")
    for _ in range(300):
        client.error("Unable connect to node with id %s: %s", 1, REFUSED)
    passed = [r for r in caplog.records if r.name == "aiokafka"]
    assert len(passed) == 1  # the first; the 299 others are counted
    assert runtime.telemetry.registry.get_sample_value(
        "guardrail_kafka_client_errors_total",
        {"kind": "connect", "error": "ConnectionRefusedError"}) == 300
    trouble = runtime.state["kafka_trouble"]
    started = trouble._started
    assert wiring.report(runtime, now=started + 29) is None
    assert wiring.report(runtime, now=started + 30) is not None
    (warning,) = [r for r in caplog.records if r.name == "guardrail.worker"]
    assert warning.levelno == logging.WARNING
    assert "could not reach broker(s) 1; 300 connection errors" in warning.getMessage()
    assert "299 repeated client lines summed here" in warning.getMessage()
    assert _gauge(runtime.telemetry, "guardrail_kafka_trouble") == 1
    assert _gauge(runtime.telemetry, "guardrail_kafka_unreachable_brokers") == 1
    assert wiring.trouble_now(runtime).startswith("could not reach broker(s) 1")


def test_a_runtime_built_again_in_the_process_takes_the_loggers_over(runtime, caplog):
    caplog.set_level(logging.INFO)
    client = logging.getLogger("aiokafka")
    client.error("Unable connect to node with id %s: %s", 1, REFUSED)  # the first one's
    again = _runtime(30)
    wiring.register(again)
    try:
        client.error("Unable connect to node with id %s: %s", 1, REFUSED)
        # The new filter's first of its interval passes: the old one no longer decides.
        assert len([r for r in caplog.records if r.name == "aiokafka"]) == 2
        assert sum(isinstance(f, wiring.ClientLogFilter) for f in client.filters) == 1
    finally:
        for service in again.services:
            service.uninstall()


def test_a_quiet_interval_after_trouble_says_it_is_over_once(runtime, caplog):
    caplog.set_level(logging.INFO)
    logging.getLogger("aiokafka.producer.sender").warning(
        "Got error produce response: %s", "NotEnoughReplicasError")
    trouble = runtime.state["kafka_trouble"]
    t0 = trouble._started
    wiring.report(runtime, now=t0 + 30)
    trouble.note(Failure("produce", None, "NotEnoughReplicasError"), now=t0 + 40)
    wiring.report(runtime, now=t0 + 45)  # 5 s quiet of 30: still in trouble
    assert _gauge(runtime.telemetry, "guardrail_kafka_trouble") == 1
    wiring.report(runtime, now=t0 + 70)  # the second interval's report
    for later in (100, 130, 160):
        wiring.report(runtime, now=t0 + later)
    said = [r.getMessage() for r in caplog.records if r.name == "guardrail.worker"]
    assert [m.split(":")[0] for m in said] == ["Kafka trouble in the last 30 s"] * 2 + [
        "Kafka"]
    assert said[-1].endswith("the trouble is over") and wiring.trouble_now(runtime) is None
    assert _gauge(runtime.telemetry, "guardrail_kafka_trouble") == 0
