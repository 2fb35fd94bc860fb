"""Replicated by default: on a cluster of three brokers the worker creates every
topic it writes (its own, the changelogs, the internal topics) with three
replicas, says so at start with the producers' acks and idempotence, and names
an existing topic of its own with fewer replicas; one replica on a cluster of
several brokers is warned about. With two of the three brokers down it holds
still, says why, and goes on by itself when they return (the other broker
faults, each a minute or more: ``python bench/cluster_faults/broker_faults.py``).
In gate mode a leader killed mid-stream loses no record and forwards none twice
differently (the gate's other faults: ``tests/agents/test_gate_faults.py``; its
cluster test is here, as the cluster starts once per file)."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from support.broker_faults import DOWN_SECONDS, broker_fault_scenario, partition_leader
from support.faults import sample_cases
from support.gate_traffic import JudgeLedger, Placements, gate_env, keyed_cases, start_ready
from support.harness import StreamEnv, TopicWatcher, produce

from guardrail.kafka.cluster_facts import (ClusterFacts, cluster_facts, describe,
                                           replica_counts, replication_for,
                                           replication_warnings)
from guardrail.kafka.settings import KafkaSettings
from guardrail.kafka.topics import ensure_topics, partition_counts

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
    # A stall is reported within the wait: it failed here with no clue, the worker
    # ready with its input partitions and judging nothing (1 run in about 100 on
    # loaded cores).
    env = StreamEnv(apache_cluster.bootstrap, thread_judge.api_base, tmp_path,
                    stall_seconds=30)
    kafka = KafkaSettings(bootstrap_servers=apache_cluster.bootstrap)
    asyncio.run(_create(kafka, env.topic("alerts"), replicas=1))  # made by hand, earlier
    try:
        env.start_worker()
        with TopicWatcher(env.bootstrap, env.topic("results")) as results:
            asyncio.run(produce(env.bootstrap, env.topic("input"), sample_cases(20)))
            assert results.wait_for(lambda r: len(r) >= 20, timeout=120), _clues(env.logs())
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


def _clues(logs: str) -> str:
    """The worker's assignment, stall reports and warnings, then its last lines."""
    said = [line for line in logs.splitlines()
            if "newly assigned" in line or "stall" in line or "WARNING" in line]
    return "\n".join(said)[-4000:] + "\n...\n" + logs[-2000:]


@pytest.mark.apache_kafka
def test_topics_the_worker_creates_are_known_to_every_broker_when_it_goes_on(apache_cluster):
    """A consumer asks any broker for its topics; one that does not know the input
    topic yet leaves it out of the group's assignment for minutes."""
    kafka = KafkaSettings(bootstrap_servers=apache_cluster.bootstrap)
    plan = {f"fresh-{uuid.uuid4().hex[:8]}-{i}": 3 for i in range(4)}
    assert asyncio.run(ensure_topics(kafka, plan)) == plan
    assert asyncio.run(_counts_per_broker(kafka, list(plan))) == [plan] * 3


async def _counts_per_broker(kafka: KafkaSettings, topics: list[str]) -> list[dict[str, int]]:
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka.bootstrap_servers)
    await admin.start()
    try:
        nodes = sorted(b.nodeId for b in admin._client.cluster.brokers())
        return [await partition_counts(admin, topics, node_id=n) for n in nodes]
    finally:
        await admin.close()


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


@pytest.mark.apache_kafka
@pytest.mark.timeout(300)
def test_a_leader_killed_while_gating_loses_no_record_and_forwards_none_differently(
        apache_cluster, slow_judge, tmp_path):
    """Gate mode: SIGKILL the broker leading partition 0 of the approved topic (it
    leads about a third of every topic's partitions: input, gate changelog, held)
    a quarter into the stream; it comes back 10 s later. The worker's writes wait
    for the new leaders and go on: every input offset ends on the approved topic,
    the held topic or the DLQ, none in two, key order holds, the worker never
    restarts. The judge answers UNSAFE when asked again about an output, so a record
    judged again after the fault and forwarded by the new verdict would show."""
    slow_judge.latency, slow_judge.latency_max = 0.1, 0.4
    slow_judge.responder = ledger = JudgeLedger(second_opinion=True)
    env = gate_env(apache_cluster.bootstrap, slow_judge, tmp_path, topic_partitions=4,
                   judge_concurrency=16)
    records = keyed_cases(600, keys=30)
    n = len(records)
    started = time.monotonic()
    try:
        worker = start_ready(env)
        with Placements(env) as placed:
            asyncio.run(produce(env.bootstrap, env.topic("input"), records))
            placed.wait(n // 4, 120, settle=0)
            node = partition_leader(apache_cluster.bootstrap, env.approved, 0)
            apache_cluster.kill(node)
            killed_at = placed.placed()
            time.sleep(DOWN_SECONDS)
            apache_cluster.restart(node)
            placed.wait(n, 180)
            account = placed.account(n)
        alive = worker.poll() is None
    finally:
        env.stop_workers()
    account.update(node=node, killed_at=killed_at, worker_alive=alive,
                   judged_again=ledger.judged_again(),
                   seconds=round(time.monotonic() - started, 1))
    print("leader kill:", account)
    said = (account, env.logs()[-4000:])
    assert killed_at < n, said  # the kill came mid-stream
    assert (account["missing"], account["both"], account["inversions"]) == (0, 0, 0), said
    assert account["unsafe_approved"] == account["not_safe_approved"] == 0, said
    assert alive and len(env.workers) == 1, said
    # Copies: a forward whose acknowledgement the dead leader never sent is sent
    # again by the gate once a new leader answers (the idempotent producer drops a
    # retry of its own, not a new send). At most the forwards under way then.
    assert account["twice"] <= 64, said
