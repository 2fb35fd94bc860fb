"""Re-judge a time range of the input topic (backfill), as its own consumer.

The range's offsets are found by timestamp; the run stops at the end
offsets seen when it started, so it always finishes. Identical content is not
paid twice across replays (a persistent judgment cache), and by default no
judgment events are emitted, so live alerts do not fire::

    summary = await replay(settings, start_ms=..., end_ms=None)
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from ..errors import ConfigError
from ..evaluate import build_evaluator
from ..judge import Judge
from ..settings import Settings
from ..stream.envelope import Source
from ..stream.processing import MessageJudge, Outgoing, RawMessage
from .clients import check_reachable, client_options

__all__ = ["ReplaySummary", "replay"]

Progress = Callable[[int, int], None]


@dataclass
class ReplaySummary:
    topic: str
    planned: int = 0
    processed: int = 0
    published: int = 0
    ranges: dict[int, tuple[int, int]] = field(default_factory=dict)


async def _first_record(consumer: AIOKafkaConsumer, tp: TopicPartition,
                        offset: int) -> tuple[int, int] | None:
    """(offset, timestamp_ms) of the first record at or after ``offset``."""
    consumer.seek(tp, offset)
    batch = await consumer.getmany(tp, timeout_ms=3000, max_records=1)
    messages = batch.get(tp)
    return (messages[0].offset, messages[0].timestamp) if messages else None


async def _offset_for_time(consumer: AIOKafkaConsumer, tp: TopicPartition, lo: int, hi: int,
                           timestamp_ms: int) -> int:
    """First offset in [lo, hi) whose timestamp is >= ``timestamp_ms`` (hi if none).

    A binary search over the records themselves: ``offsets_for_times`` is not
    reliable on every Kafka-compatible broker (Tansu answers 0 for any time).
    """
    while lo < hi:
        mid = (lo + hi) // 2
        found = await _first_record(consumer, tp, mid)
        if found is None or found[0] >= hi:
            hi = mid
        elif found[1] >= timestamp_ms:
            hi = mid
        else:
            lo = found[0] + 1
    return lo


async def _plan(consumer: AIOKafkaConsumer, topic: str, start_ms: int,
                end_ms: int | None) -> dict[TopicPartition, tuple[int, int]]:
    partitions = consumer.partitions_for_topic(topic)
    if not partitions:
        await consumer.topics()  # refresh metadata once
        partitions = consumer.partitions_for_topic(topic)
    if not partitions:
        raise ConfigError(f"topic {topic!r} does not exist")
    tps = [TopicPartition(topic, p) for p in sorted(partitions)]
    consumer.assign(tps)
    plan = {}
    for tp in tps:
        await consumer.seek_to_beginning(tp)
        first = await _first_record(consumer, tp, await consumer.position(tp))
        # The high watermark of a real fetch is the end "seen at start"; some
        # brokers under-report end_offsets (Tansu does for multi-record batches).
        end = consumer.highwater(tp) or 0
        if first is None:
            plan[tp] = (end, end)
            continue
        begin = await _offset_for_time(consumer, tp, first[0], end, start_ms)
        stop = (await _offset_for_time(consumer, tp, begin, end, end_ms)
                if end_ms is not None else end)
        plan[tp] = (begin, stop)
    return plan


async def _publish(producer: AIOKafkaProducer, records: list[Outgoing]) -> None:
    futures = [await producer.send(r.topic, r.value, key=r.key, timestamp_ms=r.timestamp_ms)
               for r in records]
    await asyncio.gather(*futures)


async def replay(settings: Settings, *, start_ms: int, end_ms: int | None = None,
                 topic: str | None = None, results_topic: str | None = None,
                 fire_alerts: bool = False, judge: Judge | None = None,
                 progress: Progress | None = None) -> ReplaySummary:
    """Judge every message of ``topic`` with a timestamp in [start_ms, end_ms)."""
    topic = topic or settings.kafka.input_topic
    await check_reachable(settings.kafka)
    evaluator = build_evaluator(settings, judge=judge, persistent_cache=True)
    message_judge = MessageJudge.from_settings(evaluator, settings, emit_judgments=fire_alerts,
                                 results_topic=results_topic or settings.kafka.results_topic,
                                 origin=f"replay-{uuid.uuid4().hex[:12]}")
    options = client_options(settings.kafka)
    consumer = AIOKafkaConsumer(group_id=None, enable_auto_commit=False, **options)
    producer = AIOKafkaProducer(acks="all", linger_ms=5, **options)
    await consumer.start()
    await producer.start()
    try:
        plan = await _plan(consumer, topic, start_ms, end_ms)
        summary = ReplaySummary(topic=topic, planned=sum(b - a for a, b in plan.values()),
                                ranges={tp.partition: r for tp, r in plan.items()})
        await _consume(consumer, producer, message_judge, plan, summary, settings, progress)
        return summary
    finally:
        await consumer.stop()
        await producer.stop()
        await evaluator.aclose()


async def _consume(consumer: AIOKafkaConsumer, producer: AIOKafkaProducer,
                   message_judge: MessageJudge, plan: dict[TopicPartition, tuple[int, int]],
                   summary: ReplaySummary, settings: Settings,
                   progress: Progress | None) -> None:
    active = {tp: stop for tp, (first, stop) in plan.items() if first < stop}
    for tp in active:
        consumer.seek(tp, plan[tp][0])
    while active:
        batch = await consumer.getmany(*active, timeout_ms=1000,
                                       max_records=settings.worker.batch_size)
        raws = []
        for tp, messages in batch.items():
            for m in messages:
                if m.offset < active.get(tp, -1):
                    raws.append(RawMessage(m.value, Source(
                        m.topic, m.partition, m.offset, timestamp_ms=m.timestamp, key=m.key)))
            if tp in active and messages and messages[-1].offset + 1 >= active[tp]:
                del active[tp]
        if raws:
            records = await message_judge.process(raws)
            await _publish(producer, records)
            summary.processed += len(raws)
            summary.published += len(records)
            if progress:
                progress(summary.processed, summary.planned)
        for tp in list(active):  # nothing left below the stop (e.g. compacted away)
            if await consumer.position(tp) >= active[tp]:
                del active[tp]
