"""Topic helpers of the live tests: create, list, read back, reconfigure, and a
worker whose table cleanup runs every second."""

from __future__ import annotations

import sys
import time
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

__all__ = ["FAST_CLEANUP_WORKER", "alter_topic_configs", "create_topic", "list_topics",
           "topic_records"]

#: ``guardrail`` with Faust's table cleanup every second instead of every 30 s
#: (``faust_options``): its first run comes 2 x the interval after the table
#: starts (a sleep, then a timer that sleeps before its first tick), ~60 s
#: with the real setting. Pass as ``StreamEnv.start_worker(command=...)``.
FAST_CLEANUP_WORKER = [sys.executable, "-c", """
import sys
import guardrail.agents.app as app
options = app.faust_options
app.faust_options = lambda settings: {**options(settings), "table_cleanup_interval": 1.0}
from guardrail.cli import main
sys.argv[0] = "guardrail"
main(sys.argv[1:])
"""]


async def create_topic(bootstrap: str, topic: str, partitions: int = 1,
                       configs: dict[str, str] | None = None) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, 1, topic_configs=configs or {})])
    finally:
        await admin.close()


async def list_topics(bootstrap: str) -> set[str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return set(await admin.list_topics())
    finally:
        await admin.close()


async def alter_topic_configs(bootstrap: str, topic: str, configs: dict[str, str]) -> None:
    """Set a topic's configs. AlterConfigs replaces the topic's whole set: pass
    every config to keep (``cleanup.policy`` first of all)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic,
                                                  configs=configs)])
    finally:
        await admin.close()


async def topic_records(bootstrap: str, topic: str, partitions: int,
                        timeout: float = 20.0) -> list[Any]:
    """Every record the topic holds now, in order per partition, up to the end
    offsets listed at the start."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                enable_auto_commit=False, fetch_max_wait_ms=100)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        records, idle = [], 0
        deadline = time.monotonic() + timeout
        # Until three empty polls in a row: the embedded broker's listed end
        # offsets can stop inside the last batch, so they are no stop sign.
        while idle < 3 and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=300)
            idle = 0 if batch else idle + 1
            for messages in batch.values():
                records.extend(messages)
        return records
    finally:
        await consumer.stop()
