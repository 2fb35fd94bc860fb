"""guardrail._tasks: the first failure stops the rest, nothing is left running."""

import asyncio

import pytest

from guardrail._tasks import gather_or_cancel


async def test_results_come_in_order():
    async def value(v):
        await asyncio.sleep(0)
        return v

    assert await gather_or_cancel(value(1), value(2), value(3)) == [1, 2, 3]


async def test_the_first_failure_cancels_the_others_and_is_raised():
    never = asyncio.Event()
    cancelled = []

    async def waits():
        try:
            await never.wait()
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    async def fails():
        raise KeyError("first")

    with pytest.raises(KeyError, match="first"):
        await gather_or_cancel(waits(), fails(), waits())
    assert cancelled == [True, True]
    assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task()] == []
