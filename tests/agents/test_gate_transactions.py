"""Gate mode with ``gate_transactional`` on Apache Kafka: forwards, the gate's
entries and the input offsets in one transaction per input partition. Under three
SIGKILLs a ``read_committed`` reader of the approved and held topics sees every
input record exactly once (no copy a kill left behind), in key order; what a kill
aborted is invisible to it. The embedded broker is refused (it has no transactions
a ``read_committed`` reader can trust)."""

from __future__ import annotations

import asyncio
import random
import signal

import pytest
from support.gate_traffic import Placements, gate_env, keyed_cases, start_ready
from support.harness import produce

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]


@pytest.fixture
def judge(slow_judge):
    return slow_judge


def test_three_kills_leave_no_copy_for_a_read_committed_reader(apache_kafka_bootstrap, judge,
                                                               tmp_path):
    judge.latency, judge.latency_max = 0.005, 0.05
    env = gate_env(apache_kafka_bootstrap, judge, tmp_path, gate_transactional="true",
                   topic_partitions=2)
    records = keyed_cases(2_000, keys=50, broken_every=500)
    rng = random.Random(5)
    try:
        worker = start_ready(env)
        with Placements(env, isolation_level="read_committed") as committed, \
                Placements(env) as everything:
            asyncio.run(produce(env.bootstrap, env.topic("input"), records))
            for k in range(3):
                target = int(len(records) * (k + 1) / 4 * rng.uniform(0.8, 1.0))
                committed.wait(target, 90, settle=rng.uniform(0.0, 0.5))
                worker.send_signal(signal.SIGKILL)
                worker.wait(10)
                worker = start_ready(env, timeout=90)
            committed.wait(len(records), 150)
            account = committed.account(len(records))
            written = everything.account(len(records))
    finally:
        env.stop_workers()
    assert (account["missing"], account["both"], account["twice"]) == (0, 0, 0), \
        (account, env.logs()[-3000:])
    assert account["unsafe_approved"] == account["not_safe_approved"] == 0
    assert account["inversions"] == 0, str(account)
    # What the kills aborted is on the topics all the same, for readers that do not
    # read committed only: the transaction is what hides it.
    print(f"records written by aborted transactions: {written['twice']}")


def test_the_embedded_broker_is_refused_with_a_reason(embedded_kafka_bootstrap, judge,
                                                      tmp_path):
    env = gate_env(embedded_kafka_bootstrap, judge, tmp_path, gate_transactional="true")
    try:
        worker = env.start_worker()
        assert worker.wait(60) != 0
        assert "gate_transactional needs brokers with transactional producers" in env.logs()
    finally:
        env.stop_workers()
