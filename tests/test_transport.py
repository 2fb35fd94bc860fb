"""Faust transport corrections: the fetch wait setting, and recovery end offsets
read from a real fetch (Tansu under-reports ListOffsets)."""

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from guardrail.agents.transport import GuardrailFaustApp, fetched_highwaters
from guardrail.kafka.topics import ensure_topics
from guardrail.settings import load_settings


async def test_the_worker_consumer_waits_as_configured():
    app = GuardrailFaustApp("fetch-wait-check", broker="kafka://127.0.0.1:9", fetch_wait_ms=42)
    thread = app.consumer._thread
    consumer = thread._create_worker_consumer(app.transport)
    assert consumer._fetch_max_wait_ms == 42
    plain = GuardrailFaustApp("fetch-wait-default", broker="kafka://127.0.0.1:9")
    assert plain.consumer._thread._create_worker_consumer(plain.transport
                                                          )._fetch_max_wait_ms == 1500


async def test_acks_of_an_earlier_generation_never_reach_the_commit_bookkeeping():
    from faust.types import TP
    from faust.types.tuples import Message

    app = GuardrailFaustApp("stale-ack-check", broker="kafka://127.0.0.1:9")
    consumer = app.consumer
    app.topics.acks_enabled_for = lambda topic: True
    app.consumer_generation_id = 7
    tp = TP("input", 0)

    def message(offset, generation):
        return Message("input", 0, offset, 0.0, 0, [], b"k", b"v", None,
                       generation_id=generation, tp=tp)

    stale, fresh = message(100, 6), message(100, 7)
    consumer._committed_offset[tp] = 100
    assert consumer.ack(stale) is False and stale.acked
    assert list(consumer._acked[tp]) == []  # nothing the commit could move past
    assert consumer.ack(fresh) is True and list(consumer._acked[tp]) == [100]


@pytest.mark.kafka
async def test_recovery_reads_to_the_real_end_of_a_batched_changelog(kafka_bootstrap):
    topic = f"changelog-check-{asyncio.get_running_loop().time():.0f}"
    await ensure_topics(load_settings(environ={}, bootstrap_servers=kafka_bootstrap), {topic: 1})
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, linger_ms=50)
    await producer.start()
    try:
        for _ in range(3):  # three batches of ten records
            for i in range(10):
                await producer.send(topic, b"v%d" % i, key=b"k%d" % i)
            await producer.flush()
    finally:
        await producer.stop()
    tp = TopicPartition(topic, 0)
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap)
    await consumer.start()
    try:
        reported = (await consumer.end_offsets([tp]))[tp]
    finally:
        await consumer.stop()
    assert 0 < reported <= 30  # Tansu: 21 (the last batch's base offset + 1)
    fetched = await fetched_highwaters({"bootstrap_servers": kafka_bootstrap}, {tp: reported})
    assert fetched == {tp: 30}
    # An empty partition is not probed; an unreachable broker leaves the reported ends.
    assert await fetched_highwaters({"bootstrap_servers": kafka_bootstrap}, {tp: 0}) == {}
    assert await fetched_highwaters({"bootstrap_servers": "127.0.0.1:9"}, {tp: reported},
                                    timeout=2) == {}
