"""The first offset of a partition written at or after a time, on any broker.

Kafka answers this with ``ListOffsets`` by timestamp (``offsets_for_times``);
the embedded broker (Tansu) answers offset 0 for every time. So the offset is
found by a binary search over the records' own timestamps: about
log2(records) one-record fetches per partition (20 for a million), each a seek
and a fetch on the caller's consumer::

    start = await first_offset_since(consumer, tp, since_ms, begin=0, end=1_000_000)
    consumer.seek(tp, start)

Timestamps of one partition are taken as non-decreasing (a changelog is
written by one worker at a time, stamped by its producer); callers leave
slack for clocks (:func:`guardrail.kafka.window_cells.live_horizon_seconds`).
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

__all__ = ["first_offset_since", "offsets_since"]


async def _record_at(consumer: AIOKafkaConsumer, tp: TopicPartition, offset: int,
                     timeout: float) -> Any | None:
    """The first record at or after ``offset`` (None: none within ``timeout``)."""
    consumer.seek(tp, offset)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        batch = await consumer.getmany(tp, timeout_ms=200, max_records=1)
        records = batch.get(tp)
        if records:
            return records[0]
    return None


async def first_offset_since(consumer: AIOKafkaConsumer, tp: TopicPartition, since_ms: int, *,
                             begin: int, end: int, timeout: float = 10.0) -> int:
    """The first offset in ``[begin, end)`` whose record is stamped at or after
    ``since_ms``; ``end`` when every record is older. ``tp`` must be assigned."""
    low, high = begin, end
    while low < high:
        middle = (low + high) // 2
        record = await _record_at(consumer, tp, middle, timeout)
        if record is None or record.timestamp >= since_ms:
            high = middle
        else:
            low = max(middle, record.offset) + 1  # a gap (compaction) jumps ahead
    return low


async def offsets_since(consumer: AIOKafkaConsumer, partitions: list[TopicPartition],
                        since_ms: int) -> dict[TopicPartition, int]:
    """:func:`first_offset_since` for each assigned partition, between its
    beginning and its end. The end is the high watermark a fetch reports: the
    embedded broker's listed end offset can stop inside the last record batch."""
    begins = await consumer.beginning_offsets(partitions)
    listed = await consumer.end_offsets(partitions)
    found = {}
    for tp in partitions:
        end = listed[tp]
        if end > begins[tp] and await _record_at(consumer, tp, begins[tp], 10.0) is not None:
            end = max(end, consumer.highwater(tp) or end)
        found[tp] = await first_offset_since(consumer, tp, since_ms, begin=begins[tp], end=end)
    return found
