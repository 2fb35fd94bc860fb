"""Plain aiokafka helpers behind ``guardrail produce`` and ``guardrail tail``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterable
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from .settings import KafkaSettings
from .clients import check_reachable, client_options

__all__ = ["produce_records", "tail_records", "read_record_at"]


async def produce_records(kafka: KafkaSettings, topic: str, records: Iterable[Any]) -> int:
    """Publish JSON records keyed by ``case_id``; returns how many the broker acknowledged.

    Callers check the brokers first (``ensure_topics`` does)."""
    producer = AIOKafkaProducer(acks="all", linger_ms=5, max_request_size=16 * 1024 * 1024,
                                **client_options(kafka))
    await producer.start()
    try:
        futures = []
        for record in records:
            key = record.get("case_id") if isinstance(record, dict) else None
            futures.append(await producer.send(
                topic, orjson.dumps(record), key=str(key).encode() if key is not None else None))
        await asyncio.gather(*futures)
        return len(futures)
    finally:
        await producer.stop()


async def tail_records(kafka: KafkaSettings, topic: str, *, from_beginning: bool,
                       idle_timeout: float | None, limit: int | None
                       ) -> AsyncIterator[tuple[Any, bytes]]:
    """Yield ``(message, value)`` from a topic until idle for ``idle_timeout`` or ``limit``."""
    await check_reachable(kafka)
    consumer = AIOKafkaConsumer(
        topic, group_id=None, enable_auto_commit=False,
        auto_offset_reset="earliest" if from_beginning else "latest",
        **client_options(kafka))
    await consumer.start()
    seen = 0
    last = time.monotonic()
    try:
        while limit is None or seen < limit:
            batch = await consumer.getmany(timeout_ms=500)
            if not batch:
                if idle_timeout is not None and time.monotonic() - last > idle_timeout:
                    return
                continue
            last = time.monotonic()
            for messages in batch.values():
                for message in messages:
                    yield message, message.value or b""
                    seen += 1
                    if limit is not None and seen >= limit:
                        return
    finally:
        await consumer.stop()


async def read_record_at(kafka: KafkaSettings, topic: str, partition: int, offset: int, *,
                         timeout: float = 15.0) -> Any | None:
    """The record at ``offset`` of one partition, read with a consumer of no group;
    None when it is gone (retention or compaction removed it). :class:`TimeoutError`
    when the broker did not hand it over within ``timeout`` (try again later)."""
    tp = TopicPartition(topic, partition)
    consumer = AIOKafkaConsumer(group_id=None, enable_auto_commit=False,
                                **client_options(kafka))
    await consumer.start()
    try:
        consumer.assign([tp])
        first = (await consumer.beginning_offsets([tp]))[tp]
        if offset < first:
            return None
        consumer.seek(tp, offset)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            batch = await consumer.getmany(tp, timeout_ms=200, max_records=1)
            for message in batch.get(tp, ()):
                return message if message.offset == offset else None  # past it: compacted
        raise TimeoutError(f"{topic}/{partition}/{offset} not read within {timeout:.0f}s")
    finally:
        await consumer.stop()
