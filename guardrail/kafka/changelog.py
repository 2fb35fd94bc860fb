"""A topic folded by key, read with a plain consumer outside any group: once, up
to the end seen at the start (commands), or followed for as long as a worker runs
(its pages answer from memory)::

    count = await read_topic(kafka, "redteam-labels", fold, fetch_wait_ms=100)
    follower = TopicFollower(kafka, "redteam-review", queue, fetch_wait_ms=100)
    await follower.start(); ...; await follower.stop()

The sink (:class:`RecordSink`) gets each record's key and value in offset order
per partition: the window table's changelog (:mod:`guardrail.agents.rates_view`),
the review queue and the labels (:mod:`guardrail.review.folds`).

**The end.** Tansu (the embedded broker) answers ``ListOffsets`` with the
start of a partition's last record batch, not its end. A fetch's high
watermark is right on every broker (the worker's table recovery relies on the
same, ``guardrail/agents/transport.py``), so "caught up" means: read up to
the high watermark the first fetch of each partition reported.

The consumer never creates the topic: it looks for it first (metadata
without auto-creation), since a topic the broker auto-creates with its
default partition count would keep Faust from creating the real one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from .._tasks import cancel_repeatedly
from ..errors import GuardrailError
from .clients import client_options, resolve_bootstrap
from .settings import KafkaSettings
from .time_offsets import offsets_since
from .topics import partition_count

__all__ = ["ChangelogReader", "TopicFollower", "RecordSink", "read_topic", "RatesUnavailable"]

log = logging.getLogger("guardrail.rates")

#: Records per fetch round; a round's records are applied without a pause.
POLL_RECORDS = 2000
#: Longest pause between attempts when the topic is missing or reading failed.
MAX_RETRY_SECONDS = 30.0
#: A follower's stop: cancellations, and the wait after each for its task to end.
CANCEL_TRIES, CANCEL_WAIT_SECONDS = 5, 1.0


class RatesUnavailable(GuardrailError):
    """The changelog could not be read (missing topic, broker unreachable, too slow)."""


class RecordSink(Protocol):
    """What a reader feeds: each record's key and value (None: a tombstone), in
    offset order per partition. :class:`WindowCells` is one; the review queue
    and the agreement figures fold their topics the same way."""

    def apply(self, key: bytes | None, value: bytes | None, *, where: str) -> Any: ...


class ChangelogReader:
    """One group-less consumer over every partition of a topic (a changelog,
    or any topic folded by key), feeding its records in order into ``cells``. Reopened after a failure, it
    goes on from the next unread offset of each partition::

        reader = ChangelogReader(kafka, topic, cells, fetch_wait_ms=100)
        if await reader.open():           # False: the topic does not exist (yet)
            while not await reader.caught_up():
                await reader.poll(200)
            await reader.close()
    """

    def __init__(self, kafka: KafkaSettings, topic: str, cells: RecordSink, *,
                 fetch_wait_ms: int, poll_records: int = POLL_RECORDS,
                 horizon_seconds: float | None = None) -> None:
        self.kafka, self.topic, self.cells = kafka, topic, cells
        #: Start at the first record written within this many seconds (the
        #: window changelog: older records hold only expired cells); None: all.
        self.horizon_seconds = horizon_seconds
        self.fetch_wait_ms, self.poll_records = fetch_wait_ms, poll_records
        self.next_offsets: dict[int, int] = {}  # partition -> next offset to apply
        self._consumer: AIOKafkaConsumer | None = None
        self._partitions: list[TopicPartition] = []
        self._targets: dict[TopicPartition, int] = {}

    async def open(self) -> bool:
        """Start the consumer on every partition; False when the topic is missing."""
        count = await self._partition_count()
        if not count:
            return False
        consumer = AIOKafkaConsumer(group_id=None, enable_auto_commit=False,
                                    auto_offset_reset="earliest",
                                    fetch_max_wait_ms=self.fetch_wait_ms,
                                    **client_options(self.kafka))
        self._consumer = consumer  # set first: close() also stops one whose start failed
        await consumer.start()
        self._partitions = [TopicPartition(self.topic, p) for p in range(count)]
        self._targets = {}
        consumer.assign(self._partitions)
        fresh = [tp for tp in self._partitions if tp.partition not in self.next_offsets]
        if fresh:
            await self._seek_start(consumer, fresh)
        for tp in self._partitions:
            if tp.partition in self.next_offsets:
                consumer.seek(tp, self.next_offsets[tp.partition])
        return True

    async def _seek_start(self, consumer: AIOKafkaConsumer, fresh: list[TopicPartition]
                          ) -> None:
        """The beginning, or with a horizon the first record written since
        (the end where every record is older): start time then depends on the
        live windows, not on the changelog's age (compacted or not)."""
        if self.horizon_seconds is None:
            await consumer.seek_to_beginning(*fresh)
            return
        since_ms = int((time.time() - self.horizon_seconds) * 1000)
        for tp, offset in (await offsets_since(consumer, fresh, since_ms)).items():
            consumer.seek(tp, offset)

    async def _partition_count(self) -> int | None:
        return await partition_count(self.kafka, self.topic)

    async def poll(self, timeout_ms: int) -> int:
        """Apply the records of one fetch round; returns how many."""
        consumer = self._require()
        batch = await consumer.getmany(timeout_ms=timeout_ms, max_records=self.poll_records)
        applied = 0
        for tp, records in batch.items():
            for record in records:
                self.cells.apply(record.key, record.value,
                                 where=f"{tp.topic}[{tp.partition}] offset {record.offset}")
                self.next_offsets[tp.partition] = record.offset + 1
            applied += len(records)
        # The end to reach: the first fetch's high watermark (a round may stop
        # inside a record batch, so the listed "end" inside the last one won't do).
        for tp in self._partitions:
            highwater = consumer.highwater(tp)
            if tp not in self._targets and highwater is not None:
                self._targets[tp] = highwater
        return applied

    async def caught_up(self) -> bool:
        """Every partition read up to the end its first fetch reported."""
        consumer = self._require()
        if len(self._targets) < len(self._partitions):
            return False
        for tp in self._partitions:
            if await consumer.position(tp) < self._targets[tp]:
                return False
        return True

    async def close(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            await consumer.stop()

    def _require(self) -> AIOKafkaConsumer:
        if self._consumer is None:
            raise RuntimeError("ChangelogReader used before open()")
        return self._consumer


async def read_topic(kafka: KafkaSettings, topic: str, sink: RecordSink, *,
                     fetch_wait_ms: int, timeout: float = 60.0,
                     missing: str = "it does not exist", missing_ok: bool = False,
                     what: str = "topic", horizon_seconds: float | None = None) -> int | None:
    """Feed every record of ``topic`` to ``sink`` once, up to the end seen at
    the start; returns how many. A missing topic is None with ``missing_ok``;
    else, like an unreachable broker or a read slower than ``timeout``,
    :class:`RatesUnavailable` (``what`` names the topic's kind, ``missing`` says
    why it may be missing)."""
    reader = ChangelogReader(kafka, topic, sink, fetch_wait_ms=fetch_wait_ms,
                             horizon_seconds=horizon_seconds)
    where = resolve_bootstrap(kafka)
    records = 0
    try:
        if not await reader.open():
            if missing_ok:
                return None
            raise RatesUnavailable(f"no {what} {topic!r} on {where}: {missing}")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not await reader.caught_up():
            if loop.time() > deadline:
                raise RatesUnavailable(f"could not read {topic!r} to its end within "
                                       f"{timeout:.0f}s ({records} records read)")
            records += await reader.poll(200)
    except KafkaError as exc:
        raise RatesUnavailable(f"cannot read {topic!r} from {where}: {exc}") from None
    finally:
        await reader.close()
    return records


class TopicFollower:
    """Follows a topic for as long as the worker runs, from its beginning, feeding
    every record to ``sink`` (a :class:`RecordSink`), so pages answer from
    memory at no Kafka request. Until the first read reaches the end,
    ``caught_up`` is False and the sink is partial. A missing topic or a failed
    read is retried with backoff; it goes on from where it was, and never stops
    the worker::

        follower = TopicFollower(settings.kafka, "redteam-labels", labels_fold,
                                 fetch_wait_ms=settings.worker.consumer_fetch_wait_ms)
        await follower.start(); ...; await follower.stop()
    """

    #: How its log lines name it.
    name = "follower"

    def __init__(self, kafka: KafkaSettings, topic: str, sink: RecordSink, *,
                 fetch_wait_ms: int, horizon_seconds: float | None = None) -> None:
        self.topic = topic
        self.sink = sink
        self.reader = ChangelogReader(kafka, topic, sink, fetch_wait_ms=fetch_wait_ms,
                                      horizon_seconds=horizon_seconds)
        self.caught_up = False
        self.failures = 0
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Start following in a background task (idempotent)."""
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        """Stop following and close the consumer (idempotent)."""
        task, self._task = self._task, None
        if task is not None:
            await self._cancel(task)
        await self.reader.close()

    async def _cancel(self, task: asyncio.Task[None]) -> None:
        """Cancel the following task, again while it goes on: a client call it
        is in can swallow one cancellation (suspected where a worker stopped as
        it started hung, its follower reading on). Bounded: a stop never waits
        for good."""
        if not await cancel_repeatedly(task, tries=CANCEL_TRIES, wait=CANCEL_WAIT_SECONDS):
            log.warning("%s: reading %r did not stop after %d cancellations; left to the "
                        "event loop's close", self.name, self.topic, CANCEL_TRIES)

    async def _run(self) -> None:
        delay = 1.0
        while True:
            try:
                if await self.reader.open():
                    delay = 1.0
                    await self._follow()
                log.info("%s: no topic %r yet; looking again in %.0fs", self.name,
                         self.topic, delay)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # best effort; the worker goes on
                self.failures += 1
                log.warning("%s: reading %r failed (%s); again in %.0fs", self.name,
                            self.topic, exc, delay)
            await self.reader.close()
            await asyncio.sleep(delay)
            delay = min(delay * 2, MAX_RETRY_SECONDS)

    async def _follow(self) -> None:
        while True:
            await self.reader.poll(500)
            if not self.caught_up and await self.reader.caught_up():
                self.caught_up = True
                log.info("%s: caught up with %r", self.name, self.topic)
            self.after_poll()

    def after_poll(self) -> None:
        """A hook after every fetch round (the rates view prunes expired cells)."""
