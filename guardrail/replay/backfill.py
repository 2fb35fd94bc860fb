"""Re-judge a time range of the input topic (backfill), as its own consumer.

The range's offsets are found by timestamp; the run stops at the end
offsets seen when it started, so it always finishes. Identical content is not
paid twice across replays (a persistent judgment cache), and by default no
judgment events are emitted, so live alerts do not fire. With its own results
topic ``R`` its DLQ records go beside them, to ``R.dlq`` (or ``dlq_topic``),
not into the live DLQ; both topics are created like the worker's. Results and
DLQ records carry the input's key and headers, and are sent with its headers::

    summary = await replay(settings, start_ms=..., end_ms=None, results_topic="R")
    summary.results, summary.dlq, summary.tally.judged, summary.tally.cached
    summary.to_json()   # counts, topics, the cache file, judged / cached / cost

A replay judges every valid message, whatever ``sample_rate`` says; with
``sample_rate=R`` (``--sample-rate``) it samples like the worker: the same
hash of the case_id, so the same messages as a live worker at rate R, and the
configured ``sample_rules`` (a ``first_per_version`` rule counts, in memory,
from the start of the replayed range). The judge budget is the worker's only.
"""

from __future__ import annotations

import asyncio
import gc
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition

from .._tasks import cancel_and_wait, gather_or_cancel
from ..judging.cache import BatchedCache
from ..errors import ConfigError
from ..judges.build import build_evaluator
from ..judging.judge import Judge
from ..judging.models import RedteamMetrics
from ..config.settings import Settings
from ..kafka.settings import KafkaSettings
from ..stream.envelope import InputMessage, Source
from ..stream.processing import JudgeTally, MessageJudge, Outgoing, RawMessage
from ..stream.sampling import Sampler
from ..kafka.clients import client_options
from ..kafka.time_offsets import offset_for_time, read_end
from ..kafka.topics import ensure_topics, partition_count
from ..review.settings import review_topics

__all__ = ["ReplaySummary", "replay", "output_topics", "plan_ranges", "new_origin",
           "prepare_outputs"]

Progress = Callable[[int, int], None]
#: A batch handed to the producer: its record count, records and their acknowledgements.
Sent = tuple[int, list[Outgoing], list[asyncio.Future[Any]]]

#: Records a batch reads at most: the cache is read once and written once per
#: batch, and the batch's acknowledgements are awaited together.
READ_BATCH = 1000
#: Batches judged at once (as the worker's MAX_INFLIGHT_BATCHES): one is read
#: and one published while the others are judged. The judge's own limit
#: (``judge_concurrency``) bounds the calls in flight, as in the worker.
IN_FLIGHT = 4
#: Producer batches: results leave a thousand at a time, so fill a batch per
#: partition (half the broker's default largest batch, 1 MB) and wait a little for it.
LINGER_MS = 20
MAX_BATCH_BYTES = 512 * 1024
#: The read/judge/publish loop: (consumer, producer, message judge, plan, summary,
#: settings, progress).
Consume = Callable[..., Awaitable[None]]


@dataclass
class ReplaySummary:
    """What a replay read, wrote where, and what judging it cost."""

    topic: str
    results_topic: str = ""
    dlq_topic: str = ""
    judge_model: str = ""
    cache: str | None = None
    planned: int = 0
    processed: int = 0
    results: int = 0
    dlq: int = 0
    judgment_events: int = 0
    #: Valid messages left unjudged (only with a sample rate); None: no sampling.
    not_sampled: int | None = None
    ranges: dict[int, tuple[int, int]] = field(default_factory=dict)
    tally: JudgeTally = field(default_factory=JudgeTally)
    finished_at: str | None = None

    def count(self, records: list[Outgoing]) -> None:
        for r in records:
            if r.topic == self.results_topic:
                self.results += 1
            elif r.topic == self.dlq_topic:
                self.dlq += 1
            else:
                self.judgment_events += 1

    def cost_usd(self) -> float | None:
        """Spend of this run; None when some judgment's price is unknown."""
        return None if self.tally.unpriced else round(self.tally.cost, 10)

    def cost_text(self) -> str:
        cost = self.cost_usd()
        if cost is not None:
            return f"${cost:.6f}"
        return (f"unknown: {self.tally.unpriced} judgments have no price ('{self.judge_model}' "
                "is not in litellm's cost map; set judge_input_cost_per_token and "
                f"judge_output_cost_per_token); priced part ${self.tally.cost:.6f}")

    def to_json(self) -> dict[str, Any]:
        """Counts first, then the cache used and what judging cost, last."""
        t = self.tally
        return {"topic": self.topic, "planned": self.planned, "processed": self.processed,
                "results": self.results, "results_topic": self.results_topic,
                "dlq": self.dlq, "dlq_topic": self.dlq_topic,
                "judgment_events": self.judgment_events, "not_sampled": self.not_sampled,
                "ranges": {str(k): v for k, v in self.ranges.items()},
                "finished_at": self.finished_at, "cache": self.cache,
                "judged": t.judged, "cached": t.cached, "errors": t.errors,
                "input_tokens": t.input_tokens, "output_tokens": t.output_tokens,
                "cost_usd": self.cost_usd(),
                "cost": self.cost_text()}


async def _plan(kafka: KafkaSettings, consumer: AIOKafkaConsumer, topic: str, start_ms: int,
                end_ms: int | None, *, search_only: bool = False
                ) -> dict[TopicPartition, tuple[int, int]]:
    """Per partition, the offsets [first at or after start_ms, first at or after
    end_ms) of the records there when the replay starts."""
    count = await partition_count(kafka, topic)
    if not count:
        raise ConfigError(f"topic {topic!r} does not exist")
    tps = [TopicPartition(topic, p) for p in range(count)]
    consumer.assign(tps)
    begins = await consumer.beginning_offsets(tps)
    listed = await consumer.end_offsets(tps)
    plan = {}
    for tp in tps:
        # The end "seen at start": records published during the replay are not in it.
        end = await read_end(consumer, tp, begins[tp], listed[tp])
        begin = await offset_for_time(consumer, tp, start_ms, begin=begins[tp], end=end,
                                      search_only=search_only)
        stop = (await offset_for_time(consumer, tp, end_ms, begin=begin, end=end,
                                      search_only=search_only)
                if end_ms is not None else end)
        plan[tp] = (begin, stop)
    return plan


async def _send(producer: AIOKafkaProducer, records: list[Outgoing]) -> list[asyncio.Future[Any]]:
    """Hand every record to the producer (``send`` waits only while its buffer
    is full); the futures of their acknowledgements."""
    return [await producer.send(r.topic, r.value, key=r.key, timestamp_ms=r.timestamp_ms,
                                headers=list(r.headers) or None)
            for r in records]


def output_topics(settings: Settings, results_topic: str | None,
                  dlq_topic: str | None) -> tuple[str, str]:
    """(results, DLQ) topics of a replay: its own results topic ``R`` puts
    its DLQ records beside them, on ``R.dlq``, never into the live DLQ."""
    live = settings.kafka
    results = results_topic or live.results_topic
    if dlq_topic is None:
        dlq_topic = live.dlq_topic if results == live.results_topic else f"{results}.dlq"
    if dlq_topic == results:
        raise ConfigError(f"the DLQ topic must differ from the results topic ({results!r})")
    return results, dlq_topic


async def replay(settings: Settings, *, start_ms: int, end_ms: int | None = None,
                 topic: str | None = None, results_topic: str | None = None,
                 dlq_topic: str | None = None, fire_alerts: bool = False,
                 judge: Judge | None = None, progress: Progress | None = None,
                 sample_rate: float | None = None, consume: Consume | None = None,
                 ranges: dict[int, tuple[int, int]] | None = None, origin: str | None = None,
                 ) -> ReplaySummary:
    """Judge every message of ``topic`` with a timestamp in [start_ms, end_ms)
    (with ``sample_rate``: the sample the worker would judge at that rate).
    ``consume`` replaces the read/judge/publish loop (``replay --batch-api``:
    :func:`guardrail.replay.batch_api.consume_in_chunks`). ``ranges``
    (partition: [first, stop) offsets) replaces the plan by time, and
    ``origin`` the run's id: one process of a replay in many
    (:mod:`.replay_processes`)."""
    topic = topic or settings.kafka.input_topic
    results_topic, dlq_topic = await prepare_outputs(settings, results_topic, dlq_topic)
    evaluator = build_evaluator(settings, judge=judge, persistent_cache=True)
    evaluator.cache = BatchedCache(evaluator.cache)  # type: ignore[arg-type]
    message_judge = _BatchJudge.from_settings(
        evaluator, settings, emit_judgments=fire_alerts, results_topic=results_topic,
        dlq_topic=dlq_topic, origin=origin or new_origin(),
        sampler=_sampler(settings, sample_rate))
    cache_path = getattr(evaluator.cache, "path", None)
    options = client_options(settings.kafka)
    consumer = AIOKafkaConsumer(group_id=None, enable_auto_commit=False, **options)
    producer = AIOKafkaProducer(acks="all", linger_ms=LINGER_MS, max_batch_size=MAX_BATCH_BYTES,
                                **options)
    await consumer.start()
    await producer.start()
    # What lives as long as the run (imports, schemas, clients) leaves the
    # collector's walks, as in the worker (guardrail.agents.runner.freeze_heap,
    # not imported: it would load Faust):
    # a replay allocates a result's objects per message, so full collections
    # come often, and each walked every one of them.
    gc.collect()
    gc.freeze()
    try:
        if ranges is None:
            plan = await _plan(settings.kafka, consumer, topic, start_ms, end_ms)
        else:
            plan = {TopicPartition(topic, p): r for p, r in sorted(ranges.items())}
            consumer.assign(list(plan))
        summary = ReplaySummary(topic=topic, results_topic=results_topic, dlq_topic=dlq_topic,
                                judge_model=evaluator.judge.model,
                                cache=str(cache_path) if cache_path else None,
                                planned=sum(b - a for a, b in plan.values()),
                                ranges={tp.partition: r for tp, r in plan.items()},
                                tally=message_judge.tally)
        if consume is None:
            await _consume(consumer, producer, message_judge, plan, summary, progress)
        else:  # another loop (--batch-api's), which reads its batch settings
            await consume(consumer, producer, message_judge, plan, summary, settings, progress)
        if sample_rate is not None:
            summary.not_sampled = message_judge.not_sampled
        summary.finished_at = datetime.now(timezone.utc).isoformat()
        return summary
    finally:
        await consumer.stop()
        await producer.stop()
        await evaluator.aclose()
        await message_judge.close_registry()


async def prepare_outputs(settings: Settings, results_topic: str | None,
                          dlq_topic: str | None) -> tuple[str, str]:
    """The results and DLQ topics a replay writes, created if missing.
    ensure_topics checks first that the broker answers (one line, exit 2 if not)."""
    results_topic, dlq_topic = output_topics(settings, results_topic, dlq_topic)
    n = settings.kafka.topic_partitions
    # Not strict: a replay's output need not be co-partitioned with anything.
    await ensure_topics(settings.kafka, {results_topic: n, dlq_topic: n,
                                         **review_topics(settings.kafka, settings.review)},
                        strict=frozenset(), compacted=frozenset({settings.review.labels_topic}))
    return results_topic, dlq_topic


def new_origin() -> str:
    """A replay run's id: its judgment events' ``origin``."""
    return f"replay-{uuid.uuid4().hex[:12]}"


async def plan_ranges(settings: Settings, *, start_ms: int, end_ms: int | None = None,
                      topic: str | None = None) -> dict[int, tuple[int, int]]:
    """The offsets a replay of [start_ms, end_ms) would read, per partition."""
    consumer = AIOKafkaConsumer(group_id=None, enable_auto_commit=False,
                                **client_options(settings.kafka))
    await consumer.start()
    try:
        plan = await _plan(settings.kafka, consumer, topic or settings.kafka.input_topic,
                           start_ms, end_ms)
    finally:
        await consumer.stop()
    return {tp.partition: r for tp, r in plan.items()}


def _sampler(settings: Settings, sample_rate: float | None) -> Sampler | None:
    if sample_rate is None:
        return None  # a replay judges everything unless asked
    if not 0 <= sample_rate <= 1:
        raise ConfigError(f"the sample rate must be from 0 to 1, not {sample_rate}")
    return Sampler(settings.sampling, group_labels=settings.windows.group_labels,
                   version_label=settings.windows.version_label,
                   partitions=settings.kafka.topic_partitions, rate=sample_rate)


class _BatchJudge(MessageJudge):
    """Judges a replay's batch with the cache read for the whole batch first (one
    query) and its new judgments written after it (one transaction)."""

    async def _judge_until_available(self, messages: list[InputMessage]) -> list[RedteamMetrics]:
        cache, evaluator = self.evaluator.cache, self.evaluator
        assert isinstance(cache, BatchedCache)
        # Before the first await: batches start in order (see MessageJudge.process).
        keys = [evaluator.cache_keys(m.case) for m in messages]
        cache.prefetch(key for some in keys for key in some)
        # A case whose judgments are all cached makes no call: answered in line,
        # not as a task of its own (a second pass is all such cases).
        known = [evaluator.cached(m.case, some) if all(map(cache.holds, some)) else None
                 for m, some in zip(messages, keys)]
        missed = [m for m, verdict in zip(messages, known) if verdict is None]
        try:
            fresh = iter(await super()._judge_until_available(missed) if missed else ())
        finally:
            cache.flush()
        return [verdict if verdict is not None else next(fresh) for verdict in known]

    def _count(self, metrics: RedteamMetrics, message: InputMessage) -> None:
        # A replay serves no /metrics: its summary's tally is all that counts.
        self.tally.add(metrics)


def _raws(batch: dict[TopicPartition, list[ConsumerRecord]],
          active: dict[TopicPartition, int]) -> list[RawMessage]:
    """The batch's records below their partition's stop; a partition read up
    to its stop leaves ``active``."""
    raws = []
    for tp, messages in batch.items():
        stop = active.get(tp, -1)
        raws.extend(RawMessage(m.value, Source(m.topic, m.partition, m.offset,
                                               timestamp_ms=m.timestamp, key=m.key,
                                               headers=tuple(m.headers or ())))
                    for m in messages if m.offset < stop)
        if tp in active and messages and messages[-1].offset + 1 >= stop:
            del active[tp]
    return raws


async def _read(consumer: AIOKafkaConsumer, plan: dict[TopicPartition, tuple[int, int]]
                ) -> AsyncIterator[list[RawMessage]]:
    """The planned ranges in batches of up to :data:`READ_BATCH` records."""
    active = {tp: stop for tp, (first, stop) in plan.items() if first < stop}
    for tp in active:
        consumer.seek(tp, plan[tp][0])
    while active:
        batch = await consumer.getmany(*active, timeout_ms=1000, max_records=READ_BATCH)
        raws = _raws(batch, active)
        if raws:
            yield raws
        for tp in list(active):  # nothing left below the stop (e.g. compacted away)
            if await consumer.position(tp) >= active[tp]:
                del active[tp]


async def _consume(consumer: AIOKafkaConsumer, producer: AIOKafkaProducer,
                   message_judge: MessageJudge, plan: dict[TopicPartition, tuple[int, int]],
                   summary: ReplaySummary, progress: Progress | None) -> None:
    """Read, judge and publish as a pipeline: while up to :data:`IN_FLIGHT`
    batches are judged (their judge calls as concurrent as the judge allows),
    the next is read and finished ones are published, in the order read."""
    queue: asyncio.Queue[tuple[int, asyncio.Task[list[Outgoing]]] | None] = \
        asyncio.Queue(IN_FLIGHT)
    work: list[asyncio.Task[list[Outgoing]]] = []

    async def read_and_judge() -> None:
        async for raws in _read(consumer, plan):
            task = asyncio.ensure_future(message_judge.process(raws))
            work.append(task)
            await queue.put((len(raws), task))  # waits while IN_FLIGHT batches are unpublished
        await queue.put(None)

    async def publish_in_order() -> None:
        previous: Sent | None = None
        while (item := await queue.get()) is not None:
            count, task = item
            records = await task
            work.remove(task)
            sent = await _send(producer, records)
            # The previous batch is acknowledged while this one's records are on their way.
            await _settle(previous, summary, progress)
            previous = (count, records, sent)
        await _settle(previous, summary, progress)

    try:
        await gather_or_cancel(read_and_judge(), publish_in_order())
    finally:
        await cancel_and_wait(work)


async def _settle(sent: Sent | None, summary: ReplaySummary, progress: Progress | None) -> None:
    """Wait for a sent batch's acknowledgements, then count it as done."""
    if sent is None:
        return
    count, records, futures = sent
    await asyncio.gather(*futures)
    summary.processed += count
    summary.count(records)
    if progress:
        progress(summary.processed, summary.planned)
