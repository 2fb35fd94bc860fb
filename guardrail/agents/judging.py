"""The judging agent: at-least-once, bounded, in order.

Why not ``concurrency > 1`` or ``take()``: in faust-streaming 0.15.3 concurrent
agents ack out of order and ``Consumer._new_offset`` can commit past an
unfinished message, and ``take()`` acks its batch in a ``finally`` even when
the body failed or was cancelled. So the agent reads batches with
``noack_take`` (nothing is acked for us), judges each batch concurrently, and
an ordered acker acks a batch only after

1. every result / judgment / DLQ record of it was acknowledged by the broker, and
2. every earlier batch was acked,

so the committed offset never passes an unfinished message. At most
``max_inflight_batches`` batches are in flight (backpressure): the agent stops
pulling while the judge is slow or paused.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import TYPE_CHECKING, Any

from ..envelope import Source
from ..processing import Outgoing, RawMessage

if TYPE_CHECKING:
    from .app import GuardrailApp

__all__ = ["register", "OrderedAcker", "MAX_INFLIGHT_BATCHES"]

log = logging.getLogger("guardrail.worker")

MAX_INFLIGHT_BATCHES = 4


def _raw(event: Any) -> RawMessage:
    m = event.message
    timestamp_ms = int(m.timestamp * 1000) if m.timestamp else None
    return RawMessage(value=m.value, source=Source(m.topic, m.partition, m.offset,
                                                   timestamp_ms=timestamp_ms, key=m.key))


class OrderedAcker:
    """Ack batches strictly in submission order, once each one's work is done."""

    def __init__(self, stream: Any, limit: int) -> None:
        self._stream = stream
        self._queue: asyncio.Queue[tuple[list[Any], asyncio.Task[None]]] = asyncio.Queue(limit)
        self._runner: asyncio.Task[None] | None = None

    async def submit(self, events: list[Any], work: asyncio.Task[None]) -> None:
        if self._runner is None:
            self._runner = asyncio.ensure_future(self._ack_in_order())
        await self._queue.put((events, work))  # blocks while `limit` batches are in flight

    async def _ack_in_order(self) -> None:
        while True:
            events, work = await self._queue.get()
            try:
                await work
            except asyncio.CancelledError:
                raise
            except BaseException:
                # Never ack unfinished work. The batch code is written not to
                # raise, so this is a bug: stop hard, let the supervisor restart
                # us, and the unacked messages are redelivered.
                log.critical("batch failed unexpectedly; exiting so it is redelivered",
                             exc_info=True)
                os._exit(70)
            for event in events:
                await self._stream.ack(event)

    def cancel(self) -> None:
        if self._runner is not None:
            self._runner.cancel()


async def _publish(runtime: GuardrailApp, topics: dict[str, Any], records: list[Outgoing]) -> None:
    """Send every record and wait for the broker's acknowledgements; retry on failure."""
    delay = 0.5
    while True:
        try:
            futures = []
            for r in records:
                futures.append(await topics[r.topic].send(
                    key=r.key, value=r.value,
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


def register(runtime: GuardrailApp) -> None:
    """Add the judging agent to the app."""
    app, s = runtime.app, runtime.settings
    raw = {"key_type": bytes, "value_type": bytes, "key_serializer": "raw",
           "value_serializer": "raw"}
    source = app.topic(s.input_topic, **raw)
    topics = {name: app.topic(name, **raw)
              for name in (s.results_topic, s.judgments_topic, s.dlq_topic)}

    async def handle(events: list[Any]) -> None:
        records = await runtime.message_judge.process([_raw(e) for e in events])
        await _publish(runtime, topics, records)

    @app.agent(source, name="guardrail.judge", concurrency=1)
    async def judge(stream: Any) -> None:
        acker = OrderedAcker(stream, MAX_INFLIGHT_BATCHES)
        try:
            async for events in stream.noack_take(s.batch_size, within=s.batch_within):
                await acker.submit(list(events), asyncio.ensure_future(handle(list(events))))
        finally:
            acker.cancel()

    runtime.state["judge_agent"] = judge
