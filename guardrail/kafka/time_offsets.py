"""The first offset of a partition written at or after a time, on any broker.

Apache Kafka answers this from its time index (``ListOffsets`` by timestamp,
``offsets_for_times``) in one request. The embedded broker (Tansu) answers
offset 0 for every time. So the broker's answer is taken only once two
one-record fetches confirm it (the record there is new enough, the one before
is older); otherwise the offset is found by a binary search over the records'
own timestamps: about log2(records) one-record fetches per partition (20 for a
million), each a seek and a fetch on the caller's consumer::

    start = await offset_for_time(consumer, tp, since_ms, begin=0, end=1_000_000)
    consumer.seek(tp, start)

Timestamps of one partition are taken as non-decreasing (a changelog is
written by one worker at a time, stamped by its producer); callers leave
slack for clocks (:func:`guardrail.agents.window_cells.live_horizon_seconds`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

__all__ = ["first_offset_since", "offset_for_time", "offsets_since", "read_end"]

log = logging.getLogger(__name__)


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
    """Binary search: the first offset in ``[begin, end)`` whose record is
    stamped at or after ``since_ms``; ``end`` when every record is older.
    ``tp`` must be assigned."""
    low, high = begin, end
    while low < high:
        middle = (low + high) // 2
        record = await _record_at(consumer, tp, middle, timeout)
        if record is None or record.offset >= end or record.timestamp >= since_ms:
            high = middle
        else:
            low = max(middle, record.offset) + 1  # a gap (compaction) jumps ahead
    return low


async def _broker_answer(consumer: AIOKafkaConsumer, tp: TopicPartition, since_ms: int,
                         end: int) -> int | None:
    """The broker's time-index answer (``end`` for "no record that new"), or
    None when the broker has none to give."""
    try:
        found = await consumer.offsets_for_times({tp: since_ms})
    except (KafkaError, asyncio.TimeoutError, ValueError) as exc:
        log.debug("offsets_for_times on %s failed (%s): searching instead", tp, exc)
        return None
    answer = found.get(tp)
    return end if answer is None else min(answer.offset, end)


async def _confirmed(consumer: AIOKafkaConsumer, tp: TopicPartition, offset: int,
                     since_ms: int, *, begin: int, end: int) -> bool:
    """True when ``offset`` is the first one in ``[begin, end)`` stamped at or
    after ``since_ms``: its record is new enough (or it is ``end``) and the
    record before it is older (or there is none, or a compaction gap)."""
    if offset < begin or offset > end:
        return False
    if offset < end:
        here = await _record_at(consumer, tp, offset, 10.0)
        if here is None or (here.offset < end and here.timestamp < since_ms):
            return False
    if offset == begin:
        return True
    before = await _record_at(consumer, tp, offset - 1, 10.0)
    return before is None or before.offset >= offset or before.timestamp < since_ms


async def offset_for_time(consumer: AIOKafkaConsumer, tp: TopicPartition, since_ms: int, *,
                          begin: int, end: int, search_only: bool = False) -> int:
    """The first offset in ``[begin, end)`` stamped at or after ``since_ms``
    (``end`` when every record is older): the broker's time index when two
    fetches confirm it (Apache Kafka), else the binary search (the embedded
    broker, or ``search_only``). ``tp`` must be assigned."""
    if begin >= end:
        return end
    if not search_only:
        answer = await _broker_answer(consumer, tp, since_ms, end)
        if answer is not None and await _confirmed(consumer, tp, answer, since_ms,
                                                   begin=begin, end=end):
            return answer
        log.debug("the broker's time index gave %s for %s: searching instead", answer, tp)
    return await first_offset_since(consumer, tp, since_ms, begin=begin, end=end)


async def read_end(consumer: AIOKafkaConsumer, tp: TopicPartition, begin: int,
                   listed_end: int) -> int:
    """The partition's real end: the high watermark a fetch reports, since the
    embedded broker's listed end offset can stop inside the last record batch."""
    if listed_end > begin and await _record_at(consumer, tp, begin, 10.0) is not None:
        return max(listed_end, consumer.highwater(tp) or listed_end)
    return listed_end


async def offsets_since(consumer: AIOKafkaConsumer, partitions: list[TopicPartition],
                        since_ms: int, *, search_only: bool = False
                        ) -> dict[TopicPartition, int]:
    """:func:`offset_for_time` for each assigned partition, between its
    beginning and its real end."""
    begins = await consumer.beginning_offsets(partitions)
    listed = await consumer.end_offsets(partitions)
    found = {}
    for tp in partitions:
        end = await read_end(consumer, tp, begins[tp], listed[tp])
        found[tp] = await offset_for_time(consumer, tp, since_ms, begin=begins[tp], end=end,
                                          search_only=search_only)
    return found
