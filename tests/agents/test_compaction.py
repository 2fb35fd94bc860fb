"""Compaction, for real, on Apache Kafka: the log cleaner removes the window
changelog's expired cells (their tombstones included) and superseded labels,
and a worker restarted on the compacted changelog recovers exactly the live
windows. The embedded broker never compacts (readers fold by key there).

The topics get a cleaner that can act within a test: segments that roll
every 100 ms, any dirty share worth cleaning, tombstones kept 0 ms after
a clean.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request

import pytest
from aiokafka import AIOKafkaProducer
from support.harness import StreamEnv, poll, produce
from support.topics import (
    FAST_CLEANUP_WORKER,
    alter_topic_configs,
    list_topics,
    topic_records,
)

from guardrail.agents.windows import changelog_configs
from guardrail.kafka.topics import ensure_topics
from guardrail.agents.window_cells import changelog_topic, live_horizon_seconds
from guardrail.review import LabelRecord
from guardrail.config.settings import load_settings

pytestmark = [pytest.mark.apache_kafka, pytest.mark.timeout(240)]

PARTITIONS = 2
#: Topic configs that let the cleaner work within seconds.
CLEAN_SOON = {"segment.ms": "100", "min.cleanable.dirty.ratio": "0.0001",
              "delete.retention.ms": "0", "min.compaction.lag.ms": "0",
              "max.compaction.lag.ms": "1000"}

def _clean_soon(bootstrap: str, topic: str, kept: dict[str, str]) -> None:
    """CLEAN_SOON on the topic, besides the configs it keeps (``kept``)."""
    asyncio.run(alter_topic_configs(bootstrap, topic, {**kept, **CLEAN_SOON}))


def _records(bootstrap: str, topic: str) -> list:
    return asyncio.run(topic_records(bootstrap, topic, PARTITIONS))


def _inputs(prefix: str, n: int, ts_ms: int | None) -> list[tuple]:
    return [(f"{prefix}-{i}".encode(), json.dumps({
        "case_id": f"{prefix}-{i}", "output": "you idiot" if i % 3 == 0 else f"fine {i}",
        "metadata": {"model": "m", "model_version": "v1"}}).encode(), ts_ms)
        for i in range(n)]


def _rates(port: int, scope: str = "") -> dict | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/rates{scope}", timeout=5) as r:
            return json.loads(r.read())
    except OSError:
        return None


def _cells(rates: dict) -> dict:
    return {(r["metric"], r["window_start"]): (r["total"], r["unsafe"]) for r in rates["rates"]}


def test_compaction_removes_expired_cells_and_a_restart_recovers_the_live_windows(
        apache_kafka_bootstrap, thread_judge, tmp_path):
    bootstrap = apache_kafka_bootstrap
    thread_judge.reset()
    # Windows expire relative to the stream's newest event: inputs stamped an
    # hour ago make cells that expire as soon as today's inputs are counted.
    env = StreamEnv(bootstrap, thread_judge.api_base, tmp_path, window_seconds=60,
                    window_expires_seconds=60, topic_partitions=PARTITIONS)
    settings = load_settings(environ=env.env)
    topic = changelog_topic(settings.kafka.app_id)
    worker = env.start_worker(command=FAST_CLEANUP_WORKER)
    try:
        # The changelog as the worker creates it, cleaned sooner.
        assert poll(lambda: topic in asyncio.run(list_topics(bootstrap)), 60), env.logs()[-3000:]
        _clean_soon(bootstrap, topic, changelog_configs(live_horizon_seconds(60, 60)))
        hour_ago = int((time.time() - 3600) * 1000)
        asyncio.run(produce(bootstrap, env.topic("input"), _inputs("old", 6, hour_ago)))
        old_keys = poll(lambda: {r.key for r in _records(bootstrap, topic)}, 60)
        assert old_keys, env.logs()[-3000:]
        now_inputs = _inputs("now", 6, None)
        asyncio.run(produce(bootstrap, env.topic("input"), now_inputs))

        def compacted():
            # More writes keep rolling segments, so the cleaner has work:
            # the tombstones' first clean marks them, a later one drops them.
            asyncio.run(produce(bootstrap, env.topic("input"),
                                _inputs(f"more{time.monotonic_ns()}", 2, None)))
            records = _records(bootstrap, topic)
            keys = {r.key for r in records}
            return records if keys and not keys & old_keys and \
                all(r.value is not None for r in records) else None

        records = poll(compacted, 120, interval=1.0)
        assert records, (_records(bootstrap, topic)[-20:], env.logs()[-3000:])
        assert "tombstones written" in env.logs()
        live = poll(lambda: _rates(worker.web_port, "?scope=local"), 30)
        assert live and live["rates"], env.logs()[-3000:]
        before = _cells(live)
    finally:
        env.stop_workers()
    assert worker.returncode == 0, env.logs()[-3000:]

    # Only live windows are left, each cell's latest write among them.
    latest = {r.key: json.loads(r.value) for r in records}
    assert len(latest) == len(before)
    assert sorted(c["total"] for c in latest.values()) == sorted(t for t, _ in before.values())

    restarted = env.start_worker()
    try:
        recovered = poll(lambda: (lambda r: r if r and r["rates"] else None)(
            _rates(restarted.web_port, "?scope=local")), 60)
        assert recovered, env.logs()[-3000:]
        assert _cells(recovered) == before
    finally:
        env.stop_workers()


def _label(case: str, label: str) -> bytes:
    record = LabelRecord(case_id=case, metric="toxicity", label=label, choice="agree",
                         reviewer="ana", judge_verdict="UNSAFE" if label == "unsafe" else "SAFE",
                         judge_model="openai/test-judge", rubric_version="abc", slice="unsafe",
                         rate=1.0, labels={"model": "m"}, event_time_ms=int(time.time() * 1000),
                         fields={"output": case})
    return record.model_dump_json().encode()


def test_compaction_keeps_only_the_latest_label_of_each_case(apache_kafka_bootstrap,
                                                             thread_judge, tmp_path):
    bootstrap = apache_kafka_bootstrap
    env = StreamEnv(bootstrap, thread_judge.api_base, tmp_path)
    settings = load_settings(environ={**env.env, "GUARDRAIL_LABELS_TOPIC": env.topic("input")
                                      + "-labels"})
    topic = settings.review.labels_topic
    asyncio.run(ensure_topics(settings.kafka, {topic: PARTITIONS}, compacted=frozenset({topic})))
    _clean_soon(bootstrap, topic, {"cleanup.policy": "compact"})
    cases = [f"case-{i}" for i in range(10)]
    # Each case labelled three times: the reviewer's last word is "unsafe" for
    # the even cases and "safe" for the odd ones.
    sequences = [["safe", "safe", "unsafe"], ["unsafe", "unsafe", "safe"]]

    written: set[tuple[int, int]] = set()  # (partition, offset) of each label

    async def write(n_round: int) -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
        await producer.start()
        try:
            for i, case in enumerate(cases):
                sent = await producer.send_and_wait(
                    topic, _label(case, sequences[i % 2][n_round]),
                    key=f"{case}|toxicity".encode())
                written.add((sent.partition, sent.offset))
        finally:
            await producer.stop()

    for n_round in range(3):
        asyncio.run(write(n_round))
        time.sleep(0.2)  # a segment per round
    # Every label was stored (the cleaner may already have removed some: it
    # runs as soon as a segment rolls, so the topic is not counted here).
    assert len(written) == 3 * len(cases)

    def one_per_case():
        asyncio.run(_filler(bootstrap, topic))
        records = [r for r in _records(bootstrap, topic) if r.key != b"filler"]
        return records if len(records) == len(cases) else None

    records = poll(one_per_case, 90, interval=1.0)
    assert records, len(_records(bootstrap, topic))
    final = {r.key.decode(): json.loads(r.value)["label"] for r in records}
    assert final == {f"{c}|toxicity": ("unsafe" if i % 2 == 0 else "safe")
                     for i, c in enumerate(cases)}
    exported = env.cli("labels", "export", "--topic", topic, "--out", "-", "--timeout", "30")
    assert exported.returncode == 0, exported.stderr
    rows = [json.loads(line) for line in exported.stdout.splitlines() if line.strip()]
    assert sorted((r["case_id"], r["label"]) for r in rows) == sorted(
        (c, "unsafe" if i % 2 == 0 else "safe") for i, c in enumerate(cases))


async def _filler(bootstrap: str, topic: str) -> None:
    """A tombstone per partition for a key no label has: it rolls the segments
    that hold the labels, so the cleaner can compact them, and readers skip it."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        for partition in range(PARTITIONS):
            await producer.send_and_wait(topic, None, key=b"filler", partition=partition)
    finally:
        await producer.stop()
