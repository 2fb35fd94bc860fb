"""Replicated by default: on a cluster of three brokers the worker creates every
topic it writes (its own, the changelogs, the internal topics) with three
replicas, says so at start with the producers' acks and idempotence, and names
an existing topic of its own with fewer replicas; one replica on a cluster of
several brokers is warned about. With two of the three brokers down it holds
still, says why, and goes on by itself when they return (the other broker
faults, each a minute or more: ``python bench/cluster_faults/broker_faults.py``)."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from support.broker_faults import broker_fault_scenario
from support.faults import sample_cases
from support.harness import StreamEnv, TopicWatcher, produce

from guardrail.kafka.cluster_facts import (ClusterFacts, cluster_facts, describe,
                                           replica_counts, replication_for,
                                           replication_warnings)
from guardrail.kafka.settings import KafkaSettings

FACTS = ClusterFacts(brokers=3, min_insync=2, idempotence=True)


def test_unset_replication_is_three_at_most_the_brokers_and_one_on_a_cluster_is_warned():
    unset, one = KafkaSettings(), KafkaSettings(topic_replication=1)
    assert replication_for(unset, FACTS) == 3
    assert replication_for(unset, ClusterFacts(5, 2, True)) == 3
    assert replication_for(unset, ClusterFacts(1, None, False)) == 1
    assert replication_warnings(unset, FACTS, {"in": 3}) == []
    one_replica, below_insync = replication_warnings(one, FACTS, {})
    assert "topic_replication is 1 on a cluster of 3 brokers" in one_replica
    assert "below the cluster's min.insync.replicas 2" in below_insync
    (below,) = replication_warnings(KafkaSettings(topic_replication=2),
                                    ClusterFacts(3, 3, True), {})
    assert "below the cluster's min.insync.replicas 3" in below
    assert replication_warnings(one, ClusterFacts(1, 1, False), {"in": 1}) == []


def test_the_start_line_says_replicas_acks_and_idempotence():
    on = KafkaSettings(topic_replication=3, producer_idempotence=True)
    assert describe(on, FACTS) == ("topics: 3 replicas on a cluster of 3 broker(s), "
                                   "min.insync.replicas 2; every producer writes with "
                                   "acks=all, idempotence on")
    off = KafkaSettings(topic_replication=1, producer_idempotence=False)
    assert "idempotence off (the brokers do not take idempotent producers)" in describe(
        off, ClusterFacts(1, None, False))


@pytest.mark.kafka
def test_the_embedded_broker_is_one_broker_without_idempotent_producers(
        embedded_kafka_bootstrap):
    facts = asyncio.run(cluster_facts(KafkaSettings(bootstrap_servers=embedded_kafka_bootstrap)))
    assert (facts.brokers, facts.idempotence) == (1, False)


@pytest.mark.apache_kafka
def test_a_worker_on_a_cluster_replicates_every_topic_and_names_a_topic_with_fewer(
        apache_cluster, thread_judge, tmp_path):
    thread_judge.reset()
    env = StreamEnv(apache_cluster.bootstrap, thread_judge.api_base, tmp_path)
    kafka = KafkaSettings(bootstrap_servers=apache_cluster.bootstrap)
    asyncio.run(_create(kafka, env.topic("alerts"), replicas=1))  # made by hand, earlier
    try:
        worker = env.start_worker()
        with TopicWatcher(env.bootstrap, env.topic("results")) as results:
            asyncio.run(produce(env.bootstrap, env.topic("input"), sample_cases(20)))
            assert results.wait_for(lambda r: len(r) >= 20, timeout=120), env.logs()[-3000:]
        app_id = env.env["GUARDRAIL_APP_ID"]
        replicas = asyncio.run(_worker_replicas(kafka, app_id, env))
    finally:
        env.stop_workers()
    logs = env.logs()
    assert ("topics: 3 replicas on a cluster of 3 broker(s), min.insync.replicas 2; every "
            "producer writes with acks=all, idempotence on") in logs
    assert (f"existing topics with fewer replicas than the 3 configured: "
            f"'{env.topic('alerts')}' (1)") in logs
    changelogs = [t for t in replicas if t.endswith("-changelog")]
    assert changelogs and f"{app_id}-session-turns" in replicas, sorted(replicas)
    assert {t: n for t, n in replicas.items() if n != 3} == {env.topic("alerts"): 1}


async def _create(kafka: KafkaSettings, topic: str, *, replicas: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka.bootstrap_servers)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 2, replicas)])
    finally:
        await admin.close()


async def _worker_replicas(kafka: KafkaSettings, app_id: str, env: StreamEnv) -> dict[str, int]:
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka.bootstrap_servers)
    await admin.start()
    try:
        names = await admin.list_topics()
    finally:
        await admin.close()
    ours = [t for t in names if t.startswith(f"{app_id}-") or t in env.topics.values()]
    return await replica_counts(kafka, ours)


@pytest.mark.apache_kafka
@pytest.mark.timeout(420)  # two node restarts on two loaded cores; about 90 s alone
def test_two_brokers_of_three_down_stop_progress_which_the_worker_reports_then_resumes(
        apache_cluster, thread_judge, tmp_path):
    figures = broker_fault_scenario(apache_cluster, thread_judge, tmp_path, fault="two_down",
                                    cases=1000, kafka_trouble_seconds=5)
    logs = figures.pop("logs")
    assert figures["finished"], logs[-3000:]
    assert (figures["lost"], figures["unexpected"], figures["results_while_down"]) == (0, 0, 0)
    assert figures["window_counts_match"], figures
    assert figures["worker_alive"] and figures["worker_starts"] == 1
    assert figures["metrics_while_down"]["trouble"] == 1
    assert figures["metrics_while_down"]["unreachable_brokers"] == 2
    assert figures["trouble_reports"] >= 2 and figures["trouble_over"] >= 1, logs[-3000:]
    reports = [line for line in logs.splitlines() if "Kafka trouble in the last" in line]
    down = ", ".join(map(str, sorted(figures["nodes"])))
    assert any(f"could not reach broker(s) {down}" in line for line in reports), reports
    assert figures["error_lines"] < 100  # thousands before the client's repeats were summed
