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
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from faust.types import TP

from ..assembly.base import RUN_SPAN_HEADERS, TURN_HEADERS
from ..errors import JudgeConfigError
from ..stream.envelope import Source
from ..stream.item_bundles import bundle_items
from ..stream.processing import MessageJudge, Outgoing, RawMessage

if TYPE_CHECKING:
    from .runtime import WorkerRuntime

__all__ = ["register", "OrderedAcker", "MAX_INFLIGHT_BATCHES", "publish_records",
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


Publish = Callable[[list[Outgoing]], Awaitable[None]]


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


class OrderedAcker:
    """Publish each batch's records and ack its events strictly in submission order.

    Judging runs concurrently across batches; publishing in order keeps the
    judgment events of one input partition in offset order, which is what lets
    the window counter skip redelivered duplicates.
    """

    def __init__(self, stream: Any, limit: int, publish: Publish,
                 on_config_error: Callable[[JudgeConfigError], None] | None = None,
                 mark_processed: Callable[[list[Any]], None] | None = None,
                 before_ack: Callable[[list[Any]], Awaitable[None]] | None = None) -> None:
        self._stream = stream
        self._publish = publish
        #: Awaited after a batch is published, before its acks (the gate: forwarded).
        self._before_ack = before_ack
        #: Told each batch's messages before their acks (``mark_processed_on``).
        self._mark_processed = mark_processed
        self._on_config_error = on_config_error
        #: Set once a batch failed on the judge's configuration: nothing is acked after.
        self.failed: JudgeConfigError | None = None
        self._queue: asyncio.Queue[tuple[list[Any], asyncio.Task[list[Outgoing]]]] = (
            asyncio.Queue(limit))
        self._runner: asyncio.Task[None] | None = None
        self._work: set[asyncio.Task[list[Outgoing]]] = set()
        #: Events of the batches submitted and not yet acked, oldest first.
        self._unacked: list[list[Any]] = []
        self._publishing: asyncio.Future[None] | None = None

    async def submit(self, events: list[Any], work: asyncio.Task[list[Outgoing]]) -> None:
        if self.failed is not None:  # stopping: judge nothing more, ack nothing
            work.cancel()
            return
        if self._runner is None:
            self._runner = asyncio.ensure_future(self._publish_and_ack_in_order())
        self._work.add(work)
        work.add_done_callback(self._work.discard)
        # Watched as it finishes, not in ack order: a config error in a later
        # batch stops the worker without waiting for earlier (paused) ones.
        work.add_done_callback(self._check_config)
        self._unacked.append(events)
        await self._queue.put((events, work))  # blocks while `limit` batches are in flight

    def _check_config(self, work: asyncio.Task[list[Outgoing]]) -> None:
        if not work.cancelled() and isinstance(work.exception(), JudgeConfigError):
            self.stop_on_config_error(work.exception())  # type: ignore[arg-type]

    def stop_on_config_error(self, exc: JudgeConfigError) -> None:
        """Cancel every unacked batch (they are redelivered after the fix), then
        report ``exc`` once; later batches are cancelled as they come."""
        if self.failed is not None:
            return
        self.failed = exc
        self.cancel()
        if self._on_config_error is not None:
            self._on_config_error(exc)

    async def _publish_and_ack_in_order(self) -> None:
        while True:
            events, work = await self._queue.get()
            try:
                records = await work
            except asyncio.CancelledError:
                raise
            except JudgeConfigError as exc:
                self.stop_on_config_error(exc)
                return
            except BaseException:
                # Never ack unfinished work. The batch code is written not to
                # raise, so this is a bug: stop hard, let the supervisor restart
                # us, and the unacked messages are redelivered.
                log.critical("batch failed unexpectedly; exiting so it is redelivered",
                             exc_info=True)
                os._exit(70)
            # Shielded: a stop must not cut a batch between its publish and its
            # acks (its results would be published twice); see settle().
            self._publishing = asyncio.ensure_future(self._publish_batch(events, records))
            await asyncio.shield(self._publishing)

    async def _publish_batch(self, events: list[Any], records: list[Outgoing]) -> None:
        await self._publish(records)
        if self._before_ack is not None:
            await self._before_ack(events)
        if self._mark_processed is not None:
            self._mark_processed([event.message for event in events])
        for event in events:
            await self._stream.ack(event)
        self._unacked.remove(events)

    async def settle(self, timeout: float) -> None:
        """Let a batch that is being published finish publishing and acking
        (bounded): on a stop, cancelling it halfway would publish its results
        again after the restart."""
        publishing = self._publishing
        if publishing is not None and not publishing.done():
            await asyncio.wait([publishing], timeout=timeout)

    @property
    def pending(self) -> int:
        """Batches submitted and not yet acked."""
        return len(self._unacked)

    async def drain(self, timeout: float, *, hopeless: Callable[[], bool] = lambda: False,
                    ) -> None:
        """Let in-flight batches finish, publish and ack (graceful stop), for at
        most ``timeout`` seconds, and not at all while ``hopeless()`` (the judge
        is down: waiting would only hold the stop)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self.pending and self.failed is None and loop.time() < deadline \
                and not hopeless():
            await asyncio.sleep(0.05)

    def cancel(self) -> list[Any]:
        """On shutdown: stop unfinished work without acking it; those messages are
        redelivered (a judge outage must not hold a shutdown hostage). Returns
        the events left unacked."""
        if self._runner is not None:
            self._runner.cancel()
        if self._publishing is not None:
            self._publishing.cancel()
        for work in list(self._work):
            work.cancel()
        left, self._unacked = [e for events in self._unacked for e in events], []
        if left:
            log.info("stopping with %d messages unfinished; they are not acked and will be "
                     "redelivered (judged again, from the cache when cache_path is set)", len(left))
        return left


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
            await gate.settled(_raw(event))
            gate.done(_raw(event))

    # As many batches in flight as the gate lets records wait.
    limit = max(MAX_INFLIGHT_BATCHES, -(-s.gate.gate_max_waiting // s.worker.batch_size))

    @app.agent(source, name="guardrail.judge", concurrency=1)
    async def judge(stream: Any) -> None:
        acker = OrderedAcker(stream, limit, publish, on_config_error=runtime.stop_on_config_error,
                             mark_processed=mark_processed, before_ack=placed)
        try:
            async for events in stream.noack_take(s.worker.batch_size,
                                                  within=s.worker.batch_within):
                # Records admitted are judged before the agent waits for room for
                # more: the ones of this batch could otherwise take all the room
                # (gate_max_waiting below batch_size) and wait for it forever.
                admitted: list[Any] = []
                passages: list[Any] = []
                for event in events:
                    if passages and gate.waiting >= s.gate.gate_max_waiting:
                        await acker.submit(admitted, asyncio.ensure_future(through(passages)))
                        admitted, passages = [], []
                    passages.append(await gate.admit(_raw(event)))
                    admitted.append(event)
                await acker.submit(admitted, asyncio.ensure_future(through(passages)))
        finally:
            await stop_acker(acker, runtime)
            gate.fence.add()  # what it left unacked is read again, by whichever worker
            log.info("judging agent stopped")

    runtime.state["judge_agent"] = judge
