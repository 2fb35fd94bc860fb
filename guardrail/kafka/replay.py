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
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from ..errors import ConfigError
from ..evaluate import build_evaluator
from ..judges.llm import Judge
from ..settings import KafkaSettings, Settings
from ..stream.envelope import Source
from ..stream.processing import JudgeTally, MessageJudge, Outgoing, RawMessage
from ..stream.sampling import Sampler
from .clients import client_options
from .time_offsets import offset_for_time, read_end
from .topics import ensure_topics, partition_count, review_topics

__all__ = ["ReplaySummary", "replay", "output_topics"]

Progress = Callable[[int, int], None]
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


async def _publish(producer: AIOKafkaProducer, records: list[Outgoing]) -> None:
    futures = [await producer.send(r.topic, r.value, key=r.key, timestamp_ms=r.timestamp_ms,
                                   headers=list(r.headers) or None)
               for r in records]
    await asyncio.gather(*futures)


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
                 sample_rate: float | None = None, consume: Consume | None = None
                 ) -> ReplaySummary:
    """Judge every message of ``topic`` with a timestamp in [start_ms, end_ms)
    (with ``sample_rate``: the sample the worker would judge at that rate).
    ``consume`` replaces the read/judge/publish loop (``replay --batch-api``:
    :func:`guardrail.batch_api.replay.consume_in_chunks`)."""
    topic = topic or settings.kafka.input_topic
    # ensure_topics checks first that the broker answers (one line, exit 2 if not).
    results_topic, dlq_topic = output_topics(settings, results_topic, dlq_topic)
    n = settings.kafka.topic_partitions
    # Not strict: a replay's output need not be co-partitioned with anything.
    await ensure_topics(settings.kafka, {results_topic: n, dlq_topic: n,
                                         **review_topics(settings.kafka, settings.review)},
                        strict=frozenset(), compacted=frozenset({settings.review.labels_topic}))
    evaluator = build_evaluator(settings, judge=judge, persistent_cache=True)
    message_judge = MessageJudge.from_settings(
        evaluator, settings, emit_judgments=fire_alerts, results_topic=results_topic,
        dlq_topic=dlq_topic, origin=f"replay-{uuid.uuid4().hex[:12]}",
        sampler=_sampler(settings, sample_rate))
    cache_path = getattr(evaluator.cache, "path", None)
    options = client_options(settings.kafka)
    consumer = AIOKafkaConsumer(group_id=None, enable_auto_commit=False, **options)
    producer = AIOKafkaProducer(acks="all", linger_ms=5, **options)
    await consumer.start()
    await producer.start()
    try:
        plan = await _plan(settings.kafka, consumer, topic, start_ms, end_ms)
        summary = ReplaySummary(topic=topic, results_topic=results_topic, dlq_topic=dlq_topic,
                                judge_model=evaluator.judge.model,
                                cache=str(cache_path) if cache_path else None,
                                planned=sum(b - a for a, b in plan.values()),
                                ranges={tp.partition: r for tp, r in plan.items()},
                                tally=message_judge.tally)
        await (consume or _consume)(consumer, producer, message_judge, plan, summary, settings,
                                    progress)
        if sample_rate is not None:
            summary.not_sampled = message_judge.not_sampled
        summary.finished_at = datetime.now(timezone.utc).isoformat()
        return summary
    finally:
        await consumer.stop()
        await producer.stop()
        await evaluator.aclose()


def _sampler(settings: Settings, sample_rate: float | None) -> Sampler | None:
    if sample_rate is None:
        return None  # a replay judges everything unless asked
    if not 0 <= sample_rate <= 1:
        raise ConfigError(f"the sample rate must be from 0 to 1, not {sample_rate}")
    return Sampler(settings.sampling, group_labels=settings.windows.group_labels,
                   version_label=settings.windows.version_label,
                   partitions=settings.kafka.topic_partitions, rate=sample_rate)


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
                        m.topic, m.partition, m.offset, timestamp_ms=m.timestamp, key=m.key,
                        headers=tuple(m.headers or ()))))
            if tp in active and messages and messages[-1].offset + 1 >= active[tp]:
                del active[tp]
        if raws:
            records = await message_judge.process(raws)
            await _publish(producer, records)
            summary.processed += len(raws)
            summary.count(records)
            if progress:
                progress(summary.processed, summary.planned)
        for tp in list(active):  # nothing left below the stop (e.g. compacted away)
            if await consumer.position(tp) >= active[tp]:
                del active[tp]
