"""The ordered acker of the judging agents (:mod:`.judging`, :mod:`.assembly`): each
batch's records published and its events acked strictly in submission order, however
the batches' judging finishes; ``limit`` batches in flight at most (back-pressure),
and with ``max_records`` that many events at most.

    acker = OrderedAcker(stream, 4, publish)
    await acker.submit(events, asyncio.ensure_future(judge(events)))
    ...
    acker.cancel()          # on shutdown: the unacked events are redelivered
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any

from ..errors import JudgeConfigError
from ..stream.processing import Outgoing

__all__ = ["OrderedAcker", "Publish"]

log = logging.getLogger("guardrail.worker")

Publish = Callable[[list[Outgoing]], Awaitable[None]]


class OrderedAcker:
    """Publish each batch's records and ack its events strictly in submission order.

    Judging runs concurrently across batches; publishing in order keeps the
    judgment events of one input partition in offset order, which is what lets
    the window counter skip redelivered duplicates. Batches judged by the time
    the one before them is are published with it, in one call.
    """

    def __init__(self, stream: Any, limit: int, publish: Publish,
                 on_config_error: Callable[[JudgeConfigError], None] | None = None,
                 mark_processed: Callable[[list[Any]], None] | None = None,
                 before_ack: Callable[[list[Any]], Awaitable[None]] | None = None,
                 *, max_records: int | None = None) -> None:
        self._stream = stream
        #: Most events in flight, whatever the batches' sizes (None: ``limit`` batches
        #: only). Small batches then do not cap the calls in flight (gate mode).
        self._max_records = max_records
        self._records = 0
        self._acked = asyncio.Event()
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
        self._records += len(events)
        await self._queue.put((events, work))  # blocks while `limit` batches are in flight
        while (self._max_records is not None and self._records >= self._max_records
               and self.failed is None):
            self._acked.clear()
            await self._acked.wait()

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
        carried: tuple[list[Any], asyncio.Task[list[Outgoing]]] | None = None
        while True:
            events, work = carried or await self._queue.get()
            carried = None
            records = await self._outcome(work)
            if records is None:
                return
            batches, records = [events], list(records)
            # Later batches judged already go out with this one: one publish (one
            # round trip) for many small batches, as gate mode's are.
            while not self._queue.empty():
                carried = self._queue.get_nowait()
                later = carried[1]
                if not later.done() or later.cancelled() or later.exception() is not None:
                    break
                batches.append(carried[0])
                records += later.result()
                carried = None
            # Shielded: a stop must not cut a batch between its publish and its
            # acks (its results would be published twice); see settle().
            self._publishing = asyncio.ensure_future(self._publish_batches(batches, records))
            await asyncio.shield(self._publishing)

    async def _outcome(self, work: asyncio.Task[list[Outgoing]]) -> list[Outgoing] | None:
        """The batch's records once judged; None after a configuration error."""
        try:
            return await work
        except asyncio.CancelledError:
            raise
        except JudgeConfigError as exc:
            self.stop_on_config_error(exc)
            return None
        except BaseException:
            # Never ack unfinished work. The batch code is written not to
            # raise, so this is a bug: stop hard, let the supervisor restart
            # us, and the unacked messages are redelivered.
            log.critical("batch failed unexpectedly; exiting so it is redelivered",
                         exc_info=True)
            os._exit(70)

    async def _publish_batches(self, batches: list[list[Any]], records: list[Outgoing]) -> None:
        await self._publish(records)
        for events in batches:
            if self._before_ack is not None:
                await self._before_ack(events)
            if self._mark_processed is not None:
                self._mark_processed([event.message for event in events])
            for event in events:
                await self._stream.ack(event)
            self._unacked.remove(events)
            self._records -= len(events)
            self._acked.set()

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
        self._records = 0
        self._acked.set()  # a submit waiting for room returns: nothing more is judged
        if left:
            log.info("stopping with %d messages unfinished; they are not acked and will be "
                     "redelivered (judged again, from the cache when cache_path is set)", len(left))
        return left
