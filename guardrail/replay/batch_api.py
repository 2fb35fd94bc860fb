"""``replay --batch-api``: a topic's time range judged through the batch API.

The replay of :mod:`guardrail.replay.backfill` (its plan, topics, judgment cache,
summary and progress) with two things changed: the judge is the batch judge
(:mod:`~guardrail.batch_api.collector`), and the loop reads the whole range
first, judging it in groups of ``batch_max_requests`` messages that are all
in flight at once (a batch takes hours; waiting for one before reading on
would take days). Each group's results are published as soon as its
requests are answered, and its offsets recorded in the state file, so a
restart skips what was published and resumes the batches of the rest::

    summary, stats = await replay_batch_api(settings, start_ms=t0, results_topic="R",
                                            state_path=Path("replay-state.json"), say=print)

The range's records are held in memory until their group is published.
"""

from __future__ import annotations

import asyncio
import functools
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from .backfill import Progress, ReplaySummary, _send, replay
from ..config.settings import Settings
from ..stream.envelope import Source
from ..stream.processing import MessageJudge, RawMessage
from ..batch_api.collector import Say
from ..batch.batch_api import BatchRunStats, batch_judge
from ..batch_api.state import BatchState

__all__ = ["replay_batch_api", "consume_in_chunks", "DEFAULT_REPLAY_STATE"]

#: Where ``replay --batch-api`` keeps its state unless ``--batch-state`` says.
DEFAULT_REPLAY_STATE = Path("~/.cache/guardrail/replay-batch-state.json")


async def replay_batch_api(settings: Settings, *, state_path: Path | None = None,
                           say: Say | None = None, **replay_args: Any,
                           ) -> tuple[ReplaySummary, BatchRunStats]:
    """:func:`~guardrail.replay.backfill.replay` through the batch API (same arguments)."""
    path = (state_path or DEFAULT_REPLAY_STATE).expanduser()
    settings, judge, collector = batch_judge(settings, path, say)
    consume = functools.partial(consume_in_chunks, state=collector.state, say=say)
    # replay closes the evaluator, which closes the judge, the collector and its client.
    summary = await replay(settings, judge=judge, consume=consume, **replay_args)
    return summary, BatchRunStats(requests=collector.requests, submitted=collector.submitted,
                                  resumed=collector.resumed, state_path=str(path))


async def consume_in_chunks(consumer: AIOKafkaConsumer, producer: AIOKafkaProducer,
                            message_judge: MessageJudge,
                            plan: dict[TopicPartition, tuple[int, int]], summary: ReplaySummary,
                            settings: Settings, progress: Progress | None, *,
                            state: BatchState, say: Say | None = None) -> None:
    """Read the plan, judge it in groups all in flight, publish each group when done."""
    where = f"{summary.topic}->{summary.results_topic}"
    size = settings.batch_api.max_requests
    groups: list[asyncio.Task[tuple[list[RawMessage], list[Any]]]] = []
    group: list[RawMessage] = []
    skipped = 0
    async for raw in _records(consumer, plan):
        if state.is_published(f"{where}:{raw.source.partition}", raw.source.offset):
            skipped += 1
            continue
        group.append(raw)
        if len(group) >= size:
            groups.append(asyncio.create_task(_judged(message_judge, group)))
            group = []
    if group:
        groups.append(asyncio.create_task(_judged(message_judge, group)))
    summary.processed += skipped
    if skipped and say is not None:
        say(f"skipped {skipped} messages whose results an earlier run published")
    try:
        for finished in asyncio.as_completed(groups):
            raws, records = await finished
            await asyncio.gather(*await _send(producer, records))
            for partition in {r.source.partition for r in raws}:
                state.mark_published(f"{where}:{partition}", [
                    r.source.offset for r in raws if r.source.partition == partition])
            summary.processed += len(raws)
            summary.count(records)
            if progress:
                progress(summary.processed, summary.planned)
    finally:
        for task in groups:
            task.cancel()
        await asyncio.gather(*groups, return_exceptions=True)


async def _judged(message_judge: MessageJudge, raws: list[RawMessage],
                  ) -> tuple[list[RawMessage], list[Any]]:
    return raws, await message_judge.process(raws)


async def _records(consumer: AIOKafkaConsumer, plan: dict[TopicPartition, tuple[int, int]]):
    """Every record of the plan, partition by partition, in offset order."""
    for tp, (first, stop) in plan.items():
        if first >= stop:
            continue
        consumer.seek(tp, first)
        while await consumer.position(tp) < stop:
            fetched = await consumer.getmany(tp, timeout_ms=1000, max_records=1000)
            for m in fetched.get(tp, ()):
                if m.offset < stop:
                    yield RawMessage(m.value, Source(
                        m.topic, m.partition, m.offset, timestamp_ms=m.timestamp, key=m.key,
                        headers=tuple(m.headers or ())))
