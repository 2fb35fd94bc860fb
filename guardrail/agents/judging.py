"""The judging agent: at-least-once, bounded, in order.

Why not ``concurrency > 1`` or ``take()``: in faust-streaming 0.15.3 concurrent
agents ack out of order and ``Consumer._new_offset`` can commit past an
unfinished message, and ``take()`` acks its batch in a ``finally`` even when
the body failed or was cancelled. So the agent reads batches with
``noack_take`` (nothing is acked for us), judges each batch concurrently, and
an ordered acker publishes a batch's records and acks it only after

1. every result / judgment / DLQ record of it was acknowledged by the broker, and
2. every earlier batch was published and acked,

so the committed offset never passes an unfinished message. At most
``max_inflight_batches`` batches are in flight (backpressure): the agent stops
pulling while the judge is slow or paused.

A misconfigured judge (:class:`~guardrail.errors.JudgeConfigError`: key
refused, unknown model) is not waited out: the acker cancels every unacked
batch, acks nothing more, and hands the error to the runtime, which logs it
and stops the worker with exit code 78 (``WorkerRuntime.stop_on_config_error``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from faust.types import TP

from ..assembly.base import RUN_SPAN_HEADERS, TURN_HEADERS
from ..stream.envelope import Source
from ..stream.item_bundles import bundle_items
from ..stream.processing import MessageJudge, Outgoing, RawMessage
from .acker import OrderedAcker, Publish
from .windows import from_earlier_generation

if TYPE_CHECKING:
    from .runtime import WorkerRuntime

__all__ = ["register", "MAX_INFLIGHT_BATCHES", "publish_records",
           "stop_acker", "output_topics", "RAW_TOPIC", "floors_of", "item_bundler"]

log = logging.getLogger("guardrail.worker")

MAX_INFLIGHT_BATCHES = 4
#: How long a stop lets in-flight batches finish (the whole stop must fit in 5 s).
SHUTDOWN_GRACE_SECONDS = 2.0
#: How long a stop lets a batch being published finish publishing and acking.
PUBLISH_GRACE_SECONDS = 1.0


def _raw(event: Any) -> RawMessage:
    m = event.message
    timestamp_ms = int(m.timestamp * 1000) if m.timestamp else None
    # Faust hands the record's headers over as aiokafka read them, (name, bytes)
    # pairs; its types also allow a mapping.
    pairs = m.headers.items() if isinstance(m.headers, Mapping) else (m.headers or ())
    headers = tuple((name, value) for name, value in pairs)
    return RawMessage(value=m.value, source=Source(m.topic, m.partition, m.offset,
                                                   timestamp_ms=timestamp_ms, key=m.key,
                                                   headers=headers))


def floors_of(app: Any) -> Callable[[str, int], int | None]:
    """``floor_of(topic, partition)`` for :meth:`MessageJudge.process`: what the
    worker's consumer processed of that partition
    (``ProcessedOnlyConsumer.done_below``); None from another consumer.
    Safe as a floor because an agent acks a record only once its judgments
    are published (:class:`OrderedAcker`). A partition not in reading (moved
    away while a batch of it was judged) claims nothing: -1."""
    def floor_of(topic: str, partition: int) -> int | None:
        done_below = getattr(app.consumer, "done_below", None)
        if done_below is None:
            return None
        floor = done_below(TP(topic, partition))
        return -1 if floor is None else floor
    return floor_of


async def publish_records(topics: dict[str, Any], records: list[Outgoing]) -> None:
    """Send every record and wait for the broker's acknowledgements; retry on failure."""
    delay = 0.5
    while True:
        try:
            futures = []
            for r in records:
                futures.append(await topics[r.topic].send(
                    key=r.key, value=r.value, partition=r.partition,
                    headers=list(r.headers) or None,
                    timestamp=r.timestamp_ms / 1000 if r.timestamp_ms else None))
            await asyncio.gather(*futures)
            return
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # broker trouble: retrying beats acking unsent work
            log.error("publishing %d records failed (%s); retrying in %.1fs",
                      len(records), exc, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 30.0)


async def stop_acker(acker: OrderedAcker, runtime: WorkerRuntime) -> None:
    """Graceful stop of an agent's acker: finish what is in flight (briefly, and
    not during a judge outage), so a rolling restart does not redeliver it; then
    drop the rest unacked, and tell the consumer not to wait for it (Faust's
    stop would wait for every unacked message until killed). The evaluator
    stays open: the runtime closes it after every agent stopped
    (WorkerRuntime.close)."""
    await acker.drain(SHUTDOWN_GRACE_SECONDS, hopeless=runtime.judge_paused)
    await acker.settle(PUBLISH_GRACE_SECONDS)
    runtime.app.consumer.forget(event.message for event in acker.cancel())


#: Topic options of every record the worker reads or writes itself: bytes as they are.
RAW_TOPIC = {"key_type": bytes, "value_type": bytes, "key_serializer": "raw",
             "value_serializer": "raw"}


def output_topics(runtime: WorkerRuntime, judge: MessageJudge) -> dict[str, Any]:
    """Every topic ``judge`` may publish to (results, judgment events, DLQ, and
    review items and run spans when on), by name."""
    s = runtime.settings
    outputs = [s.kafka.results_topic, s.kafka.judgments_topic, s.kafka.dlq_topic]
    if judge.review is not None:
        outputs.append(s.review.review_topic)
    if judge.run_spans_topic is not None:  # spans of agent runs, to assemble
        outputs.append(judge.run_spans_topic)
    if judge.session_turns_topic is not None:  # turns of sessions, to assemble
        outputs.append(judge.session_turns_topic)
    return {name: runtime.app.topic(name, **RAW_TOPIC) for name in outputs}


def item_bundler(runtime: WorkerRuntime, judge: MessageJudge,
                 ) -> Callable[[list[Outgoing]], list[Outgoing]]:
    """What a batch's records go through before they are published: its spans
    of agent runs and turns of sessions bundled per partition of their internal
    topic (``assembly_bundles``, see :mod:`guardrail.stream.item_bundles`)."""
    kinds = {topic: headers[0] for topic, headers in (
        (judge.run_spans_topic, RUN_SPAN_HEADERS), (judge.session_turns_topic, TURN_HEADERS))
        if topic is not None}
    if not (kinds and runtime.settings.worker.assembly_bundles):
        return lambda records: records
    app = runtime.app

    def partition_of(topic: str, key: bytes) -> int | None:
        try:  # the producer is made when the app starts, not when agents are registered
            return app.producer.key_partition(topic, key).partition
        except (TypeError, AssertionError):  # no metadata for it yet: the items go alone
            return None

    return lambda records: bundle_items(records, kinds=kinds, partition_of=partition_of)


def register(runtime: WorkerRuntime) -> None:
    """Add the judging agent to the app."""
    app, s = runtime.app, runtime.settings
    source = app.topic(s.kafka.input_topic, **RAW_TOPIC)
    topics = output_topics(runtime, runtime.message_judge)

    floor_of = floors_of(app)

    async def handle(events: list[Any]) -> list[Outgoing]:
        return await runtime.message_judge.process([_raw(e) for e in events],
                                                   floor_of=floor_of)

    # Another agent's state that must be durable before a batch is acked
    # (the sampler's version counts, agents/sampling.py), if any.
    confirm = runtime.state.get("confirm_before_ack")

    bundled = item_bundler(runtime, runtime.message_judge)

    async def publish(records: list[Outgoing]) -> None:
        await publish_records(topics, bundled(records))
        if confirm is not None:
            await confirm()  # type: ignore[operator]

    # Acked by hand once published: the records Faust's stream skips are never committed.
    mark_processed = app.mark_processed_on(s.kafka.input_topic)

    gate = runtime.state.get("gate")
    if gate is not None:
        _gate_agent(runtime, source, publish, mark_processed, floor_of, gate)
        return

    @app.agent(source, name="guardrail.judge", concurrency=1)
    async def judge(stream: Any) -> None:
        acker = OrderedAcker(stream, MAX_INFLIGHT_BATCHES, publish,
                             on_config_error=runtime.stop_on_config_error,
                             mark_processed=mark_processed)
        try:
            async for events in stream.noack_take(s.worker.batch_size,
                                                  within=s.worker.batch_within):
                await acker.submit(list(events), asyncio.ensure_future(handle(list(events))))
        finally:
            await stop_acker(acker, runtime)
            log.info("judging agent stopped")

    runtime.state["judge_agent"] = judge


def _gate_agent(runtime: WorkerRuntime, source: Any, publish: Publish,
                mark_processed: Callable[[list[Any]], None], floor_of: Any, gate: Any) -> None:
    """The judging agent of gate mode: each record of a batch judged on its own and
    forwarded by the gate as soon as its turn comes (:mod:`.gate`); the batch's
    records published and its records acked, in order, once every one is placed."""
    app, s = runtime.app, runtime.settings

    async def judge_one(raw: RawMessage) -> tuple[Any, list[Outgoing]]:
        records, bundles = await runtime.message_judge.judge_records([raw], floor_of=floor_of)
        return records[0], records[0].outgoing + bundles

    async def through(passages: list[Any]) -> list[Outgoing]:
        outgoing = await asyncio.gather(*(gate.through(p, judge_one) for p in passages))
        return [out for records in outgoing for out in records]

    async def placed(events: list[Any]) -> None:  # published: ack once placed
        for event in events:
            # Read before the last rebalance: read again and placed in this one (its
            # ack does not count; its offset is not this assignment's to claim).
            if not from_earlier_generation(app, event):
                await gate.settled(_raw(event))
                gate.done(_raw(event))

    # Records, not batches, bound what is in flight (gate_max_waiting, as the gate's
    # admission does): a batch leaves after gate_batch_within, often with one record.
    in_flight = s.gate.gate_max_waiting

    @app.agent(source, name="guardrail.judge", concurrency=1)
    async def judge(stream: Any) -> None:
        acker = OrderedAcker(stream, in_flight, publish, max_records=in_flight,
                             on_config_error=runtime.stop_on_config_error,
                             mark_processed=mark_processed, before_ack=placed)
        try:
            async for events in stream.noack_take(s.worker.batch_size,
                                                  within=s.gate.gate_batch_within):
                # Records admitted are judged before the agent waits for room for
                # more: the ones of this batch could otherwise take all the room
                # (gate_max_waiting below batch_size) and wait for it forever.
                admitted: list[Any] = []
                passages: list[Any] = []
                for event in events:
                    if passages and gate.waiting >= s.gate.gate_max_waiting:
                        await acker.submit(admitted, asyncio.ensure_future(through(passages)))
                        admitted, passages = [], []
                    passage = await gate.admit(_raw(event))
                    if passage is None:  # read again, after the one missing before it
                        app.consumer.forget([event.message])
                        continue
                    passages.append(passage)
                    admitted.append(event)
                if admitted:
                    await acker.submit(admitted, asyncio.ensure_future(through(passages)))
        finally:
            await stop_acker(acker, runtime)
            gate.fence.add()  # what it left unacked is read again, by whichever worker
            log.info("judging agent stopped")

    runtime.state["judge_agent"] = judge
