"""Concurrent single calls sent as a few calls of many items: a micro-batcher.

An endpoint that takes a list of inputs per request (``/v1/moderations``)
answers 32 inputs in about the time of one, but its callers come one message
at a time, each with its own timeout, retries and errors. :class:`MicroBatcher`
lets every caller keep its own call and coalesces what is queued::

    batcher = MicroBatcher(send_many, size=32, linger=0.005, slots=16)
    result = await batcher.submit(item)     # in each caller, concurrently
    await batcher.aclose()

``send_many(items)`` is given up to ``size`` items in the order they were
submitted and returns one outcome per item, in that order: a result, or an
exception that only that item's caller raises. When ``send_many`` itself
raises, every caller of that batch raises it (and retries as it would have
alone). A batch leaves once ``size`` items are queued, or ``linger`` seconds
after its first item, whichever comes first; at most ``slots`` batches are
in flight. A caller cancelled while queued is left out of its batch; one
cancelled while its batch is in flight is skipped when the outcomes come.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

from .._tasks import cancel_and_wait

__all__ = ["MicroBatcher"]

Item = TypeVar("Item")
Result = TypeVar("Result")


class MicroBatcher(Generic[Item, Result]):
    """Coalesce concurrent :meth:`submit` calls into ``send_many`` calls (module text)."""

    def __init__(self, send_many: Callable[[list[Item]], Awaitable[Sequence[Result | Exception]]],
                 *, size: int, linger: float, slots: int) -> None:
        if size < 1 or slots < 1 or linger < 0:
            raise ValueError(f"MicroBatcher needs size >= 1, slots >= 1 and linger >= 0 "
                             f"(got {size}, {slots}, {linger})")
        self._send_many, self._size, self._linger = send_many, size, linger
        self._slot_count = slots
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queued: list[tuple[Item, asyncio.Future[Result]]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._slots: asyncio.Semaphore | None = None
        self._in_flight: set[asyncio.Task[None]] = set()

    async def submit(self, item: Item) -> Result:
        """``item``'s own outcome from the batch it joins: its result, or its exception."""
        loop = self._bind()
        future: asyncio.Future[Result] = loop.create_future()
        self._queued.append((item, future))
        if len(self._queued) >= self._size:
            self._dispatch()
        elif self._timer is None:
            self._timer = loop.call_later(self._linger, self._dispatch)
        return await future

    async def aclose(self) -> None:
        """Cancel what is queued and in flight (its callers are cancelled too)."""
        if self._loop is None or self._loop is not _running_loop():
            return  # another loop's futures: that loop is gone or not ours to touch
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for _, future in self._queued:
            future.cancel()
        self._queued = []
        await cancel_and_wait(self._in_flight)

    def _bind(self) -> asyncio.AbstractEventLoop:
        """This loop's queue: futures, timer and semaphore belong to one event loop,
        and a process may run several in turn (``asyncio.run`` per command)."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._loop, self._queued, self._timer = loop, [], None
            self._slots = asyncio.Semaphore(self._slot_count)
            self._in_flight = set()
        return loop

    def _dispatch(self) -> None:
        """Send what is queued: a full batch, or the linger is over."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        batch = [(item, future) for item, future in self._queued if not future.done()]
        self._queued = []
        if batch:
            task = asyncio.get_running_loop().create_task(self._send(batch))
            self._in_flight.add(task)  # held: the loop keeps only weak references to tasks
            task.add_done_callback(self._in_flight.discard)

    async def _send(self, batch: list[tuple[Item, asyncio.Future[Result]]]) -> None:
        assert self._slots is not None
        async with self._slots:
            live = [(item, future) for item, future in batch if not future.done()]
            if not live:  # every caller gave up while the batch waited for a slot
                return
            try:
                outcomes: Sequence[Result | Exception] = await self._send_many(
                    [item for item, _ in live])
            except asyncio.CancelledError:
                for _, future in live:
                    future.cancel()
                raise
            except Exception as exc:  # the whole call failed: each caller gets it
                outcomes = [exc] * len(live)
        if len(outcomes) != len(live):  # a bug in send_many, never a guessed match
            outcomes = [RuntimeError(f"batch of {len(live)} items got {len(outcomes)} "
                                     "outcomes")] * len(live)
        for (_, future), outcome in zip(live, outcomes):
            if future.done():  # its caller was cancelled (a timeout) meanwhile
                continue
            if isinstance(outcome, BaseException):
                future.set_exception(outcome)
            else:
                future.set_result(outcome)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
