"""Concurrent work that stops as a whole when one part fails.

``asyncio.gather`` raises the first exception and leaves the other awaitables
running: after a configuration error they would go on calling the judge, and
their own errors would be logged later as "never retrieved". Here the rest is
cancelled and awaited before the first error is raised::

    results = await gather_or_cancel(*(evaluate(case) for case in cases))

    tasks = [asyncio.ensure_future(work(i)) for i in range(10)]
    try:
        ...
    finally:
        await cancel_and_wait(tasks)     # nothing left running or unretrieved
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable
from typing import TypeVar

__all__ = ["gather_or_cancel", "cancel_and_wait", "cancel_repeatedly"]

T = TypeVar("T")


async def cancel_and_wait(tasks: Iterable[asyncio.Future[object]]) -> None:
    """Cancel what has not finished and wait for it; every outcome is retrieved."""
    tasks = list(tasks)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def cancel_repeatedly(task: asyncio.Future[object], *, tries: int, wait: float) -> bool:
    """Cancel ``task`` and wait up to ``wait`` s for it to end, ``tries`` times:
    a call it is in can swallow one cancellation. True once it ended (its
    outcome retrieved); False if it still runs after the last try."""
    for _ in range(tries):
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=wait)
        if done:
            if not task.cancelled():
                task.exception()
            return True
    return False


async def gather_or_cancel(*awaitables: Awaitable[T]) -> list[T]:
    """Results in order, like ``asyncio.gather``; the first exception cancels the rest."""
    tasks = [asyncio.ensure_future(a) for a in awaitables]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        await cancel_and_wait(tasks)
        raise
